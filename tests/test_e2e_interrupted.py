"""A smoke build stopped while its kernel TU compiles: by SIGTERM, SIGINT or SIGHUP it exits 143,
130 or 129 within seconds; with its container removed from outside (as a stopped engine would leave it) it
fails with one engine error. Either way no container of that build is left, no object or partial
object of the TU, and no artifact. The build runs in this repository with the TU's cached object
and the smoke artifact moved aside (so that it compiles, ~150 s, and is not up to date), both put
back after. Runs after test_e2e.py (which builds the image and the smoke artifact). Needs a
Docker engine (`invoke setup`)."""

import shutil
import signal
import subprocess
import sys
import time

import pytest

from flashbuild.container import PID_LABEL

pytestmark = pytest.mark.container

KERNEL = "fa2_fwd_hdim64_fp16_sm90"
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


def _wait_for_the_kernel_compile(build, timeout=180):
    """The build's container, once nvcc compiles the kernel TU in it."""
    import docker

    client = docker.from_env()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert build.poll() is None, f"the build ended early:\n{build.communicate()}"
        for container in client.containers.list(filters={"label": f"{PID_LABEL}={build.pid}"}):
            try:
                processes = container.top()["Processes"] or []
            except docker.errors.APIError:  # between starting and running
                continue
            if any("nvcc" in " ".join(row) and KERNEL in " ".join(row) for row in processes):
                return container
        time.sleep(1)
    build.kill()
    pytest.fail(f"nvcc never started on {KERNEL}:\n{build.communicate()}")


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
    _wait_for_the_kernel_compile(build)
    build.send_signal(signum)
    sent = time.monotonic()
    try:
        out, err = build.communicate(timeout=60)
    finally:
        build.kill()
    assert time.monotonic() - sent < 10, "the running nvcc was waited for"
    assert build.returncode == code, out[-2000:] + err[-2000:]
    assert f"interrupted ({signal.Signals(signum).name})" in err and "Traceback" not in out + err
    _assert_nothing_left(repo, artifacts, build)


def test_a_container_lost_mid_build_is_one_error_naming_what_to_do(smoke_to_compile):
    repo, artifacts = smoke_to_compile
    build = _start_build(repo)
    _wait_for_the_kernel_compile(build).remove(force=True)  # what a stopped engine leaves: no container
    try:
        out, err = build.communicate(timeout=60)
    finally:
        build.kill()
    assert build.returncode == 9, out[-2000:] + err[-2000:]
    assert err.count("engine error:") == 1 and "was removed or stopped from outside the build" in err, err
    assert "fix: rerun the build" in err and "Traceback" not in out + err
    _assert_nothing_left(repo, artifacts, build)
