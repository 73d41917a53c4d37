"""How long an entry's compile phase would take on other machines: the model for many machines.

`simulate` replays the scheduler's own admission rule (jobs.admissible: a free CPU slot,
and the running jobs' memory estimates plus the job's within the server's memory; the largest
estimate first) over per-TU wall times that earlier builds recorded (build/tu-stats.json),
on N servers of C cores and M GiB each; a job starts on the first server that admits it as
soon as one does. It assumes a TU takes as long on a server core as it took here, and it
leaves out link, verify and export, which run once, on the build machine. TUs of a family
this machine never compiled take the matrix's reference time for the family
(`compile_time_estimates_s`, measured on one reference machine), scaled by how fast this
machine compiled the TUs it did time of the same upstream (FA2's and FlashInfer's scale apart).
Pure: the tests drive it with synthetic jobs, and `invoke build --dry-run` prints it for this
machine and for 1, 4 and 16 servers, with a cost table by family.
"""

from __future__ import annotations

import heapq
import statistics
from dataclasses import dataclass

from flashbuild.config.build_plan import tu_groups
from flashbuild.config.families import FAMILIES, HOST
from flashbuild.config.memory import GIB, estimate, peaks_of, stats_key
from flashbuild.compile.jobs import Budget, admissible

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


def upstream_kinds() -> dict[str, str]:
    """Family -> the pin of the upstream it compiles. TUs of one upstream scale alike between
    machines, and the upstreams differ: on the 2-core machine FA2's TUs took 1.42x the reference
    machine's time and FlashInfer's 1.08x (full, 2026-11-27), so a family never compiled here
    takes the ratio of its own upstream's timed TUs (docs/design/build-measurements.md)."""
    return {name: family.upstream.pin for name, family in FAMILIES.items() if family.upstream is not None}


def _quantile(ratios: list[float], where: int) -> float:
    """The median of sorted ratios (where 0), or the lower (-1) or upper (1) quartile."""
    if where == 0:
        return statistics.median(ratios)
    return ratios[len(ratios) // 4] if where < 0 else ratios[(3 * len(ratios)) // 4]


@dataclass(frozen=True)
class Timings:
    """What the records say of one entry, read once: each TU's group (build_plan.tu_groups), the
    recorded wall times, and this machine's speed ratios against the matrix's reference machine
    (recorded / reference time of every timed kernel TU whose family has a reference time,
    sorted; host TUs do not count: they take a second or two, mostly process start), overall and
    by the upstream each family compiles (`kinds`: family -> upstream)."""

    groups: dict[str, str]
    recorded: dict[str, float]
    ratios: list[float]
    kinds: dict[str, str]
    kind_ratios: dict[str, list[float]]

    @classmethod
    def of(cls, entry_plan, stats: dict, reference: dict[str, float], kinds: dict[str, str] | None = None) -> Timings:
        kinds = upstream_kinds() if kinds is None else kinds
        groups = tu_groups(entry_plan)
        recorded = {name: stats[stats_key(entry_plan.entry, name)]["wall_s"] for name in groups
                    if stats.get(stats_key(entry_plan.entry, name), {}).get("wall_s") is not None}
        timed = [(groups[name], seconds / reference[groups[name]]) for name, seconds in recorded.items()
                 if groups[name] != HOST and reference.get(groups[name], 0) > 0]
        kind_ratios: dict[str, list[float]] = {}
        for group, ratio in timed:
            if group in kinds:
                kind_ratios.setdefault(kinds[group], []).append(ratio)
        return cls(groups, recorded, sorted(r for _, r in timed), kinds,
                   {kind: sorted(values) for kind, values in kind_ratios.items()})

    @property
    def scale(self) -> float:
        return statistics.median(self.ratios) if self.ratios else 1.0

    def scale_of(self, group: str, where: int = 0) -> float:
        """The speed ratio for a family never compiled here: its upstream's timed TUs' (median,
        or a quartile), else every timed kernel TU's, else 1."""
        ratios = self.kind_ratios.get(self.kinds.get(group, ""), []) or self.ratios
        return _quantile(ratios, where) if ratios else 1.0

    def untimed_groups(self) -> set[str]:
        return set(self.groups.values()) - {self.groups[name] for name in self.recorded}


def entry_jobs(entry_plan, stats: dict, reference: dict[str, float] | None = None,
               kinds: dict[str, str] | None = None) -> tuple[list[SimJob], int]:
    """The entry's TUs with their recorded wall times and memory estimates. A TU without a
    recorded time counts as the median recorded time of its group (family or host) in this
    entry; a group none of whose TUs was timed here, as its reference time (matrix.yaml's
    compile_time_estimates_s) x this machine's speed ratio for its upstream (Timings.scale_of),
    else as the median of all recorded TUs. Returns the jobs and how many had their own time."""
    reference = reference or {}
    return _jobs(entry_plan, stats, reference, Timings.of(entry_plan, stats, reference, kinds))


def _jobs(entry_plan, stats: dict, reference: dict[str, float], timings: Timings,
          where: int = 0) -> tuple[list[SimJob], int]:
    peaks = peaks_of(stats)
    recorded = timings.recorded
    by_group: dict[str, list[float]] = {}
    for name, seconds in recorded.items():
        by_group.setdefault(timings.groups[name], []).append(seconds)
    fallback = statistics.median(recorded.values()) if recorded else 0.0
    jobs = []
    for name, group in timings.groups.items():
        seconds = recorded.get(name)
        if seconds is None:
            seconds = (statistics.median(by_group[group]) if group in by_group
                       else reference[group] * timings.scale_of(group, where) if group in reference else fallback)
        jobs.append(SimJob(name, seconds, estimate(entry_plan.entry, name, group, peaks)[0]))
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


def describe(entry_plan, stats: dict, here: Budget, reference: dict[str, float] | None = None) -> list[str]:
    """The dry run's lines for one entry: the compile phase here and on servers, how sure that
    is, and the cost by family (CPU-seconds as recorded here, or as predicted)."""
    reference = reference or {}
    timings = Timings.of(entry_plan, stats, reference)
    jobs, timed = _jobs(entry_plan, stats, reference, timings)
    if timed == 0 and not reference:
        return ["  predicted compile phase: no recorded TU times yet (build once; the next --dry-run predicts)"]
    machine = [Server(here.cpu_slots, here.memory_bytes)]
    bound = max(sum(j.seconds for j in jobs) / here.cpu_slots, max(j.seconds for j in jobs))
    ratios = timings.ratios
    untimed = timings.untimed_groups()
    scaled = sum(1 for group in timings.groups.values() if group in untimed and group in reference)
    if timed == 0:
        how = ("no TU timed here yet: every TU at its family's reference time (matrix.yaml "
               "compile_time_estimates_s), unscaled")
    else:
        how = f"{timed} of {len(jobs)} TUs timed by earlier builds, the rest at their family's median here"
        if scaled and ratios:
            by_kind = ", ".join(f"{kind} {statistics.median(values):.2f}"
                                for kind, values in sorted(timings.kind_ratios.items()))
            how += (f"; {scaled} TU(s) of families not compiled here at their reference time x this machine's "
                    f"median speed ratio for their upstream's timed TUs ({by_kind}; all {len(ratios)}: "
                    f"{timings.scale:.2f})")
        elif scaled:
            how += f"; {scaled} TU(s) of families not compiled here at their reference time (no kernel TU timed here)"
    lines = [f"  predicted compile phase ({how}; link, verify and export not included):",
             f"    this machine ({here.cpu_slots} slot(s), {here.memory_bytes / GIB:.1f} GiB): "
             f"{_duration(simulate(jobs, machine))} "
             f"(lower bound, max(TU time / slots, longest TU): {_duration(bound)})"]
    if scaled and len(ratios) >= 4:  # how sure: the same with the ratio's quartiles
        low, high = _quantile(ratios, -1), _quantile(ratios, 1)
        low_jobs, high_jobs = (_jobs(entry_plan, stats, reference, timings, where=w)[0] for w in (-1, 1))
        lines.append(f"    with the ratio's quartiles ({low:.2f}-{high:.2f}): "
                     f"{_duration(simulate(low_jobs, machine))} to {_duration(simulate(high_jobs, machine))}")
    for count in SERVER_COUNTS:
        servers = [Server(SERVER_CORES, SERVER_GIB * GIB)] * count
        lines.append(f"    {count:>2} server(s) of {SERVER_CORES} cores and {SERVER_GIB} GiB: "
                     f"{_duration(simulate(jobs, servers))}")
    return lines + cost_lines(
        "cost by family (CPU-seconds: recorded here, or predicted; peak: recorded, or the matrix's estimate)",
        [TUCost(timings.groups[j.name], j.seconds, j.estimate_bytes, j.name in timings.recorded) for j in jobs])


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
