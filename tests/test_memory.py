"""build/tu-stats.json is a cache of measured TU costs: a file this driver did not write
counts as no recorded stats, said once, and never stops a build or a dry run."""

import json
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

from flashbuild.config.memory import Stats

MALFORMED = {
    "not JSON": "{ garbage",
    "a list": "[]",
    "a TU that is a number": '{"k@sm_90a": 5}',
    "a peak that is a string": '{"k@sm_90a": {"peak_rss_kb": "big", "wall_s": 1.0}}',
    "a peak that is a float": '{"k@sm_90a": {"peak_rss_kb": 1.5, "wall_s": 1.0}}',
    "a wall time that is a string": '{"k@sm_90a": {"peak_rss_kb": 100, "wall_s": "slow"}}',
    # Not measurements (issue 31, finding 5): a budget of 1e30 was printed and planned with.
    "an absurd peak": '{"k@sm_90a": {"peak_rss_kb": 1000000000000000000000000000000, "wall_s": 1.0}}',
    "a wall time that is NaN": '{"k@sm_90a": {"peak_rss_kb": 100, "wall_s": NaN}}',
    "an infinite wall time": '{"k@sm_90a": {"peak_rss_kb": 100, "wall_s": Infinity}}',
    "a wall time of years": '{"k@sm_90a": {"peak_rss_kb": 100, "wall_s": 1e30}}',
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_stats_count_as_none_and_are_noted_once(tmp_path, capsys, case):
    (tmp_path / "tu-stats.json").write_text(MALFORMED[case])
    stats = Stats(tmp_path)
    assert stats.read() == {} and stats.peaks() == {} and Stats(tmp_path).peaks() == {}
    out = capsys.readouterr().out
    assert out.count("is not a TU stats file") == 1
    assert "memory_estimates_gb" in out


def test_next_compile_rewrites_malformed_stats(tmp_path):
    (tmp_path / "tu-stats.json").write_text("[]")
    entry = SimpleNamespace(archs=("sm_90a",))
    Stats(tmp_path).record(entry, [SimpleNamespace(name="k", cached=False, wall_s=2.0, peak_rss_kb=100)])
    assert json.loads((tmp_path / "tu-stats.json").read_text()) == {"k@sm_90a": {"peak_rss_kb": 100, "wall_s": 2.0}}
    assert Stats(tmp_path).peaks() == {"k@sm_90a": 100 * 1024}


def test_dry_run_with_malformed_stats_plans_from_matrix_defaults(repo, tmp_path):
    """Through `python3 -m invoke` in a copy of the repository whose build/ is its own."""
    shutil.copy(repo / "tasks.py", tmp_path / "tasks.py")
    for name in ("flashbuild", "matrix.yaml", "src", "kernels", "sources.lock.yaml", "docker"):  # pre-flight reads all
        (tmp_path / name).symlink_to(repo / name)
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "tu-stats.json").write_text('{"paged_decode_hdim64_fp16_causal_sm90@sm_90a": 5}')
    result = subprocess.run([sys.executable, "-m", "invoke", "build", "--matrix", "smoke", "--dry-run"],
                            cwd=tmp_path, capture_output=True, text=True)
    assert "Traceback" not in result.stdout + result.stderr
    assert result.returncode == 0
    assert result.stdout.count("tu-stats.json is not a TU stats file") == 1
    assert "(matrix default)" in result.stdout and "(recorded)" not in result.stdout


def _result(ok, peak_kb, wall_s=10.0, estimate_kb=None):
    return SimpleNamespace(name="k", cached=False, ok=ok, peak_rss_kb=peak_kb, wall_s=wall_s, estimate_kb=estimate_kb)


def test_a_failed_compile_never_lowers_the_recorded_peak_and_a_finished_one_sets_it(tmp_path):
    entry = SimpleNamespace(archs=("sm_90a",))
    stats = Stats(tmp_path)
    stats.record(entry, [_result(True, 4_000_000, 300.0)])
    stats.record(entry, [_result(False, 900_000, 20.0, estimate_kb=4_000_000)])  # killed early: a floor
    assert stats.read()["k@sm_90a"] == {"peak_rss_kb": 4_000_000, "wall_s": 300.0}
    stats.record(entry, [_result(False, 5_000_000, 400.0, estimate_kb=4_000_000)])  # killed above it
    assert stats.read()["k@sm_90a"] == {"peak_rss_kb": 5_000_000, "wall_s": 400.0}
    stats.record(entry, [_result(True, 3_000_000, 250.0)])  # a finished compile measured the real cost
    assert stats.read()["k@sm_90a"] == {"peak_rss_kb": 3_000_000, "wall_s": 250.0}


def test_a_tu_killed_before_any_record_keeps_at_least_the_estimate_it_ran_under(tmp_path):
    entry = SimpleNamespace(archs=("sm_90a",))
    Stats(tmp_path).record(entry, [_result(False, 1_000_000, 30.0, estimate_kb=5_242_880)])
    assert Stats(tmp_path).read()["k@sm_90a"]["peak_rss_kb"] == 5_242_880
