"""The build-cluster side of the sccache route: nvcc's steps compiled on sccache-dist servers.

Contract: `read_cluster(environ)` finds a cluster in sccache's own configuration, the client
file SCCACHE_CONF names (its `[dist]` section: scheduler_url and auth), checks it, and returns a
`Cluster` (None without SCCACHE_CONF); a bad file is a ConfigError naming the fix. During a
build, in the compile container (on the host network, so that the scheduler's address means what
it means on the host): `host_compiler(container)` is the ELF gcc that Debian's nvcc reaches
through a shell script, which sccache cannot package (nvcc then gets it as -ccbin: the objects
are byte-identical, docs/design/reproducible-builds.md); `cluster_budget(...)` caps the jobs in
flight by the cluster's CPUs (from the scheduler) and memory (FLASHBUILD_DIST_MEMORY_GB, the
servers' total; without it the servers are taken as sized by the README's rule, cores x per-TU
peak <= memory); `report(stats)` turns sccache's counters into the build log's lines, a step
that fell back to this machine included: sccache does that silently.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from flashbuild.core.errors import ConfigError, EnvironmentProblem
from flashbuild.config.memory import GIB
from flashbuild.compile.jobs import Budget

CONF = "SCCACHE_CONF"
MEMORY = "FLASHBUILD_DIST_MEMORY_GB"
# Debian's nvcc runs `gcc` from its own bin/ folder, a script that execs the first gcc-N whose
# g++-N exists; this finds the same one and prints its real path.
HOST_COMPILER_PROBE = ('for v in 13 12 11 10 9 8 7 6; do if g++-$v --version >/dev/null 2>&1; then '
                       'readlink -f "$(command -v gcc-$v)"; exit 0; fi; done; exit 1')


@dataclass(frozen=True)
class Cluster:
    config_file: Path  # sccache's client configuration (mounted read-only into the container)
    scheduler_url: str
    memory_gb: float | None  # the build servers' memory together, when given


def read_cluster(environ: dict) -> Cluster | None:
    given = environ.get(CONF)
    if not given:
        return None
    path = Path(given)
    example = f"{CONF}=/path/client.conf holding [dist] scheduler_url = \"http://HOST:10600\" and [dist.auth]"
    if not path.is_absolute() or not path.is_file():
        raise ConfigError(f"{CONF}={given} is not an absolute path to a file", fix=f"give it as {example}")
    try:
        config = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{CONF}={given} is not a readable TOML file ({error})", fix=f"correct it: {example}") from None
    url = config.get("dist", {}).get("scheduler_url") if isinstance(config.get("dist"), dict) else None
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(f"{CONF}={given} names no build cluster: [dist] scheduler_url is "
                          f"{url!r}, not an http(s) URL (the build reads {CONF} only for sccache-dist)",
                          fix=f"set it, e.g. {example}; for a shared cache alone use SCCACHE_DIR or "
                              "SCCACHE_REDIS_ENDPOINT instead")
    remote_stores = sorted(set(config.get("cache", {})) - {"disk"}) if isinstance(config.get("cache"), dict) else []
    if remote_stores:
        raise ConfigError(f"{CONF}={given} configures the cache store(s) {', '.join(remote_stores)}: of sccache's "
                          "remote caches only Redis is supported, through SCCACHE_REDIS_ENDPOINT",
                          fix=f"remove its [cache.{remote_stores[0]}] section")
    memory = environ.get(MEMORY)
    memory_gb = None
    if memory:
        try:
            memory_gb = float(memory)
        except ValueError:
            memory_gb = -1.0
        if not memory_gb > 0 or memory_gb == float("inf"):
            raise ConfigError(f"{MEMORY}={memory} is not a positive number of GiB",
                              fix=f"give the build servers' memory together, e.g. {MEMORY}=128, or unset it")
    return Cluster(path.resolve(), url, memory_gb)


def host_compiler(container) -> str:
    result = container.exec(["sh", "-c", HOST_COMPILER_PROBE])
    compiler = result.output.strip().splitlines()[-1] if result.output.strip() else ""
    if result.exit_code != 0 or not compiler.startswith("/"):
        raise EnvironmentProblem("the toolchain image has no gcc-N with a matching g++-N for nvcc's host compile",
                                 fix="rebuild the toolchain image (`invoke image`)")
    return compiler


def scheduler_status(text: str) -> tuple[int, int]:
    """(servers, CPUs) from `sccache --dist-status`, whose JSON holds num_servers and num_cpus."""
    servers, cpus = re.search(r'"num_servers"\s*:\s*(\d+)', text), re.search(r'"num_cpus"\s*:\s*(\d+)', text)
    if not servers or not cpus:
        raise EnvironmentProblem(f"sccache --dist-status did not report the cluster: {text.strip()[-300:]}",
                                 fix=f"check that the scheduler in {CONF} is running and its auth token is right")
    return int(servers.group(1)), int(cpus.group(1))


def cluster_budget(servers: int, cpus: int, cluster: Cluster, largest_estimate_bytes: int,
                   jobs_limit: int | None) -> Budget:
    """Jobs in flight over the cluster: one per server CPU (or --jobs), within the servers' memory."""
    if servers == 0 or cpus == 0:
        raise EnvironmentProblem("the sccache-dist scheduler reports no build server",
                                 fix="start the build servers (sccache-dist server --config ...) and retry")
    slots = min(cpus, jobs_limit) if jobs_limit else cpus
    if cluster.memory_gb is not None:
        return Budget(int(cluster.memory_gb * GIB), slots, f"{MEMORY} {cluster.memory_gb:g} GiB over {servers} "
                                                          f"server(s)")
    return Budget(slots * largest_estimate_bytes, slots,
                  f"{servers} server(s) of {cpus} CPU(s), each CPU taken as holding one largest TU ({MEMORY} unset)")


@dataclass(frozen=True)
class DistCounts:
    remote: dict  # server address -> steps it compiled
    failed: int   # steps that fell back to this machine


def dist_counts(stats: str) -> DistCounts:
    """The distributed part of `sccache --show-stats`."""
    failed = re.search(r"^Failed distributed compilations\s+(\d+)", stats, re.MULTILINE)
    remote = {}
    lines = stats.splitlines()
    if "Successful distributed compiles" in lines:
        for line in lines[lines.index("Successful distributed compiles") + 1:]:
            parts = line.split()
            if len(parts) != 2 or not parts[1].isdigit():
                break
            remote[parts[0]] = int(parts[1])
    return DistCounts(remote, int(failed.group(1)) if failed else 0)


def report(counts: DistCounts, reason: str = "") -> list[str]:
    """Log lines: where the steps compiled; a warning for every step that fell back."""
    total = sum(counts.remote.values())
    where = ", ".join(f"{server} {n}" for server, n in sorted(counts.remote.items())) or "none"
    lines = [f"sccache-dist: {total} step(s) compiled on {len(counts.remote)} server(s) ({where}), "
             f"{counts.failed} fell back to this machine"]
    if counts.failed:
        lines.append(f"warning: {counts.failed} distributed compile step(s) ran on this machine instead of the "
                     f"cluster{': ' + reason if reason else ''} (sccache's error log in the build's logs folder)")
    return lines
