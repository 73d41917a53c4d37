"""EntryCompiler on a small source tree with a stand-in container: which flags each host TU
gets by its folder, what its key covers, what the link steps name, what the memory model
records, and that the manifest's expectation is the plan's."""

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import FakeContainer, write_tree
from flashbuild.core import fixed_pid
from flashbuild.compile.compiler import PLAIN_C_FLAGS, EntryCompiler, killed_for_memory
from flashbuild.core.errors import CompileError, EngineLost
from flashbuild.compile.kernelgen import write_kernels
from flashbuild.release.manifest import entry_manifest, expectation, read_manifest, with_report
from flashbuild.release.checks import Report
from flashbuild.config.memory import Stats
from flashbuild.config.options import load_config
from flashbuild.config.build_plan import make_plan
from flashbuild.compile.jobs import Budget, SchedulerEvents

KERNEL = "paged_decode_hdim64_fp16_causal_sm90"  # the smoke matrix's one kernel TU

TREE = {
    "VERSION": "1.2.3\n",
    "src/api/exports.cpp": '#include "core/status.h"\n',
    "src/core/status.cpp": '#include "core/status.h"\n',
    "src/core/status.h": "// status\n",
    "src/fa2/launch.cu": '#include "kernel_registry.inc"\n',
    "src/sm90/plan.cu": '#include "sm90/tiles.h"\n',
    "src/sm90/tiles.h": "// tiles\n",
    "src/sm90/launch.cuh": "// launch\n",
    "src/glibc_compat.c": "",
    "src/standins/c10/x.h": "",
    "src/exports.map": "{ global: fas_fwd; local: *; };\n",
    "tests/gpu/driver.cpp": "",
    "tests/gpu/cases.cpp": "",
    "tests/gpu/gpu_test.h": "",
}


@pytest.fixture
def tree(tmp_path, repo):
    write_tree(tmp_path, TREE)
    (tmp_path / "matrix.yaml").write_text((repo / "matrix.yaml").read_text())
    write_kernels(load_config(tmp_path / "matrix.yaml").matrices.values(), tmp_path / "kernels")
    return tmp_path


def compiler_for(tree, fake_build, matrix="smoke"):
    entry_plan = make_plan(load_config(tree / "matrix.yaml").matrix(matrix), tree).entries[0]
    return EntryCompiler(tree, tree / "build", matrix, entry_plan, fake_build.image, fake_build.sources,
                         fake_build.container)


def compile_all(compiler):
    return compiler.compile_all(Budget(64 * 1024**3, 1, "test"), SchedulerEvents())


def test_host_flags_follow_the_code_folder(tree, fake_build):
    compiler = compiler_for(tree, fake_build)
    compiler.write_registry()
    specs = {host.name: compiler.host_spec(host) for host in compiler.plan.hosts}
    assert list(specs) == ["core_status", "api_exports", "fa2_launch", "sm90_plan", "glibc_compat"]
    fa2_include = f"-I{(fake_build.third_party / 'flash-attn-2.8.3/flash_attn-2.8.3/csrc/flash_attn/src').resolve()}"
    for name, spec in specs.items():
        upstream_paths = [f for f in spec.flags if str(fake_build.third_party) in f]
        if name == "glibc_compat":
            assert spec.flags == PLAIN_C_FLAGS
            continue
        assert f"-I{compiler.registry.parent}" in spec.flags and "-DFAS_VERSION_MAJOR=1" in spec.flags
        assert f"-I{tree.resolve() / 'src'}" in spec.flags
        assert (fa2_include in upstream_paths) == (name == "fa2_launch"), name
        assert len(upstream_paths) == (2 if name == "fa2_launch" else 0), name


def test_host_keys_cover_the_registry_and_kernel_keys_do_not(tree, fake_build):
    compiler = compiler_for(tree, fake_build, "minimal")
    compiler.write_registry()
    hosts = {h.name: compiler.host_spec(h).key for h in compiler.plan.hosts}
    kernels = {tu.name: compiler.kernel_spec(tu).key for tu in compiler.plan.kernels}
    compiler.registry.write_text('FAS_FA2_FWD(cutlass::half_t, FAS_DTYPE_FP16, 64, false, "fa2")\n')
    (tree / "src/core/status.h").write_text("// another status\n")
    after = {h.name: compiler.host_spec(h).key for h in compiler.plan.hosts}
    changed = {name for name in hosts if hosts[name] != after[name]}
    assert changed == set(hosts) - {"glibc_compat"}
    assert kernels == {tu.name: compiler.kernel_spec(tu).key for tu in compiler.plan.kernels}
    (tree / "src/sm90/launch.cuh").write_text('#include "sm90/tiles.h"\n')
    sm90 = [tu for tu in compiler.plan.kernels if tu.family == "sm90_prefill"]
    assert all(compiler.kernel_spec(tu).key != kernels[tu.name] for tu in sm90), "own headers are keyed"


def test_build_compiles_every_tu_once_records_costs_and_links_by_the_names(tree, fake_build):
    compiler = compiler_for(tree, fake_build)
    results = compile_all(compiler)
    assert sorted(r.name for r in results if not r.cached) == sorted(
        [KERNEL, "core_status", "api_exports", "fa2_launch", "sm90_plan", "glibc_compat"])
    recorded = Stats(compiler.build_root).read()
    assert recorded[f"{KERNEL}@sm_90a"] == {"peak_rss_kb": 2048000, "wall_s": pytest.approx(0, abs=5)}
    assert all(r.cached for r in compile_all(compiler)), "a second build reuses every object"

    fake_build.container.commands.clear()
    build = compiler.link(results)
    link, test = fake_build.container.commands
    lib = build.library.parent
    assert build.library.name == "libflash_attn_standalone.so.1.2.3"
    assert "-Xlinker=-soname,libflash_attn_standalone.so.1" in link
    assert os.readlink(lib / "libflash_attn_standalone.so.1") == "libflash_attn_standalone.so.1.2.3"
    assert os.readlink(lib / "libflash_attn_standalone.so") == "libflash_attn_standalone.so.1"
    gpu = str(tree.resolve() / "tests/gpu")
    assert [a for a in test if a.startswith(gpu)] == [f"{gpu}/cases.cpp", f"{gpu}/driver.cpp"]
    assert f"-I{gpu}" in test and "-l:libflash_attn_standalone.so.1" in test


def test_every_nvcc_runs_under_the_fixed_pid_shim_in_a_tmpdir_of_its_own(tree, fake_build):
    compiler = compiler_for(tree, fake_build)
    container = fake_build.container
    compiler.link(compile_all(compiler))
    shim = str(compiler.out_dir / "tools" / fixed_pid.SHIM_NAME)
    assert shim in container.commands[0]
    runs = [env for command, env in zip(container.commands[1:], container.environments[1:]) if "nvcc" in command]
    assert len(runs) == compiler.plan.tu_count + 2  # every TU, the link, the test binary
    assert all(env["LD_PRELOAD"] == shim for env in runs)
    assert len({env["TMPDIR"] for env in runs}) == len(runs)


def test_object_keys_cover_the_fixed_pid_shim(tree, fake_build, monkeypatch):
    compiler = compiler_for(tree, fake_build)
    before = {tu.name: compiler.kernel_spec(tu).key for tu in compiler.plan.kernels}
    monkeypatch.setattr(fixed_pid, "KEY_PART", fixed_pid.KEY_PART + "/* another shim */")
    assert all(compiler.kernel_spec(tu).key != before[tu.name] for tu in compiler.plan.kernels)


def test_manifest_expectation_is_what_the_plan_built(tree, fake_build):
    compiler = compiler_for(tree, fake_build, "minimal")
    build = compiler.link(compile_all(compiler))
    manifest = entry_manifest("minimal", build, fake_build.sources, {}, tree)
    expect = expectation(manifest)
    assert expect.symbols == tuple(tu.symbol for tu in compiler.plan.kernels)
    assert expect.soname == "libflash_attn_standalone.so.1" and expect.exports == ("fas_fwd",)
    assert expect.archs == ("sm_90a",)
    assert [tu["name"] for tu in manifest["translation_units"] if tu["kind"] == "host"] == \
        [h.name for h in compiler.plan.hosts]
    report = Report("lib")
    report.add("a check", True)
    assert with_report(manifest, report)["verify"] == [{"check": "a check", "ok": True}]


def test_written_manifest_reads_back_for_verify(tree, fake_build):
    compiler = compiler_for(tree, fake_build, "minimal")
    manifest = entry_manifest("minimal", compiler.link(compile_all(compiler)), fake_build.sources,
                              {"dockerfile": "docker/x.Dockerfile"}, tree)
    path = tree / "manifest.json"
    exported = {**with_report(manifest, Report("lib")), "artifact_key": "a" * 64, "manifest_schema": 1,
                "product": "flash_attn_standalone", "version": "0.4.0", "entry": "minimal-cuda12.4-sm90a",
                "files": {"lib/libflash_attn_standalone.so.0.4.0": "b" * 64}, "created_utc": "2026-11-26T00:00:00+00:00"}
    path.write_text(json.dumps(exported))  # what export adds to the build's manifest
    assert expectation(read_manifest(path)) == expectation(manifest)


class KillingContainer(FakeContainer):
    """A FakeContainer whose nvcc for the TUs in `kills` is SIGKILLed (as the OOM killer does to
    cicc) that many times before it compiles; `block` holds every compile of a TU until set."""

    def __init__(self, kills=None, block=None):
        super().__init__()
        self.kills = dict(kills or {})
        self.block = block
        self.compiled: list[str] = []
        self.blocking = threading.Event()  # set once a compile holds on `block`
        # A removed container runs nothing more: its removal and a compile's start (writing the
        # partial) exclude each other, as the engine's kill does for a real nvcc.
        self._lock = threading.Lock()

    def remove(self):
        with self._lock:
            super().remove()

    def exec(self, argv, log_path=None, environment=None):
        from flashbuild.toolchains.container import ExecResult

        inner = argv[4:] if argv[:2] == ["sh", "-c"] else argv
        if inner[0] != "/usr/bin/time":
            return super().exec(argv, log_path, environment)
        output = Path(inner[inner.index("-o", inner.index("nvcc")) + 1])
        name = output.name.split("-")[0]  # <tu>-<key>.o.<pid>.partial; TU names hold no dash
        self.compiled.append(name)
        if self.block is not None:
            with self._lock:
                if self.removed:  # a compile started after the removal: nothing runs
                    raise EngineLost("the container went away")
                output.parent.mkdir(parents=True, exist_ok=True)
                output.write_bytes(b"half an object")
            self.blocking.set()
            self.block.wait(30)
            if self.removed:  # as ToolchainContainer says of a command that died with its container
                raise EngineLost("the container went away")
        if self.kills.get(name):
            self.kills[name] -= 1
            log_path.parent.mkdir(parents=True, exist_ok=True)
            Path(inner[inner.index("-o") + 1]).write_text("Command terminated by signal 9\n40.0 3145728\n")
            log_path.write_text("nvcc error   : 'cicc' died due to signal 9 (Kill signal)\n")
            return ExecResult(255, log_path.read_text())
        return super().exec(argv, log_path, environment)



def test_a_tu_killed_for_memory_is_retried_alone_and_the_build_completes(tree, fake_build):
    container = KillingContainer(kills={KERNEL: 1})
    compiler = EntryCompiler(tree, tree / "build", "smoke", compiler_for(tree, fake_build).plan, fake_build.image,
                             fake_build.sources, container)
    results = compiler.compile_all(Budget(64 * 1024**3, 2, "test"), SchedulerEvents())
    assert all(r.ok for r in results) and len(results) == compiler.plan.tu_count
    assert container.compiled.count(KERNEL) == 2
    assert len(compiler.retries) == 1 and compiler.retries[0].startswith(f"{KERNEL} (killed at 3.0 GiB")
    assert Stats(compiler.build_root).read()[f"{KERNEL}@sm_90a"]["peak_rss_kb"] == 2048000, "the retry's own peak"
    assert not list(compiler.object_dir.glob("*.partial"))


def test_a_tu_killed_for_memory_again_alone_fails_the_build_naming_it_and_its_peak(tree, fake_build):
    container = KillingContainer(kills={KERNEL: 2})
    compiler = EntryCompiler(tree, tree / "build", "smoke", compiler_for(tree, fake_build).plan, fake_build.image,
                             fake_build.sources, container)
    with pytest.raises(CompileError, match=f"TU {KERNEL} .* killed for memory twice, the second time alone after "
                                           "reaching 3.0 GiB"):
        compiler.compile_all(Budget(64 * 1024**3, 2, "test"), SchedulerEvents())
    assert container.compiled.count(KERNEL) == 2
    recorded = Stats(compiler.build_root).read()[f"{KERNEL}@sm_90a"]["peak_rss_kb"]
    assert recorded >= 3145728, "a killed TU never records less than it reached"
    assert not list(compiler.object_dir.glob(f"{KERNEL}-*"))


def test_a_kill_is_read_from_the_exit_code_nvcc_gcc_or_gnu_time():
    assert killed_for_memory(137, "", "")
    assert killed_for_memory(255, "nvcc error   : 'cicc' died due to signal 9 (Kill signal)", "")
    assert killed_for_memory(1, "g++: fatal error: Killed signal terminated program cc1plus", "")
    assert killed_for_memory(1, "", "Command terminated by signal 9\n1.0 100")
    assert killed_for_memory(1, "Killed\n", "Command exited with non-zero status 1\n2.8 618260")
    assert not killed_for_memory(1, "error: identifier \"x\" is undefined", "2.0 300000")
    assert not killed_for_memory(2, "signal 90 handlers", "")


def test_an_interrupt_removes_the_container_and_every_partial_object_at_once(tree, fake_build, interruptible):
    release = threading.Event()
    container = KillingContainer(block=release)
    compiler = EntryCompiler(tree, tree / "build", "smoke", compiler_for(tree, fake_build).plan, fake_build.image,
                             fake_build.sources, container)
    fired = interruptible(container.blocking)
    try:
        with pytest.raises(KeyboardInterrupt):
            compiler.compile_all(Budget(64 * 1024**3, 2, "test"), SchedulerEvents())
        assert time.monotonic() - fired["at"] < 5
        assert container.removed
        assert not list(compiler.object_dir.glob("*.partial")), "partial objects of the running TUs"
    finally:
        release.set()
    time.sleep(0.2)  # the workers end once their (fake) nvcc returns
    assert not list(compiler.object_dir.glob("*.o")) and not list(compiler.object_dir.glob("*.partial"))


def test_partial_objects_of_a_dead_build_are_removed_and_a_live_ones_kept(tree, fake_build):
    compiler = compiler_for(tree, fake_build)
    compiler.object_dir.mkdir(parents=True)
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = compiler.object_dir / f"x-0123.o.{gone.pid}.partial"
    live = compiler.object_dir / "y-4567.o.1.partial"  # pid 1 runs as long as the machine does
    legacy = compiler.object_dir / "z-89ab.o.partial"
    for path in (dead, live, legacy):
        path.write_bytes(b"half")
    compile_all(compiler)
    assert live.exists() and not dead.exists() and not legacy.exists()
