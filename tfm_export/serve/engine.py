"""What a server runs: its settings, the engine opened from them, request checks, and uvicorn.

Kept apart from serve.app so Ray Serve replicas and benchmarks build the same engine the same way.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import InputError
from ..runtime.generation import GenerationConfig
from .batcher import ENGINES, EngineConfig, one_row
from .web import is_loopback

log = logging.getLogger(__name__)

API_KEY_ENV = "TFM_EXPORT_API_KEY"


class LimitError(InputError):
    """A request over one of the server's size limits (HTTP 413); `options` names the limit."""


# batching -> (engine, whether it needs the static-cache decoder); "single" is one request at a time
BATCHING = {"inflight": ("inflight", True), "request": ("request", False), "single": ("request", False)}


@dataclass(frozen=True)
class ServeSettings:
    """One server's model, batching and limits (plain data: Ray ships it to every replica)."""

    folder: str  # the export folder
    device: str = "cpu"  # cpu, cuda, cuda:N or auto
    batching: str = "inflight"  # inflight | request (collect window_ms, decode to the end) | single
    engine: EngineConfig = field(default_factory=EngineConfig)
    max_texts: int = 32  # sources per request; more is 413
    threads: int | None = None  # ORT intra-op threads (None: ORT's default)
    spin: bool = False  # idle ORT threads spin between ops (off: sessions run by turns, see cli.serve_cmd)
    api_key: str | None = None  # when set, every request but /healthz and the docs needs Bearer KEY
    cors_origins: tuple[str, ...] = ()  # web pages' origins allowed to call (serve.cors); none: no CORS

    def __post_init__(self) -> None:
        if self.batching not in BATCHING:
            raise InputError(f"unknown {{batching}}; use one of {', '.join(BATCHING)}",
                             options={"batching": self.batching})


def open_engine(settings: ServeSettings) -> Any:
    """Open the export (with its static-cache decoder for in-flight batching) and build the engine."""
    from ..runtime import RuntimeOptions, open_export
    from ..runtime.static import GRAPH_NAME
    from ..manifest import load_manifest

    kind, needs_static = BATCHING[settings.batching]
    if needs_static and GRAPH_NAME not in load_manifest(Path(settings.folder), verify_hashes=False).graphs:
        raise InputError(f"{settings.folder} has no {GRAPH_NAME}.onnx, which in-flight batching needs; re-export "
                         f"with --cuda-graph, or serve with request-level {{batching}}",
                         options={"batching": "request"})
    options = RuntimeOptions(intra_op_threads=settings.threads, spin_wait=settings.spin, cuda_graph=needs_static)
    model = open_export(settings.folder, settings.device, options)
    config = settings.engine
    if settings.batching == "single":
        config = dataclasses.replace(config, max_batch=1, window_ms=0)
    return ENGINES[kind](model, config)


def prepare_sources(model: Any, settings: ServeSettings, texts: Sequence[str] | None,
                    ids: Sequence[Sequence[int]] | None, max_new_tokens: int | None,
                    options: Mapping[str, Any] | None = None) -> tuple[list[list[int]], int, GenerationConfig]:
    """Checked sources, their token budget and decoding settings (`options`: GenerationConfig fields
    over the export's defaults); InputError naming the limit or option otherwise."""
    from ..runtime.decoding import source_batch

    if (texts is None) == (ids is None):
        raise InputError("give exactly one of {texts} or ids", options={"texts": None})
    given = texts if texts is not None else ids
    if not given:
        raise InputError("{texts} is empty; send at least one source", options={"texts": None})
    if len(given) > settings.max_texts:
        raise LimitError(f"{len(given)} sources exceed the limit of {settings.max_texts} per request "
                         f"({{max_texts}}); split the request", options={"max_texts": None})
    sources = [model.tokenizer.encode(t) for t in texts] if texts is not None else [list(s) for s in ids]
    cfg = model.config
    cap = settings.engine.max_src_len  # the server's own limit, when tighter than the model's
    longest, limit = (cap, "max_src_len") if cap and cap < cfg.max_len else (cfg.max_len, "max_len")
    for n, source in enumerate(sources, 1):
        if len(source) > longest:
            raise LimitError(f"source {n} has {len(source)} tokens, more than the {{{limit}}} of {longest}; "
                             f"shorten or split it", options={limit: None})
        source_batch([source], cfg)  # empty, out-of-vocabulary or non-int64 ids: InputError
    config = model.generation_config(**dict(options or {}), max_new_tokens=max_new_tokens)
    # Jobs of one cache row (serve.batcher.Job.in_rows) decode in the opened cache, whose static
    # decoder may hold fewer slots than max_len (--static-slots); the greedy budget says how many.
    budget = GenerationConfig(max_new_tokens=max_new_tokens) if one_row(config) else config
    return sources, model.steps_for(budget), config


def check_bind(host: str, api_key: str | None) -> None:
    """Loopback is open; any other address needs an API key (other machines can reach it)."""
    if not is_loopback(host) and not api_key:
        raise InputError(f"binding {host} makes the server reachable from other machines; set {{api_key}} "
                         f"(or {API_KEY_ENV}) or bind 127.0.0.1", options={"api_key": None})


def run_server(settings: ServeSettings, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serve until SIGTERM or Ctrl+C: stop accepting, finish what is in flight, return (exit 0)."""
    import uvicorn

    from .app import create_app

    check_bind(host, settings.api_key)
    engine = open_engine(settings)  # before binding: a bad folder fails fast, with one line
    config = uvicorn.Config(create_app(settings, engine), host=host, port=port, log_level="warning",
                            timeout_graceful_shutdown=None)
    server = uvicorn.Server(config)
    # uvicorn re-raises the signal that stopped it once it has shut down cleanly; ignore that one so
    # a graceful SIGTERM ends the process with 0 rather than 143.
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM,)}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
