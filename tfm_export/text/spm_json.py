"""SentencePiece models as data that runtimes without `sentencepiece` read (Node, the browser). Torch-free.

Marian's tokenizer (text.marian) runs source.spm and target.spm through the `sentencepiece` library.
The JavaScript runtimes (runtimes/node/text/marian.mjs) have no such library, so the export writes what
they need to do the same:

- the source model as a tokenizer.json (`write_tokenizer_json`), built with the `tokenizers`
  library: a Unigram model of the pieces SentencePiece can match, with their scores, and the
  model's normaliser (its precompiled charsmap, whitespace rules and word marker) in the standard
  form, so that any tokenizer.json reader loads it. The JavaScript runtime runs the charsmap with
  SentencePiece's own rule (the longest matching prefix, `EncodeRules` says how spaces are handled),
  not the Rust library's per-grapheme approximation, so its pieces are the `sentencepiece` library's.
- the target model's decoding rules (`decode_rules`): which pieces join to nothing (control
  pieces), and what the unknown piece becomes. Decoding needs nothing else from target.spm.

Only what Marian models use is converted: unigram models without byte fallback, user-defined
symbols or a denormaliser. Others raise UnsupportedModel (the export then takes token ids in Node).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

# sentencepiece_model.proto's piece types and model type
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
UNIGRAM = 1
WORD_MARKER = "\u2581"


class UnsupportedModel(Exception):
    """A SentencePiece model this conversion cannot reproduce exactly (the message says why)."""


@dataclass(frozen=True)
class EncodeRules:
    """How the source model splits text: the tokenizer.json `file` (pieces, scores, charsmap) and the
    normaliser's whitespace settings, which SentencePiece applies while it runs the charsmap."""

    file: str
    add_dummy_prefix: bool = True  # a word marker before the text
    remove_extra_whitespaces: bool = True  # no leading, trailing or repeated spaces

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "add_dummy_prefix": self.add_dummy_prefix,
                "remove_extra_whitespaces": self.remove_extra_whitespaces}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EncodeRules":
        return cls(str(data["file"]), bool(data.get("add_dummy_prefix", True)),
                   bool(data.get("remove_extra_whitespaces", True)))


@dataclass(frozen=True)
class DecodeRules:
    """How the target model joins pieces (sentencepiece's DecodePieces): `controls` join as nothing,
    `unk` as `unk_surface`, every other piece as itself (word markers become spaces)."""

    controls: tuple[str, ...] = ()
    unk: str = "<unk>"
    unk_surface: str = " \u2047 "

    def to_dict(self) -> dict[str, Any]:
        return {"controls": list(self.controls), "unk": self.unk, "unk_surface": self.unk_surface}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DecodeRules":
        return cls(tuple(data.get("controls") or ()), str(data.get("unk", "<unk>")),
                   str(data.get("unk_surface", " \u2047 ")))


def read_model(path: Path) -> Any:
    """The ModelProto of a .spm file (sentencepiece's own protobuf class; UnsupportedModel without it)."""
    try:
        from sentencepiece import sentencepiece_model_pb2
    except ImportError as exc:  # protobuf missing, or a sentencepiece without the generated module
        raise UnsupportedModel(f"reading {path.name} needs sentencepiece and protobuf ({exc})") from None
    model = sentencepiece_model_pb2.ModelProto()
    try:
        model.ParseFromString(Path(path).read_bytes())
    except Exception as exc:  # protobuf's DecodeError, or a runtime that rejects the file
        raise UnsupportedModel(f"{path.name} is not a SentencePiece model ({exc})") from None
    _check_supported(model, Path(path).name)
    return model


def _check_supported(model: Any, name: str) -> None:
    trainer, normalizer = model.trainer_spec, model.normalizer_spec
    problems = [
        (trainer.model_type != UNIGRAM, "it is not a unigram model"),
        (trainer.byte_fallback, "it falls back to bytes"),
        (trainer.treat_whitespace_as_suffix, "it puts word markers after words"),
        (not normalizer.escape_whitespaces, "it keeps spaces as spaces"),
        (bool(model.denormalizer_spec.precompiled_charsmap), "it has a denormaliser"),
        (any(p.type in (USER_DEFINED, BYTE) for p in model.pieces), "it has user-defined or byte pieces"),
        (sum(p.type == UNKNOWN for p in model.pieces) != 1, "it has no single unknown piece"),
    ]
    reasons = [why for bad, why in problems if bad]
    if reasons:
        raise UnsupportedModel(f"{name}: {'; '.join(reasons)}")


def write_tokenizer_json(spm_path: Path, out: Path) -> EncodeRules:
    """Write `spm_path`'s pieces and normaliser as the tokenizer.json `out`; how its normaliser treats
    spaces. Control and unused pieces are left out: SentencePiece never matches them in text."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    model = read_model(spm_path)
    pieces = [p for p in model.pieces if p.type in (NORMAL, UNKNOWN)]
    unk = next(i for i, p in enumerate(pieces) if p.type == UNKNOWN)
    tokenizer = Tokenizer(models.Unigram([(p.piece, p.score) for p in pieces], unk, False))
    spec = model.normalizer_spec
    steps = [normalizers.Precompiled(spec.precompiled_charsmap)] if spec.precompiled_charsmap else []
    if spec.remove_extra_whitespaces:  # what SentencePiece does as it normalises, as other readers can do it
        steps += [normalizers.Replace(Regex(" {2,}"), " "), normalizers.Replace(Regex("^ | $"), "")]
    tokenizer.normalizer = normalizers.Sequence(steps)
    prepend = "always" if spec.add_dummy_prefix else "never"
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement=WORD_MARKER, prepend_scheme=prepend)
    tokenizer.decoder = decoders.Metaspace(replacement=WORD_MARKER, prepend_scheme=prepend)
    tokenizer.save(str(out))
    return EncodeRules(out.name, spec.add_dummy_prefix, spec.remove_extra_whitespaces)


def decode_rules(spm_path: Path) -> DecodeRules:
    """How `spm_path` joins pieces into text (DecodeRules)."""
    model = read_model(spm_path)
    unk = next(p.piece for p in model.pieces if p.type == UNKNOWN)
    return DecodeRules(tuple(p.piece for p in model.pieces if p.type == CONTROL), unk, model.trainer_spec.unk_surface)
