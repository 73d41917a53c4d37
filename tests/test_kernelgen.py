import shutil

from flashbuild.compile.kernelgen import registry_text, stale_files, write_kernels
from flashbuild.config.options import load_config
from flashbuild.config.build_plan import make_plan


def test_committed_kernels_match_the_generator(repo):
    config = load_config(repo / "matrix.yaml")
    assert stale_files(config.matrices.values(), repo / "kernels") == [], "run `invoke generate`"


def test_one_instantiation_per_file_named_by_its_parameters(repo):
    text = (repo / "kernels" / "fa2_fwd_hdim128_bf16_causal_sm90.cu").read_text()
    assert text.count("template void fas_fa2::run_fwd<cutlass::bfloat16_t, 128, true>") == 1
    assert '#include "fa2/fwd_launch.cuh"' in text and "run_mha_fwd" not in text
    split = (repo / "kernels" / "fa2_fwd_split_hdim64_fp16_sm90.cu").read_text()
    assert split.count("template void fas_fa2::run_split<cutlass::half_t, 64, false>") == 1
    assert '#include "fa2/split_launch.cuh"' in split and "run_mha_fwd_splitkv_dispatch" not in split
    sm90 = (repo / "kernels" / "sm90_prefill_hdim64_fp16_sm90.cu").read_text()
    assert sm90.count("launch_ragged<0, 0, 64, false>") == 1
    assert "run_ragged<cutlass::half_t, cutlass::half_t, 64, false>" in sm90
    fp8 = (repo / "kernels" / "sm90_fp8_prefill_hdim128_e4m3_to_bf16_causal_sm90.cu").read_text()
    assert fp8.count("launch_ragged<2, 1, 128, true>") == 1
    assert '#include "sm90/launch.cuh"' in fp8
    assert "run_ragged<cutlass::float_e4m3_t, cutlass::bfloat16_t, 128, true>" in fp8


def test_only_the_80_key_wide_tiles_define_cutes_extended_gmma_shapes_before_any_include(repo):
    """16-bit varlen kernels, causal, at head dims 192 and 256, and the hd256 softcap ones non-causal too,
    have 80 keys per stage (src/sm90/tiles.h), a width CuTe runs as five 16-wide GMMAs without its
    extended shapes; every other TU does without the define, whose header costs ~40 s of compile
    (sm90/launch.cuh asserts both at compile time)."""
    define = "#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED 1"
    having = set()
    for path in sorted((repo / "kernels").glob("*.cu")):
        text = path.read_text()
        if define in text:
            having.add(path.stem)
            assert text.index(define) < text.index("#include"), path.name
    wanted = {f"sm90_{family}_hdim{hd}_{dtype}_causal_sm90" for family in ("prefill", "softcap_prefill")
              for hd in (192, 256) for dtype in ("fp16", "bf16")}
    wanted |= {f"sm90_softcap_prefill_hdim256_{dtype}_sm90" for dtype in ("fp16", "bf16")}
    assert having == {stem for stem in wanted if (repo / "kernels" / f"{stem}.cu").exists()}
    assert {"sm90_prefill_hdim256_bf16_causal_sm90", "sm90_softcap_prefill_hdim256_bf16_sm90"} <= having


def test_every_kernel_tu_ends_with_one_hidden_external_definition_named_after_it(repo):
    """cudafe++ names a TU's internal symbols after its external non-template definitions, else
    after the folder it runs in (tests/test_e2e.py shows the difference in bytes). Named after the
    file, the anchors are as unique as the file names, so the library links."""
    sources = sorted((repo / "kernels").glob("*.cu"))
    assert sources
    for source in sources:
        lines = source.read_text().rstrip("\n").splitlines()
        anchors = [line for line in lines if "fas_tu_" in line]
        assert anchors == [f'extern "C" __attribute__((visibility("hidden"))) void fas_tu_{source.stem}() {{}}'], source
        assert lines[-1] == anchors[0], f"{source.name}: the anchor is not the last line"


def test_freshness_check_sees_edits_missing_and_extra_files(repo, tmp_path):
    config = load_config(repo / "matrix.yaml")
    kernels = tmp_path / "kernels"
    shutil.copytree(repo / "kernels", kernels)
    (kernels / "fa2_fwd_hdim64_fp16_sm90.cu").write_text("// edited\n")
    (kernels / "fa2_fwd_hdim96_bf16_sm90.cu").unlink()
    (kernels / "stray.cu").write_text("")
    problems = stale_files(config.matrices.values(), kernels)
    assert sorted(problems) == ["differs fa2_fwd_hdim64_fp16_sm90.cu", "extra stray.cu",
                               "missing fa2_fwd_hdim96_bf16_sm90.cu"]
    written, removed = write_kernels(config.matrices.values(), kernels)
    assert sorted(written) == ["fa2_fwd_hdim64_fp16_sm90.cu", "fa2_fwd_hdim96_bf16_sm90.cu"]
    assert removed == ["stray.cu"]
    assert stale_files(config.matrices.values(), kernels) == []


def test_registry_lists_exactly_the_entry_kernels(repo):
    plan = make_plan(load_config(repo / "matrix.yaml").matrix("full"), repo)
    lines = [l for l in registry_text(plan.entries[0].kernels).splitlines() if l.startswith("FAS_")]
    # One TU per (family, head dim, dtype, causal) that matrix.yaml's full entry lists.
    declared = sum(len(k.head_dims) * len(k.dtypes) * len(k.causal) for k in plan.entries[0].entry.kernels)
    assert len(lines) == len(plan.entries[0].kernels) == declared
    assert 'FAS_FA2_FWD(cutlass::bfloat16_t, FAS_DTYPE_BF16, 128, true, "fa2")' in lines
    assert 'FAS_SM90_PREFILL(FAS_DTYPE_FP16, FAS_DTYPE_FP16, 64, false, "sm90")' in lines
    assert 'FAS_SM90_PREFILL(FAS_DTYPE_E4M3, FAS_DTYPE_BF16, 128, true, "sm90")' in lines
    assert 'FAS_SM90_PREFILL(FAS_DTYPE_E4M3, FAS_DTYPE_FP16, 192, false, "sm90")' in lines
    assert 'FAS_PAGED(FAS_DTYPE_BF16, FAS_DTYPE_BF16, 128, true, 16, "paged")' in lines
    assert 'FAS_PAGED(FAS_DTYPE_BF16, FAS_DTYPE_E4M3, 128, true, 16, "paged_e4m3kv")' in lines
    assert 'FAS_PAGED(FAS_DTYPE_FP16, FAS_DTYPE_FP16, 256, false, 64, "paged")' in lines
    assert 'FAS_SM90_PAGED(FAS_DTYPE_BF16, 128, true, "sm90_paged")' in lines
    assert 'FAS_SM90_PACKED(FAS_DTYPE_BF16, 96, false, "sm90_packed")' in lines


def test_registry_defaults_every_family_macro_to_nothing_and_undefines_it(repo):
    """Each C includer defines only its own family's macro; the others must expand to nothing,
    and none may leak past the include (src/fa2/launch.cu includes it twice)."""
    plan = make_plan(load_config(repo / "matrix.yaml").matrix("smoke"), repo)
    lines = registry_text(plan.entries[0].kernels).splitlines()
    macros = ("FAS_FA2_FWD", "FAS_FA2_FWD_SPLIT", "FAS_SM90_PREFILL", "FAS_SM90_SOFTCAP", "FAS_SM90_PACKED",
              "FAS_SM90_PAGED", "FAS_SM90_PAGED_SOFTCAP", "FAS_SM90_WINDOWED_FP8", "FAS_SM90_FP8_SOFTCAP",
              "FAS_PAGED")
    entry = lines.index('FAS_PAGED(FAS_DTYPE_FP16, FAS_DTYPE_FP16, 64, true, 16, "paged")')
    for macro in macros:
        guard = lines.index(f"#ifndef {macro}")
        assert lines[guard + 1].startswith(f"#define {macro}(") and lines[guard + 2] == "#endif"
        assert guard < entry < lines.index(f"#undef {macro}")
    assert "#define FAS_SM90_PREFILL(InEnum, OutEnum, HeadDim, IsCausal, InfoFamily)" in lines
    assert sum(line.startswith("#define ") for line in lines) == len(macros), "a shared macro is defaulted once"


def test_dtype_values_are_the_headers_fas_dtype_enum(repo):
    """SM90 template arguments and registry lines use these; the header is the truth."""
    import re

    from flashbuild.config.kernel_sources import DTYPES

    header = (repo / "src" / "include" / "flash_attn_standalone.h").read_text()
    enum = {name: int(value) for name, value in re.findall(r"\b(FAS_DTYPE_\w+)\s*=\s*(\d+)", header)}
    assert {d.api: d.value for d in DTYPES.values()} == enum


def test_registry_declares_each_kernel_under_its_code_paths_guard(repo):
    """The C registries declare no kernel by hand: src/fa2/launch.cu, src/sm90/registry.cpp and
    src/paged/registry.cpp define FAS_DECLARE_<PATH> and include the generated declarations."""
    plan = make_plan(load_config(repo / "matrix.yaml").matrix("minimal"), repo)
    kernels = plan.entries[0].kernels
    lines = registry_text(kernels).splitlines()
    sections = {}
    for path in ("fa2", "sm90", "paged"):
        start, end = lines.index(f"#ifdef FAS_DECLARE_{path.upper()}"), lines.index(f"#undef FAS_DECLARE_{path.upper()}")
        sections[path] = lines[start + 1:end]
        assert lines[end + 1] == "#endif", "a second #include declares nothing again"
    assert sum(len(body) for body in sections.values()) == len(kernels), "one declaration per kernel TU"
    assert ("namespace fas_paged { template <> cudaError_t launch_paged<FAS_DTYPE_BF16, FAS_DTYPE_BF16, 128, true, 16>"
            "(const LaunchArgs&, cudaStream_t); template <> cudaError_t occupancy_paged<FAS_DTYPE_BF16, FAS_DTYPE_BF16, "
            "128, true, 16>(DecodeShape, int*); }") in sections["paged"]
    assert ("namespace fas_fa2 { template <typename Element, int HeadDim, bool Causal> void run_fwd("
            "FLASH_NAMESPACE::Flash_fwd_params&, cudaStream_t); extern template void run_fwd<cutlass::half_t, 64, true>"
            "(FLASH_NAMESPACE::Flash_fwd_params&, cudaStream_t); }") in sections["fa2"]
    for source, path in (("src/fa2/launch.cu", "fa2"), ("src/sm90/registry.cpp", "sm90"),
                         ("src/paged/registry.cpp", "paged")):
        text = (repo / source).read_text()
        assert f"#define FAS_DECLARE_{path.upper()}\n#include \"kernel_registry.inc\"" in text, source
        assert "template <>" not in text and "extern template" not in text, f"{source} declares a kernel by hand"
