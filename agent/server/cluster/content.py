"""The Ignition document a node is served (pure). Which spec version: ``agent.server.cluster.accept``.

To the rendered config's Ignition the server adds (upstream pkg/server/server.go:98-197 and
cluster_server.go GetConfig; read back by ``agent.core.served``), in this order:

- ``/etc/kubernetes/kubelet-ca.crt`` (state ``bootstrap/kubelet-ca.crt``, when present);
- ``/etc/machine-config-daemon/node-annotations.json``: currentConfig, desiredConfig,
  firstPivotConfig (= the served config), state Done, the node-agent ``pool`` annotation, and
  currentImage/desiredImage only when a layered image is served;
- ``/etc/kubernetes/kubeconfig`` (state ``bootstrap/kubeconfig``, when present; mode 0600);
- ``/etc/mcs-machine-config-content.json``: the full served MachineConfig, Ignition included;
- ``/etc/node-agent/boot-image-skew.json``: the skew rules (from ``bootImageSkewEnforcement``);
- ``/etc/node-agent/pool.json``: the pool's name, ``nodeSelector`` (matchLabels, matchExpressions) and what was served;
- ``/etc/node-agent/disruption-policy.yaml``: the cluster's ``nodeDisruptionPolicy`` and
  ``irreconcilableValidationOverrides`` as given;
- ``/etc/ignition-machine-config-encapsulated.json`` (last): the full MachineConfig with its
  Ignition emptied at the negotiated version (osImageURL is the *served* image; below spec 3.3
  it carries the Ignition kernel arguments too).
"""

import base64
import copy
import json
import re
from typing import Any, Dict, List, Optional

import yaml

from agent.core.served import (
    ANN,
    ANNOTATIONS_PATH,
    ENCAPSULATED_PATH,
    POLICY_PATH,
    POOL_INFO_PATH,
    SKEW_RULES_PATH,
)
from agent.errors import ConfigError
from agent.server.cluster.accept import needs_kargs_in_machineconfig
from agent.server.rollout.skewpolicy import manual_minimum

MEDIA_TYPE = "application/vnd.coreos.ignition+json"
# Served from the state directory's bootstrap/ when present (agent.server.store.stateformat.load_bootstrap;
# upstream cluster_server.go builds the kubeconfig from the bootstrap token and takes the CA from
# the ControllerConfig).
KUBECONFIG = "kubeconfig"
KUBELET_CA = "kubelet-ca.crt"
KUBECONFIG_PATH = "/etc/kubernetes/kubeconfig"  # upstream defaultMachineKubeConfPath
KUBELET_CA_PATH = "/etc/kubernetes/kubelet-ca.crt"  # upstream caBundleFilePath
MC_CONTENT_PATH = "/etc/mcs-machine-config-content.json"  # upstream machineConfigContentPath
UPSTREAM_FLOOR = {"rhcosVersion": "9.2"}  # RHCOS 9.2 == OpenShift 4.13.0, the upstream limit
RHEL_MAJOR_ANNOTATION = "node-agent.io/rhel-major"


class ConversionFailed(Exception):
    """The config cannot be said in the negotiated spec version (the MCS answers 500)."""


def data_url(data: bytes) -> str:
    return "data:;base64," + base64.b64encode(data).decode("ascii")


def _file(path: str, data: bytes, mode: int = 0o644) -> Dict[str, Any]:
    return {"path": path, "mode": mode, "overwrite": True, "contents": {"source": data_url(data)}}


def rhel_major(pool: Dict[str, Any], os_image: str) -> Optional[int]:
    """The target RHEL major: the pool annotation ``node-agent.io/rhel-major`` wins, else what the
    image reference encodes (``rhel-coreos-9``, ``rhel-coreos:9.6``, ``rhel10``, ``rhcos-9``)."""
    ann = ((pool.get("metadata") or {}).get("annotations") or {}).get(RHEL_MAJOR_ANNOTATION)
    if ann is not None and str(ann).isdigit():
        return int(ann)
    m = re.search(r"(?:rhel|rhcos)(?:[-_]?coreos)?[-_:]?(\d{1,2})(?:[.\-_@:]|$)", os_image or "")
    return int(m.group(1)) if m else None


def skew_rules(cluster_spec: Dict[str, Any], pool: Dict[str, Any], os_image: str) -> Dict[str, Any]:
    """The node-side rules (agent.core.skew) from ``spec.bootImageSkewEnforcement``.

    Manual -> Enforce with the stated minimum (an RHCOS version as its RHEL major.minor); no
    setting (Automatic, the upstream default on platforms that manage boot images) -> Enforce
    with the upstream floor; None -> None. Invalid settings never get here
    (objects.check_cluster). ``target.rhelMajor`` comes from the pool annotation or the image name.
    """
    skew = cluster_spec.get("bootImageSkewEnforcement") or {"mode": "Automatic"}
    mode = skew.get("mode", "Automatic")
    if mode == "None":
        return {"mode": "None"}
    rules: Dict[str, Any] = {"mode": "Enforce", "allowMajorUpgrade": False}
    if mode == "Manual":
        # RHEL major.minor only for an RHCOS boot image, as upstream status.go:796-856
        rules["minimum"] = manual_minimum(skew)
    else:  # not set: the cluster keeps boot images current (Automatic); the upstream floor holds
        rules["minimum"] = dict(UPSTREAM_FLOOR)
    target: Dict[str, Any] = {"osImageURL": os_image}
    major = rhel_major(pool, os_image)
    if major is not None:
        target["rhelMajor"] = major
    rules["target"] = target
    return rules


def _annotations(config_name: str, pool_name: str, image: str, layered: bool) -> Dict[str, str]:
    """The node annotations (upstream getNodeAnnotation, server.go): currentImage/desiredImage only
    when a layered image is served (cluster_server.go resolveDesiredImageForPool returns "" for a
    pool that is not layered, and appendNodeAnnotations then leaves them out)."""
    out = {
        ANN + "currentConfig": config_name,
        ANN + "desiredConfig": config_name,
        ANN + "firstPivotConfig": config_name,
        ANN + "state": "Done",
        ANN + "pool": pool_name,
    }
    if layered and image:
        out[ANN + "currentImage"] = image
        out[ANN + "desiredImage"] = image
    return out


def machine_config(config_name: str, spec: Dict[str, Any], image: str) -> Dict[str, Any]:
    """The served rendered config as the full MachineConfig object (spec with every OS-level
    field), its ``osImageURL`` the image actually served (upstream appendDesiredOSImage)."""
    mc_spec = copy.deepcopy(spec)
    mc_spec["config"] = copy.deepcopy(spec.get("config") or {"ignition": {"version": "3.5.0"}})
    mc_spec["osImageURL"] = image
    mc_spec["kernelArguments"] = list(spec.get("kernelArguments") or [])
    mc_spec["kernelType"] = spec.get("kernelType") or "default"
    mc_spec["extensions"] = list(spec.get("extensions") or [])
    mc_spec["fips"] = bool(spec.get("fips"))
    return {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": config_name, "annotations": {
                ANN + "generated-by-controller-version": "node-config-server"}},
            "spec": mc_spec}


def migrate_kernel_arguments(ignition: Dict[str, Any], mc: Dict[str, Any]) -> None:
    """Below spec 3.3 Ignition has no kernelArguments: move ``shouldExist`` into the MachineConfig's
    ``spec.kernelArguments`` (so the first-boot step still applies them) and drop them from the
    Ignition; ``shouldNotExist`` has nowhere to go: ConversionFailed (upstream
    MigrateKernelArgsIfNecessary, server.go:275-293, whose error the MCS answers with 500)."""
    kargs = ignition.pop("kernelArguments", None) or {}
    if kargs.get("shouldNotExist"):
        raise ConversionFailed("the config has Ignition kernelArguments.shouldNotExist "
                               f"({', '.join(map(str, kargs['shouldNotExist']))}), which an Ignition spec "
                               "below 3.3.0 cannot carry and a MachineConfig cannot express; "
                               "the node must ask for spec 3.3.0 or newer")
    mc["spec"]["kernelArguments"] = list(mc["spec"].get("kernelArguments") or []) + \
        [str(a) for a in kargs.get("shouldExist") or []]


def build_document(pool: Dict[str, Any], config_name: str, spec: Dict[str, Any], image: str,
                   cluster_spec: Dict[str, Any], version: str = "3.5.0", layered: bool = False,
                   bootstrap: Optional[Dict[str, bytes]] = None) -> Dict[str, Any]:
    """The Ignition document served for ``config_name`` with ``image``, at spec ``version``.

    Files added (upstream getAppenders order, server.go:98-197; the encapsulated config last):
    kubelet-ca.crt (replacing one the config has), node annotations, the bootstrap kubeconfig,
    /etc/mcs-machine-config-content.json (the full MachineConfig), node-agent's skew rules,
    pool identity and disruption policy, and the encapsulated MachineConfig with its Ignition
    emptied at ``version``. ``bootstrap`` maps BOOTSTRAP_FILES names to their bytes.
    ConversionFailed when ``version`` cannot express the config.
    """
    name = pool["metadata"]["name"]
    mc = machine_config(config_name, spec, image)
    doc = copy.deepcopy(mc["spec"]["config"])
    if needs_kargs_in_machineconfig(version):
        migrate_kernel_arguments(doc, mc)
    bootstrap = bootstrap or {}
    selector = (pool.get("spec") or {}).get("nodeSelector") or {}
    # Both halves: the node derives its labels from matchExpressions too (node_controller.go:1815).
    node_selector: Dict[str, Any] = {"matchLabels": dict(selector.get("matchLabels") or {})}
    if selector.get("matchExpressions"):
        node_selector["matchExpressions"] = list(selector["matchExpressions"])
    pool_info = {"pool": name, "nodeSelector": node_selector,
                 "servedConfig": config_name, "servedImage": image}
    added: List[Dict[str, Any]] = []
    if bootstrap.get(KUBELET_CA):
        added.append(_file(KUBELET_CA_PATH, bootstrap[KUBELET_CA]))
    added.append(_file(ANNOTATIONS_PATH, json.dumps(_annotations(config_name, name, image, layered),
                                                    sort_keys=True).encode()))
    if bootstrap.get(KUBECONFIG):
        added.append(_file(KUBECONFIG_PATH, bootstrap[KUBECONFIG], mode=0o600))
    added.append(_file(MC_CONTENT_PATH, json.dumps(mc, indent=4, sort_keys=True).encode()))
    added.append(_file(SKEW_RULES_PATH, json.dumps(skew_rules(cluster_spec, pool, image), sort_keys=True).encode()))
    added.append(_file(POOL_INFO_PATH, json.dumps(pool_info, sort_keys=True).encode()))
    # The node reads its disruption policy and its irreconcilable validation overrides here.
    served_spec = {k: cluster_spec[k] for k in ("nodeDisruptionPolicy", "irreconcilableValidationOverrides")
                   if cluster_spec.get(k)}
    if served_spec:
        added.append(_file(POLICY_PATH, yaml.safe_dump(
            {"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
             "spec": served_spec}, sort_keys=True).encode()))
    encapsulated = copy.deepcopy(mc)
    # Emptied Ignition at the negotiated version: an old first-boot daemon parses what it asked for.
    encapsulated["spec"]["config"] = {"ignition": {"version": version}}
    added.append(_file(ENCAPSULATED_PATH, json.dumps(encapsulated, sort_keys=True).encode()))
    ours = {f["path"] for f in added}
    storage = doc.setdefault("storage", {})
    storage["files"] = [f for f in storage.get("files") or [] if f.get("path") not in ours] + added
    return convert(doc, version)


def convert(doc: Dict[str, Any], version: str) -> Dict[str, Any]:
    """``doc`` (spec 3.x) at ``version``; ConversionFailed naming the fields when it cannot be."""
    from agent.ignition.spec import convert_ignition
    from agent.ignition.translate_down2 import to_spec22

    try:
        if version.startswith("2."):
            return to_spec22(doc)
        return convert_ignition(doc, version)
    except ConfigError as exc:
        raise ConversionFailed(str(exc).splitlines()[0])


def render_bytes(doc: Dict[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")
