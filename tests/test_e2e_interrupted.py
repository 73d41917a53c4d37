"""A smoke build stopped while its kernel TU compiles: by SIGTERM, SIGINT or SIGHUP it exits 143,
130 or 129 within seconds; with its container removed from outside (as a stopped engine would leave it) it
fails with one engine error. Either way no container of that build is left, no object or partial
object of the TU, and no artifact. The build runs in this repository with the TU's cached object
and the smoke artifact moved aside (so that it compiles and is not up to date), both put back after.
Once the TU's nvcc is seen the test stops it (SIGSTOP): the compile stays in progress however short
the TU and however long the test takes to act, and a build that waited for its nvcc would never end.
Runs after test_e2e.py (which builds the image and the smoke artifact). Needs a Docker engine
(`invoke setup`)."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flashbuild.toolchains.container import PID_LABEL

pytestmark = pytest.mark.container

KERNEL = "paged_decode_hdim64_fp16_causal_sm90"
ENTRY = "smoke-cuda12.4-sm90a"


@pytest.fixture
def smoke_to_compile(repo, tmp_path):
    """Move the kernel TU's objects and the smoke artifact aside; put them back afterwards."""
    version = (repo / "VERSION").read_text().strip()
    artifacts = repo / "artifacts" / version
    tarball = artifacts / f"flash_attn_standalone-{version}-{ENTRY}.tar.gz"
    aside = tmp_path / "aside"
    aside.mkdir()
    # The folder, the tarball and everything beside it (.sha256, provenance, signature).
    exported = [artifacts / ENTRY, tarball, *artifacts.glob(f"{tarball.name}.*")]
    moved = [path for path in [*(repo / "build" / "objects").glob(f"{KERNEL}-*.o"), *exported] if path.exists()]
    for path in moved:
        shutil.move(path, aside / path.name)
    try:
        yield repo, artifacts
    finally:
        for path in moved:
            if not path.exists():
                shutil.move(aside / path.name, path)


def _default_signals():
    """In the build: the stop signals as a terminal delivers them, even where the test runner was
    started in the background (which ignores SIGINT, and a build keeps an ignored signal ignored)."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _start_build(repo):
    return subprocess.Popen([sys.executable, "-m", "invoke", "build", "--matrix", "smoke"], cwd=repo,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_signals)


def _stop_the_kernel_compile(build, timeout=180):
    """The build's container, once nvcc compiles the kernel TU in it, with that compile's processes
    stopped: nvcc among them, so that the TU cannot finish before the test acts. The build is killed
    if this fails, so that the next test's build does not find the clone locked."""
    import docker

    client = docker.from_env()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            assert build.poll() is None, f"the build ended early:\n{build.communicate()}"
            for container in client.containers.list(filters={"label": f"{PID_LABEL}={build.pid}"}):
                try:
                    top = container.top()
                except docker.errors.APIError:  # between starting and running
                    continue
                column = top["Titles"].index("PID")
                rows = [row for row in top["Processes"] or [] if KERNEL in " ".join(row)]
                pids = [int(row[column]) for row in rows]  # the engine gives host PIDs
                drivers = [pid for pid, row in zip(pids, rows) if os.path.basename(row[-1].split()[0]) == "nvcc"]
                if drivers:
                    for pid in pids:
                        try:
                            os.kill(pid, signal.SIGSTOP)
                        except ProcessLookupError:  # a step of the compile ended meanwhile
                            pass
                    assert _stopped(drivers[0]), f"{KERNEL} compiled before its nvcc could be stopped"
                    return container
            time.sleep(0.2)  # often: a TU may compile in seconds
        pytest.fail(f"nvcc never started on {KERNEL}")
    except BaseException:
        build.kill()
        raise


def _stopped(pid: int) -> bool:
    """Whether the process reaches the stopped state (T) within a second; False once it is gone
    (a signal takes effect when the process next runs, not when kill() returns)."""
    for _ in range(100):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return False
        if stat.rsplit(")", 1)[1].split()[0] == "T":
            return True
        time.sleep(0.01)
    return False


def _assert_nothing_left(repo, artifacts, build):
    import docker

    assert docker.from_env().containers.list(all=True, filters={"label": f"{PID_LABEL}={build.pid}"}) == []
    assert list((repo / "build" / "objects").glob(f"{KERNEL}-*")) == [], "no object or partial object of the TU"
    exported = sorted(path.name for path in artifacts.iterdir() if ENTRY in path.name) if artifacts.exists() else []
    assert exported == [], "no artifact folder, tarball or staged export of the entry"


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_a_signal_during_compile_stops_the_build_in_seconds_and_leaves_nothing(smoke_to_compile, signum, code):
    repo, artifacts = smoke_to_compile
    build = _start_build(repo)
    _stop_the_kernel_compile(build)
    build.send_signal(signum)
    sent = time.monotonic()
    try:
        out, err = build.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the build waited for its running (stopped) nvcc")
    finally:
        build.kill()
    assert time.monotonic() - sent < 10, "the running nvcc was waited for"
    assert build.returncode == code, out[-2000:] + err[-2000:]
    assert f"interrupted ({signal.Signals(signum).name})" in err and "Traceback" not in out + err
    _assert_nothing_left(repo, artifacts, build)


def test_a_container_lost_mid_build_is_one_error_naming_what_to_do(smoke_to_compile):
    repo, artifacts = smoke_to_compile
    build = _start_build(repo)
    _stop_the_kernel_compile(build).remove(force=True)  # what a stopped engine leaves: no container
    try:
        out, err = build.communicate(timeout=60)
    finally:
        build.kill()
    assert build.returncode == 9, out[-2000:] + err[-2000:]
    assert err.count("engine error:") == 1 and "was removed or stopped from outside the build" in err, err
    assert "fix: rerun the build" in err and "Traceback" not in out + err
    _assert_nothing_left(repo, artifacts, build)
