r"""Hugging Face Optimum's ORTModelForSpeechSeq2Seq (Whisper) as a timing server for whisper_speed.py.

    /work/optimum-venv/bin/python benchmarks/optimum_whisper_worker.py HF_FOLDER CACHE_FOLDER [--threads 2]

Why a separate process, and how to build its venv: as optimum_worker.py (Optimum's ONNX export needs
transformers < 4.58; this project's .venv has transformers 5); nothing more is needed (the samples and the
features come as .npy files written by whisper_speed.py).

Optimum's export: what `ORTModelForSpeechSeq2Seq.from_pretrained(HF_FOLDER, export=True)` runs (its
_export: main_export with task automatic-speech-recognition-with-past, no validation, no post-processing:
encoder, decoder and decoder-with-past ONNX files, decoders not merged), with one addition: the dummy
input's frames (nb_max_frames, optimum-cli's --nb_max_frames; 3000 by default) set to the folder's
preprocessor_config window, since transformers' Whisper encoder rejects any other length and the trained
fixture's window is 4 s (400 frames); for a 30 s model this is Optimum's default export unchanged. It goes
to CACHE_FOLDER (written as CACHE_FOLDER.partial, then renamed) unless a previous run left it there.

transformers 4.57 reads the folders transformers 5 saves, except tokenizer_config.json's
extra_special_tokens, which transformers 5 writes as a list and 4.x reads as a dict
(name -> token): the export and the tokenizer read a copy of HF_FOLDER (weights linked) whose list is
written as additional_special_tokens, as 4.x wrote it.

It loads the export with ORTModelForSpeechSeq2Seq.from_pretrained (a Whisper model loads as Optimum's
ORTModelForWhisper, whose generate is transformers' WhisperGenerationMixin.generate) on the CPU with a
SessionOptions of --threads intra-op threads (torch, which runs generate around the sessions and the
features, gets as many), prints one JSON line {"ready": true, "export_s": seconds or null when reused},
then answers JSON lines on stdin, one per line on stdout:

    {"transcribe": "SAMPLES.npy", "language": "en"}   (float32 samples at 16 kHz)
    -> {"seconds": t, "text": "..."}
    {"steps": "FEATURES.npy", "new_tokens": n}         (float32 (batch, mels, window frames))
    -> {"seconds": t, "new_tokens": fewest new tokens of a row}

transcribe is whisper_speed.py's Eager.transcribe (WhisperFeatureExtractor's features, long-form past one
window, and the same generate call: greedy, timestamps, no condition on previous text, no fallback, no
thresholds), and t includes the features and the decoding of the text, as there; steps is Eager.steps
(GenerationMixin.generate, the plain loop, from [<|startoftranscript|>, <|notimestamps|>], min_new_tokens
= max_new_tokens = n). t is measured in here, after the .npy is read, so the file, the pipe and the JSON
are not timed. A failed request answers {"error": "..."}; end of stdin ends the process.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import torch
import transformers
from optimum.exporters.onnx import main_export
from optimum.onnxruntime import ORTModelForSpeechSeq2Seq
from transformers.generation.utils import GenerationMixin

from optimum_worker import serve  # the same JSON-lines loop (this folder is on sys.path: scripts run from it)

RATE = 16000
TASK = "automatic-speech-recognition-with-past"  # what ORTModelForSpeechSeq2Seq._export infers, use_cache on


def readable_copy(hf_dir: Path, out: Path) -> Path:
    """hf_dir as transformers 4.57 reads it: the json files copied (tokenizer_config's extra_special_tokens
    list written as additional_special_tokens), everything else linked."""
    out.mkdir(parents=True, exist_ok=True)
    for path in hf_dir.iterdir():
        if path.is_dir():
            continue
        if path.name == "tokenizer_config.json":
            config = json.loads(path.read_text())
            extra = config.get("extra_special_tokens")
            if isinstance(extra, list):
                del config["extra_special_tokens"]
                config["additional_special_tokens"] = extra
            (out / path.name).write_text(json.dumps(config, indent=2) + "\n")
        elif path.suffix == ".json":
            shutil.copyfile(path, out / path.name)
        else:
            (out / path.name).symlink_to(path.resolve())
    return out


def export(hf_dir: Path, cache: Path) -> float | None:
    """Optimum's export of hf_dir into cache (seconds), unless cache holds one already (None)."""
    if any(cache.glob("*.onnx")):
        return None
    partial = cache.with_name(cache.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # an interrupted run's, which this script wrote
    frames = json.loads((hf_dir / "preprocessor_config.json").read_text())["nb_max_frames"]
    start = time.perf_counter()
    # ORTModelForSpeechSeq2Seq._export's call, nb_max_frames added (see the docstring)
    main_export(model_name_or_path=str(hf_dir), output=partial, task=TASK, do_validation=False,
                no_post_process=True, library_name="transformers", nb_max_frames=frames)
    partial.rename(cache)  # fails rather than replace a folder this script did not write
    return time.perf_counter() - start


class Whisper:
    """The loaded export, its feature extractor and the tokenizer (HF_FOLDER's)."""

    def __init__(self, hf_dir: Path, cache: Path, threads: int):
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.log_severity_level = 3  # as tfm-export's RuntimeOptions: no C++ warnings on the terminal
        self.model = ORTModelForSpeechSeq2Seq.from_pretrained(
            cache, provider="CPUExecutionProvider", session_options=options,
            use_merged=False)  # as exported: decoder and decoder-with-past
        self.extractor = transformers.WhisperFeatureExtractor.from_pretrained(str(hf_dir))
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
        gen = self.model.generation_config
        self.sot, self.eos = gen.decoder_start_token_id, gen.eos_token_id
        self.no_timestamps = gen.no_timestamps_token_id

    def transcribe(self, request: dict[str, Any]) -> dict[str, Any]:
        samples = np.load(request["transcribe"])
        start = time.perf_counter()
        long = len(samples) > self.extractor.n_samples  # long-form: all frames, unpadded, and a mask
        inputs = self.extractor(samples, sampling_rate=RATE, return_tensors="pt", truncation=not long,
                                padding="longest" if long else "max_length", return_attention_mask=True)
        with torch.inference_mode():
            ids = self.model.generate(
                inputs.input_features, attention_mask=inputs.attention_mask, language=request["language"],
                task="transcribe", return_timestamps=True, condition_on_prev_tokens=False, num_beams=1,
                do_sample=False, compression_ratio_threshold=None, logprob_threshold=None, no_speech_threshold=None)
        text = self.tokenizer.batch_decode(ids, skip_special_tokens=True)[0]
        return {"seconds": time.perf_counter() - start, "text": text}

    def steps(self, request: dict[str, Any]) -> dict[str, Any]:
        features, n = torch.from_numpy(np.load(request["steps"])), request["new_tokens"]
        config = transformers.GenerationConfig(
            decoder_start_token_id=self.sot, eos_token_id=self.eos, pad_token_id=self.eos, bos_token_id=self.eos,
            max_new_tokens=n, min_new_tokens=n, do_sample=False, num_beams=1, use_cache=True)
        prompt = torch.tensor([[self.sot, self.no_timestamps]] * len(features))
        start = time.perf_counter()
        with torch.inference_mode():
            out = GenerationMixin.generate(self.model, input_features=features, decoder_input_ids=prompt,
                                           generation_config=config)
        return {"seconds": time.perf_counter() - start, "new_tokens": out.shape[1] - prompt.shape[1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("hf_dir", type=Path, help="a Whisper folder saved with save_pretrained")
    parser.add_argument("cache", type=Path, help="Optimum's export goes (or already is) here")
    parser.add_argument("--threads", type=int, default=2, help="ORT intra-op threads and torch threads")
    args = parser.parse_args()
    replies, sys.stdout = sys.stdout, sys.stderr  # stdout carries the replies only; anything printed goes to stderr
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="optimum_whisper_") as tmp:
        hf_dir = readable_copy(args.hf_dir, Path(tmp) / "hf")
        export_s = export(hf_dir, args.cache)
        model = Whisper(hf_dir, args.cache, args.threads)
        replies.write(json.dumps({"ready": True, "export_s": export_s}) + "\n")
        replies.flush()
        serve(lambda request: model.transcribe(request) if "transcribe" in request else model.steps(request),
              sys.stdin, replies)


if __name__ == "__main__":
    main()
