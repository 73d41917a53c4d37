"""The kernel's OOM killer, for real: the toolchain container under a tight memory limit, and two
synthetic TUs whose compile command holds 150 MiB each for a few seconds (a stand-in nvcc on the
container's PATH; everything else goes to the real one). Side by side they exceed the 250 MiB
limit and one is killed; it is compiled again alone and both objects are made. A TU that needs
more than the limit alone is killed twice and fails as killed for memory. Needs a Docker engine."""

import hashlib
import os

import pytest

from flashbuild.core import fixed_pid
from flashbuild.compile.compiler import EntryCompiler, TUSpec
from flashbuild.toolchains.container import ToolchainContainer, docker_client
from flashbuild.config.options import load_config
from flashbuild.pipeline import Paths, ensure_toolchain
from flashbuild.config.build_plan import make_plan
from flashbuild.compile.jobs import Budget, Job, SchedulerEvents

pytestmark = pytest.mark.container

MIB = 1024**2
LIMIT = 250 * MIB
# Holds as many MiB as the .hog file says for 3 s, in one process (as cicc would), then writes -o.
STAND_IN_NVCC = """#!/bin/sh
for arg; do last=$arg; done
case "$last" in *.hog) ;; *) exec /usr/bin/nvcc "$@" ;; esac
while [ "$1" != -o ]; do shift; done
exec perl -e 'vec($x, $ARGV[0] * 1048576 - 1, 8) = 1; sleep 3; open(my $f, ">", $ARGV[1]) or die; print $f "obj"' \\
    "$(cat "$last")" "$2"
"""
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@pytest.fixture
def hog_compiler(repo, tmp_path):
    """An EntryCompiler over tmp_path in the smoke entry's toolchain container, under LIMIT, with
    the stand-in nvcc first on its PATH."""
    (tmp_path / "VERSION").write_text((repo / "VERSION").read_text())
    stand_in = tmp_path / "bin" / "nvcc"
    stand_in.parent.mkdir()
    stand_in.write_text(STAND_IN_NVCC)
    stand_in.chmod(0o755)
    plan = make_plan(load_config(repo / "matrix.yaml").matrix("smoke"), repo).entries[0]
    client = docker_client()
    image = ensure_toolchain(client, plan.entry.image, Paths(repo))
    with ToolchainContainer(client, image.tag, tmp_path, "oom-test", memory_limit=LIMIT,
                            environment={"PATH": f"{tmp_path / 'bin'}:{PATH}"}) as container:
        compiler = EntryCompiler(tmp_path, tmp_path / "build", "smoke", plan, image, {}, container)
        compiler.shim = fixed_pid.build_shim(container, tmp_path / "tools")
        yield compiler


def _job(compiler, name: str, mib: int) -> Job:
    source = compiler.repo_root / f"{name}.hog"
    source.write_text(str(mib))
    return Job(name, 100 * MIB, TUSpec(name, "kernel", source, [], hashlib.sha256(name.encode()).hexdigest()))


def test_a_tu_killed_for_memory_under_a_container_limit_is_compiled_again_alone_and_completes(hog_compiler):
    retried = []
    events = SchedulerEvents(retried=lambda outcome, again: retried.append((outcome, again)))
    jobs = [_job(hog_compiler, "hog_a", 150), _job(hog_compiler, "hog_b", 150)]
    outcomes = hog_compiler.compile_jobs(jobs, Budget(8 * 1024**3, 2, "test"), events)
    assert sorted(o.job.name for o in outcomes) == ["hog_a", "hog_b"] and all(o.ok for o in outcomes)
    assert all(o.result.object_path.read_text() == "obj" for o in outcomes)
    assert 1 <= len(retried) <= 2, "side by side, at least one of them is over the limit"
    for killed, again in retried:
        assert killed.result.killed_for_memory and again.alone
        assert again.estimate_bytes >= killed.job.estimate_bytes
        assert killed.job.name in " ".join(hog_compiler.retries)
    assert not list(hog_compiler.object_dir.glob("*.partial"))


def test_a_tu_over_the_limit_alone_is_killed_twice_and_fails_as_killed_for_memory(hog_compiler):
    outcomes = hog_compiler.compile_jobs([_job(hog_compiler, "hog_big", 400)], Budget(8 * 1024**3, 2, "test"),
                                         SchedulerEvents())
    [outcome] = outcomes
    assert not outcome.ok and outcome.job.alone, "the failure is the retry's, which ran alone"
    assert outcome.result.killed_for_memory
    assert not outcome.result.object_path.exists() and not list(hog_compiler.object_dir.glob("*.partial"))
    assert os.path.getsize(outcome.result.log_path.with_suffix(".time")) > 0, "GNU time's figures were kept"
