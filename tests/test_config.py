"""TransformerConfig: validation errors and the dict round trip."""

import pytest

from tfm_export.config import PRESETS, TransformerConfig


def base(**changes):
    return PRESETS["tiny"].replace(**changes)


@pytest.mark.parametrize("changes, message", [
    ({"d_model": 30, "n_heads": 4}, "divisible by"),
    ({"d_model": 0}, "d_model must be a positive integer"),
    ({"n_encoder_layers": -1}, "n_encoder_layers must be a positive integer"),
    ({"src_vocab_size": 0}, "src_vocab_size must be a positive integer"),
    ({"eos_id": 64}, "eos_id (64) is out of range"),
    ({"bos_id": -1}, "bos_id (-1) is out of range"),
    ({"src_pad_id": 100}, "src_pad_id (100) is out of range"),
    ({"activation": "tanh"}, "activation must be one of"),
    ({"positions": "rotary"}, "positions must be one of"),
    ({"attention_scale": "sqrt"}, "attention_scale must be one of"),
    ({"dropout": 1.5}, "dropout must be in"),
    ({"share_embeddings": True, "tgt_vocab_size": 65}, "share_embeddings needs"),
    ({"suppress_ids": (999,)}, "suppress_ids has 999"),
])
def test_invalid_configs_raise_clear_value_errors(changes, message):
    with pytest.raises(ValueError) as info:
        base(**changes)
    assert message in str(info.value)


def test_round_trip_and_aliases():
    cfg = base(activation="swish", suppress_ids=[0])
    assert cfg.activation == "silu" and cfg.suppress_ids == (0,)
    again = TransformerConfig.from_dict(cfg.to_dict())
    assert again == cfg


def test_unknown_keys_are_rejected():
    data = base().to_dict() | {"n_layer": 3}
    with pytest.raises(ValueError, match="unknown config keys: n_layer"):
        TransformerConfig.from_dict(data)


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        base().d_model = 64  # type: ignore[misc]


def test_attention_scale_registry():
    assert base(attention_scale="d_model").attn_scale == pytest.approx(32 ** -0.5)
    assert base().attn_scale == pytest.approx(8 ** -0.5)
