"""`train.py MINUTES --distil-from TEACHER --out DIR`: a draft distilled from a larger Whisper of the same tokenizer
(issue #63: `--layout wide`'s target drafted by whisper-digits).

A draft trained on the ground truth learns the data, not the model it drafts for: two models of 0 % WER still part
on timestamps (one 0.02 s step apart, a third of a timestamped transcript's ids) and the ids after them, and each
parting costs a check. distil-whisper trains its drafts on the teacher's pseudo-labels for that reason; here
the student learns the teacher's next-id distribution itself (token-level distillation): on the recipe's batches
(train.batch: the same windows, language, task, timestamps and all), the teacher's logits teacher-forced on the
same decoder input, the loss the KL divergence from the teacher's softmax to the student's at every labelled
position, plus the cross-entropy to the teacher's argmax (the id greedy decoding checks a draft against), each
weighed by ARGMAX_WEIGHT; the same batches as `--layout wide`'s own stage (the seed of the stage after the
folder's two), at a tenth of the recipe's learning rate (SCHEDULE). The student starts as the shipped
whisper-digits (STUDENTS: its 2 + 2 layers, or draft/'s 2 + 1), its encoder frozen: the teacher's encoder is whisper-digits' own (wide.py widens it
without changing its function and trains only the decoder), so the parting is all in the decoder, and a step
costs the teacher's forward and the student decoder's backward. metrics.json adds `agreement`: the share of
held-out labelled positions where the student's argmax is the teacher's, before and after.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Callable

import torch
import transformers
from speech import WINDOW_SECONDS

from tfm_export.audio import FeatureConfig

ARGMAX_WEIGHT = 1.0  # the cross-entropy to the teacher's argmax, beside the KL divergence
# (peak learning rate, warm-up steps): a tenth of the recipe's peak, since the student starts near the teacher (the
# wide model is whisper-digits after 39 steps at a lower rate still) and the recipe's own rate moves it further from
# the teacher than it was (tried, 81 steps: agreement 91 -> 93.5 % on held-out batches, yet drafts accepted on long
# recordings 45 -> 43 %; this rate, 104 steps: 94.3 %, 45 -> 47 %); minutes give it ~100 steps: a short warm-up
SCHEDULE = (1.5e-4, 10)
AGREEMENT_BATCHES = 4  # held-out batches `Teacher.agreement` scores (a teacher forward each: seconds)
STUDENTS = {"2+2": ".", "2+1": "draft"}  # --student: the shipped model, or its --draft cut (draft/)


def student(model: transformers.WhisperForConditionalGeneration) -> transformers.WhisperForConditionalGeneration:
    """`model` (a shipped folder's) in float32, its encoder frozen (the teacher's is the same function)."""
    model = model.float()
    for param in model.model.encoder.parameters():
        param.requires_grad_(False)
    return model


def _logits(model, x: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    encoded = model.model.encoder(x).last_hidden_state  # frozen in both: no graph kept for it
    return model(encoder_outputs=(encoded,), decoder_input_ids=inputs).logits


class Teacher:
    """The teacher in `folder`, frozen: the loss `train.train` minimises for a student (`teacher(student, x,
    inputs, labels)`) and the student's agreement with it on held-out windows. `batch`: train.batch."""

    def __init__(self, folder: Path, tok, batch: Callable):
        theirs = transformers.WhisperTokenizerFast.from_pretrained(str(folder), local_files_only=True)
        if theirs.get_vocab() != tok.get_vocab():
            raise SystemExit(f"train.py: --distil-from {folder}: its tokenizer is not whisper-digits' (a draft "
                             f"must share the ids)")
        self.model = transformers.WhisperForConditionalGeneration.from_pretrained(
            str(folder), local_files_only=True).eval()
        for param in self.model.parameters():
            param.requires_grad_(False)
        self.tok, self.batch = tok, batch

    def __call__(self, model, x: torch.Tensor, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """KL to the teacher's softmax plus cross-entropy to its argmax at the positions the batch labels (the
        task token, which the caller chooses, is not one)."""
        with torch.no_grad():
            target = _logits(self.model, x, inputs)[labels != -100]
        log_p = torch.log_softmax(_logits(model, x, inputs)[labels != -100], -1)
        kl = torch.nn.functional.kl_div(log_p, torch.log_softmax(target, -1), log_target=True, reduction="batchmean")
        return kl + ARGMAX_WEIGHT * torch.nn.functional.nll_loss(log_p, target.argmax(-1))

    def agreement(self, model, heldout) -> float:
        """The share of labelled positions in AGREEMENT_BATCHES seeded batches of held-out utterances where
        `model`'s argmax is the teacher's: a proxy of a draft's acceptance, teacher-forced (on long recordings
        a higher figure need not mean fewer checks: BENCHMARKS.md, "Speculative decoding")."""
        rng, features, same, total = random.Random(4321), FeatureConfig(n_mels=80, chunk_length=WINDOW_SECONDS), 0, 0
        model.eval()
        with torch.no_grad():
            for _ in range(AGREEMENT_BATCHES):
                x, inputs, labels = self.batch(rng, heldout, self.tok, features)
                mask = labels != -100
                ours, theirs = (_logits(m, x, inputs)[mask].argmax(-1) for m in (model, self.model))
                same, total = same + int((ours == theirs).sum()), total + int(mask.sum())
        return round(same / total, 4)
