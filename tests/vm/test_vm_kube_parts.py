"""The VM scenario's Kubernetes helpers (tests/vm/kube.py) that need no guest and no cluster:
the least-privilege bindings read from deploy/rbac.yaml, and the serial log's host-time marks
read while QEMU is still writing (a line split across two reads is one line), and where the API
server dials the guest's kubelet (tests/vm/kubeletroute.py)."""

import os

import pytest
import yaml

from tests.helpers.kube_cluster import REPO
from tests.vm.kube import SerialMarks, rbac_bindings
from tests.vm.kubeletroute import is_local, kubelet_endpoint


def test_the_user_is_bound_to_every_role_deploy_rbac_defines_and_nothing_else():
    with open(os.path.join(REPO, "deploy", "rbac.yaml")) as f:
        docs = list(yaml.safe_load_all(f))
    got = rbac_bindings(docs, "u")
    roles = [(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) for d in docs
             if d and d.get("kind") in ("ClusterRole", "Role")]
    assert ("ClusterRole", "node-config-server", None) in roles
    assert len(got) == len(roles) + 1  # and the cluster's own Role that reads its client CA
    for args, (kind, name, namespace) in zip([a for a in got if "kube-system" not in a], roles):
        if kind == "ClusterRole":
            assert args == ["create", "clusterrolebinding", f"u-{name}", f"--clusterrole={name}", "--user=u"]
        else:
            assert args == ["create", "rolebinding", f"u-{name}", "-n", namespace, f"--role={name}", "--user=u"]
    assert ["create", "rolebinding", "u-node-config-server-client-ca", "-n", "kube-system",
            "--role=extension-apiserver-authentication-reader", "--user=u"] in got
    # The file's own bindings name its service account; they are never copied to the user.
    assert rbac_bindings([{"kind": "ClusterRoleBinding", "metadata": {"name": "x"}}], "u") == []


def test_serial_marks_are_whole_lines_stamped_when_read(tmp_path):
    log = tmp_path / "serial.log"
    marks = SerialMarks(str(log))
    marks.read()  # QEMU has not created the file yet
    assert marks.marks == []
    with open(log, "wb") as f:
        f.write(b"[    0.000000] Linux version 6.1.0 (x)\r\n[   20.5] reboot: Restart")
    marks.read()
    assert [m["mark"] for m in marks.marks] == ["kernel-start"]
    with open(log, "ab") as f:
        f.write(b"ing system\n[  OK  ] Stopped target \x1b[0;1;39mmulti-user.target\x1b[0m - Multi-User System.\n"
                b"[  OK  ] Reached target \x1b[0;1;39mmulti-user.target\x1b[0m\n[    0.000000] Linux vers")
    marks.read()
    assert [m["mark"] for m in marks.marks] == ["kernel-start", "reset", "shutdown"]
    assert marks.marks[1]["line"] == "[   20.5] reboot: Restarting system"
    assert marks.marks[0]["at"] <= marks.marks[1]["at"]


def test_a_serial_mark_is_seen_after_a_wait_began_only_once_a_new_line_of_it_was_read(tmp_path):
    log = tmp_path / "serial.log"
    log.write_bytes(b"[   20.5] reboot: Restarting system\n")
    marks = SerialMarks(str(log))
    marks.read()
    reset, down = marks.seen_after("reset"), marks.going_down_after()
    assert not reset() and not down()  # the reset read before the wait began is not the one waited for
    with open(log, "ab") as f:
        f.write(b"[  OK  ] Stopped target multi-user.target - Multi-User System.\n")
    marks.read()
    assert down() and not reset()
    with open(log, "ab") as f:
        f.write(b"[   40.1] reboot: Restarting system\n")
    marks.read()
    assert reset()


def test_the_kubelets_endpoint_is_the_nodes_internal_ip_and_daemon_endpoint_port_and_a_node_without_them_is_named():
    node = {"metadata": {"name": "n"}, "status": {
        "addresses": [{"type": "Hostname", "address": "n"}, {"type": "InternalIP", "address": "10.0.2.15"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}}
    assert kubelet_endpoint(node) == ("10.0.2.15", 10250)
    with pytest.raises(AssertionError, match="Node n names no InternalIP or kubelet port"):
        kubelet_endpoint({"metadata": {"name": "n"}, "status": {"addresses": [{"type": "Hostname", "address": "n"}]}})


def test_an_address_is_local_only_if_this_host_can_bind_it():
    assert is_local("127.0.0.1")
    assert not is_local("203.0.113.7")  # TEST-NET-3: no host's own
