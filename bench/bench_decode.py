"""Decode benchmark (issues 13 and 30): a few query tokens per sequence against a long KV cache,
the library's paged family against PyTorch SDPA cuDNN on the equivalent contiguous KV and
against the card's own memory ceilings, all measured in the same run on the same GPU.

    python3 bench/bench_decode.py --artifact artifacts/0.4.0/minimal-cuda12.4-sm90a
    python3 bench/bench_decode.py --artifact DIR --rows 64x4096 8x32768:8/1 64x4096:16/2:q4

Rows: BATCHxKV[:HQ/HK][:qN] (head dim 128, bf16, causal, bottom-right for N > 1 queries); the
default is issue 30's set: 64 x 4k, 8 x 32k, 256 x 1k and 1 x 128k, each at GQA 16/2, 8/1,
64/8 and MHA 32/32 with one query, and GQA 16/2 with 4 queries (speculative decode).
Columns: the library on contiguous KV (a varlen plan: the plan describes the KV as pages) and on
a paged cache with pages of 16 in shuffled order; SDPA cuDNN on the contiguous KV (enable_gqa,
no copies); `read`: a plain kernel that only reads the same K and V bytes (the row's
read-streaming limit); KV bandwidth = bytes of K and V / time. Ratios: ours / cuDNN, and our
bandwidth against the card's device-to-device copy (read + write, as the copy counts them)
measured at the start of the run. `--columns` adds page1, page64, flash (SDPA flash), fwd (fas_fwd
on the same batch-layout tensors: the paged decode kernel through a plan made in the call, where
fwd_route.h takes the request, else FA2's kernels) and step (planning cost:
create + 36 runs + destroy_async against 36 runs with the plan reused).
Timing: common.median_ms_each (rounds in shuffled order, median of samples).
`--masks` adds a table of the decode kernel with a causal window and with a softcap.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

import fas_ctypes
from common import Library, fas_dtype, median_ms_each
from fas_ctypes import KvLayout, PlanArgs, PlanRunArgs

ROWS = [(64, 4096), (8, 32768), (256, 1024), (1, 131072)]
HEADS = [(16, 2), (8, 1), (64, 8), (32, 32)]
HEADS_Q, HEADS_KV, HEAD_DIM, LAYERS = 16, 2, 128, 36
DEFAULT_ROWS = ([f"{b}x{s}:{hq}/{hk}" for b, s in ROWS for hq, hk in HEADS]
                + [f"{b}x{s}:16/2:q4" for b, s in ROWS])


def kv_label(kv_len: int) -> str:
    """4096 -> 4k; counts that are not whole kibikeys as they are (4097, 1023)."""
    return f"{kv_len // 1024}k" if kv_len % 1024 == 0 else str(kv_len)


def parse_row(text: str) -> tuple[int, int, int, int, int]:
    """BATCHxKV[:HQ/HK][:qN] -> (batch, kv_len, heads_q, heads_kv, queries)."""
    parts = text.lower().split(":")
    batch, kv_len = (int(x) for x in parts[0].split("x"))
    heads_q, heads_kv, queries = HEADS_Q, HEADS_KV, 1
    for part in parts[1:]:
        if part.startswith("q"):
            queries = int(part[1:])
        else:
            heads_q, heads_kv = (int(x) for x in part.split("/"))
    return batch, kv_len, heads_q, heads_kv, queries


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


def paged_plan(q, k, v, out, page: int, stream: int, disable_sm90: int = 0, **fields):
    """(plan args, run args) of a causal plan over a paged copy of k, v [batch, kv_len, Hk, D]:
    pages of `page` keys in shuffled order; q, out are [batch, queries, Hq, D]; `fields` set more
    PlanArgs fields (softcap=50.0, use_window=1, ...). The run args hold the cache tensors (keepalive)."""
    batch, kv_len, heads_kv, head_dim = k.shape
    pages_per_seq = (kv_len + page - 1) // page
    num_pages = batch * pages_per_seq
    ids = torch.randperm(num_pages, device=k.device, dtype=torch.int64).to(torch.int32)
    caches = []
    for source in (k, v):
        cache = torch.empty(num_pages, page, heads_kv, head_dim, device=k.device, dtype=k.dtype)
        padded = cache.new_zeros(batch * pages_per_seq, page, heads_kv, head_dim)
        padded.view(batch, pages_per_seq * page, heads_kv, head_dim)[:, :kv_len] = source
        cache[ids.long()] = padded
        del padded
        caches.append(cache)
    args = PlanArgs.new(dtype=fas_dtype(q), out_dtype=fas_dtype(q), batch_size=batch, num_heads_q=q.shape[2],
                        num_heads_k=heads_kv, head_dim=head_dim, causal=1, stream=stream, disable_sm90=disable_sm90,
                        kv_layout=KvLayout.PAGED, page_size=page, num_pages=num_pages)
    for name, value in fields.items():
        setattr(args, name, value)
    fas_ctypes.uniform_lengths(args, batch, q.shape[1], kv_len=kv_len)
    run = PlanRunArgs.new(q=q.data_ptr(), k=caches[0].data_ptr(), v=caches[1].data_ptr(), out=out.data_ptr(),
                          stream=stream, page_indices=ids.data_ptr())
    run.keepalive = (*caches, ids)
    return args, run


def read_fn(*tensors):
    """A plain kernel that only reads `tensors` (16-byte loads, one word written per 16 KiB):
    the read-streaming limit for those bytes. None without Triton."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def read_kernel(x, sink, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(sink + tl.program_id(0), tl.sum(tl.load(x + offsets, mask=offsets < n, other=0), axis=0))

    block = 4096  # int32: 16 KiB per program
    views = [t.view(torch.int32).reshape(-1) for t in tensors]
    sinks = [torch.empty(triton.cdiv(x.numel(), block), dtype=torch.int32, device=x.device) for x in views]

    def run():
        for x, sink in zip(views, sinks):
            read_kernel[(sink.numel(),)](x, sink, x.numel(), BLOCK=block, num_warps=4)

    run.keepalive = (views, sinks)
    return run


def decode_fns(lib: Library, batch: int, kv_len: int, heads_q: int = HEADS_Q, heads_kv: int = HEADS_KV,
               queries: int = 1, columns=("contiguous", "page16", "cudnn", "read")):
    """(callables by column name, plan infos, check): the library on contiguous KV and on paged
    caches, one planning step, SDPA cuDNN/flash, the read-streaming limit; check() runs the
    library once and returns its max error against SDPA (math, fp32) on the same inputs."""
    torch.manual_seed(0)
    dev, dtype = "cuda", torch.bfloat16
    stream = torch.cuda.current_stream().cuda_stream
    q = torch.randn(batch, queries, heads_q, HEAD_DIM, device=dev, dtype=dtype)
    k = torch.randn(batch, kv_len, heads_kv, HEAD_DIM, device=dev, dtype=dtype)
    v = torch.randn_like(k)
    out = torch.empty_like(q)
    fns, infos = {}, {}

    # Contiguous KV: a varlen plan ([B*S, H, D] rows), decode-shaped so the paged family serves it.
    args = PlanArgs.new(dtype=fas_dtype(q), out_dtype=fas_dtype(q), batch_size=batch, num_heads_q=heads_q,
                        num_heads_k=heads_kv, head_dim=HEAD_DIM, causal=1, stream=stream)
    fas_ctypes.uniform_lengths(args, batch, queries, keys=kv_len)
    run = PlanRunArgs.new(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), out=out.data_ptr(), stream=stream)
    fns["contiguous"], step, layers, infos["contiguous"] = plan_runner(lib, args, run)
    if "step" in columns:
        fns["step"], fns["layers"] = step, layers

    # Paged caches: the same keys, pages of `page` in shuffled order.
    for page in (1, 16, 64):
        if f"page{page}" in columns:
            paged, paged_run = paged_plan(q, k, v, out, page, stream)
            fns[f"page{page}"], _, _, infos[f"page{page}"] = plan_runner(lib, paged, paged_run)

    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    mask = causal_lower_right(queries, kv_len) if queries > 1 else None
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        if name in columns:
            def sdpa(backend=backend):
                with sdpa_kernel([backend]):
                    F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=heads_q != heads_kv)
            fns[name] = sdpa
    if "read" in columns and (reader := read_fn(k, v)) is not None:
        fns["read"] = reader
    if "fwd" in columns:  # fas_fwd on the same batch-layout tensors
        fns["fwd"] = lib.forward_fn(q, k, v, torch.empty_like(q), True)

    def check() -> float:
        fns["contiguous"]()
        torch.cuda.synchronize()
        reference = F.scaled_dot_product_attention(qt.float(), kt.float(), vt.float(), attn_mask=mask,
                                                   enable_gqa=heads_q != heads_kv).transpose(1, 2)
        return (out.float() - reference).abs().max().item()

    return fns, infos, check


def ceilings() -> tuple[float, float]:
    """(device-to-device copy TB/s, read + write; plain read TB/s) of 1 GiB, medians of 20."""
    src = torch.empty(1 << 28, dtype=torch.float32, device="cuda").normal_()
    dst = torch.empty_like(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def median_ms(fn):
        samples = []
        for _ in range(21):
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
        return statistics.median(samples[1:])

    nbytes = src.numel() * 4
    copy = median_ms(lambda: dst.copy_(src))
    reader = read_fn(src)
    read = median_ms(reader) if reader is not None else float("nan")
    return 2 * nbytes / copy / 1e9, nbytes / read / 1e9


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
        print(f"| {batch} x {kv_label(kv_len)} | {us(plain)} | {tbps(row_bytes * kv_len, plain)} | {us(window)} "
              f"| {tbps(row_bytes * in_window, window)} | {plain / window:.1f}x | {row['error']:.1e} | {us(capped)} "
              f"| {plain / capped:.2f}x |", flush=True)
        torch.cuda.empty_cache()


def us(value) -> str:
    return f"{value * 1e3:.0f} us" if isinstance(value, float) else str(value)


def tbps(nbytes: int, value) -> str:
    return f"{nbytes / (value * 1e-3) / 1e12:.2f}" if isinstance(value, float) else "n/a"


def ratio(num, den) -> str:
    return f"{num / den:.2f}" if isinstance(num, float) and isinstance(den, float) else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifact", required=True, help="exported artifact folder (lib/, include/)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--rows", nargs="*", default=DEFAULT_ROWS, help="BATCHxKV[:HQ/HK][:qN] rows to time")
    parser.add_argument("--columns", nargs="*", default=[], choices=["page1", "page64", "flash", "fwd", "step"],
                        help="extra columns beyond contiguous, page16, cudnn and read")
    parser.add_argument("--masks", action="store_true",
                        help="also the window and softcap table (a 4096-key window, softcap 50)")
    args = parser.parse_args()
    try:
        rows = [parse_row(row) for row in args.rows]
    except ValueError:
        parser.error(f"--rows takes BATCHxKV[:HQ/HK][:qN], e.g. 64x4096:8/1:q4; got {' '.join(args.rows)}")
    columns = ("contiguous", "page16", "cudnn", "read", *args.columns)
    lib = Library(args.artifact)
    copy, read = ceilings()
    print(f"GPU: {torch.cuda.get_device_name()}; library {lib.version()}; torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}; bf16, head dim {HEAD_DIM}, causal (bottom-right)")
    print(f"Ceilings, same run: 1 GiB device-to-device copy {copy:.2f} TB/s (read + write), "
          f"1 GiB plain read {read:.2f} TB/s\n")
    extra = [c for c in columns[4:] if c != "step"]
    print("| batch x KV | heads q/kv | queries | KV MB | ours contiguous | TB/s | paged 16 | TB/s | cuDNN | TB/s "
          "| read limit TB/s | ours / cuDNN | paged 16 / cuDNN | ours / copy | cuDNN / read | splits x CTAs, CTAs/SM "
          "| max err |" + "".join(f" {c} |" for c in extra) + (" plan per step |" if "step" in columns else ""))
    print("| --- " * (17 + len(extra) + ("step" in columns)) + "|")
    for batch, kv_len, heads_q, heads_kv, queries in rows:
        fns, infos, check = decode_fns(lib, batch, kv_len, heads_q, heads_kv, queries, columns)
        t = median_ms_each(fns, args.repeats)
        info = infos["contiguous"]
        nbytes = batch * kv_len * heads_kv * HEAD_DIM * 2 * 2
        ours, page16, cudnn, reader = (t.get(n) for n in ("contiguous", "page16", "cudnn", "read"))
        best = min((x for x in (ours, page16) if isinstance(x, float)), default=None)
        vs_copy = f"{nbytes / (best * 1e-3) / 1e12 / copy:.2f}" if best else "n/a"
        cells = "".join(f" {us(t.get(c))} |" for c in extra)
        if "step" in columns:
            step, layers = t.get("step"), t.get("layers")
            cells += f" {(step - layers) / layers * 100:.1f}% |" if isinstance(step, float) else " n/a |"
        print(f"| {batch} x {kv_label(kv_len)} | {heads_q}/{heads_kv} | {queries} | {nbytes / 1e6:.0f} | {us(ours)} "
              f"| {tbps(nbytes, ours)} | {us(page16)} | {tbps(nbytes, page16)} | {us(cudnn)} | {tbps(nbytes, cudnn)} "
              f"| {tbps(nbytes, reader)} | {ratio(cudnn, ours)} | {ratio(cudnn, page16)} | {vs_copy} "
              f"| {ratio(reader, cudnn)} | {info.kv_splits} x {info.num_ctas}, {info.ctas_per_sm} | {check():.1e} |"
              + cells, flush=True)
        del fns, check
        torch.cuda.empty_cache()
    if args.masks:
        print_mask_rows(lib, args.repeats)


if __name__ == "__main__":
    main()
