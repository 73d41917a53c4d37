"""Writes docs/verification/README.md, the index of the kept GPU logs, from docs/verification.yaml.

    python3 scripts/verification_index.py          # rewrite the index
    python3 scripts/verification_index.py --check  # exit 1 if the index is not what it would write

docs/verification.yaml says what no file can: per log its date, card, what was built and run, and
the result in a line. The rest is read from the tree each time: each log's sha256, and the
pages of docs/ (and the README) that cite it by path, so the index cannot drift from either.
Adding a log: put it in docs/verification/, give it an entry in the YAML, cite it from a page,
run this. tests/test_verification_logs.py holds the index fresh, every log indexed and cited.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "docs" / "verification"
METADATA = ROOT / "docs" / "verification.yaml"
INDEX = LOGS / "README.md"
FIELDS = ("log", "date", "gpu", "built", "result")
HEADER = ("| log | date | GPU | matrix (commit) | result | cited by | sha256 |\n"
          "| --- | --- | --- | --- | --- | --- | --- |\n")


class IndexProblem(Exception):
    """The metadata and the folder disagree; the message names what to fix."""


def citing_pages(name: str, pages: dict[Path, str], root: Path) -> list[str]:
    """Links (from docs/verification/) to the pages that name verification/<name>."""
    docs, links = root / "docs", []
    for path in sorted(pages):
        if f"verification/{name}" in pages[path]:
            label = path.relative_to(docs if path.is_relative_to(docs) else root).as_posix()
            links.append(f"[{label}]({'..' if path.is_relative_to(docs) else '../..'}/{label})")
    return links


def render(metadata: dict, root: Path = ROOT) -> str:
    """The index's text: the intro, one row per log (in the YAML's order), the notes."""
    logs_dir = root / "docs" / "verification"
    entries = metadata.get("logs") or []
    for entry in entries:
        missing = [field for field in FIELDS if not str(entry.get(field, "")).strip()]
        if missing:
            raise IndexProblem(f"docs/verification.yaml: the entry of {entry.get('log', '?')} lacks {', '.join(missing)}")
        if "|" in "".join(str(entry[field]) for field in FIELDS):
            raise IndexProblem(f"docs/verification.yaml: the entry of {entry['log']} holds a '|', which would break the table")
    names = [entry["log"] for entry in entries]
    on_disk = sorted(p.name for p in logs_dir.iterdir() if p.is_file() and p.name != "README.md")
    unlisted = sorted(set(on_disk) - set(names))
    gone = sorted(set(names) - set(on_disk))
    twice = sorted({name for name in names if names.count(name) > 1})
    if unlisted or gone or twice:
        raise IndexProblem("docs/verification.yaml and docs/verification/ disagree: "
                          f"logs without an entry {unlisted}, entries without a log {gone}, entries twice {twice}")
    pages = {p: p.read_text() for p in (root / "docs").rglob("*.md") if p != logs_dir / "README.md"}
    pages[root / "README.md"] = (root / "README.md").read_text()
    rows = []
    for entry in entries:
        name = entry["log"]
        digest = hashlib.sha256((logs_dir / name).read_bytes()).hexdigest()
        cited = ", ".join(citing_pages(name, pages, root)) or "(none: cite it from a page)"
        rows.append(f"| [{name}]({name}) | {entry['date']} | {entry['gpu']} | {entry['built']} | {entry['result']} "
                    f"| {cited} | `{digest}` |\n")
    text = metadata["intro"].rstrip("\n") + "\n\n" + HEADER + "".join(rows)
    if metadata.get("notes"):
        text += "\n" + metadata["notes"].rstrip("\n") + "\n"
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check that the index is current")
    args = parser.parse_args(argv)
    try:
        text = render(yaml.safe_load(METADATA.read_text()))
    except (IndexProblem, OSError, yaml.YAMLError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.check:
        if INDEX.read_text() != text:
            print("error: docs/verification/README.md is not current; run python3 scripts/verification_index.py",
                  file=sys.stderr)
            return 1
        return 0
    INDEX.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
