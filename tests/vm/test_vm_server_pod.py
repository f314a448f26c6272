"""node-config-server as the cluster runs it (issue 55; tests/vm/serverpod.py): deploy/ applied
unchanged (the 1.20 overlay: the PodDisruptionBudget's apiVersion only), the image `make image`
builds imported into the guest's containerd, the DaemonSet's pod on the guest's real kubelet,
and every day-2 request of the guest served by it: the host's process was stopped first."""

import glob
import os
import re

import pytest

from tests.helpers import rbac_list
from tests.vm import scenario, serverpod
from tests.vm.summary import pods_by_uid

pytestmark = pytest.mark.vm
NODE = scenario.NODE
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# gunicorn's access log line (serve --access-log=-, deploy/daemonset.yaml): ... "METHOD PATH ..." STATUS
# ... "UA" ETAG (gunicorn_app.ACCESS_LOG_FORMAT)
ACCESS = re.compile(r'"(GET|POST|HEAD) (\S+) HTTP/[\d.]+" (\d{3}) .*"(node-agent/[^"]*)" \S+\s*$')


def logs_before_roll(run):
    """The logs of the pod the move made, its containers of boot 2 and of boot 3: `kubectl logs -f`
    from the move to the day-2 reboot, and `kubectl logs` just before the rolling update."""
    [logs] = run.kube["serverPodBeforeRoll"]["logs"].values()
    return run.kube["serverPodBeforeRoll"]["followed"], logs["current"]


def pod_logs(run):
    """The server's container logs, one text per container start, in order: the two of the pod the
    move made (as `kubectl logs` served them before the rolling update deleted that pod, and the
    kubelet its files), then the rolled pod's as the kubelet keeps them in /var/log/pods, read back
    from the guest's disk."""
    pattern = os.path.join(run.readback, "pods", f"{serverpod.NAMESPACE}_node-config-server-*", "node-config-server",
                           "*.log")
    files = sorted(glob.glob(pattern), key=lambda p: int(os.path.basename(p).split(".")[0]))
    texts = [logs["text"] for logs in logs_before_roll(run)]
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            texts.append(f.read())
    return texts


def agent_requests(text):
    """(method, path, status) of each request node-agent made (its User-Agent), in order."""
    out = []
    for line in text.splitlines():
        m = ACCESS.search(line)
        if m:
            out.append((m.group(1), m.group(2), int(m.group(3))))
    return out


def test_the_daemonsets_pod_runs_on_the_guest_as_its_service_account_with_no_kubeconfig(run):
    """The pod the DaemonSet made on the guest: hostNetwork, system-cluster-critical, as service
    account node-config-server with its token and CA mounted, no --kubeconfig, the API server
    named by --apiserver-url from the ConfigMap; its log says it talks to that URL with the
    in-cluster credentials. Read-only root, no capabilities, non-root 1001."""
    pod = run.kube["serverPod"]["podAtReady"]
    assert (pod["nodeName"], pod["owner"], pod["hostNetwork"]) == (NODE, ["DaemonSet"], True), pod
    assert (pod["serviceAccountName"], pod["priorityClassName"]) == ("node-config-server", "system-cluster-critical")
    assert not [a for a in pod["args"] if "kubeconfig" in a], pod["args"]
    assert "--apiserver-url=$(APISERVER_URL)" in pod["args"] and "--backend=kubernetes" in pod["args"]
    [env] = [e for e in pod["env"] if e["name"] == "APISERVER_URL"]
    assert env["valueFrom"]["configMapKeyRef"] == {"name": "node-config-server-config", "key": "apiserver-url"}
    assert SA_DIR in {m["mountPath"] for m in pod["volumeMounts"]}, pod["volumeMounts"]
    assert pod["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["podSecurityContext"]["runAsUser"] == 1001 and pod["podSecurityContext"]["runAsNonRoot"] is True
    logs = pod_logs(run)
    assert logs, "no container log of the server's pod in the guest's /var/log/pods"
    said = re.findall(r"Kubernetes API (https://\S+) as in-cluster \(" + re.escape(SA_DIR) + r"\)", logs[0])
    assert said and set(said) == {f"https://{scenario.HOST_FROM_GUEST}:{run.kube['apiPort']}"}, logs[0][-3000:]


def test_kubectl_auth_can_i_list_as_the_pods_service_account_is_exactly_rbac_yaml_and_what_every_account_has(run):
    """Least privilege where it runs: the account the pod runs as may do deploy/rbac.yaml's grants
    and what the cluster gives every service account, nothing more nor less, in its namespaces, in
    kube-system and in default (tests/helpers/rbac_list.py)."""
    seen = run.kube["serverPod"]["canIList"]
    assert {ns: (v["extra"], v["missing"]) for ns, v in seen.items()} == \
        {ns: ([], []) for ns in rbac_list.NAMESPACES}


def test_a_rolling_update_of_the_server_replaces_its_pod_and_moves_neither_the_pool_nor_the_nodes_report(run):
    """`kubectl rollout restart daemonset/node-config-server` while the guest's loop runs (after the
    day-2 reboot, the Node uncordoned): a new pod (another uid) Ready, the rollout complete, and the
    pool's target and counts and the node's report as the server answers them the same after as
    before (node state is in the API, none in the pod); the broken config's revert then goes
    through the new pod."""
    roll = run.kube["serverRoll"]
    assert roll["newPod"]["uid"] not in roll["oldPods"] and roll["newPod"]["ready"], roll["newPod"]
    assert roll["newPod"]["nodeName"] == NODE and "successfully rolled out" in roll["status"], roll["status"]
    assert roll["after"] == roll["before"], roll
    assert roll["before"]["report"]["state"] == "Done" and roll["before"]["counts"]["machineCount"] == 1, roll
    # the rolled pod served to the end: the revert's reports reached it
    assert [p["uid"] for p in run.kube["serverPodAtEnd"]["pods"]] == [roll["newPod"]["uid"]]
    rolled = pod_logs(run)[2:]
    assert any(p == f"/api/v1/nodes/{NODE}/report" for text in rolled for _, p, _ in agent_requests(text)), \
        [text[-2000:] for text in rolled]


def test_the_pod_passed_its_readiness_probe_before_the_host_process_stopped_and_day_2_began(run):
    sp = run.kube["serverPod"]
    ready = [c for c in sp["podAtReady"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True", sp["podAtReady"]["conditions"]
    assert sp["hostExited"]
    assert sp["installedAt"] < sp["readyAt"] < sp["hostStoppedAt"] < sp["forwardedAt"] < sp["servingAt"]
    assert sp["servingAt"] < run.phase_started["restart"], (sp, run.phase_started)


def test_the_guests_day_2_fetches_reports_and_drain_reached_the_pod(run):
    """Every day-2 request went to the pod (the host's process was gone): its access log holds
    node-agent's fetches of the pool's config, its reports and its drain requests, answered;
    across the reboot too (the container the kubelet started again in boot 3)."""
    boot2, boot3 = (logs["text"] for logs in logs_before_roll(run))
    seen = [r for text in (boot2, boot3) for r in agent_requests(text)]
    paths = {(m, p.split("?")[0]) for m, p, _ in seen}
    report, drain = f"/api/v1/nodes/{NODE}/report", f"/api/v1/nodes/{NODE}/drain"
    assert ("GET", f"/config/{scenario.POOL}") in paths and ("POST", report) in paths, sorted(paths)
    assert any(p == drain for _, p in paths), sorted(paths)
    assert any(s == 200 for m, p, s in seen if p.startswith(f"/config/{scenario.POOL}")), seen[-20:]
    # boot 3: the reboot restarted the server's container; its Done report reached the new one
    assert any(p == report for _, p, _ in agent_requests(boot3)), boot3[-4000:]


TAGGED = re.compile(r'"GET (/config/\S+) HTTP/[\d.]+" (\d{3}) \S+ .*"node-agent/[^"]*" (\S+)\s*$')
# A failed attempt whose request the server may have answered all the same: the node cut it off
# waiting for the answer (agent/resource/transport.py, Watchdog.reason), and its retry is answered again.
CUT_OFF = ("sent no response headers", "sent no complete response headers", "did not finish")
# A pass that ended without applying its target, which the next pass is served again (it asks with
# the ETag of the config it still runs): no drain lease in time, or the server deferred the update
# (agent/node/report.py, acquire_drain).
NOT_APPLIED = ("no drain lease from", " is deferred by ")


def config_answers(run):
    """(status, ETag, where) of each answer to a fetch of the pool's config, in order; ``where``
    names the log and line, for a failure's message."""
    out = []
    for n, text in enumerate(pod_logs(run)):
        for i, line in enumerate(text.splitlines()):
            m = TAGGED.search(line)
            if m and m.group(1).startswith(f"/config/{scenario.POOL}"):
                out.append((m.group(2), m.group(3), f"log {n} line {i + 1}: {line[-160:]}"))
    return out


def test_the_nodes_fetches_of_the_config_it_has_are_held_or_304_the_same_body_twice_only_when_the_node_said_why(run, journal):
    """The node keeps the ETag of every config it was served (its first boot's and each update's),
    so its day-2 fetch asks If-None-Match and the server holds it or answers 304: a config is not
    answered 200 right after an answer of the same ETag. (An update once recorded no ETag: after
    it, the node was sent its whole config at every pass, every 2 s.) Two exceptions, each in the
    node's journal:
    - by design (agent/node/revert.py, keep_served_etag): the node's first fetch after it reverted
      a config asks with the ETag of the config it runs again, so while the target is still the one
      it reverted it is answered 200 with it once more, declines it ("not applied again") and asks
      with that config's ETag from then on. Seen beside the suites, where the admin's take-back
      came after that fetch; never twice.
    - the node cut off an attempt waiting for its answer and retried (CUT_OFF): the server may have
      answered the first, which the node never read (a run on a loaded machine: a held fetch's
      new target was answered as the node's 35 s attempt timeout cut it off, and answered again);
      or its pass ended before it applied the target (NOT_APPLIED: its drain not granted in time,
      or deferred), and the next pass was served the target again.
    The ETag is the access log's last field; two 200s in a row of different ETags are two
    configs, however alike in size."""
    answers = config_answers(run)
    assert any(status == "200" for status, _, _ in answers), answers[-20:]
    assert all(etag != "-" for status, etag, _ in answers if status in ("200", "304")), answers[-20:]
    again = [i for i in range(1, len(answers)) if answers[i][0] == "200" and answers[i][1] == answers[i - 1][1]]
    said = journal.messages(SYSLOG_IDENTIFIER="node-agent")
    declined = [m for m in said if f"{run.targets['broken']} was reverted after a failed health check: "
                                   "not applied again" in m]
    cut_off = [m for m in said if f"/config/{scenario.POOL}" in m and " failed: " in m and any(c in m for c in CUT_OFF)]
    not_applied = [m for m in said if any(c in m for c in NOT_APPLIED)]
    assert len(declined) <= 1 and len(again) <= len(declined) + len(cut_off) + len(not_applied), \
        ([answers[j] for i in again for j in (i - 1, i)], declined, cut_off, not_applied)


def test_the_drain_left_the_servers_pod_and_the_reboot_restarted_its_container(run):
    """The drain (cordon, evictions) never touched the server's DaemonSet pod: the same pod (the one
    the move made, before day 2), never deleted, on the node after the day-2 reboot; the guest's
    reboot stopped its container and the kubelet started it again (restartCount), and it was Ready
    again."""
    first = run.kube["serverPod"]["podAtReady"]
    end = run.kube["serverPodBeforeRoll"]["pods"]
    assert [p["uid"] for p in end] == [first["uid"]], end
    assert end[0]["ready"] and end[0]["restartCount"] >= 1, end
    # the workload's pods were evicted by the same drain (the server's own log says so too)
    evicted = [e for events in pods_by_uid(run).values() for e in events if e.get("deleting")]
    assert evicted
    followed = run.kube["serverPodBeforeRoll"]["followed"]
    assert any("cordoned and drained" in text for text in pod_logs(run)), (
        {k: followed.get(k) for k in ("exit", "streams", "problems")},
        [line[-200:] for line in followed["text"].splitlines() if "drain" in line.lower()][-8:])


def test_kubectl_logs_on_the_host_show_the_guests_day_2_requests_of_both_boots(run):
    """`kubectl logs -f` and `kubectl logs`, run on the host against its API server, which reaches
    the guest's kubelet at the Node's own InternalIP and kubelet port (the guest's
    10.0.2.15:10250; tests/vm/kubeletroute.py): the container of boot 2 logged the node's fetches
    of the pool's config and its drain requests (followed from the move until the day-2 reboot
    ended the stream), the one of boot 3 the node's Done report (taken after the reboot, before the
    rolling update replaced the pod). `kubectl logs --previous` showed boot 2's too whenever the
    kubelet posted the container it replaced as terminated (the run records whether it did)."""
    route = run.kube["kubeletRoute"]
    assert (route["address"], route["port"], route.get("problem")) == ("10.0.2.15", 10250, None), route
    followed, current = logs_before_roll(run)
    assert current["exit"] == 0, current["stderr"]
    now, before = agent_requests(current["text"]), agent_requests(followed["text"])
    assert ("POST", f"/api/v1/nodes/{NODE}/report", 200) in now, now[-10:]
    assert any(m == "GET" and p.startswith(f"/config/{scenario.POOL}") and s == 200 for m, p, s in before), before[-10:]
    assert any(p == f"/api/v1/nodes/{NODE}/drain" for _, p, _ in before), before[-10:]
    if run.kube["serverPodBeforeRoll"]["lastStatePosted"]:
        [logs] = run.kube["serverPodBeforeRoll"]["logs"].values()
        assert logs["previous"]["exit"] == 0, logs["previous"]["stderr"]
        # One container per boot: a container the kubelet restarted within boot 2 (a liveness
        # probe's failures, as a CI run's starved guest had with the probes' 1 s default timeout)
        # would be what --previous shows, and the followed log would hold both.
        [pod] = run.kube["serverPodBeforeRoll"]["pods"]
        assert pod["restartCount"] == 1, ("restarted within a boot too", pod["restartCount"], pod["lastState"])
        assert agent_requests(logs["previous"]["text"])[:len(before)] == before
