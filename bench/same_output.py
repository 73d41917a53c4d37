"""Do two builds of the library give bit-identical outputs? The same plans (three sequences of
4096, 1000 and 37 tokens, 16 heads, bf16 and e4m3 inputs, causal and not, at each head dim) run
through both builds on the same inputs, and the outputs are compared with torch.equal.

    python3 bench/same_output.py BUILD_A BUILD_B [--head-dims 128 256]

For a kernel change that must not change a result (a reordered max, a moved wait): a measuring
tool, not part of the library. A plan that a build does not serve is shown as such.
"""

from __future__ import annotations

import argparse

import torch

from common import Library

LENGTHS = [4096, 1000, 37]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("builds", nargs=2, help="two artifact folders")
    parser.add_argument("--head-dims", nargs="+", type=int, default=[128, 256])
    args = parser.parse_args()
    libs = [Library(build) for build in args.builds]
    torch.manual_seed(0)
    total = sum(LENGTHS)
    for head_dim in args.head_dims:
        for fp8 in (False, True):
            for causal in (False, True):
                q, k, v = (torch.randn(total, 16, head_dim, dtype=torch.bfloat16, device="cuda") * 2 for _ in range(3))
                if fp8:
                    q, k, v = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
                outs = []
                for lib in libs:
                    out = torch.zeros(total, 16, head_dim, dtype=torch.bfloat16, device="cuda")
                    try:
                        run = lib.plan_fns(q, k, v, out, causal, LENGTHS)[0]
                    except RuntimeError as error:
                        outs.append(str(error).splitlines()[0][:70])
                        continue
                    run()
                    torch.cuda.synchronize()
                    outs.append(out)
                name = f"hd{head_dim} {'e4m3' if fp8 else 'bf16'} {'causal' if causal else 'full'}"
                refused = [o for o in outs if isinstance(o, str)]
                if refused:
                    print(f"{name}: not served ({refused[0]})")
                    continue
                difference = (outs[0].float() - outs[1].float()).abs().max().item()
                print(f"{name}: {'bit-identical' if torch.equal(outs[0], outs[1]) else 'DIFFERENT'} "
                      f"(max |a - b| {difference:.3g})")


if __name__ == "__main__":
    main()
