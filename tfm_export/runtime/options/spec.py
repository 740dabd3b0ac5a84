"""How a decoding option is declared: `option()` is a GenerationConfig field's default plus everything the
other surfaces need (help text, bounds, the check's message, whether the server and the CLI take it, how a
Hugging Face folder sets it); `options_of()` reads the fields back as `Option` records.

runtime.options.generation declares the fields; its checks, the CLI's flags (cli.decoding_flags), the server's request
fields (serve.schemas), the manifest schema's `generation` section and the Node runtime's options
(runtime.options_codegen) are derived from the records, so an option is named by hand in one place.
Stdlib only: the generator runs without numpy or onnxruntime.
"""

from __future__ import annotations

import dataclasses
import operator
import typing
from dataclasses import dataclass
from typing import Any, Callable, Literal

from ...errors import OPTION_FIELD

SPEC = "tfm_export.option"  # the key of a field's metadata that holds its declaration

# Bounds are declared with JSON Schema's keywords (the manifest schema and the Node checks use them as
# they are) -> the comparison each makes in Python, and pydantic's name for it (the server's fields).
BOUNDS: dict[str, tuple[Callable[[Any, Any], bool], str]] = {
    "minimum": (operator.ge, "ge"), "exclusiveMinimum": (operator.gt, "gt"),
    "maximum": (operator.le, "le"), "exclusiveMaximum": (operator.lt, "lt")}
KINDS = {int: "integer", float: "number", bool: "boolean"}  # a field's Python type -> its JSON Schema type
# Where a Hugging Face folder's generation_config.json sets an option under the same name and meaning:
# whenever it is given, or only when the folder samples (then unset ones take transformers' defaults).
TRANSFORMERS = ("always", "sampling")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


TYPE_TESTS = {"integer": is_int, "number": is_number, "boolean": lambda value: isinstance(value, bool)}


@dataclass(frozen=True)
class Option:
    """One decoding option as every surface sees it (read from a GenerationConfig field)."""

    name: str
    default: Any
    help: str  # one sentence; `{field}` names another option, in each surface's spelling (render_help)
    kind: str  # JSON Schema type: integer, number or boolean
    nullable: bool  # None is a value: unset, decided when decoding
    choices: tuple[str, ...]  # strings accepted beside the kind's values (early_stopping's "never")
    bounds: dict[str, float]  # JSON Schema keywords -> limit
    requirement: str | None  # the InputError's "must be ..." text; None: checked when decoding instead
    serve: bool  # a field of the server's request body
    serve_bounds: dict[str, float]  # the server's own ranges (its float64 arithmetic), else `bounds`
    cli: str | None  # the `generate` flag (a boolean's positive one); None: not a flag
    transformers: str | None  # one of TRANSFORMERS, None: transformers has no such setting

    def accepts(self, value: Any) -> bool:
        """The field's own check (cross-field rules are runtime.options.generation.RULES)."""
        if value is None:
            return self.nullable
        if isinstance(value, str):
            return value in self.choices
        return TYPE_TESTS[self.kind](value) and all(BOUNDS[k][0](value, limit) for k, limit in self.bounds.items())

    def json_schema(self) -> dict[str, Any]:
        """The value's JSON Schema (the manifest's `generation` section)."""
        if self.choices:  # an enum says it shortest: early_stopping is true, false or "never"
            return {"enum": [True, False, *self.choices] if self.kind == "boolean" else list(self.choices)}
        return {"type": [self.kind, "null"] if self.nullable else self.kind, **self.bounds}


def option(default: Any, help: str, requirement: str | None = None, *, serve: bool = True,
           serve_bounds: dict[str, float] | None = None, cli: bool | str = True,
           transformers: str | None = "always", **bounds: float) -> Any:
    """A GenerationConfig field declared with what every surface needs (see Option); `cli`: True for
    the flag spelled from the name (`--num-beams`), a string for another (`--n-best`), False for none."""
    unknown = set(bounds) - set(BOUNDS)
    if unknown or (transformers is not None and transformers not in TRANSFORMERS):
        raise TypeError(f"option(): unknown bounds {sorted(unknown)} or transformers={transformers!r}")
    spec = {"help": help, "requirement": requirement, "serve": serve, "bounds": bounds,
            "serve_bounds": bounds if serve_bounds is None else serve_bounds, "cli": cli,
            "transformers": transformers}
    return dataclasses.field(default=default, metadata={SPEC: spec})


def options_of(cls: type) -> tuple[Option, ...]:
    """The declared fields of dataclass `cls`, in order."""
    hints = typing.get_type_hints(cls)
    return tuple(_read(field, hints[field.name]) for field in dataclasses.fields(cls) if SPEC in field.metadata)


def _read(field: dataclasses.Field, hint: Any) -> Option:
    """A field's Option: the kind, None and string choices from its type (`int | None`, `bool | Literal["never"]`)."""
    args = typing.get_args(hint) or (hint,)
    choices = tuple(value for arg in args if typing.get_origin(arg) is Literal for value in typing.get_args(arg))
    kinds = [KINDS[arg] for arg in args if arg in KINDS]
    if len(kinds) != 1:  # every surface maps one base type (JSON Schema, pydantic, Click, TypeScript)
        raise TypeError(f"{field.name}: a decoding option has one of the types int, float, bool; got {hint}")
    spec = dict(field.metadata[SPEC])
    cli = spec.pop("cli")
    flag = f"--{field.name.replace('_', '-')}" if cli is True else cli or None
    return Option(name=field.name, default=field.default, kind=kinds[0], nullable=type(None) in args,
                  choices=choices, cli=flag, **spec)


def render_help(text: str, name_of: Callable[[str], str]) -> str:
    """`text` with each `{field}` spelled by `name_of` (the CLI's flag, JavaScript's camelCase, ...)."""
    return OPTION_FIELD.sub(lambda m: name_of(m[1]), text)


def camel(name: str) -> str:
    """The Node runtime's spelling: num_return_sequences -> numReturnSequences."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)
