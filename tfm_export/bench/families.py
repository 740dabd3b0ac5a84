"""The Hugging Face families as benchmark backends (`families`, `big-models`, `exports`, `speculative`): the
published checkpoints' layouts in transformers' own config classes (FULL, TINY for smoke runs) and random seeded
folders of them; transformers' generate, our export on ONNX Runtime, CTranslate2 (a conversion named by a
stand-in tokenizer) and Optimum (optimum_worker.py's seq2seq mode), each as run(sources, new tokens, beams) ->
new ids per row; and `measure`, the time per decoding step of several of them on one batch:
(t(N tokens) - t(1 token)) / (N - 1), so the encoder and set-up cancel, interleaved rounds and medians by the
harness."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any, Callable

import torch
from transformers import AutoModelForSeq2SeqLM, BartConfig, GenerationConfig, M2M100Config, MarianConfig, T5Config

from ..export.exporter import ExportOptions, export_model
from ..importers import load_any
from ..runtime import GREEDY, RuntimeOptions, open_export
from . import harness
from .optimum_client import OptimumProcess

log = logging.getLogger(__name__)


# --- layouts

# the published opus-mt-en-de layout (the `marian` scenario's model and the families' marian row)
OPUS_MT = dict(vocab_size=58101, decoder_vocab_size=58101, d_model=512, encoder_layers=6, decoder_layers=6,
               encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
               max_position_embeddings=512, pad_token_id=58100, eos_token_id=0, decoder_start_token_id=58100,
               scale_embedding=True, activation_function="swish")


# The published checkpoints' layouts: transformers' config class and what differs from its defaults.
FULL: dict[str, tuple[type, dict[str, Any]]] = {
    "bart": (BartConfig, dict(  # facebook/bart-base
        vocab_size=50265, d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
        decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072, max_position_embeddings=1024,
        forced_eos_token_id=None,
        normalize_before=False)),  # as bart-base's config.json; CTranslate2 reads it (transformers 5 dropped it)
    "t5": (T5Config, dict(  # t5-small
        vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_decoder_layers=6, num_heads=8,
        feed_forward_proj="relu", decoder_start_token_id=0)),
    "flan_t5": (T5Config, dict(  # google/flan-t5-base: T5 v1.1, gated GELU, untied lm_head
        vocab_size=32128, d_model=768, d_kv=64, d_ff=2048, num_layers=12, num_decoder_layers=12, num_heads=12,
        feed_forward_proj="gated-gelu", tie_word_embeddings=False, decoder_start_token_id=0)),
    "nllb": (M2M100Config, dict(  # facebook/nllb-200-distilled-600M
        vocab_size=256206, d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
        decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096, max_position_embeddings=1024,
        scale_embedding=True, activation_function="relu", decoder_start_token_id=2)),
    "nllb_1.3b": (M2M100Config, dict(  # facebook/nllb-200-1.3B: 5.5 GB of float32 weights
        vocab_size=256206, d_model=1024, encoder_layers=24, decoder_layers=24, encoder_attention_heads=16,
        decoder_attention_heads=16, encoder_ffn_dim=8192, decoder_ffn_dim=8192, max_position_embeddings=1024,
        scale_embedding=True, activation_function="relu", decoder_start_token_id=2)),
    "marian": (MarianConfig, OPUS_MT),  # Helsinki-NLP/opus-mt-*
}
# --scale tiny: these replace the sizes a family's layout sets (Marian: its pad, the last id, too).
TINY = dict(vocab_size=512, d_model=64, d_kv=16, d_ff=128, encoder_ffn_dim=128, decoder_ffn_dim=128, num_heads=4,
            encoder_attention_heads=4, decoder_attention_heads=4, num_layers=2, num_decoder_layers=2,
            encoder_layers=2, decoder_layers=2)
TINY_MARIAN = dict(decoder_vocab_size=512, pad_token_id=511, decoder_start_token_id=511)
UNK_ID = {"bart": 3, "t5": 2, "flan_t5": 2, "nllb": 3, "nllb_1.3b": 3, "marian": 1}  # the tokenizers' <unk>
FIRST_ID = 4  # source ids are drawn from FIRST_ID .. vocab - 2 (no special id of any family)
IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")


def family_config(family: str, scale: str) -> Any:
    cls, sizes = FULL[family]
    if scale == "tiny":
        sizes = {**sizes, **{k: v for k, v in TINY.items() if k in sizes}}
        sizes |= TINY_MARIAN if family == "marian" else {}
    return cls(**sizes)


def build(family: str, scale: str, seed: int, folder: Path) -> None:
    """Random weights of the family's layout, saved as transformers saves them (no tokenizer)."""
    cfg = family_config(family, scale)
    torch.manual_seed(seed)
    model = AutoModelForSeq2SeqLM.from_config(cfg).eval()
    # Only the ids: no forced EOS, no n-gram bans, no default beams (each run says how it decodes).
    ids = {k: getattr(cfg, k, None) for k in IDS}
    model.generation_config = GenerationConfig(**{k: v for k, v in ids.items() if v is not None})
    if family == "flan_t5":  # T5 v1.1: an lm_head of its own (transformers 5 ties every T5 it builds)
        model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.shared.weight) * cfg.d_model ** -0.5)
        model.all_tied_weights_keys.pop("lm_head.weight", None)
    model.save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())
    if "scale_decoder_outputs" in saved:  # T5: as published, tie_word_embeddings says whether outputs are scaled
        saved["tie_word_embeddings"] = saved.pop("scale_decoder_outputs")
        (folder / "config.json").write_text(json.dumps(saved, indent=2) + "\n")


# --- backends


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


prepared = harness.prepared  # its scenarios' readers (benchmarks.exports, .speculative) keep the name


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
        log.warning("%s: %s skipped (%s)", self.family, label, self.skipped[name])

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


# --- the time per step


def measure(backends: Any, src: list[list[int]], beams: int, args: argparse.Namespace,
            reference: str = "transformers") -> dict[str, Any]:
    """Warm-up (output lengths checked), then --repeat rounds of every backend in turn. `backends`: anything
    with Backends' `family`, `runs` and `seconds`; each backend's rows are compared with `reference`'s."""
    n, outputs = args.new_tokens, {}
    for name, run in backends.runs.items():
        for k in (1, n):
            outputs[name] = run(src, k, beams)
            lengths = {len(row) for row in outputs[name]}
            assert lengths == {k}, f"{backends.family} {name}: asked for {k} new tokens per row, got {lengths}"
    sides = {name: (lambda name=name: (backends.seconds(name, src, n, beams), backends.seconds(name, src, 1, beams)))
             for name in backends.runs}
    runs = harness.interleave(sides, harness.Plan(rounds=args.repeat, warmup=0))
    samples = {name: {"total_s": [t for t, _ in r], "first_s": [f for _, f in r]} for name, r in runs.items()}
    result: dict[str, Any] = {}
    for name, s in samples.items():
        step_ms = [1e3 * (t - f) / (n - 1) for t, f in zip(s["total_s"], s["first_s"])]
        result[name] = {"step_ms": step_ms, "step_ms_p50": harness.median(step_ms),
                        "total_ms_p50": 1e3 * harness.median(s["total_s"]),
                        "first_ms_p50": 1e3 * harness.median(s["first_s"]),
                        "ms_per_generated_token_p50": harness.median(step_ms) / len(src),
                        # rows equal to the reference's (random weights: near ties may differ at float precision)
                        f"same_as_{reference}": sum(a == b for a, b in zip(outputs[name], outputs[reference]))
                        / len(src)}
    return result
