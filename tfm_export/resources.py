"""The files tfm-export ships besides its code: the browser page and the bundled demo model.

A wheel carries them under tfm_export/_data/ (setup.py copies them there at build time); a checkout or an
editable install keeps them in the repository's runtimes/ and models/ folders, where users edit them.
`bundled(name)` finds either. Standard library only: setup.py loads this file to learn what to copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]  # the repository root when running from a checkout
DATA = "_data"  # the folder inside the installed package


@dataclass(frozen=True)
class Bundle:
    """One folder of shipped files: where it sits in the wheel and in a checkout, and what the wheel takes."""

    packaged: str  # relative to tfm_export/_data/
    checkout: str  # relative to the repository root
    files: tuple[str, ...]  # relative to `checkout` (and to `packaged` in the wheel): subfolders are kept
    optional: bool = False  # the build goes on without it (npm's files are not in git)


BUNDLES = {
    "web": Bundle("web", "runtimes/web", ("index.html", "app.mjs", "ids.mjs", "speech-page.mjs", "audio-in.mjs",
                                          "live-text.mjs", "recorder-worklet.js", "commonjs.mjs", "fft-shim.mjs",
                                          "wavefile-shim.mjs")),
    # The runtime-agnostic modules the page shares with Node, in the folders of the Python runtime they port
    # (decode/, states/, options/, speech/; text/ and audio/ as tfm_export's), with the compatibility entry
    # points decoding.mjs and greedy.mjs, and the client of `tfm-export serve` (client.mjs) for server mode.
    # Node's own files (exported.mjs, translate.mjs, cli*.mjs: onnxruntime-node, node:fs) are not the page's.
    "lib": Bundle("lib", "runtimes/node", ("api.mjs", "checks.mjs", "sources.mjs", "decoding.mjs", "greedy.mjs",
                                          "client.mjs", "shortlisted.mjs", "options/generation.mjs",
                                          "decode/loop.mjs", "decode/strategies.mjs", "decode/beam.mjs",
                                          "decode/sampling.mjs", "decode/processors.mjs", "decode/prefix.mjs",
                                          "decode/scoring.mjs", "decode/vmap.mjs",
                                          # speculative greedy decoding (api.mjs imports speculating.mjs)
                                          "speculating.mjs", "decode/speculative.mjs", "decode/proposers.mjs",
                                          "decode/draft_length.mjs", "decode/checking.mjs",
                                          "decode/speculative_sampling.mjs",
                                          "states/growing.mjs", "states/nocache.mjs", "states/reorder.mjs",
                                          "states/shortlist.mjs",
                                          "text/tokenizer.mjs", "text/charsmap.mjs", "text/sentencepiece.mjs",
                                          "text/marian.mjs",
                                          # Whisper transcription (the page's speech section)
                                          "speech/whisper.mjs", "speech/prompt.mjs", "speech/prompt_text.mjs",
                                          "speech/subtitles.mjs", "speech/rules.mjs",
                                          "speech/search.mjs", "speech/longform.mjs", "speech/words.mjs",
                                          "speech/assisted.mjs",
                                          "speech/alignment.mjs", "speech/fallback.mjs", "speech/streaming.mjs",
                                          "speech/silero.mjs", "speech/vad.mjs", "speech/chunks.mjs",
                                          # batched long form (the page's "batch" with "skip silence")
                                          "speech/batch.mjs", "speech/batch_rounds.mjs", "decode/together.mjs",
                                          "audio/features.mjs", "audio/spectrum.mjs", "audio/io.mjs")),
    # The libraries those import (runtimes/node's copies, after `npm ci` there): served at /npm/
    "fft": Bundle("fft", "runtimes/node/node_modules/fft.js/lib", ("fft.js",), optional=True),
    "wavefile": Bundle("wavefile", "runtimes/node/node_modules/wavefile/dist", ("wavefile.js",), optional=True),
    # zlib's deflate (speech/longform.mjs's compression ratio), an ES module: imported as it is, no shim
    "pako": Bundle("pako", "runtimes/node/node_modules/pako/dist", ("pako.esm.mjs",), optional=True),
    # The page's tokenizer.json reader (@huggingface/tokenizers, from `npm ci` in runtimes/web).
    "tokenizers": Bundle("tokenizers", "runtimes/web/node_modules/@huggingface/tokenizers/dist",
                         ("tokenizers.min.mjs",), optional=True),
    # What app.mjs loads from onnxruntime-web (the WASM build, no proxy worker); ~14 MB, ~4 MB zipped.
    "ort": Bundle("ort", "runtimes/web/node_modules/onnxruntime-web/dist",
                  ("ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm"), optional=True),
    "num2words-de": Bundle("models/num2words-de", "models/num2words-de",
                           ("model.pt", "heldout.tsv", "short.tsv", "README.md")),
    # Silero VAD (MIT), runtime.speech.silero's model: `transcribe --vad`, the server's chunking_strategy
    "silero-vad": Bundle("models/silero-vad", "models/silero-vad",
                         ("silero_vad_16k_op15_batched.onnx", "LICENSE", "README.md")),
}


def bundled(name: str) -> Path:
    """The folder holding bundle `name`: in the installed package if it has _data/ (a wheel), else the checkout's.

    The path may not exist (a wheel built without `npm ci`); callers say what is missing.
    """
    data = Path(str(resources.files("tfm_export").joinpath(DATA)))
    return data / BUNDLES[name].packaged if data.is_dir() else CHECKOUT / BUNDLES[name].checkout
