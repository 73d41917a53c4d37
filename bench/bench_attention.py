"""Attention forward benchmark: libflash_attn_standalone against PyTorch SDPA (cuDNN and
flash backends), measured in the same run on the same GPU.

Runs on a GPU machine with PyTorch (the library itself never needs it); loads the library
from one or more exported artifact folders through ctypes (a request goes to the library whose
kernel head dim is nearest its own, so e.g. minimal + hopper-check cover head dims 64-256 and
FP8, in either order):

    python3 bench/bench_attention.py --artifact artifacts/0.1.0/minimal-cuda12.4-sm90a \
        artifacts/0.1.0/hoppercheck-cuda12.4-sm90a

Prints one markdown table: TFLOPS per implementation and the library's ratio to cuDNN.
The library runs through its plan API (fas_plan_create once per batch layout, then
fas_plan_run), which picks the SM90 family where it is built and FA2 otherwise; it is
timed with the plan reused and, separately, with planning inside every call (create, run,
fas_plan_destroy_async on the same stream, no synchronize: how an engine that plans per batch
calls it), whose extra time is given as a share of one forward. The FP8 column
runs the same shape with the inputs rounded to e4m3 (descales 1) and the row's dtype as
output. The FA2 column is the one-call fas_fwd, which always runs the FA2 family.
FLOPs are counted as 4 * B * H * Sq * Sk * D (two matmuls), halved for causal masks
(the exact causal count, 4*B*H*D*Sq*(Sq+1)/2 for Sq == Sk, is within 1/S of that).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend

from common import (QWEN_VARLEN_LENGTHS, Libraries, median_ms_each, overhead, print_table, ratio, sdpa_fn,
                    tflops, visible_pairs)
from fas_ctypes import Dtype

def timed_cells(flops: float, fns: dict, repeats: int) -> tuple:
    """The measured columns of a row (library plan reused, planning in each call, planning
    cost, FP8, FP8 / 16-bit, FA2, cuDNN, flash, library / cuDNN) from `fns` timed together;
    a backend missing from `fns` is "not built"."""
    times = median_ms_each(fns, repeats)
    ours, with_plan, fp8, fa2, cudnn, flash = (
        times.get(name, "not built") for name in ("ours", "with_plan", "fp8", "fa2", "cudnn", "flash"))
    return (tflops(flops, ours), tflops(flops, with_plan), overhead(ours, with_plan), tflops(flops, fp8),
            ratio(fp8, ours), tflops(flops, fa2), tflops(flops, cudnn), tflops(flops, flash), ratio(ours, cudnn))


def dense_rows(libs, args):
    rows = []
    for dtype_name in args.dtypes:
        dtype = getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}[dtype_name])
        for head_dim in args.head_dims:
            for causal in (False, True):
                fa2_lib = libs.fa2_library(Dtype.BF16 if dtype_name == "bf16" else Dtype.FP16, head_dim, causal)
                for seqlen in args.seqlens:
                    batch = max(1, args.total_tokens // seqlen)
                    shape = (batch, seqlen, args.heads, head_dim)
                    q, k, v = (torch.randn(shape, dtype=dtype, device="cuda") for _ in range(3))
                    out = torch.empty_like(q)
                    flops = 4.0 * batch * args.heads * seqlen * seqlen * head_dim / (2 if causal else 1)
                    family, fns = "-", {}
                    flat = [t.view(batch * seqlen, args.heads, head_dim) for t in (q, k, v, out)]
                    try:
                        fns["ours"], fns["with_plan"], family = libs.plan_fns(*flat, causal, [seqlen] * batch)
                    except RuntimeError:
                        pass  # no family of these builds serves the shape
                    # FP8 e4m3 inputs (same values, rounded), output in this row's dtype.
                    flat8 = [t.to(torch.float8_e4m3fn) for t in flat[:3]] + [flat[3]]
                    try:
                        fns["fp8"] = libs.plan_fns(*flat8, causal, [seqlen] * batch)[0]
                    except RuntimeError:
                        pass
                    if fa2_lib is not None:
                        fns["fa2"] = fa2_lib.forward_fn(q, k, v, out, causal)
                    fns["cudnn"] = sdpa_fn(SDPBackend.CUDNN_ATTENTION, q, k, v, causal)
                    fns["flash"] = sdpa_fn(SDPBackend.FLASH_ATTENTION, q, k, v, causal)
                    rows.append((dtype_name, head_dim, "causal" if causal else "full", f"{batch}x{seqlen}", family,
                                 *timed_cells(flops, fns, args.repeats)))
    return rows


def vision_rows(libs, args):
    """The Qwen2.5-VL vision tower (16 heads, head dim 80, bidirectional): windows of 64 and
    256 patches (16k tokens), whole images of 1296, 4096 and 16384 patches; bf16."""
    rows = []
    for batch, seqlen, what in ((256, 64, "windows"), (64, 256, "windows"), (1, 1296, "image"), (1, 4096, "image"),
                                (1, 16384, "image")):
        q, k, v = (torch.randn(batch, seqlen, 16, 80, dtype=torch.bfloat16, device="cuda") for _ in range(3))
        out = torch.empty_like(q)
        flat = [t.view(batch * seqlen, 16, 80) for t in (q, k, v, out)]
        fns = {}
        fns["ours"], fns["with_plan"], family = libs.plan_fns(*flat, False, [seqlen] * batch)
        fns["cudnn"] = sdpa_fn(SDPBackend.CUDNN_ATTENTION, q, k, v, False)
        fns["flash"] = sdpa_fn(SDPBackend.FLASH_ATTENTION, q, k, v, False)
        flops = 4.0 * batch * 16 * seqlen * seqlen * 80
        rows.append(("bf16", 80, f"vision {what}", f"{batch}x{seqlen}", family,
                     *timed_cells(flops, fns, args.repeats)))
    return rows


def window_rows(libs, args):
    """A causal sliding window (left 4096 by default, Mistral-like; --windows takes several) on one
    32k sequence, hdim 128 (--window-head-dim), against the same plan without a window, for bf16
    inputs and FP8 e4m3 ones (bf16 out; a build whose FP8 plans take no window prints why); the window's TFLOPS count
    the scores inside the window only (query i sees min(i, left) + 1 keys), so equal TFLOPS mean
    equal speed per useful score. Every width's plan is timed in the same rounds, so the times of
    several widths show what an item costs beside its key tiles. --window-right R > 0: the windows
    are (left, R), non-causal plans (query i also sees R keys past its diagonal), counted the same
    way against the causal plan without a window, and for bf16 also timed off SM90 (FA2, which
    served every right window before 2026-12-02)."""
    seqlen, heads, head_dim, right = 32768, 16, args.window_head_dim, args.window_right
    q, k, v = (torch.randn(seqlen, heads, head_dim, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    out = torch.empty_like(q)
    rows = []
    for name, inputs in (("bf16", (q, k, v)), ("e4m3->bf16", [t.to(torch.float8_e4m3fn) for t in (q, k, v)])):
        try:
            fns = {"plain": libs.plan_fns(*inputs, out, True, [seqlen])}
            fns.update({f"window {left}": libs.plan_fns(*inputs, out, right == 0, [seqlen], window=(left, right))
                        for left in args.windows})
            if right > 0 and name == "bf16":  # what served right windows before SM90 did: FA2, where built
                for left in args.windows:
                    try:
                        fns[f"fa2 {left}"] = libs.plan_fns(*inputs, out, False, [seqlen], window=(left, right),
                                                           disable_sm90=True)
                    except RuntimeError:
                        pass  # no FA2 kernel in this build: the SM90 rows stand alone
        except RuntimeError as error:
            rows.append((name, head_dim, f"window ({args.windows[0]}, {right})", f"1x{seqlen}", "not built",
                         str(error)[:60], "-", "-"))
            continue
        times = median_ms_each({key: fn[0] for key, fn in fns.items()}, args.repeats)
        plain_tflops = 4.0 * heads * head_dim * visible_pairs(seqlen, seqlen) / (times["plain"] * 1e9)
        rows.append((name, head_dim, "causal, no window", f"1x{seqlen}", fns["plain"][2], f"{plain_tflops:.0f}",
                     f"{times['plain']:.3f} ms", "-"))
        for left in args.windows:
            pairs = visible_pairs(seqlen, seqlen, left, right)
            for key, mask in ((f"window {left}", "causal, " if right == 0 else ""), (f"fa2 {left}", "FA2: ")):
                if key in times:
                    window_tflops = 4.0 * heads * head_dim * pairs / (times[key] * 1e9)
                    rows.append((name, head_dim, f"{mask}window ({left}, {right})", f"1x{seqlen}", fns[key][2],
                                 f"{window_tflops:.0f}", f"{times[key]:.3f} ms", f"{window_tflops / plain_tflops:.2f}x"))
    return rows


def softcap_rows(libs, args):
    """Softcap 50 (Gemma 2) against the same SM90 plan without it: hdim 128 and 256, causal and
    not, one 16384-token sequence, bf16 inputs and FP8 e4m3 ones (bf16 out); the same FLOP count
    for both."""
    rows = []
    seqlen, heads = 16384, 16
    for head_dim in (128, 256):
        q, k, v = (torch.randn(seqlen, heads, head_dim, dtype=torch.bfloat16, device="cuda") for _ in range(3))
        out = torch.empty_like(q)
        for name, inputs in (("bf16", (q, k, v)), ("e4m3->bf16", [t.to(torch.float8_e4m3fn) for t in (q, k, v)])):
            for causal in (False, True):
                flops = 4.0 * heads * seqlen * seqlen * head_dim / (2 if causal else 1)
                try:
                    plain = libs.plan_fns(*inputs, out, causal, [seqlen], family="sm90")[0]
                    capped = libs.plan_fns(*inputs, out, causal, [seqlen], family="sm90", softcap=50.0)[0]
                except RuntimeError as error:
                    rows.append((name, head_dim, "causal" if causal else "full", f"1x{seqlen}", "not built",
                                 str(error)[:60], "-", "-"))
                    continue
                times = median_ms_each({"plain": plain, "capped": capped}, args.repeats)
                rows.append((name, head_dim, ("causal" if causal else "full") + ", softcap 50", f"1x{seqlen}", "sm90",
                             tflops(flops, times["capped"]), tflops(flops, times["plain"]),
                             ratio(times["capped"], times["plain"])))
    return rows


def varlen_row(libs, args):
    """Qwen2.5-VL-3B-like LLM batch: 16 query / 2 KV heads, hdim 128, causal, 7 sequences,
    16k tokens. SDPA has no varlen entry point: its number is one call per sequence."""
    lengths = QWEN_VARLEN_LENGTHS
    dtype = torch.bfloat16
    total = sum(lengths)
    q = torch.randn(total, 16, 128, dtype=dtype, device="cuda")
    k, v = (torch.randn(total, 2, 128, dtype=dtype, device="cuda") for _ in range(2))
    out = torch.empty_like(q)
    offsets = [0]
    for length in lengths:
        offsets.append(offsets[-1] + length)
    flops = sum(4.0 * 16 * n * n * 128 / 2 for n in lengths)
    fns = {}
    fns["ours"], fns["with_plan"], family = libs.plan_fns(q, k, v, out, True, lengths)
    pieces = [(q[a:b].unsqueeze(0), k[a:b].unsqueeze(0), v[a:b].unsqueeze(0)) for a, b in zip(offsets, offsets[1:])]

    def looped(backend):
        per_sequence = [sdpa_fn(backend, *p, True) for p in pieces]
        return lambda: [f() for f in per_sequence]

    fns["cudnn"] = looped(SDPBackend.CUDNN_ATTENTION)
    fns["flash"] = looped(SDPBackend.FLASH_ATTENTION)
    cu = torch.tensor(offsets, dtype=torch.int32, device="cuda")
    fa2_lib = libs.fa2_library(Dtype.BF16, 128, True)
    if fa2_lib is not None:
        fns["fa2"] = fa2_lib.forward_fn(q, k, v, out, True, cu, cu, max(lengths), max(lengths))
    try:
        flat8 = [t.to(torch.float8_e4m3fn) for t in (q, k, v)]
        fns["fp8"] = libs.plan_fns(*flat8, out, True, lengths)[0]
    except RuntimeError:
        pass
    return ("bf16", 128, "causal GQA 16/2", f"varlen 7 seqs {total} tok", family, *timed_cells(flops, fns, args.repeats))


SHARED_COLUMNS = ["dtype", "hdim", "mask", "batch x seqlen", "family"]
FORWARD_COLUMNS = SHARED_COLUMNS + [
    "library TFLOPS, plan reused", "library TFLOPS, planning in each call", "planning cost (% of one forward)",
    "library FP8 e4m3 in TFLOPS, plan reused", "FP8 / 16-bit (library)", "library FA2 (fas_fwd) TFLOPS",
    "SDPA cuDNN TFLOPS", "SDPA flash TFLOPS", "library (plan reused) / cuDNN"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifact", type=Path, nargs="+", required=True,
                        help="artifacts/<version>/<entry>/ folder(s); a request uses the one whose kernel "
                             "head dim is nearest its own")
    parser.add_argument("--dtypes", nargs="+", default=["bf16", "fp16"])
    parser.add_argument("--head-dims", nargs="+", type=int, default=[64, 128, 256])
    parser.add_argument("--seqlens", nargs="+", type=int, default=[1024, 4096, 16384])
    parser.add_argument("--total-tokens", type=int, default=16384)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--windows", nargs="+", type=int, default=[4096], help="left widths of the window table")
    parser.add_argument("--window-head-dim", type=int, default=128, help="head dim of the window table")
    parser.add_argument("--window-right", type=int, default=0,
                        help="right width of the window table's windows (> 0: non-causal plans with (left, right) "
                        "windows, also timed on FA2 for bf16)")
    parser.add_argument("--only", nargs="+", choices=["dense", "varlen", "vision", "window", "softcap"],
                        default=["dense", "varlen"], help="which tables (vision: Qwen2.5-VL's tower, hdim 80; "
                        "window: a 4096-key sliding window on 32k tokens against no window; softcap: softcap 50 "
                        "against none on SM90)")
    args = parser.parse_args()
    torch.manual_seed(0)
    libs = Libraries(args.artifact)
    names = ", ".join(a.name for a in args.artifact)
    print(f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; cuDNN {torch.backends.cudnn.version()}; "
          f"library {libs.libs[0].version()} ({names})")
    print(f"heads {args.heads}, {args.total_tokens} tokens per shape, median of {args.repeats} timings, taken in shuffled rounds over the backends")
    rows = dense_rows(libs, args) if "dense" in args.only else []
    rows += vision_rows(libs, args) if "vision" in args.only else []
    rows += [varlen_row(libs, args)] if "varlen" in args.only else []
    print_table(FORWARD_COLUMNS, rows)
    if "window" in args.only:
        print_table(SHARED_COLUMNS + ["library TFLOPS (window: scores inside it)", "time", "window / no window"],
                    window_rows(libs, args))
    if "softcap" in args.only:
        print_table(SHARED_COLUMNS + ["library TFLOPS with softcap", "without", "softcap / without"],
                    softcap_rows(libs, args))


if __name__ == "__main__":
    main()
