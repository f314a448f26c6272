"""First-boot stage: check the booted boot image against the served skew rules.

Call order in the pipeline (before any pivot, before kubelet)::

    outcome = check_boot_image(root, read_served(config.ignition).skew_rules)   # agent.core.served
    report.update(report_fields(outcome))
    if outcome.refused:
        write_console_message(root, outcome)
    else:
        clear_console_message(root)
    enforce(outcome)          # raises SkewRefused (exit 78) on refuse; logs a warning on warn

Refuse means: do not pivot, do not start kubelet, report ``state: Degraded`` and exit 78.
"""

import json
import logging
import os
from typing import Any, Dict, Optional

from agent.core.skew import (
    OK,
    REFUSE,
    WARN,
    WHAT_TO_DO,
    SkewOutcome,
    booted_from_aleph,
    decide,
    load_rules_text,
    parse_rules,
    remedy,
)
from agent.errors import ConfigError, HostError, SkewRefused
from agent.host.files import atomic_write, fsync_dir
from agent.host.root import Root

log = logging.getLogger(__name__)

ALEPH_PATH = "/sysroot/.coreos-aleph-version.json"
RULES_PATH = "/etc/node-agent/boot-image-skew.json"
ISSUE_PATH = "/etc/issue.d/50-node-agent-boot-image.issue"
STAGE = "skew"


def read_booted(root: Root, aleph_path: str = ALEPH_PATH):
    """The booted image from the aleph file inside ``root`` (links followed inside the root)."""
    try:
        data = root.read_bytes(aleph_path)
    except FileNotFoundError:
        return booted_from_aleph(None, aleph_path, missing=f"{aleph_path} does not exist")
    except (OSError, HostError) as exc:
        return booted_from_aleph(None, aleph_path, missing=f"{aleph_path} could not be read ({exc})")
    return booted_from_aleph(data, aleph_path)


def check_boot_image(root: Root, rules_doc: Optional[Dict[str, Any]],
                     source: str = RULES_PATH) -> SkewOutcome:
    """Read the aleph file inside ``root``, validate ``rules_doc`` and decide.

    ``rules_doc`` None: no rules served (decision warn). Invalid rules raise ConfigError (exit 65).
    """
    booted = read_booted(root)
    rules = parse_rules(rules_doc, source=source) if rules_doc is not None else None
    return decide(booted, rules)


def load_rules_file(root: Root, path: str = RULES_PATH) -> Optional[Dict[str, Any]]:
    """The rules document at ``path`` inside the root, or None when the file does not exist."""
    try:
        text = root.read_text(path)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the skew rules: {exc}", source=path)
    return load_rules_text(text, source=path)


# ---------------------------------------------------------------------------------------------
# Console message (/etc/issue.d), report fields, enforcement


def refusal_fix(outcome: SkewOutcome) -> str:
    """The one fix for a refusal (agent.core.skew.remedy: the same words ``node-agent skew`` and
    the server show)."""
    return remedy(outcome.code, outcome.rules)


def refusal_facts(outcome: SkewOutcome) -> str:
    """The refusal's reason without the core's own advice sentence (refusal_fix says what to do)."""
    return outcome.reason.split(WHAT_TO_DO, 1)[0]


def console_message(outcome: SkewOutcome) -> str:
    """A plain text message for the console login prompt explaining a refusal and what to do."""
    rules = outcome.rules
    lines = [
        "",
        "node-agent: this node was NOT set up: its boot image does not fit the cluster.",
        "",
        f"  Booted: {outcome.booted.describe()}",
    ]
    if outcome.needed:
        lines.append(f"  Needed: {outcome.needed}")
    if rules is not None and rules.target_os_image_url:
        lines.append(f"  Target: {rules.target_os_image_url}")
    lines += [
        f"  Why:    {refusal_facts(outcome)}",
        "",
        f"What to do: {refusal_fix(outcome)}.",
        "",
    ]
    return "\n".join(lines) + "\n"


def _issue_escape(text: str) -> str:
    # agetty interprets backslash escapes in issue files (\n, \l, ...); keep the text literal.
    return text.replace("\\", "\\\\")


def write_console_message(root: Root, outcome: SkewOutcome) -> str:
    """Write the console message atomically (temp, fsync, rename); return the host path."""
    directory = root.path(os.path.dirname(ISSUE_PATH))
    target = os.path.join(directory, os.path.basename(ISSUE_PATH))
    data = _issue_escape(console_message(outcome)).encode("utf-8")
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        atomic_write(target, data, mode=0o644)
    except OSError as exc:
        raise HostError(f"cannot write the console message {target}: {exc}")
    return target


def clear_console_message(root: Root) -> bool:
    """Remove the console message (after a later check passes). True when one was removed."""
    directory = root.path(os.path.dirname(ISSUE_PATH))
    target = os.path.join(directory, os.path.basename(ISSUE_PATH))
    try:
        os.unlink(target)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise HostError(f"cannot remove the console message {target}: {exc}")
    fsync_dir(directory)
    return True


def report_fields(outcome: SkewOutcome) -> Dict[str, Any]:
    """Fields for ``POST /api/v1/nodes/<node>/report``.

    ``reason`` is ``"<Code>: <sentence>"`` (codes in agent.core.skew: BootImageTooOld for too old,
    BootImageMajorMismatch for a RHEL major mismatch, ...). ``state`` is set only on refuse.
    """
    fields: Dict[str, Any] = {
        "skew": outcome.decision,
        "bootImage": outcome.booted.raw,
        "reason": f"{outcome.code}: {outcome.reason}",
    }
    if outcome.decision == REFUSE:
        fields["state"] = "Degraded"
    return fields


def enforce(outcome: SkewOutcome) -> SkewOutcome:
    """Log the decision; raise SkewRefused (exit 78) on refuse, else return the outcome."""
    extra = {"NODE_AGENT_STAGE": STAGE, "NODE_AGENT_SKEW": outcome.decision,
             "NODE_AGENT_SKEW_CODE": outcome.code}
    if outcome.decision == REFUSE:
        log.error("boot image skew: refused: %s", outcome.reason, extra=extra)
        raise SkewRefused(f"boot image skew: {outcome.code}: {outcome.reason}")
    if outcome.decision == WARN:
        log.warning("boot image skew: %s", outcome.reason, extra=extra)
    elif outcome.decision == OK:
        log.info("boot image skew: %s", outcome.reason, extra=extra)
    return outcome


def outcome_json(outcome: SkewOutcome) -> str:
    return json.dumps(outcome.to_dict(), indent=2, sort_keys=False)
