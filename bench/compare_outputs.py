"""Output comparison of two builds of the library: runs the same plans on the same inputs with
each and reports, per configuration, whether the outputs are bit-identical and else the largest
difference. For changes that must not move a single bit (a producer's load order, a fence, a
toolchain flag that should not touch the math); a change of arithmetic shows up as a difference
here and belongs to test_varlen_inference's tolerance checks instead. Runs on a GPU machine
with PyTorch:

    python3 bench/compare_outputs.py BASELINE_ARTIFACT CANDIDATE_ARTIFACT

Exit status 1 when any configuration served by both differs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_attention import Library  # noqa: E402

ODD = [1, 4097, 37, 200, 129, 3, 1]
CONFIGS = [
    # input dtype ("e4m3" = FP8 with bf16 output), head_dim, causal, heads_q, heads_kv, lengths
    (dtype, hd, causal, hq, hk, lengths)
    for dtype in ("e4m3", torch.bfloat16)
    for hd in (64, 128, 256)
    for causal in (False, True)
    for hq, hk, lengths in ((16, 2, ODD), (16, 16, [4096] * 2))
]


def run_once(lib: Library, inputs, out, causal, lengths) -> torch.Tensor:
    out.fill_(float("nan"))
    reused, _, _ = lib.plan_fns(*inputs, out, causal, lengths)
    reused()
    torch.cuda.synchronize()
    return out.clone()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("baseline", type=Path)
    parser.add_argument("candidate", type=Path)
    args = parser.parse_args()
    libs = [Library(args.baseline), Library(args.candidate)]
    torch.manual_seed(0)
    differing = 0
    for dtype, hd, causal, hq, hk, lengths in CONFIGS:
        total = sum(lengths)
        q = torch.randn(total, hq, hd, dtype=torch.bfloat16, device="cuda")
        k, v = (torch.randn(total, hk, hd, dtype=torch.bfloat16, device="cuda") for _ in range(2))
        inputs = [t.to(torch.float8_e4m3fn) for t in (q, k, v)] if dtype == "e4m3" else [q, k, v]
        out = torch.empty_like(q)
        name = f"{'e4m3->bf16' if dtype == 'e4m3' else 'bf16'} hd{hd} {'causal' if causal else 'full'} {hq}/{hk} " \
               f"{'varlen' if len(set(lengths)) > 1 else f'{len(lengths)}x{lengths[0]}'}"
        try:
            base, cand = (run_once(lib, inputs, out, causal, lengths) for lib in libs)
        except RuntimeError as error:  # a kernel that one of the builds does not have
            print(f"{name}: skipped ({error})")
            continue
        if torch.equal(base.view(torch.int16), cand.view(torch.int16)):
            print(f"{name}: identical")
            continue
        differing += 1
        diff = (base.float() - cand.float()).abs().nan_to_num(float("inf")).max().item()
        print(f"{name}: DIFFERS, max |baseline - candidate| = {diff:.3g}")
    print(f"{differing} configuration(s) differ")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
