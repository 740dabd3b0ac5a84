"""What LibreTranslate's other routes (serve.libretranslate_routes: /detect, /translate_file, /frontend/settings)
serve, whichever server they are on: the languages, and a translator for a pair. The routes take a Served, not
an engine, so that one export's server (engine_served) and a server of several exports (registry_served,
choosing the export by source and target, through the pivot language as its /translate does) register the
same routes.

A Translator is the legs of a pair: one export, or two through the pivot; each leg opens the request state
with its engine (a several-exports server leases it from serve.registry for the leg) and the codes it is
given. Translator.run passes a file (or any value) through the legs, each leg's output the next one's input.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Sequence

from ..errors import TfmExportError
from ..text.iso639 import two_letter
from .contract import LanguageView
from .libretranslate import listed, pick_languages
from .libretranslate_params import as_libretranslate
from .catalog import Leg
from .registry import LoadFailed, ModelRegistry
from .translation import HTTPFailure, failure_from

# One leg: (the request state with the leg's engine, held for the block; its source code; its target code)
Step = tuple[Callable[[], AbstractAsyncContextManager[dict[str, Any]]], "str | None", "str | None"]
# What a leg does: (its state, the value so far, source, target) -> the next value; None when the client went away
LegWork = Callable[[dict[str, Any], Any, "str | None", "str | None"], Awaitable[Any]]


@dataclass(frozen=True)
class Translator:
    """The legs that translate one pair (see the module docstring)."""

    legs: Sequence[Step]

    async def run(self, work: LegWork, value: Any) -> Any:
        """`value` through every leg; None as soon as a leg answers None (the client went away)."""
        for opened, source, target in self.legs:
            async with opened() as state:
                value = await work(state, value, source, target)
            if value is None:
                return None
        return value


@dataclass(frozen=True)
class Served:
    """The languages of a server and how it translates a pair, for LibreTranslate's routes."""

    sources: list[str]  # what /detect chooses among (none: any language py3langid knows)
    targets: list[str]  # what /frontend/settings offers
    default: str  # /detect's answer when nothing tells; /frontend/settings' target is another code
    # (target, model or None) -> the codes a text into `target` is detected among for source "auto"; 400 if none
    candidates: Callable[[str, "str | None"], list[str]]
    # (source or None: the default, target, model or None) -> its Translator; 400 naming the pair if none
    translator: Callable[["str | None", str, "str | None"], Translator]


def engine_served(state: dict[str, Any]) -> Served:
    """One export's server: its engine (state["engine"]) with the model's codes."""
    view = LanguageView.of(state["engine"].model)

    def candidates(target: str, model: str | None) -> list[str]:
        pick_languages({"source": "auto", "target": target}, view)  # the target checked first (400)
        return list(view.sources)

    def translator(source: str | None, target: str, model: str | None) -> Translator:
        source, target, _ = pick_languages({"source": source or "auto", "target": target}, view)
        return Translator([(lambda: nullcontext(state), source, target)])

    default = view.default or (view.sources[0] if view.sources else "en")
    return Served(list(view.sources), list(view.targets), default, candidates, translator)


@asynccontextmanager
async def leased(registry: ModelRegistry, state: dict[str, Any], leg: Leg) -> AsyncIterator[dict[str, Any]]:
    """The request state with `leg`'s engine, held for the block; 503 when it cannot be opened."""
    try:
        async with registry.lease(leg.export) as engine:
            yield {**state, "engine": engine}
    except LoadFailed as exc:
        raise HTTPFailure(503, str(exc), {"Retry-After": "5"}) from None


def registry_served(registry: ModelRegistry, state: dict[str, Any]) -> Served:
    """A server of several exports: every export's codes; a pair's export (or `model`'s), or two through the
    pivot (serve.registry.route), each leg on its leased engine."""
    sources = sorted({code for export in registry.exports for code in export.view.sources})
    targets = sorted({code for export in registry.exports for code in export.view.targets})
    pivot = next((code for code in sources if two_letter(code) == registry.pivot), None)

    def candidates(target: str, model: str | None) -> list[str]:
        if model is not None:
            return list(_find(registry, model).view.sources)
        codes = registry.sources_into(target)
        if not codes:
            raise HTTPFailure(400, f"Invalid request: no export translates into {target!r}; GET /languages "
                                   f"lists the pairs this server translates ({listed(targets)})")
        return codes

    def translator(source: str | None, target: str, model: str | None) -> Translator:
        try:
            legs = registry.pick(model, source, target)
        except TfmExportError as exc:
            raise as_libretranslate(failure_from(exc)) from None
        return Translator([(_opener(registry, state, leg), leg.source, leg.target) for leg in legs])

    default = pivot or (sources[0] if sources else "en")
    return Served(sources, targets, default, candidates, translator)


def _find(registry: ModelRegistry, model: str) -> Any:
    try:
        return registry.find(model)
    except TfmExportError as exc:
        raise as_libretranslate(failure_from(exc)) from None


def _opener(registry: ModelRegistry, state: dict[str, Any], leg: Leg) -> Callable[[], Any]:
    return lambda: leased(registry, state, leg)
