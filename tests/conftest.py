import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


class FakeContainer:
    """Stands in for the toolchain container: records each command and, as nvcc would,
    writes the file after -o (and GNU time's figures after its own -o)."""

    def __init__(self):
        self.commands: list[list[str]] = []  # without fixed_pid's wrapper
        self.environments: list[dict] = []
        self.removed = False

    def remove(self):
        self.removed = True

    def exec(self, argv, log_path=None, environment=None):
        from flashbuild.toolchains.container import ExecResult

        if argv[:2] == ["sh", "-c"]:  # fixed_pid.wrap: sh -c SCRIPT sh ARGV...
            argv = argv[4:]
        self.commands.append(list(argv))
        self.environments.append(dict(environment or {}))
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.write_text("")
        if argv[0] == "/usr/bin/time":
            Path(argv[argv.index("-o") + 1]).write_text("12.5 2048000\n")
            argv = argv[argv.index("nvcc"):]
        if "-o" in argv:
            output = Path(argv[argv.index("-o") + 1])
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_bytes(b"\x7fELF stand-in")
        return ExecResult(0, "")

    def check(self, argv):
        return self.exec(argv).output


@pytest.fixture
def fake_build(tmp_path):
    """What EntryCompiler needs besides a plan, without Docker or fetched sources: a fake
    image, the lock's pins rooted at folders that need not exist, and a FakeContainer."""
    from types import SimpleNamespace

    from flashbuild.sources import upstream as sources

    pins = sources.load_lock(REPO / "sources.lock.yaml")
    fetched = {name: sources.FetchedSource(pin, tmp_path / "third_party" / pin.extract_dir_name)
               for name, pin in pins.items()}
    return SimpleNamespace(image=SimpleNamespace(image_id="sha256:" + "0" * 64), sources=fetched,
                           container=FakeContainer(), third_party=tmp_path / "third_party")


def toy_matrix(family: str, head_dims: str, dtypes: str, causal: str, estimate_gb: float) -> str:
    """matrix.yaml text of one matrix, `toy`, of one entry that builds `family` (its head dims,
    dtypes and causal values as YAML lists), for tests that add a family to FAMILIES."""
    return f"""\
schema_version: 1
images:
  img:
    dockerfile: docker/cuda12-debian-trixie.Dockerfile
    cuda: "12.4"
    base: {{suite: trixie, components: [main]}}
matrices:
  toy:
    entries:
      - name: toy-entry
        cuda: "12.4"
        image: img
        archs: [sm_90a]
        flags: [-O3]
        memory_estimates_gb: {{host: 1.0, {family}: {estimate_gb}}}
        kernels:
          - {{family: {family}, head_dims: {head_dims}, dtypes: {dtypes}, causal: {causal}}}
"""


def write_tree(root: Path, files: dict) -> Path:
    """Create files (relative path -> text) under root."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def provenance_record(repo):
    """What the build hands provenance.beside_files for the smoke entry (made-up image and commit)."""
    from flashbuild.release import provenance
    from flashbuild.config.options import load_config
    from flashbuild.sources.upstream import load_lock

    entry = load_config(repo / "matrix.yaml").matrix("smoke").entries[0]
    pins = load_lock(repo / "sources.lock.yaml")
    manifest = {"version": "0.4.0", "entry": entry.name, "flags": ["-O3", "-I$REPO/src"], "archs": ["sm_90a"],
                "artifact_key": "k" * 64,
                "sources": [{"name": p.name, "version": p.version, "filename": p.filename, "sha256": p.sha256}
                            for p in pins.values()],
                "toolchain": {"tag": "flashbuild/cuda12-debian-trixie:cd8111c17aa26401", "id": "sha256:" + "ab" * 32,
                              "dockerfile": "docker/cuda12-debian-trixie.Dockerfile"}}
    return {"matrix": "smoke", "entry": entry, "manifest": manifest, "repo": repo, "pins": pins,
            "git": {"commit": "c" * 40, "dirty": True}, "command": provenance.command_line("smoke", False),
            "build_time": {"epoch": 1_700_000_000, "source": "SOURCE_DATE_EPOCH"}}


def keypair(tmp_path, name="release"):
    key = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    return key


def allowed(tmp_path, key, identity="release@example.org"):
    signers = tmp_path / f"allowed_signers-{key.name}"
    signers.write_text(f"{identity} {(key.parent / (key.name + '.pub')).read_text()}")
    return signers


def record_manifest(artifact_key: str = "a" * 64) -> dict:
    """What a build hands export (which adds version, entry, files and dates), complete for
    flashbuild/resources/manifest.schema.json."""
    return {"matrix": "smoke", "archs": ["sm_90a"],
            "api": {"soname": "libflash_attn_standalone.so.0", "exports": ["fas_fwd"]},
            "translation_units": [{"name": "k", "kind": "kernel", "symbol": "run_k", "source": "kernels/k.cu"},
                                  {"name": "h", "kind": "host", "source": "src/api/h.cpp"}],
            "capabilities": [{"family": "fa2_fwd", "dtype": "fp16", "head_dim": 64, "causal": False}],
            "sources": [], "toolchain": {"dockerfile": "docker/x.Dockerfile"}, "flags": ["-O3"],
            "artifact_key": artifact_key}


def exported_manifest(**changes) -> dict:
    """An exported manifest.json's contents (record_manifest plus what export adds)."""
    return {**record_manifest(), "manifest_schema": 1, "product": "flash_attn_standalone", "version": "0.1.0",
            "entry": "e1", "files": {"lib/libflash_attn_standalone.so.0.1.0": "b" * 64},
            "created_utc": "2023-11-14T22:13:20+00:00", "created_from": "SOURCE_DATE_EPOCH", **changes}


@pytest.fixture
def interruptible():
    """SIGINT raises KeyboardInterrupt for the test's duration, as in an interactive shell. Python
    keeps SIGINT ignored when it starts ignored, as it does in a background job of a script (issue
    31, finding 10): a test that interrupts itself sets the handler it relies on. Yields
    interrupt_when(event): SIGINT to this process once `event` is set (the work to interrupt is
    running; a fixed delay fired before it started on a loaded machine), returning a dict whose
    "at" is then the time.monotonic() of the signal."""
    import os
    import signal
    import threading
    import time

    def interrupt_when(event):
        fired = {}

        def fire():
            if event.wait(30):
                fired["at"] = time.monotonic()
                os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=fire, daemon=True).start()
        return fired

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield interrupt_when
    signal.signal(signal.SIGINT, previous)


def stand_in_build(folder: Path, version: str, headers: dict[str, str]):
    """What export takes from a build, as stand-in files in folder: (library, header paths, test binary)."""
    folder.mkdir()
    library = folder / f"libflash_attn_standalone.so.{version}"
    library.write_bytes(b"\x7fELF stand-in library")
    paths = []
    for name, text in headers.items():
        paths.append(folder / name)
        paths[-1].write_text(text)
    binary = folder / "test_varlen_inference"
    binary.write_bytes(b"\x7fELF stand-in binary")
    return library, paths, binary


@pytest.fixture
def exported(tmp_path, provenance_record):
    """An exported tarball of stand-in files, its provenance (and verifier) made by the build's own
    code; `sign` re-exports it signed with a fresh key and returns the allowed-signers file."""
    from flashbuild.release import export, provenance
    from flashbuild.core.build_time import BuildTime

    record = provenance_record
    library, headers, binary = stand_in_build(tmp_path / "built", "0.4.0", {"flash_attn_standalone.h": "/* header */\n"})

    def export_with(key=None):
        beside = provenance.beside_files(matrix="smoke", entry=record["entry"], manifest=record["manifest"],
                                         repo=record["repo"], git=record["git"], command=record["command"],
                                         build_time=record["build_time"], sign_key=key)
        return export.export_artifact(tmp_path / "artifacts", "smoke", library, headers, binary, record_manifest(),
                                      BuildTime(1_700_000_000, "SOURCE_DATE_EPOCH"), beside)[1]

    def sign():
        key = keypair(tmp_path)
        export_with(key)
        return allowed(tmp_path, key)

    return export_with(), sign
