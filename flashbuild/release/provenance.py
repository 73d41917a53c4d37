"""Provenance beside each tarball: an in-toto statement with an SLSA v1 provenance predicate,
and, when the release engineer names a key, a detached SSH signature of it made offline.

    artifacts/<version>/<tarball>.provenance.json      the statement (subjects: the tarball's sha256,
                                                       and the standalone verifier's beside it)
    artifacts/<version>/<tarball>.provenance.json.sig  `ssh-keygen -Y sign` of it (optional)
    artifacts/<version>/<tarball>.verify.pyz           the standalone verifier (verifier.py)

The statement records what made the tarball: the toolchain image (id, tag, Dockerfile and its
sha256), every source pin with its sha256, the matrix entry as matrix.yaml defines it, the
compile flags, the command, and the git commit with a dirty flag. It holds no wall-clock time
(the build time is SOURCE_DATE_EPOCH or the commit's, build_time.py), so two builds of the same
inputs write the same statement. Signing and checking go through ssh-keygen (OpenSSH 8.2 or
later); verifying with an allowed-signers file:

    ssh-keygen -Y verify -f allowed_signers -I <identity> -n flash_attn_standalone-provenance \\
        -s <tarball>.provenance.json.sig < <tarball>.provenance.json
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
from pathlib import Path

from flashbuild.release import verifier
from flashbuild.core.errors import ConfigError, ExportError
from flashbuild.core.hashing import sha256_of

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
# SLSA asks for a URI naming the build process; this one names this repository's build task.
BUILD_TYPE = "urn:flash-attn-standalone:flashbuild:build:v1"
BUILDER_ID = "urn:flash-attn-standalone:flashbuild:invoke-build"
NAMESPACE = "flash_attn_standalone-provenance"  # ssh-keygen -n: a signature for this use only
SUFFIX = ".provenance.json"
SIGNATURE_SUFFIX = SUFFIX + ".sig"
SIGN_KEY_VARIABLE = "FLASHBUILD_SIGN_KEY"


def git_state(repo: Path) -> dict:
    """The checkout's commit and whether its tracked or unignored files differ from it (None
    for each when repo is not a git checkout)."""
    def git(*args):
        try:
            result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return result.stdout if result.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=normal")
    return {"commit": commit.strip() if commit else None, "dirty": None if status is None else bool(status.strip())}


def image_record(image: dict, repo: Path) -> dict:
    """The toolchain image as the manifest describes it, plus its Dockerfile's sha256."""
    record = {"tag": image.get("tag"), "id": image.get("id"), "dockerfile": image.get("dockerfile")}
    dockerfile = repo / record["dockerfile"] if record["dockerfile"] else None
    record["dockerfile_sha256"] = sha256_of(dockerfile) if dockerfile and dockerfile.is_file() else None
    return record


def command_line(matrix: str, sccache: bool, backend: str = "container") -> str:
    """The task invocation, without options that cannot change the bytes (jobs, memory reserve)."""
    return (f"python3 -m invoke build --matrix {matrix}" + (" --sccache" if sccache else "")
            + (f" --backend {backend}" if backend != "container" else ""))


def statement(tarball_name: str, tarball_sha256: str, *, matrix: str, entry, manifest: dict, image: dict,
              git: dict, command: str, build_time: dict, also: dict[str, str] | None = None) -> dict:
    """The in-toto statement of one exported tarball (pure: every input is an argument).
    `entry` is the options.Entry the tarball was built from; `manifest` its manifest.json; `also`
    more subjects (file name -> sha256) made with the tarball, such as its verifier."""
    entry_record = dataclasses.asdict(entry) if dataclasses.is_dataclass(entry) else dict(entry)
    dependencies = [{
        "name": "repository",
        "digest": {"gitCommit": git["commit"]} if git.get("commit") else {},
        "annotations": {"dirty": git.get("dirty")},
    }]
    # ResourceDescriptor needs a uri, digest or content: a checkout outside git has only a name.
    if not dependencies[0]["digest"]:
        dependencies[0]["uri"] = "file:unknown-checkout"
    dependencies += [{"name": source["name"], "digest": {"sha256": source["sha256"]},
                      "annotations": {"version": source["version"], "filename": source["filename"]}}
                     for source in manifest.get("sources", [])]
    image_id = (image.get("id") or "").removeprefix("sha256:")
    dependencies.append({"name": "toolchain-image", "digest": {"sha256": image_id} if image_id else {},
                         "annotations": {"tag": image.get("tag"), "dockerfile": image.get("dockerfile"),
                                         "dockerfile_sha256": image.get("dockerfile_sha256")}})
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": digest}}
                    for name, digest in {tarball_name: tarball_sha256, **(also or {})}.items()],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"matrix": matrix, "entry": entry_record, "command": command},
                "internalParameters": {"flags": manifest.get("flags", []), "archs": manifest.get("archs", []),
                                       "build_time": build_time, "artifact_key": manifest.get("artifact_key")},
                "resolvedDependencies": dependencies,
            },
            "runDetails": {
                "builder": {"id": BUILDER_ID, "version": {"flash_attn_standalone": manifest.get("version")}},
                "metadata": {"invocationId": f"{manifest.get('version')}/{manifest.get('entry')}"},
            },
        },
    }


def render(document: dict) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()


KEY_FIX = (f"pass the private key file (or, with ssh-agent, its .pub) to --sign-key or {SIGN_KEY_VARIABLE}; make "
           "one with `ssh-keygen -t ed25519 -f release_key`")


def sign_key_path(option: str | None, environ=os.environ) -> Path | None:
    """The signing key --sign-key names, else FLASHBUILD_SIGN_KEY, else None (no signature);
    a named key must be a file (check_sign_key says whether it can sign)."""
    value = option or environ.get(SIGN_KEY_VARIABLE)
    if not value:
        return None
    path = Path(value).expanduser()
    if path.is_dir():
        raise ConfigError(f"the signing key {path} is a folder, not a key file", fix=KEY_FIX)
    if not path.is_file():
        raise ConfigError(f"the signing key {path} does not exist", fix=KEY_FIX)
    return path.resolve()


def check_sign_key(key: Path) -> str:
    """What signs with `key`, as the build will sign (no terminal): a private key without a
    passphrase, or a public key whose private half ssh-agent holds; else a ConfigError. The dry
    run and the build check it before any work, not at export."""
    def run(*argv):
        try:
            result = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, timeout=30)
        except FileNotFoundError:
            raise ConfigError(f"{argv[0]} is not installed, so the provenance cannot be signed",
                              fix="install OpenSSH's client (`apt-get install openssh-client`), or build without "
                                  "--sign-key") from None
        return result.returncode, (result.stdout + result.stderr).decode(errors="replace").strip()

    if key.suffix == ".pub":
        code, output = run("ssh-keygen", "-l", "-f", str(key))
        if code != 0:
            raise ConfigError(f"the signing key {key} is not an SSH public key ({output[-200:]})", fix=KEY_FIX)
        public = key.read_text(errors="replace").split()[:2]
        code, agent = run("ssh-add", "-L")
        if code != 0 or not any(line.split()[:2] == public for line in agent.splitlines()):
            raise ConfigError(f"no ssh-agent holds the private half of {key}",
                              fix="start ssh-agent and `ssh-add` the private key, or pass the private key file")
        return f"{key} (ssh-agent)"
    code, output = run("ssh-keygen", "-y", "-P", "", "-f", str(key))
    if code != 0:
        if "passphrase" in output.lower():
            raise ConfigError(f"the signing key {key} is protected by a passphrase, and the build signs without "
                              "a terminal", fix="`ssh-add` it to ssh-agent and pass its .pub, or use a key without "
                                               "a passphrase")
        raise ConfigError(f"the signing key {key} is not an SSH private key ({output[-200:]})", fix=KEY_FIX)
    return f"{key} ({' '.join(output.split()[:1])})"


def sign(data: bytes, key: Path) -> bytes:
    """A detached SSH signature of data (ssh-keygen -Y sign; offline: the key never leaves this host)."""
    try:
        result = subprocess.run(["ssh-keygen", "-q", "-Y", "sign", "-f", str(key), "-n", NAMESPACE], input=data,
                                capture_output=True, timeout=300)
    except FileNotFoundError:
        raise ExportError("ssh-keygen is not installed, so the provenance cannot be signed",
                          fix="install OpenSSH's client (`apt-get install openssh-client`), or build without "
                              "--sign-key") from None
    except subprocess.TimeoutExpired:
        raise ExportError(f"ssh-keygen did not sign within 300 s with {key}",
                          fix="a key with a passphrase needs a terminal or ssh-agent") from None
    if result.returncode != 0 or b"BEGIN SSH SIGNATURE" not in result.stdout:
        raise ExportError(f"signing the provenance with {key} failed: {result.stderr.decode(errors='replace')[-800:]}",
                          fix="check the key (`ssh-keygen -y -f KEY` prints its public half)")
    return result.stdout


def check_signature(data: bytes, signature: Path, allowed_signers: Path | None) -> tuple[bool, str]:
    """(valid, detail): with allowed_signers, ssh-keygen -Y verify against the principal it
    names for the signing key; without, only that the signature matches data and its own key."""
    def keygen(*args, stdin: bytes | None = None):
        result = subprocess.run(["ssh-keygen", "-Y", *args], input=stdin, capture_output=True, timeout=60)
        return result.returncode, (result.stdout + result.stderr).decode(errors="replace").strip()

    if allowed_signers is None:
        code, output = keygen("check-novalidate", "-n", NAMESPACE, "-s", str(signature), stdin=data)
        return code == 0, output
    code, principals = keygen("find-principals", "-s", str(signature), "-f", str(allowed_signers))
    if code != 0 or not principals:
        return False, f"no principal of {allowed_signers} made this signature ({principals})"
    principal = principals.splitlines()[0]
    code, output = keygen("verify", "-f", str(allowed_signers), "-I", principal, "-n", NAMESPACE, "-s",
                          str(signature), stdin=data)
    return code == 0, output


def beside_files(*, matrix: str, entry, manifest: dict, repo: Path, git: dict, command: str, build_time: dict,
                 sign_key: Path | None):
    """export.Beside for one entry: the standalone verifier, the statement of the finished tarball
    (and of the verifier), and its signature when sign_key names a key."""
    image = image_record(manifest.get("toolchain", {}), repo)
    checker = verifier.zipapp()
    checker_sha256 = hashlib.sha256(checker).hexdigest()

    def make(tarball_name: str, tarball_sha256: str) -> dict[str, bytes]:
        also = {f"{tarball_name}{verifier.SUFFIX}": checker_sha256}
        document = render(statement(tarball_name, tarball_sha256, matrix=matrix, entry=entry, manifest=manifest,
                                    image=image, git=git, command=command, build_time=build_time, also=also))
        files = {verifier.SUFFIX: checker, SUFFIX: document}
        if sign_key is not None:
            files[SIGNATURE_SUFFIX] = sign(document, sign_key)
        return files

    return make


def is_recorded(tarball: Path, signed: bool) -> bool:
    """Whether the provenance (and, if signed, its signature) and the verifier lie beside tarball:
    an up-to-date artifact without them is exported again."""
    statement_file = tarball.parent / f"{tarball.name}{SUFFIX}"
    signature = tarball.parent / f"{tarball.name}{SIGNATURE_SUFFIX}"
    checker = tarball.parent / f"{tarball.name}{verifier.SUFFIX}"
    return statement_file.is_file() and checker.is_file() and (signature.is_file() or not signed)
