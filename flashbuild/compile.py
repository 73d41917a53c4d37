"""Jobs -> objects -> library: compile each TU in its own nvcc process inside the entry's
toolchain container, under the memory-aware scheduler, then link the library and the
test binary.

Objects are cached by a key over everything that determines them (source text, flags,
archs, image, upstream pin, and those of our own headers the TU includes), so a second
build recompiles only what changed. Per-TU wall time and peak RSS (GNU time, which sees
nvcc's children) are kept in build/tu-stats.json and become the estimates of the next build.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from .container import ToolchainContainer
from .errors import CompileError
from .generate import registry_text
from .images import ToolchainImage
from .plan import FAMILY_SOURCES, HOST_TUS, EntryPlan, HostTU, KernelTU
from .schedule import Budget, Job, Outcome, SchedulerEvents, run_jobs
from .sources import FetchedSource

LIBRARY = "libflash_attn_standalone"
STATS_FILE = "tu-stats.json"
TEST_SOURCE = Path("src/test_varlen_inference.cpp")
HEADER = Path("src/include/flash_attn_standalone.h")
EXPORTS = Path("src/exports.map")
STANDINS = Path("src/standins")
# Where a quoted #include of our own code is looked up after the including file's folder
# (the -I order of common_flags and project_flags).
OWN_INCLUDE_ROOTS = (Path("src/include"), STANDINS, Path("src"))
QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
LOG_TAIL_LINES = 40



def read_version(repo_root: Path) -> tuple[int, int, int]:
    text = (repo_root / "VERSION").read_text().strip()
    parts = text.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise CompileError(f"VERSION holds '{text}', not MAJOR.MINOR.PATCH", fix="write e.g. 0.1.0 into VERSION")
    return int(parts[0]), int(parts[1]), int(parts[2])


def recorded_stats(build_root: Path) -> dict:
    """Per-TU wall time and peak RSS of earlier builds, by EntryPlan.stats_key."""
    try:
        return json.loads((build_root / STATS_FILE).read_text())
    except (OSError, ValueError):
        return {}


def recorded_peaks(build_root: Path) -> dict:
    return {k: v["peak_rss_kb"] * 1024 for k, v in recorded_stats(build_root).items() if v.get("peak_rss_kb")}


def gencode_flags(archs) -> list[str]:
    flags = []
    for arch in archs:
        number = arch.removeprefix("sm_")
        flags.append(f"-gencode=arch=compute_{number},code=sm_{number}")
    return flags


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


@dataclass
class EntryBuild:
    """What one matrix entry produced: the inputs export and verify need."""

    plan: EntryPlan
    image: ToolchainImage
    version: tuple[int, int, int]
    library: Path  # the real file, lib/libflash_attn_standalone.so.X.Y.Z
    test_binary: Path
    header: Path
    kernel_objects: dict  # KernelTU.name -> Path
    tu_results: list = field(default_factory=list)
    compile_flags: list = field(default_factory=list)


class EntryCompiler:
    def __init__(self, repo_root: Path, build_root: Path, matrix_name: str, plan: EntryPlan,
                 image: ToolchainImage, sources: dict[str, FetchedSource], container: ToolchainContainer):
        self.repo_root = repo_root.resolve()
        self.plan = plan
        self.image = image
        self.sources = sources
        self.container = container
        self.version = read_version(self.repo_root)
        self.build_root = build_root.resolve()
        # Objects are content-addressed by their key, so entries that share a TU share it.
        self.object_dir = self.build_root / "objects"
        self.log_dir = self.build_root / "logs" / plan.name
        self.out_dir = self.build_root / matrix_name / plan.name
        self.stats_path = self.build_root / STATS_FILE

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

    def upstream_flags(self, source_name: str) -> list[str]:
        """Include paths (and defines) for TUs compiled against one pinned upstream."""
        source = self.sources[source_name]
        if source_name == "flash-attn":
            return [f"-I{source.path('kernels').resolve()}", f"-I{source.path('cutlass').resolve()}"]
        # FlashInfer's SM90 templates need its own CCCL ahead of the toolkit's, and its CUTLASS 4.5.
        # NDEBUG as FlashInfer builds them: without it CUTLASS keeps debug role checks in its
        # pipelines (brkpt), which the FP8 kernel's V-transpose pipeline trips on every launch.
        return [
            *(f"-I{source.path(role).resolve()}" for role in ("cub", "libcudacxx", "thrust", "include")),
            *(arg for role in ("cutlass", "cutlass_util") for arg in ("-isystem", str(source.path(role).resolve()))),
            "-DFLASHINFER_ENABLE_F16",
            "-DFLASHINFER_ENABLE_BF16",
            "-DNDEBUG",
        ]

    def api_flags(self, registry: Path) -> list[str]:
        major, minor, patch = self.version
        return [
            f"-I{registry.parent}",
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

    def _key(self, source: Path, flags: list[str], source_name: str | None, folders, extra: str = "") -> str:
        h = hashlib.sha256()
        pin = self.sources[source_name].pin.sha256 if source_name else ""
        headers = self._headers_digest(source, folders)
        for part in (source.read_text(), json.dumps(flags), self.image.image_id, pin, headers, extra):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    # -- one TU ---------------------------------------------------------------------------
    def _compile(self, name: str, kind: str, source: Path, key: str, flags: list[str]) -> TUResult:
        obj = self.object_dir / f"{name}-{key[:16]}.o"
        if obj.is_file():
            return TUResult(name, kind, obj, cached=True)
        self.object_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        time_path = self.log_dir / f"{name}.time"
        time_path.unlink(missing_ok=True)
        partial = obj.with_suffix(".o.partial")
        argv = ["/usr/bin/time", "-f", "%e %M", "-o", str(time_path),
                "nvcc", "-c", *flags, "-o", str(partial), str(source)]
        started = time.monotonic()
        result = self.container.exec(argv, log_path=log_path)
        wall = time.monotonic() - started
        peak_kb = None
        if time_path.is_file():
            fields = time_path.read_text().split()
            if len(fields) >= 2 and fields[-1].isdigit():
                peak_kb = int(fields[-1])
        if result.exit_code != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            return TUResult(name, kind, obj, cached=False, ok=False, wall_s=wall, peak_rss_kb=peak_kb,
                            log_path=log_path)
        os.replace(partial, obj)  # an interrupted nvcc never leaves a cache hit behind
        return TUResult(name, kind, obj, cached=False, wall_s=wall, peak_rss_kb=peak_kb, log_path=log_path)

    def _kernel_job(self, tu: KernelTU) -> TUResult:
        source = self.repo_root / tu.source
        if not source.is_file():
            raise CompileError(f"{tu.source} is missing", fix="run `invoke generate` to write kernels/")
        upstream = FAMILY_SOURCES[tu.family]
        flags = self.common_flags() + (self.project_flags() if tu.sm90 else []) + self.upstream_flags(upstream)
        folders = [] if tu.sm90 else [STANDINS]
        return self._compile(tu.name, "kernel", source, self._key(source, flags, upstream, folders), flags)

    def _host_job(self, host: HostTU, registry: Path) -> TUResult:
        name, source, upstream = host.name, self.repo_root / host.source, host.upstream
        if upstream is None:
            # Plain C11 without _GNU_SOURCE: see src/glibc_compat.c.
            flags = ["-O2", "-Xcompiler=-fPIC,-std=c11"]
            return self._compile(name, "host", source, self._key(source, flags, None, []), flags)
        flags = self.common_flags() + self.project_flags() + self.upstream_flags(upstream)
        extra = ""
        if name == "flash_api":
            flags += self.api_flags(registry)
            extra = registry.read_text()
        return self._compile(name, "host", source, self._key(source, flags, upstream, [STANDINS], extra), flags)

    # -- the entry ------------------------------------------------------------------------
    def _record(self, results: list[TUResult]) -> None:
        stats = recorded_stats(self.build_root)
        for r in results:
            if not r.cached and r.peak_rss_kb:
                stats[self.plan.stats_key(r.name)] = {"peak_rss_kb": r.peak_rss_kb, "wall_s": round(r.wall_s, 1)}
        self.stats_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.stats_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(stats, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.stats_path)

    def jobs(self, registry: Path) -> list[Job]:
        peaks = recorded_peaks(self.build_root)
        jobs = []
        for tu in self.plan.kernels:
            estimate, _ = self.plan.estimate_bytes(tu, peaks)
            jobs.append(Job(tu.name, estimate, ("kernel", tu)))
        default = int(self.plan.entry.memory_estimates_gb["host"] * 1024**3)
        for host in HOST_TUS:
            jobs.append(Job(host.name, peaks.get(self.plan.stats_key(host.name), default), ("host", (host, registry))))
        return jobs

    def compile_all(self, budget: Budget, events: SchedulerEvents) -> list[TUResult]:
        gen_dir = self.out_dir / "gen"
        gen_dir.mkdir(parents=True, exist_ok=True)
        registry = gen_dir / "kernel_registry.inc"
        registry.write_text(registry_text(self.plan.kernels))

        def runner(job: Job) -> tuple[bool, TUResult]:
            kind, payload = job.payload
            result = self._kernel_job(payload) if kind == "kernel" else self._host_job(*payload)
            return result.ok, result

        outcomes: list[Outcome] = run_jobs(self.jobs(registry), runner, budget, events)
        results = [o.result for o in outcomes if isinstance(o.result, TUResult)]
        self._record(results)
        for outcome in outcomes:
            if not outcome.ok:
                if isinstance(outcome.result, TUResult) and outcome.result.log_path:
                    log = outcome.result.log_path
                    tail = "\n".join(log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
                    raise CompileError(
                        f"TU {outcome.job.name} failed to compile (entry {self.plan.name}); last lines of {log}:\n{tail}",
                        fix=f"read the whole log: {log}",
                    )
                raise CompileError(f"TU {outcome.job.name} failed: {outcome.result!r}")
        if len(results) != len(self.plan.kernels) + len(HOST_TUS):
            raise CompileError(f"entry {self.plan.name}: the build stopped before every TU was compiled")
        return results

    def link(self, results: list[TUResult]) -> EntryBuild:
        major, minor, patch = self.version
        lib_dir = self.out_dir / "lib"
        bin_dir = self.out_dir / "bin"
        lib_dir.mkdir(parents=True, exist_ok=True)
        bin_dir.mkdir(parents=True, exist_ok=True)
        real = f"{LIBRARY}.so.{major}.{minor}.{patch}"
        soname = f"{LIBRARY}.so.{major}"
        library = lib_dir / real
        objects = [str(r.object_path) for r in sorted(results, key=lambda r: r.name)]
        # cudart and the C++ runtime are linked statically so the library runs on hosts
        # with an older libstdc++ and no CUDA toolkit; only the C API is exported.
        link = ["nvcc", "-shared", *gencode_flags(self.plan.entry.archs), "--cudart=static",
                "-Xcompiler=-static-libstdc++,-static-libgcc",
                f"-Xlinker=-soname,{soname}",
                f"-Xlinker=--version-script={self.repo_root / EXPORTS}",
                "-Xlinker=--no-undefined", "-Xlinker=-z,noexecstack",
                "-o", str(library), *objects]
        self._run_checked(link, "link", f"linking {real}")
        for alias, target in ((soname, real), (f"{LIBRARY}.so", soname)):
            path = lib_dir / alias
            if path.is_symlink() or path.exists():
                path.unlink()
            path.symlink_to(target)
        test_binary = bin_dir / "test_varlen_inference"
        compat_object = next(r.object_path for r in results if r.name == "glibc_compat")
        build_test = ["nvcc", "-O2", "-std=c++17", "--cudart=static",
                      f"-I{self.repo_root / 'src/include'}",
                      "-Xcompiler=-pthread,-static-libstdc++,-static-libgcc",
                      "-Xlinker=-rpath,$ORIGIN/../lib", "-Xlinker=--no-undefined",
                      "-o", str(test_binary), str(self.repo_root / TEST_SOURCE), str(compat_object),
                      f"-L{lib_dir}", f"-l:{soname}"]
        self._run_checked(build_test, "test_varlen_inference", "building test_varlen_inference")
        return EntryBuild(
            plan=self.plan, image=self.image, version=self.version, library=library,
            test_binary=test_binary, header=self.repo_root / HEADER,
            kernel_objects={r.name: r.object_path for r in results if r.kind == "kernel"},
            tu_results=results, compile_flags=self.common_flags(),
        )

    def _run_checked(self, argv: list[str], log_name: str, what: str) -> None:
        log = self.log_dir / f"{log_name}.log"
        result = self.container.exec(argv, log_path=log)
        if result.exit_code != 0:
            tail = "\n".join(result.output.splitlines()[-LOG_TAIL_LINES:])
            raise CompileError(f"{what} failed (entry {self.plan.name}):\n$ {shlex.join(argv)}\n{tail}",
                               fix=f"read the whole log: {log}")
