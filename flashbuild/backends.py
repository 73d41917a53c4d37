"""Where a build's commands run (`--backend`): one interface, two backends. `container` (the
default) runs every command of an entry in a container of the entry's toolchain image
(images.py, container.py); `host` runs them with this machine's CUDA toolkit
(host_toolchain.py), the entries renamed after it. pipeline.build asks its backend at each
stage (the plan, the dry run, the start, each entry's toolchain and runner, the manifest's
record of it) and never which backend it has.

The container backend takes what it needs of the pipeline as callables (the engine, the
toolchain image, the dry run's checks), so that this module sits below pipeline.py.
"""

from __future__ import annotations

import os
from typing import Callable, Protocol

from flashbuild.compile import preflight
from flashbuild.toolchains import host_toolchain, images
from flashbuild.core.console import console, log
from flashbuild.toolchains.container import CommandRunner, ToolchainContainer, sweep_orphans
from flashbuild.config.options import ImageSpec
from flashbuild.config.build_plan import BuildPlan


class Backend(Protocol):
    name: str

    def plan(self, plan: BuildPlan) -> BuildPlan:
        """The plan as this backend builds it (the host renames entries after its toolkit)."""

    def dry_run(self, paths, config, plan: BuildPlan, offline: bool, local, use_sccache: bool, sign_key) -> None:
        """Prints what the build would need and raises on the first problem set found."""

    def start(self, paths) -> None:
        """Before any download or compile: what must be reachable (the container engine)."""

    def toolchain(self, spec: ImageSpec, paths, fetched: dict) -> images.ToolchainImage:
        """The toolchain an entry compiles with, which object keys name."""

    def describe(self, image: images.ToolchainImage) -> str:
        """The toolchain as the build log names it."""

    def runner(self, image: images.ToolchainImage, paths, entry_name: str, route, cluster) -> CommandRunner:
        """Runs an entry's commands (a context manager)."""

    def record(self, image: images.ToolchainImage) -> dict:
        """manifest.json's toolchain: which backend, which toolkit or image."""


class ContainerBackend:
    name = "container"

    def __init__(self, connect: Callable[[], object], ensure_image: Callable):
        self._connect = connect  # the pipeline's docker_client
        self._ensure_image = ensure_image  # the pipeline's ensure_toolchain
        self._client = None

    def plan(self, plan: BuildPlan) -> BuildPlan:
        return plan

    def dry_run(self, paths, config, plan, offline, local, use_sccache, sign_key) -> None:
        found = preflight.run(paths, config, plan, offline, local, use_sccache, self._connect, dict(os.environ),
                              sign_key)
        console.print(preflight.render(found), markup=False)
        preflight.raise_if_problems(found)

    def start(self, paths) -> None:  # before the downloads: no engine should cost no fetch
        self._client = self._connect()
        sweep_orphans(self._client, paths.repo, log)

    def toolchain(self, spec, paths, fetched):
        return self._ensure_image(self._client, spec, paths, fetched)

    def describe(self, image) -> str:
        return f"{image.tag} ({'built' if image.built else 'cached'})"

    def runner(self, image, paths, entry_name, route, cluster):
        shared = [route.cache_dir] if route else []
        config = [cluster.config_file.parent] if cluster else []  # sccache's client configuration, read-only
        return ToolchainContainer(self._client, image.tag, paths.repo, entry_name, extra_mounts=config,
                                  writable_mounts=shared, environment=route.environment if route else None,
                                  network=route.network if route else "none")

    def record(self, image) -> dict:
        return {"backend": "container", **images.describe(image)}


class HostBackend:
    name = "host"

    def __init__(self):
        self.toolkit = host_toolchain.discover()

    def plan(self, plan: BuildPlan) -> BuildPlan:
        planned = host_toolchain.host_plan(plan, self.toolkit)
        console.print(self.toolkit.describe())
        return planned

    def dry_run(self, paths, config, plan, offline, local, use_sccache, sign_key) -> None:
        console.print(self.toolkit.describe_compiles(paths.build / "objects"))  # no engine or image to check
        preflight.kernels_fresh(config.matrices.values(), paths.kernels)

    def start(self, paths) -> None:
        pass

    def toolchain(self, spec, paths, fetched):
        return self.toolkit.image(spec, paths.repo)

    def describe(self, image) -> str:
        return image.tag

    def runner(self, image, paths, entry_name, route, cluster):
        return host_toolchain.HostToolchain(self.toolkit, paths.repo, paths.build)

    def record(self, image) -> dict:
        return self.toolkit.record()


def select(name: str, use_sccache: bool, connect: Callable[[], object], ensure_image: Callable) -> Backend:
    """The backend `--backend name` asks for, or a ConfigError naming the choices."""
    host_toolchain.check_backend(name, use_sccache)
    return HostBackend() if name == "host" else ContainerBackend(connect, ensure_image)
