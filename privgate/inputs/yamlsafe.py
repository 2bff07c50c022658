"""YAML for user files: PyYAML's safe loader, line numbers kept, and no alias bombs.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from privgate.errors import PrivgateError, shown

#: Most YAML nodes (mapping keys and values, list items) a document may expand to.
MAX_NODES = 100_000


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _too_big(root: yaml.Node, limit: int) -> tuple[int, yaml.Node] | None:
    """(expanded size, node) for the first node, in post-order, whose expansion exceeds ``limit``; None if none does.

    A node that contains itself (``&a [*a]``) has no finite expansion and is
    returned with size -1.
    """
    size: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, post = stack.pop()
        key = id(node)
        if post:
            visiting.discard(key)
            total = 1 + sum(size[id(c)] for c in _children(node))
            size[key] = total
            if total > limit:
                return total, node
            continue
        if key in size:
            continue
        if key in visiting:
            return -1, node
        visiting.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(_children(node)) if id(c) not in size)
    return None


def _duplicate_key(root: yaml.Node) -> tuple[str, int, int] | None:
    """(key, first line, second line) of the first mapping key written twice, in document order; None if none is.

    PyYAML keeps the last value of a repeated key silently, so a bad merge
    that leaves two ``checks:`` blocks would quietly loosen the gate. Merge
    keys (``<<``) are YAML's own and may repeat.
    """
    seen_nodes: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[Any, int] = {}
            for k, _ in node.value:
                if not isinstance(k, yaml.ScalarNode) or k.tag == "tag:yaml.org,2002:merge":
                    continue
                line = k.start_mark.line + 1
                if k.value in first:
                    return k.value, first[k.value], line
                first[k.value] = line
        stack.extend(reversed(_children(node)))
    return None


#: Control characters a YAML string may spell with an escape (``"\\e"``, ``"\\x9b"``): C0 but tab and newline,
#: DEL, C1. A terminal would act on them (ESC starts a control sequence), so no value may hold one.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _control_char(root: yaml.Node) -> tuple[str, int] | None:
    """(the character, line) of the first scalar holding a control character, or None."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode) and isinstance(node.value, str):
            m = _CONTROL.search(node.value)
            if m:
                return m.group(), node.start_mark.line + 1
        stack.extend(reversed(_children(node)))
    return None


def _unprintable(exc: yaml.reader.ReaderError, text: str, source: str) -> str:
    """The sentence for a character YAML does not allow anywhere in a file (a raw ESC, NUL or BEL, even in a
    comment), naming its line; PyYAML's reader refuses the whole document before parsing it."""
    at = exc.position if isinstance(exc.position, int) and 0 <= exc.position <= len(text) else 0
    line = text.count("\n", 0, at) + 1
    char = text[at] if at < len(text) else ""
    control = bool(_CONTROL.fullmatch(char))
    return (
        f"{source}: line {line}: the file holds the {'control ' if control else ''}character {char!r} "
        f"(U+{ord(char or chr(0)):04X}), which YAML allows nowhere in a file, comments included"
        f"{', and a terminal would act on' if control else ''}; remove it."
    )


def load_yaml(
    text: str, source: str, error: type[PrivgateError] = PrivgateError, max_nodes: int = MAX_NODES
) -> tuple[Any, yaml.Node | None]:
    """Parse one YAML document safely: ``(value, node graph)``; ``error`` with the file and line on any problem.

    Args:
        text: the document.
        source: the file name, for messages.
        error: the :class:`PrivgateError` subclass to raise.
        max_nodes: the largest expanded size accepted (see the module docstring).
    """
    try:
        loader = yaml.SafeLoader(text)  # the reader refuses a raw control byte anywhere, comments included
    except yaml.reader.ReaderError as exc:
        raise error(_unprintable(exc, text, source)) from None
    try:
        root = loader.get_single_node()
        if root is None:
            return None, None
        twice = _duplicate_key(root)
        if twice is not None:
            key, line1, line2 = twice
            raise error(
                f"{source}: line {line2}: key {shown(key, 60)} is given twice (lines {line1} and {line2}); "
                f"YAML would keep only the second silently, so remove or merge one."
            )
        bad = _control_char(root)
        if bad is not None:
            char, line = bad
            raise error(
                f"{source}: line {line}: a value holds the control character {char!r}, which a terminal would act "
                f"on; remove it."
            )
        found = _too_big(root, max_nodes)
        if found is not None:
            total, node = found
            line = node.start_mark.line + 1
            if total < 0:
                raise error(
                    f"{source}: line {line}: a YAML alias refers to the value that contains it, which has no end."
                )
            raise error(
                f"{source}: line {line}: this value expands to {total:,} YAML nodes through its aliases (*name), "
                f"more than the {max_nodes:,} privgate accepts; write the values out or use fewer aliases."
            )
        return loader.construct_document(root), root
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{source}:{where}: invalid YAML: {problem}.") from None
    except RecursionError:
        raise error(f"{source}: the YAML is nested too deeply to read.") from None
    finally:
        loader.dispose()


def locate(root: yaml.Node | None, loc: tuple[Any, ...]) -> tuple[int | None, tuple[Any, ...]]:
    """The 1-based line of the key (or list item) at ``loc`` (a pydantic error location), and ``loc`` as found.

    Walks mapping keys and list indices; a key the file does not have gives
    its closest parent's line. Parts after a scalar (pydantic's names of union
    members, such as ``float`` in ``remediation.delta.float``) are dropped
    from the returned location.
    """
    if root is None:
        return None, loc
    node: yaml.Node | None = root
    line = root.start_mark.line + 1
    for i, key in enumerate(loc):
        if isinstance(node, yaml.MappingNode):
            pair = next(((k, v) for k, v in node.value if getattr(k, "value", None) == key), None)
            if pair is None:
                return line, loc
            line, node = pair[0].start_mark.line + 1, pair[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        elif isinstance(node, yaml.ScalarNode):
            return line, loc[:i]
        else:
            return line, loc
    return line, loc


__all__ = ["MAX_NODES", "load_yaml", "locate"]
