"""Character tokenizer: round trips, clear rejection of unknown characters, dict form, registry."""

import pytest

from tfm_export.errors import InputError, ManifestError
from tfm_export.text.tokenizer import EOS, CharTokenizer, tokenizer_from_dict


@pytest.fixture()
def tok():
    return CharTokenizer.build(["4718", "205"], ["viertausend", "zweihundertfünf"])


def test_encode_appends_eos_and_decode_round_trips(tok):
    ids = tok.encode("4718")
    assert ids[-1] == EOS and len(ids) == 5 and min(ids[:-1]) >= 3
    target = tok.encode_target("zweihundertfünf")
    assert tok.decode(target) == "zweihundertfünf"
    assert tok.decode([1, *target, 2, 0, 0]) == "zweihundertfünf"  # specials are skipped


def test_unknown_characters_are_named(tok):
    with pytest.raises(InputError) as info:
        tok.encode("12a3x")
    message = str(info.value)
    assert "'3ax'" in message and "12a3x" in message and "0124578" in message


def test_dict_round_trip_and_registry(tok):
    data = tok.to_dict()
    assert data["type"] == "chars" and data["src_vocab"][:3] == ["<pad>", "<bos>", "<eos>"]
    again = tokenizer_from_dict(data)
    assert isinstance(again, CharTokenizer) and again.encode("4718") == tok.encode("4718")
    assert again.files() == []


def test_bad_dicts(tok):
    with pytest.raises(ManifestError, match="unknown tokenizer type 'bpe'"):
        tokenizer_from_dict({"type": "bpe"})
    with pytest.raises(ManifestError, match="missing 'tgt_vocab'"):
        tokenizer_from_dict({"type": "chars", "src_vocab": tok.src_vocab})
    with pytest.raises(ManifestError, match="must start with"):
        CharTokenizer(["a", "b"], tok.tgt_vocab)


def test_without_eos_and_out_of_range_ids(tok):
    plain = tokenizer_from_dict(CharTokenizer(tok.src_vocab, tok.tgt_vocab, append_eos=False).to_dict())
    assert plain.encode("4718") == tok.encode("4718")[:-1]
    assert tok.decode([len(tok.tgt_vocab), -1, *tok.encode_target("fünf")]) == "fünf"


def test_long_input_error_stays_one_short_line(tok):
    with pytest.raises(InputError) as info:
        tok.encode("1" * 500 + "\nx")
    message = str(info.value)
    assert "\n" not in message and len(message) < 200 and "'\\nx'" in message


def test_registry_resolves_every_type_and_rejects_repeats(tok):
    from tfm_export.errors import load_object
    from tfm_export.text.tokenizer import TOKENIZER_TYPES

    for kind, reference in TOKENIZER_TYPES.items():
        cls = load_object(reference, ManifestError, kind)
        assert kind in getattr(cls, "kinds", (cls.kind,))
    with pytest.raises(ManifestError, match="repeats"):
        CharTokenizer([*tok.src_vocab, "1"], tok.tgt_vocab)
