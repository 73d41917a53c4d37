"""The pipeline's order of pre-flight checks: cheap refusals before downloads."""

import pytest

from flashbuild import pipeline
from flashbuild.core.errors import EnvironmentProblem


def test_a_missing_docker_engine_is_reported_before_any_source_is_fetched(repo, monkeypatch):
    fetched = []

    def no_engine():
        raise EnvironmentProblem("no Docker engine is reachable (DockerException)", fix="run `invoke setup`")

    monkeypatch.setattr(pipeline, "docker_client", no_engine)
    monkeypatch.setattr(pipeline, "fetch_sources", lambda *args, **kwargs: fetched.append(args) or {})
    with pytest.raises(EnvironmentProblem, match="no Docker engine"):
        pipeline.build(repo, "smoke")
    assert fetched == []


def test_missing_cmake_or_pkg_config_is_reported_before_any_source_is_fetched(repo, monkeypatch):
    """The packages are checked before export; a build that could not check them starts no work."""
    from flashbuild.release import package_checks

    fetched = []
    monkeypatch.setattr(package_checks.shutil, "which", lambda tool: None if tool == "cmake" else f"/usr/bin/{tool}")
    monkeypatch.setattr(pipeline, "docker_client", lambda: object())
    monkeypatch.setattr(pipeline, "fetch_sources", lambda *args, **kwargs: fetched.append(args) or {})
    with pytest.raises(EnvironmentProblem, match="cmake not found"):
        pipeline.build(repo, "smoke")
    assert fetched == []


def test_a_second_build_in_the_same_clone_stops_at_once_and_a_dry_run_does_not(repo, tmp_path, monkeypatch):
    """One build per clone (issue 31, finding 8): the second names the first and does no work."""
    import fcntl
    import os
    import shutil

    clone = tmp_path / "clone"
    clone.mkdir()
    for name in ("matrix.yaml", "sources.lock.yaml", "src", "docker", "kernels"):
        (clone / name).symlink_to(repo / name)
    (clone / "build").mkdir()
    reached = []
    monkeypatch.setattr(pipeline, "docker_client", lambda: reached.append("engine") or (_ for _ in ()).throw(
        EnvironmentProblem("no Docker engine is reachable (DockerException)", fix="-")))
    held = os.open(clone / "build", os.O_RDONLY | os.O_DIRECTORY)  # the first build, as it holds the lock
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(EnvironmentProblem, match="another `invoke build` is running in this clone") as raised:
            pipeline.build(clone, "smoke")
        assert raised.value.fix and reached == []
        with pytest.raises(EnvironmentProblem, match="no Docker engine"):  # a dry run only reads: not blocked
            pipeline.build(clone, "smoke", dry_run=True, offline=True)
    finally:
        os.close(held)
    with pytest.raises(EnvironmentProblem, match="no Docker engine"):  # released: the next build proceeds
        pipeline.build(clone, "smoke")
    assert reached[-1] == "engine"
    shutil.rmtree(clone / "build")
