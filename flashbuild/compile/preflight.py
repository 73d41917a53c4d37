"""The dry run's pre-flight: what a build needs, checked without building, downloading,
extracting or pulling anything, with every problem reported, not only the first.

Contract: `run` checks, in the order the build meets them, kernels/ against the generator,
the build's timestamp (SOURCE_DATE_EPOCH), cmake and pkg-config (they check the consumer
packages before export), the signing key (--sign-key: that it signs without a terminal), the
compile route (--sccache settings), each
pinned source the plan needs (extracted, cached and valid, or to be downloaded; a --local file
against its pin; --offline without a usable copy is a problem), the Docker engine, and each
entry's toolchain image (present, or to be built). Each check yields a line, or the
FlashBuildError the build would stop with there. `raise_if_problems` raises one error
listing them all, of the first one's kind (so a dry run exits with the code the build would).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flashbuild.compile import dist, sccache
from flashbuild.release import package_checks, provenance
from flashbuild.sources import upstream as sources
from flashbuild.toolchains import images
from flashbuild.core.build_time import build_time
from flashbuild.core.errors import ConfigError, EnvironmentProblem, FlashBuildError
from flashbuild.compile.kernelgen import expected_files, stale_files
from flashbuild.config.build_plan import BuildPlan


@dataclass(frozen=True)
class Check:
    subject: str
    outcome: str  # what was found, or the problem's message
    problem: FlashBuildError | None = None
    skipped: bool = False  # could not be looked at because of an earlier problem

    @property
    def status(self) -> str:
        return "PROBLEM" if self.problem else "skipped" if self.skipped else "ok"


def kernels_fresh(matrices, kernels: Path) -> str:
    """kernels/ holds exactly what `invoke generate` writes, or a ConfigError."""
    stale = stale_files(matrices, kernels)
    if stale:
        more = f" and {len(stale) - 5} more" if len(stale) > 5 else ""
        raise ConfigError(f"kernels/ does not match matrix.yaml: {', '.join(stale[:5])}{more}",
                          fix="run `invoke generate` and commit kernels/")
    return f"matches matrix.yaml ({len(expected_files(matrices))} files)"


def _check(subject: str, probe) -> Check:
    try:
        return Check(subject, probe())
    except FlashBuildError as problem:
        return Check(subject, problem.message, problem)


def _tools(spec, pins: dict, third_party: Path) -> dict[str, Path] | None:
    """The tools an image's tag hashes, where they are already extracted (else None)."""
    if not spec.ptxas:
        return {}
    pin = pins.get(spec.ptxas)
    ptxas = third_party / pin.extract_dir_name / pin.paths["bin"] / "ptxas" if pin else None
    return {"ptxas": ptxas} if ptxas is not None and ptxas.is_file() else None


def _image(client, spec, paths, pins: dict) -> str:
    from docker.errors import DockerException

    try:
        return images.would_do(client, spec, paths.repo, _tools(spec, pins, paths.third_party))
    except DockerException as exc:  # an engine that answers the ping but fails the lookup
        raise EnvironmentProblem(f"the Docker engine could not look up images ({exc.__class__.__name__}: {exc})",
                                 fix="check the engine (`docker info`) and try again") from None


def run(paths, config, plan: BuildPlan, offline: bool, local: dict[str, Path] | None, use_sccache: bool,
        connect, environ: dict, sign_key: Path | None = None) -> list[Check]:
    """The checks, in the build's order. `connect` returns a Docker client or raises (the
    pipeline's docker_client)."""
    checks = [_check("kernels/", lambda: kernels_fresh(config.matrices.values(), paths.kernels)),
              _check("build time", lambda: f"from {build_time(paths.repo, environ).source}"),
              _check("package checks", lambda: package_checks.require_tools() or "cmake and pkg-config found")]
    if sign_key is not None:
        checks.append(_check("signing key", lambda: provenance.check_sign_key(sign_key)))

    def route():  # where TUs compile and the caches, as the build would set them up
        chosen = sccache.settings(paths.build, environ) if use_sccache else None
        cluster = dist.read_cluster(environ) if use_sccache else None
        return sccache.describe(chosen, paths.build / "objects", cluster)

    checks.append(_check("compile route", route))
    needed = plan.sources_needed | ({sccache.PIN} if use_sccache else set())
    lock: dict = {}

    def select():
        lock.update(sources.load_lock(paths.lock))
        chosen = sources.select(lock, local, needed)
        return f"{', '.join(sorted(chosen))}" + (" (--offline: only the download cache)" if offline else "")

    checks.append(_check("sources needed", select))
    pins = {name: pin for name, pin in lock.items() if name in needed}  # also when a --local was refused
    for name, pin in sorted(pins.items()):
        checks.append(_check(f"source {name} {pin.version}", lambda pin=pin: sources.describe(
            pin, paths.third_party, (local or {}).get(pin.name), offline)))
    client = None

    def engine():
        nonlocal client
        client = connect()
        return "reachable"

    checks.append(_check("Docker engine", engine))
    for spec in dict.fromkeys(entry_plan.entry.image for entry_plan in plan.entries):
        if client is None:
            checks.append(Check(f"image {spec.name}", "not looked up (no Docker engine)", skipped=True))
            continue
        checks.append(_check(f"image {spec.name}", lambda spec=spec: _image(client, spec, paths, pins)))
    return checks


def render(checks: list[Check]) -> str:
    lines = ["pre-flight (nothing was built, downloaded or extracted):"]
    for check in checks:
        lines.append(f"  {check.status:<8} {check.subject}: {check.outcome}")
        if check.problem and check.problem.fix:
            lines.append(f"  {'':<8} fix: {check.problem.fix}")
    return "\n".join(lines)


def raise_if_problems(checks: list[Check]) -> None:
    problems = [check.problem for check in checks if check.problem]
    if len(problems) == 1:
        raise problems[0]
    if problems:
        listed = "\n".join(f"  {i}. {p.kind}: {p.message}" + (f"\n     fix: {p.fix}" if p.fix else "")
                           for i, p in enumerate(problems, 1))
        raise type(problems[0])(f"the dry run found {len(problems)} problems (the exit code is the first one's):\n"
                                f"{listed}")
