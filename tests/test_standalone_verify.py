"""The standalone verifier (`<tarball>.verify.pyz`, flashbuild/release/verifier.py): written beside every
exported tarball and named in its provenance, it runs with the standard library alone, outside any
clone, and answers as `invoke verify` does; schema_lite, the manifest's validator in both, agrees
with jsonschema."""

import copy
import gzip
import hashlib
import json
import math
import shutil
import subprocess
import sys

import jsonschema
import pytest

from flashbuild import pipeline
from flashbuild.core import schema_lite
from flashbuild.release import manifest, verifier
from flashbuild.release.checks import LIBRARY_TOOLS

from conftest import exported_manifest

needs_keygen = pytest.mark.skipif(not shutil.which("ssh-keygen"), reason="needs OpenSSH's ssh-keygen")


def consumer_copy(tarball, folder):
    """The tarball and every file beside it made with it, copied where no clone is."""
    folder.mkdir()
    for path in tarball.parent.glob(f"{tarball.name}*"):
        shutil.copy(path, folder / path.name)
    return folder / tarball.name


def run_pyz(tarball, *args):
    """The verifier as a consumer runs it: isolated (-I: no PYTHONPATH, no current folder on the
    path) and without site-packages (-S: no jsonschema, no yaml), from the tarball's folder."""
    pyz = tarball.parent / f"{tarball.name}{verifier.SUFFIX}"
    return subprocess.run([sys.executable, "-I", "-S", str(pyz), tarball.name, *args], cwd=tarball.parent,
                          capture_output=True, text=True, timeout=60)


def first_failure(text):
    return next((line.strip() for line in text.splitlines() if line.strip().startswith("[FAIL]")), None)


def test_the_verifier_lies_beside_the_tarball_named_in_its_provenance_and_is_deterministic(exported):
    tarball, _ = exported
    pyz = tarball.parent / f"{tarball.name}{verifier.SUFFIX}"
    statement = json.loads((tarball.parent / f"{tarball.name}.provenance.json").read_text())
    subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    assert subjects[pyz.name] == hashlib.sha256(pyz.read_bytes()).hexdigest()
    assert pyz.read_bytes() == verifier.zipapp() == verifier.zipapp()


def tamper_digest(tarball):
    (tarball.parent / f"{tarball.name}.sha256").write_text(f"{'0' * 64}  {tarball.name}\n")


def drop_provenance(tarball):
    (tarball.parent / f"{tarball.name}.provenance.json").unlink()


def flip_a_byte(tarball):
    data = bytearray(tarball.read_bytes())
    data[len(data) // 2] ^= 0x01
    tarball.write_bytes(bytes(data))
    digest = hashlib.sha256(data).hexdigest()  # a consistent .sha256 and provenance: only the gzip CRC can tell
    (tarball.parent / f"{tarball.name}.sha256").write_text(f"{digest}  {tarball.name}\n")
    statement_file = tarball.parent / f"{tarball.name}.provenance.json"
    statement = json.loads(statement_file.read_text())
    statement["subject"][0]["digest"]["sha256"] = digest
    statement_file.write_text(json.dumps(statement))


def bad_manifest(tarball):
    """A tarball, consistent beside it, whose manifest.json lacks `capabilities`."""
    import io
    import tarfile

    members = []
    with tarfile.open(tarball, "r:gz") as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member).read() if member.isfile() else None
            if member.name.endswith("/manifest.json"):
                content = json.loads(data)
                del content["capabilities"]
                data = json.dumps(content).encode()
                member.size = len(data)
            members.append((member, data))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for member, data in members:
            tar.addfile(member, io.BytesIO(data) if data is not None else None)
    tarball.write_bytes(gzip.compress(buffer.getvalue(), mtime=0))
    flip = hashlib.sha256(tarball.read_bytes()).hexdigest()
    (tarball.parent / f"{tarball.name}.sha256").write_text(f"{flip}  {tarball.name}\n")
    statement_file = tarball.parent / f"{tarball.name}.provenance.json"
    statement = json.loads(statement_file.read_text())
    statement["subject"][0]["digest"]["sha256"] = flip
    statement_file.write_text(json.dumps(statement))


@pytest.mark.parametrize("tamper", [tamper_digest, drop_provenance, flip_a_byte, bad_manifest])
def test_the_verifier_without_a_clone_fails_a_tampered_tarball_at_the_check_invoke_verify_fails(
        exported, tmp_path, repo, tamper):
    tarball = consumer_copy(exported[0], tmp_path / "consumer")
    tamper(tarball)
    report = pipeline.verify_artifact(repo, tarball)
    expected = next(c.name for c in report.checks if not c.ok)
    result = run_pyz(tarball)
    assert result.returncode == 7, result.stderr
    assert first_failure(result.stderr) == f"[FAIL] {expected}", result.stderr
    assert "Traceback" not in result.stderr


@needs_keygen
def test_the_verifier_checks_the_signature_against_allowed_signers(exported, tmp_path):
    tarball, sign = exported
    signers = sign()
    copied = consumer_copy(tarball, tmp_path / "consumer")
    result = run_pyz(copied, "--allowed-signers", str(signers))
    assert "[PASS] " + f"{copied.name}.provenance.json.sig: the provenance's signature verifies by a signer of" \
        in result.stdout + result.stderr, result.stdout + result.stderr
    (copied.parent / f"{copied.name}.provenance.json.sig").unlink()
    missing = run_pyz(copied, "--allowed-signers", str(signers))
    assert missing.returncode == 7
    assert first_failure(missing.stderr) == f"[FAIL] {copied.name}.provenance.json.sig is present (--allowed-signers " \
                                            "was given)"


def test_an_intact_tarball_reaches_the_library_checks_which_need_their_tools(exported, tmp_path):
    tarball = consumer_copy(exported[0], tmp_path / "consumer")
    result = run_pyz(tarball)
    output = result.stdout + result.stderr
    assert "[PASS] the tarball is an intact gzip stream" in output, output
    if not all(shutil.which(tool) for tool in ("cmake", "pkg-config")):
        assert result.returncode == 4 and "cmake" in result.stderr
        return
    # The stand-in library fails its checks, or, without the tools, the check naming them does.
    assert result.returncode == 7, output
    if not all(shutil.which(tool) for tool in LIBRARY_TOOLS):
        assert first_failure(output) == "[FAIL] the library's checks can run (nm, readelf, cuobjdump on PATH)"


def test_bad_arguments_are_named_without_a_traceback(exported, tmp_path):
    tarball = consumer_copy(exported[0], tmp_path / "consumer")
    pyz = tarball.parent / f"{tarball.name}{verifier.SUFFIX}"
    for args, named in [(["nothing.tar.gz"], "is not a tarball here"),
                        ([tarball.name, "--allowed-signers", "absent"], "allowed-signers file absent does not exist")]:
        result = subprocess.run([sys.executable, "-I", "-S", str(pyz), *args], cwd=tarball.parent, capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 2 and named in result.stderr and "Traceback" not in result.stderr, result.stderr


def mutations(valid):
    """The valid manifest broken (or not) one place at a time: each required key dropped, values of
    the wrong type or out of range, bad names and paths, JSON's true against 1."""
    yield valid
    for key in list(valid):
        yield {k: v for k, v in valid.items() if k != key}
    for key in valid:
        for value in (None, 5, 1.0, "x", [], {}, True, math.inf):
            yield {**valid, key: value}
    edits = [
        ("manifest_schema", 1.0), ("manifest_schema", True), ("version", "1.2"), ("version", "1.2.3\n"),
        ("entry", "-bad"), ("archs", ["sm_90a", "sm_75"]), ("files", {"/etc/passwd": "b" * 64}),
        ("files", {"lib/../x": "b" * 64}), ("files", {"lib/x": "B" * 64}), ("files", {}),
        ("api", {"soname": "libflash_attn_standalone.so.0"}), ("api", {"soname": "libx.so.0", "exports": ["fas_a"]}),
        ("translation_units", [{"name": "k", "kind": "kernel", "source": "kernels/k.cu"}]),
        ("translation_units", [{"name": "h", "kind": "host", "source": "src/h.cpp"}]),
        ("translation_units", [{"name": "k", "kind": "kernel", "symbol": "", "source": "k.cu"}]),
        ("capabilities", [{"family": "f", "dtype": "fp16", "head_dim": 64.0, "causal": True}]),
        ("capabilities", [{"family": "f", "dtype": "fp16", "head_dim": 64.5, "causal": True}]),
        ("capabilities", [{"family": "f", "dtype": "fp16", "head_dim": True, "causal": True}]),
        ("capabilities", [{"family": "f", "dtype": "fp16", "head_dim": 2048, "causal": True}]),
        ("capabilities", [{"family": "f", "dtype": "fp16", "head_dim": 64, "causal": 1}]),
        ("capabilities", [{"family": "f", "dtype": "fp16", "head_dim": 64, "causal": True, "extra": 1}]),
        ("sources", [{"name": "a", "version": "1", "filename": "a.whl", "sha256": "z" * 64}]),
        ("verify", [{"check": "x", "ok": "yes"}]), ("flags", ["-O3", 3]),
    ]
    for key, value in edits:
        yield {**valid, key: value}


def test_schema_lite_accepts_and_refuses_the_manifests_jsonschema_does():
    valid = json.loads(json.dumps(exported_manifest()))
    standard = jsonschema.Draft202012Validator(manifest.SCHEMA)
    lite = schema_lite.Validator(manifest.SCHEMA)
    count = 0
    for candidate in mutations(valid):
        candidate = copy.deepcopy(candidate)
        assert (lite.first_problem(candidate) is None) == standard.is_valid(candidate), candidate
        count += 1
    assert lite.first_problem(valid) is None and count > 150


def test_schema_lite_refuses_a_schema_with_a_keyword_it_does_not_implement():
    with pytest.raises(ValueError, match="does not implement"):
        schema_lite.Validator({"type": "object", "properties": {"a": {"oneOf": [{"type": "string"}]}}})
