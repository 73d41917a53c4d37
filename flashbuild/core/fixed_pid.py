"""One PID for every nvcc: what makes two compiles of a TU byte-identical.

nvcc names its temporary files after its process id (`tmpxft_<pid>_..._name.cudafe1.cpp`), and
that name reaches the object: as its FILE symbol, and in kernel TUs in the names of device
symbols. With the clone mounted at one fixed path (container.py), the PID is the last input
that differs between two builds. `build_shim` compiles fixed_pid.c (a getpid() that returns
a constant) in the toolchain container; `wrap` runs a command with it preloaded and with a
TMPDIR of its own, created on the spot, so that concurrent compiles never share a temporary
file. The shim's source is part of every object's key (`KEY_PART`).
"""

from __future__ import annotations

from pathlib import Path

SOURCE = Path(__file__).parent.parent / "resources" / "fixed_pid.c"
KEY_PART = SOURCE.read_text()
SHIM_NAME = "libfixedpid.so"
# Container-local scratch (not the mounted clone): one folder per command.
SCRATCH = "/tmp/flashbuild-tmp"


def build_shim(container, tools_dir: Path) -> Path:
    """Compile the shim into tools_dir (a host path under the clone) with the container's nvcc,
    which drives the host compiler it is configured with (images name no plain `gcc`)."""
    tools_dir.mkdir(parents=True, exist_ok=True)
    source = tools_dir / SOURCE.name  # beside the shim: the container sees tools_dir, maybe not SOURCE
    source.write_text(KEY_PART)
    shim = tools_dir / SHIM_NAME
    container.check(["nvcc", "-shared", "--cudart=none", "-O2", "-Xcompiler=-fPIC", "-o", str(shim), str(source)])
    return shim


def wrap(argv: list[str], shim: Path, scratch_name: str) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) that run argv with the shim preloaded in TMPDIR=SCRATCH/scratch_name."""
    environment = {"LD_PRELOAD": str(shim), "TMPDIR": f"{SCRATCH}/{scratch_name}"}
    return ["sh", "-c", 'mkdir -p "$TMPDIR" && exec "$@"', "sh", *argv], environment
