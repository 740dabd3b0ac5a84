"""models/whisper-digits/wide.py (`train.py --layout wide|deep`): the widened model (2 + 8 or 2 + 16 layers)
computes what whisper-digits computes (its logits, its greedy ids on held-out speech) before the recipe trains it
on; and, exported, its speculative transcription drafted by whisper-digits' draft gives plain greedy's ids (issue
#63's Whisper case). distil.py (`train.py --distil-from TEACHER --out DIR`): a draft trained on a teacher's outputs
for a few steps drafts plain greedy's ids, only its decoder trained; the option never writes the shipped folder."""

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
import train  # noqa: E402
from distil import Teacher, student  # noqa: E402
from speech import Spoken  # noqa: E402
from wide import LAYOUTS, WIDEN, widen  # noqa: E402

from tfm_export.audio import FeatureConfig, log_mel  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore"),
              pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")]
HF_FILES = ("preprocessor_config.json", "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt")


@pytest.fixture(scope="module")
def models():
    model = transformers.WhisperForConditionalGeneration.from_pretrained(str(FOLDER), local_files_only=True).eval()
    return model, widen(model).eval()


@pytest.fixture(scope="module")
def deep(models):
    return widen(models[0], "deep").eval()


@pytest.fixture(scope="module")
def speech():
    """Features of four held-out utterances (two per language), as the recipe scores them."""
    rows = (FOLDER / "heldout.tsv").read_text().splitlines()
    features = FeatureConfig(n_mels=80, chunk_length=4)
    return [torch.from_numpy(log_mel(Spoken.from_row(r).samples(), features)[None]) for r in rows[:2] + rows[-2:]]


@pytest.mark.parametrize("layout", ["wide", "deep"])
def test_widened_model_keeps_the_logits_and_the_ids(models, deep, speech, layout):
    model, wide = models[0], models[1] if layout == "wide" else deep
    assert wide.config.d_model == WIDEN * model.config.d_model and wide.config.decoder_layers == LAYOUTS[layout]
    ids = torch.tensor([[model.config.decoder_start_token_id] + [5] * 6])
    with torch.no_grad():
        for x in speech:
            np.testing.assert_allclose(wide(input_features=x, decoder_input_ids=ids).logits.numpy(),
                                       model(input_features=x, decoder_input_ids=ids).logits.numpy(), atol=2e-4)
            assert wide.generate(x, task="transcribe").tolist() == model.generate(x, task="transcribe").tolist()


@pytest.mark.long
@pytest.mark.parametrize("layout", ["wide", "deep"])
def test_wide_export_drafted_by_the_draft_gives_greedy_ids(models, deep, speech, tmp_path, layout):
    from tfm_export.cli import cli
    from tfm_export.runtime import open_export

    hf = tmp_path / "wide-hf"
    (models[1] if layout == "wide" else deep).save_pretrained(hf)
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


@pytest.mark.parametrize("argv", [["1", "--distil-from", str(FOLDER), "--out", str(FOLDER)],
                                  ["1", "--distil-from", str(FOLDER), "--out", str(FOLDER / "draft")],
                                  ["1", "--distil-from", str(FOLDER)], ["1", "--out", "/tmp/anywhere"]])
def test_distil_option_never_writes_the_shipped_folder(argv):
    with pytest.raises(SystemExit, match="train.py: --out"):
        train.parse(argv)


def test_distil_option_reads_its_folders():
    run = train.parse(["3", "--distil-from", str(FOLDER), "--out", "/tmp/distilled", "--student", "2+1"])
    assert (run.minutes, run.teacher, run.out, run.student) == (3.0, FOLDER, Path("/tmp/distilled"), "2+1")


def test_layout_option_takes_wide_or_deep():
    assert train.parse(["2", "--layout", "deep", "--out", "/tmp/deep"]).layout == "deep"
    assert train.parse(["2", "--layout", "wide", "--out", "/tmp/wide"]).layout == "wide"
    with pytest.raises(SystemExit, match="--layout takes wide or deep"):
        train.parse(["2", "--layout", "tall", "--out", "/tmp/tall"])


def test_distilled_draft_gives_greedy_ids(digits_export, tmp_path):
    """whisper-digits' draft (2 + 1) distilled for a few steps from whisper-digits itself (the wide teacher's
    export takes a minute: BENCHMARKS.md measures that one) drafts the teacher's export's plain greedy ids."""
    import random

    from tfm_export.cli import cli
    from tfm_export.runtime import open_export

    tok = transformers.WhisperTokenizerFast.from_pretrained(str(FOLDER), local_files_only=True)
    draft = student(transformers.WhisperForConditionalGeneration.from_pretrained(str(FOLDER / "draft")))
    encoder, decoder = ([p.clone() for p in part.parameters()] for part in (draft.model.encoder, draft.model.decoder))
    stage = train.train(draft, tok, train.bank(random.Random(0), 8, heldout=False), 0.02, 1,
                        Teacher(FOLDER, tok, train.batch), (1e-3, 1))
    assert stage["steps"] >= 1 and np.isfinite(stage["final_loss"])
    assert all(torch.equal(a, b) for a, b in zip(encoder, draft.model.encoder.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(decoder, draft.model.decoder.parameters()))
    draft.save_pretrained(tmp_path / "hf")
    for name in HF_FILES:
        shutil.copy(FOLDER / name, tmp_path / "hf")
    cli.main([str(tmp_path / "hf"), "-o", str(tmp_path / "draft"), "--no-validate"], standalone_mode=False)
    model, assistant = open_export(digits_export), open_export(tmp_path / "draft")
    rows = (FOLDER / "heldout.tsv").read_text().splitlines()
    for row in rows[:2] + rows[-2:]:
        samples = Spoken.from_row(row).samples()
        plain = model.transcribe(samples, timestamps=True)["ids"]
        assert model.transcribe(samples, timestamps=True, assistant=assistant)["ids"] == plain
