"""KV append (fas_kv_append) against PyTorch's index_copy_ into the same paged caches, and the
device's copy ceiling, measured in the same run on the same GPU.

    python3 bench/bench_append.py --artifact DIR [--repeats 15]

Rows: a decode step (256 tokens, one per sequence, slots on random pages), prefill steps of
8192 and 65536 tokens (pages of 16 in shuffled order), 2 KV heads of head dim 128 (Qwen2.5-VL-3B),
bf16 caches and e4m3 caches (quantized on the way in). Bytes count what must move: the new K/V
rows and the slots read, the cache rows written. GPU time per call is the median over ~20 ms of
back-to-back calls (common.median_ms_each's shuffled rounds); the ceiling is a device-to-device copy
of 1 GiB (bytes read + written).
"""

from __future__ import annotations

import argparse
import ctypes
from pathlib import Path

import torch

import common as ba
from fas_ctypes import Dtype, KvAppendArgs

HEADS, HEAD_DIM, PAGE = 2, 128, 16


def copy_ceiling_tbs(repeats: int) -> float:
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = ba.median_ms_each({"copy": lambda: dst.copy_(src)}, repeats)["copy"]
    return 2 * src.numel() / (ms * 1e-3) / 1e12


def slots_for(tokens: int, decode: bool, num_pages: int, generator) -> torch.Tensor:
    """Slots of `tokens` new rows: prefill fills shuffled pages in order; decode puts each token
    (a sequence's next key) at a random page's random offset."""
    if decode:
        pages = torch.randperm(num_pages, generator=generator)[:tokens]
        return (pages * PAGE + torch.randint(0, PAGE, (tokens,), generator=generator)).cuda()
    pages = torch.randperm(num_pages, generator=generator)[: (tokens + PAGE - 1) // PAGE]
    token = torch.arange(tokens)
    return (pages[token // PAGE] * PAGE + token % PAGE).cuda()


def row(lib, tokens: int, decode: bool, fp8: bool, repeats: int, ceiling: float, generator):
    num_pages = max(4096, 2 * (tokens + PAGE - 1) // PAGE)
    k_new, v_new = (torch.randn(tokens, HEADS, HEAD_DIM, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    cache_dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    k_cache, v_cache = (torch.zeros(num_pages, PAGE, HEADS, HEAD_DIM, dtype=cache_dtype, device="cuda")
                        for _ in range(2))
    slots = slots_for(tokens, decode, num_pages, generator)
    scales = torch.full((2, HEADS), 0.05, dtype=torch.float32, device="cuda")
    args = KvAppendArgs.new(dtype=Dtype.BF16, cache_dtype=Dtype.E4M3 if fp8 else Dtype.BF16, num_tokens=tokens,
                            num_heads_k=HEADS, head_dim=HEAD_DIM, k_new=k_new.data_ptr(), v_new=v_new.data_ptr(),
                            slot_mapping=slots.data_ptr(), k_cache=k_cache.data_ptr(), v_cache=v_cache.data_ptr(),
                            num_pages=num_pages, page_size=PAGE, stream=torch.cuda.current_stream().cuda_stream)
    if fp8:
        args.k_scale, args.v_scale = scales[0].data_ptr(), scales[1].data_ptr()

    def ours():
        lib.check(lib.dll.fas_kv_append(ctypes.byref(args)))

    flat_k, flat_v = k_cache.view(-1, HEADS, HEAD_DIM), v_cache.view(-1, HEADS, HEAD_DIM)

    def torch_copy():  # what an engine without a cache-write kernel does
        if fp8:
            flat_k.index_copy_(0, slots, (k_new / scales[0, :, None]).to(cache_dtype))
            flat_v.index_copy_(0, slots, (v_new / scales[1, :, None]).to(cache_dtype))
        else:
            flat_k.index_copy_(0, slots, k_new)
            flat_v.index_copy_(0, slots, v_new)

    ours()
    torch.cuda.synchronize()
    written = flat_k[slots].float()
    want = (k_new / scales[0, :, None]).to(cache_dtype).float() if fp8 else k_new.float()
    assert torch.equal(written, want), "fas_kv_append wrote other values than the reference"
    times = ba.median_ms_each({"ours": ours, "torch": torch_copy}, repeats)
    row_bytes = HEADS * HEAD_DIM * (1 if fp8 else 2)
    moved = tokens * (2 * HEADS * HEAD_DIM * 2 + 2 * row_bytes + 8)

    def cells(name):  # microseconds and TB/s, or the error a backend raised
        ms = times[name]
        if not isinstance(ms, float):
            return [ms, "-"]
        return [f"{ms * 1e3:.1f}", f"{moved / (ms * 1e-3) / 1e12:.2f}"]

    ours_cells = cells("ours")
    share = f"{float(ours_cells[1]) / ceiling * 100:.0f}%" if isinstance(times["ours"], float) else "-"
    what = f"{'decode' if decode else 'prefill'} {tokens}"
    return (what, "e4m3" if fp8 else "bf16", f"{moved / 2**20:.1f}", *ours_cells, share, *cells("torch"),
            ba.ratio(times["ours"], times["torch"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    lib = ba.Library(args.artifact)
    generator = torch.Generator().manual_seed(0)
    ceiling = copy_ceiling_tbs(args.repeats)
    print(f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; library {lib.version()} "
          f"({args.artifact.name}); copy ceiling {ceiling:.2f} TB/s (read + write)")
    print(f"{HEADS} KV heads, head dim {HEAD_DIM}, pages of {PAGE}; median of {args.repeats} timings")
    rows = [row(lib, tokens, decode, fp8, args.repeats, ceiling, generator)
            for fp8 in (False, True) for tokens, decode in ((256, True), (8192, False), (65536, False))]
    ba.print_table(["step", "cache", "MiB moved", "library us", "library TB/s", "of copy ceiling", "torch us",
                    "torch TB/s", "library / torch"], rows)


if __name__ == "__main__":
    main()
