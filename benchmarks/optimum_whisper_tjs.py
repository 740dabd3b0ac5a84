r"""Optimum's ONNX export of a Whisper folder, laid out as transformers.js loads it (js_speech.py, #43).

    /work/optimum-venv/bin/python benchmarks/optimum_whisper_tjs.py HF_FOLDER OUT

Runs in the Optimum venv (optimum_whisper_worker.py says why and how to build it). The export is the one
optimum_whisper_worker.py makes (main_export, task automatic-speech-recognition-with-past, nb_max_frames set to
the folder's window, on a copy of the folder that transformers 4.57 reads) but with Optimum's post-processing
on, which merges decoder_model.onnx and decoder_with_past_model.onnx into decoder_model_merged.onnx (one graph
with a use_cache_branch input), the decoder transformers.js runs. OUT then holds what transformers.js'
`pipeline('automatic-speech-recognition', OUT, { dtype: 'fp32' })` reads with env.localModelPath:
config.json, generation_config.json, preprocessor_config.json and the tokenizer files, copied from
HF_FOLDER (the folder both sides run), and onnx/encoder_model.onnx, onnx/decoder_model_merged.onnx (float32).
Written as OUT.partial then renamed; an OUT already there is reused (nothing is overwritten). Prints one JSON
line: {"export_s": seconds, or null when reused}.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from optimum.exporters.onnx import main_export

from optimum_whisper_worker import TASK, readable_copy  # the same export's task and folder copy

GRAPHS = ("encoder_model.onnx", "decoder_model_merged.onnx")
# what transformers.js reads besides the graphs (the tokenizer: tokenizer.json and tokenizer_config.json)
FILES = ("config.json", "generation_config.json", "preprocessor_config.json", "tokenizer.json",
         "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt", "added_tokens.json",
         "normalizer.json")


def export(hf_dir: Path, out: Path) -> float | None:
    """The layout above in `out` (seconds), unless `out` holds it already (None)."""
    if all((out / "onnx" / name).exists() for name in GRAPHS):
        return None
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # an interrupted run's, which this script wrote
    frames = json.loads((hf_dir / "preprocessor_config.json").read_text())["nb_max_frames"]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="optimum_tjs_") as tmp:
        readable = readable_copy(hf_dir, Path(tmp) / "hf")
        main_export(model_name_or_path=str(readable), output=Path(tmp) / "onnx", task=TASK, do_validation=False,
                    library_name="transformers", nb_max_frames=frames)  # post-processing on: the merged decoder
        (partial / "onnx").mkdir(parents=True)
        for name in GRAPHS:
            shutil.move(Path(tmp) / "onnx" / name, partial / "onnx" / name)
    for name in FILES:
        if (hf_dir / name).exists():
            shutil.copyfile(hf_dir / name, partial / name)
    partial.rename(out)  # fails rather than replace a folder this script did not write
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("hf_dir", type=Path, help="a Whisper folder saved with save_pretrained")
    parser.add_argument("out", type=Path, help="the transformers.js folder goes (or already is) here")
    args = parser.parse_args()
    replies, sys.stdout = sys.stdout, sys.stderr  # stdout: the JSON line only
    replies.write(json.dumps({"export_s": export(args.hf_dir.resolve(), args.out)}) + "\n")


if __name__ == "__main__":
    main()
