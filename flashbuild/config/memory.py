"""The memory model: how much memory each TU's nvcc is expected to need.

An estimate is the peak RSS an earlier build recorded for the TU (build/tu-stats.json,
read and written only here), else the matrix entry's default for the TU's group: its
family's name for a kernel, `host` for host code (matrix.yaml `memory_estimates_gb`).
Recorded costs are per TU and arch list: the same TU costs the same in any entry.
The file is a cache: one that is not what `Stats.record` writes counts as no recorded
stats (said once per run), and the next compile rewrites it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from flashbuild.config.families import HOST

if TYPE_CHECKING:  # tasks.py imports RESERVE_GB without the YAML stack
    from flashbuild.config.options import Entry

GIB = 1024**3
RESERVE_GB = 2.0  # memory kept free for the rest of the machine, unless --reserve-gb says otherwise
STATS_FILE = "tu-stats.json"
# A recorded TU beyond these is not a measurement (a TU takes 0.1-5 GiB and 1-600 s): ignored.
MAX_PEAK_KB = 1 << 30  # 1 TiB
MAX_WALL_S = 86_400.0
_noted: set[Path] = set()  # malformed stats files already reported in this run


def stats_key(entry: Entry, tu_name: str) -> str:
    return f"{tu_name}@{'+'.join(entry.archs)}"


def peaks_of(stats: dict) -> dict[str, int]:
    """Peak RSS in bytes by stats_key, from what Stats.read returns."""
    return {k: v["peak_rss_kb"] * 1024 for k, v in stats.items() if v.get("peak_rss_kb")}


def default_bytes(entry: Entry, group: str) -> int:
    return int(entry.memory_estimates_gb[group] * GIB)


class Stats:
    """Per-TU wall time and peak RSS of earlier builds, by stats_key."""

    def __init__(self, build_root: Path):
        self.path = build_root / STATS_FILE

    def read(self) -> dict:
        try:
            stats = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:  # unreadable, not UTF-8, not JSON
            return self._ignore(str(exc))
        problem = _malformed(stats)
        return self._ignore(problem) if problem else stats

    def _ignore(self, problem: str) -> dict:
        if self.path not in _noted:
            _noted.add(self.path)
            from rich.markup import escape  # late: tasks.py imports this module without rich

            from flashbuild.core.console import log

            log(escape(f"note: {self.path} is not a TU stats file ({problem}); estimating every TU from "
                       "matrix.yaml's memory_estimates_gb instead, and the next compile rewrites it"))
        return {}

    def peaks(self) -> dict[str, int]:
        """Recorded peak RSS in bytes."""
        return peaks_of(self.read())

    def record(self, entry: Entry, results) -> None:
        """Keep the costs of the TUs this build compiled (results: TUResult-like, with name,
        cached, wall_s, peak_rss_kb, and ok and estimate_kb where known); cache hits measured
        nothing, and a failed compile only raises what is recorded (`next_cost`)."""
        stats = self.read()
        for r in results:
            key = stats_key(entry, r.name)
            if not r.cached and (cost := next_cost(stats.get(key), r)):
                stats[key] = cost
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(stats, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.path)


def next_cost(recorded: dict | None, result) -> dict | None:
    """What to record for a TU after compiling it. A compile that finished measured its cost. One
    that failed (a compile error, or killed for memory) stopped early: what it reached is only a
    floor, so it never lowers what was recorded or estimated before it ran (`estimate_kb`)."""
    if not result.peak_rss_kb:
        return None
    measured = {"peak_rss_kb": result.peak_rss_kb, "wall_s": round(result.wall_s or 0.0, 1)}
    if getattr(result, "ok", True):
        return measured
    recorded = recorded or {}
    return {"peak_rss_kb": max(measured["peak_rss_kb"], recorded.get("peak_rss_kb", 0),
                               getattr(result, "estimate_kb", None) or 0),
            "wall_s": max(measured["wall_s"], recorded.get("wall_s", 0))}


def _malformed(stats) -> str | None:
    """What makes a parsed stats file differ from what `record` writes, or None."""
    if not isinstance(stats, dict):
        return "not a JSON object"
    for key, value in stats.items():
        if not isinstance(value, dict):
            return f"{key!r} is not an object"
        peak, wall = value.get("peak_rss_kb", 0), value.get("wall_s", 0)
        if type(peak) is not int or not 0 <= peak <= MAX_PEAK_KB:  # not isinstance: a bool is an int
            return f"{key!r}: peak_rss_kb {peak!r} is not a whole number of KiB up to {MAX_PEAK_KB}"
        if type(wall) not in (int, float) or not 0 <= wall <= MAX_WALL_S:  # NaN fails the range too
            return f"{key!r}: wall_s {wall!r} is not a number of seconds up to {MAX_WALL_S}"
    return None


def estimate(entry: Entry, tu_name: str, group: str, peaks: dict) -> tuple[int, str]:
    """Memory to reserve for one TU, and where the number came from."""
    key = stats_key(entry, tu_name)
    if key in peaks:
        return int(peaks[key]), "recorded"
    return default_bytes(entry, group), "matrix default"
