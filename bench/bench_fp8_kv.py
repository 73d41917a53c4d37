"""FP8 KV cache benchmark (issues 15 and 30): decode over an e4m3 paged cache against the same plan
over a bf16 cache and against the card's copy ceiling, measured in the same run on the same GPU.

    python3 bench/bench_fp8_kv.py --artifact artifacts/0.4.0/full-cuda12.4-sm90a
    python3 bench/bench_fp8_kv.py --artifact DIR --rows 64x4096:8/1 1x131072

Rows: BATCHxKV[:HQ/HK] (default: 64 x 4k, 8 x 32k, 1 x 128k, 256 x 1k at GQA 16/2, and 64 x 4k
at 8/1, 64/8 and MHA 32/32), head dim 128 (and 64 / 256 with --head-dims), bf16 q and out, one
query per sequence, pages of 16 in shuffled order. Columns: bf16 cache time and KV bandwidth,
e4m3 cache time and bandwidth (bytes of the e4m3 cache read, plus its per-head descales, / time),
the speed-up, e4m3 bandwidth over the card's device-to-device copy (read + write, measured at the
start of the run), the e4m3 bytes' read-streaming limit (bench_decode.read_fn), and the e4m3
output's max error against SDPA (math, fp32) on the dequantized cache, over max |reference|.
--fp8-q adds an FP8 plan over the same e4m3 cache (q quantized to e4m3 with per-head descales, out
in the 16-bit type): its time, bandwidth over the copy, and error against SDPA on the dequantized
q and cache. Issue 30's bars: e4m3 >= 85% of the copy ceiling in bytes read, i.e. >= 1.8x bf16;
the FP8 plan the same, within 5% of max |reference|.
"""

from __future__ import annotations

import argparse
import ctypes
from types import SimpleNamespace

import torch
import torch.nn.functional as F

import fas_ctypes
from common import Library, fas_dtype, median_ms_each
from bench_decode import ceilings, parse_row, read_fn
from fas_ctypes import Dtype, KvLayout, PlanArgs, PlanRunArgs

DEFAULT_ROWS = ["64x4096", "8x32768", "1x131072", "256x1024", "64x4096:8/1", "64x4096:64/8", "64x4096:32/32"]
PAGE = 16


def cache_plan(lib: Library, q, out, k_cache, v_cache, ids, kv_len: int, fp8: bool, descales=None, q_descale=None):
    """A decode plan's run; q may be e4m3 (an FP8 plan: q_descale its per-head descales)."""
    batch = q.shape[0]
    args = PlanArgs.new(dtype=fas_dtype(q), out_dtype=fas_dtype(out), batch_size=batch, num_heads_q=q.shape[1],
                        num_heads_k=k_cache.shape[2], head_dim=q.shape[-1], causal=1,
                        stream=torch.cuda.current_stream().cuda_stream, kv_layout=KvLayout.PAGED, page_size=PAGE,
                        num_pages=k_cache.shape[0], kv_dtype=Dtype.E4M3 if fp8 else 0)
    fas_ctypes.uniform_lengths(args, batch, 1, kv_len=kv_len)
    plan = lib.plan_create(args)
    run = PlanRunArgs.new(q=q.data_ptr(), k=k_cache.data_ptr(), v=v_cache.data_ptr(), out=out.data_ptr(),
                          stream=args.stream, page_indices=ids.data_ptr())
    if fp8:
        run.k_descale, run.v_descale = descales[0].data_ptr(), descales[1].data_ptr()
    if q_descale is not None:
        run.q_descale = q_descale.data_ptr()

    def fn():
        lib.check(lib.dll.fas_plan_run(plan, ctypes.byref(run)))

    fn.keepalive = (args, run, plan, descales, q_descale)
    fn.info = lib.plan_info(plan)
    return fn


def row_fns(lib: Library, batch: int, kv_len: int, heads_q: int, heads_kv: int, head_dim: int,
            dtype=torch.bfloat16, fp8_q: bool = False):
    """(callables by column: "16-bit", "e4m3", "e4m3 q" with fp8_q, "read" where it runs; the
    inputs row() checks against, which also keep the plans' tensors alive): one decode row over
    shuffled pages of 16, seeded."""
    torch.manual_seed(0)
    pages_per_seq = (kv_len + PAGE - 1) // PAGE
    num_pages = batch * pages_per_seq
    ids = torch.randperm(num_pages, device="cuda", dtype=torch.int64).to(torch.int32)
    q = torch.randn(batch, heads_q, head_dim, device="cuda", dtype=dtype)
    caches = [torch.randn(num_pages, PAGE, heads_kv, head_dim, device="cuda", dtype=dtype) for _ in range(2)]
    # Per-head scales as fas_kv_append takes them: stored = e4m3(value / scale), scale = amax / 448.
    scales = [c.float().abs().amax(dim=(0, 1, 3)) / 448.0 for c in caches]
    fp8 = [(c.float() / s[None, None, :, None]).to(torch.float8_e4m3fn) for c, s in zip(caches, scales)]
    outs = [torch.empty_like(q), torch.empty_like(q), torch.empty_like(q)]
    fns = {"16-bit": cache_plan(lib, q, outs[0], *caches, ids, kv_len, False),
           "e4m3": cache_plan(lib, q, outs[1], *fp8, ids, kv_len, True, scales)}
    q8 = q_scale = None
    if fp8_q:
        q_scale = q.float().abs().amax(dim=(0, 2)) / 448.0
        q8 = (q.float() / q_scale[None, :, None]).to(torch.float8_e4m3fn)
        fns["e4m3 q"] = cache_plan(lib, q8, outs[2], *fp8, ids, kv_len, True, scales, q_scale)
    if (reader := read_fn(*fp8)) is not None:
        fns["read"] = reader
    # order: each sequence's page ids in sequence order, [batch, pages_per_seq]
    return fns, SimpleNamespace(order=ids.long().view(batch, pages_per_seq), q=q, q8=q8, q_scale=q_scale, fp8=fp8,
                                scales=scales, outs=outs)


def row(lib: Library, batch: int, kv_len: int, heads_q: int, heads_kv: int, head_dim: int, repeats: int,
        dtype=torch.bfloat16, fp8_q: bool = False) -> dict:
    fns, inputs = row_fns(lib, batch, kv_len, heads_q, heads_kv, head_dim, dtype, fp8_q)
    info = fns["e4m3"].info
    shape = f"{info.num_ctas} x {info.ctas_per_sm}/SM, splits {info.kv_splits}"
    times = median_ms_each(fns, repeats)
    for name in ("e4m3", "e4m3 q"):
        if name in fns:
            fns[name]()
    torch.cuda.synchronize()
    # Reference: SDPA (fp32) over the dequantized cache in sequence order.
    dense = [(f.float() * s[None, None, :, None])[inputs.order].reshape(batch, -1, heads_kv, head_dim)[:, :kv_len]
             for f, s in zip(inputs.fp8, inputs.scales)]

    def relative_error(queries, out):
        reference = F.scaled_dot_product_attention(queries[:, :, None], dense[0].transpose(1, 2),
                                                   dense[1].transpose(1, 2), enable_gqa=heads_q != heads_kv)[:, :, 0]
        return ((out.float() - reference).abs().max() / reference.abs().max()).item()

    errors = {"e4m3": relative_error(inputs.q.float(), inputs.outs[1])}
    if fp8_q:
        errors["e4m3 q"] = relative_error(inputs.q8.float() * inputs.q_scale[None, :, None], inputs.outs[2])
    return {"times": times, "errors": errors, "shape": shape}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifact", required=True, help="exported artifact folder (lib/, include/)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--rows", nargs="*", default=DEFAULT_ROWS, help="BATCHxKV[:HQ/HK] rows to time")
    parser.add_argument("--head-dims", type=int, nargs="+", default=[128])
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16", help="q, out and the 16-bit cache")
    parser.add_argument("--fp8-q", action="store_true", help="also time an FP8 plan (e4m3 q) over the e4m3 cache")
    args = parser.parse_args()
    try:
        rows = [parse_row(text)[:4] for text in args.rows]
    except ValueError:
        parser.error(f"--rows takes BATCHxKV[:HQ/HK], e.g. 64x4096:8/1; got {' '.join(args.rows)}")
    lib = Library(args.artifact)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    copy, read = ceilings()
    print(f"GPU: {torch.cuda.get_device_name()}; library {lib.version()}; torch {torch.__version__}; {args.dtype} q, "
          f"1 query, pages of {PAGE}")
    print(f"Ceilings, same run: 1 GiB device-to-device copy {copy:.2f} TB/s (read + write), "
          f"1 GiB plain read {read:.2f} TB/s\n")
    q_columns = " e4m3 q + KV | e4m3 q / copy | max err / max ref (e4m3 q) |" if args.fp8_q else ""
    print(f"| head dim | batch x KV | heads q/kv | {args.dtype} cache | TB/s | e4m3 cache | TB/s | e4m3 / {args.dtype} "
          f"speed | e4m3 / copy | e4m3 read limit TB/s | max err / max ref (e4m3) | e4m3 plan: CTAs x per SM |{q_columns}")
    print("| --- " * (15 if args.fp8_q else 12) + "|")
    for head_dim in args.head_dims:
        for batch, kv_len, heads_q, heads_kv in rows:
            r = row(lib, batch, kv_len, heads_q, heads_kv, head_dim, args.repeats, dtype, args.fp8_q)
            t = r["times"]
            elements = batch * kv_len * heads_kv * head_dim * 2  # of K and V
            e4m3_bytes = elements + 2 * heads_kv * 4  # and the per-head descales
            e4m3_tbps = e4m3_bytes / (t["e4m3"] * 1e-3) / 1e12
            limit = f"{e4m3_bytes / (t['read'] * 1e-3) / 1e12:.2f}" if "read" in t else "n/a"
            q_cells = ""
            if args.fp8_q:
                q_tbps = e4m3_bytes / (t["e4m3 q"] * 1e-3) / 1e12
                q_cells = f" {t['e4m3 q'] * 1e3:.0f} us | {q_tbps / copy:.2f} | {r['errors']['e4m3 q']:.1e} |"
            print(f"| {head_dim} | {batch} x {kv_len // 1024}k | {heads_q}/{heads_kv} | {t['16-bit'] * 1e3:.0f} us "
                  f"| {elements * 2 / (t['16-bit'] * 1e-3) / 1e12:.2f} | {t['e4m3'] * 1e3:.0f} us | {e4m3_tbps:.2f} "
                  f"| {t['16-bit'] / t['e4m3']:.2f}x | {e4m3_tbps / copy:.2f} | {limit} | {r['errors']['e4m3']:.1e} "
                  f"| {r['shape']} |{q_cells}", flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
