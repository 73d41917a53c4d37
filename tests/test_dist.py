"""The sccache-dist side of the sccache route (flashbuild/compile/dist.py): the cluster named in
sccache's client configuration, refused clearly when the file is wrong; the budget over the
servers; the build log's account of where nvcc's steps compiled, a fallback included."""

from pathlib import Path

import pytest

from flashbuild.compile import dist, sccache
from flashbuild.core.errors import ConfigError, EnvironmentProblem
from flashbuild.config.memory import GIB

CLIENT = '[dist]\nscheduler_url = "http://127.0.0.1:10600"\ntoolchains = []\n[dist.auth]\ntype = "token"\ntoken = "t"\n'
# What `sccache --show-stats` printed in the probe (docs/design/reproducible-builds.md), trimmed.
STATS = """Compile requests                           1
Compile requests executed                  5
Cache hits                                 0
Cache misses                               4
Non-cacheable calls                        0
Failed distributed compilations            1

Successful distributed compiles
  127.0.0.1:38569                          3
  127.0.0.1:40001                          2
Cache location                       Local disk: "/tmp/probe/a/cache"
"""


def client(tmp_path, text=CLIENT) -> Path:
    path = tmp_path / "client.conf"
    path.write_text(text)
    return path


def test_without_sccache_conf_there_is_no_cluster():
    assert dist.read_cluster({"SCCACHE_DIR": "/x"}) is None


def test_a_client_configuration_with_a_scheduler_names_the_cluster_and_its_memory(tmp_path):
    cluster = dist.read_cluster({dist.CONF: str(client(tmp_path)), dist.MEMORY: "96"})
    assert cluster == dist.Cluster(client(tmp_path).resolve(), "http://127.0.0.1:10600", 96.0)


@pytest.mark.parametrize("text, words", [
    ("[dist\n", "not a readable TOML file"),
    ('[dist.auth]\ntype = "token"\n', "names no build cluster"),
    ('[dist]\nscheduler_url = "127.0.0.1:10600"\n', "not an http(s) URL"),
    (CLIENT + '[cache.s3]\nbucket = "b"\n', "cache store(s) s3"),
])
def test_a_wrong_client_configuration_is_refused_with_what_to_fix(tmp_path, text, words):
    with pytest.raises(ConfigError) as error:
        dist.read_cluster({dist.CONF: str(client(tmp_path, text))})
    assert words in str(error.value) and error.value.fix


@pytest.mark.parametrize("value", ["client.conf", "/nonexistent/client.conf"])
def test_sccache_conf_must_be_an_absolute_path_to_a_file(value):
    with pytest.raises(ConfigError, match="not an absolute path to a file"):
        dist.read_cluster({dist.CONF: value})


@pytest.mark.parametrize("value", ["-1", "0", "lots", "inf", "nan"])
def test_the_cluster_memory_must_be_a_positive_number_of_gib(tmp_path, value):
    with pytest.raises(ConfigError, match=f"{dist.MEMORY}={value} is not a positive number of GiB"):
        dist.read_cluster({dist.CONF: str(client(tmp_path)), dist.MEMORY: value})


def test_sccache_settings_check_the_client_configuration_in_a_dry_run_too(tmp_path):
    with pytest.raises(ConfigError, match="names no build cluster"):
        sccache.settings(tmp_path, {dist.CONF: str(client(tmp_path, '[dist.auth]\ntype = "token"\n'))})


def test_a_cluster_puts_the_container_on_the_host_network_and_names_the_host_compiler_to_nvcc(tmp_path):
    cluster = dist.read_cluster({dist.CONF: str(client(tmp_path))})
    route = sccache.Route(Path("/x/sccache"), "0" * 64, tmp_path, {"SCCACHE_DIR": str(tmp_path)}, cluster,
                          "/usr/bin/x86_64-linux-gnu-gcc-13")
    assert route.network == "host" and route.key_part.endswith(" dist")
    assert route.wrap(["nvcc", "-c", "a.cu"]) == ["/x/sccache", "nvcc", "-ccbin", "/usr/bin/x86_64-linux-gnu-gcc-13",
                                                  "-c", "a.cu"]
    line = sccache.describe({"SCCACHE_DIR": "/c"}, tmp_path / "objects", cluster)
    assert "on the sccache-dist cluster of http://127.0.0.1:10600" in line and "reported" in line


def test_the_scheduler_status_gives_servers_and_cpus_and_an_empty_answer_is_an_environment_problem():
    text = '{"SchedulerStatus":["http://127.0.0.1:10600/",{"num_servers":2,"num_cpus":4,"in_progress":0}]}'
    assert dist.scheduler_status(text) == (2, 4)
    with pytest.raises(EnvironmentProblem, match="did not report the cluster"):
        dist.scheduler_status("error: connection refused")


def test_the_budget_runs_one_job_per_server_cpu_within_the_configured_memory(tmp_path):
    cluster = dist.read_cluster({dist.CONF: str(client(tmp_path)), dist.MEMORY: "10"})
    budget = dist.cluster_budget(2, 8, cluster, 5 * GIB, None)
    assert (budget.cpu_slots, budget.memory_bytes) == (8, 10 * GIB)
    assert dist.cluster_budget(2, 8, cluster, 5 * GIB, 3).cpu_slots == 3  # --jobs caps it
    unsized = dist.cluster_budget(2, 8, dist.read_cluster({dist.CONF: str(client(tmp_path))}), 5 * GIB, None)
    assert unsized.memory_bytes == 8 * 5 * GIB  # servers taken as sized by the README's rule
    with pytest.raises(EnvironmentProblem, match="no build server"):
        dist.cluster_budget(0, 0, cluster, 5 * GIB, None)


def test_the_log_says_where_the_steps_compiled_and_warns_of_every_fallback():
    counts = dist.dist_counts(STATS)
    assert counts == dist.DistCounts({"127.0.0.1:38569": 3, "127.0.0.1:40001": 2}, 1)
    lines = dist.report(counts, "Could not perform distributed compile, falling back to local: ldd")
    assert lines[0] == ("sccache-dist: 5 step(s) compiled on 2 server(s) (127.0.0.1:38569 3, 127.0.0.1:40001 2), "
                        "1 fell back to this machine")
    assert lines[1].startswith("warning: 1 distributed compile step(s) ran on this machine") and "ldd" in lines[1]
    assert dist.report(dist.dist_counts(STATS.replace("compilations            1", "compilations            0"))) \
        == [lines[0].replace("1 fell back", "0 fell back")]


def test_a_folder_beside_the_clone_whose_name_extends_the_clones_keeps_its_own_path_in_the_container(tmp_path):
    """A clone at /x/m16 and the cluster's files at /x/m16work: only the clone's own paths move
    to the mount point (a prefix match once sent SCCACHE_CONF to /flashbuild/srcwork/...)."""
    from flashbuild.toolchains.container import MOUNT_POINT, ToolchainContainer

    clone = tmp_path / "m16"
    clone.mkdir()
    container = ToolchainContainer(None, "image", clone, "test")
    assert container.inside(f"{tmp_path}/m16work/client.conf") == f"{tmp_path}/m16work/client.conf"
    assert container.inside(f"{tmp_path}/m16.conf") == f"{tmp_path}/m16.conf"
    assert container.inside(f"-I{clone}/src -o {clone}") == f"-I{MOUNT_POINT}/src -o {MOUNT_POINT}"
    assert container.inside(f"--keep={clone}:{clone}/b") == f"--keep={MOUNT_POINT}:{MOUNT_POINT}/b"
