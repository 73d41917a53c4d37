"""One class owns a toolchain container's whole lifetime, as a context manager.

The repository is bind-mounted at one fixed path, MOUNT_POINT, whatever folder the clone is
in, so that what nvcc writes into objects (source and include paths) does not depend on where
the clone lives. Callers pass host paths: exec translates every argument (and a log path) that
names something under the repository to its path in the container. Other folders a command
needs (extra_mounts) are mounted read-only at their own paths. Commands run as the calling
user, so everything written under build/ belongs to them.

Every container carries labels naming its owner (`owner_labels`: this clone, this host, the
owning process and its start time), so that a later build or `invoke setup` can find and
remove the orphans of this clone whose process is gone (`remove_orphans`), and never a
container of another live build on a shared engine. A docker call that fails because the
engine or the container went away mid-build becomes one EngineLost error saying which.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from flashbuild.core.errors import EngineLost, EnvironmentProblem, FlashBuildError
from flashbuild.core.interrupts import deferred
from flashbuild.core.processes import process_start

MOUNT_POINT = "/flashbuild/src"
# Labels of every container a build starts; a sweep selects this clone's by the first three.
LABEL, CLONE_LABEL, HOST_LABEL = "flashbuild", "flashbuild.clone", "flashbuild.host"
PID_LABEL, START_LABEL = "flashbuild.pid", "flashbuild.pid-start"


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    output: str


class CommandRunner:
    """What the build asks of wherever it compiles (ToolchainContainer, or host_toolchain's
    HostToolchain): `exec(argv, log_path, environment) -> ExecResult` and an `image` that error
    messages name; run_tool and check follow from them."""

    image: str

    def exec(self, argv: list[str], log_path: Path | None = None,
             environment: dict[str, str] | None = None) -> ExecResult:
        raise NotImplementedError

    def run_tool(self, argv: list[str]) -> tuple[int, str]:
        """The (exit code, output) form checks.py takes its tools in."""
        result = self.exec(argv)
        return result.exit_code, result.output

    def check(self, argv: list[str], environment: dict[str, str] | None = None) -> str:
        result = self.exec(argv, environment=environment)
        if result.exit_code != 0:
            raise FlashBuildError(f"`{shlex.join(map(str, argv))}` failed in {self.image}:\n{result.output[-2000:]}")
        return result.output


def owner_labels(repo_root: Path, pid: int | None = None) -> dict[str, str]:
    """The labels that name who started a container: this clone, this host, this process."""
    pid = os.getpid() if pid is None else pid
    return {LABEL: "1", CLONE_LABEL: str(repo_root.resolve()), HOST_LABEL: socket.gethostname(),
            PID_LABEL: str(pid), START_LABEL: process_start(pid) or ""}


def is_orphan(labels: dict, repo_root: Path, host: str, started: Callable[[int], str | None]) -> bool:
    """Whether a container with these labels belongs to a build of this clone on this host whose
    process is gone (`started`: process_start). Another clone's, another host's (its pids mean
    nothing here) and a live build's containers are never orphans of ours."""
    if labels.get(CLONE_LABEL) != str(repo_root.resolve()) or labels.get(HOST_LABEL) != host:
        return False
    pid = labels.get(PID_LABEL, "")
    if not pid.isdigit():
        return False  # not labelled by this driver
    return started(int(pid)) != labels.get(START_LABEL)


def remove_orphans(client, repo_root: Path) -> list[str]:
    """Remove this clone's containers whose build process is gone (interrupted by SIGKILL, or a
    cleanup cut short by a second signal); returns their names."""
    host = socket.gethostname()
    filters = {"label": [f"{LABEL}=1", f"{CLONE_LABEL}={repo_root.resolve()}", f"{HOST_LABEL}={host}"]}
    removed = []
    for container in client.containers.list(all=True, filters=filters):
        if is_orphan(container.labels, repo_root, host, process_start):
            container.remove(force=True)
            removed.append(container.name)
    return removed


def sweep_orphans(client, repo_root: Path, log) -> None:
    """remove_orphans, each said; a sweep that fails is a note, not a failed build."""
    from docker.errors import DockerException

    try:
        removed = remove_orphans(client, repo_root)
    except (DockerException, OSError) as exc:
        log(f"note: could not look for containers left by earlier builds of this clone ({exc.__class__.__name__})")
        return
    for name in removed:
        log(f"removed container {name}: left by an earlier build of this clone whose process is gone")


def docker_client():
    """A connected Docker SDK client, or an error saying how to get an engine running."""
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(timeout=600)
        client.ping()
        return client
    except DockerException as exc:
        raise EnvironmentProblem(
            f"no Docker engine is reachable ({exc.__class__.__name__})",
            fix="run `invoke setup` (as root on Debian it installs and starts one), "
            "or start dockerd yourself and check DOCKER_HOST",
        ) from None


class ToolchainContainer(CommandRunner):
    # How long a command SIGKILLed (exit 137) waits for the engine to tell whether its container
    # went with it: `docker rm -f` ends the commands before the container's state says so.
    LOSS_WAIT_S = 3.0

    def __init__(self, client, image: str, repo_root: Path, name_hint: str, extra_mounts: list[Path] | None = None,
                 writable_mounts: list[Path] | None = None, environment: dict[str, str] | None = None,
                 network: str = "none", memory_limit: int | None = None):
        self.client = client
        self.image = image
        self.repo_root = repo_root.resolve()
        self.name = f"flashbuild-{name_hint}-{uuid.uuid4().hex[:8]}"
        self.extra_mounts = self._outside_clone(extra_mounts)
        # Folders outside the clone the build writes (a shared compiler cache), at their own path.
        self.writable_mounts = self._outside_clone(writable_mounts)
        # Every command's environment besides HOME and TMPDIR (host paths, translated).
        self.environment = {name: self.inside(value) for name, value in (environment or {}).items()}
        # "none" unless the build names a remote cache ("host": sccache reaches it as the host would).
        self.network = network
        # Bytes all the container's processes may use together; over it, the kernel kills one of
        # ours (never another process of the host) and the compiler retries that TU alone.
        self.memory_limit = memory_limit
        self.labels = owner_labels(self.repo_root)
        self._container = None

    def __enter__(self) -> "ToolchainContainer":
        from docker.errors import DockerException

        kwargs = dict(
            image=self.image,
            command=["sleep", "infinity"],
            name=self.name,
            detach=True,
            init=True,
            network_mode=self.network,  # compiling needs none; nothing may leak in or out
            volumes={str(self.repo_root): {"bind": MOUNT_POINT, "mode": "rw"},
                     **{str(p): {"bind": str(p), "mode": "ro"} for p in self.extra_mounts},
                     **{str(p): {"bind": str(p), "mode": "rw"} for p in self.writable_mounts}},
            working_dir=MOUNT_POINT,
            environment={"HOME": "/tmp", "TMPDIR": "/tmp", **self.environment},
            user=f"{os.getuid()}:{os.getgid()}",
            labels=self.labels,
        )
        if self.memory_limit:
            kwargs.update(mem_limit=self.memory_limit, memswap_limit=self.memory_limit)  # and no swap beyond
        try:
            with deferred():  # a signal between starting it and keeping its handle would orphan it
                self._container = self.client.containers.run(**kwargs)
        except DockerException as exc:
            self._remove_by_name()  # created, maybe, but not started
            raise FlashBuildError(f"cannot start container from {self.image}: {exc}") from None
        except KeyboardInterrupt:  # held back until it started: __exit__ will not run for it
            self.remove()
            raise
        return self

    def _remove_by_name(self) -> None:
        try:
            self._container = self.client.containers.get(self.name)
        except Exception:
            return
        self.remove()

    def __exit__(self, *exc_info) -> None:
        self.remove()

    def remove(self) -> None:
        """Remove the container now, which ends every command running in it (an interrupted
        build's nvcc processes with it). Idempotent."""
        container, self._container = self._container, None
        if container is not None:
            try:
                container.remove(force=True)
            except Exception:  # the build's own error matters more than a failed cleanup
                pass

    def _lost(self, exc: BaseException | None) -> EngineLost:
        """The error for a docker call that failed (exc) or a command that died with its
        container: which of the engine or the container went away, and what to do."""
        what = f" ({exc.__class__.__name__})" if exc else ""
        try:
            self.client.ping()
        except Exception:
            return EngineLost(f"the Docker engine stopped answering during the build{what}",
                              fix="start it again (`invoke setup`, or `sudo systemctl start docker`) and rerun "
                                  "the build; objects compiled so far are cached")
        return EngineLost(f"the build's container {self.name} was removed or stopped from outside the build "
                          f"(docker rm/kill/stop, or an engine restart){what}",
                          fix="rerun the build (objects compiled so far are cached); keep cleanup scripts off "
                              f"containers labelled {LABEL}=1 while a build runs")

    def _gone(self, wait_s: float = 0.0) -> bool:
        """Whether the container no longer runs (asked after a command failed), waiting up to
        wait_s for the engine to say so."""
        from docker.errors import DockerException

        deadline = time.monotonic() + wait_s
        while True:
            container = self._container
            if container is None:
                return True
            try:
                container.reload()
            except (DockerException, OSError):
                return True
            if container.status != "running":
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)

    def _exec_run(self, argv: list[str], environment) -> tuple[int, bytes]:
        """exec_run, with a lost engine or container turned into EngineLost."""
        from docker.errors import DockerException

        container = self._container
        if container is None:
            raise self._lost(None)
        try:  # requests' connection errors are OSErrors, not DockerExceptions
            code, output = container.exec_run(argv, workdir=MOUNT_POINT, environment=environment)
        except (DockerException, OSError) as exc:
            raise self._lost(exc) from None
        # A command that failed because its container went (SIGKILLed with it: 137), not for memory.
        if code is None or code != 0 and self._gone(self.LOSS_WAIT_S if code == 137 else 0.0):
            raise self._lost(None)
        return code, output

    def _outside_clone(self, paths: list[Path] | None) -> list[Path]:
        """The folders of `paths` that the clone's own mount does not already cover."""
        return [p.resolve() for p in paths or [] if not p.resolve().is_relative_to(self.repo_root)]

    def inside(self, text: str) -> str:
        """text with the repository's host path replaced by its path in the container (in
        flags too, e.g. -I/host/clone/src)."""
        # Only the whole path: a sibling such as /tmp/clone-work (beside /tmp/clone) stays as it is.
        root = re.escape(str(self.repo_root))
        return re.sub(rf"{root}(?=/|$|[^\w.-])", MOUNT_POINT, text)

    def exec(self, argv: list[str], log_path: Path | None = None,
             environment: dict[str, str] | None = None) -> ExecResult:
        """Run argv (host paths) inside the container, with `environment` (host paths too) added
        to the container's. With log_path, output goes to that file (so it survives a failure
        and can be shown later) and is also returned."""
        argv = [self.inside(str(arg)) for arg in argv]
        env = {name: self.inside(value) for name, value in (environment or {}).items()} or None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            command = f"{shlex.join(argv)} > {shlex.quote(self.inside(str(log_path)))} 2>&1"
            code, _ = self._exec_run(["sh", "-c", command], env)
            output = log_path.read_text(errors="replace") if log_path.exists() else ""
            return ExecResult(code, output)
        code, output = self._exec_run(argv, env)
        return ExecResult(code, output.decode("utf-8", "replace"))

