"""Temperature fallback, prompts on every window, hotwords and a prefix (issue #60) on the trained Whisper fixture
(models/whisper-digits) and real espeak-ng speech, against transformers' long-form generate and Node.

- Fallback: thresholds that fire on some windows (compression ratio) or on every one (log-probability) make
  both sides decode again at the next temperature: every greedy try (its ids, EOS included) and each decision
  equal transformers' `generate(temperature=(0.0, 0.2, ...))` up to the first sampled try, which both make
  at the same temperature (the sampled ids come from another generator: torch's, ours SplitMix64).
- Seeded sampling: the same seed gives the same fallback transcript in Python and in Node (runtimes/node),
  sampled windows included, and another seed another one.
- prompt_condition_type="all-segments": the ids of transformers' long form with the same prompt.
- hotwords after <|startofprev|> in every window's decoder prompt; a prefix forced as the first window's
  first ids (faster-whisper's get_prompt).
"""

from __future__ import annotations

import inspect
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
soundfile = pytest.importorskip("soundfile")

from helpers import run_cli, run_cli_ok  # noqa: E402
from whisper_fixtures import reference_features  # noqa: E402
from tfm_export.errors import InputError  # noqa: E402
from tfm_export.runtime import open_export  # noqa: E402
from tfm_export.runtime.options.generation import GenerationConfig  # noqa: E402
from tfm_export.runtime.speech.longform import cache_runner  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "models" / "whisper-digits"
NODE = ROOT / "runtimes" / "node"
sys.path.insert(0, str(FOLDER))
from speech import RATE, Spoken  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore"),
              pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")]
TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
# On the English recording below the windows' compression ratios are 0.73-0.77 but the last's 0.88: 0.8 fires
# on that one only; an avg_logprob above 0 is impossible: 0.0 fires on every try.
FORCED = {"ratio": {"compression_ratio_threshold": 0.8}, "logprob": {"logprob_threshold": 0.0}}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("digits") / "onnx"
    run_cli_ok(FOLDER, "-o", out, "--no-validate")
    model = transformers.WhisperForConditionalGeneration.from_pretrained(str(FOLDER), local_files_only=True).eval()
    return out, open_export(out, device="cpu"), model


@pytest.fixture(scope="module")
def long_en(tmp_path_factory):
    """Eight held-out English utterances with pauses of 0.3-0.9 s (16 s, six windows): samples and a WAV file."""
    rng = np.random.default_rng(0)
    spoken = [Spoken.from_row(row) for row in (FOLDER / "heldout.tsv").read_text().splitlines()]
    parts = []
    for s in [s for s in spoken if s.language == "en"][:8]:
        parts += [np.zeros(int(rng.uniform(0.3, 0.9) * RATE), np.float32), s.samples()]
    samples = np.concatenate(parts)
    path = tmp_path_factory.mktemp("wav") / "long-en.wav"
    soundfile.write(str(path), samples, RATE, subtype="FLOAT")
    return samples, path


def our_tries(runtime, samples, **options) -> tuple[dict, list[tuple[float, list[int]]]]:
    """transcribe's result and each window try it decoded: (temperature, ids with EOS when it ended)."""
    tries = []
    cache = runtime.cache_for(GenerationConfig(), runtime.config.max_len)
    eos = runtime.manifest.speech["eos_token_id"]

    def runner(window, strategy):
        rows = cache_runner(cache)(window, strategy)
        config = strategy.config
        tries.append((config.temperature if config.do_sample else 0.0, [*rows[0][0].ids, *[eos] * rows[0][0].ended]))
        return rows

    return runtime.transcribe(samples, runner=runner, **options), tries


def their_tries(model, samples, **kwargs) -> tuple[list[tuple[float, list[int]]], list[bool]]:
    """transformers' long form on the same features: each try (temperature, ids with EOS) where `_need_fallback`
    judges it, and that judgement (needs fallback)."""
    from transformers.models.whisper import generation_whisper as gw

    mixin = gw.WhisperGenerationMixin
    saved = inspect.getattr_static(mixin, "_need_fallback")
    tries, needs = [], []

    def judged(self, seek_sequence, *args):
        need, skip = saved(self, seek_sequence, *args)
        tries.append((float(args[-1] or 0.0), seek_sequence.tolist()))
        needs.append(need)
        return need, skip

    mixin._need_fallback = judged
    try:
        with torch.no_grad():
            model.generate(torch.from_numpy(reference_features(model, samples)[None]), return_timestamps=True,
                           return_segments=True, **kwargs)
    finally:
        mixin._need_fallback = saved
    return tries, needs


@pytest.mark.parametrize("case", list(FORCED))
def test_fallback_tries_equal_transformers(trained, long_en, case):
    """Every greedy try and every decision up to the first sampled try, as transformers' generate; both then
    sample at 0.2. "ratio": the five windows before the last are kept greedy (their segments equal)."""
    _, runtime, model = trained
    samples, _ = long_en
    result, ours = our_tries(runtime, samples, language="en", timestamps=True, temperature=TEMPERATURES,
                             **FORCED[case])
    theirs, needs = their_tries(model, samples, language="en", temperature=TEMPERATURES, **FORCED[case])
    first = next(n for n, (t, _) in enumerate(theirs) if t > 0)
    assert needs[first - 1] and not any(needs[: first - 1])  # greedy tries kept, then the one that fell back
    assert ours[:first] == theirs[:first] and ours[first][0] == theirs[first][0] == 0.2
    if case == "ratio":  # five windows kept greedy, then the last one falls back
        assert first == 6 and [s["temperature"] for s in result["segments"]][:-1] == [0.0] * (len(result["segments"]) - 1)
        assert result["segments"][-1]["temperature"] > 0
    else:
        assert first == 1 and all(s["temperature"] == 1.0 for s in result["segments"])  # every try falls back


def test_seeded_fallback_is_reproducible(trained, long_en):
    """The same seed, the same sampled windows; another seed, other ones; greedy never changes."""
    _, runtime, _ = trained
    samples, _ = long_en
    options = dict(language="en", timestamps=True, temperature=TEMPERATURES, **FORCED["logprob"])
    one, again, other = (runtime.transcribe(samples, seed=seed, **options)["ids"] for seed in (5, 5, 6))
    assert one == again and one != other
    with pytest.raises(InputError, match="temperature"):
        runtime.transcribe(samples, temperature=(0.0, -1.0))


NODE_JS = """
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
const { openExport } = await import(pathToFileURL(`${process.argv[2]}/exported.mjs`).href);
const job = JSON.parse(readFileSync(0, 'utf8'));
const model = await openExport(job.export);
const runs = [];
for (const options of job.runs) runs.push(await model.transcribe(job.file, options));
console.log(JSON.stringify(runs));
await model.release();
"""


# Node's options -> Python's: the fallback forced on some windows and on all (seeded), hotwords with a prefix,
# the prompt on every window
NODE_CASES = [
    ({"temperature": list(TEMPERATURES), "compressionRatioThreshold": 0.8, "seed": 3},
     {"temperature": TEMPERATURES, "compression_ratio_threshold": 0.8, "seed": 3}),
    ({"temperature": list(TEMPERATURES), "logprobThreshold": 0.0, "seed": 5},
     {"temperature": TEMPERATURES, "logprob_threshold": 0.0, "seed": 5}),
    ({"hotwords": "neun acht", "prefix": "one two"}, {"hotwords": "neun acht", "prefix": "one two"}),
    ({"prompt": "{LONG_PROMPT}", "conditionOnPrevTokens": True, "promptConditionType": "all-segments"},
     {"prompt": "{LONG_PROMPT}", "condition_on_prev_tokens": True, "prompt_condition_type": "all-segments"}),
]


@pytest.mark.skipif(shutil.which("node") is None or not (NODE / "node_modules" / "pako").exists(),
                    reason="node or runtimes/node/node_modules missing (npm ci there)")
def test_node_falls_back_like_python(trained, long_en, tmp_path):
    """Node's transcribe: Python's ids, text and segments (their seeks and temperatures) with the seeded fallback
    (sampled windows included), hotwords and a prefix, and the prompt on every window."""
    out, runtime, _ = trained
    _, path = long_en
    fill = lambda options: {k: LONG_PROMPT if v == "{LONG_PROMPT}" else v for k, v in options.items()}  # noqa: E731
    cases = [(fill(mine), fill(theirs)) for mine, theirs in NODE_CASES]
    runs = [{"language": "en", "timestamps": True, **mine} for mine, _ in cases]
    script = tmp_path / "fallback.mjs"
    script.write_text(NODE_JS)
    done = subprocess.run(["node", str(script), str(NODE)], input=json.dumps({"export": str(out), "file": str(path),
                          "runs": runs}), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    sampled = 0
    for got, (_, theirs) in zip(json.loads(done.stdout), cases):
        want = runtime.transcribe(str(path), language="en", timestamps=True, **theirs)
        assert got["ids"] == want["ids"] and got["text"] == want["text"], theirs
        assert [(s["seek"], s["temperature"], s["tokens"]) for s in got["segments"]] == \
            [(s["seek"], s["temperature"], s["tokens"]) for s in want["segments"]], theirs
        sampled += any(s["temperature"] > 0 for s in want["segments"])
    assert sampled == 2  # both fallback cases compared sampled windows


PROMPT = "drei sieben"  # the fixture never saw a prompt: it changes what it hears
# 30 words: with a window's text over the conditioning's 31 ids (max_target_positions 64), which "first-segment"
# cuts from the prompt's start and "all-segments" keeps whole
LONG_PROMPT = " ".join(["drei sieben neun eins vier zwei acht null sechs fünf"] * 3)


def test_all_segments_prompt_equals_transformers(trained, long_en):
    """The initial prompt before every window's previous text (where "first-segment" drops it once the text
    fills the conditioning): transformers' ids."""
    _, runtime, model = trained
    samples, _ = long_en
    options = dict(language="en", timestamps=True, prompt=LONG_PROMPT, condition_on_prev_tokens=True)
    tokenizer = transformers.WhisperProcessor.from_pretrained(str(FOLDER))
    prompt_ids = torch.tensor(tokenizer.get_prompt_ids(LONG_PROMPT))
    prompts, ids = {"all-segments": [], "first-segment": []}, {}
    cache = runtime.cache_for(GenerationConfig(), runtime.config.max_len)
    for kind, seen in prompts.items():
        def runner(window, strategy, seen=seen):
            seen.append(strategy.prompts[0].tolist())
            return cache_runner(cache)(window, strategy)

        ids[kind] = runtime.transcribe(samples, prompt_condition_type=kind, runner=runner, **options)["ids"]
    head = prompt_ids.tolist()
    assert len(prompts["all-segments"]) >= 4 and all(p[: len(head)] == head for p in prompts["all-segments"])
    assert not all(p[: len(head)] == head for p in prompts["first-segment"])  # there, the text cut it
    assert ids["all-segments"] != ids["first-segment"]
    with torch.no_grad():
        out = model.generate(torch.from_numpy(reference_features(model, samples)[None]), language="en",
                             return_timestamps=True, prompt_ids=prompt_ids, condition_on_prev_tokens=True,
                             prompt_condition_type="all-segments")
    eos = model.generation_config.eos_token_id
    assert ids["all-segments"] == [t for t in out[0].tolist() if t != eos]
    with pytest.raises(InputError, match="condition_on_prev_tokens"):
        runtime.transcribe(samples, prompt=PROMPT, prompt_condition_type="all-segments")


def text_ids(runtime, text: str) -> list[int]:
    """The tokens of `text` as transcribe encodes a prompt, hotwords or a prefix (EOS left out)."""
    tokenizer = runtime.tokenizer
    ids = tokenizer.encode_target(text) if hasattr(tokenizer, "encode_target") else tokenizer.encode(text)
    return [t for t in ids if t != runtime.manifest.speech["eos_token_id"]]


def test_hotwords_are_in_every_window_prompt_and_a_prefix_is_forced(trained, long_en):
    """hotwords right after <|startofprev|> in each window's decoder prompt; a prefix as the first window's
    first ids (<|0.00|> first with timestamps), that window without hotwords, the later ones with them."""
    _, runtime, _ = trained
    samples, _ = long_en
    speech = runtime.manifest.speech
    prev, begin = speech["prev_sot_token_id"], speech["no_timestamps_token_id"] + 1
    hot, prefix = text_ids(runtime, " neun acht"), text_ids(runtime, " one two")
    prompts = []
    cache = runtime.cache_for(GenerationConfig(), runtime.config.max_len)

    def runner(window, strategy):
        prompts.append(strategy.prompts[0].tolist())
        return cache_runner(cache)(window, strategy)

    plain = runtime.transcribe(samples, language="en", timestamps=True)
    hotwords = runtime.transcribe(samples, language="en", timestamps=True, hotwords="neun acht", runner=runner)
    assert len(prompts) >= 4 and all(p[: 1 + len(hot)] == [prev, *hot] for p in prompts)
    assert hotwords["ids"] != plain["ids"]  # the model hears what it was told to expect
    prompts.clear()
    prefixed = runtime.transcribe(samples, language="en", timestamps=True, hotwords="neun acht", prefix="one two",
                                  runner=runner)
    assert prefixed["ids"][: 1 + len(prefix)] == [begin, *prefix] and prefixed["text"].startswith(" one two")
    assert prompts[0][0] != prev and prompts[0][-1 - len(prefix):] == [begin, *prefix]
    assert all(p[: 1 + len(hot)] == [prev, *hot] for p in prompts[1:])
    short = runtime.transcribe(samples[: 3 * RATE], language="en", prefix="one two")  # no timestamps: no <|0.00|>
    assert short["ids"][: len(prefix)] == prefix and short["text"].startswith(" one two")


def test_the_cli_takes_the_decoding_options(trained, long_en):
    """`tfm-export transcribe --temperature 0,0.2,... --logprob-threshold 0 --seed 5 --json`: Python's ids;
    --hotwords and --prefix; bad values are one line, no traceback."""
    out, runtime, _ = trained
    _, path = long_en
    flags = ["--language", "en", "--timestamps", "--json"]
    fallback = run_cli_ok("transcribe", out, path, *flags, "--temperature", ",".join(map(str, TEMPERATURES)),
                          "--logprob-threshold", "0", "--seed", "5")
    want = runtime.transcribe(str(path), language="en", timestamps=True, temperature=TEMPERATURES,
                              logprob_threshold=0.0, seed=5)
    assert json.loads(fallback.output)["ids"] == want["ids"]
    hot = run_cli_ok("transcribe", out, path, *flags, "--hotwords", "neun acht", "--prefix", "one two")
    assert json.loads(hot.output)["ids"] == runtime.transcribe(str(path), language="en", timestamps=True,
                                                               hotwords="neun acht", prefix="one two")["ids"]
    for bad, named in ((["--temperature", "0,hot"], "--temperature"), (["--prompt", "drei", "--prompt-condition-type",
                                                                        "all-segments"], "--condition-on-prev-tokens")):
        result = run_cli("transcribe", out, path, *bad)
        assert result.exit_code != 0 and named in result.output and "Traceback" not in result.output
