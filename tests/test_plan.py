import subprocess
import sys

from flashbuild.options import load_config
from flashbuild.plan import make_plan


def names(repo, matrix):
    return [tu.name for e in make_plan(load_config(repo / "matrix.yaml").matrix(matrix)).entries for tu in e.kernels]


def test_minimal_is_hdim_64_128_by_dtype_by_causal_in_both_families(repo):
    got = set(names(repo, "minimal"))
    want = {f"{family}_hdim{h}_{d}{c}_sm90" for family in ("fa2_fwd", "sm90_prefill")
            for h in (64, 128) for d in ("fp16", "bf16") for c in ("", "_causal")}
    assert got == want


def test_full_has_every_fa2_config_and_the_sm90_families_with_fp8(repo):
    got = names(repo, "full")
    assert len(got) == 6 * 2 * 2 * 2 + 3 * 2 * 2 + 3 * 2 * 2
    assert "fa2_fwd_split_hdim256_bf16_causal_sm90" in got
    assert "fa2_fwd_hdim32_fp16_sm90" in got
    assert "sm90_prefill_hdim256_bf16_sm90" in got
    assert "sm90_fp8_prefill_hdim64_e4m3_to_fp16_causal_sm90" in got


def test_hopper_check_is_what_full_adds_on_hopper_beyond_minimal(repo):
    sm90 = {n for n in names(repo, "full") if n.startswith("sm90")}
    assert set(names(repo, "hopper-check")) == sm90 - set(names(repo, "minimal"))


def test_smoke_is_one_tu(repo):
    assert names(repo, "smoke") == ["fa2_fwd_hdim64_fp16_sm90"]


def test_symbols_are_the_demangled_instantiations(repo):
    config = load_config(repo / "matrix.yaml")
    symbols = {tu.name: tu.symbol for tu in make_plan(config.matrix("full")).entries[0].kernels}
    assert symbols["fa2_fwd_hdim128_bf16_causal_sm90"] == "flash::run_mha_fwd_<cutlass::bfloat16_t, 128, true>"
    assert symbols["fa2_fwd_split_hdim64_fp16_sm90"] == \
        "flash::run_mha_fwd_splitkv_dispatch<cutlass::half_t, 64, false>"
    assert symbols["sm90_prefill_hdim128_bf16_causal_sm90"] == "fas_sm90::launch_ragged<1, 1, 128, true>"
    assert symbols["sm90_fp8_prefill_hdim256_e4m3_to_fp16_sm90"] == "fas_sm90::launch_ragged<2, 0, 256, false>"


def test_estimates_prefer_recorded_peaks(repo):
    plan = make_plan(load_config(repo / "matrix.yaml").matrix("smoke"))
    entry = plan.entries[0]
    tu = entry.kernels[0]
    default, origin = entry.estimate_bytes(tu, {})
    assert origin == "matrix default" and default == int(5.0 * 1024**3)
    recorded, origin = entry.estimate_bytes(tu, {f"{tu.name}@sm_90a": 3_000_000_000})
    assert (recorded, origin) == (3_000_000_000, "recorded")


def test_dry_run_prints_the_plan_and_builds_nothing(repo, tmp_path):
    before = sorted(p.name for p in (repo / "artifacts").glob("*")) if (repo / "artifacts").exists() else []
    result = subprocess.run([sys.executable, "-m", "invoke", "build", "--matrix", "minimal", "--dry-run"],
                            cwd=repo, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "entry minimal-cuda12.4-sm90a" in out
    assert "16 kernel TU(s)" in out
    assert "sm90_prefill_hdim64_fp16_sm90" in out
    assert "fa2_fwd_hdim128_bf16_causal_sm90" in out
    assert "budget:" in out and "concurrency: up to" in out
    after = sorted(p.name for p in (repo / "artifacts").glob("*")) if (repo / "artifacts").exists() else []
    assert before == after
