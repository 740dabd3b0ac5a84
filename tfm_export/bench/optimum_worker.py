r"""Hugging Face Optimum as thin timing backends, run in Optimum's own virtual environment (it needs
transformers < 4.58; this project's .venv has transformers 5), so this file imports neither tfm_export
nor the benchmarks package (it lives in tfm_export/bench beside its client, optimum_client.py, and runs as a
script; its speech modes are optimum_speech.py's, what the modes share optimum_protocol.py's, both imported by
their flat names from this script's folder). One mode a process:

    /work/optimum-venv/bin/python tfm_export/bench/optimum_worker.py seq2seq HF_FOLDER CACHE [--threads 2]  # families
    /work/optimum-venv/bin/python tfm_export/bench/optimum_worker.py whisper HF_FOLDER CACHE [--threads 2]  # Whisper
    /work/optimum-venv/bin/python tfm_export/bench/optimum_worker.py tjs HF_FOLDER OUT  # js-speech

Each mode's protocol is in its docstring (SEQ2SEQ_DOC below; optimum_speech.py's WHISPER_DOC and TJS_DOC).
"""

from __future__ import annotations

from optimum.onnxruntime import ORTModelForSeq2SeqLM
from optimum_protocol import serve, staged, timing_server_args
from pathlib import Path
from typing import Any
import json
import onnxruntime
import sys
import time
import torch


SEQ2SEQ_DOC = r"""Hugging Face Optimum's ORTModelForSeq2SeqLM as a timing server for `families`.

    /work/optimum-venv/bin/python tfm_export/bench/optimum_worker.py seq2seq HF_FOLDER CACHE_FOLDER [--threads 2]

Why a separate process: Optimum's ONNX export (optimum-onnx 0.1) requires transformers < 4.58, and
this project's .venv has transformers 5, so Optimum lives in a virtual environment of its own and
`families` talks to this script over a pipe. transformers 4.57 reads the folders transformers 5
saves (same weight names; `families` writes T5's tie_word_embeddings as 4.x means it).

The venv (torch first: the local CPU wheel; an unpinned torch pulls GBs of CUDA packages; onnxruntime
pinned to the version of this project's .venv, so both sides run the same kernels):

    python3 -m venv /work/optimum-venv
    /work/optimum-venv/bin/pip install torch==2.13.0
    /work/optimum-venv/bin/pip install -c constraints.txt "optimum-onnx[onnxruntime]==0.1.0" "transformers==4.57.6"
    /work/optimum-venv/bin/pip install -c constraints.txt "onnxruntime==1.31.1"

On start it exports HF_FOLDER with Optimum's own export, as `ORTModelForSeq2SeqLM.from_pretrained(
..., export=True)` does by default (encoder, decoder and decoder-with-past ONNX files: past key values
on, decoders not merged), into CACHE_FOLDER, unless a previous run left the export there. It loads
that with a SessionOptions of --threads intra-op threads (torch, which runs generate's search around
the sessions, gets as many), prints one JSON line {"ready": true, "export_s": seconds or null when
reused}, then answers JSON lines on stdin, one per line on stdout:

    {"ids": [[...], ...], "num_beams": k, "new_tokens": n}
    -> {"seconds": t, "lengths": [...], "ids": [[...], ...]}   (new ids per row, without the start id)

generate is called as `families` calls transformers' (min_new_tokens = max_new_tokens = n: EOS
banned until then); t is its wall time in here, so the pipe and JSON are not timed. A failed request
answers {"error": "..."}; end of stdin ends the process.
"""


def seq2seq_export(hf_dir: Path, cache: Path) -> float | None:
    """Optimum's seq2seq_export of hf_dir into cache (seconds), unless cache holds one already (None)."""
    if any(cache.glob("*.onnx")):
        return None
    start = time.perf_counter()
    staged(cache, lambda partial: ORTModelForSeq2SeqLM.from_pretrained(hf_dir, seq2seq_export=True)
           .save_pretrained(partial))
    return time.perf_counter() - start


def seq2seq_load(cache: Path, threads: int) -> ORTModelForSeq2SeqLM:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3  # as tfm-seq2seq_export's RuntimeOptions: no C++ warnings on the terminal
    return ORTModelForSeq2SeqLM.from_pretrained(cache, provider="CPUExecutionProvider", session_options=options,
                                                use_merged=False)  # as exported: decoder and decoder-with-past


def generate(model: ORTModelForSeq2SeqLM, request: dict[str, Any]) -> dict[str, Any]:
    ids, k = torch.tensor(request["ids"]), request["new_tokens"]
    start = time.perf_counter()
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), num_beams=request["num_beams"],
                         do_sample=False, max_new_tokens=k, min_new_tokens=k)
    seconds = time.perf_counter() - start
    rows = out[:, 1:].tolist()  # without the decoder start
    return {"seconds": seconds, "lengths": [len(r) for r in rows], "ids": rows}


def seq2seq_main() -> None:
    args, replies = timing_server_args(SEQ2SEQ_DOC, "a folder saved with save_pretrained",
                                       "Optimum's seq2seq_export goes (or already is) here")
    export_s = seq2seq_export(args.hf_dir, args.cache)
    model = seq2seq_load(args.cache, args.threads)
    replies.write(json.dumps({"ready": True, "export_s": export_s}) + "\n")
    replies.flush()
    serve(lambda request: generate(model, request), sys.stdin, replies)


def speech_mode(name: str) -> Any:
    """optimum_speech.py's mode `name` (imported on use: the seq2seq mode needs none of it)."""
    import optimum_speech

    return getattr(optimum_speech, name)


MODES = {"seq2seq": seq2seq_main, "whisper": lambda: speech_mode("whisper_main")(),
         "tjs": lambda: speech_mode("tjs_main")()}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in MODES:
        raise SystemExit(f"usage: optimum_worker.py {{{','.join(MODES)}}} ...")
    mode = sys.argv.pop(1)
    MODES[mode]()
