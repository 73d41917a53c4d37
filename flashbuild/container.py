"""One class owns a toolchain container's whole lifetime, as a context manager.

The repository is bind-mounted at one fixed path, MOUNT_POINT, whatever folder the clone is
in, so that what nvcc writes into objects (source and include paths) does not depend on where
the clone lives. Callers pass host paths: exec translates every argument (and a log path) that
names something under the repository to its path in the container. Other folders a command
needs (extra_mounts) are mounted read-only at their own paths. Commands run as the calling
user, so everything written under build/ belongs to them.
"""

from __future__ import annotations

import os
import re
import shlex
import uuid
from dataclasses import dataclass
from pathlib import Path

from .errors import EnvironmentProblem, FlashBuildError

MOUNT_POINT = "/flashbuild/src"


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    output: str


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


class ToolchainContainer:
    def __init__(self, client, image: str, repo_root: Path, name_hint: str, extra_mounts: list[Path] | None = None,
                 writable_mounts: list[Path] | None = None, environment: dict[str, str] | None = None,
                 network: str = "none"):
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
        )
        try:
            self._container = self.client.containers.run(**kwargs)
        except DockerException as exc:
            raise FlashBuildError(f"cannot start container from {self.image}: {exc}") from None
        return self

    def __exit__(self, *exc_info) -> None:
        if self._container is not None:
            try:
                self._container.remove(force=True)
            except Exception:  # the build's own error matters more than a failed cleanup
                pass
            self._container = None

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
            code, _ = self._container.exec_run(["sh", "-c", command], workdir=MOUNT_POINT, environment=env)
            output = log_path.read_text(errors="replace") if log_path.exists() else ""
            return ExecResult(code, output)
        code, output = self._container.exec_run(argv, workdir=MOUNT_POINT, environment=env)
        return ExecResult(code, output.decode("utf-8", "replace"))

    def run_tool(self, argv: list[str]) -> tuple[int, str]:
        """The (exit code, output) form checks.py takes its tools in."""
        result = self.exec(argv)
        return result.exit_code, result.output

    def check(self, argv: list[str], environment: dict[str, str] | None = None) -> str:
        result = self.exec(argv, environment=environment)
        if result.exit_code != 0:
            raise FlashBuildError(f"`{shlex.join(argv)}` failed in {self.image}:\n{result.output[-2000:]}")
        return result.output
