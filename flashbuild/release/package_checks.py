"""Check an artifact's consumer packages (packages.py): as data first (the files must be exactly
what packages.py writes for the library: nothing else is ever run), then with CMake and
pkg-config themselves.

- CMake: a scratch project (no languages, so no compiler is needed) runs
  find_package(flash_attn_standalone <version> EXACT REQUIRED CONFIG) with the artifact as its
  CMAKE_PREFIX_PATH and records where the imported target points; the check passes when that is
  the artifact's own lib/<real name> and include/.
- pkg-config: `pkg-config --cflags --libs` with only the artifact's lib/pkgconfig on the search
  path must name the artifact's include/ and lib/ and link -lflash_attn_standalone, and
  --modversion must be the library's version.

Both run on this host (`invoke setup` installs cmake and pkg-config on Debian); paths are
compared lexically after normalizing, so a copy of the artifact elsewhere must resolve to the
copy: that is the relocation the packages promise.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from flashbuild.release.checks import Report
from flashbuild.core.errors import EnvironmentProblem
from flashbuild.core.library import PRODUCT, LibraryName
from flashbuild.release.packages import CMAKE_DIR, PACKAGE_FILES, PKGCONFIG, TARGET

TOOLS = ("cmake", "pkg-config")
RESOLVED = "resolved.txt"

SCRATCH_PROJECT = f"""\
cmake_minimum_required(VERSION 3.16)
project(fas_package_check LANGUAGES NONE)
find_package({PRODUCT} ${{WANT}} EXACT REQUIRED CONFIG)
get_target_property(_location {TARGET} IMPORTED_LOCATION)
get_target_property(_soname {TARGET} IMPORTED_SONAME)
get_target_property(_includes {TARGET} INTERFACE_INCLUDE_DIRECTORIES)
file(WRITE "${{CMAKE_BINARY_DIR}}/{RESOLVED}"
     "${{_location}}\\n${{_soname}}\\n${{_includes}}\\n${{{PRODUCT}_VERSION}}\\n${{{PRODUCT}_DIR}}\\n")
"""


def require_tools() -> None:
    """Fail early, before a build compiles anything, when the checks could not run."""
    missing = [tool for tool in TOOLS if not shutil.which(tool)]
    if missing:
        raise EnvironmentProblem(f"{' and '.join(missing)} not found: they check the artifact's CMake and "
                                 "pkg-config packages",
                                 fix="run `invoke setup` (installs them on Debian), or "
                                     "`apt-get install cmake pkg-config`")


def _run(argv: list[str], env: dict | None = None) -> tuple[int, str]:
    result = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **(env or {})})
    return result.returncode, result.stdout + result.stderr


def _same(a: str | Path, b: str | Path) -> bool:
    return os.path.normpath(str(a)) == os.path.normpath(str(b))


def check_cmake(folder: Path, name: LibraryName, scratch: Path) -> tuple[bool, str]:
    """(passed, detail) of configuring the scratch project against the artifact at folder."""
    project = scratch / "cmake-project"
    build = scratch / "cmake-build"
    project.mkdir(parents=True, exist_ok=True)
    (project / "CMakeLists.txt").write_text(SCRATCH_PROJECT)
    # The prefix path alone: no user package registry, no system packages of the same name.
    code, output = _run(["cmake", "-S", str(project), "-B", str(build), f"-DWANT={name.version_string}",
                         f"-DCMAKE_PREFIX_PATH={folder}", "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF",
                         "-DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF", "-DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF"])
    if code != 0:
        return False, "find_package failed:\n" + "\n".join(output.strip().splitlines()[-15:])
    location, soname, includes, version, package_dir = (build / RESOLVED).read_text().split("\n")[:5]
    wrong = []
    if not _same(location, folder / "lib" / name.real):
        wrong.append(f"IMPORTED_LOCATION is {location}, not {folder / 'lib' / name.real}")
    if soname != name.soname:
        wrong.append(f"IMPORTED_SONAME is {soname}, not {name.soname}")
    if not _same(includes, folder / "include"):
        wrong.append(f"INTERFACE_INCLUDE_DIRECTORIES is {includes}, not {folder / 'include'}")
    if version != name.version_string:
        wrong.append(f"the package's version is {version}, not {name.version_string}")
    if not _same(package_dir, folder / CMAKE_DIR):
        wrong.append(f"found at {package_dir}, not in the artifact")
    return not wrong, "\n".join(wrong)


def check_pkgconfig(folder: Path, name: LibraryName) -> tuple[bool, str]:
    """(passed, detail) of resolving the .pc file with only the artifact on pkg-config's path."""
    env = {"PKG_CONFIG_LIBDIR": str(folder / PKGCONFIG.parent), "PKG_CONFIG_PATH": ""}
    code, flags = _run(["pkg-config", "--cflags", "--libs", PRODUCT], env)
    if code != 0:
        return False, f"pkg-config --cflags --libs {PRODUCT} failed: {flags.strip()[-800:]}"
    code, version = _run(["pkg-config", "--modversion", PRODUCT], env)
    words = shlex.split(flags)
    includes = [w[2:] for w in words if w.startswith("-I")]
    libdirs = [w[2:] for w in words if w.startswith("-L")]
    wrong = []
    if not any(_same(i, folder / "include") for i in includes):
        wrong.append(f"no -I of {folder / 'include'} in: {flags.strip()}")
    if not any(_same(d, folder / "lib") for d in libdirs):
        wrong.append(f"no -L of {folder / 'lib'} in: {flags.strip()}")
    if f"-l{PRODUCT}" not in words:
        wrong.append(f"no -l{PRODUCT} in: {flags.strip()}")
    if code != 0 or version.strip() != name.version_string:
        wrong.append(f"--modversion gives '{version.strip()}', not {name.version_string}")
    return not wrong, "\n".join(wrong)


def verify_packages(folder: Path, name: LibraryName, report: Report) -> None:
    """Add the package checks of the artifact at folder (absolute) to report: first as data (each
    file exactly what packages.py writes for this library), then, only if they are, resolved by
    cmake and pkg-config. A CMake config is code that cmake runs with the caller's rights: one that
    differs from ours (an added execute_process, say) is refused, never run."""
    from flashbuild.release.packages import package_texts

    require_tools()
    missing = [str(p) for p in PACKAGE_FILES if not (folder / p).is_file()]
    report.add(f"packages: {CMAKE_DIR}/ and {PKGCONFIG} are present", not missing,
               "missing: " + ", ".join(missing) + "\n(artifacts exported before the consumer packages lack them: "
               "rebuild with `invoke build`)")
    if missing:
        return
    expected = package_texts(name)
    differ = [str(p) for p in PACKAGE_FILES
              if (folder / p).is_symlink() or (folder / p).read_bytes() != expected[p].encode()]
    report.add(f"packages: the files are exactly those this pipeline writes for {name.real}", not differ,
               "differ: " + ", ".join(differ) + "\n(not run with cmake or pkg-config: their text is not ours)")
    if differ:
        return
    with tempfile.TemporaryDirectory(prefix="flashbuild-packages-") as scratch:
        ok, detail = check_cmake(folder, name, Path(scratch))
    report.add(f"cmake: find_package({PRODUCT} {name.version_string}) in a scratch project gives {TARGET} "
               f"with lib/{name.real} and include/", ok, detail)
    ok, detail = check_pkgconfig(folder, name)
    report.add(f"pkg-config --cflags --libs {PRODUCT} resolves to include/ and lib/ ({name.version_string})", ok,
               detail)


def verify_built(library: Path, headers: list[Path], report: Report) -> None:
    """At build time, before export: the package files this library will get, in a scratch prefix
    laid out as the artifact (its lib/ and include/ linking to the built files)."""
    from flashbuild.release.packages import write_packages

    name = LibraryName.of_file(library.name)
    with tempfile.TemporaryDirectory(prefix="flashbuild-prefix-") as scratch:
        root = Path(scratch) / "prefix"
        (root / "lib").mkdir(parents=True)
        (root / "lib" / name.real).symlink_to(library.resolve())
        name.make_links(root / "lib")
        (root / "include").mkdir()
        for header in headers:
            (root / "include" / header.name).symlink_to(header.resolve())
        write_packages(root, name)
        verify_packages(root, name, report)
