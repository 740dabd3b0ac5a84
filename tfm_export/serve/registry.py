"""Several exports behind one server (`tfm-export serve A B C`, or a folder of exports): which export a
request goes to, and each export's engine, opened on first use and closed when idle.

Each export is known by its manifest before it is opened (serve.catalog's ExportInfo: its name, the codes it translates
from and into, its source limit), so the server starts at once and lists every model and language pair.
A request names an export by `model` (its folder's name, or an alias from where it was exported: the
Hub id or the source folder's name, when no other export has it), or by its languages: an export that
translates `source` into `target` directly, else two through the pivot language (English by default:
any export's code for it, `en`, `eng_Latn`, `en_XX`), the first translating `source` into the pivot and
the second the pivot into `target` (route).

A lease (ModelRegistry.lease) holds an export's engine while a request uses it: opened on the first
lease (its own in-flight or request-level batcher, as a server of that export alone would run), closed
once it is idle for `idle_unload` seconds (watch) or, beyond `max_loaded` open engines, the least
recently used idle one first. An engine in use is never closed; while every open engine is in use a new
one opens beyond the limit and the limit is restored as they go idle. The registry also stands for the
server's engines together where one is read (serve.metrics, /healthz): queue depth, active rows, tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, AsyncIterator, Callable, Sequence

from ..errors import InputError, TfmExportError
from ..text.iso639 import two_letter
from .catalog import ExportInfo, Leg, read_export, unique_names
from .engine import ServeSettings, check_batching, open_engine, resolve_batching

log = logging.getLogger(__name__)

PIVOT = "en"  # the language a pair without an export of its own is translated through


class UnknownModel(InputError):
    """A `model` no export of this server is named (HTTP 422 in a request, 404 at /v1/models/{model})."""


class NoRoute(InputError):
    """A language pair no export translates, directly or through the pivot language."""


class LoadFailed(TfmExportError):
    """An export that could not be opened when a request first needed it (HTTP 503)."""


@dataclass
class Slot:
    """One export's engine: None until a lease opens it, and again once it is closed."""

    export: ExportInfo
    engine: Any = None
    users: int = 0  # leases holding it now
    last_used: float = 0.0  # time.monotonic() when the last lease ended
    loads: int = 0  # times it was opened
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class ModelRegistry:
    """The exports of one server and their engines (see the module docstring)."""

    name = "multi"  # /healthz's batching: each export has its own engine

    def __init__(self, settings: ServeSettings, folders: Sequence[str], idle_unload: float | None = None,
                 max_loaded: int | None = None, pivot: str = PIVOT, opener: Callable[[ServeSettings], Any] = open_engine):
        if idle_unload is not None and not idle_unload > 0:
            raise InputError(f"{{idle_unload}} must be above 0 seconds, got {idle_unload}", options={"idle_unload": None})
        if max_loaded is not None and max_loaded < 1:
            raise InputError(f"{{max_loaded}} must be at least 1, got {max_loaded}", options={"max_loaded": None})
        if not folders:
            raise InputError("give at least one export {folder}", options={"folder": None})
        self.settings, self.idle_unload, self.max_loaded, self.pivot = settings, idle_unload, max_loaded, pivot
        self.opener = opener
        self.exports = unique_names([read_export(folder, settings) for folder in folders])
        self.slots = {e.name: Slot(e) for e in self.exports}
        self.retired_tokens = 0  # tokens of the engines closed so far (tokens_total stays a counter)
        self.retired_speculation: dict[str, int] | None = None  # the same for speculation_counts
        self._languages: list[dict[str, Any]] | None = None

    # -- choosing an export -------------------------------------------------------------------------

    def find(self, model: str) -> ExportInfo:
        for export in self.exports:
            if model == export.name or model in export.aliases:
                return export
        raise UnknownModel(f"no model {model!r}; this server serves {', '.join(self.names())} (GET /v1/models)",
                           options={"model": model})

    def pick(self, model: str | None, source: str | None, target: str | None) -> list[Leg]:
        """A request's legs: the export `model` names (with the request's codes, which it checks), else the
        route from `source` into `target`; the one export when there is one and neither is given."""
        if model is not None:
            return [Leg(self.find(model), source, target)]
        if target is None:
            if len(self.exports) == 1:
                return [Leg(self.exports[0], source, None)]
            raise InputError(f"this server serves {len(self.exports)} exports: name one with {{model}} (GET "
                             f"/v1/models), or give source_lang and target_lang", options={"model": None})
        return self.route(source, target)

    def names(self) -> list[str]:
        return [e.name for e in self.exports]

    def route(self, source: str | None, target: str) -> list[Leg]:
        """The legs that translate `source` (None: an export's default) into `target`: one export, else two
        through the pivot language; NoRoute naming the pair otherwise."""
        direct = next((e for e in self.exports if e.translates(source, target)), None)
        if direct is not None:
            return [self._leg(direct, source, target)]
        if source is not None:
            for first, second, code_in, code_out in self._pivots(source):
                if second.translates(code_out, target):
                    return [self._leg(first, source, code_in), self._leg(second, code_out, target)]
        pair = f"{source!r} into {target!r}, directly or through {self.pivot!r}" if source is not None else \
            f"into {target!r} from its default source (give the source language)"
        raise NoRoute(f"no export translates {pair}; GET /languages lists the pairs this server translates (an "
                      f"export without language codes is chosen by model only)", options={"target_lang": target})

    def _pivots(self, source: str) -> list[tuple[ExportInfo, ExportInfo, str, str]]:
        """(first, second, first's pivot code, second's pivot code) for every pair of exports that pivot from `source`."""
        if two_letter(source) == self.pivot:
            return []
        out = []
        for first in self.exports:
            code_in = first.code_for("target", self.pivot)
            if code_in and first.view.sources and first.translates(source, code_in):
                for second in self.exports:
                    code_out = second.code_for("source", self.pivot)
                    if code_out and second is not first:
                        out.append((first, second, code_in, code_out))
        return out

    def sources_into(self, target: str) -> list[str]:
        """The source codes from which `target` is reached (directly or through the pivot), sorted."""
        return [entry["code"] for entry in self.languages() if target in entry["targets"]]

    @staticmethod
    def _leg(export: ExportInfo, source: str | None, target: str) -> Leg:
        view = export.view
        return Leg(export, source if view.sources else None, target)

    def languages(self) -> list[dict[str, Any]]:
        """LibreTranslate's /languages over every export: each code with the targets it reaches, directly
        or through the pivot (not itself)."""
        if self._languages is None:
            targets = sorted({t for e in self.exports for t in e.view.targets})
            codes = sorted({c for e in self.exports for c in (*e.view.sources, *e.view.targets)})
            entries = []
            for code in codes:
                reached = {t for e in self.exports if e.view.sources and code in e.view.sources for t in e.view.targets}
                reached |= {t for e in self.exports if not e.view.sources and code in e.view.targets
                            for t in e.view.targets}  # target codes only (multi-target Marian): as one server lists
                for _, second, _, code_out in self._pivots(code):
                    reached |= {t for t in second.view.targets if second.translates(code_out, t)}
                entries.append({"code": code, "name": code, "targets": [t for t in targets if t in reached - {code}]})
            self._languages = entries
        return self._languages

    # -- engines ------------------------------------------------------------------------------------

    @asynccontextmanager
    async def lease(self, export: ExportInfo) -> AsyncIterator[Any]:
        """`export`'s engine, opened if it is not, held open until the block ends."""
        slot = self.slots[export.name]
        slot.users += 1
        try:
            async with slot.lock:
                if slot.engine is None:
                    await self._make_room(slot)
                    slot.engine = await asyncio.to_thread(self._open, export)
                    slot.loads += 1
            yield slot.engine
        finally:
            slot.users -= 1
            slot.last_used = time.monotonic()
            await self._make_room(None)

    def _open(self, export: ExportInfo) -> Any:
        settings = check_batching(resolve_batching(dataclasses.replace(self.settings, folder=export.folder)))
        log.info("opening %s (%s batching)", export.name, settings.batching)
        try:
            return self.opener(settings).start()
        except Exception as exc:  # a folder changed or broken since the server started: not the request's fault
            log.exception("opening %s failed", export.name)
            raise LoadFailed(f"model {export.name!r} could not be opened: {exc}") from None

    async def _make_room(self, loading: Slot | None) -> None:
        """Close the least recently used idle engines while more are open (with `loading`) than max_loaded."""
        if self.max_loaded is None:
            return
        while len(self.loaded()) + (loading is not None) > self.max_loaded:
            idle = [s for s in self.slots.values() if s.engine is not None and not s.users and s is not loading]
            if not idle:
                log.warning("every open engine is in use: %d open, beyond --max-loaded %d", len(self.loaded()) + 1,
                            self.max_loaded)
                return
            await self.unload(min(idle, key=lambda s: s.last_used))

    async def unload(self, slot: Slot) -> bool:
        """Close `slot`'s engine if nothing uses it (what it has queued finishes first)."""
        async with slot.lock:
            if slot.engine is None or slot.users:
                return False
            engine, slot.engine = slot.engine, None
            await asyncio.to_thread(engine.close)
            self.retired_tokens += engine.tokens_total
            self.retired_speculation = self._speculation([engine], self.retired_speculation)
        log.info("closed %s", slot.export.name)
        return True

    async def sweep(self) -> list[str]:
        """Close the engines idle for idle_unload seconds or more; their names."""
        if self.idle_unload is None:
            return []
        now, closed = time.monotonic(), []
        for slot in list(self.slots.values()):
            if slot.engine is not None and not slot.users and now - slot.last_used >= self.idle_unload:
                if await self.unload(slot):
                    closed.append(slot.export.name)
        return closed

    async def watch(self) -> None:
        """Sweep every quarter of idle_unload (at most every 5 s) until cancelled (the server's lifespan)."""
        while self.idle_unload is not None:
            await asyncio.sleep(min(self.idle_unload / 4, 5.0))
            await self.sweep()

    async def close(self) -> None:
        for slot in self.slots.values():
            if slot.engine is not None:
                engine, slot.engine = slot.engine, None
                await asyncio.to_thread(engine.close)

    def loaded(self) -> list[str]:
        return [name for name, slot in self.slots.items() if slot.engine is not None]

    # -- the engines together (serve.metrics, /healthz) -----------------------------------------------

    def _engines(self) -> list[Any]:
        return [slot.engine for slot in self.slots.values() if slot.engine is not None]

    @property
    def queue_depth(self) -> int:
        return sum(engine.queue_depth for engine in self._engines())

    @property
    def active(self) -> int:
        return sum(engine.active for engine in self._engines())

    @property
    def tokens_total(self) -> int:
        return self.retired_tokens + sum(engine.tokens_total for engine in self._engines())

    def speculation_counts(self) -> dict[str, int] | None:
        """The in-flight engines' prompt-lookup counters summed, the closed ones' included (None: no export
        here has decoded in flight)."""
        return self._speculation(self._engines(), self.retired_speculation)

    @staticmethod
    def _speculation(engines: list[Any], start: dict[str, int] | None) -> dict[str, int] | None:
        """`start` plus each of `engines`' speculation_counts (those that have them), key by key."""
        counts = [c() for c in (getattr(e, "speculation_counts", None) for e in engines) if c is not None]
        if not counts:
            return start
        totals = dict(start or {})
        for each in counts:
            for key, value in each.items():
                totals[key] = totals.get(key, 0) + value
        return totals

    @property
    def config(self) -> Any:
        """Rows of all open engines together, for the occupancy gauge (at least one engine's)."""
        return SimpleNamespace(max_batch=self.settings.engine.max_batch * max(1, len(self._engines())))
