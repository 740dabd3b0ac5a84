"""The exports one server knows before it opens any (`tfm-export serve A B C`, or a folder of exports): each
export's ExportInfo read from its manifest (its name, aliases, language codes, source limit), the export folders
among the paths given, and names made unique. serve.registry opens and routes to them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..errors import InputError
from ..manifest import is_export_folder, load_manifest, manifest_time
from ..text.iso639 import two_letter
from ..text.languages import Languages
from .contract import LanguageView
from .engine import ServeSettings, check_batching, resolve_batching


@dataclass(frozen=True)
class ExportInfo:
    """One export as its manifest describes it, before it is opened."""

    name: str  # what `model` names it by: its folder's name
    folder: str
    aliases: tuple[str, ...]  # other names it answers to (where it was exported from)
    view: LanguageView  # its language codes (none: it is only reached by `model`)
    created: int  # its manifest's time, Unix seconds (OpenAI's `created`)
    src_len: int  # tokens per source it takes (the model's max_len, or the server's max_src_len below it)

    def translates(self, source: str | None, target: str) -> bool:
        """Whether it takes `source` (None: its default) into `target` by its own codes."""
        if target not in self.view.targets:
            return False
        return not self.view.sources or (source or self.view.default) in self.view.sources

    def code_for(self, side: str, language: str) -> str | None:
        """Its code on `side` ("source"/"target") for the two-letter `language` (the pivot), if it has one."""
        codes = self.view.sources if side == "source" else self.view.targets
        return next((code for code in codes if two_letter(code) == language), None)


@dataclass(frozen=True)
class Leg:
    """One translation of a route: the export, and the codes it is given (None: the export takes none)."""

    export: ExportInfo
    source: str | None
    target: str | None


def read_export(folder: str, settings: ServeSettings) -> ExportInfo:
    """`folder`'s ExportInfo, checked as its server would check it (batching, a text model)."""
    manifest = load_manifest(folder, verify_hashes=False)
    if manifest.features is not None:
        raise InputError(f"{folder} is a speech model (Whisper); serve it on its own server (tfm-export serve "
                         f"{folder}): a server of several exports serves text models", options={"folder": folder})
    check_batching(resolve_batching(dataclasses.replace(settings, folder=folder)))
    tokenizer = manifest.tokenizer or {}
    view = LanguageView.of_languages(Languages.from_dict(tokenizer.get("languages"))) if tokenizer else \
        LanguageView([], [], None)
    origin = (manifest.source or {}).get("origin") or {}
    aliases = [origin.get("hub"), Path(origin["path"]).name if origin.get("path") else None]
    cap, longest = settings.engine.max_src_len, manifest.config.max_len
    return ExportInfo(Path(folder).name, folder, tuple(a for a in aliases if a), view, int(manifest_time(folder)),
                      min(cap, longest) if cap else longest)


def serves_several(paths: Sequence[str | Path]) -> bool:
    """Whether `tfm-export serve PATHS` serves several exports: more than one path, or a folder of exports."""
    if len(paths) != 1:
        return len(paths) > 1
    path = Path(paths[0])
    return path.is_dir() and not is_export_folder(path) and any(p.is_dir() and is_export_folder(p)
                                                                 for p in path.iterdir())


def export_folders(paths: Sequence[str | Path]) -> list[str]:
    """The export folders among `paths`: each export folder as given, and the export folders inside a
    folder that is not one (a folder of exports); InputError naming a path with none."""
    found: list[str] = []
    for path in map(Path, paths):
        if is_export_folder(path) or not path.is_dir():
            found.append(str(path.resolve()))  # load_manifest says what is wrong with one that is not
            continue
        inside = sorted(str(p.resolve()) for p in path.iterdir() if p.is_dir() and is_export_folder(p))
        if not inside:
            raise InputError(f"{path} is neither an export folder nor a folder of exports (no subfolder has a "
                             f"manifest.json); pass export folders", options={"folder": str(path)})
        found += inside
    return list(dict.fromkeys(found))


def unique_names(exports: list[ExportInfo]) -> list[ExportInfo]:
    """Two folders of one name (a/model_onnx, b/model_onnx) are named parent/name; an alias two exports
    share names neither."""
    names = [e.name for e in exports]
    named = [dataclasses.replace(e, name=f"{Path(e.folder).parent.name}/{e.name}") if names.count(e.name) > 1
             else e for e in exports]
    taken = [n for e in named for n in {e.name, *e.aliases}]
    clash = sorted({n.name for n in named if taken.count(n.name) > 1})
    if clash:
        raise InputError(f"several exports are named {', '.join(clash)}; rename their folders",
                         options={"folder": clash[0]})
    return [dataclasses.replace(e, aliases=tuple(a for a in e.aliases if taken.count(a) == 1 and a != e.name))
            for e in named]
