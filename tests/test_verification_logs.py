"""docs/verification keeps only logs a reader can use: each one has a row in its index with the
sha256 of its bytes, and some page of docs/ (or the README) links to it or names its path; no row
names a log that is gone."""

import hashlib
import re

LOG_ROW = re.compile(r"^\| \[(?P<name>[^\]]+)\]\((?P=name)\) \|.*\| `(?P<sha256>[0-9a-f]{64})` \|$", re.MULTILINE)


def index_rows(repo):
    return {m["name"]: m["sha256"] for m in LOG_ROW.finditer((repo / "docs/verification/README.md").read_text())}


def logs(repo):
    return sorted(p for p in (repo / "docs/verification").iterdir() if p.is_file() and p.name != "README.md")


def test_every_kept_log_has_an_index_row_with_the_sha256_of_its_bytes(repo):
    rows = index_rows(repo)
    missing = [p.name for p in logs(repo) if p.name not in rows]
    wrong = [p.name for p in logs(repo) if p.name in rows and hashlib.sha256(p.read_bytes()).hexdigest() != rows[p.name]]
    gone = sorted(set(rows) - {p.name for p in logs(repo)})
    assert (missing, wrong, gone) == ([], [], [])


def test_every_kept_log_is_linked_from_a_page(repo):
    pages = [p for p in (repo / "docs").rglob("*.md") if p != repo / "docs/verification/README.md"]
    text = "\n".join(p.read_text() for p in [*pages, repo / "README.md"])
    uncited = [p.name for p in logs(repo) if f"verification/{p.name}" not in text]  # a link or a named path
    assert uncited == []
