"""manifest.json: what an artifact holds and what it promises.

`entry_manifest` writes the promise (the instantiations with their symbols, the exported
API and SONAME, the archs) beside the record of how the artifact was made (sources,
toolchain, flags; not per-TU costs, which differ between two builds of the same inputs); `expectation` reads the promise back. Build-time
verification and `invoke verify PATH` both check a library against `expectation(manifest)`,
so they check the same things. `read_manifest` reads an exported manifest.json and
refuses, as one VerifyError, a file that is not JSON or breaks manifest.schema.json;
`schema_problem` is the same check for a build deciding whether an export is up to date. Standard
library only (schema_lite.py validates): the standalone verifier (verifier.py) carries this module.
"""

from __future__ import annotations

import json
import pkgutil
from pathlib import Path

from flashbuild.release.checks import Expectation, Report, exported_api
from flashbuild.core.errors import VerifyError
from flashbuild.core.library import EXPORTS_MAP
from flashbuild.core.schema_lite import Validator

# What an exported manifest.json must hold (manifest.schema.json): the promise that verifying
# reads (`expectation`), the files with their digests (paths inside the artifact only), and the
# record of how it was made.
SCHEMA_FILE = "resources/manifest.schema.json"
# pkgutil: the file is also read from inside the standalone verifier's zip.
SCHEMA = json.loads(pkgutil.get_data("flashbuild", SCHEMA_FILE))
_VALIDATOR = Validator(SCHEMA)


def schema_problem(manifest) -> str | None:
    """Where and how `manifest` (parsed JSON) breaks the schema (its first violation), or None."""
    found = _VALIDATOR.first_problem(manifest)
    if found is None:
        return None
    path, message = found
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    return f"{where or '(top level)'}: {message}"


def _tu_rows(build) -> list[dict]:
    """What each TU is. Not what it cost: wall time, peak memory and cache hits differ on every
    build, and two builds of the same inputs must write the same manifest (the costs stay in
    build/tu-stats.json and the build log)."""
    rows = [{"name": tu.name, "kind": "kernel", "symbol": tu.symbol,
             **({"kernels": tu.kernels} if tu.kernels is not None else {}), "source": str(tu.source)}
            for tu in build.plan.kernels]
    rows += [{"name": tu.name, "kind": "host", "source": str(tu.source)} for tu in build.plan.hosts]
    return rows


def entry_manifest(matrix_name: str, build, fetched: dict, toolchain: dict, repo_root: Path) -> dict:
    """The manifest of one built entry (an EntryBuild), before verification."""
    return {
        "matrix": matrix_name,
        "sources": [{"name": f.pin.name, "version": f.pin.version, "filename": f.pin.filename, "sha256": f.pin.sha256}
                    for f in fetched.values()],
        "toolchain": toolchain,
        "archs": list(build.plan.entry.archs),
        "flags": [f.replace(str(repo_root), "$REPO") for f in build.compile_flags],
        "translation_units": _tu_rows(build),
        "api": {"soname": build.name.soname, "exports": list(exported_api(repo_root / EXPORTS_MAP))},
        "capabilities": [{"family": tu.family, "dtype": tu.dtype, "head_dim": tu.head_dim, "causal": tu.causal}
                         for tu in build.plan.kernels],
    }


def with_report(manifest: dict, report: Report) -> dict:
    return {**manifest, "verify": [{"check": c.name, "ok": c.ok} for c in report.checks]}


def read_manifest(path: Path) -> dict:
    """An exported manifest.json, checked against manifest.schema.json."""
    fix = ("restore it from the entry's tarball beside the folder, or rebuild the entry with "
           "`invoke build --matrix <matrix>`")
    try:
        manifest = json.loads(path.read_text())
    except OSError as exc:
        raise VerifyError(f"cannot read {path}: {exc.strerror}", fix=fix) from None
    except ValueError as exc:  # not JSON, or not UTF-8
        raise VerifyError(f"{path} is not valid JSON ({exc})", fix=fix) from None
    problem = schema_problem(manifest)
    if problem is not None:
        raise VerifyError(f"{path}: {problem}", fix=fix)
    return manifest


def expectation(manifest: dict) -> Expectation:
    return Expectation(
        symbols=tuple(tu["symbol"] for tu in manifest["translation_units"] if tu["kind"] == "kernel"),
        exports=tuple(manifest["api"]["exports"]),
        soname=manifest["api"]["soname"],
        archs=tuple(manifest["archs"]),
    )
