"""Host cost of the plan API: median wall time of fas_plan_create, fas_plan_destroy (after a
synchronize), fas_plan_destroy_async (right after the plan's run, no synchronize) and one
fas_plan_run enqueue, for a few layouts (bf16, 16 heads). Runs on a GPU machine with PyTorch:

    python3 bench/plan_cost.py --artifact artifacts/0.1.0/minimal-cuda12.4-sm90a [more ...]
    python3 bench/plan_cost.py --artifact DIR --decode   # planning per call, decode rows in turn

--decode: decode rows (bf16, hd128, one query, contiguous KV) one after another, as an engine
whose batch changes meets them: per row, time per call with one plan reused against a plan made,
run and released with fas_plan_destroy_async in every call (no synchronize), and the host time
of those fas_plan_create calls (which includes waiting for the device once 8 released plans are
still in flight). A later row whose plan needs a larger block than the earlier rows left in the
library's block cache shows here (docs/design/fa2-routing.md).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time
from pathlib import Path

import torch

import fas_ctypes
from common import QWEN_VARLEN_LENGTHS, Libraries, Library, fas_dtype

DECODE_ROWS = [(64, 4096, 16, 2), (8, 32768, 16, 2), (1, 131072, 16, 2), (1, 131072, 8, 1), (4, 32768, 16, 2)]


def decode_rows(lib: Library, count: int) -> None:
    stream = torch.cuda.current_stream().cuda_stream
    print(f"GPU: {torch.cuda.get_device_name()}; {count} calls each (second of two passes)\n")
    print("| batch x KV | heads | splits x CTAs, CTAs/SM | plan reused (us/call) | planned per call (us/call) "
          "| fas_plan_create in those calls (us) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for batch, kv_len, heads_q, heads_kv in DECODE_ROWS:
        q = torch.randn(batch, 1, heads_q, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, kv_len, heads_kv, 128, device="cuda", dtype=torch.bfloat16)
        v, out = torch.randn_like(k), torch.empty_like(q)
        plan_args = fas_ctypes.PlanArgs.new(dtype=fas_dtype(q), out_dtype=fas_dtype(q), batch_size=batch,
                                            num_heads_q=heads_q, num_heads_k=heads_kv, head_dim=128, causal=1,
                                            stream=stream)
        fas_ctypes.uniform_lengths(plan_args, batch, 1, keys=kv_len)
        run = fas_ctypes.PlanRunArgs.new(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), out=out.data_ptr(),
                                         stream=stream)
        kept = lib.plan_create(plan_args)
        info = lib.plan_info(kept)
        per_call = {}
        for mode in ("reused", "per call"):
            for _ in range(2):  # the second pass is kept
                torch.cuda.synchronize()
                start, creating = time.perf_counter(), 0.0
                for _ in range(count):
                    if mode == "reused":
                        lib.check(lib.dll.fas_plan_run(kept, ctypes.byref(run)))
                        continue
                    before = time.perf_counter()
                    handle = lib.plan_create(plan_args)
                    creating += time.perf_counter() - before
                    lib.check(lib.dll.fas_plan_run(handle, ctypes.byref(run)))
                    lib.check(lib.dll.fas_plan_destroy_async(handle, stream))
                torch.cuda.synchronize()
                per_call[mode] = ((time.perf_counter() - start) / count * 1e6, creating / count * 1e6)
        lib.check(lib.dll.fas_plan_destroy(kept))
        print(f"| {batch} x {kv_len} | {heads_q}/{heads_kv} | {info.kv_splits} x {info.num_ctas}, {info.ctas_per_sm} "
              f"| {per_call['reused'][0]:.0f} | {per_call['per call'][0]:.0f} | {per_call['per call'][1]:.0f} |")

LAYOUTS = [([1024] * 16, 64, False), ([1024] * 16, 128, True), ([4096] * 4, 128, True),
           ([16384], 64, True), ([16384], 128, False), (QWEN_VARLEN_LENGTHS, 128, True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifact", type=Path, nargs="+", required=True)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--decode", action="store_true", help="planning per call over decode rows in turn")
    args = parser.parse_args()
    if args.decode:
        decode_rows(Library(args.artifact[0]), args.count)
        return
    libs = Libraries(args.artifact)
    print(f"GPU: {torch.cuda.get_device_name()}; {args.count} calls each, median\n")
    print("| layout | hdim | mask | family | fas_plan_create (us) | fas_plan_destroy (us) | "
          "fas_plan_destroy_async (us) | fas_plan_run enqueue (us) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for lengths, head_dim, causal in LAYOUTS:
        total = sum(lengths)
        q, k, v = (torch.randn(total, 16, head_dim, dtype=torch.bfloat16, device="cuda") for _ in range(3))
        out = torch.empty_like(q)
        reused, _, family = libs.plan_fns(q, k, v, out, causal, lengths)
        plan_args = reused.keepalive[0]
        owner = reused.library
        creates, destroys = [], []
        for _ in range(args.count):
            handle = ctypes.c_void_p()
            start = time.perf_counter()
            status = owner.dll.fas_plan_create(ctypes.byref(plan_args), ctypes.byref(handle))
            created = time.perf_counter()
            if status != 0:
                raise SystemExit(f"fas_plan_create failed: {owner.last_error()}")
            torch.cuda.synchronize()
            start_destroy = time.perf_counter()
            owner.dll.fas_plan_destroy(handle)
            creates.append(created - start)
            destroys.append(time.perf_counter() - start_destroy)
        run_args = reused.keepalive[1]
        async_destroys = []
        for _ in range(args.count):
            handle = ctypes.c_void_p()
            owner.dll.fas_plan_create(ctypes.byref(plan_args), ctypes.byref(handle))
            owner.dll.fas_plan_run(handle, ctypes.byref(run_args))
            start = time.perf_counter()
            status = owner.dll.fas_plan_destroy_async(handle, run_args.stream)
            async_destroys.append(time.perf_counter() - start)
            if status != 0:
                raise SystemExit(f"fas_plan_destroy_async failed: {owner.last_error()}")
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.count):
            reused()
        enqueue = (time.perf_counter() - start) / args.count
        torch.cuda.synchronize()
        name = f"{len(lengths)}x{lengths[0]}" if len(set(lengths)) == 1 else f"varlen {len(lengths)} seqs"
        print(f"| {name} | {head_dim} | {'causal' if causal else 'full'} | {family} | "
              f"{statistics.median(creates) * 1e6:.0f} | {statistics.median(destroys) * 1e6:.0f} | "
              f"{statistics.median(async_destroys) * 1e6:.0f} | {enqueue * 1e6:.0f} |")


if __name__ == "__main__":
    main()
