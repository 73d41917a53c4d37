"""Scheduler admission on synthetic jobs with known memory estimates."""

import threading
import time

from flashbuild.schedule import Budget, Job, admissible, max_concurrency, run_jobs

GB = 1_000_000_000


class Recorder:
    """A runner that sleeps and records which jobs overlapped."""

    def __init__(self, fail=()):
        self.lock = threading.Lock()
        self.running: dict[str, int] = {}
        self.peaks: list[tuple[int, int]] = []  # (bytes running, jobs running) at each start
        self.fail = set(fail)
        self.order: list[str] = []

    def __call__(self, job):
        with self.lock:
            self.running[job.name] = job.estimate_bytes
            self.peaks.append((sum(self.running.values()), len(self.running)))
            self.order.append(job.name)
        time.sleep(0.05)
        with self.lock:
            del self.running[job.name]
        return job.name not in self.fail, job.name


def test_running_estimates_never_exceed_the_budget():
    jobs = [Job(f"tu{i}", size * GB, None) for i, size in enumerate([4, 4, 3, 3, 2, 2, 1, 5])]
    budget = Budget(memory_bytes=8 * GB, cpu_slots=8, source="test")
    recorder = Recorder()
    outcomes = run_jobs(jobs, recorder, budget)
    assert sorted(o.job.name for o in outcomes) == sorted(j.name for j in jobs)
    assert all(o.ok for o in outcomes)
    assert max(b for b, _ in recorder.peaks) <= 8 * GB
    assert max(n for _, n in recorder.peaks) >= 2, "small jobs must run side by side"


def test_cpu_slots_cap_concurrency_even_when_memory_is_plentiful():
    jobs = [Job(f"tu{i}", 1 * GB, None) for i in range(6)]
    recorder = Recorder()
    run_jobs(jobs, recorder, Budget(memory_bytes=100 * GB, cpu_slots=2, source="test"))
    assert max(n for _, n in recorder.peaks) == 2


def test_oversized_job_runs_alone():
    jobs = [Job("huge", 20 * GB, None), Job("small", 1 * GB, None)]
    recorder = Recorder()
    outcomes = run_jobs(jobs, recorder, Budget(memory_bytes=8 * GB, cpu_slots=4, source="test"))
    assert all(o.ok for o in outcomes)
    assert all(n == 1 for _, n in recorder.peaks), "nothing may share the machine with an oversized job"


def test_failure_stops_new_jobs_but_reports_it():
    jobs = [Job(f"tu{i}", 4 * GB, None) for i in range(5)]
    recorder = Recorder(fail={"tu0"})
    outcomes = run_jobs(jobs, recorder, Budget(memory_bytes=4 * GB, cpu_slots=1, source="test"))
    assert [o.job.name for o in outcomes] == ["tu0"]
    assert outcomes[0].ok is False


def test_runner_exception_is_a_failed_outcome_not_a_hang():
    def broken(job):
        raise RuntimeError("boom")

    outcomes = run_jobs([Job("a", GB, None)], broken, Budget(GB, 1, "test"))
    assert outcomes[0].ok is False and isinstance(outcomes[0].result, RuntimeError)


def test_admission_rule():
    budget = Budget(memory_bytes=10 * GB, cpu_slots=3, source="test")
    assert admissible(Job("a", 4 * GB, None), running_bytes=6 * GB, running_count=1, budget=budget)
    assert not admissible(Job("a", 5 * GB, None), running_bytes=6 * GB, running_count=1, budget=budget)
    assert not admissible(Job("a", 1 * GB, None), running_bytes=2 * GB, running_count=3, budget=budget)
    assert admissible(Job("a", 50 * GB, None), running_bytes=0, running_count=0, budget=budget)


def test_max_concurrency_for_the_plan_printout():
    budget = Budget(memory_bytes=20 * GB, cpu_slots=8, source="test")
    assert max_concurrency([int(4.6 * GB)] * 8, budget) == 4
    assert max_concurrency([int(4.6 * GB)] * 8, Budget(20 * GB, 2, "test")) == 2
    assert max_concurrency([30 * GB], budget) == 1
