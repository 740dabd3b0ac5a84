"""`tfm-export serve-web`: the browser demo (runtimes/web) over one export folder."""

from __future__ import annotations

from pathlib import Path

import click

from .common import library_errors, main_group


@main_group.command("serve-web")
@click.argument("folder", metavar="OUT", type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; keep it local (anything else is reachable from other machines).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="Port to listen on; 0 picks a free one.")
@click.option("--web-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="A runtimes/web folder, after `npm ci` there (onnxruntime-web, @huggingface/tokenizers; "
                   "default: the page installed with tfm-export).")
@library_errors
def serve_web_command(folder: Path, host: str, port: int, web_dir: Path | None) -> None:
    """Serve the browser page (onnxruntime-web, WASM) for the export in OUT until Ctrl+C.

    The page loads OUT from /export/ (its graphs, and tokenizer.json when it has one), translates what you
    type (a multilingual export: in the languages you pick) and shows the per-token latency.
    """
    from ..serve.web import make_server

    server = make_server(folder, host, port, web_dir)
    click.echo(f"serving {folder} on http://{server.server_address[0]}:{server.server_address[1]}/ "
               f"(Ctrl+C stops)", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
