"""Mixed-batch benchmark (issue 15, item 2): one paged batch in which some sequences are in chunked
prefill and the rest decode, as a continuous-batching step holds them, planned as one mixed plan
(MIXED PLANS in the header) against the alternatives, measured in the same run on the same GPU.

    python3 bench/bench_mixed.py --artifact artifacts/0.4.0/minimal-cuda12.4-sm90a

Rows: P prefill chunks of Q queries over C cached keys (KV length C + Q, bottom-right causal) and D
decode sequences of K keys, GQA 16/2, head dim 128, bf16, pages of 16 in shuffled order. Columns:
- mixed: the batch with its decodes first, one fas_plan (FAS_FAMILY_MIXED: two launches);
- one launch: the same sequences with the decodes moved between the prefills, which keeps the
  batch one plan (SM90 paged over every sequence: the one-launch alternative);
- separate: the prefill part and the decode part as two plans run back to back, and each alone;
- SDPA: PyTorch on the same batch as dense tensors (prefill: causal_lower_right on the default
  backend; decode: cuDNN), two calls, as a peer.
The bars: mixed <= separate, and mixed <= 1.05 x min(one launch, separate).
"""

from __future__ import annotations

import argparse
import ctypes

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

import fas_ctypes
from common import Library, fas_dtype, median_ms_each
from fas_ctypes import KvLayout, PlanArgs, PlanRunArgs

HEADS_Q, HEADS_KV, HEAD_DIM, PAGE = 16, 2, 128, 16
# (prefill chunks, their queries, cached keys before them, decode sequences, their keys)
ROWS = [(4, 512, 4096, 252, 2048), (1, 512, 4096, 255, 2048), (4, 512, 4096, 60, 2048), (8, 1024, 8192, 248, 4096)]


class Batch:
    """A paged cache holding every sequence's keys (pages shuffled) and q/out rows in batch order."""

    def __init__(self, seqlens_q: list[int], kv_lens: list[int]):
        self.seqlens_q, self.kv_lens = seqlens_q, kv_lens
        dev, dtype = "cuda", torch.bfloat16
        pages = [(n + PAGE - 1) // PAGE for n in kv_lens]
        self.num_pages = sum(pages)
        self.k_cache = torch.randn(self.num_pages, PAGE, HEADS_KV, HEAD_DIM, device=dev, dtype=dtype)
        self.v_cache = torch.randn_like(self.k_cache)
        self.ids = torch.randperm(self.num_pages, device=dev, dtype=torch.int64).to(torch.int32)
        self.q = torch.randn(sum(seqlens_q), HEADS_Q, HEAD_DIM, device=dev, dtype=dtype)
        self.out = torch.empty_like(self.q)
        first = [0]
        for n in pages:
            first.append(first[-1] + n)
        self.first_page = first

    def plan(self, lib: Library, order: list[int]):
        """A plan of the sequences in `order` (q rows and page ids rearranged to match) and its runner."""
        stream = torch.cuda.current_stream().cuda_stream
        seqlens_q = [self.seqlens_q[i] for i in order]
        kv_lens = [self.kv_lens[i] for i in order]
        ids = torch.cat([self.ids[self.first_page[i]:self.first_page[i + 1]] for i in order])
        args = PlanArgs.new(dtype=fas_dtype(self.q), out_dtype=fas_dtype(self.q), batch_size=len(order),
                            num_heads_q=HEADS_Q, num_heads_k=HEADS_KV, head_dim=HEAD_DIM, causal=1, stream=stream,
                            kv_layout=KvLayout.PAGED, page_size=PAGE, num_pages=self.num_pages)
        args.keep_q = fas_ctypes.offsets(seqlens_q)
        args.keep_len = (ctypes.c_int32 * len(order))(*kv_lens)
        args.cu_seqlens_q = ctypes.cast(args.keep_q, ctypes.c_void_p)
        args.kv_lengths = ctypes.cast(args.keep_len, ctypes.c_void_p)
        plan = lib.plan_create(args)
        # The q rows of a reordered batch are another tensor of the same size: timing only.
        q = self.q if order == sorted(order) else self.q.clone()
        run = PlanRunArgs.new(q=q.data_ptr(), k=self.k_cache.data_ptr(), v=self.v_cache.data_ptr(),
                              out=self.out.data_ptr(), stream=stream, page_indices=ids.data_ptr())

        def fn():
            lib.check(lib.dll.fas_plan_run(plan, ctypes.byref(run)))

        fn.keepalive = (args, run, ids, q, plan)
        return fn, lib.plan_info(plan)


def row_fns(lib: Library, prefills: int, queries: int, cached: int, decodes: int, keys: int):
    torch.manual_seed(0)
    seqlens_q = [1] * decodes + [queries] * prefills
    kv_lens = [keys] * decodes + [cached + queries] * prefills
    batch = Batch(seqlens_q, kv_lens)
    n = len(seqlens_q)
    fns, infos = {}, {}
    fns["mixed"], infos["mixed"] = batch.plan(lib, list(range(n)))
    # The decodes between two prefills: no run of decodes at either end, so one plan of everything
    # (with one prefill chunk there is no such order).
    one = [decodes] + list(range(decodes)) + list(range(decodes + 1, n)) if prefills > 1 else None
    if one is not None:
        fns["one launch"], infos["one launch"] = batch.plan(lib, one)
    prefill_fn, infos["prefill"] = batch.plan(lib, list(range(decodes, n)))
    decode_fn, infos["decode"] = batch.plan(lib, list(range(decodes)))
    fns["prefill"], fns["decode"] = prefill_fn, decode_fn

    def separate():
        prefill_fn()
        decode_fn()

    fns["separate"] = separate
    # SDPA on dense copies of the same batch shape (random data: a timing peer, not a check).
    qp = torch.randn(prefills, HEADS_Q, queries, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    kp = torch.randn(prefills, HEADS_KV, cached + queries, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    vp = torch.randn_like(kp)
    qd = torch.randn(decodes, HEADS_Q, 1, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    kd = torch.randn(decodes, HEADS_KV, keys, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    vd = torch.randn_like(kd)
    mask = causal_lower_right(queries, cached + queries)

    def sdpa():
        F.scaled_dot_product_attention(qp, kp.repeat_interleave(HEADS_Q // HEADS_KV, 1),
                                       vp.repeat_interleave(HEADS_Q // HEADS_KV, 1), attn_mask=mask)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            F.scaled_dot_product_attention(qd, kd, vd, enable_gqa=True)

    fns["sdpa"] = sdpa
    fns["sdpa"].keepalive = (qp, kp, vp, qd, kd, vd)
    return fns, infos, batch


def us(value) -> str:
    return f"{value * 1e3:.0f} us" if isinstance(value, float) else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifact", required=True, help="exported artifact folder (lib/, include/)")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    lib = Library(args.artifact)
    print(f"GPU: {torch.cuda.get_device_name()}; library {lib.version()}; torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}; bf16, GQA {HEADS_Q}/{HEADS_KV}, head dim {HEAD_DIM}, "
          f"pages of {PAGE}\n")
    print("| prefill chunks | decodes | mixed | one launch | separate | prefill alone | decode alone "
          "| mixed / separate | mixed / best of one, two | SDPA (2 calls) | SDPA / mixed | mixed plan |")
    print("| --- " * 12 + "|")
    for prefills, queries, cached, decodes, keys in ROWS:
        fns, infos, _ = row_fns(lib, prefills, queries, cached, decodes, keys)
        t = median_ms_each(fns, args.repeats)
        mixed, separate = t["mixed"], t["separate"]
        best = min(x for x in (t.get("one launch"), separate) if isinstance(x, float))
        info = infos["mixed"]
        shape = (f"{info.family_name.decode()}: {info.decode_sequences} decodes, prefill on "
                 f"{fas_ctypes.Family(info.prefill_family).name}, {info.num_ctas} CTAs, splits {info.kv_splits}")
        print(f"| {prefills} x {queries} q over {cached // 1024}k | {decodes} x {keys // 1024}k | {us(mixed)} "
              f"| {us(t.get('one launch', 'n/a'))} | {us(separate)} | {us(t['prefill'])} | {us(t['decode'])} "
              f"| {mixed / separate:.2f} | {mixed / best:.2f} | {us(t['sdpa'])} | {t['sdpa'] / mixed:.2f}x "
              f"| {shape} |", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
