"""paged/stream_q.h: where the stream decode kernels keep their Q fragments (compiled on the host).

The header promises: one 16-row block up to head dim 128 holds them in registers through an item,
every shape alike without a flag; FAS_DECODE_WIDE_Q_FROM_SMEM=1 moves only the wide shape (e4m3,
8 consumer warps) to reading them from the Q tile at each stage.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# (head dim, wide, row blocks) of every stream shape the kernels instantiate: 16-bit one-block and
# pair (two blocks) shapes, the wide e4m3 shape (up to head dim 128), e4m3's 4-warp shape at 256.
SHAPES = [(64, False, 1), (128, False, 1), (256, False, 1), (64, False, 2), (128, False, 2), (64, True, 1),
          (128, True, 1)]

PROGRAM = """
#include <cstdio>
#include "paged/stream_q.h"
int main() {
    const struct { int head_dim; bool wide; int row_blocks; } shapes[] = {%s};
    for (const auto& s : shapes) {
        std::printf("%%d %%d %%d %%d\\n", s.head_dim, s.wide, s.row_blocks,
                    fas_paged::decode::stream_q_in_registers(s.head_dim, s.wide, s.row_blocks));
    }
}
"""


def held(tmp_path: Path, *defines: str) -> dict:
    """{(head dim, wide, row blocks): whether the Q fragments stay in registers}."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler on this machine")
    source = tmp_path / "stream_q.cpp"
    source.write_text(PROGRAM % ", ".join(f"{{{d}, {str(w).lower()}, {r}}}" for d, w, r in SHAPES))
    binary = tmp_path / "stream_q"
    subprocess.run([compiler, "-std=c++17", f"-I{REPO}/src", *[f"-D{d}" for d in defines], str(source), "-o",
                    str(binary)], check=True)
    lines = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout.splitlines()
    return {(int(d), w == "1", int(r)): q == "1" for d, w, r, q in (line.split() for line in lines)}


def test_without_the_flag_one_block_up_to_head_dim_128_holds_q_in_registers(tmp_path):
    assert held(tmp_path) == {shape: shape[0] <= 128 and shape[2] == 1 for shape in SHAPES}


def test_the_flag_moves_only_the_wide_shape_to_reading_q_at_each_stage(tmp_path):
    before, after = held(tmp_path), held(tmp_path, "FAS_DECODE_WIDE_Q_FROM_SMEM=1")
    assert {shape for shape in SHAPES if before[shape] != after[shape]} == {(64, True, 1), (128, True, 1)}
    assert not any(q for (head_dim, wide, blocks), q in after.items() if wide)
