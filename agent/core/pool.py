"""Pool identity and the labels a node registers with (pure).

The race upstream (REFERENCE §3): kubelet registers a node as a worker, the node controller
claims it for the worker pool before the custom pool's label lands, and the node reboots into
the wrong config and back. We settle the pool before kubelet starts, from what was served:
the pointer's ``/config/<pool>``, the served ``firstPivotConfig``/pool annotation and the pool's
``nodeSelector`` must all agree, and kubelet registers with the pool's labels from its first
moment (``CUSTOM_KUBELET_LABELS`` in ``/etc/kubernetes/kubelet-env``).
"""

import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from agent.core.served import ANN, Served
from agent.errors import ConfigError, Problem

KUBELET_ENV_PATH = "/etc/kubernetes/kubelet-env"
LABELS_VAR = "CUSTOM_KUBELET_LABELS"
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class PoolIdentity:
    pool: str
    config: str  # the rendered config the node first pivots to
    labels: Dict[str, str] = field(default_factory=dict)


def pool_from_url(url: str) -> Optional[str]:
    """``https://host:22623/config/infra`` -> ``infra``."""
    parts = [p for p in urllib.parse.urlsplit(url).path.split("/") if p]
    if len(parts) == 2 and parts[0] == "config":
        return parts[1]
    return None


def _pool_of_rendered(name: str) -> Optional[str]:
    # rendered-<pool>-<hash>: the pool name may itself contain dashes.
    if name.startswith("rendered-") and name.count("-") >= 2:
        return name[len("rendered-"):].rsplit("-", 1)[0]
    return None


def resolve_pool(pointer_pool: Optional[str], served: Served) -> PoolIdentity:
    """Settle the node's pool from the pointer and the served annotations; disagreement is an error."""
    claims: List[Tuple[str, str]] = []
    if pointer_pool:
        claims.append(("pointer config URL /config/<pool>", pointer_pool))
    if served.pool:
        claims.append((f"served annotation {ANN}pool", served.pool))
    first_pivot = served.annotations.get(ANN + "firstPivotConfig", "")
    pivot_pool = _pool_of_rendered(first_pivot) if first_pivot else None
    if pivot_pool:
        claims.append((f"served firstPivotConfig {first_pivot}", pivot_pool))
    if not claims:
        raise ConfigError("cannot tell which pool this node belongs to: the pointer URL has no /config/<pool> "
                          "and the served config has no node annotations; check the pointer config",
                          [Problem("$.ignition.config", "no pool in pointer or served annotations", "pool-unknown")])
    pool = claims[0][1]
    if any(name != pool for _, name in claims):
        said = "; ".join(f"{what} says {name!r}" for what, name in claims)
        raise ConfigError(f"pool disagreement: {said}. The node would join the wrong pool; fix the pointer "
                          f"config to name the pool the server serves, or check the server's pool objects",
                          [Problem("$.ignition.config", said, "pool-mismatch")])
    labels = node_labels((served.pool_info or {}).get("nodeSelector") or {})
    problems = []
    for key, value in labels.items():
        if not _LABEL_KEY.match(str(key)) or not _LABEL_VALUE.match(str(value)) or len(str(value)) > 63:
            problems.append(Problem(f"$.nodeSelector.matchLabels.{key}", "not a valid Kubernetes label",
                                    "label", value=value))
    if problems:
        raise ConfigError(f"the served pool {pool} has invalid node labels", problems)
    return PoolIdentity(pool=pool, config=first_pivot or served.config_name, labels={str(k): str(v) for k, v in labels.items()})


def node_labels(selector: Dict) -> Dict[str, str]:
    """The labels a node needs to be selected by a pool's ``nodeSelector``, as the MCO derives
    them (node_controller.go:1815-1849): ``matchLabels`` as they are, a ``matchExpressions``
    ``In`` with exactly one value as key=value, ``Exists`` as key="" (an empty value). Other
    expressions (several values, NotIn, DoesNotExist) say no single label; they add none."""
    labels = {str(k): str(v) for k, v in (selector.get("matchLabels") or {}).items()}
    for expr in selector.get("matchExpressions") or []:
        if not isinstance(expr, dict) or not isinstance(expr.get("key"), str):
            continue
        values = expr.get("values") or []
        if expr.get("operator") == "In" and len(values) == 1:
            labels.setdefault(expr["key"], str(values[0]))
        elif expr.get("operator") == "Exists":
            labels.setdefault(expr["key"], "")
    return labels


def _parse_labels(value: str) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        key, _, val = item.partition("=")
        out[key.strip()] = val.strip()
    return out


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def merge_kubelet_env(existing: str, labels: Dict[str, str]) -> str:
    """``/etc/kubernetes/kubelet-env`` with the pool's labels added to ``CUSTOM_KUBELET_LABELS``.

    Other lines are kept as they are; labels already there are kept unless the pool sets the
    same key (the pool wins: it is what the node controller will enforce anyway).
    """
    lines = existing.splitlines()
    merged: Dict[str, str] = {}
    index = None
    for i, line in enumerate(lines):
        name, sep, value = line.partition("=")
        if sep and name.strip() == LABELS_VAR:
            merged.update(_parse_labels(_unquote(value.strip())))
            index = i if index is None else index
    merged.update(labels)
    new_line = f"{LABELS_VAR}=" + ",".join(f"{k}={v}" for k, v in sorted(merged.items()))
    kept = [line for line in lines if line.partition("=")[0].strip() != LABELS_VAR]
    if index is None:
        kept.append(new_line)
    else:
        kept.insert(min(index, len(kept)), new_line)
    return "\n".join(kept) + "\n"
