"""deploy/prometheusrule.yaml's runbook links and deploy/servicemonitor.yaml against what they name:
each alert's ``runbook_url`` is a heading of docs/alerts.md on the project's own site, and that
section names the metric the alert reads; the ServiceMonitor selects daemonset.yaml's Service and
scrapes a port it has, as the pods serve it (HTTPS, /metrics). promtool's own checks of the rules:
tests/host/test_alert_rules.py."""

import os
import re

import yaml

from tests.helpers import paths

DEPLOY = os.path.join(paths.REPO, "deploy")
DOC = "docs/alerts.md"


def load_all(name):
    with open(os.path.join(DEPLOY, name), encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def alerts():
    [rule] = load_all("prometheusrule.yaml")
    return [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]


def project_url():
    """The project's URL, as the RPM spec declares it (``URL:``)."""
    with open(os.path.join(paths.REPO, "packaging", "node-agent.spec"), encoding="utf-8") as f:
        return re.search(r"^URL:\s*(\S+)", f.read(), re.M).group(1)


def slug(heading):
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def sections():
    """docs/alerts.md's level-2 sections by anchor: their text."""
    with open(os.path.join(paths.REPO, DOC), encoding="utf-8") as f:
        parts = re.split(r"^## (.+)$", f.read(), flags=re.M)
    return {slug(parts[i]): parts[i + 1] for i in range(1, len(parts), 2)}


def test_every_alert_links_its_runbook_section_of_docs_alerts_md_and_keeps_no_runbook_annotation():
    base = f"{project_url()}/blob/main/{DOC}#"
    found = sections()
    for rule in alerts():
        notes = rule["annotations"]
        assert "runbook" not in notes, f"{rule['alert']}: the annotation is runbook_url (Prometheus Operator's name)"
        url = notes.get("runbook_url", "")
        assert url.startswith(base), f"{rule['alert']}: runbook_url {url!r} is not a section of {base}"
        anchor = url[len(base):]
        assert anchor == slug(rule["alert"]), f"{rule['alert']}: its section is named after it, not {anchor!r}"
        assert anchor in found, f"{rule['alert']}: {DOC} has no heading '## {rule['alert']}' (anchor {anchor})"


def test_each_runbook_section_names_the_metric_its_alert_reads():
    found = sections()
    for rule in alerts():
        metrics = set(re.findall(r"\b(node_config_server_\w+|mcc_\w+)", rule["expr"]))
        assert metrics, f"{rule['alert']}: its expression reads no metric of ours: {rule['expr']!r}"
        text = found[slug(rule["alert"])]
        for metric in metrics:
            assert f"`{metric}" in text, f"{DOC}, '{rule['alert']}' does not name the metric it reads, {metric}"


def test_the_servicemonitor_scrapes_the_services_https_port_at_metrics():
    [monitor] = load_all("servicemonitor.yaml")
    [service] = [d for d in load_all("daemonset.yaml") if d["kind"] == "Service"]
    [daemonset] = [d for d in load_all("daemonset.yaml") if d["kind"] == "DaemonSet"]
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "ServiceMonitor")
    labels = service["metadata"].get("labels") or {}
    wanted = monitor["spec"]["selector"]["matchLabels"]
    assert wanted.items() <= labels.items(), f"the ServiceMonitor selects {wanted}, the Service has labels {labels}"
    assert service["metadata"]["namespace"] in monitor["spec"]["namespaceSelector"]["matchNames"]
    [endpoint] = monitor["spec"]["endpoints"]
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert endpoint["port"] in ports, f"the Service has no port named {endpoint['port']}: {sorted(ports)}"
    [container] = daemonset["spec"]["template"]["spec"]["containers"]
    probe = container["readinessProbe"]["httpGet"]
    assert probe["port"] == ports[endpoint["port"]]["targetPort"]  # the pods answer on that port...
    assert endpoint["scheme"] == probe["scheme"].lower() == "https"  # ...over TLS
    assert endpoint["path"] == "/metrics"
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    assert endpoint["tlsConfig"]["serverName"] == f"{name}.{namespace}.svc"
