"""The host-toolchain backend (`--backend host`) against a FAKE toolkit: shell scripts named nvcc,
ptxas, cuobjdump and gcc that print what real ones print. Discovery, version parsing, the refusals,
the artifact's name, object keys apart from the container's, a dry run and the start of a build
that never touch Docker, and the runner itself (measuring, signals, scratch folders, the fixed-PID
shim), which runs real processes here."""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from invoke import Context, Exit

import tasks
from conftest import write_tree
from flashbuild import pipeline
from flashbuild.core import fixed_pid
from flashbuild.release import checks
from flashbuild.toolchains import host_toolchain
from flashbuild.compile.compiler import HEADERS, EntryCompiler
from flashbuild.core.errors import ConfigError, EnvironmentProblem
from flashbuild.release.export import tarball_name
from flashbuild.toolchains.host_toolchain import (HostToolchain, arch_supported, discover, host_entry_name, host_flags,
                                       host_plan, parse_gpu_codes, parse_release)
from flashbuild.compile.kernelgen import write_kernels
from flashbuild.config.memory import Stats
from flashbuild.config.options import load_config
from flashbuild.config.build_plan import make_plan
from flashbuild.compile.jobs import Budget, SchedulerEvents
from test_compiler import TREE

CUDA_13_CODES = "sm_75 sm_80 sm_86 sm_87 sm_88 sm_89 sm_90 sm_100 sm_110 sm_103 sm_120 sm_121"
CUDA_12_4_CODES = "sm_50 sm_52 sm_53 sm_60 sm_61 sm_62 sm_70 sm_72 sm_75 sm_80 sm_86 sm_87 sm_89 sm_90"

# A stand-in nvcc: versions and the code list as nvcc prints them; `-shared` of a .c file (the
# fixed-PID shim) is built by the real C compiler; any other command writes its -o file with the
# PID and TMPDIR it saw (the shell's $$ is getpid(), the shim's 4242 when it is preloaded).
FAKE_NVCC = """#!/bin/sh
case "$1" in
  --version) printf 'nvcc: NVIDIA (R) Cuda compiler driver\\nCuda compilation tools, release {release}, V{release}.88\\n'
             printf 'Build cuda_{release}.r{release}/compiler.1_0\\n'; exit 0;;
  --list-gpu-code) for code in {codes}; do echo $code; done; exit 0;;
esac
out=""; prev=""; shared=""; last=""
for arg in "$@"; do
  [ "$prev" = "-o" ] && out="$arg"
  [ "$arg" = "-shared" ] && shared=1
  prev="$arg"; last="$arg"
done
case "$last" in *.c) [ -n "$shared" ] && exec cc -shared -fPIC -O2 -o "$out" "$last";; esac
echo "pid $$ tmp $TMPDIR" > "$out"
"""
FAKE_PTXAS = """#!/bin/sh
printf 'ptxas: NVIDIA (R) Ptx optimizing assembler\\nCuda compilation tools, release {release}, V{release}.88\\n'
"""
FAKE_GCC = "#!/bin/sh\necho 'gcc (Fake 12.2.0-14) 12.2.0'\n"


def script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def fake_toolkit(root: Path, release="13.0", codes=CUDA_13_CODES, cuobjdump=True) -> Path:
    """A CUDA_HOME-style folder with bin/nvcc, bin/ptxas and bin/cuobjdump."""
    script(root / "bin" / "nvcc", FAKE_NVCC.format(release=release, codes=codes))
    script(root / "bin" / "ptxas", FAKE_PTXAS.format(release=release))
    if cuobjdump:
        script(root / "bin" / "cuobjdump", FAKE_PTXAS.format(release=release))
    return root


@pytest.fixture
def host_bin(tmp_path) -> Path:
    """A PATH folder with a fake gcc, and the real cc the fake nvcc builds the shim with."""
    folder = tmp_path / "hostbin"
    script(folder / "gcc", FAKE_GCC)
    real_cc = shutil.which("cc")
    if real_cc:
        os.symlink(real_cc, folder / "cc")
    return folder


def environ_with(cuda_home=None, path=()) -> dict:
    env = {"PATH": os.pathsep.join(map(str, [*path, "/usr/bin", "/bin"]))}
    if cuda_home:
        env["CUDA_HOME"] = str(cuda_home)
    return env


def test_discovery_reads_versions_codes_and_the_host_compiler_from_cuda_home(tmp_path, host_bin):
    root = fake_toolkit(tmp_path / "cuda-13.0")
    toolkit = discover(environ_with(root, [host_bin]))
    assert toolkit.nvcc == root / "bin" / "nvcc"
    assert (toolkit.release, toolkit.nvcc_version, toolkit.ptxas_version) == ("13.0", "V13.0.88", "V13.0.88")
    assert toolkit.ptxas == root / "bin" / "ptxas"
    assert toolkit.gpu_codes == tuple(CUDA_13_CODES.split())
    assert toolkit.host_cc.startswith("gcc (Fake 12.2.0-14) 12.2.0")
    record = toolkit.record()
    assert record["backend"] == "host" and record["cuda"] == "13.0"
    assert record["host_cc"] == toolkit.host_cc and record["ptxas_path"] == str(root / "bin" / "ptxas")


def test_nvcc_on_path_is_used_when_cuda_home_is_unset(tmp_path, host_bin):
    root = fake_toolkit(tmp_path / "cuda-12.6", release="12.6")
    toolkit = discover(environ_with(None, [root / "bin", host_bin]))
    assert toolkit.nvcc == root / "bin" / "nvcc" and toolkit.release == "12.6"


def test_no_nvcc_anywhere_is_an_environment_error_naming_cuda_home_and_path(tmp_path, host_bin, monkeypatch):
    monkeypatch.setattr(host_toolchain, "DEFAULT_CUDA_ROOT", tmp_path / "no-cuda")
    with pytest.raises(EnvironmentProblem) as raised:
        discover({"PATH": str(host_bin)})
    assert "CUDA_HOME is not set, no nvcc is on PATH" in raised.value.message
    assert "CUDA_HOME" in raised.value.fix and "--backend container" in raised.value.fix


def test_a_cuda_home_without_nvcc_is_refused_by_name(tmp_path, host_bin):
    (tmp_path / "empty").mkdir()
    with pytest.raises(EnvironmentProblem, match=f"CUDA_HOME is {tmp_path / 'empty'}, but .*bin/nvcc is not an nvcc"):
        discover(environ_with(tmp_path / "empty", [host_bin]))


def test_a_toolkit_without_cuobjdump_is_refused_before_any_compile(tmp_path, host_bin):
    root = fake_toolkit(tmp_path / "cuda", cuobjdump=False)
    with pytest.raises(EnvironmentProblem, match="no cuobjdump beside"):
        discover(environ_with(root, [host_bin]))


def test_a_cuobjdump_older_than_nvcc_is_refused(tmp_path, host_bin):
    root = fake_toolkit(tmp_path / "cuda", cuobjdump=False)
    script(host_bin / "cuobjdump", FAKE_PTXAS.format(release="12.4"))  # 12.4's names 13.0's sm_90a code sm_90
    with pytest.raises(EnvironmentProblem, match="is CUDA 12.4's cuobjdump, older than nvcc 13.0"):
        discover(environ_with(root, [host_bin]))
    script(host_bin / "cuobjdump", FAKE_PTXAS.format(release="13.2"))
    assert discover(environ_with(root, [host_bin])).cuobjdump == host_bin / "cuobjdump"


def test_no_host_compiler_is_refused_naming_gcc_and_nvcc_ccbin(tmp_path):
    root = fake_toolkit(tmp_path / "cuda")
    with pytest.raises(EnvironmentProblem, match="no host compiler for nvcc") as raised:
        discover({"CUDA_HOME": str(root), "PATH": str(tmp_path / "nothing")})
    assert "NVCC_CCBIN" in raised.value.fix


def test_release_and_codes_are_read_from_real_nvcc_output():
    container_nvcc = ("nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2024 NVIDIA Corporation\n"
                      "Cuda compilation tools, release 12.4, V12.4.131\nBuild cuda_12.4.r12.4/compiler.34097967_0\n")
    assert parse_release(container_nvcc) == ("12.4", "V12.4.131")
    assert parse_gpu_codes(CUDA_12_4_CODES.replace(" ", "\n") + "\n")[-1] == "sm_90"
    with pytest.raises(EnvironmentProblem, match="cannot read a CUDA release"):
        parse_release("gcc (Debian 12.2.0) 12.2.0")


def test_an_arch_specific_code_counts_when_nvcc_lists_its_base():
    codes = CUDA_12_4_CODES.split()  # nvcc 12.4 lists sm_90, not sm_90a, and emits sm_90a
    assert arch_supported("sm_90a", codes) and arch_supported("sm_80", codes)
    assert not arch_supported("sm_100a", codes) and not arch_supported("sm_100", codes)
    assert arch_supported("sm_100f", CUDA_13_CODES.split())
    assert not arch_supported("sm_70", CUDA_13_CODES.split())  # CUDA 13 dropped Volta


def test_an_entry_needing_an_arch_the_toolkit_lacks_is_refused_naming_arch_and_release(tmp_path, host_bin, repo):
    root = fake_toolkit(tmp_path / "cuda-11.7", release="11.7", codes="sm_75 sm_80 sm_86 sm_87")
    toolkit = discover(environ_with(root, [host_bin]))
    plan = make_plan(load_config(repo / "matrix.yaml").matrix("minimal"), repo)
    with pytest.raises(EnvironmentProblem) as raised:
        host_plan(plan, toolkit)
    assert "entry minimal-cuda12.4-sm90a needs sm_90a" in raised.value.message
    assert "host CUDA toolkit 11.7" in raised.value.message and str(root / "bin" / "nvcc") in raised.value.message
    assert "--backend container" in raised.value.fix


def test_the_artifact_and_tarball_names_say_the_host_toolkit():
    assert host_entry_name("minimal-cuda12.4-sm90a", "12.4", "13.0") == "minimal-host-cuda13.0-sm90a"
    assert host_entry_name("hoppercheck-cuda12.4-sm90a", "12.4", "12.8") == "hoppercheck-host-cuda12.8-sm90a"
    assert host_entry_name("my-sm90a", "12.4", "13.0") == "my-sm90a-host-cuda13.0"
    assert tarball_name("0.4.0", host_entry_name("full-cuda12.4-sm90a", "12.4", "13.0")) == \
        "flash_attn_standalone-0.4.0-full-host-cuda13.0-sm90a.tar.gz"


def test_the_host_plan_drops_the_pinned_ptxas_and_the_images_host_compiler(tmp_path, host_bin, repo):
    toolkit = discover(environ_with(fake_toolkit(tmp_path / "cuda"), [host_bin]))
    plan = make_plan(load_config(repo / "matrix.yaml").matrix("minimal"), repo)
    assert "nvidia-cuda-nvcc-cu12" in plan.sources_needed  # the container route's ptxas 12.9 wheel
    hosted = host_plan(plan, toolkit)
    assert "nvidia-cuda-nvcc-cu12" not in hosted.sources_needed
    assert {"flash-attn", "flashinfer-python"} <= hosted.sources_needed
    entry = hosted.entries[0].entry
    assert (entry.name, entry.cuda, entry.image.ptxas) == ("minimal-host-cuda13.0-sm90a", "13.0", None)
    assert entry.flags == plan.entries[0].entry.flags  # matrix.yaml names no image-only flag today
    assert hosted.entries[0].kernels == plan.entries[0].kernels
    assert host_flags(["-O3", "-ccbin", "/usr/bin/gcc-13", "--compiler-bindir=/x", "-std=c++17"]) == ("-O3", "-std=c++17")


@pytest.fixture
def tree(tmp_path, repo):
    root = write_tree(tmp_path / "clone", {**TREE, **{str(header): f"// {header.name}\n" for header in HEADERS}})
    (root / "matrix.yaml").write_text((repo / "matrix.yaml").read_text())
    write_kernels(load_config(root / "matrix.yaml").matrices.values(), root / "kernels")
    return root


def host_compiler(tree, fake_build, toolkit, matrix="smoke"):
    entry_plan = host_plan(make_plan(load_config(tree / "matrix.yaml").matrix(matrix), tree), toolkit).entries[0]
    compiler = EntryCompiler(tree, tree / "build", matrix, entry_plan, toolkit.image(entry_plan.entry.image, tree),
                             fake_build.sources, HostToolchain(toolkit, tree, tree / "build"))
    return compiler


def kernel_key(compiler) -> str:
    return compiler.kernel_spec(compiler.plan.kernels[0]).key


def test_host_object_keys_differ_from_the_containers_and_between_toolkits_and_clones(tmp_path, host_bin, tree,
                                                                                    fake_build):
    cuda13 = discover(environ_with(fake_toolkit(tmp_path / "cuda-13.0"), [host_bin]))
    cuda12 = discover(environ_with(fake_toolkit(tmp_path / "cuda-12.8", release="12.8"), [host_bin]))
    entry_plan = make_plan(load_config(tree / "matrix.yaml").matrix("smoke"), tree).entries[0]
    container = EntryCompiler(tree, tree / "build", "smoke", entry_plan, fake_build.image, fake_build.sources, None)
    host = host_compiler(tree, fake_build, cuda13)
    assert kernel_key(host) != kernel_key(container)
    assert kernel_key(host) != kernel_key(host_compiler(tree, fake_build, cuda12))
    assert kernel_key(host) == kernel_key(host_compiler(tree, fake_build, cuda13))  # same inputs, same key
    other_clone = write_tree(tmp_path / "clone2", {p.relative_to(tree).as_posix(): p.read_text()
                                                    for p in tree.rglob("*") if p.is_file()})
    assert kernel_key(host) != kernel_key(host_compiler(other_clone, fake_build, cuda13))  # the path is in objects
    assert host.artifact_key() != container.artifact_key()


def no_docker(monkeypatch):
    """Make any import of the Docker SDK, and any engine call, fail the test."""
    monkeypatch.setitem(sys.modules, "docker", None)
    monkeypatch.setattr(pipeline, "docker_client", lambda: pytest.fail("--backend host contacted Docker"))


def test_a_host_dry_run_prints_the_host_plan_without_docker(tmp_path, host_bin, monkeypatch, capsys):
    no_docker(monkeypatch)
    monkeypatch.setenv("CUDA_HOME", str(fake_toolkit(tmp_path / "cuda")))
    monkeypatch.setenv("PATH", f"{host_bin}{os.pathsep}{os.environ['PATH']}")
    tasks.build(Context(), matrix="minimal", dry_run=True, backend="host")
    out = capsys.readouterr().out
    assert "backend host: nvcc 13.0 (V13.0.88)" in out and "host compiler gcc (Fake 12.2.0-14)" in out
    assert "entry minimal-host-cuda13.0-sm90a: CUDA 13.0" in out
    assert "not in a container" in out and "toolchain container" not in out


def test_a_host_build_contacts_no_docker_and_fetches_no_ptxas_wheel(tmp_path, host_bin, monkeypatch, repo):
    no_docker(monkeypatch)
    monkeypatch.setenv("CUDA_HOME", str(fake_toolkit(tmp_path / "cuda")))
    monkeypatch.setenv("PATH", f"{host_bin}{os.pathsep}{os.environ['PATH']}")
    asked = []

    class Fetched(Exception):
        pass

    def fetch(paths, local=None, offline=False, only=None):
        asked.append(set(only))
        raise Fetched

    monkeypatch.setattr(pipeline, "fetch_sources", fetch)
    with pytest.raises(Fetched):
        pipeline.build(repo, "smoke", backend="host")
    assert asked and "nvidia-cuda-nvcc-cu12" not in asked[0] and "flash-attn" in asked[0]


def test_backend_mistakes_are_config_errors():
    with pytest.raises(Exit) as raised:
        tasks.build(Context(), matrix="smoke", dry_run=True, backend="docker")
    assert raised.value.code == 2 and "--backend 'docker' is not a backend" in raised.value.message
    with pytest.raises(ConfigError, match="--sccache is not available with --backend host"):
        host_toolchain.check_backend("host", use_sccache=True)


# -- the runner: real processes on this machine -----------------------------------------------
def runner_for(tmp_path, host_bin) -> HostToolchain:
    toolkit = discover(environ_with(fake_toolkit(tmp_path / "cuda"), [host_bin]))
    (tmp_path / "clone").mkdir(exist_ok=True)
    return HostToolchain(toolkit, tmp_path / "clone", tmp_path / "clone" / "build")


def test_the_runner_measures_wall_time_and_peak_memory_without_gnu_time(tmp_path, host_bin):
    runner = runner_for(tmp_path, host_bin)
    times = tmp_path / "tu.time"
    grow = "import time; block = bytearray(300 * 2**20); time.sleep(0.2)"
    argv = ["/usr/bin/time", "-f", "%e %M", "-o", str(times), sys.executable, "-c", grow]
    assert "/usr/bin/time" not in runner.command(argv)
    with runner:
        result = runner.exec(argv, log_path=tmp_path / "logs" / "tu.log")
    assert result.exit_code == 0
    wall, peak_kb = times.read_text().split()
    assert float(wall) >= 0.2 and int(peak_kb) >= 300 * 1024  # the child's 300 MiB, seen through the helper


def test_a_command_killed_by_a_signal_exits_128_plus_it_and_its_time_file_says_so(tmp_path, host_bin):
    runner = runner_for(tmp_path, host_bin)
    times = tmp_path / "killed.time"
    result = runner.exec(["/usr/bin/time", "-f", "%e %M", "-o", str(times), "sh", "-c", "kill -9 $$"])
    assert result.exit_code == 137  # what docker exec reports for an OOM-killed compile
    assert times.read_text().splitlines()[0] == "Command terminated by signal 9"
    assert runner.exec(["sh", "-c", "exit 3"]).exit_code == 3
    assert runner.exec(["no-such-tool-here"]).exit_code == 127


def test_the_runner_puts_the_toolkit_first_on_path_and_scratch_under_the_clone(tmp_path, host_bin):
    runner = runner_for(tmp_path, host_bin)
    log = tmp_path / "env.log"
    result = runner.exec(["sh", "-c", 'command -v nvcc; echo "$TMPDIR"'], log_path=log,
                         environment={"TMPDIR": f"{fixed_pid.SCRATCH}/api_plan"})
    nvcc, scratch = log.read_text().split()
    assert result.output == log.read_text()
    assert nvcc == str(tmp_path / "cuda" / "bin" / "nvcc")
    assert scratch == str(tmp_path / "clone" / "build" / "host-tmp" / "api_plan")


def test_a_host_build_compiles_every_tu_under_the_fixed_pid_and_records_costs(tmp_path, host_bin, tree, fake_build):
    if not (host_bin / "cc").exists():
        pytest.skip("no C compiler to build the fixed-PID shim with")
    toolkit = discover(environ_with(fake_toolkit(tmp_path / "cuda"), [host_bin]))
    compiler = host_compiler(tree, fake_build, toolkit)
    with compiler.container:
        results = compiler.compile_all(Budget(64 * 1024**3, 2, "test"), SchedulerEvents())
        build = compiler.link(results)
    assert len(results) == compiler.plan.tu_count and all(r.ok and not r.cached for r in results)
    for result in results:
        text = result.object_path.read_text()
        # the shim, built by the toolkit's "nvcc" with the host's C compiler, was preloaded
        assert text.startswith("pid 4242 tmp ") and f"/build/host-tmp/{result.name}" in text, text
    assert build.library.is_file() and build.test_binary.is_file()
    recorded = json.loads((tree / "build" / "tu-stats.json").read_text())
    assert len(recorded) == compiler.plan.tu_count
    assert all(row["peak_rss_kb"] > 0 for row in recorded.values())
    assert Stats(tree / "build").peaks()  # the next build's estimates


def test_a_host_build_exports_an_artifact_named_and_recorded_after_the_host_toolkit(tmp_path, host_bin, tree,
                                                                                  fake_build, monkeypatch):
    if not (host_bin / "cc").exists():
        pytest.skip("no C compiler to build the fixed-PID shim with")
    no_docker(monkeypatch)
    monkeypatch.setenv("CUDA_HOME", str(fake_toolkit(tmp_path / "cuda")))
    monkeypatch.setenv("PATH", f"{host_bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    monkeypatch.setattr(pipeline, "fetch_sources", lambda paths, local=None, offline=False, only=None:
                        {name: fetched for name, fetched in fake_build.sources.items() if name in only})
    verified = []

    def verify(run, result, manifest, paths):  # the fake objects hold no symbols: test_checks.py covers the checks
        verified.append(run)
        report = checks.Report(str(result.library))
        report.add("objects and library checked (stand-in)", True)
        return report

    monkeypatch.setattr(pipeline, "verify_build", verify)
    [folder] = pipeline.build(tree, "smoke", backend="host")
    assert folder == tree / "artifacts" / "1.2.3" / "smoke-host-cuda13.0-sm90a"
    assert (folder.parent / "flash_attn_standalone-1.2.3-smoke-host-cuda13.0-sm90a.tar.gz").is_file()
    assert isinstance(verified[0].__self__, HostToolchain)  # verify's tools ran on this machine
    manifest = json.loads((folder / "manifest.json").read_text())
    toolchain = manifest["toolchain"]
    assert toolchain["backend"] == "host" and toolchain["cuda"] == "13.0"
    assert toolchain["nvcc"] == "Build cuda_13.0.r13.0/compiler.1_0"  # what the toolkit's nvcc printed
    assert toolchain["ptxas"] == "Cuda compilation tools, release 13.0, V13.0.88"
    assert toolchain["host_cc"].startswith("gcc (Fake 12.2.0-14) 12.2.0")
    assert "nvidia-cuda-nvcc-cu12" not in {source["name"] for source in manifest["sources"]}
    assert manifest["entry"] == "smoke-host-cuda13.0-sm90a"


def test_an_interrupted_host_build_ends_every_running_compile_at_once(tmp_path, host_bin, tree, fake_build):
    """As removing the container does: the compiler's KeyboardInterrupt path calls remove(), which
    ends each running command's whole process tree (here a "nvcc" with a child of its own)."""
    import threading
    import time

    toolkit = discover(environ_with(fake_toolkit(tmp_path / "cuda"), [host_bin]))
    runner = HostToolchain(toolkit, tree, tree / "build")
    child_pid = tmp_path / "child.pid"
    done = []
    worker = threading.Thread(target=lambda: done.append(runner.exec(
        ["/usr/bin/time", "-f", "%e %M", "-o", str(tmp_path / "t.time"),
         "sh", "-c", f"sleep 60 & echo $! > {child_pid}; wait"])))
    started = time.monotonic()
    worker.start()
    while not child_pid.is_file() or not child_pid.read_text().strip():
        time.sleep(0.05)
    runner.remove()
    worker.join(10)
    assert done and done[0].exit_code == 137 and time.monotonic() - started < 10
    status = Path(f"/proc/{int(child_pid.read_text())}/status")
    time.sleep(0.2)
    # the compile's own child went with it (gone, or dead and not yet reaped by init)
    assert not status.exists() or "State:\tZ" in status.read_text()
