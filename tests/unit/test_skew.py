"""Skew rules validation and the skew decision (agent.core.skew): pure functions, table driven."""

import json

import pytest

from agent.core.skew import (
    BootedImage,
    booted_from_aleph,
    decide,
    load_rules_text,
    parse_rules,
)
from agent.core.versions import parse_version
from agent.errors import ConfigError


def booted(raw):
    if raw is None:
        return BootedImage(error="/sysroot/.coreos-aleph-version.json does not exist")
    try:
        return BootedImage(raw=raw, version=parse_version(raw))
    except ConfigError as exc:
        return BootedImage(raw=raw, error=str(exc))


def R(mode="Enforce", minimum=None, rhel=None, allow=None, image=None):
    doc = {"mode": mode}
    if minimum is not None:
        doc["minimum"] = minimum
    if rhel is not None or image is not None:
        doc["target"] = {}
        if rhel is not None:
            doc["target"]["rhelMajor"] = rhel
        if image is not None:
            doc["target"]["osImageURL"] = image
    if allow is not None:
        doc["allowMajorUpgrade"] = allow
    return doc


RHCOS92 = {"rhcosVersion": "9.2"}
OCP413 = {"ocpVersion": "4.13.0"}

# id, booted version (None: unknown), rules document (None: none served), decision, code, words in reason
DECISIONS = [
    # no rules / mode None
    ("no-rules", "415.92.202311241643-0", None, "warn", "NoSkewRules", "No boot image skew rules"),
    ("no-rules-unknown-boot", None, None, "warn", "NoSkewRules", "not checked"),
    ("mode-none-old", "48.84.202109241901-0", R("None", RHCOS92, 9), "ok", "SkewEnforcementOff", "off"),
    ("mode-none-major-jump", "9.6.20250121-0", R("None", rhel=11), "ok", "SkewEnforcementOff", "mode None"),
    ("mode-none-unknown", None, R("None", RHCOS92), "ok", "SkewEnforcementOff", "off"),
    # unknown booted version: warn, never refuse
    ("unknown-enforce", None, R("Enforce", RHCOS92, 9), "warn", "BootImageVersionUnknown", "unknown"),
    ("unknown-warn", None, R("Warn", OCP413), "warn", "BootImageVersionUnknown", "does not exist"),
    ("unrecognised-version", "latest", R("Enforce", RHCOS92, 10), "warn", "BootImageVersionUnknown", "latest"),
    # other family
    ("fcos-vs-rhel-target", "39.20240101.3.0", R("Enforce", RHCOS92, 9), "warn", "BootImageFamilyMismatch",
     "not RHCOS"),
    ("fcos-vs-rhel-target-warn", "39.20240101.3.0", R("Warn", rhel=10), "warn", "BootImageFamilyMismatch",
     "RHEL 10"),
    ("fcos-vs-rhcos-minimum", "39.20240101.3.0", R("Enforce", RHCOS92), "warn", "BootImageFamilyMismatch",
     "for RHCOS"),
    ("fcos-vs-ocp-minimum", "39.20240101.3.0", R("Enforce", OCP413), "warn", "BootImageFamilyMismatch",
     "cannot be compared"),
    ("fcos-no-target-no-minimum", "39.20240101.3.0", R("Enforce"), "ok", "BootImageOK", "meets"),
    ("fcos-image-only-target", "40.20240416.3.0", R("Enforce", image="quay.io/fedora/fedora-coreos:stable"),
     "ok", "BootImageOK", "meets"),
    # RHEL majors
    ("booted-major-above-target", "10.0.20250601-0", R("Enforce", rhel=9), "refuse", "BootImageMajorMismatch",
     "newer than the target RHEL 9"),
    ("booted-major-above-target-warn-mode", "10.0.20250601-0", R("Warn", rhel=9), "refuse",
     "BootImageMajorMismatch", "older RHEL major"),
    ("booted-major-above-allow-does-not-help", "10.0.20250601-0", R("Enforce", rhel=9, allow=True), "refuse",
     "BootImageMajorMismatch", "newer"),
    ("two-majors", "48.84.202109241901-0", R("Enforce", rhel=10), "refuse", "BootImageMajorMismatch",
     "2 majors below"),
    ("two-majors-allowed-still-refused", "48.84.202109241901-0", R("Warn", rhel=10, allow=True), "refuse",
     "BootImageMajorMismatch", "never allowed"),
    ("one-major-not-allowed", "9.6.20250121-0", R("Enforce", rhel=10), "refuse", "BootImageMajorMismatch",
     "allowMajorUpgrade"),
    ("one-major-not-allowed-warn-mode", "418.94.202501221327-0", R("Warn", rhel=10), "refuse",
     "BootImageMajorMismatch", "RHEL 9 to 10"),
    ("one-major-allowed", "9.6.20250121-0", R("Enforce", rhel=10, allow=True), "ok", "BootImageOK",
     "allowed by allowMajorUpgrade"),
    ("one-major-allowed-but-too-old", "48.84.202109241901-0", R("Enforce", RHCOS92, 9, allow=True), "refuse",
     "BootImageTooOld", "older than the minimum RHCOS 9.2"),
    ("same-major", "415.92.202311241643-0", R("Enforce", rhel=9), "ok", "BootImageOK", "meets"),
    ("no-target-major-skips-major-checks", "10.0.20250601-0", R("Enforce", RHCOS92), "ok", "BootImageOK",
     "at least"),
    # rhcosVersion X.Y: compares RHEL versions across schemes
    ("legacy-equal-rhel-minimum", "415.92.202311241643-0", R("Enforce", RHCOS92, 9), "ok", "BootImageOK",
     "at least the minimum RHCOS 9.2"),
    ("legacy-below-rhel-minimum-enforce", "412.86.202301311551-0", R("Enforce", RHCOS92), "refuse",
     "BootImageTooOld", "RHEL version"),
    ("legacy-below-rhel-minimum-warn", "412.86.202301311551-0", R("Warn", RHCOS92), "warn", "BootImageTooOld",
     "mode is Warn"),
    ("rhel-scheme-above-minimum", "9.6.20250121-0", R("Enforce", RHCOS92, 9), "ok", "BootImageOK", "at least"),
    ("rhel-minor-numeric", "9.9.20250121-0", R("Enforce", {"rhcosVersion": "9.10"}), "refuse",
     "BootImageTooOld", "9.10"),
    # rhcosVersion full: then by build date
    ("full-min-older-date", "9.2.20231231-0", R("Enforce", {"rhcosVersion": "9.2.20240101-0"}), "refuse",
     "BootImageTooOld", "build date"),
    ("full-min-newer-date", "9.2.20240102-0", R("Enforce", {"rhcosVersion": "9.2.20240101-0"}), "ok",
     "BootImageOK", "at least"),
    ("full-min-same-date-lower-serial", "9.2.20240101-0", R("Enforce", {"rhcosVersion": "9.2.20240101-1"}),
     "refuse", "BootImageTooOld", "build serial"),
    ("full-min-higher-rhel-wins-over-date", "9.4.20230101-0", R("Enforce", {"rhcosVersion": "9.2.20240101-0"}),
     "ok", "BootImageOK", "at least"),
    ("legacy-booted-vs-full-rhel-min-same-day", "415.92.202401011200-0",
     R("Enforce", {"rhcosVersion": "9.2.20240101-0"}), "ok", "BootImageOK", "at least"),
    ("legacy-booted-vs-full-rhel-min-day-before", "415.92.202312311200-0",
     R("Warn", {"rhcosVersion": "9.2.20240101-0"}), "warn", "BootImageTooOld", "build date"),
    ("legacy-min-build-time", "415.92.202311241200-0", R("Enforce", {"rhcosVersion": "415.92.202311241643-0"}),
     "refuse", "BootImageTooOld", "build time"),
    ("legacy-min-equal", "415.92.202311241643-0", R("Enforce", {"rhcosVersion": "415.92.202311241643-0"}),
     "ok", "BootImageOK", "at least"),
    # ocpVersion
    ("legacy-ocp-above", "415.92.202311241643-0", R("Enforce", OCP413), "ok", "BootImageOK",
     "OpenShift 4.13.0"),
    ("legacy-ocp-below", "412.86.202301311551-0", R("Enforce", OCP413), "refuse", "BootImageTooOld",
     "What to do: update the boot image to at least OpenShift 4.13.0"),
    ("legacy-ocp-below-warn", "48.84.202109241901-0", R("Warn", OCP413), "warn", "BootImageTooOld", "Warn"),
    ("legacy-ocp-numeric-minor", "49.84.202110081407-0", R("Enforce", {"ocpVersion": "4.10"}), "refuse",
     "BootImageTooOld", "4.10"),
    ("legacy-ocp-same-minor-x0", "413.92.202305021736-0", R("Enforce", OCP413), "ok", "BootImageOK", "at least"),
    ("legacy-ocp-same-minor-zstream", "413.92.202305021736-0", R("Enforce", {"ocpVersion": "4.13.5"}), "warn",
     "BootImageSkewUndecided", "z-stream"),
    ("rhel-scheme-satisfies-ocp-below-4.19", "9.6.20250121-0", R("Enforce", OCP413, 9), "ok", "BootImageOK",
     "at least"),
    ("rhel-scheme-satisfies-ocp-4.19", "9.6.20250121-0", R("Enforce", {"ocpVersion": "4.19"}), "ok",
     "BootImageOK", "at least"),
    ("rhel-scheme-ocp-4.19.3-undecided", "9.6.20250121-0", R("Enforce", {"ocpVersion": "4.19.3"}), "warn",
     "BootImageSkewUndecided", "cannot be told"),
    ("rhel-scheme-ocp-above-4.19-undecided", "9.6.20250121-0", R("Enforce", {"ocpVersion": "4.20.0"}), "warn",
     "BootImageSkewUndecided", "lack of information"),
    ("rhel10-ocp-5-undecided", "10.0.20250601-0", R("Enforce", {"ocpVersion": "5.0"}, 10), "warn",
     "BootImageSkewUndecided", "OpenShift 4.19 or later"),
    ("legacy-ocp5-minimum", "418.94.202501221327-0", R("Enforce", {"ocpVersion": "5.0.0"}), "refuse",
     "BootImageTooOld", "5.0.0"),
    # major check comes before the minimum check
    ("major-mismatch-and-too-old", "48.84.202109241901-0", R("Enforce", RHCOS92, 9), "refuse",
     "BootImageMajorMismatch", "RHEL 8"),
    ("empty-rules-mode-only", "415.92.202311241643-0", R("Warn"), "ok", "BootImageOK", "meets"),
]


@pytest.mark.parametrize("raw,rules,decision,code,words", [row[1:] for row in DECISIONS],
                         ids=[row[0] for row in DECISIONS])
def test_decision(raw, rules, decision, code, words):
    parsed = parse_rules(rules) if rules is not None else None
    out = decide(booted(raw), parsed)
    assert (out.decision, out.code) == (decision, code), out.reason
    assert words in out.reason
    assert out.reason.endswith(".")
    assert "\n" not in out.reason
    d = out.to_dict()
    assert d["decision"] == decision and d["reason"] == out.reason and d["code"] == code
    assert d["booted"]["scheme"] in ("rhcos-legacy", "rhcos", "fcos", "unknown")
    if decision == "refuse":
        assert out.refused and d["needed"]


def test_decision_lists_required_and_target():
    rules = parse_rules(R("Enforce", RHCOS92, 9, image="quay.io/ocp/rhcos@sha256:abc"))
    d = decide(booted("412.86.202301311551-0"), rules).to_dict()
    assert d["required"] == {"rhcosVersion": "9.2"}
    assert d["target"] == {"rhelMajor": 9, "osImageURL": "quay.io/ocp/rhcos@sha256:abc"}
    assert d["mode"] == "Enforce" and d["allowMajorUpgrade"] is False
    assert "quay.io/ocp/rhcos@sha256:abc" in d["reason"]


# ---------------------------------------------------------------------------------------------
# rules validation

VALID_RULES = [
    ("mode-only", {"mode": "None"}),
    ("full", {"mode": "Enforce", "minimum": {"rhcosVersion": "9.2.20240101-0"},
              "target": {"rhelMajor": 9, "osImageURL": "quay.io/x/y:z"}, "allowMajorUpgrade": True}),
    ("ocp", {"mode": "Warn", "minimum": {"ocpVersion": "4.13.0"}}),
    ("null-optionals", {"mode": "Warn", "minimum": None, "target": None, "allowMajorUpgrade": None}),
    ("target-image-only", {"mode": "Enforce", "target": {"osImageURL": "quay.io/x/y:z"}}),
]


@pytest.mark.parametrize("doc", [d for _, d in VALID_RULES], ids=[i for i, _ in VALID_RULES])
def test_valid_rules(doc):
    rules = parse_rules(doc, source="rules.json")
    assert rules.mode == doc["mode"]


INVALID_RULES = [
    ("not-object", ["Enforce"], "$", "must be an object"),
    ("empty", None, "$", "empty"),
    ("machineconfiguration", {"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
                              "spec": {}}, "$", "Kubernetes object"),
    ("mode-missing", {}, "$.mode", "required"),
    ("mode-case", {"mode": "enforce"}, "$.mode", "case matters"),
    ("mode-manual", {"mode": "Manual"}, "$.mode", "Manual/Automatic"),
    ("mode-bool", {"mode": False}, "$.mode", "must be one of"),
    ("unknown-top", {"mode": "Warn", "minimun": {}}, "$.minimun", "unknown field"),
    ("minimum-not-object", {"mode": "Warn", "minimum": "9.2"}, "$.minimum", "must be an object"),
    ("minimum-empty", {"mode": "Warn", "minimum": {}}, "$.minimum", "exactly one"),
    ("minimum-both", {"mode": "Warn", "minimum": {"rhcosVersion": "9.2", "ocpVersion": "4.13.0"}},
     "$.minimum", "exactly one"),
    ("minimum-unknown", {"mode": "Warn", "minimum": {"rhcosVersion": "9.2", "rhel": "9"}},
     "$.minimum.rhel", "unknown field"),
    ("rhcos-garbage", {"mode": "Warn", "minimum": {"rhcosVersion": "nine"}}, "$.minimum.rhcosVersion",
     "'nine'"),
    ("rhcos-float", {"mode": "Warn", "minimum": {"rhcosVersion": 9.2}}, "$.minimum.rhcosVersion",
     "quoted"),
    ("rhcos-ocp-mixup", {"mode": "Warn", "minimum": {"rhcosVersion": "4.13"}}, "$.minimum.rhcosVersion",
     "ocpVersion"),
    ("ocp-garbage", {"mode": "Warn", "minimum": {"ocpVersion": "4.x"}}, "$.minimum.ocpVersion", "'4.x'"),
    ("ocp-rhel-mixup", {"mode": "Warn", "minimum": {"ocpVersion": "9.2"}}, "$.minimum.ocpVersion",
     "rhcosVersion"),
    ("target-not-object", {"mode": "Warn", "target": 9}, "$.target", "must be an object"),
    ("target-unknown", {"mode": "Warn", "target": {"rhel": 9}}, "$.target.rhel", "unknown field"),
    ("rhel-major-string", {"mode": "Warn", "target": {"rhelMajor": "9"}}, "$.target.rhelMajor", "integer"),
    ("rhel-major-bool", {"mode": "Warn", "target": {"rhelMajor": True}}, "$.target.rhelMajor", "integer"),
    ("rhel-major-small", {"mode": "Warn", "target": {"rhelMajor": 7}}, "$.target.rhelMajor", "8 or more"),
    ("image-empty", {"mode": "Warn", "target": {"osImageURL": ""}}, "$.target.osImageURL", "non-empty"),
    ("image-space", {"mode": "Warn", "target": {"osImageURL": "quay.io/a b"}}, "$.target.osImageURL",
     "without spaces"),
    ("allow-string", {"mode": "Warn", "allowMajorUpgrade": "yes"}, "$.allowMajorUpgrade", "true or false"),
]


@pytest.mark.parametrize("doc,path,fragment", [row[1:] for row in INVALID_RULES],
                         ids=[row[0] for row in INVALID_RULES])
def test_invalid_rules_name_the_field(doc, path, fragment):
    with pytest.raises(ConfigError) as info:
        parse_rules(doc, source="skew.json")
    err = info.value
    assert err.exit_code == 65
    hits = [p for p in err.problems if p.path == path]
    assert hits, [str(p) for p in err.problems]
    assert any(fragment in str(p) for p in hits), [str(p) for p in hits]
    assert any(line.startswith(path + ":") for line in str(err).splitlines()[1:])
    assert "skew.json" in str(err)


def test_all_problems_reported_at_once():
    with pytest.raises(ConfigError) as info:
        parse_rules({"mode": "x", "minimum": {"ocpVersion": "a"}, "target": {"rhelMajor": "9"}, "y": 1})
    assert {p.path for p in info.value.problems} == {
        "$.mode", "$.minimum.ocpVersion", "$.target.rhelMajor", "$.y"}


# ---------------------------------------------------------------------------------------------
# rules text: JSON or YAML, fractions kept as text


@pytest.mark.parametrize("text,expected", [
    ('{"mode": "Warn", "minimum": {"rhcosVersion": "9.10"}}', "9.10"),
    ('{"mode": "Warn", "minimum": {"rhcosVersion": 9.10}}', "9.10"),
    ("mode: Warn\nminimum:\n  rhcosVersion: 9.10\n", "9.10"),
    ("mode: Warn\nminimum:\n  rhcosVersion: '9.2.20240101-0'\n", "9.2.20240101-0"),
    ("mode: Warn\nminimum:\n  rhcosVersion: 9.2.20240101-0\n", "9.2.20240101-0"),
], ids=["json-string", "json-number", "yaml-number", "yaml-quoted", "yaml-plain"])
def test_rules_text_keeps_version_text(text, expected):
    assert parse_rules(load_rules_text(text)).minimum_rhcos.raw == expected


def test_yaml_mode_none_is_the_string_none():
    assert parse_rules(load_rules_text("mode: None\n")).mode == "None"


def test_rules_text_neither_json_nor_yaml():
    with pytest.raises(ConfigError, match="neither JSON nor YAML at line"):
        load_rules_text("mode: [Warn\n", source="r.yaml")


# ---------------------------------------------------------------------------------------------
# aleph contents

ALEPH = [
    ("version", {"version": "9.6.20250121-0", "build": "415.92.202311241643-0", "ref": "x"}, "9.6.20250121-0",
     "rhcos"),
    ("build-fallback", {"build": "415.92.202311241643-0", "ref": "rhcos/x86_64", "ostree-commit": "ab",
                        "imgid": "rhcos-415.92.202311241643-0-qemu.x86_64.qcow2"},
     "415.92.202311241643-0", "rhcos-legacy"),
    ("empty-version-uses-build", {"version": "", "build": "39.20240101.3.0"}, "39.20240101.3.0", "fcos"),
    ("garbage-version", {"version": "dev-build"}, "dev-build", "unknown"),
    ("neither", {"ref": "x"}, None, "unknown"),
    ("not-object", ["9.6.20250121-0"], None, "unknown"),
    ("version-not-string", {"version": 9.6}, None, "unknown"),
]


@pytest.mark.parametrize("doc,raw,scheme", [row[1:] for row in ALEPH], ids=[row[0] for row in ALEPH])
def test_booted_from_aleph(doc, raw, scheme):
    b = booted_from_aleph(json.dumps(doc).encode(), "aleph.json")
    assert b.raw == raw
    assert b.to_dict()["scheme"] == scheme
    assert b.known == (scheme != "unknown")
    if not b.known:
        assert b.error and b.to_dict()["error"] == b.error


@pytest.mark.parametrize("data", [b"", b"{", b"\xff\xfe", b"null"], ids=["empty", "truncated", "binary", "null"])
def test_booted_from_corrupt_aleph_is_unknown(data):
    b = booted_from_aleph(data, "aleph.json")
    assert not b.known and "aleph.json" in b.error


@pytest.mark.parametrize("raw,rules", [
    ("10.0.20250601-0", R("Enforce", None, 9)),  # newer major than the target
    ("9.6.20250121-0", R("Enforce", None, 11)),  # two majors below
    ("9.6.20250121-0", R("Enforce", None, 10)),  # one below, allowMajorUpgrade false
    ("412.86.202301311551-0", R("Enforce", OCP413)),  # older than the minimum
], ids=["newer-major", "two-majors-below", "one-below-not-allowed", "too-old"])
def test_every_refusal_gives_the_one_remedy_the_agent_console_and_server_give(raw, rules):
    from agent.core.skew import WHAT_TO_DO, parse_rules, remedy
    from agent.node.skewcheck import refusal_facts, refusal_fix

    rules = parse_rules(rules)
    out = decide(booted(raw), rules)
    assert out.decision == "refuse", out.reason
    assert out.reason.endswith(WHAT_TO_DO + remedy(out.code, rules) + ".")
    assert refusal_fix(out) == remedy(out.code, rules) and WHAT_TO_DO not in refusal_facts(out)
    assert out.reason.count("What to do") == 1 and "set allowMajorUpgrade" not in out.reason
