"""Verified library -> versioned artifact: artifacts/<version>/<entry>/ with lib/ (and its
consumer packages, packages.py), include/, bin/, manifest.json and SHA256SUMS, plus a tarball
beside it and the files a caller derives from the finished tarball (its provenance).

Everything is assembled under hidden names (a staging folder, the tarball and its .sha256
as `.*.<pid>.partial`) and published only when complete (`_publish`). The .sha256 is the
artifact's completeness marker: it is removed before anything is replaced and renamed into
place last, so that a kill between the renames leaves a folder or tarball with no .sha256 beside
it: an unfinished export, which `up_to_date` does not accept and the next build replaces.
Leftovers of a dead build (staging, `.old-*` folders, partial files) are removed by the next.
The tarball is deterministic: entries sorted, owned by 0:0 with no names, modes 0755 / 0644,
every mtime the build time (build_time.py), gzip without a timestamp or file name; the same
inputs give the same bytes.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import gzip
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Callable

from flashbuild.core.build_time import BuildTime
from flashbuild.core.errors import ExportError
from flashbuild.core.hashing import sha256_of
from flashbuild.core.interrupts import deferred
from flashbuild.core.library import PRODUCT, LibraryName
from flashbuild.release.manifest import schema_problem
from flashbuild.release.packages import write_packages
from flashbuild.core.processes import left_by_dead_process

MANIFEST_SCHEMA = 1


def tarball_name(version: str, entry: str) -> str:
    return f"{PRODUCT}-{version}-{entry}.tar.gz"


def digest_path(tarball: Path) -> Path:
    """The tarball's .sha256 (`sha256sum -c` reads it): the marker of a complete export."""
    return tarball.with_name(f"{tarball.name}.sha256")


@contextlib.contextmanager
def publish_lock(version_dir: Path):
    """One publisher at a time in a version's folder (two builds of one clone, or of clones that
    share artifacts/): the second waits, then replaces the first's complete export with its own.
    The lock is on the folder itself, so no lock file is left among the artifacts; publishing
    is a few renames, so entries need no locks of their own."""
    handle = os.open(version_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # releases the lock


def _publish(staging: Path, tmp_tarball: Path, tmp_digest: Path, final_dir: Path, tarball: Path,
             extras: dict[Path, Path]) -> None:
    """Put a complete export in place of the previous one. Renames within one folder, the
    marker (.sha256) removed first and renamed in last; signals are held back until done.
    `extras` (final path -> staged path) go beside the tarball; files beside it that an earlier
    export made and this one does not are removed."""
    digest = digest_path(tarball)
    previous = final_dir.with_name(f".old-{final_dir.name}-{os.getpid()}")
    shutil.rmtree(previous, ignore_errors=True)  # this process's own, from an export that failed midway
    with publish_lock(final_dir.parent), deferred():
        digest.unlink(missing_ok=True)  # from here on the old artifact no longer counts as complete
        if final_dir.exists():
            os.replace(final_dir, previous)
        os.replace(staging, final_dir)
        os.replace(tmp_tarball, tarball)
        for final, staged in extras.items():
            os.replace(staged, final)
        for stale in tarball.parent.glob(f"{tarball.name}.*"):
            if stale not in extras and stale != digest:
                stale.unlink()
        os.replace(tmp_digest, digest)  # complete again: the new folder, tarball and marker
    shutil.rmtree(previous, ignore_errors=True)


def _populate(staging: Path, library: Path, headers: list[Path], test_binary: Path) -> None:
    lib = staging / "lib"
    lib.mkdir(parents=True)
    shutil.copy2(library, lib / library.name)
    LibraryName.of_file(library.name).make_links(lib)
    (staging / "include").mkdir()
    for header in headers:
        shutil.copy2(header, staging / "include" / header.name)
    (staging / "bin").mkdir()
    shutil.copy2(test_binary, staging / "bin" / test_binary.name)
    write_packages(staging, LibraryName.of_file(library.name))


def _file_hashes(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): sha256_of(path)
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


def _normalized(info: tarfile.TarInfo, mtime: int) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = mtime
    if not info.issym():
        info.mode = 0o755 if info.isdir() or info.mode & 0o111 else 0o644
    return info


def write_tarball(path: Path, folder: Path, top: str, mtime: int) -> None:
    """folder as top/... in a gzip'd tar at path, byte for byte the same for the same files."""
    entries = [folder, *sorted(folder.rglob("*"), key=lambda p: p.relative_to(folder).as_posix())]
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as zipped, \
            tarfile.open(fileobj=zipped, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for entry in entries:
            name = top if entry == folder else f"{top}/{entry.relative_to(folder).as_posix()}"
            info = _normalized(tar.gettarinfo(str(entry), arcname=name), mtime)
            if info.isreg():
                with open(entry, "rb") as data:
                    tar.addfile(info, data)
            else:
                tar.addfile(info)


# (tarball name, its sha256) -> {suffix: bytes}: files written beside the tarball as
# <tarball name><suffix>, e.g. the provenance statement and its signature.
Beside = Callable[[str, str], dict[str, bytes]]


def export_artifact(artifacts_root: Path, entry: str, library: Path, headers: list[Path],
                    test_binary: Path, manifest: dict, when: BuildTime,
                    beside: Beside | None = None) -> tuple[Path, Path]:
    """Write artifacts/<version>/<entry>/ and its tarball atomically (the version is the
    library's, from its real name); `when` dates the manifest and the tarball's entries.
    `beside` makes the files that go next to the tarball; they are staged and published with it.
    Returns both paths."""
    version = LibraryName.of_file(library.name).version_string
    version_dir = artifacts_root / version
    final_dir = version_dir / entry
    tarball = version_dir / tarball_name(version, entry)
    top = f"{PRODUCT}-{version}-{entry}"
    pid = os.getpid()  # in every hidden name, so that only a dead build's leftovers are cleaned
    try:
        version_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".staging-{entry}-{pid}-", dir=version_dir))
    except OSError as exc:
        raise ExportError(f"cannot create {version_dir}: {exc.strerror}") from None
    tmp_tarball = version_dir / f".{tarball.name}.{pid}.partial"
    tmp_digest = version_dir / f".{digest_path(tarball).name}.{pid}.partial"
    extras: dict[Path, Path] = {}  # final path -> staged path
    try:
        staging.chmod(0o755)  # mkdtemp makes it private; the artifact is for others to read
        _populate(staging, library, headers, test_binary)
        files = _file_hashes(staging)
        manifest = {**manifest, "manifest_schema": MANIFEST_SCHEMA, "product": PRODUCT, "version": version,
                    "entry": entry, "files": files,
                    "created_utc": datetime.datetime.fromtimestamp(when.epoch, datetime.timezone.utc).isoformat(),
                    "created_from": when.source}
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        sums = _file_hashes(staging)
        (staging / "SHA256SUMS").write_text("".join(f"{h}  {p}\n" for p, h in sorted(sums.items())))
        write_tarball(tmp_tarball, staging, top, when.epoch)
        digest = sha256_of(tmp_tarball)
        for suffix, data in (beside(tarball.name, digest) if beside else {}).items():
            final = version_dir / f"{tarball.name}{suffix}"
            extras[final] = version_dir / f".{final.name}.{pid}.partial"
            extras[final].write_bytes(data)
        tmp_digest.write_text(f"{digest}  {tarball.name}\n")
        _publish(staging, tmp_tarball, tmp_digest, final_dir, tarball, extras)
    except OSError as exc:
        raise ExportError(f"writing the artifact for {entry} failed: {exc}") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        tmp_tarball.unlink(missing_ok=True)
        tmp_digest.unlink(missing_ok=True)
        for staged in extras.values():
            staged.unlink(missing_ok=True)
    return final_dir, tarball


def up_to_date(artifacts_root: Path, version: str, entry: str, artifact_key: str) -> Path | None:
    """The exported folder of entry if it was built from inputs with this key (its manifest says
    so) and its tarball and files still match their recorded sha256; else None (build it)."""
    folder = artifacts_root / version / entry
    tarball = folder.parent / tarball_name(version, entry)
    digest_file = digest_path(tarball)
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        recorded = digest_file.read_text().split()[0]
    except (OSError, ValueError, IndexError):
        return None
    if schema_problem(manifest) is not None:  # not what an export writes: export again
        return None
    if manifest["artifact_key"] != artifact_key or not tarball.is_file() or sha256_of(tarball) != recorded:
        return None
    for name, digest in manifest["files"].items():
        path = folder / name
        if not path.is_file() or sha256_of(path) != digest:
            return None
    return folder


def clean_stale_staging(artifacts_root: Path) -> None:
    """Remove what an export of a build that is gone left behind: staging folders, previous
    artifacts moved aside (`.old-*`) and partial tarballs and digests. A live build's stay."""
    for pattern in ("*/.staging-*", "*/.old-*", "*/.*.partial"):
        for leftover in artifacts_root.glob(pattern):
            if left_by_dead_process(leftover.name):
                if leftover.is_dir() and not leftover.is_symlink():
                    shutil.rmtree(leftover, ignore_errors=True)
                else:
                    leftover.unlink(missing_ok=True)
