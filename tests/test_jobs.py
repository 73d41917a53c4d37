"""Scheduler admission on synthetic jobs with known memory estimates."""

import threading
import time

import pytest

from flashbuild.compile.jobs import (Budget, Job, SchedulerEvents, admissible, admit, max_concurrency, retry_alone,
                                 run_jobs)

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


def test_a_job_that_must_run_alone_waits_for_an_empty_machine_and_is_not_overtaken():
    budget = Budget(memory_bytes=100 * GB, cpu_slots=4, source="test")
    alone, small, other = Job("retry", 3 * GB, None, alone=True), Job("small", GB, None), Job("other", GB, None)
    assert admit([alone, small], [other], budget) == [], "nothing overtakes a job waiting to run alone"
    assert admit([alone, small], [], budget) == [alone], "and nothing joins it"
    assert admit([small], [alone], budget) == []
    assert admit([small, Job("b", GB, None)], [other], budget) == [small, Job("b", GB, None)]


def test_only_a_job_killed_for_memory_is_retried_once_alone_with_the_peak_it_reached():
    job = Job("tu", 2 * GB, "payload")
    again = retry_alone(job, killed_for_memory=True, peak_bytes=3 * GB)
    assert again == Job("tu", 3 * GB, "payload", alone=True)
    assert retry_alone(job, killed_for_memory=True, peak_bytes=GB).estimate_bytes == 2 * GB, "never lowered"
    assert retry_alone(job, killed_for_memory=False, peak_bytes=3 * GB) is None, "a compile error stands"
    assert retry_alone(again, killed_for_memory=True, peak_bytes=4 * GB) is None, "killed alone: no third try"


def test_a_job_killed_for_memory_runs_again_alone_and_the_run_completes():
    killed_once = set()
    recorder = Recorder()

    def runner(job):
        recorder(job)
        if job.name == "big" and "big" not in killed_once:
            killed_once.add("big")
            return False, "killed"
        return True, job.name

    def retry(outcome):
        return retry_alone(outcome.job, outcome.result == "killed", 6 * GB)

    retried = []
    events = SchedulerEvents(retried=lambda outcome, again: retried.append((outcome.job.name, again.estimate_bytes)))
    jobs = [Job("big", 4 * GB, None)] + [Job(f"tu{i}", 2 * GB, None) for i in range(4)]
    outcomes = run_jobs(jobs, runner, Budget(memory_bytes=8 * GB, cpu_slots=3, source="test"), events, retry=retry)
    assert sorted(o.job.name for o in outcomes) == sorted(j.name for j in jobs) and all(o.ok for o in outcomes)
    assert retried == [("big", 6 * GB)]
    second_try = len(recorder.order) - 1 - recorder.order[::-1].index("big")
    assert recorder.peaks[second_try] == (6 * GB, 1), "the retry started on an empty machine"
    assert all(size < 6 * GB for size, _ in recorder.peaks[second_try + 1:]), "and nothing joined it"
    assert recorder.order.count("big") == 2


def test_an_interrupt_leaves_run_jobs_at_once_without_waiting_for_running_jobs(interruptible):
    release, running = threading.Event(), threading.Event()

    def blocked(job):
        running.set()
        release.wait(30)
        return True, job.name

    fired = interruptible(running)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_jobs([Job("a", GB, None), Job("b", GB, None)], blocked, Budget(10 * GB, 2, "test"))
        assert time.monotonic() - fired["at"] < 5, "the running jobs were waited for"
    finally:
        release.set()
