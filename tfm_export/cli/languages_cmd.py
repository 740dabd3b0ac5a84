"""`tfm-export languages FOLDER`: the language codes an export takes (--source-lang, --target-lang; a Whisper
export's `transcribe --language`)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .common import library_errors, main_group


@main_group.command("languages")
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object: source and target codes, and the default "
              "(a Whisper export: its spoken codes and the language it translates into).")
@library_errors
def languages_command(folder: Path, as_json: bool) -> None:
    """List the source and target language codes of the export in FOLDER (from its tokenizer); for a Whisper
    export, the spoken languages `transcribe --language` takes and whether it translates into English."""
    from ..manifest import load_manifest
    from ..text.languages import Languages

    manifest = load_manifest(folder, verify_hashes=False)
    if manifest.speech is not None:
        _speech_languages(manifest.speech, as_json)
        return
    languages = Languages.from_dict((manifest.tokenizer or {}).get("languages"))
    report = {"source": languages.codes("source"), "target": languages.codes("target"),
              "source_default": languages.source_default}
    if as_json:
        click.echo(json.dumps(report))
        return
    if not report["source"] and not report["target"]:
        click.echo("this model takes no language codes (it translates one pair, or its tokenizer marks none)")
        return
    for side in ("source", "target"):
        codes = report[side]
        click.echo(f"{side} ({len(codes)}): {' '.join(codes) if codes else '-'}")
    if languages.source_default:
        click.echo(f"default source: {languages.source_default}")


def _speech_languages(speech: dict, as_json: bool) -> None:
    """A Whisper export's languages: {"spoken": codes, "translate_into": "en" or null} with --json."""
    from ..runtime.speech.prompt import WhisperSettings

    settings = WhisperSettings.from_dict(speech)
    spoken, translates = settings.language_codes(), settings.translates()
    if as_json:
        click.echo(json.dumps({"spoken": spoken, "translate_into": "en" if translates else None}))
    elif not spoken:
        click.echo("spoken: English only (an English-only Whisper model: no --language, no --task translate)")
    else:
        click.echo(f"spoken ({len(spoken)}): {' '.join(spoken)} (transcribe --language CODE; default: detected)")
        if translates:
            click.echo("translates into: en (transcribe --task translate)")
