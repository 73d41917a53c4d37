"""Toolchain image identity: tags follow every input, tools come from pinned sources."""

import shutil

import pytest

from flashbuild.pipeline import Paths, ensure_toolchain
from flashbuild.core.errors import ConfigError
from flashbuild.toolchains.images import image_tag
from flashbuild.config.options import load_config


def test_image_tag_changes_with_the_tools_content(repo, tmp_path):
    spec = load_config(repo / "matrix.yaml").matrix("smoke").entries[0].image
    ptxas = tmp_path / "ptxas"
    ptxas.write_bytes(b"one ptxas")
    without = image_tag(spec, repo, "flashbuild/base-trixie:1")
    first = image_tag(spec, repo, "flashbuild/base-trixie:1", {"ptxas": ptxas})
    assert image_tag(spec, repo, "flashbuild/base-trixie:1", {"ptxas": ptxas}) == first, "a tag is reproducible"
    ptxas.write_bytes(b"another ptxas")
    second = image_tag(spec, repo, "flashbuild/base-trixie:1", {"ptxas": ptxas})
    assert len({without, first, second}) == 3


def test_committed_image_takes_ptxas_from_a_pinned_wheel(repo):
    spec = load_config(repo / "matrix.yaml").matrix("minimal").entries[0].image
    lock = (repo / "sources.lock.yaml").read_text()
    assert spec.ptxas and f"\n{spec.ptxas}:\n" in f"\n{lock}"


def test_ptxas_from_an_unpinned_source_is_a_config_error(repo, tmp_path):
    for name in ("matrix.yaml", "sources.lock.yaml"):
        shutil.copy(repo / name, tmp_path / name)
    text = (tmp_path / "matrix.yaml").read_text().replace("ptxas: nvidia-cuda-nvcc-cu12", "ptxas: no-such-wheel")
    (tmp_path / "matrix.yaml").write_text(text)
    spec = load_config(tmp_path / "matrix.yaml").matrix("smoke").entries[0].image
    with pytest.raises(ConfigError) as caught:
        ensure_toolchain(client=None, spec=spec, paths=Paths(tmp_path))
    assert "no-such-wheel" in str(caught.value) and "sources.lock.yaml" in str(caught.value)
