"""A kernel family is one record: a synthetic family added to FAMILIES alone gets its plan,
its generated source, its compile flags, its registry line and its symbol."""

import dataclasses
import shutil

import pytest

from conftest import toy_matrix, write_tree
from flashbuild.config import families
from flashbuild.compile.compiler import EntryCompiler
from flashbuild.core.errors import ConfigError
from flashbuild.config.families import Family, Upstream
from flashbuild.config.kernel_sources import module_anchor
from flashbuild.compile.kernelgen import registry_text, write_kernels
from flashbuild.config.memory import estimate
from flashbuild.config.options import load_config
from flashbuild.config.build_plan import make_plan

TOY_UPSTREAM = Upstream("flashinfer-python", includes=("include",), system_includes=("cutlass",),
                        defines=("-DTOY_DECODE=1",))
TOY = Family(
    name="toy_decode", upstream=TOY_UPSTREAM, api_path="sm90", head_dims=(512,), dtypes=("bf16",),
    input_dtype=None, project_includes=True,
    render=lambda tu: f"// toy decode {tu.head_dim} {tu.dtype} {tu.causal}\n",
    symbol=lambda tu: f"fas_toy::decode<{tu.head_dim}, {str(tu.causal).lower()}>",
    registry_macro="FAS_TOY_DECODE", registry_params=("HeadDim", "IsCausal"),
    registry_args=lambda tu: (str(tu.head_dim), str(tu.causal).lower()), info_family="toy",
)

MATRIX = toy_matrix("toy_decode", "[512]", "[bf16]", "[false, true]", 2.5)


@pytest.fixture
def toy(monkeypatch, tmp_path, repo):
    monkeypatch.setitem(families.FAMILIES, TOY.name, TOY)
    write_tree(tmp_path, {"matrix.yaml": MATRIX, "VERSION": "0.1.0\n", "src/glibc_compat.c": ""})
    shutil.copytree(repo / "src" / "include", tmp_path / "src" / "include")
    return tmp_path


def test_plan_names_each_instantiation_of_the_record(toy):
    plan = make_plan(load_config(toy / "matrix.yaml").matrix("toy"), toy)
    kernels = plan.entries[0].kernels
    assert [tu.name for tu in kernels] == ["toy_decode_hdim512_bf16_sm90", "toy_decode_hdim512_bf16_causal_sm90"]
    assert [str(tu.source) for tu in kernels] == [f"kernels/{tu.name}.cu" for tu in kernels]
    assert plan.sources_needed == {"flashinfer-python"}
    assert estimate(plan.entries[0].entry, kernels[0].name, "toy_decode", {})[0] == int(2.5 * 1024**3)


def test_generator_writes_the_records_template(toy):
    written, _ = write_kernels(load_config(toy / "matrix.yaml").matrices.values(), toy / "kernels")
    assert sorted(written) == ["toy_decode_hdim512_bf16_causal_sm90.cu", "toy_decode_hdim512_bf16_sm90.cu"]
    text = (toy / "kernels" / "toy_decode_hdim512_bf16_causal_sm90.cu").read_text()
    assert text == "// toy decode 512 bf16 True\n" + module_anchor("toy_decode_hdim512_bf16_causal_sm90")


def test_compile_flags_and_key_come_from_the_records_upstream(toy, fake_build):
    config = load_config(toy / "matrix.yaml")
    write_kernels(config.matrices.values(), toy / "kernels")
    entry_plan = make_plan(config.matrix("toy"), toy).entries[0]
    compiler = EntryCompiler(toy, toy / "build", "toy", entry_plan, fake_build.image, fake_build.sources,
                             fake_build.container)
    spec = compiler.kernel_spec(entry_plan.kernels[0])
    root = fake_build.third_party / "flashinfer-python-0.7.2.post1" / "flashinfer" / "data"
    assert spec.flags[-4:] == [f"-I{(root / 'include').resolve()}",
                               "-isystem", str((root / "cutlass/include").resolve()), "-DTOY_DECODE=1"]
    assert f"-I{toy.resolve() / 'src'}" in spec.flags, "project_includes puts our src/ on the path"
    pinned = fake_build.sources["flashinfer-python"]
    repinned = dataclasses.replace(pinned, pin=dataclasses.replace(pinned.pin, sha256="f" * 64))
    compiler.sources = {**fake_build.sources, "flashinfer-python": repinned}
    assert compiler.kernel_spec(entry_plan.kernels[0]).key != spec.key, "the pin's sha256 is in the key"


def test_registry_and_symbol_follow_the_record(toy):
    kernels = make_plan(load_config(toy / "matrix.yaml").matrix("toy"), toy).entries[0].kernels
    lines = registry_text(kernels).splitlines()
    assert lines[lines.index("#ifndef FAS_TOY_DECODE") + 1] == "#define FAS_TOY_DECODE(HeadDim, IsCausal, InfoFamily)"
    assert 'FAS_TOY_DECODE(512, true, "toy")' in lines and "#undef FAS_TOY_DECODE" in lines
    assert "#ifndef FAS_FA2_FWD" in lines, "every family's macro is defaulted, built or not"
    assert [tu.symbol for tu in kernels] == ["fas_toy::decode<512, false>", "fas_toy::decode<512, true>"]


def test_matrix_may_list_only_what_the_record_allows(toy):
    text = (toy / "matrix.yaml").read_text()
    cases = {
        "head_dims: [512]": ("head_dims: [128]", "kernels[0].head_dims[0]: 128 is not allowed"),
        "dtypes: [bf16]": ("dtypes: [fp16]", "kernels[0].dtypes[0]: 'fp16' is not allowed"),
        "family: toy_decode": ("family: toy_prefill", "kernels[0].family: 'toy_prefill' is not allowed"),
        "toy_decode: 2.5}": ("fa2_fwd: 2.5}", "memory_estimates_gb: no estimate for toy_decode"),
    }
    for original, (replacement, message) in cases.items():
        (toy / "matrix.yaml").write_text(text.replace(original, replacement))
        with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
            load_config(toy / "matrix.yaml")


def test_matrix_may_list_only_the_causal_values_the_record_allows(toy, monkeypatch):
    monkeypatch.setitem(families.FAMILIES, TOY.name, dataclasses.replace(TOY, causal=(False,)))
    with pytest.raises(ConfigError, match=r"kernels\[0\]\.causal\[1\]: true is not allowed") as refused:
        load_config(toy / "matrix.yaml")
    assert refused.value.fix == "toy_decode exists for causal false"


def test_families_sharing_a_registry_macro_agree_on_its_parameters():
    seen = {}
    for family in families.FAMILIES.values():
        assert seen.setdefault(family.registry_macro, family.registry_params) == family.registry_params
        assert family.api_path in families.CODE_PATHS


def test_every_family_is_served_by_a_host_code_folder_that_exists(repo):
    for family in families.FAMILIES.values():
        assert family.api_path in families.CODE_PATHS, family.name
        folder = repo / families.CODE_PATHS[family.api_path].folder
        assert any(folder.glob("*.c*")), f"{family.name}: {folder} holds no host source"


def test_a_split_kv_tu_promises_only_the_variants_the_api_dispatches():
    """The count the build holds each split-KV object to (checks.verify_objects). Only fas_fwd
    splits, and it sets no window or softcap (src/fa2/plan.cpp), so a split TU compiles the even
    and uneven tiles and head dims and the combine kernels: the hd128 TUs 17 kernels (3 attention
    + 14 combine; 24 with the window and softcap variants, 50 under FA2's own launcher)."""
    from flashbuild.config.build_plan import KernelTU

    family = families.FAMILIES["fa2_fwd_split"]

    def count(head_dim, causal):
        return KernelTU(family="fa2_fwd_split", head_dim=head_dim, dtype="bf16", causal=causal).kernels

    assert count(128, False) == 17
    assert count(128, True) == count(128, False)  # no window variants to drop under a causal mask
    assert count(256, False) == count(128, False) - 1  # no even-tile variant above head dim 128
    assert all(count(d, c) > 14 for d in family.head_dims for c in (False, True))
    plain = KernelTU(family="fa2_fwd", head_dim=128, dtype="bf16", causal=True).kernels
    assert plain == 2 * (count(128, True) - 14)  # the forward TU keeps softcap (plans take it)
