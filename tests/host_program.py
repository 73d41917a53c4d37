"""A small C++ program built against src/ with the host's compiler and run: the tests of the
headers that promise to compile on the host (paged/stage_layout.h, sm90/softmax_choice.h,
sm90/exp2_fma.h) read what it prints."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_program(folder: Path, source: str, *defines: str, optimize: bool = False) -> str:
    """Compile `source` (C++17, -I src, -D each of `defines`) in `folder`, run it, return its
    standard output; the test is skipped where the machine has no C++ compiler."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler on this machine")
    path, binary = folder / "program.cpp", folder / "program"
    path.write_text(source)
    subprocess.run([compiler, "-std=c++17", *(["-O2"] if optimize else []), f"-I{REPO / 'src'}",
                    *[f"-D{d}" for d in defines], str(path), "-o", str(binary)], check=True)
    return subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout
