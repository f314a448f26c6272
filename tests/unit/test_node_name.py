"""A node keeps the name it first booted with (issue 39): ``update`` after ``firstboot --node-name
X`` reported under the host name, and a second identity registered and counted in the pool."""

import os
import types

import pytest

from agent.core.settings import default_node_name
from agent.errors import EXIT_INVALID_CONFIG, ConfigError
from agent.host.root import Root
from agent.node import nodename
from agent.node.firstboot import FirstBoot, Options
from agent.node.update import Updater

STATE = "/var/lib/node-agent"


def test_the_recorded_name_beats_the_host_name():
    assert nodename.decide(None, None, "worker-x", "host-1", "f") == "worker-x"


def test_without_a_record_the_name_asked_for_then_the_host_name():
    assert nodename.decide("a", "b", None, "h", "f") == "a"
    assert nodename.decide(None, "b", None, "h", "f") == "b"
    assert nodename.decide(None, None, None, "h", "f") == "h"


@pytest.mark.parametrize("explicit, configured, how", [("other", None, "--node-name"),
                                                        (None, "other", "nodeName in agent.yaml")])
def test_another_name_than_the_recorded_one_is_refused_naming_both_and_the_record(explicit, configured, how):
    with pytest.raises(ConfigError) as err:
        nodename.decide(explicit, configured, "worker-x", "h", "/r/var/lib/node-agent/node-name")
    text = str(err.value)
    assert err.value.exit_code == EXIT_INVALID_CONFIG == 65
    assert "first booted as 'worker-x'" in text and "/r/var/lib/node-agent/node-name" in text
    assert f"{how} asks for 'other'" in text


def test_the_same_name_asked_for_again_is_fine():
    assert nodename.decide("worker-x", None, "worker-x", "h", "f") == "worker-x"


def test_the_record_is_written_once_and_never_replaced(tmp_path):
    root = Root(str(tmp_path))
    nodename.record(root, STATE, "worker-x")
    nodename.record(root, STATE, "worker-y")
    assert nodename.recorded_name(root, STATE) == "worker-x"


def test_update_after_a_first_boot_with_node_name_runs_under_that_name(tmp_path):
    root = Root(str(tmp_path))
    assert default_node_name() != "worker-x"
    nodename.record(root, STATE, "worker-x")  # as firstboot --node-name worker-x does
    assert Updater(types.SimpleNamespace(root=str(tmp_path), settings=None)).node == "worker-x"


def test_update_told_another_name_in_agent_yaml_refuses_with_exit_65(tmp_path):
    root = Root(str(tmp_path))
    nodename.record(root, STATE, "worker-x")
    os.makedirs(tmp_path / "etc/node-agent")
    (tmp_path / "etc/node-agent/agent.yaml").write_text("nodeName: worker-y\n")
    with pytest.raises(ConfigError) as err:
        Updater(types.SimpleNamespace(root=str(tmp_path), settings=None))
    assert err.value.exit_code == 65 and "'worker-x'" in str(err.value) and "'worker-y'" in str(err.value)


def test_firstboot_run_again_with_another_node_name_refuses(tmp_path):
    nodename.record(Root(str(tmp_path)), STATE, "worker-x")
    with pytest.raises(ConfigError, match="first booted as 'worker-x'") as err:
        FirstBoot(Options(root=str(tmp_path), node_name="worker-y"))
    assert "--node-name asks for 'worker-y'" in str(err.value)
    assert FirstBoot(Options(root=str(tmp_path), node_name="worker-x")).node == "worker-x"
