"""What the validator reports (errors and warnings at JSON paths) and how it reads the document.

The rule modules never trust the document's types: ``value_of`` gives a field only when it has
the expected JSON type (the structural pass reports the type errors once).
"""

from typing import Any, List, Tuple

from agent.errors import Problem

MISSING = object()


class Report:
    def __init__(self) -> None:
        self.problems: List[Problem] = []

    def error(self, path: str, message: str, rule: str, value: Any = MISSING) -> None:
        self._add(path, message, rule, "error", value)

    def warn(self, path: str, message: str, rule: str, value: Any = MISSING) -> None:
        self._add(path, message, rule, "warning", value)

    def _add(self, path: str, message: str, rule: str, severity: str, value: Any) -> None:
        if value is MISSING:
            self.problems.append(Problem(path, message, rule=rule, severity=severity))
        else:
            self.problems.append(Problem(path, message, rule=rule, severity=severity, value=value))



def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__



def value_of(d: Any, key: str, kind: str) -> Any:
    """d[key] when it is of ``kind`` (type errors are reported by the structural pass)."""
    if not isinstance(d, dict):
        return None
    v = d.get(key)
    if v is None:
        return None
    if kind == "str" and isinstance(v, str):
        return v
    if kind == "bool" and isinstance(v, bool):
        return v
    if kind == "int" and isinstance(v, int) and not isinstance(v, bool):
        return v
    if kind == "dict" and isinstance(v, dict):
        return v
    if kind == "list" and isinstance(v, list):
        return v
    return None


def entries_of(d: Any, key: str) -> List[Tuple[int, dict]]:
    return [(i, x) for i, x in enumerate(value_of(d, key, "list") or []) if isinstance(x, dict)]

