"""Tile-shape tuning of the SM90 kernels: builds one library per tile table and times them
against SDPA cuDNN in the same run. A measuring tool for choosing src/sm90/tiles.h, not part
of the release pipeline (which builds in the CUDA 12 container); it compiles with whatever
nvcc the GPU machine has, so its numbers pick shapes, and the exported build is measured again
with bench_attention.py.

    python3 bench/tune_tiles.py pack .devcarry/tune-headers.tar.xz         # here: upstream headers
    python3 bench/tune_tiles.py build --headers H.tar.xz --out OUT --jobs 16  # GPU machine
    python3 bench/tune_tiles.py bench --out OUT                             # GPU machine, torch

Every variant library holds the same kernels (bf16 hdim 64/128/256 and FP8 hdim 128/256 with bf16
output, causal and not); a variant's table (TABLES below) replaces tiles.h's through
FAS_SM90_TILES_OVERRIDE, so its planner and kernels agree; `--softcap` adds the softcap
family's kernels (head dims 128/256, the 16-bit tiles: a table gives softcap and plain kernels one
shape, so the library's own softcap shape at hd256 non-causal is table s6's). Objects whose shape equals another
variant's are compiled once. Experiments: `build --first-include DIR` puts DIR's src/-relative
headers ahead of ours (another scheduler), `--nvcc CMD` compiles with another toolkit (e.g.
`docker exec NAME nvcc`), `--head-dims` / `--no-fp8` build fewer kernels; `bench --out` takes
several output folders, and an exported artifact unpacked as OUT/default is one more column.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import os
import shlex
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the pipeline's kernel records and registry generator (stdlib only)
from flashbuild.compile.kernelgen import registry_text  # noqa: E402
from flashbuild.config.build_plan import KernelTU  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
# The matrix's hopper flags plus the arch, and FlashInfer's defines, as dev builds take them.
from dev_library import FLAGS, FLASHINFER_DEFINES  # noqa: E402
FLASHINFER = "third_party/flashinfer-python-0.7.2.post1/flashinfer/data"
FA2_SRC = "third_party/flash-attn-2.8.3/flash_attn-2.8.3/csrc/flash_attn/src"
# What the SM90 and host TUs include from the pinned upstreams (archive name -> repo path).
HEADER_ROOTS = {
    "fi/include": f"{FLASHINFER}/include",
    "fi/cutlass/include": f"{FLASHINFER}/cutlass/include",
    "fi/cutlass/tools/util/include": f"{FLASHINFER}/cutlass/tools/util/include",
    "fi/cccl/cub": f"{FLASHINFER}/cccl/cub",
    "fi/cccl/libcudacxx/include": f"{FLASHINFER}/cccl/libcudacxx/include",
    "fi/cccl/thrust": f"{FLASHINFER}/cccl/thrust",
    "fa2": FA2_SRC,
}

# Alternatives within shared memory (Q + stages * (K + V [+ V^T for FP8]) <= 227 KiB); FP8's
# PV GEMM needs kv rows divisible by 32 (and 224 does not compile). Keys (fp8, head_dim, causal) not named keep the
# library's own shapes (src/sm90/tiles.h, read by compiling it: library_tiles()).
# Measured alternatives and why they lost: docs/design/sm90-tiles.md.
TABLES = {
    "default": {},
    "v1": {(False, 64, True): (128, 192, 2),
           (False, 128, False): (128, 176, 2),
           (False, 256, False): (128, 80, 2), (False, 256, True): (128, 80, 2)},
    "v2": {(True, 256, False): (128, 64, 2), (True, 256, True): (128, 64, 2),
           (False, 64, True): (128, 128, 2),
           (False, 128, False): (128, 160, 2),
           (False, 256, True): (128, 80, 2)},
    # FlashInfer's hdim 128 full shape, kept for comparison (docs/design/sm90-tiles.md, run F).
    "v3": {(False, 128, False): (128, 192, 2)},
    # FP8 hdim 128 with three consumer warpgroups (192x96 does not compile); docs/design/sm90-tiles.md.
    "v4": {(True, 128, False): (192, 128, 2), (True, 128, True): (192, 128, 2)},
    # Head dims 96 and 192 (16-bit only), against the library's choice (docs/design/sm90-tiles.md).
    "h1": {(False, 96, False): (192, 144, 2), (False, 96, True): (192, 128, 2),
           (False, 192, False): (128, 96, 2), (False, 192, True): (128, 112, 2)},
    "h2": {(False, 96, False): (128, 128, 2), (False, 96, True): (192, 96, 2),
           (False, 192, False): (128, 80, 2), (False, 192, True): (128, 64, 2)},
    "h3": {(False, 96, False): (128, 176, 2), (False, 96, True): (128, 176, 2),
           (False, 192, False): (128, 64, 2), (False, 192, True): (128, 96, 2)},
    # FP8 hdim 96 (our V transpose: kv rows a multiple of 64) against the library's 128 x 192 x 2: both lost
    # (docs/design/fp8-speed.md, "Head dim 96").
    "f1": {(True, 96, False): (128, 192, 3), (True, 96, True): (128, 192, 3)},
    "f2": {(True, 96, False): (128, 128, 2), (True, 96, True): (128, 128, 2)},
    # Three consumer warpgroups (160 registers): one's exponentials behind two others' GEMMs; lost 2-11% on
    # four of six rows (docs/design/fp8-speed.md, "The transpose through ldmatrix.trans").
    "f3": {(True, 96, False): (192, 128, 2), (True, 96, True): (192, 128, 2)},
    # 256 keys a tile: the per-tile softmax work (row maxima, O rescale, barriers) over a third more keys.
    "f4": {(True, 96, False): (128, 256, 2), (True, 96, True): (128, 256, 2)},
    # 16-bit hd128 with wider key tiles (build --softcap): softcap's per-tile work (row maxima, O rescale,
    # barriers) over more keys; docs/design/softcap.md.
    "s1": {(False, 128, False): (128, 160, 2), (False, 128, True): (128, 160, 2)},
    "s2": {(False, 128, False): (128, 176, 2), (False, 128, True): (128, 176, 2)},
    "s3": {(False, 128, False): (128, 192, 2), (False, 128, True): (128, 192, 2)},
    # Three consumer warpgroups at 16-bit hd128 (160 registers: S, P and O fit at 96 or 64 keys): two
    # warpgroups' GEMMs in turn while the third runs softcap's tanh and exponentials.
    "s4": {(False, 128, False): (192, 96, 2), (False, 128, True): (192, 96, 2)},
    "s5": {(False, 128, False): (192, 64, 2), (False, 128, True): (192, 64, 2)},
    # 16-bit hd256 non-causal with the causal kernel's 80 keys (build --softcap --head-dims 256; 96 do not fit shared
    # memory): softcap's per-tile work over more keys, where the causal softcap kernel runs 0.96 of plain and this one 0.86.
    "s6": {(False, 256, False): (128, 80, 2)},
}
# The kernels every variant library holds: (fp8, head_dim, causal); FP8 with bf16 output.
KERNELS = [(fp8, hd, c) for fp8 in (False, True) for hd in (64, 96, 128, 192, 256) for c in (False, True)
           if hd != 64 or not fp8]


def library_tiles(work: Path) -> dict:
    """(fp8, head_dim, causal) -> (query rows, kv rows, stages) of src/sm90/tiles.h, by compiling
    and running a tiny host program against it (no second copy of the table to drift)."""
    source = work / "print_tiles.cpp"
    source.write_text('#include <cstdio>\n#include <initializer_list>\n#include "sm90/tiles.h"\nint main() {\n'
                      "    for (int fp8 = 0; fp8 < 2; ++fp8)\n"
                      "        for (int hd : {64, 96, 128, 192, 256})\n"
                      "            for (int causal = 0; causal < 2; ++causal) {\n"
                      "                const fas_sm90::TileShape t = fas_sm90::tile_shape(fp8, hd, causal);\n"
                      '                std::printf("%d %d %d %d %d %d\\n", fp8, hd, causal, t.q_rows, t.kv_rows, t.stages);\n'
                      "            }\n}\n")
    binary = work / "print_tiles"
    run(["nvcc", "-std=c++17", f"-I{REPO}/src", "-o", str(binary), str(source)])
    printed = subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout
    table = {}
    for line in printed.splitlines():
        fp8, hd, causal, q, kv, stages = map(int, line.split())
        table[(bool(fp8), hd, bool(causal))] = (q, kv, stages)
    return table


def table_of(variant: str, library: dict) -> dict:
    return {**library, **TABLES[variant]}


def kernel_tu(fp8: bool, head_dim: int, causal: bool, flavor: str = "") -> KernelTU:
    """The pipeline's TU for a variant kernel (bf16 output; FP8 inputs for the FP8 family);
    flavor "softcap" or "packed" for those families (16-bit)."""
    family = {"softcap": "sm90_softcap_prefill", "packed": "sm90_packed_prefill"}.get(
        flavor, "sm90_fp8_prefill" if fp8 else "sm90_prefill")
    return KernelTU(family, head_dim, "bf16", causal)


def override_header(table: dict) -> str:
    lines = ["// Written by bench/tune_tiles.py: a tuning table for src/sm90/tiles.h.",
             "constexpr TileShape tile_shape(bool fp8, int head_dim, bool causal, TileFor kind = TileFor::kVarlen) {",
             "    if (kind == TileFor::kPaged) return {0, 0, 0};  // tuning builds hold no paged kernels"]
    for (fp8, hd, causal), (q, kv, stages) in sorted(table.items()):
        lines.append(f"    if (fp8 == {str(fp8).lower()} && head_dim == {hd} && causal == {str(causal).lower()}) "
                     f"return {{{q}, {kv}, {stages}}};")
    lines += ["    return {0, 0, 0};", "}", ""]
    return "\n".join(lines)


def registry(kernels) -> str:
    """The build's kernel_registry.inc, written by the pipeline's own generator."""
    return registry_text([kernel_tu(*key) for key in kernels])


def pack(archive: Path) -> None:
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:xz", preset=3) as tar:
        for name, path in HEADER_ROOTS.items():
            tar.add(REPO / path, arcname=name)
    print(f"{archive}: {archive.stat().st_size / 2**20:.1f} MiB")


def run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} ... failed:\n{result.stderr[-3000:]}")


def build(headers: Path, out: Path, jobs: int, first_include: Path | None = None, variants=None,
          nvcc=("nvcc",), head_dims=(64, 128, 256), fp8=True, softcap=False, packed=False) -> None:
    kernels = [(*key, "") for key in KERNELS if key[1] in head_dims and (fp8 or not key[0])]
    if softcap:  # the softcap family exists at 128 and 256; its tiles are the 16-bit kernel's
        kernels += [(False, hd, causal, "softcap") for hd in (128, 256) if hd in head_dims for causal in (False, True)]
    if packed:  # non-causal only; its tiles are the non-causal 16-bit kernel's
        kernels += [(False, hd, False, "packed") for hd in head_dims]
    out = out.resolve()  # the tile override is #included by path, relative to the TU's folder
    root = out / "headers"
    if not root.exists():
        root.mkdir(parents=True)
        with tarfile.open(headers) as tar:
            tar.extractall(root)
    upstream = [f"-I{root}/fi/cccl/cub", f"-I{root}/fi/cccl/libcudacxx/include", f"-I{root}/fi/cccl/thrust",
                f"-I{root}/fi/include", "-isystem", f"{root}/fi/cutlass/include",
                "-isystem", f"{root}/fi/cutlass/tools/util/include", *FLASHINFER_DEFINES,
                # Any table's GEMM widths: CuTe's extended GMMA shapes in every kernel TU (sm90/tiles.h).
                "-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED"]
    # first_include: a folder whose src/-relative headers replace ours (experiments).
    own = ([f"-I{first_include.resolve()}"] if first_include else []) + [f"-I{REPO}/src/include", f"-I{REPO}/src"]
    gen = out / "gen"
    gen.mkdir(parents=True, exist_ok=True)
    (gen / "kernel_registry.inc").write_text(registry(kernels))
    objects = out / "objects"
    objects.mkdir(exist_ok=True)
    library_table = library_tiles(gen)
    # Objects are reused by name, so the name carries what they are built from: our sources (and an
    # experiment's headers) and the compiler command. Without it a second build after a change of src/ linked
    # the old objects into the variants whose shapes it had built before.
    tree = hashlib.sha256(" ".join(nvcc).encode())
    for folder in [REPO / "src", *([first_include] if first_include else [])]:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            tree.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    tree_key = tree.hexdigest()[:10]

    # One object per distinct (kernel, shape); host objects per variant (the planner reads the table).
    jobs_by_object: dict[Path, list[str]] = {}
    variant_objects: dict[str, list[Path]] = {}
    for variant in variants or TABLES:
        table = table_of(variant, library_table)
        header = gen / f"tiles_{variant}.h"
        header.write_text(override_header(table))
        override = f'-DFAS_SM90_TILES_OVERRIDE="{header}"'
        mine = []
        for key in kernels:
            q, kv, stages = table[key[:3]]
            tu = kernel_tu(*key)
            source = REPO / tu.source
            obj = objects / f"{source.stem}_q{q}_kv{kv}_s{stages}_{tree_key}.o"
            jobs_by_object.setdefault(obj, [*nvcc, "-c", *FLAGS, *upstream, *own, override, "-o", str(obj),
                                            str(source)])
            mine.append(obj)
        # The schedule reads the tile table: one object per variant.
        plan_obj = objects / f"sm90_schedule_{variant}_{tree_key}.o"
        jobs_by_object[plan_obj] = [*nvcc, "-c", *FLAGS, *own, override, "-o", str(plan_obj),
                                    str(REPO / "src/sm90/schedule.cu")]
        mine.append(plan_obj)
        variant_objects[variant] = mine
    # The rest of the host code (src/core, src/api, src/fa2, the SM90 registry and plan), named by the
    # kernel set: its registry is compiled in, so another --head-dims needs other objects.
    kernel_set = hashlib.sha256(registry(kernels).encode()).hexdigest()[:12]
    api_flags = [*FLAGS, *own, f"-I{REPO}/src/standins", f"-I{gen}", "-DFAS_VERSION_MAJOR=0",
                 "-DFAS_VERSION_MINOR=0", "-DFAS_VERSION_PATCH=0"]
    fa2_flags = [f"-I{root}/fa2", "-isystem", f"{root}/fi/cutlass/include"]  # FA2 headers, for src/fa2 only
    def sources(folder: str) -> list[Path]:
        return sorted(path for path in (REPO / folder).iterdir() if path.suffix in (".c", ".cpp", ".cu"))

    host_sources = [*sources("src/core"), *sources("src/api"), REPO / "src/sm90/registry.cpp", REPO / "src/sm90/plan.cu",
                    *sources("src/fa2"), *sources("src/paged")]
    api_objs = []
    for source in host_sources:
        obj = objects / f"{source.parent.name}_{source.stem}_{kernel_set}_{tree_key}.o"
        extra = fa2_flags if source.parent.name == "fa2" else []
        jobs_by_object[obj] = [*nvcc, "-c", *api_flags, *extra, "-o", str(obj), str(source)]
        api_objs.append(obj)
    pending = {obj: argv for obj, argv in jobs_by_object.items() if not obj.exists()}
    print(f"compiling {len(pending)} objects with {jobs} jobs", flush=True)
    failed = set()
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = {pool.submit(run, argv): obj for obj, argv in pending.items()}
        for future in concurrent.futures.as_completed(futures):
            try:
                future.result()
                print(f"  {futures[future].name}", flush=True)
            except RuntimeError as error:  # a shape the templates reject: drop its variant
                failed.add(futures[future])
                print(f"  FAILED {futures[future].name}: {str(error)[-400:]}", flush=True)

    for variant, mine in variant_objects.items():
        if failed & (set(mine) | set(api_objs)):
            print(f"skipped {variant}: an object failed to compile", flush=True)
            continue
        lib_dir = out / variant / "lib"
        lib_dir.mkdir(parents=True, exist_ok=True)
        library = lib_dir / "libflash_attn_standalone.so.0.0.0"
        run([*nvcc, "-shared", "-gencode=arch=compute_90a,code=sm_90a", "--cudart=static",
             f"-Xlinker=--version-script={REPO}/src/exports.map", "-o", str(library), *map(str, mine), *map(str, api_objs)])
        bin_dir = out / variant / "bin"
        bin_dir.mkdir(exist_ok=True)
        run([*nvcc, "-O2", "-std=c++17", f"-I{REPO}/src/include", f"-I{REPO}/tests/gpu", "-Xcompiler=-pthread",
             # Relative, so a variant folder built here runs where it is copied to (scripts/gpu_variants.sh).
             "-Xlinker=-rpath,$ORIGIN/../lib", "-o", str(bin_dir / "test_varlen_inference"),
             *map(str, sorted((REPO / "tests/gpu").glob("*.cpp"))), f"-L{lib_dir}", f"-l:{library.name}"])
        print(f"linked {variant}", flush=True)


def bench(outs: list[Path], repeats: int, seqlens=(1024, 4096, 16384), head_dims=(64, 128, 256),
          extra_dims=()) -> None:
    """extra_dims: (head dim, served by) rows for 16-bit head dims that a built one serves by round-up."""
    import torch
    from torch.nn.attention import SDPBackend

    sys.path.insert(0, str(REPO / "bench"))
    import common as ba

    with tempfile.TemporaryDirectory() as work:
        library_table = library_tiles(Path(work))
    libs = {(f"{out.name}:" if len(outs) > 1 else "") + variant: ba.Library(out / variant)
            for out in outs for variant in TABLES if (out / variant / "lib").exists()}
    heads, total = 16, 16384
    print(f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; cuDNN {torch.backends.cudnn.version()}")
    print("TFLOPS, plan reused; ratio to SDPA cuDNN in brackets; shapes (q rows, kv rows, stages) per variant\n")
    print("| kernel | batch x seqlen | cuDNN | " + " | ".join(libs) + " |")
    print("| --- | --- | --- |" + " --- |" * len(libs))
    rows = [(fp8, hd, causal, hd) for fp8, hd, causal in KERNELS if hd in head_dims]
    rows += [(False, hd, causal, served) for hd, served in extra_dims for causal in (False, True)]
    for fp8, hd, causal, served in rows:
        for seqlen in seqlens:
            batch = total // seqlen
            shape = (batch * seqlen, heads, hd)
            q, k, v = (torch.randn(shape, dtype=torch.bfloat16, device="cuda") for _ in range(3))
            out_t = torch.empty_like(q)
            flops = 4.0 * batch * heads * seqlen * seqlen * hd / (2 if causal else 1)
            four = [q.view(batch, seqlen, heads, hd), k.view(batch, seqlen, heads, hd),
                    v.view(batch, seqlen, heads, hd)]
            inputs = [t.to(torch.float8_e4m3fn) for t in (q, k, v)] if fp8 else [q, k, v]
            fns = {"cudnn": ba.sdpa_fn(SDPBackend.CUDNN_ATTENTION, *four, causal)}
            for variant, lib in libs.items():
                try:
                    fns[variant] = lib.plan_fns(*inputs, out_t, causal, [seqlen] * batch)[0]
                except RuntimeError:  # e.g. an exported artifact without this kernel
                    pass
            times = ba.median_ms_each(fns, repeats)  # in shuffled rounds: same clocks for all
            cudnn = times["cudnn"]
            cells = []
            for variant in libs:
                if variant not in times:
                    cells.append("not built")
                    continue
                ms = times[variant]
                shape_text = "x".join(map(str, table_of(variant.split(":")[-1], library_table)[(fp8, served, causal)]))
                cells.append(f"{ba.tflops(flops, ms)} [{ba.ratio(ms, cudnn) if not fp8 else '-'}] ({shape_text})")
            name = f"{'fp8->bf16' if fp8 else 'bf16'} hd{hd} {'causal' if causal else 'full'}"
            print(f"| {name} | {batch}x{seqlen} | {ba.tflops(flops, cudnn)} | " + " | ".join(cells) + " |", flush=True)
    # The Qwen2.5-VL-3B-like varlen GQA batch of bench_attention.py (cuDNN: one call per sequence).
    lengths = ba.QWEN_VARLEN_LENGTHS
    q = torch.randn(sum(lengths), 16, 128, dtype=torch.bfloat16, device="cuda")
    k, v = (torch.randn(sum(lengths), 2, 128, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    out_t = torch.empty_like(q)
    flops = sum(4.0 * 16 * n * n * 128 / 2 for n in lengths)
    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    pieces = [[t[a:a + n].unsqueeze(0) for t in (q, k, v)] for a, n in zip(starts, lengths)]
    per_sequence = [ba.sdpa_fn(SDPBackend.CUDNN_ATTENTION, *piece, True) for piece in pieces]
    fns = {"cudnn": lambda: [fn() for fn in per_sequence]}
    for variant, lib in libs.items():
        try:
            fns[variant] = lib.plan_fns(q, k, v, out_t, True, lengths)[0]
        except RuntimeError:
            pass
    times = ba.median_ms_each(fns, repeats)
    cudnn = times["cudnn"]
    cells = [f"{ba.tflops(flops, times[v])} [{ba.ratio(times[v], cudnn)}]" if v in times else "not built"
             for v in libs]
    print(f"| bf16 hd128 causal GQA 16/2 | varlen 7 seqs | {ba.tflops(flops, cudnn)} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack")
    p.add_argument("archive", type=Path)
    b = sub.add_parser("build")
    b.add_argument("--headers", type=Path, required=True)
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--jobs", type=int, default=os.cpu_count())
    b.add_argument("--first-include", type=Path, help="folder of src/-relative headers that replace ours")
    b.add_argument("--variants", nargs="+", choices=sorted(TABLES), help="build only these tables")
    b.add_argument("--nvcc", default="nvcc", help="compiler command, e.g. 'docker exec NAME nvcc' for another toolkit")
    b.add_argument("--head-dims", type=int, nargs="+", default=[64, 128, 256], help="kernels of these head dims only")
    b.add_argument("--no-fp8", action="store_true", help="leave out the FP8 kernels")
    b.add_argument("--softcap", action="store_true", help="add the softcap kernels (head dims 128/256)")
    b.add_argument("--packed", action="store_true", help="add the packed kernels (sm90_packed_prefill)")
    t = sub.add_parser("bench")
    # Each OUT holds variant folders (default, v1, ...); an exported artifact placed as
    # OUT/default compares the release build with these in the same run.
    t.add_argument("--out", type=Path, nargs="+", required=True)
    t.add_argument("--repeats", type=int, default=5)
    t.add_argument("--seqlens", type=int, nargs="+", default=[1024, 4096, 16384], help="16384 tokens of each")
    t.add_argument("--head-dims", type=int, nargs="+", default=[64, 128, 256], help="kernel rows of these head dims")
    t.add_argument("--round-up", nargs="*", default=[], metavar="HD:KERNEL_HD",
                   help="rows for head dims served by a wider kernel, e.g. 80:96")
    args = parser.parse_args()
    if args.command == "pack":
        pack(args.archive)
    elif args.command == "build":
        build(args.headers, args.out, args.jobs, args.first_include, args.variants, tuple(shlex.split(args.nvcc)),
              tuple(args.head_dims), not args.no_fp8, args.softcap, args.packed)
    else:
        bench(args.out, args.repeats, tuple(args.seqlens), tuple(args.head_dims),
              tuple(tuple(map(int, pair.split(":"))) for pair in args.round_up))


if __name__ == "__main__":
    main()
