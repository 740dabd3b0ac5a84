r"""Hugging Face Optimum's ORTModelForSeq2SeqLM as a timing server for families.py.

    /work/optimum-venv/bin/python benchmarks/optimum_worker.py HF_FOLDER CACHE_FOLDER [--threads 2]

Why a separate process: Optimum's ONNX export (optimum-onnx 0.1) requires transformers < 4.58, and
this project's .venv has transformers 5, so Optimum lives in a virtual environment of its own and
families.py talks to this script over a pipe. transformers 4.57 reads the folders transformers 5
saves (same weight names; families.py writes T5's tie_word_embeddings as 4.x means it).

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

generate is called as families.py calls transformers' (min_new_tokens = max_new_tokens = n: EOS
banned until then); t is its wall time in here, so the pipe and JSON are not timed. A failed request
answers {"error": "..."}; end of stdin ends the process.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, TextIO

import onnxruntime
import torch
import transformers
from optimum.onnxruntime import ORTModelForSeq2SeqLM


def export(hf_dir: Path, cache: Path) -> float | None:
    """Optimum's export of hf_dir into cache (seconds), unless cache holds one already (None)."""
    if any(cache.glob("*.onnx")):
        return None
    partial = cache.with_name(cache.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # an interrupted run's, which this script wrote
    start = time.perf_counter()
    ORTModelForSeq2SeqLM.from_pretrained(hf_dir, export=True).save_pretrained(partial)
    partial.rename(cache)  # fails rather than replace a folder this script did not write
    return time.perf_counter() - start


def load(cache: Path, threads: int) -> ORTModelForSeq2SeqLM:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3  # as tfm-export's RuntimeOptions: no C++ warnings on the terminal
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


def serve(handle: Callable[[dict[str, Any]], dict[str, Any]], requests: TextIO, replies: TextIO) -> None:
    """One JSON reply line per JSON request line (optimum_whisper_worker.py answers through it too)."""
    for line in requests:
        try:
            reply = handle(json.loads(line))
        except Exception as exc:  # answered, so the caller sees why; the next request may still work
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("hf_dir", type=Path, help="a folder saved with save_pretrained")
    parser.add_argument("cache", type=Path, help="Optimum's export goes (or already is) here")
    parser.add_argument("--threads", type=int, default=2, help="ORT intra-op threads and torch threads")
    args = parser.parse_args()
    replies, sys.stdout = sys.stdout, sys.stderr  # stdout carries the replies only; anything printed goes to stderr
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    export_s = export(args.hf_dir, args.cache)
    model = load(args.cache, args.threads)
    replies.write(json.dumps({"ready": True, "export_s": export_s}) + "\n")
    replies.flush()
    serve(lambda request: generate(model, request), sys.stdin, replies)


if __name__ == "__main__":
    main()
