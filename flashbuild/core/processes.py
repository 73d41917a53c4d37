"""Which process left a leftover: build outputs that are written under a temporary name (partial
objects, staged exports) and containers carry their writer's pid, so that a later build removes
only what a dead process left, never what a live build is still writing."""

from __future__ import annotations

import re
from pathlib import Path

# ".<pid>.partial", "-<pid>-<random>", "-<pid>": the pid field of a leftover's name.
_PID_FIELDS = (re.compile(r"\.(\d+)\.partial$"), re.compile(r"^\.staging-.+-(\d+)-[^-]+$"),
               re.compile(r"^\.old-.+-(\d+)$"))


def process_start(pid: int) -> str | None:
    """When process pid started (clock ticks after boot, /proc/PID/stat's 22nd field), or None if
    no such process runs. A pid with another start time is a new process that reused the number."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # the command name, in parentheses, may hold spaces
    return fields[19] if len(fields) > 19 else None


def writer_pid(name: str) -> int | None:
    """The pid in a leftover's name, or None (a name without one: an older driver's)."""
    for pattern in _PID_FIELDS:
        if match := pattern.search(name):
            return int(match.group(1))
    return None


def left_by_dead_process(name: str, started=process_start) -> bool:
    """Whether the leftover `name` may be removed: its writer is gone (or unnamed)."""
    pid = writer_pid(name)
    return pid is None or started(pid) is None
