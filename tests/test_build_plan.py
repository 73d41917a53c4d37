import dataclasses
import os
import subprocess
import sys

import pytest

from flashbuild.core.errors import CompileError
from flashbuild.config.memory import estimate
from flashbuild.config.options import KernelSet, load_config
from flashbuild.config.build_plan import host_tus, make_plan


def names(repo, matrix):
    plan = make_plan(load_config(repo / "matrix.yaml").matrix(matrix), repo)
    return [tu.name for e in plan.entries for tu in e.kernels]


def test_minimal_is_hdim_64_128_by_dtype_by_causal_in_every_family_and_sm90_hdim_96(repo):
    got = set(names(repo, "minimal"))
    want = {f"{family}_hdim{h}_{d}{c}_sm90" for family in ("fa2_fwd", "sm90_prefill", "paged_prefill")
            for h in (64, 128) for d in ("fp16", "bf16") for c in ("", "_causal")}
    # the vision tower's head dim 80, served by round-up
    want |= {f"sm90_prefill_hdim96_{d}{c}_sm90" for d in ("fp16", "bf16") for c in ("", "_causal")}
    want |= {f"{family}_hdim{h}_{d}_causal_sm90" for family in ("paged_decode", "sm90_paged_prefill")
             for h in (64, 128) for d in ("fp16", "bf16")}
    # short sequences sharing query tiles: the vision tower's windows (96) and short prompts (128)
    want |= {f"sm90_packed_prefill_hdim{h}_{d}_sm90" for h in (96, 128) for d in ("fp16", "bf16")}
    assert got == want


def test_full_has_every_fa2_config_and_the_sm90_and_paged_families_with_fp8(repo):
    got = names(repo, "full")
    assert len(got) == (6 * 2 * 2 * 2 + 5 * 2 * 2 + 2 * 2 * 2 + 5 * 2 * 2 + 2 * 2 + 2 * 2 + 5 * 2 + 3 * 2 + 2 * 2
                        + 3 * 2 + 3 * 2 + 3 * 2 * 2)
    assert "sm90_softcap_prefill_hdim256_bf16_causal_sm90" in got
    assert "sm90_paged_softcap_prefill_hdim128_fp16_causal_sm90" in got
    assert "sm90_fp8_window_prefill_hdim256_e4m3_to_bf16_causal_sm90" in got
    assert "sm90_fp8_softcap_prefill_hdim128_e4m3_to_fp16_causal_sm90" in got
    assert "sm90_packed_prefill_hdim192_fp16_sm90" in got
    assert "sm90_prefill_hdim96_bf16_sm90" in got and "sm90_prefill_hdim192_fp16_causal_sm90" in got
    assert "paged_decode_hdim256_bf16_causal_sm90" in got
    assert "fa2_fwd_split_hdim256_bf16_causal_sm90" in got
    assert "fa2_fwd_hdim32_fp16_sm90" in got
    assert "sm90_prefill_hdim256_bf16_sm90" in got
    assert "sm90_fp8_prefill_hdim64_e4m3_to_fp16_causal_sm90" in got
    assert "sm90_fp8_prefill_hdim192_e4m3_to_bf16_sm90" in got
    assert "sm90_fp8_prefill_hdim96_e4m3_to_bf16_causal_sm90" in got


def test_hopper_check_is_what_full_adds_on_hopper_beyond_minimal(repo):
    sm90 = {n for n in names(repo, "full") if n.startswith(("sm90", "paged"))}
    assert set(names(repo, "hopper-check")) == sm90 - set(names(repo, "minimal"))


def test_full_builds_the_e4m3_kv_decode_kernels_and_minimal_does_not(repo):
    want = {f"paged_decode_e4m3kv_hdim{h}_{d}_causal_sm90" for h in (64, 128, 256) for d in ("fp16", "bf16")}
    assert {n for n in names(repo, "full") if n.startswith("paged_decode_e4m3kv")} == want
    assert not any(n.startswith("paged_decode_e4m3kv") for n in names(repo, "minimal"))
    plan = make_plan(load_config(repo / "matrix.yaml").matrix("full"), repo)
    kernels = {tu.name: tu for tu in plan.entries[0].kernels}
    tu = kernels["paged_decode_e4m3kv_hdim128_bf16_causal_sm90"]
    # q and out bf16 (1), caches e4m3 (2), 16-row tiles; the decode kernel's source with the descales
    assert tu.symbol == "fas_paged::launch_paged<1, 2, 128, true, 16>"
    assert tu.registry_line == 'FAS_PAGED(FAS_DTYPE_BF16, FAS_DTYPE_E4M3, 128, true, 16, "paged_e4m3kv")'
    text = tu.render()
    assert '#include "paged/decode.cuh"' in text and "run_decode<1, 2, 128, true, 16>" in text
    assert "occupancy_decode<1, 2, 128, true, 16>" in text and "e4m3 KV" in text
    assert kernels["paged_decode_hdim128_bf16_causal_sm90"].symbol == "fas_paged::launch_paged<1, 1, 128, true, 16>"


def test_smoke_is_one_tu(repo):
    assert names(repo, "smoke") == ["paged_decode_hdim64_fp16_causal_sm90"]


def test_symbols_are_the_demangled_instantiations(repo):
    config = load_config(repo / "matrix.yaml")
    symbols = {tu.name: tu.symbol for tu in make_plan(config.matrix("full"), repo).entries[0].kernels}
    assert symbols["fa2_fwd_hdim128_bf16_causal_sm90"] == "fas_fa2::run_fwd<cutlass::bfloat16_t, 128, true>"
    assert symbols["fa2_fwd_split_hdim64_fp16_sm90"] == "fas_fa2::run_split<cutlass::half_t, 64, false>"
    assert symbols["sm90_prefill_hdim128_bf16_causal_sm90"] == "fas_sm90::launch_ragged<1, 1, 128, true>"
    assert symbols["sm90_fp8_prefill_hdim256_e4m3_to_fp16_sm90"] == "fas_sm90::launch_ragged<2, 0, 256, false>"
    assert symbols["paged_prefill_hdim64_fp16_sm90"] == "fas_paged::launch_paged<0, 0, 64, false, 64>"
    assert symbols["sm90_paged_prefill_hdim256_bf16_causal_sm90"] == "fas_sm90::launch_paged_ragged<1, 256, true>"


def test_estimates_prefer_recorded_peaks(repo):
    entry = load_config(repo / "matrix.yaml").matrix("smoke").entries[0]
    default, origin = estimate(entry, "fa2_fwd_hdim64_fp16_sm90", "fa2_fwd", {})
    assert origin == "matrix default" and default == int(entry.memory_estimates_gb["fa2_fwd"] * 1024**3)
    recorded, origin = estimate(entry, "fa2_fwd_hdim64_fp16_sm90", "fa2_fwd",
                                {"fa2_fwd_hdim64_fp16_sm90@sm_90a": 3_000_000_000})
    assert (recorded, origin) == (3_000_000_000, "recorded")


def write(root, name, text=""):
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_host_tus_are_every_source_of_the_code_folders_named_by_path(tmp_path):
    for name in ("src/api/plan.cpp", "src/core/status.cpp", "src/core/status.h", "src/fa2/launch.cu",
                 "src/fa2/plan.cpp", "src/sm90/plan.cu", "src/sm90/launch.cuh", "src/sm90/tiles.h",
                 "src/glibc_compat.c", "src/other/ignored.cpp"):
        write(tmp_path, name)
    hosts = {tu.name: tu for tu in host_tus(tmp_path)}
    assert list(hosts) == ["core_status", "api_plan", "fa2_launch", "fa2_plan", "sm90_plan", "glibc_compat"]
    assert str(hosts["fa2_plan"].source) == "src/fa2/plan.cpp"
    assert {n for n, tu in hosts.items() if tu.upstream} == {"fa2_launch", "fa2_plan"}
    assert hosts["fa2_launch"].upstream.pin == "flash-attn"
    assert hosts["glibc_compat"].plain_c and not hosts["api_plan"].plain_c


def test_two_sources_with_one_stem_are_refused(tmp_path):
    write(tmp_path, "src/sm90/plan.cu")
    write(tmp_path, "src/sm90/plan.cpp")
    with pytest.raises(CompileError, match="sm90_plan"):
        host_tus(tmp_path)


def test_a_plan_fetches_only_the_upstreams_its_tus_include(repo):
    """Every plan's host TUs include FA2's headers (src/fa2); only SM90 and paged kernels need FlashInfer's."""
    config = load_config(repo / "matrix.yaml")
    smoke = config.matrix("smoke")
    fa2_only = dataclasses.replace(smoke, entries=(dataclasses.replace(
        smoke.entries[0], kernels=(KernelSet("fa2_fwd", (64,), ("fp16",), (False,)),)),))
    fa2 = make_plan(fa2_only, repo).sources_needed
    assert fa2 == {"flash-attn", "nvidia-cuda-nvcc-cu12"}
    assert make_plan(smoke, repo).sources_needed == fa2 | {"flashinfer-python"}
    assert make_plan(config.matrix("minimal"), repo).sources_needed == fa2 | {"flashinfer-python"}


def test_dry_run_prints_the_plan_and_builds_nothing(repo, tmp_path):
    before = sorted(p.name for p in (repo / "artifacts").glob("*")) if (repo / "artifacts").exists() else []
    result = subprocess.run([sys.executable, "-m", "invoke", "build", "--matrix", "minimal", "--dry-run"],
                            cwd=repo, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "entry minimal-cuda12.4-sm90a" in out
    minimal = load_config(repo / "matrix.yaml").matrix("minimal").entries[0]
    declared = sum(len(k.head_dims) * len(k.dtypes) * len(k.causal) for k in minimal.kernels)
    assert f"{declared} kernel TU(s)" in out
    assert "sm90_prefill_hdim64_fp16_sm90" in out
    assert "fa2_fwd_hdim128_bf16_causal_sm90" in out
    assert "budget:" in out and "concurrency: up to" in out
    assert "compiles: every TU on this machine" in out and "then none (no --sccache)" in out
    after = sorted(p.name for p in (repo / "artifacts").glob("*")) if (repo / "artifacts").exists() else []
    assert before == after


def test_a_dry_run_with_sccache_names_the_redis_cache_and_refuses_a_bad_endpoint(repo):
    def dry_run(endpoint):
        environment = {**os.environ, "SCCACHE_REDIS_ENDPOINT": endpoint}
        return subprocess.run([sys.executable, "-m", "invoke", "build", "--matrix", "smoke", "--dry-run", "--sccache"],
                              cwd=repo, env=environment, capture_output=True, text=True)

    good = dry_run("redis://127.0.0.1:6379")
    assert good.returncode == 0, good.stderr
    assert "then sccache's Redis server redis://127.0.0.1:6379" in good.stdout
    bad = dry_run("127.0.0.1:6379")
    assert bad.returncode != 0 and "is not a Redis URL" in bad.stdout + bad.stderr
    assert "Traceback" not in bad.stdout + bad.stderr
