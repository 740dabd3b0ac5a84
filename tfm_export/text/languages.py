"""Which languages a tokenizer can mark, and how: codes -> the token that marks each. Torch-free.

Multilingual models pick languages with tokens. mBART-50, M2M100 and NLLB put the source language's
token on the source (`source`) and force the target language's token as the first generated token
(`target`, transformers' forced_bos_token_id); multi-target Marian models read the target language
from a `>>fra<<` token at the start of the source (`target_on_source`). A single-pair model has one
code on each side and no tokens (`pair`). The dict form (`to_dict`) lives in the tokenizer's dict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..errors import InputError


@dataclass(frozen=True)
class TokenShape:
    """How a tokenizer writes a language as a token. Each Hugging Face family names its shape
    (importers.families); Marian's belongs to its tokenizer (text.marian), which also parses it."""

    name: str  # for messages: "mbart" codes
    pattern: re.Pattern[str]  # a whole token: ^__[a-z]{2,3}__$
    wrapper: int = 0  # characters on each side of the code inside the token (__en__, >>fra<<: 2)
    target_on_source: bool = False  # the token names the target language and goes on the source (Marian)

    def code(self, token: str) -> str | None:
        """The language code of `token`, or None when it is not a language token of this shape."""
        if not self.pattern.match(token):
            return None
        return token[self.wrapper:len(token) - self.wrapper]


@dataclass(frozen=True)
class Languages:
    """A tokenizer's languages (see the module docstring)."""

    source: dict[str, str] = field(default_factory=dict)  # code -> token put on the source
    target: dict[str, str] = field(default_factory=dict)  # code -> token that starts the target (or the source)
    source_default: str | None = None  # the source language when none is given
    target_on_source: bool = False  # the target's token goes at the start of the source (Marian)
    pair: tuple[str, str] | None = None  # a single-pair model's (source, target) codes, no tokens

    @classmethod
    def from_tokens(cls, tokens: Iterable[str], shape: TokenShape, source_default: str | None = None
                    ) -> "Languages":
        """Every token of the family's `shape` is a language, on both sides (Marian: the target only)."""
        found = {code: t for t in tokens if (code := shape.code(t)) is not None}
        if shape.target_on_source:
            return cls(target=found, target_on_source=True)
        default = source_default if source_default in found else None
        return cls(source=dict(found), target=dict(found), source_default=default)

    def source_token(self, code: str | None) -> str | None:
        """The token that marks source language `code` (None: the default; no token without languages)."""
        code = code or self.source_default
        if not self.source or code is None:
            return self._known(code, self.pair[0] if self.pair else None, "source") and None
        return self.source[self._check(code, self.source, "source")]

    def target_token(self, code: str | None) -> str | None:
        """The token that starts target language `code`; None when no code is given (the model chooses)."""
        if code is None:
            return None
        if not self.target:
            return self._known(code, self.pair[1] if self.pair else None, "target") and None
        return self.target[self._check(code, self.target, "target")]

    def codes(self, side: str) -> list[str]:
        """The codes of `side` ("source" or "target"), sorted."""
        tokens = self.source if side == "source" else self.target
        single = self.pair[0 if side == "source" else 1] if self.pair else None
        return sorted(tokens) or ([single] if single else [])

    @staticmethod
    def _check(code: str, known: dict[str, str], side: str) -> str:
        if code not in known:
            raise InputError(f"unknown {side} language {code!r}; {suggest(code, sorted(known))}",
                             options={f"{side}_lang": code})
        return code

    @staticmethod
    def _known(code: str | None, single: str | None, side: str) -> bool:
        """A model without language tokens takes no code, or its own single one."""
        if code is not None and code != single:
            what = f"only {single!r}" if single else "no language codes (it translates one pair)"
            raise InputError(f"{side} language {code!r} does not apply: this model takes {what}",
                             options={f"{side}_lang": code})
        return True

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "source_default": self.source_default,
                "target_on_source": self.target_on_source, "pair": list(self.pair) if self.pair else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "Languages":
        data = data or {}
        pair = data.get("pair")
        return cls(dict(data.get("source") or {}), dict(data.get("target") or {}), data.get("source_default"),
                   bool(data.get("target_on_source")), tuple(pair) if pair else None)


def suggest(code: str, codes: list[str]) -> str:
    """What to say of an unknown code: the model's codes that begin with it ("de" -> deu_Latn, de_DE), or its
    first 40 codes. The Node runtime says the same (runtimes/node/text/tokenizer.mjs)."""
    close = [c for c in codes if c.lower().startswith(code.lower())] if code else []
    if close:
        return (f"did you mean {', '.join(close[:8])}? (this model knows {len(codes)} codes; "
                f"`tfm-export languages FOLDER` lists them)")
    return "this model knows " + ", ".join(codes[:40]) + (", ..." if len(codes) > 40 else "")
