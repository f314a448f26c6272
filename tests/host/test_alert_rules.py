"""deploy/prometheusrule.yaml, checked and unit-tested by Prometheus's own promtool (Debian's
``prometheus`` package, which ``make sysdeps`` installs): ``promtool check rules`` on its rule
groups, and ``promtool test rules`` on series as /metrics gives them (agent/server/http/metrics.py)
from two replicas: a failure fires, a first boot whose fetch errors were retried does not, a stall
fires, and each alert ends when the node reports Done. No promtool is a failure, never a skip."""

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


def unit_tests(rules):
    """promtool's unit tests: when each alert is pending, firing (once, of two replicas) and gone."""
    failed = firing(rules["NodeFirstBootFailed"], {"pool": "worker", "stage": "apply"})
    stalled = firing(rules["NodeFirstBootStalled"], {"pool": "infra"})
    checks = [("2m", "NodeFirstBootFailed", []),  # pending: for 2m; worker-b (retried fetch errors): never
              ("4m", "NodeFirstBootFailed", [failed]),  # worker-a once, of two replicas; worker-c: never (1 minute)
              ("8m", "NodeFirstBootFailed", [failed]),
              ("10m", "NodeFirstBootFailed", []),  # Done: resolved
              ("3m", "NodeFirstBootStalled", []),  # pending: for 1m
              ("5m", "NodeFirstBootStalled", [stalled]),
              ("9m", "NodeFirstBootStalled", [])]  # Done: resolved
    return {"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": SERIES,
                       "alert_rule_test": [{"eval_time": t, "alertname": a, "exp_alerts": e} for t, a, e in checks]}]}


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


def test_promtool_checks_the_shipped_first_boot_rules(tmp_path):
    rule = rule_files(tmp_path)
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert alerts == ["NodeFirstBootFailed", "NodeFirstBootStalled"]
    assert all(r["annotations"].get("runbook") for g in rule["spec"]["groups"] for r in g["rules"])
    out = run("check", "rules", "rules.yaml", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 2 rules found" in out.stdout + out.stderr


def test_the_alerts_fire_on_a_failure_and_a_stall_not_on_retried_fetch_errors_and_end_on_done(tmp_path):
    rule_files(tmp_path)
    out = run("test", "rules", "tests.yaml", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr
