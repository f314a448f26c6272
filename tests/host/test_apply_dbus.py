"""The apply engine's live branch through the real Systemd client on a private bus (dbusmock):
what the bus receives, in order, and a failing call rolling the whole apply back."""

import base64
import json

import pytest

from agent.core.nodeconfig import NodeConfig
from agent.errors import ApplyError, HostError
from agent.host.root import Root
from agent.host.systemd import Systemd
from agent.node.apply import apply_config
from tests.helpers import dbus as dbus_fixtures

systemd_mock = dbus_fixtures.systemd_mock

UNIT = "[Unit]\nDescription=x\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"


class LiveRoot(Root):
    """A scratch root that claims to be the running system, so the D-Bus branch runs."""

    @property
    def is_live(self):
        return True


def config(files, units, name="rendered-1"):
    ign = {"ignition": {"version": "3.4.0"},
           "storage": {"files": [{"path": p, "mode": 420, "overwrite": True,
                                  "contents": {"source": "data:;base64," + base64.b64encode(d).decode()}}
                                 for p, d in files]},
           "systemd": {"units": units}}
    return NodeConfig(ignition=json.loads(json.dumps(ign)), name=name)


def test_units_enabled_and_masked_over_dbus_after_a_daemon_reload(tmp_path, systemd_mock):
    root = LiveRoot(str(tmp_path))
    cfg = config([("/etc/app.conf", b"x")],
                 [{"name": "app.service", "enabled": True, "contents": UNIT},
                  {"name": "debug.service", "mask": True}])
    result = apply_config(root, cfg, systemd=Systemd(systemd_mock.bus))
    assert systemd_mock.method_names("Reload", "EnableUnitFiles", "MaskUnitFiles") == [
        "Reload", "MaskUnitFiles", "EnableUnitFiles"]
    assert systemd_mock.calls("EnableUnitFiles") == [("EnableUnitFiles", [["app.service"], False, False])]
    assert (tmp_path / "etc/systemd/system/app.service").read_text() == UNIT
    assert result.live_actions == ["daemon-reload", "mask debug.service", "enable app.service"]
    # (Idempotence of enablement is not checked here: real systemd makes the .wants links that
    # a second apply would find; the mock does not. The offline tests cover the links.)


def test_a_bus_error_rolls_the_files_back(tmp_path, systemd_mock, monkeypatch):
    root = LiveRoot(str(tmp_path))
    first = config([("/etc/app.conf", b"v1")], [{"name": "app.service", "enabled": True, "contents": UNIT}])
    apply_config(root, first, systemd=Systemd(systemd_mock.bus))
    seen = len(systemd_mock.calls())
    second = config([("/etc/app.conf", b"v2")], [{"name": "new.service", "enabled": True, "contents": UNIT}],
                    name="rendered-2")
    client = Systemd(systemd_mock.bus)
    real = client.enable_unit_files

    def refuse(names):
        real(names)  # the bus sees the call ...
        raise HostError("systemd EnableUnitFiles failed: org.freedesktop.systemd1.UnitMasked: new.service is masked")

    monkeypatch.setattr(client, "enable_unit_files", refuse)
    with pytest.raises(ApplyError) as err:
        apply_config(root, second, first, systemd=client)
    assert err.value.exit_code == 75 and "rolled back" in str(err.value)
    assert (tmp_path / "etc/app.conf").read_bytes() == b"v1"
    assert not (tmp_path / "etc/systemd/system/new.service").exists()
    # ... and the rollback undid it over the bus and reloaded systemd last
    names = [n for n, _ in systemd_mock.calls("Reload", "EnableUnitFiles", "DisableUnitFiles")[seen:]]
    assert names[-2:] == ["DisableUnitFiles", "Reload"] and "EnableUnitFiles" in names

