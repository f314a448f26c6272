"""PyYAML's safe loading, made total: whatever the text, a value or a ``yaml.YAMLError``.

PyYAML's safe constructors raise plain Python errors on some scalars: ``2001-13-45`` and
``0000-00-00`` (ValueError from ``datetime``), ``!!int abc`` and ``!!float abc`` (ValueError),
``!!bool abc`` (KeyError), ``!!timestamp abc`` (AttributeError), and on Python 3.11+ an integer
of more than 4300 digits (ValueError: int_max_str_digits); its pure-Python composer recurses, so
deep nesting is a RecursionError, and its scanner takes time quadratic in the depth of flow
collections (``{{{{...``: half a second for a few thousand). Here each of those is a
``yaml.YAMLError`` (a ``ConstructorError`` at the scalar's line and column), which every caller
already reports, and a document nested deeper than MAX_DEPTH is refused before it is loaded
(measured with libyaml's parser, which is iterative and fast, when PyYAML has it).
"""

from typing import Any, Callable, Dict, List, Set, Tuple, Type, TypeVar

import yaml
from yaml.constructor import ConstructorError, SafeConstructor

# Python 3.11+ refuses longer decimal integers; the same bound on every Python
MAX_DIGITS = 4300
MAX_DEPTH = 100  # nested sequences and mappings: far more than any config needs
MAX_ALIAS_NODES = 100_000  # what aliases may add, expanded (the 652-byte "billion laughs" adds billions)
_EVENTS_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SCALAR_TAGS = tuple(f"tag:yaml.org,2002:{t}" for t in ("null", "bool", "int", "float", "binary", "timestamp"))

C = TypeVar("C", bound=Type[SafeConstructor])


def _guarded(construct: Callable[[Any, yaml.Node], Any], tag: str) -> Callable[[Any, yaml.Node], Any]:
    short = tag.rsplit(":", 1)[-1]

    def guarded(constructor: Any, node: yaml.Node) -> Any:
        value = node.value if isinstance(node, yaml.ScalarNode) else ""
        try:
            if short == "int" and len(value.lstrip("+-").replace("_", "")) > MAX_DIGITS:
                raise ValueError(f"more than {MAX_DIGITS} digits")
            return construct(constructor, node)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise ConstructorError(None, None, f"cannot read {value[:40]!r} as {short} ({exc})",
                                   node.start_mark) from None

    return guarded


def guard(cls: C) -> C:
    """Give ``cls`` (a SafeConstructor or a SafeLoader subclass) scalar constructors that raise
    ConstructorError only; call it after the class has set its own constructors."""
    for tag in SCALAR_TAGS:
        cls.add_constructor(tag, _guarded(cls.yaml_constructors[tag], tag))
    return cls


@guard
class Loader(yaml.SafeLoader):
    """yaml.SafeLoader whose scalars never raise anything but a YAML error."""


@guard
class Constructor(SafeConstructor):
    """SafeConstructor, the same way (for a node graph composed by another loader)."""


def check_depth(text: Any) -> None:
    """yaml.YAMLError when ``text`` nests sequences and mappings deeper than MAX_DEPTH. Text the
    event parser refuses passes: the loader then says what is wrong with it, in its words."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_EVENTS_LOADER):
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    break
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                depth -= 1
    except yaml.YAMLError as exc:
        if "maximum nesting depth" not in str(exc):  # libyaml's own bound (1000), seen first
            return
        depth = MAX_DEPTH + 1
    except (ValueError, RecursionError):  # ValueError: a surrogate, which libyaml cannot take
        return
    if depth > MAX_DEPTH:
        raise yaml.YAMLError(f"nested too deeply (more than {MAX_DEPTH} levels)")


def safe_load(text: Any, loader: Type[yaml.SafeLoader] = Loader) -> Any:
    """``yaml.load(text, loader)``: the only document (None when empty), or yaml.YAMLError: for
    bad syntax, a scalar PyYAML cannot read, deep nesting, or aliases that expand too far."""
    check_depth(text)
    instance = loader(text)
    try:
        node = instance.get_single_node()
        if node is None:
            return None
        check_node_graph(node)
        return instance.construct_document(node)
    except RecursionError:
        raise yaml.YAMLError("nested too deeply") from None
    finally:
        instance.dispose()


def check_node_graph(root: yaml.Node) -> None:
    """Refuse a document whose aliases expand to more than MAX_ALIAS_NODES extra nodes, that nests
    deeper than MAX_DEPTH, or that refers to itself. Linear: each distinct node is sized once."""
    expanded: Dict[int, int] = {}
    distinct = 0
    stack: List[Tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    on_path: Set[int] = set()
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            expanded[key] = 1 + sum(expanded[id(c)] for c in _children(node))
            continue
        if key in expanded:
            continue
        if key in on_path:
            raise yaml.YAMLError("a recursive alias (a node that contains itself): refused")
        if depth > MAX_DEPTH:
            raise yaml.YAMLError(f"nested deeper than {MAX_DEPTH} levels: refused")
        distinct += 1
        on_path.add(key)
        stack.append((node, depth, True))
        for child in _children(node):
            if id(child) in on_path:
                raise yaml.YAMLError("a recursive alias (a node that contains itself): refused")
            if id(child) not in expanded:
                stack.append((child, depth + 1, False))
    extra = expanded[id(root)] - distinct
    if extra > MAX_ALIAS_NODES:
        raise yaml.YAMLError(f"aliases expand to {expanded[id(root)]} nodes from {distinct} written "
                             f"(at most {MAX_ALIAS_NODES} more): refused; write the values out")


def _children(node: yaml.Node) -> List[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []
