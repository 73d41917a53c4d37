"""The model for many machines: the scheduler's admission rule replayed over recorded times."""

from types import SimpleNamespace

import pytest

from flashbuild.memory import GIB
from flashbuild.predict import Server, SimJob, describe, entry_jobs, simulate
from flashbuild.jobs import Budget


def jobs(*seconds, gib=1.0):
    return [SimJob(f"tu{i}", s, int(gib * GIB)) for i, s in enumerate(seconds)]


def test_two_slots_run_four_equal_jobs_in_two_rounds():
    assert simulate(jobs(10, 10, 10, 10), [Server(2, 64 * GIB)]) == 20


def test_memory_not_cores_limits_concurrency():
    # 8 cores, but 5 GiB fits one 3 GiB job at a time
    assert simulate(jobs(10, 10, 10, gib=3), [Server(8, 5 * GIB)]) == 30


def test_a_job_larger_than_a_server_still_runs_alone():
    assert simulate(jobs(7, gib=100), [Server(4, 8 * GIB)]) == 7


def test_more_servers_shorten_the_build_down_to_its_longest_job():
    work = jobs(100, *[10] * 40)
    one, four, many = (simulate(work, [Server(4, 64 * GIB)] * n) for n in (1, 4, 64))
    # one server: the 100 s job on one slot; 30 short ones on the other three by then, 10 after
    assert one == pytest.approx(130)
    assert four == pytest.approx(100) and many == pytest.approx(100)


def test_largest_estimate_starts_first_like_the_scheduler():
    work = [SimJob("small", 50, GIB), SimJob("big", 50, 6 * GIB), SimJob("mid", 50, 3 * GIB)]
    # 8 GiB: big (6) starts first; mid (3) does not fit beside it, small (1) does
    assert simulate(work, [Server(2, 8 * GIB)]) == 100


def entry_plan(*names):
    entry = SimpleNamespace(archs=("sm_90a",), memory_estimates_gb={"fam": 4.0, "host": 0.5})
    kernels = [SimpleNamespace(name=n, family="fam") for n in names]
    return SimpleNamespace(entry=entry, kernels=kernels, hosts=[SimpleNamespace(name="api")])


def test_untimed_tus_take_their_groups_median_and_recorded_peaks():
    stats = {"a@sm_90a": {"wall_s": 10.0, "peak_rss_kb": 1024}, "b@sm_90a": {"wall_s": 30.0, "peak_rss_kb": 2048},
             "api@sm_90a": {"wall_s": 1.0, "peak_rss_kb": 512}}
    work, timed = entry_jobs(entry_plan("a", "b", "c"), stats)
    by_name = {j.name: j for j in work}
    assert timed == 3 and by_name["c"].seconds == 20.0
    assert by_name["a"].estimate_bytes == 1024 * 1024 and by_name["c"].estimate_bytes == 4 * GIB


def test_dry_run_says_when_nothing_was_timed_yet():
    lines = describe(entry_plan("a"), {}, Budget(16 * GIB, 2, "test"))
    assert lines == ["  predicted compile phase: no recorded TU times yet (build once; the next --dry-run predicts)"]


def test_dry_run_prices_this_machine_and_each_server_count():
    stats = {"a@sm_90a": {"wall_s": 60.0, "peak_rss_kb": 1024}, "api@sm_90a": {"wall_s": 1.0, "peak_rss_kb": 512}}
    lines = describe(entry_plan("a", "b"), stats, Budget(16 * GIB, 1, "test"))
    # 60 + 60 (b: a's median) + 1; the bound is the same on one slot
    assert "this machine (1 slot(s), 16.0 GiB): 2.0 min (lower bound, max(TU time / slots, longest TU): 2.0 min)" \
        in lines[1]
    assert [line.split(":")[0].split()[0] for line in lines[2:]] == ["1", "4", "16"]
