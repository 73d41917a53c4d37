"""Upstream sources: resolve through pip's index, download once, verify, extract safely.

`pip download flash-attn` cannot be used: pip builds the sdist's metadata, which imports
torch. So the file is looked up on the simple index pip itself is configured with
(`pip config`, else pip's built-in default), downloaded directly, and checked against
the sha256 in sources.lock.yaml. Downloads are cached by hash, so later runs (and
`--offline`) need no network; a cached copy whose hash no longer matches is downloaded
again (with `--offline`: reported as corrupt, with both hashes). A local file can be named
instead (`--local NAME=PATH`): it is checked against the pin and extracted from even when
the cache or third_party/ already hold the source, never silently passed over.
Extraction: archive.py.
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

from flashbuild.sources.archive import safe_extract
from flashbuild.core.errors import ConfigError, SourceError
from flashbuild.core.hashing import sha256_of

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


def select(pins: dict[str, SourcePin], local: dict[str, Path] | None, only: set[str] | None) -> dict[str, SourcePin]:
    """The pins a command needs (all, or `only` those), after checking that every --local
    names one of them: a --local the build would not read must not look as if it had been used."""
    unknown = set(local or {}) - set(pins)
    if unknown:
        raise ConfigError(f"--local names unknown source(s): {', '.join(sorted(unknown))}",
                          fix=f"use one of: {', '.join(sorted(pins))}")
    unpinned = set(only or ()) - set(pins)
    if unpinned:  # matrix.yaml names a source (an image's ptxas) that the lock does not pin
        raise ConfigError(f"matrix.yaml needs source(s) that sources.lock.yaml does not pin: "
                          f"{', '.join(sorted(unpinned))}",
                          fix=f"pin them in sources.lock.yaml or use one of: {', '.join(sorted(pins))}")
    unused = set(local or {}) - set(pins if only is None else only)
    if unused:
        raise ConfigError(f"--local {', '.join(sorted(unused))}: this build does not use "
                          f"{'it' if len(unused) == 1 else 'them'} (it needs {', '.join(sorted(only))})",
                          fix="leave it out, or put it into third_party/ with `invoke fetch --local NAME=PATH`")
    return {name: pin for name, pin in pins.items() if only is None or name in only}


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


def cached_path(pin: SourcePin) -> Path:
    return cache_dir() / pin.sha256 / pin.filename


def check_local(pin: SourcePin, local: Path) -> None:
    """A --local file must be the pinned one: refused (never ignored) when it is not."""
    if not local.is_file():
        raise SourceError(f"--local {pin.name}={local}: no such file", fix=f"name an existing copy of {pin.filename}")
    found = sha256_of(local)
    if found != pin.sha256:
        raise SourceError(
            f"--local {pin.name}={local} has sha256 {found}, but sources.lock.yaml pins {pin.name} {pin.version} "
            f"to {pin.sha256}",
            fix=f"pass the genuine {pin.filename}, or leave --local out to use the download cache or the index",
        )


def _corrupt(pin: SourcePin, cached: Path, found: str) -> SourceError:
    return SourceError(
        f"the download cache's {cached} is corrupt: its sha256 is {found}, sources.lock.yaml pins {pin.sha256}",
        fix=f"delete it (rm {cached}) and fetch again with network access (`invoke fetch`), "
            f"or pass --local {pin.name}=PATH",
    )


def _not_cached(pin: SourcePin, cached: Path) -> SourceError:
    return SourceError(
        f"{pin.filename} is not in the download cache ({cached.parent}) and --offline was given",
        fix=f"run once with network access, or pass --local {pin.name}=PATH",
    )


def _cached_sha256(cached: Path) -> str | None:
    return sha256_of(cached) if cached.is_file() else None


def _copy_into_cache(source: Path, cached: Path) -> None:
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_name(cached.name + ".part")
    shutil.copyfile(source, partial)
    os.replace(partial, cached)  # never a half-copied file under the pinned name


def obtain_archive(pin: SourcePin, local: Path | None = None, offline: bool = False, log=print) -> Path:
    """A hash-verified copy of the pinned archive: the --local file when one is named (it also
    fills the cache), else the cached copy, else a download. A cached copy whose hash is wrong
    is downloaded again, or with --offline reported as corrupt."""
    cached = cached_path(pin)
    found = _cached_sha256(cached)
    if local is not None:
        check_local(pin, local)
        if found != pin.sha256:
            if found is not None:
                log(f"replacing the corrupt {cached} (sha256 {found}) with --local {local}")
            _copy_into_cache(local, cached)
        return local
    if found == pin.sha256:
        return cached
    if found is not None:
        if offline:
            raise _corrupt(pin, cached, found)
        log(f"the cached {cached.name} is corrupt (sha256 {found}, expected {pin.sha256}); downloading it again")
    elif offline:
        raise _not_cached(pin, cached)
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


def _extracted(pin: SourcePin, root: Path) -> bool:
    try:
        return json.loads((root / STAMP).read_text()).get("sha256") == pin.sha256
    except (OSError, ValueError, AttributeError):
        return False


def describe(pin: SourcePin, third_party: Path, local: Path | None = None, offline: bool = False) -> str:
    """What `fetch` would do for `pin`, found without downloading or extracting anything (the
    dry run's pre-flight). Raises the SourceError that fetch would raise."""
    root = third_party / pin.extract_dir_name
    if local is not None:
        check_local(pin, local)
        return f"--local {local} matches the pin; would be extracted into {root}"
    if _extracted(pin, root):
        return f"extracted in {root}"
    cached = cached_path(pin)
    found = _cached_sha256(cached)
    if found == pin.sha256:
        return f"in the download cache ({cached}), sha256 matches; would be extracted"
    if found is not None:
        if offline:
            raise _corrupt(pin, cached, found)
        return f"the cached {cached} is corrupt (sha256 {found}); would be downloaded again"
    if offline:
        raise _not_cached(pin, cached)
    return "not in the download cache; would be downloaded from pip's configured index"


def fetch(pin: SourcePin, third_party: Path, local: Path | None = None, offline: bool = False, log=print) -> FetchedSource:
    """third_party/<name>-<version>, extracted from the pinned archive unless already there.
    A --local file is always checked and extracted from (so that it is never silently unused)."""
    root = third_party / pin.extract_dir_name
    if local is None and _extracted(pin, root):
        return FetchedSource(pin, root)
    archive = obtain_archive(pin, local=local, offline=offline, log=log)
    log(f"extracting {archive} into {root}")
    safe_extract(archive, root, fix=None if local is None else f"pass an intact copy of {pin.filename}")
    (root / STAMP).write_text(json.dumps({"name": pin.name, "version": pin.version, "sha256": pin.sha256}) + "\n")
    fetched = FetchedSource(pin, root)
    for role in pin.paths:
        needed = fetched.path(role)
        if not needed.is_dir():
            raise SourceError(f"{needed} is missing after extraction", fix="check the paths in sources.lock.yaml")
    return fetched
