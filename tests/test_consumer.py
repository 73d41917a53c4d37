"""examples/consumer builds against the exported `smoke` tarball, unpacked outside the clone as a
consumer would, with CMake (find_package) and with the one-line pkg-config build, inside the
consumer image (the toolchain image plus CMake and pkg-config); both programs load the library
from where it was unpacked and, with no GPU here, exit 77."""

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


def test_the_consumer_example_builds_both_ways_against_the_unpacked_smoke_tarball_and_runs(repo, smoke_tarball,
                                                                                            tmp_path):
    report = Report(smoke_tarball.name)
    artifact = unpack(smoke_tarball, tmp_path / "elsewhere", report)  # outside the clone, mounted at its own path
    assert artifact is not None, report.render()
    client = docker_client()
    toolchain = ensure_toolchain(client, load_config(repo / "matrix.yaml").matrix("smoke").entries[0].image,
                                 Paths(repo))
    image = ensure_consumer_image(client, toolchain, repo, repo / "build" / "logs")
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
