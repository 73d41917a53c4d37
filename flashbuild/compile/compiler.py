"""Jobs -> objects -> library: compile each TU in its own nvcc process inside the entry's
toolchain container, under the memory-aware scheduler, then link the library and the
test binary.

Objects are cached by a key over everything that determines them (source text, flags,
archs, image, upstream pin, and those of our own headers the TU includes), so a second
build recompiles only what changed. Per-TU wall time and peak RSS (GNU time, which sees
nvcc's children) go to the memory model (memory.py) and become the next build's estimates.
Every nvcc runs under fixed_pid.py's shim, so that equal keys give byte-identical objects.

nvcc writes to a name of this process's own (`*.o.<pid>.partial`), renamed to the object
only on success; partials of a dead process are removed at the next compile. A TU the kernel
killed for memory (SIGKILL: exit 137, or nvcc's or GNU time's report of signal 9) is compiled
again alone with its estimate raised (jobs.retry_alone). An interrupt removes the
container at once, which ends every nvcc, and then the partials of the TUs that were running.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from flashbuild.compile import dist, sccache
from flashbuild.core import fixed_pid
from flashbuild.core.console import log
from flashbuild.toolchains.container import ToolchainContainer
from flashbuild.core.errors import CompileError, FlashBuildError
from flashbuild.config.families import HOST, Upstream
from flashbuild.toolchains.images import ToolchainImage
from flashbuild.compile.kernelgen import registry_text
from flashbuild.core.library import EXPORTS_MAP, LibraryName, read_version
from flashbuild.config.memory import GIB, Stats, estimate
from flashbuild.config.build_plan import GLIBC_COMPAT, EntryPlan, HostTU, KernelTU
from flashbuild.core.processes import left_by_dead_process
from flashbuild.compile.jobs import Budget, Job, Outcome, SchedulerEvents, retry_alone, run_jobs
from flashbuild.sources.upstream import FetchedSource

# The public headers: the one consumers include, and the plan API it includes.
HEADERS = (Path("src/include/flash_attn_standalone.h"), Path("src/include/flash_attn_standalone_plan.h"),
           Path("src/include/flash_attn_standalone_paged.h"), Path("src/include/flash_attn_standalone_kv_append.h"),
           Path("src/include/flash_attn_standalone_merge.h"))
STANDINS = Path("src/standins")
GPU_TEST_DIR = Path("tests/gpu")
TEST_BINARY = "test_varlen_inference"
# Where a quoted #include of our own code is looked up after the including file's folder
# (the -I order of common_flags and project_flags).
OWN_INCLUDE_ROOTS = (Path("src/include"), STANDINS, Path("src"))
QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
LOG_TAIL_LINES = 40
# Plain C11 without _GNU_SOURCE: see src/glibc_compat.c.
PLAIN_C_FLAGS = ["-O2", "-Xcompiler=-fPIC,-std=c11"]
# How a SIGKILLed compile reports itself: GNU time ("Command terminated by signal 9"), nvcc
# ("'cicc' died due to signal 9 (Kill signal)"; under a cgroup limit it printed a bare "Killed"
# line and exited 137), gcc ("Killed signal terminated program cc1plus").
KILLED = re.compile(r"\bsignal 9\b|\bKill(ed)? signal\b|^Killed$", re.M)


def killed_for_memory(exit_code: int, log_text: str, time_text: str) -> bool:
    """Whether a failed compile was SIGKILLed: what the kernel's OOM killer (host or cgroup) does
    to the largest process; the container's own loss is told apart before this (container.py)."""
    return exit_code == 137 or bool(KILLED.search(log_text) or KILLED.search(time_text))


def stale_partials(object_dir: Path) -> list[Path]:
    """Partial objects whose writing process is gone (or of an older, pid-less name)."""
    return [path for path in object_dir.glob("*.partial") if left_by_dead_process(path.name)]


def gencode_flags(archs) -> list[str]:
    flags = []
    for arch in archs:
        number = arch.removeprefix("sm_")
        flags.append(f"-gencode=arch=compute_{number},code=sm_{number}")
    return flags


def _digest(parts) -> str:
    """sha256 over text parts, each ended by a NUL (so that no two splits of one text collide)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def own_include_closure(repo_root: Path, source: Path) -> list[Path]:
    """The files of this repository that `source` reaches through quoted #includes, resolved
    like the compiler does (the including file's folder, then OWN_INCLUDE_ROOTS). Includes that
    resolve outside our tree are upstream code, keyed by its pin."""
    repo_root = repo_root.resolve()
    roots = [repo_root / r for r in OWN_INCLUDE_ROOTS]
    seen: set[Path] = set()
    pending = [source.resolve()]
    while pending:
        current = pending.pop()
        for name in QUOTED_INCLUDE.findall(current.read_text(errors="replace")):
            for folder in (current.parent, *roots):
                candidate = (folder / name).resolve()
                if candidate.is_file():
                    if candidate not in seen and candidate.is_relative_to(repo_root):
                        seen.add(candidate)
                        pending.append(candidate)
                    break
    return sorted(seen)


@dataclass(frozen=True)
class TUSpec:
    """How one TU is compiled: the nvcc flags and the cache key of its object."""

    name: str
    kind: str  # "kernel" or "host"
    source: Path  # absolute
    flags: list
    key: str


@dataclass
class TUResult:
    name: str
    kind: str  # "kernel" or "host"
    object_path: Path
    cached: bool
    ok: bool = True
    wall_s: float | None = None
    peak_rss_kb: int | None = None
    log_path: Path | None = None
    killed_for_memory: bool = False
    estimate_kb: int | None = None  # what the scheduler reserved for it


@dataclass
class EntryBuild:
    """What one matrix entry produced: the inputs export and verify need."""

    plan: EntryPlan
    image: ToolchainImage
    name: LibraryName
    library: Path  # the real file, lib/libflash_attn_standalone.so.X.Y.Z
    test_binary: Path
    headers: list  # the public headers (HEADERS), exported under include/
    kernel_objects: dict  # KernelTU.name -> Path
    tu_results: list = field(default_factory=list)
    compile_flags: list = field(default_factory=list)


class EntryCompiler:
    def __init__(self, repo_root: Path, build_root: Path, matrix_name: str, plan: EntryPlan,
                 image: ToolchainImage, sources: dict[str, FetchedSource], container: ToolchainContainer | None):
        self.repo_root = repo_root.resolve()
        self.plan = plan
        self.image = image
        self.sources = sources
        self.container = container
        self.name = LibraryName(read_version(self.repo_root))
        self.build_root = build_root.resolve()
        self.stats = Stats(self.build_root)
        # Objects are content-addressed by their key, so entries that share a TU share it.
        self.object_dir = self.build_root / "objects"
        self.log_dir = self.build_root / "logs" / plan.name
        self.out_dir = self.build_root / matrix_name / plan.name
        self.registry = self.out_dir / "gen" / "kernel_registry.inc"
        self.shim: Path | None = None  # fixed_pid's shim, built by compile_all
        self.route = None  # sccache.Route when the build runs nvcc through sccache
        self.jobs_limit: int | None = None  # --jobs: also caps the jobs a cluster runs
        self._partials: set[Path] = set()  # being written now, removed if the build is interrupted
        self.retries: list[str] = []  # a line per TU compiled again alone after a memory kill
        self.killed: list[TUResult] = []  # the tries that were killed, recorded before the retries' results

    # -- flags and keys -------------------------------------------------------------------
    def common_flags(self) -> list[str]:
        return [
            *self.plan.entry.flags,
            *gencode_flags(self.plan.entry.archs),
            "-Xcompiler=-fPIC,-fvisibility=hidden",
            f"-I{self.repo_root / 'src/include'}",
            f"-I{self.repo_root / STANDINS}",
        ]

    def project_flags(self) -> list[str]:
        """Our own src/ on the include path, for the SM90 kernels and the host TUs."""
        return [f"-I{self.repo_root / 'src'}"]

    def upstream_flags(self, upstream: Upstream | None) -> list[str]:
        return upstream.flags(self.sources[upstream.pin]) if upstream else []

    def api_flags(self) -> list[str]:
        """What the C API's host code needs: the build's registry and version, built archs."""
        major, minor, patch = self.name.version
        return [
            f"-I{self.registry.parent}",
            f"-DFAS_VERSION_MAJOR={major}",
            f"-DFAS_VERSION_MINOR={minor}",
            f"-DFAS_VERSION_PATCH={patch}",
        ] + (["-DFAS_BUILT_SM80=1"] if "sm_80" in self.plan.entry.archs else [])

    def _headers_digest(self, source: Path, folders) -> str:
        """Our own headers the TU includes, part of its cache key: the closure of its quoted
        #includes within this repository (so editing a host-only header recompiles no kernel),
        plus whole folders of headers that only upstream code includes (the stand-ins)."""
        paths = set(own_include_closure(self.repo_root, source))
        for folder in folders:
            paths.update(p for p in (self.repo_root / folder).rglob("*") if p.is_file())
        h = hashlib.sha256()
        for path in sorted(paths):
            h.update(str(path.relative_to(self.repo_root)).encode())
            h.update(path.read_bytes())
        return h.hexdigest()

    def _route_for(self, kind: str):
        """The route a TU compiles by: host TUs stay off a build cluster (seconds each; sccache
        0.16.0's remote ptxas fails on their near-empty PTX: docs/design/reproducible-builds.md)
        and compile here, directly."""
        return None if self.route and self.route.cluster and kind == "host" else self.route

    def _key(self, source: Path, flags: list[str], upstream: Upstream | None, extra: str = "",
             kind: str = "kernel") -> str:
        """The object's cache key. The flags name host paths; the container sees the clone at one
        fixed path, so the key holds them relative to the clone and two clones share keys."""
        pin = self.sources[upstream.pin].pin.sha256 if upstream else ""
        headers = self._headers_digest(source, upstream.keyed_folders if upstream else ())
        portable_flags = json.dumps(flags).replace(str(self.repo_root), "<clone>")
        route = self._route_for(kind)
        return _digest((source.read_text(), portable_flags, self.image.image_id, pin, headers, extra,
                        fixed_pid.KEY_PART, route.key_part if route else ""))

    def kernel_spec(self, tu: KernelTU) -> TUSpec:
        source = self.repo_root / tu.source
        if not source.is_file():
            raise CompileError(f"{tu.source} is missing", fix="run `invoke generate` to write kernels/")
        project = self.project_flags() if tu.record.project_includes else []
        flags = self.common_flags() + project + self.upstream_flags(tu.upstream)
        return TUSpec(tu.name, "kernel", source, flags, self._key(source, flags, tu.upstream))

    def host_spec(self, host: HostTU) -> TUSpec:
        """Host TUs see the registry; its text is in their key, since the file's path is not."""
        source = self.repo_root / host.source
        if host.plain_c:
            return TUSpec(host.name, "host", source, PLAIN_C_FLAGS, self._key(source, PLAIN_C_FLAGS, None, kind="host"))
        flags = self.common_flags() + self.project_flags() + self.upstream_flags(host.upstream) + self.api_flags()
        return TUSpec(host.name, "host", source, flags,
                      self._key(source, flags, host.upstream, self.registry.read_text(), kind="host"))

    def artifact_key(self) -> str:
        """A key over every input of the entry's artifact: each TU's object key, the link's
        inputs (exports map, GPU test sources, headers, version, archs) and the image. Equal keys
        mean an export would write the same library, test binary and headers again."""
        self.write_registry()
        specs = [self.kernel_spec(tu) for tu in self.plan.kernels] + [self.host_spec(host) for host in self.plan.hosts]
        parts = [f"{spec.name}={spec.key}" for spec in sorted(specs, key=lambda spec: spec.name)]
        parts += [self.image.image_id, self.name.real, json.dumps(list(self.plan.entry.archs)),
                  (self.repo_root / EXPORTS_MAP).read_text(), *((self.repo_root / h).read_text() for h in HEADERS)]
        for source in self.gpu_test_sources():
            parts += [source.name, source.read_text()]
        return _digest(parts)

    # -- one TU ---------------------------------------------------------------------------
    def _compile(self, spec: TUSpec) -> TUResult:
        name, kind = spec.name, spec.kind
        obj = self.object_dir / f"{name}-{spec.key[:16]}.o"
        if obj.is_file():
            return TUResult(name, kind, obj, cached=True)
        self.object_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        time_path = self.log_dir / f"{name}.time"
        time_path.unlink(missing_ok=True)
        partial = obj.with_name(f"{obj.name}.{os.getpid()}.partial")
        nvcc = ["nvcc", "-c", *spec.flags, "-o", str(partial), str(spec.source)]
        route = self._route_for(kind)
        argv, environment = fixed_pid.wrap(["/usr/bin/time", "-f", "%e %M", "-o", str(time_path),
                                            *(route.wrap(nvcc) if route else nvcc)], self.shim, name)
        self._partials.add(partial)
        try:
            started = time.monotonic()
            result = self.container.exec(argv, log_path=log_path, environment=environment)
            wall = time.monotonic() - started
            time_text = time_path.read_text(errors="replace") if time_path.is_file() else ""
            fields = time_text.split()
            peak_kb = int(fields[-1]) if len(fields) >= 2 and fields[-1].isdigit() else None
            if result.exit_code != 0 or not partial.is_file():
                return TUResult(name, kind, obj, cached=False, ok=False, wall_s=wall, peak_rss_kb=peak_kb,
                                log_path=log_path,
                                killed_for_memory=killed_for_memory(result.exit_code, result.output, time_text))
            os.replace(partial, obj)  # an interrupted nvcc never leaves a cache hit behind
            return TUResult(name, kind, obj, cached=False, wall_s=wall, peak_rss_kb=peak_kb, log_path=log_path)
        finally:
            partial.unlink(missing_ok=True)
            self._partials.discard(partial)

    # -- the entry ------------------------------------------------------------------------
    def jobs(self) -> list[Job]:
        peaks = self.stats.peaks()
        entry = self.plan.entry
        jobs = [Job(tu.name, estimate(entry, tu.name, tu.family, peaks)[0], tu) for tu in self.plan.kernels]
        jobs += [Job(host.name, estimate(entry, host.name, HOST, peaks)[0], host) for host in self.plan.hosts]
        return jobs

    def write_registry(self) -> None:
        self.registry.parent.mkdir(parents=True, exist_ok=True)
        self.registry.write_text(registry_text(self.plan.kernels))

    def cluster_budget(self) -> Budget:
        """With build servers: nvcc's host compiler named as the ELF sccache can ship, and the
        jobs in flight capped by the cluster's CPUs and memory instead of this machine's."""
        self.route = dataclasses.replace(self.route, host_compiler=dist.host_compiler(self.container))
        status = self.container.exec([str(self.route.binary), "--dist-status"])
        servers, cpus = dist.scheduler_status(status.output)
        largest = max((job.estimate_bytes for job in self.jobs()), default=0)
        budget = dist.cluster_budget(servers, cpus, self.route.cluster, largest, self.jobs_limit)
        log(f"entry {self.plan.name}: compiling on {servers} build server(s), {cpus} CPU(s); budget "
            f"{budget.describe()}; nvcc's host compiler {self.route.host_compiler}")
        return budget

    def compile_all(self, budget: Budget, events: SchedulerEvents) -> list[TUResult]:
        self.write_registry()
        for leftover in stale_partials(self.object_dir):  # of a build that was SIGKILLed
            leftover.unlink(missing_ok=True)
        self.shim = fixed_pid.build_shim(self.container, self.out_dir / "tools")
        if self.route:
            sccache.start_server(self.container, self.route, self.shim)
        if self.route and self.route.cluster:
            budget = self.cluster_budget()
        try:
            outcomes = self.compile_jobs(self.jobs(), budget, events)
        except KeyboardInterrupt:
            self.container.remove()  # ends every nvcc now, instead of waiting minutes for them
            for partial in list(self._partials):
                partial.unlink(missing_ok=True)
            raise
        results = [o.result for o in outcomes if isinstance(o.result, TUResult)]
        # Through sccache GNU time sees only the client's memory: record what compiled directly.
        direct = [result for result in self.killed + results if self._route_for(result.kind) is None]
        if direct:
            self.stats.record(self.plan.entry, direct)
        if self.retries:
            log(f"entry {self.plan.name}: {len(self.retries)} TU(s) killed for memory and compiled again alone: "
                + "; ".join(self.retries))
        lost = next((o.result for o in outcomes if isinstance(o.result, FlashBuildError)), None)
        if lost is not None:  # the engine or the container went away: one error, not one per TU
            raise lost
        for outcome in outcomes:
            if not outcome.ok:
                result = outcome.result
                if isinstance(result, TUResult) and result.killed_for_memory:
                    raise CompileError(
                        f"TU {outcome.job.name} (entry {self.plan.name}) was killed for memory twice, the second "
                        f"time alone after reaching {(result.peak_rss_kb or 0) / 1024**2:.1f} GiB: it needs more "
                        "memory than " + (f"the build's container may use ({limit / GIB:.1f} GiB)"
                                          if (limit := getattr(self.container, "memory_limit", None))
                                          else "this machine had free"),
                        fix="free memory (other builds or programs) and build again, or build on a machine with "
                            f"more memory; the compiler's log: {result.log_path}")
                if isinstance(result, TUResult) and result.log_path:
                    log_file = result.log_path
                    tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
                    raise CompileError(
                        f"TU {outcome.job.name} failed to compile (entry {self.plan.name}); last lines of "
                        f"{log_file}:\n{tail}",
                        fix=f"read the whole log: {log_file}",
                    )
                raise CompileError(f"TU {outcome.job.name} failed: {outcome.result!r}")
        if len(results) != self.plan.tu_count:
            raise CompileError(f"entry {self.plan.name}: the build stopped before every TU was compiled")
        return results

    def compile_jobs(self, jobs: list[Job], budget: Budget, events: SchedulerEvents) -> list[Outcome]:
        """Compile the jobs (payload: a KernelTU, HostTU or TUSpec) under the budget; one killed for
        memory is compiled again alone, and said so."""

        def runner(job: Job) -> tuple[bool, TUResult]:
            tu = job.payload
            spec = tu if isinstance(tu, TUSpec) else self.kernel_spec(tu) if isinstance(tu, KernelTU) \
                else self.host_spec(tu)
            result = dataclasses.replace(self._compile(spec), estimate_kb=job.estimate_bytes // 1024)
            return result.ok, result

        def retry(outcome: Outcome) -> Job | None:
            result = outcome.result
            if not isinstance(result, TUResult):
                return None
            again = retry_alone(outcome.job, result.killed_for_memory, (result.peak_rss_kb or 0) * 1024)
            if again is not None:
                line = (f"{outcome.job.name} (killed at {(result.peak_rss_kb or 0) / 1024**2:.1f} GiB, estimate "
                        f"{outcome.job.estimate_bytes / GIB:.1f} GiB; again alone, estimate "
                        f"{again.estimate_bytes / GIB:.1f} GiB)")
                self.retries.append(line)
                self.killed.append(result)
            return again

        return run_jobs(jobs, runner, budget, events, retry=retry)

    def gpu_test_sources(self) -> list[Path]:
        sources = sorted((self.repo_root / GPU_TEST_DIR).glob("*.cpp"))
        if not sources:
            raise CompileError(f"{GPU_TEST_DIR}/ holds no .cpp file", fix="restore the GPU test from git")
        return sources

    def link(self, results: list[TUResult]) -> EntryBuild:
        lib_dir = self.out_dir / "lib"
        bin_dir = self.out_dir / "bin"
        lib_dir.mkdir(parents=True, exist_ok=True)
        bin_dir.mkdir(parents=True, exist_ok=True)
        library = lib_dir / self.name.real
        objects = [str(r.object_path) for r in sorted(results, key=lambda r: r.name)]
        # cudart and the C++ runtime are linked statically so the library runs on hosts
        # with an older libstdc++ and no CUDA toolkit; only the C API is exported.
        link = ["nvcc", "-shared", *gencode_flags(self.plan.entry.archs), "--cudart=static",
                "-Xcompiler=-static-libstdc++,-static-libgcc",
                f"-Xlinker=-soname,{self.name.soname}",
                f"-Xlinker=--version-script={self.repo_root / EXPORTS_MAP}",
                "-Xlinker=--no-undefined", "-Xlinker=-z,noexecstack",
                "-o", str(library), *objects]
        self._run_checked(link, "link", f"linking {self.name.real}")
        self.name.make_links(lib_dir)
        test_binary = bin_dir / TEST_BINARY
        compat_object = next(r.object_path for r in results if r.name == GLIBC_COMPAT.stem)
        build_test = ["nvcc", "-O2", "-std=c++17", "--cudart=static",
                      f"-I{self.repo_root / 'src/include'}", f"-I{self.repo_root / GPU_TEST_DIR}",
                      "-Xcompiler=-pthread,-static-libstdc++,-static-libgcc",
                      "-Xlinker=-rpath,$ORIGIN/../lib", "-Xlinker=--no-undefined",
                      "-o", str(test_binary), *map(str, self.gpu_test_sources()), str(compat_object),
                      f"-L{lib_dir}", f"-l:{self.name.soname}"]
        self._run_checked(build_test, TEST_BINARY, f"building {TEST_BINARY}")
        return EntryBuild(
            plan=self.plan, image=self.image, name=self.name, library=library,
            test_binary=test_binary, headers=[self.repo_root / h for h in HEADERS],
            kernel_objects={r.name: r.object_path for r in results if r.kind == "kernel"},
            tu_results=results, compile_flags=self.common_flags(),
        )

    def _run_checked(self, argv: list[str], log_name: str, what: str) -> None:
        log = self.log_dir / f"{log_name}.log"
        wrapped, environment = fixed_pid.wrap(argv, self.shim, log_name)
        result = self.container.exec(wrapped, log_path=log, environment=environment)
        if result.exit_code != 0:
            tail = "\n".join(result.output.splitlines()[-LOG_TAIL_LINES:])
            raise CompileError(f"{what} failed (entry {self.plan.name}):\n$ {shlex.join(argv)}\n{tail}",
                               fix=f"read the whole log: {log}")
