"""Check a built library with the binutils and CUDA tools themselves.

- nm: every planned instantiation is defined (in its object, and in the library), the
  library exports exactly the C API of src/exports.map, no torch/c10/ATen symbol anywhere,
  undefined dynamic symbols come only from allowed system libraries.
- cuobjdump --list-elf: sm_90a machine code for every kernel TU and in the library.
- readelf -d: the SONAME, and a NEEDED list within policy.

Tools run through a `run(argv) -> (exit_code, output)` callable: inside the toolchain
container during a build, on the host when it has them. What a library must hold (an
Expectation) comes from its manifest (manifest.py), at build time and for `invoke verify`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from flashbuild.core.errors import VerifyError

Runner = Callable[[list[str]], tuple[int, str]]

# Libraries the .so and the test binary may need at run time: glibc's own and libgcc_s.
# libstdc++ and cudart are linked statically, so hosts with an older C++ runtime and no
# CUDA toolkit can load the library; the driver (libcuda) is opened by cudart at run time.
ALLOWED_NEEDED = {
    "libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
    "libgcc_s.so.1", "ld-linux-x86-64.so.2",
}
# Undefined dynamic symbols must carry one of these version prefixes (glibc, libgcc_s).
ALLOWED_SYMBOL_VERSIONS = ("GLIBC_", "GCC_")
# Newest glibc symbol version the artifacts may require: Ubuntu 22.04's, so they load on
# common GPU hosts, including ones older than the Debian trixie build container.
MAX_GLIBC = (2, 35)
FORBIDDEN_NAMESPACES = re.compile(r"(^|[\s(<,])(at|c10|torch)::")


# What the library's checks run (binutils, and the CUDA toolkit's cuobjdump).
LIBRARY_TOOLS = ("nm", "readelf", "cuobjdump")


def host_runner() -> Runner | None:
    """Run tools on the host, if it has all of them."""
    if not all(shutil.which(tool) for tool in LIBRARY_TOOLS):
        return None

    def run(argv: list[str]) -> tuple[int, str]:
        result = subprocess.run(argv, capture_output=True, text=True)
        return result.returncode, result.stdout + result.stderr

    return run


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""


@dataclass
class Report:
    subject: str
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # shown after the checks (what was not checked, why)

    def add(self, name: str, ok: bool, detail: str = "") -> None:
        self.checks.append(Check(name, ok, detail))

    def note(self, text: str) -> None:
        self.notes.append(text)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def render(self) -> str:
        lines = [f"verify {self.subject}"]
        for c in self.checks:
            lines.append(f"  [{'PASS' if c.ok else 'FAIL'}] {c.name}")
            if c.detail and not c.ok:
                lines += [f"         {line}" for line in c.detail.splitlines()[:25]]
        lines += [f"  note: {text}" for text in self.notes]
        failed = sum(not c.ok for c in self.checks)
        lines.append(f"  {len(self.checks) - failed} passed, {failed} failed")
        return "\n".join(lines)


@dataclass(frozen=True)
class Expectation:
    """What a library must hold: the planned instantiations' demangled names, the exported
    API, its SONAME, and the archs every kernel carries."""

    symbols: tuple[str, ...]
    exports: tuple[str, ...]
    soname: str
    archs: tuple[str, ...] = ("sm_90a",)
    max_glibc: tuple[int, int] = MAX_GLIBC


def exported_api(exports_map: Path) -> tuple[str, ...]:
    """The function names under `global:` in the linker version script."""
    text = re.sub(r"/\*.*?\*/|#[^\n]*", "", exports_map.read_text(), flags=re.S)
    match = re.search(r"global\s*:(.*?)local\s*:", text, re.S)
    if not match:
        raise VerifyError(f"{exports_map} has no 'global: ... local:' section", fix="restore src/exports.map")
    names = tuple(n.strip() for n in match.group(1).split(";") if n.strip())
    wild = [n for n in names if any(ch in n for ch in "*?[")]
    if wild:
        raise VerifyError(f"{exports_map} exports wildcards {wild}", fix="list every exported function by name")
    return names


def _tool(run: Runner, argv: list[str]) -> str:
    code, output = run(argv)
    if code != 0:
        raise VerifyError(f"`{' '.join(argv)}` failed: {output.strip()[-500:]}")
    return output


def _defined_symbols(run: Runner, path: Path, dynamic: bool = False) -> list[tuple[str, str]]:
    """(type letter, demangled name) of every defined symbol."""
    argv = ["nm", "-C", "--defined-only", *(["-D"] if dynamic else []), str(path)]
    symbols = []
    for line in _tool(run, argv).splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and len(parts[1]) == 1:
            symbols.append((parts[1], parts[2]))
    return symbols


def _missing_instantiations(symbols: list[tuple[str, str]], expected: tuple[str, ...]) -> list[str]:
    defined_code = {name for kind, name in symbols if kind in "TtWw"}
    missing = []
    for key in expected:
        if not any(name.startswith(key + "(") or f" {key}(" in name for name in defined_code):
            missing.append(key)
    return missing


def _elf_archs(run: Runner, path: Path) -> set[str]:
    code, output = run(["cuobjdump", "--list-elf", str(path)])
    if code != 0:
        return set()
    return set(re.findall(r"\.(sm_\d+a?)\.cubin", output))


def _dynamic_section(run: Runner, path: Path) -> tuple[str | None, list[str]]:
    output = _tool(run, ["readelf", "-d", str(path)])
    soname = re.search(r"\(SONAME\).*\[(.*)\]", output)
    needed = re.findall(r"\(NEEDED\).*\[(.*)\]", output)
    return (soname.group(1) if soname else None), needed


def _undefined_problems(run: Runner, path: Path) -> tuple[list[str], tuple[int, int] | None]:
    output = _tool(run, ["nm", "-D", "--undefined-only", str(path)])
    problems, newest = [], None
    for line in output.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        kind, name = parts[-2], parts[-1]
        if kind in "wv":
            continue  # weak references resolve to null when absent
        symbol, _, version = name.partition("@")
        version = version.lstrip("@")
        if not version.startswith(ALLOWED_SYMBOL_VERSIONS):
            problems.append(f"{symbol} (version '{version or 'none'}')")
        m = re.match(r"GLIBC_(\d+)\.(\d+)", version)
        if m:
            found = (int(m.group(1)), int(m.group(2)))
            newest = max(newest or found, found)
    return problems, newest


def _kernel_names(run: Runner, path: Path) -> set[str]:
    """The GPU kernels (mangled names) of an object's device code."""
    return set(re.findall(r"^\s*Function (\S+?):", _tool(run, ["cuobjdump", "-res-usage", str(path)]), re.M))


def verify_objects(run: Runner, objects: dict[str, tuple[Path, str, int | None]], archs: tuple[str, ...],
                   report: Report) -> None:
    """objects: TU name -> (object path, expected demangled symbol key, GPU kernels it must hold
    or None). A count other than the expected one means a compiled variant no API path reaches
    (or one missing): families.Family.kernels."""
    for tu_name, (obj, symbol, kernels) in sorted(objects.items()):
        if not obj.is_file():
            report.add(f"object {tu_name}", False, f"{obj} does not exist")
            continue
        missing = _missing_instantiations(_defined_symbols(run, obj), (symbol,))
        report.add(f"nm: {tu_name}.o defines {symbol}", not missing, "instantiation not defined")
        found = _elf_archs(run, obj)
        want = set(archs)
        report.add(f"cuobjdump: {tu_name}.o has {', '.join(sorted(want))} code", want <= found,
                   f"found ELF for: {', '.join(sorted(found)) or 'nothing'}")
        if kernels is not None:
            held = len(_kernel_names(run, obj))
            report.add(f"cuobjdump: {tu_name}.o holds exactly the {kernels} kernels the API dispatches",
                       held == kernels, f"it holds {held}: a compiled variant no API path reaches, or one missing "
                       "(flashbuild/config/families.py: the family's kernels)")


def verify_library(run: Runner, library: Path, expect: Expectation, report: Report) -> None:
    if not library.is_file():
        report.add("library exists", False, f"{library} does not exist")
        return
    all_symbols = _defined_symbols(run, library)
    missing = _missing_instantiations(all_symbols, expect.symbols)
    report.add(f"nm: all {len(expect.symbols)} planned instantiations are in the library", not missing,
               "missing:\n" + "\n".join(missing))

    exported = {name for kind, name in _defined_symbols(run, library, dynamic=True) if kind not in "Uw"}
    exported.discard("")
    extra = sorted(exported - set(expect.exports))
    absent = sorted(set(expect.exports) - exported)
    detail = "\n".join([*(f"exported but not in src/exports.map: {n}" for n in extra),
                        *(f"in src/exports.map but not exported: {n}" for n in absent)])
    report.add(f"nm -D: exports exactly the {len(expect.exports)} C API functions", not extra and not absent, detail)

    torch_like = sorted({name for _, name in all_symbols if FORBIDDEN_NAMESPACES.search(name)})
    code, undefined_out = run(["nm", "-C", "-D", "--undefined-only", str(library)])
    torch_like += [line for line in undefined_out.splitlines() if FORBIDDEN_NAMESPACES.search(line)]
    report.add("nm: no torch, c10 or ATen symbols", not torch_like, "\n".join(torch_like[:20]))

    problems, newest = _undefined_problems(run, library)
    report.add("nm -D: undefined symbols come only from glibc/libgcc", not problems, "\n".join(problems[:20]))
    newest_text = f"GLIBC_{newest[0]}.{newest[1]}" if newest else "none"
    limit = expect.max_glibc
    report.add(f"glibc symbol versions <= {limit[0]}.{limit[1]} (newest required: {newest_text})",
               newest is None or newest <= limit,
               f"the library needs {newest_text}; older hosts cannot load it")

    if expect.archs:
        found = _elf_archs(run, library)
        report.add(f"cuobjdump: library holds {', '.join(expect.archs)} code", set(expect.archs) <= found,
                   f"found ELF for: {', '.join(sorted(found)) or 'nothing'}")

    soname, needed = _dynamic_section(run, library)
    report.add(f"readelf: SONAME is {expect.soname}", soname == expect.soname, f"SONAME is {soname}")
    bad = sorted(set(needed) - ALLOWED_NEEDED)
    report.add("readelf: NEEDED within policy", not bad,
               f"not allowed: {', '.join(bad)} (allowed: {', '.join(sorted(ALLOWED_NEEDED))})")


def verify_test_binary(run: Runner, binary: Path, soname: str, report: Report) -> None:
    if not binary.is_file():
        report.add("test binary exists", False, f"{binary} does not exist")
        return
    _, needed = _dynamic_section(run, binary)
    bad = sorted(set(needed) - ALLOWED_NEEDED - {soname})
    report.add(f"readelf: test_varlen_inference needs {soname} and system libraries only",
               soname in needed and not bad, f"NEEDED: {', '.join(needed)}")
    _, newest = _undefined_problems(run, binary)
    report.add("test_varlen_inference: glibc symbol versions within policy", newest is None or newest <= MAX_GLIBC,
               f"it needs GLIBC_{newest[0]}.{newest[1]}" if newest else "")


def raise_if_failed(report: Report, fix: str) -> None:
    if not report.ok:
        raise VerifyError(report.render(), fix=fix)
