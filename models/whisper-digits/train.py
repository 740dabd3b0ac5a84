"""Recipe: whisper-digits, a tiny Whisper trained on espeak-ng speech of digit strings (English, German).

    apt-get install espeak-ng              # Debian's speech synthesizer (`make espeak-ng`)
    .venv/bin/pip install -c constraints.txt -e '.[test]'   # transformers, tokenizers, soundfile, soxr, jiwer
    .venv/bin/python models/whisper-digits/train.py [MINUTES] [--resume | --draft | --layout wide|deep --out DIR |
        --distil-from TEACHER --out DIR [--student 2+2|2+1]]

Writes a Hugging Face Whisper folder here, laid out as published ones are (config.json, model.safetensors,
generation_config.json with lang_to_id / task_to_id, tokenizer files with the timestamp tokens,
preprocessor_config.json), plus heldout.tsv and metrics.json. Seeded; its length is set in minutes
(default 20) because that is what a 2-core machine has, so two runs differ in how many steps they take.
`--resume` trains the folder's model for another stage (half the learning rate, other batches);
metrics.json lists the stages. `--draft` writes draft/ instead: the folder's model cut to the layers DRAFT_LAYERS
(cut.py) keeps (its weights, its tokenizer files) and trained on for MINUTES more, a speculative decoding assistant
(`transcribe(..., assistant=)`) saved in float16, as many published drafts are.
`--layout wide --out DIR` writes DIR instead (never this folder): the folder's model widened to d_model 512 and
8 decoder layers without changing its function (wide.py), its decoder trained on for MINUTES at half the learning
rate: a target whose decoder dominates transcription, which the folder's model or draft/ can draft for.
`--layout deep`: the same with 16 decoder layers (wide.LAYOUTS).
`--distil-from TEACHER --out DIR` writes DIR instead (never this folder): the folder's model (`--student 2+1`:
draft/) trained for MINUTES on TEACHER's outputs (a Whisper folder of this tokenizer, such as --layout wide's),
not the ground truth: a draft whose ids are the teacher's more often (distil.py).

The model learns what Whisper's decoder is asked to do, on a task small enough for minutes of CPU:
the language token (detection), transcribe or translate (German digits written as English words),
timestamped segments and the lone timestamp of an utterance cut by the window's end (long-form seeking),
and <|notimestamps|> text.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import jiwer
import numpy as np
import torch
import transformers
from tokenizers import ByteLevelBPETokenizer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cut import DRAFT_LAYERS, build_draft  # noqa: E402
from distil import SCHEDULE, STUDENTS, Teacher, student  # noqa: E402
from speech import WINDOW_SECONDS, WORDS, Window, compose, draw  # noqa: E402

from tfm_export.audio import FeatureConfig, log_mel  # noqa: E402

SEED, BANK, HELDOUT, BATCH, LR, WARMUP = 1234, 1200, 60, 24, 1.5e-3, 150
LANGUAGES = ("en", "de")
TIMESTAMPS = WINDOW_SECONDS * 50 + 1  # <|0.00|> ... <|4.00|>, 0.02 s apart
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt")
FOLDER_FILES = ("config.json", "model.safetensors", "generation_config.json", "preprocessor_config.json",
                "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json",
                "added_tokens.json", "normalizer.json")


def specials() -> list[str]:
    """Whisper's special tokens in Whisper's order (a multilingual folder's, two languages)."""
    return ["<|endoftext|>", "<|startoftranscript|>", *(f"<|{c}|>" for c in LANGUAGES), "<|translate|>",
            "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>"]


def build_tokenizer(stage: Path):
    """A byte-level BPE over the digit words, then the specials and the timestamps, as Whisper's are."""
    corpus = [" ".join(WORDS[lang]) for lang in LANGUAGES] * 20 + ["the quick brown fox jumps over the lazy dog"]
    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(corpus, vocab_size=360, min_frequency=2, show_progress=False)
    model = json.loads(bpe.to_str())["model"]
    merges = [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]
    (stage / "vocab.json").write_text(json.dumps(model["vocab"], ensure_ascii=False), encoding="utf-8")
    (stage / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    tok = transformers.WhisperTokenizer(str(stage / "vocab.json"), str(stage / "merges.txt"),
                                        unk_token="<|endoftext|>", bos_token="<|endoftext|>",
                                        eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tok.add_special_tokens({"additional_special_tokens": specials()[1:]})
    tok.add_tokens([f"<|{i * 0.02:.2f}|>" for i in range(TIMESTAMPS)])
    tok.save_pretrained(stage)
    return transformers.WhisperTokenizerFast.from_pretrained(str(stage), local_files_only=True)


def build_model(tok) -> transformers.WhisperForConditionalGeneration:
    """d_model 128, 2 + 2 layers, 4 heads, 80 mel bins, 4 s windows (200 encoder positions)."""
    ids = {t: tok.convert_tokens_to_ids(t) for t in specials()}
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    config = transformers.WhisperConfig(
        vocab_size=len(tok), num_mel_bins=80, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512, d_model=128,
        max_source_positions=WINDOW_SECONDS * 50, max_target_positions=64, pad_token_id=eot, bos_token_id=eot,
        eos_token_id=eot, decoder_start_token_id=sot, begin_suppress_tokens=None, suppress_tokens=None)
    torch.manual_seed(SEED)
    model = transformers.WhisperForConditionalGeneration(config)
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=sot, eos_token_id=eot, pad_token_id=eot, bos_token_id=eot, max_length=64,
        suppress_tokens=[ids["<|nospeech|>"]], begin_suppress_tokens=[eot], is_multilingual=True,
        no_timestamps_token_id=ids["<|notimestamps|>"], prev_sot_token_id=ids["<|startofprev|>"],
        lang_to_id={f"<|{c}|>": ids[f"<|{c}|>"] for c in LANGUAGES}, max_initial_timestamp_index=50,
        task_to_id={t: ids[f"<|{t}|>"] for t in ("transcribe", "translate")}, return_timestamps=False,
        alignment_heads=[[1, 0], [1, 2]])
    return model


def target(tok, window: Window, timestamps: bool) -> list[int]:
    """What the decoder writes after <|startoftranscript|>: language, task, then text (and times), EOT."""
    stamp = lambda t: tok.convert_tokens_to_ids(f"<|{min(round(t / 0.02), TIMESTAMPS - 1) * 0.02:.2f}|>")  # noqa: E731
    ids = [tok.convert_tokens_to_ids(f"<|{window.language}|>"), tok.convert_tokens_to_ids(f"<|{window.task}|>")]
    if not timestamps:
        return ids + [tok.convert_tokens_to_ids("<|notimestamps|>")] + text_ids(tok, window.text) + [tok.eos_token_id]
    for start, end, text in window.segments:
        ids += [stamp(start)] + text_ids(tok, text) + [stamp(end)]
    if window.resume is not None:
        ids.append(stamp(window.resume))
    return ids + [tok.eos_token_id]


def text_ids(tok, text: str) -> list[int]:
    return tok.encode(" " + text, add_special_tokens=False) if text else []


def bank(rng: random.Random, size: int, heldout: bool) -> dict[str, list]:
    """`size` spoken digit strings per language, with their samples."""
    out = {}
    for lang in LANGUAGES:
        spoken = [draw(rng, lang, heldout) for _ in range(size)]
        out[lang] = [(s, s.samples()) for s in spoken]
    return out


def batch(rng: random.Random, utterances, tok, features: FeatureConfig):
    """BATCH composed windows: features (BATCH, 80, 400), the decoder's input (<|startoftranscript|> and the
    target shifted right) and the labels (-100 where there is nothing to learn: padding, and the task token,
    which the caller chooses). The input is built here, not by transformers from the labels: its shift
    would turn the masked task token into padding, and the model would never see the task."""
    xs, targets = [], []
    for _ in range(BATCH):
        timestamps = rng.random() < 0.5
        window = compose(rng, utterances, timestamps)
        xs.append(log_mel(window.samples, features))
        targets.append(target(tok, window, timestamps))
    width = max(map(len, targets))
    inputs = torch.full((BATCH, width), tok.eos_token_id, dtype=torch.long)
    labels = torch.full((BATCH, width), -100, dtype=torch.long)
    sot = tok.convert_tokens_to_ids("<|startoftranscript|>")
    for i, ids in enumerate(targets):
        inputs[i, :len(ids)] = torch.tensor([sot] + ids[:-1])
        labels[i, :len(ids)] = torch.tensor(ids)
        labels[i, 1] = -100
    return torch.from_numpy(np.stack(xs)), inputs, labels


def train(model, tok, utterances, minutes: float, stage: int = 0, loss_of=None, schedule=None) -> dict:
    """One stage of training: `minutes` of AdamW with warm-up and a cosine over the time; a later stage
    (--resume) starts at half the learning rate on other batches. `loss_of(model, x, inputs, labels)`: the loss
    (--distil-from: a distil.Teacher); by default the cross-entropy to the labels. `schedule`: (peak learning rate,
    warm-up steps) instead (--distil-from: distil.SCHEDULE)."""
    features = FeatureConfig(n_mels=80, chunk_length=WINDOW_SECONDS)
    rng = random.Random(SEED + stage)
    lr, warmup = schedule or (LR / (2 if stage else 1), WARMUP)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    start, step, losses = time.monotonic(), 0, []
    model.train()
    while (elapsed := time.monotonic() - start) < minutes * 60:
        done = elapsed / (minutes * 60)  # the schedule runs on time, not steps: see the module docstring
        scale = min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * done))
        for group in opt.param_groups:
            group["lr"] = lr * scale
        x, inputs, labels = batch(rng, utterances, tok, features)
        loss = (loss_of(model, x, inputs, labels) if loss_of else
                model(input_features=x, decoder_input_ids=inputs, labels=labels).loss)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        step += 1
        if step % 50 == 0:
            print(f"step {step}  loss {sum(losses[-50:]) / 50:.3f}  {elapsed / 60:.1f} min", flush=True)
    total = time.monotonic() - start
    return {"steps": step, "batch": BATCH, "train_minutes": round(total / 60, 1),
            "final_loss": round(sum(losses[-50:]) / min(50, len(losses)), 4)}


def evaluate(model, tok, heldout) -> dict:
    """Greedy transcription of each held-out utterance alone (language detected), WER per language."""
    features = FeatureConfig(n_mels=80, chunk_length=WINDOW_SECONDS)
    model.eval()
    refs, hyps, langs = {l: [] for l in LANGUAGES}, {l: [] for l in LANGUAGES}, {l: 0 for l in LANGUAGES}
    with torch.no_grad():
        for lang in LANGUAGES:
            for spoken, samples in heldout[lang]:
                x = torch.from_numpy(log_mel(samples, features)[None])
                out = model.generate(x, task="transcribe")
                hyps[lang].append(tok.decode(out[0], skip_special_tokens=True).strip())
                refs[lang].append(spoken.text())
                langs[lang] += int(model.detect_language(x)[0]) == tok.convert_tokens_to_ids(f"<|{lang}|>")
    return {f"wer_{l}": round(jiwer.wer(refs[l], hyps[l]), 4) for l in LANGUAGES} | {
        f"language_detected_{l}": round(langs[l] / len(heldout[l]), 4) for l in LANGUAGES}


def previous_stages(folder: Path = HERE) -> list[dict]:
    """metrics.json's stages (a single-stage file lists its one stage's figures at the top level)."""
    metrics = json.loads((folder / "metrics.json").read_text())
    return metrics.get("stages") or [{k: metrics[k] for k in ("steps", "batch", "train_minutes", "final_loss")}]


@dataclass(frozen=True)
class Run:
    """What a run does (the command line): see the module docstring."""
    minutes: float = 20.0
    resume: bool = False
    draft: bool = False
    out: Path | None = None  # --layout's or --distil-from's folder: anywhere but this one
    layout: str = "wide"  # --layout: wide.LAYOUTS
    teacher: Path | None = None  # --distil-from
    student: str = "2+2"  # --distil-from: distil.STUDENTS


def start(tok, run: Run) -> tuple[transformers.WhisperForConditionalGeneration, list, object]:
    """The model a run trains, the stages before it and its loss (None: the labels'): a fresh one, the folder's
    (--resume, its weights and generation config trained on for another stage), a draft cut from the folder's
    (--draft), the folder's widened (--layout wide: its stages, the next one at half the learning rate) or the
    folder's (or draft/'s) model learning a teacher's outputs (--distil-from)."""
    if not (run.resume or run.draft or run.out):
        return build_model(tok), [], None
    if run.teacher:
        folder = HERE / STUDENTS[run.student]
        model = transformers.WhisperForConditionalGeneration.from_pretrained(str(folder), local_files_only=True)
        return student(model), previous_stages(folder), Teacher(run.teacher, tok, batch)
    model = transformers.WhisperForConditionalGeneration.from_pretrained(str(HERE), local_files_only=True)
    if run.out:
        from wide import widen

        return widen(model, run.layout), previous_stages(), None
    return (build_draft(model), [], None) if run.draft else (model, previous_stages(), None)


def main(run: Run) -> None:
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", 2)))  # 1 on a machine others share
    rng = random.Random(SEED)
    out = run.out or (HERE / "draft" if run.draft else HERE)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent if run.out else HERE) as stage:  # renamed into `out` below
        stage = Path(stage)
        tok = build_tokenizer(stage)
        utterances, heldout = bank(rng, BANK, heldout=False), bank(rng, HELDOUT, heldout=True)
        model, stages, teacher = start(tok, run)
        before = teacher and teacher.agreement(model, heldout)
        stages.append(train(model, tok, utterances, run.minutes, len(stages), teacher, teacher and SCHEDULE))
        if run.draft:  # scored as published: its float16 weights, widened as an import widens them
            model = model.to(torch.float16).to(torch.float32)
        metrics = {"stages": stages, "steps": sum(s["steps"] for s in stages), "batch": BATCH,
                   "train_minutes": round(sum(s["train_minutes"] for s in stages), 1),
                   "final_loss": stages[-1]["final_loss"], **evaluate(model, tok, heldout),
                   "parameters": sum(p.numel() for p in model.parameters())}
        if teacher:
            metrics["agreement"] = {"before": before, "after": teacher.agreement(model, heldout)}
            metrics["teacher"] = str(run.teacher)
        (model.to(torch.float16) if run.draft else model).save_pretrained(stage)
        extractor = transformers.WhisperFeatureExtractor(feature_size=80, chunk_length=WINDOW_SECONDS)
        (stage / "preprocessor_config.json").write_text(json.dumps(extractor.to_dict(), indent=2) + "\n")
        if run.draft:
            metrics["layers_kept"] = DRAFT_LAYERS
        else:  # a draft is scored on the folder's held-out set (the same seed draws it)
            (stage / "heldout.tsv").write_text("".join(s.row() + "\n" for lang in LANGUAGES for s, _ in heldout[lang]))
        (stage / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        out.mkdir(parents=True, exist_ok=True)
        for path in stage.iterdir():  # the recipe's own files only: rename each into place
            if path.name in FOLDER_FILES + ("heldout.tsv", "metrics.json"):
                os.replace(path, out / path.name)
    print(json.dumps(metrics, indent=2))


def parse(argv: list[str]) -> Run:
    """The command line as a Run; --out (which --layout wide and --distil-from need) anywhere but this folder."""
    value = lambda flag: argv[argv.index(flag) + 1] if flag in argv[:-1] else None  # noqa: E731
    if "--layout" in argv and value("--layout") not in ("wide", "deep"):
        sys.exit("train.py: --layout takes wide or deep")
    if ("--layout" in argv) + ("--distil-from" in argv) != ("--out" in argv):
        sys.exit("train.py: --out DIR (a new folder, not this one) goes with one of --layout, --distil-from")
    out = Path(value("--out")).resolve() if value("--out") else None
    if out and (out == HERE or HERE in out.parents):
        sys.exit(f"train.py: --out {out} is inside {HERE}: the shipped files stay as they are")
    if value("--student") not in (None, *STUDENTS):
        sys.exit(f"train.py: --student takes {' or '.join(STUDENTS)}")
    flags = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("--layout", "--out", "--distil-from", "--student")}
    args = [a for a in argv if not a.startswith("--") and a not in flags]
    teacher = Path(value("--distil-from")).resolve() if value("--distil-from") else None
    return Run(float(args[0]) if args else 20.0, "--resume" in argv, "--draft" in argv, out, value("--layout") or "wide",
               teacher, value("--student") or "2+2")


if __name__ == "__main__":
    main(parse(sys.argv[1:]))
