"""The driver's public commands: one function per invoke task, taking parsed arguments.

tasks.py parses the command line and turns FlashBuildError into an exit code; everything
else a task does is here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from flashbuild.config.memory import RESERVE_GB
from flashbuild.config.options import load_config


def setup(repo: Path) -> None:
    """Install and start what the pipeline and its tests need on this host (Docker engine, mmdebstrap, redis-server,
    bubblewrap, cmake, pkg-config); remove containers that earlier builds of this clone left behind."""
    from flashbuild.toolchains.container import docker_client, sweep_orphans
    from flashbuild.toolchains.provision import setup as provision

    provision()
    sweep_orphans(docker_client(), repo, print)


def fetch(repo: Path, local: dict[str, Path], offline: bool = False) -> None:
    from flashbuild.pipeline import Paths, fetch_sources

    for name, fetched in fetch_sources(Paths(repo), local, offline).items():
        print(f"{name} {fetched.pin.version}: {fetched.root}")


def image(repo: Path) -> None:
    from flashbuild.toolchains.container import docker_client
    from flashbuild.pipeline import Paths, ensure_toolchain

    client = docker_client()
    for spec in load_config(repo / "matrix.yaml").images.values():
        built = ensure_toolchain(client, spec, Paths(repo))
        print(f"{spec.name}: {built.tag} ({'built' if built.built else 'up to date'})")


def generate(repo: Path) -> None:
    from flashbuild.compile.kernelgen import write_kernels

    config = load_config(repo / "matrix.yaml")
    written, removed = write_kernels(config.matrices.values(), repo / "kernels")
    print(f"kernels/: {len(written)} written, {len(removed)} removed")


def build(repo: Path, matrix: str, dry_run: bool = False, jobs: int | None = None, reserve_gb: float = RESERVE_GB,
          offline: bool = False, local: dict[str, Path] | None = None, use_sccache: bool = False,
          backend: str = "container", sign_key: str | None = None) -> None:
    from flashbuild.pipeline import build as run_build
    from flashbuild.release.provenance import sign_key_path

    run_build(repo, matrix, dry_run=dry_run, jobs=jobs, reserve_gb=reserve_gb, offline=offline, local=local,
              use_sccache=use_sccache, backend=backend, sign_key=sign_key_path(sign_key))


def verify(repo: Path, path: Path, allowed_signers: Path | None = None) -> None:
    from flashbuild.release.checks import raise_if_failed
    from flashbuild.pipeline import verify_artifact

    report = verify_artifact(repo, path, allowed_signers)
    raise_if_failed(report, "this library does not hold what its manifest.json promises; rebuild it with `invoke build`")
    print(report.render())


def suite_argv(fast: bool = False, k: str | None = None) -> list[str]:
    """pytest's command line. `fast` leaves out the tests marked `container` (they build in
    Docker) and spreads the rest over every core (pytest-xdist, requirements.txt): on the 2-core
    build machine 35 s in one process, 22-24 s in two. The whole suite stays in one process: its
    container builds are sized to have the machine to themselves."""
    argv = [sys.executable, "-m", "pytest", "-q", "tests"]
    if fast:
        argv += ["-m", "not container", "-n", "auto"]
    if k:
        argv += ["-k", k]
    return argv


def test(repo: Path, fast: bool = False, k: str | None = None) -> int:
    """pytest over tests/ (suite_argv); returns pytest's exit status."""
    return subprocess.run(suite_argv(fast, k), cwd=repo).returncode
