"""Where a decode step's time goes: the kernels of back-to-back calls as the CUDA profiler
(CUPTI, through torch.profiler) records them, for the library and SDPA cuDNN on the rows of
bench_decode.py, and the GPU's own memory ceilings measured in the same run.

    python3 bench/profile_decode.py --artifact artifacts/0.2.0/minimal-cuda12.4-sm90a
    python3 bench/profile_decode.py --artifact DIR --fp8-kv --rows 64x4096 8x32768:16/2 --head-dim 128

--fp8-kv profiles bench_fp8_kv's rows instead (pages of 16 shuffled; columns 16-bit, e4m3 and
e4m3 q: a bf16 cache, an e4m3 one, e4m3 q over it), so that a split e4m3 plan's kernels (decode,
merge) and the gaps between them can be set against an unsplit row's of the same bytes.

Per column: the period of one call (first kernel start to last kernel end over the calls,
divided by the calls), each kernel's mean duration and share, and the time no kernel of the
column ran (launch gaps). Ceilings: bench_decode.ceilings (a 1 GiB device-to-device copy, bytes
read + written / time, and a plain read of 1 GiB), medians of 20.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from common import Library
from bench_decode import HEAD_DIM, ROWS, ceilings, decode_fns, parse_row
from bench_fp8_kv import row_fns

CALLS = 50


def kernels_of(fn, calls: int):
    """(period per call in us, {kernel name: (mean us, count)}, idle us per call)."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    spans = sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA and "Memcpy" not in e.name)
    if not spans:
        return None
    period = (spans[-1][1] - spans[0][0]) / calls
    by_name = defaultdict(list)
    busy, reach = 0.0, spans[0][0]
    for start, end, name in spans:
        by_name[name].append(end - start)
        busy += max(0.0, end - max(start, reach))  # union of kernel intervals (overlaps count once)
        reach = max(reach, end)
    idle = ((spans[-1][1] - spans[0][0]) - busy) / calls
    return period, {n: (statistics.mean(d), len(d)) for n, d in by_name.items()}, idle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifact", required=True, help="exported artifact folder (lib/, include/)")
    parser.add_argument("--rows", nargs="*", default=[f"{b}x{s}" for b, s in ROWS])
    parser.add_argument("--columns", nargs="*", help="default: contiguous page64 cudnn (--fp8-kv: 16-bit e4m3)")
    parser.add_argument("--fp8-kv", action="store_true", help="bench_fp8_kv's columns (rows: BATCHxKV[:HQ/HK])")
    parser.add_argument("--head-dim", type=int, default=HEAD_DIM, help="with --fp8-kv")
    args = parser.parse_args()
    columns = args.columns or (["16-bit", "e4m3"] if args.fp8_kv else ["contiguous", "page64", "cudnn"])
    lib = Library(args.artifact)
    copy, read = ceilings()
    print(f"GPU: {torch.cuda.get_device_name()}; library {lib.version()}; ceilings: 1 GiB copy {copy:.2f} TB/s "
          f"(read + write), 1 GiB plain read {read:.2f} TB/s\n")
    print("| row | column | period per call | TB/s | idle per call | kernel | mean | calls |")
    print("| --- " * 8 + "|")
    for row in args.rows:
        batch, kv_len, heads_q, heads_kv = parse_row(row)[:4]
        if args.fp8_kv:
            # _inputs: the tensors the plans read, alive until the next row's replace them
            fns, _inputs = row_fns(lib, batch, kv_len, heads_q, heads_kv, args.head_dim, fp8_q="e4m3 q" in columns)
            head_dim = args.head_dim
        else:
            fns, _, _ = decode_fns(lib, batch, kv_len, heads_q, heads_kv, columns=tuple(columns))
            head_dim = HEAD_DIM
        # K and V bytes: 1 per element in the e4m3 caches, else 2
        nbytes = {c: batch * kv_len * heads_kv * head_dim * 2 * (1 if c.startswith("e4m3") else 2) for c in columns}
        for column in columns:
            result = kernels_of(fns[column], CALLS)
            if result is None:
                print(f"| {row} | {column} | no kernels recorded | | | | | |")
                continue
            period, kernels, idle = result
            for i, (name, (mean, count)) in enumerate(sorted(kernels.items(), key=lambda kv: -kv[1][0])):
                head = (f"| {row} | {column} | {period:.1f} us | {nbytes[column] / period / 1e6:.2f} | {idle:.1f} us "
                        if i == 0 else "| | | | | ")
                print(f"{head}| {name[:70]} | {mean:.1f} us | {count} |")
        del fns
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
