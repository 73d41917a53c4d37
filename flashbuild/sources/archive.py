"""Safe extraction of a source archive (tar, or a wheel's zip) into one folder, atomically.

Contract: every member lands inside the destination, and every link the archive makes points
inside it, or nothing is extracted. The project checks that itself, before extracting:
absolute names and `..` are refused, and each link target is resolved through the links
that earlier members made (a chain such as `l2 -> .`, `l1 -> l2/../outside` is refused,
though neither link looks like an escape alone). Python's `data` tar filter is a second
check, not the only one. Wheels may hold no links at all. A truncated or corrupt archive is
one SourceError naming the file; a partly extracted tree is never left behind.
"""

from __future__ import annotations

import gzip
import lzma
import os
import shutil
import stat
import tarfile
import tempfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from flashbuild.core.errors import SourceError

MAX_LINK_HOPS = 40  # as the kernel's own limit: more than this is a loop

REFUSE = "do not use this archive"


class _Escape(Exception):
    """A path that resolves to outside the extraction folder (or loops)."""

    def __init__(self, reason: str, loop: bool = False):
        super().__init__(reason)
        self.loop = loop


def _parts(path: str) -> list[str]:
    return [part for part in PurePosixPath(path).parts if part not in ("", ".")]


class LinkTree:
    """The symbolic links extracted so far (their folder, as a tuple of names, and their text),
    so that any later path can be resolved the way the file system will resolve it."""

    def __init__(self):
        self.links: dict[tuple[str, ...], str] = {}

    def resolve(self, folder: tuple[str, ...], relative: str) -> tuple[str, ...]:
        """`relative`, taken from `folder`, with every link on the way followed; raises _Escape
        when it goes above the root, names an absolute path, or loops."""
        if relative.startswith("/"):
            raise _Escape("an absolute path")
        pending = list(reversed(_parts(relative)))
        at = list(folder)
        hops = 0
        while pending:
            part = pending.pop()
            if part == "..":
                if not at:
                    raise _Escape("a path above the extraction folder")
                at.pop()
                continue
            target = self.links.get((*at, part))
            if target is None:
                at.append(part)
                continue
            hops += 1
            if hops > MAX_LINK_HOPS:
                raise _Escape(f"more than {MAX_LINK_HOPS} links followed", loop=True)
            if target.startswith("/"):
                raise _Escape(f"an absolute path (through the link {'/'.join((*at, part))} -> {target})")
            pending.extend(reversed(_parts(target)))  # a link's text is relative to its own folder
        return tuple(at)

    def recheck(self) -> None:
        """Every recorded link still resolves inside (a later link can change what an earlier
        one's path means)."""
        for location, target in self.links.items():
            try:
                self.resolve(location[:-1], target)
            except _Escape as escape:
                where = "into a loop of links" if escape.loop else "outside the tree"
                raise SourceError(f"archive member '{'/'.join(location)}' links to '{target}', {where} once later "
                                  f"links are in place ({escape})", fix=REFUSE) from None


def check_tar_members(members: list[tarfile.TarInfo]) -> None:
    """Refuse the archive unless every member, in extraction order, stays inside the tree."""
    tree = LinkTree()
    for member in members:
        name = member.name
        if name.startswith("/") or ".." in PurePosixPath(name).parts:
            raise SourceError(f"archive member '{name}' would land outside the tree", fix=REFUSE)
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise SourceError(f"archive member '{name}' is a device or fifo", fix=REFUSE)
        parts = _parts(name)
        try:
            folder = tree.resolve((), "/".join(parts[:-1]))
            if member.issym():
                tree.resolve(folder, member.linkname)
            else:  # files and hard links are written through a link already at their name
                tree.resolve((), name)
            if member.islnk():
                tree.resolve((), member.linkname)  # a hard link's name is relative to the root
        except _Escape as escape:
            what = f"links to '{member.linkname}'," if member.issym() or member.islnk() else "would be written"
            where = "into a loop of links" if escape.loop else "outside the tree"
            raise SourceError(f"archive member '{name}' {what} {where} ({escape})", fix=REFUSE) from None
        if member.issym() and parts:
            tree.links[(*folder, parts[-1])] = member.linkname  # replaces an earlier link there
            tree.recheck()


def _check_zip_members(bundle: zipfile.ZipFile) -> None:
    for info in bundle.infolist():
        name = info.filename
        if name.startswith("/") or ".." in PurePosixPath(name).parts:
            raise SourceError(f"archive member '{name}' would land outside the tree", fix=REFUSE)
        if stat.S_ISLNK(info.external_attr >> 16):
            raise SourceError(f"archive member '{name}' is a symbolic link", fix=REFUSE)


def safe_extract(archive: Path, destination: Path, fix: str | None = None) -> None:
    """Extract a tar or zip (wheel) archive to destination atomically. `fix` is what to do
    when the archive is unreadable (by default: delete it and fetch again)."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
    unreadable = fix or f"delete {archive} and fetch it again (`invoke fetch`)"
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as bundle:
                _check_zip_members(bundle)
                bundle.extractall(staging)
        else:
            with tarfile.open(archive) as tar:
                members = tar.getmembers()  # reads the whole archive: a truncated one fails here
                check_tar_members(members)
                tar.extractall(staging, members=members, filter="data")
        if destination.exists():
            shutil.rmtree(destination)
        os.replace(staging, destination)
    except tarfile.FilterError as exc:  # our own check let something through that Python's did not
        raise SourceError(f"{archive.name}: {exc}", fix=REFUSE) from None
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError) as exc:
        raise SourceError(f"{archive} is truncated or corrupt ({exc.__class__.__name__}: {exc})",
                          fix=unreadable) from None
    except OSError as exc:
        raise SourceError(f"cannot extract {archive} into {destination.parent}: {exc}",
                          fix="check the free space and permissions there") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
