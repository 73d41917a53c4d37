"""The compile container's labels and the orphan rule (which containers a build may remove on a
shared engine), and the one error a lost engine or container gives; no Docker needed."""

import os
import socket
import subprocess

import pytest
from docker.errors import NotFound

from flashbuild.toolchains.container import ToolchainContainer, is_orphan, owner_labels
from flashbuild.core.errors import EngineLost
from flashbuild.core.processes import process_start


def _dead_pid() -> int:
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def test_a_container_is_an_orphan_only_of_this_clone_on_this_host_whose_process_is_gone(tmp_path):
    host = socket.gethostname()
    mine = owner_labels(tmp_path)
    assert mine["flashbuild"] == "1" and mine["flashbuild.clone"] == str(tmp_path.resolve())
    assert mine["flashbuild.pid"] == str(os.getpid()) and mine["flashbuild.pid-start"] == process_start(os.getpid())
    assert not is_orphan(mine, tmp_path, host, process_start), "this live build's own container"
    dead = owner_labels(tmp_path, pid=os.getpid()) | {"flashbuild.pid": str(_dead_pid())}
    assert is_orphan(dead, tmp_path, host, process_start)
    reused = mine | {"flashbuild.pid-start": "1"}  # the pid now names another process
    assert is_orphan(reused, tmp_path, host, process_start)
    assert not is_orphan(dead, tmp_path / "another-clone", host, process_start), "another clone's build"
    assert not is_orphan(dead, tmp_path, "another-host", process_start), "a pid of another machine"
    assert not is_orphan({**dead, "flashbuild.pid": ""}, tmp_path, host, process_start), "not labelled by us"


class _Client:
    def __init__(self, answers=True):
        self.answers = answers

    def ping(self):
        if not self.answers:
            raise ConnectionError("connection refused")  # what requests raises: an OSError
        return True


class _Handle:
    """A docker container handle whose exec fails as a removed container's does."""

    status = "exited"

    def __init__(self, error=None, code=0):
        self.error, self.code = error, code

    def exec_run(self, argv, workdir=None, environment=None):
        if self.error:
            raise self.error
        return self.code, b""

    def reload(self):
        raise NotFound("No such container")


@pytest.mark.parametrize("error", [NotFound("No such container: flashbuild-x"), ConnectionError("reset by peer")])
def test_a_container_removed_from_outside_is_one_error_that_says_so_and_what_to_do(tmp_path, error):
    container = ToolchainContainer(_Client(), "image", tmp_path, "smoke")
    container._container = _Handle(error)
    with pytest.raises(EngineLost, match=f"container {container.name} was removed or stopped from outside") as lost:
        container.exec(["nvcc", "--version"])
    assert "rerun the build" in lost.value.fix and lost.value.exit_code == 9


def test_a_command_killed_with_its_container_is_not_taken_for_a_memory_kill(tmp_path):
    container = ToolchainContainer(_Client(), "image", tmp_path, "smoke")
    container._container = _Handle(code=137)
    with pytest.raises(EngineLost, match="removed or stopped from outside"):
        container.exec(["nvcc", "-c", "x.cu"])


def test_an_engine_that_stops_answering_is_one_error_naming_how_to_start_it(tmp_path):
    container = ToolchainContainer(_Client(answers=False), "image", tmp_path, "smoke")
    container._container = _Handle(ConnectionError("connection refused"))
    with pytest.raises(EngineLost, match="Docker engine stopped answering during the build") as lost:
        container.exec(["nvcc", "--version"])
    assert "invoke setup" in lost.value.fix


class _Dying(_Handle):
    """A container that `docker rm -f` is taking down: still "running" at the first look."""

    def __init__(self, looks_running: int):
        super().__init__(code=137)
        self.looks_running = looks_running

    def reload(self):
        self.status = "running" if self.looks_running > 0 else "exited"
        self.looks_running -= 1


def test_a_command_killed_while_its_container_is_being_removed_is_a_lost_container(tmp_path):
    container = ToolchainContainer(_Client(), "image", tmp_path, "smoke")
    container._container = _Dying(looks_running=2)
    with pytest.raises(EngineLost, match="removed or stopped from outside"):
        container.exec(["nvcc", "-c", "x.cu"])


def test_a_command_killed_in_a_container_that_keeps_running_is_returned_as_killed(tmp_path, monkeypatch):
    monkeypatch.setattr(ToolchainContainer, "LOSS_WAIT_S", 0.3)
    container = ToolchainContainer(_Client(), "image", tmp_path, "smoke")
    container._container = _Dying(looks_running=100)  # the OOM killer took one process, not the container
    assert container.exec(["nvcc", "-c", "x.cu"]).exit_code == 137
