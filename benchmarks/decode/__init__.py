"""Decode core and the cost of a step: checkouts A/B (`decode-core`, `step`), exports A/B (`exports`), a
decoder without a KV cache against one with it (`nocache`).

    python -m benchmarks decode-core --side before=/tmp/before --side after=. --models bundled,base --rounds 6

decode-core: every side is a tfm-export checkout (its own `tfm_export` on PYTHONPATH, in a fresh process
each round, run from a folder of its own so no other package shadows it); the exports are made once, by
this checkout, and read by every side (the runtimes compared on one graph), or with --own-exports by each
side's checkout (a change of the graphs measured too; the checkpoints are this checkout's). A process opens one
export and times each case (greedy / beam 4 at batch 1 and 8, 32 source and 32 new tokens, EOS ignored; and
the server's in-flight rows, every source a request of its own, greedy at 8 sources and beam 4 at 2, each row
to its EOS or 32 tokens): the best of --repeat decodes after a warm-up, in ms per new token (per step in flight).
The exports have 64 static slots (decoder_static/decoder_rows.onnx, the rows' graphs). The harness interleaves
the sides (A, B / B, A ...) and reports the medians over rounds and after / before.
"""
