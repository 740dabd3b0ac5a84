"""Safe output folders and files: what may be replaced, checked before any long work. Torch-free.

An export folder is written to a hidden temporary folder beside OUT and renamed into place at the
end. Before that, `check_output_dir` refuses every OUT whose replacement could lose a user's file:
a folder holding anything but a previous export, the folder of the input model, the current, home
or root folder, a mount point. `prepare_output_dir` then creates the temporary folder (which proves
OUT's parent is writable) and returns an `OutputDir` that commits or discards it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from collections import Counter
from typing import Callable, Iterable, Sequence

from .errors import OutputError, TfmExportError
from .manifest import MANIFEST_NAME, export_files, sha256_file

log = logging.getLogger(__name__)

def os_error_message(exc: OSError, target: Path) -> str:
    """One line for a failed write: the full-disk case named plainly, others with their reason."""
    if exc.errno == errno.ENOSPC:
        return f"no space left on device while writing {target}; free some space or choose another -o folder"
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(target) else ""
    return f"cannot write {target}: {exc.strerror or exc}{where}"


def _special_folder(resolved: Path) -> str | None:
    """Why `resolved` must never be replaced, or None."""
    named = {Path.cwd().resolve(): "the current directory", Path.home().resolve(): "your home directory",
             Path(resolved.anchor): "the root folder"}
    if resolved in named:
        return named[resolved]
    if resolved.parent == Path("/home"):
        return "a home directory"
    return "a mount point" if os.path.ismount(resolved) else None


def _check_inputs(out: Path, resolved: Path, inputs: Iterable[str | os.PathLike | None]) -> None:
    for given in inputs:
        if given is None:
            continue
        source = Path(given).resolve()
        if source == resolved or resolved in source.parents:
            raise OutputError(f"{out} holds the input {given}; choose another -o folder")
        if source.is_dir() and source in resolved.parents:
            raise OutputError(f"{out} is inside the input folder {given}; choose another -o folder")


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return Path(path.anchor)


def check_output_dir(out: str | os.PathLike, force: bool = False,
                     inputs: Iterable[str | os.PathLike | None] = ()) -> None:
    """Refuse (OutputError) an OUT whose replacement could lose a file that is not a previous export."""
    out = Path(out)
    if out.is_symlink():  # replacing would swap the link, and its target's files could not be told apart
        raise OutputError(f"{out} is a symbolic link; give the folder itself with -o")
    resolved = out.resolve()
    special = _special_folder(resolved)
    if special:
        raise OutputError(f"refusing to write the export to {out} ({special}); choose a new folder with -o")
    _check_inputs(out, resolved, inputs)
    existing = _nearest_existing(resolved)
    if existing != resolved and not existing.is_dir():
        raise OutputError(f"cannot create {out}: {existing} is not a folder")
    _check_writable(out, existing if existing != resolved else resolved.parent)
    if existing == resolved:
        _previous_export(out, force)  # OutputDir.commit checks again before it replaces anything


def _previous_export(out: Path, force: bool) -> dict[str, str | None]:
    """The files of the previous export in the existing folder OUT (name -> recorded sha256 or None),
    if replacing it loses nothing else: every entry is a plain file its manifest lists."""
    if not out.is_dir():
        raise OutputError(f"{out} exists and is not a folder; choose another -o folder")
    entries = sorted(out.iterdir())
    if not entries:
        return {}  # an empty folder: nothing to lose
    listing = export_files(out)
    if listing is None and (out / MANIFEST_NAME).is_file():  # an export's folder, but its list of files is lost
        raise OutputError(f"{out / MANIFEST_NAME} cannot be read as a tfm-export manifest, so the export's files "
                          f"cannot be told from others; choose another -o folder (or remove {out} yourself)")
    listing = listing or {}
    foreign = [p.name for p in entries if p.name not in listing or p.is_symlink() or not p.is_file()]
    if foreign:
        shown = ", ".join(foreign[:5]) + (f", ... (+{len(foreign) - 5} more)" if len(foreign) > 5 else "")
        raise OutputError(f"{out} holds files that are not a tfm-export export ({shown}); "
                          f"choose another -o folder")
    if not force:
        raise OutputError(f"{out} already exists; pass --force to replace it or -o to choose another folder")
    return {p.name: listing[p.name] for p in entries}


def _check_writable(out: Path, folder: Path) -> None:
    """Make and remove a hidden folder in `folder`: the one sure test (read-only mounts, /proc, EACCES)."""
    probe = folder / f".tfm-export-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise OutputError(os_error_message(exc, out)) from None
        raise OutputError(f"cannot write {out}: {folder} is not writable ({exc.strerror or exc})") from None


@dataclass(frozen=True)
class OutputDir:
    """A checked OUT and the hidden temporary folder the export is written to."""

    out: Path
    tmp: Path  # .NAME.partial-XXXXXXXX beside OUT
    created: tuple[Path, ...]  # parent folders made for OUT (deepest first), removed again on failure
    force: bool  # a previous export at OUT may be replaced

    def commit(self) -> None:
        """Rename the temporary folder to OUT. What is at OUT now is checked again (files may have been
        put there during the export), and of a previous export only its own files are removed."""
        if not (self.out.exists() or self.out.is_symlink()):
            os.replace(self.tmp, self.out)
            return
        if self.out.is_symlink():
            raise OutputError(f"{self.out} became a symbolic link during the export; nothing was replaced")
        names = _previous_export(self.out, self.force)
        old = self.out.parent / f".{self.out.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(self.out, old)
        try:
            os.replace(self.tmp, self.out)
        except OSError:
            os.replace(old, self.out)  # put the previous export back
            raise
        _remove_files(old, names)

    def discard(self) -> None:
        """Remove the temporary folder and the parents created for OUT (when still empty)."""
        shutil.rmtree(self.tmp, ignore_errors=True)
        _remove_empty(self.created)


def _remove_files(folder: Path, files: dict[str, str | None]) -> None:
    """Unlink the previous export's `files` (name -> recorded sha256) in `folder`, then the folder if
    that emptied it. A file is removed only while it is still a plain file with the content the
    export wrote: its recorded hash, or, for the manifest (which records none of its own), the
    manifest read as ours. Anything else, hash-less tokenizer files of older exports included, is kept."""
    for name, sha in files.items():
        path = folder / name
        unverified = sha is None and name != MANIFEST_NAME
        if unverified or path.is_symlink() or not path.is_file() or (sha is not None and sha256_file(path) != sha):
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    try:
        folder.rmdir()
    except OSError:
        log.warning("kept %s: it holds files tfm-export cannot tell it wrote unchanged (changed since the "
                    "export, or copied by an older version without a recorded hash); delete it when not needed",
                    folder)


def _remove_empty(folders: Iterable[Path]) -> None:
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _make_parents(folder: Path) -> tuple[Path, ...]:
    """mkdir -p `folder`; returns the folders it created, deepest first."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    return tuple(missing)


def prepare_output_dir(out: str | os.PathLike, force: bool = False,
                       inputs: Iterable[str | os.PathLike | None] = ()) -> OutputDir:
    """Check OUT (`check_output_dir`), then create its parents and the temporary folder beside it."""
    out = Path(out)
    check_output_dir(out, force, inputs)
    created: tuple[Path, ...] = ()
    try:
        created = _make_parents(out.parent)
        tmp = out.parent / f".{out.name}.partial-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
    except OSError as exc:
        _remove_empty(created)
        raise OutputError(os_error_message(exc, out)) from None
    return OutputDir(out, tmp, created, force)


def check_file_target(path: str | os.PathLike, ours: tuple[str, Callable[[Path], bool]] | None = None) -> None:
    """What write_file_atomically refuses, checked on its own: a caller that writes only after minutes of work
    (a bench report) asks first. An existing file is replaced only when `ours` = (what, test) says so."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{path} is a folder; give a file name")
    if path.exists() or path.is_symlink():
        what, test = ours or ("", lambda _: False)
        if path.is_symlink() or not test(path):
            raise OutputError(f"{path} exists and is not {what or 'a file tfm-export wrote'}; tfm-export replaces "
                              f"only its own files: choose another name")
    _check_creatable(path, path.parent)


def write_file_atomically(path: str | os.PathLike, write: Callable[[Path], None],
                          ours: tuple[str, Callable[[Path], bool]] | None = None) -> None:
    """`write(tmp)` to a temporary file beside `path` (parents created), then rename it to `path`.

    An existing `path` is replaced only when `ours` = (what, test) says it is a file of that kind, one
    tfm-export writes (a checkpoint, a bench report); anything else is refused before any work. On any
    failure the temporary file, anything `write` made beside it, and the created parents are removed;
    OSErrors become one-line OutputErrors.
    """
    path = Path(path)
    check_file_target(path, ours)
    prefix = f".{path.name}.{uuid.uuid4().hex[:8]}"
    created: tuple[Path, ...] = ()
    try:
        created = _make_parents(path.parent)
        tmp = path.parent / f"{prefix}.partial"
        write(tmp)
        os.replace(tmp, path)
    except BaseException as exc:
        _remove_prefixed(path.parent, prefix)
        _remove_empty(created)
        if isinstance(exc, OSError):
            raise OutputError(os_error_message(exc, path)) from None
        raise


def output_files(inputs: Sequence[str | os.PathLike], folder: str | os.PathLike, suffix: str) -> list[Path]:
    """FOLDER/NAME.SUFFIX for each input file (its name without its own suffix): an OutputError, before any work,
    when two inputs would share a name, a file is there already (tfm-export writes new files only here: it cannot
    tell its own transcripts from a user's), or FOLDER cannot be made or written."""
    folder = Path(folder)
    paths = [folder / f"{Path(name).stem}.{suffix}" for name in inputs]
    twice = sorted(p.name for p, n in Counter(paths).items() if n > 1)
    if twice:
        raise OutputError(f"two inputs would write {folder / twice[0]}; rename one, or write them to separate folders")
    there = [p for p in paths if p.exists() or p.is_symlink()]
    if there:
        more = f" (and {len(there) - 1} more)" if len(there) > 1 else ""
        raise OutputError(f"{there[0]} exists{more}; tfm-export writes new files only: choose another folder")
    _check_creatable(folder, folder)
    return paths


def _check_creatable(out: Path, folder: Path) -> None:
    """OutputError unless `folder` (where `out` goes) exists as a writable folder or can be made: its nearest
    existing ancestor must be a folder we can write in."""
    existing = _nearest_existing(folder)
    if not existing.is_dir():
        raise OutputError(f"cannot create {out}: {existing} is not a folder")
    _check_writable(out, existing)


def _remove_prefixed(folder: Path, prefix: str) -> None:
    with contextlib.suppress(OSError):
        for leftover in folder.iterdir():
            if leftover.name.startswith(prefix):
                leftover.unlink()


def read_json_object(path: Path, error: type[TfmExportError], missing: str, hint: str) -> dict:
    """A JSON object from `path`; `error` names what is wrong (`missing`: why the file must exist,
    `hint`: what to do about a broken one)."""
    if not path.exists():
        raise error(f"{path} is missing; {missing}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise error(f"{path} is not valid JSON ({type(exc).__name__}); {hint}") from None
    if not isinstance(data, dict):
        raise error(f"{path} must hold a JSON object; {hint}")
    return data
