"""A node refuses a served rendered config the MCO could never have rendered (no osImageURL):
what a server rendering from an emptied MachineConfig would serve (issue 28: a member applied
one, deleting its files and recording osImageURL "")."""

import base64
import json

import pytest

from agent.core.served import ENCAPSULATED_PATH, read_served, unrenderable
from agent.errors import ConfigError
from agent.node.planning import target_from_served


def served(spec, name="rendered-worker-1"):
    mc = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
          "metadata": {"name": name}, "spec": spec}
    data = base64.b64encode(json.dumps(mc).encode()).decode()
    return {"ignition": {"version": "3.4.0"},
            "storage": {"files": [{"path": ENCAPSULATED_PATH, "mode": 420, "overwrite": True,
                                   "contents": {"source": "data:;base64," + data}}]}}


@pytest.mark.parametrize("spec", [{}, {"osImageURL": ""}, {"osImageURL": None, "kernelArguments": ["x"]}])
def test_a_rendered_config_without_an_os_image_is_refused(spec):
    ign = served(spec)
    assert unrenderable(read_served(ign)).rule == "unrenderable"
    with pytest.raises(ConfigError) as exc:
        target_from_served(ign, "https://server/config/worker")
    assert "osImageURL" in str(exc.value) and exc.value.exit_code == 65


def test_a_complete_rendered_config_and_a_plain_ignition_config_pass():
    ok = served({"osImageURL": "quay.io/openshift-release-dev/rhel-coreos-9@sha256:" + "1" * 64})
    assert unrenderable(read_served(ok)) is None
    target, _ = target_from_served(ok, "https://server/config/worker")
    assert target.os_image_url.startswith("quay.io/")
    plain = {"ignition": {"version": "3.4.0"}}  # not from a config server: nothing to judge
    assert unrenderable(read_served(plain)) is None
