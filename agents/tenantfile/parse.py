"""Reading a tenant file: YAML composed into nodes, so every value keeps its line number.

PyYAML's `compose` gives the node tree with start marks; the values are built from it here
(scalars by the safe constructor, so no tag can run code). A problem names the line of what it
is about: the key's line for a mapping entry, the item's line for a list item.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

Path = tuple[str | int, ...]
MAP_TAG, SEQ_TAG = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"


@dataclass(frozen=True, order=True)
class Problem:
    line: int
    message: str

    def render(self, filename: str) -> str:
        return f"{filename}:{self.line}: {self.message}"


@dataclass
class Document:
    data: Any
    lines: dict[Path, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    # Paths whose YAML was already refused: what the checks would add about them is noise.
    refused: set[Path] = field(default_factory=set)

    def line(self, path: Path) -> int:
        """The line of `path`, or of its nearest ancestor that has one."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), 1)

    def problem(self, path: Path, message: str) -> None:
        if any(path[: len(r)] == r for r in self.refused):
            return
        self.problems.append(Problem(self.line(path), message))


def parse(text: str) -> Document:
    """The file's data with a line per path; YAML errors are problems, never exceptions."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else 1
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return Document(None, problems=[Problem(line, f"not valid YAML: {reason}")])
    document = Document(None)
    if root is None:
        document.problems.append(Problem(1, "the file is empty"))
        return document
    document.data = _build(root, (), document, yaml.SafeLoader(""))
    return document


def _build(node: yaml.Node, path: Path, document: Document, loader: yaml.SafeLoader) -> Any:
    document.lines.setdefault(path, node.start_mark.line + 1)
    if not isinstance(node, yaml.ScalarNode) and node.tag not in (MAP_TAG, SEQ_TAG):
        # Scalars' tags are the safe constructor's to judge; a collection's would be ignored.
        document.problems.append(
            Problem(node.start_mark.line + 1, f"not valid YAML: unsupported tag {node.tag!r}")
        )
        document.refused.add(path)
    if isinstance(node, yaml.MappingNode):
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            key = _scalar(key_node, loader) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str):
                document.problems.append(Problem(line, "keys must be plain text"))
                continue
            if key in result:
                first = document.lines[(*path, key)]
                document.problems.append(
                    Problem(line, f"duplicate key {key!r} (first at line {first})")
                )
                continue
            document.lines[(*path, key)] = line
            result[key] = _build(value_node, (*path, key), document, loader)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, (*path, i), document, loader) for i, item in enumerate(node.value)]
    try:
        return _scalar(node, loader)
    except yaml.YAMLError as exc:
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        document.problems.append(Problem(node.start_mark.line + 1, f"not valid YAML: {reason}"))
        document.refused.add(path)
        return None


def _scalar(node: yaml.ScalarNode, loader: yaml.SafeLoader) -> Any:
    return loader.construct_object(node, deep=True)
