"""FP8 KV cache benchmark (issue 15, item 3): decode over an e4m3 paged cache against the same plan
over a bf16 cache, measured in the same run on the same GPU.

    python3 bench/bench_fp8_kv.py --artifact artifacts/0.4.0/full-cuda12.4-sm90a

Rows: batch x KV length in {64 x 4k, 8 x 32k, 1 x 128k, 256 x 1k}, GQA 16/2, head dim 128 (and
64 / 256 with --head-dims), bf16 q and out, one query per sequence, pages of 16 in shuffled
order. Columns: bf16 cache time and KV bandwidth, e4m3 cache time and KV bandwidth (bytes of the
e4m3 cache read / time), the speed-up, and the e4m3 output's max error against SDPA (math, fp32)
on the dequantized cache. The bars: e4m3 >= 1.6x bf16, and >= 85% of HBM bandwidth (2.85 TB/s of
the H100's 3.35).
"""

from __future__ import annotations

import argparse
import ctypes

import torch
import torch.nn.functional as F

import fas_ctypes
from bench_attention import Library, fas_dtype, median_ms_each
from fas_ctypes import Dtype, KvLayout, PlanArgs, PlanRunArgs

ROWS = [(64, 4096), (8, 32768), (1, 131072), (256, 1024)]
HEADS_Q, HEADS_KV, PAGE = 16, 2, 16


def cache_plan(lib: Library, q, out, k_cache, v_cache, ids, kv_len: int, fp8: bool, descales=None):
    batch = q.shape[0]
    args = PlanArgs.new(dtype=fas_dtype(q), out_dtype=fas_dtype(q), batch_size=batch, num_heads_q=HEADS_Q,
                        num_heads_k=HEADS_KV, head_dim=q.shape[-1], causal=1,
                        stream=torch.cuda.current_stream().cuda_stream, kv_layout=KvLayout.PAGED, page_size=PAGE,
                        num_pages=k_cache.shape[0], kv_dtype=Dtype.E4M3 if fp8 else 0)
    args.keep_q = fas_ctypes.offsets([1] * batch)
    args.keep_len = (ctypes.c_int32 * batch)(*([kv_len] * batch))
    args.cu_seqlens_q = ctypes.cast(args.keep_q, ctypes.c_void_p)
    args.kv_lengths = ctypes.cast(args.keep_len, ctypes.c_void_p)
    plan = lib.plan_create(args)
    run = PlanRunArgs.new(q=q.data_ptr(), k=k_cache.data_ptr(), v=v_cache.data_ptr(), out=out.data_ptr(),
                          stream=args.stream, page_indices=ids.data_ptr())
    if fp8:
        run.k_descale, run.v_descale = descales[0].data_ptr(), descales[1].data_ptr()

    def fn():
        lib.check(lib.dll.fas_plan_run(plan, ctypes.byref(run)))

    fn.keepalive = (args, run, plan, descales)
    fn.info = lib.plan_info(plan)
    return fn


def row(lib: Library, batch: int, kv_len: int, head_dim: int, repeats: int, dtype=torch.bfloat16) -> dict:
    torch.manual_seed(0)
    pages_per_seq = (kv_len + PAGE - 1) // PAGE
    num_pages = batch * pages_per_seq
    ids = torch.randperm(num_pages, device="cuda", dtype=torch.int64).to(torch.int32)
    q = torch.randn(batch, HEADS_Q, head_dim, device="cuda", dtype=dtype)
    caches = [torch.randn(num_pages, PAGE, HEADS_KV, head_dim, device="cuda", dtype=dtype) for _ in range(2)]
    # Per-head scales as fas_kv_append takes them: stored = e4m3(value / scale), scale = amax / 448.
    scales = [c.float().abs().amax(dim=(0, 1, 3)) / 448.0 for c in caches]
    fp8 = [(c.float() / s[None, None, :, None]).to(torch.float8_e4m3fn) for c, s in zip(caches, scales)]
    outs = [torch.empty_like(q), torch.empty_like(q)]
    fns = {"16-bit": cache_plan(lib, q, outs[0], *caches, ids, kv_len, False),
           "e4m3": cache_plan(lib, q, outs[1], *fp8, ids, kv_len, True, scales)}
    info = fns["e4m3"].info
    shape = f"{info.num_ctas} x {info.ctas_per_sm}/SM, splits {info.kv_splits}"
    times = median_ms_each(fns, repeats)
    fns["e4m3"]()
    torch.cuda.synchronize()
    # Reference: SDPA (fp32) over the dequantized cache in sequence order.
    order = ids.long().view(batch, pages_per_seq)
    dense = [(f.float() * s[None, None, :, None])[order].reshape(batch, -1, HEADS_KV, head_dim)[:, :kv_len]
             for f, s in zip(fp8, scales)]
    reference = F.scaled_dot_product_attention(q.float()[:, :, None], dense[0].transpose(1, 2),
                                               dense[1].transpose(1, 2), enable_gqa=True)[:, :, 0]
    return {"times": times, "error": (outs[1].float() - reference).abs().max().item(), "shape": shape}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifact", required=True, help="exported artifact folder (lib/, include/)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--head-dims", type=int, nargs="+", default=[128])
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16", help="q, out and the 16-bit cache")
    args = parser.parse_args()
    lib = Library(args.artifact)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    print(f"GPU: {torch.cuda.get_device_name()}; library {lib.version()}; torch {torch.__version__}; {args.dtype} q, "
          f"GQA {HEADS_Q}/{HEADS_KV}, 1 query, pages of {PAGE}\n")
    print(f"| head dim | batch x KV | {args.dtype} cache | TB/s | e4m3 cache | TB/s | e4m3 / {args.dtype} speed "
          "| max err (e4m3) | e4m3 plan: CTAs x per SM |")
    print("| --- " * 9 + "|")
    for head_dim in args.head_dims:
        for batch, kv_len in ROWS:
            r = row(lib, batch, kv_len, head_dim, args.repeats, dtype)
            t = r["times"]
            keys = batch * kv_len * HEADS_KV * head_dim * 2  # elements of K and V
            cells = []
            for name, width in (("16-bit", 2), ("e4m3", 1)):
                value = t[name]
                cells += [f"{value * 1e3:.0f} us", f"{keys * width / (value * 1e-3) / 1e12:.2f}"]
            print(f"| {head_dim} | {batch} x {kv_len // 1024}k | {' | '.join(cells)} | {t['16-bit'] / t['e4m3']:.2f}x "
                  f"| {r['error']:.1e} | {r['shape']} |", flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
