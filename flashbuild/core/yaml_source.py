"""A YAML file read with the positions of its nodes, so that an error names where it is.

Contract: `load(path)` returns a Document (the data and its node tree) or raises one
ConfigError: the file is missing, is a folder, is unreadable, is larger than MAX_BYTES, is not
YAML (line and column), gives a key twice in one mapping, expands through aliases to more than
MAX_NODES nodes (a "billion laughs" document would hang every later walk), holds a number that
is not finite (.nan, .inf: no range check refuses them), or is empty. `Document.where(path)` turns a path into the
data (keys and list indexes) into "line N: a.b[0].c"; a node shared through an anchor
(`&name`, used as `*name`) is named where the anchor is defined, with every matrix that uses
it, since an error in it is an error in all of them and the fix goes at the definition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from flashbuild.core.errors import ConfigError

MAX_BYTES = 1 << 20  # matrix.yaml is ~8 KB; a file this large is not a build matrix
MAX_NODES = 100_000  # nodes after alias expansion (matrix.yaml: ~1,600)


class _Loader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (PyYAML keeps the last) and
    remembers which nodes carry an anchor."""

    def __init__(self, stream):
        super().__init__(stream)
        self.anchored: dict[int, str] = {}  # id(node) -> anchor name

    def compose_node(self, parent, index):
        event = self.peek_event()
        anchor = None if isinstance(event, yaml.AliasEvent) else event.anchor
        node = super().compose_node(parent, index)
        if anchor:
            self.anchored[id(node)] = anchor
        return node


def _construct_unique_mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ConfigError(
                f"line {key_node.start_mark.line + 1}: key '{key}' appears twice in one mapping",
                fix="remove or rename one of them",
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def json_path(parts) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _child(node, part):
    """The node under `node` at key or index `part`, and the key's own node (None if absent)."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == str(part):
                return value_node, key_node
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        return node.value[part], None
    return None, None


def _children(node):
    if isinstance(node, yaml.MappingNode):
        return [(value, key.value) for key, value in node.value]
    if isinstance(node, yaml.SequenceNode):
        return [(value, index) for index, value in enumerate(node.value)]
    return []


@dataclass
class Document:
    data: object
    root: yaml.Node | None
    anchored: dict[int, str]

    def _walk(self, parts):
        """The nodes along `parts` (as far as the tree goes), each with the key node naming it."""
        nodes = [(self.root, None)]
        for part in parts:
            child, key = _child(nodes[-1][0], part)
            if child is None:
                break
            nodes.append((child, key))
        return nodes

    def _paths_to(self, target) -> list[tuple]:
        """Every path from the root to `target`, in document order (the first is the anchor's
        definition: YAML defines an anchor before any alias to it)."""
        found = []

        def visit(node, parts, seen):
            if node is target:
                found.append(parts)
            elif id(node) not in seen:  # a recursive alias is walked once
                for child, part in _children(node):
                    visit(child, (*parts, part), seen | {id(node)})

        visit(self.root, (), frozenset())
        return found

    def where(self, parts, key: str | None = None) -> tuple[str, str]:
        """("line N: path", note) for the node at `parts` (at its key `key`, when given). For a node
        in an anchor, the path is where the anchor is defined and the note names the anchor and
        the matrices using it; else the note is empty."""
        shown, note = list(parts), ""
        nodes = self._walk(shown)
        shared = ((depth, self._paths_to(nodes[depth][0])) for depth in range(len(nodes) - 1, 0, -1)
                  if id(nodes[depth][0]) in self.anchored)
        depth, uses = next(((d, u) for d, u in shared if len(u) > 1), (None, []))  # the innermost one aliased
        if uses:
            anchor = nodes[depth][0]
            matrices = list(dict.fromkeys(str(u[1]) for u in uses if len(u) > 1 and u[0] == "matrices"))
            others = [json_path(u) for u in uses[1:] if not (len(u) > 1 and u[0] == "matrices")]
            users = ([f"matrices {', '.join(matrices)}"] if matrices else []) + others
            shown = [*uses[0], *shown[depth:]]
            note = f" (in the anchor &{self.anchored[id(anchor)]}, used by {'; '.join(users)})"
            nodes = self._walk(shown)
        node, key_node = nodes[-1]
        mark = key_node or node
        if key is not None and len(nodes) == len(shown) + 1:
            mark = _child(node, key)[1] or mark
        line = f"line {mark.start_mark.line + 1}: " if mark is not None else ""
        return f"{line}{json_path(shown)}", note


def expanded_size(root) -> int:
    """Nodes the tree holds with every alias expanded, counted without expanding them (a node
    an alias shares is counted once per use); raises ConfigError past MAX_NODES or for a node
    that contains itself."""
    sizes: dict[int, int] = {}

    def size(node, open_nodes):
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_nodes:
            raise ConfigError(f"line {node.start_mark.line + 1}: a node contains itself through an alias",
                              fix="remove the recursive alias")
        total = 1 + sum(size(child, open_nodes | {id(node)}) for child, _ in _children(node))
        if isinstance(node, yaml.MappingNode):
            total += len(node.value)  # the keys
        if total > MAX_NODES:
            raise ConfigError(f"line {node.start_mark.line + 1}: the document expands through its aliases to more "
                              f"than {MAX_NODES:,} nodes", fix="use fewer or smaller aliases (a build matrix needs "
                                                              "a few thousand nodes)")
        sizes[id(node)] = total
        return total

    return size(root, frozenset()) if root is not None else 0


def _non_finite(data, parts=()):
    """The path to the first float that is NaN or infinite, or None."""
    if isinstance(data, float) and not math.isfinite(data):
        return parts
    children = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in children:
        found = _non_finite(value, (*parts, key))
        if found is not None:
            return found
    return None


def load(path: Path) -> Document:
    if path.is_dir():
        raise ConfigError(f"{path} is a folder, not a file",
                          fix=f"move the folder away and restore the file (`git checkout {path.name}`)")
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ConfigError(f"{path} is {size:,} bytes, more than a build matrix's limit of {MAX_BYTES:,}",
                              fix=f"restore it (`git checkout {path.name}`)")
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist",
                          fix=f"run from the repository root, or restore it (`git checkout {path.name}`)") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ConfigError(f"cannot read {path}: {reason}", fix="make it a readable UTF-8 text file") from None
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        expanded_size(root)  # before anything walks the expanded data
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path.name}: {where}invalid YAML ({problem})", fix="correct the YAML syntax") from None
    finally:
        loader.dispose()
    document = Document(data, root, loader.anchored)
    bad = _non_finite(data)
    if bad is not None:
        where, note = document.where(bad)
        raise ConfigError(f"{path.name}: {where}{note} is {_value_at(data, bad)!r}, not a finite number",
                          fix="give a plain number")
    return document


def _value_at(data, parts):
    for part in parts:
        data = data[part]
    return data
