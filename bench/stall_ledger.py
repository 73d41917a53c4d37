"""Where a kernel's warps wait, instruction by instruction: ncu's per-instruction stall samples
(the source page with SASS) summed per stall reason, per opcode of the key loop, and the
instructions that hold the most samples.

    ncu --section SourceCounters --section WarpStateStats ... -o REP python3 bench/profile_plan.py ...
    ncu -i REP.ncu-rep --page source --csv --print-source sass > kernel.csv
    python3 bench/stall_ledger.py kernel.csv [--top 25]

A measuring tool for issue 35 (docs/design/sm90-mainloop-plan.md), not part of the library. The
key loop is the backward branch around MUFU.EX2 whose first instruction executes most, the
narrowest of those (retry branches of barrier waits jump back across it); a sample is one warp
seen stalled (or issuing: "selected") at that instruction.
"""

from __future__ import annotations

import argparse
import collections
import csv
from pathlib import Path

from sass_census import backward_branches, unguarded

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def read(path: Path) -> tuple:
    """(rows as dicts, stall reason columns) of ncu's source-page CSV (first line: the kernel's name)."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"Address"'))
    rows = list(csv.DictReader(lines[start:]))
    reasons = [name for name in rows[0] if name.startswith("stall_") and "Not Issued" not in name]
    return rows, reasons


def count(row: dict, column: str) -> int:
    return int(row[column] or 0)


def opcode(text: str) -> str:
    return unguarded(text.strip()).split(" ", 1)[0].split(".", 1)[0]


def key_loop(rows: list) -> tuple:
    """(first, last) row index of the key loop: of the backward branches around MUFU.EX2, the one
    whose first instruction executes most, narrowest on ties."""
    code = [(int(row["Address"], 16), row["Source"]) for row in rows]
    spans = [(first, last) for first, last in backward_branches(code)
             if any("MUFU.EX2" in rows[i]["Source"] for i in range(first, last + 1))]
    if not spans:
        raise SystemExit("no backward branch around MUFU.EX2: not an attention kernel's listing?")
    return max(spans, key=lambda span: (count(rows[span[0]], EXECUTED), span[0] - span[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", type=Path, help="ncu -i REP --page source --csv --print-source sass")
    parser.add_argument("--top", type=int, default=25, help="instructions listed (most samples first)")
    args = parser.parse_args()
    rows, reasons = read(args.csv)
    total = sum(count(row, SAMPLES) for row in rows)
    by_reason = collections.Counter({r[len("stall_"):]: sum(count(row, r) for row in rows) for r in reasons})
    print(f"{len(rows)} instructions, {total} samples")
    for reason, samples in by_reason.most_common(10):
        print(f"  {reason:20s} {samples:8d} {100 * samples / total:5.1f}%")

    first, last = key_loop(rows)
    loop = rows[first:last + 1]
    in_loop = sum(count(row, SAMPLES) for row in loop)
    print(f"key loop: instructions {first}-{last} ({len(loop)}, executed {count(rows[first], EXECUTED)} times), "
          f"{100 * in_loop / total:.1f}% of the samples")
    samples, static = collections.Counter(), collections.Counter()
    for row in loop:
        samples[opcode(row["Source"])] += count(row, SAMPLES)
        static[opcode(row["Source"])] += 1
    for op, n in samples.most_common(14):
        print(f"  {op:12s} {static[op]:4d} instructions {100 * n / in_loop:5.1f}% of the loop's samples")

    print("instructions with the most samples (index, samples, share, executed, two largest reasons):")
    ranked = sorted(range(len(rows)), key=lambda i: count(rows[i], SAMPLES), reverse=True)[:args.top]
    for i in ranked:
        row = rows[i]
        top = sorted(((count(row, r), r[len("stall_"):]) for r in reasons), reverse=True)[:2]
        print(f"  {i:5d} {count(row, SAMPLES):7d} {100 * count(row, SAMPLES) / total:4.1f}% x{count(row, EXECUTED):9d} "
              f"{row['Source'].strip()[:64]:64s} {top[0][1]}:{top[0][0]} {top[1][1]}:{top[1][0]}")


if __name__ == "__main__":
    main()
