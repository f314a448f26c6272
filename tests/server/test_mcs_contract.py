"""node-config-server speaks the MCS's contract: each Accept header a real Ignition sends, against
the real server (gunicorn, TLS). Every row cites the upstream behaviour it mirrors
(openshift/machine-config-operator pkg/server/; coreos/ignition internal/resource/url.go
configHeaders for what each Ignition release sends).
"""

import json
import shutil

import pytest

from agent.core.served import file_bytes, read_served
from tests.helpers.certs import make_tls
from tests.helpers.server_proc import ServerProcess
from tests.helpers.wait import wait_for
from tests.server.test_server_api import EXAMPLE, TOKEN

IGN = "application/vnd.coreos.ignition+json"
ANN = "machineconfiguration.openshift.io/"
IGN_KARG = "mitigations=auto,nosmt"  # in the worker config's Ignition kernelArguments.shouldExist
MC_KARGS = ["systemd.unified_cgroup_hierarchy=1", "cgroup_no_v1=all"]  # the MachineConfig's own
KUBECONFIG = ("apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n"
              "    server: https://api-int.example.com:6443\n    certificate-authority-data: Zm9v\n"
              "users:\n- name: kubelet\n  user: {token: bootstrap-token}\n"
              "contexts:\n- name: kubelet\n  context: {cluster: local, user: kubelet}\ncurrent-context: kubelet\n")
CA = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
WORKER_FILES = ["/etc/kubernetes/node-role", "/etc/sysctl.d/99-inotify.conf", "/etc/containers/registries.conf"]
# What the server adds, in upstream's appender order (server.go:98-197, cluster_server.go GetConfig:
# kubelet CA first, the encapsulated MachineConfig last) with node-agent's own three in between.
ADDED = ["/etc/kubernetes/kubelet-ca.crt", "/etc/machine-config-daemon/node-annotations.json",
         "/etc/kubernetes/kubeconfig", "/etc/mcs-machine-config-content.json",
         "/etc/node-agent/boot-image-skew.json", "/etc/node-agent/pool.json",
         "/etc/node-agent/disruption-policy.yaml", "/etc/ignition-machine-config-encapsulated.json"]

KARGS_MC = """apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfig
metadata:
  name: 60-worker-kargs
  labels: {machineconfiguration.openshift.io/role: worker}
spec:
  config:
    ignition: {version: 3.3.0}
    kernelArguments:
      shouldExist: ["@KARG@"]
""".replace("@KARG@", IGN_KARG)
SPECIAL_POOL = """apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfigPool
metadata: {name: special}
spec:
  machineConfigSelector: {matchLabels: {machineconfiguration.openshift.io/role: special}}
  nodeSelector: {matchLabels: {node-role.kubernetes.io/special: ""}}
"""
SPECIAL_MC = """apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfig
metadata:
  name: 00-special
  labels: {machineconfiguration.openshift.io/role: special}
spec:
  osImageURL: quay.io/openshift-release-dev/rhel-coreos-9:9.6.20250121-0
  config:
    ignition: {version: 3.3.0}
    kernelArguments:
      shouldNotExist: [quiet]
"""

# (id, Accept header or None, status, spec version served, where the Ignition karg lands, upstream)
ROWS = [
    ("none", None, 200, "2.2.0", "mc",
     "api.go detectSpecVersionFromAcceptHeader: no valid Accept at all -> v2_2 (curl, old scripts)"),
    ("curl-any", "*/*", 200, "2.2.0", "mc",
     "api.go: non-Ignition media ranges -> default spec 2.2.0"),
    ("json", "application/json", 200, "2.2.0", "mc",
     "api.go: non-Ignition media ranges -> default spec 2.2.0"),
    ("ignition-0.x", f"{IGN}; version=2.4.0, {IGN}; version=1; q=0.5, */*; q=0.1", 200, "2.2.0", "mc",
     "api.go: a version in [2.2.0, 3.0.0) -> 2.2.0 (api_test.go IgnV0 header; version=1 is no semver)"),
    ("spec-2.2", f"{IGN};version=2.2.0", 200, "2.2.0", "mc",
     "api.go: a version in [2.2.0, 3.0.0) -> 2.2.0"),
    ("ignition-2.0-3.0.0-any", f"{IGN};version=3.0.0, */*;q=0.1", 200, "3.0.0", "mc",
     "server.go MigrateKernelArgsIfNecessary: below 3.3 the Ignition kargs move into the MachineConfig"),
    ("ignition-2.0-3.0.0", f"{IGN};version=3.0.0", 200, "3.0.0", "mc",
     "server.go MigrateKernelArgsIfNecessary (spec 3.0 has no kernelArguments)"),
    ("ignition-2.3-3.1.0-any", f"{IGN};version=3.1.0, */*;q=0.1", 200, "3.1.0", "mc",
     "api.go: 3.1.0 served as asked; server.go MigrateKernelArgsIfNecessary"),
    ("ignition-2.3-3.1.0", f"{IGN};version=3.1.0", 200, "3.1.0", "mc",
     "api.go: 3.1.0 served as asked; server.go MigrateKernelArgsIfNecessary"),
    ("ignition-2.7-3.2.0-any", f"{IGN};version=3.2.0, */*;q=0.1", 200, "3.2.0", "mc",
     "api.go: 3.2.0 served as asked, not the newest: the */*;q=0.1 fallback is never used for a versioned ask"),
    ("ignition-2.7-3.2.0", f"{IGN};version=3.2.0", 200, "3.2.0", "mc",
     "api.go: 3.2.0 served as asked; server.go MigrateKernelArgsIfNecessary"),
    ("ignition-2.14-3.3.0", f"{IGN};version=3.3.0, */*;q=0.1", 200, "3.3.0", "ignition",
     "server.go MigrateKernelArgsIfNecessary: 3.3.0 carries kernelArguments itself"),
    ("ignition-2.15-3.4.0", f"{IGN};version=3.4.0, */*;q=0.1", 200, "3.4.0", "ignition",
     "api.go: 3.4.0 served as asked"),
    ("ignition-2.20-3.5.0", f"{IGN};version=3.5.0, */*;q=0.1", 200, "3.5.0", "ignition",
     "api.go: 3.5.0 served as asked (the MCO's internal spec)"),
    ("ignition-2.26-3.6.0", f"{IGN};version=3.6.0, */*;q=0.1", 200, "3.6.0", "ignition",
     "beyond the MCS (which stops at 3.5.0): 3.6.0 served as asked"),
    ("future-3.7.0", f"{IGN};version=3.7.0, */*;q=0.1", 200, "3.6.0", "ignition",
     "api.go: any 3.x below 4.0.0 gets the newest spec the server knows"),
    ("spec-4", f"{IGN};version=4.0.0, */*;q=0.1", 400, None, None,
     "api.go: an Ignition range whose version is not supported -> 400 (the */* does not rescue it)"),
    ("spec-1", f"{IGN};version=1.0.0", 400, None, None,
     "api.go: unsupported Ignition version in Accept header -> 400"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("mcs")
    state = root / "state"
    shutil.copytree(EXAMPLE, state)
    (state / "machineconfigs" / "60-worker-kargs.yaml").write_text(KARGS_MC)
    (state / "machineconfigpools" / "special.yaml").write_text(SPECIAL_POOL)
    (state / "machineconfigs" / "00-special.yaml").write_text(SPECIAL_MC)
    (state / "bootstrap").mkdir()
    (state / "bootstrap" / "kubeconfig").write_text(KUBECONFIG)
    (state / "bootstrap" / "kubelet-ca.crt").write_text(CA)
    with ServerProcess(str(state), tls=make_tls(str(root / "tls")), token=TOKEN) as srv:
        yield srv


def fetch(srv, pool, accept):
    s = srv.session()
    s.headers.pop("Accept", None)  # requests sends */* unless told; the "none" row sends nothing
    if accept is not None:
        s.headers["Accept"] = accept
    return s.get(srv.url(f"/config/{pool}"))


@pytest.mark.parametrize("name,accept,status,version,karg,upstream", ROWS, ids=[r[0] for r in ROWS])
def test_accept_table(server, name, accept, status, version, karg, upstream):
    r = fetch(server, "worker", accept)
    assert r.status_code == status, (upstream, r.text)
    if status != 200:
        assert r.json()["error"]["code"] == status and "Accept" in r.json()["error"]["message"] + \
            r.json()["error"].get("field", "")
        return
    doc = r.json()
    assert doc["ignition"]["version"] == version, upstream
    assert r.headers["Content-Type"] == f"{IGN};version={version}"
    files = doc["storage"]["files"]
    assert [f["path"] for f in files] == WORKER_FILES + ADDED, upstream
    served = read_served(doc)
    enc = served.encapsulated
    # The encapsulated MachineConfig: the full object, Ignition emptied at the negotiated version.
    assert enc["kind"] == "MachineConfig" and enc["metadata"]["name"] == served.config_name
    assert enc["spec"]["config"] == {"ignition": {"version": version}}
    assert set(enc["spec"]) >= {"osImageURL", "kernelArguments", "kernelType", "extensions", "fips"}
    if karg == "mc":
        assert "kernelArguments" not in doc, upstream
        assert enc["spec"]["kernelArguments"] == MC_KARGS + [IGN_KARG], upstream
    else:
        assert doc["kernelArguments"]["shouldExist"] == [IGN_KARG], upstream
        assert enc["spec"]["kernelArguments"] == MC_KARGS, upstream
    assert file_bytes(doc, "/etc/kubernetes/kubeconfig").decode() == KUBECONFIG
    assert file_bytes(doc, "/etc/kubernetes/kubelet-ca.crt").decode() == CA
    content = json.loads(file_bytes(doc, "/etc/mcs-machine-config-content.json"))
    assert content["metadata"]["name"] == served.config_name and content["spec"]["config"]["storage"]["files"]
    # Not a layered pool: no image annotations (server.go getNodeAnnotation with image "").
    assert ANN + "currentImage" not in served.annotations and ANN + "desiredImage" not in served.annotations
    if version == "2.2.0":
        assert all(f["filesystem"] == "root" and "overwrite" in f for f in files)
        assert "kubelet-ready.service" in [u["name"] for u in doc["systemd"]["units"]]


# (Accept, status, upstream) for a config with kernelArguments.shouldNotExist
SHOULD_NOT_EXIST = [
    (f"{IGN};version=3.2.0, */*;q=0.1", 500,
     "server.go MigrateKernelArgsIfNecessary errors on ShouldNotExist below 3.3; the MCS answers 500"),
    (None, 500, "the same for the default spec 2.2.0"),
    (f"{IGN};version=3.3.0, */*;q=0.1", 200, "3.3.0 carries shouldNotExist itself"),
]


@pytest.mark.parametrize("accept,status,upstream", SHOULD_NOT_EXIST)
def test_failed_conversion_is_500(server, accept, status, upstream):
    r = fetch(server, "special", accept)
    assert r.status_code == status, (upstream, r.text)
    if status == 500:
        assert "shouldNotExist" in r.json()["error"]["message"]
    else:
        assert r.json()["kernelArguments"] == {"shouldNotExist": ["quiet"]}


def test_node_agent_own_fetch_gets_34(server):
    from agent.resource.fetch import IGNITION_ACCEPT

    r = fetch(server, "worker", IGNITION_ACCEPT)
    assert r.status_code == 200 and r.json()["ignition"]["version"] == "3.4.0"


# -- layered-image gates (cluster_server.go resolveDesiredImageForPool, lines 291-352) -------------

INTERNAL = ("image-registry.openshift-image-registry.svc:5000/openshift-machine-config-operator/"
            "os-image@sha256:" + "2" * 64)
LAYERED = "registry.example.com/infra/os-image@sha256:4b2c8e5d0f1a7c3e9b6d2a8f4c1e7b3d9a5f2c8e6b4d1a7f3c9e5b2d8a6f4c1e"
NEWER = "registry.example.com/infra/os-image@sha256:" + "9" * 64
ACCEPT34 = f"{IGN};version=3.4.0, */*;q=0.1"


def layered_state(tmp_path, image=LAYERED):
    state = tmp_path / "state"
    shutil.copytree(EXAMPLE, state)
    for sub, name in (("machineosconfigs", "infra.yaml"), ("machineosbuilds", "infra-build-1.yaml")):
        p = state / sub / name
        p.write_text(p.read_text().replace(LAYERED, image))
    return state


def api(srv, path):
    r = srv.session().get(srv.url(path))
    assert r.status_code == 200, r.text
    return r.json()


def report(srv, node, **body):
    r = srv.node_session(node).post(srv.url(f"/api/v1/nodes/{node}/report"), json=dict(body, pool="infra"))
    assert r.status_code == 200, r.text


def test_internal_registry_image_never_reaches_a_new_node(tmp_path):
    state = layered_state(tmp_path, INTERNAL)
    with ServerProcess(str(state), tls=make_tls(str(tmp_path / "tls")), token=TOKEN) as srv:
        target = api(srv, "/api/v1/pools/infra")["spec"]["configuration"]["name"]
        report(srv, "i1", state="Done", currentConfig=target, currentImage=INTERNAL)  # proven on a member
        served = api(srv, "/api/v1/pools/infra")["status"]["served"]
        assert served["config"] == target and served["image"] != INTERNAL and served["layered"] is False
        assert "internal registry" in served["reason"] and INTERNAL in served["reason"]
        got = read_served(fetch(srv, "infra", ACCEPT34).json())
        assert got.encapsulated["spec"]["osImageURL"].startswith("quay.io/openshift-release-dev/rhel-coreos-9")
        assert ANN + "desiredImage" not in got.annotations  # a base image: no image annotations
        # a member (it has cluster DNS) does get the layered image
        s = srv.node_session("i1")  # naming a member takes its credential (agent/server/rollout/identity.py)
        s.headers["Accept"] = ACCEPT34
        member = read_served(s.get(srv.url("/config/infra"), headers={"X-Node-Name": "i1"}).json())
        assert member.encapsulated["spec"]["osImageURL"] == INTERNAL


def test_a_node_joining_mid_rollout_gets_the_proven_image_of_the_config_it_is_served(tmp_path):
    state = layered_state(tmp_path)
    with ServerProcess(str(state), tls=make_tls(str(tmp_path / "tls")), token=TOKEN) as srv:
        old = api(srv, "/api/v1/pools/infra")["spec"]["configuration"]["name"]
        report(srv, "i1", state="Done", currentConfig=old, currentImage=LAYERED)
        # A new config and its build: the MachineOSConfig's currentImagePullSpec moves to the new image.
        mc = state / "machineconfigs" / "50-infra.yaml"
        mc.write_text(mc.read_text().replace("      files:\n", "      files:\n      - path: /etc/infra-new\n"
                                             "        contents: {source: 'data:,new'}\n", 1))
        srv.wait_state_read()
        new = wait_for(lambda: (lambda name: name if name != old else None)(
            api(srv, "/api/v1/pools/infra")["spec"]["configuration"]["name"]), "the server picks up the change", 10)
        (state / "machineosbuilds" / "infra-build-2.yaml").write_text(
            (state / "machineosbuilds" / "infra-build-1.yaml").read_text()
            .replace(old, new).replace(LAYERED, NEWER).replace("name: infra-a613", "name: infra-b2"))
        mosc = state / "machineosconfigs" / "infra.yaml"
        mosc.write_text(mosc.read_text().replace(LAYERED, NEWER))
        srv.wait_state_read()
        wait_for(lambda: api(srv, "/api/v1/pools/infra")["status"]["layeredImage"] == NEWER,
                 "the server picks up the build", 30)
        # Nobody runs the new config: a new node gets the current one, with *its* proven image
        # (upstream serves the base image here; the pull spec already names the unproven build).
        served = api(srv, "/api/v1/pools/infra")["status"]["served"]
        assert (served["config"], served["image"], served["layered"]) == (old, LAYERED, True), served
        assert "proven by 1 node(s)" in served["reason"]
        got = read_served(fetch(srv, "infra", ACCEPT34).json())
        assert got.config_name == old and got.encapsulated["spec"]["osImageURL"] == LAYERED
        assert got.annotations[ANN + "desiredImage"] == LAYERED
        # Once a node runs the new config with the new image, new nodes get both. i1, a member,
        # fetches as itself first: a Done proves only a config served to that node
        # (docs/security.md "Identity"; the harness approves every name by rule).
        mine = read_served(srv.node_session("i1").get(srv.url("/config/infra"), headers={"Accept": ACCEPT34}).json())
        assert mine.config_name == new
        report(srv, "i1", state="Done", currentConfig=new, currentImage=NEWER)
        served = api(srv, "/api/v1/pools/infra")["status"]["served"]
        assert (served["config"], served["image"]) == (new, NEWER), served
