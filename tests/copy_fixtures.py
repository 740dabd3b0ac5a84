"""A copy-heavy summarization-like task and its trained BART folder (tests only; issue #63).

    copy_folder()              the committed folder, tests/fixtures/trained_copy/bart (saved as published)
    copy_example(rng)          one (source, target) pair of the task
    copy_examples(count)       held-out pairs (a seed the training never draws from)

The task: the source is 29-61 words of a closed word list (WORDS) with a marker "|" after the first 20-40; the
answer is the words before the marker (a "lead" summary). So the answer copies a long span of its source
(20-40 words, each one BPE token), which is what prompt lookup drafts from.
tests/fixtures/train_copy_fixture.py builds the tokenizer and trains the folder; tests/fixtures/README.md is
its model card ("Copy-heavy BART").
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import hf_fixtures as H

ROOT = H.HERE / "fixtures" / "trained_copy"  # one folder per family: its config, ids, generation_config.json
FOLDER = ROOT / "bart"
TRAIN_SEED, HELDOUT_SEED = 1234, 99  # held-out pairs come from a generator the training never uses
WORDS = tuple("""
the a one two three small large old new red blue green dark bright quiet loud river hill town road field
house garden tree stone bridge window door table letter book song story morning evening night winter summer
rain wind light fire water bird horse dog cat child man woman friend teacher doctor farmer king queen city
market station train ship boat cloud mountain forest lake island village street school church castle tower
walked ran saw heard found gave took made kept left brought opened closed built carried followed watched
and but then near under over behind before after with from into across along beside through today
""".split())


def copy_example(rng: random.Random) -> tuple[str, str]:
    """(source, target): a lead of 20-40 words, the marker "|", then 8-20 words more; the target is the lead
    (a "lead" summary, as the lead-3 baseline of news summarization)."""
    lead = [rng.choice(WORDS) for _ in range(rng.randint(20, 40))]
    rest = [rng.choice(WORDS) for _ in range(rng.randint(8, 20))]
    return " ".join(lead + ["|"] + rest), " ".join(lead)


def copy_examples(count: int = 20, seed: int = HELDOUT_SEED) -> list[tuple[str, str]]:
    """`count` held-out (source, target) pairs; the training draws its pairs from TRAIN_SEED's generator."""
    rng = random.Random(seed)
    return [copy_example(rng) for _ in range(count)]


def build_copy_tokenizer(folder: Path, corpus: list[str]):
    """Byte-level BPE (bart's kind, H.bart_tokenizer's specials and layout) big enough that every word of
    WORDS and the brackets are one token each; saved in `folder` as build_tokenizer saves the bart one."""
    import transformers
    from tokenizers import ByteLevelBPETokenizer

    folder.mkdir(parents=True, exist_ok=True)
    stage = folder / ".tokenizer"
    stage.mkdir()
    try:
        bpe = ByteLevelBPETokenizer(add_prefix_space=False)
        bpe.train_from_iterator(corpus + H.UNICODE, vocab_size=1000, min_frequency=2, show_progress=False,
                                special_tokens=["<s>", "<pad>", "</s>", "<unk>"])
        model = json.loads(bpe.to_str())["model"]
        vocab = dict(model["vocab"], **{"<mask>": len(model["vocab"])})
        merges = [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]
        (stage / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        (stage / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
        transformers.BartTokenizer.from_pretrained(stage).save_pretrained(folder)
        for name in ("vocab.json", "merges.txt"):
            shutil.copyfile(stage / name, folder / name)
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        for key in ("is_local", "local_files_only"):
            config.pop(key, None)
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n",
                                                      encoding="utf-8")
    finally:
        shutil.rmtree(stage)
    return H.hf_tokenizer(folder)


def build_tokenizer(family: str, folder: Path, corpus: list[str]):
    """bart: build_copy_tokenizer (every word one token); other families: hf_fixtures' own, on this corpus."""
    if family == "bart":
        return build_copy_tokenizer(folder, corpus)
    return H.build_tokenizer(family, folder, (corpus, corpus))


def copy_folder(family: str = "bart") -> Path:
    """A committed copy-heavy folder (tests/fixtures/README.md, "Copy-heavy BART")."""
    folder = ROOT / family
    if not (folder / "model.safetensors").exists():
        raise FileNotFoundError(f"{folder} is not trained: run tests/fixtures/train_copy_fixture.py {family}")
    return folder
