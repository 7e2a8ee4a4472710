"""The project's one YAML reader. Every YAML file slabench reads (SLA contract, sweep config, fleet and facts files,
price tables, workload assumptions, simulator profiles, Helm values, rendered manifests) is parsed here, so one rule
holds everywhere:

- a key given twice in one mapping is an error naming the file, both lines and the key — plain YAML keeps the last
  one silently, and a second `targets:` block once turned a FAIL into a PASS;
- merge keys (``<<: *anchor``) follow the YAML spec: the mapping's own keys win over merged ones, and among the maps
  of one ``<<: [*a, *b]`` the first wins; a second ``<<`` in one mapping is a duplicate key like any other;
- what a small file can make large or endless is bounded: aliases may expand the document by at most
  `MAX_ALIAS_NODES` nodes (a 1 KB "billion laughs" would otherwise grow to gigabytes), nesting is at most
  `MAX_DEPTH` deep, an alias may not contain itself, and an integer has at most `MAX_INT_DIGITS` digits;
- non-UTF-8 or binary content and syntax errors are one-line `UserError`s naming the file and line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from slabench.core.errors import UserError
from slabench.core.files import line_at, read_text

MERGE_TAG = "tag:yaml.org,2002:merge"
MAX_ALIAS_NODES = 100_000  # nodes aliases may add beyond the document's own: far above any config, far below harm
MAX_DEPTH = 100  # levels of nesting; our deepest file (rendered Kubernetes manifests) has about 15
MAX_INT_DIGITS = 100  # a 64-bit integer has 20; Python refuses to parse more than 4,300


class DuplicateKeyError(ConstructorError):
    def __init__(self, key: Any, first: yaml.Mark, second: yaml.Mark) -> None:
        super().__init__(None, None, f"duplicate key {key!r}", second)
        self.key, self.first, self.second = key, first, second


class BoundError(ConstructorError):
    """A document that would grow past a bound (alias expansion, nesting, a cycle, integer size)."""

    def __init__(self, problem: str, mark: yaml.Mark | None) -> None:
        super().__init__(None, None, problem, mark)


class StrictLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses a key given twice in one mapping, merges as the YAML spec says and bounds what
    aliases, nesting and integers can cost."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._checked: set[yaml.Node] = set()  # the nodes themselves: an id() may be reused
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        # PyYAML composes recursively: 5,000 `[` would be a RecursionError deep inside it
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise BoundError(f"nesting deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> yaml.Node | None:
        node: yaml.Node | None = super().compose_document()
        if node is not None:
            check_bounds(node)  # before anything walks it: construction and `line_index` expand aliases
        return node

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        value = str(node.value).lstrip("+-").replace("_", "")
        digits = len(value) - 2 * value.startswith(("0x", "0o", "0b"))
        if digits > MAX_INT_DIGITS:
            raise BoundError(f"an integer of {digits} digits (at most {MAX_INT_DIGITS})", node.start_mark)
        return super().construct_yaml_int(node)

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        """Merge keys as the YAML spec says: own keys win, then the merged maps in order (the first wins). Keys
        are checked once per node, before merged keys are flattened in (overriding those is allowed)."""
        if node in self._checked:
            return
        self._checked.add(node)
        seen: dict[Any, yaml.Mark] = {}
        merge_key: yaml.Mark | None = None
        merged: list[yaml.MappingNode] = []
        own = []
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                if merge_key is not None:
                    raise DuplicateKeyError("<<", merge_key, key_node.start_mark)
                merge_key = key_node.start_mark
                merged += self._merged_maps(node, value_node)
                continue
            own.append((key_node, value_node))
            if key_node.tag == "tag:yaml.org,2002:value":
                key_node.tag = "tag:yaml.org,2002:str"
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base constructor reports it
                continue
            if first is not None:
                raise DuplicateKeyError(key, first, key_node.start_mark)
            seen[key] = key_node.start_mark
        pairs: list[tuple[yaml.Node, yaml.Node]] = []
        for sub in merged:
            self.flatten_mapping(sub)
            pairs = sub.value + pairs  # later pairs win in construction: the last merged map goes first
        node.value = pairs + own

    def _merged_maps(self, node: yaml.Node, value: yaml.Node) -> list[yaml.MappingNode]:
        maps: list[yaml.Node] = value.value if isinstance(value, yaml.SequenceNode) else [value]
        out = []
        for m in maps:
            if not isinstance(m, yaml.MappingNode):
                raise ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"a merge key (<<) takes a mapping or a list of mappings, not a {type(m).__name__}",
                    m.start_mark,
                )
            out.append(m)
        return out


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)


def check_bounds(root: yaml.Node) -> None:
    """Raise BoundError when the document, with its aliases expanded, is cyclic, deeper than MAX_DEPTH or larger
    than its own nodes plus MAX_ALIAS_NODES. One pass over the distinct nodes (iterative, sizes memoised), so the
    check costs what the file is, not what it would expand to."""
    size: dict[yaml.Node, int] = {}
    depth: dict[yaml.Node, int] = {}
    open_nodes: set[yaml.Node] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        children = _children(node)
        if done:
            open_nodes.discard(node)
            size[node] = 1 + sum(size[c] for c in children)
            depth[node] = 1 + max((depth[c] for c in children), default=0)
            if depth[node] > MAX_DEPTH:
                raise BoundError(f"nesting deeper than {MAX_DEPTH} levels", node.start_mark)
            continue
        if node in size:
            continue
        if node in open_nodes:
            raise BoundError("an alias that contains itself (an endless document)", node.start_mark)
        open_nodes.add(node)
        stack.append((node, True))
        stack.extend((c, False) for c in children if c not in size)
        if len(open_nodes) > MAX_DEPTH:
            raise BoundError(f"nesting deeper than {MAX_DEPTH} levels", node.start_mark)
    if size[root] > len(size) + MAX_ALIAS_NODES:
        raise BoundError(
            f"aliases expand this document to {size[root]:,} nodes from {len(size):,} (at most {MAX_ALIAS_NODES:,} "
            "more) — an alias bomb?",
            root.start_mark,
        )


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


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
