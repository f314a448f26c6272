"""Which pods a drain evicts, skips or refuses: kubectl's drain filters, as pure functions.

The facts come from k8s.io/kubectl/pkg/drain/filters.go (kubernetes/kubernetes
staging/src/k8s.io/kubectl/pkg/drain/filters.go at 121817a5; line numbers below are that file's),
which the MCO's drain controller also runs. The filters run in kubectl's order (makeFilters,
filters.go:157-166) and the first one that says "don't delete" ends the pod's run
(drain.go FilterPods); the pod's outcome is the status of the last filter run:

1. skipDeletedFilter (filters.go:251-262): a pod deleting for longer than
   ``skip_wait_for_delete_timeout`` seconds (0 = never) is skipped;
2. daemonSetFilter (filters.go:178-208): a pod whose controller is a DaemonSet is never evicted,
   unless finished (Succeeded/Failed); its DaemonSet gone: deleted with Force (warning), else an
   error; with IgnoreAllDaemonSets a warning and skipped, without an error;
3. mirrorPodFilter (filters.go:210-215): annotation ``kubernetes.io/config.mirror``: skipped
   silently (the API cannot delete a static pod);
4. localStorageFilter (filters.go:217-233): an emptyDir volume, not finished: an error without
   DeleteEmptyDirData; with it a warning (dropped by the next filter, as in kubectl);
5. unreplicatedFilter (filters.go:235-249): finished pods are deleted; a pod with no controller
   is deleted with Force (warning), an error without.

A single error (``refuse``) means the drain does not proceed at all: kubectl fails listing every
refused pod before it evicts anything (PodDeleteList.errors, filters.go:78-98). This module does
no I/O: whether a DaemonSet exists is asked through the ``daemonset_exists`` callable.
"""

import datetime
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

EVICT, SKIP, REFUSE = "evict", "skip", "refuse"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

# kubectl's messages (filters.go:31-38), word for word: users compare them with kubectl's output.
DAEMONSET_FATAL = "DaemonSet-managed Pods (use --ignore-daemonsets to ignore)"
DAEMONSET_WARNING = "ignoring DaemonSet-managed Pods"
LOCAL_STORAGE_FATAL = "Pods with local storage (use --delete-emptydir-data to override)"
LOCAL_STORAGE_WARNING = "deleting Pods with local storage"
UNMANAGED_FATAL = "cannot delete Pods that declare no controller (use --force to override)"
UNMANAGED_WARNING = "deleting Pods that declare no controller"


@dataclass(frozen=True)
class DrainSettings:
    """kubectl drain's flags; the defaults are the MCO's drain controller's (Force,
    IgnoreAllDaemonSets, DeleteEmptyDirData; no skip timeout)."""

    force: bool = True
    ignore_all_daemonsets: bool = True
    delete_emptydir_data: bool = True
    skip_wait_for_delete_timeout: int = 0  # seconds; 0 disables the filter, as kubectl's default


@dataclass(frozen=True)
class PodPlan:
    namespace: str
    name: str
    uid: str
    action: str  # EVICT, SKIP or REFUSE
    message: str = ""  # kubectl's warning (EVICT/SKIP) or error (REFUSE); "" when kubectl says nothing

    @property
    def key(self) -> Tuple[str, str]:
        return (self.namespace, self.name)


@dataclass(frozen=True)
class DrainPlan:
    pods: List[PodPlan]

    def with_action(self, action: str) -> List[PodPlan]:
        return [p for p in self.pods if p.action == action]

    @property
    def refused(self) -> bool:
        return any(p.action == REFUSE for p in self.pods)

    def errors(self) -> List[str]:
        """kubectl's error lines: one per message, naming its pods (filters.go:78-98)."""
        return _grouped(self.with_action(REFUSE), refuse=True)

    def warnings(self) -> str:
        """kubectl's "WARNING: ..." text (PodDeleteList.Warnings, filters.go:62-76)."""
        return "; ".join(_grouped([p for p in self.pods if p.message and p.action != REFUSE]))


def _grouped(pods: List[PodPlan], refuse: bool = False) -> List[str]:
    by_message: Dict[str, List[str]] = {}
    for p in pods:
        by_message.setdefault(p.message or "unexpected error", []).append(f"{p.namespace}/{p.name}")
    out = []
    for msg, names in by_message.items():
        prefix = "" if not refuse or msg.lower().startswith("cannot delete") else "cannot delete "
        out.append(f"{prefix}{msg}: {', '.join(names)}")
    return out


# One filter's answer: (delete?, action when not deleted, message).
_Status = Tuple[bool, str, str]
_OKAY: _Status = (True, EVICT, "")


def controller_of(pod: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The ownerReference with ``controller: true`` (metav1.GetControllerOf), or None."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


def _finished(pod: Dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _parse_time(value: Any) -> Optional[datetime.datetime]:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return None


def _skip_deleted(pod: Dict[str, Any], s: DrainSettings, now: datetime.datetime) -> _Status:
    # filters.go:251-255: timeout > 0, deletionTimestamp set, and int(seconds since) > timeout.
    since = _parse_time((pod.get("metadata") or {}).get("deletionTimestamp"))
    if s.skip_wait_for_delete_timeout > 0 and since is not None and \
            int((now - since).total_seconds()) > s.skip_wait_for_delete_timeout:
        return (False, SKIP, "")
    return _OKAY


def _daemonset(pod: Dict[str, Any], s: DrainSettings, ds_exists: Callable[[str, str], bool]) -> _Status:
    ref = controller_of(pod)
    if ref is None or ref.get("kind") != "DaemonSet":  # filters.go:185-188
        return _OKAY
    if _finished(pod):  # filters.go:189-192
        return _OKAY
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    name = str(ref.get("name", ""))
    if not ds_exists(namespace, name):  # filters.go:194-201: the Get's NotFound error text
        gone = f'daemonsets.apps "{name}" not found'
        return (True, EVICT, gone) if s.force else (False, REFUSE, gone)
    if not s.ignore_all_daemonsets:  # filters.go:203-205
        return (False, REFUSE, DAEMONSET_FATAL)
    return (False, SKIP, DAEMONSET_WARNING)  # filters.go:207


def _mirror(pod: Dict[str, Any]) -> _Status:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return (False, SKIP, "") if MIRROR_ANNOTATION in annotations else _OKAY  # filters.go:210-215


def _local_storage(pod: Dict[str, Any], s: DrainSettings) -> _Status:
    volumes = (pod.get("spec") or {}).get("volumes") or []
    if not any(isinstance(v, dict) and v.get("emptyDir") is not None for v in volumes):  # filters.go:168-176
        return _OKAY
    if _finished(pod):
        return _OKAY
    if not s.delete_emptydir_data:
        return (False, REFUSE, LOCAL_STORAGE_FATAL)
    return (True, EVICT, LOCAL_STORAGE_WARNING)


def _unreplicated(pod: Dict[str, Any], s: DrainSettings) -> _Status:
    if _finished(pod) or controller_of(pod) is not None:  # filters.go:236-244
        return _OKAY
    return (True, EVICT, UNMANAGED_WARNING) if s.force else (False, REFUSE, UNMANAGED_FATAL)


def classify(pod: Dict[str, Any], settings: DrainSettings, daemonset_exists: Callable[[str, str], bool],
             now: Optional[datetime.datetime] = None) -> PodPlan:
    """One pod's outcome: the filters in kubectl's order, stopping at the first "don't delete"."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    filters: List[Callable[[], _Status]] = [
        lambda: _skip_deleted(pod, settings, now),
        lambda: _daemonset(pod, settings, daemonset_exists),
        lambda: _mirror(pod),
        lambda: _local_storage(pod, settings),
        lambda: _unreplicated(pod, settings),
    ]
    status = _OKAY
    for run in filters:
        status = run()
        if not status[0]:
            break
    meta = pod.get("metadata") or {}
    return PodPlan(namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
                   uid=str(meta.get("uid", "")), action=status[1], message=status[2])


def plan_drain(pods: List[Dict[str, Any]], settings: DrainSettings,
               daemonset_exists: Callable[[str, str], bool],
               now: Optional[datetime.datetime] = None) -> DrainPlan:
    """Every pod of the node classified (in the order given)."""
    return DrainPlan([classify(p, settings, daemonset_exists, now) for p in pods])


def selector_matches(selector: Optional[Dict[str, Any]], labels: Dict[str, str],
                     empty_matches_all: bool = True) -> bool:
    """A LabelSelector (matchLabels, matchExpressions) against ``labels``, as a PDB's: a missing
    one (None) matches nothing; an empty one every pod on policy/v1, none on policy/v1beta1
    (``empty_matches_all=False``)."""
    if selector is None or not selector and not empty_matches_all:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values or op == "NotIn" and key in labels and labels[key] in values \
                or op == "Exists" and key not in labels or op == "DoesNotExist" and key in labels:
            return False
    return True
