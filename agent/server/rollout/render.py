"""Rendering a pool's config from its MachineConfigs, as the MCO does (pure).

A pool's ``spec.machineConfigSelector`` picks MachineConfigs by label; they are merged in name
order (later wins), except that a custom pool (neither ``master`` nor ``worker``) merges the
worker MachineConfigs first and its own after them, so the custom pool wins (MCO
pkg/controller/common/helpers.go:76-95). Every file of the result gets ``overwrite: true``
unless it says otherwise (helpers.go:140-148). The result is named ``rendered-<pool>-<hash>``
where the hash covers the canonical JSON of the merged spec, so the same inputs always give the
same name.
"""

import copy
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Tuple

NEWEST_SPEC = "3.5.0"
ROLE_LABEL = "machineconfiguration.openshift.io/role"
BUILTIN_POOLS = ("master", "worker")

# Lists Ignition merges by key (child entry replaces/merges the parent entry with the same key).
_KEYED_LISTS = {
    ("storage", "files"): "path",
    ("storage", "directories"): "path",
    ("storage", "links"): "path",
    ("storage", "disks"): "device",
    ("storage", "filesystems"): "device",
    ("storage", "raid"): "name",
    ("storage", "luks"): "name",
    ("systemd", "units"): "name",
    ("systemd", "units", "dropins"): "name",
    ("passwd", "users"): "name",
    ("passwd", "groups"): "name",
    ("ignition", "config", "merge"): "source",
    ("ignition", "security", "tls", "certificateAuthorities"): "source",
}


@dataclass(frozen=True)
class Rendered:
    pool: str
    name: str
    spec: Dict[str, Any]  # merged MachineConfig spec (config, osImageURL, kernelArguments, ...)
    sources: tuple  # names of the MachineConfigs merged, in order

    def machine_config(self) -> Dict[str, Any]:
        return {
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": "MachineConfig",
            "metadata": {"name": self.name, "annotations": {
                "machineconfiguration.openshift.io/generated-by-controller-version": "node-config-server",
                "machineconfiguration.openshift.io/source": ",".join(self.sources)}},
            "spec": copy.deepcopy(self.spec),
        }


def _label_matches(expr: Dict[str, Any], labels: Dict[str, str]) -> bool:
    key = expr.get("key")
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return False


def selector_matches(selector: Optional[Dict[str, Any]], labels: Dict[str, str]) -> bool:
    """Kubernetes LabelSelector semantics; an empty selector matches nothing here.

    (Kubernetes treats ``{}`` as "everything"; a pool selecting every MachineConfig of every
    role is never what anyone means, and the MCO refuses it too.)
    """
    if not selector:
        return False
    match_labels = selector.get("matchLabels") or {}
    exprs = selector.get("matchExpressions") or []
    if not match_labels and not exprs:
        return False
    for key, value in match_labels.items():
        if labels.get(key) != str(value):
            return False
    return all(_label_matches(e, labels) for e in exprs)


def _copy(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, scalars); several times faster than
    copy.deepcopy, which keeps a memo for cycles parsed YAML/JSON cannot have."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


class _Merger:
    """Ignition merge (child wins; keyed lists merged by key) into one accumulated config.

    Linear in the total size of the configs merged: the accumulated config owns its data (a
    child's value is copied once, when first taken) and is merged into in place, and every
    keyed list keeps its key -> position index (every plain list its set of values) from one
    merge to the next. Merging a copy of everything so far per MachineConfig made 1,000
    MachineConfigs of 10 files cost 46 s against 0.36 s for the same files in 10.
    """

    def __init__(self, root: Optional[Dict[str, Any]] = None):
        self.root: Dict[str, Any] = root if root is not None else {}
        # id(list) -> (the list, its index); holding the list keeps its id from being reused.
        self._index: Dict[int, Tuple[list, Any]] = {}

    def merge(self, child: Dict[str, Any]) -> None:
        self._merge_dict((), self.root, child or {})

    def _merge_dict(self, path: tuple, acc: Dict[str, Any], child: Dict[str, Any]) -> None:
        for key, value in child.items():
            acc[key] = self._merge(path + (key,), acc[key], value) if key in acc else _copy(value)

    def _merge(self, path: tuple, acc: Any, child: Any) -> Any:
        if isinstance(acc, dict) and isinstance(child, dict):
            self._merge_dict(path, acc, child)
            return acc
        if isinstance(acc, list) and isinstance(child, list):
            # ``path`` holds field names only (list items keep their list's path).
            key = _KEYED_LISTS.get(path)
            if key:
                self._merge_keyed(path, key, acc, child)
            else:
                self._merge_plain(acc, child)
            return acc
        return _copy(child)

    def _indexed(self, acc: list, build: Any) -> Any:
        entry = self._index.get(id(acc))
        if entry is None or entry[0] is not acc:
            entry = self._index[id(acc)] = (acc, build())
        return entry[1]

    def _merge_keyed(self, path: tuple, key: str, acc: list, child: list) -> None:
        index = self._indexed(acc, lambda: {item.get(key): i for i, item in enumerate(acc) if isinstance(item, dict)})
        for item in child:
            k = item.get(key) if isinstance(item, dict) else None
            if k is not None and k in index:
                acc[index[k]] = self._merge(path, acc[index[k]], item)
            else:
                index[k] = len(acc)
                acc.append(_copy(item))

    def _merge_plain(self, acc: list, child: list) -> None:
        """Lists of plain values (ssh keys, kernel argument lists): union, order kept."""
        seen = self._indexed(acc, lambda: {v for v in acc if _hashable(v)})
        for item in child:
            if not _hashable(item):  # a dict in a list no key merges: compare by value
                if item not in acc:
                    acc.append(_copy(item))
            elif item not in seen:  # the same equality as ``item not in acc``, in O(1)
                seen.add(item)
                acc.append(_copy(item))


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def merge_ignition(parent: Dict[str, Any], child: Dict[str, Any]) -> Dict[str, Any]:
    """Ignition merge (child wins; keyed lists merged by key). Version set to the newest spec."""
    merger = _Merger(_copy(parent or {}))
    merger.merge(child or {})
    out = merger.root
    out.setdefault("ignition", {})["version"] = NEWEST_SPEC
    return out


def default_overwrite(ignition: Dict[str, Any]) -> None:
    """``overwrite: true`` on every file that does not set it (helpers.go:140-148). Only
    ``ignition`` itself is changed: the storage section and its entries are new objects, so
    nothing shared with the source MachineConfigs is ever modified.

    Ignition 3 defaults overwrite to false, spec 2 and the MCD always overwrite: without this a
    file the boot image already has (``/etc/systemd/journald.conf``) stops first boot. Unlike
    upstream we leave a file without ``contents.source`` alone: Ignition refuses
    ``overwrite: true`` there ("overwrite must be false if source is unspecified").
    """
    storage = ignition.get("storage")
    if not isinstance(storage, dict) or not isinstance(storage.get("files"), list):
        return
    ignition["storage"] = dict(storage, files=[
        dict(entry, overwrite=True) if isinstance(entry, dict) and entry.get("overwrite") is None
        and (entry.get("contents") or {}).get("source") is not None else entry
        for entry in storage["files"]])


def merge_machine_configs(configs: Iterable[Dict[str, Any]]) -> Dict[str, Any]:
    """Merge MachineConfig objects (already in order) into one MachineConfig spec."""
    merger = _Merger({"ignition": {"version": NEWEST_SPEC}})
    os_image = ""
    kargs: List[str] = []
    extensions: List[str] = []
    fips = False
    kernel_type = "default"
    for mc in configs:
        spec = mc.get("spec") or {}
        merger.merge(spec.get("config") or {})
        if spec.get("osImageURL"):
            os_image = str(spec["osImageURL"])
        kargs.extend(str(a) for a in spec.get("kernelArguments") or [])
        for ext in spec.get("extensions") or []:
            if ext not in extensions:
                extensions.append(str(ext))
        fips = fips or bool(spec.get("fips"))
        if spec.get("kernelType") and spec["kernelType"] != "default":
            kernel_type = str(spec["kernelType"])
    ignition = merger.root
    ignition.setdefault("ignition", {})["version"] = NEWEST_SPEC
    default_overwrite(ignition)
    return {
        "config": ignition,
        "osImageURL": os_image,
        "kernelArguments": kargs,
        "extensions": extensions,
        "fips": fips,
        "kernelType": kernel_type,
    }


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def content_hash(spec: Dict[str, Any]) -> str:
    # sha256 (not the MCO's md5: md5 is unavailable under FIPS), cut to md5's 32 hex digits.
    return hashlib.sha256(canonical_json(spec)).hexdigest()[:32]


def select_machine_configs(pool: Dict[str, Any], machine_configs: Dict[str, Dict[str, Any]]) -> List[Dict[str, Any]]:
    selector = (pool.get("spec") or {}).get("machineConfigSelector")
    chosen = []
    for name in sorted(machine_configs):
        labels = ((machine_configs[name].get("metadata") or {}).get("labels") or {})
        if selector_matches(selector, {str(k): str(v) for k, v in labels.items()}):
            chosen.append(machine_configs[name])
    if (pool.get("metadata") or {}).get("name") not in BUILTIN_POOLS:
        # A custom pool inherits the worker's MachineConfigs and overrides them: worker ones
        # first (each group in name order), so ``50-infra`` beats ``99-worker-chrony``.
        chosen.sort(key=lambda mc: _role(mc) != "worker")
    return chosen


def _role(mc: Dict[str, Any]) -> str:
    return str(((mc.get("metadata") or {}).get("labels") or {}).get(ROLE_LABEL) or "")


def _code_version() -> str:
    try:
        with open(__file__, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]
    except OSError:  # not a plain file (zip import): the package version has to do
        from agent import __version__

        return __version__


RENDER_CODE = _code_version()


def inputs_key(pool: Dict[str, Any], machine_configs: Dict[str, Dict[str, Any]]) -> str:
    """A hash of everything ``render_pool`` reads (the pool, its MachineConfigs in merge order,
    this module's code), so workers can share one rendering: equal keys give equal results."""
    chosen = select_machine_configs(pool, machine_configs)
    h = hashlib.sha256(RENDER_CODE.encode())
    h.update(json.dumps({"pool": pool, "machineConfigs": chosen}, sort_keys=True, separators=(",", ":"),
                        default=str).encode())  # default=str: YAML timestamps in metadata
    return h.hexdigest()


def render_pool(pool: Dict[str, Any], machine_configs: Dict[str, Dict[str, Any]]) -> Rendered:
    name = pool["metadata"]["name"]
    chosen = select_machine_configs(pool, machine_configs)
    spec = merge_machine_configs(chosen)
    return Rendered(pool=name, name=f"rendered-{name}-{content_hash(spec)}", spec=spec,
                    sources=tuple(mc["metadata"]["name"] for mc in chosen))
