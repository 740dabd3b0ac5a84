"""`tfm-export serve`: the HTTP translation server (in-flight batching when the export has its static
decoder, else request-level), alone or on Ray Serve."""

from __future__ import annotations

import time
from pathlib import Path

import click

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
@click.argument("folder", required=False, type=click.Path(path_type=Path))
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
@click.option("--ray", "use_ray", is_flag=True, help="Deploy on Ray Serve (the `ray` extra) instead of one process.")
@click.option("--replicas", type=click.IntRange(min=1), default=1, show_default=True,
              help="--ray: replicas, each with its own batcher.")
@click.option("--write-config", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a Ray Serve config (for `serve deploy`) with these settings and exit.")
@library_errors
def serve_command(folder: Path | None, host: str, port: int, device: str, batching: str, max_batch: int,
                  max_queue: int, max_texts: int, max_beams: int, max_rows: int, max_src_len: int | None,
                  window_ms: float, max_upload_mb: float, max_audio_seconds: float, audio_workers: int | None,
                  upload_dir: str | None, api_key: str | None, cors_origins: tuple[str, ...], threads: int | None,
                  spin: bool, use_ray: bool, replicas: int, write_config: Path | None) -> None:
    """Serve the export in FOLDER over HTTP: POST /v1/translate, LibreTranslate's POST /translate and
    GET /languages (a text model) or OpenAI's POST /v1/audio/transcriptions and /v1/audio/translations
    (a Whisper export); GET /healthz, /metrics, docs at /docs.

    SIGTERM or Ctrl+C stops accepting, finishes the requests in flight and exits 0.
    """
    from ..serve.batcher import EngineConfig
    from ..serve.cors import check_origins
    from ..serve.engine import ServeSettings, check_batching, check_bind, is_speech, resolve_batching
    from ..serve.module_exports import auto_request_note
    from ..serve.server import run_server
    from ..serve.web import check_port

    if folder is None and write_config is None:
        raise click.UsageError("give the export FOLDER to serve")
    settings = ServeSettings(str(folder.resolve()) if folder else "MODEL_FOLDER", device, batching,
                             EngineConfig(max_batch, max_queue, window_ms, max_src_len),
                             max_texts, threads, spin, api_key, cors_origins=cors_origins, max_beams=max_beams,
                             max_rows=max_rows, max_upload_mb=max_upload_mb, max_audio_seconds=max_audio_seconds,
                             audio_workers=audio_workers, upload_dir=upload_dir)
    check_origins(cors_origins)
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
