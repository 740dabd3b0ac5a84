"""`tfm-export init`: a randomly initialised checkpoint to try every command without training."""

from __future__ import annotations

from pathlib import Path

import click

from .common import library_errors, main_group, requires_extra


@main_group.command("init")
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--preset", type=click.Choice(["tiny", "base"]), default="tiny", show_default=True,
              help="Model size: tiny (tests, quick tries) or base (the paper's base sizes).")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed of the weights.")
@click.option("--force", is_flag=True, help="Replace OUT if it is a tfm-export checkpoint (any other file is never overwritten).")
@library_errors
def init_command(out: Path, preset: str, seed: int, force: bool) -> None:
    """Write a randomly initialised checkpoint to OUT (missing parent folders are created).

    OUT is written beside itself and renamed into place: a failure leaves no partial file.
    """
    requires_extra("export", "init")
    from ..model.presets import init_checkpoint

    if out.exists() and not force:
        raise click.ClickException(f"{out} exists; pass --force to overwrite it")
    config = init_checkpoint(out, preset, seed)
    click.echo(f"wrote {out}: preset {preset}, d_model {config.d_model}, {config.n_heads} heads, "
               f"{config.n_encoder_layers}+{config.n_decoder_layers} layers, vocab {config.tgt_vocab_size}")
