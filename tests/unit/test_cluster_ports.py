"""The ports the tests' etcd and Kubernetes control planes listen on are taken below the kernel's
ephemeral range, where no outgoing connection takes one as its local port before the component
binds it (tests/helpers/etcd_cluster.py ``_free_ports``)."""

import socket

from tests.helpers.etcd_cluster import PORTS_FROM, _ephemeral_low, _free_ports


def test_cluster_ports_are_distinct_free_and_below_the_ephemeral_range():
    ports = _free_ports(12)
    assert len(set(ports)) == 12
    assert all(PORTS_FROM <= p < _ephemeral_low() for p in ports), ports
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))
