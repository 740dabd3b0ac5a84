"""`make options`: write GenerationConfig's option declarations (runtime.options.generation.OPTIONS) into the files
that cannot import them: the Node runtime's options.mjs (names, defaults, CLI flags, checks), its
index.d.ts (the DecodingOptions interface) and the manifest schema's `generation` section.

Each file keeps its hand-written text; only the region between the BEGIN/END GENERATED lines (in the
schema: the `generation` object's `properties`) is replaced. tests/test_options_schema.py fails when a
file differs from what this writes.

    python -m tools.options_codegen           # rewrite the stale files
    python -m tools.options_codegen --check   # list them, exit 1 if any
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

from tfm_export.runtime.options.generation import OPTIONS, RULES
from tfm_export.runtime.options.spec import Option, camel, render_help

# A build tool of the repository (not shipped): it writes files of the package and of runtimes/node.
PACKAGE = Path(__file__).resolve().parents[1] / "tfm_export"
NODE = PACKAGE.parent / "runtimes" / "node"
MARK = "// BEGIN GENERATED"  # how a region is found; BEGIN is the line written
BEGIN = f"{MARK} by `make options` from tfm_export/runtime/options/generation.py: edit the options there"
END = "// END GENERATED"
SAFE_INT = 2**53  # beyond it a JavaScript number is not exact: such an option also takes a BigInt
BIGINT_NOTE = " (a BigInt beyond 2**53)"
# JavaScript comparisons of the bounds (JSON Schema keywords)
JS_BOUNDS = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}
TS_TYPES = {"integer": "number", "number": "number", "boolean": "boolean"}
WIDTH = 120  # longest generated line


def js_value(value: Any, bigint: bool = False) -> str:
    """A Python default or bound as JavaScript source."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if bigint:
        return f"{int(value)}n"
    return str(int(value)) if float(value).is_integer() else repr(value)


def wide(option: Option) -> bool:
    """An integer option whose range goes beyond JavaScript's exact integers (the seed)."""
    return option.kind == "integer" and any(abs(limit) > SAFE_INT for limit in option.bounds.values())


def js_test(option: Option) -> str:
    """The field's own check (Option.accepts) on its value `v`. Numbers are finite here: a JavaScript
    caller's Infinity is a mistake, never a setting."""

    def comparisons(bigint: bool) -> list[str]:  # a number's bounds beyond 2**53 hold already
        return [f"v {JS_BOUNDS[k]} {js_value(limit, bigint)}" for k, limit in option.bounds.items()
                if bigint or abs(limit) <= SAFE_INT]

    if wide(option):
        number = " && ".join(["Number.isSafeInteger(v)", *comparisons(False)])
        test = f"(typeof v === 'bigint' ? {' && '.join(comparisons(True))} : {number})"
    else:
        kind = {"integer": "Number.isInteger(v)", "number": "Number.isFinite(v)",
                "boolean": "typeof v === 'boolean'"}[option.kind]
        test = " && ".join([kind, *comparisons(False)])
    if option.choices:
        test = " || ".join([test, *(f"v === {js_value(choice)}" for choice in option.choices)])
    return f"v === null || {test}" if option.nullable else test


def entry(name: str, test: str, requirement: str) -> list[str]:
    """One check of CHECKS or RULES as a line, or two when long."""
    line = f"  ['{name}', {test}, {js_value(requirement)}],"
    return [line] if len(line) <= WIDTH else [f"  ['{name}', {test},", f"    {js_value(requirement)}],"]


def camel_text(text: str) -> str:
    """A Python message's option names (num_beams) in the Node runtime's spelling (numBeams)."""
    names = "|".join(o.name for o in OPTIONS)
    return re.sub(rf"\b({names})\b", lambda m: camel(m[1]), text)


def js_lines(options: tuple[Option, ...] = OPTIONS) -> list[str]:
    """options.mjs's generated region: PYTHON_NAMES, DEFAULTS, CLI_FLAGS and CHECKS."""
    lines = ["/** camelCase option -> the GenerationConfig field (and manifest `generation` key) it mirrors. */",
             "export const PYTHON_NAMES = {"]
    lines += [f"  {camel(o.name)}: '{o.name}'," for o in options]
    # Unset is null, except where only decoding checks the option (resolveMaxNewTokens): undefined, as
    # decoding.d.ts's GenerationConfig types it.
    unset = {o.name: "undefined" if o.requirement is None else "null" for o in options}
    lines += ["};", "", "/** GenerationConfig's defaults. */", "export const DEFAULTS = Object.freeze({"]
    lines += [f"  {camel(o.name)}: {unset[o.name] if o.default is None else js_value(o.default)}," for o in options]
    lines += ["});", "", "/** cli.mjs's flags: flag -> [option, kind] (a choice's kind: the words it takes). */",
              "export const CLI_FLAGS = {"]
    for o in options:
        if o.cli:
            words = ", ".join(map(js_value, ("true", "false", *o.choices)))
            kind = f"[{words}]" if o.choices else js_value(o.kind)
            lines.append(f"  '{o.cli[2:]}': ['{camel(o.name)}', {kind}],")
    lines += ["};", "", "// [option, test of its value, what it must be]: the fields' own checks (Python's CHECKS).",
              "const CHECKS = ["]
    for o in options:
        if o.requirement:
            lines += entry(camel(o.name), f"(v) => {js_test(o)}", o.requirement + (BIGINT_NOTE if wide(o) else ""))
    lines += ["];", "", "// [option, test of the config, what must hold]: Python's RULES, after the fields' checks.",
              "const RULES = ["]
    for name, _, requirement, js in RULES:
        lines += entry(camel(name), f"(c) => {js}", camel_text(requirement))
    return lines + ["];"]


def ts_lines(options: tuple[Option, ...] = OPTIONS) -> list[str]:
    """index.d.ts's generated region: the members of DecodingOptions."""
    lines = []
    for o in options:
        kind = "number | bigint" if wide(o) else TS_TYPES[o.kind]
        kind = " | ".join([kind, *(js_value(choice) for choice in o.choices)])
        doc = render_help(o.help, camel)
        if wide(o):
            doc = doc.rstrip(".") + BIGINT_NOTE + "."
        if len(doc) + 8 <= WIDTH:
            lines.append(f"  /** {doc} */")
        else:
            lines += ["  /**", *textwrap.wrap(doc, WIDTH, initial_indent="   * ", subsequent_indent="   * "), "   */"]
        lines.append(f"  {camel(o.name)}?: {kind};")
    return lines


def replace_region(text: str, lines: list[str], indent: str = "") -> str:
    """`text` with the lines between its BEGIN and END GENERATED markers replaced by `lines`."""
    head, begin, rest = text.partition(MARK)
    _, end, tail = rest.partition(END)  # the old region
    if not begin or not end:
        raise SystemExit(f"no `{MARK}` ... `{END}` region to write into")
    head = head.rstrip(" ")  # the markers' own indentation is written again below
    return head + "\n".join([indent + BEGIN, *lines, indent + END]) + tail


def schema_text(text: str, options: tuple[Option, ...] = OPTIONS) -> str:
    """manifest.schema.json with its `generation` object's properties, one option a line."""
    lines = text.split("\n")
    start = next(n for n, line in enumerate(lines) if line.strip().startswith('"generation":'))
    props = next(n for n in range(start, len(lines)) if lines[n].strip() == '"properties": {')
    indent = lines[props][: len(lines[props]) - len(lines[props].lstrip())]
    end = next(n for n in range(props + 1, len(lines)) if lines[n] == indent + "}")
    body = [f"{indent}  {json.dumps(o.name)}: {json.dumps(o.json_schema())}," for o in options]
    body[-1] = body[-1].rstrip(",")
    return "\n".join(lines[: props + 1] + body + lines[end:])


# file -> its text as this writes it, given its current text
TARGETS: dict[Path, Callable[[str], str]] = {
    NODE / "options" / "generation.mjs": lambda text: replace_region(text, js_lines()),
    NODE / "index.d.ts": lambda text: replace_region(text, ts_lines(), indent="  "),
    PACKAGE / "manifest.schema.json": schema_text,
}


def stale() -> dict[Path, str]:
    """The files that differ from what this writes -> their new text."""
    out = {}
    for path, render in TARGETS.items():
        text = path.read_text(encoding="utf-8")
        if render(text) != text:
            out[path] = render(text)
    return out


def main(argv: list[str]) -> int:
    changed = stale()
    for path, text in changed.items():
        if "--check" not in argv:
            path.write_text(text, encoding="utf-8")
        print(f"{'stale' if '--check' in argv else 'wrote'}: {path.relative_to(PACKAGE.parent)}")
    return 1 if changed and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
