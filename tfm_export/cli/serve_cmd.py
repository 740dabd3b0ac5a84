"""`tfm-export serve`: the HTTP translation server (in-flight batching when the export has its static
decoder, else request-level), alone or on Ray Serve."""

from __future__ import annotations

import time
from pathlib import Path

import click

from ..serve.jobs import SPECULATE_BELOW
from .common import requires_extra, library_errors, main_group, ort_thread_options


# The server's limits as data: flag, default, help (each a positive integer).
LIMITS = (("--max-batch", 16, "Sources decoded together (rows of the running batch; in flight on CPU a step "
                             "runs only the rows in use, so a light load pays for what it uses)."),
          ("--max-queue", 64, "Sources waiting for a row; beyond it requests get 429 with Retry-After."),
          ("--max-texts", 32, "Sources per request; more get 413."),
          ("--max-beams", 8, "Cache rows one source may take: num_beams, sampled num_return_sequences "
                             "(LibreTranslate: alternatives + 1); more get 422 (LibreTranslate: 400)."),
          ("--max-rows", 128, "Decoder rows one request may take: sources x rows per source (num_beams or "
                              "sampled num_return_sequences); more get 413 (LibreTranslate: 400). The default "
                              "takes --max-texts sources at 4 beams."))


def limit_options(fn):
    for flag, default, text in reversed(LIMITS):
        fn = click.option(flag, type=click.IntRange(min=1), default=default, show_default=True, help=text)(fn)
    return fn


@main_group.command("serve")
@click.argument("folders", nargs=-1, type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; anything but loopback needs --api-key.")
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True, help="Port to listen on.")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda, cuda:N or auto.")
@click.option("--batching", type=click.Choice(["auto", "inflight", "request", "single"]), default="auto",
              show_default=True, help="auto: inflight when the export supports it, else request; inflight: requests "
                                      "join a running batch at the next step (needs an export made with "
                                      "--static-slots N or --cuda-graph); request: collect --window-ms, decode "
                                      "each batch to its end; single: one request at a time.")
@limit_options
@click.option("--max-src-len", type=click.IntRange(min=1), default=None,
              help="Longest source accepted (default: the model's max_len; longer get 413). In-flight rows are "
                   "sized to it, so a smaller value makes every step cheaper.")
@click.option("--speculate-below", type=click.IntRange(min=0), default=SPECULATE_BELOW, show_default=True,
              metavar="N", help="In-flight batching: a request with prompt_lookup_num_tokens speculates (its own "
                                "decoder calls) when fewer than N rows are in flight or queued as it joins, else it "
                                "decodes as a plain row of the shared step (the same ids); 0: never speculate.")
@click.option("--window-ms", type=click.FloatRange(min=0), default=5.0, show_default=True,
              help="--batching request: how long the first request waits for others.")
@click.option("--api-key", envvar="TFM_EXPORT_API_KEY", default=None,
              help="Require `Authorization: Bearer KEY` (env TFM_EXPORT_API_KEY); needed to bind beyond loopback.")
@click.option("--cors-origin", "cors_origins", multiple=True,
              help="Let web pages of this origin call the server (e.g. http://127.0.0.1:8000, the page of "
                   "`tfm-export serve-web`); repeat for more. Default: none (browsers refuse other origins).")
@click.option("--max-upload-mb", type=click.FloatRange(min=0, min_open=True), default=25.0, show_default=True,
              help="Whisper exports: the largest audio upload (OpenAI's limit); larger get 413.")
@click.option("--max-audio-seconds", type=click.FloatRange(min=0, min_open=True), default=3600.0,
              show_default=True, help="Whisper exports: the longest recording; longer get 413.")
@click.option("--audio-workers", type=click.IntRange(min=1), default=None,
              help="Whisper exports: recordings transcribed at once, each on a thread of its own (--max-queue "
                   "more wait; beyond them 429). Default: --max-batch with in-flight batching (their windows "
                   "share the decoder's steps), else 2.")
@click.option("--upload-dir", type=click.Path(file_okay=False, exists=True), default=None,
              help="Whisper exports: where uploads are spooled while they are transcribed (removed after "
                   "each request); default: the system's temporary folder.")
# No spinning by default: a server runs several sessions by turns (the encoder for each joining
# request, the decoder each step, the search lane), and threads spinning in an idle session take the
# cores of the busy one (in-flight on 2 cores: 545 -> 722 tokens/s, BENCHMARKS.md).
@ort_thread_options(spin=False)
@click.option("--idle-unload", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="Several exports: close an export's engine once no request has used it for SECONDS (it opens "
                   "again on the next request). Default: engines stay open.")
@click.option("--max-loaded", type=click.IntRange(min=1), default=None, metavar="N",
              help="Several exports: at most N engines open at once; opening another closes the least recently "
                   "used idle one. Default: no limit.")
@click.option("--pivot", default="en", show_default=True, metavar="LANG",
              help="Several exports: the language (two-letter code) a pair without an export of its own is "
                   "translated through, with one export into LANG and another out of it.")
@click.option("--ray", "use_ray", is_flag=True, help="Deploy on Ray Serve (the `ray` extra) instead of one process.")
@click.option("--replicas", type=click.IntRange(min=1), default=1, show_default=True,
              help="--ray: replicas, each with its own batcher.")
@click.option("--write-config", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a Ray Serve config (for `serve deploy`) with these settings and exit.")
@library_errors
def serve_command(folders: tuple[Path, ...], host: str, port: int, device: str, batching: str, max_batch: int,
                  max_queue: int, max_texts: int, max_beams: int, max_rows: int, max_src_len: int | None,
                  speculate_below: int, window_ms: float, max_upload_mb: float, max_audio_seconds: float,
                  audio_workers: int | None, upload_dir: str | None, api_key: str | None,
                  cors_origins: tuple[str, ...], threads: int | None, spin: bool, idle_unload: float | None,
                  max_loaded: int | None, pivot: str, use_ray: bool, replicas: int, write_config: Path | None) -> None:
    """Serve the export in FOLDER over HTTP: POST /v1/translate, LibreTranslate's POST /translate and
    GET /languages (a text model) or OpenAI's POST /v1/audio/transcriptions and /v1/audio/translations
    (a Whisper export); GET /healthz, /metrics, docs at /docs.

    Several text exports (FOLDER FOLDER ..., or a folder of exports) share one server: a request picks one
    by `model` (GET /v1/models) or by its languages, through --pivot when no export translates the pair;
    each opens on first use (see --idle-unload, --max-loaded).

    SIGTERM or Ctrl+C stops accepting, finishes the requests in flight and exits 0.
    """
    from ..serve.batcher import EngineConfig
    from ..serve.cors import check_origins
    from ..serve.engine import ServeSettings, check_batching, check_bind, is_speech, resolve_batching
    from ..serve.module_exports import auto_request_note
    from ..serve.catalog import serves_several
    from ..serve.server import run_server
    from ..serve.web import check_port

    if not folders and write_config is None:
        raise click.UsageError("give the export FOLDER to serve")
    check_origins(cors_origins)
    fields = dict(device=device, batching=batching, engine=EngineConfig(max_batch, max_queue, window_ms, max_src_len,
                                                                     speculate_below),
                  max_texts=max_texts, threads=threads, spin=spin, api_key=api_key, cors_origins=cors_origins,
                  max_beams=max_beams, max_rows=max_rows)
    if serves_several(folders) or idle_unload is not None or max_loaded is not None:
        if use_ray or write_config is not None:
            raise click.UsageError("--ray and --write-config serve one export, without --idle-unload or --max-loaded")
        _serve_several(folders, host, port, (idle_unload, max_loaded, pivot), fields)
        return
    folder = folders[0] if folders else None
    settings = ServeSettings(str(folder.resolve()) if folder else "MODEL_FOLDER", **fields,
                             max_upload_mb=max_upload_mb, max_audio_seconds=max_audio_seconds,
                             audio_workers=audio_workers, upload_dir=upload_dir)
    if write_config is not None:
        from ..serve.ray_config import write_config as write

        write(write_config, settings, replicas, host, port)
        click.echo(f"wrote {write_config}; edit replicas there, then `serve deploy {write_config}`", err=True)
        return
    check_bind(host, api_key)
    if not use_ray:  # Ray may be serving this port already (RAY_ADDRESS); its proxy binds it, not us
        check_port(host, port)  # before the batching notice and the model: one line, not uvicorn's
    settings = check_batching(resolve_batching(settings))  # before binding; Ray's replicas get the same choice
    if batching == "auto" and settings.batching == "request":
        click.echo(auto_request_note(str(folder), is_speech(settings.folder)), err=True)
    if use_ray:
        _run_ray(settings, replicas, host, port)
        return
    run_server(settings, host, port, lambda kind: click.echo(
        f"serving {folder} on http://{host}:{port}/ with {KINDS[kind]} batching (docs at /docs; Ctrl+C stops)",
        err=True))


KINDS = {"inflight": "in-flight", "request": "request-level", "single": "one-at-a-time"}


def _serve_several(folders: tuple[Path, ...], host: str, port: int, unloading: tuple, fields: dict) -> None:
    """One server of several exports (serve.multi): their manifests checked now, each opened on first use;
    `unloading`: (idle_unload, max_loaded, pivot)."""
    from ..serve.engine import ServeSettings, check_bind
    from ..serve.catalog import export_folders
    from ..serve.registry import ModelRegistry
    from ..serve.server import run_server
    from ..serve.web import check_port

    check_bind(host, fields["api_key"])
    check_port(host, port)
    exports = export_folders(folders)
    settings = ServeSettings(exports[0], **fields)
    registry = ModelRegistry(settings, exports, *unloading)
    names = ", ".join(registry.names())
    run_server(settings, host, port, lambda _: click.echo(
        f"serving {len(registry.exports)} exports ({names}) on http://{host}:{port}/, each opened on first use "
        f"(docs at /docs; Ctrl+C stops)", err=True), registry=registry)


def _run_ray(settings, replicas: int, host: str, port: int) -> None:  # noqa: ANN001 (ServeSettings)
    requires_extra("ray", "serve --ray")
    from ..serve import ray_app

    ray_app.run(settings, replicas, host, port)
    click.echo(f"serving {settings.folder} on Ray Serve at http://{host}:{port}/ with {replicas} replica(s) "
               f"(Ctrl+C stops)", err=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        from ray import serve

        serve.shutdown()
