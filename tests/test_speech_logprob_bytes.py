"""A logprob's `bytes` are the token's own (runtime.speech.logprobs.bytes_reader), as OpenAI's and tiktoken's:
conftest's random Whisper has GPT-2's byte-level BPE, so a character of two or three UTF-8 bytes is split
over tokens of one byte each; each gives its raw byte, and the bytes of all tokens together decode to the text."""

from __future__ import annotations

import pytest

pytest.importorskip("tokenizers")

from test_serve_audio import recordings  # noqa: E402,F401  # fixture

from tfm_export.runtime import open_export  # noqa: E402
from tfm_export.runtime.speech.logprobs import bytes_reader  # noqa: E402
from tfm_export.runtime.speech.whisper import speech_settings  # noqa: E402

TEXT = " é ü 日本"  # 2, 2, 3 and 3 UTF-8 bytes a character


@pytest.fixture(scope="module")
def model(whisper_export):
    return open_export(whisper_export, device="cpu")


def test_a_split_character_gives_its_raw_bytes(model):
    ids = model.tokenizer.encode_target(TEXT)
    texts = [model.tokenizer.decode([t]) for t in ids]
    assert "\ufffd" in texts  # some tokens are parts of a character: their text cannot show them
    bytes_of = bytes_reader(model)
    got = [bytes_of(t, text) for t, text in zip(ids, texts)]
    pieces = model.tokenizer.tokenizer.encode(TEXT, add_special_tokens=False).tokens
    assert "Ã" in pieces  # (this vocabulary has no " é": é is split into its two bytes)
    assert got[pieces.index("Ã")] == [0xC3]  # é's first byte, raw, where its text is U+FFFD
    assert bytes(b for piece in got for b in piece) == TEXT.encode("utf-8")  # together: the text
    assert all(len(piece) >= 1 for piece in got)
    old = [list(text.encode()) for text in texts]  # what the UTF-8 of each token's text gave
    assert bytes(b for piece in old for b in piece) != TEXT.encode("utf-8")


def test_a_transcription_s_bytes_decode_to_its_text(model, recordings):
    """On a sampled transcription (the random model's fallback reaches 1.0, where tokens split characters)."""
    from tfm_export.runtime.speech.fallback import openai_fallback

    result = model.transcribe(str(recordings["long"]), logprobs=True,
                              **openai_fallback(speech_settings(model)[0], 0))
    joined = bytes(b for p in result["logprobs"] for b in p["bytes"])
    assert joined.decode("utf-8", "replace") == result["text"]
    assert any(p["bytes"] != list(p["token"].encode()) for p in result["logprobs"])  # some token is a part


def test_special_tokens_and_other_vocabularies(model, chars_export):
    bytes_of = bytes_reader(model)
    eot = speech_settings(model)[0].eos_token_id
    assert model.tokenizer.decode([eot]) == "" and bytes_of(eot, "") == []  # skipped by decode: no bytes
    chars = open_export(chars_export, device="cpu")  # a character vocabulary: the UTF-8 of the text
    assert bytes_reader(chars)(3, "é") == list("é".encode())
