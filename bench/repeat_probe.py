"""Repeatability probe for the plan API: runs one plan many times over the same inputs and
reports which output rows move between runs, by how much, and against an fp32 reference.

A kernel without races writes bit-identical output on every run of one plan; a difference
names a race, and where it lands (sequence, row within the query tile, head) says which
stage of the kernel it is in. Runs on a GPU machine with PyTorch:

    python3 bench/repeat_probe.py --artifact artifacts/0.1.0/<entry> [<entry> ...] [--runs 30]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Libraries  # noqa: E402

CONFIGS = [
    # name, dtype, head_dim, causal, heads_q, heads_kv, lengths
    ("hd128 full varlen 16/2", torch.bfloat16, 128, False, 16, 2, [1, 4097, 37, 200, 129, 3, 1]),
    ("hd128 full varlen 8/8", torch.float16, 128, False, 8, 8, [1500, 2, 999, 255, 1, 700, 4097]),
    ("hd128 full 4x4096 16/2", torch.bfloat16, 128, False, 16, 2, [4096] * 4),
    ("hd128 full 1x16384 16/16", torch.bfloat16, 128, False, 16, 16, [16384]),
    ("hd128 causal varlen 16/2", torch.bfloat16, 128, True, 16, 2, [1, 4097, 37, 200, 129, 3, 1]),
    ("hd64 full varlen 16/2", torch.bfloat16, 64, False, 16, 2, [1, 4097, 37, 200, 129, 3, 1]),
    ("hd64 causal 4x4096 16/2", torch.float16, 64, True, 16, 2, [4096] * 4),
    ("hd256 full varlen 16/2", torch.bfloat16, 256, False, 16, 2, [1, 4097, 37, 200, 129, 3, 1]),
    ("hd256 causal 4x4096 8/8", torch.float16, 256, True, 8, 8, [4096] * 4),
    # FP8 e4m3 inputs, bf16 output (dtype below is the output's).
    ("fp8 hd64 full varlen 16/2", "e4m3->bf16", 64, False, 16, 2, [1, 4097, 37, 200, 129, 3, 1]),
    ("fp8 hd128 full 4x4096 16/2", "e4m3->bf16", 128, False, 16, 2, [4096] * 4),
    ("fp8 hd256 causal varlen 8/8", "e4m3->fp16", 256, True, 8, 8, [1, 4097, 37, 200, 129, 3, 1]),
]


def reference(q, k, v, lengths, causal, scale):
    """fp32 attention per sequence; [total, Hq, D]."""
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    group = q.shape[1] // k.shape[1]
    start = 0
    for n in lengths:
        qs = q[start:start + n].float().transpose(0, 1)
        ks = k[start:start + n].float().repeat_interleave(group, dim=1).transpose(0, 1)
        vs = v[start:start + n].float().repeat_interleave(group, dim=1).transpose(0, 1)
        scores = qs @ ks.transpose(1, 2) * scale
        if causal:
            scores.masked_fill_(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        out[start:start + n] = (scores.softmax(-1) @ vs).transpose(0, 1)
        start += n
    return out


def locate(token, lengths, tile):
    start = 0
    for index, n in enumerate(lengths):
        if token < start + n:
            pos = token - start
            return index, pos, pos // tile, pos % tile
        start += n
    raise ValueError(token)


def probe(lib, name, dtype, head_dim, causal, heads_q, heads_kv, lengths, runs, seed):
    torch.manual_seed(seed)
    total = sum(lengths)
    fp8 = isinstance(dtype, str)
    out_dtype = {"e4m3->bf16": torch.bfloat16, "e4m3->fp16": torch.float16}[dtype] if fp8 else dtype
    q = torch.randn(total, heads_q, head_dim, dtype=out_dtype, device="cuda")
    k = torch.randn(total, heads_kv, head_dim, dtype=out_dtype, device="cuda")
    v = torch.randn(total, heads_kv, head_dim, dtype=out_dtype, device="cuda")
    out = torch.empty_like(q)
    if fp8:
        q, k, v = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
    reused, _, family = lib.plan_fns(q, k, v, out, causal, lengths)
    ref = reference(q, k, v, lengths, causal, head_dim ** -0.5)
    first = None
    moved = torch.zeros(total, heads_q, dtype=torch.bool, device="cuda")
    unwritten = torch.zeros(total, heads_q, dtype=torch.bool, device="cuda")
    first_err = None
    runs_differing = 0
    worst_err = torch.zeros(total, heads_q, device="cuda")
    for _ in range(runs):
        out.fill_(float("nan"))
        reused()
        torch.cuda.synchronize()
        unwritten |= out.isnan().any(-1)
        err = (out.float() - ref).abs().nan_to_num(float("inf")).amax(-1)
        worst_err = torch.maximum(worst_err, err)
        if first is None:
            first = out.clone()
            first_err = err
            continue
        same = (out.view(torch.int16) == first.view(torch.int16)).all(-1)
        if not bool(same.all()):
            runs_differing += 1
            moved |= ~same
    tile = 192 if head_dim == 64 else 128
    rows = moved.nonzero().tolist()
    print(f"## {name}: family={family} total={total} runs={runs} differing_runs={runs_differing} "
          f"moved_rows={len(rows)} unwritten_rows={int(unwritten.sum())} "
          f"first_run_max_err={float(first_err.max()):.3e} worst_run_max_err={float(worst_err.max()):.3e}")
    if rows:
        per_seq, per_tile_row, per_head = {}, {}, {}
        for token, head in rows:
            seq, pos, tile_index, row = locate(token, lengths, tile)
            per_seq[(seq, tile_index)] = per_seq.get((seq, tile_index), 0) + 1
            per_tile_row[row // 16] = per_tile_row.get(row // 16, 0) + 1
            per_head[head] = per_head.get(head, 0) + 1
        print("  (seq, tile): rows moved", dict(sorted(per_seq.items())))
        print("  row-in-tile // 16: rows moved", dict(sorted(per_tile_row.items())))
        print("  head: rows moved", dict(sorted(per_head.items())))
        print(f"  worst error on moved rows {float(worst_err[moved].max()):.3e}, first-run error there "
              f"{float(first_err[moved].max()):.3e}, elsewhere {float(worst_err[~moved].max()):.3e}")
    return runs_differing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifact", type=Path, nargs="+", required=True)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--only", default="", help="substring of the config names to run")
    args = parser.parse_args()
    lib = Libraries(args.artifact)
    print(f"GPU: {torch.cuda.get_device_name()}")
    failing = 0
    for seed, config in enumerate(CONFIGS):
        if args.only and args.only not in config[0]:
            continue
        try:
            failing += probe(lib, *config, args.runs, seed) > 0
        except RuntimeError as error:
            print(f"## {config[0]}: skipped ({str(error).splitlines()[0]})")
    print(f"configs with moving output: {failing}")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
