"""The README's two commands are the contract with a fresh machine; CI must run the test one."""

import re


def readme_commands(repo):
    block = re.search(r"```sh\n(.*?)```", (repo / "README.md").read_text(), re.S).group(1)
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_readme_has_two_commands_build_then_test(repo):
    build, test = readme_commands(repo)
    assert "invoke setup build --matrix minimal" in build
    assert test.endswith("invoke setup test")


def test_ci_runs_the_readme_test_command_verbatim(repo):
    _, test = readme_commands(repo)
    ci_lines = [line.strip() for line in (repo / ".ci" / "run").read_text().splitlines()]
    assert test in ci_lines


def test_commands_do_not_need_the_invoke_script_on_path(repo):
    # On a fresh machine `python3 -m pip` installs invoke without putting its console script on
    # PATH (pyenv adds the shim only on a rehash); `python3 -m invoke` always works.
    for command in readme_commands(repo):
        assert "python3 -m invoke " in command and " && invoke " not in command


def test_ci_script_runs_the_readme_command_under_sh_and_bash(repo, tmp_path):
    # CI may call the script as `sh .ci/run` (dash), `bash .ci/run` or directly, from any folder:
    # each must reach the README's command. A stub python3 records what it was asked to run.
    import os
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    stub = bin_dir / "python3"
    stub.write_text(f'#!/bin/sh\necho "$PWD $*" >> "{log}"\n')
    stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    script = repo / ".ci" / "run"
    for launcher in (["sh"], ["bash"], []):
        log.write_text("")
        result = subprocess.run([*launcher, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert result.returncode == 0, (launcher, result.stderr)
        assert log.read_text().splitlines() == [
            f"{repo} -m pip install -r requirements.txt",
            f"{repo} -m invoke setup test",
        ], launcher
