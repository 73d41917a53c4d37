"""Matrix -> build plan: which translation units each entry compiles (the build's plan; the C
API's plans are fas_plan, src/api/).

A KernelTU is one template instantiation of a family (families.py); its name is its
parameters and is also the file name of its generated source in kernels/. Everything else
about it (source text, symbol, registry line, upstream) its family record says. Host TUs
are found by globbing the C API's code folders (families.CODE_PATHS), so a new host file
needs no driver change. The plan is pure data: it is what `--dry-run` prints and what
every later stage consumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from flashbuild.core.errors import CompileError
from flashbuild.config.families import CODE_PATHS, FAMILIES, HOST, Family, Upstream
from flashbuild.config.kernel_sources import module_anchor

if TYPE_CHECKING:  # annotations only: bench/tune_tiles.py uses KernelTU without the YAML stack
    from flashbuild.config.options import Entry, Matrix

HOST_SUFFIXES = (".cu", ".cpp")
# Plain C, linked into the library and the test binary (see the file).
GLIBC_COMPAT = Path("src/glibc_compat.c")


@dataclass(frozen=True, order=True)
class KernelTU:
    family: str  # a key of families.FAMILIES
    head_dim: int
    dtype: str  # element type of out; also of q/k/v unless the family fixes its input type
    causal: bool

    @property
    def record(self) -> Family:
        return FAMILIES[self.family]

    @property
    def input_dtype(self) -> str:
        return self.record.input_dtype or self.dtype

    @property
    def name(self) -> str:
        causal = "_causal" if self.causal else ""
        dtypes = self.dtype if self.input_dtype == self.dtype else f"{self.input_dtype}_to_{self.dtype}"
        return f"{self.family}_hdim{self.head_dim}_{dtypes}{causal}_sm90"

    @property
    def source(self) -> Path:
        return Path("kernels") / f"{self.name}.cu"

    @property
    def upstream(self) -> Upstream:
        return self.record.upstream

    def render(self) -> str:
        return self.record.render(self) + module_anchor(self.name)

    @property
    def symbol(self) -> str:
        """Demangled name (without return type and parameters) that `nm -C` must show."""
        return self.record.symbol(self)

    @property
    def kernels(self) -> int | None:
        """GPU kernels its object must hold (families.Family.kernels), or None: not counted."""
        return self.record.kernels(self) if self.record.kernels else None

    @property
    def registry_line(self) -> str:
        args = (*self.record.registry_args(self), f'"{self.record.info_family}"')  # then INFO_FAMILY_PARAM
        return f"{self.record.registry_macro}({', '.join(args)})"


@dataclass(frozen=True)
class HostTU:
    """A host-code TU every build compiles and links, and the upstream it includes (if any)."""

    name: str
    source: Path  # relative to the repository
    upstream: Upstream | None

    @property
    def plain_c(self) -> bool:
        return self.source.suffix == ".c"


def host_tus(repo_root: Path) -> tuple[HostTU, ...]:
    """Every .cu/.cpp of the C API's code folders (sorted; named after folder and stem, e.g.
    src/api/plan.cpp -> api_plan), then the plain C glibc shim."""
    found = []
    for path in CODE_PATHS.values():
        folder = repo_root / path.folder
        for source in sorted(p for suffix in HOST_SUFFIXES for p in folder.glob(f"*{suffix}")):
            found.append(HostTU(f"{path.name}_{source.stem}", Path(path.folder) / source.name, path.upstream))
    found.append(HostTU(GLIBC_COMPAT.stem, GLIBC_COMPAT, None))
    names = [tu.name for tu in found]
    clashes = sorted({n for n in names if names.count(n) > 1})
    if clashes:
        raise CompileError(f"two host sources make the same TU name: {', '.join(clashes)}",
                           fix="give sources in one folder distinct stems (e.g. not both plan.cu and plan.cpp)")
    return tuple(found)


@dataclass(frozen=True)
class EntryPlan:
    entry: Entry
    kernels: tuple[KernelTU, ...]
    hosts: tuple[HostTU, ...]

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def tu_count(self) -> int:
        return len(self.kernels) + len(self.hosts)


def tu_groups(entry_plan) -> dict[str, str]:
    """Every TU of an entry plan by name, in build order, with its group: the family of a kernel
    TU, HOST for host code (the key of memory and compile-time estimates, and of cost tables)."""
    return {**{tu.name: tu.family for tu in entry_plan.kernels}, **{h.name: HOST for h in entry_plan.hosts}}


@dataclass(frozen=True)
class BuildPlan:
    matrix: Matrix
    entries: tuple[EntryPlan, ...]

    @property
    def sources_needed(self) -> set[str]:
        upstreams = {tu.upstream for e in self.entries for tu in (*e.kernels, *e.hosts) if tu.upstream}
        tools = {e.entry.image.ptxas for e in self.entries if e.entry.image.ptxas}
        return {u.pin for u in upstreams} | tools


def kernels_of(entry: Entry) -> tuple[KernelTU, ...]:
    found = set()
    for kernel_set in entry.kernels:
        for head_dim in kernel_set.head_dims:
            for dtype in kernel_set.dtypes:
                for causal in kernel_set.causal:
                    found.add(KernelTU(kernel_set.family, head_dim, dtype, causal))
    return tuple(sorted(found))


def make_plan(matrix: Matrix, repo_root: Path) -> BuildPlan:
    hosts = host_tus(repo_root)
    return BuildPlan(matrix=matrix, entries=tuple(EntryPlan(e, kernels_of(e), hosts) for e in matrix.entries))


def all_kernels(matrices) -> tuple[KernelTU, ...]:
    """Every instantiation any matrix builds: the set of files kernels/ must hold."""
    found = set()
    for matrix in matrices:
        for entry in matrix.entries:
            found.update(kernels_of(entry))
    return tuple(sorted(found))
