"""How an export option is declared: `option()` is an ExportOptions field's default plus what the CLI and the
checks need (flag, help, bounds, choices, what it implies, whether a user's module export takes it);
`options_of()` reads the fields back as `ExportOption` records.

export.options declares the fields and the rules between them; the `export` command's flags (cli.export_cmd)
are generated from the records, so an option is written once. The bounds use JSON Schema's keywords and
checks, as the decoding options' declaration (runtime.options.spec). Torch-free: the CLI reads the
declaration at import, and a runtime-only install has no PyTorch.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import dataclass
from typing import Any, Callable

from ..runtime.options.spec import BOUNDS, TYPE_TESTS

SPEC = "tfm_export.export_option"  # the key of a field's metadata that holds its declaration
KINDS = {int: "integer", float: "number", bool: "boolean"}  # a field's Python type -> its kind
# What a number's bound says in a refusal: "must be a number greater than 0", "an integer of at least 2"
BOUND_WORDS = {"minimum": "of at least {}", "exclusiveMinimum": "greater than {}",
               "maximum": "of at most {}", "exclusiveMaximum": "less than {}"}
KIND_WORDS = {"integer": "an integer", "number": "a number", "boolean": "True or False", "file": "a file's path",
              "settings": "a settings record"}


def is_path(value: Any) -> bool:
    return isinstance(value, (str, os.PathLike))


# kind -> the field's own test of a value (None is decided by the field's type, choices by `choices`)
ACCEPTS: dict[str, Callable[[Any], bool]] = {**TYPE_TESTS, "file": is_path}


@dataclass(frozen=True)
class ExportOption:
    """One export option as the library and the CLI see it (read from an ExportOptions field)."""

    name: str
    default: Any
    help: str  # one sentence or a few; `{field}` names another option, in each surface's spelling
    kind: str  # integer, number, boolean, choice, file (an existing file's path) or settings (a record)
    nullable: bool  # None is a value: not given
    choices: tuple[Any, ...]  # a choice's values
    bounds: dict[str, float]  # JSON Schema keywords -> limit
    requirement: str  # what the field's own check says when it refuses ("must be ...")
    flag: str  # the CLI's flag: spelled from the name, `--no-NAME` for a boolean that defaults to True
    metavar: str | None  # the CLI's name for the value (`POINTS`), None: Click's
    implies: str | None  # a boolean option that giving this one turns on (static_slots -> static_cache)
    module: bool  # a user's module exported through its adapter (export.module_export) takes it too
    cli: bool  # the CLI's flag is made from this record (False: made elsewhere, as --int4-*'s)

    def accepts(self, value: Any) -> bool:
        """The field's own check (the rules between fields are export.options.RULES)."""
        if value is None:
            return self.nullable
        if self.kind == "choice":
            return value in self.choices
        if self.kind == "settings":
            return True  # a typed record, checked by its own type
        return ACCEPTS[self.kind](value) and all(BOUNDS[k][0](value, limit) for k, limit in self.bounds.items())

    def given(self, value: Any) -> bool:
        """Whether `value` asks for something (not the default)."""
        return value != self.default


def option(default: Any, help: str, requirement: str | None = None, *, choices: tuple[Any, ...] = (),
           flag: str | None = None, metavar: str | None = None, file: bool = False, implies: str | None = None,
           module: bool = False, cli: bool = True, **bounds: float) -> Any:
    """An ExportOptions field declared with what the checks and the CLI need (see ExportOption); `file`: the value
    is an existing file's path; `module`: export.module_export takes it as well."""
    unknown = set(bounds) - set(BOUNDS)
    if unknown:
        raise TypeError(f"option(): unknown bounds {sorted(unknown)}")
    spec = {"help": help, "requirement": requirement, "choices": tuple(choices), "flag": flag, "metavar": metavar,
            "file": file, "implies": implies, "module": module, "cli": cli, "bounds": bounds}
    return dataclasses.field(default=default, metadata={SPEC: spec})


def options_of(cls: type) -> tuple[ExportOption, ...]:
    """The declared fields of dataclass `cls`, in order."""
    hints = typing.get_type_hints(cls)
    return tuple(_read(field, hints[field.name]) for field in dataclasses.fields(cls) if SPEC in field.metadata)


def _read(field: dataclasses.Field, hint: Any) -> ExportOption:
    """A field's record: its kind from the type (`int | None`) and the declaration (choices, file)."""
    spec = dict(field.metadata[SPEC])
    args = typing.get_args(hint) or (hint,)
    base = [arg for arg in args if arg is not type(None)]
    file = spec.pop("file")
    kind = ("choice" if spec["choices"] else "file" if file else
            KINDS.get(base[0], "settings") if len(base) == 1 else None)
    if kind is None:
        raise TypeError(f"{field.name}: an export option has one type (or it and None); got {hint}")
    default_flag = f"--{'no-' if field.default is True else ''}{field.name.replace('_', '-')}"
    requirement = spec.pop("requirement") or _requirement(kind, spec["choices"], spec["bounds"])
    return ExportOption(name=field.name, default=field.default, kind=kind, nullable=type(None) in args,
                        requirement=requirement, **{**spec, "flag": spec["flag"] or default_flag})


def _requirement(kind: str, choices: tuple[Any, ...], bounds: dict[str, float]) -> str:
    if choices:
        return f"is not supported; use {' or '.join(map(str, choices))}"
    limits = " and ".join(BOUND_WORDS[k].format(limit) for k, limit in bounds.items())
    return f"must be {KIND_WORDS[kind]}" + (f" {limits}" if limits else "")
