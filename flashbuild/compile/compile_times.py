"""What a build's compiles cost, read back from the time files they leave, and the lower bound of
the compile phase: what scripts/host_build_gpu.sh reports after each call on the GPU machine.

Every compile leaves build/logs/<entry>/<tu>.time (GNU time's, or peak_time.py's, "%e %M": wall
seconds and peak KiB; a first line says when the command failed or was killed, and then it is not
a compile time). They are written as each TU finishes, so a build stopped at a call's time limit
still leaves the times of what it compiled (tu-stats.json is written only when the compile phase
ends). A call's compile phase runs from the earliest start (a file's mtime minus its wall time) to
the latest end among the files written since the call began. On `slots` CPU slots no schedule
compiles an entry faster than max(sum of its TU times / slots, its longest TU): the lower bound.

Pure functions over TUTime records, and `main` for the script:
    python3 -m flashbuild.compile.compile_times --matrix minimal [--since EPOCH] [--slots N]
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from flashbuild.compile.predict import TUCost, cost_lines

TIME_SUFFIX = ".time"


@dataclass(frozen=True)
class TUTime:
    name: str
    wall_s: float
    peak_kb: int
    ended: float  # epoch seconds: when the time file was written

    @property
    def started(self) -> float:
        return self.ended - self.wall_s


def parse_time_file(text: str) -> tuple[float, int] | None:
    """(wall seconds, peak KiB) of a compile that succeeded; None for one that failed or was
    killed (its file starts with GNU time's "Command exited..."/"Command terminated..." line)."""
    lines = text.strip().splitlines()
    if len(lines) != 1:
        return None
    fields = lines[0].split()
    try:
        return (float(fields[0]), int(fields[1])) if len(fields) == 2 else None
    except ValueError:
        return None


def read_times(folder: Path) -> dict[str, TUTime]:
    """TU name -> its last successful compile's time, from folder's *.time files."""
    found = {}
    for path in sorted(folder.glob(f"*{TIME_SUFFIX}")):
        try:
            parsed = parse_time_file(path.read_text())
            ended = path.stat().st_mtime
        except OSError:
            continue
        if parsed:
            found[path.name[:-len(TIME_SUFFIX)]] = TUTime(path.name[:-len(TIME_SUFFIX)], parsed[0], parsed[1], ended)
    return found


def lower_bound(walls, slots: int) -> float:
    """max(sum / slots, longest): no schedule on `slots` slots compiles these TUs faster."""
    walls = list(walls)
    return max(sum(walls) / max(slots, 1), max(walls, default=0.0))


def phase_span(times) -> float:
    """From the first start to the last end of these compiles (0 for none)."""
    times = list(times)
    if not times:
        return 0.0
    return max(t.ended for t in times) - min(t.started for t in times)


def report(entry: str, planned: list[str], times: dict[str, TUTime], slots: int, since: float | None = None,
           groups: dict[str, str] | None = None) -> str:
    """The lines the script prints for one entry: this call's compiles and compile phase, every
    planned TU's time (longest first), the lower bound over those timed, and (given `groups`,
    TU name -> family or host) the cost by family of those timed."""
    timed = [times[name] for name in planned if name in times]
    lines = [f"entry {entry}: {len(timed)} of {len(planned)} planned TUs have a compile time"]
    if since is not None:
        now = [t for t in timed if t.ended >= since]
        lines.append(f"  this call: {len(now)} TU(s) compiled, compile phase {phase_span(now):.0f} s "
                     f"(first start to last end)")
    for t in sorted(timed, key=lambda t: (-t.wall_s, t.name)):
        lines.append(f"  {t.name:<52} {t.wall_s:7.1f} s {t.peak_kb / 1024**2:6.2f} GiB")
    walls = [t.wall_s for t in timed]
    if walls:
        longest = max(timed, key=lambda t: t.wall_s)
        lines.append(f"  sum of TU times {sum(walls):.0f} s, longest {longest.wall_s:.0f} s ({longest.name}); "
                     f"lower bound on {slots} slots: max({sum(walls):.0f} / {slots}, {longest.wall_s:.0f}) = "
                     f"{lower_bound(walls, slots):.0f} s" + ("" if len(timed) == len(planned) else
                                                             " (not every TU timed yet: a partial bound)"))
    if groups and timed:
        lines += cost_lines("cost by family (the TUs timed)",
                            [TUCost(groups[t.name], t.wall_s, t.peak_kb * 1024, True) for t in timed])
    return "\n".join(lines)


def main(argv=None) -> None:
    from flashbuild.toolchains.host_toolchain import host_entry_name
    from flashbuild.config.options import load_config
    from flashbuild.config.build_plan import make_plan, tu_groups

    parser = argparse.ArgumentParser(description="per-TU compile times and the compile phase's lower bound")
    parser.add_argument("--matrix", required=True)
    parser.add_argument("--repo", type=Path, default=Path.cwd())
    parser.add_argument("--since", type=float, help="epoch seconds this call began (its compile phase)")
    parser.add_argument("--slots", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--backend", choices=("host", "container"), default="host")
    args = parser.parse_args(argv)
    plan = make_plan(load_config(args.repo / "matrix.yaml").matrix(args.matrix), args.repo)
    for entry_plan in plan.entries:
        entry = entry_plan.entry
        pattern = host_entry_name(entry.name, entry.cuda, "*") if args.backend == "host" else entry.name
        folders = sorted((args.repo / "build" / "logs").glob(pattern))
        if not folders:
            print(f"entry {pattern}: no build/logs folder yet")
        groups = tu_groups(entry_plan)
        for folder in folders:
            print(report(folder.name, list(groups), read_times(folder), args.slots, args.since, groups))


if __name__ == "__main__":
    from flashbuild.core.errors import FlashBuildError
    try:
        main()
    except FlashBuildError as exc:  # as tasks.py reports it: the message, the fix, the kind's exit code
        print(exc.report(), file=sys.stderr)
        sys.exit(exc.exit_code)
