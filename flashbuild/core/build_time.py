"""The one timestamp an artifact carries: SOURCE_DATE_EPOCH when set (the reproducible-builds
convention), else the commit time of the checkout, else the clock (then two builds differ).

The manifest's `created_utc` and every tarball entry's mtime come from it, so that two builds
of one commit write the same manifest and tarball wherever and whenever they run.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from flashbuild.core.errors import ConfigError


@dataclass(frozen=True)
class BuildTime:
    epoch: int  # seconds since 1970-01-01 UTC
    source: str  # "SOURCE_DATE_EPOCH", "commit <sha>" or "clock"


def build_time(repo: Path, environ=os.environ) -> BuildTime:
    value = environ.get("SOURCE_DATE_EPOCH")
    if value is not None:
        if not value.strip().isdigit():
            raise ConfigError(f"SOURCE_DATE_EPOCH is '{value}', not a whole number of seconds since 1970",
                              fix="unset it, or set it to e.g. $(git log -1 --format=%ct)")
        return BuildTime(int(value), "SOURCE_DATE_EPOCH")
    try:
        out = subprocess.run(["git", "-C", str(repo), "log", "-1", "--format=%ct %H"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        out = None
    if out is not None and out.returncode == 0 and out.stdout.split():
        seconds, sha = out.stdout.split()
        return BuildTime(int(seconds), f"commit {sha}")
    return BuildTime(int(time.time()), "clock")
