"""Whether a change moved an SM90 kernel's key loops: the loops that hold a GMMA in two
`cuobjdump -sass` listings of one kernel TU, their static instruction counts, and the opcodes
whose counts differ.

    cuobjdump -sass BEFORE.o > before.sass; cuobjdump -sass AFTER.o > after.sass
    python3 bench/sass_loops.py before.sass after.sass

A measuring tool (docs/design/sm90-epilogue-overlap.md), not part of the library. A loop is a
backward branch over more than 100 instructions with a GMMA inside and fewer than 1500 (the
persistent loop over work items, which holds the epilogue, is left out); loops are paired in
address order. Registers are renamed freely by ptxas between builds, so only opcode counts are
compared: an epilogue change that leaves them alike left the key loop alone.
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

from sass_census import backward_branches, instructions, unguarded


def loops(path: str) -> list[list[str]]:
    """The GMMA loops of a listing, each as its instructions' text."""
    code = instructions(Path(path).read_text())
    bodies = [[text for _, text in code[first:last + 1]] for first, last in backward_branches(code)
              if 100 < last - first < 1500]
    return [body for body in bodies if any("GMMA" in t for t in body)]


def opcodes(body: list[str]) -> collections.Counter:
    return collections.Counter(unguarded(text).split()[0] for text in body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    args = parser.parse_args()
    before, after = loops(args.before), loops(args.after)
    print(f"loops (instructions): before {[len(b) for b in before]}, after {[len(a) for a in after]}")
    for n, (b, a) in enumerate(zip(before, after)):
        cb, ca = opcodes(b), opcodes(a)
        moved = {op: ca[op] - cb[op] for op in sorted(set(cb) | set(ca)) if ca[op] != cb[op]}
        print(f"loop {n}: {len(b)} -> {len(a)}: " + (f"after - before {moved}" if moved else "same opcode counts"))


if __name__ == "__main__":
    main()
