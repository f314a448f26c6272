"""A pool's blocking pods (ours; pure): a Node running a pod that the pool's selector matches is
not newly targeted while the pod runs; the next candidate goes in its place.

The MachineConfigPool annotation ``node-config-server.openshift.io/blocking-pod-selector`` holds a
Kubernetes label selector, as ``kubectl get pods -l`` takes it (k8s.io/apimachinery
pkg/labels/selector.go ``Parse``)::

    app in (batch,backup),!may-interrupt

- ``key=value``, ``key==value``, ``key!=value`` (a pod without the label matches ``!=``);
- ``key in (v1,v2)``, ``key notin (v1,v2)`` (a pod without the label matches ``notin``);
- ``key`` (the label is set), ``!key`` (it is not); ``key>N``, ``key<N`` (an integer label value);
- a comma between requirements means AND. Keys are qualified names (``example.com/name``),
  values label values (63 characters at most).

As kured's ``--blocking-pod-selector`` (kubereboot/kured pkg/blockers/kubernetespod.go
``IsBlocked``, lines 36-59 at 0fd92faf): the pods of a Node are those bound to it
(``spec.nodeName``) whose phase is not Succeeded, Failed or Unknown (kured's field selector
``status.phase!=Succeeded,status.phase!=Failed,status.phase!=Unknown``, line 37), so a pod still
Pending on the Node blocks, a finished one does not; a failure to list the pods blocks (kured
returns "blocked" on a query error; here the pool's new targeting holds). Unlike kured, which
takes the flag several times (any selector blocks), a pool has one selector, read by the server
for the whole pool at each of its steps rather than by a daemon on each node.

An annotation that does not parse holds the pool's new targeting (fail closed: a typo never lets
a node running a protected workload update), and the pool says what is wrong and where.
``parse`` terminates on any input (the text is bounded before it is read, and every loop moves
forward through it).
"""

import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from agent.core.rolloutpolicy import PREFIX, pool_annotations

ANNOTATION = PREFIX + "blocking-pod-selector"
MAX_TEXT = 2000  # characters: a selector is a few dozen
PODS_LISTED = 5  # pod names kept per node in the pool's record (the count is whole)
NODES_LISTED = 50  # nodes kept in the pool's record (targeting itself reads every one)
# kured's field selector (kubernetespod.go:37): the phases of pods that no longer run on the Node
ENDED_PHASES = ("Succeeded", "Failed", "Unknown")
FIELD_SELECTOR = ",".join(f"status.phase!={p}" for p in ENDED_PHASES)
EXAMPLE = "app in (batch,backup),!may-interrupt"

_SPECIAL = "=!(),<>"
_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")  # validation.IsQualifiedName's name part
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")  # IsDNS1123Subdomain
_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")  # IsValidLabelValue
_INTEGER = re.compile(r"[-+]?[0-9]{1,19}")  # strconv.ParseInt(v, 10, 64): within int64 (_integer)
_OPERATORS = {"=": "=", "==": "=", "!=": "!=", "in": "in", "notin": "notin", ">": ">", "<": "<"}


def _integer(text: str) -> Optional[int]:
    """The int64 of ``text`` as ParseInt reads it, None when it is none."""
    if not _INTEGER.fullmatch(text):
        return None
    value = int(text)
    return value if -(1 << 63) <= value < (1 << 63) else None


class SelectorInvalid(ValueError):
    """The annotation does not parse; the message names the annotation, the position and what to give."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # = != in notin exists !exists > <
    values: Tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """labels.Requirement.Matches: ``!=`` and ``notin`` match a pod without the label."""
        has = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return has
        if self.op == "!exists":
            return not has
        if self.op in ("=", "in"):
            return has and value in self.values
        if self.op in ("!=", "notin"):
            return not has or value not in self.values
        mine = _integer(str(value)) if has else None
        if mine is None:
            return False
        return mine > int(self.values[0]) if self.op == ">" else mine < int(self.values[0])

    def text(self) -> str:
        if self.op == "exists":
            return self.key
        if self.op == "!exists":
            return "!" + self.key
        if self.op in ("in", "notin"):
            return f"{self.key} {self.op} ({','.join(self.values)})"
        return f"{self.key}{self.op}{self.values[0]}"


@dataclass(frozen=True)
class Selector:
    requirements: Tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def text(self) -> str:
        """The selector as the API server's ``labelSelector`` takes it (``==`` written ``=``)."""
        return ",".join(r.text() for r in self.requirements)


def _bad(text: str, pos: Optional[int], what: str) -> SelectorInvalid:
    near = text[pos:pos + 20] if pos is not None else ""
    where = "" if pos is None else f"at character {pos + 1} ({near!r}): " if near else \
        f"at character {pos + 1} (the end): "
    return SelectorInvalid(f"annotation {ANNOTATION}: {where}{what}; give a label selector such as {EXAMPLE!r} "
                           f"(docs/rollout.md, \"Blocking pods (ours)\")")


def _tokens(text: str) -> List[Tuple[str, int]]:
    """(token, position) as apimachinery's lexer reads them: ``!=`` and ``==`` as one, any other
    run of characters that are neither blank nor ``=!(),<>`` one word; ("", len) ends the list."""
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in _SPECIAL:
            two = text[i:i + 2]
            step = 2 if two in ("!=", "==") else 1
            out.append((text[i:i + step], i))
            i += step
        else:
            start = i
            while i < len(text) and not text[i].isspace() and text[i] not in _SPECIAL:
                i += 1
            out.append((text[start:i], start))
    out.append(("", len(text)))
    return out


def _word(tok: str) -> bool:
    return bool(tok) and tok[0] not in _SPECIAL


def _key(text: str, tok: str, pos: int) -> str:
    prefix, _, name = tok.rpartition("/")
    if "/" in tok and (not prefix or len(prefix) > 253 or not _PREFIX.fullmatch(prefix)):
        raise _bad(text, pos, f"{tok[:80]!r} is not a label key: its prefix must be a DNS subdomain (example.com/)")
    if len(name) > 63 or not _NAME.fullmatch(name):
        raise _bad(text, pos, f"{tok[:80]!r} is not a label key: a name of 63 characters at most, alphanumeric "
                              f"at both ends, '-', '_' or '.' between")
    return tok


def _value(text: str, tok: str, pos: int, op: str) -> str:
    if len(tok) > 63 or not _VALUE.fullmatch(tok):
        raise _bad(text, pos, f"{tok[:80]!r} is not a label value: 63 characters at most, alphanumeric at both "
                              f"ends, '-', '_' or '.' between")
    if op in (">", "<") and _integer(tok) is None:
        raise _bad(text, pos, f"{tok!r} is not an integer: '{op}' compares a label's value with one")
    return tok


def _values(text: str, toks: List[Tuple[str, int]], i: int) -> Tuple[Tuple[str, ...], int]:
    """``(v1,v2)`` from ``toks[i]``: an empty value between commas is "" (apimachinery's too)."""
    if toks[i][0] != "(":
        raise _bad(text, toks[i][1], "expected '(' and the values after 'in' or 'notin'")
    i += 1
    if toks[i][0] == ")":
        raise _bad(text, toks[i][1], "'in' and 'notin' need at least one value")
    out = []
    while True:
        tok, pos = toks[i]
        value = ""
        if _word(tok):
            value, i = _value(text, tok, pos, "in"), i + 1
        elif tok not in (",", ")"):
            raise _bad(text, pos, "expected a value, ',' or ')'")
        out.append(value)
        tok, pos = toks[i]
        if tok == ")":
            return tuple(sorted(set(out))), i + 1
        if tok != ",":
            raise _bad(text, pos, "expected ',' or ')' after a value")
        i += 1


def _requirement(text: str, toks: List[Tuple[str, int]], i: int) -> Tuple[Requirement, int]:
    bang = toks[i][0] == "!"
    i += int(bang)
    tok, pos = toks[i]
    if not _word(tok) or tok in ("in", "notin"):
        raise _bad(text, pos, "expected a label key" + (" after '!'" if bang else ""))
    key = _key(text, tok, pos)
    i += 1
    if toks[i][0] in ("", ","):
        return Requirement(key, "!exists" if bang else "exists"), i
    tok, pos = toks[i]
    if bang:
        raise _bad(text, pos, f"'!{key}' stands alone: expected ',' or the end after it")
    op = _OPERATORS.get(tok)
    if op is None:
        raise _bad(text, pos, "expected an operator: =, ==, !=, in, notin, >, <")
    i += 1
    if op in ("in", "notin"):
        values, i = _values(text, toks, i)
        return Requirement(key, op, values), i
    tok, pos = toks[i]
    if tok in ("", ",") and op not in (">", "<"):
        return Requirement(key, op, ("",)), i  # key= : the empty value
    if not _word(tok):
        raise _bad(text, pos, f"expected a value after '{toks[i - 1][0]}'")
    return Requirement(key, op, (_value(text, tok, pos, op),)), i + 1


def parse(value: Any) -> Selector:
    """The selector of an annotation value; SelectorInvalid saying what is wrong and where."""
    if not isinstance(value, str):
        raise _bad("", None, "the value is not a string")
    if len(value) > MAX_TEXT:
        raise _bad("", None, f"the value is {len(value)} characters long: a selector is a few dozen "
                          f"(at most {MAX_TEXT})")
    if not value.strip():
        raise _bad(value, None, "the value is empty, which would match every pod (to let every node update, remove "
                             "the annotation)")
    toks = _tokens(value)
    requirements, i = [], 0
    while True:
        req, i = _requirement(value, toks, i)
        requirements.append(req)
        tok, pos = toks[i]
        if tok == "":
            return Selector(tuple(requirements))
        if tok != ",":
            raise _bad(value, pos, "expected ',' or the end after a requirement")
        i += 1
        if toks[i][0] == "":
            raise _bad(value, toks[i][1], "expected a requirement after ','")


def selector_of(pool: Mapping[str, Any]) -> Tuple[Optional[Selector], str]:
    """(the pool's selector or None, why its annotation is invalid or "")."""
    ann = pool_annotations(pool)
    if ann.get(ANNOTATION) is None:
        return None, ""
    try:
        return parse(ann[ANNOTATION]), ""
    except SelectorInvalid as exc:
        return None, str(exc)


def pod_counts(pod: Mapping[str, Any]) -> bool:
    """Whether a pod blocks the Node it is bound to, as kured counts it: bound (spec.nodeName) and
    not ended (its phase not Succeeded, Failed or Unknown)."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    return bool(spec.get("nodeName")) and status.get("phase") not in ENDED_PHASES


def blocking_by_node(selector: Selector, pods: Iterable[Mapping[str, Any]]) -> Dict[str, List[str]]:
    """Node name -> the ``namespace/name`` of each pod on it that counts and matches, sorted."""
    out: Dict[str, List[str]] = {}
    for pod in pods:
        meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
        labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
        if pod_counts(pod) and selector.matches(labels):
            node = str(pod["spec"]["nodeName"])
            out.setdefault(node, []).append(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
    return {node: sorted(names) for node, names in out.items()}


def named(pods: Sequence[str]) -> str:
    """``ns/a, ns/b and 3 more``: at most PODS_LISTED names."""
    more = len(pods) - PODS_LISTED
    return ", ".join(pods[:PODS_LISTED]) + (f" and {more} more" if more > 0 else "")


def listed(stored: Sequence[str]) -> str:
    """A node's pods as ``record`` keeps them (their last item ``and N more`` when there were more)."""
    more = " " + stored[-1] if stored and str(stored[-1]).startswith("and ") else ""
    return ", ".join(str(p) for p in stored[:len(stored) - bool(more)]) + more


def node_why(stored: Sequence[str], selector: str) -> str:
    """Why a node waits for its blocking pods (its row in ``get nodes``, ``describe node``)."""
    return (f"blocking pod(s) {listed(stored)} run on it (the pool's {ANNOTATION} {selector!r} matches them): it is not "
            f"targeted while they run, and the next node goes in its place")


def record(selector: str, skipped: Sequence[str], blocked: Mapping[str, Sequence[str]]) -> Dict[str, Any]:
    """The pool's ``status.rollout.blockingPods``: the selector, and each node skipped for its
    blocking pods with their names (bounded: NODES_LISTED nodes, PODS_LISTED pods, each count whole)."""
    nodes = sorted(skipped)
    out: Dict[str, Any] = {"selector": selector, "waiting": len(nodes)}
    if nodes:
        out["nodes"] = {n: list(blocked[n][:PODS_LISTED]) + ([f"and {len(blocked[n]) - PODS_LISTED} more"]
                                                             if len(blocked[n]) > PODS_LISTED else [])
                        for n in nodes[:NODES_LISTED]}
    return out
