"""Toolchain images, built without any container-image registry.

The base root filesystem is pulled when a registry answers; otherwise it is bootstrapped
from the Debian archive the host's apt already uses (mmdebstrap or debootstrap) and
`docker import`ed. The toolchain image is then built from docker/ on top of it through
the Docker SDK. Both are tagged by a hash of their inputs, so they are rebuilt only when
an input changes.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from flashbuild.core.errors import EnvironmentProblem, ImageError
from flashbuild.core.hashing import sha256_of
from flashbuild.config.options import ImageSpec

IMAGE_REPO = "flashbuild"


@dataclass(frozen=True)
class ToolchainImage:
    tag: str
    image_id: str
    spec: ImageSpec
    built: bool  # False when an existing image was reused


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def host_debian_mirror() -> str | None:
    """The Debian mirror the host's apt is configured with, so bootstrapping goes through the
    same archive (or proxy) the host already reaches. None lets the bootstrap tool choose."""
    candidates = []
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        try:
            text = path.read_text()
        except OSError:
            continue
        candidates += re.findall(r"^URIs:\s*(\S+)", text, re.M)
        candidates += re.findall(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)", text, re.M)
    for uri in candidates:
        if uri.rstrip("/").endswith("/debian"):
            return uri
    return None


def _image_exists(client, tag: str):
    from docker.errors import ImageNotFound

    try:
        return client.images.get(tag)
    except ImageNotFound:
        return None


def _bootstrap_command(spec: ImageSpec, mirror: str | None, tarball: Path) -> list[str]:
    components = ",".join(spec.base.components)
    if shutil.which("mmdebstrap"):
        argv = ["mmdebstrap", "--variant=minbase", f"--components={components}", spec.base.suite, str(tarball)]
        return argv + ([mirror] if mirror else [])
    raise EnvironmentProblem(
        "neither an image registry nor mmdebstrap is available to make the Debian base image",
        fix="run `invoke setup` (installs mmdebstrap on Debian), or `apt-get install mmdebstrap`",
    )


def base_tag(spec: ImageSpec, mirror: str | None) -> str:
    return f"{IMAGE_REPO}/base-{spec.base.suite}:{_digest(spec.base.suite, *spec.base.components, mirror or '')}"


def ensure_base(client, spec: ImageSpec, log) -> str:
    mirror = host_debian_mirror()
    tag = base_tag(spec, mirror)
    if _image_exists(client, tag):
        return tag
    if spec.base.pull:
        from docker.errors import DockerException

        try:
            log(f"pulling base image {spec.base.pull}")
            image = client.images.pull(spec.base.pull)
            image.tag(tag)
            return tag
        except DockerException as exc:
            log(f"pull failed ({exc.__class__.__name__}); bootstrapping {spec.base.suite} from the Debian archive")
    with tempfile.TemporaryDirectory(prefix="flashbuild-base-") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        argv = _bootstrap_command(spec, mirror, tarball)
        result = subprocess.run(argv, capture_output=True, text=True)
        if result.returncode != 0:
            raise ImageError(
                f"bootstrapping Debian {spec.base.suite} failed:\n{result.stderr[-3000:]}",
                fix="check that the Debian archive is reachable from this host",
            )
        repository, _, version = tag.partition(":")
        response = client.api.import_image_from_file(str(tarball), repository=repository, tag=version)
        if "error" in str(response).lower() and not _image_exists(client, tag):
            raise ImageError(f"docker import of the {spec.base.suite} root filesystem failed: {response}")
    return tag


def image_tag(spec: ImageSpec, repo_root: Path, base_tag: str, tools: dict[str, Path] | None = None) -> str:
    dockerfile = (repo_root / spec.dockerfile).read_text()
    tool_digests = [f"{name}={sha256_of(path)}" for name, path in sorted((tools or {}).items())]
    return f"{IMAGE_REPO}/{spec.name}:{_digest(dockerfile, base_tag, spec.cuda, *tool_digests)}"


@contextlib.contextmanager
def _build_context(dockerfile_path: Path, tools: dict[str, Path]):
    """A temporary build context: the Dockerfile, and `tools` in its tools/ folder."""
    with tempfile.TemporaryDirectory(prefix="flashbuild-context-") as folder:
        context = Path(folder)
        shutil.copy(dockerfile_path, context / dockerfile_path.name)
        (context / "tools").mkdir()
        for name, path in tools.items():
            staged = context / "tools" / name
            shutil.copy(path, staged)
            staged.chmod(0o755)  # wheels do not keep the executable bit
        yield context


def _write_build_log(stream, log_path: Path, lines: list[str]) -> str | None:
    """Writes the build's output to `log_path` and appends it to `lines`; returns the error the
    daemon reported, if any."""
    error = None
    with open(log_path, "w") as out:
        for chunk in stream:
            text = chunk.get("stream") or chunk.get("status") or ""
            if "error" in chunk:
                error = chunk.get("error")
                text = error + "\n"
            if text:
                out.write(text)
                lines.append(text)
    return error


def ensure_image(client, spec: ImageSpec, repo_root: Path, log_dir: Path, log=print,
                 tools: dict[str, Path] | None = None) -> ToolchainImage:
    """The toolchain image of `spec`. `tools` (name in the image -> file on this host) are
    put into the build context's tools/ folder, which the Dockerfile copies onto the PATH."""
    dockerfile_path = repo_root / spec.dockerfile
    if not dockerfile_path.is_file():
        raise ImageError(f"{spec.dockerfile} does not exist", fix="restore it from git")
    base_tag = ensure_base(client, spec, log)
    tag = image_tag(spec, repo_root, base_tag, tools)
    existing = _image_exists(client, tag)
    if existing:
        return ToolchainImage(tag, existing.id, spec, built=False)
    log(f"building toolchain image {tag} (first time: a few minutes)")
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"image-{spec.name}.log"
    from docker.errors import DockerException

    lines: list[str] = []
    try:
        with _build_context(dockerfile_path, tools or {}) as context:
            stream = client.api.build(path=str(context), dockerfile=dockerfile_path.name, buildargs={"BASE": base_tag},
                                      tag=tag, rm=True, forcerm=True, decode=True)
            error = _write_build_log(stream, log_path, lines)
    except DockerException as exc:
        error = str(exc)
    if error or not _image_exists(client, tag):
        tail = "".join(lines[-30:])
        raise ImageError(f"building {tag} failed: {error}\n{tail}", fix=f"see {log_path}")
    image = client.images.get(tag)
    return ToolchainImage(tag, image.id, spec, built=True)


def would_do(client, spec: ImageSpec, repo_root: Path, tools: dict[str, Path] | None) -> str:
    """What ensure_image would do, found without pulling, bootstrapping or building (the dry
    run). `tools` None: a tool the tag depends on is not fetched yet."""
    if not (repo_root / spec.dockerfile).is_file():
        raise ImageError(f"{spec.dockerfile} does not exist", fix="restore it from git")
    base = base_tag(spec, host_debian_mirror())
    if not _image_exists(client, base):
        how = f"pulled ({spec.base.pull}), or bootstrapped with mmdebstrap" if spec.base.pull else "bootstrapped"
        if not spec.base.pull:
            _bootstrap_command(spec, None, Path("rootfs.tar"))  # raises when no tool can bootstrap it
        return f"base image {base} absent: would be {how}, then the toolchain image built (minutes)"
    if tools is None:
        return "its tag includes the hash of a tool not fetched yet: looked up after the fetch, built if absent"
    tag = image_tag(spec, repo_root, base, tools)
    return f"{tag} present" if _image_exists(client, tag) else f"{tag} absent: would be built (a few minutes)"
CONSUMER_DOCKERFILE = Path("docker/consumer.Dockerfile")


def ensure_consumer_image(client, toolchain: ToolchainImage, repo_root: Path, log_dir: Path, log=print) -> str:
    """The tag of the consumer image: `toolchain` plus CMake and pkg-config, to build programs
    against an artifact (examples/consumer). Built on top of the toolchain image, never into it,
    so the toolchain's id (in every object key) stays the same."""
    dockerfile_path = repo_root / CONSUMER_DOCKERFILE
    tag = f"{IMAGE_REPO}/consumer:{_digest(dockerfile_path.read_text(), toolchain.image_id)}"
    if _image_exists(client, tag):
        return tag
    log(f"building the consumer image {tag} on {toolchain.tag}")
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "image-consumer.log"
    from docker.errors import DockerException

    lines: list[str] = []
    try:
        with _build_context(dockerfile_path, {}) as context:
            stream = client.api.build(path=str(context), dockerfile=dockerfile_path.name,
                                      buildargs={"TOOLCHAIN": toolchain.tag}, tag=tag, rm=True, forcerm=True,
                                      decode=True)
            error = _write_build_log(stream, log_path, lines)
    except DockerException as exc:
        error = str(exc)
    if error or not _image_exists(client, tag):
        raise ImageError(f"building {tag} failed: {error}\n{''.join(lines[-30:])}", fix=f"see {log_path}")
    return tag


def describe(image: ToolchainImage) -> dict:
    return {"tag": image.tag, "id": image.image_id, "cuda": image.spec.cuda, "dockerfile": image.spec.dockerfile}


