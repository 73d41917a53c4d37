"""A development build of the library: the host code plus a chosen few kernel TUs, compiled with
whatever nvcc is on PATH (this machine's or the GPU machine's), for measuring kernel changes in
minutes instead of a matrix build. Not the release pipeline (which builds in the CUDA 12
container and verifies); the exported build is measured again before any number is committed.

    python3 bench/dev_library.py --out .devcarry/dev/base paged_decode_hdim128_bf16_causal_sm90 ...
    python3 bench/dev_library.py --out OUT --define FAS_X=1 KERNEL...   # a variant: extra -D flags

OUT gets lib/libflash_attn_standalone.so.0.0.0, include/ (the layout bench scripts' `--artifact`
takes) and bin/test_varlen_inference. Kernel TUs are named as in kernels/ (without .cu). Objects are cached beside
OUT (../objects) by their command line and the sources of src/, so a second variant (another OUT)
recompiles only what its flags or sources change.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the pipeline's kernel records and registry generator (stdlib only)
from flashbuild.compile.kernelgen import registry_text  # noqa: E402
from flashbuild.config.build_plan import KernelTU  # noqa: E402

FLASHINFER = REPO / "third_party/flashinfer-python-0.7.2.post1/flashinfer/data"
FA2_SRC = REPO / "third_party/flash-attn-2.8.3/flash_attn-2.8.3/csrc/flash_attn/src"
FA2_CUTLASS = REPO / "third_party/flash-attn-2.8.3/flash_attn-2.8.3/csrc/cutlass/include"
# The matrix's hopper flag set (matrix.yaml) plus the arch, spelled here so that this script needs
# no YAML parser on the GPU machine (tests/test_dev_library.py holds the two equal).
FLAGS = ["-O3", "-std=c++17", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
         "-U__CUDA_NO_HALF2_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "--expt-relaxed-constexpr",
         "--expt-extended-lambda", "--use_fast_math", "-DCUTLASS_ENABLE_GDC_FOR_SM90",
         "-gencode=arch=compute_90a,code=sm_90a", "-Xcompiler=-fPIC"]
# FlashInfer's defines (families.py's FLASHINFER_SM90 record; the test holds the two equal).
FLASHINFER_DEFINES = ["-DFLASHINFER_ENABLE_F16", "-DFLASHINFER_ENABLE_BF16", "-DNDEBUG",
                      "-DFLASHINFER_CUTLASS_UTILS_CUH_"]
UPSTREAM = [f"-I{FLASHINFER}/cccl/cub", f"-I{FLASHINFER}/cccl/libcudacxx/include", f"-I{FLASHINFER}/cccl/thrust",
            f"-I{FLASHINFER}/include", "-isystem", f"{FLASHINFER}/cutlass/include",
            "-isystem", f"{FLASHINFER}/cutlass/tools/util/include", *FLASHINFER_DEFINES]
OWN = [f"-I{REPO}/src/include", f"-I{REPO}/src"]


def kernel_tu(name: str) -> KernelTU:
    """The KernelTU whose generated source is kernels/NAME.cu."""
    from flashbuild.config.families import FAMILIES
    for family in sorted(FAMILIES, key=len, reverse=True):
        if not name.startswith(family + "_hdim"):
            continue
        rest = name[len(family) + len("_hdim"):].removesuffix("_sm90").split("_")
        causal = rest[-1] == "causal"
        dtype = (rest[:-1] if causal else rest)[-1]
        return KernelTU(family, int(rest[0]), dtype, causal)
    raise SystemExit(f"{name}: not a kernel TU name (see kernels/)")


def kernel_flags(tu: KernelTU) -> list[str]:
    """A kernel TU's upstream include set and defines: FA2's (its tree, its CUTLASS, the ATen/c10
    stand-ins, its switches) or FlashInfer's, then our own headers."""
    from flashbuild.config.families import FLASH_ATTN
    if tu.record.upstream is FLASH_ATTN:
        return [f"-I{FA2_SRC}", f"-I{FA2_CUTLASS}", f"-I{REPO}/src/standins", *FLASH_ATTN.defines, *OWN]
    return [*UPSTREAM, *OWN]


def compile_all(jobs: dict[Path, list[str]], workers: int) -> None:
    pending = {obj: argv for obj, argv in jobs.items() if not obj.exists()}
    print(f"compiling {len(pending)} of {len(jobs)} objects with {workers} jobs", flush=True)

    def one(obj: Path, argv: list[str]) -> None:
        partial = obj.with_suffix(".partial.o")
        result = subprocess.run([*argv, "-o", str(partial)], capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{obj.name}:\n{result.stderr[-4000:]}")
        partial.rename(obj)
        print(f"  {obj.name}", flush=True)

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for future in [pool.submit(one, obj, argv) for obj, argv in pending.items()]:
            future.result()


def build(names: list[str], out: Path, workers: int, defines: list[str], nvcc: str = "nvcc") -> Path:
    kernels = [kernel_tu(name) for name in names]
    out = out.resolve()
    gen, objects = out / "gen", out.parent / "objects"  # objects shared by sibling variants
    for folder in (gen, objects):
        folder.mkdir(parents=True, exist_ok=True)
    (gen / "kernel_registry.inc").write_text(registry_text(kernels))
    extra = [f"-D{d}" for d in defines]
    jobs: dict[Path, list[str]] = {}
    # Every object's key: its command, the registry and the project's own sources (any header may
    # be included; the pinned upstreams do not change under a path).
    tree = hashlib.sha256((gen / "kernel_registry.inc").read_bytes())
    for path in sorted((REPO / "src").rglob("*")):
        if path.is_file():
            tree.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())

    def job(source: Path, flags: list[str]) -> Path:
        argv = [nvcc, "-c", *FLAGS, *flags, *extra, str(source)]
        key = hashlib.sha256("\0".join(argv).encode() + tree.digest() + source.read_bytes()).hexdigest()[:16]
        obj = objects / f"{source.parent.name}_{source.stem}_{key}.o"
        jobs[obj] = argv
        return obj

    linked = [job(REPO / tu.source, kernel_flags(tu)) for tu in kernels]
    api_flags = [*OWN, f"-I{REPO}/src/standins", f"-I{gen}", "-DFAS_VERSION_MAJOR=0", "-DFAS_VERSION_MINOR=0",
                 "-DFAS_VERSION_PATCH=0"]
    for folder in ("src/core", "src/api", "src/fa2", "src/sm90", "src/paged"):
        for source in sorted((REPO / folder).iterdir()):
            if source.suffix not in (".cpp", ".cu"):
                continue
            # src/fa2 sees FA2's headers; src/sm90's .cu host files and src/paged's append the upstream.
            flags = [f"-I{FA2_SRC}", "-isystem", f"{FLASHINFER}/cutlass/include"] if folder == "src/fa2" else UPSTREAM
            linked.append(job(source, [*flags, *api_flags]))
    compile_all(jobs, workers)
    lib = out / "lib"
    lib.mkdir(exist_ok=True)
    library = lib / "libflash_attn_standalone.so.0.0.0"
    subprocess.run([nvcc, "-shared", "-gencode=arch=compute_90a,code=sm_90a", "--cudart=static",
                    f"-Xlinker=--version-script={REPO}/src/exports.map", "-o", str(library), *map(str, linked)],
                   check=True)
    shutil.copytree(REPO / "src/include", out / "include", dirs_exist_ok=True)
    (out / "bin").mkdir(exist_ok=True)
    subprocess.run([nvcc, "-O2", "-std=c++17", f"-I{REPO}/src/include", f"-I{REPO}/tests/gpu", "-Xcompiler=-pthread",
                    "-Xlinker=-rpath,$ORIGIN/../lib", "-o", str(out / "bin/test_varlen_inference"),
                    *map(str, sorted((REPO / "tests/gpu").glob("*.cpp"))), f"-L{lib}", f"-l:{library.name}"],
                   check=True)
    print(f"{library}: {len(kernels)} kernel TU(s), and bin/test_varlen_inference", flush=True)
    return library


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernels", nargs="+", help="kernel TU names (kernels/NAME.cu)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    parser.add_argument("--define", action="append", default=[], help="extra -D for every TU (a variant)")
    parser.add_argument("--nvcc", default="nvcc")
    args = parser.parse_args()
    build(args.kernels, args.out, args.jobs, args.define, args.nvcc)


if __name__ == "__main__":
    main()
