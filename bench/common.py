"""What the bench scripts share: the library binding with the torch-side callables they time
(`Library`, `Libraries`: requests to the first of several artifacts that serves them), the
timing rule every table uses (`median_ms_each`: shuffled rounds, median of samples), SDPA on the
same tensors, and the table helpers. Scripts import this module, never each other.
Needs PyTorch (the library itself never does); runs on a GPU machine.
"""

from __future__ import annotations

import ctypes
import random
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

import fas_ctypes
from fas_ctypes import Dtype, FwdArgs, PlanRunArgs
from rounds import round_orders

# The Qwen2.5-VL-3B-like LLM batch (16 query / 2 KV heads, hdim 128, causal): 7 sequences, 16k tokens.
QWEN_VARLEN_LENGTHS = [4096, 3000, 2500, 2048, 1900, 1500, 1340]



def fas_dtype(tensor) -> Dtype:
    """The fas_dtype of a torch tensor's elements (fp16 otherwise)."""
    return {torch.bfloat16: Dtype.BF16, torch.float8_e4m3fn: Dtype.E4M3}.get(tensor.dtype, Dtype.FP16)


class Library(fas_ctypes.Library):
    """The binding plus the torch-side callables the bench scripts time."""

    def forward_fn(self, q, k, v, out, causal, cu_q=None, cu_k=None, max_q=0, max_k=0, lse=None):
        """A callable that enqueues one forward on the current stream (of the call that made it), or
        on the stream handle it is given (a capture's side stream); lse: a float32 tensor in
        fas_fwd's layout to receive the LSE (None: not asked for)."""
        args = FwdArgs.new()
        args.dtype = fas_dtype(q)
        args.q, args.k, args.v, args.out = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()
        if cu_q is None:
            args.batch_size, args.max_seqlen_q, args.num_heads_q, args.head_dim = q.shape
            args.max_seqlen_k, args.num_heads_k = k.shape[1], k.shape[2]
        else:
            args.cu_seqlens_q, args.cu_seqlens_k = cu_q.data_ptr(), cu_k.data_ptr()
            args.batch_size = cu_q.numel() - 1
            args.max_seqlen_q, args.max_seqlen_k = max_q, max_k
            _, args.num_heads_q, args.head_dim = q.shape
            args.num_heads_k = k.shape[1]
        args.causal = int(causal)
        args.stream = torch.cuda.current_stream().cuda_stream
        if lse is not None:
            args.softmax_lse = lse.data_ptr()
            args.total_q = q.shape[0] if cu_q is not None else 0
        # Preallocated scratch (LSE, split accumulators) so the timed call allocates nothing.
        size = self.workspace_size(args)
        workspace = torch.empty(max(size, 1), dtype=torch.uint8, device=q.device)
        args.workspace, args.workspace_bytes = workspace.data_ptr(), size

        def run(stream=None):
            if stream is not None:
                args.stream = stream
            self.check(self.dll.fas_fwd(ctypes.byref(args)))

        run.keepalive = (args, workspace, lse)
        return run

    def plan_fns(self, q, k, v, out, causal, lengths, window=None, softcap=0.0, disable_sm90=False):
        """(run with the plan reused, run with planning in every call, family name) for a
        varlen batch of `lengths` on tensors q [total, Hq, D], k/v [total, Hk, D]; e4m3 q/k/v
        make an FP8 plan (descales left NULL, i.e. 1) with out's dtype as output. window:
        FlashAttention's (left, right), None = none; disable_sm90: the plan off the SM90 family."""
        plan_args = fas_ctypes.plan_args(lengths, fas_dtype(q), q.shape[1], k.shape[1], q.shape[2], causal,
                                         torch.cuda.current_stream().cuda_stream, out_dtype=fas_dtype(out),
                                         window=window)
        plan_args.softcap = softcap
        plan_args.disable_sm90 = int(disable_sm90)
        run_args = PlanRunArgs.new(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), out=out.data_ptr(),
                                   stream=plan_args.stream)
        plan = self.plan_create(plan_args)
        info = self.plan_info(plan)

        def reused():
            self.check(self.dll.fas_plan_run(plan, ctypes.byref(run_args)))

        def replanned():
            handle = self.plan_create(plan_args)
            self.check(self.dll.fas_plan_run(handle, ctypes.byref(run_args)))
            self.check(self.dll.fas_plan_destroy_async(handle, run_args.stream))  # no wait

        reused.keepalive = replanned.keepalive = (plan_args, run_args, plan)
        reused.library = self  # the library that serves the plan (Libraries picks among several)
        reused.kernel_head_dim = info.kernel_head_dim
        return reused, replanned, info.family_name.decode()


class Libraries:
    """Several artifacts in one run (e.g. minimal + hopper-check): each request goes to the
    library whose kernel head dim is the nearest to the request's (its own first; ties: the earlier
    artifact). The first that serves at all gave hd80/96/128 to hopper-check's hd192 kernels when
    hopper-check was named first: 16-bit columns 0.6-0.8x of what minimal's kernels run."""

    def __init__(self, artifacts):
        self.libs = [Library(a) for a in artifacts]

    def plan_fns(self, *args, family=None, **kwargs):
        """family: only libraries whose plan runs on this family (e.g. "sm90")."""
        head_dim = args[0].shape[2]
        errors, best = [], None
        for lib in self.libs:
            try:
                fns = lib.plan_fns(*args, **kwargs)
            except RuntimeError as error:
                errors.append(str(error))
                continue
            if family is not None and fns[2] != family:
                errors.append(f"{lib.path.name}: family {fns[2]}")
            elif fns[0].kernel_head_dim == head_dim:
                return fns
            elif best is None or fns[0].kernel_head_dim < best[0].kernel_head_dim:
                best = fns
        if best is not None:
            return best
        raise RuntimeError("; ".join(errors))

    def fa2_library(self, dtype: int, head_dim: int, causal: bool):
        """The first library with an FA2 kernel of exactly head_dim, else None."""
        return next((lib for lib in self.libs if lib.kernel_head_dim(dtype, head_dim, causal) == head_dim), None)


def _call_ms(fn) -> float:
    """One call's time, after 3 untimed calls (the first ones build plans and handles)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return max(start.elapsed_time(end), 1e-3)


def median_ms_each(fns: dict, repeats: int) -> dict:
    """Median time per call of each function, or the first line of the error a backend raised
    (a backend that refuses a shape is reported, not fatal). Each sample is enough back-to-back
    calls to fill ~20 ms, and the samples are taken in rounds, one per function in a shuffled
    order balanced over the positions (rounds.py), so that every backend of a row runs under the
    same clocks and none always runs first or follows the same other one. Timed one after
    another, the same kernel's two columns (plan reused, planning per call) came out up to 8-13%
    apart at hdim 128-256, 16k tokens, in either direction depending on the warm-up: the H100's
    clock moves with sustained load."""
    results, inner = {}, {}
    for name, fn in fns.items():
        try:
            inner[name] = max(1, min(200, int(20.0 / _call_ms(fn))))
        except RuntimeError as error:
            results[name] = str(error).splitlines()[0][:60]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = {name: [] for name in inner}
    orders = round_orders(list(inner), repeats, random.Random(0))
    for round_index, names in enumerate(orders[:1] + orders):  # round 0 warms up (the first kept round's order)
        for name in names:
            calls = inner[name]
            start.record()
            for _ in range(calls):
                fns[name]()
            end.record()
            torch.cuda.synchronize()
            if round_index:
                samples[name].append(start.elapsed_time(end) / calls)
    results.update({name: statistics.median(times) for name, times in samples.items()})
    return results


def sdpa_fn(backend, q, k, v, causal):
    """SDPA on [B, H, S, D] views of the same [B, S, H, D] tensors the library reads."""
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    gqa = q.shape[2] != k.shape[2]

    def run():
        with sdpa_kernel([backend]):
            F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=gqa)

    return run


def visible_pairs(queries: int, keys: int, window: int = -1, right: int = 0) -> int:
    """(query, key) pairs under a bottom-right causal mask: query i sees keys - queries + i + 1,
    at most window + 1 with a left window; with right > 0 also up to `right` keys past its diagonal."""
    if window < 0 and right == 0:
        return queries * (keys - queries) + queries * (queries + 1) // 2
    pairs = 0
    for i in range(queries):
        diagonal = keys - queries + i
        pairs += max(0, min(keys - 1, diagonal + right) - (max(0, diagonal - window) if window >= 0 else 0) + 1)
    return pairs


def tflops(flops: float, ms) -> str:
    if isinstance(ms, float):
        return f"{flops / (ms * 1e-3) / 1e12:.0f}"
    return ms if ms == "not built" else "n/a"


def ratio(a, b, digits: int = 2) -> str:
    """b / a as "1.23x", or "n/a" where either is not a time (a backend's refusal)."""
    return f"{b / a:.{digits}f}x" if isinstance(a, float) and isinstance(b, float) else "n/a"


def overhead(reused, replanned) -> str:
    """Planning cost as a share of one forward with the plan reused."""
    return f"{(replanned - reused) / reused * 100:.0f}%" if isinstance(reused, float) and isinstance(replanned, float) else "n/a"


def print_table(columns: list[str], rows: list) -> None:
    """One markdown table after a blank line; nothing when there are no rows."""
    if not rows:
        return
    print()
    print("| " + " | ".join(columns) + " |")
    print("|" + " --- |" * len(columns))
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
