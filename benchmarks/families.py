"""Model families and big models: random folders of published layouts against transformers, CTranslate2 and Optimum; an opus-mt-sized Marian; models over 2 GB (each export stage's peak memory)."""

from __future__ import annotations

from pathlib import Path
from transformers import (AutoModelForSeq2SeqLM, BartConfig, GenerationConfig, M2M100Config, MarianConfig, MarianMTModel,
                          T5Config)
from typing import Any, Callable
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import torch
import transformers

from benchmarks import fixtures
from tfm_export.bench import harness
from tfm_export.bench.harness import machine_info
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.importers import load_any
from tfm_export.runtime import GREEDY, RuntimeOptions, open_export


# the published opus-mt-en-de layout (the `marian` scenario's model and the families' marian row)
OPUS_MT = dict(vocab_size=58101, decoder_vocab_size=58101, d_model=512, encoder_layers=6, decoder_layers=6,
               encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
               max_position_embeddings=512, pad_token_id=58100, eos_token_id=0, decoder_start_token_id=58100,
               scale_embedding=True, activation_function="swish")


# --- families -------------------------------------------------------------------------------------

FAMILIES_DOC = r"""ORT (tfm-export) vs transformers' generate vs CTranslate2 (vs Optimum) on Hugging Face families (random weights).

    .venv/bin/python -m benchmarks families --family bart [--scale full] [--batch 1,16] [--num-beams 4] \
        [--new-tokens 32] [--src-len 32] [--threads 2] [--repeat 5] [--work DIR] [--json OUT.json] \
        [--optimum-python /work/optimum-venv/bin/python] [--optimize]

Each family is built at its published checkpoint's sizes (FULL below; --scale tiny shrinks it for
smoke tests) with transformers' own config class and random, seeded weights, saved with
save_pretrained (no tokenizer: sources are random ids, special ids avoided), exported with the
library call `tfm-export FOLDER -o OUT` makes (validation included) and converted with CTranslate2's
TransformersConverter (float32; its vocabulary comes from a stand-in tokenizer that names the ids).
With --optimum-python, Hugging Face Optimum's ORTModelForSeq2SeqLM is a fourth backend: Optimum's
ONNX export needs transformers < 4.58, so it runs in a venv of its own (optimum-onnx[onnxruntime]),
as optimum_worker.py, one process per family that exports the same folder (Optimum's default: past key
values, decoder and decoder-with-past) and answers generate requests over a pipe, timed in there.
With --work the folders are kept and a rerun reuses them.

Every backend does the same work: `--new-tokens` new tokens per row (EOS banned until then: min ==
max new tokens), greedy and beam search (--num-beams), for each batch size, on `--threads` threads.
Per (family, decoding, batch) every backend runs once as a warm-up (its output lengths are checked),
then each repeat runs every backend in turn. The time per decoding step (one new token for each
row of the batch; at batch 1 the time per generated token) is (t(N tokens) - t(1 token)) / (N - 1),
so the encoder and set-up cancel, as in `marian`; the table shows its median over
the repeats, and the ORT/transformers, ORT/CTranslate2 and ORT/Optimum ratios of the medians (below 1:
ORT is faster).
"""

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
BACKENDS = ("transformers", "ort", "ctranslate2", "optimum")
WORKER = Path(__file__).resolve().parent / "optimum_worker.py"


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


class OptimumWorker:
    """optimum_worker.py under Optimum's venv's python: exports (or reuses) `cache`, then times generate."""

    def __init__(self, python: Path, hf_dir: Path, cache: Path, threads: int):
        # stderr is this process's: Optimum's export messages, and why the worker failed if it does
        self.process = subprocess.Popen([str(python), str(WORKER), "seq2seq", str(hf_dir), str(cache), "--threads", str(threads)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdin and self.process.stdout
        self.requests, self.replies = self.process.stdin, self.process.stdout
        self.export_s: float | None = self.reply()["export_s"]

    def reply(self) -> dict[str, Any]:
        line = self.replies.readline()
        if not line:
            raise RuntimeError(f"{WORKER.name} exited with status {self.process.wait()}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"{WORKER.name}: {reply['error']}")
        return reply

    def generate(self, src: list[list[int]], k: int, beams: int) -> dict[str, Any]:
        """{"seconds": generate's time in the worker, "ids": new ids per row, "lengths": ...}"""
        self.requests.write(json.dumps({"ids": src, "num_beams": beams, "new_tokens": k}) + "\n")
        self.requests.flush()
        return self.reply()

    def close(self) -> None:
        self.requests.close()  # end of input ends the worker
        self.process.wait(timeout=60)


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


def measure(backends: Backends, src: list[list[int]], beams: int, args: argparse.Namespace,
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


def ratio(backends: dict[str, Any], a: str, b: str) -> float | None:
    if a not in backends or b not in backends:
        return None
    return backends[a]["step_ms_p50"] / backends[b]["step_ms_p50"]


def table(rows: list[dict[str, Any]]) -> str:
    def cell(value: float | None, digits: int) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    lines = ["| family | decoding | batch | transformers ms/step | ORT ms/step | CT2 ms/step | Optimum ms/step "
             "| ORT/transformers | ORT/CT2 | ORT/Optimum |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        b = r["backends"]
        ms = [cell(b[name]["step_ms_p50"] if name in b else None, 2) for name in BACKENDS]
        ratios = [cell(r[f"ort_vs_{name}"], 2) for name in BACKENDS if name != "ort"]
        lines.append(f"| {r['family']} | {r['decoding']} | {r['batch']} | {' | '.join(ms)} | {' | '.join(ratios)} |")
    return "\n".join(lines)


def versions(optimum_python: Path | None) -> dict[str, str | None]:
    try:
        import ctranslate2

        ct2 = ctranslate2.__version__
    except ImportError:
        ct2 = None
    return {"transformers": transformers.__version__, "ctranslate2": ct2} | optimum_versions(optimum_python)


def optimum_versions(python: Path | None) -> dict[str, str | None]:
    """The packages of Optimum's venv (none without --optimum-python, or where it cannot say)."""
    packages = {"optimum": "optimum", "optimum_onnx": "optimum-onnx", "optimum_transformers": "transformers",
                "optimum_onnxruntime": "onnxruntime"}
    found: dict[str, str | None] = dict.fromkeys(packages)
    if python:
        script = ("import importlib.metadata as m, json, sys\n"
                  "print(json.dumps({k: m.version(p) for k, p in json.loads(sys.argv[1]).items()}))")
        try:
            found |= json.loads(subprocess.run([str(python), "-c", script, json.dumps(packages)], check=True,
                                               capture_output=True, text=True).stdout)
        except (OSError, subprocess.CalledProcessError, ValueError):
            pass
    return found


def families_main() -> None:
    parser = argparse.ArgumentParser(description=FAMILIES_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="bart",
                        help=f"one or more of {', '.join(FULL)}, comma-separated (default: bart)")
    parser.add_argument("--scale", choices=("full", "tiny"), default="full",
                        help="full: the published checkpoint's sizes; tiny: 2+2 layers, d_model 64, 512 ids "
                             "(smoke tests)")
    parser.add_argument("--batch", default="1,16", help="batch sizes, comma-separated (default: 1,16)")
    parser.add_argument("--num-beams", type=int, default=4,
                        help="beams of the beam-search runs; greedy always runs too (1: greedy only; default: 4)")
    parser.add_argument("--new-tokens", type=int, default=32, help="new tokens per row, EOS banned (default: 32)")
    parser.add_argument("--src-len", type=int, default=32, help="source tokens per row (default: 32)")
    parser.add_argument("--threads", type=int, default=2,
                        help="torch threads, ORT intra-op threads, CTranslate2 intra_threads (default: 2)")
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds of every backend (default: 5)")
    parser.add_argument("--seed", type=int, default=0, help="weights and source ids (default: 0)")
    parser.add_argument("--work", type=Path, default=None,
                        help="keep the HF, ONNX and CTranslate2 folders here (FAMILY-SCALE-seedN/) and reuse them "
                             "on reruns (default: a temporary folder, deleted at the end)")
    parser.add_argument("--no-validate", action="store_true", help="export without the ORT-vs-eager validation")
    parser.add_argument("--optimize", action="store_true",
                        help="the ORT rows run an export made with --optimize (ORT's fusions), kept in onnx-optimize/")
    parser.add_argument("--json", type=Path, default=None, help="also write the samples and medians to this file")
    parser.add_argument("--optimum-python", type=Path, default=None,
                        help="python of a venv with optimum-onnx[onnxruntime] (it needs transformers < 4.58), e.g. "
                             "/work/optimum-venv/bin/python: adds Optimum's ORTModelForSeq2SeqLM as a backend, run by "
                             "optimum_worker.py (default: none, Optimum skipped)")
    args = parser.parse_args()
    families = args.family.split(",")
    unknown = [f for f in families if f not in FULL]
    if unknown:
        parser.error(f"unknown family {', '.join(unknown)}; choose from {', '.join(FULL)}")
    if args.new_tokens < 2:
        parser.error("--new-tokens must be 2 or more (the per-step time is (t(N) - t(1)) / (N - 1))")
    batches = [int(b) for b in args.batch.split(",")]
    decodings = sorted({1, args.num_beams})
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    machine = {**machine_info(args.threads), **versions(args.optimum_python)}
    print(f"CPU {machine['cpu']}, {machine['cores']} cores, {args.threads} threads; torch {machine['torch']}, "
          f"onnxruntime {machine['onnxruntime']}, ctranslate2 {machine['ctranslate2']}, "
          f"transformers {machine['transformers']}", flush=True)
    if args.optimum_python:
        print(f"Optimum: optimum {machine['optimum']}, optimum-onnx {machine['optimum_onnx']}, transformers "
              f"{machine['optimum_transformers']}, onnxruntime {machine['optimum_onnxruntime']}", flush=True)
    with tempfile.TemporaryDirectory(prefix="tfm-families-") as tmp:
        work = args.work or Path(tmp)
        rows, made, skipped = [], {}, {}
        for family in families:
            backends = Backends(family, args, work / f"{family}-{args.scale}-seed{args.seed}")
            made[family], skipped[family] = backends.made, backends.skipped
            print(f"{family} ({args.scale}): " + ", ".join(
                f"{k} {'reused' if v is None else f'{v:.1f}'}" for k, v in backends.made.items()), flush=True)
            generator = torch.Generator().manual_seed(args.seed)
            for batch in batches:
                src = torch.randint(FIRST_ID, backends.vocab_size - 1, (batch, args.src_len),
                                    generator=generator).tolist()
                for beams in decodings:
                    result = measure(backends, src, beams, args)
                    rows.append({"family": family, "decoding": "greedy" if beams == 1 else f"beam {beams}",
                                 "num_beams": beams, "batch": batch, "backends": result,
                                 **{f"ort_vs_{name}": ratio(result, "ort", name) for name in BACKENDS
                                    if name != "ort"}})
                    print(json.dumps({k: rows[-1][k] for k in ("family", "decoding", "batch")}
                                     | {name: round(r["step_ms_p50"], 3) for name, r in result.items()}
                                     | {f"{name}_same_rows": r["same_as_transformers"] for name, r in result.items()
                                        if name != "transformers"}), flush=True)
            backends.close()
    print(f"\n{args.scale} sizes, random weights, src_len {args.src_len}, {args.new_tokens} new tokens (EOS banned), "
          f"median of {args.repeat}; ms/step = (t({args.new_tokens}) - t(1)) / {args.new_tokens - 1}\n")
    print(table(rows))
    if args.json:
        settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        args.json.write_text(json.dumps({"machine": machine, "settings": settings, "prepared_s": made,
                                         "skipped": skipped, "rows": rows}, indent=1) + "\n")
        print(f"wrote {args.json}")


# --- marian_vs_transformers -----------------------------------------------------------------------

MARIAN_DOC = r"""ORT (tfm-export) vs transformers' own generate on an opus-mt sized MarianMT (random weights).

    .venv/bin/python -m benchmarks marian [--threads 2] [--repeat 3] [--num-beams 4]

Both decode 64 new tokens (EOS ignored; greedy, or beam search with --num-beams) for batch 1, 32
source tokens, interleaved in one run; per-token time = (t(64 tokens) - t(1 token)) / 63 for both,
so encoder and set-up cancel.
"""


def marian_main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--num-beams", type=int, default=1, help="beam search with this many beams on both sides")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    hf = MarianMTModel(MarianConfig(**OPUS_MT)).eval()
    src = torch.randint(1, 58000, (1, 32))
    with tempfile.TemporaryDirectory() as tmp:
        hf.save_pretrained(Path(tmp) / "hf")
        export_s = harness.timed(lambda: export_model(load_any(Path(tmp) / "hf"), Path(tmp) / "onnx",
                                                      ExportOptions(validate=False)))
        ort_model = open_export(Path(tmp) / "onnx", "cpu", RuntimeOptions(intra_op_threads=args.threads))
        n = args.new_tokens

        def hf_run(k: int):
            return lambda: hf.generate(input_ids=src, num_beams=args.num_beams, do_sample=False, max_new_tokens=k,
                                       min_new_tokens=k)

        def ort_run(k: int):
            return lambda: ort_model.generate_ids(src.tolist(), max_new_tokens=k, stop_at_eos=False,
                                                  config=GREEDY.replace(num_beams=args.num_beams))

        sides = {name: (lambda fn=fn: (harness.timed(fn(n)) - harness.timed(fn(1))) / (n - 1))
                 for name, fn in (("transformers", hf_run), ("ort", ort_run))}
        runs = harness.interleave(sides, harness.Plan(rounds=args.repeat, warmup=1))
    per_token = {name: 1e3 * harness.median(v) for name, v in runs.items()}
    print(f"opus-mt sized Marian (random weights), batch 1, src_len 32, {n} new tokens, {args.num_beams} beam(s), "
          f"{args.threads} threads")
    print(f"export (no validation): {export_s:.1f} s")
    for name, ms in per_token.items():
        print(f"{name:>13}: {ms:.2f} ms/token")
    print(f"ORT/transformers per-token ratio: {per_token['ort'] / per_token['transformers']:.2f}")


# --- opus_mt_folder -------------------------------------------------------------------------------

OPUS_MT_FOLDER_DOC = r"""An opus-mt-sized Marian folder as Helsinki-NLP publishes it, with random (seeded) weights.

    .venv/bin/python -m benchmarks opus-mt-folder OUT [--vocab 15600] [--seed 0] [--tiny]

Built by the test fixtures (tests/marian_fixtures.py: marian_folder(..., **OPUS_MT)): 6 + 6 layers of
512 wide, 8 heads, ffn 2048, 512 positions, vocab.json padded to --vocab ids, real SentencePiece files,
and the published generation_config.json (num_beams 4, the pad id banned, max_length 512, renormalised
logits, forced EOS), so that an export of it decodes with beam 4 by default. --tiny: the fixtures' tiny
sizes instead (2 + 2 layers of 32 wide; the vocabulary unpadded unless --vocab is given), for smoke tests.

OUT is built in a temporary sibling folder and renamed into place; an existing OUT is never replaced.
"""

def opus_mt_folder_main() -> None:
    parser = argparse.ArgumentParser(description=OPUS_MT_FOLDER_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the folder to write (must not exist)")
    parser.add_argument("--vocab", type=int, default=None,
                        help="ids in vocab.json (default: 15600, opus-mt-en-de's size; --tiny: unpadded)")
    parser.add_argument("--seed", type=int, default=0, help="weights (default: 0)")
    parser.add_argument("--tiny", action="store_true", help="the fixtures' tiny sizes (smoke tests)")
    args = parser.parse_args()
    out = args.out
    if out.exists() or out.is_symlink():
        raise SystemExit(f"{out} exists; choose another name")
    out.parent.mkdir(parents=True, exist_ok=True)
    vocab = args.vocab if args.vocab is not None or args.tiny else 15_600
    sizes = {} if args.tiny else fixtures.marian().OPUS_MT
    partial = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    partial.chmod(0o777 & ~umask)  # mkdtemp's 0700 -> as a plain mkdir would make it
    try:
        fixtures.marian().marian_folder(partial, seed=args.seed, vocab_size=vocab, **sizes)
        if out.exists() or out.is_symlink():  # made while we built (a rename would replace an empty folder)
            raise SystemExit(f"{out} appeared while building; left as it is")
        os.rename(partial, out)
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)
    config = json.loads((out / "config.json").read_text())
    generation = json.loads((out / "generation_config.json").read_text())
    print(f"wrote {out}: d_model {config['d_model']}, {config['encoder_layers']}+{config['decoder_layers']} layers, "
          f"{config['encoder_attention_heads']} heads, ffn {config['encoder_ffn_dim']}, vocab {config['vocab_size']}; "
          f"generation_config num_beams {generation.get('num_beams')}, max_length {generation.get('max_length')}")


# --- big_models -----------------------------------------------------------------------------------

BIG_MODELS_DOC = r"""Models over 2 GB: peak memory of each export stage and variant, and int8 speed against CTranslate2 int8.

    .venv/bin/python -m benchmarks big-models [--layout nllb,nllb_1.3b] [--variants float32,int8,optimize,float16] \
        [--work DIR] [--json OUT.json] [--speed] [--speed-variants int8,int4,float32] [--threads 2] [--repeat 3]

Each layout is a random folder of the published checkpoint's sizes (`families`'s FULL: facebook/nllb-200-
distilled-600M is 2.46 GB of float32 weights, nllb-200-1.3B 5.5 GB), saved by transformers. Every variant is
exported in a process of its own, as `tfm-export FOLDER -o OUT [--quantize int8|int4 | --optimize | --dtype float16]`
does it (validation included); that process reads its peak resident memory per stage from the kernel
(`VmHWM`, reset at each stage's start through /proc/self/clear_refs), so the table says where the peak comes
from. The target (issue #40): every stage within 2.5x the float32 weights' size.

--speed adds, for the first layout, the time per decoding step of the kept exports named by --speed-variants
(default: int8) against CTranslate2 int8 (compute_type="int8" on its float32 conversion of the same folder) at
batch 1 and 16, greedy and beam 4, one interleaved run (`families`'s `measure`: (t(N tokens) - t(1)) / (N - 1),
medians). `--variants ""` measures exports kept in --work without exporting again.
"""

HERE = Path(__file__).resolve().parent

VARIANT_OPTIONS: dict[str, dict[str, Any]] = {
    "float32": {}, "int8": {"quantize": "int8"}, "int4": {"quantize": "int4"}, "optimize": {"optimize": True},
    "float16": {"dtype": "float16"}}
GB = 1e9


def peak_kb() -> int:
    return int(re.search(r"VmHWM:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)


def child(folder: Path, out: Path, variant: str) -> None:
    """One export, as the CLI makes it; prints {"stages": {name: {"s", "peak_gb"}}, ...} as JSON."""
    from tfm_export.export.exporter import ExportOptions, export_model
    from tfm_export.importers import load_any

    stages: dict[str, dict[str, float]] = {}
    started: dict[str, float] = {}

    def on_stage(name: str, seconds: float | None) -> None:
        if seconds is None:
            reset_peak()
            started[name] = time.perf_counter()
        else:
            stages[name] = {"s": round(seconds, 1), "peak_gb": round(peak_kb() * 1e3 / GB, 2)}

    on_stage("import", None)
    checkpoint = load_any(folder)
    on_stage("import", time.perf_counter() - started["import"])
    start = time.perf_counter()
    manifest = export_model(checkpoint, out, ExportOptions(**VARIANT_OPTIONS[variant]), on_stage=on_stage)
    data = sum(p.stat().st_size for p in out.iterdir() if ".onnx" in p.name)
    print(json.dumps({"stages": stages, "export_s": round(time.perf_counter() - start, 1), "onnx_gb": data / GB,
                      "external": sorted(f for g in manifest.graphs.values() for f in g.external_data),
                      "validation": {k: v for k, v in (manifest.validation or {}).items() if k != "graphs"}}))


def build_folder(layout: str, folder: Path) -> float:
    """A random HF folder of the layout (reused when there); its float32 weights' size in GB."""
    prepared(folder, lambda p: build(layout, "full", 0, p))
    return sum(p.stat().st_size for p in folder.glob("*.safetensors")) / GB


def run_variant(folder: Path, out: Path, variant: str) -> dict[str, Any]:
    if out.exists():
        import shutil

        shutil.rmtree(out)  # this script's own previous export
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "big-models", "--child", str(folder), str(out), variant],
                          capture_output=True, text=True, cwd=HERE.parent)
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def memory_table(rows: list[dict[str, Any]]) -> str:
    stages = ["import", "load", "export encoder", "export decoder", "transform", "validate", "quality"]
    lines = ["| layout | weights GB | variant | " + " | ".join(f"{s} peak GB" for s in stages)
             + " | max / weights | export s |", "|---|---:|---|" + "---:|" * (len(stages) + 2)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['layout']} | {r['weights_gb']:.2f} | {r['variant']} | failed: {r['error']} |")
            continue
        peaks = [r["stages"].get(s, {}).get("peak_gb") for s in stages]
        worst = max(p for p in peaks if p is not None)
        cells = ["-" if p is None else f"{p:.2f}" for p in peaks]
        lines.append(f"| {r['layout']} | {r['weights_gb']:.2f} | {r['variant']} | {' | '.join(cells)} | "
                     f"{worst / r['weights_gb']:.2f} | {r['export_s']:.0f} |")
    return "\n".join(lines)


def speed(folder: Path, exports: dict[str, Path], work: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """ORT's exports (name -> folder: "int8", "int4", ...) vs CTranslate2 int8, one interleaved run per (batch,
    decoding)."""
    import ctranslate2
    import torch
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(folder)
    tokenizer = IdTokenizer(cfg, UNK_ID["nllb"])
    prepared(work / "ct2", lambda p: convert_ct2(folder, p, tokenizer))
    translator = ctranslate2.Translator(str(work / "ct2"), device="cpu", compute_type="int8", inter_threads=1,
                                        intra_threads=args.threads)

    def ct2(src: list[list[int]], k: int, beams: int) -> list[list[int]]:
        results = translator.translate_batch([tokenizer.convert_ids_to_tokens(s) for s in src], beam_size=beams,
                                             max_decoding_length=k, min_decoding_length=k)
        return [[tokenizer.index[t] for t in r.hypotheses[0]] for r in results]

    class Backends:
        family = "nllb"
        runs = {**{f"ort {name}": ort_run(path, args.threads) for name, path in exports.items()}, "ctranslate2": ct2}

        def seconds(self, name: str, src: list[list[int]], k: int, beams: int) -> float:
            return harness.timed(lambda: self.runs[name](src, k, beams))

    rows, generator = [], torch.Generator().manual_seed(0)
    for batch in (1, 16):
        src = torch.randint(FIRST_ID, cfg.vocab_size - 1, (batch, 32), generator=generator).tolist()
        for beams in (1, 4):
            result = measure(Backends(), src, beams, args, reference="ctranslate2")
            ct2_ms = result["ctranslate2"]["step_ms_p50"]
            rows.append({"batch": batch, "decoding": "greedy" if beams == 1 else f"beam {beams}",
                         **{name: round(r["step_ms_p50"], 2) for name, r in result.items()},
                         **{f"{name} / ct2": round(r["step_ms_p50"] / ct2_ms, 2) for name, r in result.items()
                            if name != "ctranslate2"},
                         **{f"{name} same rows": r["same_as_ctranslate2"] for name, r in result.items()
                            if name != "ctranslate2"}})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def big_models_main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=BIG_MODELS_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layout", default="nllb,nllb_1.3b", help="`families` FULL layouts, comma-separated")
    parser.add_argument("--variants", default="float32,int8,optimize,float16",
                        help=f"comma-separated, of {', '.join(VARIANT_OPTIONS)}")
    parser.add_argument("--work", type=Path, default=None, help="keep the folders here and reuse them")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows to this file")
    parser.add_argument("--speed", action="store_true",
                        help="ms/step of --speed-variants against CTranslate2 int8 (first layout)")
    parser.add_argument("--speed-variants", default="int8",
                        help="the kept exports WORK/LAYOUT-VARIANT that --speed measures, comma-separated")
    parser.add_argument("--threads", type=int, default=2, help="ORT intra-op and CTranslate2 threads")
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds per backend for --speed")
    parser.add_argument("--new-tokens", type=int, default=32, help="new tokens per row for --speed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tfm-big-") as tmp:
        work, rows = args.work or Path(tmp), []
        for layout in args.layout.split(","):
            folder = work / f"{layout}-hf"
            weights = build_folder(layout, folder)
            print(f"{layout}: {weights:.2f} GB of float32 weights", flush=True)
            for variant in [v for v in args.variants.split(",") if v]:  # none: --speed on the kept exports
                row = {"layout": layout, "weights_gb": weights, "variant": variant,
                       **run_variant(folder, work / f"{layout}-{variant}", variant)}
                rows.append(row)
                print(json.dumps(row), flush=True)
        print(memory_table(rows))
        speed_rows = []
        if args.speed:
            first = args.layout.split(",")[0]
            exports = {v: work / f"{first}-{v}" for v in args.speed_variants.split(",")}
            speed_rows = speed(work / f"{first}-hf", exports, work, args)
        if args.json:
            args.json.write_text(json.dumps({"memory": rows, "speed": speed_rows}, indent=2) + "\n")
