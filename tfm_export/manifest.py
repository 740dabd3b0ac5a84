"""manifest.json: the contract between an export folder and the apps that use it. Torch-free.

The typed form (`Manifest`, `Variant`, `VariantQuality`; each graph's `GraphEntry` from graph_io) is what every
module passes around; this module is the only one that reads or writes `manifest.json`. Writing checks the JSON
Schema (manifest.schema.json, shipped in the package) and replaces the file atomically; reading
checks the schema, the config, that every graph file exists and (by default) its sha256.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import uuid
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from .config import TransformerConfig
from .filterbank import Filterbank
from .errors import ConfigError, ManifestError
from .graph_io import EARLIER_LOGITS, GraphEntry, TensorSpec

FORMAT = "tfm-export-manifest/1"
MANIFEST_NAME = "manifest.json"


@dataclass(frozen=True)
class Variant:
    """How the float32 graphs were transformed after export (export.variants)."""

    dtype: str = "float32"  # weights/compute dtype: float32 | float16
    io_dtype: str = "float32"  # dtype of the cache tensors between graphs
    optimized: bool = False  # ORT fusions applied (--optimize)
    quantize: str | None = None  # "int8": dynamic int8 MatMul weights
    transforms: dict[str, Any] = field(default_factory=dict)  # transform -> graph -> counts
    extra: dict[str, Any] = field(default_factory=dict)  # documentation fields (float16's io, float32_ops)

    def to_dict(self) -> dict[str, Any]:
        data = {"dtype": self.dtype, "io_dtype": self.io_dtype, "optimized": self.optimized,
                "quantize": self.quantize, **self.extra}
        return {**data, "transforms": self.transforms} if self.transforms else data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Variant":
        known = {"dtype", "io_dtype", "optimized", "quantize", "transforms"}
        return cls(data.get("dtype", "float32"), data.get("io_dtype", data.get("dtype", "float32")),
                   bool(data.get("optimized", False)), data.get("quantize"), dict(data.get("transforms", {})),
                   {k: v for k, v in data.items() if k not in known})


@dataclass(frozen=True)
class VariantQuality:
    """How close a reduced-precision variant's outputs are to its own float32 graphs' (export.quality): both
    decode the same sources at export, without references. chrF (text) or WER (speech), in points."""

    metric: str  # "chrf" (higher is better) or "wer" (lower is better)
    score: float  # the variant's outputs scored against float32's
    identical: float  # the share of outputs equal to float32's, in percent
    sources: str  # where the sources came from: "samples", "built-in sentences, en", "tokenizer text", a file name
    size: int  # how many sources were decoded

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "VariantQuality":
        return cls(str(data["metric"]), float(data["score"]), float(data["identical"]), str(data["sources"]),
                   int(data["size"]))


@dataclass(frozen=True)
class Manifest:
    """Everything an app needs to run an export: graphs, config, tokenizer, variant, validation."""

    config: TransformerConfig
    # encoder, decoder, and decoder_static when exported; a module export (export.module_export): encoder and
    # decoder_nocache (no cache: the whole prefix each step), or encoder alone (runtime.states.nocache)
    graphs: dict[str, GraphEntry]
    variant: Variant = Variant()
    tokenizer: dict[str, Any] | None = None  # text.tokenizer's dict form
    samples: list[str] | None = None  # sample source texts
    source: dict[str, Any] = field(default_factory=dict)  # checkpoint file name, layout, options
    created_by: dict[str, str | None] = field(default_factory=dict)  # package versions
    validation: dict[str, Any] | None = None  # export.validate's report
    # Default decoding settings (runtime.options.generation.GenerationConfig fields, e.g. a Marian folder's
    # num_beams); None: greedy. Absent from exports made before it (the schema allows both).
    generation: dict[str, Any] | None = None
    # Files copied beside the graphs (a tokenizer's models) -> sha256, so that replacing the export
    # removes them only while unchanged. None in exports made before it (then they are never removed).
    files: dict[str, str] | None = None
    # How features are computed from audio, for an encoder that reads them (Whisper): the folder's
    # preprocessor_config.json as audio.features.FeatureConfig.to_dict() writes it. None: a token encoder.
    features: dict[str, Any] | None = None
    # How a speech model decodes (Whisper): generation_config.json's Whisper keys as
    # runtime.speech.prompt.WhisperSettings.to_dict() writes them (prompt tokens, languages, timestamp rules).
    # None: not a speech model, or an export made before it.
    speech: dict[str, Any] | None = None
    # How a frames encoder's frames are computed from audio (filterbank.Filterbank: Kaldi's filterbank),
    # so that `transcribe` reads recordings. None: the caller computes the frames, or not a frames model.
    filterbank: Filterbank | None = None
    # A reduced-precision variant against its float32 graphs on the folder's own text or speech (export.quality).
    # None: a float32 export, unvalidated, or made before it.
    quality: VariantQuality | None = None

    @property
    def special_ids(self) -> dict[str, int]:
        cfg = self.config
        return {"src_pad": cfg.src_pad_id, "tgt_pad": cfg.tgt_pad_id, "bos": cfg.bos_id, "eos": cfg.eos_id}

    @property
    def encoder_input(self) -> TensorSpec:
        """What the encoder reads (its name, element type and axes): token ids (export.specs.TOKEN_IDS),
        float32 features (batch, n_mels, n_frames) (export.specs.features, Whisper), or float32 frames
        (batch, src_len, n_feats) (export.specs.frames); every runner feeds the encoder by this declaration."""
        return self.graphs["encoder"].spec.inputs[0]

    @property
    def cache_dtype(self) -> str:
        """dtype of the self-attention caches (float16 exports keep them float16)."""
        return self.graphs["decoder"].spec.tensor("past.0.self.key").dtype

    @property
    def decoder_positions(self) -> bool:
        """decoder.onnx returns EARLIER_LOGITS: with `logits`, every new position's (what a speculative step checks
        drafted ids with, runtime.decode.speculative); False for exports made before it, which decode without."""
        decoder = self.graphs.get("decoder")
        return decoder is not None and EARLIER_LOGITS in decoder.spec.output_names()

    @property
    def cross_per_source(self) -> bool:
        """The decoder takes src_mask and cross.* once per source (axis `src_batch`) for rows grouped by
        source (beams, samples); False for exports made before it, which need a copy per decoder row."""
        return self.graphs["decoder"].spec.tensor("src_mask").shape[0] == "src_batch"

    def replace(self, **changes: Any) -> "Manifest":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "created_by": dict(self.created_by), "config": self.config.to_dict(),
                "special_ids": self.special_ids, "tokenizer": self.tokenizer, "samples": self.samples,
                "source": dict(self.source), "variant": self.variant.to_dict(),
                "graphs": {name: g.to_dict() for name, g in self.graphs.items()}, "validation": self.validation,
                "generation": self.generation, **({"files": dict(self.files)} if self.files is not None else {}),
                **({"features": dict(self.features)} if self.features is not None else {}),
                **({"speech": dict(self.speech)} if self.speech is not None else {}),
                **({"filterbank": self.filterbank.to_dict()} if self.filterbank is not None else {}),
                **({"quality": self.quality.to_dict()} if self.quality is not None else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Manifest":
        return cls(TransformerConfig.from_dict(data["config"]),
                   {name: GraphEntry.from_dict(name, g) for name, g in data["graphs"].items()},
                   Variant.from_dict(data.get("variant", {})), data.get("tokenizer"), data.get("samples"),
                   dict(data.get("source") or {}), dict(data.get("created_by", {})), data.get("validation"),
                   data.get("generation"), data.get("files"), data.get("features"),
                   data.get("speech"), Filterbank.from_dict(data["filterbank"]) if data.get("filterbank") else None,
                   VariantQuality.from_dict(data["quality"]) if data.get("quality") else None)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks (graphs can be gigabytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def schema() -> dict[str, Any]:
    """The JSON Schema of manifest.json (also published in the package)."""
    text = resources.files("tfm_export").joinpath("manifest.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def write_manifest(folder: str | os.PathLike, manifest: Manifest) -> Path:
    """Check against the schema, then replace `folder/manifest.json` atomically (temp file, rename)."""
    folder = Path(folder)
    data = manifest.to_dict()
    _check_schema(data, folder)
    path = folder / MANIFEST_NAME
    tmp = folder / f".{MANIFEST_NAME}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def has_manifest(folder: str | os.PathLike) -> bool:
    """True when `folder` holds a manifest.json of any format (an export another checkout wrote, say)."""
    return (Path(folder) / MANIFEST_NAME).is_file()


def manifest_time(folder: str | os.PathLike) -> float:
    """When the export in `folder` was written: its manifest's modification time (Unix seconds)."""
    return (Path(folder) / MANIFEST_NAME).stat().st_mtime


def read_manifest_data(folder: str | os.PathLike) -> dict[str, Any]:
    """The raw JSON of an export folder's manifest (ManifestError when it is missing or not JSON)."""
    folder = Path(folder)
    path = folder / MANIFEST_NAME
    if folder.name == MANIFEST_NAME and folder.is_file():  # the manifest given for its folder
        raise ManifestError(f"{folder} is the export's manifest; pass its folder, {folder.parent}")
    # A model (a checkpoint file, a Hugging Face folder) given where its export belongs: say how to make one.
    if folder.is_file() or (folder.is_dir() and not path.exists() and (folder / "config.json").is_file()):
        raise ManifestError(f"{folder} is a model, not an export folder; export it first (`tfm-export {folder} "
                            f"-o OUT`) and pass OUT")
    if not folder.is_dir():
        raise ManifestError(f"export folder not found: {folder}; run `tfm-export MODEL.pt -o {folder}` first")
    if not path.is_file():
        raise ManifestError(f"{folder} has no {MANIFEST_NAME}; it is not a (complete) tfm-export folder — "
                            f"re-run the export")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ManifestError(f"{path} is not valid JSON ({type(exc).__name__}); re-run the export") from None
    except OSError as exc:
        raise ManifestError(f"{path} cannot be read ({exc.strerror or exc}); check its permissions") from None


def load_manifest(folder: str | os.PathLike, verify_hashes: bool = True) -> Manifest:
    """Read and check an export folder's manifest; raises ManifestError with the fix."""
    folder = Path(folder)
    data = read_manifest_data(folder)
    _check_schema(data, folder)
    try:
        manifest = Manifest.from_dict(data)
    except (TypeError, ValueError, KeyError, AttributeError, ConfigError) as exc:
        raise ManifestError(f"{folder / MANIFEST_NAME} has an invalid config, graph entry or filterbank: {exc}") from None
    for name, graph in manifest.graphs.items():
        _check_graph_files(folder, name, graph, verify_hashes)
    return manifest


def export_files(folder: str | os.PathLike) -> dict[str, str | None] | None:
    """The files a previous export in `folder` consists of (manifest, graphs, external data, tokenizer
    files), each with the sha256 the manifest recorded (None where it records none: the manifest itself,
    and tokenizer files of exports from before `Manifest.files`); None when
    `folder` holds no readable manifest of this format. Replacing the folder removes only these."""
    try:
        data = read_manifest_data(folder)
        manifest = Manifest.from_dict(data) if data.get("format") == FORMAT else None
    except (ManifestError, ConfigError, TypeError, ValueError, KeyError, AttributeError):
        return None
    if manifest is None:
        return None
    # Files copied beside the graphs (a tokenizer's models) with the hashes the export recorded. Older
    # exports list them only as file names among the tokenizer's values: listed without a hash, so
    # they count as the export's (the folder is not foreign) but are never removed (files._remove_files).
    tokenizer = manifest.tokenizer if isinstance(manifest.tokenizer, dict) else {}
    names: dict[str, str | None] = {v: None for v in tokenizer.values() if isinstance(v, str) and "." in v
                                    and "/" not in v}
    names.update(manifest.files or {})
    names[MANIFEST_NAME] = None
    for graph in manifest.graphs.values():
        names.update(graph.files())
    return names


def is_export_folder(folder: str | os.PathLike) -> bool:
    """True when `folder` has a manifest.json of this format (its graphs are not checked)."""
    try:
        data = read_manifest_data(folder)
    except ManifestError:
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT


def _check_graph_files(folder: Path, name: str, graph: GraphEntry, verify_hashes: bool) -> None:
    for file, expected in graph.files().items():
        path = folder / file
        if Path(file).name != file or not path.is_file():
            raise ManifestError(f"{name} graph file {path} is missing; re-run the export")
        if verify_hashes and sha256_file(path) != expected:
            raise ManifestError(f"{path} does not match the sha256 in {MANIFEST_NAME} (changed, corrupt, or "
                                f"from another export); re-run the export or restore the file")


def _check_schema(manifest: Any, folder: Path) -> None:
    import jsonschema  # imported here: only loading and writing need it

    try:
        jsonschema.validate(manifest, schema())
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        raise ManifestError(f"{folder / MANIFEST_NAME} does not follow the manifest schema at {where}: "
                            f"{exc.message[:200]}") from None
    if manifest.get("format") != FORMAT:
        raise ManifestError(f"{folder / MANIFEST_NAME} has format {manifest.get('format')!r}; this version "
                            f"reads {FORMAT!r} — re-export with this version of tfm-export")
