"""State objects in etcd: publish validates first and switches generations atomically; a
replica's state source follows the switch and keeps serving while etcd is away."""

import os
import shutil

import pytest

from agent.server.store.etcd.client import EtcdClient, parse_store_url
from agent.server.store.etcd.state import EtcdStateSource, StateRefused, publish
from tests.helpers import paths
from tests.helpers.etcd_cluster import have_etcd
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.skipif(not have_etcd(), reason="etcd-server is not installed (make test installs it)")

EXAMPLES = os.path.join(paths.REPO, "examples", "state")


@pytest.fixture
def client(etcd_cluster):
    c = EtcdClient(parse_store_url(etcd_cluster.url).endpoints, timeout=10)
    yield c
    c.close()


def test_publish_then_every_replica_loads_the_same_generation(client, tmp_path):
    prefix = "/st1/"
    gen, changed = publish(client, prefix, EXAMPLES)
    assert changed and publish(client, prefix, EXAMPLES) == (gen, False)
    a = EtcdStateSource(client, prefix, str(tmp_path / "a"))
    b = EtcdStateSource(client, prefix, str(tmp_path / "b"))
    try:
        sa, sb = a.current(), b.current()
        assert sa.signature == sb.signature == f"etcd:{gen}"
        assert set(sa.pools) == set(sb.pools) >= {"worker"} and not sa.problems
        # A new generation reaches both through the watch.
        state = tmp_path / "state"
        shutil.copytree(EXAMPLES, state)
        (state / "machineconfigs" / "99-extra.yaml").write_text(
            "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\n"
            "metadata:\n  name: 99-extra\n  labels:\n    machineconfiguration.openshift.io/role: worker\n"
            "spec:\n  config:\n    ignition:\n      version: 3.4.0\n")
        gen2, _ = publish(client, prefix, str(state))
        wait_for(lambda: a.current().signature == b.current().signature == f"etcd:{gen2}", "both replicas switch", 30)
        assert "99-extra" in b.current().machine_configs
    finally:
        a.close()
        b.close()


def test_a_bad_set_is_refused_whole(client, tmp_path):
    prefix = "/st2/"
    gen, _ = publish(client, prefix, EXAMPLES)
    state = tmp_path / "state"
    shutil.copytree(EXAMPLES, state)
    (state / "machineconfigs" / "99-bad.yaml").write_text(
        "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: 99-bad\n"
        "spec:\n  config:\n    ignition:\n      version: 3.4.0\n    storage:\n      files:\n      - path: relative\n")
    with pytest.raises(StateRefused, match="99-bad"):
        publish(client, prefix, str(state))
    kvs, _ = client.range(f"{prefix}state/gens/", prefix=True, keys_only=True)
    assert {kv.key.decode().split("/")[4] for kv in kvs} == {gen}  # nothing of the bad set


def test_a_replica_restarting_without_etcd_serves_its_last_copy(client, tmp_path):
    prefix = "/st3/"
    gen, _ = publish(client, prefix, EXAMPLES)
    EtcdStateSource(client, prefix, str(tmp_path / "r"), watch=False)
    away = EtcdClient(["http://127.0.0.1:9"], timeout=0.3)
    again = EtcdStateSource(away, prefix, str(tmp_path / "r"), watch=False)
    assert "worker" in again.current().pools and "etcd did not answer" in again.store_error
