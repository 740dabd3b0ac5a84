"""The decode core: one loop (`loop.decode`) over a `DecoderState`, greedy, sampling and beam search as
strategies, transformers' logits processors. Torch-free.
"""
