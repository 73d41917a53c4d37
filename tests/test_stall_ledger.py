"""bench/stall_ledger.py: which loop of an ncu source-page listing it calls the key loop, and what
it sums (a synthetic listing in ncu's CSV form: the kernel's name line, then one row per SASS
instruction)."""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import stall_ledger  # noqa: E402

COLUMNS = ["Address", "Source", stall_ledger.SAMPLES, stall_ledger.EXECUTED, "stall_wait", "stall_barrier",
           "stall_wait (Not Issued)"]


def listing(tmp_path: Path, code: list) -> Path:
    """code: (source, samples, executed, wait, barrier) per instruction, 16 bytes apart from 0x100."""
    text = io.StringIO()
    text.write('"Kernel Name","synthetic"\n')
    writer = csv.writer(text, quoting=csv.QUOTE_ALL)
    writer.writerow(COLUMNS)
    for i, (source, samples, executed, wait, barrier) in enumerate(code):
        writer.writerow([hex(0x100 + 16 * i), source, samples, executed, wait, barrier, wait])
    path = tmp_path / "kernel.csv"
    path.write_text(text.getvalue())
    return path


CODE = [
    ("LDC R1, c[0x0][0x28]", 1, 10, 1, 0),                    # 0: setup
    ("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2", 2, 100, 2, 0),  # 1: the key loop's head
    ("FMNMX.FTZ R3, R4, R3, !PT", 30, 100, 30, 0),             # 2
    ("MUFU.EX2 R5, R3", 20, 100, 10, 10),                     # 3
    ("@P0 BRA 0x110", 5, 100, 0, 5),                          # 4: back to 1 (the key loop)
    ("MUFU.EX2 R6, R6", 3, 10, 3, 0),                         # 5: the epilogue's exponential
    ("@!P1 BRA 0x100", 4, 10, 4, 0),                          # 6: back to 0 (outer loop, around MUFU too)
    ("@P2 BRA 0x110", 0, 0, 0, 0),                            # 7: a retry path back to 1, wider, never run
]


def test_the_key_loop_is_the_narrowest_most_executed_loop_around_mufu(tmp_path):
    rows, reasons = stall_ledger.read(listing(tmp_path, CODE))
    assert reasons == ["stall_wait", "stall_barrier"]  # the not-issued copies are left out
    assert stall_ledger.key_loop(rows) == (1, 4)


def test_ledger_sums_reasons_and_the_loops_opcodes(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["stall_ledger.py", str(listing(tmp_path, CODE)), "--top", "2"])
    stall_ledger.main()
    out = capsys.readouterr().out
    assert "8 instructions, 65 samples" in out
    assert "wait                       50  76.9%" in out
    assert "key loop: instructions 1-4 (4, executed 100 times), 87.7% of the samples" in out
    assert "FMNMX           1 instructions  52.6% of the loop's samples" in out  # 30 of the loop's 57
    ranked = [line.split()[0] for line in out.splitlines()[-2:]]
    assert ranked == ["2", "3"]  # FMNMX (30), then MUFU.EX2 (20)
