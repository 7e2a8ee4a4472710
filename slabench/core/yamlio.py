"""The project's one YAML reader. Every YAML file slabench reads (SLA contract, sweep config, fleet and facts files,
price tables, workload assumptions, simulator profiles, Helm values, rendered manifests) is parsed here, so one rule
holds everywhere:

- a key given twice in one mapping is an error naming the file, both lines and the key — plain YAML keeps the last
  one silently, and a second `targets:` block once turned a FAIL into a PASS;
- non-UTF-8 or binary content and syntax errors are one-line `UserError`s naming the file and line.

Merge keys (``<<: *anchor``) may still be overridden by the mapping's own keys: that is what they are for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from slabench.core.errors import UserError
from slabench.core.files import line_at, read_text

MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(ConstructorError):
    def __init__(self, key: Any, first: yaml.Mark, second: yaml.Mark) -> None:
        super().__init__(None, None, f"duplicate key {key!r}", second)
        self.key, self.first, self.second = key, first, second


class StrictLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses a key given twice in one mapping."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._checked: set[yaml.Node] = set()  # the nodes themselves: an id() may be reused

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        # Checked before merge keys are flattened in (overriding those is allowed), and once per node: a flattened
        # node may hold a merged key and its override side by side.
        if node not in self._checked:
            self._checked.add(node)
            seen: dict[Any, yaml.Mark] = {}
            for key_node, _ in node.value:
                if key_node.tag == MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base constructor reports it
                    continue
                if first is not None:
                    raise DuplicateKeyError(key, first, key_node.start_mark)
                seen[key] = key_node.start_mark
        super().flatten_mapping(node)


def line_index(node: yaml.Node | None, path: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], int]:
    """Map each key/index path of a composed YAML document to its 1-based line."""
    if node is None:
        return {}
    lines = {path: node.start_mark.line + 1}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            sub = (*path, key_node.value)
            lines.update(line_index(value_node, sub))
            lines[sub] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines.update(line_index(item, (*path, i)))
    return lines


def _user_error(e: yaml.YAMLError, text: str, source: str) -> UserError:
    if isinstance(e, DuplicateKeyError):
        return UserError(
            f"{source}:{e.second.line + 1}: duplicate key {e.key!r} (first at line {e.first.line + 1}) — "
            "a key may appear once per mapping; merge the two entries or delete one"
        )
    if isinstance(e, yaml.reader.ReaderError):  # a control character PyYAML refuses
        line = line_at(text, e.position)
        return UserError(f"{source}:{line}: invalid YAML: {e.reason} (character U+{e.character:04X})")
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f"{source}:{mark.line + 1}" if mark is not None else source
    problem = getattr(e, "problem", None) or str(e).replace("\n", " ")
    context = getattr(e, "context", None)
    return UserError(f"{where}: invalid YAML: {f'{context}, ' if context else ''}{problem}")


def parse(text: str, source: str) -> tuple[Any, dict[tuple[Any, ...], int]]:
    """One YAML document → (data, path→line index). `source` names the text in errors (a file path)."""
    loader = None
    try:
        loader = StrictLoader(text)
        node = loader.get_single_node()
        lines = line_index(node)  # before construction: merge keys are flattened into the nodes then
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as e:
        raise _user_error(e, text, source) from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, lines


def parse_all(text: str, source: str) -> list[Any]:
    """Every document of a multi-document YAML text (e.g. rendered manifests)."""
    loader = None
    try:
        loader = StrictLoader(text)
        docs = []
        while loader.check_data():  # type: ignore[no-untyped-call]  # PyYAML's stubs leave it untyped
            docs.append(loader.get_data())
        return docs
    except yaml.YAMLError as e:
        raise _user_error(e, text, source) from None
    finally:
        if loader is not None:
            loader.dispose()


def load_file(path: str | Path) -> tuple[Any, dict[tuple[Any, ...], int]]:
    """Parse a YAML file: (data, path→line index). Every problem is a one-line UserError naming file and line."""
    return parse(read_text(path), str(path))


def load_data(path: str | Path) -> Any:
    return load_file(path)[0]
