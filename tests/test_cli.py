"""What a user typing a wrong value into the command line gets: one clear error with a fix and
its exit code, never a traceback; and a warning, not silence, for a reserve that leaves no
memory budget. Most cases call the task functions of tasks.py in-process (what invoke
calls, strings as invoke passes them); one per kind goes through `python3 -m invoke`."""

import json
import subprocess
import sys

import pytest
from conftest import exported_manifest
from invoke import Context, Exit

import tasks
from flashbuild.release.manifest import read_manifest
from flashbuild.core.errors import VerifyError
from flashbuild.config.memory import GIB
from flashbuild.compile.jobs import Budget, make_budget


def invoke_cli(repo, *argv):
    result = subprocess.run([sys.executable, "-m", "invoke", *argv], cwd=repo, capture_output=True, text=True)
    assert "Traceback" not in result.stdout + result.stderr
    return result


@pytest.mark.parametrize("option, value", [
    ("jobs", "abc"), ("jobs", "1.5"), ("jobs", "0"), ("jobs", "-3"),
    ("reserve_gb", "abc"), ("reserve_gb", "nan"), ("reserve_gb", "inf"), ("reserve_gb", "-1"),
])
def test_bad_jobs_or_reserve_is_a_config_error(option, value):
    with pytest.raises(Exit) as raised:
        tasks.build(Context(), matrix="smoke", dry_run=True, **{option: value})
    flag = "--" + option.replace("_", "-")
    assert raised.value.code == 2
    assert f"config error: {flag} '{value}'" in raised.value.message
    assert "fix: e.g." in raised.value.message


def test_cli_refuses_bad_jobs_without_traceback(repo):
    result = invoke_cli(repo, "build", "--matrix", "smoke", "--dry-run", "--jobs", "abc")
    assert result.returncode == 2
    assert "--jobs 'abc' is not a whole number of at least 1" in result.stderr


def test_good_jobs_and_reserve_are_used(capsys):
    tasks.build(Context(), matrix="smoke", dry_run=True, jobs="1", reserve_gb="0.5")
    out = capsys.readouterr().out
    assert "minus 0.5 GiB reserve), 1 CPU slot(s)" in out
    assert "warning" not in out


def test_reserve_beyond_available_memory_warns_and_names_the_budget(capsys):
    tasks.build(Context(), matrix="smoke", dry_run=True, reserve_gb="100000")
    out = capsys.readouterr().out
    assert "budget: 0.0 GiB (" in out
    assert "warning: the reserve leaves a memory budget of 0 GiB: every TU will compile alone" in out
    assert "fix: give --reserve-gb less than the " in out


def test_zero_budget_warning_says_what_is_available():
    assert Budget(8 * GIB, 2, "test", 10 * GIB).warning() is None
    assert "less than the 10.0 GiB available now" in Budget(0, 2, "test", 10 * GIB).warning()
    assert make_budget(10**6 * GIB).warning() is not None


def artifact_with_manifest(tmp_path, text):
    folder = tmp_path / "artifact"
    (folder / "lib").mkdir(parents=True)
    (folder / "lib" / "libflash_attn_standalone.so.0.1.0").write_bytes(b"")
    (folder / "manifest.json").write_text(text)
    return folder


def test_cli_verify_of_a_manifest_that_is_not_json_is_a_verify_error(repo, tmp_path):
    folder = artifact_with_manifest(tmp_path, "{ not json")
    result = invoke_cli(repo, "verify", str(folder))
    assert result.returncode == 7
    assert f"verify error: {folder / 'manifest.json'} is not valid JSON" in result.stderr
    assert "fix: restore it from the entry's tarball" in result.stderr


GOOD = exported_manifest()


def without(path):
    manifest = json.loads(json.dumps(GOOD))
    *parents, last = path
    record = manifest
    for key in parents:
        record = record[key]
    del record[last]
    return manifest


@pytest.mark.parametrize("manifest, named", [
    ([], "(top level): [] is not of type 'object'"),
    (without(["archs"]), "(top level): 'archs' is a required property"),
    (without(["api", "soname"]), "api: 'soname' is a required property"),
    (without(["translation_units", 0, "symbol"]), "translation_units[0]: 'symbol' is a required property"),
    ({**GOOD, "toolchain": "cuda"}, "toolchain: 'cuda' is not of type 'object'"),
    # What verify used to accept while SHA256SUMS agreed (issue 31, finding 6).
    (without(["capabilities"]), "(top level): 'capabilities' is a required property"),
    ({**GOOD, "files": {"/etc/passwd": "b" * 64}}, "files: '/etc/passwd' does not match"),
    ({**GOOD, "files": {"lib/../../etc/passwd": "b" * 64}}, "files: 'lib/../../etc/passwd' does not match"),
    (None, "(top level): None is not of type 'object'"),
    (5, "(top level): 5 is not of type 'object'"),
])
def test_manifest_lacking_what_verify_reads_is_named(tmp_path, manifest, named):
    path = artifact_with_manifest(tmp_path, json.dumps(manifest)) / "manifest.json"
    with pytest.raises(VerifyError) as raised:
        read_manifest(path)
    assert raised.value.message.startswith(f"{path}: {named}")
    assert raised.value.exit_code == 7 and raised.value.fix


def test_cli_verify_of_a_manifest_lacking_keys_is_a_verify_error(repo, tmp_path):
    folder = artifact_with_manifest(tmp_path, json.dumps(without(["api"])))
    result = invoke_cli(repo, "verify", str(folder))
    assert result.returncode == 7
    assert "manifest.json: (top level): 'api' is a required property" in result.stderr


def test_cli_refuses_a_missing_signing_key_or_allowed_signers_file_without_traceback(repo, tmp_path):
    result = invoke_cli(repo, "build", "--matrix", "smoke", "--sign-key", str(tmp_path / "no-such-key"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"the signing key {tmp_path / 'no-such-key'} does not exist" in result.stderr
    folder = artifact_with_manifest(tmp_path, json.dumps(GOOD))
    result = invoke_cli(repo, "verify", str(folder), "--allowed-signers", str(tmp_path / "nobody"))
    assert result.returncode == 2 and "allowed-signers file" in result.stderr and "Traceback" not in result.stderr
    (tmp_path / "signers").write_text("")
    result = invoke_cli(repo, "verify", str(folder), "--allowed-signers", str(tmp_path / "signers"))
    assert result.returncode == 2 and "this is not a tarball" in result.stderr


def test_the_fast_suite_leaves_out_container_tests_and_spreads_over_every_core():
    from flashbuild.commands import suite_argv

    def options(argv):  # after `python3 -m pytest -q tests`
        return argv[argv.index("tests") + 1:]

    assert options(suite_argv(fast=True)) == ["-m", "not container", "-n", "auto"]
    assert options(suite_argv()) == []  # the whole suite: one process, every test
    assert options(suite_argv(k="cli")) == ["-k", "cli"]
    import xdist  # noqa: F401  (requirements.txt pins pytest-xdist: --fast needs it)

