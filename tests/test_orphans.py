"""On the shared engine: the sweep removes the containers of this clone whose build process is
gone, and leaves a live build's and another clone's alone. Containers that only sleep; needs a
Docker engine (`invoke setup`)."""

import subprocess

import pytest

from flashbuild.toolchains.container import docker_client, owner_labels, remove_orphans
from flashbuild.config.options import load_config
from flashbuild.pipeline import Paths, ensure_toolchain

pytestmark = pytest.mark.container


def test_the_sweep_removes_only_this_clones_containers_whose_process_is_gone(repo, tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    client = docker_client()
    spec = load_config(repo / "matrix.yaml").matrix("smoke").entries[0].image
    image = ensure_toolchain(client, spec, Paths(repo)).tag
    clone, other_clone = tmp_path / "clone", tmp_path / "other-clone"
    labels = {"dead": owner_labels(clone, pid=gone.pid), "live": owner_labels(clone),
              "other clone": owner_labels(other_clone, pid=gone.pid)}
    started = {name: client.containers.run(image, ["sleep", "infinity"], labels=label, detach=True, init=True,
                                           network_mode="none")
               for name, label in labels.items()}
    try:
        removed = remove_orphans(client, clone)
        left = {c.id for c in client.containers.list(all=True, filters={"label": "flashbuild=1"})}
        assert removed == [started["dead"].name]
        assert started["dead"].id not in left
        assert started["live"].id in left and started["other clone"].id in left
    finally:
        for container in started.values():
            try:
                container.remove(force=True)
            except Exception:
                pass
