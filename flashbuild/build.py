"""The pipeline, in the one direction data flows:
matrix -> plan -> jobs -> objects -> library -> verified artifact."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from . import compile as compile_stage
from . import export, images, sources, verify
from .container import ToolchainContainer, docker_client
from .errors import ConfigError, VerifyError
from .generate import stale_files
from .options import ImageSpec, load_config
from .plan import HOST_TUS, BuildPlan, make_plan
from .schedule import GIB, Budget, SchedulerEvents, make_budget, max_concurrency

console = Console(highlight=False, soft_wrap=True)


@dataclass(frozen=True)
class Paths:
    repo: Path

    @property
    def matrix(self) -> Path:
        return self.repo / "matrix.yaml"

    @property
    def lock(self) -> Path:
        return self.repo / "sources.lock.yaml"

    @property
    def third_party(self) -> Path:
        return self.repo / "third_party"

    @property
    def build(self) -> Path:
        return self.repo / "build"

    @property
    def artifacts(self) -> Path:
        return self.repo / "artifacts"

    @property
    def kernels(self) -> Path:
        return self.repo / "kernels"


def log(message: str) -> None:
    console.print(f"[bold cyan]flashbuild[/] {message}")


def describe_plan(plan: BuildPlan, budget: Budget, recorded_peaks: dict) -> str:
    lines = [f"matrix {plan.matrix.name}: {plan.matrix.description}",
             f"budget: {budget.describe()}"]
    for entry_plan in plan.entries:
        entry = entry_plan.entry
        estimates = []
        lines.append(f"entry {entry.name}: CUDA {entry.cuda}, image {entry.image.name}, archs {', '.join(entry.archs)}, "
                     f"{len(entry_plan.kernels)} kernel TU(s) + {len(HOST_TUS)} host TUs")
        for tu in entry_plan.kernels:
            estimate, origin = entry_plan.estimate_bytes(tu, recorded_peaks)
            estimates.append(estimate)
            lines.append(f"  {tu.name:<40} {estimate / GIB:5.1f} GiB ({origin})")
        lines.append(f"  concurrency: up to {max_concurrency(estimates, budget)} TU(s) at once")
    return "\n".join(lines)


def fetch_sources(paths: Paths, local: dict[str, Path] | None = None, offline: bool = False,
                  only: set[str] | None = None) -> dict:
    """Fetch the pinned sources (all of them, or `only` those a plan needs)."""
    pins = sources.load_lock(paths.lock)
    unknown = set(local or {}) - set(pins)
    if unknown:
        raise ConfigError(f"--local names unknown source(s): {', '.join(sorted(unknown))}",
                          fix=f"use one of: {', '.join(sorted(pins))}")
    unpinned = set(only or ()) - set(pins)
    if unpinned:  # matrix.yaml names a source (an image's ptxas) that the lock does not pin
        raise ConfigError(f"matrix.yaml needs source(s) that sources.lock.yaml does not pin: "
                          f"{', '.join(sorted(unpinned))}",
                          fix=f"pin them in sources.lock.yaml or use one of: {', '.join(sorted(pins))}")
    return {name: sources.fetch(pin, paths.third_party, (local or {}).get(name), offline, log)
            for name, pin in pins.items() if only is None or name in only}


def ensure_toolchain(client, spec: ImageSpec, paths: Paths, fetched: dict | None = None) -> images.ToolchainImage:
    """The toolchain image of `spec`, with the tools it names from pinned sources (taken from
    `fetched` when the caller already has them)."""
    tools = {}
    if spec.ptxas:
        if fetched is None or spec.ptxas not in fetched:
            fetched = fetch_sources(paths, only={spec.ptxas})
        tools["ptxas"] = fetched[spec.ptxas].path("bin") / "ptxas"
    return images.ensure_image(client, spec, paths.repo, paths.build / "logs", log, tools)


def build(repo: Path, matrix_name: str, dry_run: bool = False, jobs: int | None = None,
          reserve_gb: float = 2.0, offline: bool = False, local: dict[str, Path] | None = None) -> list[Path]:
    paths = Paths(repo.resolve())
    config = load_config(paths.matrix)
    plan = make_plan(config.matrix(matrix_name))
    budget = make_budget(int(reserve_gb * GIB), jobs)
    peaks = compile_stage.recorded_peaks(paths.build)
    console.print(describe_plan(plan, budget, peaks))
    if dry_run:
        return []
    stale = stale_files(config.matrices.values(), paths.kernels)
    if stale:
        raise ConfigError(f"kernels/ does not match matrix.yaml: {', '.join(stale[:5])}",
                          fix="run `invoke generate` and commit kernels/")
    started = time.monotonic()
    fetched = fetch_sources(paths, local, offline, only=plan.sources_needed)
    client = docker_client()
    exported = []
    export.clean_stale_staging(paths.artifacts)
    for entry_plan in plan.entries:
        image = ensure_toolchain(client, entry_plan.entry.image, paths, fetched)
        log(f"entry {entry_plan.name}: toolchain {image.tag} ({'built' if image.built else 'cached'})")
        with ToolchainContainer(client, image.tag, paths.repo, entry_plan.name) as container:
            compiler = compile_stage.EntryCompiler(paths.repo, paths.build, plan.matrix.name, entry_plan, image,
                                                   fetched, container)
            results = _compile_with_progress(compiler, budget)
            result = compiler.link(results)
            report = verify_build(container.run_tool, result, paths)
            verify.raise_if_failed(report, "see the FAIL lines above; nothing was exported for this entry")
            console.print(report.render())
            toolchain = {**images.describe(image),
                         **{tool: container.check([tool, "--version"]).strip().splitlines()[-1]
                            for tool in ("nvcc", "ptxas")}}
        manifest = _manifest(plan, result, fetched, toolchain, report, compiler)
        version = export.version_string(result.version)
        folder, tarball = export.export_artifact(paths.artifacts, version, entry_plan.name, result.library,
                                                 result.header, result.test_binary, manifest)
        log(f"exported {folder.relative_to(paths.repo)} and {tarball.relative_to(paths.repo)}")
        exported.append(folder)
    log(f"matrix {plan.matrix.name} done in {time.monotonic() - started:.0f} s")
    return exported


def _compile_with_progress(compiler: compile_stage.EntryCompiler, budget: Budget):
    total = len(compiler.plan.kernels) + len(HOST_TUS)
    running: set[str] = set()
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(f"{compiler.plan.name}", total=total)

        def describe() -> str:
            shown = ", ".join(sorted(running)) or "-"
            return f"{compiler.plan.name} | running {len(running)}: {shown}"

        def started(job):
            running.add(job.name)
            progress.update(task, description=describe())

        def finished(outcome):
            running.discard(outcome.job.name)
            tu = outcome.result
            if hasattr(tu, "cached"):
                note = "cached" if tu.cached else (
                    f"{tu.wall_s:.0f} s, peak {tu.peak_rss_kb / 1024 / 1024:.2f} GiB" if tu.peak_rss_kb else "")
                state = "ok" if outcome.ok else "FAILED"
                progress.console.print(f"  {state:6} {outcome.job.name} {note}")
            progress.update(task, advance=1, description=describe())

        return compiler.compile_all(budget, SchedulerEvents(started=started, finished=finished))


def verify_build(run, result: compile_stage.EntryBuild, paths: Paths) -> verify.Report:
    report = verify.Report(str(result.library.relative_to(paths.repo)))
    archs = tuple(result.plan.entry.archs)
    expect = _expectation(result, paths)
    verify.verify_objects(run, {tu.name: (result.kernel_objects[tu.name], tu.symbol) for tu in result.plan.kernels},
                          archs, report)
    verify.verify_library(run, result.library, expect, report)
    verify.verify_test_binary(run, result.test_binary, expect.soname, report)
    return report


def _expectation(result: compile_stage.EntryBuild, paths: Paths) -> verify.Expectation:
    return verify.Expectation(
        symbols=tuple(tu.symbol for tu in result.plan.kernels),
        exports=verify.exported_api(paths.repo / compile_stage.EXPORTS),
        soname=f"{compile_stage.LIBRARY}.so.{result.version[0]}",
        archs=tuple(result.plan.entry.archs),
    )


def _manifest(plan, result, fetched, toolchain, report, compiler) -> dict:
    stats = compile_stage.recorded_stats(compiler.build_root)
    by_name = {r.name: r for r in result.tu_results}
    tus = []
    for tu in plan_kernels_and_host(result):
        r = by_name.get(tu["name"])
        recorded = stats.get(result.plan.stats_key(tu["name"]), {})
        tus.append({**tu, "cached": bool(r and r.cached),
                    "wall_s": round(r.wall_s, 1) if r and r.wall_s else recorded.get("wall_s"),
                    "peak_rss_kb": (r.peak_rss_kb if r and r.peak_rss_kb else recorded.get("peak_rss_kb"))})
    return {
        "matrix": plan.matrix.name,
        "sources": [{"name": f.pin.name, "version": f.pin.version, "filename": f.pin.filename, "sha256": f.pin.sha256}
                    for f in fetched.values()],
        "toolchain": toolchain,
        "archs": list(result.plan.entry.archs),
        "flags": [f.replace(str(compiler.repo_root), "$REPO") for f in result.compile_flags],
        "translation_units": tus,
        "api": {"soname": f"{compile_stage.LIBRARY}.so.{result.version[0]}",
                "exports": list(verify.exported_api(compiler.repo_root / compile_stage.EXPORTS))},
        "capabilities": [{"family": tu.family, "dtype": tu.dtype, "head_dim": tu.head_dim, "causal": tu.causal}
                         for tu in result.plan.kernels],
        "verify": [{"check": c.name, "ok": c.ok} for c in report.checks],
    }


def plan_kernels_and_host(result) -> list[dict]:
    rows = [{"name": tu.name, "kind": "kernel", "symbol": tu.symbol, "source": str(tu.source)}
            for tu in result.plan.kernels]
    rows += [{"name": tu.name, "kind": "host", "source": str(tu.source)} for tu in HOST_TUS]
    return rows


def verify_path(repo: Path, target: Path) -> verify.Report:
    """`invoke verify PATH`: an artifact folder, or a library inside one (its manifest.json
    says what it must hold)."""
    paths = Paths(repo.resolve())
    target = target.resolve()
    if not target.exists():
        raise ConfigError(f"{target} does not exist", fix="pass an artifact folder or the .so inside one")
    folder = target if target.is_dir() else target.parent.parent
    manifest_path = folder / "manifest.json"
    if not manifest_path.is_file():
        raise ConfigError(f"no manifest.json in {folder}",
                          fix="pass artifacts/<version>/<entry>/ or its lib/libflash_attn_standalone.so.X.Y.Z")
    manifest = json.loads(manifest_path.read_text())
    if target.is_dir():
        candidates = sorted((folder / "lib").glob(f"{compile_stage.LIBRARY}.so.*.*.*"))
        if not candidates:
            raise VerifyError(f"{folder}/lib holds no {compile_stage.LIBRARY}.so.X.Y.Z")
        library = candidates[0]
    else:
        library = target
    expect = verify.Expectation(
        symbols=tuple(tu["symbol"] for tu in manifest["translation_units"] if tu["kind"] == "kernel"),
        exports=tuple(manifest["api"]["exports"]),
        soname=manifest["api"]["soname"],
        archs=tuple(manifest["archs"]),
    )
    run = verify.host_runner()
    report = verify.Report(str(library))
    if run is not None:
        verify.verify_library(run, library, expect, report)
        return report
    config = load_config(paths.matrix)
    built_with = manifest.get("toolchain", {}).get("dockerfile")
    spec = next((s for s in config.images.values() if s.dockerfile == built_with), next(iter(config.images.values())))
    client = docker_client()
    image = ensure_toolchain(client, spec, paths)
    # Mount what is being verified: the repo is always mounted; a library outside it is copied in.
    with ToolchainContainer(client, image.tag, paths.repo, "verify", extra_mounts=[library.parent]) as container:
        verify.verify_library(container.run_tool, library, expect, report)
    return report
