"""What the admin's rollback of a pool does (pure): node-config-server rollback pool NAME, which
rolloutctl.RolloutControl.rollback carries out."""

from typing import Any, Dict, List


class RolloutNotPossible(ValueError):
    """A rollback that cannot be done (nothing to roll back to, an unknown pool); the message says why."""


def rollback_plan(row: Any, history: List[Dict[str, Any]], undo: bool) -> Dict[str, Any]:
    """What a rollback of the pool does (pure; ``row``: its store.nodestore.PoolRow): from its
    target to the last config every member was Done on. RolloutNotPossible when there is none."""
    pin = row.rollout.get("pinned") or {}
    if undo:
        if not pin:
            raise RolloutNotPossible(f"pool {row.name} is not rolled back: nothing to undo")
        return {"pool": row.name, "from": row.target, "to": str(pin.get("from") or row.rendered), "undo": True,
                "summary": f"rollback undone: {pin.get('from')} is the target again (the nodes take it in turn)"}
    to = row.current
    if row.target == row.current:
        currents = [h.get("config") for h in history if h.get("field") == "current"]
        earlier = [c for c in currents[:-1] if c and c != row.current]
        if not earlier:
            raise RolloutNotPossible(f"pool {row.name} has run no config before {row.current}: nothing to roll back to")
        to = str(earlier[-1])
    if to == row.target:
        raise RolloutNotPossible(f"pool {row.name} already targets {to}: nothing to roll back")
    return {"pool": row.name, "from": row.target, "to": to, "undo": False,
            "summary": (f"rolled back from {row.target} to {to}, the last config every member was Done on; "
                        f"{row.target} waits until the MachineConfigs change (or rollback pool {row.name} --undo)")}
