"""verify against small real ELF files built here with g++: a library shaped like ours
(fake instantiations in namespace flash, a version script) passes; each kind of breakage
fails with a report that names it. (cuobjdump checks run in the end-to-end test, inside
the toolchain container.)"""

import shutil
import subprocess

import pytest

from flashbuild.release import checks
from flashbuild.core.errors import VerifyError

pytestmark = pytest.mark.skipif(not shutil.which("g++"), reason="needs g++ and binutils")

SOURCE = r"""
#include <cstdio>
#include <string>
namespace cutlass { struct half_t {}; struct bfloat16_t {}; }
struct CUstream_st;
namespace flash {
struct Flash_fwd_params { int b; };
template <typename T, int D, bool C> void run_mha_fwd_(Flash_fwd_params &, CUstream_st *);
%(instantiations)s
}
extern "C" __attribute__((visibility("default"))) int fas_fwd(int x) { return x + 1; }
extern "C" __attribute__((visibility("default"))) const char *fas_get_last_error(void) { return ""; }
extern "C" __attribute__((visibility("default"))) int fas_debug_hook(void) { return (int)std::to_string(42).size(); }
"""

INSTANTIATION = ("template <> __attribute__((noinline)) void run_mha_fwd_<cutlass::%s, %d, %s>"
                 "(Flash_fwd_params &p, CUstream_st *) { p.b += %d; }")
WANT = ("flash::run_mha_fwd_<cutlass::half_t, 64, false>", "flash::run_mha_fwd_<cutlass::bfloat16_t, 128, true>")
API = ("fas_fwd", "fas_get_last_error")


def host_run(argv):
    result = subprocess.run(argv, capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr


def build_library(tmp_path, instantiations=(("half_t", 64, "false"), ("bfloat16_t", 128, "true")),
                  exports=API, soname="libflash_attn_standalone.so.0", static_cxx=True):
    body = "\n".join(INSTANTIATION % (t, d, c, i) for i, (t, d, c) in enumerate(instantiations))
    source = tmp_path / "lib.cpp"
    source.write_text(SOURCE % {"instantiations": body})
    script = tmp_path / "exports.map"
    script.write_text("{\n  global:\n" + "".join(f"    {name};\n" for name in exports) + "  local: *;\n};\n")
    library = tmp_path / "libflash_attn_standalone.so.0.1.0"
    argv = ["g++", "-shared", "-fPIC", "-O1", "-o", str(library), str(source), f"-Wl,-soname,{soname}",
            f"-Wl,--version-script={script}"] + (["-static-libstdc++", "-static-libgcc"] if static_cxx else [])
    subprocess.run(argv, check=True)
    return library


def check(library, exports=API, max_glibc=(99, 0)):
    # The glibc limit is the build container's policy; this host's g++ is another glibc.
    report = checks.Report(library.name)
    expect = checks.Expectation(symbols=WANT, exports=exports, soname="libflash_attn_standalone.so.0", archs=(),
                                max_glibc=max_glibc)
    checks.verify_library(host_run, library, expect, report)
    return report


def failed(report):
    return [c.name for c in report.checks if not c.ok]


def test_well_formed_library_passes(tmp_path):
    report = check(build_library(tmp_path))
    assert report.ok, report.render()


def test_missing_instantiation_is_named(tmp_path):
    report = check(build_library(tmp_path, instantiations=(("half_t", 64, "false"),)))
    assert failed(report) == ["nm: all 2 planned instantiations are in the library"]
    assert "flash::run_mha_fwd_<cutlass::bfloat16_t, 128, true>" in report.render()
    with pytest.raises(VerifyError, match="FAIL"):
        checks.raise_if_failed(report, "rebuild")


def test_extra_exported_symbol_is_named(tmp_path):
    report = check(build_library(tmp_path, exports=API + ("fas_debug_hook",)))
    assert failed(report) == ["nm -D: exports exactly the 2 C API functions"]
    assert "exported but not in src/exports.map: fas_debug_hook" in report.render()


def test_wrong_soname(tmp_path):
    report = check(build_library(tmp_path, soname="libflash_attn_standalone.so"))
    assert failed(report) == ["readelf: SONAME is libflash_attn_standalone.so.0"]


def test_dynamic_libstdcxx_is_outside_the_needed_policy(tmp_path):
    report = check(build_library(tmp_path, static_cxx=False))
    assert "readelf: NEEDED within policy" in failed(report)
    assert "libstdc++.so.6" in report.render()


def test_exports_map_lists_names_and_matches_the_header(repo):
    import re

    names = checks.exported_api(repo / "src" / "exports.map")
    header = "".join(h.read_text() for h in (repo / "src" / "include").glob("flash_attn_standalone*.h"))
    declared = set(re.findall(r"FAS_API\s+[^;(]*?\b(fas_\w+)\s*\(", header))
    assert declared == set(names)


def test_wildcard_exports_are_refused(tmp_path):
    script = tmp_path / "exports.map"
    script.write_text("{ global: fas_*; local: *; };\n")
    with pytest.raises(VerifyError, match="wildcards"):
        checks.exported_api(script)


def test_glibc_newer_than_policy_is_named(tmp_path):
    report = check(build_library(tmp_path), max_glibc=(2, 2))
    assert failed(report) == ["glibc symbol versions <= 2.2 (newest required: " +
                              report.render().split("newest required: ")[1].split(")")[0] + ")"]
    assert "older hosts cannot load it" in report.render()


def _object_tools(kernels: int):
    """nm and cuobjdump of one split-KV object holding `kernels` kernels (their output shapes)."""
    symbol = "void fas_fa2::run_split<cutlass::bfloat16_t, 128, false>(flash::Flash_fwd_params&, CUstream_st*)"
    usage = "Resource usage:\n Common:\n  GLOBAL:0\n" + "".join(
        f" Function _Z24flash_fwd_splitkv_kernelILi{i}EEv:\n  REG:255 STACK:0 SHARED:0 LOCAL:0\n" for i in range(kernels))

    def run(argv):
        if argv[0] == "nm":
            return 0, f"0000000000001000 T {symbol}\n"
        if argv[:2] == ["cuobjdump", "--list-elf"]:
            return 0, "ELF file    1: x.1.sm_90a.cubin\n"
        if argv[:2] == ["cuobjdump", "-res-usage"]:
            return 0, usage
        raise AssertionError(f"unexpected tool call {argv}")
    return run


def test_an_object_holding_another_kernel_count_than_its_family_promises_fails_naming_it(tmp_path):
    obj = tmp_path / "fa2_fwd_split_hdim128_bf16_sm90.o"
    obj.write_bytes(b"\0")
    objects = {obj.stem: (obj, "fas_fa2::run_split<cutlass::bfloat16_t, 128, false>", 24)}
    report = checks.Report("objects")
    checks.verify_objects(_object_tools(24), objects, ("sm_90a",), report)
    assert report.ok, report.render()
    report = checks.Report("objects")
    checks.verify_objects(_object_tools(50), objects, ("sm_90a",), report)
    assert not report.ok
    assert "holds exactly the 24 kernels" in report.render() and "it holds 50" in report.render()
    report = checks.Report("objects")  # a family that promises no count is not counted
    checks.verify_objects(_object_tools(50), {obj.stem: (*objects[obj.stem][:2], None)}, ("sm_90a",), report)
    assert report.ok and "kernels the API dispatches" not in report.render()
