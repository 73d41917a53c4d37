"""The pipeline, in the one direction data flows:
matrix -> plan -> jobs -> objects -> library -> verified artifact.

`build` runs it for every entry of a matrix, writing each tarball's provenance beside it, one
build per clone at a time;
`verify_artifact` checks an exported library against its manifest, as the build did before
exporting it, and the consumer packages; given a tarball, it first checks what lies beside it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path

from flashbuild import backends
from flashbuild.compile import dist, predict, preflight, sccache
from flashbuild.release import artifact_verify, checks, export, package_checks, packages, provenance, release_checks
from flashbuild.sources import upstream as sources
from flashbuild.toolchains import images
from flashbuild.compile.compiler import EntryBuild, EntryCompiler
from flashbuild.core.console import console, log
from flashbuild.toolchains.container import ToolchainContainer, docker_client
from flashbuild.core.build_time import build_time
from flashbuild.core.errors import ConfigError, EnvironmentProblem
from flashbuild.release.manifest import entry_manifest, expectation, with_report
from flashbuild.config.memory import GIB, RESERVE_GB, Stats, estimate, peaks_of
from flashbuild.config.options import ImageSpec, load_config
from flashbuild.config.build_plan import BuildPlan, make_plan, tu_groups
from flashbuild.compile.progress import compile_progress
from flashbuild.compile.jobs import Budget, make_budget, max_concurrency


class Paths:
    """Where the pipeline reads and writes, under one repository."""

    def __init__(self, repo: Path):
        self.repo = repo
        self.matrix = repo / "matrix.yaml"
        self.lock = repo / "sources.lock.yaml"
        self.third_party = repo / "third_party"
        self.build = repo / "build"
        self.artifacts = repo / "artifacts"
        self.kernels = repo / "kernels"


def describe_plan(plan: BuildPlan, budget: Budget, recorded: dict, with_prediction: bool = False,
                  reference: dict | None = None) -> str:
    """The plan as the build prints it, from `recorded` (tu-stats.json's contents); with
    with_prediction (the dry run) also the predicted compile time here and on build servers, and
    the cost by family (`reference`: matrix.yaml's compile_time_estimates_s)."""
    recorded_peaks = peaks_of(recorded)
    lines = [f"matrix {plan.matrix.name}: {plan.matrix.description}",
             f"budget: {budget.describe()}"]
    if warning := budget.warning():
        lines.append(f"warning: {warning}")
    for entry_plan in plan.entries:
        entry = entry_plan.entry
        estimates = []
        lines.append(f"entry {entry.name}: CUDA {entry.cuda}, image {entry.image.name}, archs {', '.join(entry.archs)}, "
                     f"{len(entry_plan.kernels)} kernel TU(s) + {len(entry_plan.hosts)} host TUs")
        for tu in entry_plan.kernels:
            size, origin = estimate(entry, tu.name, tu.family, recorded_peaks)
            estimates.append(size)
            lines.append(f"  {tu.name:<40} {size / GIB:5.1f} GiB ({origin})")
        lines.append(f"  concurrency: up to {max_concurrency(estimates, budget)} TU(s) at once")
        if with_prediction:
            lines += predict.describe(entry_plan, recorded, budget, reference)
    return "\n".join(lines)


def fetch_sources(paths: Paths, local: dict[str, Path] | None = None, offline: bool = False,
                  only: set[str] | None = None) -> dict:
    """Fetch the pinned sources (all of them, or `only` those a plan needs)."""
    pins = sources.select(sources.load_lock(paths.lock), local, only)
    return {name: sources.fetch(pin, paths.third_party, (local or {}).get(name), offline, log)
            for name, pin in pins.items()}


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
          reserve_gb: float = RESERVE_GB, offline: bool = False, local: dict[str, Path] | None = None,
          use_sccache: bool = False, backend: str = "container", sign_key: Path | None = None) -> list[Path]:
    paths = Paths(repo.resolve())
    config = load_config(paths.matrix)
    # The engine and the image are looked up when used (tests stand in for docker_client).
    runs_on = backends.select(backend, use_sccache, lambda: docker_client(),
                              lambda *args: ensure_toolchain(*args))
    plan = runs_on.plan(make_plan(config.matrix(matrix_name), paths.repo))
    budget = make_budget(int(reserve_gb * GIB), jobs)
    console.print(describe_plan(plan, budget, Stats(paths.build).read(), with_prediction=dry_run,
                                reference=config.compile_time_estimates))
    if dry_run:  # everything the build would need, every problem found
        runs_on.dry_run(paths, config, plan, offline, local, use_sccache, sign_key)
        return []
    with one_build_per_clone(paths):
        return _build(paths, config, plan, budget, runs_on, offline, local, use_sccache, jobs, sign_key)


@contextlib.contextmanager
def one_build_per_clone(paths: Paths):
    """An exclusive lock on the clone's build/ folder for a whole build (not a dry run): a second
    `invoke build` in the same clone stops at once instead of compiling everything again beside
    the first, each budgeting the whole machine's memory. The lock is the folder's own (no lock
    file), released when the process ends however it ends."""
    paths.build.mkdir(parents=True, exist_ok=True)
    handle = os.open(paths.build, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EnvironmentProblem(
                f"another `invoke build` is running in this clone ({paths.repo}): two builds would share "
                "build/ and each plan its compiles for the whole machine's memory",
                fix="wait for it to finish (or stop it), or build in another clone") from None
        yield
    finally:
        os.close(handle)  # releases the lock


def _build(paths: Paths, config, plan: BuildPlan, budget, runs_on: backends.Backend, offline: bool, local,
           use_sccache: bool, jobs: int | None, sign_key: Path | None) -> list[Path]:
    """The build proper (pipeline.build's contract), under the clone's lock."""
    cache_settings = sccache.settings(paths.build) if use_sccache else None
    cluster = dist.read_cluster(dict(os.environ)) if use_sccache else None
    preflight.kernels_fresh(config.matrices.values(), paths.kernels)
    started = time.monotonic()
    when = build_time(paths.repo)  # a bad SOURCE_DATE_EPOCH fails before any work
    package_checks.require_tools()  # the packages are checked before export: no tool, no work
    if sign_key is not None:
        provenance.check_sign_key(sign_key)  # a key that cannot sign fails now, not after the compile
    git = provenance.git_state(paths.repo)  # as the build starts, before it writes anything
    runs_on.start(paths)  # before the downloads: no engine should cost no fetch
    needed = plan.sources_needed | ({sccache.PIN} if use_sccache else set())
    fetched = fetch_sources(paths, local, offline, only=needed)
    route = sccache.make_route(fetched, paths.build, cache_settings, cluster) if use_sccache else None
    if route:
        log(f"compiling through {sccache.cache_name(route.environment)}"
            + (f" and the sccache-dist cluster of {cluster.scheduler_url}" if cluster else ""))
    exported = []
    export.clean_stale_staging(paths.artifacts)
    for entry_plan in plan.entries:
        image = runs_on.toolchain(entry_plan.entry.image, paths, fetched)
        log(f"entry {entry_plan.name}: toolchain {runs_on.describe(image)}")
        compiler = EntryCompiler(paths.repo, paths.build, plan.matrix.name, entry_plan, image, fetched, None)
        compiler.route = route
        compiler.jobs_limit = jobs
        artifact_key = packages.keyed(compiler.artifact_key(), compiler.name)
        version = compiler.name.version_string
        current = export.up_to_date(paths.artifacts, version, entry_plan.name, artifact_key)
        tarball = paths.artifacts / version / export.tarball_name(version, entry_plan.name)
        if current is not None and provenance.is_recorded(tarball, signed=sign_key is not None):
            log(f"entry {entry_plan.name}: {current.relative_to(paths.repo)} is up to date (same inputs); left alone")
            exported.append(current)
            continue
        with runs_on.runner(image, paths, entry_plan.name, route, cluster) as container:
            compiler.container = container
            with compile_progress(entry_plan.name, entry_plan.tu_count) as events:
                results = compiler.compile_all(budget, events)
            groups = tu_groups(entry_plan)
            compiled = [predict.TUCost(groups[r.name], r.wall_s, (r.peak_rss_kb or 0) * 1024, True)
                        for r in results if not r.cached and r.wall_s is not None]
            if compiled:
                for line in predict.cost_lines(f"entry {entry_plan.name}: cost by family of this build's compiles "
                                               "(cached objects cost nothing)", compiled):
                    log(line.strip())
            if route:
                for line in sccache.stats_lines(container, compiler.route):
                    log(line)
            result = compiler.link(results)
            toolchain = {**runs_on.record(image),
                         **{tool: container.check([tool, "--version"]).strip().splitlines()[-1]
                            for tool in ("nvcc", "ptxas")}}
            manifest = {**entry_manifest(plan.matrix.name, result, fetched, toolchain, paths.repo),
                        "artifact_key": artifact_key}
            report = verify_build(container.run_tool, result, manifest, paths)
            package_checks.verify_built(result.library, result.headers, report)
            checks.raise_if_failed(report, "see the FAIL lines above; nothing was exported for this entry")
            console.print(report.render())
        manifest = with_report(manifest, report)
        beside = provenance.beside_files(matrix=plan.matrix.name, entry=entry_plan.entry, manifest=manifest,
                                         repo=paths.repo, git=git, command=provenance.command_line(
                                             plan.matrix.name, use_sccache, runs_on.name),
                                         build_time={"epoch": when.epoch, "source": when.source}, sign_key=sign_key)
        folder, tarball = export.export_artifact(paths.artifacts, entry_plan.name, result.library, result.headers,
                                                 result.test_binary, manifest, when, beside)
        log(f"exported {folder.relative_to(paths.repo)} and {tarball.relative_to(paths.repo)}, with its provenance"
            + (f" signed by {sign_key}" if sign_key else ""))
        exported.append(folder)
    log(f"matrix {plan.matrix.name} done in {time.monotonic() - started:.0f} s")
    return exported


def verify_build(run, result: EntryBuild, manifest: dict, paths: Paths) -> checks.Report:
    """Each kernel object, then the library and the test binary, against the manifest."""
    report = checks.Report(str(result.library.relative_to(paths.repo)))
    expect = expectation(manifest)
    kernels = [tu for tu in manifest["translation_units"] if tu["kind"] == "kernel"]
    checks.verify_objects(run, {tu["name"]: (result.kernel_objects[tu["name"]], tu["symbol"], tu.get("kernels"))
                                for tu in kernels}, expect.archs, report)
    checks.verify_library(run, result.library, expect, report)
    checks.verify_test_binary(run, result.test_binary, expect.soname, report)
    return report


def verify_artifact(repo: Path, target: Path, allowed_signers: Path | None = None) -> checks.Report:
    """`invoke verify PATH`: an artifact folder, a library inside one (its manifest.json says
    what it must hold), or an exported tarball (its .sha256, provenance and signature, then the
    folder's checks on a temporary unpacked copy): artifact_verify's stages, the library's
    checks in the toolchain container where the host lacks their tools."""
    paths = Paths(repo.resolve())
    target = target.resolve()
    if not target.exists():
        raise ConfigError(f"{target} does not exist", fix="pass an artifact folder, the .so inside one, or its tarball")
    artifact_verify.check_allowed_signers(allowed_signers)

    def library_checks(library: Path, expect, manifest: dict, report: checks.Report) -> None:
        _verify_library(paths, library, expect, manifest, report)

    if release_checks.is_tarball(target):
        return artifact_verify.verify_tarball(target, allowed_signers, library_checks)
    if allowed_signers is not None:
        raise ConfigError("--allowed-signers checks a tarball's signature; this is not a tarball",
                          fix="pass the .tar.gz beside the folder, or leave --allowed-signers out")
    folder = target if target.is_dir() else target.parent.parent
    report = checks.Report(str(target))
    artifact_verify.verify_folder(folder, target, report, library_checks)
    return report


def _verify_library(paths: Paths, library: Path, expect, manifest: dict, report: checks.Report) -> None:
    run = checks.host_runner()
    if run is not None:
        checks.verify_library(run, library, expect, report)
        return
    config = load_config(paths.matrix)
    built_with = manifest.get("toolchain", {}).get("dockerfile")
    spec = next((s for s in config.images.values() if s.dockerfile == built_with), next(iter(config.images.values())))
    client = docker_client()
    image = ensure_toolchain(client, spec, paths)
    # Mount what is being verified: the repo is always mounted; a library outside it is copied in.
    with ToolchainContainer(client, image.tag, paths.repo, "verify", extra_mounts=[library.parent]) as container:
        checks.verify_library(container.run_tool, library, expect, report)
