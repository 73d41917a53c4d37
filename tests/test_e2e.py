"""End to end, in the real toolchain container: `invoke build --matrix smoke` fetches the
pinned source, builds (or reuses) the image, compiles the one kernel TU, links, verifies
and exports; then `invoke verify` passes on the artifact and fails, with a readable
report, on a deliberately broken library. Needs a Docker engine (`invoke setup`)."""

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time

import pytest

from flashbuild.release.checks import LIBRARY_TOOLS
from flashbuild.compile.compiler import HEADERS
from flashbuild.config.options import load_config

pytestmark = pytest.mark.container

KERNEL = "paged_decode_hdim64_fp16_causal_sm90"  # smoke's one kernel TU
SYMBOL = "fas_paged::launch_paged<0, 0, 64, true, 16>"  # its instantiation, as nm -C names it


def invoke(repo, *args):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=repo, capture_output=True, text=True)


@pytest.fixture(scope="module")
def smoke_artifact(repo):
    result = invoke(repo, "build", "--matrix", "smoke")
    assert result.returncode == 0, f"smoke build failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    version = (repo / "VERSION").read_text().strip()
    return repo, version, repo / "artifacts" / version / "smoke-cuda12.4-sm90a", result.stdout


def test_smoke_build_exports_a_verified_versioned_artifact(smoke_artifact):
    repo, version, folder, output = smoke_artifact
    assert "[FAIL]" not in output
    major = version.split(".")[0]
    lib = folder / "lib"
    assert (lib / f"libflash_attn_standalone.so.{version}").is_file()
    assert os.readlink(lib / f"libflash_attn_standalone.so.{major}") == f"libflash_attn_standalone.so.{version}"
    for header in HEADERS:  # every public header, as in the clone
        assert (folder / "include" / header.name).read_text() == (repo / header).read_text()
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["version"] == version and manifest["matrix"] == "smoke"
    assert manifest["sources"][0]["sha256"] == "1e71dd64a9e0280e0447b8a0c2541bad4bf6ac65bdeaa2f90e51a9e57de0370d"
    assert manifest["toolchain"]["cuda"] == "12.4" and "cuda_12.4" in manifest["toolchain"]["nvcc"]
    kernels = [tu for tu in manifest["translation_units"] if tu["kind"] == "kernel"]
    assert [(tu["name"], tu["symbol"]) for tu in kernels] == [(KERNEL, SYMBOL)]
    assert not any({"wall_s", "peak_rss_kb", "cached"} & set(tu) for tu in manifest["translation_units"])
    costs = json.loads((repo / "build" / "tu-stats.json").read_text())
    assert all(costs[f"{tu['name']}@sm_90a"]["peak_rss_kb"] for tu in manifest["translation_units"])
    assert all(check["ok"] for check in manifest["verify"])
    for line in (folder / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split("  ")
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest
    tarball = folder.parent / f"flash_attn_standalone-{version}-smoke-cuda12.4-sm90a.tar.gz"
    with tarfile.open(tarball) as tar:
        assert f"flash_attn_standalone-{version}-smoke-cuda12.4-sm90a/bin/test_varlen_inference" in tar.getnames()
    assert {"lib/cmake/flash_attn_standalone/flash_attn_standaloneConfig.cmake",
            "lib/pkgconfig/flash_attn_standalone.pc"} <= set(manifest["files"])
    assert any(check["check"].startswith("cmake: find_package") for check in manifest["verify"])
    statement = json.loads((folder.parent / f"{tarball.name}.provenance.json").read_text())
    assert statement["subject"][0]["digest"]["sha256"] == hashlib.sha256(tarball.read_bytes()).hexdigest()
    image = {d["name"]: d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]}["toolchain-image"]
    assert image["digest"]["sha256"] == manifest["toolchain"]["id"].removeprefix("sha256:")


def test_test_binary_runs_here_and_reports_no_gpu(smoke_artifact):
    """The binary must load on this (older-glibc, no-CUDA-toolkit) host as copied, and
    without a GPU it says so and exits 77."""
    _, _, folder, _ = smoke_artifact
    result = subprocess.run([str(folder / "bin" / "test_varlen_inference")], capture_output=True, text=True)
    if result.returncode == 0:
        pytest.skip("a GPU is present here; the GPU run is checked on the device machine")
    assert result.returncode == 77, result.stdout + result.stderr
    assert "no CUDA device" in result.stderr


def test_kernel_info_reports_the_family_name_its_record_gives(smoke_artifact):
    """fas_get_kernel_info needs no GPU: smoke's one kernel is listed under the name its build
    family's record passes through kernel_registry.inc (no C file names it)."""
    import ctypes

    from flashbuild.config.families import FAMILIES

    _, version, folder, _ = smoke_artifact
    library = ctypes.CDLL(str(folder / "lib" / f"libflash_attn_standalone.so.{version}"))

    class Info(ctypes.Structure):  # fas_kernel_info
        _fields_ = [("dtype", ctypes.c_int), ("head_dim", ctypes.c_int), ("causal", ctypes.c_int),
                    ("split_kv", ctypes.c_int), ("family", ctypes.c_char_p), ("out_dtype", ctypes.c_int)]

    info = Info()
    assert library.fas_num_kernels() == 1
    assert library.fas_get_kernel_info(0, ctypes.byref(info)) == 0
    assert (info.family.decode(), info.head_dim, info.causal) == (FAMILIES["paged_decode"].info_family, 64, 1) == (
        "paged", 64, 1)


def test_second_build_leaves_the_up_to_date_artifact_alone(smoke_artifact):
    repo, _, folder, _ = smoke_artifact
    written = (folder / "manifest.json").stat().st_mtime_ns
    result = invoke(repo, "build", "--matrix", "smoke")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "is up to date (same inputs); left alone" in result.stdout
    assert (folder / "manifest.json").stat().st_mtime_ns == written


def test_an_artifact_that_changed_is_rebuilt_from_cached_objects(smoke_artifact):
    repo, version, folder, _ = smoke_artifact
    tarball = folder.parent / f"flash_attn_standalone-{version}-smoke-cuda12.4-sm90a.tar.gz"
    tarball.write_bytes(b"damaged")
    result = invoke(repo, "build", "--matrix", "smoke")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"ok     {KERNEL} cached" in result.stdout
    recorded = (folder.parent / f"{tarball.name}.sha256").read_text().split()[0]
    assert hashlib.sha256(tarball.read_bytes()).hexdigest() == recorded


def test_verify_passes_on_the_artifact(smoke_artifact):
    repo, _, folder, _ = smoke_artifact
    result = invoke(repo, "verify", str(folder))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 failed" in result.stdout


def test_verify_passes_on_the_tarball_as_copied_and_fails_once_its_checksum_is_wrong(smoke_artifact, tmp_path):
    """The tarball, its .sha256 and its provenance copied elsewhere: verify unpacks it to a
    temporary folder and runs every check, the consumer packages included."""
    repo, version, folder, _ = smoke_artifact
    name = f"flash_attn_standalone-{version}-smoke-cuda12.4-sm90a.tar.gz"
    for suffix in ("", ".sha256", ".provenance.json"):
        shutil.copy2(folder.parent / f"{name}{suffix}", tmp_path / f"{name}{suffix}")
    result = invoke(repo, "verify", str(tmp_path / name))
    assert result.returncode == 0, result.stdout + result.stderr
    common = (f"[PASS] {name}.sha256 matches the tarball", "[PASS] SHA256SUMS: every file of the artifact matches",
              "[PASS] cmake: find_package(flash_attn_standalone", "[PASS] pkg-config --cflags --libs",
              "provenance.json: SLSA v1")
    for passed in (*common, "[PASS] nm: all 1 planned instantiations are in the library"):
        assert passed in result.stdout
    # The standalone verifier beside it, outside the clone, with the standard library alone: the
    # same checks; the library's need nm, readelf and cuobjdump on this host (no container).
    shutil.copy2(folder.parent / f"{name}.verify.pyz", tmp_path / f"{name}.verify.pyz")
    standalone = subprocess.run([sys.executable, "-I", "-S", f"{name}.verify.pyz", name], cwd=tmp_path,
                                capture_output=True, text=True, timeout=300)
    output = standalone.stdout + standalone.stderr
    fails = [line.strip() for line in output.splitlines() if line.strip().startswith("[FAIL]")]
    if all(shutil.which(tool) for tool in LIBRARY_TOOLS):
        assert standalone.returncode == 0 and not fails, output
    else:
        assert standalone.returncode == 7, output
        assert fails == ["[FAIL] the library's checks can run (nm, readelf, cuobjdump on PATH)"], output
    for passed in common:
        assert passed in output
    (tmp_path / f"{name}.sha256").write_text(f"{'0' * 64}  {name}\n")
    result = invoke(repo, "verify", str(tmp_path / name))
    assert result.returncode == 7
    assert f"[FAIL] {name}.sha256 matches the tarball" in result.stdout + result.stderr


def test_verify_fails_clearly_on_a_broken_library(smoke_artifact, tmp_path):
    """Relink the smoke library without its kernel object, plus an object with an extra
    public function, exporting everything: verify must name the missing instantiation and
    the extra export, and exit 7."""
    repo, version, folder, _ = smoke_artifact
    broken = repo / "build" / "broken-artifact"
    if broken.exists():
        shutil.rmtree(broken)
    shutil.copytree(folder, broken, symlinks=True)
    lib = broken / "lib" / f"libflash_attn_standalone.so.{version}"
    lib.unlink()
    api_object = sorted((repo / "build" / "objects").glob("api_*-*.o"))[0]  # C API code, no kernel
    script = broken / "export-all.map"
    script.write_text("{ global: *; };\n")
    extra = broken / "extra.c"
    extra.write_text('__attribute__((visibility("default"))) int fas_debug_dump(void) { return 1; }\n')
    linked = _in_toolchain(repo, ["nvcc", "-shared", "--cudart=static", "-Xcompiler=-fPIC",
                                  f"-Xlinker=--version-script={script}",
                                  "-Xlinker=-soname,libflash_attn_standalone.so." + version.split(".")[0],
                                  "-o", str(lib), str(api_object), str(extra)])
    assert linked.returncode == 0, linked.stdout + linked.stderr
    result = invoke(repo, "verify", str(lib))
    assert result.returncode == 7
    report = result.stdout + result.stderr
    assert "[FAIL] nm: all 1 planned instantiations are in the library" in report
    assert SYMBOL in report
    assert "[FAIL] nm -D: exports exactly the" in report
    assert "exported but not in src/exports.map: fas_debug_dump" in report
    assert report.count("[FAIL] nm -D: exports exactly the") == 1, "the report is printed once"
    assert "Traceback" not in report


def _in_toolchain(repo, argv):
    """Run a command in the smoke entry's toolchain image, the repo mounted at its path."""
    import docker

    from flashbuild.pipeline import Paths, ensure_toolchain
    from flashbuild.toolchains.container import ToolchainContainer

    spec = load_config(repo / "matrix.yaml").matrix("smoke").entries[0].image
    client = docker.from_env()
    image = ensure_toolchain(client, spec, Paths(repo))
    with ToolchainContainer(client, image.tag, repo, "test") as container:
        result = container.exec(argv)
    return subprocess.CompletedProcess(argv, result.exit_code, result.output, "")


def test_one_tu_compiled_in_two_clones_is_byte_identical_under_the_fixed_pid(smoke_artifact, tmp_path):
    """src/core/lse.cu (a kernel in an anonymous namespace) compiled in two clones at different
    paths, each in its own toolchain container: identical objects with fixed_pid's shim. The
    control: two plain compiles in one clone differ (nvcc's PID is in the object)."""
    from flashbuild.core import fixed_pid
    from flashbuild.toolchains.container import ToolchainContainer, docker_client

    repo, _, folder, _ = smoke_artifact
    image = json.loads((folder / "manifest.json").read_text())["toolchain"]["tag"]
    objects = {}
    for clone in ("a", "clone_b_at_a_longer_path"):
        root = tmp_path / clone
        shutil.copytree(repo / "src", root / "src")
        with ToolchainContainer(docker_client(), image, root, "repro-test") as container:
            shim = fixed_pid.build_shim(container, root / "tools")
            for run in ("fixed", "plain-1", "plain-2"):
                argv = ["nvcc", "-c", "-O3", "-std=c++17", "-arch=sm_90a", f"-I{root / 'src'}",
                        f"-I{root / 'src/include'}", "-o", str(root / f"{run}.o"), str(root / "src/core/lse.cu")]
                environment = None
                if run == "fixed":
                    argv, environment = fixed_pid.wrap(argv, shim, "lse")
                result = container.exec(argv, environment=environment)
                assert result.exit_code == 0, result.output[-2000:]
                objects[clone, run] = (root / f"{run}.o").read_bytes()
    assert objects["a", "fixed"] == objects["clone_b_at_a_longer_path", "fixed"]
    assert objects["a", "plain-1"] != objects["a", "plain-2"]


def test_a_kernel_tu_of_specializations_compiles_to_the_same_bytes_in_any_folder(smoke_artifact, tmp_path):
    """sccache and build servers run nvcc's steps in a temporary folder of a new name each time.
    A TU of explicit specializations only (every generated kernel TU is one) had its internal
    symbols named after that folder by cudafe++; the generator's module anchor names them after
    the TU. Control: the same TU without the anchor differs between two folders."""
    from flashbuild.core import fixed_pid
    from flashbuild.toolchains.container import ToolchainContainer, docker_client
    from flashbuild.config.kernel_sources import module_anchor

    _, _, folder, _ = smoke_artifact
    image = json.loads((folder / "manifest.json").read_text())["toolchain"]["tag"]
    body = ("namespace { __device__ int bias; }\n"
            "template <int N> __global__ void kern(int* p) { p[threadIdx.x] = bias + N; }\n"
            "template <int N> void launch(int* p);\n"
            "template <> void launch<3>(int* p) { kern<3><<<1, 32>>>(p); }\n")
    (tmp_path / "plain.cu").write_text(body)
    (tmp_path / "anchored.cu").write_text(body + module_anchor("anchored"))
    objects = {}
    with ToolchainContainer(docker_client(), image, tmp_path, "module-id-test") as container:
        shim = fixed_pid.build_shim(container, tmp_path / "tools")
        for name in ("plain", "anchored"):
            for where in ("one", "another_folder"):
                (tmp_path / where).mkdir(exist_ok=True)
                out = tmp_path / f"{name}-{where}.o"
                compile_there = f"cd {tmp_path / where} && nvcc -c -O3 -arch=sm_90a -o {out} {tmp_path / name}.cu"
                argv, environment = fixed_pid.wrap(["sh", "-c", compile_there], shim, name)
                result = container.exec(argv, environment=environment)
                assert result.exit_code == 0, result.output[-2000:]
                objects[name, where] = out.read_bytes()
    assert objects["anchored", "one"] == objects["anchored", "another_folder"]
    assert objects["plain", "one"] != objects["plain", "another_folder"]


def _two_clones_through_sccache(repo, tmp_path, settings: dict) -> list[str]:
    """Build `smoke` with --sccache and `settings` in two clones at different paths; assert the
    second compiles nothing itself (every step a hit) and both export identical bytes. Returns
    the two build logs."""
    environment = {**os.environ, **settings}
    outputs, clones = [], [tmp_path / "a", tmp_path / "clone_b_at_a_longer_path"]
    for clone in clones:
        subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
        result = subprocess.run([sys.executable, "-m", "invoke", "build", "--matrix", "smoke", "--sccache"],
                                cwd=clone, env=environment, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        outputs.append(result.stdout)
    assert "cache misses 0" not in outputs[0] and "cache misses 0," in outputs[1], outputs[1][-2000:]
    version = (repo / "VERSION").read_text().strip()
    tarball = f"artifacts/{version}/flash_attn_standalone-{version}-smoke-cuda12.4-sm90a.tar.gz"
    folder = f"artifacts/{version}/smoke-cuda12.4-sm90a"
    for name in (tarball, f"{folder}/manifest.json", f"{folder}/bin/test_varlen_inference",
                 f"{folder}/lib/libflash_attn_standalone.so.{version}"):
        assert (clones[0] / name).read_bytes() == (clones[1] / name).read_bytes(), name
    return outputs


def test_a_second_clone_builds_smoke_from_a_shared_sccache_folder_byte_for_byte(smoke_artifact, tmp_path):
    """Two clones at different paths, one SCCACHE_DIR: the second only hits, same bytes."""
    _two_clones_through_sccache(smoke_artifact[0], tmp_path, {"SCCACHE_DIR": str(tmp_path / "shared-sccache")})


@pytest.fixture
def redis_endpoint(tmp_path):
    """A Redis server of its own on a free port of 127.0.0.1 (no persistence), stopped after."""
    server = shutil.which("redis-server")
    assert server, "redis-server is missing: `python3 -m invoke setup` installs it"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                "no", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_second_clone_builds_smoke_from_a_shared_redis_cache_byte_for_byte(smoke_artifact, tmp_path, redis_endpoint):
    """Two clones at different paths, each with its own empty SCCACHE_DIR, one Redis server
    (the compile container on the host network): the second only hits, same bytes."""
    outputs = _two_clones_through_sccache(smoke_artifact[0], tmp_path, {"SCCACHE_REDIS_ENDPOINT": redis_endpoint})
    assert all("cache hits" in output for output in outputs)


# A paged family as docs/design/house.md's walk-through adds one: its record and its template.
TOY_TEMPLATE = """\
#include "paged/paged.h"
namespace fas_paged {
template <int Dtype, int KvDtype, int HeadDim, bool Causal, int TileQ>
__global__ void toy_fill(LaunchArgs a) {
    for (int i = threadIdx.x; i < HeadDim; i += blockDim.x) static_cast<unsigned short*>(a.out)[i] = 0;
}
template <int Dtype, int KvDtype, int HeadDim, bool Causal, int TileQ>
cudaError_t run_toy_fill(const LaunchArgs& a, cudaStream_t stream) {
    toy_fill<Dtype, KvDtype, HeadDim, Causal, TileQ><<<1, 32, 0, stream>>>(a);
    return cudaGetLastError();
}
template <int Dtype, int KvDtype, int HeadDim, bool Causal, int TileQ>
cudaError_t occupancy_toy_fill(DecodeShape, int* ctas_per_sm) {
    *ctas_per_sm = 1;
    return cudaSuccess;
}
}  // namespace fas_paged
"""


def test_a_family_of_a_record_and_a_template_compiles_into_the_paged_dispatch_table(smoke_artifact, tmp_path,
                                                                                     monkeypatch):
    """The walk-through's first two files: a paged family's record (here added to FAMILIES) and
    its template header. The generator writes its TU, and the registry of the paged code path,
    src/paged/registry.cpp as it stands, compiled against the generated kernel_registry.inc,
    takes the TU's specialization into the table its planner searches: registry.o needs the
    symbol and the TU's object defines it, both compiled by the toolchain image's nvcc."""
    from flashbuild.compile.kernelgen import registry_text, write_kernels
    from flashbuild.config import families
    from flashbuild.config.build_plan import make_plan
    from flashbuild.config.kernel_sources import PagedKernel
    from flashbuild.toolchains.container import ToolchainContainer, docker_client
    from conftest import toy_matrix

    repo, _, folder, _ = smoke_artifact
    image = json.loads((folder / "manifest.json").read_text())["toolchain"]["tag"]
    toy = PagedKernel("paged/toy_fill.cuh", "run_toy_fill", "occupancy_toy_fill", "A toy paged kernel", tile_q=32)
    monkeypatch.setitem(families.FAMILIES, "toy_paged_fill", families._paged_family("toy_paged_fill", toy))
    root = tmp_path / "clone"
    shutil.copytree(repo / "src", root / "src")
    (root / "src/paged/toy_fill.cuh").write_text(TOY_TEMPLATE)
    (root / "matrix.yaml").write_text(toy_matrix("toy_paged_fill", "[64]", "[fp16]", "[true]", 1.0))
    config = load_config(root / "matrix.yaml")
    write_kernels(config.matrices.values(), root / "kernels")
    kernels = make_plan(config.matrix("toy"), root).entries[0].kernels
    assert [tu.name for tu in kernels] == ["toy_paged_fill_hdim64_fp16_causal_sm90"]
    (root / "generated").mkdir()
    (root / "generated/kernel_registry.inc").write_text(registry_text(kernels))
    sources = {"toy.o": root / "kernels" / f"{kernels[0].name}.cu", "registry.o": root / "src/paged/registry.cpp"}
    with ToolchainContainer(docker_client(), image, root, "family-walkthrough") as container:
        for obj, source in sources.items():
            result = container.exec(["nvcc", "-c", "-O3", "-std=c++17", "-arch=sm_90a", f"-I{root / 'generated'}",
                                     f"-I{root / 'src'}", f"-I{root / 'src/include'}", "-o", str(root / obj),
                                     str(source)])
            assert result.exit_code == 0, result.output[-3000:]
        symbols = {obj: container.exec(["nm", "-C", str(root / obj)]).output for obj in sources}

    def kinds(obj):  # nm's kind letter on each line naming the TU's specialization
        found = set()
        for line in symbols[obj].splitlines():
            if kernels[0].symbol + "(" in line:  # fas_paged::launch_paged<0, 0, 64, true, 32>(...)
                fields = line.split()
                found.add(fields[0] if fields[0] == "U" else fields[1])
        return found

    assert kinds("registry.o") == {"U"}, symbols["registry.o"][-2000:]
    assert kinds("toy.o") == {"T"}, symbols["toy.o"][-2000:]
