"""Two builds of the library timed in the same shuffled rounds, row by row: a change's speed
against its baseline (issue 33: no bench row slower) without the spread between two runs.

    python3 bench/bench_pair.py --before OLD_ARTIFACT --after NEW_ARTIFACT [--only dense fwd ...]

Rows are bench_attention.py's (16 heads, 16384 tokens per shape; the vision tower at hd80, the
Qwen-like varlen batch, the 4096-key window, softcap 50), bench_few_tiles.py's fas_fwd rows and
bench_chunked_prefill.py's paged rows (4 x 2048 queries on 16384 keys in pages of 16, GQA 16/2:
the plain plan, softcap 50 and a 4096-key window, at each of --head-dims that the paged kernels have).
Each row times, for both builds in one median_ms_each dict: the plan reused (16-bit, and FP8
e4m3 inputs for dense, varlen, window and softcap rows) and fas_fwd on the batch-layout tensors (dense and few-tiles rows).
Prints microseconds and after / before per (row, path); a path a build does not serve shows its
error. Needs PyTorch and a GPU; both builds load into one process (paths differ, so does the
handle), and the newer binding works with older builds (size-prefixed structs).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from bench_chunked_prefill import HEADS_KV, HEADS_Q, window_fields
from bench_decode import paged_plan, plan_runner
from bench_few_tiles import ROWS as FEW_TILE_ROWS
from common import QWEN_VARLEN_LENGTHS, Library, median_ms_each, print_table

BUILDS = ("before", "after")


def _try(make):
    """make() -> a callable, or the first line of the RuntimeError it raised (a refused request)."""
    try:
        return make()
    except RuntimeError as error:
        return str(error).splitlines()[0][:50]


def _per_build(libs: dict, make) -> dict:
    """make(lib) -> a callable, for each build: {build: callable or refusal}."""
    return {build: _try(lambda lib=lib: make(lib)) for build, lib in libs.items()}


def _table_rows(label: str, paths: dict, repeats: int) -> list:
    """paths: path name -> {build: callable or refusal}; one table row per path."""
    fns = {(path, build): fn for path, by_build in paths.items() for build, fn in by_build.items() if callable(fn)}
    times = median_ms_each(fns, repeats)
    rows = []
    for path, by_build in paths.items():
        cells = [times.get((path, b), by_build[b]) if callable(by_build[b]) else by_build[b] for b in BUILDS]
        shown = [f"{c * 1e3:.1f}" if isinstance(c, float) else c for c in cells]
        change = f"{cells[1] / cells[0]:.3f}" if all(isinstance(c, float) for c in cells) else "n/a"
        rows.append([label, path, *shown, change])
    return rows


def _varlen(libs, q, k, v, out, causal, lengths, fp8=False, **masks) -> dict:
    paths = {"plan": _per_build(libs, lambda lib: lib.plan_fns(q, k, v, out, causal, lengths, **masks)[0])}
    if fp8:
        q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
        paths["fp8 plan"] = _per_build(libs, lambda lib: lib.plan_fns(q8, k8, v8, out, causal, lengths, **masks)[0])
    return paths


def dense(libs, args):
    for dtype_name in args.dtypes:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
        for head_dim in args.head_dims:
            for causal in (False, True):
                for seqlen in args.seqlens:
                    batch = max(1, 16384 // seqlen)
                    q, k, v = (torch.randn(batch, seqlen, 16, head_dim, dtype=dtype, device="cuda") for _ in range(3))
                    out = torch.empty_like(q)
                    flat = [t.view(batch * seqlen, 16, head_dim) for t in (q, k, v, out)]
                    paths = _varlen(libs, *flat, causal, [seqlen] * batch, fp8=True)
                    paths["fwd"] = _per_build(libs, lambda lib: lib.forward_fn(q, k, v, out, causal))
                    yield f"{dtype_name} hd{head_dim} {'causal' if causal else 'full'} {batch}x{seqlen}", paths


def vision(libs, args):
    for batch, seqlen in ((256, 64), (64, 256), (1, 1296), (1, 4096), (1, 16384)):
        q, k, v, out = (torch.randn(batch * seqlen, 16, 80, dtype=torch.bfloat16, device="cuda") for _ in range(4))
        yield f"bf16 hd80 vision {batch}x{seqlen}", _varlen(libs, q, k, v, out, False, [seqlen] * batch)


def varlen(libs, args):
    total = sum(QWEN_VARLEN_LENGTHS)
    q = torch.randn(total, 16, 128, dtype=torch.bfloat16, device="cuda")
    k, v = (torch.randn(total, 2, 128, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    yield "bf16 hd128 causal 16/2 varlen 7 seqs", _varlen(libs, q, k, v, torch.empty_like(q), True,
                                                          QWEN_VARLEN_LENGTHS, fp8=True)


def masks(libs, args):
    q, k, v, out = (torch.randn(32768, 16, 128, dtype=torch.bfloat16, device="cuda") for _ in range(4))
    yield "bf16 hd128 causal window (4096, 0) 1x32768", _varlen(libs, q, k, v, out, True, [32768], fp8=True,
                                                                window=(4096, 0))
    for head_dim in (128, 256):
        q, k, v, out = (torch.randn(16384, 16, head_dim, dtype=torch.bfloat16, device="cuda") for _ in range(4))
        for causal in (False, True):
            yield (f"bf16 hd{head_dim} {'causal' if causal else 'full'} softcap 50 1x16384",
                   _varlen(libs, q, k, v, out, causal, [16384], fp8=True, softcap=50.0))


def few_tiles(libs, args):
    for batch, queries, keys, heads_q, heads_kv in FEW_TILE_ROWS:
        q = torch.randn(batch, queries, heads_q, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(batch, keys, heads_kv, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        out = torch.empty_like(q)
        yield (f"bf16 hd128 causal {batch} x {queries} x {keys} {heads_q}/{heads_kv}",
               {"fwd": _per_build(libs, lambda lib: lib.forward_fn(q, k, v, out, True))})


def paged(libs, args):
    stream = torch.cuda.current_stream().cuda_stream
    batch, queries, keys = 4, 2048, 16384
    for head_dim in (d for d in args.head_dims if d in (64, 128, 256)):  # the paged kernels' head dims
        q = torch.randn(batch, queries, HEADS_Q, head_dim, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(batch, keys, HEADS_KV, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        out = torch.empty_like(q)
        for label, fields in (("", {}), (" softcap 50", {"softcap": 50.0}), (" window (4096, 0)", window_fields(4096))):
            def make(lib, fields=fields):
                return plan_runner(lib, *paged_plan(q, k, v, out, 16, stream, **fields))[0]
            yield (f"bf16 hd{head_dim} causal {batch} x {queries} x {keys} {HEADS_Q}/{HEADS_KV} pages of 16{label}",
                   {"paged plan": _per_build(libs, make)})


SECTIONS = {"dense": dense, "vision": vision, "varlen": varlen, "masks": masks, "fwd": few_tiles, "paged": paged}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the baseline's artifact folder")
    parser.add_argument("--after", type=Path, required=True, help="the change's artifact folder")
    parser.add_argument("--only", nargs="+", choices=list(SECTIONS), default=list(SECTIONS))
    parser.add_argument("--dtypes", nargs="+", default=["bf16", "fp16"])
    parser.add_argument("--head-dims", nargs="+", type=int, default=[64, 128, 256])
    parser.add_argument("--seqlens", nargs="+", type=int, default=[1024, 4096, 16384])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.manual_seed(0)
    libs = {"before": Library(args.before), "after": Library(args.after)}
    print(f"GPU: {torch.cuda.get_device_name()}; before {args.before} ({libs['before'].version()}), "
          f"after {args.after} ({libs['after'].version()}); median of {args.repeats} rounds, both builds in each")
    rows = []
    for section in args.only:
        for label, paths in SECTIONS[section](libs, args):
            rows += _table_rows(label, paths, args.repeats)
    print_table(["row", "path", "before us", "after us", "after / before"], rows)
    changes = [float(r[-1]) for r in rows if r[-1] != "n/a"]
    if changes:
        print(f"\nafter / before over {len(changes)} paths: min {min(changes):.3f}, max {max(changes):.3f}")


if __name__ == "__main__":
    main()
