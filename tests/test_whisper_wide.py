"""models/whisper-digits/wide.py (`train.py --layout wide`): the widened model computes what whisper-digits
computes (its logits, its greedy ids on held-out speech) before the recipe trains it on; and, exported, its
speculative transcription drafted by whisper-digits' draft gives plain greedy's ids (issue #63's Whisper case)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

FOLDER = Path(__file__).resolve().parents[1] / "models" / "whisper-digits"
sys.path.insert(0, str(FOLDER))
from speech import Spoken  # noqa: E402
from wide import DECODER_LAYERS, WIDEN, widen  # noqa: E402

from tfm_export.audio import FeatureConfig, log_mel  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore"),
              pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")]
HF_FILES = ("preprocessor_config.json", "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt")


@pytest.fixture(scope="module")
def models():
    model = transformers.WhisperForConditionalGeneration.from_pretrained(str(FOLDER), local_files_only=True).eval()
    return model, widen(model).eval()


@pytest.fixture(scope="module")
def speech():
    """Features of four held-out utterances (two per language), as the recipe scores them."""
    rows = (FOLDER / "heldout.tsv").read_text().splitlines()
    features = FeatureConfig(n_mels=80, chunk_length=4)
    return [torch.from_numpy(log_mel(Spoken.from_row(r).samples(), features)[None]) for r in rows[:2] + rows[-2:]]


def test_widened_model_keeps_the_logits_and_the_ids(models, speech):
    model, wide = models
    assert wide.config.d_model == WIDEN * model.config.d_model and wide.config.decoder_layers == DECODER_LAYERS
    ids = torch.tensor([[model.config.decoder_start_token_id] + [5] * 6])
    with torch.no_grad():
        for x in speech:
            np.testing.assert_allclose(wide(input_features=x, decoder_input_ids=ids).logits.numpy(),
                                       model(input_features=x, decoder_input_ids=ids).logits.numpy(), atol=2e-4)
            assert wide.generate(x, task="transcribe").tolist() == model.generate(x, task="transcribe").tolist()


@pytest.mark.long
def test_wide_export_drafted_by_the_draft_gives_greedy_ids(models, speech, tmp_path):
    from tfm_export.cli import cli
    from tfm_export.runtime import open_export

    hf = tmp_path / "wide-hf"
    models[1].save_pretrained(hf)
    for name in HF_FILES:
        shutil.copy(FOLDER / name, hf)
    for source, out in ((hf, "wide"), (FOLDER / "draft", "draft")):
        cli.main([str(source), "-o", str(tmp_path / out), "--no-validate"], standalone_mode=False)
    wide, draft = open_export(tmp_path / "wide"), open_export(tmp_path / "draft")
    rows = (FOLDER / "heldout.tsv").read_text().splitlines()
    for row in rows[:3] + rows[-3:]:
        samples = Spoken.from_row(row).samples()
        plain = wide.transcribe(samples, timestamps=True)["ids"]
        assert wide.transcribe(samples, timestamps=True, assistant=draft)["ids"] == plain
