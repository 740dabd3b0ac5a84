"""`transcribe` end to end (runtime.speech.whisper, ExportedModel.transcribe, `tfm-export transcribe`) on a random
Whisper export, against transformers' `WhisperForConditionalGeneration.generate` of the same folder.

The folder is tests/whisper_fixtures.py's tiny layout (d_model 64, 3000-frame windows; 1 + 1 layers rather than
tiny's 4 + 4, which only made the export longer) with what a
published multilingual folder has and the fixture leaves out: the 1501 timestamp tokens (<|0.00|> ...
<|30.00|>, the embeddings resized) and generation_config.json's lang_to_id, task_to_id and
prev_sot_token_id. Both sides read the same features: our log-mel of the same samples (checked against
WhisperFeatureExtractor within 1e-4), padded to one window for short audio, all frames for long audio
(generate's long form). A random model's text is junk: the generated token ids are compared, with EOS
removed (generate's sequences / segments), and the detected language.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from whisper_fixtures import Layout, generate_ids, speech_folder  # noqa: E402
from tfm_export.audio import FeatureConfig, load_audio, log_mel, log_mel_spectrogram  # noqa: E402
from tfm_export.cli import cli  # noqa: E402
from tfm_export.errors import InputError  # noqa: E402
from tfm_export.runtime import open_export  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")
NEW = 12  # max_new_tokens per window: quick, and the same for both sides
RATE = 16000
# a segment's fields, in OpenAI's verbose_json order (its id aside)
SEGMENT_FIELDS = ["seek", "start", "end", "text", "tokens", "temperature", "avg_logprob", "compression_ratio",
                  "no_speech_prob"]
PROMPT = [None, 20, 21, 22]  # <|startofprev|> is set in `speech_folder`


def export(base, layout):
    """(export folder, transformers' model, the export opened) of speech_folder(layout)."""
    folder = speech_folder(base / "model", layout)
    out = base / "onnx"
    result = CliRunner().invoke(cli, [str(folder), "-o", str(out), "--no-validate"])
    assert result.exit_code == 0, result.output
    model = transformers.WhisperForConditionalGeneration.from_pretrained(str(folder), local_files_only=True).eval()
    return out, model, open_export(out, device="cpu")


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    """The tiny layout, multilingual: 3000-frame (30 s) windows; 1 + 1 layers (nothing here depends on the depth)."""
    return export(tmp_path_factory.mktemp("speech"), Layout(1, 1, 80, True, 1500))


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory):
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    path = tmp_path_factory.mktemp("wav") / "speech.wav"
    subprocess.run(["espeak-ng", "-w", str(path), "The quick brown fox jumps over the lazy dog."], check=True)
    return path


def synthetic(seconds: float, seed: int = 0) -> np.ndarray:
    """Tones that glide, in noise: float32 samples at 16 kHz."""
    t = np.arange(int(seconds * RATE)) / RATE
    rng = np.random.default_rng(seed)
    tone = 0.3 * np.sin(2 * np.pi * (220 + 80 * np.sin(0.7 * t)) * t) * (0.5 + 0.5 * np.sin(2.1 * t))
    return (tone + 0.02 * rng.standard_normal(t.shape)).astype(np.float32)


def reference(model, samples, detect: bool = True, **kwargs) -> tuple[list[int], int | None]:
    """generate's ids (EOS removed) on the features `transcribe` computes, and the first window's detected language."""
    return generate_ids(model, samples, detect, max_new_tokens=NEW, **kwargs)


def language_of(model, token_id: int) -> str:
    return next(k for k, v in model.generation_config.lang_to_id.items() if v == token_id)[2:-2]


def test_manifest_keeps_the_whisper_settings(whisper):
    out, model, runtime = whisper
    speech = json.loads((out / "manifest.json").read_text())["speech"]
    gen = model.generation_config
    assert speech["decoder_start_token_id"] == gen.decoder_start_token_id
    assert speech["lang_to_id"] == gen.lang_to_id and speech["task_to_id"] == gen.task_to_id
    assert speech["no_timestamps_token_id"] == gen.no_timestamps_token_id
    assert speech["prev_sot_token_id"] == gen.prev_sot_token_id
    assert "speech" not in json.loads((out / "manifest.json").read_text())["source"]
    jsonschema = pytest.importorskip("jsonschema")
    from tfm_export.manifest import schema

    jsonschema.validate(json.loads((out / "manifest.json").read_text()), schema())


def test_text_prompt_equals_get_prompt_ids(whisper, speech_wav):
    """A text prompt is tokenized as the tokenizer's get_prompt_ids: <|startofprev|>, " " + the text."""
    out, model, runtime = whisper
    tok = transformers.AutoTokenizer.from_pretrained(str(out.parent / "model"), local_files_only=True)
    text = "the quick brown fox"
    result = runtime.transcribe(speech_wav, language="de", prompt=text, max_new_tokens=NEW)
    prompt_ids = torch.tensor(tok.get_prompt_ids(text))
    ids, _ = reference(model, load_audio(speech_wav, RATE), language="de", prompt_ids=prompt_ids)
    assert result["ids"] == ids


def test_features_equal_feature_extractor(speech_wav):
    samples = load_audio(speech_wav, RATE)
    extractor = transformers.WhisperFeatureExtractor(feature_size=80)
    theirs = extractor(samples, sampling_rate=RATE, return_tensors="np").input_features[0]
    assert np.abs(log_mel(samples, FeatureConfig(n_mels=80)) - theirs).max() < 1e-4
    long = np.concatenate([samples] * 12)  # > 30 s: all frames, unpadded
    theirs = extractor(long, sampling_rate=RATE, truncation=False, padding="longest",
                       return_tensors="np").input_features[0]
    ours = log_mel_spectrogram(long, FeatureConfig(n_mels=80))
    assert ours.shape == theirs.shape and np.abs(ours - theirs).max() < 1e-4


CASES = {  # name -> (transcribe's arguments, generate's)
    "greedy": (dict(language="de"), dict(language="de")),
    "beam2": (dict(language="fr", num_beams=2), dict(language="fr", num_beams=2)),
    "timestamps": (dict(language="de", timestamps=True), dict(language="de", return_timestamps=True)),
    "detect": (dict(), dict(task="transcribe")),
    "translate": (dict(language="es", task="translate"), dict(language="es", task="translate")),
    "detect-timestamps": (dict(timestamps=True), dict(task="transcribe", return_timestamps=True)),
    "prompt": (dict(language="de", prompt=[20, 21, 22]), dict(language="de", prompt_ids=PROMPT)),
}


@pytest.mark.parametrize("audio", ["espeak", "synthetic"])
@pytest.mark.parametrize("case", list(CASES))
def test_transcribe_equals_generate(whisper, speech_wav, audio, case):
    out, model, runtime = whisper
    mine, theirs = CASES[case]
    source = speech_wav if audio == "espeak" else synthetic(7.5, seed=len(case))
    samples = load_audio(speech_wav, RATE) if audio == "espeak" else source
    result = runtime.transcribe(source, max_new_tokens=NEW, **mine)
    if "prompt_ids" in theirs:
        theirs = {**theirs, "prompt_ids": torch.tensor([model.generation_config.prev_sot_token_id, *PROMPT[1:]])}
    ids, detected = reference(model, samples, **theirs)
    assert result["ids"] == ids
    assert result["language"] == (mine.get("language") or language_of(model, detected))
    assert set(result) == {"text", "language", "segments", "ids"} and isinstance(result["text"], str)
    assert all(list(s) == SEGMENT_FIELDS for s in result["segments"])
    assert [t for s in result["segments"] for t in s["tokens"]] == result["ids"]


@pytest.mark.parametrize("case", ["greedy", "detect", "beam2"])
def test_long_form_equals_generate(whisper, case):
    """35 s: two windows or more (generate's long form: timestamps on, all frames)."""
    out, model, runtime = whisper
    mine, theirs = CASES[case]
    samples = synthetic(35.0, seed=3)
    result = runtime.transcribe(samples, max_new_tokens=NEW, **mine)
    ids, detected = reference(model, samples, return_timestamps=True, **theirs)
    assert result["ids"] == ids
    assert result["language"] == (mine.get("language") or language_of(model, detected))
    assert result["segments"] and result["segments"][-1]["end"] > 0


def test_bad_inputs_are_one_input_error(whisper, tmp_path):
    _, _, runtime = whisper
    (tmp_path / "notes.txt").write_text("not audio\n")
    for audio, match in ((tmp_path / "notes.txt", "notes.txt"), (b"", "empty"), (np.zeros(3, np.int16), "float"),
                         (np.full(1000, np.nan, np.float32), "NaN"), ([0.0, 0.1], "numpy")):
        with pytest.raises(InputError, match=match):
            runtime.transcribe(audio)
    with pytest.raises(InputError, match="language"):
        runtime.transcribe(synthetic(1.0), language="klingon")
    with pytest.raises(InputError, match="task"):
        runtime.transcribe(synthetic(1.0), task="summarize")
    with pytest.raises(InputError, match="max_seconds"):
        runtime.transcribe(synthetic(3.0), max_seconds=1.0)
    vocab = runtime.config.tgt_vocab_size
    with pytest.raises(InputError, match=f"prompt.* id {vocab} is out of range for the model's vocabulary of {vocab}"):
        runtime.transcribe(synthetic(1.0), prompt=[5, vocab])  # not ONNX Runtime's Gather error


def test_text_export_is_not_a_speech_model():
    from types import SimpleNamespace

    from tfm_export.runtime.speech.whisper import speech_settings

    with pytest.raises(InputError, match="not a speech model"):
        speech_settings(SimpleNamespace(manifest=SimpleNamespace(features=None, speech=None)))
    with pytest.raises(InputError, match="export the Whisper folder again"):
        speech_settings(SimpleNamespace(manifest=SimpleNamespace(features={"feature_size": 80}, speech=None)))


def test_cli(whisper, speech_wav, tmp_path):
    out, model, runtime = whisper
    runner = CliRunner()
    result = runner.invoke(cli, ["transcribe", str(out), str(speech_wav), str(speech_wav), "--json", "--language", "de",
                                 "--max-new-tokens", str(NEW)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert len(lines) == 2 and set(lines[0]) == {"file", "text", "language", "segments", "ids"}
    assert lines[0]["ids"] == runtime.transcribe(speech_wav, language="de", max_new_tokens=NEW)["ids"]
    result = runner.invoke(cli, ["transcribe", str(out), str(speech_wav), "--format", "srt", "--timestamps",
                                 "--language", "de", "--max-new-tokens", str(NEW)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("1\n00:00:") and " --> " in result.output
    result = runner.invoke(cli, ["transcribe", str(out), str(speech_wav), "--format", "vtt", "--language", "de",
                                 "--max-new-tokens", str(NEW)])
    assert result.exit_code == 0 and result.output.startswith("WEBVTT\n\n00:00:00.000 --> ")
    result = runner.invoke(cli, ["transcribe", str(out), str(speech_wav), "--max-new-tokens", str(NEW)])
    assert result.exit_code == 0 and result.output.strip() == runtime.transcribe(
        speech_wav, max_new_tokens=NEW)["text"].strip()
    (tmp_path / "bad.wav").write_bytes(b"RIFF0000WAVEnope")
    result = runner.invoke(cli, ["transcribe", str(out), str(tmp_path / "bad.wav")])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1 and "bad.wav" in result.output
    result = runner.invoke(cli, ["transcribe", str(out), str(speech_wav), "--language", "klingon"])
    assert result.exit_code != 0 and "klingon" in result.output and len(result.output.strip().splitlines()) == 1
    assert "its languages are en, de, fr, es, given" in result.output  # the model's own (a fixture of four)
    # --output-dir: each recording's transcript in DIR/NAME.FORMAT, what stdout gets without it; nothing replaced
    args = ["transcribe", str(out), str(speech_wav), "--format", "vtt", "--language", "de", "--max-new-tokens",
            str(NEW)]
    printed = runner.invoke(cli, args).output
    result = runner.invoke(cli, [*args, "--output-dir", str(tmp_path / "subs")])
    assert result.exit_code == 0 and (tmp_path / "subs" / f"{speech_wav.stem}.vtt").read_text() == printed
    assert sorted(p.name for p in (tmp_path / "subs").iterdir()) == [f"{speech_wav.stem}.vtt"]  # no leftovers
    result = runner.invoke(cli, [*args, "--output-dir", str(tmp_path / "subs")])
    assert result.exit_code == 1 and "exists; tfm-export writes new files only" in result.output
    assert (tmp_path / "subs" / f"{speech_wav.stem}.vtt").read_text() == printed
    result = runner.invoke(cli, [*args[:3], str(speech_wav), "--json", "--output-dir", str(tmp_path / "twice")])
    assert result.exit_code == 1 and "two inputs would write" in result.output and not (tmp_path / "twice").exists()
    # - reads a recording from standard input (ffmpeg ... | tfm-export transcribe FOLDER -), once, with no file name
    result = runner.invoke(cli, [*args[:2], "-", *args[3:]], input=speech_wav.read_bytes())
    assert result.exit_code == 0 and result.output == printed
    result = runner.invoke(cli, [*args, "-", "--output-dir", str(tmp_path / "piped")], input=b"")
    assert result.exit_code == 2 and "standard input) has no name" in result.output
    # every recording is checked before the first transcript is written: a missing one leaves nothing behind
    result = runner.invoke(cli, [*args, str(tmp_path / "nofile.wav"), "--output-dir", str(tmp_path / "some")])
    assert result.exit_code == 1 and "nofile.wav: no such file" in result.output and not (tmp_path / "some").exists()
    # `languages` lists what --language takes, and that --task translate writes English
    result = runner.invoke(cli, ["languages", str(out)])
    assert result.exit_code == 0 and result.output.splitlines() == [
        "spoken (4): en de fr es (transcribe --language CODE; default: detected)",
        "translates into: en (transcribe --task translate)"], result.output
    result = runner.invoke(cli, ["languages", str(out), "--json"])
    assert json.loads(result.output) == {"spoken": ["en", "de", "fr", "es"], "translate_into": "en"}


def test_english_only_model(tmp_path):
    """An English-only folder as base.en's (its vocabulary, no language or task; 400-frame (4 s) windows, so 10 s
    of audio is long-form), 1 + 1 layers rather than base.en's 6 + 6: what is English-only does not depend on the
    depth, and the deeper export took most of a minute of CI."""
    out, model, runtime = export(tmp_path, Layout(1, 1, 80, False, 200))
    for seconds, timestamps in ((3.0, False), (3.0, True), (10.0, False)):
        samples = synthetic(seconds, seed=5)
        result = runtime.transcribe(samples, timestamps=timestamps, max_new_tokens=NEW)
        ids, _ = reference(model, samples, detect=False, return_timestamps=timestamps or seconds > 4)
        assert result["ids"] == ids and result["language"] == "en"
    with pytest.raises(InputError, match="English-only"):
        runtime.transcribe(synthetic(1.0), task="translate")
    with pytest.raises(InputError, match="English-only"):
        runtime.transcribe(synthetic(1.0), language="de")
    result = CliRunner().invoke(cli, ["languages", str(out), "--json"])
    assert result.exit_code == 0 and json.loads(result.output) == {"spoken": [], "translate_into": None}
    assert "English only" in CliRunner().invoke(cli, ["languages", str(out)]).output
