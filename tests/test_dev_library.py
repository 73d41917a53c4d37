"""bench/dev_library.py spells the matrix's nvcc flags and FlashInfer's defines itself (it runs on
the GPU machine without a YAML parser); a dev build must compile with the flags the pipeline uses,
or its timings and device code describe another build."""
import importlib.util
from pathlib import Path

from flashbuild.compile.compiler import gencode_flags
from flashbuild.config.options import load_config

REPO = Path(__file__).resolve().parents[1]


def _dev_library():
    spec = importlib.util.spec_from_file_location("dev_library", REPO / "bench" / "dev_library.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dev_builds_compile_with_every_matrix_entrys_flags_and_arch():
    flags = _dev_library().FLAGS
    config = load_config(REPO / "matrix.yaml")
    for matrix in config.matrices.values():
        for entry in matrix.entries:
            assert flags == [*entry.flags, *gencode_flags(entry.archs), "-Xcompiler=-fPIC"], (
                f"bench/dev_library.py FLAGS differ from matrix.yaml entry {entry.name}: update the list")


def test_dev_builds_compile_flashinfer_tus_with_the_records_defines():
    from flashbuild.config.families import FLASHINFER_SM90
    dev = _dev_library()
    assert dev.FLASHINFER_DEFINES == list(FLASHINFER_SM90.defines), (
        "bench/dev_library.py FLASHINFER_DEFINES differ from flashbuild/config/families.py FLASHINFER_SM90")
    assert [flag for flag in dev.UPSTREAM if flag.startswith("-D")] == dev.FLASHINFER_DEFINES
