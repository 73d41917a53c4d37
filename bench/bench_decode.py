"""Decode benchmark (issue 13): one query token per sequence against a long KV cache, the
library's paged family against PyTorch SDPA (cuDNN, flash) on the equivalent contiguous KV,
measured in the same run on the same GPU.

    python3 bench/bench_decode.py --artifact artifacts/0.2.0/minimal-cuda12.4-sm90a

Rows: batch x KV length in {64 x 4k, 8 x 32k, 1 x 128k, 256 x 1k}, GQA 16/2, head dim 128,
bf16, causal (one query sees every key). Columns: time and KV bandwidth (bytes of K and V read
/ time) of the library on contiguous KV (a varlen plan: the plan describes the KV as pages),
on a paged cache with pages of 1, 16 and 64 (pages shuffled), and of SDPA cuDNN / flash on the
contiguous KV (enable_gqa, no copies); then the library's ratio to cuDNN, paged vs contiguous,
paged 1 against contiguous (last columns, after the issue's columns), and the planning cost
of a step: (create + 36 runs + destroy_async) against 36 runs with the
plan reused, as a share of the 36 runs (an engine plans once per step and runs every layer).
Timing: bench_attention.median_ms_each (rounds in shuffled order, median of samples).
`--masks` adds a table of the decode kernel with a causal window and with a softcap against the
same paged plan without them.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import fas_ctypes
from bench_attention import Library, fas_dtype, median_ms_each
from fas_ctypes import KvLayout, PlanArgs, PlanRunArgs

ROWS = [(64, 4096), (8, 32768), (1, 131072), (256, 1024)]
HEADS_Q, HEADS_KV, HEAD_DIM, LAYERS = 16, 2, 128, 36


def plan_runner(lib: Library, args: PlanArgs, run: PlanRunArgs):
    """(run with the plan reused, one step: create + LAYERS runs + destroy_async, plan info)."""
    plan = lib.plan_create(args)
    info = lib.plan_info(plan)

    def reused():
        lib.check(lib.dll.fas_plan_run(plan, ctypes.byref(run)))

    def step():
        handle = lib.plan_create(args)
        for _ in range(LAYERS):
            lib.check(lib.dll.fas_plan_run(handle, ctypes.byref(run)))
        lib.check(lib.dll.fas_plan_destroy_async(handle, run.stream))

    def layers():
        for _ in range(LAYERS):
            reused()

    reused.keepalive = step.keepalive = layers.keepalive = (args, run, plan)
    return reused, step, layers, info


def paged_plan(q, k, v, out, page: int, stream: int, disable_sm90: int = 0):
    """(plan args, run args) of a causal plan over a paged copy of k, v [batch, kv_len, Hk, D]:
    pages of `page` keys in shuffled order; q, out are [batch, queries, Hq, D]. The run args hold
    the cache tensors (keepalive)."""
    batch, kv_len, heads_kv, head_dim = k.shape
    pages_per_seq = (kv_len + page - 1) // page
    num_pages = batch * pages_per_seq
    ids = torch.randperm(num_pages, device=k.device, dtype=torch.int64).to(torch.int32)
    caches = []
    for source in (k, v):
        padded = torch.zeros(batch, pages_per_seq * page, heads_kv, head_dim, device=k.device, dtype=k.dtype)
        padded[:, :kv_len] = source
        cache = torch.empty(num_pages, page, heads_kv, head_dim, device=k.device, dtype=k.dtype)
        cache[ids.long()] = padded.reshape(num_pages, page, heads_kv, head_dim)
        caches.append(cache)
    args = PlanArgs.new(dtype=fas_dtype(q), out_dtype=fas_dtype(q), batch_size=batch, num_heads_q=q.shape[2],
                        num_heads_k=heads_kv, head_dim=head_dim, causal=1, stream=stream, disable_sm90=disable_sm90,
                        kv_layout=KvLayout.PAGED, page_size=page, num_pages=num_pages)
    args.keep_q = fas_ctypes.offsets([q.shape[1]] * batch)
    args.keep_len = (ctypes.c_int32 * batch)(*([kv_len] * batch))
    args.cu_seqlens_q = ctypes.cast(args.keep_q, ctypes.c_void_p)
    args.kv_lengths = ctypes.cast(args.keep_len, ctypes.c_void_p)
    run = PlanRunArgs.new(q=q.data_ptr(), k=caches[0].data_ptr(), v=caches[1].data_ptr(), out=out.data_ptr(),
                          stream=stream, page_indices=ids.data_ptr())
    run.keepalive = (*caches, ids)
    return args, run


def decode_fns(lib: Library, batch: int, kv_len: int):
    """(callables by column name, plan infos, check): the library on contiguous KV and on paged
    caches of pages 1/16/64, one planning step, SDPA cuDNN/flash; check() runs the library once
    and returns its max error against SDPA (math, fp32) on the same inputs."""
    torch.manual_seed(0)
    dev, dtype = "cuda", torch.bfloat16
    stream = torch.cuda.current_stream().cuda_stream
    q = torch.randn(batch, 1, HEADS_Q, HEAD_DIM, device=dev, dtype=dtype)
    k = torch.randn(batch, kv_len, HEADS_KV, HEAD_DIM, device=dev, dtype=dtype)
    v = torch.randn_like(k)
    out = torch.empty_like(q)
    fns, infos = {}, {}

    # Contiguous KV: a varlen plan ([B*S, H, D] rows), decode-shaped so the paged family serves it.
    args = PlanArgs.new(dtype=fas_dtype(q), out_dtype=fas_dtype(q), batch_size=batch, num_heads_q=HEADS_Q,
                        num_heads_k=HEADS_KV, head_dim=HEAD_DIM, causal=1, stream=stream)
    args.keep_q = fas_ctypes.offsets([1] * batch)
    args.keep_k = fas_ctypes.offsets([kv_len] * batch)
    args.cu_seqlens_q = ctypes.cast(args.keep_q, ctypes.c_void_p)
    args.cu_seqlens_k = ctypes.cast(args.keep_k, ctypes.c_void_p)
    run = PlanRunArgs.new(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), out=out.data_ptr(), stream=stream)
    fns["contiguous"], fns["step"], fns["layers"], infos["contiguous"] = plan_runner(lib, args, run)

    # Paged caches: the same keys, pages of `page` in shuffled order.
    for page in (1, 16, 64):
        paged, paged_run = paged_plan(q, k, v, out, page, stream)
        reused, _, _, info = plan_runner(lib, paged, paged_run)
        fns[f"page{page}"], infos[f"page{page}"] = reused, info

    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        def sdpa(backend=backend):
            with sdpa_kernel([backend]):
                F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
        fns[name] = sdpa

    def check() -> float:
        fns["contiguous"]()
        torch.cuda.synchronize()
        reference = F.scaled_dot_product_attention(qt.float(), kt.float(), vt.float(), enable_gqa=True).transpose(1, 2)
        return (out.float() - reference).abs().max().item()

    return fns, infos, check


def decode_row(lib: Library, batch: int, kv_len: int, repeats: int) -> dict:
    fns, infos, check = decode_fns(lib, batch, kv_len)
    times = median_ms_each(fns, repeats)
    # Correctness guard: the timed library output against SDPA (math) on the same inputs.
    return {"times": times, "infos": infos, "error": check()}


MASK_ROWS = [(8, 32768), (1, 131072)]
WINDOW_LEFT, SOFTCAP = 4096, 50.0


def mask_row(lib: Library, batch: int, kv_len: int, repeats: int) -> dict:
    """One decode row on a paged cache (pages of 16) without masks, with a causal window of
    WINDOW_LEFT keys, and with softcap SOFTCAP: times, and the windowed output's max error against
    SDPA (math, fp32) over the keys inside the window."""
    torch.manual_seed(0)
    stream = torch.cuda.current_stream().cuda_stream
    q = torch.randn(batch, 1, HEADS_Q, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(batch, kv_len, HEADS_KV, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    outs = {name: torch.empty_like(q) for name in ("plain", "window", "softcap")}
    fns = {}
    for name, out in outs.items():
        args, run = paged_plan(q, k, v, out, 16, stream)
        if name == "window":
            args.use_window, args.window_size_left, args.window_size_right = 1, WINDOW_LEFT, 0
        if name == "softcap":
            args.softcap = SOFTCAP
        fns[name] = plan_runner(lib, args, run)[0]
    times = median_ms_each(fns, repeats)
    fns["window"]()
    torch.cuda.synchronize()
    inside = slice(max(0, kv_len - 1 - WINDOW_LEFT), kv_len)
    qt, kt, vt = q.transpose(1, 2).float(), k[:, inside].transpose(1, 2).float(), v[:, inside].transpose(1, 2).float()
    reference = F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True).transpose(1, 2)
    return {"times": times, "error": (outs["window"].float() - reference).abs().max().item()}


def print_mask_rows(lib: Library, repeats: int) -> None:
    """The window and softcap on the decode kernel against the same plan without them."""
    print(f"\nMasks on the decode kernel (paged cache, pages of 16): a causal window of {WINDOW_LEFT} keys "
          f"(time should follow the window: bandwidth over the keys inside it) and softcap {SOFTCAP:g}\n")
    print("| batch x KV | plain | TB/s | window | TB/s (window's keys) | plain / window | max err (window) "
          "| softcap | softcap / plain |")
    print("| --- " * 9 + "|")
    for batch, kv_len in MASK_ROWS:
        row = mask_row(lib, batch, kv_len, repeats)
        t = row["times"]
        plain, window, capped = (t.get(n) for n in ("plain", "window", "softcap"))
        row_bytes = batch * HEADS_KV * HEAD_DIM * 2 * 2
        in_window = min(kv_len, WINDOW_LEFT + 1)
        print(f"| {batch} x {kv_len // 1024}k | {us(plain)} | {tbps(row_bytes * kv_len, plain)} | {us(window)} "
              f"| {tbps(row_bytes * in_window, window)} | {plain / window:.1f}x | {row['error']:.1e} | {us(capped)} "
              f"| {plain / capped:.2f}x |", flush=True)
        torch.cuda.empty_cache()


def us(value) -> str:
    return f"{value * 1e3:.0f} us" if isinstance(value, float) else str(value)


def tbps(nbytes: int, value) -> str:
    return f"{nbytes / (value * 1e-3) / 1e12:.2f}" if isinstance(value, float) else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifact", required=True, help="exported artifact folder (lib/, include/)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--rows", nargs="*", default=[f"{b}x{s}" for b, s in ROWS],
                        help="BATCHxKV_LENGTH rows to time (default: the issue's four)")
    parser.add_argument("--masks", action="store_true",
                        help="also the window and softcap table (a 4096-key window, softcap 50)")
    args = parser.parse_args()
    try:
        rows = [tuple(int(part) for part in row.lower().split("x")) for row in args.rows]
    except ValueError:
        parser.error(f"--rows takes BATCHxKV_LENGTH, e.g. 64x4096; got {' '.join(args.rows)}")
    lib = Library(args.artifact)
    print(f"GPU: {torch.cuda.get_device_name()}; library {lib.version()}; torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}; bf16, GQA {HEADS_Q}/{HEADS_KV}, head dim {HEAD_DIM}, 1 query\n")
    print("| batch x KV | KV bytes | ours contiguous | TB/s | paged 16 | TB/s | paged 64 | TB/s | cuDNN | TB/s "
          "| flash | ours / cuDNN | paged 16 / contiguous | plan per step (36 layers) | splits x CTAs, CTAs per SM | max err "
          "| paged 1 | paged 1 / contiguous |")
    print("| --- " * 18 + "|")
    for batch, kv_len in rows:
        row = decode_row(lib, batch, kv_len, args.repeats)
        t, info = row["times"], row["infos"]["contiguous"]
        nbytes = batch * kv_len * HEADS_KV * HEAD_DIM * 2 * 2
        ours, page1, page16, page64, cudnn = (t.get(n) for n in ("contiguous", "page1", "page16", "page64", "cudnn"))
        vs_cudnn = f"{cudnn / ours:.2f}x" if isinstance(ours, float) and isinstance(cudnn, float) else "n/a"
        vs_contig = f"{page16 / ours:.2f}" if isinstance(ours, float) and isinstance(page16, float) else "n/a"
        page1_vs = f"{page1 / ours:.2f}" if isinstance(ours, float) and isinstance(page1, float) else "n/a"
        step, layers = t.get("step"), t.get("layers")
        plan_share = f"{(step - layers) / layers * 100:.1f}%" if isinstance(step, float) and isinstance(layers, float) else "n/a"
        print(f"| {batch} x {kv_len // 1024}k | {nbytes / 1e6:.0f} MB | {us(ours)} | {tbps(nbytes, ours)} | {us(page16)} "
              f"| {tbps(nbytes, page16)} | {us(page64)} | {tbps(nbytes, page64)} | {us(cudnn)} | {tbps(nbytes, cudnn)} "
              f"| {us(t.get('flash'))} | {vs_cudnn} | {vs_contig} | {plan_share} | {info.kv_splits} x {info.num_ctas}, {info.ctas_per_sm}/SM "
              f"| {row['error']:.1e} | {us(page1)} | {page1_vs} |", flush=True)
        del row
        torch.cuda.empty_cache()
    if args.masks:
        print_mask_rows(lib, args.repeats)


if __name__ == "__main__":
    main()
