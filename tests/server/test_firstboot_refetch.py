"""First boot fetches once and never sticks to a refused config (issue 16, agent fetch).

- Each file source is fetched once and each compressed content decompressed once per run: the
  apply preview (what Ignition already laid) and the apply share the resolved contents. Ignition
  does the same: one streaming gzip reader between the fetch and the write, the hash taken over
  its output (coreos/ignition internal/resource/url.go, Fetcher.decompressCopyHashAndVerify).
- A config refused before any of it reached the disk (validation, skew, planning, the apply's
  own checks: exit 65/78) is not kept: fixed on the server, the next run applies the fix
  (against the real node-config-server, and a scripted one).
"""

import base64
import gzip
import json
import os
import shutil
import subprocess
import sys

import pytest

from agent.ignition import dataurl
from tests.helpers import paths
from tests.helpers.certs import make_tls
from tests.helpers.httpserver import Reply, ScriptedServer
from tests.helpers.noderoot import make_node_root
from tests.helpers.server_proc import ServerProcess
from tests.helpers.wait import wait_for

REPO = paths.REPO
EXAMPLES = os.path.join(REPO, "examples", "state")
TOKEN = "refetch-token"
SAVED = "var/lib/node-agent/firstboot-served.json"


# --- each source fetched and decompressed once --------------------------------------------------

def test_each_content_is_fetched_and_decompressed_once_per_first_boot(tmp_path, monkeypatch):
    from agent.node.firstboot import FirstBoot, Options

    remote = b"remote contents\n" * 100
    local = b"local contents\n" * 50
    calls = []
    real = dataurl.decompress

    def counting(data, compression, limit=None):
        out = real(data, compression, limit)
        if compression:
            calls.append(out)
        return out

    monkeypatch.setattr(dataurl, "decompress", counting)
    with ScriptedServer() as srv:
        files = [
            {"path": "/etc/remote.conf", "mode": 420,
             "contents": {"source": srv.url("/blob"), "compression": "gzip"}},
            {"path": "/etc/local.conf", "mode": 420,
             "contents": {"source": "data:;base64," + base64.b64encode(gzip.compress(local)).decode(),
                          "compression": "gzip"}},
        ]
        config = {"ignition": {"version": "3.4.0"}, "storage": {"files": files}}
        srv.always("/blob", Reply(200, body=gzip.compress(remote)))
        srv.always("/config/worker", Reply(200, body=gzip.compress(json.dumps(config).encode())))
        srv.always("/api/v1/nodes/n1/report", Reply(200, body=b"{}"))
        root = make_node_root(str(tmp_path / "n1"), srv.url("/").rstrip("/"), "worker", node_name="n1")
        pointer = {"ignition": {"version": "3.4.0", "config": {"merge": [
            {"source": srv.url("/config/worker"), "compression": "gzip"}]}}}
        with open(os.path.join(root, "etc/node-agent/pointer.ign"), "w") as f:
            json.dump(pointer, f)

        assert FirstBoot(Options(root=root)).run() == 0

        assert len(srv.requests_for("/config/worker")) == 1
        assert len(srv.requests_for("/blob")) == 1  # was 2: the apply preview fetched it too
    # the config once (its merge reference says gzip), each content once (was twice each)
    assert sorted(len(out) for out in calls) == sorted([len(json.dumps(config)), len(remote), len(local)])
    with open(os.path.join(root, "etc/remote.conf"), "rb") as f:
        assert f.read() == remote
    with open(os.path.join(root, "etc/local.conf"), "rb") as f:
        assert f.read() == local


def test_first_boot_validates_the_served_config_once(tmp_path, monkeypatch):
    # The fetch validates each config it fetches (errors name the URL, as Ignition's do); the
    # merged target is then checked only in its `ignition` section, which the pointer merged
    # into: the storage of a 100 MB config was validated twice.
    from agent.core import loadconfig as load
    from agent.ignition import validate
    from agent.node.firstboot import FirstBoot, Options

    checked = []
    real = validate.validate_ignition

    def counting(doc):
        checked.append(sorted(doc) if isinstance(doc, dict) else doc)
        return real(doc)

    monkeypatch.setattr(validate, "validate_ignition", counting)
    monkeypatch.setattr(load, "validate_ignition", counting)
    with ScriptedServer() as srv:
        config = {"ignition": {"version": "3.4.0"}, "storage": {"files": [
            {"path": "/etc/once.conf", "mode": 420, "contents": {"source": "data:,once"}}]}}
        srv.always("/config/worker", Reply(200, body=json.dumps(config).encode()))
        srv.always("/api/v1/nodes/n1/report", Reply(200, body=b"{}"))
        root = make_node_root(str(tmp_path / "n1"), srv.url("/").rstrip("/"), "worker", node_name="n1")
        assert FirstBoot(Options(root=root)).run() == 0
    assert checked.count(["ignition", "storage"]) == 1, checked
    assert ["ignition"] in checked  # the merged `ignition` section (the pointer's CAs, timeouts)
    with open(os.path.join(root, "etc/once.conf")) as f:
        assert f.read() == "once"


def test_a_pointer_with_content_of_its_own_is_validated_merged():
    from agent.resource.fetch import Fetcher
    from agent.resource.pointer import resolve_pointer

    body = json.dumps({"ignition": {"version": "3.4.0"},
                       "storage": {"files": [{"path": "/etc/a", "contents": {"source": "data:,a"}}]}}).encode()
    with ScriptedServer() as srv:
        for path in ("/config/worker", "/config/extra"):
            srv.always(path, Reply(200, body=body))
        refs = [{"source": srv.url("/config/worker")}]
        merge = {"ignition": {"version": "3.4.0", "config": {"merge": refs}}}
        assert resolve_pointer(merge, Fetcher()).validated
        own = dict(merge, storage={"files": [{"path": "/etc/b", "contents": {"source": "data:,b"}}]})
        assert not resolve_pointer(own, Fetcher()).validated  # the pointer's files were never validated
        two = {"ignition": {"version": "3.4.0", "config": {"merge": refs + [{"source": srv.url("/config/extra")}]}}}
        assert not resolve_pointer(two, Fetcher()).validated  # two configs' contents: check them merged
        older = {"ignition": {"version": "3.5.0", "config": {"merge": refs}}}
        assert not resolve_pointer(older, Fetcher()).validated  # validated at 3.4.0, merged at 3.5.0


# --- a refused config is fetched again ------------------------------------------------------------

def write_whole(path: str, text: str) -> None:
    """temp + rename: the server's watcher never sees half a file."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def agent(*args):
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO)


def served_skew_rules(srv) -> str:
    doc = srv.session(token=False).get(srv.url("/config/worker")).json()
    for f in doc.get("storage", {}).get("files", []):
        if f["path"] == "/etc/node-agent/boot-image-skew.json":
            return dataurl.decompress(dataurl.decode_data_url(f["contents"]["source"]),
                                      f["contents"].get("compression")).decode()
    return ""


def test_a_skew_refusal_fixed_on_the_real_server_reaches_the_node_on_the_next_run(tmp_path):
    # The served skew rules are what refuses this boot image (exit 78); the admin lowers the
    # minimum on the server. The saved config used to be reused by every later run.
    state = str(tmp_path / "state")
    shutil.copytree(EXAMPLES, state)
    cluster = os.path.join(state, "machineconfiguration.yaml")
    with ServerProcess(state, tls=make_tls(str(tmp_path / "tls")), token=TOKEN) as srv:
        root = make_node_root(str(tmp_path / "node"), srv.base_url, "worker", ca_pem=srv.tls.ca_pem(),
                              token=TOKEN, node_name="worker-refetch", fetch_budget=20,
                              aleph_version="9.0.20230101-0")
        first = agent("firstboot", "--root", root)
        assert first.returncode == 78, first.stderr
        assert not os.path.exists(os.path.join(root, SAVED))  # was kept, and refused again forever

        with open(cluster) as f:
            text = f.read()
        assert '"9.2.20240101-0"' in text
        write_whole(cluster, text.replace('"9.2.20240101-0"', '"9.0.20220101-0"'))
        srv.wait_state_read()
        wait_for(lambda: json.loads(served_skew_rules(srv))["minimum"]["rhcosVersion"] == "9.0",  # served as X.Y
                 "the server serves the lowered minimum", 30)  # the watcher's interval and settle time, with room

        second = agent("firstboot", "--root", root)
        assert second.returncode == 0, second.stderr
        assert os.path.exists(os.path.join(root, "var/lib/node-agent/firstboot.done"))
        with open(os.path.join(root, "etc/node-agent/boot-image-skew.json")) as f:
            assert json.load(f)["minimum"]["rhcosVersion"] == "9.0"


BAD = b"not json"
GOOD = json.dumps({"auths": {"registry.example.com": {"auth": base64.b64encode(b"user:pass").decode()}}}).encode()


def pull_secret_config(secret: bytes) -> bytes:
    source = "data:;base64," + base64.b64encode(secret).decode()
    return json.dumps({"ignition": {"version": "3.4.0"}, "storage": {"files": [
        {"path": "/var/lib/kubelet/config.json", "mode": 384, "contents": {"source": source}}]}}).encode()


def test_a_config_refused_at_apply_is_fetched_again_on_the_next_run(tmp_path):
    # The apply's own check refuses the pull secret (exit 65, nothing written); the server then
    # serves a fixed config, which the next run must fetch and apply.
    with ScriptedServer() as srv:
        srv.script("/config/worker", Reply(200, body=pull_secret_config(BAD)))
        srv.always("/config/worker", Reply(200, body=pull_secret_config(GOOD)))
        srv.always("/api/v1/nodes/n1/report", Reply(200, body=b"{}"))
        root = make_node_root(str(tmp_path / "n1"), srv.url("/").rstrip("/"), "worker", node_name="n1",
                              fetch_budget=20)
        first = agent("firstboot", "--root", root)
        assert first.returncode == 65, first.stderr
        assert "pull secret" in first.stderr and "Traceback" not in first.stderr
        assert not os.path.exists(os.path.join(root, "var/lib/kubelet/config.json"))
        # The server, told Working after the fetch and at the pool join, hears Degraded and why (not
        # Working for ever): the stage, the exit code and what to do, as the journal says them.
        reports = [json.loads(r.body) for r in srv.requests_for("/api/v1/nodes/n1/report")]
        assert [(r["state"], r["firstBoot"]["stage"]) for r in reports] == \
            [("Working", "fetch"), ("Working", "pool"), ("Degraded", "plan")]
        failed = reports[2]
        assert "pull secret" in failed["reason"] and failed["pool"] == "worker"
        assert failed["reason"] in first.stderr and f"what to do: {failed['firstBoot']['hint']}" in first.stderr
        assert (failed["firstBoot"]["result"], failed["firstBoot"]["exitCode"]) == ("failed", 65)

        second = agent("firstboot", "--root", root)
        assert second.returncode == 0, second.stderr
        assert len(srv.requests_for("/config/worker")) == 2
        reports = [json.loads(r.body) for r in srv.requests_for("/api/v1/nodes/n1/report")]
        assert [r["state"] for r in reports][3:] in (["Working", "Working", "Done"], ["Working", "Working", "Working"])
    with open(os.path.join(root, "var/lib/kubelet/config.json"), "rb") as f:
        assert f.read() == GOOD


# --- what is kept: a config that reached the disk -------------------------------------------------

@pytest.mark.parametrize("applied,journal,undone,kept", [
    (False, False, True, False),  # refused before anything changed: fetched again
    (True, False, True, True),  # applied in an earlier run: the resumed run keeps it
    (False, True, True, True),  # an apply interrupted mid-way: the journal resumes it
    (False, False, False, True),  # a rollback that could not undo everything
])
def test_what_a_failed_first_boot_keeps(tmp_path, applied, journal, undone, kept):
    from agent.errors import ApplyError, ConfigError
    from agent.node.firstboot import FirstBoot, Options
    from agent.node.txjournal import Journal

    root = make_node_root(str(tmp_path / "n"), "https://127.0.0.1:1", "worker", node_name="n")
    fb = FirstBoot(Options(root=root))
    fb.progress.save_json("served", {"ignition": {"ignition": {"version": "3.4.0"}}, "sources": []})
    if applied:
        fb.progress.mark(appliedBootId="boot-1")
    if journal:
        Journal(fb.root, fb.state_dir).begin([], "rendered-worker-1")
    error = ConfigError("refused")
    if not undone:
        error = ApplyError("failed; could not undo: /etc/x")
        error.undone = False
    fb.forget_unapplied_config(error)
    assert (fb.progress.load_json("served") is not None) == kept


# --- a node that joined its pool fetches as a member when its first boot runs again -----------------

def pull_secret_mc(secret: bytes) -> str:
    source = "data:;base64," + base64.b64encode(secret).decode()
    return ("apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\n"
            "metadata: {name: 99-worker-pull-secret, labels: {machineconfiguration.openshift.io/role: worker}}\n"
            "spec:\n  config:\n    ignition: {version: 3.4.0}\n    storage:\n      files:\n"
            f"      - {{path: /var/lib/kubelet/config.json, mode: 384, overwrite: true, contents: {{source: '{source}'}}}}\n")


def test_a_fix_of_the_config_that_failed_a_first_boot_reaches_that_node(tmp_path):
    # The pool's first config carries a pull secret the agent refuses (exit 65) after the node
    # joined. The admin fixes it: the new rendered config becomes the pool's target, but the
    # rollout stays incomplete (the refused node is Degraded on the old one), so a new node is
    # still served the old config. The refused node is a member: fetching with its credential it
    # gets the target, and its first boot succeeds (anonymous, it got the broken config forever).
    state = str(tmp_path / "state")
    shutil.copytree(EXAMPLES, state)
    mc = os.path.join(state, "machineconfigs", "99-worker-pull-secret.yaml")
    write_whole(mc, pull_secret_mc(BAD))
    with ServerProcess(state, tls=make_tls(str(tmp_path / "tls")), token=TOKEN) as srv:
        root = make_node_root(str(tmp_path / "node"), srv.base_url, "worker", ca_pem=srv.tls.ca_pem(),
                              token=TOKEN, node_name="worker-fixme", fetch_budget=20)
        first = agent("firstboot", "--root", root)
        assert first.returncode == 65, first.stderr
        assert "pull secret" in first.stderr
        assert os.path.exists(os.path.join(root, "var/lib/node-agent/node-credential"))  # it registered

        old = srv.session().get(srv.url("/api/v1/pools/worker")).json()["spec"]["configuration"]["name"]
        write_whole(mc, pull_secret_mc(GOOD))
        srv.wait_state_read()
        view = wait_for(lambda: (lambda v: v if v["spec"]["configuration"]["name"] != old else None)(
            srv.session().get(srv.url("/api/v1/pools/worker")).json()), "the fixed config becomes the pool's target", 30)
        assert view["status"]["served"]["config"] == old  # new nodes still get the refused config

        second = agent("firstboot", "--root", root)
        assert second.returncode == 0, second.stderr
        assert "fetching as a member" in second.stderr
    with open(os.path.join(root, "var/lib/kubelet/config.json"), "rb") as f:
        assert f.read() == GOOD
