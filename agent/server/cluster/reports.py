"""A node's report as the API takes it (pure): fields, types, limits; errors name the field."""

from typing import Any, Dict

from agent.server.rollout import progress

REPORT_FIELDS = ("pool", "currentConfig", "desiredConfig", "firstPivotConfig", "currentImage", "state",
                 "bootImage", "skew", "reason", "labels", "desiredImage")
SKEW_VALUES = ("ok", "warn", "refuse")


class ReportInvalid(ValueError):
    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


def validate_report(body: Any) -> Dict[str, Any]:
    """A node report (ARCHITECTURE); raises ReportInvalid naming the field."""
    if not isinstance(body, dict):
        raise ReportInvalid("$", "the report must be a JSON object")
    for key in body:
        if key not in REPORT_FIELDS:
            raise ReportInvalid(f"$.{key}", f"unknown field; known: {', '.join(REPORT_FIELDS)}")
    from agent.server.store.stateformat import DNS1123_LABEL

    pool = body.get("pool")
    if not isinstance(pool, str) or not DNS1123_LABEL.match(pool):
        raise ReportInvalid("$.pool", "required: the pool name (a DNS-1123 label)")
    if body.get("state") not in progress.STATES:
        raise ReportInvalid("$.state", f"required: one of {', '.join(progress.STATES)}")
    for key in ("currentConfig", "desiredConfig", "firstPivotConfig", "currentImage", "desiredImage",
                "bootImage", "reason"):
        if key in body and body[key] is not None and not isinstance(body[key], str):
            raise ReportInvalid(f"$.{key}", "must be a string")
        if isinstance(body.get(key), str) and len(body[key]) > 4096:
            raise ReportInvalid(f"$.{key}", "too long (at most 4096 characters)")
    if body.get("skew") is not None and body.get("skew") not in SKEW_VALUES:
        raise ReportInvalid("$.skew", f"must be one of {', '.join(SKEW_VALUES)}")
    labels = body.get("labels")
    if labels is not None and (not isinstance(labels, dict) or
                               not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())):
        raise ReportInvalid("$.labels", "must be a map of label name to string value")
    return {k: v for k, v in body.items() if v is not None}
