"""What an account may do, as ``kubectl auth can-i --list`` prints it, set against what RBAC
documents grant it: both sides as single grants (resource, non-resource URL, resource name, verb),
so that how kubectl merges rules into lines never matters.

A resource is written as kubectl writes it: ``<resource>.<group>/<subresource>`` (the core group
has no suffix: ``pods/eviction``).
"""

import json
import re
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

import yaml

Grant = Tuple[str, str, str, str]  # (resource, non-resource URL, resource name, verb)

_LINE = re.compile(r"^(\S*)\s*(\[[^\]]*\])\s+(\[[^\]]*\])\s+(\[[^\]]*\])\s*$")
# What any authenticated service account is given by the cluster itself (bootstrap policy bindings).
EVERY_ACCOUNT = ("system:authenticated", "system:serviceaccounts")
# Where the server's account is looked at: its two namespaces (deploy/rbac.yaml's Roles), the one
# it reads the client CA in, and one it has nothing to do with.
NAMESPACES = ("node-config-server", "node-config-server-credentials", "kube-system", "default")


def _items(bracketed: str) -> List[str]:
    inner = bracketed[1:-1].split()
    return inner or [""]


def parse_can_i_list(text: str) -> Set[Grant]:
    """The grants in ``kubectl auth can-i --list`` output; a line it cannot read is an error."""
    lines = text.strip().splitlines()
    if not lines or not lines[0].startswith("Resources"):
        raise ValueError(f"not kubectl auth can-i --list output: {text[:200]!r}")
    grants: Set[Grant] = set()
    for line in lines[1:]:
        m = _LINE.match(line)
        if m is None:
            raise ValueError(f"kubectl auth can-i --list: unreadable line {line!r}")
        resource, urls, names, verbs = m.groups()
        grants |= {(resource, u, n, v) for u in _items(urls) for n in _items(names) for v in _items(verbs)}
    return grants


def _shown(resource: str, group: str) -> str:
    base, _, sub = resource.partition("/")
    name = f"{base}.{group}" if group else base
    return f"{name}/{sub}" if sub else name


def rule_grants(rules: Iterable[Dict[str, Any]]) -> Set[Grant]:
    out: Set[Grant] = set()
    for rule in rules or ():
        verbs = rule.get("verbs") or []
        for url in rule.get("nonResourceURLs") or []:
            out |= {("", url, "", v) for v in verbs}
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                out |= {(_shown(resource, group), "", n, v) for n in (rule.get("resourceNames") or [""]) for v in verbs}
    return out


def _is_subject(subject: Dict[str, Any], account: Tuple[str, str], groups: Iterable[str]) -> bool:
    if subject.get("kind") == "ServiceAccount":
        return (subject.get("namespace"), subject.get("name")) == account
    return subject.get("kind") == "Group" and subject.get("name") in set(groups)


def granted(docs: List[Dict[str, Any]], account: Tuple[str, str], namespace: str,
            groups: Iterable[str] = (), roles: Optional[Dict[Tuple[str, str], List[Dict[str, Any]]]] = None
            ) -> Set[Grant]:
    """What the bindings among ``docs`` give ``account`` (namespace, name) or ``groups`` in
    ``namespace``: ClusterRoleBindings everywhere, RoleBindings in their own namespace. A role is
    looked up in ``docs``, then in ``roles`` ((kind, namespace/name) -> rules: the cluster's own)."""
    known = dict(roles or {})
    for doc in docs:
        if doc.get("kind") in ("ClusterRole", "Role"):
            meta = doc["metadata"]
            key = meta["name"] if doc["kind"] == "ClusterRole" else f"{meta['namespace']}/{meta['name']}"
            known[(doc["kind"], key)] = doc.get("rules") or []
    out: Set[Grant] = set()
    for doc in docs:
        kind, meta = doc.get("kind"), doc.get("metadata") or {}
        if kind not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if kind == "RoleBinding" and meta.get("namespace") != namespace:
            continue
        if not any(_is_subject(s, account, groups) for s in doc.get("subjects") or []):
            continue
        ref = doc["roleRef"]
        key = ref["name"] if ref["kind"] == "ClusterRole" else f"{meta['namespace']}/{ref['name']}"
        if (ref["kind"], key) not in known:
            raise KeyError(f"{kind} {meta.get('name')}: role {ref['kind']} {key} is nowhere")
        out |= rule_grants(known[(ref["kind"], key)])
    return out


def against_rbac_yaml(kubectl: Callable[..., Any], rbac_yaml: str, namespaces: Iterable[str],
                      account: Tuple[str, str] = ("node-config-server", "node-config-server")
                      ) -> Dict[str, Dict[str, List[Grant]]]:
    """Per namespace, what ``kubectl auth can-i --list`` as ``account`` shows beyond
    ``rbac_yaml``'s grants and what the cluster gives every service account ("extra"), and what
    it lacks of them ("missing"): both empty when the account may do exactly that. ``kubectl``
    runs kubectl as the cluster's admin and returns its CompletedProcess."""
    with open(rbac_yaml) as f:
        ours = [d for d in yaml.safe_load_all(f) if d]
    cluster = json.loads(kubectl("get", "clusterroles,clusterrolebindings", "-o", "json").stdout)["items"]
    roles = {("ClusterRole", d["metadata"]["name"]): d.get("rules") or [] for d in cluster if d["kind"] == "ClusterRole"}
    for d in json.loads(kubectl("get", "roles", "-n", "kube-system", "-o", "json").stdout)["items"]:
        roles[("Role", f"kube-system/{d['metadata']['name']}")] = d.get("rules") or []
    ours_named = {d["metadata"]["name"] for d in ours if d["kind"] == "ClusterRoleBinding"}
    everyones = [d for d in cluster if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"] not in ours_named]
    groups = EVERY_ACCOUNT + (f"system:serviceaccounts:{account[0]}",)
    out = {}
    for namespace in namespaces:
        shown = parse_can_i_list(kubectl("auth", "can-i", "--list", f"--as=system:serviceaccount:{account[0]}:"
                                         f"{account[1]}", "-n", namespace).stdout)
        expected = granted(ours, account, namespace, roles=roles) | \
            granted(everyones, ("", ""), namespace, groups=groups, roles=roles)
        out[namespace] = {"extra": sorted(shown - expected), "missing": sorted(expected - shown), "shown": sorted(shown)}
    return out
