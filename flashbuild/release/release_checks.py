"""Checks of a released tarball as a consumer receives it, before and after unpacking.

In stages, each run only when every check before it passed (pipeline.verify_artifact), so that
nothing of a tarball that failed a check is unpacked or read:
1. Beside the tarball: its .sha256 must name it and match its bytes; its provenance statement
   (provenance.py) must name it with that digest; a signature, where present, must verify
   (against an allowed-signers file when one is given; one given for an unsigned tarball fails).
2. The gzip stream is read whole, its CRC and length checked, writing nothing, and refused past
   MAX_UNPACKED_BYTES of tar data; then the tar's members are read (at most MAX_MEMBERS files,
   folders and symbolic links, every path and link inside one folder named as the tarball) and
   extracted.
3. Every file there must match SHA256SUMS, with no file left out of it; pipeline.verify_artifact
   runs the artifact's own checks on the unpacked folder (none executes anything from it).
"""

from __future__ import annotations

import gzip
import json
import re
import tarfile
import zlib
from pathlib import Path

from flashbuild.release import provenance
from flashbuild.release.checks import Report
from flashbuild.core.errors import SourceError
from flashbuild.core.hashing import sha256_of

TARBALL_SUFFIX = ".tar.gz"
SUMS = "SHA256SUMS"
# An artifact holds ~20 files and 15-70 MB; a tarball beyond these is refused before extraction.
MAX_UNPACKED_BYTES = 1 << 30
MAX_MEMBERS = 10_000


def is_tarball(path: Path) -> bool:
    return path.is_file() and path.name.endswith(TARBALL_SUFFIX)


def check_digest(tarball: Path, report: Report) -> str:
    """The tarball's .sha256 names it and matches it; returns the tarball's sha256."""
    actual = sha256_of(tarball)
    digest_file = tarball.parent / f"{tarball.name}.sha256"
    try:
        recorded = digest_file.read_text().split()
    except OSError:
        report.add(f"{digest_file.name} is present", False, f"{digest_file} is missing: copy it with the tarball")
        return actual
    ok = len(recorded) == 2 and recorded[0] == actual and recorded[1].lstrip("*") == tarball.name
    report.add(f"{digest_file.name} matches the tarball", ok,
               f"recorded {' '.join(recorded)!r}, the tarball's sha256 is {actual}")
    return actual


def check_provenance(tarball: Path, digest: str, allowed_signers: Path | None, report: Report) -> None:
    statement_file = tarball.parent / f"{tarball.name}{provenance.SUFFIX}"
    signature = tarball.parent / f"{tarball.name}{provenance.SIGNATURE_SUFFIX}"
    try:
        data = statement_file.read_bytes()
        statement = json.loads(data)
    except OSError:
        report.add(f"{statement_file.name} is present", False,
                   f"{statement_file} is missing: copy it with the tarball, or rebuild (`invoke build`)")
        return
    except ValueError as exc:
        report.add(f"{statement_file.name} is an in-toto statement", False, f"not JSON: {exc}")
        return
    subjects = statement.get("subject") if isinstance(statement, dict) else None
    names = {(s.get("name"), (s.get("digest") or {}).get("sha256")) for s in subjects or [] if isinstance(s, dict)}
    ok = (statement.get("_type") == provenance.STATEMENT_TYPE
          and statement.get("predicateType") == provenance.PREDICATE_TYPE and (tarball.name, digest) in names)
    report.add(f"{statement_file.name}: SLSA v1 provenance of this tarball (sha256 {digest[:12]}...)", ok,
               f"type {statement.get('_type')}, predicate {statement.get('predicateType')}, subjects {sorted(names)}")
    if signature.is_file():
        ok, detail = provenance.check_signature(data, signature, allowed_signers)
        who = f"by a signer of {allowed_signers}" if allowed_signers else "(signer not checked: pass --allowed-signers)"
        report.add(f"{signature.name}: the provenance's signature verifies {who}", ok, detail)
    elif allowed_signers is not None:
        report.add(f"{signature.name} is present (--allowed-signers was given)", False,
                   f"{signature} is missing: the tarball was not signed, or its signature was not copied")


def check_stream(tarball: Path, report: Report) -> bool:
    """The gzip stream is whole (CRC and length of every member checked: tarfile alone stops at the
    tar's end marker, before the trailer) and holds at most MAX_UNPACKED_BYTES; nothing written."""
    total = 0
    try:
        with gzip.open(tarball, "rb") as stream:
            while chunk := stream.read(1 << 20):
                total += len(chunk)
                if total > MAX_UNPACKED_BYTES:
                    report.add(f"the tarball unpacks to at most {MAX_UNPACKED_BYTES >> 20} MiB", False,
                               f"it holds more than {MAX_UNPACKED_BYTES:,} bytes of tar data: not an artifact")
                    return False
    except (OSError, EOFError, zlib.error) as exc:
        report.add("the tarball is an intact gzip stream (CRC checked)", False, f"{exc.__class__.__name__}: {exc}")
        return False
    report.add(f"the tarball is an intact gzip stream (CRC checked), {total:,} bytes of tar data", True)
    return True


def unpack(tarball: Path, destination: Path, report: Report) -> Path | None:
    """Extract safely into destination: the one folder inside, named as the tarball; None with a
    failed check in report when the members are not an artifact's (check_stream first)."""
    from flashbuild.sources.archive import safe_extract

    top = tarball.name.removesuffix(TARBALL_SUFFIX)
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            members = tar.getmembers()
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        report.add("the tarball is a tar archive", False, f"{exc.__class__.__name__}: {exc}")
        return None
    wrong = [m.name for m in members if not (m.isfile() or m.isdir() or m.issym())][:5]
    if len(members) > MAX_MEMBERS or wrong:
        report.add(f"the tarball holds at most {MAX_MEMBERS:,} files, folders and symbolic links", False,
                   f"{len(members):,} members" + (f"; hard links or devices: {', '.join(wrong)}" if wrong else ""))
        return None
    outside = [m.name for m in members if m.name != top and not m.name.startswith(f"{top}/")][:5]
    if outside:
        report.add(f"everything in the tarball lies in {top}/", False, "elsewhere: " + ", ".join(outside))
        return None
    target = destination / "unpacked"
    try:
        safe_extract(tarball, target)
    except SourceError as error:
        report.add("the tarball unpacks", False, error.message)
        return None
    report.add(f"the tarball unpacks into the one folder {top}/", (target / top).is_dir())
    return target / top if (target / top).is_dir() else None


def check_sums(folder: Path, report: Report) -> None:
    """Every file of the artifact (links aside) matches its line of SHA256SUMS, and none is unlisted."""
    try:
        lines = (folder / SUMS).read_text().splitlines()
    except OSError:
        report.add(f"{SUMS} is present", False, f"{folder / SUMS} is missing")
        return
    listed, wrong = {}, []
    for line in lines:
        match = re.fullmatch(r"([0-9a-f]{64})  (.+)", line)
        if not match:
            wrong.append(f"malformed line: {line!r}")
            continue
        listed[match.group(2)] = match.group(1)
    for name, digest in sorted(listed.items()):
        path = folder / name
        if not path.is_file() or path.is_symlink() or not path.resolve().is_relative_to(folder.resolve()):
            wrong.append(f"{name}: missing")
        elif sha256_of(path) != digest:
            wrong.append(f"{name}: sha256 differs")
    present = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}
    wrong += [f"{name}: not in {SUMS}" for name in sorted(present - set(listed) - {SUMS})]
    report.add(f"{SUMS}: every file of the artifact matches", not wrong, "\n".join(wrong))
