"""How long an entry's compile phase would take on other machines: the model for many machines.

`simulate` replays the scheduler's own admission rule (jobs.admissible: a free CPU slot,
and the running jobs' memory estimates plus the job's within the server's memory; the largest
estimate first) over per-TU wall times that earlier builds recorded (build/tu-stats.json),
on N servers of C cores and M GiB each; a job starts on the first server that admits it as
soon as one does. It assumes a TU takes as long on a server core as it took here, and it
leaves out link, verify and export, which run once, on the build machine. TUs of a family
this machine never compiled take the matrix's reference time for the family
(`compile_time_estimates_s`, measured on one reference machine), scaled by how fast this
machine compiled the TUs it did time. Pure: the tests drive it with synthetic jobs, and
`invoke build --dry-run` prints it for this machine and for 1, 4 and 16 servers, with a cost
table by family.
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


def _tus(entry_plan) -> list[tuple[str, str]]:
    """(name, group) of every TU of the entry: kernel TUs by family, host TUs as HOST."""
    return [(tu.name, tu.family) for tu in entry_plan.kernels] + [(h.name, HOST) for h in entry_plan.hosts]


def _recorded(entry_plan, stats: dict) -> dict[str, float]:
    entry = entry_plan.entry
    return {name: stats[stats_key(entry, name)]["wall_s"] for name, _ in _tus(entry_plan)
            if stats.get(stats_key(entry, name), {}).get("wall_s") is not None}


def speed_ratios(entry_plan, stats: dict, reference: dict[str, float]) -> list[float]:
    """This machine against the matrix's reference machine: recorded / reference time of every
    timed kernel TU whose family has a reference time (sorted). Host TUs do not count: they
    take a second or two, mostly process start, and say little about compiling kernels."""
    groups = dict(_tus(entry_plan))
    return sorted(seconds / reference[groups[name]] for name, seconds in _recorded(entry_plan, stats).items()
                  if groups[name] != HOST and reference.get(groups[name], 0) > 0)


def entry_jobs(entry_plan, stats: dict, reference: dict[str, float] | None = None,
               scale: float | None = None) -> tuple[list[SimJob], int]:
    """The entry's TUs with their recorded wall times and memory estimates. A TU without a
    recorded time counts as the median recorded time of its group (family or host) in this
    entry; a group none of whose TUs was timed here, as its reference time (matrix.yaml's
    compile_time_estimates_s) x `scale` (default: the median of speed_ratios, 1 without any),
    else as the median of all recorded TUs. Returns the jobs and how many had their own time."""
    entry = entry_plan.entry
    peaks = peaks_of(stats)
    reference = reference or {}
    recorded = _recorded(entry_plan, stats)
    if scale is None:
        ratios = speed_ratios(entry_plan, stats, reference)
        scale = statistics.median(ratios) if ratios else 1.0
    by_group: dict[str, list[float]] = {}
    for name, group in _tus(entry_plan):
        if name in recorded:
            by_group.setdefault(group, []).append(recorded[name])
    fallback = statistics.median(recorded.values()) if recorded else 0.0
    jobs = []
    for name, group in _tus(entry_plan):
        seconds = recorded.get(name)
        if seconds is None:
            seconds = (statistics.median(by_group[group]) if group in by_group
                       else reference[group] * scale if group in reference else fallback)
        jobs.append(SimJob(name, seconds, estimate(entry, name, group, peaks)[0]))
    return jobs, len(recorded)


@dataclass(frozen=True)
class TUCost:
    group: str  # family name, or HOST
    seconds: float
    peak_bytes: int
    timed: bool  # seconds measured (not predicted)


def cost_lines(heading: str, costs: list[TUCost]) -> list[str]:
    """A cost table by family (the most CPU-seconds first): TUs, CPU-seconds, how many of them
    were timed, peak GiB. The dry run and the build report print it."""
    rows: dict[str, list[TUCost]] = {}
    for cost in costs:
        rows.setdefault(cost.group, []).append(cost)
    lines = [f"  {heading}:"]
    for group, members in sorted(rows.items(), key=lambda item: (-sum(c.seconds for c in item[1]), item[0])):
        lines.append(f"    {group:<24} {len(members):>3} TU(s), {sum(c.seconds for c in members):>7.0f} CPU-s "
                     f"({sum(c.timed for c in members)} timed), peak {max(c.peak_bytes for c in members) / GIB:.1f} GiB")
    return lines


def family_costs(entry_plan, stats: dict, reference: dict[str, float] | None = None) -> list[str]:
    """The dry run's cost table: per family (and host code), its TUs, CPU-seconds (this
    machine's records where it has them, else as entry_jobs predicts) and peak GiB."""
    jobs, _ = entry_jobs(entry_plan, stats, reference)
    recorded = _recorded(entry_plan, stats)
    groups = dict(_tus(entry_plan))
    return cost_lines("cost by family (CPU-seconds: recorded here, or predicted; peak: recorded, or the matrix's "
                      "estimate)", [TUCost(groups[j.name], j.seconds, j.estimate_bytes, j.name in recorded)
                                    for j in jobs])


def describe(entry_plan, stats: dict, here: Budget, reference: dict[str, float] | None = None) -> list[str]:
    """The dry run's lines for one entry: the compile phase here and on servers, how sure that
    is, and the cost by family."""
    reference = reference or {}
    jobs, timed = entry_jobs(entry_plan, stats, reference)
    if timed == 0 and not reference:
        return ["  predicted compile phase: no recorded TU times yet (build once; the next --dry-run predicts)"]
    machine = [Server(here.cpu_slots, here.memory_bytes)]
    bound = max(sum(j.seconds for j in jobs) / here.cpu_slots, max(j.seconds for j in jobs))
    ratios = speed_ratios(entry_plan, stats, reference)
    groups_timed = {group for name, group in _tus(entry_plan) if name in _recorded(entry_plan, stats)}
    scaled = sum(1 for _, group in _tus(entry_plan) if group not in groups_timed and group in reference)
    if timed == 0:
        how = ("no TU timed here yet: every TU at its family's reference time (matrix.yaml "
               "compile_time_estimates_s), unscaled")
    else:
        how = f"{timed} of {len(jobs)} TUs timed by earlier builds, the rest at their family's median here"
        if scaled and ratios:
            how += (f"; {scaled} TU(s) of families not compiled here at their reference time x "
                    f"{statistics.median(ratios):.2f} (this machine's median speed ratio over {len(ratios)} timed "
                    "kernel TUs)")
        elif scaled:
            how += f"; {scaled} TU(s) of families not compiled here at their reference time (no kernel TU timed here)"
    lines = [f"  predicted compile phase ({how}; link, verify and export not included):",
             f"    this machine ({here.cpu_slots} slot(s), {here.memory_bytes / GIB:.1f} GiB): "
             f"{_duration(simulate(jobs, machine))} "
             f"(lower bound, max(TU time / slots, longest TU): {_duration(bound)})"]
    if scaled and len(ratios) >= 4:  # how sure: the same with the ratio's quartiles
        low, high = (entry_jobs(entry_plan, stats, reference, scale=q)[0]
                     for q in (ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]))
        lines.append(f"    with the ratio's quartiles ({ratios[len(ratios) // 4]:.2f}-{ratios[(3 * len(ratios)) // 4]:.2f}): "
                     f"{_duration(simulate(low, machine))} to {_duration(simulate(high, machine))}")
    for count in SERVER_COUNTS:
        servers = [Server(SERVER_CORES, SERVER_GIB * GIB)] * count
        lines.append(f"    {count:>2} server(s) of {SERVER_CORES} cores and {SERVER_GIB} GiB: "
                     f"{_duration(simulate(jobs, servers))}")
    return lines + family_costs(entry_plan, stats, reference)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
