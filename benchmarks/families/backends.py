"""The families' backends: transformers' generate, our export on ONNX Runtime, CTranslate2 (a conversion named
by a stand-in tokenizer) and Optimum (optimum_worker.py's seq2seq mode), each as run(sources, new tokens,
beams) -> new ids per row."""

from __future__ import annotations

from pathlib import Path
from transformers import AutoModelForSeq2SeqLM
from typing import Any, Callable
import argparse
import shutil
import torch

from benchmarks.families.layouts import UNK_ID, build
from benchmarks.optimum_client import OptimumProcess
from tfm_export.bench import harness
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.importers import load_any
from tfm_export.runtime import GREEDY, RuntimeOptions, open_export


class IdTokenizer:
    """What CTranslate2's loaders read from a tokenizer: token strings for ids (`t{id}`, the special
    ids by their names), so a folder without tokenizer files converts and ids map to tokens 1:1."""

    special_tokens_map: dict[str, Any] = {}

    def __init__(self, cfg: Any, unk_id: int):
        names = {"pad": "<pad>", "eos": "</s>", "bos": "<s>"}
        special = {getattr(cfg, f"{role}_token_id", None): name for role, name in names.items()
                   if getattr(cfg, f"{role}_token_id", None) is not None} | {unk_id: "<unk>"}
        self.tokens = [special.get(i, f"t{i}") for i in range(cfg.vocab_size)]
        self.index = {t: i for i, t in enumerate(self.tokens)}
        self.unk_token_id = unk_id
        for role, name in (*names.items(), ("unk", "<unk>")):
            setattr(self, f"{role}_token", name if name in self.index else None)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.index)

    def convert_ids_to_tokens(self, ids: int | list[int]) -> str | list[str]:
        return self.tokens[ids] if isinstance(ids, int) else [self.tokens[i] for i in ids]


def convert_ct2(folder: Path, out: Path, tokenizer: IdTokenizer) -> None:
    from ctranslate2.converters import TransformersConverter

    class Converter(TransformersConverter):
        def load_tokenizer(self, *args: Any, **kwargs: Any) -> IdTokenizer:
            return tokenizer

        def load_model(self, *args: Any, **kwargs: Any) -> Any:
            model = super().load_model(*args, **kwargs)
            # transformers 5's T5Config always says tied (scale_decoder_outputs tells whether the outputs
            # are scaled); CTranslate2 scales them when it reads tied.
            if hasattr(model.config, "scale_decoder_outputs"):
                model.config.tie_word_embeddings = model.config.scale_decoder_outputs
            return model

    Converter(str(folder)).convert(str(out), force=True)  # float32


def prepared(path: Path, make: Callable[[Path], None]) -> float | None:
    """Make `path` unless it is there (a previous run's); seconds taken, or None when reused."""
    if path.exists():
        return None
    partial = path.with_name(path.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # an interrupted run's
    seconds = harness.timed(lambda: make(partial))
    partial.rename(path)
    return seconds


class OptimumWorker(OptimumProcess):
    """optimum_worker.py's seq2seq mode under Optimum's venv's python: exports (or reuses) `cache`, then times
    generate."""

    def __init__(self, python: Path, hf_dir: Path, cache: Path, threads: int):
        super().__init__(python, "seq2seq", [str(hf_dir), str(cache)], threads)

    def generate(self, src: list[list[int]], k: int, beams: int) -> dict[str, Any]:
        """{"seconds": generate's time in the worker, "ids": new ids per row, "lengths": ...}"""
        return self.ask({"ids": src, "num_beams": beams, "new_tokens": k})


Run = Callable[[list[list[int]], int, int], list[list[int]]]  # (sources, new tokens, beams) -> new ids per row


def ort_run(onnx_dir: Path, threads: int) -> Run:
    """An export folder's runtime as a backend."""
    ort = open_export(onnx_dir, "cpu", RuntimeOptions(intra_op_threads=threads))

    def run(src: list[list[int]], k: int, beams: int) -> list[list[int]]:
        # Greedy: the fast path (argmax in the graph), EOS ignored rather than banned: the same k steps
        # of work as transformers'/CT2's banned EOS, without the logits going to the host for the ban.
        # Beam search bans EOS like them (min_new_tokens), so its hypotheses are comparable.
        config = GREEDY if beams == 1 else GREEDY.replace(num_beams=beams, min_new_tokens=k)
        return ort.generate_ids(src, max_new_tokens=k, stop_at_eos=False, config=config)

    return run


def ct2_run(ct2_dir: Path, tokenizer: IdTokenizer, threads: int) -> Run:
    """A CTranslate2 model folder (convert_ct2's) as a backend, float32 on the CPU."""
    import ctranslate2

    translator = ctranslate2.Translator(str(ct2_dir), device="cpu", compute_type="float32", inter_threads=1,
                                        intra_threads=threads)

    def run(src: list[list[int]], k: int, beams: int) -> list[list[int]]:
        results = translator.translate_batch([tokenizer.convert_ids_to_tokens(s) for s in src], beam_size=beams,
                                             max_decoding_length=k, min_decoding_length=k)
        return [[tokenizer.index[t] for t in r.hypotheses[0]] for r in results]

    return run


class Backends:
    """One family's backends: name -> run(sources, new_tokens, beams) -> new ids per row."""

    def __init__(self, family: str, args: argparse.Namespace, root: Path):
        self.family, self.runs, self.made, self.skipped = family, {}, {}, {}
        hf_dir, onnx_dir, ct2_dir = root / "hf", root / "onnx", root / "ct2"
        self.made["build_s"] = prepared(hf_dir, lambda p: build(family, args.scale, args.seed, p))
        if args.optimize:  # the ORT rows run the --optimize export (its own folder)
            onnx_dir = root / "onnx-optimize"
        self.made["export_s"] = prepared(onnx_dir, lambda p: export_model(
            load_any(hf_dir), p, ExportOptions(validate=not args.no_validate, optimize=args.optimize)))
        hf = AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
        self.vocab_size = hf.config.vocab_size

        def run_hf(src: list[list[int]], k: int, beams: int) -> list[list[int]]:
            ids = torch.tensor(src)
            out = hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids), num_beams=beams, do_sample=False,
                              max_new_tokens=k, min_new_tokens=k)
            return out[:, 1:].tolist()  # without the decoder start

        self.runs = {"transformers": run_hf, "ort": ort_run(onnx_dir, args.threads)}
        self.add_ctranslate2(hf.config, hf_dir, ct2_dir, args.threads)
        self.optimum: OptimumWorker | None = None
        if args.optimum_python:
            self.add_optimum(args.optimum_python, hf_dir, root / "optimum", args.threads)

    def skip(self, name: str, label: str, exc: Exception) -> None:
        self.skipped[name] = f"{type(exc).__name__}: {exc}"
        print(f"{self.family}: {label} skipped ({self.skipped[name]})", flush=True)

    def add_ctranslate2(self, config: Any, hf_dir: Path, ct2_dir: Path, threads: int) -> None:
        tokenizer = IdTokenizer(config, UNK_ID[self.family])
        try:
            self.made["ct2_convert_s"] = prepared(ct2_dir, lambda p: convert_ct2(hf_dir, p, tokenizer))
            self.runs["ctranslate2"] = ct2_run(ct2_dir, tokenizer, threads)
        except Exception as exc:  # not installed, or a layout its converter refuses
            self.skip("ctranslate2", "CTranslate2", exc)

    def add_optimum(self, python: Path, hf_dir: Path, cache: Path, threads: int) -> None:
        try:
            worker = OptimumWorker(python, hf_dir, cache, threads)
        except Exception as exc:  # no such python, or an export Optimum refuses (its stderr above says more)
            self.skip("optimum", "Optimum", exc)
            return
        self.optimum, self.made["optimum_export_s"] = worker, worker.export_s
        self.runs["optimum"] = lambda src, k, beams: worker.generate(src, k, beams)["ids"]

    def seconds(self, name: str, src: list[list[int]], k: int, beams: int) -> float:
        """One run's time: its wall time here; Optimum's as its worker measured it (pipe and JSON not timed)."""
        if name == "optimum" and self.optimum:
            return self.optimum.generate(src, k, beams)["seconds"]
        return harness.timed(lambda: self.runs[name](src, k, beams))

    def close(self) -> None:
        if self.optimum:
            self.optimum.close()

