"""Which pools cannot be rendered, and why (pure), as the MCO's render controller fails one pool's
sync: openshift/machine-config-operator pkg/controller/render/render_controller.go
``syncMachineConfigPool`` -> ``syncFailingStatus`` sets RenderDegraded=True on that pool, reason
"", message "Failed to render configuration for pool <name>: <error>", and leaves every other
pool alone. The errors it fails on, and ours:

- the pool selects no MachineConfig: "no MachineConfigs found matching selector <selector>"
  (``mcLister.List(selector)`` empty; the selector printed as apimachinery's
  ``labels.Selector.String()``: ``selector_string``);
- a MachineConfig it selects is invalid (``generateRenderedMachineConfig`` ->
  ``ValidateMachineConfig``): ours names the object and the problem as our checks found it;
- ours: the pool itself is invalid (a ``maxUnavailable`` of "3" or -1, a rollout policy
  annotation). Upstream the render controller does not read those; its node controller fails
  the pool's sync at ``maxUnavailable`` and only writes the status (``syncStatusOnly``), the error
  in its log. Here the pool says why on its status, and nobody in it is targeted either;
- ours: a MachineOSConfig naming the pool, or a MachineOSBuild of such a MachineOSConfig, is
  invalid; and anything no pool can be told from (the MachineConfiguration ``cluster``, a file
  that is not an object, an object with no usable name or labels) fails every pool: each of
  them could be the one it was meant for.

``rejected``: (kind folder, the object as written, its problems) of each object the checks
refused (agent/server/store/stateformat.py ``admit``); ``unattributed``: problems of no such
object. The failure of a pool holds its target on its last good rendering (the service's
rollout step), as upstream's ``spec.configuration`` stays where it was.
"""

from typing import Any, Dict, Iterable, List, Mapping, Sequence, Tuple

from agent.server.rollout.render import selector_matches

Rejected = Tuple[str, Any, Sequence[Any]]


def selector_string(selector: Any) -> str:
    """apimachinery ``metav1.LabelSelectorAsSelector(s).String()``: requirements sorted by key,
    joined by ","; ``k=v`` (matchLabels), ``k in (a,b)``, ``k notin (a,b)`` (values sorted),
    ``k`` (Exists), ``!k`` (DoesNotExist). A nil or empty selector prints "" (labels.Nothing())."""
    if not isinstance(selector, dict):
        return ""
    parts: List[Tuple[str, str]] = [(str(k), f"{k}={v}") for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        if not isinstance(expr, dict):
            continue
        key, op = str(expr.get("key")), expr.get("operator")
        values = ",".join(sorted(str(v) for v in expr.get("values") or []))
        text = {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": key,
                "DoesNotExist": f"!{key}"}.get(str(op), f"{key} {op} ({values})")
        parts.append((key, text))
    return ",".join(text for _, text in sorted(parts, key=lambda p: p[0]))


def _labels(doc: Any) -> Any:
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    labels = meta.get("labels", {}) if isinstance(meta, dict) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else None


def _name(doc: Any) -> str:
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def _pool_of_os_config(doc: Any) -> str:
    spec = doc.get("spec") if isinstance(doc, dict) else None
    ref = spec.get("machineConfigPool") if isinstance(spec, dict) else None
    name = ref.get("name") if isinstance(ref, dict) else None
    return name if isinstance(name, str) else ""


def affected_pools(sub: str, doc: Any, pools: Mapping[str, Dict[str, Any]],
                   os_configs: Mapping[str, Dict[str, Any]]) -> List[str]:
    """The pools an object refused in folder ``sub`` keeps from rendering (every pool when it
    cannot be told)."""
    everyone = sorted(pools)
    if sub == "machineconfigpools":
        name = _name(doc)
        return [name] if name in pools else everyone
    if sub == "machineconfigs":
        labels = _labels(doc)
        if labels is None or not _name(doc):
            return everyone
        return [p for p in everyone  # getPoolsForMachineConfig: the pools whose selector picks it
                if selector_matches((pools[p].get("spec") or {}).get("machineConfigSelector"), labels)]
    if sub == "machineosconfigs":
        pool = _pool_of_os_config(doc)
        return [pool] if pool in pools else everyone
    if sub == "machineosbuilds":
        spec = doc.get("spec") if isinstance(doc, dict) else None
        ref = spec.get("machineOSConfig") if isinstance(spec, dict) else None
        mosc = os_configs.get(ref.get("name")) if isinstance(ref, dict) and isinstance(ref.get("name"), str) else None
        pool = _pool_of_os_config(mosc) if mosc is not None else ""
        return [pool] if pool in pools else everyone
    return everyone


def render_failures(pools: Mapping[str, Dict[str, Any]], machine_configs: Mapping[str, Dict[str, Any]],
                    os_configs: Mapping[str, Dict[str, Any]], rejected: Iterable[Rejected],
                    unattributed: Sequence[Any] = ()) -> Dict[str, List[str]]:
    """pool -> why it cannot be rendered (the problems, each as text), for the pools that cannot;
    ``pools``: every pool the Nodes may be in, the invalid ones too."""
    rejected = list(rejected)
    out: Dict[str, List[str]] = {name: [str(p) for p in unattributed] for name in pools}
    for sub, doc, problems in rejected:
        for pool in affected_pools(sub, doc, pools, os_configs):
            out[pool].extend(str(p) for p in problems)
    refused_configs = [doc for sub, doc, _ in rejected if sub == "machineconfigs"]
    for name, pool in pools.items():
        selector = (pool.get("spec") or {}).get("machineConfigSelector")
        picked = any(selector_matches(selector, _labels(mc) or {})
                     for mc in list(machine_configs.values()) + refused_configs)
        if not picked:
            out[name].append(f"no MachineConfigs found matching selector {selector_string(selector)}")
    return {name: why for name, why in out.items() if why}


def failure_message(pool: str, why: Sequence[str]) -> str:
    """RenderDegraded's message: syncFailingStatus' words, the first problem, and how many more."""
    if not why:
        return ""
    more = f" (and {len(why) - 1} more problem(s): node-config-server status)" if len(why) > 1 else ""
    return f"Failed to render configuration for pool {pool}: {why[0]}{more}"
