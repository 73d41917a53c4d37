"""A tarball as a consumer receives it: its .sha256, provenance and signature, then its unpacked
files against SHA256SUMS. Good tarballs pass; a wrong checksum, changed content, a missing or
foreign signature each fail with a check that names them."""

import gzip
import io
import shutil
import tarfile

import pytest

from flashbuild.release import provenance, release_checks
from flashbuild.release.checks import Report

from conftest import allowed, keypair

needs_keygen = pytest.mark.skipif(not shutil.which("ssh-keygen"), reason="needs OpenSSH's ssh-keygen")


def beside_checks(tarball, allowed_signers=None):
    report = Report(tarball.name)
    digest = release_checks.check_digest(tarball, report)
    release_checks.check_provenance(tarball, digest, allowed_signers, report)
    return report


def failed(report):
    return [c.name for c in report.checks if not c.ok]


def test_a_good_tarball_passes_and_unpacks_into_a_folder_whose_files_match_their_sums(exported, tmp_path):
    tarball, _ = exported
    report = beside_checks(tarball)
    assert report.ok and len(report.checks) == 2, report.render()
    assert release_checks.check_stream(tarball, report)
    folder = release_checks.unpack(tarball, tmp_path / "scratch", report)
    assert report.ok, report.render()
    assert folder.name == "flash_attn_standalone-0.4.0-smoke" and (folder / "lib/pkgconfig").is_dir()
    sums = Report("sums")
    release_checks.check_sums(folder, sums)
    assert sums.ok, sums.render()


def test_a_checksum_that_does_not_match_fails(exported):
    tarball, _ = exported
    digest_file = tarball.parent / f"{tarball.name}.sha256"
    digest_file.write_text(f"{'0' * 64}  {tarball.name}\n")
    report = beside_checks(tarball)
    assert failed(report) == [f"{digest_file.name} matches the tarball"]
    digest_file.unlink()
    assert failed(beside_checks(tarball))[0] == f"{digest_file.name} is present"


def repack(tarball, change):
    """The tarball with change(name, data) -> data applied to each regular file."""
    out = io.BytesIO()
    with tarfile.open(tarball) as source, tarfile.open(fileobj=out, mode="w") as target:
        for member in source.getmembers():
            data = source.extractfile(member).read() if member.isfile() else None
            if data is not None:
                data = change(member.name, data)
                member.size = len(data)
            target.addfile(member, io.BytesIO(data) if data is not None else None)
    tarball.write_bytes(gzip.compress(out.getvalue(), mtime=0))


def test_tampered_content_fails_the_checksum_and_with_a_recomputed_checksum_the_provenance_and_sums(exported,
                                                                                                     tmp_path):
    tarball, _ = exported
    repack(tarball, lambda name, data: data + b"/* injected */\n" if name.endswith(".h") else data)
    first = failed(beside_checks(tarball))
    assert first[0] == f"{tarball.name}.sha256 matches the tarball" and "SLSA v1 provenance" in first[1]
    # Whoever changed it also rewrote the .sha256: the provenance names the old digest.
    (tarball.parent / f"{tarball.name}.sha256").write_text(f"{provenance.sha256_of(tarball)}  {tarball.name}\n")
    report = beside_checks(tarball)
    assert len(failed(report)) == 1 and "SLSA v1 provenance of this tarball" in failed(report)[0]
    sums = Report("sums")
    release_checks.check_sums(release_checks.unpack(tarball, tmp_path / "scratch", Report("unpack")), sums)
    assert not sums.ok and "include/flash_attn_standalone.h: sha256 differs" in sums.render()


def test_a_file_added_to_the_artifact_is_named_as_not_in_the_sums(exported, tmp_path):
    tarball, _ = exported
    folder = release_checks.unpack(tarball, tmp_path / "scratch", Report("unpack"))
    (folder / "lib" / "libextra.so").write_bytes(b"extra")
    sums = Report("sums")
    release_checks.check_sums(folder, sums)
    assert "lib/libextra.so: not in SHA256SUMS" in sums.render()


def test_a_tarball_with_a_path_outside_its_folder_is_refused(tmp_path):
    tarball = tmp_path / "flash_attn_standalone-0.4.0-x.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        info = tarfile.TarInfo("../escape.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    report = Report("unpack")
    assert release_checks.unpack(tarball, tmp_path / "scratch", report) is None
    assert failed(report) == ["everything in the tarball lies in flash_attn_standalone-0.4.0-x/"]
    assert not (tmp_path / "scratch").exists()


@needs_keygen
def test_a_signed_tarball_verifies_against_its_signer_and_fails_against_another(exported, tmp_path):
    tarball, sign = exported
    signers = sign()
    report = beside_checks(tarball, signers)
    assert report.ok and len(report.checks) == 3, report.render()
    assert "by a signer of" in report.checks[2].name
    assert beside_checks(tarball).ok, "without --allowed-signers the signature is still checked for integrity"
    stranger = allowed(tmp_path, keypair(tmp_path, "stranger"))
    assert failed(beside_checks(tarball, stranger)) == [report.checks[2].name.replace(str(signers), str(stranger))]


@needs_keygen
def test_allowed_signers_for_an_unsigned_tarball_fail(exported, tmp_path):
    tarball, _ = exported
    signers = allowed(tmp_path, keypair(tmp_path))
    assert failed(beside_checks(tarball, signers)) == [
        f"{tarball.name}.provenance.json.sig is present (--allowed-signers was given)"]


def test_sums_of_the_exported_folder_hold_every_file_and_a_changed_one_is_named(exported):
    tarball, _ = exported
    folder = tarball.parent / "smoke"
    sums = Report("sums")
    release_checks.check_sums(folder, sums)
    assert sums.ok, sums.render()
    pc = folder / "lib/pkgconfig/flash_attn_standalone.pc"
    pc.write_text(pc.read_text() + "# edited\n")
    release_checks.check_sums(folder, sums)
    assert "lib/pkgconfig/flash_attn_standalone.pc: sha256 differs" in sums.render()


def reseal(tarball, record):
    """What a tamperer who cannot sign does: a .sha256 and an unsigned provenance for the new bytes."""
    digest = provenance.sha256_of(tarball)
    (tarball.parent / f"{tarball.name}.sha256").write_text(f"{digest}  {tarball.name}\n")
    beside = provenance.beside_files(matrix="smoke", entry=record["entry"], manifest=record["manifest"],
                                     repo=record["repo"], git=record["git"], command=record["command"],
                                     build_time=record["build_time"], sign_key=None)(tarball.name, digest)
    for suffix, data in beside.items():
        (tarball.parent / f"{tarball.name}{suffix}").write_bytes(data)


def verify(repo, tarball, monkeypatch):
    """pipeline.verify_artifact with the library's own checks (nm, readelf: tools, not the
    tarball's code) left out: these stand-in files are not ELF."""
    from flashbuild import pipeline

    monkeypatch.setattr(pipeline, "_verify_library", lambda paths, library, expect, manifest, report: None)
    return pipeline.verify_artifact(repo, tarball)


def cmake_config_running(marker):
    def change(name, data):
        if name.endswith("flash_attn_standaloneConfig.cmake"):
            return data + f'execute_process(COMMAND touch "{marker}")\n'.encode()
        return data
    return change


@pytest.mark.skipif(not shutil.which("cmake"), reason="needs cmake")
def test_verify_never_runs_a_cmake_config_it_did_not_write_sealed_or_not(exported, tmp_path, repo, monkeypatch,
                                                                       provenance_record):
    """Issue 31, finding 1: an execute_process added to the config ran during verify."""
    tarball, _ = exported
    marker = tmp_path / "ran"
    repack(tarball, cmake_config_running(marker))
    report = verify(repo, tarball, monkeypatch)  # the original .sha256 and provenance beside it
    assert failed(report)[0] == f"{tarball.name}.sha256 matches the tarball"
    assert "not checked" in report.render() and not marker.exists()
    reseal(tarball, provenance_record)  # self-consistent, unsigned
    report = verify(repo, tarball, monkeypatch)
    assert failed(report) == [f"SHA256SUMS: every file of the artifact matches",
                              "packages: the files are exactly those this pipeline writes for "
                              "libflash_attn_standalone.so.0.4.0"], report.render()
    assert not marker.exists(), "cmake ran the tarball's config"


def test_a_flipped_byte_fails_the_digest_first_and_nothing_is_unpacked(exported, repo, monkeypatch):
    """Issue 31, finding 2: a one-byte flip read as `no manifest.json in <a temporary folder>`."""
    tarball, _ = exported
    data = bytearray(tarball.read_bytes())
    data[len(data) // 2] ^= 0x01
    tarball.write_bytes(bytes(data))
    report = verify(repo, tarball, monkeypatch)
    assert failed(report)[0] == f"{tarball.name}.sha256 matches the tarball"
    assert "manifest" not in report.render() and "flashbuild-verify-" not in report.render()


def test_a_resealed_tarball_whose_gzip_stream_is_damaged_is_refused_before_extraction(exported, repo,
                                                                                     monkeypatch,
                                                                                     provenance_record):
    tarball, _ = exported
    data = bytearray(tarball.read_bytes())
    data[-6] ^= 0x01  # in the gzip trailer's CRC: tarfile alone stops reading before it
    tarball.write_bytes(bytes(data))
    reseal(tarball, provenance_record)
    report = verify(repo, tarball, monkeypatch)
    assert failed(report) == ["the tarball is an intact gzip stream (CRC checked)"], report.render()


def test_a_tarball_that_unpacks_past_the_cap_writes_nothing(exported, repo, tmp_path, monkeypatch,
                                                            provenance_record):
    """Issue 31, finding 3: a 4.8 MB tarball with a 2 GiB member of zeros wrote 2 GiB before it was
    refused. The cap is lowered here so that the test stays small; the mechanism is the same."""
    tarball, _ = exported
    monkeypatch.setattr(release_checks, "MAX_UNPACKED_BYTES", 8 << 20)
    zeros = bytes(16 << 20)
    repack(tarball, lambda name, data: zeros if name.endswith("test_varlen_inference") else data)
    assert tarball.stat().st_size < 1 << 20
    reseal(tarball, provenance_record)
    written = []
    monkeypatch.setattr(release_checks, "unpack", lambda *args: written.append(args))
    report = verify(repo, tarball, monkeypatch)
    assert failed(report) == ["the tarball unpacks to at most 8 MiB"] and written == [], report.render()
