"""Matrix -> plan: which translation units each entry compiles, and what they cost.

A KernelTU is one template instantiation; its name is its parameters and is also the
file name of its generated source in kernels/. The plan is pure data: building nothing,
it is what `--dry-run` prints and what every later stage consumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .options import Entry, Matrix

CUTLASS_TYPES = {"fp16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t"}
API_DTYPES = {"fp16": "FAS_DTYPE_FP16", "bf16": "FAS_DTYPE_BF16", "e4m3": "FAS_DTYPE_E4M3"}
API_DTYPE_VALUES = {"fp16": 0, "bf16": 1, "e4m3": 2}  # the fas_dtype enum values, as SM90 template arguments
GIB = 1024**3
# Which pinned upstream (sources.lock.yaml) each kernel family compiles from.
FAMILY_SOURCES = {
    "fa2_fwd": "flash-attn",
    "fa2_fwd_split": "flash-attn",
    "sm90_prefill": "flashinfer-python",
    "sm90_fp8_prefill": "flashinfer-python",
}



@dataclass(frozen=True)
class HostTU:
    """A host-code TU every build compiles and links, and the upstream it includes (if any)."""

    name: str
    source: Path
    upstream: str | None


HOST_TUS = (
    HostTU("flash_api", Path("src/flash_api.cu"), "flash-attn"),
    HostTU("sm90_plan", Path("src/sm90_plan.cu"), "flashinfer-python"),
    HostTU("glibc_compat", Path("src/glibc_compat.c"), None),
)


@dataclass(frozen=True, order=True)
class KernelTU:
    family: str  # "fa2_fwd" (plain), "fa2_fwd_split" (split-KV), "sm90_prefill" or "sm90_fp8_prefill" (FlashInfer SM90)
    head_dim: int
    dtype: str  # element type of out; also of q/k/v except for sm90_fp8_prefill, whose inputs are e4m3
    causal: bool

    @property
    def split(self) -> bool:
        return self.family == "fa2_fwd_split"

    @property
    def fp8(self) -> bool:
        return self.family == "sm90_fp8_prefill"

    @property
    def input_dtype(self) -> str:
        return "e4m3" if self.fp8 else self.dtype

    @property
    def name(self) -> str:
        causal = "_causal" if self.causal else ""
        dtypes = f"e4m3_to_{self.dtype}" if self.fp8 else self.dtype
        return f"{self.family}_hdim{self.head_dim}_{dtypes}{causal}_sm90"

    @property
    def source(self) -> Path:
        return Path("kernels") / f"{self.name}.cu"

    @property
    def cutlass_type(self) -> str:
        return CUTLASS_TYPES[self.dtype]

    @property
    def sm90(self) -> bool:
        return self.family in ("sm90_prefill", "sm90_fp8_prefill")

    @property
    def sm90_template_args(self) -> str:
        """<InputDtype, OutputDtype, HeadDim, Causal> of fas_sm90::launch_ragged (fas_dtype values)."""
        causal = "true" if self.causal else "false"
        return (f"{API_DTYPE_VALUES[self.input_dtype]}, {API_DTYPE_VALUES[self.dtype]}, "
                f"{self.head_dim}, {causal}")

    @property
    def function(self) -> str:
        if self.sm90:
            return "launch_ragged"
        return "run_mha_fwd_splitkv_dispatch" if self.split else "run_mha_fwd_"

    @property
    def symbol(self) -> str:
        """Demangled name (without return type and parameters) that `nm -C` must show."""
        causal = "true" if self.causal else "false"
        if self.sm90:
            return f"fas_sm90::launch_ragged<{self.sm90_template_args}>"
        return f"flash::{self.function}<{self.cutlass_type}, {self.head_dim}, {causal}>"

    @property
    def registry_line(self) -> str:
        causal = "true" if self.causal else "false"
        if self.sm90:
            return (f"FAS_SM90_PREFILL({API_DTYPES[self.input_dtype]}, {API_DTYPES[self.dtype]}, "
                    f"{self.head_dim}, {causal})")
        macro = "FAS_FA2_FWD_SPLIT" if self.split else "FAS_FA2_FWD"
        return f"{macro}({self.cutlass_type}, {API_DTYPES[self.dtype]}, {self.head_dim}, {causal})"


@dataclass(frozen=True)
class EntryPlan:
    entry: Entry
    kernels: tuple[KernelTU, ...]

    @property
    def name(self) -> str:
        return self.entry.name

    def stats_key(self, tu_name: str) -> str:
        """Recorded costs are per TU and arch list: the same TU costs the same in any entry."""
        return f"{tu_name}@{'+'.join(self.entry.archs)}"

    def estimate_bytes(self, tu: KernelTU, recorded_peaks: dict) -> tuple[int, str]:
        """Memory to reserve for one TU: its recorded peak RSS if a build measured it, else the
        matrix's per-family default. Returns (bytes, where the number came from)."""
        key = self.stats_key(tu.name)
        if key in recorded_peaks:
            return int(recorded_peaks[key]), "recorded"
        return int(self.entry.memory_estimates_gb[tu.family] * GIB), "matrix default"


@dataclass(frozen=True)
class BuildPlan:
    matrix: Matrix
    entries: tuple[EntryPlan, ...]

    @property
    def sources_needed(self) -> set[str]:
        kernels = {FAMILY_SOURCES[tu.family] for e in self.entries for tu in e.kernels}
        tools = {e.entry.image.ptxas for e in self.entries if e.entry.image.ptxas}
        return kernels | tools | {tu.upstream for tu in HOST_TUS if tu.upstream}


def kernels_of(entry: Entry) -> tuple[KernelTU, ...]:
    found = set()
    for kernel_set in entry.kernels:
        for head_dim in kernel_set.head_dims:
            for dtype in kernel_set.dtypes:
                for causal in kernel_set.causal:
                    found.add(KernelTU(kernel_set.family, head_dim, dtype, causal))
    return tuple(sorted(found))


def make_plan(matrix: Matrix) -> BuildPlan:
    return BuildPlan(matrix=matrix, entries=tuple(EntryPlan(e, kernels_of(e)) for e in matrix.entries))


def all_kernels(matrices) -> tuple[KernelTU, ...]:
    """Every instantiation any matrix builds: the set of files kernels/ must hold."""
    found = set()
    for matrix in matrices:
        for entry in matrix.entries:
            found.update(kernels_of(entry))
    return tuple(sorted(found))
