"""--static-slots: a static decoder with fewer cache slots than max_len (cheaper steps, shorter rows)."""

from pathlib import Path

import numpy as np
import pytest

from helpers import run_cli
from tfm_export.errors import ExportError, InputError
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.manifest import load_manifest
from tfm_export.model.checkpoint import load_checkpoint
from tfm_export.runtime import RuntimeOptions, open_export
from tfm_export.runtime.states.rows import RowBatch
from tfm_export.runtime.states.static import static_slots
from tfm_export.serve.batcher import EngineConfig, Job
from tfm_export.serve.engine import ServeSettings, open_engine

SLOTS = 12
SOURCES = [[5, 9, 13, 40], [7], [3, 3, 3, 3, 3, 3, 3, 3, 3, 30]]


@pytest.fixture(scope="module")
def slots_export(tiny_checkpoint, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("slots") / "out"
    manifest = export_model(load_checkpoint(tiny_checkpoint), out, ExportOptions(static_cache=True, static_slots=SLOTS))
    assert manifest.validation["outputs"]["decoder_static:logits"]["ok"]  # validated against eager, like any graph
    assert manifest.validation["outputs"]["decoder_rows:present.0.self.key"]["ok"]
    assert manifest.validation["greedy"]["static_cache_mismatched_rows"] == []
    return out


def test_the_static_decoder_has_the_slots_asked_for(slots_export):
    manifest = load_manifest(slots_export)
    assert static_slots(manifest) == SLOTS and manifest.config.max_len == 64
    assert manifest.graphs["decoder_static"].spec.tensor("present.0.self.key").shape[2] == SLOTS
    rows = manifest.graphs["decoder_rows"].spec  # decoder_static's I/O, self-attention fused and in place
    assert rows.inputs == manifest.graphs["decoder_static"].spec.inputs
    assert rows.tensor("present.0.self.key").shape[2] == SLOTS


def test_static_rows_equal_the_growing_cache_up_to_the_slots(slots_export):
    growing = open_export(slots_export, "cpu", RuntimeOptions(cuda_graph=False))
    static = open_export(slots_export, "cpu", RuntimeOptions(cuda_graph=True))
    assert static.generate_ids(SOURCES, SLOTS) == growing.generate_ids(SOURCES, SLOTS)
    assert all(len(row) <= SLOTS for row in static.generate_ids(SOURCES))  # the default fits the slots
    with pytest.raises(InputError, match=f"does not fit the static decoder's cache slots \\({SLOTS}\\)"):
        static.generate_ids(SOURCES, SLOTS + 1)
    assert len(growing.generate_ids(SOURCES, 40, stop_at_eos=False)[0]) == 40  # the growing cache is not limited


@pytest.mark.parametrize("rows", ["HostRows", "RowBatch"])
def test_in_flight_batching_over_fewer_slots_matches_serial(slots_export, rows):
    """On CPU the rows step decoder_rows.onnx (the cache written in place on the host); exports without
    it (variants) and CUDA step decoder_static.onnx (RowBatch): both give serial decoding's tokens."""
    serial = open_export(slots_export, "cpu", RuntimeOptions(cuda_graph=False))
    engine = open_engine(ServeSettings(str(slots_export), engine=EngineConfig(max_batch=2)))
    assert type(engine.rows).__name__ == "HostRows"  # the default on CPU when the export has decoder_rows
    if rows == "RowBatch":
        engine.rows = RowBatch(engine.model.cache, 2, engine.rows.src_len)
    engine.start()
    got: dict[int, list[int]] = {}
    jobs = [Job(ids, SLOTS, lambda kind, v, i=i: kind == "token" and got.setdefault(i, []).append(v))
            for i, ids in enumerate(SOURCES * 3)]
    engine.submit(jobs)
    engine.close(30)
    assert [got.get(i, []) for i in range(len(jobs))] == [serial.generate_ids([ids], SLOTS)[0] for ids in SOURCES * 3]


def test_in_flight_rows_attend_over_the_widest_bound_source_only(slots_export):
    """HostRows spans the longest source it holds (rounded up to 16): it grows when a long source joins,
    shrinks when it leaves, and the other rows' tokens do not change."""
    from tfm_export.runtime.sources import source_batch
    from tfm_export.runtime.states.host_rows import open_rows

    model = open_export(slots_export, "cpu", RuntimeOptions(cuda_graph=True))
    cfg, long, short = model.config, list(range(4, 44)), SOURCES[2]
    rows = open_rows(model.cache, 2, 64)
    assert type(rows).__name__ == "HostRows" and rows.width == 16
    rows.bind([1], source_batch([short], cfg))
    rows.bind([0], source_batch([long], cfg))
    assert rows.width == 48
    tokens, got, widths = np.full(2, cfg.bos_id), [[], []], []
    for step in range(SLOTS):
        if step == 4:  # the long row leaves
            rows.release(0)
        rows.step(tokens)  # each row at its own position (rows.positions)
        next_ids = rows.next_ids()
        widths.append(rows.width)
        for row in (0, 1):
            got[row].append(int(next_ids[row]))
        tokens = next_ids
    assert widths == [48] * 4 + [16] * (SLOTS - 4)
    serial = open_export(slots_export, "cpu", RuntimeOptions(cuda_graph=False))
    assert got[0][:4] == serial.generate_ids([long], 4, stop_at_eos=False)[0]
    assert got[1] == serial.generate_ids([short], SLOTS, stop_at_eos=False)[0]


def test_in_flight_rows_step_only_up_to_the_last_bound_row(slots_export):
    """A step runs the bound rows' prefix of the batch (rounded up to ROW_BUCKET), not every row: a
    row bound past the others widens it, its leaving narrows it, and each row's tokens equal serial."""
    from tfm_export.runtime.sources import source_batch
    from tfm_export.runtime.states.host_rows import ROW_BUCKET, open_rows

    model = open_export(slots_export, "cpu", RuntimeOptions(cuda_graph=True))
    cfg, batch, high = model.config, 3 * ROW_BUCKET, 2 * ROW_BUCKET + 1  # high: a row in the last bucket
    rows = open_rows(model.cache, batch, 16)
    rows.bind([0], source_batch([SOURCES[0]], cfg))
    rows.bind([high], source_batch([SOURCES[1]], cfg))
    tokens = np.full(batch, cfg.tgt_pad_id)
    tokens[[0, high]] = cfg.bos_id
    got, stepped = {0: [], high: []}, []
    for step in range(SLOTS):
        if step == 3:  # the high row leaves (release puts it back at position 0)
            rows.release(high)
            tokens[high] = cfg.tgt_pad_id
        stepped.append(rows._stepped())
        rows.step(tokens)
        next_ids = rows.next_ids()
        for row in got if step < 3 else (0,):
            got[row].append(int(next_ids[row]))
            tokens[row] = next_ids[row]
    assert stepped == [batch] * 3 + [ROW_BUCKET] * (SLOTS - 3)
    serial = open_export(slots_export, "cpu", RuntimeOptions(cuda_graph=False))
    assert got[high] == serial.generate_ids([SOURCES[1]], 3, stop_at_eos=False)[0]
    assert got[0] == serial.generate_ids([SOURCES[0]], SLOTS, stop_at_eos=False)[0]


def test_in_flight_rows_write_the_cache_in_place_through_one_fused_node_per_layer(slots_export):
    """decoder_rows.onnx: one GroupQueryAttention per decoder layer; HostRows binds present.* to past.*'s
    memory, so a step writes each row's key/value into slot cache_len[b] there and leaves every other
    slot as it was (no host write, no second cache)."""
    import onnx

    from tfm_export.runtime.sources import source_batch
    from tfm_export.runtime.states.host_rows import HostRows, open_rows

    graph = onnx.load(str(slots_export / "decoder_rows.onnx")).graph
    model = open_export(slots_export, "cpu", RuntimeOptions(cuda_graph=True))
    fused = [n for n in graph.node if n.op_type == "GroupQueryAttention" and n.domain == "com.microsoft"]
    assert len(fused) == model.config.n_decoder_layers
    rows = open_rows(model.cache, 2, 16)
    assert isinstance(rows, HostRows)
    past = rows._host["past.0.self.key"]
    assert rows._host["present.0.self.key"] is past  # one cache set
    rows.bind([0, 1], source_batch(SOURCES[:2], model.config))
    past[1, :, 5:] = 7.0  # filled-looking slots beyond row 1's cache_len: never read, never written
    before = past.copy()
    rows.positions[:] = [0, 4]  # row 1 four tokens in
    rows.step(np.array([model.config.bos_id] * 2))
    changed = np.argwhere((past != before).any(axis=(1, 3)))  # (row, slot) pairs written by the step
    assert changed.tolist() == [[0, 0], [1, 4]]


def test_bad_slot_counts_are_refused_before_any_work(tiny_checkpoint, tmp_path):
    with pytest.raises(ExportError, match=r"must be 2\.\.64"):
        export_model(load_checkpoint(tiny_checkpoint), tmp_path / "x", ExportOptions(static_cache=True, static_slots=65))
    result = run_cli(tiny_checkpoint, "-o", tmp_path / "y", "--static-slots", "100")
    assert result.exit_code == 1 and "--static-slots 100 must be 2..64" in result.output
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_a_server_sized_to_shorter_sources_matches_serial_and_names_its_limit(slots_export):
    from tfm_export.serve.engine import LimitError, prepare_sources

    settings = ServeSettings(str(slots_export), engine=EngineConfig(max_batch=3, max_src_len=10))
    engine = open_engine(settings).start()
    serial = open_export(slots_export, "cpu", RuntimeOptions(cuda_graph=False))
    assert engine.rows.src_len == 10  # every in-flight row holds 10 source positions, not max_len's 64
    got: dict[int, list[int]] = {}
    jobs = [Job(ids, 8, lambda kind, v, i=i: kind == "token" and got.setdefault(i, []).append(v))
            for i, ids in enumerate(SOURCES)]
    engine.submit(jobs)
    engine.close(30)
    assert [got[i] for i in range(len(SOURCES))] == [serial.generate_ids([ids], 8)[0] for ids in SOURCES]
    with pytest.raises(LimitError, match="more than the .*max_src_len.* of 10") as info:
        prepare_sources(engine.model, settings, None, [[5] * 11], None)
    assert info.value.options == {"max_src_len": None}


def test_the_runtime_checks_decode_the_in_flight_rows_like_the_growing_cache(slots_export):
    from tfm_export.runtime.verify import greedy_in_rows
    from tfm_export.runtime.verify import format_verification, verify_export

    report = verify_export(slots_export)  # max_new_tokens 32 is capped at the static decoder's 12 slots
    assert report["max_new_tokens"] == SLOTS
    assert report["rows_mismatched"] == [] and "decoder_rows.onnx: the same rows" in format_verification(report)
    static = open_export(slots_export, "cpu", RuntimeOptions(cuda_graph=True))
    growing = open_export(slots_export, "cpu", RuntimeOptions(cuda_graph=False))
    assert greedy_in_rows(static.cache, static.source_input(SOURCES), SLOTS) == growing.generate_ids(SOURCES, SLOTS)


def test_the_runtime_checks_fail_on_other_rows_unless_the_export_is_int8():
    """Rows that differ from decoder.onnx fail the check; for int8 and int4 (batch-wide activation scales in
    the head) they are reported instead, as the export's own agreement check does."""
    from tfm_export.errors import ValidationError
    from tfm_export.runtime.verify import _same_rows, format_verification

    report = {"files": 1, "graphs": [], "device": "cpu", "sources": 2, "from": "random", "tokens": 3,
              "max_new_tokens": 2, "eager_report": "none"}
    with pytest.raises(ValidationError, match=r"decoder_rows.onnx decodes differently from decoder.onnx on rows \[1\]"):
        _same_rows("decoder_rows", [[1], [2, 3]], [[1], [2, 4]], report, strict=True)
    _same_rows("decoder_static", [[1], [2, 3]], [[1], [2, 4]], report, strict=False)
    assert report["static_cache_mismatched_rows"] == [1]
    assert ("decoder_static.onnx: differs from decoder.onnx on rows [1] (quantized: reported, not failed)"
            in format_verification(report))


def test_an_export_from_before_the_fused_rows_falls_back_to_static_rows(slots_export, monkeypatch, caplog):
    """A decoder_rows.onnx of an older tfm-export returned new.* keys/values for the host to write: its
    manifest says so, and the in-flight rows use decoder_static instead, with a line saying to re-export."""
    import dataclasses
    import logging

    from tfm_export.runtime.states.host_rows import HostRows, open_rows

    model = open_export(slots_export, "cpu", RuntimeOptions(cuda_graph=True))
    manifest = model.cache.manifest
    entry = manifest.graphs["decoder_rows"]
    old_outputs = tuple(dataclasses.replace(t, name=t.name.replace("present.", "new.")) for t in entry.spec.outputs)
    old = dataclasses.replace(entry, spec=dataclasses.replace(entry.spec, outputs=old_outputs))
    monkeypatch.setattr(model.cache, "manifest", dataclasses.replace(manifest, graphs={**manifest.graphs,
                                                                                       "decoder_rows": old}))
    with caplog.at_level(logging.WARNING, logger="tfm_export.runtime.states.host_rows"):
        rows = open_rows(model.cache, 2, 16)
    assert isinstance(rows, RowBatch) and not isinstance(rows, HostRows)
    assert "re-export it for the fused in-place rows" in caplog.text


@pytest.mark.parametrize("options", [{"num_beams": 4, "num_return_sequences": 2}, {"num_beams": 3, "min_new_tokens": 3},
                                     {"do_sample": True, "seed": 5, "num_return_sequences": 2},
                                     {"num_beams": 2, "no_repeat_ngram_size": 2}])
def test_beam_search_and_sampling_run_on_the_static_cache_too(slots_export, options):
    """The static cache is one more DecoderState: beam search (its rows reordered in the bound cache sets,
    candidates from the device head or, with a whole-row processor, the host) and sampling decode on it
    with the growing cache's hypotheses; a search longer than its slots falls back to the growing cache."""
    static = open_export(slots_export, "cpu", RuntimeOptions(cuda_graph=True))
    growing = open_export(slots_export, "cpu", RuntimeOptions(cuda_graph=False))
    config = static.generation_config(max_new_tokens=SLOTS, **options)
    assert static.cache_for(config, SLOTS) is static.static_cache
    assert static.cache_for(config, SLOTS + 1) is static.growing
    got, want = static.generate(SOURCES, config), growing.generate(SOURCES, config)
    assert [[h.ids for h in hs] for hs in got] == [[h.ids for h in hs] for hs in want]
    np.testing.assert_allclose([h.score for hs in got for h in hs], [h.score for hs in want for h in hs], atol=1e-5)
    no_static = open_export(slots_export, "cpu", RuntimeOptions(cuda_graph=True, static_search=False))
    assert no_static.cache_for(config, SLOTS) is no_static.growing  # the server's setting (its lane)
