"""One prefill plan run a few times, for a profiler to pick one launch out of (issue 35's ncu
reports: docs/design/sm90-mainloop-plan.md). 16 query and KV heads, one sequence of TOKENS,
random inputs; the plan is created once and run --runs times, then the stream is synchronized.

    ncu --kernel-name 'regex:PrefillWithKVCache|prefill_body' --launch-skip 2 --launch-count 1 ... \\
        python3 bench/profile_plan.py --artifact DIR --head-dim 128 --tokens 16384 [--fp8] [--causal]

--fp8: e4m3 q/k/v (the same values rounded), bf16 output; --softcap C; --window LEFT (right 0);
--batch B: B sequences of TOKENS (a varlen plan); --cudnn: PyTorch SDPA's cuDNN backend on the same
batch instead of the library (the peer's kernel, for the same ncu sections).
"""

from __future__ import annotations

import argparse

import torch

from common import Library


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifact", help="library folder (lib/, include/); not with --cudnn")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--fp8", action="store_true", help="e4m3 inputs, bf16 output")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--softcap", type=float, default=0.0)
    parser.add_argument("--window", type=int, default=None, help="left window (right 0)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1, help="sequences of TOKENS each")
    parser.add_argument("--cudnn", action="store_true", help="SDPA's cuDNN backend instead of the library")
    args = parser.parse_args()
    if not args.cudnn and not args.artifact:
        parser.error("--artifact DIR is needed (or --cudnn for the peer)")
    library_only = [name for name, given in (("--artifact", args.artifact), ("--fp8", args.fp8),
                                             ("--softcap", args.softcap > 0), ("--window", args.window is not None))
                    if given]
    if args.cudnn and library_only:
        parser.error(f"--cudnn times SDPA's plain bf16 kernel: drop {', '.join(library_only)}")

    shape = (args.batch * args.tokens, args.heads, args.head_dim)
    q, k, v = (torch.randn(shape, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    out = torch.empty_like(q)
    if args.cudnn:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        q, k, v = (t.view(args.batch, args.tokens, args.heads, args.head_dim).transpose(1, 2) for t in (q, k, v))

        def run():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
        family = "SDPA cuDNN"
    else:
        if args.fp8:
            q, k, v = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
        window = None if args.window is None else (args.window, 0)
        run, _, family = Library(args.artifact).plan_fns(q, k, v, out, args.causal, [args.tokens] * args.batch,
                                                          window=window, softcap=args.softcap)
    for _ in range(args.runs):
        run()
    torch.cuda.synchronize()
    print(f"family {family}: {args.runs} runs, head dim {args.head_dim}, {args.batch} x {args.tokens} tokens"
          f"{', e4m3' if args.fp8 else ''}{', causal' if args.causal else ''}")


if __name__ == "__main__":
    main()
