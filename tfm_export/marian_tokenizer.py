"""Marian's tokenisation: SentencePiece pieces mapped through vocab.json. Torch-free.

Needs the optional `sentencepiece` package (pip install 'tfm-export[sentencepiece]'). The dict
form names files that live in the export folder:

    {"type": "marian", "source_spm": "source.spm", "target_spm": "target.spm", "vocab": "vocab.json",
     "unk_id": 1, "eos_id": 0, "pad_id": 58100}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from .errors import ConfigError, ManifestError

UNK = "<unk>"


def _spm(path: Path) -> Any:
    try:
        import sentencepiece
    except ImportError:
        raise ConfigError("Marian tokenisation needs sentencepiece: pip install 'tfm-export[sentencepiece]'") from None
    if not path.exists():
        raise ManifestError(f"{path} is missing; it belongs to the Marian tokenizer")
    return sentencepiece.SentencePieceProcessor(model_file=str(path))


class MarianTokenizer:
    """Source text -> pieces (source.spm) -> ids (vocab.json) + eos; target ids -> pieces -> text."""

    kind = "marian"

    def __init__(self, folder: Path, source_spm: str, target_spm: str, vocab: str, eos_id: int, pad_id: int):
        self.folder, self.names = Path(folder), {"source_spm": source_spm, "target_spm": target_spm, "vocab": vocab}
        self.eos_id, self.pad_id = eos_id, pad_id
        vocab_path = self.folder / vocab
        if not vocab_path.exists():
            raise ManifestError(f"{vocab_path} is missing; it belongs to the Marian tokenizer")
        self.encoder: dict[str, int] = json.loads(vocab_path.read_text(encoding="utf-8"))
        self.decoder = {i: piece for piece, i in self.encoder.items()}
        self.unk_id = self.encoder.get(UNK, 1)
        self.special = {eos_id, pad_id, self.unk_id}
        self.source, self.target = _spm(self.folder / source_spm), _spm(self.folder / target_spm)

    @classmethod
    def from_folder(cls, folder: Path, eos_id: int, pad_id: int) -> "MarianTokenizer":
        """The usual file names of a Hugging Face Marian folder."""
        return cls(folder, "source.spm", "target.spm", "vocab.json", eos_id, pad_id)

    def encode(self, text: str) -> list[int]:
        pieces = self.source.encode(text, out_type=str)
        return [self.encoder.get(p, self.unk_id) for p in pieces] + [self.eos_id]

    def decode(self, ids: Sequence[int]) -> str:
        pieces = [self.decoder[i] for i in ids if i not in self.special and i in self.decoder]
        # As transformers' MarianTokenizer: stray word markers become spaces, ends are stripped.
        return self.target.decode_pieces(pieces).replace("\u2581", " ").strip()

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, **self.names, "unk_id": self.unk_id, "eos_id": self.eos_id, "pad_id": self.pad_id}

    @classmethod
    def from_dict(cls, data: dict[str, Any], folder: Path | None = None) -> "MarianTokenizer":
        if folder is None:
            raise ManifestError("the Marian tokenizer needs the folder that holds its files")
        try:
            return cls(folder, data["source_spm"], data["target_spm"], data["vocab"], data["eos_id"], data["pad_id"])
        except KeyError as exc:
            raise ManifestError(f"marian tokenizer is missing {exc}; re-export the model") from None

    def files(self) -> list[Path]:
        return [self.folder / name for name in self.names.values()]
