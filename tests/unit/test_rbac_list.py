"""tests/helpers/rbac_list.py: ``kubectl auth can-i --list`` output and RBAC rules as single grants."""

import pytest

from tests.helpers.rbac_list import granted, parse_can_i_list, rule_grants

CAN_I = """\
Resources                                                     Non-Resource URLs   Resource Names                        Verbs
pods/eviction                                                 []                  []                                    [create]
machineconfigpools.machineconfiguration.openshift.io/status   []                  []                                    [patch]
configmaps                                                    []                  [extension-apiserver-authentication]  [get list]
                                                              [/healthz]          []                                    [get]
"""


def test_each_line_is_split_into_single_grants_whatever_kubectl_merged():
    assert parse_can_i_list(CAN_I) == {
        ("pods/eviction", "", "", "create"),
        ("machineconfigpools.machineconfiguration.openshift.io/status", "", "", "patch"),
        ("configmaps", "", "extension-apiserver-authentication", "get"),
        ("configmaps", "", "extension-apiserver-authentication", "list"),
        ("", "/healthz", "", "get")}


@pytest.mark.parametrize("text", ["", "Error from server (Forbidden)", "Resources  Verbs\nnodes [get"])
def test_what_is_not_can_i_list_output_is_an_error_naming_it(text):
    with pytest.raises(ValueError, match="can-i --list"):
        parse_can_i_list(text)


def test_rules_are_written_as_kubectl_writes_them():
    rules = [{"apiGroups": ["machineconfiguration.openshift.io"], "resources": ["machineconfigpools/status"],
              "verbs": ["patch"]},
             {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["extension-apiserver-authentication"],
              "verbs": ["get", "list"]},
             {"nonResourceURLs": ["/healthz"], "verbs": ["get"]}, {"apiGroups": [""], "resources": ["pods/eviction"],
                                                                  "verbs": ["create"]}]
    assert rule_grants(rules) == parse_can_i_list(CAN_I)


def test_bindings_count_where_they_bind_and_whom():
    role = {"kind": "Role", "metadata": {"name": "r", "namespace": "a"},
            "rules": [{"apiGroups": [""], "resources": ["leases"], "verbs": ["get"]}]}
    cluster_role = {"kind": "ClusterRole", "metadata": {"name": "c"},
                    "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]}
    sa = {"kind": "ServiceAccount", "name": "s", "namespace": "a"}
    docs = [role, cluster_role,
            {"kind": "RoleBinding", "metadata": {"name": "rb", "namespace": "a"}, "subjects": [sa],
             "roleRef": {"kind": "Role", "name": "r"}},
            {"kind": "ClusterRoleBinding", "metadata": {"name": "crb"}, "subjects": [{"kind": "Group", "name": "g"}],
             "roleRef": {"kind": "ClusterRole", "name": "c"}}]
    assert granted(docs, ("a", "s"), "a") == {("leases", "", "", "get")}
    assert granted(docs, ("a", "s"), "b") == set()  # a RoleBinding grants in its own namespace only
    assert granted(docs, ("a", "s"), "b", groups=["g"]) == {("nodes", "", "", "list")}
    assert granted(docs, ("a", "other"), "a") == set()
    with pytest.raises(KeyError, match="Role a/missing"):
        granted([dict(docs[2], roleRef={"kind": "Role", "name": "missing"})], ("a", "s"), "a")
