"""The pipeline's order of pre-flight checks: cheap refusals before downloads."""

import pytest

from flashbuild import pipeline
from flashbuild.errors import EnvironmentProblem


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
    from flashbuild import package_checks

    fetched = []
    monkeypatch.setattr(package_checks.shutil, "which", lambda tool: None if tool == "cmake" else f"/usr/bin/{tool}")
    monkeypatch.setattr(pipeline, "docker_client", lambda: object())
    monkeypatch.setattr(pipeline, "fetch_sources", lambda *args, **kwargs: fetched.append(args) or {})
    with pytest.raises(EnvironmentProblem, match="cmake not found"):
        pipeline.build(repo, "smoke")
    assert fetched == []
