"""rpm-ostree command lines, retries and booted state, against a fake rpm-ostree on PATH."""

import json
import os
import stat

import pytest

from agent.host.root import Root
from agent.host.rpmostree import RpmOstree, RpmOstreeError, booted_os

FAKE = r"""#!/bin/sh
printf '%s\n' "$*" >> "$FAKE_LOG"
n=$(cat "$FAKE_COUNT" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$FAKE_COUNT"
if [ "$1" = status ]; then cat "$FAKE_STATUS"; exit 0; fi
if [ "$1" = kargs ] && [ $# = 1 ]; then echo "root=UUID=abc rw nosmt"; exit 0; fi
if [ "$n" -le "${FAKE_FAILS:-0}" ]; then echo "error: failed to pull: connection reset" >&2; exit 1; fi
exit 0
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "rpm-ostree"
    exe.write_text(FAKE)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "argv.log"
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("FAKE_COUNT", str(tmp_path / "count"))
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"deployments": [
        {"booted": False, "container-image-reference": "ostree-unverified-registry:quay.io/x@sha256:old"},
        {"booted": True, "container-image-reference": "ostree-unverified-registry:quay.io/x@sha256:cur"}]}))
    monkeypatch.setenv("FAKE_STATUS", str(status))
    return lambda: log.read_text().splitlines() if log.exists() else []


def test_command_lines(fake):
    ro = RpmOstree(wait_initial=0)
    ro.kargs(["nosmt", "a=b c"], ["quiet"])
    ro.rebase("quay.io/openshift/rhcos@sha256:1")
    ro.kargs([], [])  # nothing to do: no call
    assert fake() == ["kargs --append=nosmt --append=a=b c --delete-if-present=quiet",
                      "rebase --experimental ostree-unverified-registry:quay.io/openshift/rhcos@sha256:1"]


def test_network_failures_are_retried_a_bounded_number_of_times(fake, monkeypatch):
    monkeypatch.setenv("FAKE_FAILS", "2")
    RpmOstree(attempts=3, wait_initial=0).rebase("quay.io/x:1")
    assert len(fake()) == 3
    monkeypatch.setenv("FAKE_FAILS", "100")
    with pytest.raises(RpmOstreeError, match="connection reset"):
        RpmOstree(attempts=2, wait_initial=0).rebase("quay.io/x:2")
    assert len(fake()) == 5


def test_missing_rpm_ostree_is_a_clear_error(tmp_path):
    ro = RpmOstree(executable=str(tmp_path / "nope"), attempts=1)
    assert not ro.available()
    with pytest.raises(RpmOstreeError, match="need an rpm-ostree based host"):
        ro.kargs(["x"])


def test_booted_os_live_and_offline(fake, tmp_path):
    assert booted_os(Root(str(tmp_path))) is None

    class Live(Root):
        is_live = True

    image, kargs = booted_os(Live("/"), RpmOstree(wait_initial=0))
    assert image == "quay.io/x@sha256:cur"
    assert kargs == ("root=UUID=abc", "rw", "nosmt")
