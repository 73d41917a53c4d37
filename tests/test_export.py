"""Export writes a complete artifact or nothing."""

import hashlib
import json
import os
import subprocess
import tarfile

import pytest

from flashbuild.release import export
from flashbuild.core.build_time import BuildTime, build_time
from flashbuild.core.errors import ConfigError, ExportError
from flashbuild.release.packages import PACKAGE_FILES

from conftest import record_manifest, stand_in_build

WHEN = BuildTime(1_700_000_000, "SOURCE_DATE_EPOCH")


@pytest.fixture
def inputs(tmp_path):
    return stand_in_build(tmp_path / "built", "0.1.0", {"flash_attn_standalone.h": '#include "flash_attn_standalone_plan.h"\n',
                                                        "flash_attn_standalone_plan.h": "/* plan API */\n"})


def test_complete_artifact(tmp_path, inputs):
    artifacts = tmp_path / "artifacts"
    folder, tarball = export.export_artifact(artifacts, "e1", *inputs, {"matrix": "smoke"}, WHEN)
    assert folder == artifacts / "0.1.0" / "e1"
    assert os.readlink(folder / "lib" / "libflash_attn_standalone.so.0") == "libflash_attn_standalone.so.0.1.0"
    assert os.readlink(folder / "lib" / "libflash_attn_standalone.so") == "libflash_attn_standalone.so.0"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["version"] == "0.1.0" and manifest["matrix"] == "smoke"
    assert set(manifest["files"]) == {"lib/libflash_attn_standalone.so.0.1.0", "include/flash_attn_standalone.h",
                                      "include/flash_attn_standalone_plan.h", "bin/test_varlen_inference",
                                      *map(str, PACKAGE_FILES)}
    assert "Version: 0.1.0" in (folder / "lib/pkgconfig/flash_attn_standalone.pc").read_text()
    for line in (folder / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split("  ")
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
        link = tar.getmember("flash_attn_standalone-0.1.0-e1/lib/libflash_attn_standalone.so.0")
    assert "flash_attn_standalone-0.1.0-e1/manifest.json" in names
    assert link.issym()
    assert (artifacts / "0.1.0" / f"{tarball.name}.sha256").read_text().startswith(
        hashlib.sha256(tarball.read_bytes()).hexdigest())
    assert not list((artifacts / "0.1.0").glob(".*")), "no staging left behind"


def test_failure_midway_leaves_nothing_complete_looking(tmp_path, inputs, monkeypatch):
    artifacts = tmp_path / "artifacts"

    def broken_open(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export.tarfile, "open", broken_open)
    with pytest.raises(ExportError, match="No space left"):
        export.export_artifact(artifacts, "e1", *inputs, {}, WHEN)
    assert list((artifacts / "0.1.0").iterdir()) == []


def test_failed_reexport_keeps_the_previous_artifact(tmp_path, inputs, monkeypatch):
    artifacts = tmp_path / "artifacts"
    folder, _ = export.export_artifact(artifacts, "e1", *inputs, {"build": 1}, WHEN)
    monkeypatch.setattr(export.tarfile, "open", lambda *a, **k: (_ for _ in ()).throw(OSError(5, "I/O error")))
    with pytest.raises(ExportError):
        export.export_artifact(artifacts, "e1", *inputs, {"build": 2}, WHEN)
    assert json.loads((folder / "manifest.json").read_text())["build"] == 1


def test_reexport_replaces_and_stale_staging_is_cleaned(tmp_path, inputs):
    artifacts = tmp_path / "artifacts"
    export.export_artifact(artifacts, "e1", *inputs, {"build": 1}, WHEN)
    leftover = artifacts / "0.1.0" / ".staging-e1-interrupted"
    leftover.mkdir()
    export.clean_stale_staging(artifacts)
    assert not leftover.exists()
    folder, _ = export.export_artifact(artifacts, "e1", *inputs, {"build": 2}, WHEN)
    assert json.loads((folder / "manifest.json").read_text())["build"] == 2
    assert sorted(p.name for p in (artifacts / "0.1.0").iterdir()) == [
        "e1", "flash_attn_standalone-0.1.0-e1.tar.gz", "flash_attn_standalone-0.1.0-e1.tar.gz.sha256"]


def test_two_exports_of_the_same_files_give_the_same_tarball_bytes(tmp_path, inputs):
    """Reproducible artifacts: sorted entries, 0:0 owners, the build time as every mtime, and
    gzip without its own timestamp; the manifest is dated by the build time, not the clock."""
    tarballs = []
    for run, mode in enumerate((0o600, 0o640)):  # local umask and file times must not matter
        for path in (inputs[0], *inputs[1], inputs[2]):
            path.chmod(mode | (0o100 if path.name == "test_varlen_inference" else 0))
            os.utime(path, (1_000_000 + run, 1_000_000 + run))
        _, tarball = export.export_artifact(tmp_path / f"artifacts{run}", "e1", *inputs, {"matrix": "smoke"}, WHEN)
        tarballs.append(tarball.read_bytes())
    assert tarballs[0] == tarballs[1]
    with tarfile.open(tmp_path / "artifacts0" / "0.1.0" / export.tarball_name("0.1.0", "e1")) as tar:
        members = tar.getmembers()
        manifest = json.load(tar.extractfile("flash_attn_standalone-0.1.0-e1/manifest.json"))
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", WHEN.epoch)}
    assert {m.mode for m in members if m.isfile()} == {0o644, 0o755}
    assert manifest["created_utc"] == "2023-11-14T22:13:20+00:00"
    assert manifest["created_from"] == "SOURCE_DATE_EPOCH"


def test_build_time_prefers_source_date_epoch_then_the_commit(tmp_path, repo):
    assert build_time(tmp_path, {"SOURCE_DATE_EPOCH": "1234"}) == BuildTime(1234, "SOURCE_DATE_EPOCH")
    from_commit = build_time(repo, {})
    assert from_commit.source.startswith("commit ") and from_commit.epoch > 1_600_000_000
    assert build_time(tmp_path, {}).source == "clock"  # not a git checkout
    with pytest.raises(ConfigError, match="SOURCE_DATE_EPOCH is 'yesterday'"):
        build_time(tmp_path, {"SOURCE_DATE_EPOCH": "yesterday"})


K1, K2 = "1" * 64, "2" * 64


def test_an_export_with_the_same_inputs_is_up_to_date_until_anything_in_it_changes(tmp_path, inputs):
    artifacts = tmp_path / "artifacts"
    folder, tarball = export.export_artifact(artifacts, "e1", *inputs, record_manifest(K1), WHEN)
    assert export.up_to_date(artifacts, "0.1.0", "e1", K1) == folder
    assert export.up_to_date(artifacts, "0.1.0", "e1", K2) is None, "other inputs"
    assert export.up_to_date(artifacts, "0.1.0", "e2", K1) is None, "never exported"
    library = folder / "lib" / "libflash_attn_standalone.so.0.1.0"
    original = library.read_bytes()
    library.write_bytes(b"edited")
    assert export.up_to_date(artifacts, "0.1.0", "e1", K1) is None, "a file of the folder changed"
    library.write_bytes(original)
    tarball.write_bytes(b"truncated")
    assert export.up_to_date(artifacts, "0.1.0", "e1", K1) is None, "the tarball no longer matches its .sha256"


@pytest.mark.parametrize("text", ["[]", "null", "5", '{"artifact_key": 7}', "{}"])
def test_a_manifest_that_is_not_what_export_writes_means_export_again_not_a_crash(tmp_path, inputs, text):
    """Issue 31, finding 6: `[]`, `null` or `5` made every later build of the entry a traceback."""
    artifacts = tmp_path / "artifacts"
    folder, _ = export.export_artifact(artifacts, "e1", *inputs, record_manifest(K1), WHEN)
    (folder / "manifest.json").write_text(text)
    assert export.up_to_date(artifacts, "0.1.0", "e1", K1) is None


class _Killed(BaseException):
    """SIGKILL, as far as a test can: nothing after it in the publish runs."""


@pytest.mark.parametrize("step", range(4))
def test_a_kill_between_the_final_renames_leaves_no_artifact_that_counts_as_complete(tmp_path, inputs, monkeypatch,
                                                                                      step):
    """The renames of a re-export: old folder aside, new folder, tarball, and the .sha256 last. Killed
    before any of them, the old artifact must no longer count as complete (its marker is gone) unless
    the kill came before the publish began; never does a .sha256 sit beside files it does not match."""
    artifacts = tmp_path / "artifacts"
    export.export_artifact(artifacts, "e1", *inputs, record_manifest("0" * 64), WHEN)
    real_replace, calls = os.replace, []

    def replace(source, target):
        calls.append(target)
        if len(calls) == step + 1:
            raise _Killed()
        real_replace(source, target)

    monkeypatch.setattr(export.os, "replace", replace)
    with pytest.raises(_Killed):
        export.export_artifact(artifacts, "e1", *inputs, record_manifest("f" * 64), WHEN)
    monkeypatch.setattr(export.os, "replace", real_replace)
    version_dir = artifacts / "0.1.0"
    digest = version_dir / "flash_attn_standalone-0.1.0-e1.tar.gz.sha256"
    assert not digest.exists(), "the marker of a complete export is written last and removed first"
    assert export.up_to_date(artifacts, "0.1.0", "e1", "0" * 64) is None
    assert export.up_to_date(artifacts, "0.1.0", "e1", "f" * 64) is None
    folder, _ = export.export_artifact(artifacts, "e1", *inputs, record_manifest("f" * 64), WHEN)
    assert export.up_to_date(artifacts, "0.1.0", "e1", "f" * 64) == folder, "the next build completes it"


def test_leftovers_of_a_dead_export_are_cleaned_and_a_live_ones_kept(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    version_dir = tmp_path / "artifacts" / "0.1.0"
    dead = [version_dir / f".old-e1-{gone.pid}", version_dir / f".staging-e1-{gone.pid}-k2j4_x",
            version_dir / f".flash_attn_standalone-0.1.0-e1.tar.gz.{gone.pid}.partial"]
    live = [version_dir / f".old-e1-{os.getpid()}", version_dir / f".staging-e1-{os.getpid()}-ab12cd",
            version_dir / f".flash_attn_standalone-0.1.0-e1.tar.gz.sha256.{os.getpid()}.partial"]
    for path in dead + live:
        if "partial" in path.name:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("half")
        else:
            (path / "lib").mkdir(parents=True)
    export.clean_stale_staging(tmp_path / "artifacts")
    assert [p for p in dead if p.exists()] == [] and all(p.exists() for p in live)


def test_files_made_beside_the_tarball_name_its_digest_and_a_later_export_drops_those_it_no_longer_makes(
        tmp_path, inputs):
    artifacts = tmp_path / "artifacts"

    def statement_and_signature(name, digest):
        return {".provenance.json": f"{name} {digest}\n".encode(), ".provenance.json.sig": b"signed\n"}

    _, tarball = export.export_artifact(artifacts, "e1", *inputs, {}, WHEN, beside=statement_and_signature)
    statement = (tarball.parent / f"{tarball.name}.provenance.json").read_text()
    assert statement == f"{tarball.name} {hashlib.sha256(tarball.read_bytes()).hexdigest()}\n"
    assert (tarball.parent / f"{tarball.name}.provenance.json.sig").is_file()
    export.export_artifact(artifacts, "e1", *inputs, {}, WHEN, beside=lambda name, digest: {".provenance.json": b"{}"})
    assert sorted(p.name for p in tarball.parent.iterdir()) == [
        "e1", tarball.name, f"{tarball.name}.provenance.json", f"{tarball.name}.sha256"]


def test_a_failure_while_making_the_files_beside_keeps_the_previous_artifact_whole(tmp_path, inputs):
    artifacts = tmp_path / "artifacts"
    folder, tarball = export.export_artifact(artifacts, "e1", *inputs, {"build": 1}, WHEN,
                                             beside=lambda name, digest: {".provenance.json": b"first"})

    def broken_signer(name, digest):
        raise ExportError("signing the provenance failed")

    with pytest.raises(ExportError, match="signing"):
        export.export_artifact(artifacts, "e1", *inputs, {"build": 2}, WHEN, beside=broken_signer)
    assert json.loads((folder / "manifest.json").read_text())["build"] == 1
    assert (tarball.parent / f"{tarball.name}.provenance.json").read_bytes() == b"first"
    assert not list(tarball.parent.glob(".*")), "nothing staged is left behind"


def test_an_export_waits_while_another_publishes_the_same_entry(tmp_path, inputs):
    """Two builds exporting one entry at once: the second publishes after the first, never
    between its renames (the version folder's lock)."""
    import fcntl
    import threading

    artifacts = tmp_path / "artifacts"
    version_dir = artifacts / "0.1.0"
    version_dir.mkdir(parents=True)
    done = []
    other = os.open(version_dir, os.O_RDONLY)  # another build in the middle of its publish
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        worker = threading.Thread(target=lambda: done.append(
            export.export_artifact(artifacts, "e1", *inputs, {"matrix": "smoke"}, WHEN)))
        worker.start()
        worker.join(timeout=1.0)
        assert worker.is_alive() and not (version_dir / "e1").exists()
    finally:
        os.close(other)
    worker.join(timeout=30)
    assert done and (version_dir / "e1" / "manifest.json").is_file()
    assert export.digest_path(done[0][1]).is_file()
