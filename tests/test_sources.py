"""Source fetching: index resolution, hash pinning, cache, offline, safe extraction."""

import hashlib
import io
import os
import tarfile

import pytest

from flashbuild.sources import archive as archive_module
from flashbuild.sources import upstream as sources
from flashbuild.core.errors import SourceError


def make_tar(path, members):
    """members: list of (TarInfo-updating dict, bytes or None)."""
    with tarfile.open(path, "w:gz") if not isinstance(path, io.BytesIO) else tarfile.open(fileobj=path, mode="w") as tar:
        for spec, data in members:
            info = tarfile.TarInfo(spec["name"])
            for key, value in spec.items():
                setattr(info, key, value)
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def pin_for(path, name="demo"):
    return sources.SourcePin(name=name, version="1.0", filename=path.name,
                             sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
                             paths={"kernels": "demo-1.0/src", "cutlass": "demo-1.0/cutlass"})


@pytest.fixture
def good_archive(tmp_path):
    return make_tar(tmp_path / "demo-1.0.tar.gz", [
        ({"name": "demo-1.0/src/a.h"}, b"int a;\n"),
        ({"name": "demo-1.0/cutlass/b.h"}, b"int b;\n"),
        ({"name": "demo-1.0/src/link.h", "type": tarfile.SYMTYPE, "linkname": "a.h"}, None),
    ])


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.mark.parametrize("member", [
    {"name": "/etc/evil"},
    {"name": "demo-1.0/../../evil"},
    {"name": "demo-1.0/escape", "type": tarfile.SYMTYPE, "linkname": "../../../etc/passwd"},
    {"name": "demo-1.0/abs", "type": tarfile.SYMTYPE, "linkname": "/etc/passwd"},
    {"name": "demo-1.0/dev", "type": tarfile.CHRTYPE},
])
def test_unsafe_members_are_refused(tmp_path, member):
    data = b"x" if member.get("type", tarfile.REGTYPE) == tarfile.REGTYPE else None
    archive = make_tar(tmp_path / "bad.tar.gz", [({"name": "demo-1.0/ok.h"}, b"ok"), (member, data)])
    destination = tmp_path / "third_party" / "demo-1.0"
    with pytest.raises(SourceError, match="outside the tree|device or fifo"):
        sources.safe_extract(archive, destination)
    assert not destination.exists()
    assert list((tmp_path / "third_party").iterdir()) == [], "no half-extracted staging left"


def test_local_file_is_verified_cached_and_extracted(tmp_path, good_archive):
    pin = pin_for(good_archive)
    fetched = sources.fetch(pin, tmp_path / "third_party", local=good_archive, log=lambda m: None)
    assert (fetched.path('kernels') / "a.h").read_text() == "int a;\n"
    assert (fetched.path('kernels') / "link.h").resolve() == (fetched.path('kernels') / "a.h").resolve()
    # Cached by hash: works offline afterwards, even into a fresh tree.
    again = sources.fetch(pin, tmp_path / "elsewhere", offline=True, log=lambda m: None)
    assert (again.path('cutlass') / "b.h").is_file()


def test_local_file_with_wrong_hash_is_refused(tmp_path, good_archive):
    pin = pin_for(good_archive)
    impostor = make_tar(tmp_path / "other.tar.gz", [({"name": "demo-1.0/src/a.h"}, b"int evil;\n")])
    with pytest.raises(SourceError, match="has sha256 .* but sources.lock.yaml pins"):
        sources.fetch(pin, tmp_path / "third_party", local=impostor, log=lambda m: None)


def test_offline_without_cache_says_what_to_do(tmp_path, good_archive):
    with pytest.raises(SourceError) as raised:
        sources.fetch(pin_for(good_archive), tmp_path / "third_party", offline=True, log=lambda m: None)
    assert "--offline" in raised.value.message and "--local" in raised.value.fix


def test_resolves_through_the_configured_index(tmp_path, good_archive, monkeypatch):
    index = tmp_path / "index"
    project = index / "demo"
    project.mkdir(parents=True)
    files = tmp_path / "files"
    files.mkdir()
    (files / good_archive.name).write_bytes(good_archive.read_bytes())
    pin = pin_for(good_archive)
    (project / "index.html").write_text(
        f'<a href="file://{files}/{good_archive.name}#sha256={pin.sha256}">{good_archive.name}</a>')
    monkeypatch.setenv("PIP_INDEX_URL", f"file://{index}")
    monkeypatch.setattr(sources, "_pip_config", lambda: {"index-url": f"file://{index}"})
    fetched = sources.fetch(pin, tmp_path / "third_party", log=lambda m: None)
    assert (fetched.path('kernels') / "a.h").is_file()


def test_index_listing_a_different_hash_is_refused(tmp_path, good_archive, monkeypatch):
    index = tmp_path / "index"
    (index / "demo").mkdir(parents=True)
    (index / "demo" / "index.html").write_text(f'<a href="file:///x/{good_archive.name}#sha256={"0" * 64}">x</a>')
    monkeypatch.setattr(sources, "_pip_config", lambda: {"index-url": f"file://{index}"})
    with pytest.raises(SourceError, match="the index lists"):
        sources.fetch(pin_for(good_archive), tmp_path / "third_party", log=lambda m: None)


def test_lock_file_pins_both_upstreams(repo):
    pins = sources.load_lock(repo / "sources.lock.yaml")
    assert pins["flash-attn"].version == "2.8.3"
    assert pins["flash-attn"].sha256 == "1e71dd64a9e0280e0447b8a0c2541bad4bf6ac65bdeaa2f90e51a9e57de0370d"
    assert pins["flashinfer-python"].version == "0.7.2.post1"
    assert pins["flashinfer-python"].sha256 == "bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49"


def make_zip(path, members):
    import zipfile

    with zipfile.ZipFile(path, "w") as bundle:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            bundle.writestr(info, data)
    return path


def test_wheel_is_extracted(tmp_path):
    wheel = make_zip(tmp_path / "demo-1.0-py3-none-any.whl", [
        ("demo-1.0/src/a.h", b"int a;\n", 0o100644), ("demo-1.0/cutlass/b.h", b"int b;\n", 0o100644)])
    fetched = sources.fetch(pin_for(wheel), tmp_path / "third_party", local=wheel, log=lambda m: None)
    assert (fetched.path("kernels") / "a.h").read_text() == "int a;\n"


@pytest.mark.parametrize("name, mode", [("../evil.h", 0o100644), ("/abs.h", 0o100644),
                                        ("demo-1.0/link", 0o120777)])
def test_unsafe_wheel_members_are_refused(tmp_path, name, mode):
    wheel = make_zip(tmp_path / "bad-1.0-py3-none-any.whl", [("demo-1.0/ok.h", b"", 0o100644), (name, b"x", mode)])
    destination = tmp_path / "third_party" / "demo-1.0"
    with pytest.raises(SourceError, match="outside the tree|symbolic link"):
        sources.safe_extract(wheel, destination)
    assert not destination.exists()


FORBIDDEN_HOSTS = ["pypi" + ".org", "python" + "hosted", "deb.debian" + ".org", "docker" + ".io/"]


def test_the_repo_names_no_index_host(repo):
    tracked = [p for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts
               and not p.is_relative_to(repo / "third_party") and not p.is_relative_to(repo / "build")
               and not p.is_relative_to(repo / "artifacts") and p.suffix in {".py", ".yaml", ".md", ".json", ""}]
    for path in tracked:
        text = path.read_text(errors="replace")
        for host in FORBIDDEN_HOSTS:
            assert host not in text, f"{path} names {host}"


def symlink(name, target):
    return ({"name": name, "type": tarfile.SYMTYPE, "linkname": target}, None)


@pytest.mark.parametrize("members, refused", [
    # Neither link leaves the tree on its own; resolved through l2, l1 is ../outside.
    ([symlink("l2", "."), symlink("l1", "l2/../outside")], "l1"),
    # The same one folder down.
    ([symlink("demo-1.0/l2", "."), symlink("demo-1.0/l1", "l2/../../outside")], "demo-1.0/l1"),
    # An earlier link is harmless until a later one changes what its path means.
    ([symlink("demo-1.0/l1", "d/../../outside"), symlink("demo-1.0/d", ".")], "demo-1.0/l1"),
    # A link into a link that points up.
    ([symlink("demo-1.0/up", ".."), symlink("demo-1.0/x", "up/../etc")], "demo-1.0/x"),
    ([symlink("a", "b"), symlink("b", "a")], "a"),  # a loop, found when b closes it
    ([({"name": "demo-1.0/hard", "type": tarfile.LNKTYPE, "linkname": "../etc/passwd"}, None)], "demo-1.0/hard"),
])
def test_the_member_check_itself_refuses_links_that_leave_the_tree_through_other_links(members, refused):
    archive = io.BytesIO()
    make_tar(archive, [({"name": "demo-1.0/ok.h"}, b"ok"), *members])
    archive.seek(0)
    with tarfile.open(fileobj=archive) as tar:
        infos = tar.getmembers()
    with pytest.raises(SourceError) as raised:
        archive_module.check_tar_members(infos)  # without Python's tar filter
    assert raised.value.message.startswith(f"archive member '{refused}' ")
    assert ("loop of links" if refused == "a" else "outside the tree") in raised.value.message


def test_a_symlink_chain_is_refused_before_anything_is_extracted(tmp_path):
    archive = make_tar(tmp_path / "chain.tar.gz", [symlink("l2", "."), symlink("l1", "l2/../outside")])
    destination = tmp_path / "third_party" / "demo-1.0"
    with pytest.raises(SourceError, match=r"archive member 'l1' links to 'l2/\.\./outside', outside the tree"):
        sources.safe_extract(archive, destination)
    assert list((tmp_path / "third_party").iterdir()) == []


def test_links_that_stay_inside_through_other_links_are_kept(tmp_path):
    archive = make_tar(tmp_path / "demo-1.0.tar.gz", [
        ({"name": "demo-1.0/lib64/a.h"}, b"int a;\n"),
        symlink("demo-1.0/src", "lib64"),
        symlink("demo-1.0/cutlass", "src/../src"),
        symlink("demo-1.0/lib64/self", "../src/a.h"),
    ])
    fetched = sources.fetch(pin_for(archive), tmp_path / "third_party", local=archive, log=lambda m: None)
    assert (fetched.path("cutlass") / "self").read_text() == "int a;\n"


def truncated_archive(tmp_path):
    whole = make_tar(tmp_path / "whole.tar.gz", [({"name": f"demo-1.0/src/{i}.h"}, os.urandom(50_000))
                                                 for i in range(8)])
    cut = tmp_path / "demo-1.0.tar.gz"
    cut.write_bytes(whole.read_bytes()[:200_000])
    return cut


def test_a_truncated_archive_is_a_source_error_naming_it(tmp_path):
    archive = truncated_archive(tmp_path)
    destination = tmp_path / "third_party" / "demo-1.0"
    with pytest.raises(SourceError) as raised:
        sources.safe_extract(archive, destination)
    assert f"{archive} is truncated or corrupt" in raised.value.message
    assert f"delete {archive} and fetch it again" in raised.value.fix
    assert list((tmp_path / "third_party").iterdir()) == [], "nothing half-extracted"


def test_a_truncated_local_archive_says_to_pass_an_intact_copy(tmp_path):
    archive = truncated_archive(tmp_path)
    with pytest.raises(SourceError) as raised:
        sources.fetch(pin_for(archive), tmp_path / "third_party", local=archive, log=lambda m: None)
    assert "is truncated or corrupt" in raised.value.message
    assert raised.value.fix == "pass an intact copy of demo-1.0.tar.gz"


def corrupt_the_cache(pin, archive):
    """A cached copy of `archive` whose bytes no longer match the pin (a disk error, an interrupted copy)."""
    cached = sources.cached_path(pin)
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(archive.read_bytes()[:-10] + b"0123456789")
    return cached, hashlib.sha256(cached.read_bytes()).hexdigest()


def test_a_corrupt_cached_archive_offline_is_reported_as_corrupt_naming_both_hashes(tmp_path, good_archive):
    pin = pin_for(good_archive)
    cached, found = corrupt_the_cache(pin, good_archive)
    with pytest.raises(SourceError) as raised:
        sources.fetch(pin, tmp_path / "third_party", offline=True, log=lambda m: None)
    assert raised.value.message == (f"the download cache's {cached} is corrupt: its sha256 is {found}, "
                                    f"sources.lock.yaml pins {pin.sha256}")
    assert f"delete it (rm {cached})" in raised.value.fix and "--local demo=PATH" in raised.value.fix
    assert "not in the download cache" not in raised.value.message


def serve_from_a_local_index(tmp_path, archive, monkeypatch):
    index = tmp_path / "index"
    (index / "demo").mkdir(parents=True)
    files = tmp_path / "files"
    files.mkdir()
    (files / archive.name).write_bytes(archive.read_bytes())
    (index / "demo" / "index.html").write_text(f'<a href="file://{files}/{archive.name}">{archive.name}</a>')
    monkeypatch.setattr(sources, "_pip_config", lambda: {"index-url": f"file://{index}"})


def test_a_corrupt_cached_archive_is_downloaded_again_when_online(tmp_path, good_archive, monkeypatch):
    pin = pin_for(good_archive)
    cached, found = corrupt_the_cache(pin, good_archive)
    serve_from_a_local_index(tmp_path, good_archive, monkeypatch)
    messages = []
    fetched = sources.fetch(pin, tmp_path / "third_party", log=messages.append)
    assert (fetched.path("kernels") / "a.h").read_text() == "int a;\n"
    assert cached.read_bytes() == good_archive.read_bytes(), "the cache holds the good copy again"
    assert f"the cached {cached.name} is corrupt (sha256 {found}, expected {pin.sha256}); downloading it again" \
        in messages


def test_local_is_used_even_when_the_cache_and_the_tree_hold_a_valid_copy(tmp_path, good_archive):
    pin = pin_for(good_archive)
    fetched = sources.fetch(pin, tmp_path / "third_party", local=good_archive, log=lambda m: None)
    (fetched.path("kernels") / "a.h").write_text("edited by hand\n")
    messages = []
    again = sources.fetch(pin, tmp_path / "third_party", local=good_archive, log=messages.append)
    assert (again.path("kernels") / "a.h").read_text() == "int a;\n", "extracted again from the --local file"
    assert messages == [f"extracting {good_archive} into {tmp_path / 'third_party' / 'demo-1.0'}"]


@pytest.mark.parametrize("local", ["impostor", "missing"])
def test_a_wrong_local_file_is_refused_even_when_the_cache_and_the_tree_are_valid(tmp_path, good_archive, local):
    pin = pin_for(good_archive)
    sources.fetch(pin, tmp_path / "third_party", local=good_archive, log=lambda m: None)
    path = tmp_path / "missing.tar.gz"
    if local == "impostor":
        path = make_tar(tmp_path / "other.tar.gz", [({"name": "demo-1.0/src/a.h"}, b"int evil;\n")])
    with pytest.raises(SourceError) as raised:
        sources.fetch(pin, tmp_path / "third_party", local=path, log=lambda m: None)
    expected = f"has sha256 {hashlib.sha256(path.read_bytes()).hexdigest()}" if local == "impostor" else "no such file"
    assert raised.value.message.startswith(f"--local demo={path}") and expected in raised.value.message


def test_local_replaces_a_corrupt_cached_copy(tmp_path, good_archive):
    pin = pin_for(good_archive)
    cached, _ = corrupt_the_cache(pin, good_archive)
    sources.fetch(pin, tmp_path / "third_party", local=good_archive, log=lambda m: None)
    assert cached.read_bytes() == good_archive.read_bytes()


def test_a_local_file_for_a_source_the_build_does_not_use_is_refused(tmp_path, good_archive):
    from flashbuild.core.errors import ConfigError
    from flashbuild.pipeline import Paths, fetch_sources

    pin = pin_for(good_archive)
    (tmp_path / "sources.lock.yaml").write_text(
        f"demo: {{version: '1.0', filename: {pin.filename}, sha256: {pin.sha256}, paths: {{src: demo-1.0/src}}}}\n"
        f"other: {{version: '2.0', filename: other.tar.gz, sha256: {'0' * 64}, paths: {{src: other-2.0/src}}}}\n")
    with pytest.raises(ConfigError) as raised:
        fetch_sources(Paths(tmp_path), {"demo": good_archive}, only={"other"})
    assert raised.value.message == "--local demo: this build does not use it (it needs other)"
    assert not (tmp_path / "third_party").exists(), "nothing fetched"


def test_describe_says_what_fetch_would_do_and_downloads_nothing(tmp_path, good_archive):
    pin = pin_for(good_archive)
    third_party = tmp_path / "third_party"
    assert sources.describe(pin, third_party).startswith("not in the download cache; would be downloaded")
    with pytest.raises(SourceError, match="not in the download cache .* --offline"):
        sources.describe(pin, third_party, offline=True)
    cached, found = corrupt_the_cache(pin, good_archive)
    assert sources.describe(pin, third_party) == f"the cached {cached} is corrupt (sha256 {found}); would be " \
                                                  "downloaded again"
    with pytest.raises(SourceError, match="is corrupt: its sha256 is"):
        sources.describe(pin, third_party, offline=True)
    with pytest.raises(SourceError, match="no such file"):
        sources.describe(pin, third_party, local=tmp_path / "nowhere.tar.gz")
    assert cached.read_bytes() != good_archive.read_bytes() and not third_party.exists(), "nothing was changed"
    sources.fetch(pin, third_party, local=good_archive, log=lambda m: None)
    assert sources.describe(pin, third_party) == f"extracted in {third_party / 'demo-1.0'}"
