"""The house's layers hold: in flashbuild/ (Python imports) and src/ (C includes), no file reaches
a layer above its own, two layers of one floor do not reach each other, and no files import each
other in a loop. docs/design/house.md draws the layers; this is what keeps them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# flashbuild/: a folder (or a top-level module) and its floor. A module may import its own folder
# and floors below its own.
PYTHON_FLOORS = {
    "core": 0, "config": 1, "sources": 1, "toolchains": 2, "release": 2, "compile": 3,
    "backends": 4, "pipeline": 5, "commands": 6,
}
# src/: the public headers and the stand-ins for upstream's torch headers under everything, the shared
# core, the families, the exported facade.
C_FLOORS = {"include": 0, "standins": 0, "core": 1, "fa2": 2, "sm90": 2, "paged": 2, "api": 3}


def _python_imports(path: Path) -> set[str]:
    """The flashbuild modules a file imports, as dotted names below flashbuild (e.g. core.errors)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("flashbuild"):
            base = node.module.split(".")[1:]
            for alias in node.names:  # `from flashbuild.core import errors` names a module
                candidate = ROOT / "flashbuild" / Path(*base, alias.name)
                found.add(".".join([*base, alias.name]) if candidate.with_suffix(".py").exists() else ".".join(base))
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".", 1)[1] for a in node.names if a.name.startswith("flashbuild.")}
    return {name for name in found if name}


def _python_modules() -> dict[str, Path]:
    package = ROOT / "flashbuild"
    return {".".join(p.relative_to(package).with_suffix("").parts): p for p in package.rglob("*.py")
            if "resources" not in p.parts and p.name != "__init__.py"}


def _layer(name: str) -> str:
    return name.split(".")[0]


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every loop found by a depth-first walk (each reported once, from where the walk met it)."""
    state, stack, loops = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                loops.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return loops


def test_every_flashbuild_module_stands_in_a_known_layer():
    strays = sorted(name for name in _python_modules() if _layer(name) not in PYTHON_FLOORS)
    assert not strays, f"modules outside the layers of tests/test_layers.py: {strays}"


def test_flashbuild_imports_only_its_own_layer_and_the_floors_below():
    wrong = []
    for name, path in _python_modules().items():
        mine = _layer(name)
        for target in _python_imports(path):
            theirs = _layer(target)
            if theirs != mine and PYTHON_FLOORS[theirs] >= PYTHON_FLOORS[mine]:
                wrong.append(f"{name} -> {target}")
    assert not wrong, "imports up or across a floor: " + ", ".join(sorted(wrong))


def test_flashbuild_modules_import_each_other_in_no_loop():
    edges = {name: _python_imports(path) for name, path in _python_modules().items()}
    assert not _cycles(edges)


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def _c_files() -> dict[str, Path]:
    src = ROOT / "src"
    return {p.relative_to(src).as_posix(): p for p in src.rglob("*") if p.suffix in {".h", ".cuh", ".cpp", ".cu"}}


def _c_includes(path: Path, files: dict[str, Path]) -> set[str]:
    """The src/ files a file includes: by a path from src/ (or from include/), or beside it."""
    found = set()
    here = path.parent.relative_to(ROOT / "src").as_posix()
    for written in INCLUDE.findall(path.read_text()):
        for candidate in (written, f"include/{written}", f"{here}/{written}"):
            if candidate in files:
                found.add(candidate)
                break
    return found


def test_src_includes_only_its_own_folder_and_the_floors_below():
    files = _c_files()
    strays = sorted(name for name in files if _layer(name.replace("/", ".")) not in C_FLOORS)
    assert not strays, f"files outside the layers of tests/test_layers.py: {strays}"
    wrong = []
    for name, path in files.items():
        mine = name.split("/")[0]
        for target in _c_includes(path, files):
            theirs = target.split("/")[0]
            if theirs != mine and C_FLOORS[theirs] >= C_FLOORS[mine]:
                wrong.append(f"{name} -> {target}")
    assert not wrong, "includes up or across a floor: " + ", ".join(sorted(wrong))
    # The one loop allowed: the public header includes its parts at its end, and each part
    # includes it so that it can be included alone (include guards make it a tree per TU).
    edges = {name: _c_includes(path, files) for name, path in files.items()}
    edges["include/flash_attn_standalone.h"] -= {"include/flash_attn_standalone_plan.h",
                                                 "include/flash_attn_standalone_paged.h",
                                                 "include/flash_attn_standalone_kv_append.h",
                                                 "include/flash_attn_standalone_merge.h"}
    assert not _cycles(edges)


def test_the_layer_check_sees_an_upward_import(tmp_path):
    """The checker itself: a core module importing the pipeline is one upward import."""
    module = tmp_path / "probe.py"
    module.write_text("from flashbuild.pipeline import build\nfrom flashbuild.core import errors\n")
    found = _python_imports(module)
    assert found == {"pipeline", "core.errors"}
    assert [t for t in found if PYTHON_FLOORS[_layer(t)] >= PYTHON_FLOORS["core"] and _layer(t) != "core"] == ["pipeline"]
    assert _cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]
