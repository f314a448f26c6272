"""Every parser and validator of untrusted input ends, fast, on any input (issue 28).

Hostile inputs, generated: random JSON-shaped documents (``st.recursive``), random bytes and
text, YAML with odd tags, and documents mutated from a valid example (deep nesting, huge
numbers, odd strings for paths and URLs, relative paths, link cycles, many links, duplicate
entries, a wrong type at any level). Each call must use at most ``LIMIT`` CPU seconds, and
``PER_BYTE`` more a byte of a text or bytes input (the CPU time of the thread it runs in, so that
the bound holds under any load and a hang fails the test instead of blocking the run) and raise nothing but what its callers handle: ``ConfigError`` for
the node's parsers, nothing at all for the validators that return findings (``Problem``s).
"""

import copy
import json
import os
import tempfile
import threading
import time
from typing import Any, Callable, Tuple, Type

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.core import nodedisruption, skewrules
from agent.core.loadconfig import check_node_config, load_node_config
from agent.core.nodeconfig import NodeConfig
from agent.core.settings import Settings, parse_settings_file
from agent.errors import ConfigError, Problem
from agent.ignition.parse import parse_document
from agent.ignition.validate import validate_ignition
from agent.server.store import objects, statefiles

LIMIT = 1.0  # CPU seconds of the parsing thread, per input: the work bounded, whatever the load
# and, for a text or bytes input, this much more a byte: a parser's work may grow with its input,
# linearly (PyYAML's pure-Python constructor reads about 400 kB a CPU-second here; a blow-up, an
# alias bomb or a quadratic path, takes far more). A generated state file of some hundred kB was
# refused at 1.005 s with four pytest workers on two cores and passed when hypothesis ran it again:
# a thread's CPU time for the same work grows with the contention for the caches.
PER_BYTE = 1e-5
HANG = 60.0  # wall seconds after which a call that has not returned is a hang
CHECK = settings(max_examples=200, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FEW = settings(max_examples=120, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def bounded(fn: Callable, *args: Any, allowed: Tuple[Type[BaseException], ...] = ()) -> Any:
    """fn(*args) within LIMIT CPU seconds, raising only ``allowed``: its result, or None when it
    raised an allowed error. Anything else fails the test (a hang too, without blocking).

    The bound is on the CPU time of the thread that parses (time.thread_time), not the wall
    clock: on a loaded 2-core machine (make test runs several workers) a 5 ms call can wait half a
    second for a core, but it cannot do more work than it does."""
    box = _timed(fn, args)
    assert "hung" not in box, f"{fn.__name__} did not return within {HANG:g} s: a hang"
    limit = LIMIT + PER_BYTE * sum(len(a) for a in args if isinstance(a, (bytes, str)))
    assert box["elapsed"] < limit, f"{fn.__name__} used {box['elapsed']:.2f} CPU s (bound {limit:.2f} s)"
    error = box.get("error")
    if error is not None:
        if not isinstance(error, allowed):
            raise AssertionError(f"{fn.__name__} raised {type(error).__name__}: {error!r:.300}") from error
        return None
    return box.get("result")


def _timed(fn: Callable, args: tuple) -> dict:
    """fn(*args) in a thread: {"result" or "error", "elapsed"} (the thread's CPU seconds for the
    call), or {"hung": True} when it has not returned after HANG wall seconds."""
    box: dict = {}

    def run() -> None:
        start = time.thread_time()
        try:
            box["result"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - judged below, in the test's thread
            box["error"] = exc
        box["elapsed"] = time.thread_time() - start

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(HANG)
    if worker.is_alive():
        return {"hung": True}
    return box


def problems_only(found: Any) -> None:
    assert isinstance(found, list) and all(isinstance(p, Problem) for p in found), found
    for p in found:
        str(p)  # a finding can always be shown
        p.to_dict()


# -- hostile values ---------------------------------------------------------------------------

ODD_STRINGS = [
    "", "/", "//", "///", "/a/", "/a//b", "/a/./b", "/a/../b", "..", ".", "usr/local/bin/x", "usr", "a/",
    "/usr/local/bin/x", "/etc/x", "/a", "/b", "/a/b", "/a/b/c", "\x00", "/a\x00b", "/a\nb", " /a", "/a ",
    "\ud800", "\U0001f600", "é", "K", "\u212a", "ſ", "data:,x", "data:;base64,!!", "data:", "data:,%zz",
    "http://[::1", "http://h:port/x", "http://h:99999", "https://u@h/x?y#z", "s3://b/k?versionId=",
    "arn:aws:s3:::b/k", "arn:", "gs://b/o", "tftp://h/f", "oem:///x", "file:///etc/x", ":x", "%", "%%",
    "sha512-" + "a" * 128, "sha256-", "sha1-x", "-", "[Unit]\nA=b\n[Install]\nWantedBy=x\n", "[", "[Unit",
    "a.service", "a@.service", "crio.service", "x" * 3000, "/" * 2000, "a/" * 500, "1" * 5000, "9.10",
    "4.13.0", "9.2.20240101-0", "Enforce", "Warn", "None", "Manual", "Reboot", "Reload", "Special",
    "3.0.0", "3.4.0", "3.5.0", "3.6.0", "3.7.0-experimental", "2.2.0", "2.3.0", "1.0.0", "3.4", "3.4.0.0",
    "machineconfiguration.openshift.io/v1", "MachineConfig", "MachineConfiguration", "List",
]
HUGE_INTS = [0, -1, 1, 420, 0o7777, 0o10000, 2 ** 31, 2 ** 63 - 1, 2 ** 63, -(2 ** 63) - 1, 10 ** 30,
             10 ** 400, -(10 ** 400)]
# No subnormals: some EL9 extension modules are built with -ffast-math, which flushes them to
# zero for the whole process, and hypothesis then refuses to draw them (FloatingPointError).
FLOATS = st.floats(allow_subnormal=False) | st.sampled_from([1e308, -1e308, float("inf"), float("-inf"), 0.5, 9.1])
SCALARS = (st.none() | st.booleans() | st.integers() | st.sampled_from(HUGE_INTS) | FLOATS
           | st.text(max_size=20) | st.sampled_from(ODD_STRINGS))
# Keys: the config formats' own field names (so documents reach the rules), or anything
KEYS = st.sampled_from([
    "ignition", "version", "config", "merge", "replace", "source", "verification", "hash", "timeouts",
    "security", "tls", "certificateAuthorities", "proxy", "httpProxy", "httpsProxy", "noProxy", "storage",
    "files", "directories", "links", "path", "target", "hard", "mode", "overwrite", "contents", "append",
    "compression", "httpHeaders", "name", "value", "user", "group", "id", "disks", "device", "partitions",
    "number", "label", "startMiB", "sizeMiB", "typeGuid", "guid", "shouldExist", "wipeTable", "raid",
    "level", "devices", "spares", "filesystems", "format", "wipeFilesystem", "options", "mountOptions",
    "uuid", "luks", "keyFile", "clevis", "tang", "url", "thumbprint", "advertisement", "tpm2", "threshold",
    "custom", "pin", "needsNetwork", "systemd", "units", "enabled", "mask", "dropins", "passwd", "users",
    "groups", "passwordHash", "sshAuthorizedKeys", "homeDir", "kernelArguments", "shouldNotExist",
    "Path", "PATH", "kind", "apiVersion", "metadata", "spec", "labels", "osImageURL", "kernelType",
    "extensions", "fips", "minimum", "rhcosVersion", "ocpVersion", "rhelMajor", "allowMajorUpgrade",
    "nodeDisruptionPolicy", "sshkey", "actions", "type", "reload", "restart", "serviceName", "nodeName",
    "stateDir", "fetch", "totalTimeout", "attemptTimeout", "initialDelay", "maxDelay", "maxRetryAfter",
    "report", "tokenFile", "retryInterval", "update", "interval", "drainTimeout", "items",
    "machineConfigSelector", "nodeSelector", "matchLabels", "matchExpressions", "operator", "key",
    "paused", "maxUnavailable", "bootImageSkewEnforcement", "manual", "machineConfigPool",
]) | st.text(max_size=10) | st.integers(-3, 3) | st.booleans() | st.none()  # YAML keys need not be text
JSON_DOCS = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=6)
                         | st.dictionaries(KEYS, inner, max_size=6), max_leaves=40)


def nested(depth: int, leaf: Any = 1) -> Any:
    doc = leaf
    for i in range(depth):
        doc = [doc] if i % 2 else {"a": doc}
    return doc


@st.composite
def mutated(draw, base: Any) -> Any:
    """``base`` with a few subtrees replaced, removed, duplicated or wrapped."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 4))):
        slots: list = []
        _slots(doc, slots)
        if not slots:
            return doc
        holder, key = draw(st.sampled_from(slots))
        action = draw(st.sampled_from(["replace", "replace", "odd", "delete", "duplicate", "wrap", "deep"]))
        if action == "replace":
            holder[key] = draw(JSON_DOCS)
        elif action == "odd":
            holder[key] = draw(st.sampled_from(ODD_STRINGS) | st.sampled_from(HUGE_INTS))
        elif action == "delete":
            del holder[key]
        elif action == "duplicate" and isinstance(holder, list):
            holder.extend([copy.deepcopy(holder[key])] * draw(st.integers(1, 50)))
        elif action == "wrap":
            holder[key] = draw(st.sampled_from([[holder[key]], {"x": holder[key]}, None]))
        else:
            holder[key] = nested(draw(st.integers(50, 250)), holder[key])
    return doc


def _slots(doc: Any, out: list) -> None:
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.append((doc, k))
            _slots(v, out)
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.append((doc, i))
            _slots(v, out)


TOO_DEEP = b"[" * 500 + b"]" * 500  # what a document too deep to write out becomes


def as_json(doc: Any) -> bytes:
    try:
        return json.dumps(doc, allow_nan=True).encode("utf-8", "surrogatepass")
    except (RecursionError, ValueError):
        return TOO_DEEP


def as_yaml(doc: Any) -> bytes:
    try:
        return yaml.safe_dump(doc, allow_unicode=True).encode("utf-8", "surrogatepass")
    except (RecursionError, ValueError):
        return TOO_DEEP


# YAML that PyYAML's safe constructors choke on, and other odd streams
ODD_YAML = [
    "2001-13-45", "x: 2001-02-30", "!!int abc", "!!float abc", "!!timestamp abc", "!!bool abc", "!!null x",
    "!!binary é", "!!set [1]", "!!omap 5", "!!omap [1]", "!!pairs x", "<<: 5", "a: {<<: [1]}", "!!str [1]",
    "? [a]\n: b", "? {a: b}\n: c", "&a [*a]", "&a {x: *a}", "*nope", "!!python/object:os.system x",
    "!x y", "%YAML 1.1\n---\nx", "%YAML 9.9\n--- x", "--- a\n--- b", "---\n...\n", "x: " + "1" * 5000,
    "x: 0x" + "f" * 5000, "x: 1e99999", "x: .nan", "{" * 3000, "[" * 3000, "- " * 3000 + "x",
    "a: &a [1, 2]\nb: &b [*a, *a, *a]\nc: &c [*b, *b, *b]\nd: [*c, *c, *c]",
    "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}' if i else 'x'] * 9)}]\n" for i in range(9)),  # laughs "\t x", "'unterminated",
    "\"\\x\"", "x: \"\\ud800\"", "\ufeff{}", "{\"a\": 1,}", "[1, 2", "{\"ignition\": {\"version\": \"3.4.0\"}} x",
]
YAMLISH = st.sampled_from(ODD_YAML) | st.builds(lambda a, b: a + "\n" + b, st.sampled_from(ODD_YAML),
                                                 st.sampled_from(ODD_YAML))


def text_inputs(*examples: Any) -> st.SearchStrategy:
    """Text: random, odd YAML, or JSON/YAML dumps of random and mutated documents."""
    docs = JSON_DOCS
    for ex in examples:
        docs = docs | mutated(ex)
    return (st.text(max_size=200) | YAMLISH | docs.map(lambda d: as_json(d).decode("utf-8", "surrogatepass"))
            | docs.map(lambda d: as_yaml(d).decode("utf-8", "surrogatepass")))


def byte_inputs(*examples: Any) -> st.SearchStrategy:
    return (st.binary(max_size=300) | text_inputs(*examples).map(lambda t: t.encode("utf-8", "surrogatepass"))
            | st.sampled_from([b"", b"\xff\xfe{}", b"\xef\xbb\xbf{}", b"{\xff}", b"[" * 5000, b"{\"a\":" * 2000,
                               b"{\"a\": " + b"1" * 5000 + b"}", b"\x00", b"  \n\t"]))


# -- Ignition: storage built from odd paths (relative ones, link cycles, many links, duplicates) --

PATHS = st.sampled_from(ODD_STRINGS[:40]) | st.text(alphabet="/a.b", max_size=12)


@st.composite
def storages(draw) -> dict:
    def nodes(extra: dict) -> list:
        return [dict(extra, path=draw(PATHS)) for _ in range(draw(st.integers(0, 6)))]

    links = [{"path": draw(PATHS), "target": draw(PATHS), "hard": draw(st.booleans())}
             for _ in range(draw(st.integers(0, 6)))]
    if draw(st.booleans()):  # a cycle /a -> /b -> /a, and links through links
        links += [{"path": "/a", "target": "/b"}, {"path": "/b", "target": "/a"},
                  {"path": "/a/b", "target": "../a", "hard": True}]
    if draw(st.booleans()):  # many links, and many nodes under them
        n = draw(st.integers(10, 400))
        links += [{"path": f"/l/{i}", "target": f"/l/{i + 1}"} for i in range(n)]
        links += [{"path": "/l", "target": "/"}] * draw(st.integers(0, 20))
    return {"files": nodes({"contents": {"source": draw(st.sampled_from(ODD_STRINGS))}}),
            "directories": nodes({"mode": draw(st.sampled_from(HUGE_INTS))}), "links": links}


IGNITION = {
    "ignition": {"version": "3.4.0", "config": {"merge": [{"source": "https://h/a"}]},
                 "security": {"tls": {"certificateAuthorities": [{"source": "data:,x"}]}},
                 "proxy": {"httpProxy": "http://p:3128", "noProxy": ["a"]}},
    "storage": {
        "files": [{"path": "/etc/a", "mode": 420, "contents": {"source": "data:,x", "compression": "",
                                                                "verification": {"hash": "sha512-" + "a" * 128}},
                   "append": [{"source": "https://h/b", "httpHeaders": [{"name": "A", "value": "b"}]}],
                   "user": {"name": "core"}}],
        "directories": [{"path": "/etc/d", "mode": 493}],
        "links": [{"path": "/etc/l", "target": "/etc/a"}, {"path": "/etc/h", "target": "a", "hard": True}],
        "disks": [{"device": "/dev/vda", "wipeTable": True,
                   "partitions": [{"number": 1, "label": "p", "startMiB": 1, "sizeMiB": 10,
                                   "typeGuid": "0FC63DAF-8483-4772-8E79-3D69D8477DE4"}]}],
        "raid": [{"name": "md0", "level": "raid1", "devices": ["/dev/vdb", "/dev/vdc"]}],
        "filesystems": [{"device": "/dev/md/md0", "format": "xfs", "path": "/var", "label": "var"}],
        "luks": [{"name": "l", "device": "/dev/vdd", "keyFile": {"source": "data:,k"},
                  "clevis": {"tang": [{"url": "http://t", "thumbprint": "x", "advertisement": "{}"}],
                             "custom": {"pin": "", "config": ""}}}],
    },
    "systemd": {"units": [{"name": "a.service", "enabled": True,
                           "contents": "[Unit]\nDescription=a\n[Service]\nExecStart=/bin/true\n"
                                       "[Install]\nWantedBy=multi-user.target\n",
                           "dropins": [{"name": "x.conf", "contents": "[Service]\nA=b\n"}]}]},
    "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA"], "homeDir": "/home/core"}],
               "groups": [{"name": "g"}]},
    "kernelArguments": {"shouldExist": ["a=b"], "shouldNotExist": ["c"]},
}
MACHINECONFIG = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
                 "metadata": {"name": "99-x", "labels": {"machineconfiguration.openshift.io/role": "worker"}},
                 "spec": {"config": IGNITION, "osImageURL": "quay.io/x@sha256:" + "a" * 64,
                          "kernelArguments": ["a=b"], "kernelType": "default", "extensions": ["usbguard"],
                          "fips": False}}
SPEC2 = {"ignition": {"version": "2.2.0", "config": {"append": [{"source": "https://h/a", "verification": {}}]},
                       "security": {"tls": {"certificateAuthorities": [{"source": "data:,x"}]}}, "timeouts": {}},
         "storage": {"files": [{"filesystem": "root", "path": "/etc/a", "contents": {"source": "data:,x"},
                                "mode": 420, "user": {"id": 0}, "group": {"name": "g"}},
                               {"filesystem": "root", "path": "/etc/a", "append": True, "contents": {}}],
                     "directories": [{"filesystem": "root", "path": "/etc/d", "mode": 493}],
                     "links": [{"filesystem": "root", "path": "/etc/l", "target": "/etc/a"}],
                     "disks": [{"device": "/dev/vda", "partitions": [{"number": 1, "sizeMiB": 10}]}],
                     "raid": [{"name": "md", "level": "raid1", "devices": ["/dev/vdb"], "options": ["x"]}]},
         "systemd": {"units": [{"name": "a.service", "enabled": True, "contents": "[Service]\n",
                                "dropins": [{"name": "x.conf", "contents": "[Service]\n"}]},
                               {"name": "a.service", "dropins": [{"name": "y.conf"}]}]},
         "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 A"], "groups": ["wheel"]}]}}
MACHINECONFIG2 = dict(MACHINECONFIG, spec=dict(MACHINECONFIG["spec"], config=SPEC2))


def ignition_docs() -> st.SearchStrategy:
    return (JSON_DOCS | mutated(IGNITION) | mutated(MACHINECONFIG) | mutated(MACHINECONFIG2)
            | storages().map(lambda s: dict(IGNITION, storage=s))
            | st.builds(lambda v, s: {"ignition": {"version": v}, "storage": s},
                        st.sampled_from(["3.0.0", "3.2.0", "3.4.0", "3.5.0", "3.6.0", "3.7.0-experimental"]),
                        storages()))


@CHECK
@given(ignition_docs())
def test_validate_ignition_returns_findings_for_any_document(doc):
    problems_only(bounded(validate_ignition, doc))


@CHECK
@given(byte_inputs(IGNITION, MACHINECONFIG))
def test_parse_document_gives_a_document_or_a_config_error(data):
    bounded(parse_document, data, "x.ign", allowed=(ConfigError,))


@CHECK
@given(ignition_docs().map(as_json) | byte_inputs(IGNITION, MACHINECONFIG, MACHINECONFIG2)
       | ignition_docs().map(as_yaml))
def test_load_node_config_gives_a_node_config_or_a_config_error(data):
    nc = bounded(load_node_config, data, "x.ign", allowed=(ConfigError,))
    assert nc is None or isinstance(nc, NodeConfig)
    if nc is not None:  # what it accepted, it can write out again (the served and hashed form)
        json.dumps(nc.ignition)


@FEW
@given(ignition_docs().map(lambda d: d if isinstance(d, dict) else {"ignition": d}))
def test_check_node_config_takes_a_document_too(doc):
    nc, problems = bounded(check_node_config, doc, "x.ign", allowed=(ConfigError,)) or (None, [])
    problems_only(problems)


def test_deep_and_huge_documents_end():
    for data in (b"[" * 100000, b"{\"a\":" * 100000, b"{\"ignition\": {\"version\": \"3.4.0\"}, \"x\": "
                 + b"[" * 900 + b"]" * 900 + b"}", b"{\"ignition\": {\"version\": \"3.4.0\"}, \"x\": "
                 + b"1" * 100000 + b"}", as_json(dict(IGNITION, x=nested(400))),
                 as_yaml(dict(MACHINECONFIG, x=nested(200))), b"kind: MachineConfig\nspec: " + b"[" * 5000):
        bounded(load_node_config, data, "x.ign", allowed=(ConfigError,))
    many = {"ignition": {"version": "3.4.0"}, "storage": {
        "files": [{"path": f"/l/{i}/f"} for i in range(5000)],
        "links": [{"path": f"/l/{i}", "target": "/t"} for i in range(5000)] + [{"path": "/l", "target": "/"}] * 100}}
    problems_only(bounded(validate_ignition, many))


# -- skew rules, disruption policy, settings ---------------------------------------------------

SKEW = {"mode": "Enforce", "minimum": {"rhcosVersion": "9.2.20240101-0"},
        "target": {"rhelMajor": 9, "osImageURL": "quay.io/x@sha256:" + "a" * 64}, "allowMajorUpgrade": False}
SKEW_DOCS = JSON_DOCS | mutated(SKEW) | mutated(dict(SKEW, minimum={"ocpVersion": "4.13.0"}))


@CHECK
@given(text_inputs(SKEW))
def test_skew_rules_text_parses_or_is_a_config_error(text):
    doc = bounded(skewrules.load_rules_text, text, "rules.json", allowed=(ConfigError,))
    bounded(skewrules.parse_rules, doc, "rules.json", allowed=(ConfigError,))


@CHECK
@given(SKEW_DOCS)
def test_skew_rules_documents_are_rules_or_a_config_error(doc):
    rules = bounded(skewrules.parse_rules, doc, "rules.json", allowed=(ConfigError,))
    assert rules is None or isinstance(rules, skewrules.SkewRules)


POLICY = {"files": [{"path": "/etc/a", "actions": [{"type": "Restart", "restart": {"serviceName": "a.service"}}]},
                    {"path": "/etc/b/", "actions": [{"type": "Reload", "reload": {"serviceName": "b.socket"}},
                                                    {"type": "DaemonReload"}]}],
          "units": [{"name": "c.service", "actions": [{"type": "Drain"}, {"type": "Reboot"}]}],
          "sshkey": {"actions": [{"type": "None"}]}}
MACHINECONFIGURATION = {"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
                        "metadata": {"name": "cluster"}, "spec": {"nodeDisruptionPolicy": POLICY}}


def _policy_lookups(policy: nodedisruption.Policy, paths: list) -> None:
    for path in paths:
        policy.file_entry(path)
        policy.unit_entry(path)
    nodedisruption.effective_policy(policy)


@CHECK
@given(text_inputs(POLICY, MACHINECONFIGURATION) | byte_inputs(MACHINECONFIGURATION))
def test_policy_text_is_a_policy_or_a_config_error(text):
    bounded(nodedisruption.load_policy_text, text, "policy.yaml", allowed=(ConfigError,))


@CHECK
@given(JSON_DOCS | mutated(POLICY) | mutated(MACHINECONFIGURATION), st.lists(PATHS, max_size=5))
def test_policy_documents_are_a_policy_or_a_config_error(doc, paths):
    policy = bounded(nodedisruption.policy_from_document, doc, "policy.yaml", allowed=(ConfigError,))
    bounded(nodedisruption.parse_policy, doc, allowed=(ConfigError,))
    if policy is not None:
        bounded(_policy_lookups, policy, paths)


SETTINGS = {"nodeName": "worker-0", "stateDir": "/var/lib/node-agent",
            "fetch": {"totalTimeout": 0, "attemptTimeout": 10, "initialDelay": 0.2, "maxDelay": 5,
                      "maxRetryAfter": 60},
            "report": {"tokenFile": "/etc/t", "retryInterval": 30}, "update": {"interval": 60, "drainTimeout": 600},
            "proxy": {"httpProxy": "http://p:3128", "httpsProxy": "https://p", "noProxy": [".x", "10.0.0.0/8"]}}


@CHECK
@given(byte_inputs(SETTINGS) | mutated(SETTINGS).map(as_yaml))
def test_settings_file_is_settings_or_a_config_error(raw):
    found = bounded(parse_settings_file, raw, "/etc/node-agent/agent.yaml", allowed=(ConfigError,))
    assert found is None or isinstance(found, Settings)


# -- the server's state files and objects -----------------------------------------------------

POOL = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
        "metadata": {"name": "worker"},
        "spec": {"machineConfigSelector": {"matchLabels": {"machineconfiguration.openshift.io/role": "worker"}},
                 "nodeSelector": {"matchExpressions": [{"key": "a", "operator": "In", "values": ["b"]}]},
                 "paused": False, "maxUnavailable": "10%"}}
CLUSTER = dict(MACHINECONFIGURATION, spec=dict(MACHINECONFIGURATION["spec"], bootImageSkewEnforcement={
    "mode": "Manual", "manual": {"mode": "OCPVersion", "ocpVersion": "4.13.0"}}))
OS_CONFIG = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineOSConfig",
             "metadata": {"name": "worker"}, "spec": {"machineConfigPool": {"name": "worker"}}}
STATE_OBJECTS = [POOL, MACHINECONFIG, MACHINECONFIG2, CLUSTER, OS_CONFIG]


@CHECK
@given(byte_inputs(*STATE_OBJECTS) | st.lists(st.sampled_from(STATE_OBJECTS), max_size=3).map(
    lambda docs: yaml.safe_dump_all(docs).encode()))
def test_state_files_load_or_are_refused_with_a_yaml_error(data):
    docs = bounded(statefiles.load_yaml_docs, data, allowed=(yaml.YAMLError, UnicodeDecodeError))
    assert docs is None or isinstance(docs, list)


@FEW
@given(byte_inputs(*STATE_OBJECTS))
def test_a_state_file_gives_objects_or_findings_never_an_error(data):
    with tempfile.TemporaryDirectory() as state_dir:
        path = os.path.join(state_dir, "x.yaml")
        with open(path, "wb") as f:
            f.write(data)
        found: list = []
        bounded(statefiles.read_docs, path, "x.yaml", state_dir, found)
        problems_only(found)


# Inputs that crashed the state-object checks before issue 28's fixes: each must now give findings.
KNOWN_OBJECT_CRASHES = [
    # objects.py check_machine_config: (doc.get("metadata") or {}).get("labels") on a list
    ("check_machine_config", {"metadata": ["x"]}),
    # objects.py _check_selector: enumerate(sel.get("matchExpressions") or []) on a number
    ("check_pool", {"metadata": {"name": "w"}, "spec": {"nodeSelector": {"matchExpressions": 5}}}),
    # rollout/skewpolicy.py check: sorted() of keys of mixed types
    ("check_cluster", {"spec": {"bootImageSkewEnforcement": {"mode": "None", 1: 2, "x": 3}}}),
    # rollout/skewpolicy.py check: manual.mode looked up in a dict while unhashable
    ("check_cluster", {"spec": {"bootImageSkewEnforcement": {"mode": "Manual", "manual": {"mode": []}}}}),
]


@pytest.mark.parametrize("check,doc", KNOWN_OBJECT_CRASHES)
def test_state_objects_that_crashed_are_findings(check, doc):
    problems_only(bounded(getattr(objects, check), doc, "x.yaml"))


@CHECK
@given(JSON_DOCS | st.one_of(*(mutated(o) for o in STATE_OBJECTS)))
def test_state_object_checks_return_findings(doc):
    if not isinstance(doc, dict):
        doc = {"spec": doc}
    for check in (objects.check_pool, objects.check_machine_config, objects.check_cluster,
                  objects.check_os_config):
        problems_only(bounded(check, doc, "x.yaml"))
    problems_only(bounded(objects.check_api_version, doc, "MachineConfig", "x.yaml"))


# -- what these tests found, pinned (each crashed or hung before issue 28's fixes) -------------

SPEC2_MC = b"kind: MachineConfig\nspec:\n  config:\n    ignition: {version: 2.2.0}\n"
FOUND = [
    (parse_document, b"\x00", ConfigError),  # PyYAML's reader refused it before the try
    (parse_document, b"kind: MachineConfig\nx: 2001-13-45\n", ConfigError),  # datetime's ValueError
    (parse_document, b"x: !!bool maybe\n", ConfigError),  # KeyError
    (parse_document, b"x: !!timestamp x\n", ConfigError),  # AttributeError
    (parse_document, b"{\"a\": " + b"1" * 5000 + b"}", ConfigError),  # int_max_str_digits (3.11+)
    (parse_document, b"x: " + b"1" * 5000, ConfigError),
    (parse_document, b"{" * 3000, ConfigError),  # the pure-Python scanner's quadratic time
    (parse_document, b"x: &a [*a]", ConfigError),  # a self-containing document
    (load_node_config, b"{\"ignition\": {\"version\": \"3.4.0\"}, \"x\": " + b"[" * 900 + b"]" * 900 + b"}",
     ConfigError),  # deepcopy's RecursionError
    (load_node_config, b"kind: MachineConfig\nspec: {config: {1: x, ignition: {version: 3.2.0}}}", None),
    (load_node_config, SPEC2_MC + b"    systemd: {units: [{name: [a]}, {name: [a]}]}\n", ConfigError),
    (load_node_config, SPEC2_MC + b"    systemd: {units: [{name: a.service, dropins: 5}]}\n", ConfigError),
    (load_node_config, SPEC2_MC + b"    storage: {files: [{path: /a, contents: {verification: []}}]}\n", ConfigError),
    (load_node_config, SPEC2_MC + b"    passwd: {users: [{name: core, sshAuthorizedKeys: 5}]}\n", ConfigError),
    (skewrules.load_rules_text, "0000-00-00", ConfigError),
    (skewrules.load_rules_text, "[" * 100000, ConfigError),  # json's RecursionError
    (nodedisruption.load_policy_text, "2001-02-30", ConfigError),
    (nodedisruption.parse_policy, {1: 2, "a": 3}, ConfigError),  # sorted() of mixed keys
    (parse_settings_file, b"fetch: {totalTimeout: 1" + b"0" * 400 + b"}", ConfigError),  # OverflowError
    (parse_settings_file, b"proxy: {httpProxy: 'http://['}", ConfigError),  # urlsplit's ValueError
    (parse_settings_file, b"{" * 3000, ConfigError),
    (statefiles.load_yaml_docs, b"0000-00-00", yaml.YAMLError),
]


@pytest.mark.parametrize("fn,arg,error", FOUND, ids=[f"{i}-{f[0].__name__}" for i, f in enumerate(FOUND)])
def test_what_was_found_stays_fixed(fn, arg, error):
    args = (arg,) if fn in (statefiles.load_yaml_docs, nodedisruption.parse_policy) else (arg, "x")
    bounded(fn, *args, allowed=(error,) if error else ())
    if error:
        with pytest.raises(error):
            fn(*args)


def test_many_spec2_files_and_units_convert_in_linear_time():
    # JSON: the pure-Python YAML parser alone takes about a second for this much text
    spec2 = {"ignition": {"version": "2.2.0"},
             "storage": {"files": [{"path": f"/etc/f{i}", "contents": {"source": "data:,x"}} for i in range(5000)]},
             "systemd": {"units": [{"name": f"u{i % 2500}.service", "dropins": [{"name": f"d{i}.conf"}]}
                                   for i in range(5000)]}}
    found = bounded(load_node_config, as_json(dict(MACHINECONFIG, spec={"config": spec2})), "x")
    assert len(found.ignition["storage"]["files"]) == 5000 and len(found.ignition["systemd"]["units"]) == 2500
