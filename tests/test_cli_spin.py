"""--spin beside an --assistant (cli.common.spin_beside): a model and its draft take turns on the cores, and a
pool left spinning after one session's run takes the next one's (docs/speech.md), so `generate` and `transcribe`
open every session without spinning when an assistant is given, unless --spin is."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
from click.testing import CliRunner

import tfm_export.runtime as runtime
from tfm_export.cli import cli


class Opened(Exception):
    """Raised by the stand-in open_export once it has seen every session's options."""


@pytest.fixture
def opened(monkeypatch):
    """The RuntimeOptions each open_export call got (the first one stops the command)."""
    seen = []

    def open_export(folder, device, options=None):
        seen.append(options)
        raise Opened(str(folder))

    monkeypatch.setattr(runtime, "open_export", open_export)
    return seen


@pytest.fixture
def wav(tmp_path):
    path = tmp_path / "a.wav"
    soundfile.write(path, np.zeros(1600, np.float32), 16000)
    return path


@pytest.mark.parametrize("flags, spins", [((), True), (("--assistant", "draft"), False),
                                          (("--assistant", "draft", "--spin"), True), (("--no-spin",), False)])
def test_generate_and_transcribe_spin_unless_an_assistant_runs_beside(opened, wav, tmp_path, flags, spins):
    for command in (["generate", str(tmp_path), "--text", "hello"], ["transcribe", str(tmp_path), str(wav)]):
        opened.clear()
        result = CliRunner().invoke(cli, [*command, *(str(tmp_path) if flag == "draft" else flag for flag in flags)])
        assert isinstance(result.exception, Opened), result.output
        assert [options.spin_wait for options in opened] == [spins], command
