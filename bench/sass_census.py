"""What one stage of a decode kernel's consumer loop spends its instructions on, from `cuobjdump
-sass` text (sm_90).

    cuobjdump -sass OBJECT.o | python3 bench/sass_census.py MANGLED_NAME_PART [--skip 0xLO-0xHI ...]

A measuring tool for the stream decode kernel (docs/design/decode-e4m3.md), not part of the
library. The stage loop is the smallest backward branch around both an mbarrier wait (the
stage's `full`) and the mma: its instructions are counted by kind, static counts (a branch not
taken, such as softcap's, is counted all the same). --skip leaves out the instructions of an
address range (inclusive), a block the path being counted branches around.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys

INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,6})\*/\s+([^;]*);")
KINDS = {
    "e4m3 widening (F2FP unpack)": ("F2FP.F16.E4M3.UNPACK_B",),
    "mma": ("HMMA.16816.F32",),
    "shared loads": ("LDSM.16.M88.4", "LDSM.16.MT88.4", "LDS", "LDS.64", "LDS.128"),
    "floating point (scores, softmax, O rescale)": ("FMUL.FTZ", "FFMA.FTZ", "FADD.FTZ", "FMNMX.FTZ", "FSEL",
                                                    "MUFU.EX2", "F2FP.F16.F32.PACK_AB", "FSETP.NEU.FTZ.AND"),
    "PRMT (byte permutes)": ("PRMT",),
    "softcap's tanh (a branch)": ("MUFU.TANH",),
    "local memory (spills)": ("LDL", "STL", "LDL.64", "STL.64", "LDL.128", "STL.128"),
}


GUARD = re.compile(r"^@!?U?P\w+\s+")


def instructions(sass: str) -> list:
    """(address, text) of each instruction of a `cuobjdump -sass` listing (or one function of it)."""
    return [(int(m.group(1), 16), m.group(2).strip()) for m in INSTRUCTION.finditer(sass)]


def backward_branches(code: list) -> list:
    """(first, last) index pairs into `code`: each backward branch and the instruction it jumps to."""
    index = {address: i for i, (address, _) in enumerate(code)}
    spans = []
    for i, (address, text) in enumerate(code):
        branch = re.search(r"BRA\s+0x([0-9a-f]+)", text)
        if branch and int(branch.group(1), 16) < address and int(branch.group(1), 16) in index:
            spans.append((index[int(branch.group(1), 16)], i))
    return spans


def unguarded(text: str) -> str:
    """An instruction without its predicate."""
    return GUARD.sub("", text)


def stage_loop(sass: str, name_part: str, skip: list) -> list:
    """The instructions of the named kernel's stage loop outside the `skip` ranges, predicates dropped."""
    functions = [f for f in sass.split("Function : ") if name_part in f.split("\n", 1)[0]]
    if not functions:
        raise SystemExit(f"sass_census.py: no function whose name holds {name_part}")
    code = instructions(functions[0])
    loops = []
    for first, last in backward_branches(code):
        body = [text for _, text in code[first:last + 1]]
        if any("SYNCS.PHASECHK" in t for t in body) and any("HMMA" in t for t in body):
            loops.append((code[last][0] - code[first][0], code[first][0], code[last][0]))
    if not loops:
        raise SystemExit("sass_census.py: no loop around an mbarrier wait and an mma")
    _, first, last = min(loops)
    kept = [(a, text) for a, text in code if first <= a <= last and not any(lo <= a <= hi for lo, hi in skip)]
    return [unguarded(text) for _, text in kept]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name_part")
    parser.add_argument("--skip", nargs="*", default=[], help="0xLO-0xHI address ranges to leave out")
    args = parser.parse_args()
    skip = [tuple(int(bound, 16) for bound in text.split("-")) for text in args.skip]
    body = stage_loop(sys.stdin.read(), args.name_part, skip)
    ops = collections.Counter(text.split()[0] for text in body)
    print(f"{len(body)} instructions in the stage loop" + (f" outside {' '.join(args.skip)}" if skip else ""))
    counted = set()
    for kind, names in KINDS.items():
        counted.update(names)
        print(f"  {kind}: {sum(ops[n] for n in names)}")
    rest = sorted(((n, c) for n, c in ops.items() if n not in counted), key=lambda item: -item[1])
    print(f"  integer and control: {sum(c for _, c in rest)} (" +
          ", ".join(f"{n} {c}" for n, c in rest[:14]) + ")")


if __name__ == "__main__":
    main()
