"""Object cache keys cover exactly our own headers a TU reaches through quoted #includes."""

from pathlib import Path

from flashbuild.compile.compiler import own_include_closure
from flashbuild.config.build_plan import host_tus


def write(root: Path, name: str, text: str) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_closure_follows_quoted_includes_within_the_repo_only(tmp_path):
    launch = write(tmp_path, "src/sm90/launch.cuh", '#include "sm90/args.h"\n#include <cutlass/cutlass.h>\n')
    args = write(tmp_path, "src/sm90/args.h", '#include "sm90/launch.cuh"  // a cycle\n')
    write(tmp_path, "src/sm90/host_only.h", "// included by host code only\n")
    public = write(tmp_path, "src/include/api.h", "\n")
    kernel = write(tmp_path, "kernels/k.cu", '#include "sm90/launch.cuh"\n#include "upstream_only.h"\n')
    host = write(tmp_path, "src/host.cu", '#include "api.h"\n  #  include "sm90/host_only.h"\n')

    assert own_include_closure(tmp_path, kernel) == sorted([launch.resolve(), args.resolve()])
    assert own_include_closure(tmp_path, host) == sorted([public.resolve(), (tmp_path / "src/sm90/host_only.h").resolve()])


def test_the_including_folder_comes_first(tmp_path):
    local = write(tmp_path, "src/sm90/common.h", "\n")
    write(tmp_path, "src/common.h", "\n")
    source = write(tmp_path, "src/sm90/user.cuh", '#include "common.h"\n')
    assert own_include_closure(tmp_path, source) == [local.resolve()]


def test_planner_and_kernels_share_the_tile_table(repo):
    """A tile-shape edit must rebuild both sides: the planner's query rows and the kernels'
    traits come from one header, and each side's key covers it."""
    tiles = (repo / "src/sm90/tiles.h").resolve()
    kernel = repo / "kernels" / "sm90_prefill_hdim128_bf16_causal_sm90.cu"
    fp8_kernel = repo / "kernels" / "sm90_fp8_prefill_hdim256_e4m3_to_fp16_sm90.cu"
    for source in (kernel, fp8_kernel):
        assert tiles in own_include_closure(repo, source), source.name
    sm90_hosts = [repo / tu.source for tu in host_tus(repo) if tu.name.startswith("sm90_")]
    assert any(tiles in own_include_closure(repo, source) for source in sm90_hosts), "the planner's key covers it"
    assert (repo / "src/sm90/tile_scheduler.cuh").resolve() in own_include_closure(repo, kernel)
