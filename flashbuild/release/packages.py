"""Consumer packages inside every artifact: a CMake package and a pkg-config file.

    lib/cmake/flash_attn_standalone/flash_attn_standaloneConfig.cmake
    lib/cmake/flash_attn_standalone/flash_attn_standaloneConfigVersion.cmake
    lib/pkgconfig/flash_attn_standalone.pc

The CMake package defines the imported target flash_attn_standalone::flash_attn_standalone (the
versioned .so with its SONAME, and include/); the .pc file gives the same flags to pkg-config.
Both are relocatable: every path is derived from the package file's own folder (CMake's
CMAKE_CURRENT_LIST_DIR, pkg-config's ${pcfiledir}), so the artifact may be unpacked anywhere.
Compatibility follows the SONAME: a library of the same major version at or above the version
asked for (later versions only append to the ABI, flash_attn_standalone.h's ABI section).

The texts are pure functions of the library's names; package_checks.py proves they resolve.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from flashbuild.core.library import PRODUCT, STEM, LibraryName

TARGET = f"{PRODUCT}::{PRODUCT}"
CMAKE_DIR = Path("lib") / "cmake" / PRODUCT
CMAKE_CONFIG = CMAKE_DIR / f"{PRODUCT}Config.cmake"
CMAKE_VERSION = CMAKE_DIR / f"{PRODUCT}ConfigVersion.cmake"
PKGCONFIG = Path("lib") / "pkgconfig" / f"{PRODUCT}.pc"
PACKAGE_FILES = (CMAKE_CONFIG, CMAKE_VERSION, PKGCONFIG)

DESCRIPTION = "FlashAttention forward kernels for NVIDIA Hopper (sm_90a) behind a C API, no PyTorch"


def cmake_config(name: LibraryName) -> str:
    """flash_attn_standaloneConfig.cmake: the imported target, found from the file's own folder."""
    return f"""\
# CMake package of {PRODUCT} {name.version_string}, written by the build (flashbuild/release/packages.py).
# Use: find_package({PRODUCT} {name.version_string} REQUIRED) and link {TARGET}.
# Paths come from this file's folder, so the artifact may be unpacked anywhere. The header
# includes <cuda_runtime_api.h>: consumers add the CUDA headers themselves (e.g. CUDA::cudart
# of find_package(CUDAToolkit)); the library needs no CUDA library at link or load time.
cmake_policy(PUSH)
cmake_policy(VERSION 3.16)

get_filename_component(_fas_prefix "${{CMAKE_CURRENT_LIST_DIR}}/../../.." ABSOLUTE)
set(_fas_library "${{_fas_prefix}}/lib/{name.real}")
set(_fas_include "${{_fas_prefix}}/include")

if(NOT EXISTS "${{_fas_library}}" OR NOT EXISTS "${{_fas_include}}/{PRODUCT}.h")
  set({PRODUCT}_FOUND FALSE)
  set({PRODUCT}_NOT_FOUND_MESSAGE
      "${{_fas_prefix}} lacks lib/{name.real} or include/{PRODUCT}.h: unpack the whole artifact")
elseif(NOT TARGET {TARGET})
  add_library({TARGET} SHARED IMPORTED)
  set_target_properties({TARGET} PROPERTIES
    IMPORTED_LOCATION "${{_fas_library}}"
    IMPORTED_SONAME "{name.soname}"
    INTERFACE_INCLUDE_DIRECTORIES "${{_fas_include}}")
endif()

set({PRODUCT}_INCLUDE_DIRS "${{_fas_include}}")
set({PRODUCT}_LIBRARIES {TARGET})
unset(_fas_prefix)
unset(_fas_library)
unset(_fas_include)
cmake_policy(POP)
"""


def cmake_version_file(name: LibraryName) -> str:
    """flash_attn_standaloneConfigVersion.cmake: same major version (the SONAME's), at least the
    version asked for; version ranges (CMake 3.19) likewise; 64-bit Linux only."""
    major = name.version[0]
    return f"""\
# Version of the {PRODUCT} CMake package, written by the build (flashbuild/release/packages.py).
# Compatible: the same major version (the SONAME's, {name.soname}) at or above the version
# asked for; the library is built for 64-bit Linux only.
set(PACKAGE_VERSION "{name.version_string}")
set(PACKAGE_VERSION_EXACT FALSE)
set(PACKAGE_VERSION_COMPATIBLE FALSE)

if(NOT "${{CMAKE_SIZEOF_VOID_P}}" STREQUAL "" AND NOT "${{CMAKE_SIZEOF_VOID_P}}" STREQUAL "8")
  set(PACKAGE_VERSION_UNSUITABLE TRUE)
  set(PACKAGE_VERSION "${{PACKAGE_VERSION}} (64-bit)")
  return()
endif()

if(PACKAGE_FIND_VERSION_RANGE)
  set(_fas_low "${{PACKAGE_FIND_VERSION_MIN}}")
  set(_fas_low_major "${{PACKAGE_FIND_VERSION_MIN_MAJOR}}")
else()
  set(_fas_low "${{PACKAGE_FIND_VERSION}}")
  set(_fas_low_major "${{PACKAGE_FIND_VERSION_MAJOR}}")
endif()

if(PACKAGE_FIND_VERSION STREQUAL "" AND NOT PACKAGE_FIND_VERSION_RANGE)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)  # no version asked for
elseif(_fas_low_major STREQUAL "{major}" AND NOT PACKAGE_VERSION VERSION_LESS _fas_low)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION_RANGE)
    if(PACKAGE_FIND_VERSION_RANGE_MAX STREQUAL "INCLUDE" AND PACKAGE_VERSION VERSION_GREATER PACKAGE_FIND_VERSION_MAX)
      set(PACKAGE_VERSION_COMPATIBLE FALSE)
    elseif(PACKAGE_FIND_VERSION_RANGE_MAX STREQUAL "EXCLUDE"
           AND NOT PACKAGE_VERSION VERSION_LESS PACKAGE_FIND_VERSION_MAX)
      set(PACKAGE_VERSION_COMPATIBLE FALSE)
    endif()
  endif()
endif()
if(NOT PACKAGE_FIND_VERSION_RANGE AND PACKAGE_VERSION VERSION_EQUAL PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_EXACT TRUE)
endif()
unset(_fas_low)
unset(_fas_low_major)
"""


def pkgconfig_file(name: LibraryName) -> str:
    """flash_attn_standalone.pc: prefix two folders above the file (${pcfiledir}); the link
    flags carry an rpath to lib/ so that a program built with them runs where it was built."""
    return f"""\
# pkg-config file of {PRODUCT} {name.version_string}, written by the build (flashbuild/release/packages.py).
# Relocatable: the prefix is found from this file's folder. Name it by an absolute path:
#   PKG_CONFIG_PATH=/abs/artifact/lib/pkgconfig pkg-config --cflags --libs {PRODUCT}
# The header includes <cuda_runtime_api.h>: add the CUDA headers' -I where the compiler does
# not find them by itself.
prefix=${{pcfiledir}}/../..
libdir=${{prefix}}/lib
includedir=${{prefix}}/include

Name: {PRODUCT}
Description: {DESCRIPTION}
Version: {name.version_string}
Cflags: -I${{includedir}}
Libs: -L${{libdir}} -Wl,-rpath,${{libdir}} -l{STEM.removeprefix('lib')}
"""


def package_texts(name: LibraryName) -> dict[Path, str]:
    """Relative path in the artifact -> text, for every package file."""
    return {CMAKE_CONFIG: cmake_config(name), CMAKE_VERSION: cmake_version_file(name), PKGCONFIG: pkgconfig_file(name)}


def write_packages(root: Path, name: LibraryName) -> list[Path]:
    """Write the package files of the library `name` under an artifact folder `root`."""
    written = []
    for relative, text in package_texts(name).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def keyed(artifact_key: str, name: LibraryName) -> str:
    """The artifact key with the package texts in it: an artifact exported by an older build
    (other package files, or none) is not up to date."""
    digest = hashlib.sha256(artifact_key.encode())
    for relative, text in sorted(package_texts(name).items()):
        digest.update(f"\0{relative}\0{text}".encode())
    return digest.hexdigest()
