"""The first-boot hand-off with the MCD on an RHCOS node with both installed: node-agent runs the
first boot; machine-config-daemon-firstboot.service (its trigger is the encapsulated config file)
is held off by the drop-in node-agent's package installs, and runs as before without node-agent."""

import os
import re
from typing import Dict, List

import pytest

from tests.helpers import paths

REPO = paths.REPO
DROPIN = os.path.join(REPO, "systemd/machine-config-daemon-firstboot.service.d/10-node-agent.conf")
AGENT_UNIT = os.path.join(REPO, "systemd/node-agent-firstboot.service")
ENCAPSULATED = "/etc/ignition-machine-config-encapsulated.json"
# The [Unit] conditions of upstream's unit (openshift/machine-config-operator
# templates/common/_base/units/machine-config-daemon-firstboot.service.yaml): "Removal of this
# file signals firstboot completion".
MCD_UNIT = f"""[Unit]
Description=Machine Config Daemon Firstboot
ConditionPathExists=/run/ostree-booted
ConditionPathExists={ENCAPSULATED}
ConditionPathExists=/sysroot/.coreos-aleph-version.json
Before=kubelet.service
"""


def conditions(*unit_texts: str) -> List[str]:
    """ConditionPathExists= values of a unit and its drop-ins (they accumulate)."""
    found: List[str] = []
    for text in unit_texts:
        found += re.findall(r"^ConditionPathExists=(.+)$", text, flags=re.M)
    return found


def would_run(root: str, unit_texts: List[str]) -> bool:
    """systemd's rule: every non-triggering condition must hold ('!' negates)."""
    for value in conditions(*unit_texts):
        negate = value.startswith("!")
        path = os.path.join(root, value.lstrip("!").lstrip("/"))
        if os.path.exists(path) == negate:
            return False
    return True


def rhcos_root(tmp_path, with_agent: bool) -> str:
    root = tmp_path / ("with" if with_agent else "without")
    files: Dict[str, str] = {"run/ostree-booted": "", "sysroot/.coreos-aleph-version.json": "{}",
                             ENCAPSULATED.lstrip("/"): '{"spec": {"osImageURL": "quay.io/x@sha256:1"}}'}
    if with_agent:
        files["usr/lib/systemd/system/node-agent-firstboot.service"] = open(AGENT_UNIT).read()
        files["usr/lib/systemd/system/machine-config-daemon-firstboot.service.d/10-node-agent.conf"] = open(DROPIN).read()
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return str(root)


def test_node_agent_runs_first_boot_and_the_mcds_is_held_off(tmp_path):
    root = rhcos_root(tmp_path, with_agent=True)
    dropin = open(DROPIN).read()
    assert os.path.exists(os.path.join(root, ENCAPSULATED.lstrip("/")))  # the MCD's trigger is there
    assert not would_run(root, [MCD_UNIT, dropin])
    assert would_run(root, [open(AGENT_UNIT).read()])  # node-agent's own first boot does run


def test_without_node_agent_the_mcds_first_boot_runs_as_upstream(tmp_path):
    root = rhcos_root(tmp_path, with_agent=False)
    assert would_run(root, [MCD_UNIT])
    os.remove(os.path.join(root, ENCAPSULATED.lstrip("/")))
    assert not would_run(root, [MCD_UNIT])  # upstream: the file's removal marks first boot done


@pytest.mark.parametrize("line", ["[Unit]", "ConditionPathExists=!/usr/lib/systemd/system/node-agent-firstboot.service"])
def test_dropin_is_a_unit_section_condition(line):
    assert line in open(DROPIN).read().splitlines()
