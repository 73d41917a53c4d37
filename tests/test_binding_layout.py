"""bench/fas_ctypes.py mirrors src/include/flash_attn_standalone.h exactly.

A C program generated from the header's own typedefs (struct fields, enum constants) is
compiled with the host C compiler against the header (with a stub for the one CUDA type it
uses) and prints what the compiler laid out; the binding must agree on every struct's size and
alignment, its field list, each field's offset and size, and every enum constant. Function
prototypes are compared with the header's FAS_API declarations and src/exports.map.
"""

import ctypes
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import fas_ctypes  # noqa: E402

from flashbuild.compile.compiler import HEADERS as PUBLIC_HEADERS  # noqa: E402

HEADER = REPO / "src" / "include" / "flash_attn_standalone.h"
HEADERS = tuple(REPO / h for h in PUBLIC_HEADERS)  # the first includes the others
# The header's only use of the CUDA runtime is the stream type.
CUDA_STUB = "typedef struct CUstream_st* cudaStream_t;\n"


def header_text() -> str:
    text = "\n".join(h.read_text() for h in HEADERS)
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    # Macro bodies (FAS_FWD_ARGS_INIT) hold braces that are no declarations.
    return re.sub(r"#[^\n]*(?:\\\n[^\n]*)*", " ", text)


def header_structs() -> dict:
    """struct typedef name -> field names in order (opaque typedefs such as fas_plan have none)."""
    structs = {}
    for tag, body, name in re.findall(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", header_text(), re.S):
        fields = []
        for declaration in filter(str.strip, body.split(";")):
            # One field per declaration, plain or a fixed-size array (fas_merge_states_args.v).
            declaration = re.sub(r"\[\s*\w+\s*\]\s*$", "", declaration.strip())
            assert "," not in declaration and "[" not in declaration and "(" not in declaration, \
                f"{name}: the layout test's parser reads one field per declaration, not {declaration!r}"
            fields.append(re.search(r"(\w+)\s*$", declaration).group(1))
        structs[name] = fields
    return structs


def header_enums() -> dict:
    """enum typedef name -> constant names in order."""
    return {name: [re.match(r"\s*(\w+)", item).group(1) for item in body.split(",") if item.strip()]
            for name, body in ((n, b) for _, b, n in
                               re.findall(r"typedef\s+enum\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", header_text(), re.S))}


def header_functions() -> dict:
    """FAS_API function name -> (return type, [parameter types]) as written, names dropped."""
    functions = {}
    for returns, name, params in re.findall(r"FAS_API\s+([^;()]*?)\s*\b(fas_\w+)\s*\(([^)]*)\)\s*;",
                                            header_text()):
        types = [] if params.strip() == "void" else [re.sub(r"\w+\s*$", "", p).strip() for p in params.split(",")]
        functions[name] = (returns.strip(), types)
    return functions


def compiler() -> list:
    for candidate in (os.environ.get("CC", ""), "cc", "gcc", "clang"):
        command = shlex.split(candidate)
        if command and shutil.which(command[0]):
            return command
    pytest.fail("no C compiler (cc, gcc or clang, or $CC) on PATH: the binding layout test compiles a C "
                "program against the header; install one (CI images have gcc)")


def compile_against_header(work, source: str, output, *flags) -> None:
    """Compile C `source` against the header (with the CUDA stub) into `output`."""
    stub = work / "stub"
    stub.mkdir(exist_ok=True)
    (stub / "cuda_runtime_api.h").write_text(CUDA_STUB)
    source_file = work / (output.name + ".c")
    source_file.write_text(source)
    build = subprocess.run([*compiler(), "-std=c11", "-Wall", "-Werror", f"-I{stub}", f"-I{HEADER.parent}", *flags,
                            "-o", str(output), str(source_file)], capture_output=True, text=True)
    assert build.returncode == 0, f"{source_file.name} did not compile against the header:\n{build.stderr}"


@pytest.fixture(scope="module")
def laid_out(tmp_path_factory) -> dict:
    """What the C compiler says: {"sizeof X": n, "alignof X": n, "offsetof X.f": n, "sizeof X.f": n,
    "enum C": value, "sizeof enum E": n}."""
    work = tmp_path_factory.mktemp("layout")
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "flash_attn_standalone.h"', "int main(void) {"]
    for struct, fields in header_structs().items():
        lines.append(f'    printf("sizeof {struct} %zu\\n", sizeof({struct}));')
        lines.append(f'    printf("alignof {struct} %zu\\n", (size_t)_Alignof({struct}));')
        for field in fields:
            lines.append(f'    printf("offsetof {struct}.{field} %zu\\n", offsetof({struct}, {field}));')
            lines.append(f'    printf("sizeof {struct}.{field} %zu\\n", sizeof((({struct}*)0)->{field}));')
    for enum, constants in header_enums().items():
        lines.append(f'    printf("sizeof enum {enum} %zu\\n", sizeof({enum}));')
        for constant in constants:
            lines.append(f'    printf("enum {constant} %lld\\n", (long long){constant});')
    lines += ["    return 0;", "}", ""]
    binary = work / "layout"
    compile_against_header(work, "\n".join(lines), binary)
    printed = subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout
    return {key: int(value) for key, value in (line.rsplit(" ", 1) for line in printed.splitlines())}


def test_every_header_struct_has_a_mirror_and_no_mirror_lacks_a_struct():
    structs = {name for name, fields in header_structs().items() if fields}
    assert structs, "the parser found no struct in the header"
    assert structs - set(fas_ctypes.STRUCTS) == set(), "header structs without a mirror in bench/fas_ctypes.py"
    assert set(fas_ctypes.STRUCTS) - structs == set(), "mirrors in bench/fas_ctypes.py of no struct in the header"


def test_each_mirror_has_the_header_fields_in_the_header_order():
    for struct, fields in header_structs().items():
        if struct not in fas_ctypes.STRUCTS:
            continue
        mirrored = [name for name, _ in fas_ctypes.STRUCTS[struct]._fields_]
        assert [f for f in fields if f not in mirrored] == [], f"{struct}: header fields missing from the binding"
        assert [f for f in mirrored if f not in fields] == [], f"{struct}: binding fields not in the header"
        assert mirrored == fields, f"{struct}: field order differs from the header"


def test_each_mirror_has_the_compiled_size_alignment_and_field_offsets(laid_out):
    for struct, mirror in fas_ctypes.STRUCTS.items():
        assert ctypes.sizeof(mirror) == laid_out[f"sizeof {struct}"], f"sizeof({struct})"
        assert ctypes.alignment(mirror) == laid_out[f"alignof {struct}"], f"alignof({struct})"
        for field, _ in mirror._fields_:
            described = getattr(mirror, field)
            assert described.offset == laid_out[f"offsetof {struct}.{field}"], f"offsetof({struct}, {field})"
            assert described.size == laid_out[f"sizeof {struct}.{field}"], f"sizeof({struct}.{field})"


def test_each_enum_constant_has_the_header_value(laid_out):
    enums = header_enums()
    assert set(enums) == set(fas_ctypes.ENUMS), "enums of the header vs bench/fas_ctypes.py ENUMS"
    for enum, constants in enums.items():
        mirror, prefix = fas_ctypes.ENUMS[enum]
        assert laid_out[f"sizeof enum {enum}"] == ctypes.sizeof(fas_ctypes.ENUM_CTYPE), f"sizeof({enum})"
        mirrored = {prefix + member.name: member.value for member in mirror}
        header = {constant: laid_out[f"enum {constant}"] for constant in constants}
        assert mirrored == header, f"{enum}: constants of the binding (left) vs the header (right)"


def expected_ctype(c_type: str):
    """The ctypes type a C parameter or return type of the header must be declared with."""
    c_type = c_type.replace("const", "").replace(" ", "")
    if c_type == "void":
        return None
    if c_type == "char*":
        return ctypes.c_char_p
    if c_type in ("fas_plan*", "cudaStream_t"):  # opaque handles
        return ctypes.c_void_p
    if c_type.endswith("*"):
        return ctypes.POINTER(expected_ctype(c_type[:-1]))
    if c_type in fas_ctypes.STRUCTS:
        return fas_ctypes.STRUCTS[c_type]
    if c_type in fas_ctypes.ENUMS:
        return fas_ctypes.ENUM_CTYPE
    return {"int": ctypes.c_int, "size_t": ctypes.c_size_t}[c_type]


def test_prototypes_match_the_header_and_the_export_map():
    functions = header_functions()
    exported = set(re.findall(r"^\s*(fas_\w+);", (REPO / "src" / "exports.map").read_text(), re.M))
    assert set(functions) == exported, "FAS_API functions of the header vs src/exports.map"
    assert set(fas_ctypes.PROTOTYPES) == set(functions), "PROTOTYPES of bench/fas_ctypes.py vs the header"
    for name, (returns, params) in functions.items():
        restype, argtypes = fas_ctypes.PROTOTYPES[name]
        assert restype is expected_ctype(returns), f"{name}: return type {returns}"
        assert len(argtypes) == len(params), f"{name}: {len(params)} parameters in the header"
        for index, (declared, c_type) in enumerate(zip(argtypes, params)):
            assert declared is expected_ctype(c_type), f"{name}: parameter {index} ({c_type})"


def test_new_sets_struct_size_and_zeroes_the_rest():
    args = fas_ctypes.PlanRunArgs.new()
    assert args.struct_size == ctypes.sizeof(fas_ctypes.PlanRunArgs)
    assert args.q is None and args.stream is None


def test_plan_args_hold_the_offsets_of_the_lengths():
    args = fas_ctypes.plan_args([3, 0, 5], fas_ctypes.Dtype.BF16, 16, 2, 128, True)
    offsets = ctypes.cast(args.cu_seqlens_q, ctypes.POINTER(ctypes.c_int32))
    assert [offsets[i] for i in range(4)] == [0, 3, 3, 8]
    assert args.cu_seqlens_k == args.cu_seqlens_q and args.batch_size == 3 and args.causal == 1
    assert args.struct_size == ctypes.sizeof(fas_ctypes.PlanArgs)


def test_find_library_takes_only_the_real_name(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("libflash_attn_standalone.so", "libflash_attn_standalone.so.0",
                 "libflash_attn_standalone.so.0.1.0.bak"):
        (lib / name).write_bytes(b"")
    assert fas_ctypes.find_library(tmp_path) is None
    (lib / "libflash_attn_standalone.so.0.1.0").write_bytes(b"")
    assert fas_ctypes.find_library(tmp_path) == lib / "libflash_attn_standalone.so.0.1.0"


# A stand-in library built from the header: it accepts only the plan the test makes, so a
# struct or prototype the binding passes wrongly shows up as a refused call.
FAKE_LIBRARY = r"""
#include "flash_attn_standalone.h"
static const char* last_error = "";
static int token;
const char* fas_get_last_error(void) { return last_error; }
const char* fas_version_string(void) { return "9.8.7"; }
fas_status fas_plan_create(const fas_plan_args* a, fas_plan** plan) {
    *plan = 0;
    if (a->struct_size != sizeof(fas_plan_args) || a->batch_size != 3 || !a->cu_seqlens_q || !a->cu_seqlens_k
        || a->cu_seqlens_q[3] != 8
        || a->cu_seqlens_k[1] != 3 || a->dtype != FAS_DTYPE_E4M3 || a->out_dtype != FAS_DTYPE_BF16
        || a->num_heads_q != 16 || a->num_heads_k != 2 || a->head_dim != 128 || a->causal != 1) {
        last_error = "unexpected plan args";
        return FAS_ERROR_INVALID_ARGUMENT;
    }
    *plan = (fas_plan*)&token;
    return FAS_SUCCESS;
}
fas_status fas_plan_get_info(const fas_plan* plan, fas_plan_info* info) {
    if (plan != (const fas_plan*)&token || info->struct_size != sizeof(fas_plan_info)) return FAS_ERROR_INTERNAL;
    info->family = FAS_FAMILY_SM90;
    info->family_name = "sm90";
    info->device_bytes = (size_t)1 << 40;
    return FAS_SUCCESS;
}
"""


def test_library_passes_structs_the_c_side_reads_and_raises_with_the_last_error(tmp_path):
    (tmp_path / "lib").mkdir()
    compile_against_header(tmp_path, FAKE_LIBRARY, tmp_path / "lib" / "libflash_attn_standalone.so.9.8.7",
                           "-shared", "-fPIC")
    library = fas_ctypes.Library(tmp_path)
    assert library.version() == "9.8.7"
    Dtype = fas_ctypes.Dtype
    plan = library.plan_create(fas_ctypes.plan_args([3, 0, 5], Dtype.E4M3, 16, 2, 128, True, out_dtype=Dtype.BF16))
    info = library.plan_info(plan)
    assert (info.family, info.family_name, info.device_bytes) == (fas_ctypes.Family.SM90, b"sm90", 1 << 40)
    with pytest.raises(fas_ctypes.FasError, match="^fas status 1: unexpected plan args$") as refused:
        library.plan_create(fas_ctypes.plan_args([3, 0, 5], Dtype.BF16, 16, 2, 128, True, out_dtype=Dtype.BF16))
    assert refused.value.status == fas_ctypes.Status.ERROR_INVALID_ARGUMENT
