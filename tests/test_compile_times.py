"""Reading back what compiles cost from their time files, and the compile phase's lower bound
(what scripts/host_build_gpu.sh reports after each call on the GPU machine)."""

import os
import subprocess
import sys
from pathlib import Path

from flashbuild.compile.compile_times import TUTime, lower_bound, parse_time_file, phase_span, read_times, report
from flashbuild.core.errors import ConfigError


def test_only_successful_compiles_count_as_compile_times():
    assert parse_time_file("62.41 4012345\n") == (62.41, 4012345)
    assert parse_time_file("Command terminated by signal 2\n30.00 2000000\n") is None  # stopped at the limit
    assert parse_time_file("Command exited with non-zero status 1\n3.00 100\n") is None
    assert parse_time_file("") is None and parse_time_file("abc def\n") is None


def test_the_lower_bound_is_the_larger_of_the_even_split_and_the_longest_tu():
    assert lower_bound([100, 100, 100, 100], 2) == 200  # work-bound
    assert lower_bound([400, 10, 10, 10], 16) == 400  # one long TU dominates
    assert lower_bound([], 16) == 0


def test_a_calls_compile_phase_runs_from_the_first_start_to_the_last_end():
    times = [TUTime("a", 50, 1, ended=1050), TUTime("b", 20, 1, ended=1100), TUTime("c", 10, 1, ended=1030)]
    assert phase_span(times) == 1100 - 1000
    assert phase_span([]) == 0


def test_time_files_are_read_by_tu_with_their_end_time_and_failures_left_out(tmp_path):
    (tmp_path / "fa2_a.time").write_text("120.5 4000000\n")
    (tmp_path / "fa2_b.time").write_text("Command terminated by signal 2\n60.0 3000000\n")
    (tmp_path / "fa2_a.log").write_text("not a time file\n")
    os.utime(tmp_path / "fa2_a.time", (2000, 2000))
    times = read_times(tmp_path)
    assert list(times) == ["fa2_a"]
    assert times["fa2_a"] == TUTime("fa2_a", 120.5, 4000000, 2000)


def test_the_report_counts_this_calls_compiles_and_bounds_only_planned_tus():
    times = {"k1": TUTime("k1", 300, 4 * 1024**2, ended=5000), "k2": TUTime("k2", 100, 1024**2, ended=4000),
             "old": TUTime("old", 900, 1, ended=100)}
    text = report("minimal-host-cuda13.0-sm90a", ["k1", "k2", "h1"], times, slots=2, since=4500)
    assert "2 of 3 planned TUs have a compile time" in text
    assert "this call: 1 TU(s) compiled, compile phase 300 s" in text
    assert "lower bound on 2 slots: max(400 / 2, 300) = 300 s (not every TU timed yet" in text
    assert "old" not in text


def test_an_unknown_matrix_is_a_clear_error_not_a_traceback():
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "flashbuild.compile.compile_times", "--matrix", "nosuch"],
                          cwd=repo, capture_output=True, text=True)
    assert done.returncode == ConfigError.exit_code
    assert "unknown matrix 'nosuch'" in done.stderr and "fix:" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_report_costs_each_family_of_the_tus_timed():
    times = {"fa1": TUTime("fa1", 100.0, 4 * 1024**2, 500.0), "fa2": TUTime("fa2", 60.0, 3 * 1024**2, 600.0),
             "pd": TUTime("pd", 5.0, 1024**2 // 2, 610.0), "h": TUTime("h", 1.0, 1024**2 // 4, 620.0)}
    groups = {"fa1": "fa2_fwd", "fa2": "fa2_fwd", "pd": "paged_decode", "h": "host", "untimed": "sm90_prefill"}
    lines = report("full-host-cuda13.0-sm90a", list(groups), times, slots=2, groups=groups).splitlines()
    table = lines[lines.index("  cost by family (the TUs timed):") + 1:]
    assert [line.split()[0] for line in table] == ["fa2_fwd", "paged_decode", "host"]
    assert table[0].split(None, 1)[1] == "2 TU(s),     160 CPU-s (2 timed), peak 4.0 GiB"
