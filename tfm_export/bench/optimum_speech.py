r"""The speech modes of optimum_worker.py, in Optimum's own virtual environment: `whisper`, Optimum's
ORTModelForSpeechSeq2Seq as a timing server (`whisper-speed`), and `tjs`, Optimum's export laid out as
transformers.js loads it (`js-speech`). Like the worker it imports neither tfm_export nor the benchmarks; the
worker imports it by its flat name, on use.
"""

from __future__ import annotations

from optimum.exporters.onnx import main_export
from optimum.onnxruntime import ORTModelForSpeechSeq2Seq
from optimum_protocol import serve, staged, timing_server_args
from pathlib import Path
from transformers.generation.utils import GenerationMixin
from typing import Any
import argparse
import json
import numpy as np
import onnxruntime
import shutil
import sys
import tempfile
import time
import torch
import transformers


WHISPER_DOC = r"""Hugging Face Optimum's ORTModelForSpeechSeq2Seq (Whisper) as a timing server for `whisper-speed`.

    /work/optimum-venv/bin/python tfm_export/bench/optimum_worker.py whisper HF_FOLDER CACHE_FOLDER [--threads 2]

Why a separate process, and how to build its venv: as optimum_worker.py's SEQ2SEQ_DOC (Optimum's ONNX export needs
transformers < 4.58; this project's .venv has transformers 5); nothing more is needed (the samples and the
features come as .npy files written by `whisper-speed`).

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

transcribe is `whisper-speed`'s Eager.transcribe (WhisperFeatureExtractor's features, long-form past one
window, and the same generate call: greedy, timestamps, no condition on previous text, no fallback, no
thresholds), and t includes the features and the decoding of the text, as there; steps is Eager.steps
(GenerationMixin.generate, the plain loop, from [<|startoftranscript|>, <|notimestamps|>], min_new_tokens
= max_new_tokens = n). t is measured in here, after the .npy is read, so the file, the pipe and the JSON
are not timed. A failed request answers {"error": "..."}; end of stdin ends the process.
"""

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


def whisper_export(hf_dir: Path, cache: Path) -> float | None:
    """Optimum's whisper_export of hf_dir into cache (seconds), unless cache holds one already (None)."""
    if any(cache.glob("*.onnx")):
        return None
    frames = json.loads((hf_dir / "preprocessor_config.json").read_text())["nb_max_frames"]
    start = time.perf_counter()
    # ORTModelForSpeechSeq2Seq._export's call, nb_max_frames added (see the docstring)
    staged(cache, lambda partial: main_export(model_name_or_path=str(hf_dir), output=partial, task=TASK,
                                              do_validation=False, no_post_process=True,
                                              library_name="transformers", nb_max_frames=frames))
    return time.perf_counter() - start


class Whisper:
    """The loaded whisper_export, its feature extractor and the tokenizer (HF_FOLDER's)."""

    def __init__(self, hf_dir: Path, cache: Path, threads: int):
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.log_severity_level = 3  # as tfm-whisper_export's RuntimeOptions: no C++ warnings on the terminal
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


def whisper_main() -> None:
    args, replies = timing_server_args(WHISPER_DOC, "a Whisper folder saved with save_pretrained",
                                       "Optimum's whisper_export goes (or already is) here")
    with tempfile.TemporaryDirectory(prefix="optimum_whisper_") as tmp:
        hf_dir = readable_copy(args.hf_dir, Path(tmp) / "hf")
        export_s = whisper_export(hf_dir, args.cache)
        model = Whisper(hf_dir, args.cache, args.threads)
        replies.write(json.dumps({"ready": True, "export_s": export_s}) + "\n")
        replies.flush()
        serve(lambda request: model.transcribe(request) if "transcribe" in request else model.steps(request),
              sys.stdin, replies)


TJS_DOC = r"""Optimum's ONNX export of a Whisper folder, laid out as transformers.js loads it (`js-speech`, #43).

    /work/optimum-venv/bin/python tfm_export/bench/optimum_worker.py tjs HF_FOLDER OUT

Runs in the Optimum venv (optimum_worker.py's SEQ2SEQ_DOC says why and how to build it). The export is the one
the whisper mode makes (main_export, task automatic-speech-recognition-with-past, nb_max_frames set to
the folder's window, on a copy of the folder that transformers 4.57 reads) but with Optimum's post-processing
on, which merges decoder_model.onnx and decoder_with_past_model.onnx into decoder_model_merged.onnx (one graph
with a use_cache_branch input), the decoder transformers.js runs. OUT then holds what transformers.js'
`pipeline('automatic-speech-recognition', OUT, { dtype: 'fp32' })` reads with env.localModelPath:
config.json, generation_config.json, preprocessor_config.json and the tokenizer files, copied from
HF_FOLDER (the folder both sides run), and onnx/encoder_model.onnx, onnx/decoder_model_merged.onnx (float32).
Written as OUT.partial then renamed; an OUT already there is reused (nothing is overwritten). Prints one JSON
line: {"export_s": seconds, or null when reused}.
"""

GRAPHS = ("encoder_model.onnx", "decoder_model_merged.onnx")
# what transformers.js reads besides the graphs (the tokenizer: tokenizer.json and tokenizer_config.json)
FILES = ("config.json", "generation_config.json", "preprocessor_config.json", "tokenizer.json",
         "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt", "added_tokens.json",
         "normalizer.json")


def tjs_export(hf_dir: Path, out: Path) -> float | None:
    """The layout above in `out` (seconds), unless `out` holds it already (None)."""
    if all((out / "onnx" / name).exists() for name in GRAPHS):
        return None
    frames = json.loads((hf_dir / "preprocessor_config.json").read_text())["nb_max_frames"]
    start = time.perf_counter()
    staged(out, lambda partial: _tjs_write(hf_dir, frames, partial))
    return time.perf_counter() - start


def _tjs_write(hf_dir: Path, frames: int, partial: Path) -> None:
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


def tjs_main() -> None:
    parser = argparse.ArgumentParser(description=TJS_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("hf_dir", type=Path, help="a Whisper folder saved with save_pretrained")
    parser.add_argument("out", type=Path, help="the transformers.js folder goes (or already is) here")
    args = parser.parse_args()
    replies, sys.stdout = sys.stdout, sys.stderr  # stdout: the JSON line only
    replies.write(json.dumps({"export_s": tjs_export(args.hf_dir.resolve(), args.out)}) + "\n")
