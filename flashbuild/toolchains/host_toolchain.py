"""The host-toolchain backend (`invoke build --backend host`): compile with the CUDA toolkit
installed on this machine instead of in the toolchain container.

The plan, the memory-aware admission, verify and export are the container route's; what differs
is who runs each command and what the artifact records:

- `discover` finds the toolkit (CUDA_HOME/bin/nvcc, else nvcc on PATH, else
  /usr/local/cuda/bin/nvcc), reads nvcc's and its ptxas's versions, the host compiler nvcc
  drives (NVCC_CCBIN, else gcc) and the GPU codes nvcc can emit, and refuses, as an
  EnvironmentProblem, when there is no toolkit, no host compiler or no cuobjdump (verify's).
- `host_plan` refuses an entry whose archs the toolkit cannot emit (naming the arch and the
  toolkit), renames each entry after the toolkit (minimal-cuda12.4-sm90a ->
  minimal-host-cuda13.0-sm90a; the tarball follows) and drops what belongs to the image: its
  pinned ptxas (the toolkit's own assembles, and is recorded; the wheel is not fetched) and any
  -ccbin (the image's host compiler path means nothing here).
- `HostToolchain` runs commands as ToolchainContainer does (exec, run_tool, check), on this
  machine, with the toolkit's bin/ first on PATH. GNU time is replaced by peak_time.py (GPU
  hosts need not have it), fixed_pid's scratch folder by one under the clone's build/.

Objects are not path-independent here: the container mounts every clone at one path, but on
the host the clone's real path reaches the objects, so it is part of every host object's key,
with the toolkit's versions (`identity`): a host object is never taken for a container one, nor
for another toolkit's or another clone's. The fixed-PID shim is still built (by the host nvcc)
and preloaded, so two host builds in one clone write the same objects.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from flashbuild.core import fixed_pid
from flashbuild.toolchains.container import CommandRunner, ExecResult
from flashbuild.core.errors import ConfigError, EnvironmentProblem
from flashbuild.toolchains.images import ToolchainImage
from flashbuild.config.options import Entry, ImageSpec
from flashbuild.config.build_plan import BuildPlan

BACKENDS = ("container", "host")
DEFAULT_CUDA_ROOT = Path("/usr/local/cuda")  # where NVIDIA's installers put the toolkit
PEAK_TIME = Path(__file__).parent.parent / "resources" / "peak_time.py"
GNU_TIME = "/usr/bin/time"  # what compiler.py measures each compile with, in the container
SCRATCH_FOLDER = "host-tmp"  # under build/: fixed_pid's per-command TMPDIRs, per clone
RELEASE = re.compile(r"release (\d+\.\d+), (V[\w.]+)")
ARCH_SUFFIX = re.compile(r"^(sm_\d+)[af]$")  # arch-specific (sm_90a) and family (sm_100f) codes
CCBIN_FLAGS = ("-ccbin", "--compiler-bindir")


# -- discovery ------------------------------------------------------------------------------
def parse_release(text: str) -> tuple[str, str]:
    """('13.0', 'V13.0.48') from `nvcc --version` or `ptxas --version` output."""
    match = RELEASE.search(text)
    if not match:
        raise EnvironmentProblem(f"cannot read a CUDA release from:\n{text.strip()[-500:]}",
                                 fix="check that CUDA_HOME or PATH names a CUDA toolkit's nvcc")
    return match.group(1), match.group(2)


def parse_gpu_codes(text: str) -> tuple[str, ...]:
    """The sm_XX codes of `nvcc --list-gpu-code` output, in its order."""
    return tuple(dict.fromkeys(re.findall(r"\bsm_\d+[a-z]?\b", text)))


def arch_supported(arch: str, codes) -> bool:
    """Whether nvcc can emit `arch`. nvcc 12.4 lists sm_90 but not sm_90a, though it emits it:
    an arch-specific code (sm_90a) or family code (sm_100f) counts when its base is listed."""
    if arch in codes:
        return True
    match = ARCH_SUFFIX.match(arch)
    return bool(match) and match.group(1) in codes


def host_entry_name(name: str, cuda: str, release: str) -> str:
    """The entry's name for a build with the host toolkit of `release`: its `cuda<image's
    release>` part becomes `host-cuda<release>`, or that is appended when the name has none."""
    token = f"cuda{cuda}"
    if token in name:
        return name.replace(token, f"host-cuda{release}", 1)
    return f"{name}-host-cuda{release}"


def host_flags(flags) -> tuple[str, ...]:
    """An entry's nvcc flags without those that name the image's own tools (-ccbin PATH,
    --compiler-bindir=PATH): on the host, nvcc uses the host's compiler (NVCC_CCBIN or gcc)."""
    kept, skip = [], False
    for flag in flags:
        if skip:
            skip = False
            continue
        if flag in CCBIN_FLAGS:
            skip = True
            continue
        if flag.startswith(tuple(f"{name}=" for name in CCBIN_FLAGS)):
            continue
        kept.append(flag)
    return tuple(kept)


def find_nvcc(environ) -> Path:
    home = environ.get("CUDA_HOME")
    if home:
        nvcc = Path(home) / "bin" / "nvcc"
        if nvcc.is_file() and os.access(nvcc, os.X_OK):
            return nvcc
        raise EnvironmentProblem(f"CUDA_HOME is {home}, but {nvcc} is not an nvcc that can be run",
                                 fix="set CUDA_HOME to a CUDA toolkit's root (the folder holding bin/nvcc), or unset "
                                     "it to use the nvcc on PATH")
    found = shutil.which("nvcc", path=environ.get("PATH", os.defpath))
    if found:
        return Path(found)
    fallback = DEFAULT_CUDA_ROOT / "bin" / "nvcc"
    if fallback.is_file() and os.access(fallback, os.X_OK):
        return fallback
    raise EnvironmentProblem(f"--backend host found no CUDA toolkit: CUDA_HOME is not set, no nvcc is on PATH and "
                             f"{fallback} does not exist",
                             fix="set CUDA_HOME to the toolkit's root (e.g. CUDA_HOME=/usr/local/cuda-13.0) or put its "
                                 "bin/ on PATH; or build in the container (--backend container)")


def _output(argv: list, environ: dict) -> str:
    try:
        result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=environ, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentProblem(f"cannot run `{' '.join(map(str, argv))}`: {exc}",
                                 fix="check the CUDA toolkit's installation") from None
    if result.returncode != 0:
        raise EnvironmentProblem(f"`{' '.join(map(str, argv))}` failed (exit {result.returncode}):\n"
                                 f"{(result.stdout + result.stderr).strip()[-1000:]}",
                                 fix="check the CUDA toolkit's installation")
    return result.stdout + result.stderr


def _release_tuple(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def _cuobjdump(environ: dict, nvcc: Path, release: str) -> Path:
    """Verify's cuobjdump, at least as new as nvcc: an older one misreads newer objects (12.4's
    lists CUDA 13.0's sm_90a code as sm_90, and the arch check would fail)."""
    found = shutil.which("cuobjdump", path=environ.get("PATH", os.defpath))
    if not found:
        raise EnvironmentProblem(f"no cuobjdump beside {nvcc} or on PATH (verify lists each object's GPU code with it)",
                                 fix=f"install the toolkit's cuobjdump (CUDA {release} or newer) or put it on PATH")
    own, _ = parse_release(_output([found, "--version"], environ))
    if _release_tuple(own) < _release_tuple(release):
        raise EnvironmentProblem(f"{found} is CUDA {own}'s cuobjdump, older than nvcc {release} ({nvcc}): it misnames "
                                 f"the newer toolkit's GPU code, so verify would fail",
                                 fix=f"put a cuobjdump of CUDA {release} or newer ahead of it on PATH")
    return Path(found)


def _host_compiler(environ: dict) -> Path:
    """The compiler nvcc drives: NVCC_CCBIN (a compiler or the folder holding gcc), else gcc."""
    ccbin = environ.get("NVCC_CCBIN")
    candidate = str(Path(ccbin) / "gcc") if ccbin and Path(ccbin).is_dir() else ccbin or "gcc"
    found = shutil.which(candidate, path=environ.get("PATH", os.defpath))
    if not found:
        where = f"NVCC_CCBIN={ccbin}" if ccbin else "gcc on PATH"
        raise EnvironmentProblem(f"--backend host found no host compiler for nvcc ({where})",
                                 fix="install gcc and g++ in a version the CUDA toolkit supports, or set NVCC_CCBIN")
    return Path(found)


@dataclass(frozen=True)
class HostToolkit:
    nvcc: Path
    release: str  # "13.0"
    nvcc_version: str  # "V13.0.48"
    ptxas: Path
    ptxas_version: str
    host_cc: str  # the first line of its --version
    gpu_codes: tuple[str, ...]
    cuobjdump: Path
    path_first: tuple[str, ...]  # folders put ahead of PATH: nvcc's, and its real one if it is a link

    def environment(self, environ=None) -> dict:
        """environ (default: this process's) with the toolkit's bin/ first on PATH, so that nvcc,
        ptxas and cuobjdump are the ones discovery found."""
        environ = dict(os.environ if environ is None else environ)
        environ["PATH"] = os.pathsep.join([*self.path_first, environ.get("PATH", os.defpath)])
        return environ

    def identity(self, repo_root: Path) -> str:
        """What stands for the image in object and artifact keys: the toolkit's and the host
        compiler's versions, and the clone's path (it reaches host objects)."""
        h = hashlib.sha256()
        for part in (self.release, self.nvcc_version, self.ptxas_version, self.host_cc, str(repo_root.resolve())):
            h.update(part.encode() + b"\0")
        return f"host:{h.hexdigest()}"

    def image(self, spec: ImageSpec, repo_root: Path) -> ToolchainImage:
        """The ToolchainImage the compiler keys objects by (never built: built=False)."""
        return ToolchainImage(tag=f"host nvcc {self.release} ({self.nvcc})", image_id=self.identity(repo_root),
                              spec=spec, built=False)

    def record(self) -> dict:
        """manifest.json's toolchain, beside the nvcc and ptxas lines the pipeline adds."""
        return {"backend": "host", "cuda": self.release, "nvcc_path": str(self.nvcc),
                "ptxas_path": str(self.ptxas), "ptxas_release": self.ptxas_version, "host_cc": self.host_cc}

    def describe(self) -> str:
        return (f"backend host: nvcc {self.release} ({self.nvcc_version}) at {self.nvcc}, ptxas {self.ptxas_version} "
                f"at {self.ptxas}, host compiler {self.host_cc}")

    def describe_compiles(self, objects: Path) -> str:
        """Where the TUs compile and which cache they are looked up in, for the dry run."""
        return (f"compiles: every TU on this machine, with {self.nvcc} (not in a container); "
                f"caches: {objects} (objects by key, keyed by this toolkit and this clone's path)")


def discover(environ=None) -> HostToolkit:
    """The CUDA toolkit of this machine (see the module docstring), or an EnvironmentProblem."""
    environ = dict(os.environ if environ is None else environ)
    nvcc = find_nvcc(environ)
    # nvcc finds ptxas in its own (real) bin/ first; a wrapper script may leave that to PATH.
    path_first = tuple(dict.fromkeys([str(nvcc.parent), str(Path(os.path.realpath(nvcc)).parent)]))
    env = {**environ, "PATH": os.pathsep.join([*path_first, environ.get("PATH", os.defpath)])}
    release, nvcc_version = parse_release(_output([nvcc, "--version"], env))
    ptxas_found = shutil.which("ptxas", path=env["PATH"])
    if not ptxas_found:
        raise EnvironmentProblem(f"no ptxas beside {nvcc} or on PATH", fix="check the CUDA toolkit's installation")
    ptxas = Path(ptxas_found)
    _, ptxas_version = parse_release(_output([ptxas, "--version"], env))
    codes = parse_gpu_codes(_output([nvcc, "--list-gpu-code"], env))
    cuobjdump = _cuobjdump(env, nvcc, release)
    cc = _host_compiler(env)
    host_cc = _output([cc, "--version"], env).strip().splitlines()[0]
    return HostToolkit(nvcc=nvcc, release=release, nvcc_version=nvcc_version, ptxas=ptxas,
                       ptxas_version=ptxas_version, host_cc=f"{host_cc} ({cc})", gpu_codes=codes,
                       cuobjdump=cuobjdump, path_first=path_first)


# -- the plan --------------------------------------------------------------------------------
def host_entry(entry: Entry, toolkit: HostToolkit) -> Entry:
    missing = [arch for arch in entry.archs if not arch_supported(arch, toolkit.gpu_codes)]
    if missing:
        raise EnvironmentProblem(
            f"entry {entry.name} needs {', '.join(missing)}, which the host CUDA toolkit {toolkit.release} "
            f"({toolkit.nvcc}) cannot target (nvcc --list-gpu-code: {', '.join(toolkit.gpu_codes) or 'nothing'})",
            fix="point CUDA_HOME at a toolkit that can (sm_90a needs CUDA 12.0 or newer), or build in the container "
                "(--backend container)")
    image = dataclasses.replace(entry.image, name=f"none (host nvcc {toolkit.nvcc})", dockerfile="", ptxas=None)
    return dataclasses.replace(entry, name=host_entry_name(entry.name, entry.cuda, toolkit.release),
                               cuda=toolkit.release, image=image, flags=host_flags(entry.flags))


def host_plan(plan: BuildPlan, toolkit: HostToolkit) -> BuildPlan:
    """The plan with every entry built by `toolkit` (host_entry), or an EnvironmentProblem."""
    return dataclasses.replace(plan, entries=tuple(dataclasses.replace(e, entry=host_entry(e.entry, toolkit))
                                                   for e in plan.entries))


def check_backend(backend: str, use_sccache: bool) -> None:
    if backend not in BACKENDS:
        raise ConfigError(f"--backend '{backend}' is not a backend",
                          fix="use --backend container (the toolchain image; the default) or --backend host "
                              "(the CUDA toolkit of this machine: CUDA_HOME or PATH)")
    if backend == "host" and use_sccache:
        raise ConfigError("--sccache is not available with --backend host (the pinned sccache runs in the "
                          "toolchain container)", fix="leave out --sccache, or build with --backend container")


# -- running commands ------------------------------------------------------------------------
class HostToolchain(CommandRunner):
    """ToolchainContainer's interface (a context manager with exec, run_tool and check), running
    each command on this machine, in the clone, with the toolkit's bin/ first on PATH."""

    def __init__(self, toolkit: HostToolkit, repo_root: Path, build_root: Path):
        self.toolkit = toolkit
        self.image = f"the host toolkit ({toolkit.nvcc})"  # what error messages say a command ran in
        self.repo_root = repo_root.resolve()
        self.scratch = build_root.resolve() / SCRATCH_FOLDER
        self.environment = toolkit.environment()
        self._running: set[subprocess.Popen] = set()
        self._lock = threading.Lock()

    def __enter__(self) -> "HostToolchain":
        return self

    def __exit__(self, *exc_info) -> None:
        self.remove()

    def remove(self) -> None:
        """End every command still running, with all its processes (what removing the container
        does to an interrupted build's nvcc processes). Each command runs in a session of its own,
        so its whole tree (sh, peak_time, nvcc, cicc, ptxas) is one process group. Idempotent."""
        with self._lock:
            leftover = list(self._running)
        for process in leftover:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:  # already gone
                pass

    def local(self, text: str) -> str:
        """text with fixed_pid's container scratch folder replaced by this clone's
        (build/host-tmp): on a shared host, clones must not share temporary files."""
        return text.replace(fixed_pid.SCRATCH, str(self.scratch))

    def command(self, argv) -> list[str]:
        """argv as this machine runs it: GNU time becomes peak_time.py, scratch paths local."""
        out = []
        for arg in map(str, argv):
            out += [sys.executable, str(PEAK_TIME)] if arg == GNU_TIME else [self.local(arg)]
        return out

    def exec(self, argv: list, log_path: Path | None = None, environment: dict | None = None) -> ExecResult:
        """Run argv here, with `environment` added; with log_path, output goes to that file (and
        is returned too). A command killed by signal N exits 128 + N, as through docker exec."""
        env = {**self.environment, **{name: self.local(value) for name, value in (environment or {}).items()}}
        command = self.command(argv)
        out = None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            out = open(log_path, "wb")
        try:
            process = subprocess.Popen(command, cwd=self.repo_root, env=env, stdin=subprocess.DEVNULL,
                                       stdout=out or subprocess.PIPE, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        except OSError as exc:
            if out:
                out.close()
            return ExecResult(127, f"{command[0]}: {exc.strerror}")
        with self._lock:
            self._running.add(process)
        try:
            data, _ = process.communicate()
        finally:
            with self._lock:
                self._running.discard(process)
            if out:
                out.close()
        code = process.returncode if process.returncode >= 0 else 128 - process.returncode
        output = log_path.read_text(errors="replace") if log_path is not None else data.decode("utf-8", "replace")
        return ExecResult(code, output)

