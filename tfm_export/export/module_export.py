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
(runtime.states.nocache runs it through the one decode driver). Validation compares ONNX Runtime with the
callables in eager mode (outputs over a grid of shapes; greedy and beam tokens through the same
strategies), then the folder is written atomically with its manifest. The CLI reaches this with
`tfm-export MODEL.pt --trust-pickle --adapter package.module:object` (`load_adapter`).
"""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import Tensor, nn

from ..config import TransformerConfig
from ..errors import ConfigError, ExportError, OutputError, first_line
from ..files import os_error_message, prepare_output_dir
from ..graph_io import GraphEntry, GraphSpec
from ..manifest import Manifest, sha256_file, write_manifest
from .checks import check_graph, finish_graph
from .module_graphs import Decode, Encode, Graphs
from .module_validate import validate_module
from .shared import StageCallback, Stages, check_opset, needs_external_data, quiet_exporter, versions

log = logging.getLogger(__name__)


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
    check_opset(opset)
    if decode is not None and (bos_id is None or eos_id is None):
        raise ConfigError("a model that generates needs its special ids: pass {bos_id} and {eos_id}",
                          options={"bos_id": None, "eos_id": None})
    module.eval()
    graphs = Graphs(module, encode, decode, src_pad_id, src_vocab_size, max_len, output_names)
    config = _config(graphs, src_vocab_size, tgt_vocab_size, max_len, bos_id, eos_id, src_pad_id, tgt_pad_id)
    target = prepare_output_dir(out, force, list(inputs))
    stage = Stages(on_stage)
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
        manifest = Manifest(config=config, graphs=entries, source=described, created_by=versions())
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



def _config(graphs: Graphs, src_vocab: int, tgt_vocab: int | None, max_len: int, bos: int | None, eos: int | None,
            src_pad: int, tgt_pad: int | None) -> TransformerConfig:
    """The manifest's config: the vocabulary sizes, max_len and special ids describe the model; the
    architecture fields only say the width of the memory (runtime.states.nocache reads none of them)."""
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
    big = needs_external_data(module)
    with quiet_exporter():
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
