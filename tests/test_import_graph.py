"""Data flows down the module tree: no two modules of tfm_export import each other, directly or
through others (an import inside a function counts too: it is the same dependency, only later)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tfm_export"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The tfm_export modules `path` imports (a package's __init__ counts as the package)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            root = ".".join(base + ([node.module] if node.module else []))
            # `from p import x`: the submodule p.x when there is one, else a name of p itself
            targets = [f"{root}.{alias.name}" if f"{root}.{alias.name}" in modules else root
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, modules) for p in paths}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_back_up():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# runtime/'s folders, lowest first: a module imports only modules of its own layer or of layers below it
# (issue #59). The leaf modules at runtime/'s top (device, checks, sources) are what every folder stands on;
# the facade (open_export, ExportedModel, the in-flight rows, verify) stands on everything.
RUNTIME_LAYERS: list[tuple[str, set[str]]] = [
    ("base", {"hugepages", "device", "checks", "sources", "options"}),
    ("decode", {"decode"}),
    ("states", {"states"}),
    ("speech", {"speech"}),
    ("facade", {"", "api", "speculating", "exported", "inflight", "verify"}),
]
# what the torch-free runtime may import from the rest of the package (never model/, export/, serve/, cli/ ...)
RUNTIME_MAY_IMPORT = {"errors", "config", "graph_io", "manifest", "files", "filterbank", "resources", "text", "audio"}


def runtime_layer(module: str) -> int | None:
    """The layer of a tfm_export.runtime module, by its first name below runtime (None: outside runtime)."""
    parts = module.split(".")
    if parts[:2] != ["tfm_export", "runtime"]:
        return None
    first = parts[2] if len(parts) > 2 else ""
    for index, (_, names) in enumerate(RUNTIME_LAYERS):
        if first in names:
            return index
    raise AssertionError(f"{module} is in no layer of RUNTIME_LAYERS: add it to one")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, targets in sorted(graph.items()):
        here = runtime_layer(module)
        if here is None:
            continue
        for target in sorted(targets):
            there = runtime_layer(target)
            if there is None and target.split(".")[1] not in RUNTIME_MAY_IMPORT:
                found.append(f"{module} -> {target} (outside the torch-free runtime's own)")
            elif there is not None and there > here:
                found.append(f"{module} ({RUNTIME_LAYERS[here][0]}) -> {target} ({RUNTIME_LAYERS[there][0]})")
    return found


def test_runtime_folders_import_only_downwards():
    found = upward_imports(import_graph())
    assert not found, "upward imports: " + "; ".join(found)


def test_the_layer_check_finds_an_upward_import():
    graph = {"tfm_export.runtime.decode.loop": {"tfm_export.runtime.speech.whisper"},
             "tfm_export.runtime.speech.whisper": {"tfm_export.runtime.decode.loop"},
             "tfm_export.runtime.states.static": {"tfm_export.serve.app"}}
    assert upward_imports(graph) == [
        "tfm_export.runtime.decode.loop (decode) -> tfm_export.runtime.speech.whisper (speech)",
        "tfm_export.runtime.states.static -> tfm_export.serve.app (outside the torch-free runtime's own)"]


def test_runtime_top_holds_the_facade_alone():
    """At most ~12 modules at runtime/'s top: concepts live in folders (issue #59)."""
    top = sorted(p.name for p in (PACKAGE / "runtime").glob("*.py"))
    assert len(top) <= 12, top
