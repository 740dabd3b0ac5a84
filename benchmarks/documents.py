"""A document end to end: ours (`translate(..., split_sentences=True)`) against CTranslate2's translate_iterable."""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks import quality
from tfm_export.bench.documents import CASES, Case, planned
from tfm_export.bench import harness

DOC = r"""A document end to end, ours against CTranslate2's translate_iterable on the same weights (#62).

    .venv/bin/python -m benchmarks documents [--case fixture|opus-mt] [--words 3000] [--rounds 5] [--threads 2] \
        [--work DIR] [--folder tests/fixtures/trained/nllb] [--new-tokens N] [--no-int8] \
        [--batch-types examples,tokens] [--spin on|off|both] [--in-process] [--profile] [--json OUT]

The trained NLLB fixture (digits -> words, tests/test_documents.py's model) exported with `tfm-export FOLDER -o
OUT` (float32, and `--quantize int8`) and converted for CTranslate2 from the same folder (quality.convert_folder;
CTranslate2 quantises to int8 at load time). The document: WORDS one-number sentences ("7953.") in paragraphs of
10, eng_Latn -> deu_Latn, greedy, the export's max length on both sides.

    ours  model.translate([document], split_sentences=True): split (text.sentences), encoded, decoded
          DOCUMENT_BATCH sentences at a time in length order, joined back with the document's whitespace
    ct2   the same sentences (split once by our splitter, untimed: `split_s` is that split's time), encoded
          with the export's tokenizer, translator.translate_iterable(max_batch_size=DOCUMENT_BATCH,
          batch_type examples, and tokens at that times a sentence's mean tokens: a side each) (it
          reads ahead and sorts by length), decoded and joined the same way

Both with --threads threads (ORT intra-op, CTranslate2 intra_threads, inter_threads=1), interleaved rounds
(harness.interleave), each run in a fresh process that runs its side once untimed first (`--in-process`: all
sides in one process, where CTranslate2's 2 threads ran up to 10x slower than alone on this VM). Agreement: the
share of identical sentences and chrF (sacrebleu) of ours against CTranslate2's, per precision. `--profile`:
cProfile's top 15 of one of our float32 documents (in this process).

`--case opus-mt`: the size a step costs what it does in use: the opus-mt-sized random Marian folder (`benchmarks
opus-mt-folder`'s: 6 + 6 layers of 512, vocab 15,600, the Marian fixture's SentencePiece files), built in WORK;
WORDS sentences of 1 to 5 of the fixture's English phrases (5-45 tokens), to >>de<<. Random weights never end a sentence, so
every sentence decodes exactly --new-tokens ids on both sides (greedy): ours max_new_tokens N, stop_at_eos False
(EOS ignored) and forced EOS off, CTranslate2 min_decoding_length = max_decoding_length = N (EOS banned); the
report gives each side's output lengths (`lengths`), counted from the ids.
"""


def exported(folder: Path, out: Path, quantize: str | None, flags: tuple[str, ...] = ()) -> Path:
    """`tfm-export FOLDER -o OUT [--quantize int8] [FLAGS]`, unless a previous run left it."""
    if not (out / "manifest.json").exists():
        cli = Path(sys.executable).with_name("tfm-export")
        quantized = ["--quantize", quantize] if quantize else []
        cmd = [str(cli), str(folder), "-o", str(out), "--force", *flags, *quantized]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return out


def timed(work: Callable[[], Any]) -> dict[str, Any]:
    """work()'s wall and process CPU seconds (all threads), and its result."""
    cpu = time.process_time()
    out: list[Any] = []
    seconds = harness.timed(lambda: out.append(work()))
    return {"seconds": seconds, "cpu_s": time.process_time() - cpu, "result": out[0]}


def ours_side(runner: Any, text: str, case: Case, new_tokens: int) -> Callable[[], dict[str, Any]]:
    options = {**case.langs(), **case.ours(new_tokens)}
    return lambda: timed(lambda: runner.translate([text], split_sentences=True, **options)[0])


def ct2_side(decoder: Any, text: str, case: Case, new_tokens: int, batch_type: str, max_batch: int
             ) -> Callable[[], dict[str, Any]]:
    from tfm_export.text import sentences

    plan = planned(decoder.runner, case, text)
    texts = sentences.texts_of(plan)

    def translate() -> tuple[list[str], list[int]]:
        tokens, prefix, settings = decoder.request(texts, case.langs(), case.ct2(new_tokens))
        results = list(decoder.translator.translate_iterable(
            tokens, target_prefix=[prefix] * len(tokens) if prefix else None, max_batch_size=max_batch,
            batch_type=batch_type, **settings))
        out = [decoder.text(r, prefix) for r in results]
        sentences.join(plan, out)  # the document, as ours gives it (the rows are what is compared)
        return out, [len(r.hypotheses[0]) - len(prefix) for r in results]

    def run() -> dict[str, Any]:
        done = timed(translate)
        done["result"], lengths = done["result"]
        return {**done, "lengths": sorted(set(lengths))}
    return run


def our_sentences(runner: Any, texts: list[str], batch: int, case: Case, new_tokens: int
                  ) -> tuple[list[str], list[int]]:
    """Ours sentence by sentence, in the library's DOCUMENT_BATCH chunks by length (the rows its document path
    decodes): their texts and the distinct lengths of their ids."""
    from tfm_export.text import sentences

    options = {**runner.language_options(case.target), **case.ours(new_tokens)}
    ids = [runner.encode(t, **case.langs()) for t in texts]
    rows = sentences.by_length(ids, batch, lambda chunk: runner.generate_ids(chunk, **options))
    forced = "forced_bos_token_id" in options  # its language token: CTranslate2's target prefix, not counted
    return [runner.tokenizer.decode(row) for row in rows], sorted({len(row) - forced for row in rows})


def profile(run: Callable[[], Any]) -> str:
    profiler = cProfile.Profile()
    profiler.runcall(run)
    stream = io.StringIO()
    pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(15)
    return stream.getvalue()


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=tuple(CASES), default="fixture",
                        help="the trained NLLB fixture (default) or the opus-mt-sized random Marian")
    parser.add_argument("--folder", type=Path, help="Hugging Face folder (default: the case's)")
    parser.add_argument("--words", type=int, default=3000,
                        help="the document's sentences (fixture: one number each; opus-mt: 1-5 phrases)")
    parser.add_argument("--new-tokens", type=int, help="ids every sentence decodes, EOS ignored (0: as the "
                        "model ends them; default: the case's, opus-mt 24)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timed rounds")
    parser.add_argument("--threads", type=int, default=2, help="threads per side")
    parser.add_argument("--work", type=Path, help="exports, CT2 model (default: /tmp/bench-documents[-CASE])")
    parser.add_argument("--no-int8", action="store_true", help="float32 only")
    parser.add_argument("--batch-types", default="examples,tokens",
                        help="translate_iterable's batch_type(s), comma-separated: a CT2 side each")
    parser.add_argument("--max-batch", type=int, default=0,
                        help="translate_iterable's max_batch_size (0: our DOCUMENT_BATCH sentences; tokens: "
                             "that times a sentence's mean source tokens)")
    parser.add_argument("--spin", choices=tuple(SPIN), default="on",
                        help="ORT's spin-waiting threads on ours (the default), off, or both as two sides")
    parser.add_argument("--in-process", dest="isolate", action="store_false",
                        help="every side in this process (default: a fresh process a run, warmed up once: one "
                             "side's idle thread pools cannot slow another's)")
    parser.add_argument("--profile", action="store_true", help="cProfile top 15 of one of our documents")
    parser.add_argument("--json", type=Path, help="write the report here")
    args = parser.parse_args()
    case = CASES[args.case]
    args.folder = args.folder or case.folder(args.work or Path(f"/tmp/bench-documents-{args.case}"))
    args.work = args.work or Path("/tmp/bench-documents" + ("" if args.case == "fixture" else f"-{args.case}"))
    args.new_tokens = case.new_tokens if args.new_tokens is None else args.new_tokens
    return args


SPIN = {"on": {"": True}, "off": {" no-spin": False}, "both": {"": True, " no-spin": False}}  # --spin: ours sides


def side(spec: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    """One side from its spec (kind ours|ct2, export folder, threads, spin; ct2: model, batch type and size)."""
    from tfm_export.runtime import RuntimeOptions, open_export

    options = RuntimeOptions(intra_op_threads=spec["threads"], spin_wait=spec.get("spin", True))
    runner = open_export(spec["export"], "cpu", options=options)
    case = CASES[spec["case"]]
    text = case.document(spec["words"])
    if spec["kind"] == "ours":
        return ours_side(runner, text, case, spec["new_tokens"])
    decoder = quality.TextDecoder(Path(spec["ct2"]), spec["precision"], runner, threads=spec["threads"])
    return ct2_side(decoder, text, case, spec["new_tokens"], spec["batch_type"], spec["max_batch"])


def worker() -> None:
    """A fresh process's measurement (--isolate): the spec's side run once untimed, then once timed, as JSON."""
    run = side(json.loads(sys.argv[1]))
    run()
    print(json.dumps(run()))


def fresh(spec: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    cmd = [sys.executable, "-c", "from benchmarks.documents import worker; worker()", json.dumps(spec)]
    return lambda: harness.run_json(cmd, cwd=Path(__file__).resolve().parents[1], timeout=600)


def batch_sizes(args: argparse.Namespace, runner: Any, text: str) -> dict[str, int]:
    """translate_iterable's max_batch_size per batch type: --max-batch, or our DOCUMENT_BATCH sentences
    (tokens: times a sentence's mean source tokens)."""
    from tfm_export.runtime.api import DOCUMENT_BATCH
    from tfm_export.text import sentences

    case = CASES[args.case]
    texts = sentences.texts_of(planned(runner, case, text))
    mean = round(sum(len(runner.encode(t, **case.langs())) for t in texts) / len(texts))
    return {kind: args.max_batch or DOCUMENT_BATCH * (mean if kind == "tokens" else 1)
            for kind in args.batch_types.split(",")}


def sides(args: argparse.Namespace, precisions: list[str], text: str
          ) -> tuple[dict[str, Callable[[], dict[str, Any]]], dict[str, tuple[str, Any]], dict[str, int]]:
    """"ours P[ no-spin]" and "ct2 P BATCH_TYPE" for each precision P, each in a fresh process a run
    (--isolate) or all in this one; ours sides' (precision, opened export), for the agreement; the batches."""
    from tfm_export.runtime import open_export

    ct2_dir = quality.convert_folder(args.folder, args.work / "ct2")
    make = fresh if args.isolate else side
    runners, out, batches = {}, {}, {}
    for p in precisions:
        folder = exported(args.folder, args.work / f"ours-{p}", None if p == "float32" else p,
                          CASES[args.case].export_flags)
        batches = batches or batch_sizes(args, open_export(folder, "cpu"), text)
        base = {"precision": p, "export": str(folder), "threads": args.threads, "words": args.words,
                "case": args.case, "new_tokens": args.new_tokens}
        for suffix, spin in SPIN[args.spin].items():
            runners[f"ours {p}{suffix}"] = (p, open_export(folder, "cpu"))
            out[f"ours {p}{suffix}"] = make({**base, "kind": "ours", "spin": spin})
        for kind, size in batches.items():
            out[f"ct2 {p} {kind}"] = make({**base, "kind": "ct2", "ct2": str(ct2_dir), "batch_type": kind,
                                           "max_batch": size})
    return out, runners, batches


def rows(samples: dict[str, list[dict[str, Any]]], runners: dict[str, tuple[str, Any]], text: str,
         batches: dict[str, int], args: argparse.Namespace) -> list[dict[str, Any]]:
    """A row per ours side and CTranslate2 batch type: medians, throughputs, the ratio, the agreement and
    the output lengths."""
    import sacrebleu

    from tfm_export.runtime.api import DOCUMENT_BATCH
    from tfm_export.text import sentences

    case = CASES[args.case]
    plan = planned(next(iter(runners.values()))[1], case, text)
    n, words = len(sentences.texts_of(plan)), len(text.split())
    out = []
    for name, (p, runner) in runners.items():
        ours = samples[name]
        rows_, lengths = our_sentences(runner, sentences.texts_of(plan), DOCUMENT_BATCH, case, args.new_tokens)
        mine = [t.strip() for t in rows_]
        joined = sentences.join(plan, rows_) == ours[-1]["result"]  # the document is these rows joined back
        t_ours = harness.median(s["seconds"] for s in ours)
        for kind, size in batches.items():
            ct2 = samples[f"ct2 {p} {kind}"]
            theirs = ct2[-1]["result"]
            t_ct2 = harness.median(s["seconds"] for s in ct2)
            out.append({"ours": name, "precision": p, "batch_type": kind, "max_batch_size": size, "sentences": n,
                        "words": words,
                        "ours_s": t_ours, "ct2_s": t_ct2, "ours_rounds": [s["seconds"] for s in ours],
                        "ct2_rounds": [s["seconds"] for s in ct2],
                        "ours_cpu_s": harness.median(s["cpu_s"] for s in ours),
                        "ct2_cpu_s": harness.median(s["cpu_s"] for s in ct2),
                        "ours_sentences_per_s": n / t_ours, "ct2_sentences_per_s": n / t_ct2,
                        "ours_words_per_s": words / t_ours, "ct2_words_per_s": words / t_ct2,
                        "ours_over_ct2": t_ct2 / t_ours,  # > 1: ours faster
                        "best_ours_over_ct2": min(s["seconds"] for s in ct2) / min(s["seconds"] for s in ours),
                        "identical": sum(a == b for a, b in zip(mine, theirs)) / n,
                        "chrf_ours_vs_ct2": sacrebleu.corpus_chrf(mine, [theirs]).score,
                        "rows_join_to_document": joined, "ours_lengths": lengths,
                        "ct2_lengths": sorted({n for s in ct2 for n in s["lengths"]})})
    return out


def split_seconds(text: str, runner: Any, case: Case) -> float:
    return harness.median(harness.timed(lambda: planned(runner, case, text)) for _ in range(3))


def documents_main() -> int:
    args = parse()
    args.work.mkdir(parents=True, exist_ok=True)
    case = CASES[args.case]
    text = case.document(args.words)
    precisions = ["float32"] + ([] if args.no_int8 else ["int8"])
    runs, runners, batches = sides(args, precisions, text)
    samples = harness.interleave(runs, harness.Plan(rounds=args.rounds, warmup=0 if args.isolate else 1),
                                 progress=lambda line: print(line, file=sys.stderr))
    report = harness.Report("documents", {"case": args.case, "words": args.words, "rounds": args.rounds,
                                          "threads": args.threads, "folder": str(args.folder),
                                          "new_tokens": args.new_tokens},
                            machine=harness.machine_info(args.threads))
    report.rows = rows(samples, runners, text, batches, args)
    report.settings["split_s"] = split_seconds(text, next(iter(runners.values()))[1], case)
    print(report.machine_line())
    print(harness.markdown_table(report.rows, [
        harness.Column("ours"), harness.Column("batch_type", "CT2 batch_type"), harness.Column("sentences"),
        harness.Column("ours_sentences_per_s", "ours sentences/s", "{:.0f}"),
        harness.Column("ct2_sentences_per_s", "CT2 sentences/s", "{:.0f}"),
        harness.Column("ours_over_ct2", "speed ours / CT2", "{:.2f}"),
        harness.Column("best_ours_over_ct2", "best round / best round", "{:.2f}"),
        harness.Column("identical", "identical sentences", "{:.1%}"),
        harness.Column("chrf_ours_vs_ct2", "chrF ours vs CT2", "{:.2f}"),
        harness.Column("ours_cpu_s", "ours CPU s", "{:.2f}"), harness.Column("ct2_cpu_s", "CT2 CPU s", "{:.2f}"),
        harness.Column("ours_lengths", "ours lengths"), harness.Column("ct2_lengths", "CT2 lengths")]))
    print(f"split (our splitter, its count): {report.settings['split_s']:.3f} s a document")
    if args.profile:
        from tfm_export.runtime import RuntimeOptions, open_export

        mine = open_export(args.work / "ours-float32", "cpu", options=RuntimeOptions(intra_op_threads=args.threads))
        report.settings["profile"] = profile(lambda: mine.translate(
            [text], split_sentences=True, **case.langs(), **case.ours(args.new_tokens)))
        print(report.settings["profile"])
    if args.json:
        report.write(args.json)
    return 0
