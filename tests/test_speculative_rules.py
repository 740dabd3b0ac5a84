"""Speculative decoding under rules that read the ids so far (runtime.decode.checking.ProcessorCheck): each drafted
position is processed with the history extended by the draft before it, so the output is the plain decode's.

- Text: greedy decoding with no_repeat_ngram_size, repetition_penalty, min_new_tokens or forced EOS (TokenPicker's
  processors) speculates with prompt lookup and with a draft export, and gives plain greedy's ids under the same
  processors, on the tiny model and on the trained fixtures.
- Whisper: transcribe(assistant=, prompt_lookup_num_tokens=) on the trained whisper-digits export
  (tests/conftest.py digits_export), held-out espeak-ng speech (models/whisper-digits/speech.py): short
  recordings (one window, language detected or given, with and without timestamps, word timestamps) and a long
  one (four windows and more, with and without conditioning on the previous text, the temperature fallback)
  give plain greedy transcribe's ids, text and segments (times and tokens equal; avg_logprob and no_speech_prob
  up to float rounding), drafted by prompt lookup, by the export itself and by its int8 variant; drafts are
  accepted (fewer decoder calls than ids). What cannot speculate is refused in one line. The trained draft
  (models/whisper-digits/draft: 2 + 1 layers, the model's tokenizer) drafts as a smaller model does.
"""

from __future__ import annotations

import functools
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import hf_fixtures
from helpers import run_cli, run_cli_ok
from tfm_export.errors import InputError
from tfm_export.runtime import open_export
from tfm_export.runtime.decode import speculative
from tfm_export.runtime.decode.draft_length import DraftLength
from tfm_export.runtime.decode.loop import DecodeTimings
from tfm_export.runtime.options.generation import GREEDY

DIGITS = Path(__file__).resolve().parents[1] / "models" / "whisper-digits"
PROCESSED = {"ngram": dict(no_repeat_ngram_size=2), "penalty": dict(repetition_penalty=1.3),
             "both": dict(no_repeat_ngram_size=3, repetition_penalty=1.2, min_new_tokens=4),
             "forced-eos": dict(forced_eos=True, max_new_tokens=10)}
DRAFT_ACCEPTED = 0.15  # the trained draft's drafted ids accepted, at least: measured 24 % on this speech (the
# schedule's drafts of up to 20 ids count whole, each cut at its first miss)
FLOATS = 1e-5  # avg_logprob, no_speech_prob, logprobs: the checked positions come from one call over several ids


@pytest.fixture
def schedule_only(monkeypatch):
    """transformers' schedule without the switch-off: drafts every step, whatever the timing."""
    monkeypatch.setattr(speculative, "DraftLength", functools.partial(DraftLength, switch_off=False))


@pytest.fixture
def counted(monkeypatch):
    """Every speculative decode's Speculation (calls, drafted, accepted), in order."""
    seen: list[speculative.Speculation] = []
    real = speculative.speculate

    def speculate(*args, **kwargs):
        kwargs["stats"] = kwargs.get("stats") or speculative.Speculation()
        seen.append(kwargs["stats"])
        return real(*args, **kwargs)

    monkeypatch.setattr(speculative, "speculate", speculate)
    return seen


# ---- text ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", list(PROCESSED))
def test_text_with_processors_speculates_exactly(tiny_export, schedule_only, case):
    """The random tiny model repeats itself, which the n-gram ban and the penalty then forbid: drafts that plain
    greedy under the processors would not pick are rejected, the rest accepted."""
    model = open_export(tiny_export, "cpu")
    rng = np.random.default_rng(3)
    sources = [rng.integers(4, 64, size=n).tolist() for n in (3, 7, 12, 5)]
    options = PROCESSED[case]
    plain = model.generate_ids(sources, **options)
    for proposer in (dict(prompt_lookup_num_tokens=5), dict(assistant=open_export(tiny_export, "cpu"))):
        timings = DecodeTimings()
        assert model.generate_ids(sources, timings=timings, **options, **proposer) == plain, (case, proposer)
        assert timings.drafted > 0 and 0 <= timings.accepted <= timings.drafted
    timings = DecodeTimings()
    model.generate_ids(sources, timings=timings, assistant=model, **options)
    assert timings.accepted > 0  # a self-draft drafts without the processors: right where they change nothing


@pytest.mark.slow
@pytest.mark.parametrize("family", ["t5", "marian"])
def test_trained_fixtures_with_processors_speculate_exactly(tmp_path_factory, family, schedule_only):
    out = tmp_path_factory.mktemp(f"rules-{family}") / "out"
    run_cli_ok(hf_fixtures.trained_folder(family), "-o", out, "--no-validate")
    model = open_export(out, "cpu")
    sources = [model.encode(e.source) for e in hf_fixtures.task_examples(family)]
    for options in (dict(no_repeat_ngram_size=3), dict(repetition_penalty=1.2)):
        options = dict(config=GREEDY, **options)  # greedy under the processors, whatever the folder's default
        plain = model.generate_ids(sources, **options)
        for proposer in (dict(prompt_lookup_num_tokens=4), dict(assistant=open_export(out, "cpu"))):
            timings = DecodeTimings()
            assert model.generate_ids(sources, timings=timings, **options, **proposer) == plain, (options, proposer)
            if "assistant" in proposer:  # prompt lookup drafts where the output repeats its source or itself
                assert timings.accepted > 0
        assert model.translate([e.source for e in hf_fixtures.task_examples(family)][:3], prompt_lookup_num_tokens=3,
                               **options) == [model.tokenizer.decode(ids) for ids in plain[:3]]


# ---- Whisper ------------------------------------------------------------------------------------------------

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


@pytest.fixture(scope="module")
def digits(digits_export):
    return open_export(digits_export, "cpu")


@pytest.fixture(scope="module")
def drafts(digits_export, tmp_path_factory):
    """name -> an opened draft of the digits export: itself (another session of it), and its int8 variant
    (encoder and decoder MatMuls quantised by export.int8, the manifest otherwise the export's)."""
    from tfm_export.export.int8 import quantize_int8

    int8 = tmp_path_factory.mktemp("digits-int8") / "onnx"
    shutil.copytree(digits_export, int8)
    for graph in ("encoder.onnx", "decoder.onnx"):
        assert quantize_int8(digits_export / graph, int8 / graph, False) > 0
    return {"self": open_export(digits_export, "cpu"), "int8": open_export(int8, "cpu", verify=False)}


@pytest.fixture(scope="module")
def speech():
    """(short utterances [(language, samples)], a long recording of eight English ones with pauses)."""
    sys.path.insert(0, str(DIGITS))
    from speech import RATE, Spoken

    spoken = [Spoken.from_row(row) for row in (DIGITS / "heldout.tsv").read_text().splitlines()]
    english = [s for s in spoken if s.language == "en"][:8]
    german = [s for s in spoken if s.language == "de"][:1]
    rng = np.random.default_rng(0)
    parts = []
    for s in english:
        parts += [np.zeros(int(rng.uniform(0.3, 0.9) * RATE), np.float32), s.samples()]
    long = np.concatenate(parts)
    assert len(long) > 3 * 4 * RATE  # four 4-s windows at least
    return [(s.language, s.samples()) for s in english[:2] + german], long


def assert_same(got, want, path="result"):
    """Equal answers: every field, floats up to FLOATS (None and NaN where the other has them)."""
    if isinstance(want, dict):
        assert sorted(got) == sorted(want), path
        for key in want:
            assert_same(got[key], want[key], f"{path}.{key}")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), path
        for i, (a, b) in enumerate(zip(got, want)):
            assert_same(a, b, f"{path}[{i}]")
    elif isinstance(want, float) and not isinstance(got, int):
        assert (math.isnan(got) and math.isnan(want)) or abs(got - want) <= FLOATS, (path, got, want)
    else:
        assert got == want, path


def proposers(drafts) -> dict[str, dict]:
    return {"lookup": dict(prompt_lookup_num_tokens=4), "self": dict(assistant=drafts["self"]),
            "int8": dict(assistant=drafts["int8"], num_assistant_tokens=5)}


@needs_espeak
@pytest.mark.parametrize("options", [dict(timestamps=True), dict(), dict(language="de", timestamps=True),
                                     dict(word_timestamps=True, logprobs=True)],
                         ids=["timestamps", "detected", "given", "words"])
@pytest.mark.parametrize("proposer", ["lookup", "self", "int8"])
@pytest.mark.usefixtures("schedule_only")
def test_short_recordings_transcribe_as_plain_greedy(digits, drafts, speech, counted, options, proposer):
    for language, samples in speech[0]:
        if options.get("language", language) != language:
            continue
        plain = digits.transcribe(samples, **options)
        counted.clear()
        got = digits.transcribe(samples, **options, **proposers(drafts)[proposer])
        assert_same(got, plain)
        assert plain["text"].strip() and len(counted) == 1  # one window, speculated
        if proposer != "lookup":  # a one-window prompt holds nothing to look up; a draft model is right often
            assert counted[0].accepted > 0


@needs_espeak
@pytest.mark.parametrize("condition", [False, True], ids=["plain-prompt", "conditioned"])
@pytest.mark.parametrize("proposer", ["lookup", "self", "int8"])
@pytest.mark.usefixtures("schedule_only")
def test_a_long_recording_transcribes_as_plain_greedy(digits, drafts, speech, counted, condition, proposer):
    """Window after window, each seeking to its last timestamp pair: the same segments; with conditioning,
    the previous text in the prompt is what prompt lookup drafts from."""
    long = speech[1]
    options = dict(language="en", timestamps=True, condition_on_prev_tokens=condition)
    plain = digits.transcribe(long, **options)
    counted.clear()
    got = digits.transcribe(long, **options, **proposers(drafts)[proposer])
    assert_same(got, plain)
    assert len({s["seek"] for s in plain["segments"]}) >= 4 and len(counted) >= 4
    calls, ids = sum(s.calls for s in counted), len(plain["ids"]) + len(counted)  # EOS per window
    accepted = sum(s.accepted for s in counted)
    if proposer != "lookup" or not condition:  # the previous window's text is rarely what the next one says
        assert accepted > 0 and calls < ids
    if proposer == "self":
        assert calls < ids / 2


@needs_espeak
@pytest.mark.usefixtures("schedule_only")
def test_the_fallbacks_sampled_tries_decode_plainly(digits, drafts, speech, counted):
    """A compression-ratio bar every window fails: each window's greedy try speculates, its sampled retry at 0.5
    (seeded) decodes as without speculation; the answers are equal."""
    options = dict(language="en", timestamps=True, temperature=(0.0, 0.5), compression_ratio_threshold=0.1, seed=3)
    plain = digits.transcribe(speech[1], **options)
    counted.clear()
    got = digits.transcribe(speech[1], **options, assistant=drafts["self"])
    assert_same(got, plain)
    assert {s["temperature"] for s in plain["segments"]} == {0.5}
    assert len(counted) == len({s["seek"] for s in plain["segments"]})  # one greedy try per window speculated


@needs_espeak
def test_vad_chunks_speculate_one_by_one(digits, drafts, speech, counted):
    """vad=True with batch_size 1: each chunk is a recording of its own, decoded speculatively."""
    options = dict(language="en", timestamps=True, vad=True)
    plain = digits.transcribe(speech[1], **options)
    counted.clear()
    assert_same(digits.transcribe(speech[1], **options, assistant=drafts["self"]), plain)
    assert plain["segments"] and counted


@pytest.fixture(scope="module")
def trained_draft(tmp_path_factory):
    out = tmp_path_factory.mktemp("digits-draft") / "onnx"
    run_cli_ok(DIGITS / "draft", "-o", out, "--no-validate")
    return open_export(out, "cpu")


def test_the_draft_is_a_small_folder_of_the_models_tokenizer():
    draft = DIGITS / "draft"
    assert (draft / "model.safetensors").stat().st_size < 2_000_000  # float16 weights
    for name in ("tokenizer.json", "vocab.json", "merges.txt", "preprocessor_config.json"):
        assert (draft / name).read_bytes() == (DIGITS / name).read_bytes(), name


@needs_espeak
@pytest.mark.usefixtures("schedule_only")
def test_the_trained_draft_transcribes_as_plain_greedy(digits, trained_draft, speech, counted):
    """Held-out speech, timestamps on: short recordings (language detected) and the long one: plain greedy's
    answers, and the draft's ids accepted as often as DRAFT_ACCEPTED says."""
    drafted = accepted = 0
    for samples in [samples for _, samples in speech[0]] + [speech[1]]:
        plain = digits.transcribe(samples, timestamps=True)
        counted.clear()
        assert_same(digits.transcribe(samples, timestamps=True, assistant=trained_draft), plain)
        assert plain["text"].strip() and counted
        drafted, accepted = drafted + sum(s.drafted for s in counted), accepted + sum(s.accepted for s in counted)
    print(f"the trained draft: {accepted} of {drafted} drafted ids accepted ({accepted / drafted:.0%})")
    assert accepted / drafted > DRAFT_ACCEPTED


@needs_espeak
def test_what_cannot_speculate_is_refused(digits, tiny_export, speech):
    samples = speech[0][0][1]
    with pytest.raises(InputError, match="not beam search.s .2 beams.: transcribe with num_beams 1"):
        digits.transcribe(samples, num_beams=2, prompt_lookup_num_tokens=3)
    with pytest.raises(InputError, match="batch_size 2 decodes windows together"):
        digits.transcribe([samples, samples], batch_size=2, prompt_lookup_num_tokens=3)
    with pytest.raises(InputError, match="does not share this model's vocabulary"):
        digits.transcribe(samples, assistant=open_export(tiny_export, "cpu"))
    with pytest.raises(InputError, match="not on a window batch"):
        digits.transcribe(samples, prompt_lookup_num_tokens=3, runner=lambda window, strategy: None)



@needs_espeak
def test_the_cli_speculates(digits_export, speech, tmp_path):
    import soundfile

    wav = tmp_path / "long.wav"
    soundfile.write(wav, speech[1], 16000)
    command = ("transcribe", digits_export, wav, "--language", "en", "--format", "srt")
    plain = run_cli_ok(*command).output
    assert "-->" in plain
    for flags in (("--prompt-lookup", 4), ("--assistant", digits_export)):
        assert run_cli_ok(*command, *flags).output == plain
    refused = run_cli("transcribe", digits_export, wav, "--num-beams", 2, "--prompt-lookup", 4)
    assert refused.exit_code != 0 and "transcribe with num_beams 1" in refused.output
    assert "Traceback" not in refused.output
