"""The sccache route's settings (flashbuild/compile/sccache.py): what it accepts from the caller's
SCCACHE_* environment, what it refuses with a ConfigError that says how to fix it, and when the
compile container gets a network."""

from pathlib import Path

import pytest

from flashbuild.compile import sccache
from flashbuild.core.errors import ConfigError


def route(environment: dict) -> sccache.Route:
    return sccache.Route(Path("/x/sccache"), "0" * 64, Path(environment["SCCACHE_DIR"]), environment)


def test_without_settings_the_cache_is_a_folder_under_the_build_and_the_container_has_no_network(tmp_path):
    chosen = sccache.settings(tmp_path, {"PATH": "/usr/bin"})
    assert chosen["SCCACHE_DIR"] == str((tmp_path / sccache.DEFAULT_DIR).resolve())
    assert "PATH" not in chosen  # only SCCACHE_* settings reach the container
    assert route(chosen).network == "none"


def test_a_redis_endpoint_is_passed_through_and_puts_the_container_on_the_host_network(tmp_path):
    chosen = sccache.settings(tmp_path, {"SCCACHE_REDIS_ENDPOINT": "redis://127.0.0.1:6390"})
    assert chosen["SCCACHE_REDIS_ENDPOINT"] == "redis://127.0.0.1:6390"
    assert route(chosen).network == "host"


def test_the_server_listens_on_a_socket_in_the_container_not_on_a_port_other_builds_share(tmp_path):
    for given in ({}, {"SCCACHE_REDIS_ENDPOINT": "redis://127.0.0.1:6390"}, {"SCCACHE_SERVER_PORT": "4226"}):
        chosen = sccache.settings(tmp_path, given)
        assert chosen["SCCACHE_SERVER_UDS"] == sccache.SERVER_SOCKET
        assert chosen["SCCACHE_SERVER_UDS"].startswith("/tmp/")  # the container's own /tmp"


@pytest.mark.parametrize("value", ["127.0.0.1:6379", "http://cache:6379", "localhost"])
def test_a_redis_endpoint_that_is_not_a_redis_url_is_refused_with_an_example(tmp_path, value):
    with pytest.raises(ConfigError) as error:
        sccache.settings(tmp_path, {"SCCACHE_REDIS_ENDPOINT": value})
    assert value in str(error.value) and "redis://" in error.value.fix


@pytest.mark.parametrize("name", ["SCCACHE_BUCKET", "SCCACHE_DIST_SCHEDULER_URL", "SCCACHE_WEBDAV_ENDPOINT"])
def test_other_remote_stores_and_build_servers_are_refused_by_name(tmp_path, name):
    with pytest.raises(ConfigError) as error:
        sccache.settings(tmp_path, {name: "somewhere"})
    assert name in str(error.value) and "SCCACHE_REDIS_ENDPOINT" in error.value.fix


def test_a_relative_sccache_dir_is_refused(tmp_path):
    with pytest.raises(ConfigError) as error:
        sccache.settings(tmp_path, {"SCCACHE_DIR": "cache"})
    assert "absolute" in str(error.value)


def test_the_dry_run_names_where_tus_compile_and_each_cache_in_lookup_order(tmp_path):
    objects = tmp_path / "objects"
    assert sccache.describe(None, objects).endswith(f"{objects} (objects by key), then none (no --sccache)")
    folder = sccache.settings(tmp_path, {"SCCACHE_DIR": "/shared/cache"})
    assert sccache.describe(folder, objects).endswith("then sccache's folder /shared/cache")
    redis = sccache.settings(tmp_path, {"SCCACHE_REDIS_ENDPOINT": "redis://10.0.0.5:6379"})
    assert "Redis server redis://10.0.0.5:6379 (the container on the host network)" in sccache.describe(redis, objects)
