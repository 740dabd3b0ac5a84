"""The top of the serve tree: uvicorn running serve.app over an engine opened by serve.engine, with a
graceful SIGTERM and a ready hook."""

from __future__ import annotations

import signal
from typing import Any, Callable

from .app import create_app
from .engine import ServeSettings, check_bind, open_engine, resolve_batching
from .web import check_port


def run_server(settings: ServeSettings, host: str = "127.0.0.1", port: int = 8080,
               on_ready: Callable[[str], None] | None = None, registry: Any = None) -> None:
    """Serve until SIGTERM or Ctrl+C: stop accepting, finish what is in flight, return (exit 0).

    `on_ready(batching)` runs once the server accepts requests (engine started, port bound): a
    "serving on" line printed before would promise a server that may still fail to start. With a
    serve.registry.ModelRegistry, the server of its exports (serve.multi), each opened on first use."""
    import uvicorn

    check_bind(host, settings.api_key)
    check_port(host, port)  # uvicorn's own failure is a log line and exit 3, after the model loaded
    if registry is not None:  # its manifests were read and checked when it was made
        from .multi import create_multi_app

        app = create_multi_app(settings, registry)
    else:
        settings = resolve_batching(settings)
        app = create_app(settings, open_engine(settings))  # before binding: a bad folder fails fast, with one line
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=None)
    server = uvicorn.Server(config)
    startup = server.startup

    async def startup_then_announce(sockets: Any = None) -> None:
        await startup(sockets)
        if server.started and on_ready:  # not started: the lifespan failed (binding failing exits)
            on_ready(settings.batching)

    server.startup = startup_then_announce  # type: ignore[method-assign]  # uvicorn has no ready hook
    # uvicorn re-raises the signal that stopped it once it has shut down cleanly; ignore that one so
    # a graceful SIGTERM ends the process with 0 rather than 143.
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM,)}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
