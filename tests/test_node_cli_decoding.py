"""Node's `cli.mjs transcribe` takes Python's per-window decoding flags (issue #60): the temperature fallback
(--temperature 0,0.2,..., --compression-ratio-threshold, --logprob-threshold, --no-speech-threshold, --seed),
--condition-on-prev-tokens, --prompt-condition-type, --hotwords and --prefix, and prints Python's
`transcribe(...)` for the same options: ids, text and each segment's seek, temperature and tokens, sampled
windows included (both sides draw from SplitMix64 seeded by --seed). A bad value is one line, exit 1.

The recording is test_whisper_fallback's: eight held-out English utterances of the trained fixture
(models/whisper-digits, espeak-ng) with short pauses, 16 s in six windows; its thresholds there force the
fallback on one window (compression ratio 0.8) or on every one (log-probability 0).
"""

from __future__ import annotations

import json

import pytest

from helpers import NODE, node, spoken_marks
from tfm_export.runtime import open_export

from test_whisper_fallback import long_en as recording  # noqa: E402,F401  # fixture: (samples, its WAV file)

pytestmark = spoken_marks()
TEMPERATURES = "0,0.2,0.4,0.6,0.8,1"

# the CLI's flags -> Python's transcribe options; whether a window is sampled (temperature above 0) there, and
# whether the options change the transcript (the flags were not dropped)
CASES = {
    "seeded fallback, every window": (["--temperature", TEMPERATURES, "--logprob-threshold", "0", "--seed", "5"],
                                      {"temperature": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0), "logprob_threshold": 0.0,
                                       "seed": 5}, True, True),
    "fallback on one window, a 64-bit seed": (
        ["--temperature", TEMPERATURES, "--compression-ratio-threshold", "0.8", "--seed", str(2**64 - 1)],
        {"temperature": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0), "compression_ratio_threshold": 0.8, "seed": 2**64 - 1},
        True, True),
    "one sampled temperature": (["--temperature", "0.7", "--seed", "11"], {"temperature": 0.7, "seed": 11}, True,
                                True),
    # openai-whisper's thresholds, typed as users do (a negative number after its flag)
    "negative thresholds": (["--temperature", TEMPERATURES, "--logprob-threshold", "-1.0", "--no-speech-threshold",
                             "0.6"], {"temperature": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0), "logprob_threshold": -1.0,
                                      "no_speech_threshold": 0.6}, False, False),
    "hotwords and a prefix": (["--hotwords", "neun acht", "--prefix", "one two"],
                              {"hotwords": "neun acht", "prefix": "one two"}, False, True),
    "the prompt on every window": (["--prompt", "drei sieben neun", "--condition-on-prev-tokens",
                                    "--prompt-condition-type", "all-segments"],
                                   {"prompt": "drei sieben neun", "condition_on_prev_tokens": True,
                                    "prompt_condition_type": "all-segments"}, False, True),
}


@pytest.fixture(scope="module")
def long_en(recording):
    return recording[1]


def cli(export, path, *flags):
    return node(NODE / "cli.mjs", "transcribe", export, path, "--language", "en", "--timestamps", "--json", *flags)


@pytest.mark.parametrize("case", list(CASES))
def test_the_cli_decodes_like_python(digits_export, long_en, case):
    flags, options, sampled, changes = CASES[case]
    done = cli(digits_export, long_en, *flags)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    want = open_export(digits_export, device="cpu").transcribe(str(long_en), language="en", timestamps=True,
                                                                **options)
    assert got["ids"] == want["ids"] and got["text"] == want["text"]
    fields = lambda result: [(s["seek"], s["temperature"], s["tokens"]) for s in result["segments"]]  # noqa: E731
    assert fields(got) == fields(want)
    assert any(s["temperature"] > 0 for s in want["segments"]) == sampled  # the sampled case compared samples
    plain = open_export(digits_export, device="cpu").transcribe(str(long_en), language="en", timestamps=True)
    assert (want["ids"] != plain["ids"]) == changes


BAD = [(["--temperature", "0,hot"], "--temperature takes numbers of 0 or more"),
       (["--temperature", "0,-0.2"], "--temperature takes numbers of 0 or more"),
       (["--temperature", "0,,1"], "--temperature takes numbers of 0 or more"),
       (["--seed", "-3"], "--seed takes a whole number from 0 to 2**64 - 1"),
       (["--seed", "1.5"], "--seed takes a whole number"),
       (["--seed", str(2**64)], "--seed takes a whole number from 0 to 2**64 - 1"),
       (["--logprob-threshold", "low"], "--logprob-threshold takes a number"),
       (["--compression-ratio-threshold", ""], "--compression-ratio-threshold takes a number"),
       (["--prompt-condition-type", "every"], "--prompt-condition-type takes first-segment or all-segments"),
       (["--prompt", "drei", "--prompt-condition-type", "all-segments"],  # the folder does not condition
        '--prompt-condition-type "all-segments" needs --condition-on-prev-tokens'),
       (["--no-speech-threshold", "0.6"], "--no-speech-threshold needs a --logprob-threshold"),
       (["--condition-on-prev-tokens", "--no-condition-on-prev-tokens"], "contradict each other")]


@pytest.mark.parametrize("flags, says", BAD, ids=[" ".join(flags) for flags, _ in BAD])
def test_a_bad_value_is_one_line(digits_export, long_en, flags, says):
    done = cli(digits_export, long_en, *flags)
    assert done.returncode == 1 and done.stdout == "", done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], done.stderr


def test_help_names_the_flags():
    done = node(NODE / "cli.mjs", "transcribe", "--help")
    assert done.returncode == 0
    for flag in ("--temperature", "--seed", "--compression-ratio-threshold", "--logprob-threshold",
                 "--no-speech-threshold", "--condition-on-prev-tokens", "--prompt-condition-type", "--hotwords",
                 "--prefix"):
        assert f"\n  {flag}" in done.stdout, flag
