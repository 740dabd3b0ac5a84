"""Shared fixtures: one tiny checkpoint and its export for the whole session (exports take ~10 s)."""

import fcntl
import functools
import os
import shutil
from pathlib import Path
from typing import Callable

import pytest

from tfm_export.model.checkpoint import load_checkpoint
from tfm_export.export.exporter import ExportOptions, export_model
from tfm_export.model.presets import init_checkpoint

BUNDLED = Path(__file__).resolve().parents[1] / "models" / "num2words-de"


@functools.cache
def has_cuda_gpu() -> bool:
    """A GPU this onnxruntime runs on: the condition of the GPU tests (`make test-gpu`; CI has none).

    Asked of ONNX Runtime itself, not torch: `make test` installs torch's CPU wheel on a GPU machine too,
    and onnxruntime-gpu is installed where there is no GPU (its CUDA provider then fails to start)."""
    import onnxruntime as ort

    from tfm_export.errors import DeviceError
    from tfm_export.runtime.device import parse_device
    from tfm_export.runtime.states.reorder import gather_model, helper_session

    ort.set_default_logger_severity(4)  # a missing GPU is the answer, not an error to print
    try:  # the runtime's own device parser and smallest graph; ORT falls back to CPU when CUDA cannot start
        return helper_session(gather_model(["float32"]), parse_device("cuda")).get_providers()[0] == \
            "CUDAExecutionProvider"
    except (DeviceError, RuntimeError, ort.capi.onnxruntime_pybind11_state.Fail):  # no CUDA provider, or no driver
        return False
    finally:
        ort.set_default_logger_severity(2)  # ORT's default

# `make test` runs on two pytest-xdist workers with --dist loadfile: a test module stays on one worker
# (its module fixtures are built once), and modules that share heavy session fixtures or write the same
# files also share a worker (pytest_xdist_make_scheduler below).
SHARED_GROUPS = {
    "trained": ("test_hf_families", "test_runtimes_families", "test_serve_libretranslate",
                "test_ct2_api"),  # trained_export
    "wheel": ("test_wheel_install", "test_runtime_install"),  # both build this checkout's wheel in place
    "whisper": ("test_serve_audio", "test_serve_schema"),  # whisper_export
    "npm": ("test_node_package", "test_runtimes", "test_runtimes_fixture", "test_runtime_client"),  # runtimes/
}
GROUP_OF = {module: group for group, modules in SHARED_GROUPS.items() for module in modules}
# Handed out first (longest first), so that the two workers finish together rather than one waiting
# on a long module that started last.
LONGEST_FIRST = ("test_marian_published", "trained", "wheel", "npm", "test_variants", "test_serve",
                 "test_serve_groups", "test_search", "test_export")


def group_of(module: str) -> str:
    return GROUP_OF.get(module, module)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        group = group_of(item.module.__name__.rpartition(".")[2])
        return LONGEST_FIRST.index(group) if group in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: a module's tests keep their order


@pytest.hookimpl(optionalhook=True)  # a plain `pytest` (no xdist installed) runs too
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile with SHARED_GROUPS' modules as one unit. (xdist's own loadgroup marks do not
    work with pytest 9, whose node ids xdist can no longer suffix with the group.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid.split("::", 1)[0].rpartition("/")[2].removesuffix(".py"))

    return ModuleGroups(config, log)


@pytest.fixture(scope="session", autouse=True)
def reuse_identical_graph_exports(tmp_path_factory):
    """torch.onnx.export of the same weights, config, graph spec and opset writes the same file, and the
    suite exports the same few models dozens of times (every variant, server and runtime test starts
    from the float32 graphs; the variants are applied afterwards). The first export of each graph is
    kept for the run (both xdist workers) and copied for the others: the exporter's own checks still run on every
    first export, and whole minutes of CI go. TFM_EXPORT_TEST_EXPORT_CACHE=0 turns it off."""
    import hashlib
    import json

    import torch

    from tfm_export.export import exporter

    if os.environ.get("TFM_EXPORT_TEST_EXPORT_CACHE") == "0":
        yield
        return
    real = exporter.export_graph
    # Under xdist the workers' base folders share a parent (this run's): one cache for both workers, so
    # that a graph one worker exported is not exported again by the other.
    shared = os.environ.get("PYTEST_XDIST_WORKER") is not None
    cache = tmp_path_factory.getbasetemp().parent / "graph-cache" if shared else tmp_path_factory.mktemp("graph-cache")
    cache.mkdir(exist_ok=True)

    def key(model, spec, opset) -> str:
        digest = hashlib.sha256(repr((type(model).__qualname__, model.config, spec, opset)).encode())
        for name, tensor in sorted(model.state_dict().items()):
            flat = tensor.detach().cpu().contiguous().reshape(-1)
            digest.update(f"{name}:{flat.dtype}:{tuple(tensor.shape)}".encode())
            digest.update(flat.view(torch.uint8).numpy().tobytes())
        return digest.hexdigest()

    def export_graph(model, spec, folder, opset, external=False):
        entry = cache / key(model, spec, (opset, external))
        if not entry.is_dir():
            extra = real(model, spec, folder, opset, external)
            partial = cache / f".{entry.name}.{os.getpid()}.partial"
            partial.mkdir()
            for name in (spec.file, *extra):
                shutil.copy2(folder / name, partial / name)
            (partial / "extra.json").write_text(json.dumps(extra))
            try:
                partial.rename(entry)
            except OSError:  # the other worker stored the same graph meanwhile
                shutil.rmtree(partial)
            return extra
        extra = json.loads((entry / "extra.json").read_text())
        for name in (spec.file, *extra):
            shutil.copy2(entry / name, folder / name)
        return extra

    patch = pytest.MonkeyPatch()
    patch.setattr(exporter, "export_graph", export_graph)
    yield
    patch.undo()


def built_once(tmp_path_factory, name: str, leaf: str, build: Callable[[Path], None]) -> Path:
    """`<a folder of its own>/<leaf>` as `build(path)` writes it, built once per test run: under xdist the first
    worker to ask builds it while the other waits on a lock (it would spend the same time building its own), and
    each worker gets a copy of its own, as it got a build of its own before (tests may write into it)."""
    own = tmp_path_factory.mktemp(name) / leaf
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        build(own)
        return own
    root = tmp_path_factory.getbasetemp().parent / "built-once"  # this run's, shared by its workers
    root.mkdir(exist_ok=True)
    done = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.is_dir():
            stage = root / f".{name}.partial"
            shutil.rmtree(stage, ignore_errors=True)  # a build of this run that failed
            build(stage)
            stage.rename(done)
    shutil.copytree(done, own)
    return own


@pytest.fixture(scope="session")
def speculative_exports(tmp_path_factory) -> Callable[[str], Path]:
    """family -> its trained fixture (tests/fixtures/trained) exported without validation (the decoder with
    earlier_logits), each built once per run: tests/test_speculative.py's and test_speculative_sampling.py's."""
    import hf_fixtures
    from helpers import run_cli_ok

    made: dict[str, Path] = {}

    def export(family: str) -> Path:
        if family not in made:
            made[family] = built_once(tmp_path_factory, f"speculative-{family}", "out", lambda out: run_cli_ok(
                hf_fixtures.trained_folder(family), "-o", out, "--no-validate"))
        return made[family]

    return export


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
    """Serial greedy decoding of one source at a time: the reference every server answer must equal.
    Greedy is deterministic, so each (source, steps) is decoded once per worker (the server tests ask the
    same hundreds of references twice: to compare, then to count tokens); callers get a list of their own."""
    from tfm_export.runtime import open_export

    model = open_export(static_export, "cpu")

    @functools.cache
    def decode(ids: tuple[int, ...], steps: int | None) -> tuple[int, ...]:
        return tuple(model.generate_ids([list(ids)], steps)[0])

    return lambda ids, steps=None: list(decode(tuple(ids), steps))


@pytest.fixture(scope="session")
def bundled_export(tmp_path_factory) -> Path:
    """The bundled model, exported and validated once."""
    if not (BUNDLED / "model.pt").exists():
        pytest.skip("the bundled model is not trained yet")
    return built_once(tmp_path_factory, "bundled", "model_onnx",
                      lambda out: export_model(load_checkpoint(BUNDLED / "model.pt"), out))


@pytest.fixture(scope="session")
def chars_export(tiny_checkpoint, tmp_path_factory) -> Path:
    """The tiny model with a character tokenizer (digits in, letters out) and no language codes:
    text in, text out, for the servers' text APIs (LibreTranslate's, the OpenAPI schema test)."""
    import dataclasses

    from tfm_export.text.tokenizer import CharTokenizer

    tokenizer = CharTokenizer.build(["0123456789 "], ["abcdefghijklmnopqrstuvwxyz -"])
    checkpoint = dataclasses.replace(load_checkpoint(tiny_checkpoint), tokenizer=tokenizer.to_dict())
    out = tmp_path_factory.mktemp("chars") / "model_onnx"
    export_model(checkpoint, out, ExportOptions(validate=False))
    return out


@pytest.fixture(scope="session")
def trained_export(tmp_path_factory):
    """family -> its trained, published-style folder (tests/fixtures/trained) exported with the CLI's default
    flags (validation on, exit 0), once per run: shared by the Python and the Node/browser tests, and by
    modules on the other worker (test_documents, test_gptq, test_quality_table, test_cli_run)."""
    import hf_fixtures
    from helpers import export_validated

    made: dict[str, Path] = {}

    def export(family: str) -> Path:
        if family not in made:
            made[family] = built_once(tmp_path_factory, f"trained-{family}", "out", lambda out: export_validated(
                hf_fixtures.trained_folder(family), out))
        return made[family]

    return export


@pytest.fixture(scope="session")
def whisper_export(tmp_path_factory) -> Path:
    """A random multilingual Whisper folder of 2 + 2 layers with 4 s windows (tests/whisper_fixtures.py:
    quick to export and decode; a 10 s recording is three windows), exported without validation, with its
    static-cache decoders for all 64 target positions: for the servers' audio routes (in-flight windows)."""
    pytest.importorskip("transformers")
    from helpers import run_cli_ok
    from whisper_fixtures import Layout, speech_folder

    def build(out: Path) -> None:
        model = tmp_path_factory.mktemp("whisper-model") / "model"
        run_cli_ok(speech_folder(model, Layout(2, 2, 80, True, 200)), "-o", out, "--no-validate", "--static-slots", 64)

    return built_once(tmp_path_factory, "whisper", "onnx", build)


@pytest.fixture(scope="session")
def digits_export(tmp_path_factory) -> Path:
    """The trained Whisper fixture (models/whisper-digits) exported without validation (~20 s;
    tests/test_whisper_trained.py validates it), with its static-cache decoders for all 64 target positions
    (served, its windows are batched in flight): for tests that need real transcriptions of the held-out
    speech (models/whisper-digits/speech.py speaks it with espeak-ng)."""
    pytest.importorskip("transformers")
    from helpers import run_cli_ok

    out = built_once(tmp_path_factory, "digits", "onnx", lambda out: run_cli_ok(
        Path(__file__).resolve().parents[1] / "models" / "whisper-digits", "-o", out, "--no-validate",
        "--static-slots", 64))
    return out


@pytest.fixture(scope="session")
def trained_004(tmp_path_factory):
    """Seed 004 (tests/seed_models.py) trained briefly, once per run: test_any_module's, test_serve_nocache's and
    test_runtimes_nocache's. Its per-head weights are not in its state_dict, so the file holds every parameter
    (seed_models.all_parameters, a list of tensors that weights_only=True loads) and a fresh seed_004 takes them
    in the same order."""
    import torch

    import seed_models as sm

    def build(out: Path) -> None:
        out.mkdir()
        trained = sm.train_004(sm.seed_004(), steps=300)
        torch.save([p.detach() for p in sm.all_parameters(trained)], out / "m004.pt")

    folder = built_once(tmp_path_factory, "trained-004", "module", build)
    model, weights = sm.seed_004(), torch.load(folder / "m004.pt", weights_only=True)
    params = sm.all_parameters(model)
    assert [p.shape for p in params] == [w.shape for w in weights], "m004.pt is not seed_004's parameters"
    with torch.no_grad():
        for param, weight in zip(params, weights):
            param.copy_(weight)
    return model.eval()


@pytest.fixture(scope="session")
def api_004(trained_004, tmp_path_factory):
    """trained_004 exported through export_module (validated on 4 held-out sources), once per run: (folder,
    its manifest)."""
    import seed_models as sm
    from tfm_export.export.module_export import export_module
    from tfm_export.manifest import load_manifest

    out = built_once(tmp_path_factory, "api-004", "m004_onnx", lambda out: export_module(
        trained_004, sm.encode_004, sm.decode_004, out=out, src_vocab_size=sm.VOCAB, max_len=sm.MAX_LEN,
        bos_id=sm.BOS, eos_id=sm.EOS, src_pad_id=sm.PAD, sources=sm.held_out(99, 4)))
    return out, load_manifest(out)


@pytest.fixture(scope="session")
def encoder_only_003(tmp_path_factory) -> Path:
    """Seed 003's encoder-only classifier exported through export_module without validation, once per run."""
    import seed_models as sm
    from tfm_export.export.module_export import export_module

    return built_once(tmp_path_factory, "encoder-only-003", "cls_onnx", lambda out: export_module(
        sm.seed_003(), sm.encode_003, out=out, src_vocab_size=sm.CONFIG_003.vocab_size,
        max_len=sm.CONFIG_003.max_position_embeddings, output_names=["logits"], validate=False))
