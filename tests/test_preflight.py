"""`invoke build --dry-run` as a pre-flight: kernels/, the build time, the compile route, every
source the plan needs, the Docker engine and the toolchain image, all reported, none changed."""

import hashlib
import io
import re
import shutil
import subprocess
import sys
import tarfile

import pytest
from docker.errors import ImageNotFound

from flashbuild import pipeline
from flashbuild.sources import upstream as sources
from flashbuild.toolchains import images
from flashbuild.core.errors import ConfigError, EnvironmentProblem, SourceError
from flashbuild.config.options import load_config


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def forbid_fetching_and_building(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("a dry run fetched, extracted or built something")

    for module, name in ((sources, "fetch"), (sources, "_download"), (sources, "safe_extract"),
                         (sources, "_copy_into_cache"), (images, "ensure_image"), (images, "ensure_base")):
        monkeypatch.setattr(module, name, forbidden)


@pytest.fixture
def nothing_may_be_fetched_or_built(monkeypatch):
    forbid_fetching_and_building(monkeypatch)


def copy_of_the_repo(repo, tmp_path):
    """matrix.yaml, kernels/ (a copy, to be spoiled) and the rest as links: a clone of its own."""
    clone = tmp_path / "clone"
    clone.mkdir()
    shutil.copytree(repo / "kernels", clone / "kernels")
    for name in ("matrix.yaml", "sources.lock.yaml", "src", "docker"):
        (clone / name).symlink_to(repo / name)
    return clone


def no_engine():
    raise EnvironmentProblem("no Docker engine is reachable (DockerException)", fix="run `invoke setup`")


def test_a_dry_run_reports_every_problem_at_once_and_changes_nothing(repo, tmp_path, monkeypatch, capsys,
                                                                       nothing_may_be_fetched_or_built):
    clone = copy_of_the_repo(repo, tmp_path)
    (clone / "kernels" / "paged_decode_hdim64_fp16_causal_sm90.cu").unlink()
    monkeypatch.setattr(pipeline, "docker_client", no_engine)
    with pytest.raises(ConfigError) as raised:  # the kind of the first problem, as the build would stop with
        pipeline.build(clone, "smoke", dry_run=True, offline=True)
    message = raised.value.message
    assert message.startswith("the dry run found 5 problems")
    listed = re.findall(r"^  \d\. (.*)$", message, re.M)
    pins = sources.load_lock(repo / "sources.lock.yaml")
    assert listed == ["config error: kernels/ does not match matrix.yaml: missing "
                      "paged_decode_hdim64_fp16_causal_sm90.cu",
                      *(f"source error: {pins[name].filename} is not in the download cache "
                        f"({sources.cached_path(pins[name]).parent}) and --offline was given"
                        for name in ("flash-attn", "flashinfer-python", "nvidia-cuda-nvcc-cu12")),
                      "environment error: no Docker engine is reachable (DockerException)"]
    out = capsys.readouterr().out
    assert "entry smoke-cuda12.4-sm90a" in out and "predicted compile phase" in out, "the plan is still printed"
    assert [line.split(":")[0].split(maxsplit=1) for line in out.splitlines() if line.startswith("  PROBLEM")] == [
        ["PROBLEM", "kernels/"], ["PROBLEM", "source flash-attn 2.8.3"],
        ["PROBLEM", "source flashinfer-python 0.7.2.post1"],
        ["PROBLEM", "source nvidia-cuda-nvcc-cu12 12.9.86"], ["PROBLEM", "Docker engine"]]
    assert "  skipped  image cuda12-debian-trixie: not looked up (no Docker engine)" in out
    assert sorted(p.name for p in clone.iterdir()) == ["docker", "kernels", "matrix.yaml", "sources.lock.yaml", "src"]
    assert not (tmp_path / "cache").exists()


def test_one_problem_is_raised_as_itself_with_its_exit_code(repo, tmp_path, monkeypatch):
    clone = copy_of_the_repo(repo, tmp_path)
    monkeypatch.setattr(pipeline, "docker_client", no_engine)
    with pytest.raises(EnvironmentProblem) as raised:
        pipeline.build(clone, "smoke", dry_run=True)
    assert raised.value.message == "no Docker engine is reachable (DockerException)"
    assert raised.value.exit_code == 4


class Engine:
    """A Docker client holding only the images named; records what was looked up."""

    def __init__(self, present=()):
        self.present, self.looked_up = set(present), []
        self.images = self

    def get(self, tag):
        self.looked_up.append(tag)
        if tag not in self.present:
            raise ImageNotFound(tag)
        return object()


def pin_file(tmp_path, name, members):
    path = tmp_path / name
    with tarfile.open(path, "w:gz") as tar:
        for member, data in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def small_pins(repo, tmp_path):
    """A clone whose lock pins small archives under the names the smoke plan needs."""
    clone = copy_of_the_repo(repo, tmp_path)
    (clone / "sources.lock.yaml").unlink()
    flash, flash_sha = pin_file(tmp_path, "flash.tar.gz", {"f/src/a.h": b"a"})
    infer, infer_sha = pin_file(tmp_path, "infer.tar.gz", {"i/include/b.h": b"b"})
    nvcc, nvcc_sha = pin_file(tmp_path, "nvcc.tar.gz", {"n/bin/ptxas": b"ptxas"})
    (clone / "sources.lock.yaml").write_text(
        f"flash-attn: {{version: '1', filename: flash.tar.gz, sha256: {flash_sha}, paths: {{kernels: f/src}}}}\n"
        f"flashinfer-python: {{version: '3', filename: infer.tar.gz, sha256: {infer_sha}, "
        "paths: {include: i/include}}\n"
        f"nvidia-cuda-nvcc-cu12: {{version: '2', filename: nvcc.tar.gz, sha256: {nvcc_sha}, paths: {{bin: n/bin}}}}\n")
    return clone, sources.load_lock(clone / "sources.lock.yaml"), {"flash-attn": flash, "flashinfer-python": infer,
                                                                   "nvidia-cuda-nvcc-cu12": nvcc}


def engine_with_the_base_image(clone):
    spec = next(iter(load_config(clone / "matrix.yaml").images.values()))
    return Engine(present={images.base_tag(spec, images.host_debian_mirror())})


def test_a_clean_dry_run_says_what_the_build_would_do_and_does_none_of_it(small_pins, monkeypatch, capsys,
                                                                           nothing_may_be_fetched_or_built):
    clone, pins, _ = small_pins
    cached = sources.cached_path(pins["flash-attn"])
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"not the archive")  # corrupt: online, it would be downloaded again
    monkeypatch.setattr(pipeline, "docker_client", lambda: engine_with_the_base_image(clone))
    assert pipeline.build(clone, "smoke", dry_run=True) == []
    out = capsys.readouterr().out
    corrupt = hashlib.sha256(b"not the archive").hexdigest()
    for line in [
        "  ok       kernels/: matches matrix.yaml",
        "  ok       compile route: compiles: every TU on this machine",
        "  ok       sources needed: flash-attn, flashinfer-python, nvidia-cuda-nvcc-cu12",
        f"  ok       source flash-attn 1: the cached {cached} is corrupt (sha256 {corrupt}); would be downloaded again",
        "  ok       source flashinfer-python 3: not in the download cache; would be downloaded",
        "  ok       source nvidia-cuda-nvcc-cu12 2: not in the download cache; would be downloaded",
        "  ok       Docker engine: reachable",
        "  ok       image cuda12-debian-trixie: its tag includes the hash of a tool not fetched yet",
    ]:
        assert line in out
    assert cached.read_bytes() == b"not the archive" and not (clone / "third_party").exists()


def test_once_ptxas_is_extracted_the_dry_run_looks_up_the_image_itself(small_pins, monkeypatch, capsys):
    clone, pins, files = small_pins
    sources.fetch(pins["nvidia-cuda-nvcc-cu12"], clone / "third_party", local=files["nvidia-cuda-nvcc-cu12"],
                  log=lambda m: None)
    forbid_fetching_and_building(monkeypatch)
    engine = engine_with_the_base_image(clone)
    monkeypatch.setattr(pipeline, "docker_client", lambda: engine)
    pipeline.build(clone, "smoke", dry_run=True, local={"flash-attn": files["flash-attn"]})
    out = capsys.readouterr().out
    assert f"  ok       source flash-attn 1: --local {files['flash-attn']} matches the pin; would be extracted" in out
    assert re.search(r"  ok       image cuda12-debian-trixie: flashbuild/cuda12-debian-trixie:[0-9a-f]{16} absent: "
                     r"would be built", out)
    assert engine.looked_up[-1].startswith("flashbuild/cuda12-debian-trixie:")
    assert not sources.cached_path(pins["flash-attn"]).exists(), "--local in a dry run is checked, not cached"


def test_a_wrong_local_file_is_a_dry_run_problem(repo, tmp_path, monkeypatch, nothing_may_be_fetched_or_built):
    monkeypatch.setattr(pipeline, "docker_client", lambda: Engine())
    impostor = tmp_path / "flash_attn-2.8.3.tar.gz"
    impostor.write_bytes(b"impostor")
    with pytest.raises(SourceError, match=r"^--local flash-attn=.* has sha256 "):
        pipeline.build(copy_of_the_repo(repo, tmp_path), "smoke", dry_run=True, local={"flash-attn": impostor})


def test_the_cli_dry_run_prints_the_preflight_of_the_repository(repo):
    result = subprocess.run([sys.executable, "-m", "invoke", "build", "--matrix", "smoke", "--dry-run"],
                            cwd=repo, capture_output=True, text=True)
    assert "Traceback" not in result.stdout + result.stderr
    subjects = [line.split(":")[0].split(maxsplit=1)[1] for line in result.stdout.splitlines()
                if re.match(r"  (ok|PROBLEM|skipped) ", line)]
    assert subjects == ["kernels/", "build time", "package checks", "compile route", "sources needed",
                        "source flash-attn 2.8.3", "source flashinfer-python 0.7.2.post1",
                        "source nvidia-cuda-nvcc-cu12 12.9.86", "Docker engine", "image cuda12-debian-trixie"]
    assert (result.returncode == 0) == ("PROBLEM" not in result.stdout)


def test_a_local_file_the_build_would_not_use_is_a_problem_and_the_rest_is_still_checked(repo, tmp_path, monkeypatch,
                                                                                         capsys):
    forbid_fetching_and_building(monkeypatch)
    monkeypatch.setattr(pipeline, "docker_client", lambda: Engine())
    with pytest.raises(ConfigError, match=r"^--local sccache: this build does not use it"):
        pipeline.build(copy_of_the_repo(repo, tmp_path), "smoke", dry_run=True, local={"sccache": tmp_path / "x"})
    out = capsys.readouterr().out
    assert "  ok       source flash-attn 2.8.3: " in out and "  ok       source nvidia-cuda-nvcc-cu12 12.9.86: " in out


def test_an_engine_that_fails_the_image_lookup_is_a_problem_not_a_traceback(repo, tmp_path, monkeypatch):
    from docker.errors import APIError

    class Failing(Engine):
        def get(self, tag):
            raise APIError("500 Server Error: storage driver failed")

    monkeypatch.setattr(pipeline, "docker_client", lambda: Failing())
    with pytest.raises(EnvironmentProblem, match=r"^the Docker engine could not look up images \(APIError: "):
        pipeline.build(copy_of_the_repo(repo, tmp_path), "smoke", dry_run=True)


def test_missing_cmake_is_a_dry_run_problem_with_the_setup_fix(repo, tmp_path, monkeypatch):
    from flashbuild.compile import preflight
    from flashbuild.release import package_checks
    from flashbuild.config.options import load_config
    from flashbuild.config.build_plan import make_plan

    monkeypatch.setattr(package_checks.shutil, "which", lambda tool: None if tool == "cmake" else f"/usr/bin/{tool}")
    config = load_config(repo / "matrix.yaml")
    found = preflight.run(pipeline.Paths(repo), config, make_plan(config.matrix("smoke"), repo), True, None, False,
                          no_engine, {})
    problem = next(check for check in found if check.subject == "package checks")
    assert problem.status == "PROBLEM" and "cmake not found" in problem.outcome
    assert "invoke setup" in problem.problem.fix
