"""Shared fixtures: one tiny checkpoint and its export for the whole session (exports take ~10 s)."""

from pathlib import Path

import pytest

from tfm_export.model.checkpoint import load_checkpoint
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.model.presets import init_checkpoint

BUNDLED = Path(__file__).resolve().parents[1] / "models" / "num2words-de"


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "model.pt"
    init_checkpoint(path, "tiny", seed=21)
    return path


@pytest.fixture(scope="session")
def tiny_export(tiny_checkpoint) -> Path:
    out = tiny_checkpoint.parent / "model_onnx"
    export_model(load_checkpoint(tiny_checkpoint), out, ExportOptions(validate=False))
    return out


@pytest.fixture(scope="session")
def static_export(tiny_checkpoint, tmp_path_factory) -> Path:
    """The tiny model with its static-cache decoders (decoder_static, decoder_rows): what servers run."""
    out = tmp_path_factory.mktemp("serve") / "static"
    export_model(load_checkpoint(tiny_checkpoint), out, ExportOptions(static_cache=True, validate=False))
    return out


@pytest.fixture(scope="session")
def serial(static_export):
    """Serial greedy decoding of one source at a time: the reference every server answer must equal."""
    from tfm_export.runtime import open_export

    model = open_export(static_export, "cpu")
    return lambda ids, steps=None: model.generate_ids([ids], steps)[0]


@pytest.fixture(scope="session")
def bundled_export(tmp_path_factory) -> Path:
    """The bundled model, exported and validated once."""
    if not (BUNDLED / "model.pt").exists():
        pytest.skip("the bundled model is not trained yet")
    out = tmp_path_factory.mktemp("bundled") / "model_onnx"
    export_model(load_checkpoint(BUNDLED / "model.pt"), out)
    return out
