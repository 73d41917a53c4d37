"""Memory-aware job scheduling.

A job starts only when a CPU slot is free and the running jobs' memory estimates plus its
own fit the budget. A job whose estimate alone exceeds the budget runs by itself (it may
still fit in reality; refusing it would make the build impossible), and the plan says so.
The runner is a plain callable so the admission rule is testable with synthetic jobs.

A job the kernel killed for memory is run once more, alone (`retry_alone`): nothing else is
admitted until the machine is empty, nothing joins it, and its estimate is raised to the peak
it reached. An interrupt (KeyboardInterrupt) leaves `run_jobs` at once, without waiting for
the running jobs: the caller ends them (removing the container their commands run in).
"""

from __future__ import annotations

import os
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generic, TypeVar

from flashbuild.config.memory import GIB

Payload = TypeVar("Payload")


@dataclass(frozen=True)
class Budget:
    memory_bytes: int
    cpu_slots: int
    source: str  # where the memory figure came from, for the plan printout
    available_bytes: int | None = None  # what the machine had free when the budget was made

    def describe(self) -> str:
        return f"{self.memory_bytes / GIB:.1f} GiB ({self.source}), {self.cpu_slots} CPU slot(s)"

    def warning(self) -> str | None:
        """Why this budget defeats the memory-aware scheduler, or None. A zero budget still
        builds (each TU alone, as an oversized one would run) rather than refusing: available
        memory is a momentary reading, so the same reserve may fit a moment later."""
        if self.memory_bytes > 0:
            return None
        available = f"the {self.available_bytes / GIB:.1f} GiB" if self.available_bytes is not None else "what is"
        return ("the reserve leaves a memory budget of 0 GiB: every TU will compile alone, one at a time\n"
                f"  fix: give --reserve-gb less than {available} available now, or free memory")


@dataclass
class Job(Generic[Payload]):
    name: str
    estimate_bytes: int
    payload: Payload
    alone: bool = False  # started only on an empty machine, and nothing joins it (a retry)


@dataclass
class Outcome(Generic[Payload]):
    job: Job
    ok: bool
    result: object = None


@dataclass
class SchedulerEvents:
    """Callbacks for progress display; all optional."""

    started: Callable[[Job], None] = lambda job: None
    finished: Callable[[Outcome], None] = lambda outcome: None
    retried: Callable[[Outcome, Job], None] = lambda outcome, again: None  # the failed try, the retry


def _read_int(path: str) -> int | None:
    try:
        value = Path(path).read_text().strip()
    except OSError:
        return None
    return int(value) if value.isdigit() else None


def available_memory_bytes() -> tuple[int, str]:
    """Memory this build may use: the cgroup limit minus usage if one is set, else the
    host's MemAvailable, whichever is smaller."""
    meminfo = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            meminfo[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    best, source = meminfo.get("MemAvailable", 4 * GIB), "host MemAvailable"
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit and limit < (1 << 60) and usage is not None and limit - usage < best:
            best, source = limit - usage, "cgroup limit"
    return best, source


def make_budget(reserve_bytes: int, jobs_limit: int | None = None) -> Budget:
    memory, source = available_memory_bytes()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    slots = max(1, min(cpus, jobs_limit) if jobs_limit else cpus)
    return Budget(max(memory - reserve_bytes, 0), slots,
                  f"{source} {memory / GIB:.1f} GiB minus {reserve_bytes / GIB:.1f} GiB reserve", memory)


def admissible(job: Job, running_bytes: int, running_count: int, budget: Budget) -> bool:
    if running_count >= budget.cpu_slots:
        return False
    if running_count == 0:
        return True  # an oversized job still runs, alone
    return running_bytes + job.estimate_bytes <= budget.memory_bytes


def admit(pending: list[Job], running: list[Job], budget: Budget) -> list[Job]:
    """Which pending jobs (in their order) start now beside `running`. A job that must run alone
    waits for an empty machine and lets no job behind it overtake it meanwhile."""
    started: list[Job] = []
    for job in pending:
        now = running + started
        if any(other.alone for other in now):
            break
        if job.alone:
            if not now:
                started.append(job)
            break
        if admissible(job, sum(other.estimate_bytes for other in now), len(now), budget):
            started.append(job)
    return started


def retry_alone(job: Job, killed_for_memory: bool, peak_bytes: int | None) -> Job | None:
    """The job to run again after a failed one: only one the kernel killed for memory, and only
    if it did not run alone already; alone, with its estimate raised to the peak it reached
    (memory that other jobs took beside it is free then). None: the failure stands."""
    if not killed_for_memory or job.alone:
        return None
    return Job(job.name, max(job.estimate_bytes, peak_bytes or 0), job.payload, alone=True)


def max_concurrency(estimates: list[int], budget: Budget) -> int:
    """How many jobs can run at once in the best case: the smallest estimates first."""
    total, count = 0, 0
    for estimate in sorted(estimates):
        if count >= budget.cpu_slots or (count and total + estimate > budget.memory_bytes):
            break
        total += estimate
        count += 1
    return max(count, 1 if estimates else 0)


def run_jobs(
    jobs: list[Job],
    runner: Callable[[Job], tuple[bool, object]],
    budget: Budget,
    events: SchedulerEvents | None = None,
    stop_on_failure: bool = True,
    retry: Callable[[Outcome], Job | None] | None = None,
) -> list[Outcome]:
    """Run jobs under the budget, largest estimate first among those that fit.
    Returns outcomes in completion order. After a failure no new job starts (running ones
    finish) when stop_on_failure is set. `retry` turns a failed outcome into a job to run
    (first, before any other pending job) instead of a failure; e.g. partial(retry_alone, ...)."""
    events = events or SchedulerEvents()
    pending = sorted(jobs, key=lambda j: (-j.estimate_bytes, j.name))
    running: dict[Future, Job] = {}
    outcomes: list[Outcome] = []
    failed = False

    # Admission and bookkeeping happen on this thread only; workers just run jobs.
    pool = ThreadPoolExecutor(max_workers=budget.cpu_slots)
    try:
        while pending or running:
            if not (failed and stop_on_failure):
                for job in admit(pending, list(running.values()), budget):
                    pending.remove(job)
                    events.started(job)
                    running[pool.submit(runner, job)] = job
            if not running:
                break
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in done:
                job = running.pop(future)
                try:
                    ok, result = future.result()
                except Exception as exc:  # a runner bug must not hang the build
                    ok, result = False, exc
                outcome = Outcome(job, ok, result)
                again = None if ok or retry is None else retry(outcome)
                if again is not None:
                    events.retried(outcome, again)
                    pending.insert(0, again)
                    continue
                outcomes.append(outcome)
                failed = failed or not ok
                events.finished(outcome)
    except BaseException:  # an interrupt: the caller stops the running jobs; waiting here could take minutes
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return outcomes
