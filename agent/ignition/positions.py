"""Line and column of the value at a JSON path, as ``ignition-validate`` reports them.

Only run when there is something to report: one pass of a regex tokenizer over the text (C
speed, no per-character Python loop), stopping once every asked path is found. A path that is
not in the text (a default, a key read case-insensitively under another spelling) gets the
position of its nearest ancestor that is. YAML documents (MachineConfigs) use the parser's
own marks. Lines and columns count from 1; columns count characters.
"""

import bisect
import re
from typing import Dict, Iterable, List, Optional, Tuple

import yaml

from agent.errors import Problem

Position = Tuple[int, int]

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+')


def locate(text: str, paths: Iterable[str]) -> Dict[str, Position]:
    """{path: (line, column)} for every path in ``paths`` (its nearest located ancestor if needed)."""
    wanted = set(paths)
    if not wanted:
        return {}
    closure = {a for p in wanted for a in _ancestors(p)}
    stripped = text.lstrip()
    offsets = _json_offsets(text, closure) if stripped[:1] in ("{", "[") else _yaml_offsets(text, closure)
    if offsets is None:
        return {}
    lines = _line_starts(text)
    out: Dict[str, Position] = {}
    for p in wanted:
        for a in _ancestors(p):  # p itself first, then its parents
            if a in offsets:
                out[p] = _line_col(lines, offsets[a])
                break
    return out


def _ancestors(path: str) -> List[str]:
    parts = path.split(".")
    return [".".join(parts[:n]) for n in range(len(parts), 0, -1)]


def _json_offsets(text: str, wanted: set) -> Optional[Dict[str, int]]:
    found: Dict[str, int] = {}
    stack: List[list] = []  # frames: [kind, path, index-or-key, expecting-key]
    for m in _TOKEN.finditer(text):
        tok = m.group()
        if tok in (",", ":"):
            if tok == "," and stack:
                frame = stack[-1]
                if frame[0] == "arr":
                    frame[2] += 1
                else:
                    frame[3] = True
            continue
        if tok in ("}", "]"):
            if stack:
                stack.pop()
            continue
        if stack and stack[-1][0] == "obj" and stack[-1][3]:
            stack[-1][2] = _unquote(tok)  # a key
            stack[-1][3] = False
            continue
        path = "$" if not stack else f"{stack[-1][1]}.{stack[-1][2]}"
        if path in wanted and path not in found:
            found[path] = m.start()
            if len(found) == len(wanted):
                break
        if tok == "{":
            stack.append(["obj", path, None, True])
        elif tok == "[":
            stack.append(["arr", path, 0, False])
    return found


def _unquote(tok: str) -> str:
    if '\\' not in tok:
        return tok[1:-1]
    import json
    try:
        return json.loads(tok)
    except ValueError:
        return tok[1:-1]


def _yaml_offsets(text: str, wanted: set) -> Optional[Dict[str, int]]:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    found: Dict[str, int] = {}
    todo = [("$", root)]
    while todo:
        path, node = todo.pop()
        if node is None:
            continue
        if path in wanted:
            found[path] = node.start_mark.index
        if isinstance(node, yaml.MappingNode):
            todo.extend((f"{path}.{k.value}", v) for k, v in node.value if f"{path}.{k.value}" in wanted)
        elif isinstance(node, yaml.SequenceNode):
            todo.extend((f"{path}.{i}", v) for i, v in enumerate(node.value) if f"{path}.{i}" in wanted)
    return found


def _line_starts(text: str) -> List[int]:
    starts = [0]
    pos = text.find("\n")
    while pos >= 0:
        starts.append(pos + 1)
        pos = text.find("\n", pos + 1)
    return starts


def _line_col(starts: List[int], offset: int) -> Position:
    line = bisect.bisect_right(starts, offset)
    return line, offset - starts[line - 1] + 1


def with_positions(problems: List[Problem], data) -> List[Problem]:
    """``problems`` with the line and column of each one's path in ``data`` (bytes or text)."""
    from dataclasses import replace

    if not problems or isinstance(data, dict):
        return problems
    text = data.decode("utf-8-sig", "replace") if isinstance(data, bytes) else data
    found = locate(text, {p.path for p in problems})
    return [replace(p, line=found[p.path][0], column=found[p.path][1]) if p.path in found and p.line is None
            else p for p in problems]
