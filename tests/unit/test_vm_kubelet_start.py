"""The VM guest's kubelet start (tests/vm/guest/usr/local/sbin/vm-kubelet-start): node-agent's
CUSTOM_KUBELET_LABELS passed to an upstream kubelet less the labels it refuses at start
(cmd/kubelet/app/options/options.go ValidateKubeletFlags: kubernetes.io and k8s.io labels that
are not k8s.io/kubelet/pkg/apis/well_known_labels.go's IsKubeletLabel), so a pool's node-role
label never keeps the kubelet from starting; the server adds that label to the Node."""

import importlib.machinery
import importlib.util
import os

from tests.helpers import paths

SCRIPT = os.path.join(paths.REPO, "tests", "vm", "guest", "usr", "local", "sbin", "vm-kubelet-start")


def load():
    loader = importlib.machinery.SourceFileLoader("vm_kubelet_start", SCRIPT)
    spec = importlib.util.spec_from_loader("vm_kubelet_start", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_role_labels_and_other_kubernetes_io_labels_are_left_out_of_node_labels():
    m = load()
    args, dropped = m.kubelet_args({"CUSTOM_KUBELET_LABELS":
                                    "node-role.kubernetes.io/vm=,node-role.kubernetes.io/worker=,"
                                    "example.com/rack=r1,foo.k8s.io/x=y"})
    assert sorted(dropped) == ["foo.k8s.io/x", "node-role.kubernetes.io/vm", "node-role.kubernetes.io/worker"]
    assert "--node-labels=example.com/rack=r1" in args


def test_the_labels_a_kubelet_may_set_itself_are_kept():
    m = load()
    for key in ("kubernetes.io/hostname", "topology.kubernetes.io/zone", "node.kubernetes.io/instance-type",
                "node.kubernetes.io/anything", "x.kubelet.kubernetes.io/y", "machineconfiguration.openshift.io/pool",
                "unprefixed"):
        assert m.kubelet_may_set(key), key
    for key in ("node-role.kubernetes.io/infra", "kubernetes.io/role", "k8s.io/x", "kubernetes.io/x"):
        assert not m.kubelet_may_set(key), key
    assert m.kubelet_may_set("notkubernetes.io/x")  # a different domain, not a subdomain


def test_no_labels_no_node_labels_flag_and_the_log_level_from_kubelet_env():
    m = load()
    args, dropped = m.kubelet_args({"CUSTOM_KUBELET_LABELS": "node-role.kubernetes.io/vm=", "KUBELET_LOG_LEVEL": "4"})
    assert dropped == ["node-role.kubernetes.io/vm"]
    assert not any(a.startswith("--node-labels") for a in args)
    assert args[0] == "/usr/bin/kubelet" and "--v=4" in args
    assert m.kubelet_args({})[0][-1] == "--v=2"
