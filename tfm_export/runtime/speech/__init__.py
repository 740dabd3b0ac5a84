"""Speech: Whisper's prompt and logits rules over the core strategies, long-form windows, word timestamps,
frames models, and `transcribe`. Torch-free.
"""
