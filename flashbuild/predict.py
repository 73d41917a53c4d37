"""How long an entry's compile phase would take on other machines: the model for many machines.

`simulate` replays the scheduler's own admission rule (jobs.admissible: a free CPU slot,
and the running jobs' memory estimates plus the job's within the server's memory; the largest
estimate first) over per-TU wall times that earlier builds recorded (build/tu-stats.json),
on N servers of C cores and M GiB each; a job starts on the first server that admits it as
soon as one does. It assumes a TU takes as long on a server core as it took here, and it
leaves out link, verify and export, which run once, on the build machine. Pure: the tests
drive it with synthetic jobs, and `invoke build --dry-run` prints it for this machine and
for 1, 4 and 16 servers.
"""

from __future__ import annotations

import heapq
import statistics
from dataclasses import dataclass

from .families import HOST
from .memory import GIB, estimate, peaks_of, stats_key
from .jobs import Budget, admissible

SERVER_COUNTS = (1, 4, 16)
# The server the dry run prices (a common CI runner size); the printout names it.
SERVER_CORES, SERVER_GIB = 16, 64


@dataclass(frozen=True)
class SimJob:
    name: str
    seconds: float
    estimate_bytes: int


@dataclass(frozen=True)
class Server:
    cores: int
    memory_bytes: int


def simulate(jobs: list[SimJob], servers: list[Server]) -> float:
    """Makespan of jobs on servers under the scheduler's admission rule."""
    pending = sorted(jobs, key=lambda j: (-j.estimate_bytes, j.name))
    budgets = [Budget(server.memory_bytes, server.cores, "simulated") for server in servers]
    running: list[list[tuple[float, int]]] = [[] for _ in servers]  # per server: (end, bytes)
    events: list[float] = []
    now = end = 0.0
    while pending:
        for job in list(pending):
            for load, budget in zip(running, budgets):
                if admissible(job, sum(b for _, b in load), len(load), budget):
                    load.append((now + job.seconds, job.estimate_bytes))
                    heapq.heappush(events, now + job.seconds)
                    end = max(end, now + job.seconds)
                    pending.remove(job)
                    break
        if not pending:
            break
        now = heapq.heappop(events)  # the next finish frees a slot (and memory)
        for load in running:
            load[:] = [(t, b) for t, b in load if t > now]
    return end


def entry_jobs(entry_plan, stats: dict) -> tuple[list[SimJob], int]:
    """The entry's TUs with their recorded wall times and memory estimates. A TU without a
    recorded time counts as the median recorded time of its group (family or host) in this
    entry, else of all its recorded TUs; returns the jobs and how many had their own time."""
    entry = entry_plan.entry
    peaks = peaks_of(stats)
    tus = [(tu.name, tu.family) for tu in entry_plan.kernels] + [(h.name, HOST) for h in entry_plan.hosts]
    recorded = {name: stats[stats_key(entry, name)]["wall_s"] for name, _ in tus
                if stats.get(stats_key(entry, name), {}).get("wall_s") is not None}
    by_group: dict[str, list[float]] = {}
    for name, group in tus:
        if name in recorded:
            by_group.setdefault(group, []).append(recorded[name])
    fallback = statistics.median(recorded.values()) if recorded else 0.0
    jobs = []
    for name, group in tus:
        seconds = recorded.get(name)
        if seconds is None:
            seconds = statistics.median(by_group[group]) if group in by_group else fallback
        jobs.append(SimJob(name, seconds, estimate(entry, name, group, peaks)[0]))
    return jobs, len(recorded)


def describe(entry_plan, stats: dict, here: Budget) -> list[str]:
    """The dry run's lines for one entry."""
    jobs, timed = entry_jobs(entry_plan, stats)
    if timed == 0:
        return ["  predicted compile phase: no recorded TU times yet (build once; the next --dry-run predicts)"]
    bound = max(sum(j.seconds for j in jobs) / here.cpu_slots, max(j.seconds for j in jobs))
    lines = [f"  predicted compile phase ({timed} of {len(jobs)} TUs timed by earlier builds, the rest at their"
             " group's median; link, verify and export not included):",
             f"    this machine ({here.cpu_slots} slot(s), {here.memory_bytes / GIB:.1f} GiB): "
             f"{_duration(simulate(jobs, [Server(here.cpu_slots, here.memory_bytes)]))} "
             f"(lower bound, max(TU time / slots, longest TU): {_duration(bound)})"]
    for count in SERVER_COUNTS:
        servers = [Server(SERVER_CORES, SERVER_GIB * GIB)] * count
        lines.append(f"    {count:>2} server(s) of {SERVER_CORES} cores and {SERVER_GIB} GiB: "
                     f"{_duration(simulate(jobs, servers))}")
    return lines


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
