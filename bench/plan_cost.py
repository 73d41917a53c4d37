"""Host cost of the plan API: median wall time of fas_plan_create, fas_plan_destroy (after a
synchronize), fas_plan_destroy_async (right after the plan's run, no synchronize) and one
fas_plan_run enqueue, for a few layouts (bf16, 16 heads). Runs on a GPU machine with PyTorch:

    python3 bench/plan_cost.py --artifact artifacts/0.1.0/minimal-cuda12.4-sm90a [more ...]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time
from pathlib import Path

import torch

from common import QWEN_VARLEN_LENGTHS, Libraries

LAYOUTS = [([1024] * 16, 64, False), ([1024] * 16, 128, True), ([4096] * 4, 128, True),
           ([16384], 64, True), ([16384], 128, False), (QWEN_VARLEN_LENGTHS, 128, True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifact", type=Path, nargs="+", required=True)
    parser.add_argument("--count", type=int, default=300)
    args = parser.parse_args()
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
