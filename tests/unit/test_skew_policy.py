"""spec.bootImageSkewEnforcement as the API admits it (openshift/api machineconfiguration/v1
types_machineconfiguration.go BootImageSkewEnforcementConfig / ClusterBootImageManual), what the
nodes are told, and the cluster's Upgradeable answer (MCO pkg/operator/status.go:796-856)."""

import json
import os
import shutil

import pytest

from agent.core.skew import BootedImage, decide, parse_rules
from agent.core.versions import parse_version
from agent.server.cluster import content
from agent.server.rollout import skewpolicy
from agent.server.store.statedir.watcher import StateWatcher
from agent.server.store.stateformat import load_state
from tests.campaigns.test_bad_input_campaign import wsgi
from tests.server.test_server_api import EXAMPLE

P = "$.spec.bootImageSkewEnforcement"

# (what is written under bootImageSkewEnforcement, the JSON paths refused, the API rule)
INVALID = [
    ("{mode: Automatic}", [P + ".mode"], "spec mode enum is Manual;None (Automatic is status-only)"),
    ("{manual: {mode: OCPVersion, ocpVersion: 4.13.0}}", [P + ".mode"], "mode is required"),
    ("{mode: Manual}", [P + ".manual"], "manual is required when mode is Manual"),
    ("{mode: None, manual: {mode: OCPVersion, ocpVersion: 4.13.0}}", [P + ".manual"],
     "manual is forbidden otherwise"),
    ("{mode: Manual, manual: {rhcosVersion: 9.2.20240101-0}}", [P + ".manual.mode"],
     "manual.mode is required (OCPVersion | RHCOSVersion)"),
    ("{mode: Manual, manual: {mode: RHCOSVersion, ocpVersion: 4.13.0}}",
     [P + ".manual.rhcosVersion", P + ".manual.ocpVersion"], "the discriminator decides which field is set"),
    ("{mode: Manual, manual: {mode: RHCOSVersion, rhcosVersion: 416.94.2024112021-0}}",
     [P + ".manual.rhcosVersion"], "rhcosVersion ^[0-9]+.[0-9]+.([0-9]{8}|[0-9]{12})-[0-9]+$ (10 digits)"),
    ("{mode: Manual, manual: {mode: RHCOSVersion, rhcosVersion: 9.2}}", [P + ".manual.rhcosVersion"],
     "rhcosVersion needs the datestamp (and YAML made 9.2 a number)"),
    ("{mode: Manual, manual: {mode: OCPVersion, ocpVersion: '4.13'}}", [P + ".manual.ocpVersion"],
     "ocpVersion ^[0-9]+.[0-9]+.[0-9]+$"),
    ("{mode: Manual, manual: {mode: OCPVersion, ocpVersion: 4.13.0}, automatic: {}}", [P + ".automatic"],
     "automatic exists only in status"),
]
VALID = [
    "{mode: None}",
    "{mode: Manual, manual: {mode: OCPVersion, ocpVersion: 4.13.0}}",
    "{mode: Manual, manual: {mode: RHCOSVersion, rhcosVersion: 9.2.20240101-0}}",
    "{mode: Manual, manual: {mode: RHCOSVersion, rhcosVersion: 415.92.202311241643-0}}",
]


def cluster_file(d, skew):
    (d / "machineconfiguration.yaml").write_text(f"spec:\n  bootImageSkewEnforcement: {skew}\n")


@pytest.mark.parametrize("skew,paths,rule", INVALID, ids=[r[2] for r in INVALID])
def test_invalid_settings_are_refused_at_load_with_their_path(tmp_path, skew, paths, rule):
    cluster_file(tmp_path, skew)
    st = load_state(str(tmp_path))
    found = [p.path for p in st.problems if p.source == "machineconfiguration.yaml"]
    assert sorted(found) == sorted(paths), rule
    assert not st.cluster  # not used


@pytest.mark.parametrize("skew", VALID)
def test_valid_settings_load(tmp_path, skew):
    cluster_file(tmp_path, skew)
    assert load_state(str(tmp_path)).problems == []


def test_last_good_state_keeps_serving_and_healthz_says_why(tmp_path, new_app):
    state = tmp_path / "state"
    shutil.copytree(EXAMPLE, state)
    app = new_app(str(state), reload_interval=0.0)
    accept = {"Accept": "application/vnd.coreos.ignition+json;version=3.4.0"}
    status, _, before = wsgi(app, "GET", "/config/worker", headers=accept)
    assert status == 200
    text = (state / "machineconfiguration.yaml").read_text()
    (state / "machineconfiguration.yaml").write_text(text.replace('"9.2.20240101-0"', '"416.94.2024112021-0"'))
    status, _, after = wsgi(app, "GET", "/config/worker", headers=accept)
    assert status == 200 and after == before
    health = json.loads(wsgi(app, "GET", "/healthz")[2])
    assert health["state"]["stale"] is True
    assert [p["path"] for p in health["state"]["problems"]] == [P + ".manual.rhcosVersion"]


def rules_for(manual_version):
    skew = {"mode": "Manual", "manual": {"mode": "RHCOSVersion", "rhcosVersion": manual_version}}
    return content.skew_rules({"bootImageSkewEnforcement": skew}, {"metadata": {"name": "worker"}},
                              "quay.io/openshift-release-dev/rhel-coreos-9:9.6")


@pytest.mark.parametrize("manual,booted,refused", [
    ("9.6.20250601-0", "9.6.20250121-0", False),  # same RHEL 9.6, older build date: never refused
    ("9.6.20250101-0", "9.6.20251231-0", False),
    ("416.94.202411202104-0", "9.4.20240101-0", False),  # legacy names RHEL 9.4
    ("416.94.202411202104-0", "416.94.202401010000-0", False),
    ("9.6.20250121-0", "9.4.20250601-0", True),  # an older RHEL minor is below
    ("9.6.20250121-0", "414.92.202311241643-0", True),
    # The API's pattern admits X.Y.date-N below RHEL 9, which no RHCOS build carries; its X.Y
    # still reaches the node (the raw text did, and every node refused the rules: exit 65).
    ("8.6.20220101-0", "9.4.20240101-0", False),
    ("8.6.20220101-0", "416.94.202411202104-0", False),
])
def test_manual_rhcos_version_compares_rhel_major_minor_only(manual, booted, refused):
    rules = rules_for(manual)
    assert rules["minimum"]["rhcosVersion"].count(".") == 1  # X.Y: no build date reaches the node
    outcome = decide(BootedImage(raw=booted, version=parse_version(booted)), parse_rules(rules))
    assert outcome.refused is refused, outcome.to_dict()


@pytest.mark.parametrize("manual,status", [
    ({"mode": "RHCOSVersion", "rhcosVersion": "48.84.202109091234-0"}, "False"),  # RHEL 8.4 < 9.2
    ({"mode": "RHCOSVersion", "rhcosVersion": "9.2.20240101-0"}, "True"),
    ({"mode": "RHCOSVersion", "rhcosVersion": "8.6.20220101-0"}, "False"),  # RHEL 8.6 < 9.2
    ({"mode": "OCPVersion", "ocpVersion": "4.12.9"}, "False"),
    ({"mode": "OCPVersion", "ocpVersion": "4.13.0"}, "True"),
])
def test_upgradeable_names_the_boot_image_below_the_floor(manual, status):
    cond = skewpolicy.upgradeable({"bootImageSkewEnforcement": {"mode": "Manual", "manual": manual}})
    assert cond["status"] == status
    if status == "False":
        version = manual.get("rhcosVersion") or manual.get("ocpVersion")
        assert version in cond["message"] and cond["reason"] == "BootImageSkewLimitExceeded"


def test_api_cluster_says_not_upgradeable(tmp_path, new_app):
    state = tmp_path / "state"
    shutil.copytree(EXAMPLE, state)
    text = (state / "machineconfiguration.yaml").read_text()
    (state / "machineconfiguration.yaml").write_text(text.replace('"9.2.20240101-0"', '"48.84.202109091234-0"'))
    app = new_app(str(state), reload_interval=0.0)
    doc = json.loads(wsgi(app, "GET", "/api/v1/cluster")[2])
    assert doc["upgradeable"]["status"] == "False" and "48.84.202109091234-0" in doc["upgradeable"]["message"]
    os.remove(state / "machineconfiguration.yaml")
    doc = json.loads(wsgi(app, "GET", "/api/v1/cluster")[2])
    assert doc["upgradeable"]["status"] == "True"


def test_watcher_keeps_the_last_good_cluster_settings(tmp_path):
    cluster_file(tmp_path, "{mode: None}")
    w = StateWatcher(str(tmp_path), 0)
    cluster_file(tmp_path, "{mode: Automatic}")
    st = w.current(check_now=True)
    assert st.stale and st.cluster_spec["bootImageSkewEnforcement"] == {"mode": "None"}
