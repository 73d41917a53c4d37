"""Upstream sources: resolve through pip's index, download once, verify, extract safely.

`pip download flash-attn` cannot be used: pip builds the sdist's metadata, which imports
torch. Wheels (flashinfer-python) are zip files and are extracted the same careful way. So the file is looked up on the simple index pip itself is configured with
(`pip config`, else pip's built-in default), downloaded directly, and checked against
the sha256 in sources.lock.yaml. Downloads are cached by hash, so later runs (and
`--offline`) need no network; a local file can be named instead.
"""

from __future__ import annotations

import html.parser
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from .archive import safe_extract
from .errors import ConfigError, SourceError
from .hashing import sha256_of

STAMP = ".flashbuild-source.json"


@dataclass(frozen=True)
class SourcePin:
    name: str
    version: str
    filename: str
    sha256: str
    paths: dict  # role -> folder inside the archive

    @property
    def extract_dir_name(self) -> str:
        return f"{self.name}-{self.version}"


@dataclass(frozen=True)
class FetchedSource:
    pin: SourcePin
    root: Path  # third_party/<name>-<version>

    def path(self, role: str) -> Path:
        return self.root / self.pin.paths[role]


def load_lock(path: Path) -> dict[str, SourcePin]:
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read lock file {path}: {exc}", fix="restore sources.lock.yaml from git") from None
    pins = {}
    required = ("version", "filename", "sha256", "paths")
    for name, spec in (document or {}).items():
        missing = [k for k in required if not isinstance(spec, dict) or k not in spec]
        if missing or not isinstance(spec["paths"], dict):
            raise ConfigError(f"{path.name}: '{name}' lacks {', '.join(missing) or 'a paths mapping'}",
                              fix="restore sources.lock.yaml from git")
        pins[name] = SourcePin(name=name, version=str(spec["version"]), filename=str(spec["filename"]),
                               sha256=str(spec["sha256"]), paths={k: str(v) for k, v in spec["paths"].items()})
    return pins


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "flashbuild" / "downloads"


def configured_indexes() -> list[str]:
    """Index URLs in the order pip would use them: its configured index-url (or its own
    default), then any extra-index-url values."""
    config = _pip_config()
    primary = config.get("index-url") or _pip_default_index()
    extras = config.get("extra-index-url", "").split()
    return [primary, *extras]


def _pip_config() -> dict[str, str]:
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    values: dict[str, str] = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        option = key.rsplit(".", 1)[-1]
        values.setdefault(option, value.strip().strip("'\""))
    env_index = os.environ.get("PIP_INDEX_URL")
    if env_index:
        values["index-url"] = env_index
    return values


def _pip_default_index() -> str:
    from pip._internal.models.index import PyPI  # pip's own default; the repo names no host

    return PyPI.simple_url


class _LinkParser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.links.append(href)


def _project_page(index: str, project: str) -> tuple[str, str]:
    normalized = project.lower().replace("_", "-").replace(".", "-")
    page = index.rstrip("/") + f"/{normalized}/"
    if page.startswith("file://"):
        local = Path(urllib.parse.urlparse(page).path)
        candidate = local / "index.html"
        if not candidate.is_file():
            raise FileNotFoundError(candidate)
        return candidate.read_text(errors="replace"), page
    with urllib.request.urlopen(page, timeout=60) as response:
        return response.read().decode("utf-8", "replace"), page


def resolve_url(pin: SourcePin) -> str:
    tried = []
    for index in configured_indexes():
        try:
            text, page = _project_page(index, pin.name)
        except (OSError, urllib.error.URLError) as exc:
            tried.append(f"{index} ({getattr(exc, 'reason', exc)})")
            continue
        parser = _LinkParser()
        parser.feed(text)
        for href in parser.links:
            url = urllib.parse.urljoin(page, href)
            path, _, fragment = url.partition("#")
            if urllib.parse.unquote(path.rsplit("/", 1)[-1]) != pin.filename:
                continue
            if fragment.startswith("sha256=") and fragment[len("sha256="):] != pin.sha256:
                raise SourceError(
                    f"the index lists {pin.filename} with sha256 {fragment[7:]}, the lock pins {pin.sha256}",
                    fix="check which index pip is configured with (pip config list)",
                )
            return path
        tried.append(f"{index} (no {pin.filename})")
    raise SourceError(
        f"cannot find {pin.filename} on pip's configured indexes: {'; '.join(tried)}",
        fix=f"check network access, or download {pin.filename} yourself and pass --local {pin.name}=PATH",
    )


def _download(url: str, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".part")
    try:
        if url.startswith("file://"):
            shutil.copyfile(urllib.parse.urlparse(url).path, partial)
        else:
            with urllib.request.urlopen(url, timeout=120) as response, open(partial, "wb") as out:
                shutil.copyfileobj(response, out, 1 << 20)
        os.replace(partial, destination)
    except (OSError, urllib.error.URLError) as exc:
        partial.unlink(missing_ok=True)
        raise SourceError(f"download of {url} failed: {getattr(exc, 'reason', exc)}", fix="retry, or pass --local") from None


def obtain_archive(pin: SourcePin, local: Path | None = None, offline: bool = False, log=print) -> Path:
    """Return a cached, hash-verified copy of the pinned archive."""
    cached = cache_dir() / pin.sha256 / pin.filename
    if cached.is_file() and sha256_of(cached) == pin.sha256:
        return cached
    if local is not None:
        if not local.is_file():
            raise SourceError(f"--local file {local} does not exist", fix="name an existing file")
        found = sha256_of(local)
        if found != pin.sha256:
            raise SourceError(
                f"{local} has sha256 {found}, but sources.lock.yaml pins {pin.name} {pin.version} to {pin.sha256}",
                fix=f"pass the genuine {pin.filename}",
            )
        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, cached)
        return cached
    if offline:
        raise SourceError(
            f"{pin.filename} is not in the download cache ({cached.parent}) and --offline was given",
            fix=f"run once with network access, or pass --local {pin.name}=PATH",
        )
    url = resolve_url(pin)
    log(f"downloading {pin.filename}")
    _download(url, cached)
    found = sha256_of(cached)
    if found != pin.sha256:
        cached.unlink()
        raise SourceError(
            f"downloaded {pin.filename} has sha256 {found}, expected {pin.sha256}",
            fix="the index served a different file; do not use it",
        )
    return cached


def fetch(pin: SourcePin, third_party: Path, local: Path | None = None, offline: bool = False, log=print) -> FetchedSource:
    root = third_party / pin.extract_dir_name
    stamp = root / STAMP
    if stamp.is_file():
        try:
            if json.loads(stamp.read_text()).get("sha256") == pin.sha256:
                return FetchedSource(pin, root)
        except (OSError, ValueError):
            pass
    archive = obtain_archive(pin, local=local, offline=offline, log=log)
    log(f"extracting {pin.filename} into {root}")
    safe_extract(archive, root)
    stamp.write_text(json.dumps({"name": pin.name, "version": pin.version, "sha256": pin.sha256}) + "\n")
    fetched = FetchedSource(pin, root)
    for role in pin.paths:
        needed = fetched.path(role)
        if not needed.is_dir():
            raise SourceError(f"{needed} is missing after extraction", fix="check the paths in sources.lock.yaml")
    return fetched
