"""Output comparison of two builds of the library: runs the same calls on the same inputs with
each and reports, per configuration, whether every output (out, and the LSE where the call
writes one) is bit-identical, and else the largest difference. For changes that must not move
a single bit (a producer's load order, a fence, a toolchain flag, a host-code reorganisation);
a change of arithmetic shows up as a difference here and belongs to test_varlen_inference's
tolerance checks instead. Runs on a GPU machine with PyTorch:

    python3 bench/compare_outputs.py BASELINE_ARTIFACT CANDIDATE_ARTIFACT

Paths covered: plans on the family each build picks (SM90 where built: FP8 e4m3 -> bf16, bf16,
fp16), 16-bit softcap plans (caps 50, 30 with a left window, and 2), plans forced onto FA2
(disable_sm90), packed plans (many short sequences: vision windows, short prompts), chunked
prefill over a paged cache (16-bit, pages shuffled), and the one-call fas_fwd in the batch layout
(including shapes that take the split-KV kernel) and the varlen layout, each with and without an
LSE output. A configuration that one of the builds does not serve is skipped (both must serve it
to be compared). Exit status 1 when any configuration served by both differs.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fas_ctypes  # noqa: E402
from fas_ctypes import Dtype, FasError, FwdArgs, PlanRunArgs  # noqa: E402

ODD = [1, 4097, 37, 200, 129, 3, 1]
TORCH_DTYPES = {Dtype.FP16: torch.float16, Dtype.BF16: torch.bfloat16}


def plan_configs():
    """(name, input dtype, out dtype, head_dim, causal, heads_q, heads_kv, lengths, disable_sm90)"""
    for dtype, out_dtype, disable in ((Dtype.E4M3, Dtype.BF16, False), (Dtype.BF16, Dtype.BF16, False),
                                      (Dtype.FP16, Dtype.FP16, False), (Dtype.BF16, Dtype.BF16, True),
                                      (Dtype.FP16, Dtype.FP16, True)):
        for hd in (64, 128, 256):
            for causal in (False, True):
                for hq, hk, lengths in ((16, 2, ODD), (16, 16, [4096] * 2)):
                    kind = "e4m3->bf16" if dtype == Dtype.E4M3 else dtype.name.lower()
                    layout = "varlen" if len(set(lengths)) > 1 else f"{len(lengths)}x{lengths[0]}"
                    name = (f"plan{' fa2' if disable else ''} {kind} hd{hd} {'causal' if causal else 'full'} "
                            f"{hq}/{hk} {layout}")
                    yield name, dtype, out_dtype, hd, causal, hq, hk, lengths, disable


def packed_configs():
    """Varlen plans the library packs where a packed kernel is built (plan_configs' tuple)."""
    windows = [64] * 24 + [32, 40, 16, 64]  # Qwen2.5-VL-like windows of patches, edge windows short
    prompts = [37, 100, 5, 64, 128, 1, 77, 120] * 4
    for dtype in (Dtype.BF16, Dtype.FP16):
        for hd in (64, 80, 96, 128):
            yield (f"packed {dtype.name.lower()} hd{hd} full 16/16 windows", dtype, dtype, hd, False, 16, 16, windows,
                   False)
            yield (f"packed {dtype.name.lower()} hd{hd} causal 16/2 prompts", dtype, dtype, hd, True, 16, 2, prompts,
                   False)


def softcap_configs():
    """(plan_configs' tuple, softcap, window): 16-bit softcap plans, 16/2 heads. A cap of 2 saturates the
    tanh at random scores; a left window of 300 keys masks whole tiles' left edges."""
    for dtype in (Dtype.BF16, Dtype.FP16):
        for hd in (128, 256):
            for causal in (False, True):
                for cap, window in ((50.0, None), (2.0, None), (30.0, (300, 0 if causal else -1))):
                    name = (f"softcap {cap:g} {dtype.name.lower()} hd{hd} {'causal' if causal else 'full'}"
                            f"{' window ' + str(window) if window else ''} 16/2 varlen")
                    yield (name, dtype, dtype, hd, causal, 16, 2, ODD, False), cap, window


def paged_configs():
    """(name, dtype, head_dim, page_size, query lengths, cached key lengths): causal chunked prefill."""
    for dtype in (Dtype.BF16, Dtype.FP16):
        for hd in (64, 128, 256):
            for page in (16, 64):
                yield (f"paged {dtype.name.lower()} hd{hd} page {page} 16/2", dtype, hd, page,
                       [200, 1, 37, 513, 9], [1000, 300, 37, 4097, 129])


def run_paged(lib, config, inputs, with_lse):
    _, dtype, hd, page, seqlens_q, kv_lens = config
    q, k_cache, v_cache, ids = inputs
    hq, hk = q.shape[1], k_cache.shape[2]
    out = torch.full_like(q, float("nan"))
    lse = torch.full((q.shape[0] * hq,), float("nan"), dtype=torch.float32, device="cuda") if with_lse else None
    stream = torch.cuda.current_stream().cuda_stream
    args = fas_ctypes.PlanArgs.new(dtype=dtype, out_dtype=dtype, batch_size=len(seqlens_q), num_heads_q=hq,
                                   num_heads_k=hk, head_dim=hd, causal=1, stream=stream,
                                   kv_layout=fas_ctypes.KvLayout.PAGED, page_size=page, num_pages=k_cache.shape[0])
    keep_q, keep_len = fas_ctypes.offsets(seqlens_q), (ctypes.c_int32 * len(kv_lens))(*kv_lens)
    args.cu_seqlens_q, args.kv_lengths = (ctypes.cast(a, ctypes.c_void_p) for a in (keep_q, keep_len))
    return plan_once(lib, args, q, k_cache, v_cache, out, lse, page_indices=ids.data_ptr())


def paged_inputs(config):
    """q rows, a K and a V cache of shuffled pages (every sequence's pages consecutive in ids)."""
    _, dtype, hd, page, seqlens_q, kv_lens = config
    pages = sum((n + page - 1) // page for n in kv_lens)
    q = torch.randn(sum(seqlens_q), 16, hd, device="cuda").to(TORCH_DTYPES[dtype])
    k_cache, v_cache = (torch.randn(pages, page, 2, hd, device="cuda").to(TORCH_DTYPES[dtype]) for _ in range(2))
    ids = torch.randperm(pages, device="cuda").to(torch.int32)
    return q, k_cache, v_cache, ids


def fwd_configs():
    """(name, dtype, head_dim, causal, heads_q, heads_kv, batch, seqlen_q, seqlen_k or lengths)"""
    for dtype in (Dtype.BF16, Dtype.FP16):
        for hd in (64, 128, 256):
            for causal in (False, True):
                mask = "causal" if causal else "full"
                # 2 x (64 queries, 8192 keys) leaves the GPU idle: the split-KV kernel serves it.
                yield f"fwd {dtype.name.lower()} hd{hd} {mask} batch 2x64/8192", dtype, hd, causal, 16, 2, 2, 64, 8192
                yield f"fwd {dtype.name.lower()} hd{hd} {mask} batch 2x1024", dtype, hd, causal, 16, 16, 2, 1024, 1024
                yield f"fwd {dtype.name.lower()} hd{hd} {mask} varlen", dtype, hd, causal, 16, 2, None, None, ODD


def random_inputs(total_q, total_k, hq, hk, hd, dtype):
    q = torch.randn(total_q, hq, hd, dtype=torch.bfloat16, device="cuda")
    k, v = (torch.randn(total_k, hk, hd, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    if dtype == Dtype.E4M3:
        return [t.to(torch.float8_e4m3fn) for t in (q, k, v)]
    return [t.to(TORCH_DTYPES[dtype]) for t in (q, k, v)]


def plan_once(lib, args, q, k, v, out, lse, **run_fields):
    """One plan made, run once and destroyed: [out] or [out, lse]."""
    plan = lib.plan_create(args)
    try:
        run = PlanRunArgs.new(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), out=out.data_ptr(), stream=args.stream,
                              softmax_lse=lse.data_ptr() if lse is not None else None, **run_fields)
        lib.check(lib.dll.fas_plan_run(plan, ctypes.byref(run)))
        torch.cuda.synchronize()
    finally:
        lib.check(lib.dll.fas_plan_destroy(plan))
    return [out] + ([lse] if lse is not None else [])


def run_plan(lib, config, inputs, with_lse, softcap=0.0, window=None):
    _, dtype, out_dtype, hd, causal, hq, hk, lengths, disable = config
    q, k, v = inputs
    out = torch.full((q.shape[0], hq, hd), float("nan"), dtype=TORCH_DTYPES[out_dtype], device="cuda")
    lse = torch.full((q.shape[0] * hq,), float("nan"), dtype=torch.float32, device="cuda") if with_lse else None
    stream = torch.cuda.current_stream().cuda_stream
    args = fas_ctypes.plan_args(lengths, dtype, hq, hk, hd, causal, stream, out_dtype=out_dtype, window=window)
    args.disable_sm90 = int(disable)
    args.softcap = softcap
    return plan_once(lib, args, q, k, v, out, lse)


def run_fwd(lib, config, inputs, with_lse):
    _, dtype, hd, causal, hq, hk, batch, seqlen_q, lengths_or_k = config
    q, k, v = inputs
    args = FwdArgs.new(dtype=dtype, q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), num_heads_q=hq, num_heads_k=hk,
                       head_dim=hd, causal=int(causal), stream=torch.cuda.current_stream().cuda_stream)
    out = torch.full_like(q, float("nan"))
    args.out = out.data_ptr()
    if batch is None:  # varlen
        lengths = lengths_or_k
        cu = torch.tensor(list(fas_ctypes.offsets(lengths)), dtype=torch.int32, device="cuda")
        args.cu_seqlens_q = args.cu_seqlens_k = cu.data_ptr()
        args.batch_size, args.max_seqlen_q, args.max_seqlen_k = len(lengths), max(lengths), max(lengths)
        lse_rows = sum(lengths)
        if with_lse:
            args.total_q = lse_rows
    else:
        args.batch_size, args.max_seqlen_q, args.max_seqlen_k = batch, seqlen_q, lengths_or_k
        lse_rows = batch * seqlen_q
        cu = None
    lse = torch.full((lse_rows * hq,), float("nan"), dtype=torch.float32, device="cuda") if with_lse else None
    if lse is not None:
        args.softmax_lse = lse.data_ptr()
    lib.check(lib.dll.fas_fwd(ctypes.byref(args)))
    torch.cuda.synchronize()
    del cu
    return [out] + ([lse] if lse is not None else [])


def fwd_shapes(config):
    _, _, _, _, _, _, batch, seqlen_q, lengths_or_k = config
    if batch is None:
        return sum(lengths_or_k), sum(lengths_or_k)
    return batch * seqlen_q, batch * lengths_or_k


def compare(name, libs, runner, config, inputs) -> int:
    """Runs config on both builds (with and without LSE); prints one line each; returns the count
    of differing runs."""
    differing = 0
    for with_lse in (False, True):
        label = f"{name}{' +lse' if with_lse else ''}"
        try:
            base, cand = (runner(lib, config, inputs, with_lse) for lib in libs)
        except FasError as error:  # a kernel that one of the builds does not have
            print(f"{label}: skipped ({error})")
            continue
        same = all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(base, cand))
        if same:
            print(f"{label}: identical")
            continue
        differing += 1
        diffs = [(a.float() - b.float()).abs().nan_to_num(float("inf")).max().item() for a, b in zip(base, cand)]
        print(f"{label}: DIFFERS, max |baseline - candidate| = {', '.join(f'{d:.3g}' for d in diffs)} (out, lse)")
    return differing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("baseline", type=Path)
    parser.add_argument("candidate", type=Path)
    args = parser.parse_args()
    libs = [fas_ctypes.Library(args.baseline), fas_ctypes.Library(args.candidate)]
    torch.manual_seed(0)
    differing = 0
    for config in plan_configs():
        _, dtype, _, hd, _, hq, hk, lengths, _ = config
        inputs = random_inputs(sum(lengths), sum(lengths), hq, hk, hd, dtype)
        differing += compare(config[0], libs, run_plan, config, inputs)
    for config in packed_configs():
        lengths = config[-2]
        inputs = random_inputs(sum(lengths), sum(lengths), config[5], config[6], config[3], config[1])
        differing += compare(config[0], libs, run_plan, config, inputs)
    for config, cap, window in softcap_configs():
        _, dtype, _, hd, _, hq, hk, lengths, _ = config
        inputs = random_inputs(sum(lengths), sum(lengths), hq, hk, hd, dtype)
        differing += compare(config[0], libs, functools.partial(run_plan, softcap=cap, window=window), config, inputs)
    for config in paged_configs():
        differing += compare(config[0], libs, run_paged, config, paged_inputs(config))
    for config in fwd_configs():
        _, dtype, hd, _, hq, hk, *_ = config
        total_q, total_k = fwd_shapes(config)
        inputs = random_inputs(total_q, total_k, hq, hk, hd, dtype)
        differing += compare(config[0], libs, run_fwd, config, inputs)
    print(f"{differing} configuration(s) differ")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
