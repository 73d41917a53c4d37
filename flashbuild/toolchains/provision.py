"""Provisioning this machine (`invoke setup`; "host" in this package names host code and the host
toolchain instead): a Docker engine, a Debian bootstrap tool, a Redis server (for the shared-cache
test), and CMake and pkg-config (they check every artifact's consumer packages), installed (and
dockerd started) when the host is a Debian machine and we are root; otherwise a message saying
what to do."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from flashbuild.core.errors import EnvironmentProblem

DOCKERD_LOG = Path("/var/log/flashbuild-dockerd.log")


def _is_root_debian() -> bool:
    return os.geteuid() == 0 and Path("/etc/debian_version").exists() and shutil.which("apt-get") is not None


def _apt_install(packages: list[str], log) -> None:
    log(f"installing {' '.join(packages)} with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
        result = subprocess.run(argv, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            raise EnvironmentProblem(
                f"`{' '.join(argv)}` failed:\n{result.stderr[-1500:]}", fix="install the packages by hand and retry"
            )


def _docker_ping() -> bool:
    import docker
    from docker.errors import DockerException

    try:
        docker.from_env(timeout=10).ping()
        return True
    except DockerException:
        return False


def ensure_docker(log=print) -> None:
    if _docker_ping():
        return
    if not _is_root_debian():
        raise EnvironmentProblem(
            "no Docker engine is reachable",
            fix="start one (e.g. `sudo systemctl start docker`, or `sudo dockerd &`) and check DOCKER_HOST",
        )
    if not shutil.which("dockerd"):
        _apt_install(["docker.io"], log)
    log(f"starting dockerd (log: {DOCKERD_LOG})")
    with open(DOCKERD_LOG, "ab") as out:
        subprocess.Popen(["dockerd"], stdout=out, stderr=out, start_new_session=True)
    for _ in range(60):
        if _docker_ping():
            return
        time.sleep(1)
    raise EnvironmentProblem("dockerd did not answer within 60 s", fix=f"read {DOCKERD_LOG}")


def ensure_program(program: str, package: str, why: str, log=print) -> None:
    if shutil.which(program):
        return
    if not _is_root_debian():
        raise EnvironmentProblem(f"{program} is not installed ({why})",
                                 fix=f"install it, e.g. `sudo apt-get install {package}`")
    _apt_install([package], log)


def setup(log=print) -> None:
    ensure_program("mmdebstrap", "mmdebstrap", "needed when no image registry is reachable", log)
    ensure_program("redis-server", "redis-server", "the tests' shared remote cache for sccache", log)
    ensure_program("bwrap", "bubblewrap", "the sandbox of sccache-dist's build servers (tests' local cluster)", log)
    ensure_program("cmake", "cmake", "checks the artifacts' CMake packages (build and `invoke verify`)", log)
    ensure_program("pkg-config", "pkg-config", "checks the artifacts' pkg-config files (build and `invoke verify`)",
                   log)
    ensure_docker(log)
