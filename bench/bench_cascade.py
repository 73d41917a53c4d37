"""Shared-prefix decode (issue 34): sequences that share a long prompt prefix, each with its own
suffix, one query each; bf16, head dim 128, GQA 16/2 unless told.

    python3 bench/bench_cascade.py --artifact DIR [--rows 256x32768+1024 64x8192+512] [--repeats 7]

Rows: BATCHxPREFIX+SUFFIX. Both columns read one paged cache (pages of 16): the prefix's pages
first, in order, then every sequence's own suffix pages.
  plain:   one paged decode plan whose page tables repeat the prefix's pages in every sequence
           (what an engine without cascade does: the prefix is read once per sequence);
  cascade: the prefix attended once by every sequence's query (a varlen plan of one "sequence"
           of BATCH queries over the prefix rows, which lie contiguous at the cache's start,
           not causal), each suffix by a paged decode plan, then fas_merge_states of the two
           partials by their LSE (each in its own plan's layout).
The cascade's output is checked against the plain one (max |difference|, printed) before timing.
Timing: common.median_ms_each, both columns in the same rounds; issue 34's bar: cascade >= 3x
faster than plain at 256 x 32k + 1k.
"""

from __future__ import annotations

import argparse
import ctypes

import torch

import fas_ctypes
from common import Library, median_ms_each
from fas_ctypes import LseLayout, MergeStatesArgs, PlanArgs, PlanRunArgs

PAGE = 16
HEAD_DIM = 128
DEFAULT_ROWS = ["256x32768+1024", "64x8192+512", "256x4096+256"]


def parse_row(text: str) -> tuple[int, int, int]:
    """BATCHxPREFIX+SUFFIX -> (batch, prefix, suffix)."""
    batch, rest = text.lower().split("x")
    prefix, suffix = rest.split("+")
    return int(batch), int(prefix), int(suffix)


def paged_args(batch: int, heads_q: int, heads_kv: int, kv_len: int, num_pages: int, stream: int) -> PlanArgs:
    """A paged decode plan: one query per sequence, kv_len keys each."""
    return fas_ctypes.uniform_paged_args(fas_ctypes.Dtype.BF16, batch, 1, kv_len, heads_q, heads_kv, HEAD_DIM, PAGE,
                                         num_pages, stream)


def lse_strides(info, tokens: int, heads: int) -> tuple[int, int]:
    """(token stride, head stride) of a plan's LSE (fas_plan_info.lse_layout)."""
    return (1, tokens) if info.lse_layout == LseLayout.HEAD_MAJOR else (heads, 1)


def cascade_row(lib: Library, batch: int, prefix: int, suffix: int, heads_q: int, heads_kv: int, repeats: int):
    stream = torch.cuda.current_stream().cuda_stream
    dev, bf16 = "cuda", torch.bfloat16
    prefix_pages, suffix_pages = prefix // PAGE, -(-suffix // PAGE)
    num_pages = prefix_pages + batch * suffix_pages
    # The cache: prefix pages 0.. in order (so its rows are contiguous), then suffix pages shuffled.
    k_cache = torch.randn(num_pages, PAGE, heads_kv, HEAD_DIM, device=dev, dtype=bf16)
    v_cache = torch.randn_like(k_cache)
    own = (prefix_pages + torch.randperm(batch * suffix_pages, device=dev)).to(torch.int32).view(batch, suffix_pages)
    shared = torch.arange(prefix_pages, device=dev, dtype=torch.int32).expand(batch, prefix_pages)
    plain_ids = torch.cat([shared, own], dim=1).contiguous()
    suffix_ids = own.contiguous()
    q = torch.randn(batch, heads_q, HEAD_DIM, device=dev, dtype=bf16)
    outs = {name: torch.empty_like(q) for name in ("plain", "prefix", "suffix", "cascade")}
    lses = {name: torch.empty(batch * heads_q, device=dev, dtype=torch.float32) for name in ("prefix", "suffix")}

    plain_args = paged_args(batch, heads_q, heads_kv, prefix + suffix, num_pages, stream)
    suffix_args = paged_args(batch, heads_q, heads_kv, suffix, num_pages, stream)
    # The prefix: one sequence of `batch` queries over its `prefix` contiguous rows, every key seen.
    prefix_args = fas_ctypes.uniform_lengths(
        PlanArgs.new(dtype=fas_ctypes.Dtype.BF16, out_dtype=fas_ctypes.Dtype.BF16, batch_size=1, num_heads_q=heads_q,
                     num_heads_k=heads_kv, head_dim=HEAD_DIM, causal=0, stream=stream), 1, batch, keys=prefix)

    plans = {name: lib.plan_create(args) for name, args in
             (("plain", plain_args), ("suffix", suffix_args), ("prefix", prefix_args))}
    infos = {name: lib.plan_info(plan) for name, plan in plans.items()}
    runs = {
        "plain": PlanRunArgs.new(q=q.data_ptr(), k=k_cache.data_ptr(), v=v_cache.data_ptr(),
                                 out=outs["plain"].data_ptr(), stream=stream, page_indices=plain_ids.data_ptr()),
        "suffix": PlanRunArgs.new(q=q.data_ptr(), k=k_cache.data_ptr(), v=v_cache.data_ptr(),
                                  out=outs["suffix"].data_ptr(), stream=stream, page_indices=suffix_ids.data_ptr(),
                                  softmax_lse=lses["suffix"].data_ptr()),
        "prefix": PlanRunArgs.new(q=q.data_ptr(), k=k_cache.data_ptr(), v=v_cache.data_ptr(),
                                  out=outs["prefix"].data_ptr(), stream=stream,
                                  softmax_lse=lses["prefix"].data_ptr()),
    }
    merge = MergeStatesArgs.new(dtype=fas_ctypes.Dtype.BF16, num_states=2, num_tokens=batch, num_heads=heads_q,
                                head_dim=HEAD_DIM, out=outs["cascade"].data_ptr(), stream=stream)
    for s, name in enumerate(("prefix", "suffix")):
        merge.v[s], merge.lse[s] = outs[name].data_ptr(), lses[name].data_ptr()
        merge.lse_token_stride[s], merge.lse_head_stride[s] = lse_strides(infos[name], batch, heads_q)

    def plain():
        lib.check(lib.dll.fas_plan_run(plans["plain"], ctypes.byref(runs["plain"])))

    def cascade():
        lib.check(lib.dll.fas_plan_run(plans["prefix"], ctypes.byref(runs["prefix"])))
        lib.check(lib.dll.fas_plan_run(plans["suffix"], ctypes.byref(runs["suffix"])))
        lib.check(lib.dll.fas_merge_states(ctypes.byref(merge)))

    plain()
    cascade()
    torch.cuda.synchronize()
    error = (outs["cascade"].float() - outs["plain"].float()).abs().max().item()
    times = median_ms_each({"plain": plain, "cascade": cascade}, repeats)
    for plan in plans.values():
        lib.check(lib.dll.fas_plan_destroy(plan))
    families = "/".join(infos[name].family_name.decode() for name in ("prefix", "suffix"))
    return times, error, families


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifact", required=True, help="an unpacked artifact folder (lib/, include/)")
    parser.add_argument("--rows", nargs="+", default=DEFAULT_ROWS, help="BATCHxPREFIX+SUFFIX rows")
    parser.add_argument("--heads", default="16/2", help="HQ/HK")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    lib = Library(args.artifact)
    heads_q, heads_kv = (int(x) for x in args.heads.split("/"))
    print(f"{torch.cuda.get_device_name()}, flash_attn_standalone {lib.version()}, bf16 hd{HEAD_DIM} "
          f"GQA {heads_q}/{heads_kv}, pages of {PAGE}")
    print("| batch x prefix + suffix | plain | cascade | plain / cascade | max abs diff | prefix / suffix plans |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in args.rows:
        batch, prefix, suffix = parse_row(row)
        times, error, families = cascade_row(lib, batch, prefix, suffix, heads_q, heads_kv, args.repeats)
        plain, cascade = times["plain"], times["cascade"]
        speedup = f"{plain / cascade:.2f}x" if isinstance(plain, float) and isinstance(cascade, float) else "-"
        show = [f"{t * 1e3:.0f} us" if isinstance(t, float) else t for t in (plain, cascade)]
        print(f"| {batch} x {prefix} + {suffix} | {show[0]} | {show[1]} | {speedup} | {error:.2e} | {families} |",
              flush=True)


if __name__ == "__main__":
    main()
