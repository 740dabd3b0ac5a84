"""`python -m benchmarks [SCENARIO [ARGS...]]`: list the scenarios, or run one (its own options follow).

The registry is a table of config rows (tfm_export.bench.harness.Scenario): a scenario's module is imported
only when it runs, so listing them needs no torch, transformers or peer installed.
"""

from __future__ import annotations

import logging
import sys

from tfm_export.bench.harness import Scenario
from tfm_export.errors import TfmExportError

S = Scenario
SCENARIOS: tuple[Scenario, ...] = (
    # decode core and the step
    S("decode-core", "decode", "benchmarks.decode:decode_core_main",
      "checkouts A/B: greedy and beam 4 ms/token, bundled model and base preset", ("--quick",)),
    S("step", "decode", "benchmarks.decode:step_main",
      "checkouts (each with its export) against CTranslate2: one step at small batches, fresh processes"),
    S("exports", "decode", "benchmarks.exports:exports_main",
      "two or more exports of one family folder against each other and CTranslate2"),
    S("nocache", "decode", "benchmarks.forms:nocache_main",
      "a module export without a KV cache against the native KV-cache export", ("--tiny", "--repeat", "1")),
    S("speculative", "decode", "benchmarks.speculative:speculative_main",
      "batch 1 greedy with and without speculation (prompt lookup, a draft export): ms/token, acceptance",
      ("--quick", "--rounds", "1", "--new-tokens", "8", "--sources", "2")),
    S("speculative-served", "decode", "benchmarks.speculative:speculative_served_main",
      "prompt lookup in the server's in-flight rows against plain rows, copy-heavy BART: ms/token, acceptance",
      ("--rounds", "1", "--new-tokens", "8", "--sources", "2")),
    S("gpu", "decode", "benchmarks.profiles:gpu_main",
      "the CUDA rows: bench --device cuda on base and opus-mt size, greedy and beam 4, and a step's profile"),
    # profiles (where a step's time goes)
    S("profile-decoder", "profiles", "benchmarks.profiles:profile_decoder_main",
      "ORT's profile of one decoder step, by operator"),
    S("profile-beam", "profiles", "benchmarks.profiles:profile_beam_main",
      "a beam step split: decoder, head, row gather, host merge"),
    S("cross-products", "profiles", "benchmarks.profiles:cross_products_main",
      "the cross attention's two products in graphs of their own (MLAS operand order)"),
    S("head-bits", "profiles", "benchmarks.forms:head_bits_main",
      "a vocabulary head alone at 8, 4 and 2 bits"),
    S("head-scan-size", "profiles", "benchmarks.forms:head_scan_size_main",
      "the scanned int4 head against the int8 head, by head size"),
    S("scan-recall", "profiles", "benchmarks.forms:scan_recall_main",
      "how often the head scan misses float32's token", ("--states", "2", "--vocab", "4096", "--k", "128")),
    S("earlier-head", "profiles", "benchmarks.forms:earlier_head_main",
      "what a plain step pays for decoder.onnx's earlier_logits, by form of the earlier head", ("--rounds", "2")),
    # families and big models
    S("families", "families", "benchmarks.families:families_main",
      "t5, flan-t5, bart, nllb layouts: ORT vs transformers vs CTranslate2 vs Optimum"),
    S("marian", "families", "benchmarks.families:marian_main",
      "an opus-mt-sized MarianMTModel: ORT vs transformers generate"),
    S("opus-mt-folder", "families", "benchmarks.families:opus_mt_folder_main",
      "writes the opus-mt-sized random Marian folder other scenarios read"),
    S("big-models", "families", "benchmarks.exports:big_models_main",
      "models over 2 GB: each export stage's peak memory; --speed: int8/int4 against CTranslate2 int8"),
    # quality of reduced precision
    S("quality-table", "quality", "benchmarks.quality:quality_table_main",
      "float32, int8, int4 and CTranslate2 on the trained fixtures' held-out sets (chrF, WER)"),
    S("int4-sensitivity", "quality", "benchmarks.forms:int4_sensitivity_main",
      "which weight classes the 4 bits cost (eager model, rtn rounding)"),
    S("wide-fixture", "quality", "benchmarks.forms:wide_fixture_main",
      "trains a fixture 512 or 1024 wide and measures its quality table"),
    # speech
    S("whisper-speed", "speech", "benchmarks.whisper:whisper_speed_main",
      "Whisper: ORT vs faster-whisper vs transformers vs Optimum, short and long form"),
    S("word-timestamps", "speech", "benchmarks.whisper:word_timestamps_main",
      "what word timestamps cost on long-form transcription"),
    S("served-speech", "speech", "benchmarks.speech_served:served_speech_main",
      "serve's in-flight windows against one recording at a time and faster-whisper batched"),
    S("speech-batched", "speech", "benchmarks.speech_batched:speech_batched_main",
      "10 min with pauses: ours with VAD + batching vs faster-whisper's BatchedInferencePipeline, time and WER",
      None),  # faster-whisper (benchmark-only, installed by hand) and espeak-ng's speech: not a smoke run
    S("js-speech", "speech", "benchmarks.js_speech:js_speech_main",
      "Whisper in Node and the browser: ours vs transformers.js"),
    S("live-speech", "speech", "benchmarks.speech_served:live_speech_main",
      "live transcription over the Realtime WebSocket: word-end-to-confirmed latency, RTF at 1/4/8 sessions",
      None),  # espeak-ng's speech, the fixture's export and real-time sessions: minutes, not a smoke run
    # serving
    S("load", "serving", "benchmarks.serving:load_main",
      "open-loop Poisson load on tfm-export serve, the batching modes taking turns"),
    S("engine", "serving", "benchmarks.serving:engine_main",
      "the serving engines without HTTP: request-level vs in-flight on one workload"),
    S("documents", "peers", "benchmarks.documents:documents_main",
      "a document end to end (split, batched, joined): ours vs CTranslate2 translate_iterable, same weights",
      ("--words", "200", "--rounds", "1", "--no-int8", "--work", "/tmp/bench-documents-smoke")),
    S("ct2-batch", "peers", "benchmarks.serving:ct2_batch_main",
      "CTranslate2 translate_batch on the load workload (the serving peer)"),
)
BY_NAME = {s.name: s for s in SCENARIOS}


def listing() -> str:
    lines = ["python -m benchmarks SCENARIO [ARGS...]   (SCENARIO --help: its options)", ""]
    for area in dict.fromkeys(s.area for s in SCENARIOS):
        lines.append(f"{area}:")
        lines += [f"  {s.name:18s} {s.summary}" for s in SCENARIOS if s.area == area]
    return "\n".join(lines)


def show_progress() -> None:
    """The package's benchmark code (tfm_export.bench) logs its progress and skipped peers at INFO: shown as plain
    lines on stderr, as the scenarios' own prints, without the library's other logs."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    bench = logging.getLogger("tfm_export.bench")
    bench.addHandler(handler)
    bench.setLevel(logging.INFO)
    bench.propagate = False  # a scenario's own logging.basicConfig would print them twice


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(listing())
        return 0
    scenario = BY_NAME.get(argv[0])
    if scenario is None:
        print(f"no scenario {argv[0]!r}; `python -m benchmarks` lists them", file=sys.stderr)
        return 2
    sys.argv = [f"python -m benchmarks {scenario.name}", *argv[1:]]  # each scenario parses its own options
    show_progress()
    try:
        result = scenario.entry()()
    except TfmExportError as exc:  # bad input or a failed run of the package's own measuring code: one line
        print(exc, file=sys.stderr)
        return 1
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
