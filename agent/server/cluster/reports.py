"""A node's report as the API takes it (pure): fields, types, limits; errors name the field."""

from typing import Any, Dict

from agent.server.rollout import firstboots, progress

REPORT_FIELDS = ("pool", "currentConfig", "desiredConfig", "firstPivotConfig", "currentImage", "state",
                 "bootImage", "skew", "reason", "labels", "desiredImage", "firstBoot")
SKEW_VALUES = ("ok", "warn", "refuse")
CONFIG_NAMES = ("currentConfig", "desiredConfig", "firstPivotConfig")


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
    from agent.server.store.stateformat import DNS1123_LABEL, DNS1123_SUBDOMAIN

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
    for key in CONFIG_NAMES:  # written as the MachineConfigNode's spec/status.configVersion (253, a subdomain)
        name = body.get(key)
        if name and (len(name) > 253 or not DNS1123_SUBDOMAIN.match(name)):
            raise ReportInvalid(f"$.{key}", "must be a rendered config's name: a DNS-1123 subdomain (lower-case "
                                            "letters, digits, '-' and '.', at most 253 characters)")
    if body.get("skew") is not None and body.get("skew") not in SKEW_VALUES:
        raise ReportInvalid("$.skew", f"must be one of {', '.join(SKEW_VALUES)}")
    _check_labels(body.get("labels"))
    out = {k: v for k, v in body.items() if v is not None}
    if "firstBoot" in out:  # the first boot's run, stage, outcome (agent/server/rollout/firstboots.py)
        try:
            out["firstBoot"] = firstboots.check_sent(out["firstBoot"])
        except firstboots.Invalid as exc:
            raise ReportInvalid(exc.field, str(exc).split(": ", 1)[1]) from None
    return out


# A Node's label as Kubernetes bounds it (apimachinery/pkg/util/validation/validation.go:
# IsQualifiedName: an optional DNS-1123 subdomain prefix of at most 253 characters, "/", a name of
# at most 63; IsValidLabelValue: at most 63). Only the lengths are checked: a label that is not a
# valid Kubernetes label simply matches no pool selector.
MAX_LABEL_KEY = 253 + 1 + 63
MAX_LABEL_VALUE = 63
MAX_LABELS = 256


def _check_labels(labels: Any) -> None:
    if labels is None:
        return
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise ReportInvalid("$.labels", "must be a map of label name to string value")
    if len(labels) > MAX_LABELS:
        raise ReportInvalid("$.labels", f"{len(labels)} labels; at most {MAX_LABELS}")
    for key, value in labels.items():
        if not key or len(key) > MAX_LABEL_KEY:
            raise ReportInvalid(f"$.labels[{key[:80]!r}]", f"a label name has 1 to {MAX_LABEL_KEY} characters "
                                                          f"(a 253-character prefix, '/', a 63-character name)")
        if len(value) > MAX_LABEL_VALUE:
            raise ReportInvalid(f"$.labels[{key!r}]", f"a label value has at most {MAX_LABEL_VALUE} characters; "
                                                      f"this one has {len(value)}")
