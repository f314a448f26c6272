"""What a MachineConfigNode holds for the Kubernetes node store (pure): the object made for a
node, and the node's newest report kept as one of its annotations."""

import json
import logging
from typing import Any, Dict, List, Optional

from agent.server.rollout.mcnconditions import config_name
from agent.server.store.errors import ReportTooLarge
from agent.server.store.nodestore import NodeRecord

log = logging.getLogger(__name__)

REPORT = "node-agent.openshift.io/report"
DRAIN_LOG = "node-agent.openshift.io/drain-log"
STORE_LABEL = "node-agent.openshift.io/store"
# On every MachineConfigNode this server makes: it is ours to delete with its node (the admin's
# DELETE /api/v1/nodes/<node>); one the MCO made keeps existing without our annotations.
CREATED_BY, CREATOR = "node-agent.openshift.io/created-by", "node-config-server"
# The API server refuses an object whose annotations pass 256 KiB (TotalAnnotationSizeLimitB,
# apimachinery/pkg/api/validation/objectmeta.go); a report is at most 64 KiB (httpio.MAX_REPORT).
ANNOTATIONS_MAX = 256 << 10


def node_object(node: str, body: Dict[str, Any], pool: str) -> Dict[str, Any]:
    """A MachineConfigNode (one per node, named after it) with its spec (pure); an unknown config
    or pool is upstream's "not-yet-set" (the CRD's CEL rules want an RFC 1123 subdomain, never "")."""
    return {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigNode",
            "metadata": {"name": node, "annotations": {CREATED_BY: CREATOR}},
            "spec": {"node": {"name": node}, "pool": {"name": config_name(pool)},
                     "configVersion": {"desired": config_name(body.get("desiredConfig"))}}}


def report_annotation(rec: NodeRecord) -> str:
    """The report annotation's value (pure): compact JSON with its characters as they are, not
    ASCII-escaped ("é" stays 2 bytes, not the 6 of ``\\u00e9``), so a report within
    httpio.MAX_REPORT always fits the annotations; ReportTooLarge (413) names the limit if not."""
    value = json.dumps({"pool": rec.pool, "why": rec.why, "degraded": rec.degraded, "report": rec.report,
                        "received": rec.received}, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    size = len(value.encode("utf-8"))
    if size > ANNOTATIONS_MAX // 2:
        raise ReportTooLarge(f"node {rec.node}: the report takes {size} bytes on its MachineConfigNode; at most "
                             f"{ANNOTATIONS_MAX // 2} bytes fit (half of the API server's {ANNOTATIONS_MAX} bytes of "
                             f"annotations); send a smaller report")
    return value


def node_record(node: str, value: Optional[str]) -> Optional[NodeRecord]:
    """The record in an MCN's annotation; an unreadable one (edited by hand) is no record, so the
    watch goes on and the node's next report replaces it."""
    if not value:
        return None
    try:
        d = json.loads(value)
        return NodeRecord(node=node, pool=str(d["pool"]), why=d.get("why", ""), degraded=d.get("degraded", ""),
                          report=dict(d.get("report") or {}), received=float(d.get("received", 0.0)))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        log.warning("MachineConfigNode %s: unreadable annotation %s (%s); ignored until the node reports again",
                    node, REPORT, exc)
        return None


def log_ops(meta: Dict[str, Any], value: str, namespace: str) -> List[Dict[str, Any]]:
    """The drain log's write as a JSON patch whose precondition is the drain log read (pure), on an
    object that has one: a status or spec write or a report meanwhile (kube_mcn) is no conflict,
    as it was with the resourceVersion. Only the log is tested: the whole annotations (a report of
    hundreds of KiB) sent back as the test's value made the request one the API server refused."""
    return [{"op": "test", "path": _path("annotations", DRAIN_LOG), "value": meta["annotations"][DRAIN_LOG]},
            {"op": "add", "path": _path("annotations", DRAIN_LOG), "value": value},
            {"op": "add", "path": _path("labels", STORE_LABEL), "value": namespace}]


def record_ops(log_read: str, log_value: str, report: str, desired: str, namespace: str) -> List[Dict[str, Any]]:
    """A report's record, the drain log's new value and (``desired`` not "") the spec's desired
    config as one JSON patch whose precondition is the drain log read (pure): the write of a Done
    that ends a drain (kube.drainlog ``_write_record``)."""
    ops = [{"op": "test", "path": _path("annotations", DRAIN_LOG), "value": log_read},
           {"op": "add", "path": _path("annotations", DRAIN_LOG), "value": log_value},
           {"op": "add", "path": _path("annotations", REPORT), "value": report}]
    if desired:
        ops.append({"op": "add", "path": "/spec/configVersion/desired", "value": desired})
    return ops + [{"op": "add", "path": _path("labels", STORE_LABEL), "value": namespace}]


def _path(section: str, key: str) -> str:
    return f"/metadata/{section}/" + key.replace("~", "~0").replace("/", "~1")


def json_list(value: Optional[str]) -> List[Dict[str, Any]]:
    try:
        items = json.loads(value or "[]")
    except ValueError:
        return []
    return items if isinstance(items, list) else []
