"""The model for many machines: the scheduler's admission rule replayed over recorded times."""

from types import SimpleNamespace

import pytest

from flashbuild.config.memory import GIB
from flashbuild.compile.predict import Server, SimJob, describe, entry_jobs, simulate
from flashbuild.compile.jobs import Budget


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
    assert [line.split(":")[0].split()[0] for line in lines[2:5]] == ["1", "4", "16"]
    assert lines[5].startswith("  cost by family")


def two_family_plan(timed, untimed):
    entry = SimpleNamespace(archs=("sm_90a",), memory_estimates_gb={"fam": 4.0, "new": 2.0, "host": 0.5})
    kernels = [SimpleNamespace(name=n, family="fam") for n in timed] + \
              [SimpleNamespace(name=n, family="new") for n in untimed]
    return SimpleNamespace(entry=entry, kernels=kernels, hosts=[SimpleNamespace(name="api")])


def test_a_family_never_compiled_here_takes_its_reference_time_at_this_machines_speed():
    # this machine compiled fam's TUs in 2x its reference time; host code does not set the ratio
    stats = {"a@sm_90a": {"wall_s": 20.0}, "b@sm_90a": {"wall_s": 24.0}, "api@sm_90a": {"wall_s": 9.0}}
    reference = {"fam": 11.0, "new": 30.0, "host": 1.0}
    plan = two_family_plan(["a", "b"], ["x", "y"])
    work, timed = entry_jobs(plan, stats, reference)
    by_name = {j.name: j for j in work}
    assert timed == 3
    assert by_name["x"].seconds == pytest.approx(30.0 * (20 / 11 + 24 / 11) / 2)
    assert by_name["x"].estimate_bytes == 2 * GIB
    # without reference times it falls back to the median of every timed TU, as before
    assert {j.name: j.seconds for j in entry_jobs(plan, stats)[0]}["x"] == 20.0


def test_a_family_never_compiled_here_scales_by_its_own_upstreams_timed_tus():
    # fam (upstream A) ran at 2x its reference here, other (upstream B) at 1x: new, of upstream
    # A, takes 2x; without kinds, the median over all timed TUs
    entry = SimpleNamespace(archs=("sm_90a",), memory_estimates_gb={"fam": 1.0, "other": 1.0, "new": 1.0})
    kernels = [SimpleNamespace(name="a", family="fam"), SimpleNamespace(name="b", family="other"),
               SimpleNamespace(name="c", family="other"), SimpleNamespace(name="x", family="new")]
    plan = SimpleNamespace(entry=entry, kernels=kernels, hosts=[])
    stats = {"a@sm_90a": {"wall_s": 20.0}, "b@sm_90a": {"wall_s": 10.0}, "c@sm_90a": {"wall_s": 10.0}}
    reference = {"fam": 10.0, "other": 10.0, "new": 30.0}
    kinds = {"fam": "A", "new": "A", "other": "B"}
    assert {j.name: j.seconds for j in entry_jobs(plan, stats, reference, kinds)[0]}["x"] == pytest.approx(60.0)
    assert {j.name: j.seconds for j in entry_jobs(plan, stats, reference, {})[0]}["x"] == pytest.approx(30.0)


def test_the_real_families_take_the_kind_of_their_upstream():
    from flashbuild.compile.predict import upstream_kinds
    kinds = upstream_kinds()
    assert kinds["fa2_fwd_split"] == kinds["fa2_fwd"] != kinds["sm90_fp8_prefill"] == kinds["sm90_prefill"]


def test_with_nothing_timed_the_dry_run_prices_the_reference_times_unscaled():
    plan = two_family_plan(["a"], ["x"])
    lines = describe(plan, {}, Budget(16 * GIB, 1, "test"), {"fam": 60.0, "new": 60.0, "host": 1.0})
    assert "no TU timed here yet" in lines[0]
    assert "this machine (1 slot(s), 16.0 GiB): 2.0 min" in lines[1]


def test_the_dry_run_says_how_sure_it_is_and_costs_each_family():
    stats = {f"t{i}@sm_90a": {"wall_s": 10.0 * (i + 1), "peak_rss_kb": 1024} for i in range(4)}
    plan = two_family_plan([f"t{i}" for i in range(4)], ["x"])
    lines = describe(plan, stats, Budget(16 * GIB, 1, "test"), {"fam": 10.0, "new": 100.0})
    # speed ratios 1, 2, 3, 4: x at 2 x 100 s and 4 x 100 s beside the 100 s timed and the host
    # TU (untimed, no reference: the median recorded, 25 s)
    quartiles = next(line for line in lines if "quartiles" in line)
    assert "(2.00-4.00)" in quartiles and "5.4 min to 8.8 min" in quartiles
    costs = lines[lines.index(next(line for line in lines if line.startswith("  cost by family"))) + 1:]
    assert [line.split()[0] for line in costs] == ["new", "fam", "host"]
    assert "4 TU(s),     100 CPU-s (4 timed), peak 0.0 GiB" in costs[1]


def test_with_only_host_code_timed_the_reference_times_stay_unscaled():
    plan = two_family_plan([], ["x"])
    lines = describe(plan, {"api@sm_90a": {"wall_s": 3.0}}, Budget(16 * GIB, 1, "test"), {"new": 50.0})
    assert "no kernel TU timed here" in lines[0]
    assert "this machine (1 slot(s), 16.0 GiB): 53 s" in lines[1]
