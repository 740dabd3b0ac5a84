"""Property-based tests: any input gives a result or a library error (TfmExportError), never another exception."""

from __future__ import annotations

import copy
import json
import shutil

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tfm_export.errors import InputError, ManifestError
from tfm_export.manifest import load_manifest
from tfm_export.runtime import open_export
from tfm_export.runtime.sources import pad_batch
from tfm_export.text.tokenizer import EOS, SPECIALS, CharTokenizer, tokenizer_from_dict

FUZZ = settings(max_examples=50, deadline=None, derandomize=True,  # the same examples on every run
                suppress_health_check=[HealthCheck.function_scoped_fixture])
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
# Token ids as callers get them wrong: huge, negative, not ints at all.
IDS = st.integers() | st.integers(min_value=-(1 << 70), max_value=1 << 70) | st.integers(0, 70)
SOURCES = st.lists(st.lists(IDS, max_size=70), max_size=4)
DIGITS = CharTokenizer([*SPECIALS, *"0123456789"], [*SPECIALS, *"abcdefghij "])


@FUZZ
@given(st.text(max_size=80))
def test_encode_gives_ids_or_an_input_error(text):
    try:
        ids = DIGITS.encode(text)
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    assert ids[-1] == EOS and "".join(DIGITS.src_vocab[i] for i in ids[:-1]) == text


@FUZZ
@given(st.lists(IDS, max_size=40))
def test_decode_accepts_any_ids(ids):
    assert isinstance(DIGITS.decode(ids), str)


@FUZZ
@given(JSON | st.fixed_dictionaries({"type": st.just("chars"), "src_vocab": JSON, "tgt_vocab": JSON,
                                     "append_eos": JSON}))
def test_tokenizer_from_any_dict(data):
    try:
        tokenizer = tokenizer_from_dict(data)
    except ManifestError:
        return
    assert tokenizer.kind == "chars"


@FUZZ
@given(st.lists(st.lists(IDS, max_size=6) | st.text(max_size=3) | st.none() | st.integers(), max_size=4),
       st.integers(0, 5))
@example([[10 ** 5000]], 0)  # an id too big even to print (Python refuses str() beyond 4300 digits)
def test_pad_batch(sources, pad_id):
    try:
        rows = pad_batch(sources, pad_id)
    except InputError:
        return
    width = max(len(s) for s in sources)
    assert all(len(r) == width and r[: len(s)] == list(s) for r, s in zip(rows, sources))


@pytest.fixture(scope="module")
def manifest_folder(tiny_export, tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz") / "export"
    shutil.copytree(tiny_export, folder)
    return folder, json.loads((folder / "manifest.json").read_text())


def _paths(value, prefix=()):
    """Every key path into a JSON value."""
    yield prefix
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        yield from _paths(child, (*prefix, key))


@FUZZ
@given(st.data())
def test_load_manifest_with_one_value_changed(manifest_folder, data):
    folder, valid = manifest_folder
    manifest = copy.deepcopy(valid)
    path = data.draw(st.sampled_from(list(_paths(valid))[1:]))
    target = manifest
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = data.draw(JSON)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    try:
        load_manifest(folder)
    except ManifestError as exc:
        assert "\n" not in str(exc)


@FUZZ
@given(st.binary(max_size=200) | JSON.map(lambda v: json.dumps(v).encode()))
def test_load_manifest_of_any_bytes(manifest_folder, content):
    folder, _ = manifest_folder
    (folder / "manifest.json").write_bytes(content)
    with pytest.raises(ManifestError):
        load_manifest(folder)


@pytest.fixture(scope="module")
def tiny_model(tiny_export):
    return open_export(tiny_export, device="cpu")


@FUZZ
@given(SOURCES, st.none() | st.integers(-3, 70) | st.integers())
def test_generate_ids_gives_rows_or_an_input_error(tiny_model, sources, max_new_tokens):
    try:
        rows = tiny_model.generate_ids(sources, max_new_tokens)
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    assert len(rows) == len(sources)
    assert all(len(r) <= (max_new_tokens or tiny_model.config.max_len) for r in rows)
