"""Verifying an exported artifact as its consumer receives it: a tarball in stages (release_checks:
what lies beside it, the gzip stream, the members), then the unpacked folder (manifest.json, the
library against it, SHA256SUMS, the consumer packages). Standard library only: `invoke verify`
(pipeline.verify_artifact) and the standalone verifier (verifier.py) both run this code, and
differ only in how the library's checks run (`LibraryChecks`): with nm, readelf and cuobjdump on
the host, or, in a clone without them, in the toolchain container.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Callable

from flashbuild.release import checks, package_checks, release_checks
from flashbuild.core.errors import ConfigError, VerifyError
from flashbuild.core.library import REAL_NAME_GLOB, STEM, LibraryName
from flashbuild.release.manifest import expectation, read_manifest

# (library, expectation(manifest), manifest, report): adds the library's checks to report.
LibraryChecks = Callable[[Path, checks.Expectation, dict, checks.Report], None]
TOOLS_CHECK = "the library's checks can run (nm, readelf, cuobjdump on PATH)"


def host_library_checks(library: Path, expect: checks.Expectation, manifest: dict, report: checks.Report) -> None:
    """The library's checks with the host's tools, or one failed check naming those it lacks."""
    run = checks.host_runner()
    if run is None:
        missing = [tool for tool in checks.LIBRARY_TOOLS if not shutil.which(tool)]
        report.add(TOOLS_CHECK, False,
                   f"{', '.join(missing)} not found: install binutils (nm, readelf) and the CUDA toolkit's "
                   "cuobjdump, or verify in a clone of the build repository (`invoke verify`, which uses its "
                   "container)")
        return
    checks.verify_library(run, library, expect, report)


def check_allowed_signers(allowed_signers: Path | None) -> None:
    if allowed_signers is not None and not allowed_signers.is_file():
        raise ConfigError(f"the allowed-signers file {allowed_signers} does not exist",
                          fix="one line per signer: `<identity> <public key>` (see the README's release section)")


def verify_tarball(tarball: Path, allowed_signers: Path | None, library_checks: LibraryChecks) -> checks.Report:
    """Each stage only after every earlier check passed; nothing of a refused tarball is unpacked."""
    report = checks.Report(str(tarball))
    digest = release_checks.check_digest(tarball, report)
    release_checks.check_provenance(tarball, digest, allowed_signers, report)
    if report.ok and release_checks.check_stream(tarball, report):
        with tempfile.TemporaryDirectory(prefix="flashbuild-verify-") as scratch:
            folder = release_checks.unpack(tarball, Path(scratch), report)
            if folder is not None:
                verify_folder(folder, folder, report, library_checks, unpacked=True)
    if not report.ok and not any(c.name.startswith("SHA256SUMS") for c in report.checks):
        report.note("the tarball's contents were not checked (nor unpacked, where a check before that "
                    "failed): verify stops at the first stage that fails")
    return report


def verify_folder(folder: Path, target: Path, report: checks.Report, library_checks: LibraryChecks,
                  unpacked: bool = False) -> None:
    """The library (target, or the one in folder/lib) against folder's manifest.json, every file
    against SHA256SUMS, and the consumer packages."""
    manifest_path = folder / "manifest.json"
    if not manifest_path.is_file():
        if unpacked:  # a tarball's contents: a failed check of it, not a mistaken argument
            report.add("manifest.json is present", False, "the tarball holds no manifest.json: not an artifact")
            return
        raise ConfigError(f"no manifest.json in {folder}",
                          fix=f"pass artifacts/<version>/<entry>/ or its lib/{STEM}.so.X.Y.Z")
    try:
        manifest = read_manifest(manifest_path)
    except VerifyError as error:
        if not unpacked:
            raise
        report.add("manifest.json holds what an export writes", False,
                   error.message.replace(str(folder), folder.name))  # the tarball's path, not a scratch folder's
        return
    package_checks.require_tools()  # before the library's checks, which may start a container
    if target.is_dir():
        candidates = sorted((folder / "lib").glob(REAL_NAME_GLOB))
        if not candidates:
            raise VerifyError(f"{folder}/lib holds no {REAL_NAME_GLOB}")
        library = candidates[0]
    else:
        library = target
    library_checks(library, expectation(manifest), manifest, report)
    release_checks.check_sums(folder, report)
    package_checks.verify_packages(folder, LibraryName.of_file(library.name), report)
