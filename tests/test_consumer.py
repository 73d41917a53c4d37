"""examples/consumer builds against the exported `smoke` tarball, unpacked outside the clone as a
consumer would, with CMake (find_package) and with the one-line pkg-config build, and
examples/engine_loop with CMake, inside the consumer image (the toolchain image plus CMake and
pkg-config); the programs load the library from where it was unpacked and, with no GPU here,
exit 77."""

import re
import subprocess
import sys

import pytest

from flashbuild.release.checks import Report
from flashbuild.toolchains.container import ToolchainContainer, docker_client
from flashbuild.toolchains.images import ensure_consumer_image
from flashbuild.config.options import load_config
from flashbuild.pipeline import Paths, ensure_toolchain
from flashbuild.release.release_checks import unpack

pytestmark = pytest.mark.container

ENTRY = "smoke-cuda12.4-sm90a"


@pytest.fixture(scope="module")
def smoke_tarball(repo):
    """The smoke tarball (a build that finds it up to date leaves it alone in about a second)."""
    result = subprocess.run([sys.executable, "-m", "invoke", "build", "--matrix", "smoke"], cwd=repo,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    version = (repo / "VERSION").read_text().strip()
    return repo / "artifacts" / version / f"flash_attn_standalone-{version}-{ENTRY}.tar.gz"


@pytest.fixture(scope="module")
def consumer_image(repo):
    """The consumer image (the smoke entry's toolchain image plus CMake and pkg-config)."""
    client = docker_client()
    toolchain = ensure_toolchain(client, load_config(repo / "matrix.yaml").matrix("smoke").entries[0].image,
                                 Paths(repo))
    return client, ensure_consumer_image(client, toolchain, repo, repo / "build" / "logs")


def unpacked(tarball, tmp_path):
    """The tarball unpacked outside the clone (mounted at its own path), as a consumer would."""
    report = Report(tarball.name)
    artifact = unpack(tarball, tmp_path / "elsewhere", report)
    assert artifact is not None, report.render()
    return artifact


def test_the_consumer_example_builds_both_ways_against_the_unpacked_smoke_tarball_and_runs(repo, smoke_tarball,
                                                                                            consumer_image, tmp_path):
    artifact = unpacked(smoke_tarball, tmp_path)
    client, image = consumer_image
    out = tmp_path / "out"
    with ToolchainContainer(client, image, repo, "consumer-test", writable_mounts=[tmp_path]) as container:
        built = container.exec(["bash", "examples/consumer/build.sh", str(artifact), str(out)])
        assert built.exit_code == 0, built.output[-4000:]
        assert "build is skipped" not in built.output
        for program in (out / "cmake" / "consumer", out / "consumer-pkgconfig"):
            dynamic = container.check(["readelf", "-d", str(program)])
            assert re.search(r"\(NEEDED\).*\[libflash_attn_standalone\.so\.0\]", dynamic), dynamic
            assert "libcudart" not in dynamic, "cudart is linked statically"
            ran = container.exec([str(program)])
            assert ran.exit_code == 77, ran.output
            assert "no CUDA device" in ran.output
            resolved = container.check(["ldd", str(program)])
            assert f"libflash_attn_standalone.so.0 => {artifact}/lib" in resolved.replace("/lib/pkgconfig/../..", "")


def test_the_engine_loop_example_builds_with_cmake_against_the_unpacked_smoke_tarball_and_runs(repo, smoke_tarball,
                                                                                               consumer_image, tmp_path):
    """examples/engine_loop (a graph of append + device-length decode) builds through find_package
    and, with no GPU here, exits 77; its GPU run is quoted in docs/design/device-lengths.md."""
    artifact = unpacked(smoke_tarball, tmp_path)
    client, image = consumer_image
    out = tmp_path / "engine"
    with ToolchainContainer(client, image, repo, "engine-loop-test", writable_mounts=[tmp_path]) as container:
        for step in (["cmake", "-S", "examples/engine_loop", "-B", str(out), f"-DCMAKE_PREFIX_PATH={artifact}",
                      "-DCMAKE_BUILD_TYPE=Release"], ["cmake", "--build", str(out)]):
            built = container.exec(step)
            assert built.exit_code == 0, built.output[-4000:]
        ran = container.exec([str(out / "engine_loop")])
        assert ran.exit_code == 77, ran.output
        assert "no CUDA device" in ran.output
