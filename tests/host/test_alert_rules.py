"""deploy/prometheusrule.yaml, checked and unit-tested by Prometheus's own promtool (Debian's
``prometheus`` package, which ``make sysdeps`` installs): ``promtool check rules`` on its rule
groups, and ``promtool test rules`` on series as /metrics gives them (agent/server/http/metrics.py)
from two replicas: each alert pending, firing once (not once per replica) and resolved; a first
boot whose fetch errors were retried, or a spell shorter than an alert's ``for``, never fires. No
promtool is a failure, never a skip."""

import os
import shutil
import subprocess

import yaml

from tests.helpers import paths

RULES = os.path.join(paths.REPO, "deploy", "prometheusrule.yaml")
FAILED = 'node_config_server_firstboots{{pool="worker",stage="{stage}",outcome="{outcome}",instance="{instance}"}}'
STALLED = 'node_config_server_firstboots_stalled{{pool="{pool}",instance="{instance}"}}'

# Minutes 0..12 of first boots on two replicas (a and b: every replica reports the same gauges). A
# series the server stops exposing is marked stale by Prometheus at the next scrape ("stale").
SERIES = [
    # worker-a: failed at apply at minute 1; the admin fixes it and the next run is Done at minute 9
    *({"series": FAILED.format(stage="apply", outcome="failed", instance=i), "values": "_ 1x7 stale"} for i in "ab"),
    # worker-b: its fetch failed and was retried by the node (running at fetch), then Done
    *({"series": FAILED.format(stage="fetch", outcome="running", instance=i), "values": "1x5 stale"} for i in "ab"),
    # worker-c: failed at skew for one minute, then a new run (retried at once), running, then Done
    *({"series": FAILED.format(stage="skew", outcome="failed", instance=i), "values": "_x2 1 stale"} for i in "ab"),
    # infra: a first boot stalls at minute 3 (no report within its deadline); Done at minute 8
    *({"series": STALLED.format(pool="infra", instance=i), "values": "0x2 1x5 0x5"} for i in "ab"),
    *({"series": STALLED.format(pool="worker", instance=i), "values": "0x12"} for i in "ab"),
]


def firing(rule, labels, value="1"):
    """An alert as promtool expects it: its labels and its annotations as Prometheus templates them
    (``{{ $value }}`` and ``{{ $labels.X }}`` are all these rules use)."""
    def fill(text):
        text = text.replace("{{ $value }}", value)
        for key, val in labels.items():
            text = text.replace("{{ $labels." + key + " }}", val)
        return text

    return {"exp_labels": dict(labels, alertname=rule["alert"], **rule["labels"]),
            "exp_annotations": {k: fill(v) for k, v in rule["annotations"].items()}}


# Minutes 0..31 of rollouts, the state and drains on two replicas a and b.
HALTED = 'node_config_server_pool_rollout_halted{{pool="{pool}",instance="{instance}"}}'
DEGRADED = 'node_config_server_pool_degraded_machines{{pool="{pool}",instance="{instance}"}}'
RENDER = 'node_config_server_pool_render_degraded{{pool="{pool}",instance="{instance}"}}'
STATE_STALE = 'node_config_server_state_stale{{instance="{instance}"}}'
DRAIN = 'mcc_drain_err{{node="{node}",instance="{instance}"}}'
ROLLOUT_SERIES = [
    # worker's rollout halts at minute 2, a revert ends it at minute 21; infra's halts for 4 minutes only
    *({"series": HALTED.format(pool="worker", instance=i), "values": "0x1 1x18 0x10"} for i in "ab"),
    *({"series": HALTED.format(pool="infra", instance=i), "values": "0x3 1x3 0x24"} for i in "ab"),
    # two workers degraded from minute 5 to 24
    *({"series": DEGRADED.format(pool="worker", instance=i), "values": "0x4 2x19 0x7"} for i in "ab"),
    # infra cannot be rendered from minute 1 to 9; worker never
    *({"series": RENDER.format(pool="infra", instance=i), "values": "0 1x8 0x21"} for i in "ab"),
    *({"series": RENDER.format(pool="worker", instance=i), "values": "0x30"} for i in "ab"),
    # replica a's state directory is stale from minute 2 to 16, b's for 4 minutes only
    {"series": STATE_STALE.format(instance="a"), "values": "0x1 1x14 0x15"},
    {"series": STATE_STALE.format(instance="b"), "values": "0x19 1x3 0x7"},
    # w1's drain goes past the failure threshold at minute 3 and ends at minute 8 (the series goes,
    # as upstream deletes it); w2 drains without failing: no series
    *({"series": DRAIN.format(node="w1", instance=i), "values": "_x3 1x4 stale"} for i in "ab"),
]
PAUSED = 'node_config_server_pool_paused{{pool="{pool}",instance="{instance}"}}'
PAUSED_SERIES = [  # minutes 0..100: infra paused from minute 1 to 90, master for 30 minutes
    *({"series": PAUSED.format(pool="infra", instance=i), "values": "0 1x89 0x10"} for i in "ab"),
    *({"series": PAUSED.format(pool="master", instance=i), "values": "1x29 0x71"} for i in "ab"),
]


GATE = 'node_config_server_pool_gate_failed_closed{{pool="{pool}",gate="{gate}",instance="{instance}"}}'
GATE_SERIES = [  # minutes 0..40: worker's window annotation invalid from minute 1 to 30; infra's
    # Prometheus away for 10 minutes (a restart); the series of a gate whose annotation goes: stale
    *({"series": GATE.format(pool="worker", gate="maintenance-window", instance=i), "values": "0 1x29 stale"}
      for i in "ab"),
    *({"series": GATE.format(pool="infra", gate="alert-gate", instance=i), "values": "0x4 1x9 0x26"} for i in "ab"),
]


def checks(rules):
    """(series, [(time, alert, the alerts expected then)]) per promtool test: each alert pending,
    firing (once, of two replicas) and resolved; the short-lived ones never."""
    def fire(name, labels, value="1"):
        return [firing(rules[name], labels, value)]

    first_boots = [("2m", "NodeFirstBootFailed", []),  # pending: for 2m; worker-b (retried fetch errors): never
                   ("4m", "NodeFirstBootFailed", fire("NodeFirstBootFailed", {"pool": "worker", "stage": "apply"})),
                   ("8m", "NodeFirstBootFailed", fire("NodeFirstBootFailed", {"pool": "worker", "stage": "apply"})),
                   ("10m", "NodeFirstBootFailed", []),  # Done: resolved
                   ("3m", "NodeFirstBootStalled", []),  # pending: for 1m
                   ("5m", "NodeFirstBootStalled", fire("NodeFirstBootStalled", {"pool": "infra"})),
                   ("9m", "NodeFirstBootStalled", [])]  # Done: resolved
    rollouts = [("11m", "NodePoolRolloutHalted", []),  # pending: for 10m; infra's 4 minutes: never
                ("13m", "NodePoolRolloutHalted", fire("NodePoolRolloutHalted", {"pool": "worker"})),
                ("22m", "NodePoolRolloutHalted", []),
                ("14m", "NodePoolDegraded", []),
                ("16m", "NodePoolDegraded", fire("NodePoolDegraded", {"pool": "worker"}, "2")),
                ("25m", "NodePoolDegraded", []),
                ("5m", "NodePoolRenderDegraded", []),
                ("7m", "NodePoolRenderDegraded", fire("NodePoolRenderDegraded", {"pool": "infra"})),
                ("11m", "NodePoolRenderDegraded", []),
                ("11m", "NodeConfigStateStale", []),
                ("13m", "NodeConfigStateStale", fire("NodeConfigStateStale", {"instance": "a"})),  # b: never
                ("18m", "NodeConfigStateStale", []),
                ("23m", "NodeConfigStateStale", []),
                ("2m", "MCCDrainError", []),
                ("3m", "MCCDrainError", fire("MCCDrainError", {"node": "w1"})),  # at once, as upstream
                ("9m", "MCCDrainError", [])]
    paused = [("29m", "NodePoolPaused", []),  # master paused 30 minutes: never
              ("59m", "NodePoolPaused", []),  # infra pending: for 1h
              ("62m", "NodePoolPaused", fire("NodePoolPaused", {"pool": "infra"})),
              ("92m", "NodePoolPaused", [])]
    gates = [("15m", "NodePoolGateFailedClosed", []),  # pending: for 15m; infra's 9 minutes: never
             ("17m", "NodePoolGateFailedClosed",
              fire("NodePoolGateFailedClosed", {"pool": "worker", "gate": "maintenance-window"})),
             ("33m", "NodePoolGateFailedClosed", [])]
    return [(SERIES, first_boots), (ROLLOUT_SERIES, rollouts), (PAUSED_SERIES, paused), (GATE_SERIES, gates)]


def unit_tests(rules):
    """promtool's unit tests: when each alert is pending, firing (once, of two replicas) and gone."""
    return {"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series,
                       "alert_rule_test": [{"eval_time": t, "alertname": a, "exp_alerts": e} for t, a, e in cases]}
                      for series, cases in checks(rules)]}


def promtool():
    found = shutil.which("promtool")
    assert found, ("promtool is not installed: it is in Debian's prometheus package (make sysdeps installs it: "
                   "apt-get install prometheus)")
    return found


def rule_files(tmp_path):
    with open(RULES, encoding="utf-8") as f:
        rule = yaml.safe_load(f)
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))  # the groups: a plain rules file
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(unit_tests(rules)))
    return rule


def run(*args, cwd):
    return subprocess.run([promtool(), *args], capture_output=True, text=True, cwd=cwd, timeout=60)


ALERTS = ["NodeFirstBootFailed", "NodeFirstBootStalled", "NodePoolRolloutHalted", "NodePoolDegraded",
          "NodePoolRenderDegraded", "NodePoolPaused", "NodePoolGateFailedClosed", "NodeConfigStateStale",
          "MCCDrainError"]


def test_promtool_checks_the_shipped_rules(tmp_path):
    rule = rule_files(tmp_path)
    assert [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]] == ALERTS
    out = run("check", "rules", "rules.yaml", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in out.stdout + out.stderr


def test_every_alert_has_a_case_where_it_fires_and_a_later_one_where_it_is_resolved(tmp_path):
    rules = {r["alert"]: r for g in rule_files(tmp_path)["spec"]["groups"] for r in g["rules"]}
    minutes = {}
    for _, cases in checks(rules):
        for at, alert, expected in cases:
            minutes.setdefault(alert, []).append((int(at[:-1]), bool(expected)))
    for alert in ALERTS:
        fired = [m for m, firing_then in minutes.get(alert, []) if firing_then]
        assert fired, f"no promtool case where {alert} fires: add one to checks()"
        assert [m for m, firing_then in minutes[alert] if not firing_then and m > min(fired)], \
            f"no promtool case where {alert} is resolved after it fired: add one to checks()"


def test_the_alerts_fire_and_resolve_as_their_series_say_in_promtool(tmp_path):
    """First boots: a failure and a stall fire, retried fetch errors do not, Done ends them; a halted
    rollout, degraded nodes, a render failure, a stale state, a failed drain and a long pause fire
    past their ``for``, a shorter spell never, and each ends with its cause."""
    rule_files(tmp_path)
    out = run("test", "rules", "tests.yaml", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr
