"""runtimes/node mirrors the Python runtime file for file (issue #59): no node or npm needed.

The Node package is a port of tfm_export/runtime (and of the tfm_export/text and tfm_export/audio modules it
needs), laid out in the same folders with the same module and class names, so a change on one side points at
its partner on the other. MIRROR maps each Python module to its JS partner with the classes and functions
that must exist in both; PYTHON_ONLY lists the runtime modules Node does not port, each with its reason;
JS_ONLY the Node modules without a Python partner. A new module on either side fails here until it is placed.
The JS modules also keep the Python runtime's layers (tests/test_import_graph.py): no import goes upward.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tfm_export"
NODE = ROOT / "runtimes" / "node"

# Python module (under tfm_export/) -> (its JS partner under runtimes/node, classes in both, functions in both).
# A function is named as in Python; its JS name is the camelCase one unless given as "python=js".
MIRROR: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "runtime/api.py": ("api.mjs", (), ("generate", "generate_ids", "stream", "text_pieces", "score", "shortlisted",
                                        "hypotheses")),
    "runtime/checks.py": ("checks.mjs", (), ()),
    "runtime/sources.py": ("sources.mjs", (), ("resolve_max_new_tokens", "trim", "pad_batch=padSources")),
    "runtime/exported.py": ("exported.mjs", ("ExportedModel",), ("open_export", "with_shortlist")),
    "runtime/decode/loop.py": ("decode/loop.mjs", (), ("decode", "run", "moved")),
    "runtime/decode/prefix.py": ("decode/prefix.mjs", ("PrefixStrategy", "Alternatives"),
                                 ("with_forced_first", "prefix_strategy")),
    "runtime/decode/scoring.py": ("decode/scoring.mjs", ("TeacherForced",), ()),
    "runtime/decode/vmap.py": ("decode/vmap.mjs", ("VocabularyMap",),
                               ("shortlist", "from_pairs", "load=fromJSON", "load_ct2=fromCt2")),
    # Node masks the full head's logits (Python's path for a head it cannot gather): no ONNX rewrite in JS
    "runtime/states/shortlist.py": ("states/shortlist.mjs", ("MaskedCache", "MaskedState"), ()),
    "runtime/decode/strategies.py": ("decode/strategies.mjs", ("Greedy", "TokenPicker"), ("strategy_for",)),
    "runtime/decode/beam.py": ("decode/beam.mjs", ("BeamSearch",), ()),
    "runtime/decode/sampling.py": ("decode/sampling.mjs", ("SplitMix64",), ("row_generators", "warp", "sample", "draw")),
    "runtime/decode/processors.py": ("decode/processors.mjs", (),
                                     ("log_softmax", "banned_ngram_tokens", "process=processRow")),
    "runtime/states/growing.py": ("states/growing.mjs", ("GrowingCache", "GrowingState"), ()),
    # speculative decoding (issue #63): greedy, plain and under processors, and sampling (the same seeded draws)
    "runtime/decode/speculative.py": ("decode/speculative.mjs", ("Speculation",),
                                      ("speculate", "wanted", "checkable", "proposal")),
    "runtime/decode/proposers.py": ("decode/proposers.mjs", ("PromptLookup", "DraftModel"), ("check_draft",)),
    "runtime/decode/draft_length.py": ("decode/draft_length.mjs", ("Recent", "DraftLength"), ()),
    "runtime/decode/checking.py": ("decode/checking.mjs", ("ArgmaxCheck", "ProcessorCheck"), ()),
    "runtime/decode/speculative_sampling.py": ("decode/speculative_sampling.mjs", ("Sampler", "SamplingCheck"),
                                               ("acceptance", "residual", "accept", "distribution", "sample_sources",
                                                "sample_hypotheses")),
    "runtime/speculating.py": ("speculating.mjs", (), ("speculative_rows",)),
    "runtime/states/nocache.py": ("states/nocache.mjs", ("NoCacheCache", "NoCacheState"), ("runtime_graphs",)),
    "runtime/states/reorder.py": ("states/reorder.mjs", (), ("host_gather=gatherRows",)),
    "runtime/options/generation.py": ("options/generation.mjs", ("GenerationConfig",), ("is_greedy", "replace")),
    "runtime/speech/prompt.py": ("speech/prompt.mjs", ("WhisperSettings",),
                                 ("language_id", "needs_detection", "init_tokens", "prompt_prefix", "max_new_tokens")),
    "runtime/speech/rules.py": ("speech/rules.mjs", ("SuppressTokens", "SuppressAtBegin", "TimestampRules"),
                                ("suppress", "suppress_at_begin", "timestamp_rules", "whisper_processors",
                                 "whisper_process", "detect_language", "no_speech_prob")),
    "runtime/speech/search.py": ("speech/search.mjs", ("WhisperStrategy", "LanguageDetector", "WhisperRow"),
                                 ("whisper_strategy",)),
    "runtime/speech/longform.py": ("speech/longform.mjs", (),
                                   ("split_segments", "compression_ratio", "previous_text", "window_prompt",
                                    "cache_runner", "window_config", "window_decoder", "transcribe=transcribeWindows")),
    "runtime/speech/fallback.py": ("speech/fallback.mjs", ("Fallback",), ("temperatures_of", "fallback_for")),
    "runtime/speech/assisted.py": ("speech/assisted.mjs", ("Assisted",), ("speculating", "assisted_decoder")),
    "runtime/speech/words.py": ("speech/words.mjs", (), ("alignment_session", "window_times=timeWindow", "add_words")),
    "runtime/speech/alignment.py": ("speech/alignment.mjs", (), ("median_filter", "dtw", "token_times", "words")),
    "runtime/speech/whisper.py": ("speech/whisper.mjs", (), ("transcribe",)),
    "runtime/speech/prompt_text.py": ("speech/prompt_text.mjs", (), ("text_ids",)),
    "runtime/speech/subtitles.py": ("speech/subtitles.mjs", (), ("to_srt", "to_vtt")),
    "runtime/speech/streaming.py": ("speech/streaming.mjs",
                                    ("Agreement", "StreamOptions", "StreamTranscriber", "StreamUpdate", "Word"),
                                    ("segment_words", "stream_transcribe", "agree", "confirm", "forget", "append",
                                     "feed", "step", "finish")),
    "runtime/speech/silero.py": ("speech/silero.mjs", (), ("vad_session", "speech_probabilities",
                                                           "window_probabilities")),
    "runtime/speech/vad.py": ("speech/vad.mjs", ("VadParameters", "Span", "Chunk", "SpeechMap"),
                              ("speech_timestamps", "timestamps_from_probabilities", "collect_chunks", "of",
                               "span_of", "to_recording")),
    "runtime/speech/chunks.py": ("speech/chunks.mjs", ("ChunkPlan",),
                                 ("join_text", "speech_chunks", "joined", "transcribe_speech")),
    # batch_size: Node's jobs are async functions (one thread), a round decoded once every live job waits
    "runtime/decode/together.py": ("decode/together.mjs", ("Together",), ()),
    "runtime/speech/batch_rounds.py": ("speech/batch_rounds.mjs", ("WindowRounds",),
                                       ("decode_together", "run_jobs", "run_window", "leave")),
    "runtime/speech/batch.py": ("speech/batch.mjs", (), ("transcribe_batch",)),
    # a Whisper export's recordings (the VAD, batch_size); Node has no frames models to dispatch to
    "runtime/speech/transcribe.py": ("speech/transcribe.mjs", (), ()),
    # the non-runtime modules the JS side ports, under their Python packages' names
    "manifest.py": ("manifest.mjs", (), ("sha256_file", "load_manifest=readManifest")),
    "text/tokenizer.py": ("text/tokenizer.mjs", (), ("tokenizer_from_dict=makeTokenizer",)),
    "text/hf.py": ("text/tokenizer.mjs", (), ("clean_up_spaces",)),
    "text/languages.py": ("text/tokenizer.mjs", (), ()),
    "text/marian.py": ("text/marian.mjs", (), ()),
    "audio/features.py": ("audio/features.mjs", (), ("mel_filters", "log_mel", "log_mel_spectrogram")),
    "audio/io.py": ("audio/io.mjs", (), ("resample",)),
}

# Runtime modules Node does not port, and why.
PYTHON_ONLY: dict[str, str] = {
    "runtime/device.py": "ONNX Runtime's execution providers and the CPU/CUDA choice: Node runs onnxruntime-node's "
                         "CPU provider, the page onnxruntime-web's WASM",
    "runtime/hugepages.py": "transparent huge pages for the Python process's ONNX Runtime arenas (Linux servers)",
    "runtime/inflight.py": "the server's in-flight batching (tfm-export serve); Node calls a server (client.mjs)",
    "runtime/verify.py": "`tfm-export validate` of an export folder, a Python CLI command",
    "runtime/options/spec.py": "the option declarations tools/options_codegen.py reads to write "
                               "options/generation.mjs's generated tables",
    "runtime/states/static.py": "the static cache and its CUDA graphs (GPU only)",
    "runtime/states/rows.py": "the server's in-flight rows on the static cache",
    "runtime/states/host_rows.py": "the server's in-flight rows on host caches",
    "runtime/states/positions.py": "a speculative step's greedy ids at every position and its cache trim, on the "
                                   "device: Node reads them on the host (states/growing.mjs positionIds, truncate)",
    "runtime/states/head.py": "beam candidates picked on the device by a head graph; Node's beam search takes the "
                              "logits on the host, where they already are",
    "runtime/speech/frames.py": "speech models that read filterbank frames (config.source 'frames'): Node "
                                "transcribes Whisper exports only",
    "runtime/speech/logprobs.py": "per-token logprobs (OpenAI's include[]=logprobs): Node has no logprobs option",
}

# Node modules without a Python partner, and why.
JS_ONLY: dict[str, str] = {
    "decoding.mjs": "the package's tfm-export-node/decoding entry point: re-exports api, checks, sources, options",
    "greedy.mjs": "tfm-export-node/greedy, that entry point's first name",
    "translate.mjs": "the package's first main module's name: re-exports exported.mjs",
    "shortlisted.mjs": "the vocabulary-shortlist view of a model (withShortlist, shortlisted; api.mjs re-exports them): "
                       "Python's Shortlisted and with_shortlist in runtime/exported.py, apart from api.mjs's decoding",
    "client.mjs": "the client of `tfm-export serve` (the server is tfm_export/serve)",
    "cli.mjs": "the tfm-export-node command (Python's is tfm_export/cli)",
    "cli-transcribe.mjs": "its transcribe subcommand",
    "text/charsmap.mjs": "the Rust tokenizers' Precompiled normaliser, which Python runs through the tokenizers library",
    "text/sentencepiece.mjs": "sentencepiece's normaliser and Viterbi search, which Python runs through the "
                              "sentencepiece library",
    "audio/spectrum.mjs": "power spectra of the frames: numpy's rfft in Python (audio/features.py)",
}

# The Python runtime's layers (tests/test_import_graph.py's RUNTIME_LAYERS) for the JS modules, lowest first;
# text/ and audio/ are below the runtime as tfm_export's own packages are, the entry points and the CLI above.
JS_LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("text, audio", ("text/", "audio/")),
    ("base", ("sources.mjs", "checks.mjs", "manifest.mjs", "options/")),
    ("decode", ("decode/",)),
    ("states", ("states/",)),
    ("speech", ("speech/",)),
    # exported.mjs re-exports client.mjs's connect
    ("facade", ("shortlisted.mjs", "api.mjs", "speculating.mjs", "exported.mjs", "client.mjs")),
    ("entry points", ("decoding.mjs", "greedy.mjs", "translate.mjs", "cli.mjs", "cli-transcribe.mjs")),
]


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def python_modules() -> list[str]:
    """Every module of tfm_export/runtime (packages' __init__ aside), relative to tfm_export/."""
    return sorted(str(p.relative_to(PACKAGE).as_posix()) for p in (PACKAGE / "runtime").rglob("*.py")
                  if p.name != "__init__.py")


def js_modules() -> list[str]:
    """Every module of the Node package (not its tests or node_modules), relative to runtimes/node."""
    return sorted(str(p.relative_to(NODE).as_posix()) for p in NODE.rglob("*.mjs")
                  if not {"node_modules", "test"} & set(p.relative_to(NODE).parts))


def js_exports(text: str) -> set[str]:
    """Names a module exports: functions, generators, classes, constants, and `export { a, b as c } from`."""
    names = set(re.findall(r"^export (?:async )?(?:function\*?|class|const) ?(\w+)", text, re.M))
    for group in re.findall(r"^export \{([^}]*)\}", text, re.M):
        names |= {part.split(" as ")[-1].strip() for part in group.split(",") if part.strip()}
    return names


def test_every_python_runtime_module_is_mirrored_or_python_only():
    unplaced = [m for m in python_modules() if m not in MIRROR and m not in PYTHON_ONLY]
    assert not unplaced, f"add these to MIRROR (with their JS partner) or PYTHON_ONLY (with a reason): {unplaced}"
    both = set(MIRROR) & set(PYTHON_ONLY)
    assert not both, both
    gone = [m for m in [*MIRROR, *PYTHON_ONLY] if not (PACKAGE / m).is_file()]
    assert not gone, f"the table names Python modules that do not exist: {gone}"
    assert all(reason.strip() for reason in PYTHON_ONLY.values())


def test_every_js_module_has_its_partner_or_a_reason():
    partners = {js for js, _, _ in MIRROR.values()}
    missing = sorted(js for js in partners | set(JS_ONLY) if not (NODE / js).is_file())
    assert not missing, f"JS modules the table names are missing: {missing}"
    unplaced = [js for js in js_modules() if js not in partners and js not in JS_ONLY]
    assert not unplaced, f"add these to MIRROR (as a Python module's partner) or JS_ONLY (with a reason): {unplaced}"


@pytest.mark.parametrize("module", sorted(MIRROR))
def test_the_partners_share_their_classes_and_functions(module):
    js, classes, functions = MIRROR[module]
    python = (PACKAGE / module).read_text()
    node = (NODE / js).read_text()
    exported = js_exports(node)
    for cls in classes:
        assert re.search(rf"^class {cls}\b", python, re.M), f"{module} has no class {cls}"
        assert re.search(rf"^export class {cls}\b", node, re.M), f"{js} exports no class {cls} ({module}'s)"
    for entry in functions:
        name, _, js_name = entry.partition("=")
        js_name = js_name or camel(name)
        assert re.search(rf"^\s*def {name}\(", python, re.M), f"{module} has no function {name}"
        in_class = re.search(rf"^  (?:async |static |get )?\*?{js_name}\(", node, re.M)  # a method of its class
        assert js_name in exported or in_class, f"{js} has no {js_name} (Python's {module}:{name})"


def test_comments_name_python_modules_that_exist():
    """Each tfm_export/....py (or runtime.x.y) a JS module names (its partner, the specification) exists,
    and none names the runtime's names from before its reorganisation."""
    stale = ("search.py", "greedy_loop", "search_steps", "GreedyRows", "runtime/whisper.py", "runtime/decoding.py",
             "runtime/generation.py", "runtime/speech.py", "whisper_search", "whisper_longform", "whisper_words",
             "WhisperPicker", "WhisperBeamSearch")
    for js in js_modules() + [f"test/{p.name}" for p in (NODE / "test").glob("*.mjs")]:
        text = (NODE / js).read_text()
        for path in re.findall(r"tfm_export/[\w/]+\.py", text):
            assert (ROOT / path).is_file(), f"{js} names {path}, which does not exist"
        for dotted in re.findall(r"(?<![\w.])(?:tfm_export\.)?(runtime(?:\.\w+)+)", text):  # runtime.decode.loop.run
            parts = dotted.split(".")
            assert any((PACKAGE.joinpath(*parts[:n]).with_suffix(".py")).is_file() for n in range(2, len(parts) + 1)), \
                f"{js} names {dotted}: no such module"
        found = [name for name in stale if re.search(rf"(?<![\w/]){re.escape(name)}", text)]
        assert not found, f"{js} names {found}: the runtime's modules are tfm_export/runtime/decode/loop.py etc."


def test_python_and_docs_name_js_modules_that_exist():
    """Each Node module the package, the tests, the tools and the docs name (by its runtimes/node path) exists."""
    texts = [*PACKAGE.rglob("*.py"), *(ROOT / "tests").glob("*.py"), *(ROOT / "tools").glob("*.py"),
             *(ROOT / "docs").glob("*.md"), ROOT / "README.md", ROOT / "runtimes" / "README.md", NODE / "README.md"]
    named = {(path.relative_to(ROOT).as_posix(), js) for path in texts
             for js in re.findall(r"runtimes/node/([\w/.-]+\.mjs)", path.read_text())}
    missing = sorted(f"{where}: runtimes/node/{js}" for where, js in named if not (NODE / js).is_file())
    assert not missing, missing


def js_imports(js: str) -> set[str]:
    """The modules of the package `js` imports (static and dynamic), relative to runtimes/node."""
    text = (NODE / js).read_text()
    here = PurePosixPath(js).parent
    found = re.findall(r"""(?:from|import\()\s*'(\.\.?/[\w./-]+)'""", text)
    return {posixpath.normpath(str(here / path)) for path in found}


def layer_of(js: str) -> int:
    for index, (_, members) in enumerate(JS_LAYERS):
        if any(js == m or (m.endswith("/") and js.startswith(m)) for m in members):
            return index
    raise AssertionError(f"{js} is in no layer of JS_LAYERS: add it to one")


def test_js_imports_go_down_the_layers():
    upward = []
    for js in js_modules():
        for target in js_imports(js):
            assert (NODE / target).is_file(), f"{js} imports {target}, which does not exist"
            if layer_of(target) > layer_of(js):
                upward.append(f"{js} ({JS_LAYERS[layer_of(js)][0]}) -> {target} ({JS_LAYERS[layer_of(target)][0]})")
    assert not upward, upward
