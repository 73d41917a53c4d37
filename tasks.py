"""Tasks: definitions and arguments only; the work is in the flashbuild package."""

import functools
from pathlib import Path

from invoke import Exit, task

REPO = Path(__file__).resolve().parent


def reports_errors(function):
    """Turn the driver's errors into a message and their exit code, never a traceback."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        from flashbuild.errors import FlashBuildError

        try:
            return function(*args, **kwargs)
        except FlashBuildError as error:
            raise Exit(error.report(), code=error.exit_code) from None
        except KeyboardInterrupt:
            raise Exit("interrupted; no artifact was exported for the unfinished entry", code=130) from None

    return wrapper


def _local_files(values):
    from flashbuild.errors import ConfigError

    files = {}
    for value in values or []:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--local '{value}' is not NAME=PATH", fix="e.g. --local flash-attn=/tmp/flash_attn-2.8.3.tar.gz")
        files[name] = Path(path)
    return files


@task
@reports_errors
def setup(c):
    """Install and start what the pipeline needs on this host (Docker engine, mmdebstrap)."""
    from flashbuild.host import setup as setup_host

    setup_host()


@task(iterable=["local"], help={"offline": "use only the download cache", "local": "NAME=PATH of a local archive"})
@reports_errors
def fetch(c, offline=False, local=None):
    """Fetch the pinned upstream sources into third_party/."""
    from flashbuild.build import Paths, fetch_sources

    for name, fetched in fetch_sources(Paths(REPO), _local_files(local), offline).items():
        print(f"{name} {fetched.pin.version}: {fetched.root}")


@task
@reports_errors
def image(c):
    """Build (or reuse) the toolchain images matrix.yaml names (fetching the tools they pin)."""
    from flashbuild.build import Paths, ensure_toolchain
    from flashbuild.container import docker_client
    from flashbuild.options import load_config

    client = docker_client()
    for spec in load_config(REPO / "matrix.yaml").images.values():
        built = ensure_toolchain(client, spec, Paths(REPO))
        print(f"{spec.name}: {built.tag} ({'built' if built.built else 'up to date'})")


@task
@reports_errors
def generate(c):
    """Write kernels/: one .cu per template instantiation any matrix builds."""
    from flashbuild.generate import write_kernels
    from flashbuild.options import load_config

    config = load_config(REPO / "matrix.yaml")
    written, removed = write_kernels(config.matrices.values(), REPO / "kernels")
    print(f"kernels/: {len(written)} written, {len(removed)} removed")


@task(
    iterable=["local"],
    help={
        "matrix": "which matrix of matrix.yaml to build (smoke, minimal, full)",
        "dry_run": "print the plan and build nothing",
        "jobs": "at most this many TUs at once (default: CPU count, within the memory budget)",
        "reserve_gb": "memory kept free for the rest of the machine",
        "offline": "use only the download cache for sources",
        "local": "NAME=PATH of a local source archive",
    },
)
@reports_errors
def build(c, matrix="minimal", dry_run=False, jobs=None, reserve_gb=2.0, offline=False, local=None):
    """Build, verify and export the library for every entry of a matrix."""
    from flashbuild.build import build as run_build

    run_build(REPO, matrix, dry_run=dry_run, jobs=int(jobs) if jobs else None, reserve_gb=float(reserve_gb),
              offline=offline, local=_local_files(local))


@task(help={"path": "artifact folder artifacts/<version>/<entry>/ or the .so inside it"})
@reports_errors
def verify(c, path):
    """Check a built library: instantiations, exports, archs, SONAME, NEEDED."""
    from flashbuild.build import verify_path
    from flashbuild.verify import raise_if_failed

    report = verify_path(REPO, Path(path))
    raise_if_failed(report, "this library does not hold what its manifest.json promises; rebuild it with `invoke build`")
    print(report.render())


@task(help={"k": "only tests matching this pytest -k expression"})
def test(c, k=None):
    """Run the test suite (the end-to-end test builds the smoke matrix in the container)."""
    selection = f" -k {k!r}" if k else ""
    c.run(f"python3 -m pytest -q tests{selection}", pty=False)
