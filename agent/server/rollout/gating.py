"""What a new node gets, and why (pure). Upstream: machine-config-operator
pkg/server/cluster_server.go GetConfig and resolveDesiredImageForPool (lines 291-352).

- The pool's target (spec) config only once at least one node runs it
  (``updatedMachineCount > 0``); until then the current (status) config. A brand-new pool has
  one config, which is both.
- A layered OS image from an on-cluster build only when a MachineOSConfig for the pool has a
  ``status.currentImagePullSpec`` (required: no fallback), the MachineOSBuild of that
  MachineOSConfig for the *served* rendered config succeeded, at least one node runs that
  config with that image (the proof is counted for the config actually served, so a node
  joining mid-rollout gets the proven image of the current config), and the image is not on the
  cluster's internal registry (a new node has no cluster DNS yet: it boots the base image and
  updates after joining, one more reboot, as upstream). Otherwise the base ``osImageURL``.
- The image of a config is its MachineOSBuild's ``status.digestedImagePushSpec`` when set (during
  a rollout ``currentImagePullSpec`` already names the newer build), else the MachineOSConfig's
  ``status.currentImagePullSpec`` (upstream uses the latter only).
"""

from dataclasses import dataclass
from typing import Any, Dict, Optional

# The cluster's internal image registry (upstream ctrlcommon.IsOpenShiftRegistry); its service name
# resolves only inside the cluster.
INTERNAL_REGISTRY_HOSTS = ("image-registry.openshift-image-registry.svc",
                           "image-registry.openshift-image-registry.svc.cluster.local")


@dataclass(frozen=True)
class Served:
    config: str
    image: str
    reason: str
    layered: bool = False

    def to_dict(self) -> Dict[str, Any]:
        return {"config": self.config, "image": self.image, "reason": self.reason, "layered": self.layered}


def _conditions(obj: Dict[str, Any]) -> Dict[str, str]:
    return {str(c.get("type")): str(c.get("status")) for c in ((obj.get("status") or {}).get("conditions") or [])
            if isinstance(c, dict)}


def build_succeeded(build: Dict[str, Any]) -> bool:
    cond = _conditions(build)
    return cond.get("Succeeded") == "True" and cond.get("Failed") != "True"


def os_config_for_pool(pool: str, os_configs: Dict[str, Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    for name in sorted(os_configs):
        mosc = os_configs[name]
        if ((mosc.get("spec") or {}).get("machineConfigPool") or {}).get("name") == pool:
            return mosc
    return None


def layered_image(pool: str, rendered: str, os_configs: Dict[str, Dict[str, Any]],
                  os_builds: Dict[str, Dict[str, Any]]) -> Optional[str]:
    """The pool's layered image for ``rendered``, or None (no build, not finished, failed)."""
    info = layered_image_info(pool, rendered, os_configs, os_builds)
    return info[0]


def layered_image_info(pool: str, rendered: str, os_configs: Dict[str, Dict[str, Any]],
                       os_builds: Dict[str, Dict[str, Any]]):
    """(image or None, why) for the pool's layered image of the rendered config ``rendered``."""
    mosc = os_config_for_pool(pool, os_configs)
    if mosc is None:
        return None, "no MachineOSConfig for the pool"
    mosc_name = mosc["metadata"]["name"]
    pull_spec = (mosc.get("status") or {}).get("currentImagePullSpec")
    if not pull_spec:  # upstream: !moscState.HasOSImage() -> no layered image
        return None, f"MachineOSConfig {mosc_name} has no status.currentImagePullSpec (no image built yet)"
    builds = [b for _, b in sorted(os_builds.items())
              if ((b.get("spec") or {}).get("machineOSConfig") or {}).get("name") == mosc_name
              and ((b.get("spec") or {}).get("machineConfig") or {}).get("name") == rendered]
    if not builds:
        return None, f"no MachineOSBuild of MachineOSConfig {mosc_name} for {rendered}"
    ok = [b for b in builds if build_succeeded(b)]
    if not ok:
        return None, f"the MachineOSBuild {builds[-1]['metadata']['name']} for {rendered} has not succeeded"
    image = (ok[-1].get("status") or {}).get("digestedImagePushSpec") or pull_spec
    return str(image), f"MachineOSBuild {ok[-1]['metadata']['name']} succeeded"


def is_internal_registry(image: str) -> bool:
    """Whether ``image`` is on the cluster's internal registry (any port)."""
    head = image.split("/", 1)[0].lower() if "/" in image else ""
    return head.rsplit(":", 1)[0] in INTERNAL_REGISTRY_HOSTS if ":" in head else head in INTERNAL_REGISTRY_HOSTS


def decide(pool: str, target: str, current: str, updated: int, base_images: Dict[str, str],
           os_configs: Dict[str, Dict[str, Any]], os_builds: Dict[str, Dict[str, Any]],
           current_proof: int = 0) -> Served:
    """What a new node of ``pool`` gets. ``base_images`` maps rendered name -> its osImageURL;
    ``updated`` counts nodes Done on the target with its layered image (if any), ``current_proof``
    nodes Done on the current config with its layered image (used when the current is served)."""
    if target == current:
        config = target
        why = f"{target} is both target and current"
    elif updated > 0:
        config = target
        why = f"target {target}: {updated} node(s) already run it"
    else:
        config = current
        why = f"current {current}: no node runs the target {target} yet"
    proof = updated if config == target else current_proof
    base = base_images.get(config, "")
    image, image_why = layered_image_info(pool, config, os_configs, os_builds)
    if image and is_internal_registry(image):
        return Served(config, base, f"{why}; base osImageURL: the layered image {image} is on the cluster's "
                                    f"internal registry, which a new node cannot reach before it joins (it "
                                    f"updates to the layered image after joining)")
    if image and proof > 0:
        return Served(config, image, f"{why}; layered image ({image_why}) proven by {proof} node(s)", True)
    if image:
        return Served(config, base, f"{why}; base osImageURL: the layered image ({image_why}) runs on no node yet")
    if os_config_for_pool(pool, os_configs) is not None:
        return Served(config, base, f"{why}; base osImageURL: {image_why}")
    return Served(config, base, why)


def for_member(pool: str, desired: str, base_images: Dict[str, str], os_configs: Dict[str, Dict[str, Any]],
               os_builds: Dict[str, Dict[str, Any]], running: Optional[str] = None, targeted: bool = False) -> Served:
    """What a node already in ``pool`` gets when it names itself: its desired config, which the
    server's node targeting chose for it (agent/server/rollout/targeting.py; upstream the node
    controller writes each candidate's desiredConfig), with that config's layered image.

    Proof gates only what *new* nodes boot into; a member targeted to an unproven config gets it,
    or no node would ever prove it. maxUnavailable paces which members are targeted, not here.
    ``running`` with ``targeted``: the layered image the targeting chose for it, served as layered
    (its node annotations name it) even where these objects do not show the build yet (a worker or
    replica whose watch is behind the one that targeted it).
    """
    image, image_why = layered_image_info(pool, desired, os_configs, os_builds)
    if running and targeted:  # the layered image the targeting chose (this state may not show the build yet)
        return Served(desired, running, f"member of {pool}: its desired config {desired}; the layered image it "
                                        f"was targeted to", True)
    if running:  # not targeted: the image it runs, whatever the pool's is now, until its turn comes
        return Served(desired, running, f"member of {pool}: its desired config {desired} with the image it runs",
                      running == image)
    if image:
        return Served(desired, image, f"member of {pool}: its desired config {desired}; layered image ({image_why})",
                      True)
    return Served(desired, base_images.get(desired, ""), f"member of {pool}: its desired config {desired}")

