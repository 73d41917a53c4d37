"""The library's names: real name, SONAME and linker name, and the symlinks between them.

VERSION (MAJOR.MINOR.PATCH) gives libflash_attn_standalone.so.MAJOR.MINOR.PATCH (the file),
.so.MAJOR (its SONAME, what programs record) and .so (what `-l` finds at link time).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flashbuild.core.errors import CompileError, FlashBuildError

PRODUCT = "flash_attn_standalone"
STEM = f"lib{PRODUCT}"
REAL_NAME_GLOB = f"{STEM}.so.*.*.*"


def read_version(repo_root: Path) -> tuple[int, int, int]:
    text = (repo_root / "VERSION").read_text().strip()
    parts = text.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise CompileError(f"VERSION holds '{text}', not MAJOR.MINOR.PATCH", fix="write e.g. 0.1.0 into VERSION")
    return int(parts[0]), int(parts[1]), int(parts[2])


@dataclass(frozen=True)
class LibraryName:
    version: tuple[int, int, int]

    @classmethod
    def of_file(cls, real_name: str) -> "LibraryName":
        """The names of a real file, libflash_attn_standalone.so.X.Y.Z."""
        prefix = f"{STEM}.so."
        parts = real_name.removeprefix(prefix).split(".")
        if not real_name.startswith(prefix) or len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise FlashBuildError(f"{real_name} is not named {STEM}.so.MAJOR.MINOR.PATCH")
        return cls((int(parts[0]), int(parts[1]), int(parts[2])))

    @property
    def version_string(self) -> str:
        return ".".join(map(str, self.version))

    @property
    def real(self) -> str:
        return f"{STEM}.so.{self.version_string}"

    @property
    def soname(self) -> str:
        return f"{STEM}.so.{self.version[0]}"

    @property
    def linker(self) -> str:
        return f"{STEM}.so"

    def make_links(self, folder: Path) -> None:
        """SONAME -> real name, linker name -> SONAME, relative so the folder can move."""
        for alias, target in ((self.soname, self.real), (self.linker, self.soname)):
            path = folder / alias
            if path.is_symlink() or path.exists():
                path.unlink()
            path.symlink_to(target)


# The linker version script: the C API's functions are the library's only exports.
EXPORTS_MAP = Path("src/exports.map")
