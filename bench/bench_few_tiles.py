"""Few query tiles over long keys (issue 33, item 2): which family should serve the batch-layout
calls that FA2 splits, so that `full` can drop FA2's split-KV TUs.

    python3 bench/bench_few_tiles.py --artifact artifacts/0.4.0/full-cuda12.4-sm90a [--repeats 7]

Rows: batch x queries x keys, query/KV heads, head dim 128, bf16, causal (bottom-right). Columns,
microseconds per call on the same tensors: fwd (fas_fwd: FA2's split-KV kernel where FA2 splits
and the TU is built, else the plan route of api/fwd_route.cpp), sm90 (a contiguous plan: the SM90
kernels, which do not split the keys), paged (a plan over a paged copy of K/V with disable_sm90:
the paged family's 64-row prefill kernel, whose plan splits the keys when the query tiles leave SMs
idle), cudnn (SDPA, lower-right causal mask); then each family's splits, and paged / fwd. The last
column is the paged plan's max error against SDPA (math, fp32) on the same inputs.
Timing: common.median_ms_each (rounds in shuffled order, median of samples).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

import fas_ctypes
from bench_decode import paged_plan, plan_runner
from common import Library, fas_dtype, median_ms_each, print_table
from fas_ctypes import PlanArgs, PlanRunArgs

# (batch, queries, keys, heads_q, heads_kv). FA2 splits all but the last two. On 132 SMs the key
# split takes the first four; FA2's split 2 x 16 x 1536 and 1 x 64 x 3000 (too few keys for two
# 2048-key chunks) and 1 x 64 x 6000 (under 2^32 multiply-adds; the key split in builds without
# split-KV kernels); unsplit SM90 5 x 128 x 32k and 6 x 100 x 8k (its tiles fill half of the SMs)
# and the last two (docs/design/fa2-routing.md).
ROWS = [(1, 64, 32768, 16, 2), (1, 128, 32768, 16, 2), (1, 256, 32768, 32, 8), (2, 128, 16384, 16, 2),
        (1, 64, 6000, 16, 2), (2, 16, 1536, 16, 2), (1, 64, 3000, 16, 2), (5, 128, 32768, 16, 2),
        (6, 100, 8192, 16, 2), (1, 1024, 32768, 32, 8), (4, 512, 8192, 32, 8)]
HEAD_DIM = 128


def parse_row(text: str) -> tuple[int, int, int, int, int]:
    """'BxQxK:HQ/HK' -> (batch, queries, keys, heads_q, heads_kv)."""
    try:
        shape, heads = text.split(":")
        batch, queries, keys = (int(x) for x in shape.split("x"))
        heads_q, heads_kv = (int(x) for x in heads.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected BxQxK:HQ/HK, e.g. 2x16x1536:16/2") from None
    return batch, queries, keys, heads_q, heads_kv


def row_fns(lib: Library, batch: int, queries: int, keys: int, heads_q: int, heads_kv: int, page: int):
    """(callables by column, plan infos by column, check)."""
    torch.manual_seed(0)
    dev, dtype = "cuda", torch.bfloat16
    stream = torch.cuda.current_stream().cuda_stream
    q = torch.randn(batch, queries, heads_q, HEAD_DIM, device=dev, dtype=dtype)
    k = torch.randn(batch, keys, heads_kv, HEAD_DIM, device=dev, dtype=dtype)
    v = torch.randn_like(k)
    fns, infos = {"fwd": lib.forward_fn(q, k, v, torch.empty_like(q), True)}, {}
    contiguous = PlanArgs.new(dtype=fas_dtype(q), out_dtype=fas_dtype(q), batch_size=batch, num_heads_q=heads_q,
                              num_heads_k=heads_kv, head_dim=HEAD_DIM, causal=1, stream=stream)
    fas_ctypes.uniform_lengths(contiguous, batch, queries, keys=keys)
    runs = {"sm90": (contiguous, PlanRunArgs.new(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(),
                                                 out=torch.empty_like(q).data_ptr(), stream=stream))}
    paged_out = torch.empty_like(q)
    runs["paged"] = paged_plan(q, k, v, paged_out, page, stream, disable_sm90=1)
    for name, (args, run) in runs.items():
        try:
            fns[name], _, _, infos[name] = plan_runner(lib, args, run)
        except RuntimeError as error:
            fns[name] = error

    mask = causal_lower_right(queries, keys)
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=True)

    fns["cudnn"] = cudnn

    def check():
        if not callable(fns["paged"]):
            return "n/a"
        fns["paged"]()
        torch.cuda.synchronize()
        with sdpa_kernel([SDPBackend.MATH]):
            ref = F.scaled_dot_product_attention(qt.float(), kt.float(), vt.float(), attn_mask=mask, enable_gqa=True)
        return f"{(paged_out.float() - ref.transpose(1, 2)).abs().max().item():.1e}"

    return fns, infos, check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--page", type=int, default=256, help="keys per page of the paged column (256: the "
                        "pages a contiguous plan lists, paged.h's kContiguousPageSize)")
    parser.add_argument("--rows", nargs="*", type=parse_row, default=ROWS, metavar="BxQxK:HQ/HK",
                        help="rows instead of the default ones, e.g. 2x16x1536:16/2")
    args = parser.parse_args()
    lib = Library(args.artifact)
    print(f"{torch.cuda.get_device_name()}, {lib.path.name} {lib.version()}, bf16 hd{HEAD_DIM} causal, "
          f"paged column: pages of {args.page}, disable_sm90")
    table = []
    for batch, queries, keys, heads_q, heads_kv in args.rows:
        fns, infos, check = row_fns(lib, batch, queries, keys, heads_q, heads_kv, args.page)
        timed = median_ms_each({name: fn for name, fn in fns.items() if callable(fn)}, args.repeats)
        cell = {name: (f"{timed[name] * 1e3:.0f}" if isinstance(timed.get(name), float) else
                       str(timed.get(name, fns[name]))[:40]) for name in fns}
        splits = {name: f"{info.family_name.decode()} {info.kv_splits}" for name, info in infos.items()}
        speed = (f"{timed['paged'] / timed['fwd']:.2f}x" if isinstance(timed.get("paged"), float)
                 and isinstance(timed.get("fwd"), float) else "n/a")
        table.append([f"{batch} x {queries} x {keys}", f"{heads_q}/{heads_kv}", cell["fwd"], cell["sm90"],
                      cell["paged"], cell["cudnn"], splits.get("sm90", "-"), splits.get("paged", "-"), speed, check()])
    print_table(["row", "heads", "fwd us", "sm90 us", "paged us", "cudnn us", "sm90 plan", "paged plan",
                 "paged / fwd", "paged max err"], table)


if __name__ == "__main__":
    main()
