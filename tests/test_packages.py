"""The consumer packages: their text, and CMake and pkg-config resolving them wherever an artifact
is unpacked (here, with this host's cmake and pkg-config)."""

import shlex
import shutil
import subprocess
import tarfile

import pytest

from flashbuild.release import export, package_checks, packages
from flashbuild.core.build_time import BuildTime
from flashbuild.release.checks import Report
from flashbuild.core.errors import EnvironmentProblem
from flashbuild.core.library import LibraryName

NAME = LibraryName((0, 4, 2))
has_tools = pytest.mark.skipif(not all(shutil.which(t) for t in ("cmake", "pkg-config")),
                               reason="needs cmake and pkg-config (`invoke setup`)")


def test_the_package_texts_name_this_version_and_no_absolute_path():
    texts = packages.package_texts(NAME)
    assert set(texts) == set(packages.PACKAGE_FILES)
    config = texts[packages.CMAKE_CONFIG]
    assert 'set(_fas_library "${_fas_prefix}/lib/libflash_attn_standalone.so.0.4.2")' in config
    assert 'IMPORTED_LOCATION "${_fas_library}"' in config
    assert 'IMPORTED_SONAME "libflash_attn_standalone.so.0"' in config
    assert "add_library(flash_attn_standalone::flash_attn_standalone SHARED IMPORTED)" in config
    assert 'set(PACKAGE_VERSION "0.4.2")' in texts[packages.CMAKE_VERSION]
    pc = texts[packages.PKGCONFIG]
    assert "prefix=${pcfiledir}/../..\n" in pc and "Version: 0.4.2\n" in pc
    for text in texts.values():
        code = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
        assert "/work" not in code and "/tmp" not in code and '"/' not in code


def fake_artifact(root, name=NAME):
    """An artifact folder as export.py lays it out, with a stand-in library file."""
    (root / "lib").mkdir(parents=True)
    (root / "lib" / name.real).write_bytes(b"\x7fELF stand-in")
    name.make_links(root / "lib")
    (root / "include").mkdir()
    (root / "include" / "flash_attn_standalone.h").write_text("/* header */\n")
    packages.write_packages(root, name)
    return root


def checked(folder, name=NAME):
    report = Report(str(folder))
    package_checks.verify_packages(folder, name, report)
    return report


@has_tools
def test_an_exported_tarball_unpacked_into_two_folders_resolves_to_each_of_them(tmp_path):
    built = tmp_path / "built"
    built.mkdir()
    library = built / NAME.real
    library.write_bytes(b"\x7fELF stand-in")
    header = built / "flash_attn_standalone.h"
    header.write_text("/* header */\n")
    binary = built / "test_varlen_inference"
    binary.write_bytes(b"\x7fELF stand-in")
    _, tarball = export.export_artifact(tmp_path / "artifacts", "e1", library, [header], binary, {},
                                        BuildTime(1, "SOURCE_DATE_EPOCH"))
    for where in ("first", "second/deeper folder with spaces"):
        destination = tmp_path / where
        destination.mkdir(parents=True)
        with tarfile.open(tarball) as tar:
            tar.extractall(destination, filter="data")
        folder = destination / "flash_attn_standalone-0.4.2-e1"
        report = checked(folder)
        assert report.ok, report.render()
        assert len(report.checks) == 4  # present, exactly ours, cmake, pkg-config
        ok, _ = package_checks.check_cmake(folder, NAME, tmp_path / f"scratch-{len(where)}")
        assert ok
        resolved = (tmp_path / f"scratch-{len(where)}" / "cmake-build" / "resolved.txt").read_text().split("\n")
        assert resolved[0] == str(folder / "lib" / NAME.real)
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "flash_attn_standalone"], capture_output=True,
                               text=True, env={"PKG_CONFIG_LIBDIR": str(folder / "lib" / "pkgconfig")}).stdout
        assert f"-Wl,-rpath,{folder}/lib/pkgconfig/../../lib" in shlex.split(flags)


def find_package_with(folder, scratch, request):
    """Exit status and output of find_package(flash_attn_standalone <request>) against folder."""
    scratch.mkdir()
    (scratch / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.19)\nproject(request LANGUAGES NONE)\n"
        f"find_package(flash_attn_standalone {request} REQUIRED CONFIG)\n")
    result = subprocess.run(["cmake", "-S", str(scratch), "-B", str(scratch / "build"),
                             f"-DCMAKE_PREFIX_PATH={folder}"], capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr


@has_tools
@pytest.mark.parametrize("request_, found", [("0.4.2", True), ("0.3", True), ("0.4.2 EXACT", True), ("", True),
                                             ("0.1...0.9", True), ("0.5", False), ("1.0", False),
                                             ("0.4 EXACT", False), ("0.1...<0.4.2", False)])
def test_find_package_accepts_the_same_major_version_at_or_below_this_one(tmp_path, request_, found):
    folder = fake_artifact(tmp_path / "artifact")
    code, output = find_package_with(folder, tmp_path / "scratch", request_)
    assert (code == 0) == found, output


@has_tools
def test_a_package_without_its_library_is_not_found_and_says_why(tmp_path):
    folder = fake_artifact(tmp_path / "artifact")
    (folder / "lib" / NAME.real).unlink()
    code, output = find_package_with(folder, tmp_path / "scratch", "0.4.2")
    assert code != 0
    assert "lacks lib/libflash_attn_standalone.so.0.4.2" in " ".join(output.split())
    report = checked(folder)
    assert [c.name for c in report.checks if not c.ok] == [report.checks[2].name]
    assert "find_package failed" in report.render()


@has_tools
def test_a_pc_file_pointing_elsewhere_fails_and_names_the_flags(tmp_path):
    folder = fake_artifact(tmp_path / "artifact")
    pc = folder / packages.PKGCONFIG
    pc.write_text(pc.read_text().replace("prefix=${pcfiledir}/../..", "prefix=/opt/elsewhere"))
    report = checked(folder)  # not the text this pipeline writes: refused as data, never resolved
    assert [c.ok for c in report.checks] == [True, False]
    assert "differ: lib/pkgconfig/flash_attn_standalone.pc" in report.render()
    ok, detail = package_checks.check_pkgconfig(folder, NAME)  # resolved, it would name the flags
    assert not ok and "no -I of" in detail and "/opt/elsewhere/include" in detail


@has_tools
def test_an_artifact_without_packages_fails_with_a_fix(tmp_path):
    folder = fake_artifact(tmp_path / "artifact")
    shutil.rmtree(folder / "lib" / "cmake")
    report = checked(folder)
    assert len(report.checks) == 1 and not report.ok
    assert "rebuild with `invoke build`" in report.render()


def test_missing_tools_are_named_with_the_setup_fix(monkeypatch):
    monkeypatch.setattr(package_checks.shutil, "which", lambda tool: None if tool == "pkg-config" else "/usr/bin/x")
    with pytest.raises(EnvironmentProblem, match="pkg-config not found") as error:
        package_checks.require_tools()
    assert "invoke setup" in error.value.fix
