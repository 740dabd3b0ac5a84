"""Where a model comes from: a local path, or a Hugging Face Hub id (`Helsinki-NLP/opus-mt-en-de`).

`resolve_model` turns what the user typed into a local path and the record of its origin (the manifest's
source.origin). A path that exists is always a path; an argument of the Hub's `namespace/name` form that is
not one is downloaded with huggingface_hub into its standard cache (HF_HOME, HF_HUB_CACHE), which brings
HF_HUB_OFFLINE=1, HF_TOKEN, `hf auth login`'s stored token, resumed downloads and its progress bars. Only
the files an export reads are fetched: the configs, the tokenizer files, and the weights (safetensors when
the repo has them, else PyTorch's .bin), one file or the shards its index names. config.json comes first:
a model type no family reads is refused before any weights are downloaded.

Every failure is one CheckpointError line (not found, gated, no such revision, no network, not cached).
huggingface_hub downloads each file to a temporary name and moves it into place when complete, so an
interrupted download leaves nothing that a later run would read.
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import CheckpointError, ConfigError, ValidationError, first_line, shorten
from .hf_folder import PICKLE, PICKLE_INDEX, SAFETENSORS, SAFETENSORS_INDEX, index_shards, read_json, weight_files

log = logging.getLogger(__name__)

# What the importers read from a folder besides the weights (importers.hf, hf_generation, hf_tokenizers and
# text.marian's file names, families.whisper's features); fetched when the repo has them.
FOLDER_FILES = ("config.json", "generation_config.json", "preprocessor_config.json", "tokenizer.json",
                "tokenizer_config.json", "added_tokens.json", "special_tokens_map.json", "vocab.json",
                "target_vocab.json", "source.spm", "target.spm", "sentencepiece.bpe.model")
# The Hub's repo id: `namespace/name`, letters, digits, `-`, `_`, `.`, neither part starting with `-` or `.`,
# no `--` or `..` (huggingface_hub's validate_repo_id), at most 96 characters each.
REPO_ID = re.compile(r"(?!.*(--|\.\.))[A-Za-z0-9_][\w.-]{0,95}/[A-Za-z0-9_][\w.-]{0,95}")
# A missing checkpoint file (`runs/model.pt`) has the id's form too; it keeps the "not found" of a path.
FILE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".json", ".onnx", ".tar", ".zip")
LOGIN = "run `hf auth login` (or `huggingface-cli login`), set HF_TOKEN or pass {token}"


@dataclass(frozen=True)
class Resolved:
    """A model as a local path, where it came from (Manifest.source["origin"]), and a line saying which."""

    path: Path
    origin: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def is_repo_id(text: str) -> bool:
    """`namespace/name` as the Hub spells repo ids (not a path's `runs/model.pt`)."""
    return bool(REPO_ID.fullmatch(text)) and not text.lower().endswith(FILE_SUFFIXES)


def resolve_model(model: str | Path, revision: str | None = None, token: str | None = None,
                  progress: Callable[[str], None] | None = None) -> Resolved:
    """The local path of `model`: an existing path as it is (hashing its weights for the record), else a Hub id
    downloaded into the cache at `revision` (a branch, tag or commit; default the repo's main branch) with
    `token` (default: HF_TOKEN or the stored login). `progress` is told before a download starts."""
    path = Path(model)
    if path.exists():
        if revision is not None:
            raise ConfigError(f"{{revision}} applies to a Hugging Face Hub id, and {path} is a local path",
                              options={"revision": revision})
        return Resolved(path, local_origin(path), f"using local {'folder' if path.is_dir() else 'file'} {path}")
    if not is_repo_id(str(model)):
        raise CheckpointError(f"checkpoint not found: {path}; check the path (or pass a Hugging Face Hub id, "
                              f"namespace/name)")
    return download(str(model), revision, token, progress)


def local_origin(path: Path) -> dict[str, Any]:
    """A local checkpoint's record: its absolute path and the sha256 of the weights it holds (a folder's weight
    files; nothing for a folder without any, which its importer refuses)."""
    from ..manifest import sha256_file

    if path.is_dir():
        try:
            files = weight_files(path)
        except CheckpointError:
            files = []
    else:
        files = [path]
    return {"path": str(path.resolve()), "sha256": {f.name: sha256_file(f) for f in files}}


def download(repo_id: str, revision: str | None = None, token: str | None = None,
             progress: Callable[[str], None] | None = None) -> Resolved:
    """The snapshot folder of `repo_id` at `revision` in the Hub cache, with the files an export reads;
    from the cache alone when HF_HUB_OFFLINE is set."""
    hub = _hub()
    from huggingface_hub import constants  # HF_HUB_OFFLINE, read from the environment when it was imported

    asked = revision or "main"
    with hub_errors(repo_id, asked):
        if constants.HF_HUB_OFFLINE:
            folder = Path(hub.hf_hub_download(repo_id, "config.json", revision=asked, token=token)).parent
            _check_family(folder, repo_id)
            weight_files(folder)  # every weights file (each shard) the snapshot needs is in the cache
            return Resolved(folder, {"hub": repo_id, "revision": asked, "commit": folder.name},
                            f"using {repo_id}@{folder.name} from the Hugging Face cache (HF_HUB_OFFLINE)")
        info = hub.HfApi().model_info(repo_id, revision=revision, token=token)
        names = {s.rfilename for s in info.siblings or ()}
        if "config.json" not in names:
            raise CheckpointError(f"{repo_id} has no config.json: it is not a transformers model repository")
        if progress:
            progress(f"downloading {repo_id}@{info.sha} (revision {asked}) to the Hugging Face cache")
        # config.json at the revision asked records the branch's commit in the cache (refs/), so that a later
        # HF_HUB_OFFLINE=1 run finds this snapshot; every other file comes from that commit.
        folder = Path(hub.hf_hub_download(repo_id, "config.json", revision=asked, token=token)).parent
        if folder.name != info.sha:
            raise CheckpointError(f"{repo_id}@{asked} moved to another commit while downloading; run again")
        _check_family(folder, repo_id)  # before the weights, which may be gigabytes

        def fetch(name: str) -> Path:
            return Path(hub.hf_hub_download(repo_id, name, revision=info.sha, token=token))

        for name in sorted(names & set(FOLDER_FILES) - {"config.json"}):
            fetch(name)
        for name in _weight_names(repo_id, names, fetch):
            fetch(name)
    return Resolved(folder, {"hub": repo_id, "revision": asked, "commit": info.sha},
                    f"downloaded {repo_id}@{info.sha} to the Hugging Face cache ({folder})")


def _hub() -> Any:
    try:
        import huggingface_hub
    except ImportError:
        raise ConfigError("a Hugging Face Hub id needs huggingface_hub: pip install 'tfm-export[export]'") from None
    return huggingface_hub


def _weight_names(repo_id: str, names: set[str], fetch: Callable[[str], Path]) -> list[str]:
    """The weight files to fetch, as hf_folder.weight_files reads them: safetensors before .bin, one file
    before shards (the index is fetched here to learn its shards' names, each of which the repo must have)."""
    for single, index in ((SAFETENSORS, SAFETENSORS_INDEX), (PICKLE, PICKLE_INDEX)):
        if single in names:
            return [single]
        if index in names:
            shards = index_shards(fetch(index))
            missing = [s for s in shards if s not in names]
            if missing:
                raise CheckpointError(f"{repo_id}'s {index} names shards the repository does not have "
                                      f"({shorten(missing, 3)}); the upload is incomplete")
            return shards
    raise CheckpointError(f"{repo_id} has no weights this tool reads: neither {SAFETENSORS} nor {PICKLE} (nor "
                          f"{SAFETENSORS_INDEX} or {PICKLE_INDEX} with their shards)")


def _check_family(folder: Path, repo_id: str) -> None:
    """A model type no family reads is refused on config.json alone, naming the supported ones."""
    from .families import family_for

    family_for(read_json(folder / "config.json").get("model_type"), f"{repo_id}'s config.json")


@contextlib.contextmanager
def hub_errors(repo_id: str, revision: str) -> Iterator[None]:
    """huggingface_hub's exceptions (and the network's) -> one CheckpointError line saying what to do."""
    try:
        yield
    except (CheckpointError, ConfigError):
        raise
    except Exception as exc:
        message = hub_error_message(exc, repo_id, revision)
        if message is None:
            raise
        raise CheckpointError(message, options={"token": None} if "{token}" in message else None) from None


def hub_error_message(exc: Exception, repo_id: str, revision: str) -> str | None:
    """The line for one failure of a Hub look-up or download; None for an error that is not the Hub's."""
    from huggingface_hub import constants
    from huggingface_hub import errors as hub

    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, hub.GatedRepoError):
        return f"{repo_id} is a gated model: accept its conditions on its Hub page, then {LOGIN}"
    if isinstance(exc, hub.RepositoryNotFoundError):
        return (f"{repo_id} is neither a local path nor a model on the Hugging Face Hub (repository not found); "
                f"for a private model, {LOGIN}")
    if isinstance(exc, hub.RevisionNotFoundError):
        return f"{repo_id} has no revision {revision!r} (a branch, tag or commit sha); check --revision"
    if isinstance(exc, hub.HfHubHTTPError) and status in (401, 403):
        return f"{repo_id}: access denied (HTTP {status}); {LOGIN} with a token that may read it"
    if constants.HF_HUB_OFFLINE and isinstance(exc, (hub.LocalEntryNotFoundError, hub.OfflineModeIsEnabled)):
        return (f"{repo_id}@{revision} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and "
                f"HF_HUB_OFFLINE is set; run once without it to download the model")
    if _network_error(exc):
        cached = " (a copy is in the cache: set HF_HUB_OFFLINE=1 to use it)" if _cached(repo_id, revision) else ""
        return (f"cannot download {repo_id} from {constants.ENDPOINT} ({first_line(exc, 120)}); nothing half-written "
                f"is kept: check the network and run again, or set HF_HUB_OFFLINE=1 to use the Hugging Face "
                f"cache{cached}")
    if isinstance(exc, hub.HfHubHTTPError):
        return f"the Hugging Face Hub answered HTTP {status} for {repo_id} ({first_line(exc, 120)}); try again later"
    return None


def _network_error(exc: BaseException) -> bool:
    """No connection, a timeout, or a connection dropped mid-file. huggingface_hub's transport is httpx (1.x)
    or its fork httpx2 (2.x): their TransportError is matched by name rather than importing either."""
    from huggingface_hub import errors as hub

    if isinstance(exc, (ConnectionError, TimeoutError, hub.LocalEntryNotFoundError)):
        return True  # LocalEntryNotFoundError online: the Hub was unreachable and the file is not cached
    if isinstance(exc, OSError) and "Consistency check failed" in str(exc):
        return True  # the file ended short of its announced size
    return any(c.__name__ == "TransportError" for c in type(exc).__mro__)


def _cached(repo_id: str, revision: str) -> bool:
    """Whether the cache has this revision's config.json (an offline run could use the snapshot)."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    return isinstance(found, str)


def cached_snapshot(source: dict[str, Any]) -> Path | None:
    """The Hub snapshot an export was made from, when the Hugging Face cache still holds it (no network)."""
    origin = source.get("origin") or {}
    if not origin.get("hub") or not origin.get("commit"):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(origin["hub"], "config.json", revision=origin["commit"])
    return Path(found).parent if isinstance(found, str) else None


def unchanged_local_origin(source: dict[str, Any]) -> Path | None:
    """The local checkpoint or folder an export was made from, when it is still where the manifest says; a
    ValidationError when its weights changed since (their sha256 differ from the recorded ones)."""
    origin = source.get("origin") or {}
    path = Path(origin["path"]) if origin.get("path") and not origin.get("hub") else None
    if path is None or not path.exists() or not origin.get("sha256"):
        return None
    if local_origin(path)["sha256"] != origin["sha256"]:
        raise ValidationError(f"{path}, the model this folder was exported from, has changed since (its weights' "
                              "sha256 differ from the manifest's); pass {model} to compare with a model anyway",
                              options={"model": None})
    return path
