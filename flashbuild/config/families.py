"""Kernel families: one frozen record per family holds everything the driver does with it.

A family is one templated kernel entry point, compiled once per (head dim, dtype, causal)
into its own TU. (A kernel family, as matrix.yaml lists them: sm90_prefill, paged_decode, ...;
the C API's fas_family, FA2 / SM90 / PAGED / MIXED, names the kind of plan, and several kernel
families serve one: the record's `api_path`.) Its record names the pinned upstream it compiles
against (include roles and defines), the code path of the C API that serves it, the head dims
and dtypes it exists for, the text of its generated source, its line and its declaration in the
registry the C API includes, and the demangled symbol `nm -C` must show. Nothing else in the driver branches on a family's name:
adding a family is adding a record to FAMILIES (plus its launcher and registry consumer in
src/). Its memory estimate is the matrix's (matrix.yaml `memory_estimates_gb`, by family
name), where the measurements it comes from are cited.

Also here, because records refer to them: the pinned upstreams' include sets (`Upstream`) and
the host-code folders of the C API (`CODE_PATHS`). The text of the sources, symbols and
registry lines the records bind is kernel_sources.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

from flashbuild.config.kernel_sources import (
    FA2_DECLARATION,
    FA2_PARAMS,
    FA2_SPLIT_DECLARATION,
    PAGED_DECLARATION,
    PAGED_PARAMS,
    PagedKernel,
    SM90_DECLARATION,
    SM90_OUT_PARAMS,
    SM90_PARAMS,
    fa2_args,
    fa2_attention_kernels,
    fa2_split_kernels,
    fa2_symbol,
    paged_args,
    paged_symbol,
    render_fa2_fwd,
    render_fa2_split,
    render_paged,
    render_sm90,
    render_sm90_fp8_softcap,
    render_sm90_fp8_window,
    render_sm90_packed,
    render_sm90_paged,
    render_sm90_paged_softcap,
    render_sm90_softcap,
    sm90_args,
    sm90_fp8_softcap_symbol,
    sm90_fp8_window_symbol,
    sm90_out_args,
    sm90_out_declaration,
    sm90_packed_symbol,
    sm90_paged_softcap_symbol,
    sm90_paged_symbol,
    sm90_softcap_symbol,
    sm90_symbol,
)

@dataclass(frozen=True)
class Upstream:
    """A pinned upstream (sources.lock.yaml) and how a TU compiles against it."""

    pin: str
    includes: tuple[str, ...] = ()  # lock-file path roles, as -I, in this order
    system_includes: tuple[str, ...] = ()  # roles as -isystem, after them
    defines: tuple[str, ...] = ()
    # Folders of ours that only this upstream's headers include (the ATen/c10 stand-ins):
    # they are not in a TU's own include closure, so they are keyed whole.
    keyed_folders: tuple[str, ...] = ()

    def flags(self, fetched) -> list[str]:
        """Include paths and defines, given the FetchedSource of `pin`."""
        return [
            *(f"-I{fetched.path(role).resolve()}" for role in self.includes),
            *(arg for role in self.system_includes for arg in ("-isystem", str(fetched.path(role).resolve()))),
            *self.defines,
        ]


# FA2's own switches (its static_switch.h) for branches no C API path reaches: the library never
# passes a dropout probability or ALiBi slopes (src/fa2/launch.cu), so those variants were compiled
# for nothing (issue 33: a forward TU instantiated 39 kernels, 20 of them reachable).
FLASH_ATTN = Upstream("flash-attn", includes=("kernels", "cutlass"),
                      defines=("-DFLASHATTENTION_DISABLE_DROPOUT", "-DFLASHATTENTION_DISABLE_ALIBI"),
                      keyed_folders=("src/standins",))
# FlashInfer's SM90 templates need its own CCCL ahead of the toolkit's, and its CUTLASS 4.5.
# NDEBUG as FlashInfer builds them: without it CUTLASS keeps debug role checks in its
# pipelines (brkpt), which the FP8 kernel's V-transpose pipeline trips on every launch.
# FLASHINFER_CUTLASS_UTILS_CUH_ marks flashinfer/cutlass_utils.cuh as already included: its
# hopper headers include it, and it brings CUTLASS's GEMM builders, grouped GEMM and host
# reference utilities, which no attention kernel uses; skipped, an SM90 TU compiles in 13% less
# time to the same device code (docs/design/build-measurements.md).
FLASHINFER_SM90 = Upstream(
    "flashinfer-python",
    includes=("cub", "libcudacxx", "thrust", "include"),
    system_includes=("cutlass", "cutlass_util"),
    defines=("-DFLASHINFER_ENABLE_F16", "-DFLASHINFER_ENABLE_BF16", "-DNDEBUG", "-DFLASHINFER_CUTLASS_UTILS_CUH_"),
)


@dataclass(frozen=True)
class CodePath:
    """A folder of the C API's host code: every .cu/.cpp in it is one host TU, compiled
    against `upstream`'s include set (None: our headers only)."""

    name: str
    folder: str
    upstream: Upstream | None


CODE_PATHS = {
    path.name: path
    for path in (
        CodePath("core", "src/core", None),  # what the families share: status, device, layout, KV checks
        CodePath("api", "src/api", None),  # the exported functions over the families: plans, registry view
        CodePath("fa2", "src/fa2", FLASH_ATTN),  # the only code that includes FA2's headers
        CodePath("sm90", "src/sm90", None),  # SM90 planner and launches through fas_sm90::launch_ragged
        CodePath("paged", "src/paged", None),  # paged-KV planner and launches through fas_paged::launch_paged
    )
}


@dataclass(frozen=True)
class Family:
    name: str
    upstream: Upstream
    api_path: str  # the CODE_PATHS entry that launches it
    head_dims: tuple[int, ...]  # those a matrix may list
    dtypes: tuple[str, ...]  # output dtypes a matrix may list
    input_dtype: str | None  # q/k/v element type when fixed (FP8); None: the output's
    project_includes: bool  # its generated source includes our src/ (not only upstream code)
    render: Callable  # KernelTU -> the generated source text
    symbol: Callable  # KernelTU -> demangled name (no return type, no parameters)
    registry_macro: str
    registry_params: tuple[str, ...]  # the macro's parameters, as the C includers name them
    registry_args: Callable  # KernelTU -> the macro's arguments, in registry_params order
    # fas_kernel_info.family of its kernels: the C API's name of their kind (several build
    # families may share one: "fa2", "sm90", "paged"). kernelgen passes it to the registry
    # macro as a last argument, INFO_FAMILY_PARAM, so no C file names a family's kernels by hand.
    info_family: str
    causal: tuple[bool, ...] = (False, True)  # the causal values a matrix may list
    # What the C registry of `api_path` must declare of one TU (its explicit specialization), a
    # format string over registry_params; kernelgen writes it into kernel_registry.inc under
    # FAS_DECLARE_<API_PATH>, so no C file declares a kernel by hand ("": the includer does).
    declaration: str = ""
    # KernelTU -> how many GPU kernels its object holds, every one a variant the C API can
    # dispatch (the build fails on any other count: a compiled branch nothing reaches); None
    # where upstream's launcher chooses what it compiles.
    kernels: Callable | None = None

    def declare(self, tu) -> str:
        return self.declaration.format(**dict(zip(self.registry_params, self.registry_args(tu))))


# The last parameter of every registry macro: the family's info_family, a C string literal.
INFO_FAMILY_PARAM = "InfoFamily"


# The memory_estimates_gb key (matrix.yaml) of every host TU: host code belongs to no family.
HOST = "host"
OUTPUT_DTYPES = ("fp16", "bf16")
FA2_HEAD_DIMS = (32, 64, 96, 128, 192, 256)
SM90_HEAD_DIMS = (64, 128, 256)  # the head dims of every SM90 and paged table in src/sm90/tiles.h and src/paged
SM90_PREFILL_HEAD_DIMS = (64, 96, 128, 192, 256)  # the 16-bit varlen table also has 96 and 192
SM90_FP8_HEAD_DIMS = (64, 96, 128, 192, 256)  # 96: our V transpose (sm90/fp8_traits.cuh)
PAGED_DECODE = PagedKernel("paged/decode.cuh", "run_decode", "occupancy_decode",
                           "The project's decode kernel over a paged KV cache", tile_q=16)
# The e4m3-KV decode kernel serves every query length (several 16-row tiles per sequence).
PAGED_DECODE_E4M3KV = PagedKernel("paged/decode.cuh", "run_decode", "occupancy_decode",
                                  "The project's decode kernel over a paged FP8 KV cache (per-KV-head descales)",
                                  tile_q=16, kv_dtype="e4m3")
PAGED_PREFILL = PagedKernel("paged/launch.cuh", "run", "occupancy", "FlashInfer batch attention over a paged KV cache",
                            tile_q=64)


def _paged_family(name: str, kernel: PagedKernel, info_family: str = "paged") -> Family:
    return Family(name=name, upstream=FLASHINFER_SM90, api_path="paged", head_dims=SM90_HEAD_DIMS,
                  dtypes=OUTPUT_DTYPES, input_dtype=None, project_includes=True, render=partial(render_paged, kernel),
                  symbol=partial(paged_symbol, kernel), registry_macro="FAS_PAGED", registry_params=PAGED_PARAMS,
                  registry_args=partial(paged_args, kernel), info_family=info_family, declaration=PAGED_DECLARATION)


FAMILIES = {
    family.name: family
    for family in (
        Family(
            name="fa2_fwd", upstream=FLASH_ATTN, api_path="fa2",
            head_dims=FA2_HEAD_DIMS, dtypes=OUTPUT_DTYPES, input_dtype=None, project_includes=True,
            render=render_fa2_fwd, symbol=fa2_symbol("fas_fa2::run_fwd"),
            registry_macro="FAS_FA2_FWD", registry_params=FA2_PARAMS, registry_args=fa2_args, info_family="fa2",
            declaration=FA2_DECLARATION, kernels=fa2_attention_kernels,
        ),
        Family(
            name="fa2_fwd_split", upstream=FLASH_ATTN, api_path="fa2",
            head_dims=FA2_HEAD_DIMS, dtypes=OUTPUT_DTYPES, input_dtype=None, project_includes=True,
            render=render_fa2_split, symbol=fa2_symbol("fas_fa2::run_split"),
            registry_macro="FAS_FA2_FWD_SPLIT", registry_params=FA2_PARAMS, registry_args=fa2_args, info_family="fa2",
            declaration=FA2_SPLIT_DECLARATION, kernels=fa2_split_kernels,
        ),
        Family(
            name="sm90_prefill", upstream=FLASHINFER_SM90, api_path="sm90",
            head_dims=SM90_PREFILL_HEAD_DIMS, dtypes=OUTPUT_DTYPES, input_dtype=None, project_includes=True,
            render=render_sm90, symbol=sm90_symbol,
            registry_macro="FAS_SM90_PREFILL", registry_params=SM90_PARAMS, registry_args=sm90_args,
            info_family="sm90", declaration=SM90_DECLARATION,
        ),
        Family(  # q/k/v in FP8 e4m3; a matrix's dtypes are the output's
            name="sm90_fp8_prefill", upstream=FLASHINFER_SM90, api_path="sm90",
            head_dims=SM90_FP8_HEAD_DIMS, dtypes=OUTPUT_DTYPES, input_dtype="e4m3", project_includes=True,
            render=render_sm90, symbol=sm90_symbol,
            registry_macro="FAS_SM90_PREFILL", registry_params=SM90_PARAMS, registry_args=sm90_args,
            info_family="sm90", declaration=SM90_DECLARATION,
        ),
        Family(  # the FP8 kernels with FlashInfer's left-window template, for FP8 plans with a left window:
            # compiled into the plain FP8 kernels it cost them 3-6% at 1k-token sequences
            name="sm90_fp8_window_prefill", upstream=FLASHINFER_SM90, api_path="sm90",
            head_dims=SM90_FP8_HEAD_DIMS, dtypes=OUTPUT_DTYPES, input_dtype="e4m3", project_includes=True,
            render=render_sm90_fp8_window, symbol=sm90_fp8_window_symbol,
            registry_macro="FAS_SM90_WINDOWED_FP8", registry_params=SM90_OUT_PARAMS, registry_args=sm90_out_args,
            info_family="sm90_fp8_window", declaration=sm90_out_declaration("launch_ragged_fp8_window"),
        ),
        Family(  # FP8 with scores capped as softcap * tanh(score / softcap), with or without a left window
            # (Gemma 2's layers alternate a 4096-key window and none, softcap 50 on both)
            name="sm90_fp8_softcap_prefill", upstream=FLASHINFER_SM90, api_path="sm90",
            head_dims=SM90_FP8_HEAD_DIMS, dtypes=OUTPUT_DTYPES, input_dtype="e4m3", project_includes=True,
            render=render_sm90_fp8_softcap, symbol=sm90_fp8_softcap_symbol,
            registry_macro="FAS_SM90_FP8_SOFTCAP", registry_params=SM90_OUT_PARAMS, registry_args=sm90_out_args,
            info_family="sm90_fp8_softcap", declaration=sm90_out_declaration("launch_ragged_fp8_softcap"),
        ),
        Family(  # scores capped as softcap * tanh(score / softcap) (Gemma 2, Grok); fp16/bf16
            name="sm90_softcap_prefill", upstream=FLASHINFER_SM90, api_path="sm90",
            head_dims=SM90_PREFILL_HEAD_DIMS, dtypes=OUTPUT_DTYPES, input_dtype=None, project_includes=True,
            render=render_sm90_softcap, symbol=sm90_softcap_symbol,
            registry_macro="FAS_SM90_SOFTCAP", registry_params=SM90_OUT_PARAMS, registry_args=sm90_out_args,
            info_family="sm90_softcap", declaration=sm90_out_declaration("launch_ragged_softcap"),
        ),
        Family(  # short sequences sharing query tiles; non-causal only (per-row bounds carry causality)
            name="sm90_packed_prefill", upstream=FLASHINFER_SM90, api_path="sm90",
            head_dims=SM90_PREFILL_HEAD_DIMS, dtypes=OUTPUT_DTYPES, input_dtype=None, project_includes=True,
            render=render_sm90_packed, symbol=sm90_packed_symbol,
            registry_macro="FAS_SM90_PACKED", registry_params=SM90_OUT_PARAMS, registry_args=sm90_out_args,
            info_family="sm90_packed", causal=(False,), declaration=sm90_out_declaration("launch_ragged_packed"),
        ),
        Family(  # chunked prefill over a paged cache (matrices build it causal: queries fewer than keys)
            name="sm90_paged_prefill", upstream=FLASHINFER_SM90, api_path="sm90",
            head_dims=SM90_HEAD_DIMS, dtypes=OUTPUT_DTYPES, input_dtype=None, project_includes=True,
            render=render_sm90_paged, symbol=sm90_paged_symbol,
            registry_macro="FAS_SM90_PAGED", registry_params=SM90_OUT_PARAMS, registry_args=sm90_out_args,
            info_family="sm90_paged", declaration=sm90_out_declaration("launch_paged_ragged"),
        ),
        Family(  # the same with a logits softcap (Gemma 2's chunked prefill); no sinks, as sm90_softcap_prefill
            name="sm90_paged_softcap_prefill", upstream=FLASHINFER_SM90, api_path="sm90",
            head_dims=SM90_HEAD_DIMS, dtypes=OUTPUT_DTYPES, input_dtype=None, project_includes=True,
            render=render_sm90_paged_softcap, symbol=sm90_paged_softcap_symbol,
            registry_macro="FAS_SM90_PAGED_SOFTCAP", registry_params=SM90_OUT_PARAMS, registry_args=sm90_out_args,
            info_family="sm90_paged_softcap", declaration=sm90_out_declaration("launch_paged_ragged_softcap"),
        ),
        # 16-row query tiles; causal only (one query sees every key with or without the mask)
        _paged_family("paged_decode", PAGED_DECODE),
        # over e4m3 K/V caches; dtypes are out's, and q's unless q is e4m3 (an FP8 plan)
        _paged_family("paged_decode_e4m3kv", PAGED_DECODE_E4M3KV, info_family="paged_e4m3kv"),
        _paged_family("paged_prefill", PAGED_PREFILL),
    )
}


def registry_macros() -> dict[str, tuple[str, ...]]:
    """Each registry macro once (families may share one), with its parameters, the last of
    them INFO_FAMILY_PARAM."""
    macros: dict[str, tuple[str, ...]] = {}
    for family in FAMILIES.values():
        macros.setdefault(family.registry_macro, family.registry_params + (INFO_FAMILY_PARAM,))
    return macros
