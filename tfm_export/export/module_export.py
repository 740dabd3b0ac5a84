"""Export a user's own module through two callables: the path for architectures no layout maps (#42).

The importers map weights onto the one model config; a model that config cannot describe (per-head
projections kept in Python lists, shared blocks, missing residuals, an encoder-only classifier) is
exported from the live module instead. The user passes the module and

- `encode(model, src_ids, src_mask) -> memory` (src_mask: bool, True = a real token), and
- `decode(model, tgt_ids, memory, src_mask) -> logits` ((batch, tgt_len, vocab) or the last position's
  (batch, vocab)); none for an encoder-only model, whose `encode` returns its outputs (a tensor or a
  tuple of them),

plus the special ids and sizes. Both graphs are traced by torch.onnx (dynamo) with dynamic batch and
lengths; the decoder graph has no cache: it reads the whole prefix every step, as `decode` does
(runtime.nocache runs it through the one decode driver). Validation compares ONNX Runtime with the
callables in eager mode (outputs over a grid of shapes; greedy and beam tokens through the same
strategies), then the folder is written atomically with its manifest. The CLI reaches this with
`tfm-export MODEL.pt --trust-pickle --adapter package.module:object` (`load_adapter`).
"""

from __future__ import annotations

import importlib
import logging
import os
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..config import TransformerConfig
from ..errors import ConfigError, ExportError, OutputError, ValidationError, first_line
from ..files import os_error_message, prepare_output_dir
from ..manifest import GraphEntry, GraphSpec, Manifest, TensorSpec, sha256_file, write_manifest
from ..runtime.api import GenerateMixin
from ..runtime.generation import GenerationConfig
from ..runtime.nocache import GRAPH_NAME, MEMORY, SOURCE_MASK
from ..runtime.sources import source_batch
from .checks import check_graph, finish_graph
from .exporter import EXTERNAL_DATA_BYTES, OPSETS, StageCallback, _quiet_exporter, _Stages, _versions

log = logging.getLogger(__name__)

Encode = Callable[[nn.Module, Tensor, Tensor], Any]  # (model, src_ids, src_mask) -> memory / outputs
Decode = Callable[[nn.Module, Tensor, Tensor, Tensor], Tensor]  # (model, tgt_ids, memory, src_mask) -> logits

SRC_IDS = TensorSpec("src_ids", "int64", ("batch", "src_len"))
SRC_MASK = TensorSpec(SOURCE_MASK, "bool", ("batch", "src_len"))
TGT_IDS = TensorSpec("tgt_ids", "int64", ("batch", "tgt_len"))
DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.int64: "int64", torch.bool: "bool"}
# Validation: (batch, src_len) and decoder prefix lengths (None: max_len, capped), beams compared.
GRID = ((1, 1), (2, 7), (3, None))
TGT_LENS = (1, 4, None)
MAX_GRID_LEN = 64
VALIDATION_BEAMS = 3


@dataclass(frozen=True)
class Adapter:
    """What the user's code provides: the callables, the special ids and sizes (module_export's keywords)."""

    encode: Encode
    decode: Decode | None = None  # None: an encoder-only model
    options: dict[str, Any] = field(default_factory=dict)  # src_vocab_size, max_len, bos_id, ... as given
    name: str | None = None  # `package.module:object`, recorded in the manifest


ADAPTER_OPTIONS = ("src_vocab_size", "tgt_vocab_size", "max_len", "bos_id", "eos_id", "src_pad_id", "tgt_pad_id",
                   "output_names")


def load_adapter(spec: str) -> Adapter:
    """`package.module:object` -> its `encode`, `decode` (optional: encoder-only) and the ADAPTER_OPTIONS it
    has as attributes; a ConfigError of one line when it cannot be imported or lacks `encode`."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{{adapter}} must be package.module:object, got {spec!r}", options={"adapter": None})
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's code: ImportError, SyntaxError, anything it raises on import
        raise ConfigError(f"cannot import the adapter's module {module_name!r} ({type(exc).__name__}: "
                          f"{first_line(exc, 160)}); run from its project or put it on PYTHONPATH") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{module_name} has no {attr!r} (the adapter {spec!r})")
        obj = getattr(obj, part)
    encode, decode = getattr(obj, "encode", None), getattr(obj, "decode", None)
    if not callable(encode) or (decode is not None and not callable(decode)):
        raise ConfigError(f"the adapter {spec!r} has no encode function: it must provide encode(model, src_ids, "
                          f"src_mask) and, for a model that generates, decode(model, tgt_ids, memory, src_mask)")
    options = {k: getattr(obj, k) for k in ADAPTER_OPTIONS if getattr(obj, k, None) is not None}
    return Adapter(encode, decode, options, spec)


def load_module(path: str | os.PathLike, trust_pickle: bool = False) -> nn.Module:
    """The whole module pickled at `path` (torch.save(model, path)); its classes must be importable."""
    from ..importers.source import read_trusted

    if not trust_pickle:
        raise ConfigError(f"{path}: exporting a module through an adapter unpickles it (runs code from the file); "
                          f"pass {{trust_pickle}} for a file you trust", options={"trust_pickle": None})
    data = read_trusted(Path(path), trust_pickle)
    if not isinstance(data, nn.Module):
        raise ConfigError(f"{path} holds a {type(data).__name__}, not a pickled module; an adapter needs the "
                          f"whole module: torch.save(model, path) (its state_dict leaves out weights kept outside "
                          f"registered submodules)")
    return data


def export_with_adapter(module: nn.Module, adapter: Adapter, out: str | os.PathLike, **options: Any) -> Manifest:
    """`export_module` with the adapter's callables and options (`options` given here win)."""
    merged = {**adapter.options, **{k: v for k, v in options.items() if v is not None}}
    source = {"adapter": adapter.name, **merged.pop("source", {})}
    return export_module(module, adapter.encode, adapter.decode, out=out, source=source, **merged)


def export_module(module: nn.Module, encode: Encode, decode: Decode | None = None, *, out: str | os.PathLike,
                  src_vocab_size: int, max_len: int, tgt_vocab_size: int | None = None, bos_id: int | None = None,
                  eos_id: int | None = None, src_pad_id: int = 0, tgt_pad_id: int | None = None,
                  output_names: Sequence[str] | None = None, sources: Sequence[Sequence[int]] | None = None,
                  opset: int = 18, atol: float = 1e-4, validate: bool = True, force: bool = False,
                  max_new_tokens: int = 16, source: dict[str, Any] | None = None,
                  inputs: Sequence[str | os.PathLike] = (), on_stage: StageCallback | None = None) -> Manifest:
    """Export `module` through `encode` (and `decode`) to `out`; returns the manifest.

    Seq2seq (`decode` given): encoder.onnx (src_ids, src_mask -> memory) and decoder_nocache.onnx (tgt_ids,
    memory, src_mask -> logits of the last position); `bos_id` and `eos_id` are required. Encoder-only
    (`decode=None`): encoder.onnx alone, its outputs named `output_names` (default `output`, `output_1`, ...).
    `sources`: token-id lists the greedy/beam check decodes (default: random ids). The module is put in
    eval mode. Validation fails (ValidationError, nothing written) when ORT and eager outputs differ beyond
    `atol`, or their greedy/beam tokens differ and so do the logits along ORT's decoded prefixes (tokens
    that part at a near-tie of an untrained model are reported, not failed). `inputs`: files the export
    reads (the pickled module), never inside the folder it replaces.
    """
    out = Path(out)
    if not OPSETS[0] <= opset <= OPSETS[1]:
        raise ExportError(f"{{opset}} is not supported: the exporter writes opsets {OPSETS[0]}..{OPSETS[1]}",
                          options={"opset": opset})
    if decode is not None and (bos_id is None or eos_id is None):
        raise ConfigError("a model that generates needs its special ids: pass {bos_id} and {eos_id}",
                          options={"bos_id": None, "eos_id": None})
    module.eval()
    graphs = _Graphs(module, encode, decode, src_pad_id, src_vocab_size, max_len, output_names)
    config = _config(graphs, src_vocab_size, tgt_vocab_size, max_len, bos_id, eos_id, src_pad_id, tgt_pad_id)
    target = prepare_output_dir(out, force, list(inputs))
    stage = _Stages(on_stage)
    try:
        entries = {}
        for spec, wrapper, args in graphs.to_export(config):
            with stage(f"export {spec.name}"):
                extra = _export_graph(wrapper, args, spec, target.tmp, opset, max_len, module)
            path = target.tmp / spec.file
            opset_written = finish_graph(path, config)  # stamps the config: the file's last write, hashed after it
            entries[spec.name] = GraphEntry(spec, sha256_file(path), opset_written,
                                            {f: sha256_file(target.tmp / f) for f in extra})
        kind = "encoder-only" if decode is None else "nocache"
        described = {"module": f"{type(module).__module__}.{type(module).__qualname__}", "path": "module",
                     "decoder": kind, **(source or {})}
        manifest = Manifest(config=config, graphs=entries, source=described, created_by=_versions())
        if validate:
            with stage("validate"):
                report = validate_module(target.tmp, manifest, graphs, atol, sources, max_new_tokens)
            manifest = manifest.replace(validation=report)
        write_manifest(target.tmp, manifest)
        target.commit()
    except BaseException as exc:
        target.discard()
        if isinstance(exc, OSError):
            raise OutputError(os_error_message(exc, out)) from exc
        raise
    log.info("exported %s to %s", described["module"], out)
    return manifest


class _EncoderGraph(nn.Module):
    """(src_ids, src_mask) -> encode's outputs as a flat tuple."""

    def __init__(self, module: nn.Module, encode: Encode):
        super().__init__()
        self.module, self.encode = module, encode

    def forward(self, src_ids: Tensor, src_mask: Tensor) -> tuple[Tensor, ...]:
        out = self.encode(self.module, src_ids, src_mask)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)


class _DecoderGraph(nn.Module):
    """(tgt_ids, memory, src_mask) -> the last position's logits (batch, vocab) float32."""

    def __init__(self, module: nn.Module, decode: Decode):
        super().__init__()
        self.module, self.decode = module, decode

    def forward(self, tgt_ids: Tensor, memory: Tensor, src_mask: Tensor) -> Tensor:
        logits = self.decode(self.module, tgt_ids, memory, src_mask)
        return (logits[:, -1] if logits.dim() == 3 else logits).float()


class _Graphs:
    """The wrappers, their specs (axes found by running the callables at two shapes) and example inputs."""

    def __init__(self, module: nn.Module, encode: Encode, decode: Decode | None, pad: int, src_vocab: int,
                 max_len: int, output_names: Sequence[str] | None):
        self.module, self.pad, self.src_vocab, self.max_len = module, pad, src_vocab, max_len
        self.encoder = _EncoderGraph(module, encode)
        self.decoder = _DecoderGraph(module, decode) if decode is not None else None
        # Never 0 or 1 on a dynamic axis (torch.export would specialise it), and all different.
        length = max(2, min(5, max_len))
        self.sizes = {"batch": 3, "src_len": length, "tgt_len": max(2, min(4, max_len - 1))}
        shapes = ((3, length), (2, length + 1 if length < max_len else length - 1))
        first, second = self._probe(*shapes[0]), self._probe(*shapes[1])
        if self.decoder is not None:
            if len(first) != 1:
                raise ExportError(f"encode returned {len(first)} tensors; a model that generates returns one "
                                  f"(the memory its decode reads)")
            names = [MEMORY]
        else:
            names = list(output_names or ["output"] + [f"output_{i}" for i in range(1, len(first))])
            if len(names) != len(first):
                raise ConfigError(f"encode returned {len(first)} outputs but {len(names)} output names were given")
        self.outputs = tuple(_tensor_spec(n, a, b, *shapes, "encode") for n, a, b in zip(names, first, second))

    @torch.no_grad()
    def _probe(self, batch: int, src_len: int) -> tuple[Tensor, ...]:
        src, mask = self.example_source(batch, src_len, torch.Generator().manual_seed(src_len))
        try:
            return self.encoder(src, mask)
        except Exception as exc:
            raise ExportError(f"encode failed on a ({batch}, {src_len}) batch of ids: {type(exc).__name__}: "
                              f"{first_line(exc, 200)}") from exc

    def example_source(self, batch: int, src_len: int, gen: torch.Generator, vocab: int | None = None
                       ) -> tuple[Tensor, Tensor]:
        """Random ids (none the padding id), the last row padded from half its length."""
        vocab = vocab or self.src_vocab
        src = torch.randint(0, vocab - 1, (batch, src_len), generator=gen)
        src = src + (src >= self.pad).long()  # never the padding id
        if batch > 1 and src_len > 1:
            src[-1, (src_len + 1) // 2:] = self.pad
        return src, src != self.pad

    def to_export(self, config: TransformerConfig) -> list[tuple[GraphSpec, nn.Module, tuple[Tensor, ...]]]:
        gen = torch.Generator().manual_seed(0)
        src, mask = self.example_source(self.sizes["batch"], self.sizes["src_len"], gen, config.src_vocab_size)
        graphs = [(self.encoder_spec, self.encoder, (src, mask))]
        if self.decoder is not None:
            with torch.no_grad():
                memory = self.encoder(src, mask)[0]
            tgt = torch.randint(0, config.tgt_vocab_size, (self.sizes["batch"], self.sizes["tgt_len"]), generator=gen)
            graphs.append((self.decoder_spec(config), self.decoder, (tgt, memory, mask)))
        return graphs

    @property
    def encoder_spec(self) -> GraphSpec:
        return GraphSpec("encoder", "encoder.onnx", (SRC_IDS, SRC_MASK), self.outputs)

    def decoder_spec(self, config: TransformerConfig) -> GraphSpec:
        memory = self.outputs[0]
        return GraphSpec(GRAPH_NAME, f"{GRAPH_NAME}.onnx", (TGT_IDS, memory, SRC_MASK),
                         (TensorSpec("logits", "float32", ("batch", config.tgt_vocab_size)),))


def _tensor_spec(name: str, a: Tensor, b: Tensor, shape_a: tuple[int, int], shape_b: tuple[int, int],
                 what: str) -> TensorSpec:
    """An output's spec from two runs at (batch, src_len) shape_a and shape_b: each axis batch, src_len or fixed."""
    if not isinstance(a, Tensor) or a.dtype not in DTYPES:
        raise ExportError(f"{what} output {name} is {getattr(a, 'dtype', type(a).__name__)}; outputs must be "
                          f"tensors of {', '.join(DTYPES.values())}")
    if a.dim() != b.dim():
        raise ExportError(f"{what} output {name} changes rank with the input's shape")
    axes: list[str | int] = []
    for x, y in zip(a.shape, b.shape):
        if x == y:
            axes.append(int(x))
        elif (x, y) == (shape_a[0], shape_b[0]) and "batch" not in axes:
            axes.append("batch")
        elif (x, y) == (shape_a[1], shape_b[1]) and "src_len" not in axes:
            axes.append("src_len")
        else:
            raise ExportError(f"{what} output {name} has an axis ({x} then {y}) that is neither the batch nor the "
                              f"source length")
    return TensorSpec(name, DTYPES[a.dtype], tuple(axes))


def _config(graphs: _Graphs, src_vocab: int, tgt_vocab: int | None, max_len: int, bos: int | None, eos: int | None,
            src_pad: int, tgt_pad: int | None) -> TransformerConfig:
    """The manifest's config: the vocabulary sizes, max_len and special ids describe the model; the
    architecture fields only say the width of the memory (runtime.nocache reads none of them)."""
    if graphs.decoder is not None:
        gen = torch.Generator().manual_seed(1)
        src, mask = graphs.example_source(2, 3, gen, src_vocab)
        with torch.no_grad():
            logits = graphs.decoder(torch.full((2, 1), bos), graphs.encoder(src, mask)[0], mask)
        if tgt_vocab is not None and logits.shape[-1] != tgt_vocab:
            raise ConfigError(f"decode returns {logits.shape[-1]} logits per position, not tgt_vocab_size {tgt_vocab}")
        tgt_vocab = int(logits.shape[-1])
    tgt_vocab = tgt_vocab or src_vocab
    last = graphs.outputs[0].shape[-1]
    width = last if isinstance(last, int) and last > 0 else 1
    try:
        return TransformerConfig(src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab, d_model=width, n_heads=1,
                                 n_encoder_layers=1, n_decoder_layers=1, d_ff=width, max_len=max_len,
                                 src_pad_id=src_pad, tgt_pad_id=src_pad if tgt_pad is None else tgt_pad,
                                 bos_id=0 if bos is None else bos, eos_id=0 if eos is None else eos)
    except ValueError as exc:
        raise ConfigError(f"the module's sizes and special ids do not fit: {exc}") from None


def _export_graph(wrapper: nn.Module, args: tuple[Tensor, ...], spec: GraphSpec, folder: Path, opset: int,
                  max_len: int, module: nn.Module) -> list[str]:
    """torch.onnx (dynamo) with the spec's symbolic axes dynamic (lengths up to max_len); checked as every graph."""
    dims: dict[str, object] = {}

    def dim(name: str) -> object:
        if name not in dims:
            dims[name] = torch.export.Dim(name, min=1) if name == "batch" else torch.export.Dim(name, min=1, max=max_len)
        return dims[name]

    shapes = tuple({i: dim(d) for i, d in enumerate(t.shape) if isinstance(d, str)} for t in spec.inputs)
    path = folder / spec.file
    big = sum(p.numel() * p.element_size() for p in module.parameters()) > EXTERNAL_DATA_BYTES
    with _quiet_exporter():
        try:
            program = torch.onnx.export(wrapper, args, dynamo=True, opset_version=opset, dynamic_shapes=shapes,
                                        input_names=spec.input_names(), output_names=spec.output_names(),
                                        verbose=False)
        except Exception as exc:  # the exporter raises many types; keep its first line
            raise ExportError(f"torch.onnx could not export the {spec.name} of your module: {first_line(exc)}; "
                              f"see docs/exporting.md, 'Your own architecture'") from exc
        program.save(str(path), external_data=big)
    check_graph(path, spec)
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(spec.file) and p.name != spec.file)


# ---------------------------------------------------------------- validation


class EagerModule(GenerateMixin):
    """The callables in eager mode as a runner: `generate_ids` etc. through the one decode driver and the
    same strategies as the ONNX runtime (a no-cache state: the whole prefix each step)."""

    def __init__(self, module: nn.Module, encode: Encode, decode: Decode, config: TransformerConfig):
        self.module, self.encode_fn, self.decode_fn, self.config = module, encode, decode, config
        self.generation = GenerationConfig()

    def source_input(self, sources: Sequence[Sequence[int]]) -> np.ndarray:
        return source_batch(sources, self.config)

    def cache_for(self, config: GenerationConfig, steps: int) -> "EagerModule":
        return self

    lock = nullcontext()

    @torch.no_grad()
    def start(self, src: np.ndarray, expand: int = 1) -> "_EagerState":
        ids = torch.from_numpy(src)
        mask = ids != self.config.src_pad_id
        memory = _EncoderGraph(self.module, self.encode_fn)(ids, mask)[0]
        return _EagerState(self, memory.repeat_interleave(expand, 0), mask.repeat_interleave(expand, 0))


class _EagerState:
    device_top = False

    def __init__(self, runner: EagerModule, memory: Tensor, mask: Tensor):
        self.runner, self.memory, self.mask = runner, memory, mask
        self.prefix = torch.zeros((memory.shape[0], 0), dtype=torch.int64)
        self.out: np.ndarray | None = None

    @torch.no_grad()
    def step(self, tokens: np.ndarray) -> None:
        self.prefix = torch.cat([self.prefix, torch.from_numpy(tokens.reshape(-1, 1).astype(np.int64))], dim=1)
        graph = _DecoderGraph(self.runner.module, self.runner.decode_fn)
        self.out = graph(self.prefix, self.memory, self.mask).numpy()

    def next_ids(self) -> np.ndarray:
        return self.out.argmax(axis=1).astype(np.int64)

    def logits(self) -> np.ndarray:
        return self.out

    def top(self, bias: Any, width: int, renormalize: bool) -> Any:
        raise NotImplementedError("eager: strategies take the logits")

    def reorder(self, beam_idx: np.ndarray) -> None:
        index = torch.from_numpy(beam_idx)
        self.prefix, self.memory, self.mask = self.prefix[index], self.memory[index], self.mask[index]


def validate_module(folder: Path, manifest: Manifest, graphs: _Graphs, atol: float,
                    sources: Sequence[Sequence[int]] | None, max_new_tokens: int) -> dict[str, Any]:
    """ORT against the callables: every output over GRID (and TGT_LENS for the decoder), then greedy and
    beam tokens; the report, or a ValidationError carrying it."""
    import onnxruntime as ort

    from ..runtime import open_export

    config, gen = manifest.config, torch.Generator().manual_seed(0)
    sessions = {name: ort.InferenceSession(str(folder / entry.file), providers=["CPUExecutionProvider"])
                for name, entry in manifest.graphs.items()}
    worst: dict[str, float] = {}
    for batch, src_len in GRID:
        src_len = src_len or min(config.max_len, MAX_GRID_LEN)
        src, mask = graphs.example_source(batch, src_len, gen, config.src_vocab_size)
        with torch.no_grad():
            expected = graphs.encoder(src, mask)
        got = sessions["encoder"].run(None, {"src_ids": src.numpy(), SOURCE_MASK: mask.numpy()})
        for spec, want, have in zip(manifest.graphs["encoder"].spec.outputs, expected, got):
            _record(worst, f"encoder.{spec.name}", have, want.numpy())
        if graphs.decoder is None:
            continue
        for tgt_len in TGT_LENS:
            tgt_len = tgt_len or min(config.max_len, MAX_GRID_LEN)
            tgt = torch.randint(0, config.tgt_vocab_size, (batch, tgt_len), generator=gen)
            tgt[:, 0] = config.bos_id
            with torch.no_grad():
                want = graphs.decoder(tgt, expected[0], mask).numpy()
            have = sessions[GRAPH_NAME].run(None, {"tgt_ids": tgt.numpy(), MEMORY: expected[0].numpy(),
                                                   SOURCE_MASK: mask.numpy()})[0]
            _record(worst, f"{GRAPH_NAME}.logits", have, want)
    report: dict[str, Any] = {"atol": atol, "mode": "module", "outputs": {k: {"max_abs": v, "ok": v <= atol}
                                                                          for k, v in worst.items()}}
    failed = [k for k, v in worst.items() if not v <= atol]
    if graphs.decoder is not None and not failed:
        runner = open_export(folder, device="cpu", manifest=manifest, verify=False)
        eager = EagerModule(graphs.module, graphs.encoder.encode, graphs.decoder.decode, config)
        sources = [list(s) for s in sources] if sources else _random_sources(graphs, config, gen)
        steps = min(max_new_tokens, config.max_len)
        for name, beams in (("greedy", 1), ("beam", VALIDATION_BEAMS)):
            along = _AlongThePaths(eager, sources, beams)
            ours = [h[0].ids for h in runner.generate(sources, max_new_tokens=steps, num_beams=beams, observer=along)]
            theirs = [h[0].ids for h in eager.generate(sources, max_new_tokens=steps, num_beams=beams)]
            equal = sum(a == b for a, b in zip(ours, theirs))
            report[name] = {"sources": len(sources), "equal": equal, "path_max_abs": along.worst}
            # Tokens that part at a near-tie are no failure when ORT's logits equal eager's along ORT's paths.
            if along.worst > atol or (equal != len(sources) and not np.isfinite(along.worst)):
                failed.append(f"{name} tokens ({len(sources) - equal} of {len(sources)} sources differ; logits along "
                              f"the decoded prefixes differ by up to {along.worst:.2e})")
    if failed:
        raise ValidationError(f"ONNX Runtime differs from your module's callables: {', '.join(failed)} "
                              f"(atol {atol})", report)
    return report


class _AlongThePaths:
    """A runtime.decoding.Observer of the ONNX decode: each step, the callables' logits for the same prefixes
    (row r of source r // beams) against ORT's; `worst` is the largest difference."""

    def __init__(self, eager: EagerModule, sources: Sequence[Sequence[int]], beams: int):
        self.eager, self.beams, self.worst = eager, beams, 0.0
        self.start = eager.start(eager.source_input(sources), beams)  # the eager memory, rows as ORT's

    def step(self, tokens: np.ndarray, state: Any) -> None:
        graph = _DecoderGraph(self.eager.module, self.eager.decode_fn)
        with torch.no_grad():
            want = graph(torch.from_numpy(state.prefix), self.start.memory, self.start.mask).numpy()
        worst: dict[str, float] = {}
        _record(worst, "logits", state.logits(), want)
        self.worst = max(self.worst, worst["logits"])

    def reorder(self, beam_idx: np.ndarray) -> None:
        pass  # rows stay with their source: the eager memory needs no reordering


def _record(worst: dict[str, float], key: str, got: np.ndarray, want: np.ndarray) -> None:
    if got.shape != want.shape:
        worst[key] = float("inf")
        return
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    worst[key] = max(worst.get(key, 0.0), float(diff.max()) if diff.size else 0.0)


def _random_sources(graphs: _Graphs, config: TransformerConfig, gen: torch.Generator) -> list[list[int]]:
    src, mask = graphs.example_source(4, max(2, min(8, config.max_len)), gen, config.src_vocab_size)
    return [[int(t) for t, m in zip(row, keep) if m] for row, keep in zip(src, mask)]
