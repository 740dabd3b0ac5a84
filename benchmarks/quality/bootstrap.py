"""The quality table's significance test: each int4 row against CTranslate2 int8 by a paired bootstrap
(sacrebleu's, of chrF; for speech the same test of WER)."""

from __future__ import annotations

from typing import Any
import os

BOOTSTRAP = 1000  # the bootstrap's samples

def paired_bootstrap(baseline: list[str], hypotheses: list[str], references: list[str]) -> dict[str, float]:
    """sacrebleu's paired bootstrap resampling of chrF (BOOTSTRAP samples, its fixed seed): `hypotheses`' chrF
    minus `baseline`'s, and the p-value of that difference (small: the sources' sampling does not explain it)."""
    from sacrebleu.metrics import CHRF
    from sacrebleu.significance import PairedTest

    test = PairedTest([("baseline", baseline), ("variant", hypotheses)], {"chrf": CHRF()}, [references],
                      test_type="bs", n_samples=BOOTSTRAP)
    _, results = test()
    base, variant = next(value for key, value in results.items() if key != "System")
    return {"chrf_delta": round(variant.score - base.score, 2), "p": round(variant.p_value, 4)}


def paired_bootstrap_wer(baseline: list[str], hypotheses: list[str], references: list[str]) -> dict[str, float]:
    """paired_bootstrap for speech: WER (in points) resampled by utterance as sacrebleu resamples sentences (the
    same seed, samples and p-value: its Moses-style paired bootstrap; sacrebleu has no WER). `wer_delta`: the
    variant's WER minus the baseline's (positive: worse)."""
    import jiwer
    import numpy as np

    def stats(outputs: list[str]) -> Any:  # (errors, reference words) per utterance
        words = [jiwer.process_words(r, h) for r, h in zip(references, outputs)]
        return np.array([(w.substitutions + w.deletions + w.insertions, w.hits + w.substitutions + w.deletions)
                         for w in words], dtype=np.float64)

    base, variant = stats(baseline), stats(hypotheses)
    wer = lambda s: 100 * s[..., 0].sum(-1) / np.maximum(s[..., 1].sum(-1), 1)  # noqa: E731
    rng = np.random.default_rng(int(os.environ.get("SACREBLEU_SEED", "12345")))
    idx = rng.choice(len(references), size=(BOOTSTRAP, len(references)), replace=True)
    diffs = np.abs(wer(variant[idx]) - wer(base[idx]))
    delta = float(wer(variant) - wer(base))
    # sacrebleu's p (its private _compute_p_value): centred resampled differences beyond the real one, plus one.
    p = (int(np.sum(diffs - diffs.mean() > abs(delta))) + 1) / (BOOTSTRAP + 1)
    return {"wer_delta": round(delta, 2), "p": round(p, 4)}


