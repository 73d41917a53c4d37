"""The memory model: how much memory each TU's nvcc is expected to need.

An estimate is the peak RSS an earlier build recorded for the TU (build/tu-stats.json,
read and written only here), else the matrix entry's default for the TU's group: its
family's name for a kernel, `host` for host code (matrix.yaml `memory_estimates_gb`).
Recorded costs are per TU and arch list: the same TU costs the same in any entry.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # tasks.py imports RESERVE_GB without the YAML stack
    from .options import Entry

GIB = 1024**3
RESERVE_GB = 2.0  # memory kept free for the rest of the machine, unless --reserve-gb says otherwise
HOST = "host"  # the memory_estimates_gb key of every host TU
STATS_FILE = "tu-stats.json"


def stats_key(entry: Entry, tu_name: str) -> str:
    return f"{tu_name}@{'+'.join(entry.archs)}"


def default_bytes(entry: Entry, group: str) -> int:
    return int(entry.memory_estimates_gb[group] * GIB)


class Stats:
    """Per-TU wall time and peak RSS of earlier builds, by stats_key."""

    def __init__(self, build_root: Path):
        self.path = build_root / STATS_FILE

    def read(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def peaks(self) -> dict[str, int]:
        """Recorded peak RSS in bytes."""
        return {k: v["peak_rss_kb"] * 1024 for k, v in self.read().items() if v.get("peak_rss_kb")}

    def record(self, entry: Entry, results) -> None:
        """Keep the costs of the TUs this build compiled (results: TUResult-like, with name,
        cached, wall_s, peak_rss_kb); cache hits measured nothing."""
        stats = self.read()
        for r in results:
            if not r.cached and r.peak_rss_kb:
                stats[stats_key(entry, r.name)] = {"peak_rss_kb": r.peak_rss_kb, "wall_s": round(r.wall_s, 1)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(stats, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.path)


def estimate(entry: Entry, tu_name: str, group: str, peaks: dict) -> tuple[int, str]:
    """Memory to reserve for one TU, and where the number came from."""
    key = stats_key(entry, tu_name)
    if key in peaks:
        return int(peaks[key]), "recorded"
    return default_bytes(entry, group), "matrix default"
