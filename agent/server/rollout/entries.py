"""A node's entry in its pool's rollout record, and the node's report as upstream's rules read its
Node with that entry (pure): what targeting.py decides from and poolindex.py files each member by.
The record's layout is targeting.py's docstring."""

from typing import Any, Dict, Mapping, Optional, Tuple

from agent.server.rollout.candidates import Member


def entry_of(rollout: Optional[Mapping[str, Any]], node: str) -> Optional[Dict[str, Any]]:
    entry = ((rollout or {}).get("targets") or {}).get(node)
    return entry if isinstance(entry, dict) else None


def desired_of(report: Optional[Mapping[str, Any]], entry: Optional[Mapping[str, Any]]) -> Tuple[str, Optional[str]]:
    """(config, image) the node desires: the server's entry, else what it reports it desires."""
    if entry is not None:
        return str(entry.get("config") or ""), entry.get("image") or None
    rep = report or {}
    return str(rep.get("desiredConfig") or rep.get("currentConfig") or ""), rep.get("desiredImage") or None


def effective(member: Member, entry: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """The node's report as upstream's rules read its Node: desiredConfig (and desiredImage) the
    server's decision, current config and state the node's own. A node-agent report that names
    no desired config desires what it runs (desired_of)."""
    out = with_desired(member.report, entry)
    if member.ours and out is not None and not out.get("desiredConfig") and out.get("currentConfig"):
        out["desiredConfig"] = out["currentConfig"]
    return out


def with_desired(report: Optional[Mapping[str, Any]], entry: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """``report`` with the server's desired config and image of ``entry`` (none: as it is)."""
    if entry is None:
        return dict(report) if report is not None else None
    out = dict(report or {})
    out["desiredConfig"] = str(entry.get("config") or "")
    if entry.get("image"):
        out["desiredImage"] = entry["image"]
    else:
        out.pop("desiredImage", None)
    return out
