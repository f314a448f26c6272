"""Turn bytes into a JSON-shaped document: JSON (as Ignition reads it), or YAML otherwise.

A document that starts with ``{`` or ``[`` is JSON and must be valid JSON: YAML would accept
things Ignition refuses (a trailing comma, say). A syntax error names the source, line and column.
"""

import datetime
import json
import logging
from typing import Any, List, Tuple, Union

import yaml

from agent.errors import ConfigError, Problem
from agent.ignition.yamlsafe import MAX_DEPTH, MAX_DIGITS, check_depth, check_node_graph, guard

log = logging.getLogger(__name__)


class _DuplicateKeys(list):
    pass


def parse_document(data: Union[bytes, str], source: str = "<input>") -> Any:
    """Parse ``data``; warnings (duplicate keys) are logged. Raises ConfigError on bad syntax."""
    doc, warnings = parse_document_with_warnings(data, source)
    for w in warnings:
        log.warning("%s", w)
    return doc


def parse_document_with_warnings(data: Union[bytes, str], source: str = "<input>") -> Tuple[Any, List[Problem]]:
    text = _decode(data, source)
    stripped = text.lstrip()
    if not stripped:
        raise ConfigError(f"{source}: empty document (not a config)", source=source)
    duplicates: List[Problem] = []
    if stripped[0] in "{[":
        if _has_bom(data):
            # Go's encoding/json (Ignition) refuses any byte before the JSON value, a BOM too
            raise ConfigError(f"{source}: invalid JSON at line 1, column 1: a UTF-8 byte-order mark before "
                              "the JSON (Ignition refuses it: save the file without a BOM)", source=source)
        return _parse_json(text, source, duplicates), duplicates
    return _parse_yaml(text, source, duplicates), duplicates


def _has_bom(data: Union[bytes, str]) -> bool:
    return data.startswith(b"\xef\xbb\xbf") if isinstance(data, bytes) else data.startswith("\ufeff")


def _decode(data: Union[bytes, str], source: str) -> str:
    if isinstance(data, str):
        return data[1:] if data.startswith("\ufeff") else data
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        lenient = data.decode("utf-8-sig", "replace")
        if lenient.lstrip()[:1] in ("{", "["):
            return lenient  # Go's encoding/json (Ignition) reads invalid UTF-8 as U+FFFD
        raise ConfigError(f"{source}: not UTF-8 text (bad byte at offset {exc.start})", source=source) from None


def _parse_json(text: str, source: str, duplicates: List[Problem]) -> Any:
    def pairs_hook(pairs):
        out = {}
        for key, value in pairs:
            if key in out:
                duplicates.append(Problem("$", f"duplicate key {key!r} in a JSON object; the last one wins",
                                          rule="duplicate-key", severity="warning", source=source))
            out[key] = value
        return out

    try:
        doc = json.loads(text, object_pairs_hook=pairs_hook, parse_int=_parse_int)
    except _TooManyDigits as exc:
        raise ConfigError(f"{source}: invalid JSON: a number of {exc.args[0]} digits (at most {MAX_DIGITS})",
                          source=source) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                          source=source) from None
    except RecursionError:
        doc = _DEEP
    if doc is _DEEP or (text.count("[") + text.count("{") > MAX_DEPTH and _too_deep(doc)):
        # what Python's recursion cannot take, deterministically (Go's encoding/json: 10000)
        raise ConfigError(f"{source}: invalid JSON: nested too deeply (more than {MAX_DEPTH} levels)",
                          source=source)
    return doc


_DEEP = object()


def _too_deep(doc: Any) -> bool:
    """Whether ``doc`` nests lists and objects deeper than MAX_DEPTH (no recursion)."""
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > MAX_DEPTH:
                    return True
                stack.append((child, depth + 1))
    return False


class _TooManyDigits(ValueError):
    pass


def _parse_int(text: str) -> int:
    """Python 3.11+ refuses longer decimal integers (a ValueError); the same bound everywhere."""
    digits = len(text.lstrip("-"))
    if digits > MAX_DIGITS:
        raise _TooManyDigits(digits)
    return int(text)


class _Loader(yaml.SafeLoader):
    """SafeLoader that reports duplicate mapping keys instead of silently keeping the last."""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    out = {}
    for key_node, value_node in node.value:
        key = _json_key(loader.construct_object(key_node, deep=deep), key_node)
        if key is None:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, "found a key that is not a string, a number "
                "or a boolean (a JSON object's keys are strings)", key_node.start_mark)
        if key in out:
            mark = key_node.start_mark
            loader.duplicate_keys.append(Problem(
                "$", f"duplicate key {key!r} at line {mark.line + 1}, column {mark.column + 1}; the last one wins",
                rule="duplicate-key", severity="warning"))
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


def _json_key(key: Any, node: yaml.Node) -> Any:
    """The key as the JSON object Kubernetes makes of the YAML has it (sigs.k8s.io/yaml: numbers and
    booleans become their text; go-yaml leaves a timestamp-like key as written), or None."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, (int, float)):
        return str(key)
    if isinstance(key, (datetime.date, datetime.datetime)) and isinstance(node, yaml.ScalarNode):
        return node.value
    return None


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

guard(_Loader)  # a scalar PyYAML cannot read is a YAML error (agent.ignition.yamlsafe)


def _parse_yaml(text: str, source: str, duplicates: List[Problem]) -> Any:
    loader = None
    try:
        check_depth(text)  # before the pure-Python scanner, slow on deep flow collections
        loader = _Loader(text)  # its reader refuses control characters at once
        loader.duplicate_keys = []
        docs = []
        while loader.check_node():
            node = loader.get_node()
            check_node_graph(node)  # aliases: no self-reference, no "billion laughs"
            docs.append(loader.construct_document(node))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{source}: invalid YAML{where}: {exc.problem or exc.context}", source=source) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {exc}", source=source) from None
    except RecursionError:
        raise ConfigError(f"{source}: invalid YAML: nested too deeply", source=source) from None
    finally:
        if loader is not None:
            loader.dispose()
    duplicates.extend(Problem(p.path, p.message, p.rule, p.severity, source=source) for p in loader.duplicate_keys)
    if not docs or all(d is None for d in docs):
        raise ConfigError(f"{source}: empty document (not a config)", source=source)
    if len(docs) > 1:
        raise ConfigError(f"{source}: {len(docs)} YAML documents; expected one config", source=source)
    return docs[0]
