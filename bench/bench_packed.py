"""Packed SM90 plans (short sequences sharing query tiles) against the same kernels without
packing and against PyTorch SDPA, measured in the same run on the same GPU.

    python3 bench/bench_packed.py --artifact PACKED_DIR [--compare LABEL=DIR ...] [--repeats 10]

PACKED_DIR is an artifact (or tuning-build) folder whose build has the sm90_packed_prefill
family; each --compare another build timed in the same rounds, e.g. the same kernels without
the packed family (its plans give every sequence tiles of its own) or an earlier release. Rows: the Qwen2.5-VL vision tower (16 heads,
head dim 80, bidirectional) over windows of 64 patches, uniform and as a real image's windows
(partial windows at the right and bottom edges), and of 256 patches; batches of short causal
prompts (GQA 16/2, head dim 128). SDPA runs each group of equal-length sequences as one
[batch, heads, seq, dim] call (what an engine without varlen kernels does). FLOPs count the
scores each query sees (4 * H * D * sum(sq * sk), causal rows about half).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend

import common as ba
import fas_ctypes


def image_windows(height: int, width: int, window: int = 8) -> list[int]:
    """Patches per window of a height x width patch grid cut into window x window squares,
    row by row (Qwen2.5-VL: 112-pixel windows of 14-pixel patches)."""
    def spans(n):
        return [min(window, n - start) for start in range(0, n, window)]

    return [h * w for h in spans(height) for w in spans(width)]


def packed_flag(lib, q, k, out, causal, lengths) -> str:
    """'packed' or 'tiles' (every sequence alone) for the plan this library makes."""
    plan_args = fas_ctypes.plan_args(lengths, ba.fas_dtype(q), q.shape[1], k.shape[1], q.shape[2], causal,
                                     torch.cuda.current_stream().cuda_stream, out_dtype=ba.fas_dtype(out))
    plan = lib.plan_create(plan_args)
    info = lib.plan_info(plan)
    lib.check(lib.dll.fas_plan_destroy(plan))
    packed = getattr(info, "packed", 0)  # libraries before 0.3 have no such field
    return f"{'packed' if packed else 'tiles'} ({info.query_tiles if packed else '-'} tiles)"


def sdpa_grouped(backend, q, k, v, lengths, causal):
    """One SDPA call per group of equal lengths, on the rows of those sequences gathered once."""
    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    calls = []
    for length in sorted(set(lengths)):
        rows = torch.cat([torch.arange(s, s + length, device=q.device) for s, n in zip(starts, lengths) if n == length])
        group = [t[rows].view(-1, length, t.shape[1], t.shape[2]) for t in (q, k, v)]
        calls.append(ba.sdpa_fn(backend, *group, causal))
    return lambda: [call() for call in calls]


def row(name, libs, lengths, heads_q, heads_kv, head_dim, causal, repeats):
    total = sum(lengths)
    q = torch.randn(total, heads_q, head_dim, dtype=torch.bfloat16, device="cuda")
    k, v = (torch.randn(total, heads_kv, head_dim, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    out = torch.empty_like(q)
    fns = {label: lib.plan_fns(q, k, v, out, causal, lengths)[0] for label, lib in libs.items()}
    fns["cudnn"] = sdpa_grouped(SDPBackend.CUDNN_ATTENTION, q, k, v, lengths, causal)
    fns["flash"] = sdpa_grouped(SDPBackend.FLASH_ATTENTION, q, k, v, lengths, causal)
    times = ba.median_ms_each(fns, repeats)
    scores = sum(n * (n + 1) / 2 if causal else n * n for n in lengths)
    flops = 4.0 * heads_q * head_dim * scores
    counts = Counter(lengths)
    shape = ", ".join(f"{c}x{n}" for n, c in sorted(counts.items(), key=lambda item: -item[1])[:4])
    cells = [packed_flag(libs["packed"], q, k, out, causal, lengths)]
    cells += [ba.tflops(flops, times.get(label, "not built")) for label in (*libs, "cudnn", "flash")]
    cells += [ba.ratio(times["packed"], times.get(label)) for label in libs if label != "packed"]
    cells.append(ba.ratio(times["packed"], times["cudnn"]))
    return (name, f"{heads_q}/{heads_kv}", head_dim, "causal" if causal else "full", shape, *cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifact", type=Path, required=True, help="folder of a build with packed kernels")
    parser.add_argument("--compare", nargs="*", default=[], metavar="LABEL=DIR",
                        help="other builds timed in the same rounds, e.g. unpacked=DIR (same kernels, no packed family)")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    libs = {"packed": ba.Library(args.artifact)}
    for spec in args.compare:
        label, _, folder = spec.partition("=")
        libs[label] = ba.Library(Path(folder))
    print(f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; cuDNN {torch.backends.cudnn.version()}; "
          f"library {libs['packed'].version()} ({args.artifact.name})")
    print(f"bf16, median of {args.repeats} timings taken in shuffled rounds over the backends; TFLOPS")
    # Four images of 60 x 68 patches (840 x 952 pixels): 56 windows of 64, 15 of 32, 1 of 16 each.
    image = image_windows(60, 68) * 4
    prompts = [17, 33, 64, 100, 50, 9, 120, 80] * 32
    specs = [
        ("vision windows", [64] * 256, 16, 16, 80, False),
        ("vision windows (4 images)", image, 16, 16, 80, False),
        ("vision windows", [256] * 64, 16, 16, 80, False),
        ("short prompts", prompts, 16, 2, 128, True),
        ("short prompts", [64] * 256, 16, 2, 128, True),
    ]
    rows = []
    for name, lengths, heads_q, heads_kv, head_dim, causal in specs:
        try:
            rows.append(row(name, libs, lengths, heads_q, heads_kv, head_dim, causal, args.repeats))
        except fas_ctypes.FasError as error:  # a dev library without this head dim's kernels
            print(f"left out: {name} at head dim {head_dim}: {str(error).splitlines()[0][:160]}")
    others = [label for label in libs if label != "packed"]
    columns = ["shape", "heads q/kv", "head dim", "mask", "sequences", "plan", "library TFLOPS (packed build)"]
    columns += [f"library TFLOPS ({label})" for label in others]
    columns += ["SDPA cuDNN TFLOPS", "SDPA flash TFLOPS"] + [f"packed / {label}" for label in others]
    columns += ["packed / cuDNN"]
    ba.print_table(columns, rows)


if __name__ == "__main__":
    main()
