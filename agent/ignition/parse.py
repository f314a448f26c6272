"""Turn bytes into a JSON-shaped document: JSON (as Ignition reads it), or YAML otherwise.

A document that starts with ``{`` or ``[`` is JSON and must be valid JSON: YAML would accept
things Ignition refuses (a trailing comma, say). A syntax error names the source, line and column.
"""

import json
import logging
from typing import Any, List, Tuple, Union

import yaml

from agent.errors import ConfigError, Problem

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
        return json.loads(text, object_pairs_hook=pairs_hook)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                          source=source) from None
    except RecursionError:
        raise ConfigError(f"{source}: invalid JSON: nested too deeply", source=source) from None


class _Loader(yaml.SafeLoader):
    """SafeLoader that reports duplicate mapping keys instead of silently keeping the last."""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    out = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, "found unhashable key", key_node.start_mark
            ) from None
        if key in out:
            mark = key_node.start_mark
            loader.duplicate_keys.append(Problem(
                "$", f"duplicate key {key!r} at line {mark.line + 1}, column {mark.column + 1}; the last one wins",
                rule="duplicate-key", severity="warning"))
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _parse_yaml(text: str, source: str, duplicates: List[Problem]) -> Any:
    loader = _Loader(text)
    loader.duplicate_keys = []
    try:
        docs = []
        while loader.check_data():
            docs.append(loader.get_data())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{source}: invalid YAML{where}: {exc.problem or exc.context}", source=source) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {exc}", source=source) from None
    except RecursionError:
        raise ConfigError(f"{source}: invalid YAML: nested too deeply", source=source) from None
    finally:
        loader.dispose()
    duplicates.extend(Problem(p.path, p.message, p.rule, p.severity, source=source) for p in loader.duplicate_keys)
    if not docs or all(d is None for d in docs):
        raise ConfigError(f"{source}: empty document (not a config)", source=source)
    if len(docs) > 1:
        raise ConfigError(f"{source}: {len(docs)} YAML documents; expected one config", source=source)
    return docs[0]
