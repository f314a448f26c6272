"""Fixtures shared by several test modules."""

import pytest

from tests.helpers.etcd_cluster import EtcdCluster, have_etcd


@pytest.fixture(scope="session")
def etcd_cluster(tmp_path_factory):
    """One real three-member etcd cluster on loopback for every test that asks for it (each test
    keeps its keys under its own prefix); started once, stopped at the end of the session."""
    if not have_etcd():
        pytest.skip("etcd-server is not installed (make test installs it)")
    with EtcdCluster(str(tmp_path_factory.mktemp("etcd"))) as c:
        yield c
