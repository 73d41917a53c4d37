"""A local sccache-dist build cluster: one scheduler and N bubblewrap build servers on 127.0.0.1.

Contract: `LocalCluster(sccache_dist, workdir, servers=2)` is a context manager. On entry it
writes the scheduler's and each server's configuration under `workdir` (a fresh HS256 key, a
JWT per server, a client token), starts the processes, and returns once the scheduler reports
every server; on exit it stops them all, also after an error. `client_config()` is the
`SCCACHE_CONF` a client compiles through. It is what the tests and a developer's machine use
to try distributed compiles; a release engineer's real cluster is configured the same way
(sccache's own TOML), on other hosts. Needs root (the overlay builder) and bubblewrap.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from flashbuild.core.errors import EnvironmentProblem

CLIENT_TOKEN = "flashbuild-local-cluster"  # 127.0.0.1 only: the token guards nothing else


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass(frozen=True)
class Status:
    servers: int
    cpus: int
    in_progress: int


class LocalCluster:
    def __init__(self, sccache_dist: Path, workdir: Path, servers: int = 2, ready_timeout_s: float = 30.0,
                 cpu_sets: list[set[int]] | None = None):
        """cpu_sets: pin server i to those CPUs (it then offers that many: sccache-dist counts the CPUs
        it may run on), so that servers on one machine do not offer its cores twice."""
        if cpu_sets is not None and len(cpu_sets) != servers:
            raise ValueError(f"{len(cpu_sets)} cpu sets for {servers} servers")
        self.cpu_sets = cpu_sets
        self.binary = Path(sccache_dist)
        self.workdir = Path(workdir)
        self.count = servers
        self.ready_timeout_s = ready_timeout_s
        self.scheduler_port = 0
        self.server_ports: list[int] = []
        self.processes: list[subprocess.Popen] = []

    # ---- configuration (sccache-dist's own TOML) ----
    def _run(self, *args: str) -> str:
        return subprocess.run([str(self.binary), *args], capture_output=True, text=True, check=True).stdout.strip()

    def server_token(self, key: str, address: str) -> str:
        """A build server's JWT. --secret-key=KEY: a base64url key may begin with '-', which as a
        separate argument would read as an option (1 key in 64)."""
        return self._run("auth", "generate-jwt-hs256-server-token", f"--secret-key={key}", "--server", address)

    def _write_configs(self) -> list[Path]:
        key = self._run("auth", "generate-jwt-hs256-key")
        self.scheduler_port = free_port()
        scheduler = self.workdir / "scheduler.conf"
        scheduler.write_text(f'public_addr = "127.0.0.1:{self.scheduler_port}"\n'
                             f'[client_auth]\ntype = "token"\ntoken = "{CLIENT_TOKEN}"\n'
                             f'[server_auth]\ntype = "jwt_hs256"\nsecret_key = "{key}"\n')
        configs = [scheduler]
        for index in range(self.count):
            port = free_port()
            self.server_ports.append(port)
            token = self.server_token(key, f"127.0.0.1:{port}")
            folder = self.workdir / f"server{index}"
            (folder / "build").mkdir(parents=True, exist_ok=True)
            (folder / "toolchains").mkdir(parents=True, exist_ok=True)
            config = self.workdir / f"server{index}.conf"
            config.write_text(f'cache_dir = "{folder}/toolchains"\npublic_addr = "127.0.0.1:{port}"\n'
                              f'scheduler_url = "http://127.0.0.1:{self.scheduler_port}"\n'
                              f'[builder]\ntype = "overlay"\nbuild_dir = "{folder}/build"\n'
                              f'bwrap_path = "{shutil.which("bwrap")}"\n'
                              f'[scheduler_auth]\ntype = "jwt_token"\ntoken = "{token}"\n')
            configs.append(config)
        return configs

    def client_config(self) -> Path:
        config = self.workdir / "client.conf"
        config.write_text(f'[dist]\nscheduler_url = "http://127.0.0.1:{self.scheduler_port}"\ntoolchains = []\n'
                          f'[dist.auth]\ntype = "token"\ntoken = "{CLIENT_TOKEN}"\n')
        return config

    # ---- processes ----
    def status(self) -> Status:
        """The scheduler's status endpoint: three little-endian u64 (servers, cpus, in progress)."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.scheduler_port}/api/v1/scheduler/status",
                                         headers={"Authorization": f"Bearer {CLIENT_TOKEN}"})
        with urllib.request.urlopen(request, timeout=2) as response:
            return Status(*struct.unpack("<QQQ", response.read()[:24]))

    def __enter__(self) -> "LocalCluster":
        if shutil.which("bwrap") is None:
            raise EnvironmentProblem("bubblewrap (bwrap) is not installed; sccache-dist's build servers need it",
                                     fix="run `invoke setup` (installs it), or `apt-get install bubblewrap`")
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            configs = self._write_configs()
            pins = [None] + (self.cpu_sets or [None] * self.count)
            for role, config, cpus in zip(["scheduler"] + ["server"] * self.count, configs, pins):
                log = open(self.workdir / f"{config.stem}.log", "w")
                pin = (lambda cpus=cpus: os.sched_setaffinity(0, cpus)) if cpus else None
                self.processes.append(subprocess.Popen([str(self.binary), role, "--config", str(config)],
                                                       stdout=log, stderr=subprocess.STDOUT, preexec_fn=pin,
                                                       env={**os.environ, "RUST_LOG": "info"}))
            self._wait_ready()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            # sccache-dist daemonizes: the started process exits 0 once its child runs.
            if any(process.poll() not in (None, 0) for process in self.processes):
                break
            try:
                status = self.status()
                if status.servers == self.count:
                    return
                last = f"{status.servers} of {self.count} servers registered"
            except OSError as error:
                last = str(error)
            time.sleep(0.3)
        raise EnvironmentProblem(f"the local sccache-dist cluster did not come up ({last})",
                                 fix=f"read the logs in {self.workdir} (scheduler.log, server*.log)")

    def running(self) -> list[int]:
        """PIDs of the daemons this cluster started: every process whose command line names one of
        its configuration files (sccache-dist forks away from the process we started)."""
        configs = [str(path).encode() for path in self.workdir.glob("*.conf")]
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if any(config in cmdline for config in configs) and self.binary.name.encode() in cmdline:
                pids.append(int(entry.name))
        return pids

    def __exit__(self, *exc) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for pid in self.running():
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in self.running():
            os.kill(pid, signal.SIGKILL)
        for process in self.processes:
            process.wait()
        self.processes.clear()
