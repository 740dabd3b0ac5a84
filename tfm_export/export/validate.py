"""Validation: ONNX Runtime (CPU) against the eager model, per output, at shapes unlike the export's.

All failures are gathered first; then one ValidationError carries the whole per-output report.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import torch

from ..config import TransformerConfig
from ..errors import ValidationError, shorten
from .decoding_checks import checking_options, compare_default, compare_greedy, decoding_sources, default_decoding
from .validation_report import failure_message
from .graphs import AlignmentGraph, DecoderGraph, EncoderGraph, RowsDecoderGraph, StaticDecoderGraph
from .specs import ALIGNMENT_NAME
from ..manifest import Manifest, load_manifest
from ..runtime.states.static import static_slots
from ..model.transformer import Transformer

log = logging.getLogger(__name__)

# None: the model's max_len, up to the cap below. A features source has one fixed length (config.src_len):
# there, only the batches differ.
BATCHES_AND_SRC_LENS = ((1, 1), (2, 7), (5, None))
# Long position tables (nn.Transformer's default is 5000) would make the full-length case cost
# gigabytes of attention scores; beyond this the graph's shapes are no different anyway.
MAX_VALIDATED_SRC_LEN = 512
PAST_AND_TGT_LENS = ((0, 1), (0, 4), (1, 1), (1, 4), (23, 1), (23, 4))
# A decoder that takes the encoder's outputs per source (Manifest.cross_per_source) is also checked with
# several rows per source, as beam search and sampling run it: (past_len, tgt_len, rows per source).
GROUPED_CASES = ((1, 1, 4), (23, 4, 2))
# The graphs over a fixed number of cache slots, checked on the same static-cache inputs.
SLOT_GRAPH_MODULES = {"decoder_static": StaticDecoderGraph, "decoder_rows": RowsDecoderGraph}
# Graphs whose present.* is specified up to slot cache_len[b] only (specs.rows_decoder_spec).
FILLED_SLOTS_ONLY = ("decoder_rows",)


def validate_export(folder: str | Path, model: Transformer, atol: float = 1e-4, seed: int = 0,
                    max_new_tokens: int = 32, mode: str | None = None, device: str | None = None,
                    manifest: Manifest | None = None) -> dict[str, Any]:
    """Compare the graphs in `folder` with `model`; returns the report or raises ValidationError.

    `mode` (default: from the manifest's variant, see variants.validation_settings): `parity` fails
    on any output beyond `atol` or unequal greedy tokens; `tolerance` (float16) fails on outputs
    beyond atol + rtol * max|eager| and reports greedy agreement; `agreement` (int8) fails on nothing.
    `manifest`: the folder's, when the caller has it in hand (the exporter, before writing it).
    """
    from .variants import validation_settings

    folder = Path(folder)
    manifest = manifest or load_manifest(folder)
    check_same_model(manifest.config, model.config, folder)
    settings = validation_settings(manifest.variant, atol)
    mode, atol, rtol = mode or settings["mode"], settings["atol"], settings["rtol"]
    gen = torch.Generator().manual_seed(seed)
    tol = (atol, rtol)
    device, stats = _compare_graphs(folder, manifest, model, device or settings["device"], gen, seed, tol)
    report = {"atol": atol, "rtol": rtol, "device": device, "mode": mode,
              "outputs": {k: s.to_dict() for k, s in stats.items()},
              **_compare_decoding(folder, manifest, model, gen, max_new_tokens, device, tol)}
    failed = [k for k, s in stats.items() if not s.ok]
    greedy, default = report["greedy"], report.get("default") or {"equal": True}
    tokens_ok = greedy["equal"] and not greedy.get("static_cache_mismatched_rows") and default["equal"]
    if (mode != "agreement" and failed) or (mode == "parity" and not tokens_ok):
        raise ValidationError(failure_message(stats, failed, greedy, report.get("default")), report)
    log.info("validation (%s, %s) passed: %d outputs, greedy tokens %s on %d sources", mode, device, len(stats),
             "equal" if greedy["equal"] else f"{greedy['token_agreement']:.1%} equal", greedy["sources"])
    return report


def _compare_decoding(folder: Path, manifest: Manifest, model: Transformer, gen: torch.Generator,
                      max_new_tokens: int, device: str, tol: tuple[float, float]) -> dict[str, Any]:
    """Greedy tokens, and the export's default decoding when it is not greedy, against eager."""
    sources = decoding_sources(manifest, folder, model.config, gen)
    steps = min(max_new_tokens, model.config.max_len)
    report = {"greedy": compare_greedy(folder, manifest, model, sources, steps, device)}
    config = default_decoding(manifest, steps)
    if config is not None:
        report["default"] = compare_default(folder, manifest, model, sources, config, device, tol)
    return report


class _Stat:
    """Worst-case differences of one output over every validated shape."""

    def __init__(self, graph: str):
        self.graph, self.max_abs, self.max_rel, self.shape, self.mismatches, self.ok = graph, 0.0, 0.0, None, 0, True

    def update(self, got: np.ndarray, ref: np.ndarray, tol: tuple[float, float], ref_logits: np.ndarray | None
               ) -> None:
        atol, rtol = tol
        if got.shape != ref.shape:
            self.ok, self.shape = False, f"{list(got.shape)} != {list(ref.shape)}"
            return
        if ref.dtype.kind in "fc":
            diff = np.abs(got.astype(np.float64) - ref)
            abs_, rel = float(diff.max(initial=0.0)), float((diff / (np.abs(ref) + atol)).max(initial=0.0))
            if abs_ >= self.max_abs:
                self.shape = list(ref.shape)
            self.max_abs, self.max_rel = max(self.max_abs, abs_), max(self.max_rel, rel)
            # rtol is relative to the output's largest magnitude: float16 rounding grows with the
            # scale of the whole tensor (dot products), not with each element's own size.
            self.ok = self.ok and abs_ <= atol + rtol * float(np.abs(ref).max(initial=0.0))
            return
        self.shape = self.shape or list(ref.shape)
        bad = got != ref
        if ref_logits is not None and bad.any():  # an argmax may flip only on a near-tie
            top2 = np.sort(ref_logits, axis=-1)[:, -2:]
            bad &= (top2[:, 1] - top2[:, 0]) > 2 * atol
        if bad.any():
            self.mismatches += int(bad.sum())
            self.ok, self.shape = False, list(ref.shape)

    def to_dict(self) -> dict[str, Any]:
        return {"graph": self.graph, "max_abs": self.max_abs, "max_rel": self.max_rel,
                "worst_shape": self.shape, "mismatches": self.mismatches, "ok": self.ok}


def recorded_checkpoint(folder: str | Path, manifest: Manifest) -> Path:
    """The checkpoint an export was made from, when it still sits where the manifest says (beside the folder)."""
    name = manifest.source.get("checkpoint")
    candidate = Path(folder).resolve().parent / name if name else None
    if candidate is None or not candidate.is_file():
        raise ValidationError(f"cannot find the checkpoint {folder} was exported from; pass {{model}}",
                              options={"model": None})
    return candidate


def check_same_model(exported: TransformerConfig, given: TransformerConfig, folder: Path) -> None:
    """Refuse to compare an export with the weights of another model (sizes, vocabularies, ids)."""
    ours, theirs = exported.to_dict(), given.to_dict()
    differ = [f"{k} {theirs[k]} != {ours[k]}" for k in ours if k != "dropout" and ours[k] != theirs.get(k)]
    if differ:
        raise ValidationError(f"the checkpoint does not match the export in {folder}: {shorten(differ, 4)} "
                              f"(checkpoint != export); pass the checkpoint this folder was exported from")


def _compare_graphs(folder: Path, manifest: Manifest, model: Transformer, device: str, gen: torch.Generator,
                    seed: int, tol: tuple[float, float]) -> tuple[str, dict[str, "_Stat"]]:
    """Every graph's outputs against eager on the shapes grid; (the device used, the stats).

    One graph's session at a time, each closed before the next opens and before the decoding checks open
    the export's own: a model of several GB is then held by ORT about once. Every pass draws the same
    inputs (the generator restarts; a graph's inputs are eager outputs, never another graph's)."""
    stats: dict[str, _Stat] = {}
    start = gen.get_state()
    for name in manifest.graphs:
        gen.set_state(start)
        device, sessions = _sessions(folder, manifest, device, only=name)
        _walk_grid(stats, sessions, manifest, model, gen, seed, tol)
        del sessions
    return device, stats


def _walk_grid(stats: dict[str, "_Stat"], sessions: dict[str, ort.InferenceSession], manifest: Manifest,
               model: Transformer, gen: torch.Generator, seed: int, tol: tuple[float, float]) -> None:
    """The shapes grid: each graph in `sessions` against eager; the others' outputs are computed eagerly."""
    def check(graph: str, module: torch.nn.Module, args: tuple[torch.Tensor, ...], filled=None):
        if graph not in sessions:
            with torch.no_grad():
                return module(*args)
        return _compare(stats, graph, sessions[graph], module, args, tol, filled)

    slots = static_slots(manifest) or 0  # the static decoder's cache slots (0: not exported)
    for batch, src_len in BATCHES_AND_SRC_LENS:
        src = _random_source(model, batch, src_len or min(model.config.max_len, MAX_VALIDATED_SRC_LEN), gen)
        cross = check("encoder", EncoderGraph(model), (src,))
        for past_len, tgt_len in PAST_AND_TGT_LENS:
            if past_len + tgt_len > model.config.max_len:
                continue
            args = _decoder_inputs(model, cross, past_len, tgt_len, gen)
            check("decoder", DecoderGraph(model), args)
            if past_len == 0 and ALIGNMENT_NAME in sessions:  # whole sequences: its ids and the encoder's outputs
                n = 2 * model.config.n_decoder_layers
                check(ALIGNMENT_NAME, AlignmentGraph(model), (args[0], args[1], *args[2 + n:]))
            if "decoder_static" in manifest.graphs and tgt_len == 1 and past_len < slots:
                args = _static_inputs(model, args, gen, slots)  # drawn in every pass, checked in its own
                for name in [n for n in SLOT_GRAPH_MODULES if n in sessions]:  # the same inputs
                    filled = args[2] if name in FILLED_SLOTS_ONLY else None  # cache_len
                    check(name, SLOT_GRAPH_MODULES[name](model), args, filled)
        if manifest.cross_per_source and "decoder" in sessions:
            _compare_grouped(stats, sessions["decoder"], model, cross, seed, tol)


def _sessions(folder: Path, manifest: Manifest, device: str, only: str | None = None
              ) -> tuple[str, dict[str, ort.InferenceSession]]:
    """Sessions for every graph (or `only` that one) on `device` (auto: CUDA when usable, else CPU);
    returns the device used."""
    from ..runtime.device import RuntimeOptions, open_sessions

    paths = {name: folder / g.file for name, g in manifest.graphs.items() if only in (None, name)}
    # No spinning: validation runs PyTorch and ORT in turn, and spinning ORT threads would take its cores.
    options = checking_options(manifest, RuntimeOptions(spin_wait=False))
    chosen, sessions = open_sessions(paths, device, options)
    return chosen.name, sessions


@torch.no_grad()
def _compare(stats: dict[str, _Stat], graph: str, session: ort.InferenceSession, module: torch.nn.Module,
             args: tuple[torch.Tensor, ...], tol: tuple[float, float], filled: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, ...]:
    """Run both sides on `args`, fold the differences into `stats`; returns the eager outputs.

    `filled` (batch,): compare each present.* row up to that slot (the rest is unspecified)."""
    ref = module(*args)
    names = [o.name for o in session.get_outputs()]
    # float16 graphs take float16 caches: the eager float32 values, rounded.
    feeds = {i.name: a.numpy().astype(_NUMPY_TYPES.get(i.type, a.numpy().dtype))
             for i, a in zip(session.get_inputs(), args)}
    got = session.run(names, feeds)
    logits = ref[0].numpy() if graph.startswith("decoder") else None
    prefix = "" if graph in ("encoder", "decoder") else f"{graph}:"  # extra graphs' outputs share names
    for name, g, r in zip(names, got, ref):
        g, r = np.asarray(g), r.numpy()
        if filled is not None and name.startswith("present."):  # (batch, heads, slots, head_dim)
            beyond = (np.arange(g.shape[2]) > filled.numpy()[:, None])[:, None, :, None]  # (batch, 1, slots, 1)
            g, r = np.where(beyond, 0, g).astype(g.dtype), np.where(beyond, 0, r).astype(r.dtype)
        stat = stats.setdefault(prefix + name, _Stat(graph))
        stat.update(g, r, tol, logits if name == "next_ids" else None)
    return ref


_NUMPY_TYPES = {"tensor(float16)": np.float16, "tensor(float)": np.float32}


def _static_inputs(model: Transformer, args: tuple[torch.Tensor, ...], gen: torch.Generator, slots: int
                   ) -> tuple[torch.Tensor, ...]:
    """The decoder's step inputs in the static-cache form: past padded to `slots` with noise slots.

    Rows are at different steps: row b has filled past_len - b slots (wrapping at 0), so its later
    past slots are unfilled noise the graph must not see.
    """
    n = 2 * model.config.n_decoder_layers
    ids, src_mask, past, cross = args[0], args[1], args[2:2 + n], args[2 + n:]
    batch, past_len = ids.shape[0], past[0].shape[2]
    caches = [torch.cat([p, 100 * torch.randn(*p.shape[:2], slots - past_len, p.shape[3],
                                              generator=gen)], dim=2) for p in past]
    # Not drawn from `gen`: another draw would change the greedy comparison's random sources.
    cache_len = past_len - torch.arange(batch) % (past_len + 1)  # (batch,)
    return (ids, src_mask, cache_len, *caches, *cross)


def _compare_grouped(stats: dict[str, _Stat], session: ort.InferenceSession, model: Transformer,
                     cross: tuple[torch.Tensor, ...], seed: int, tol: tuple[float, float]) -> None:
    """The decoder with GROUPED_CASES' rows per source, on the encoder outputs `cross` of the sources."""
    gen = torch.Generator().manual_seed(seed + 1)  # not `gen`: its draws make the greedy check's sources
    for past_len, tgt_len, group in GROUPED_CASES:
        if past_len + tgt_len <= model.config.max_len:
            args = _decoder_inputs(model, cross, past_len, tgt_len, gen, group)
            _compare(stats, "decoder", session, DecoderGraph(model), args, tol)


def _random_source(model: Transformer, batch: int, src_len: int, gen: torch.Generator) -> torch.Tensor:
    """The encoder's input of config.source: token ids (`_random_ids`) or features (`_random_features`)."""
    return RANDOM_SOURCES[model.config.source](model, batch, src_len, gen)


def _random_features(model: Transformer, batch: int, src_len: int, gen: torch.Generator) -> torch.Tensor:
    """Random features (batch, n_mels, n_frames): the frames are fixed by the model, `src_len` is unused.
    Standard normal: about the scale of Whisper's log-mel features ((log10 + 4) / 4, over 8 log10 units)."""
    cfg = model.config
    return torch.randn((batch, cfg.n_mels, cfg.n_frames), generator=gen)


def _random_ids(model: Transformer, batch: int, src_len: int, gen: torch.Generator) -> torch.Tensor:
    """Random ids without pads, then right-padding on every other row after the first."""
    cfg = model.config
    src = torch.randint(0, cfg.src_vocab_size, (batch, src_len), generator=gen)
    src[src == cfg.src_pad_id] = (cfg.src_pad_id + 1) % cfg.src_vocab_size
    for row in range(1, batch, 2):
        src[row, max(1, src_len // 2):] = cfg.src_pad_id
    return src


def _random_frames(model: Transformer, batch: int, src_len: int, gen: torch.Generator) -> torch.Tensor:
    """Random frames (batch, src_len, n_feats), standard normal (about normalised filterbank features), padded
    like `_random_ids`: every other row after the first ends at half length, the rest NaN (runtime.sources)."""
    frames = torch.randn((batch, src_len, model.config.n_feats), generator=gen)
    for row in range(1, batch, 2):
        frames[row, max(1, src_len // 2):] = float("nan")
    return frames


# config.source -> its random source
RANDOM_SOURCES = {"tokens": _random_ids, "features": _random_features, "frames": _random_frames}


def _decoder_inputs(model: Transformer, cross_out: tuple[torch.Tensor, ...], past_len: int, tgt_len: int,
                    gen: torch.Generator, group: int = 1) -> tuple[torch.Tensor, ...]:
    """The decoder's inputs after the encoder's outputs `cross_out`, with `group` rows per source."""
    cfg = model.config
    src_mask, cross = cross_out[0], cross_out[1:]
    batch = src_mask.shape[0] * group  # the decoder rows; source i's are rows i*group .. i*group + group-1
    ids = torch.randint(0, cfg.tgt_vocab_size, (batch, tgt_len), generator=gen)
    shape = (batch, cfg.n_heads, past_len, cfg.head_dim)  # (batch, heads, past_len, head_dim)
    past = [torch.randn(shape, generator=gen) for _ in range(2 * cfg.n_decoder_layers)]
    return (ids, src_mask, *past, *cross)
