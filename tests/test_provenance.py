"""Provenance statements: what they record, that two builds of the same inputs write the same
one, and SSH signatures made and checked with this host's ssh-keygen."""

import dataclasses
import hashlib
import json
import shutil
import subprocess

import pytest
from conftest import allowed, keypair

from flashbuild import pipeline
from flashbuild.release import provenance, verifier
from flashbuild.core.errors import ConfigError, EnvironmentProblem, ExportError, FlashBuildError

needs_keygen = pytest.mark.skipif(not shutil.which("ssh-keygen"), reason="needs OpenSSH's ssh-keygen")


def make_statement(record, sign_key=None, name="fas-0.4.0-smoke.tar.gz", digest="d" * 64):
    files = provenance.beside_files(matrix=record["matrix"], entry=record["entry"], manifest=record["manifest"],
                                    repo=record["repo"], git=record["git"], command=record["command"],
                                    build_time=record["build_time"], sign_key=sign_key)(name, digest)
    return files


def test_the_statement_is_slsa_v1_provenance_of_the_tarball_with_every_input_pinned(provenance_record, repo):
    record = provenance_record
    files = make_statement(provenance_record)
    assert set(files) == {provenance.SUFFIX, verifier.SUFFIX}
    document = json.loads(files[provenance.SUFFIX])
    assert document["_type"] == "https://in-toto.io/Statement/v1"
    assert document["predicateType"] == "https://slsa.dev/provenance/v1"
    # The tarball, and the standalone verifier written beside it.
    assert document["subject"] == [
        {"name": "fas-0.4.0-smoke.tar.gz", "digest": {"sha256": "d" * 64}},
        {"name": "fas-0.4.0-smoke.tar.gz.verify.pyz",
         "digest": {"sha256": hashlib.sha256(files[verifier.SUFFIX]).hexdigest()}}]
    definition = document["predicate"]["buildDefinition"]
    assert definition["buildType"] and document["predicate"]["runDetails"]["builder"]["id"]
    external = definition["externalParameters"]
    assert external["matrix"] == "smoke" and external["command"] == "python3 -m invoke build --matrix smoke"
    assert external["entry"] == json.loads(json.dumps(dataclasses.asdict(record["entry"])))
    assert external["entry"]["kernels"][0]["head_dims"] == [64]
    assert definition["internalParameters"]["flags"] == ["-O3", "-I$REPO/src"]
    dependencies = {d["name"]: d for d in definition["resolvedDependencies"]}
    assert dependencies["repository"] == {"name": "repository", "digest": {"gitCommit": "c" * 40},
                                          "annotations": {"dirty": True}}
    for pin in record["pins"].values():
        assert dependencies[pin.name]["digest"] == {"sha256": pin.sha256}
    image = dependencies["toolchain-image"]
    assert image["digest"] == {"sha256": "ab" * 32}
    dockerfile = repo / "docker/cuda12-debian-trixie.Dockerfile"
    assert image["annotations"]["dockerfile_sha256"] == provenance.sha256_of(dockerfile)
    assert all(d.get("digest") or d.get("uri") for d in definition["resolvedDependencies"])


def test_two_builds_of_the_same_inputs_write_the_same_statement(provenance_record):
    assert make_statement(provenance_record) == make_statement(provenance_record)
    other = make_statement(provenance_record, digest="e" * 64)
    assert other != make_statement(provenance_record)


def test_git_state_names_the_commit_and_whether_the_checkout_is_dirty(tmp_path):
    assert provenance.git_state(tmp_path) == {"commit": None, "dirty": None}
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.txt").write_text("one\n")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert provenance.git_state(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "a.txt").write_text("two\n")
    assert provenance.git_state(tmp_path) == {"commit": head, "dirty": True}


@needs_keygen
def test_a_signed_statement_verifies_against_its_signer_and_not_another_or_after_a_change(tmp_path,
                                                                                        provenance_record):
    key, stranger = keypair(tmp_path), keypair(tmp_path, "stranger")
    files = make_statement(provenance_record, sign_key=key)
    statement, signature = files[provenance.SUFFIX], tmp_path / "statement.sig"
    signature.write_bytes(files[provenance.SIGNATURE_SUFFIX])
    ok, detail = provenance.check_signature(statement, signature, allowed(tmp_path, key))
    assert ok, detail
    ok, detail = provenance.check_signature(statement, signature, allowed(tmp_path, stranger))
    assert not ok and "no principal" in detail
    assert not provenance.check_signature(statement.replace(b"smoke", b"smoka"), signature, allowed(tmp_path, key))[0]
    assert provenance.check_signature(statement, signature, None)[0], "intact, signer unchecked"
    assert not provenance.check_signature(statement + b" ", signature, None)[0]


@needs_keygen
def test_signing_with_a_broken_key_fails_with_a_fix(tmp_path):
    bad = tmp_path / "bad_key"
    bad.write_text("not a key\n")
    with pytest.raises(ExportError, match="signing the provenance with") as error:
        provenance.sign(b"{}", bad)
    assert error.value.fix


@needs_keygen
def test_a_key_that_cannot_sign_without_a_terminal_is_refused_before_any_work(repo, tmp_path, monkeypatch):
    junk = tmp_path / "junk_key"
    junk.write_text("not a key\n")
    locked = tmp_path / "locked_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "a passphrase", "-f", str(locked)], check=True)
    good = keypair(tmp_path)
    with pytest.raises(ConfigError, match="is not an SSH private key") as error:
        provenance.check_sign_key(junk)
    assert error.value.fix
    with pytest.raises(ConfigError, match="protected by a passphrase"):
        provenance.check_sign_key(locked)
    assert str(good) in provenance.check_sign_key(good)
    with pytest.raises(ConfigError, match="is a folder, not a key file"):
        provenance.sign_key_path(str(tmp_path), {})
    # The dry run lists it among its problems (no compile, no export to reach first).
    monkeypatch.setattr(pipeline, "docker_client", lambda: (_ for _ in ()).throw(
        EnvironmentProblem("no Docker engine is reachable", fix="-")))
    with pytest.raises(FlashBuildError) as raised:
        pipeline.build(repo, "smoke", dry_run=True, offline=True, sign_key=locked)
    assert "signing key" in raised.value.message and "protected by a passphrase" in raised.value.message


def test_the_sign_key_comes_from_the_option_then_the_environment_and_must_exist(tmp_path):
    key = tmp_path / "k"
    key.write_text("x")
    assert provenance.sign_key_path(None, {}) is None
    assert provenance.sign_key_path(None, {"FLASHBUILD_SIGN_KEY": str(key)}) == key.resolve()
    assert provenance.sign_key_path(str(key), {"FLASHBUILD_SIGN_KEY": "/elsewhere"}) == key.resolve()
    with pytest.raises(ConfigError, match="signing key .*missing-key does not exist"):
        provenance.sign_key_path(str(tmp_path / "missing-key"), {})
