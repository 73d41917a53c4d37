"""The one Python binding (ctypes) of libflash_attn_standalone's C API, used by every bench script.

Contract:
- STRUCTS maps each public struct of src/include/flash_attn_standalone.h to its ctypes mirror
  (same field names, order and C layout); ENUMS maps each public enum to an IntEnum whose member
  names are the C constants without the enum's prefix (FAS_DTYPE_BF16 -> Dtype.BF16);
  PROTOTYPES gives (restype, argtypes) of every exported function (src/exports.map).
- `Library(artifact)` loads lib/libflash_attn_standalone.so.X.Y.Z of an exported artifact
  folder, sets every prototype, and offers the calls the bench scripts share; a failing status
  raises FasError (a RuntimeError) carrying the library's fas_get_last_error() text.
- Pure ctypes and stdlib: importable without torch or a GPU. The library itself is only loaded
  when a Library is made.

The mirror is written by hand from the header. tests/test_binding_layout.py compiles a C
program against the header and fails on any difference in a struct's size, alignment, field
list, field offset or size, an enum constant, or a function's prototype: change the header and
this file together.
"""

from __future__ import annotations

import ctypes
import enum
import re
import sys
from pathlib import Path

# C enums are int-sized on every ABI the library ships for (the layout test checks it).
ENUM_CTYPE = ctypes.c_int
LIBRARY_NAME = re.compile(r"libflash_attn_standalone\.so\.\d+\.\d+\.\d+")


class Status(enum.IntEnum):
    """fas_status"""

    SUCCESS = 0
    ERROR_INVALID_ARGUMENT = 1
    ERROR_NOT_BUILT = 2
    ERROR_UNSUPPORTED_DEVICE = 3
    ERROR_CUDA = 4
    ERROR_INTERNAL = 5


class Dtype(enum.IntEnum):
    """fas_dtype"""

    FP16 = 0
    BF16 = 1
    E4M3 = 2


class Family(enum.IntEnum):
    """fas_family"""

    FA2 = 0
    SM90 = 1
    PAGED = 2
    MIXED = 3


class KvLayout(enum.IntEnum):
    """fas_kv_layout"""

    VARLEN = 0
    PAGED = 1


class LseLayout(enum.IntEnum):
    """fas_lse_layout"""

    HEAD_MAJOR = 0
    TOKEN_MAJOR = 1


# C enum name -> (mirror, prefix that the C constants add to the member names).
ENUMS = {
    "fas_status": (Status, "FAS_"),
    "fas_dtype": (Dtype, "FAS_DTYPE_"),
    "fas_family": (Family, "FAS_FAMILY_"),
    "fas_kv_layout": (KvLayout, "FAS_KV_"),
    "fas_lse_layout": (LseLayout, "FAS_LSE_"),
}


class _Sized(ctypes.Structure):
    """A struct whose first field is struct_size (the header's ABI rule: later versions append)."""

    @classmethod
    def new(cls, **fields):
        """A zeroed struct with struct_size set, as the header's *_init functions make it."""
        value = cls(**fields)
        value.struct_size = ctypes.sizeof(cls)
        return value


# Device and host pointers are c_void_p so that integer addresses (torch's data_ptr()) and
# ctypes casts can both be assigned; the layout is that of any data pointer.
class FwdArgs(_Sized):
    """fas_fwd_args"""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("dtype", ENUM_CTYPE),
        ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
        ("out", ctypes.c_void_p), ("softmax_lse", ctypes.c_void_p),
        ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
        ("batch_size", ctypes.c_int), ("max_seqlen_q", ctypes.c_int), ("max_seqlen_k", ctypes.c_int),
        ("num_heads_q", ctypes.c_int), ("num_heads_k", ctypes.c_int), ("head_dim", ctypes.c_int),
        ("q_row_stride", ctypes.c_int64), ("k_row_stride", ctypes.c_int64),
        ("v_row_stride", ctypes.c_int64), ("out_row_stride", ctypes.c_int64),
        ("softmax_scale", ctypes.c_float), ("causal", ctypes.c_int),
        ("stream", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t),
        ("total_q", ctypes.c_int),
    ]


class KernelInfo(ctypes.Structure):
    """fas_kernel_info"""

    _fields_ = [
        ("dtype", ENUM_CTYPE), ("head_dim", ctypes.c_int), ("causal", ctypes.c_int), ("split_kv", ctypes.c_int),
        ("family", ctypes.c_char_p), ("out_dtype", ENUM_CTYPE),
    ]


class PlanArgs(_Sized):
    """fas_plan_args"""

    _fields_ = [
        ("struct_size", ctypes.c_size_t), ("dtype", ENUM_CTYPE),
        ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p), ("batch_size", ctypes.c_int),
        ("num_heads_q", ctypes.c_int), ("num_heads_k", ctypes.c_int), ("head_dim", ctypes.c_int),
        ("q_row_stride", ctypes.c_int64), ("k_row_stride", ctypes.c_int64),
        ("v_row_stride", ctypes.c_int64), ("out_row_stride", ctypes.c_int64),
        ("softmax_scale", ctypes.c_float), ("causal", ctypes.c_int), ("disable_sm90", ctypes.c_int),
        ("stream", ctypes.c_void_p), ("out_dtype", ENUM_CTYPE),
        ("kv_layout", ENUM_CTYPE), ("kv_lengths", ctypes.c_void_p), ("page_size", ctypes.c_int),
        ("num_pages", ctypes.c_int), ("k_page_stride", ctypes.c_int64), ("v_page_stride", ctypes.c_int64),
        ("page_indices_host", ctypes.c_void_p),
        ("use_window", ctypes.c_int), ("window_size_left", ctypes.c_int), ("window_size_right", ctypes.c_int),
        ("softcap", ctypes.c_float),
        ("kv_dtype", ENUM_CTYPE),
        ("use_sinks", ctypes.c_int), ("device_lengths", ctypes.c_int), ("max_pages_per_sequence", ctypes.c_int),
    ]


class PlanRunArgs(_Sized):
    """fas_plan_run_args"""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("out", ctypes.c_void_p),
        ("softmax_lse", ctypes.c_void_p), ("stream", ctypes.c_void_p),
        ("q_descale", ctypes.c_void_p), ("k_descale", ctypes.c_void_p), ("v_descale", ctypes.c_void_p),
        ("page_indices", ctypes.c_void_p),
        ("sinks", ctypes.c_void_p),
    ]


class PlanInfo(_Sized):
    """fas_plan_info"""

    _fields_ = [
        ("struct_size", ctypes.c_size_t), ("family", ENUM_CTYPE), ("family_name", ctypes.c_char_p),
        ("kernel_head_dim", ctypes.c_int), ("lse_layout", ENUM_CTYPE), ("total_q", ctypes.c_int),
        ("total_k", ctypes.c_int), ("device", ctypes.c_int), ("device_bytes", ctypes.c_size_t),
        ("sm90_unused_reason", ctypes.c_char_p),
        ("kv_splits", ctypes.c_int), ("packed_gqa", ctypes.c_int), ("query_tile_rows", ctypes.c_int),
        ("num_ctas", ctypes.c_int), ("total_pages", ctypes.c_int), ("ctas_per_sm", ctypes.c_int),
        ("query_tiles", ctypes.c_int), ("packed", ctypes.c_int),
        ("prefill_family", ENUM_CTYPE), ("decode_sequences", ctypes.c_int),
    ]


class KvAppendArgs(_Sized):
    """fas_kv_append_args"""

    _fields_ = [
        ("struct_size", ctypes.c_size_t), ("dtype", ENUM_CTYPE), ("cache_dtype", ENUM_CTYPE),
        ("num_tokens", ctypes.c_int), ("num_heads_k", ctypes.c_int), ("head_dim", ctypes.c_int),
        ("k_new", ctypes.c_void_p), ("v_new", ctypes.c_void_p),
        ("k_new_row_stride", ctypes.c_int64), ("v_new_row_stride", ctypes.c_int64),
        ("slot_mapping", ctypes.c_void_p), ("slot_mapping_host", ctypes.c_void_p),
        ("k_cache", ctypes.c_void_p), ("v_cache", ctypes.c_void_p),
        ("num_pages", ctypes.c_int), ("page_size", ctypes.c_int),
        ("k_row_stride", ctypes.c_int64), ("v_row_stride", ctypes.c_int64),
        ("k_page_stride", ctypes.c_int64), ("v_page_stride", ctypes.c_int64),
        ("k_scale", ctypes.c_void_p), ("v_scale", ctypes.c_void_p), ("invalid_slots", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
    ]


MERGE_MAX_STATES = 16  # FAS_MERGE_MAX_STATES


class MergeStatesArgs(_Sized):
    """fas_merge_states_args"""

    _fields_ = [
        ("struct_size", ctypes.c_size_t), ("dtype", ENUM_CTYPE), ("num_states", ctypes.c_int),
        ("num_tokens", ctypes.c_int), ("num_heads", ctypes.c_int), ("head_dim", ctypes.c_int),
        ("v", ctypes.c_void_p * MERGE_MAX_STATES), ("lse", ctypes.c_void_p * MERGE_MAX_STATES),
        ("token_stride", ctypes.c_int64), ("head_stride", ctypes.c_int64),
        ("lse_token_stride", ctypes.c_int64 * MERGE_MAX_STATES), ("lse_head_stride", ctypes.c_int64 * MERGE_MAX_STATES),
        ("out", ctypes.c_void_p), ("out_token_stride", ctypes.c_int64), ("out_head_stride", ctypes.c_int64),
        ("out_lse", ctypes.c_void_p), ("out_lse_token_stride", ctypes.c_int64), ("out_lse_head_stride", ctypes.c_int64),
        ("stream", ctypes.c_void_p),
    ]


class PlanUpdateArgs(_Sized):
    """fas_plan_update_args"""

    _fields_ = [("struct_size", ctypes.c_size_t), ("kv_lengths", ctypes.c_void_p), ("stream", ctypes.c_void_p)]


STRUCTS = {
    "fas_fwd_args": FwdArgs,
    "fas_kv_append_args": KvAppendArgs,
    "fas_merge_states_args": MergeStatesArgs,
    "fas_kernel_info": KernelInfo,
    "fas_plan_args": PlanArgs,
    "fas_plan_run_args": PlanRunArgs,
    "fas_plan_info": PlanInfo,
    "fas_plan_update_args": PlanUpdateArgs,
}

# fas_plan is opaque: a handle is a c_void_p.
_P = ctypes.POINTER
_INT, _SIZE, _VOID_P = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p
PROTOTYPES = {
    "fas_fwd_args_init": (None, [_P(FwdArgs)]),
    "fas_fwd": (ENUM_CTYPE, [_P(FwdArgs)]),
    "fas_fwd_workspace_size": (ENUM_CTYPE, [_P(FwdArgs), _P(_SIZE)]),
    "fas_get_last_error": (ctypes.c_char_p, []),
    "fas_get_version": (None, [_P(_INT), _P(_INT), _P(_INT)]),
    "fas_version_string": (ctypes.c_char_p, []),
    "fas_num_kernels": (_INT, []),
    "fas_get_kernel_info": (ENUM_CTYPE, [_INT, _P(KernelInfo)]),
    "fas_query_support": (ENUM_CTYPE, [ENUM_CTYPE, _INT, _INT, _P(_INT)]),
    "fas_check_device": (ENUM_CTYPE, [_INT]),
    "fas_plan_args_init": (None, [_P(PlanArgs)]),
    "fas_plan_run_args_init": (None, [_P(PlanRunArgs)]),
    "fas_plan_create": (ENUM_CTYPE, [_P(PlanArgs), _P(_VOID_P)]),
    "fas_plan_run": (ENUM_CTYPE, [_VOID_P, _P(PlanRunArgs)]),
    "fas_plan_destroy": (ENUM_CTYPE, [_VOID_P]),
    "fas_plan_destroy_async": (ENUM_CTYPE, [_VOID_P, _VOID_P]),
    "fas_plan_get_info": (ENUM_CTYPE, [_VOID_P, _P(PlanInfo)]),
    "fas_query_plan_support": (ENUM_CTYPE, [ENUM_CTYPE, _INT, _INT, _P(ENUM_CTYPE), _P(_INT)]),
    "fas_query_paged_support": (ENUM_CTYPE, [ENUM_CTYPE, _INT, _INT, _INT, _INT, _P(_INT)]),
    "fas_kv_append_args_init": (None, [_P(KvAppendArgs)]),
    "fas_kv_append": (ENUM_CTYPE, [_P(KvAppendArgs)]),
    "fas_merge_states_args_init": (None, [_P(MergeStatesArgs)]),
    "fas_merge_states": (ENUM_CTYPE, [_P(MergeStatesArgs)]),
    "fas_plan_update_args_init": (None, [_P(PlanUpdateArgs)]),
    "fas_plan_update": (ENUM_CTYPE, [_VOID_P, _P(PlanUpdateArgs)]),
}


class FasError(RuntimeError):
    """A call returned a non-zero fas_status; the text is the library's last-error message."""

    def __init__(self, status: int, message: str):
        super().__init__(f"fas status {status}: {message}")
        self.status = status
        self.message = message


def offsets(lengths) -> ctypes.Array:
    """Host int32 array of the batch_size + 1 offsets of sequences of `lengths` (from 0)."""
    values = [0]
    for length in lengths:
        values.append(values[-1] + length)
    return (ctypes.c_int32 * len(values))(*values)


def uniform_lengths(args: "PlanArgs", batch: int, queries: int, kv_len: int = 0, keys: int = 0) -> "PlanArgs":
    """A plan's host lengths for `batch` sequences of `queries` queries each, and either `kv_len`
    cached keys each (a paged plan's kv_lengths) or `keys` contiguous keys each (cu_seqlens_k);
    the arrays are kept alive on args, which is returned."""
    args.keep_q = offsets([queries] * batch)
    args.cu_seqlens_q = ctypes.cast(args.keep_q, ctypes.c_void_p)
    if keys:
        args.keep_k = offsets([keys] * batch)
        args.cu_seqlens_k = ctypes.cast(args.keep_k, ctypes.c_void_p)
    else:
        args.keep_len = (ctypes.c_int32 * batch)(*([kv_len] * batch))
        args.kv_lengths = ctypes.cast(args.keep_len, ctypes.c_void_p)
    return args


def uniform_paged_args(dtype: int, batch: int, queries: int, kv_len: int, heads_q: int, heads_kv: int, head_dim: int,
                       page_size: int, num_pages: int, stream: int, **fields) -> "PlanArgs":
    """A causal plan over a paged cache: `batch` sequences of `queries` queries over `kv_len` keys
    each (more fields as PlanArgs.new takes them: use_sinks, device_lengths, ...)."""
    args = PlanArgs.new(dtype=dtype, out_dtype=dtype, batch_size=batch, num_heads_q=heads_q, num_heads_k=heads_kv,
                        head_dim=head_dim, causal=1, stream=stream, kv_layout=KvLayout.PAGED, page_size=page_size,
                        num_pages=num_pages, **fields)
    return uniform_lengths(args, batch, queries, kv_len=kv_len)


def plan_args(lengths, dtype: int, num_heads_q: int, num_heads_k: int, head_dim: int, causal: bool,
              stream: int | None = None, out_dtype: int = Dtype.FP16,
              window: tuple[int, int] | None = None) -> PlanArgs:
    """fas_plan_args for a varlen batch of `lengths` (same offsets for q and k, contiguous rows);
    the host offsets are kept alive on the struct (attribute host_offsets). window: FlashAttention's
    (window_size_left, window_size_right), -1 = no limit; None = no window."""
    args = PlanArgs.new(dtype=dtype, out_dtype=out_dtype, batch_size=len(lengths), num_heads_q=num_heads_q,
                        num_heads_k=num_heads_k, head_dim=head_dim, causal=int(causal), stream=stream)
    if window is not None:
        args.use_window = 1
        args.window_size_left, args.window_size_right = window
    args.host_offsets = offsets(lengths)
    args.cu_seqlens_q = args.cu_seqlens_k = ctypes.cast(args.host_offsets, ctypes.c_void_p)
    return args


def find_library(artifact: Path) -> Path | None:
    """The real-name library file (lib/libflash_attn_standalone.so.X.Y.Z) of an artifact folder."""
    candidates = sorted(p for p in (Path(artifact) / "lib").glob("libflash_attn_standalone.so.*")
                        if LIBRARY_NAME.fullmatch(p.name))
    return candidates[0] if candidates else None


class Library:
    """One loaded build of the library. `dll` is the ctypes handle with every prototype set;
    time-critical callers call it directly (one check per call, no extra Python)."""

    def __init__(self, artifact: Path):
        path = find_library(artifact)
        if path is None:
            # The bench scripts are command-line tools: a wrong folder is a usage error, not a traceback.
            sys.exit(f"no libflash_attn_standalone.so.X.Y.Z under {artifact}/lib")
        self.path = path
        self.dll = ctypes.CDLL(str(path))
        for name, (restype, argtypes) in PROTOTYPES.items():
            # An older build (a comparison baseline) may lack a newer function: calling it
            # then raises AttributeError naming it, and the rest of the API still works.
            function = getattr(self.dll, name, None)
            if function is not None:
                function.restype, function.argtypes = restype, argtypes

    def last_error(self) -> str:
        return self.dll.fas_get_last_error().decode()

    def check(self, status: int) -> None:
        """Raise FasError with the last-error text unless status is FAS_SUCCESS."""
        if status != 0:
            raise FasError(status, self.last_error())

    def version(self) -> str:
        return self.dll.fas_version_string().decode()

    def kernel_head_dim(self, dtype: int, head_dim: int, causal: bool) -> int | None:
        """Head dim of the FA2 kernel fas_fwd would run for the request, None if not built."""
        served = ctypes.c_int(0)
        status = self.dll.fas_query_support(dtype, head_dim, int(causal), ctypes.byref(served))
        return served.value if status == 0 else None

    def workspace_size(self, args: FwdArgs) -> int:
        size = ctypes.c_size_t(0)
        self.check(self.dll.fas_fwd_workspace_size(ctypes.byref(args), ctypes.byref(size)))
        return size.value

    def plan_create(self, args: PlanArgs) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self.check(self.dll.fas_plan_create(ctypes.byref(args), ctypes.byref(handle)))
        return handle

    def plan_info(self, plan) -> PlanInfo:
        info = PlanInfo.new()
        self.check(self.dll.fas_plan_get_info(plan, ctypes.byref(info)))
        return info
