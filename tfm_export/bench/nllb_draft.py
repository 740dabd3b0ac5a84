"""`speculative`'s NLLB-600M cases (named with `--case`, minutes to build): the NLLB-600M layout exported float32
and `--quantize int4`, the int4 export the float32 one's own draft: with random weights (`nllb-600m-int4-draft`)
and as the trained nllb fixture widened into it (`nllb-600m-trained-int4-draft`, tfm_export.bench.widen), whose
translations are checked equal to the fixture's. The exports are kept in `--work` for the next run.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from ..runtime import GREEDY, RuntimeOptions, open_export
from . import fixtures
from .families import FULL, build
from .harness import prepared
from .speculative import FixedLength, Rows, call_costs, decode_side, timing_rows

VARIANTS = {"float32": (), "int4": ("--quantize", "int4")}  # the model, its draft
FIXED = 5  # the fixed num_assistant_tokens (transformers' "constant" schedule)
DISTIL = 800  # nllb-600m-trained-int4-draft: distillation steps of the widened fixture's proxy


def trained_export(family: str, folder: Path, source: Path | None = None, *flags: str) -> Path:
    """The trained fixture of `family` (or the folder `source`) exported into `folder` without validation, as
    `tfm-export SOURCE -o OUT --no-validate FLAGS` exports it."""
    from ..cli import cli

    out = folder / family
    source = source or fixtures.hf().trained_folder(family)
    cli.main([str(source), "-o", str(out), "--no-validate", *flags], standalone_mode=False)
    return out


def nllb_exports(work: Path, trained: bool = False) -> tuple[Path, Path]:
    """The NLLB-600M layout exported float32 and `--quantize int4` into `work`, each reused when there (a 600M
    export takes minutes on 2 cores): random weights, or `trained`: the trained nllb fixture widened into it
    (DISTIL steps)."""
    from .widen import nllb_fixture_widened

    name = "nllb-trained" if trained else "nllb"
    hf = work / f"{name}-hf"
    if trained:
        prepared(hf, lambda out: nllb_fixture_widened(out, FULL["nllb"][1], DISTIL))
    else:
        prepared(hf, lambda out: build("nllb", "full", 0, out))
    for variant, flags in VARIANTS.items():
        prepared(work / f"{name}-{variant}", lambda out: trained_export(out.name, out.parent, hf, *flags))
    return work / f"{name}-float32", work / f"{name}-int4"


def sides(model: Any, draft: Any, sources: list[list[int]], steps: int, config: Any) -> dict[str, Any]:
    """Plain greedy, the int4 self-draft with the shipped policy and with a fixed FIXED."""
    return {"plain": decode_side(model, sources, steps, config=config),
            "int4 self-draft": decode_side(model, sources, steps, config=config, assistant=draft),
            f"int4 self-draft, fixed {FIXED}": decode_side(model, sources, steps, policy=FixedLength, config=config,
                                                           assistant=draft, num_assistant_tokens=FIXED)}


def random_int4_draft(tmp: Path, args: argparse.Namespace, options: RuntimeOptions) -> Rows:
    """The NLLB-600M layout (random weights) float32, drafted by its own `--quantize int4` export: the shipped
    policy and a fixed draft length, on random ids and on words (the trained nllb fixture's held-out targets
    through its tokenizer: ids of real text, if of a smaller vocabulary)."""
    from transformers import AutoTokenizer

    model_folder, draft_folder = nllb_exports(args.work or tmp)
    model, draft = open_export(model_folder, args.device, options), open_export(draft_folder, args.device, options)
    rng, hf = np.random.default_rng(1), fixtures.hf()
    tokenizer = AutoTokenizer.from_pretrained(hf.trained_folder("nllb"))
    sources = {"random ids": [rng.integers(4, model.config.src_vocab_size - 1, 24).tolist()
                              for _ in range(args.sources)],
               "words": [tokenizer(e.target)["input_ids"] for e in hf.task_examples("nllb")[:args.sources]]}
    costs = [*call_costs("nllb-600m float32", model, sources["words"][0], args.rounds),
             *call_costs("nllb-600m int4 (the draft)", draft, sources["words"][0], args.rounds)]
    rows, steps = [], args.new_tokens
    config = GREEDY.replace(min_new_tokens=steps)  # EOS banned: the random layout ends every source at once
    for kind, srcs in sources.items():
        rows += timing_rows(f"nllb-600m-int4-draft, {kind}", sides(model, draft, srcs, steps, config), args.rounds)
    assert all(r["same_ids"] for r in rows), "speculation changed the ids"
    return rows, costs


def trained_int4_draft(tmp: Path, args: argparse.Namespace, options: RuntimeOptions) -> Rows:
    """The trained nllb fixture widened into the NLLB-600M layout, float32 drafted by its own `--quantize int4`
    export, on `--sources` held-out sources per target language: translations, the plain greedy ones checked
    equal to the fixture's own (transformers' generate) and scored against the references (exact match)."""
    model_folder, draft_folder = nllb_exports(args.work or tmp, trained=True)
    model, draft = open_export(model_folder, args.device, options), open_export(draft_folder, args.device, options)
    hf = fixtures.hf()
    fixture, tokenizer = hf.hf_model(hf.trained_folder("nllb")), hf.hf_tokenizer(hf.trained_folder("nllb"))
    rows, costs = [], []
    for lang in hf.TARGETS["nllb"]:
        examples = [e for e in hf.task_examples("nllb", 4 * args.sources) if e.lang == lang][:args.sources]
        tokenizer.src_lang = hf.LANGS["nllb"][0]
        sources = [tokenizer(e.source)["input_ids"] for e in examples]
        forced = tokenizer.convert_tokens_to_ids(hf.lang_token("nllb", hf.lang_code("nllb", lang)))
        config = GREEDY.replace(forced_bos_token_id=forced)
        ours = [tokenizer.decode(model.generate_ids([s], max_new_tokens=args.new_tokens, config=config)[0],
                                 skip_special_tokens=True).strip() for s in sources]
        theirs = hf.translate(fixture, tokenizer, "nllb", examples, num_beams=1, do_sample=False)
        print(f"to {lang}: greedy equals the fixture's on {sum(a == b for a, b in zip(ours, theirs))}/"
              f"{len(examples)} held-out sources, the reference on {sum(a == e.target for a, e in zip(ours, examples))}"
              f"; e.g. {examples[0].source!r} -> {ours[0]!r}")
        costs = costs or [*call_costs("nllb-600m trained float32", model, sources[0], args.rounds),
                          *call_costs("nllb-600m trained int4 (the draft)", draft, sources[0], args.rounds)]
        rows += timing_rows(f"nllb-600m-trained-int4-draft, to {lang}",
                            sides(model, draft, sources, args.new_tokens, config), args.rounds)
    assert all(r["same_ids"] for r in rows), "speculation changed the ids"
    return rows, costs
