"""Attention sinks at gpt-oss's shapes (issue 34): the same plan with and without sinks, bf16,
head dim 64, GQA 64/8 unless told, causal, layers alternating a window of 128 keys and full
attention.

    python3 bench/bench_sinks.py --artifact DIR [--prefill 4096 8192 16384] [--decode 64x4096 8x32768] [--repeats 7]

Prefill rows: one sequence of N tokens attending its own keys (a varlen plan: the SM90 family).
Decode rows: BATCH sequences of one query over KV keys in a paged cache (pages of 16, shuffled:
the paged family's decode kernel). Each row times two plans of one layout in the same rounds
(common.median_ms_each): without sinks, and with use_sinks and a sink logit per query head; the
outputs' max |difference| is printed beside (sinks move every row, so it is not zero). Issue 34's
bar: with / without <= 1.03 on every row.
"""

from __future__ import annotations

import argparse
import ctypes

import torch

import fas_ctypes
from common import Library, median_ms_each
from fas_ctypes import PlanArgs, PlanRunArgs

PAGE = 16
WINDOW = 128


def window_args(args: PlanArgs, window: bool) -> PlanArgs:
    if window:
        args.use_window, args.window_size_left, args.window_size_right = 1, WINDOW, 0
    return args


def prefill_plan(tokens: int, heads_q: int, heads_kv: int, head_dim: int, window: bool, sinks: bool, stream: int):
    args = PlanArgs.new(dtype=fas_ctypes.Dtype.BF16, out_dtype=fas_ctypes.Dtype.BF16, batch_size=1,
                        num_heads_q=heads_q, num_heads_k=heads_kv, head_dim=head_dim, causal=1, stream=stream,
                        use_sinks=int(sinks))
    return window_args(fas_ctypes.uniform_lengths(args, 1, tokens, keys=tokens), window)


def decode_plan(batch: int, kv_len: int, num_pages: int, heads_q: int, heads_kv: int, head_dim: int, window: bool,
                sinks: bool, stream: int):
    args = fas_ctypes.uniform_paged_args(fas_ctypes.Dtype.BF16, batch, 1, kv_len, heads_q, heads_kv, head_dim, PAGE,
                                         num_pages, stream, use_sinks=int(sinks))
    return window_args(args, window)


def time_pair(lib: Library, make_args, tensors: dict, heads_q: int, repeats: int):
    """Times the plan of make_args(sinks) without and with sinks; (times, max |diff|, family)."""
    sinks = (torch.rand(heads_q, device="cuda") * 10 - 2).float()  # spread over [-2, 8]
    outs, plans, runs = {}, {}, {}
    for name in ("plain", "sinks"):
        plans[name] = lib.plan_create(make_args(name == "sinks"))
        outs[name] = torch.empty_like(tensors["q"])
        runs[name] = PlanRunArgs.new(q=tensors["q"].data_ptr(), k=tensors["k"].data_ptr(), v=tensors["v"].data_ptr(),
                                     out=outs[name].data_ptr(), stream=torch.cuda.current_stream().cuda_stream,
                                     page_indices=tensors["ids"].data_ptr() if "ids" in tensors else 0,
                                     sinks=sinks.data_ptr() if name == "sinks" else 0)
    fns = {name: (lambda n=name: lib.check(lib.dll.fas_plan_run(plans[n], ctypes.byref(runs[n])))) for name in plans}
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    diff = (outs["plain"].float() - outs["sinks"].float()).abs().max().item()
    family = lib.plan_info(plans["sinks"]).family_name.decode()
    times = median_ms_each(fns, repeats)
    for plan in plans.values():
        lib.check(lib.dll.fas_plan_destroy(plan))
    return times, diff, family


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifact", required=True, help="an unpacked artifact folder (lib/, include/)")
    parser.add_argument("--prefill", nargs="*", type=int, default=[4096, 8192, 16384], help="tokens of one sequence")
    parser.add_argument("--decode", nargs="*", default=["64x4096", "8x32768", "256x1024"], help="BATCHxKV rows")
    parser.add_argument("--heads", default="64/8", help="HQ/HK")
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    lib = Library(args.artifact)
    heads_q, heads_kv = (int(x) for x in args.heads.split("/"))
    d, dev, bf16 = args.head_dim, "cuda", torch.bfloat16
    stream = torch.cuda.current_stream().cuda_stream
    print(f"{torch.cuda.get_device_name()}, flash_attn_standalone {lib.version()}, bf16 hd{d} GQA {heads_q}/{heads_kv}, "
          f"causal; decode over pages of {PAGE}")
    print("| row | mask | without sinks | with sinks | with / without | max abs diff | family |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    rows = [("prefill", n) for n in args.prefill] + [("decode", r) for r in args.decode]
    for kind, row in rows:
        if kind == "prefill":
            tensors = {"q": torch.randn(row, heads_q, d, device=dev, dtype=bf16),
                       "k": torch.randn(row, heads_kv, d, device=dev, dtype=bf16)}
            tensors["v"] = torch.randn_like(tensors["k"])
            label = f"prefill 1 x {row}"
        else:
            batch, kv_len = (int(x) for x in row.split("x"))
            pages = batch * -(-kv_len // PAGE)
            tensors = {"q": torch.randn(batch, heads_q, d, device=dev, dtype=bf16),
                       "k": torch.randn(pages, PAGE, heads_kv, d, device=dev, dtype=bf16),
                       "ids": torch.randperm(pages, device=dev).to(torch.int32)}
            tensors["v"] = torch.randn_like(tensors["k"])
            label = f"decode {batch} x {kv_len}"
        for window in (True, False):
            if kind == "prefill":
                make = lambda sinks, w=window, n=row: prefill_plan(n, heads_q, heads_kv, d, w, sinks, stream)  # noqa: E731
            else:
                make = lambda sinks, w=window, b=batch, k=kv_len, p=pages: decode_plan(  # noqa: E731
                    b, k, p, heads_q, heads_kv, d, w, sinks, stream)
            times, diff, family = time_pair(lib, make, tensors, heads_q, args.repeats)
            plain, sinks = times["plain"], times["sinks"]
            ratio = f"{sinks / plain:.3f}" if isinstance(plain, float) and isinstance(sinks, float) else "-"
            show = [f"{t * 1e3:.1f} us" if isinstance(t, float) else t for t in (plain, sinks)]
            mask = f"window {WINDOW}" if window else "full"
            print(f"| {label} | {mask} | {show[0]} | {show[1]} | {ratio} | {diff:.2e} | {family} |", flush=True)


if __name__ == "__main__":
    main()
