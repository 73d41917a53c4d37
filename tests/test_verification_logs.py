"""docs/verification keeps only logs a reader can use: each one has a row in its index with the
sha256 of its bytes, and some page of docs/ (or the README) links to it or names its path; no row
names a log that is gone; and the index is what scripts/verification_index.py writes from
docs/verification.yaml and the tree."""

import hashlib
import importlib.util
import re

import pytest
import yaml

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


def _generator(repo):
    spec = importlib.util.spec_from_file_location("verification_index", repo / "scripts/verification_index.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_index_is_what_the_generator_writes_from_the_metadata_and_the_tree(repo):
    generator = _generator(repo)
    written = generator.render(yaml.safe_load((repo / "docs/verification.yaml").read_text()), repo)
    assert (repo / "docs/verification/README.md").read_text() == written, \
        "docs/verification/README.md is stale: run python3 scripts/verification_index.py"


def test_the_generator_refuses_a_log_without_an_entry_and_computes_digest_and_citations(repo, tmp_path):
    generator = _generator(repo)
    (tmp_path / "docs/verification").mkdir(parents=True)
    (tmp_path / "docs/results").mkdir()
    (tmp_path / "docs/verification/a-h200.log").write_text("run a\n")
    (tmp_path / "docs/results/page.md").write_text("see [a](../verification/a-h200.log)\n")
    (tmp_path / "README.md").write_text("no logs here\n")
    entry = {"log": "a-h200.log", "date": "2026-11-26", "gpu": "NVIDIA H200", "built": "minimal (abc)", "result": "ok"}
    text = generator.render({"intro": "# Logs\n", "logs": [entry]}, tmp_path)
    digest = hashlib.sha256(b"run a\n").hexdigest()
    assert f"| [a-h200.log](a-h200.log) | 2026-11-26 | NVIDIA H200 | minimal (abc) | ok | " \
           f"[results/page.md](../results/page.md) | `{digest}` |" in text
    (tmp_path / "docs/verification/b-h100.log").write_text("run b\n")
    with pytest.raises(generator.IndexProblem, match=r"logs without an entry \['b-h100.log'\]"):
        generator.render({"intro": "# Logs\n", "logs": [entry]}, tmp_path)
    with pytest.raises(generator.IndexProblem, match="lacks result"):
        generator.render({"intro": "# Logs\n", "logs": [{**entry, "result": ""}]}, tmp_path)
