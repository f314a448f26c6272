"""The VM test's one combined scenario, driven from the host.

A real node-config-server (gunicorn, TLS, bearer token) listens on the host's loopback; the
guest reaches it at 10.0.2.2 (QEMU's user network). The guest boots the clean image with a
pointer config, agent settings and the token written in (as an installer would), and:

1. boot 1: node-agent-firstboot.service fetches, checks the planted aleph file against the served
   skew rules, joins the custom pool ``vm`` (labels in kubelet-env), applies files and a unit it
   enables over D-Bus, reports, and reboots once through logind (a file no policy covers);
2. boot 2: first boot is skipped, node-agent.service reports Done; vm-kubelet-check.service
   restarts and disables the first-boot unit and logs whether kubelet stayed up;
3. day 2, still boot 2: the host changes /etc/vm-probe.conf in a MachineConfig (the served policy
   restarts vm-probe.service for it): applied and restarted without a reboot;
4. day 2: the host adds a file no policy covers: drain lease, apply, one reboot; boot 3 reports Done;
5. the host powers the guest off (ACPI) and reads the journal and state back from the disk.

``run(workdir)`` returns a Result with the server's views and the paths read back; the test
(test_vm_boot.py) asserts on them.
"""

import base64
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List

from tests.helpers.certs import make_tls
from tests.helpers.server_proc import ServerProcess
from tests.vm.guest import Guest, build_image, wait_until

NODE = "vm-node-0"
POOL = "vm"
TOKEN = "vm-test-token"
HOST_FROM_GUEST = "10.0.2.2"
SERVER_NAME = "node-config-server.vm.test"  # 10.0.2.2 in the guest's /etc/hosts (tests/vm/guest)
# Per phase, under TCG on a loaded 2-core machine (a boot is 30-90 s there; an update pass
# polls every 5 s). Generous, but every wait is bounded and a miss prints the serial log.
PHASE_TIMEOUT = float(os.environ.get("NODE_AGENT_VM_PHASE_TIMEOUT", "900"))

POLICY_AND_SKEW = """\
apiVersion: operator.openshift.io/v1
kind: MachineConfiguration
metadata:
  name: cluster
spec:
  nodeDisruptionPolicy:
    files:
    - path: /etc/vm-probe.conf
      actions:
      - type: Restart
        restart:
          serviceName: vm-probe.service
  bootImageSkewEnforcement:
    mode: Manual
    manual:
      mode: RHCOSVersion
      rhcosVersion: "9.2.20240101-0"
"""

POOLS = {
    "worker": """\
apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfigPool
metadata:
  name: worker
spec:
  machineConfigSelector:
    matchLabels:
      machineconfiguration.openshift.io/role: worker
  nodeSelector:
    matchLabels:
      node-role.kubernetes.io/worker: ""
  maxUnavailable: 1
""",
    POOL: """\
apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfigPool
metadata:
  name: vm
  annotations:
    node-agent.io/rhel-major: "9"
spec:
  machineConfigSelector:
    matchExpressions:
    - key: machineconfiguration.openshift.io/role
      operator: In
      values: [worker, vm]
  nodeSelector:
    matchLabels:
      node-role.kubernetes.io/vm: ""
  maxUnavailable: 1
""",
}

# The image the guest "boots" (tests/vm/guest/etc/vm-test/booted-image, reported by the
# rpm-ostree stand-in there): the served osImageURL, so no OS pivot is planned. No
# kernelArguments: the guest's kernel command line is fixed by the test.
OS_IMAGE = "registry.vm.test/rhel-coreos-9:9.6.20250121-0"
BASE_MC = f"""\
apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfig
metadata:
  name: 00-worker
  labels:
    machineconfiguration.openshift.io/role: worker
spec:
  osImageURL: {OS_IMAGE}
  config:
    ignition:
      version: 3.4.0
    storage:
      files:
      - path: /etc/node-agent-vm/first-boot-file
        mode: 420
        overwrite: true
        contents:
          source: data:,written%20at%20first%20boot%0A
    systemd:
      units:
      - name: vm-agent-unit.service
        enabled: true
        contents: |
          [Unit]
          Description=A unit node-agent writes and enables (VM test)
          [Service]
          Type=oneshot
          RemainAfterExit=yes
          ExecStart=/bin/echo vm-agent-unit ran
          [Install]
          WantedBy=multi-user.target
"""


def probe_mc(value: str, extra_file: bool = False) -> str:
    text = f"""\
apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfig
metadata:
  name: 50-vm
  labels:
    machineconfiguration.openshift.io/role: vm
spec:
  config:
    ignition:
      version: 3.4.0
    storage:
      files:
      - path: /etc/vm-probe.conf
        mode: 420
        overwrite: true
        contents:
          source: data:,{value}
"""
    if extra_file:
        text += """\
      - path: /etc/node-agent-vm/needs-a-reboot
        mode: 420
        overwrite: true
        contents:
          source: data:,day%202%0A
"""
    return text


def write_state(state: str) -> None:
    for sub in ("machineconfigs", "machineconfigpools"):
        os.makedirs(os.path.join(state, sub), exist_ok=True)
    with open(os.path.join(state, "machineconfiguration.yaml"), "w") as f:
        f.write(POLICY_AND_SKEW)
    for name, text in POOLS.items():
        with open(os.path.join(state, "machineconfigpools", f"{name}.yaml"), "w") as f:
            f.write(text)
    with open(os.path.join(state, "machineconfigs", "00-worker.yaml"), "w") as f:
        f.write(BASE_MC)
    set_probe(state, "v1")


def set_probe(state: str, value: str, extra_file: bool = False) -> None:
    path = os.path.join(state, "machineconfigs", "50-vm.yaml")
    with open(path + ".tmp", "w") as f:
        f.write(probe_mc(value, extra_file))
    os.replace(path + ".tmp", path)


def guest_files(port: int, ca_pem: bytes) -> Dict[str, Any]:
    source = f"https://{SERVER_NAME}:{port}/config/{POOL}"
    ca = "data:text/plain;charset=utf-8;base64," + base64.b64encode(ca_pem).decode()
    # The bootstrap token in httpHeaders, as an installer writes it: configs with secrets need it.
    merge = [{"source": source, "httpHeaders": [{"name": "Authorization", "value": f"Bearer {TOKEN}"}]}]
    pointer = {"ignition": {"version": "3.4.0", "config": {"merge": merge},
                            "security": {"tls": {"certificateAuthorities": [{"source": ca}]}}}}
    settings = (f"nodeName: {NODE}\nstateDir: /var/lib/node-agent\n"
                "report:\n  tokenFile: /etc/node-agent/token\n  retryInterval: 5\n"
                "update:\n  interval: 5\n  drainTimeout: 300\n")
    return {"/etc/node-agent/pointer.ign": (json.dumps(pointer).encode(), 0o644),
            "/etc/node-agent/agent.yaml": (settings.encode(), 0o644),
            "/etc/node-agent/token": (TOKEN.encode() + b"\n", 0o600)}


@dataclass
class Result:
    workdir: str
    readback: str  # /var/log/journal, /var/lib/node-agent, /etc/node-agent-vm, /etc/kubernetes...
    targets: Dict[str, str] = field(default_factory=dict)  # phase -> rendered config name
    node: Dict[str, Any] = field(default_factory=dict)  # the server's node view at the end
    pool_after_second_boot: Dict[str, Any] = field(default_factory=dict)
    pool: Dict[str, Any] = field(default_factory=dict)
    timings: Dict[str, float] = field(default_factory=dict)  # phase -> seconds
    reports: List[Dict[str, Any]] = field(default_factory=list)  # node views seen while polling
    serial: str = ""


def run(workdir: str) -> Result:
    started = time.monotonic()
    timings: Dict[str, float] = {}
    image = build_image()
    timings["image"] = time.monotonic() - started

    state = os.path.join(workdir, "state")
    write_state(state)
    tls = make_tls(os.path.join(workdir, "tls"), hosts=(SERVER_NAME, "localhost", "127.0.0.1",
                                                                         HOST_FROM_GUEST))
    result = Result(workdir=workdir, readback=os.path.join(workdir, "readback"))
    guest = Guest(image, os.path.join(workdir, "guest"))
    with ServerProcess(state, tls=tls, token=TOKEN) as srv:
        api = srv.session()
        guest.prepare(guest_files(srv.port, tls.ca_pem()))

        def target() -> str:
            return api.get(srv.url(f"/api/v1/pools/{POOL}")).json()["spec"]["configuration"]["name"]

        def node_done_on(config: str):
            r = api.get(srv.url(f"/api/v1/nodes/{NODE}"))
            if r.status_code != 200:
                return None
            view = r.json()
            if not result.reports or result.reports[-1].get("report") != view.get("report"):
                result.reports.append(view)
            report = view.get("report") or {}
            done = report.get("state") == "Done" and report.get("currentConfig") == config
            return view if done else None

        def new_target(old: str) -> str:
            return wait_until(lambda: (lambda t: t if t != old else None)(target()), 60, guest,
                              "the server rendering the changed MachineConfig", poll=0.5)

        result.targets["first"] = target()
        with guest.running():
            t = time.monotonic()
            # Phases 1-3: first boot, its reboot, node-agent.service reporting Done in boot 2.
            wait_until(lambda: node_done_on(result.targets["first"]), PHASE_TIMEOUT, guest,
                       "first boot, its reboot and the Done report of boot 2")
            result.pool_after_second_boot = api.get(srv.url(f"/api/v1/pools/{POOL}")).json()
            timings["first-boot-to-done"] = time.monotonic() - t

            t = time.monotonic()
            set_probe(state, "v2")  # covered by the policy: restart vm-probe.service, no reboot
            result.targets["restart"] = new_target(result.targets["first"])
            wait_until(lambda: node_done_on(result.targets["restart"]), PHASE_TIMEOUT, guest,
                       "the day-2 restart change reported Done")
            timings["day2-restart"] = time.monotonic() - t

            t = time.monotonic()
            set_probe(state, "v2", extra_file=True)  # covered by nothing: drain and reboot
            result.targets["reboot"] = new_target(result.targets["restart"])
            wait_until(lambda: node_done_on(result.targets["reboot"]), PHASE_TIMEOUT, guest,
                       "the day-2 reboot change reported Done after the reboot")
            timings["day2-reboot"] = time.monotonic() - t

            result.node = api.get(srv.url(f"/api/v1/nodes/{NODE}")).json()
            result.pool = api.get(srv.url(f"/api/v1/pools/{POOL}")).json()
            t = time.monotonic()
            if not guest.powerdown():
                raise AssertionError("the guest did not power off within 180 s of the ACPI power button; "
                                     f"serial log:\n{guest.serial_text()}")
            timings["powerdown"] = time.monotonic() - t
        result.serial = guest.serial_text(200000)
    if os.path.exists(result.readback):
        shutil.rmtree(result.readback)
    guest.read_back(["/var/log/journal", "/var/lib/node-agent", "/etc/node-agent-vm", "/etc/kubernetes",
                     "/etc/systemd/system", "/etc/machine-config-daemon"], result.readback)
    timings["total"] = time.monotonic() - started
    result.timings = timings
    return result


def save(result: Result) -> str:
    """WORKDIR/result.json: the test's assertions can run again on a kept run
    (NODE_AGENT_VM_RESULT=WORKDIR/result.json make vm-test)."""
    path = os.path.join(result.workdir, "result.json")
    with open(path, "w") as f:
        json.dump(asdict(result), f, indent=1)
    return path


def load(path: str) -> Result:
    with open(path) as f:
        return Result(**json.load(f))


if __name__ == "__main__":  # python -m tests.vm.scenario WORKDIR: run it by hand, keep everything
    import signal
    import sys

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: stop the guest and the server

    res = run(os.path.abspath(sys.argv[1]))
    save(res)
    print(json.dumps({"timings": res.timings, "targets": res.targets, "node": res.node}, indent=2))
