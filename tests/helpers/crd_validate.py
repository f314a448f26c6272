"""Validate an object against its CustomResourceDefinition as a current kube-apiserver does.

The tests' kube-apiserver 1.20 neither evaluates ``x-kubernetes-validations`` (CEL, Kubernetes
1.25+) nor checks much of a CRD's schema, where a modern OpenShift API server answers 422. So
tests check what the server writes (MachineConfigPool status, MachineConfigNode, rendered
MachineConfig) here, against OpenShift's CRDs (deploy/crds/, the same files as
/work/shared/openshift-crds/):

- the structural schema (k8s.io/apiextensions-apiserver/pkg/apiserver/validation, after
  kube-openapi's validate): ``type`` (``nullable``, ``x-kubernetes-int-or-string``, ``anyOf``
  branches), ``required``, ``enum``, ``minLength``/``maxLength``, ``pattern``, ``format``
  (date-time, int32, int64), ``minimum``/``maximum``, ``minItems``/``maxItems``,
  ``x-kubernetes-list-type`` map (unique keys) and set (unique items), and a field the schema
  does not know, which the API server prunes (reported: what we write would be lost);
- ``metadata.name`` (a DNS-1123 subdomain, as for every custom resource);
- every ``x-kubernetes-validations`` rule with cel-python and tests/helpers/crd_cel.py; a rule
  with ``oldSelf`` (a transition rule) only when ``old`` is given and the field was there,
  as upstream (apiextensions-apiserver pkg/apiserver/schema/cel/validation.go, Validate /
  validateExpressions).

``problems(obj, old=None)`` -> ["<path>: <what>"], empty when valid; ``assert_valid(obj)``.
"""

import functools
import os
import re
from typing import Any, Dict, List, Optional

import yaml

from tests.helpers import crd_cel
from tests.helpers.paths import REPO

CRD_DIR = os.path.join(REPO, "deploy", "crds")
_DATE_TIME = re.compile(r"^\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)$")
_INT_RANGES = {"int32": (-2 ** 31, 2 ** 31 - 1), "int64": (-2 ** 63, 2 ** 63 - 1)}
_JSON_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


@functools.cache
def _crds() -> Dict[str, Dict[str, Any]]:
    """(group/kind) -> CRD, every file of CRD_DIR."""
    out = {}
    for name in sorted(os.listdir(CRD_DIR)):
        if name.endswith(".yaml"):
            with open(os.path.join(CRD_DIR, name), encoding="utf-8") as f:
                for doc in yaml.safe_load_all(f):
                    if doc and doc.get("kind") == "CustomResourceDefinition":
                        out[f"{doc['spec']['group']}/{doc['spec']['names']['kind']}"] = doc
    return out


def schema_for(api_version: str, kind: str) -> Dict[str, Any]:
    """The openAPIV3Schema of ``kind`` at ``api_version`` (group/version)."""
    group, _, version = api_version.rpartition("/")
    crd = _crds().get(f"{group}/{kind}")
    if crd is None:
        raise LookupError(f"no CRD for {group}/{kind} in {CRD_DIR}")
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise LookupError(f"CRD {group}/{kind} has no version {version}")


def problems(obj: Dict[str, Any], old: Optional[Dict[str, Any]] = None,
             schema: Optional[Dict[str, Any]] = None) -> List[str]:
    """What a current API server would refuse or prune in ``obj`` (``old``: the stored object,
    for transition rules); ``schema`` defaults to the CRD of obj's apiVersion and kind."""
    schema = schema or schema_for(obj.get("apiVersion", ""), obj.get("kind", ""))
    out: List[str] = []
    name = (obj.get("metadata") or {}).get("name")
    if not isinstance(name, str) or crd_cel.dns1123_subdomain_errors(name):
        out.append(f"metadata.name: {name!r} is not a DNS-1123 subdomain")
    Walk(out).value(schema, obj, old, "", root=True)
    return out


def assert_valid(obj: Dict[str, Any], old: Optional[Dict[str, Any]] = None) -> None:
    found = problems(obj, old)
    assert not found, f"{obj.get('kind')} {(obj.get('metadata') or {}).get('name')}: " + "; ".join(found)


class Walk:
    """One validation: appends "<path>: <what>" to ``out``."""

    def __init__(self, out: List[str]):
        self.out = out

    def bad(self, path: str, what: str) -> None:
        self.out.append(f"{path or '<root>'}: {what}")

    def value(self, schema: Dict[str, Any], value: Any, old: Any, path: str, root: bool = False) -> None:
        if value is None:
            if not schema.get("nullable"):
                self.bad(path, "null is not allowed")
            return
        if not self.type_ok(schema, value, path):
            return
        if isinstance(value, dict):
            self.object(schema, value, old if isinstance(old, dict) else None, path, root)
        elif isinstance(value, list):
            self.array(schema, value, old if isinstance(old, list) else None, path)
        else:
            self.scalar(schema, value, path)
        self.rules(schema, value, old, path)

    def type_ok(self, schema: Dict[str, Any], value: Any, path: str) -> bool:
        if schema.get("x-kubernetes-int-or-string"):
            ok = isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
            return ok or self.bad(path, f"must be an integer or a string, not {type(value).__name__}") or False
        if "anyOf" in schema and "type" not in schema:
            if any(not _quiet(branch, value) for branch in schema["anyOf"]):
                return True
            self.bad(path, "matches none of anyOf")
            return False
        want = schema.get("type")
        if want is None:
            return True
        if want == "integer":
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif want == "number":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            ok = isinstance(value, _JSON_TYPES[want])
        return ok or self.bad(path, f"must be of type {want}, not {type(value).__name__}") or False

    def object(self, schema: Dict[str, Any], value: Dict[str, Any], old: Optional[Dict[str, Any]], path: str,
               root: bool) -> None:
        props = schema.get("properties") or {}
        for key in schema.get("required") or ():
            if key not in value:
                self.bad(_join(path, key), "Required value")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key) if key in props else (extra if isinstance(extra, dict) else None)
            if root and key in ("apiVersion", "kind", "metadata"):
                continue  # the API server's own (metadata.name is checked by problems())
            if sub is not None:
                self.value(sub, item, (old or {}).get(key), _join(path, key))
            elif not (schema.get("x-kubernetes-preserve-unknown-fields") or extra is True):
                self.bad(_join(path, key), "unknown field: the API server prunes it")

    def array(self, schema: Dict[str, Any], value: List[Any], old: Optional[List[Any]], path: str) -> None:
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            self.bad(path, f"Too many: {len(value)}: must have at most {schema['maxItems']} items")
        if "minItems" in schema and len(value) < schema["minItems"]:
            self.bad(path, f"must have at least {schema['minItems']} items")
        kind = schema.get("x-kubernetes-list-type")
        keys = schema.get("x-kubernetes-list-map-keys") or []
        olds = _keyed(old, keys) if kind == "map" and old is not None else {}
        seen = set()
        for i, item in enumerate(value):
            key = _key(item, keys) if kind == "map" else (repr(item) if kind == "set" else None)
            if key is not None and key in seen:
                self.bad(f"{path}[{i}]", f"Duplicate value: {key}")
            seen.add(key)
            if "items" in schema:
                self.value(schema["items"], item, olds.get(key) if kind == "map" else None, f"{path}[{i}]")

    def scalar(self, schema: Dict[str, Any], value: Any, path: str) -> None:
        if "enum" in schema and value not in schema["enum"]:
            self.bad(path, f"Unsupported value: {value!r}: supported values: {schema['enum']}")
        if isinstance(value, str):
            if "maxLength" in schema and len(value) > schema["maxLength"]:
                self.bad(path, f"Too long: may not be more than {schema['maxLength']} characters")
            if "minLength" in schema and len(value) < schema["minLength"]:
                self.bad(path, f"must be at least {schema['minLength']} characters")
            if "pattern" in schema and not re.search(schema["pattern"], value):
                self.bad(path, f"should match {schema['pattern']!r}")
            if schema.get("format") == "date-time" and not _DATE_TIME.match(value):
                self.bad(path, f"{value!r} is not an RFC 3339 date-time")
        elif not isinstance(value, bool):
            low, high = _INT_RANGES.get(schema.get("format", ""), (None, None))
            if low is not None and not low <= value <= high:
                self.bad(path, f"{value} is out of the {schema['format']} range")
            if "minimum" in schema and value < schema["minimum"]:
                self.bad(path, f"should be greater than or equal to {schema['minimum']}")
            if "maximum" in schema and value > schema["maximum"]:
                self.bad(path, f"should be less than or equal to {schema['maximum']}")

    def rules(self, schema: Dict[str, Any], value: Any, old: Any, path: str) -> None:
        for rule in schema.get("x-kubernetes-validations") or ():
            text = rule["rule"]
            transition = re.search(r"\boldSelf\b", text) is not None
            if transition and old is None and not rule.get("optionalOldSelf"):
                continue  # a transition rule: only on an update that had the field
            try:
                ok = _evaluate(text, value, old)
            except Exception as exc:  # what the API server reports as an evaluation error: a failure
                self.bad(path, f"rule {text!r} could not be evaluated: {type(exc).__name__}: {exc}")
                continue
            if not ok:
                where = _join(path, rule["fieldPath"].lstrip(".")) if rule.get("fieldPath") else path
                self.bad(where, f"{rule.get('message') or 'failed rule'} (rule: {text})")


def _quiet(schema: Dict[str, Any], value: Any) -> List[str]:
    found: List[str] = []
    Walk(found).value(schema, value, None, "")
    return found


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _key(item: Any, keys: List[str]) -> str:
    return repr(tuple((item or {}).get(k) for k in keys)) if isinstance(item, dict) else repr(item)


def _keyed(items: List[Any], keys: List[str]) -> Dict[str, Any]:
    return {_key(item, keys): item for item in items}


@functools.cache
def _program(rule: str):
    import celpy

    env = celpy.Environment()
    return env.program(env.compile(rule), functions=crd_cel.functions())


def _evaluate(rule: str, value: Any, old: Any) -> bool:
    import celpy
    from celpy import celtypes

    activation = {"self": celpy.json_to_cel(value), "format": crd_cel.FORMAT_NAMESPACE}
    if old is not None:
        activation["oldSelf"] = celpy.json_to_cel(old)
    result = _program(rule).evaluate(activation)
    if isinstance(result, Exception):  # celpy returns some evaluation errors as values
        raise result
    if not isinstance(result, (bool, celtypes.BoolType)):
        raise TypeError(f"the rule gave {type(result).__name__}, not a bool")
    return bool(result)
