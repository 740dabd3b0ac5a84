r"""Whisper in Node and in the browser: runtimes/node and the page vs transformers.js, real-time factor (#43).

    .venv/bin/python -m benchmarks js-speech [--layout base] [--vocab 51865] [--new-tokens 64] \
        [--seconds 20] [--repeat 5] [--threads 1] [--modes node-ours,node-tjs,browser-ours,browser-tjs] \
        [--no-check] [--tjs /work/tjs] [--optimum-python /work/optimum-venv/bin/python] \
        [--chromium /usr/bin/chromium] [--before-tree DIR] [--work DIR] [--json OUT.json]

transformers.js is a benchmark-only package, installed in a folder of its own (--tjs; never in runtimes/):

    mkdir -p /work/tjs && cd /work/tjs && npm init -y && \
        ONNXRUNTIME_NODE_INSTALL=skip npm install @huggingface/transformers@4.3.1

(ONNXRUNTIME_NODE_INSTALL=skip: onnxruntime-node's install script would fetch CUDA files from outside the
registry; its CPU build is in the package.) Optimum's export runs in its own venv (--optimum-python;
tfm_export/bench/optimum_worker.py says how to build it).

Modes, each on the same WAV file's samples (read once by runtimes/node/audio/io.mjs, not timed), language "en"
given, task transcribe, greedy, no timestamps, one window:
  node-ours     runtimes/node: openExport(`tfm-export FOLDER -o OUT`) and its transcribe (onnxruntime-node)
  node-tjs      transformers.js' automatic-speech-recognition pipeline (dtype fp32, device cpu: onnxruntime-
                node) on Optimum's export of the same folder (optimum_worker.py tjs: encoder_model.onnx and
                decoder_model_merged.onnx)
                (both: --threads intra-op threads, 1 inter-op; js_speech_node.mjs, one process each)
  browser-ours  the page (runtimes/web, `tfm-export serve-web OUT`) in headless Chromium: the file chosen with
                its file input, timed by the page around its transcribe (onnxruntime-web WASM, 1 thread)
  browser-tjs   transformers.js' web build in a page of its own (js_speech_browser.mjs's PAGE), on the page's
                onnxruntime-web (the same files: build and version), 1 WASM thread; the same Optimum export
                (both: js_speech_browser.mjs, one Chromium)
  node-before   node-ours with the runtimes/node of --before-tree (an earlier checkout), on the same export: a
                change's cost or gain (x ours: its time over node-ours'); without a -tjs mode no Optimum venv
                nor transformers.js is needed
Every mode is timed inside its process around the transcription of the samples: log-mel features, encoder,
decoder steps, the text. The model's load (opening the export or the pipeline; in the browser, from navigation
until ready) is timed once and reported apart. Each mode runs once as a warm-up, then each repeat runs every mode
once, in an order rotated per repeat, after a 0.3 s rest. RTF = median seconds / audio seconds; x ours is the
median over repeats of the ratio to ours on the same runtime (Node or browser) in the same repeat.

Models:
1. random LAYOUT (the headline): `whisper-speed`'s random-weight folder of a published layout (base: d_model
   512, 6 + 6 layers, 30 s windows; tiny; smoke: 64 wide, 2 + 2, 4 s windows, for smoke runs) with a
   vocabulary of --vocab ids, its EOS row of the (tied) embedding zeroed so EOS's logit is 0 and never the
   largest of --vocab random logits: both sides generate exactly --new-tokens tokens (ours: the folder's
   max_length, set to --new-tokens; transformers.js: max_new_tokens). The file: --seconds of held-out
   espeak-ng digits (whisper_speed.long_recording), at most one window.
2. whisper-digits (trained), unless --no-check: the repository's fixture on 3.5 s of held-out digits; both
   sides stop at EOS (the folder's max_length): a check that they give the same ids and text.
The ids columns say whether each mode's ids equal node-ours'. --work keeps the folders, exports and recordings
for a rerun.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tfm_export.bench import fixtures, harness
from tfm_export.bench.fixtures import long_recording, random_folder
from tfm_export.bench.js_speech import WORKERS, Worker, node_worker, versions
from tfm_export.bench.optimum_client import tjs_folder
from tfm_export.bench.whisper import RATE, exported

ROOT = fixtures.ROOT
TOOL = "tfm-export `benchmarks js-speech`"
MODES = ("node-ours", "node-tjs", "browser-ours", "browser-tjs", "node-before")
PAUSE = 0.3  # seconds of rest before each timed call
CHECK_SECONDS = 3.5  # the trained fixture's file: inside its 4 s window
NOTES = [
    "time: inside each process, around the transcription of the WAV file's float32 samples (log-mel features, "
    "encoder, decoder steps, the text); load: opening the model once (ours: the sha256 of every file checked, as "
    "openExport and the page do), in the browser from navigation until the page is ready",
    "Node: onnxruntime-node on both sides (CPU), the same intra-op threads and 1 inter-op thread",
    "browser: headless Chromium, onnxruntime-web WASM, 1 thread (no cross-origin isolation), the page's "
    "build (ort.wasm.min.mjs) for both: transformers.js is given it through an import map, not its own "
    "onnxruntime-web (a 1.31 dev build), so both run the same kernels",
    "transformers.js: Optimum's export (encoder_model.onnx, decoder_model_merged.onnx, float32), dtype fp32",
    "random layouts: EOS's embedding row is zeroed so that both generate exactly --new-tokens tokens (ours: the "
    "folder's max_length; transformers.js: max_new_tokens); same ids: equal to node-ours' on the last run",
]


# ---- folders and files ---------------------------------------------------------------------------


def headline_folder(layout: str, folder: Path, vocab: int, new_tokens: int) -> Path:
    """whisper_speed's random folder made to generate exactly `new_tokens` tokens (EOS's row zeroed), with the
    language and task maps transformers.js needs (and the page's language list)."""
    from safetensors.numpy import load_file, save_file
    LANGUAGES = fixtures.whisper().LANGUAGES

    random_folder(layout, folder, vocab)
    added = {t["content"]: t["id"] for t in json.loads((folder / "tokenizer.json").read_text())["added_tokens"]}
    gen = json.loads((folder / "generation_config.json").read_text())
    gen.update(lang_to_id={f"<|{c}|>": added[f"<|{c}|>"] for c in LANGUAGES if f"<|{c}|>" in added},
               task_to_id={t: added[f"<|{t}|>"] for t in ("transcribe", "translate")},
               max_length=new_tokens, is_multilingual=True)
    (folder / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    weights = load_file(folder / "model.safetensors")
    for name in ("model.decoder.embed_tokens.weight", "proj_out.weight"):  # tied: proj_out is rarely saved
        if name in weights:
            weights[name][gen["eos_token_id"]] = 0.0
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def tjs_export(folder: Path, out: Path, python: Path, modes: str) -> Path | None:
    """optimum_worker.py tjs's transformers.js folder of `folder` (reused when there); None when no mode of
    `modes` runs transformers.js (no Optimum venv needed then)."""
    if not any(mode.endswith("-tjs") for mode in modes.split(",")):
        return None
    return tjs_folder(python, folder, out)


def recording(seconds: float, work: Path) -> tuple[Path, float]:
    """(a float WAV of `seconds` of held-out digits, its length): whisper_speed.long_recording's file."""
    samples, _ = long_recording(ROOT / "models" / "whisper-digits", seconds, 0, work)
    return work / f"digits_{seconds:g}s_0.wav", len(samples) / RATE


# ---- workers -------------------------------------------------------------------------------------


def open_modes(modes: list[str], ours: Path, tjs: Path, args: argparse.Namespace) -> tuple[dict, dict, list]:
    """({mode: ask(request)}, {mode: load seconds}, the workers): the Node processes and one browser process."""
    node = ["node", str(WORKERS / "js_speech_node.mjs")]
    calls, loads, workers = {}, {}, []
    before = ["node", str(node_worker(Path(args.before_tree or ".")))]
    for mode, side, folder, script in (("node-ours", "ours", ours, node), ("node-tjs", "tjs", tjs, node),
                                       ("node-before", "ours", ours, before)):
        if mode in modes:
            worker = Worker([*script, side, str(folder), "--threads", str(args.threads), "--tjs", str(args.tjs)])
            workers.append(worker)
            calls[mode], loads[mode] = worker.ask, worker.ready["load_s"]
    if any(m.startswith("browser-") for m in modes):
        worker = Worker(["node", str(WORKERS / "js_speech_browser.mjs"), "--export", str(ours), "--tjs-model", str(tjs),
                         "--tjs", str(args.tjs), "--python", sys.executable, "--chromium", args.chromium])
        workers.append(worker)
        for side in ("ours", "tjs"):
            calls[f"browser-{side}"] = lambda request, s=side, w=worker: w.ask({**request, "mode": s})
            loads[f"browser-{side}"] = worker.ready["load_s"][side]
    return {m: calls[m] for m in modes}, loads, workers


# ---- measures ------------------------------------------------------------------------------------


def request(mode: str, wav: Path, new_tokens: int | None) -> dict[str, Any]:
    """Ours takes the folder's max_length (the page has no such field); transformers.js max_new_tokens."""
    return {"wav": str(wav), "language": "en", "max_new_tokens": new_tokens if mode.endswith("-tjs") else None}


def measure(label: str, ours: Path, tjs: Path, wav: Path, audio_s: float, new_tokens: int | None,
            args: argparse.Namespace) -> list[dict[str, Any]]:
    """One model's rows: every mode warmed up, then `repeat` rounds in rotated order."""
    modes = [m for m in args.modes.split(",") if m]
    calls, loads, workers = open_modes(modes, ours, tjs, args)
    try:
        last = {mode: call(request(mode, wav, new_tokens)) for mode, call in calls.items()}  # warm-up
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        for r, order in enumerate(harness.rotation(modes, args.repeat)):
            for mode in order:
                time.sleep(PAUSE)
                last[mode] = calls[mode](request(mode, wav, new_tokens))
                times[mode].append(last[mode]["seconds"])
                print(f"{label} repeat {r + 1}: {mode} {last[mode]['seconds']:.3f} s", file=sys.stderr)
    finally:
        for worker in workers:
            worker.close()
    reference = last.get("node-ours", next(iter(last.values())))
    rows = []
    for mode in modes:
        base = f"{mode.split('-')[0]}-ours"
        ratio = (harness.median(a / b for a, b in zip(times[mode], times[base])) if base in times else None)
        median = harness.median(times[mode])
        rows.append({"model": label, "mode": mode, "audio_s": audio_s, "load_s": loads[mode], "runs_s": times[mode],
                     "median_s": median, "rtf": median / audio_s, "ratio_to_ours": ratio,
                     "new_tokens": len(last[mode]["ids"]), "same_ids": last[mode]["ids"] == reference["ids"],
                     "text": last[mode]["text"][:120]})
    return rows


# ---- report --------------------------------------------------------------------------------------


def markdown(report: dict[str, Any]) -> str:
    s = report["settings"]
    lines = [f"## Whisper RTF in Node and the browser vs transformers.js: median of {s['repeat']}, Node "
             f"{s['threads']} intra-op thread(s), browser 1 WASM thread", "",
             "| model | mode | audio s | load s | median s | RTF | x ours | new tokens | same ids |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in report["rows"]:
        ratio = "-" if r["ratio_to_ours"] is None else f"{r['ratio_to_ours']:.2f}"
        lines.append(f"| {r['model']} | {r['mode']} | {r['audio_s']:.1f} | {r['load_s']:.2f} | {r['median_s']:.3f} "
                     f"| {r['rtf']:.4f} | {ratio} | {r['new_tokens']} | {'yes' if r['same_ids'] else 'NO'} |")
    lines += ["", *(f"- {note}" for note in report["notes"])]
    lines += [f"- {k}: {v}" for k, v in report["machine"].items()]
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layout", default="base", help="the headline's random layout: base, tiny or smoke; '' for none")
    p.add_argument("--vocab", type=int, default=51865, help="vocabulary of the random folder")
    p.add_argument("--new-tokens", type=int, default=64, help="tokens the random model generates")
    p.add_argument("--seconds", type=float, default=20.0, help="the headline's file (capped to its window)")
    p.add_argument("--repeat", type=int, default=5, help="timed rounds of every mode (after a warm-up)")
    p.add_argument("--threads", type=int, default=1, help="Node's intra-op threads, both sides")
    p.add_argument("--modes", default=",".join(MODES[:4]), help="comma-separated, of " + ", ".join(MODES))
    p.add_argument("--no-check", action="store_true", help="skip the trained fixture")
    p.add_argument("--tjs", type=Path, default=Path("/work/tjs"), help="where @huggingface/transformers is installed")
    p.add_argument("--optimum-python", type=Path, default=Path("/work/optimum-venv/bin/python"))
    p.add_argument("--before-tree", type=Path, help="node-before's checkout (e.g. `git worktree add B COMMIT`, its "
                   "runtimes/node/node_modules installed): its runtimes/node on the same export, against node-ours")
    p.add_argument("--chromium", default=os.environ.get("CHROMIUM", "/usr/bin/chromium"))
    p.add_argument("--work", type=Path, help="keep folders, exports and recordings here (reused)")
    p.add_argument("--json", type=Path, help="write the report here")
    return p.parse_args()


def models(args: argparse.Namespace, work: Path) -> list[tuple]:
    """(label, our export, transformers.js folder, WAV, audio seconds, new tokens for transformers.js)."""
    out = []
    if args.layout:
        folder = headline_folder(args.layout, work / f"random-{args.layout}-{args.vocab}-n{args.new_tokens}",
                                 args.vocab, args.new_tokens)
        window = json.loads((folder / "preprocessor_config.json").read_text())["chunk_length"]
        wav, seconds = recording(min(args.seconds, window - 0.5), work)
        out.append((f"random {args.layout}", exported(folder, folder.with_name(folder.name + "-ours"), None),
                    tjs_export(folder, folder.with_name(folder.name + "-tjs"), args.optimum_python, args.modes), wav,
                    seconds,
                    args.new_tokens))
    if not args.no_check:
        fixture = ROOT / "models" / "whisper-digits"
        wav, seconds = recording(CHECK_SECONDS, work)
        out.append(("whisper-digits (trained)", exported(fixture, work / "digits-ours", None),
                    tjs_export(fixture, work / "digits-tjs", args.optimum_python, args.modes), wav, seconds, None))
    return out


def js_speech_main() -> None:
    args = parse_args()
    machine_info = harness.machine_info

    with contextlib.ExitStack() as stack:
        work = args.work or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="js_speech_")))
        work.mkdir(parents=True, exist_ok=True)
        rows = [row for model in models(args, work) for row in measure(*model, args)]
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    machine = {**machine_info(args.threads), **versions(args.tjs, args.chromium)}
    report = {"tool": TOOL, "machine": machine, "settings": settings, "rows": rows, "notes": NOTES}
    print(markdown(report))
    if args.json:
        harness.write_text(args.json, json.dumps(report, indent=2) + "\n")
