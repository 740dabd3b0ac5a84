"""#39, seed 001 from audio: the speech tutorial's export names its filterbank, so `transcribe` reads recordings.

The tutorial's model reads 80-dim filterbank frames (fbank_dim = 80); its readers make them with
torchaudio.compliance.kaldi.fbank(waveform, num_mel_bins=80) on torchaudio.load's samples. The export
declares that filterbank in its manifest (kaldi-native-fbank's options at torchaudio's defaults), and:
- the frames our runtime computes from an espeak-ng recording equal that recipe's (tests/kaldi_fbank_reference);
- `transcribe` on the WAV gives exactly the tokens of `generate --features` on those frames and of the
  tutorial's own eager decoding of them (greedy and beam);
- bad combinations (Whisper's options, no filterbank, too much audio, filterbank options that contradict
  the model) are one line each.
The model's position tables hold 256 frames here (2.56 s of audio); its weights are the seed's untrained
ones (the synthetic training of test_seed_speech teaches nothing about real speech: equality is the point).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest
import soundfile

import kaldi_fbank_reference as reference
import seed_speech as ss
from helpers import run_cli, run_cli_ok
from tfm_export.errors import ConfigError, TfmExportError
from tfm_export.filterbank import Filterbank
from tfm_export.importers import load_any
from tfm_export.manifest import load_manifest
from tfm_export.runtime import open_export
from tfm_export.runtime.speech.frames import audio_frames

ESPEAK = shutil.which("espeak-ng")
pytestmark = pytest.mark.skipif(ESPEAK is None, reason="espeak-ng is not installed (make test installs it as root)")

RATE, FRAMES, STEPS, BEAMS = 16000, 256, 12, 3
OPTIONS = {"heads": ss.HEADS, "bos_id": ss.BOS, "eos_id": ss.EOS}
LOUD = np.log(1e6)  # bins within 60 dB of their frame's loudest: above both implementations' float32 rounding


@pytest.fixture(scope="module")
def tutorial():
    return ss.seed_001(seed=3, tgt_len=FRAMES).eval()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("seed001_audio")


@pytest.fixture(scope="module")
def export(tutorial, folder):
    path = ss.save_state_dict(tutorial, folder / "model.pt")
    run_cli_ok(path, "--heads", ss.HEADS, "--bos-id", ss.BOS, "--eos-id", ss.EOS, "-o", folder / "onnx")
    return folder / "onnx"


@pytest.fixture(scope="module")
def wav(folder):
    path = folder / "words.wav"
    subprocess.run([ESPEAK, "-w", str(path), "seven three nine"], check=True, capture_output=True, timeout=60)
    assert soundfile.info(str(path)).samplerate != RATE  # espeak-ng speaks at 22.05 kHz: resampled on reading
    return path


@pytest.fixture(scope="module")
def frames(export, wav):
    return audio_frames(load_manifest(export), wav)[0]


def test_manifest_names_the_filterbank(export):
    data = json.loads((export / "manifest.json").read_text())
    assert data["filterbank"]["kind"] == "kaldi-fbank" and data["filterbank"]["num_mel_bins"] == ss.FBANK_DIM
    manifest = load_manifest(export)
    assert manifest.filterbank == Filterbank(num_mel_bins=ss.FBANK_DIM)  # torchaudio's defaults, 80 bins
    assert (manifest.filterbank.dither, manifest.filterbank.sample_scale, manifest.filterbank.normalize) == (
        0.0, 1.0, "none")
    assert "filterbank" not in manifest.source  # the manifest's own section, not the import's meta


def test_frames_equal_torchaudios_kaldi_fbank(frames, wav):
    """What the tutorial's readers compute, against what the export's declaration computes."""
    from tfm_export.audio import load_audio

    samples = load_audio(wav, RATE)
    theirs = reference.fbank(samples, ss.FBANK_DIM)
    assert frames.dtype == np.float32 and frames.shape == theirs.shape == (1 + (len(samples) - 400) // 160, 80)
    diff = np.abs(frames - theirs)
    loud = theirs > theirs.max(axis=1, keepdims=True) - LOUD
    print(f"max |ours - torchaudio's recipe| {diff.max():.2e} (bins within 60 dB of the frame's peak: "
          f"{diff[loud].max():.2e}, {loud.mean():.0%} of them), mean {diff.mean():.1e}")
    # The two implementations round differently in float32 (kaldi-native-fbank's mel filters differ from
    # torchaudio's by up to 2e-5), which shows as ~1e-4 in the log; near-silent bins differ more.
    assert diff[loud].max() < 2e-4 and diff.mean() < 2e-5 and loud.mean() > 0.6


def test_transcribe_equals_generate_features_and_the_tutorial(tutorial, export, wav, frames, tmp_path):
    np.save(tmp_path / "frames.npy", frames)
    for beams in (1, BEAMS):
        flags = ("--num-beams", beams, "--max-new-tokens", STEPS, "--device", "cpu")
        heard = json.loads(run_cli_ok("transcribe", export, wav, "--json", *flags).output)
        generated = json.loads(run_cli_ok("generate", export, "--features", tmp_path / "frames.npy", "--json",
                                          *flags).output)
        eager = (ss.tutorial_greedy(tutorial, frames, STEPS) if beams == 1
                 else ss.tutorial_beam(tutorial, frames, STEPS, BEAMS))
        assert heard["ids"] == generated["ids"] == eager, beams
        assert heard["text"] == " ".join(map(str, eager))  # no tokenizer: the ids, as generate prints them
        assert heard["segments"] == [{"start": 0.0, "end": pytest.approx(len(frames) / 100, abs=0.03),
                                      "text": heard["text"]}]
    assert len(set(eager)) > 1  # not a trivial decoding
    model = open_export(export, device="cpu")
    assert model.transcribe(str(wav), num_beams=BEAMS, max_new_tokens=STEPS)["ids"] == eager
    assert model.transcribe(wav.read_bytes(), max_new_tokens=STEPS)["ids"] == ss.tutorial_greedy(
        tutorial, frames, STEPS)


def _no_filterbank(export, tmp_path):
    """A copy of the export whose manifest declares no filterbank (as `--frontend none` writes it)."""
    copy = shutil.copytree(export, tmp_path / "nofb")
    data = json.loads((copy / "manifest.json").read_text())
    del data["filterbank"]
    (copy / "manifest.json").write_text(json.dumps(data))
    return copy


def _long_wav(tmp_path):
    soundfile.write(str(tmp_path / "long.wav"), np.random.default_rng(0).uniform(-0.3, 0.3, 3 * RATE), RATE)
    return tmp_path / "long.wav"


BAD_TRANSCRIBE = {
    "language": (lambda e, w, t: (e, w, "--language", "en"), "--language is Whisper's"),
    "timestamps and prompt": (lambda e, w, t: (e, w, "--timestamps", "--prompt", "x"),
                              "--timestamps and --prompt are Whisper's"),
    "translate": (lambda e, w, t: (e, w, "--task", "translate"), "--task is Whisper's"),
    "no filterbank": (lambda e, w, t: (_no_filterbank(e, t), w), "declares no filterbank"),
    "too long": (lambda e, w, t: (e, _long_wav(t)), "more than the model's max_len (256 frames"),
}


@pytest.mark.parametrize("case", BAD_TRANSCRIBE)
def test_bad_transcribe_is_one_line(export, wav, tmp_path, case):
    args, expected = BAD_TRANSCRIBE[case]
    result = run_cli("transcribe", *args(export, wav, tmp_path), "--device", "cpu")
    lines = result.output.strip().splitlines()
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert len(lines) == 1 and lines[0].startswith("Error: ") and expected in lines[0], result.output


@pytest.mark.parametrize("options, message", [
    ({"fbank": {"num_mel_bins": 40}}, "gives 40 values per frame (num_mel_bins 40) but the model reads frames of 80"),
    ({"fbank": {"use_energy": True, "num_mel_bins": 80}}, "gives 81 values per frame"),
    ({"frontend": "none", "fbank": {"dither": 1.0}}, "declares no filterbank; drop one"),
    ({"fbank": {"window_type": "gauss"}}, "window_type must be one of povey"),
])
def test_filterbank_options_that_contradict_the_model(folder, export, options, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        load_any(folder / "model.pt", options={**OPTIONS, **options})
    assert "\n" not in str(info.value)


def test_filterbank_options_are_read_and_checked(folder, export):
    checkpoint = load_any(folder / "model.pt", options={**OPTIONS, "fbank": {"use_energy": True, "sample_scale": 32768}})
    assert checkpoint.meta["filterbank"]["num_mel_bins"] == 79 and checkpoint.meta["filterbank"]["use_energy"]
    assert "filterbank" not in load_any(folder / "model.pt", options={**OPTIONS, "frontend": "none"}).meta
    for flags, expected in ((("--fbank", "bogus=1"), "'bogus=1' is not KEY=VALUE"),
                            (("--fbank", "snip_edges=maybe"), "snip_edges takes a bool"),
                            (("--frontend", "none", "--fbank", "dither=0.5"), "--fbank KEY=VALUE sets filterbank")):
        result = run_cli(folder / "model.pt", *sum((("--" + k.replace("_", "-"), v) for k, v in OPTIONS.items()), ()),
                         *flags, "-o", folder / "never")
        assert result.exit_code != 0 and "Traceback" not in result.output and expected in result.output, result.output
        assert not (folder / "never" / "manifest.json").exists()


def test_a_token_model_takes_no_frontend(tmp_path):
    from tfm_export.config import TransformerConfig
    from tfm_export.importers.frontend import declare_frontend
    from tfm_export.model.checkpoint import Checkpoint

    checkpoint = Checkpoint(TransformerConfig(src_vocab_size=12, tgt_vocab_size=12), {})
    assert declare_frontend(checkpoint, {}, "kaldi-fbank") is checkpoint and "filterbank" not in checkpoint.meta
    with pytest.raises(ConfigError, match="reads tokens, not frames"):
        declare_frontend(checkpoint, {"frontend": "kaldi-fbank"}, "none")


def test_manifest_filterbank_is_checked(export, tmp_path):
    copy = shutil.copytree(export, tmp_path / "edited")
    data = json.loads((copy / "manifest.json").read_text())
    data["filterbank"]["frame_shift"] = 10
    (copy / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(TfmExportError, match="filterbank"):
        load_manifest(copy)
