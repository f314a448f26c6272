"""Five first boots that go wrong, against a real node-config-server, each timed from the moment
it went wrong to the moment the server shows it (issue 47): the tests on every backend
(tests/server/test_firstboot_visibility.py, tests/etcd/..., tests/kube/...) and
benchmarks/bench_firstboot_visibility.py run them.

| scenario | node | what goes wrong | the server shows |
|---|---|---|---|
| source-unreachable | pool ``fbsource`` | a served file's remote source refuses connections; the node retries it (the transient errors of a fetch) until ``fetch.totalTimeout`` | Failed at stage plan, exit 69 |
| skew-refused | worker | the boot image is older than the skew rules' minimum | Failed at stage skew, exit 78 |
| apply-rolled-back | worker | the disk fills up at the apply's first write (tests/helpers/fail_apply.py) | Failed at stage apply, exit 75 |
| killed-after-fetch | worker | SIGKILL as the validate stage starts, after the fetch and its report | Stalled, last stage fetch |
| reboot-never-back | infra | the first boot asks for its reboot (kernel arguments) and the node never comes back | Stalled, last stage report, reboot pending |

Each is timed from the node's exit: a reported failure's report went out just before it (so it
is visible within that report's round trip), and a stalled node's last report too (the kill after
the fetch's report; the end of the run that asked for the reboot).
``recover`` then runs the two stalled nodes on (the killed first boot again; both nodes' day-2
loop after their reboot), which clears the stall and ends each first boot Done.
"""

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from tests.helpers import paths
from tests.helpers.noderoot import make_node_root

REPO = paths.REPO
SOURCE_POOL = "fbsource"
UNREACHABLE = "http://127.0.0.1:9/fbsource.conf"  # the discard port: nothing listens, connections are refused
BOOT_ID = "proc/sys/kernel/random/boot_id"
OLD_ALEPH = "48.84.202109241901-0"  # older than the examples' skew minimum

SOURCE_OBJECTS = [
    {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
     "metadata": {"name": SOURCE_POOL},
     "spec": {"machineConfigSelector": {"matchExpressions": [{"key": "machineconfiguration.openshift.io/role",
                                                              "operator": "In", "values": ["worker", SOURCE_POOL]}]},
              "nodeSelector": {"matchLabels": {f"node-role.kubernetes.io/{SOURCE_POOL}": ""}}}},
    {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
     "metadata": {"name": f"50-{SOURCE_POOL}", "labels": {"machineconfiguration.openshift.io/role": SOURCE_POOL}},
     "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
         {"path": "/etc/fbsource.conf", "mode": 420, "contents": {"source": UNREACHABLE}}]}}}},
]


@dataclass(frozen=True)
class Scenario:
    name: str
    pool: str
    outcome: str  # what the server shows: Failed or Stalled
    stage: str
    exit_code: int  # of the node process (-9: killed)


SCENARIOS = (Scenario("source-unreachable", SOURCE_POOL, "Failed", "plan", 69),
             Scenario("skew-refused", "worker", "Failed", "skew", 78),
             Scenario("apply-rolled-back", "worker", "Failed", "apply", 75),
             Scenario("killed-after-fetch", "worker", "Stalled", "fetch", -9),
             Scenario("reboot-never-back", "infra", "Stalled", "report", 0))


@dataclass
class Run:
    scenario: Scenario
    node: str
    root: str
    exit_code: Optional[int] = None
    stderr: str = ""
    went_wrong: float = 0.0  # time.time() of the failure (the node's exit) or of its last report
    shown: float = 0.0  # when the server first showed the outcome
    view: Dict[str, Any] = field(default_factory=dict)  # the node's firstBoot as the server showed it
    at_exit: Dict[str, Any] = field(default_factory=dict)  # what the replica it reported to showed at its exit

    @property
    def seconds(self) -> float:
        return self.shown - self.went_wrong

    @property
    def after_last_report(self) -> float:
        """Seconds from the node's last report (the record's reportedAt, on this host's clock as
        the server's) to the moment every replica showed the outcome."""
        from agent.server.rollout.progress import epoch_of

        return self.shown - float(epoch_of(self.view.get("reportedAt")) or 0.0)


def write_source_pool(state_dir: str) -> None:
    """The ``fbsource`` pool and its MachineConfig in a state directory (a copy of examples/state)."""
    import yaml

    for obj in SOURCE_OBJECTS:
        sub = "machineconfigpools" if obj["kind"] == "MachineConfigPool" else "machineconfigs"
        with open(os.path.join(state_dir, sub, f"{obj['metadata']['name']}.yaml"), "w") as f:
            yaml.safe_dump(obj, f)


def agent(*args: str, wrapper: Optional[List[str]] = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", *(wrapper or ["agent.cli"]), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=REPO)


def served_target(session: Any, base_url: str, pool: str) -> Any:
    from agent.core.served import node_config_from_served

    r = session.get(f"{base_url}/config/{pool}", headers={"Accept": "application/vnd.coreos.ignition+json;version=3.4.0"},
                    timeout=30)
    assert r.status_code == 200, r.text
    return node_config_from_served(r.json())


def make_root(tmp: str, sc: Scenario, node: str, base_url: str, ca_pem: Optional[bytes], token: str,
              infra_image: str) -> str:
    # 2 s of retries of the unreachable source: the longest gap between two reports of these
    # first boots, well within the tests' deadlines (a loaded machine stretches it)
    kw: Dict[str, Any] = {"fetch_budget": 2 if sc.name == "source-unreachable" else 30}
    if sc.name == "skew-refused":
        kw["aleph_version"] = OLD_ALEPH
    if sc.name == "reboot-never-back":  # booted on the pool's image: only the kernel arguments need the reboot
        kw.update(booted_image=infra_image, cmdline="")
    root = make_node_root(os.path.join(tmp, node), base_url, sc.pool, ca_pem=ca_pem, token=token, node_name=node, **kw)
    boot = os.path.join(root, BOOT_ID)
    os.makedirs(os.path.dirname(boot), exist_ok=True)
    with open(boot, "w") as f:
        f.write("boot-1\n")
    return root


def first_boot(run: Run) -> None:
    """The node's first boot, the scenario's fault injected; ``went_wrong`` set as it ends."""
    name = run.scenario.name
    args = ["firstboot", "--root", run.root]
    wrapper = None
    if name == "killed-after-fetch":
        wrapper = ["tests.helpers.kill_at_stage", "validate", "enter", "--"]
    elif name == "apply-rolled-back":
        wrapper = ["tests.helpers.fail_apply", "--"]
    done = agent(*args, wrapper=wrapper)
    run.went_wrong = time.time()
    run.exit_code, run.stderr = done.returncode, done.stderr


def node_view(session: Any, base_url: str, node: str) -> Dict[str, Any]:
    r = session.get(f"{base_url}/api/v1/nodes/{node}", timeout=10)
    return r.json() if r.status_code == 200 else {}


def run_all(session: Any, base_url: str, ca_pem: Optional[bytes], token: str, tmp: str, prefix: str,
            wait: Callable[..., Any], deadline: float, views: Optional[List[Callable[[str], Dict]]] = None,
            prepare: Optional[Callable[[Run], None]] = None, stalls: bool = True) -> Dict[str, Run]:
    """The five scenarios at once (one thread each); each run's node shown by the server
    (``views``: readers of a node's view, one per replica; every one must show it) with the
    scenario's outcome. ``wait``: tests.helpers.wait.wait_for; ``prepare``: called with each run
    once its root is made (a kubelet's client certificate put in it, to prove the name).
    ``stalls=False``: the server's deadline is longer than the test (``deadline`` is then only a
    bound for a hang), so a stalled scenario is waited for as Running at the stage it stopped in,
    its last report in; the caller stalls it by a pool's deadline, when it chooses."""
    infra_image = served_target(session, base_url, "infra").os_image_url
    views = views or [lambda node: node_view(session, base_url, node)]
    runs = {sc.name: Run(sc, f"{prefix}{sc.name}", "") for sc in SCENARIOS}
    for run in runs.values():
        run.root = make_root(tmp, run.scenario, run.node, base_url, ca_pem, token, infra_image)
        if prepare is not None:
            prepare(run)
    errors: List[BaseException] = []

    def one(run: Run) -> None:
        try:
            first_boot(run)
            if run.exit_code != run.scenario.exit_code:
                raise AssertionError(f"{run.node}: exit {run.exit_code}, expected {run.scenario.exit_code}:\n"
                                     f"{run.stderr}")
            run.at_exit = views[0](run.node).get("firstBoot") or {}  # one read, no wait
            outcome = run.scenario.outcome if stalls or run.scenario.outcome != "Stalled" else "Running"
            for read in views:
                run.view = wait(lambda read=read: _shows(read(run.node), run.scenario, outcome),
                                f"{run.node}: {outcome}", deadline + 30, 0.05)
                run.shown = max(run.shown, time.time())
        except BaseException as exc:  # handed to the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(run,)) for run in runs.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return runs


def _shows(view: Dict[str, Any], sc: Scenario, outcome: str) -> Optional[Dict[str, Any]]:
    fb = view.get("firstBoot") or {}
    return fb if fb.get("outcome") == outcome and fb.get("stage") == sc.stage else None


def recover(runs: Dict[str, Run]) -> None:
    """The two stalled nodes go on: the killed first boot runs again (it resumes, and asks for its
    reboot as every example pool's first boot does: a report, which clears the stall), then both
    nodes boot again (a new boot id) and their day-2 loop reports Done, which ends the first boot."""
    killed, rebooted = runs["killed-after-fetch"], runs["reboot-never-back"]
    again = agent("firstboot", "--root", killed.root)
    assert again.returncode == 0, again.stderr
    for run in (killed, rebooted):
        with open(os.path.join(run.root, BOOT_ID), "w") as f:
            f.write("boot-2\n")
        back = agent("update", "--once", "--root", run.root)
        assert back.returncode == 0, back.stderr


def summary(runs: Dict[str, Run]) -> str:
    return json.dumps({name: {"exit": r.exit_code, "stage": r.view.get("stage"), "outcome": r.view.get("outcome"),
                              "seconds": round(r.seconds, 3)} for name, r in runs.items()}, indent=1)
