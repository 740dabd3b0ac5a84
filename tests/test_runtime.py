"""The torch-free ONNX Runtime runtime: greedy parity with eager, IOBinding, devices, threads, errors."""

import json
import subprocess
import sys
import threading

import onnxruntime as ort
import pytest

from tfm_export.model.checkpoint import load_checkpoint
from tfm_export.config import PRESETS
from tfm_export.model.eager import EagerModel
from tfm_export.errors import DeviceError, InputError
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.model.presets import init_model
from tfm_export.runtime import RuntimeOptions, open_export
from tfm_export.model.checkpoint import Checkpoint

from conftest import has_cuda_gpu

SOURCES = [[5, 9, 13, 7, 22, 31, 8], [40], [3, 3, 60, 2 + 10], [17, 18]]


@pytest.fixture(scope="module")
def runtime(tiny_export):
    return open_export(tiny_export, device="cpu")


def test_ort_greedy_equals_eager_on_ragged_batches(runtime, tiny_checkpoint):
    eager = EagerModel.from_checkpoint(load_checkpoint(tiny_checkpoint))
    assert runtime.generate_ids(SOURCES, 20) == eager.generate_ids(SOURCES, 20)
    # Row by row gives the same tokens as the padded batch.
    assert [runtime.generate_ids([s], 20)[0] for s in SOURCES] == runtime.generate_ids(SOURCES, 20)


@pytest.fixture(scope="module")
def early_eos(tmp_path_factory):
    """A model whose EOS is a token one row emits early, so rows stop at different steps."""
    free = EagerModel(init_model("tiny", seed=21)).generate_ids(SOURCES, 12, stop_at_eos=False)
    eos = free[0][2]
    model = init_model(PRESETS["tiny"].replace(eos_id=eos), seed=21)
    out = tmp_path_factory.mktemp("eos") / "out"
    export_model(Checkpoint(model.config, model.state_dict()), out, ExportOptions(validate=False))
    return model, out, free, eos


def test_rows_stop_at_eos_independently(early_eos):
    model, out, free, eos = early_eos
    got = open_export(out, device="cpu").generate_ids(SOURCES, 12)
    assert got == EagerModel(model).generate_ids(SOURCES, 12)
    assert got[0] == free[0][:2]
    assert any(len(row) == 12 for row in got)  # some row ran to the limit
    assert got == [r[: r.index(eos)] if eos in r else r for r in free]


def test_stop_at_eos_off_gives_fixed_length(early_eos):
    _, out, _, _ = early_eos
    rows = open_export(out, device="cpu").generate_ids(SOURCES, 9, stop_at_eos=False)
    assert [len(r) for r in rows] == [9] * len(SOURCES)


def test_decoder_runs_through_iobinding(tiny_export, monkeypatch):
    model = open_export(tiny_export, device="cpu")
    expected = model.generate_ids(SOURCES, 6)

    def forbidden(*args, **kwargs):
        raise AssertionError("the decode loop must use IOBinding, not session.run")

    monkeypatch.setattr(model.decoder, "run", forbidden)
    monkeypatch.setattr(model.encoder, "run", forbidden)
    assert model.generate_ids(SOURCES, 6) == expected


def test_session_options_are_applied(tiny_export):
    model = open_export(tiny_export, device="cpu",
                        options=RuntimeOptions(intra_op_threads=1, graph_optimization="basic"))
    opts = model.decoder.get_session_options()
    assert opts.intra_op_num_threads == 1
    assert opts.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    with pytest.raises(DeviceError, match="graph_optimization must be one of"):
        open_export(tiny_export, device="cpu", options=RuntimeOptions(graph_optimization="max"))


def test_parallel_requests_match_sequential(runtime):
    requests = [[s] for s in SOURCES] * 3
    expected = [runtime.generate_ids(r, 15) for r in requests]
    results: dict[int, list] = {}

    def work(i: int) -> None:
        results[i] = runtime.generate_ids(requests[i], 15)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [results[i] for i in range(len(requests))] == expected


@pytest.mark.skipif(has_cuda_gpu(), reason="a GPU is present")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_without_gpu_is_a_clear_error(tiny_export, device):
    with pytest.raises(DeviceError, match="CUDA requested but .*use --device cpu"):
        open_export(tiny_export, device=device)


def test_auto_falls_back_to_cpu_and_bad_devices_fail(tiny_export):
    if not has_cuda_gpu():
        assert open_export(tiny_export, device="auto").device.name == "cpu"
    for bad in ("tpu", "cuda:x"):
        with pytest.raises(DeviceError, match="use cpu, cuda, cuda:N or auto"):
            open_export(tiny_export, device=bad)


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda_gpu(), reason="needs a CUDA GPU and onnxruntime-gpu")
def test_cuda_greedy_equals_cpu(tiny_export):
    cpu = open_export(tiny_export, device="cpu").generate_ids(SOURCES, 16)
    assert open_export(tiny_export, device="cuda").generate_ids(SOURCES, 16) == cpu


@pytest.mark.parametrize("sources, max_new, message", [
    ([[5, 64]], None, "source id 64 is out of range for a vocabulary of 64 ids"),
    ([[-1]], None, "source id -1 is out of range"),
    ([list(range(3, 63)) + [5] * 10], None, "source length 70 exceeds the model's max_len (64)"),
    ([], None, "no sources given"),
    ([[]], None, "every source is empty"),
    ([[5]], 65, "max_new_tokens (65) does not fit the model's max_len (64); use at most 64"),
    ([[5]], 0, "max_new_tokens must be at least 1"),
])
def test_bad_inputs(runtime, sources, max_new, message):
    with pytest.raises(InputError) as info:
        runtime.generate_ids(sources, max_new)
    assert message in str(info.value)


def test_text_without_tokenizer_is_refused(runtime):
    with pytest.raises(InputError, match="no tokenizer; pass token ids"):
        runtime.translate(["hello"])


def test_runtime_never_imports_torch(tiny_export):
    code = (
        "import sys, json\n"
        "from tfm_export.runtime import open_export\n"
        f"m = open_export({str(tiny_export)!r}, device='cpu')\n"
        "print(json.dumps(m.generate_ids([[5, 6, 7]], 5)))\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout.strip().splitlines()[-1])[0]) <= 5
