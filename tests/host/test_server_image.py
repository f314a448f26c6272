"""make image (tools/image/build-image.sh): node-config-server's container image, a docker-archive
built from Debian's archive without a registry. Its config and layers are read back (the entry
point, a numeric non-root user, no setuid file, nothing world-writable, the wheel's modules and
their bytecode), and it is run: loaded by podman and run read-only as 1001 with no capability,
serving TLS /healthz and a config as deploy/daemonset.yaml runs it; imported by a private
containerd (``ctr images import``, as the VM guest's kubelet gets its images) and run by ctr.

The base layer is built once (debootstrap, 1 to 2.5 minutes here; make prepare builds it before
the suite, ``make image-base``) and cached; the wheel's layer is built here from this tree
(seconds). podman here: the overlay storage driver under a temporary root, runc (crun refuses
this machine's hybrid cgroup v1/v2 mounts), cgroupfs (systemd is not PID 1 in every test sandbox),
rlimits set (podman's defaults exceed what this sandbox allows) and the host's network (nothing to
set up).
A missing tool (podman, runc, containerd, ctr, debootstrap) is a failure: make sysdeps installs them.
"""

import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile

import pytest
import requests
import yaml

from agent import __version__
from tests.helpers.certs import make_tls
from tests.helpers.paths import REPO
from tests.helpers.server_proc import free_port
from tests.helpers.wait import healthz_answer, wait_for

BUILD = os.path.join(REPO, "tools", "image", "build-image.sh")
TAG = f"localhost/node-config-server:{__version__}"
ENTRYPOINT = "/usr/local/bin/node-config-server"
USER = "1001:1001"
STICKY_TMP = {"tmp", "var/tmp"}  # the only world-writable entries: sticky, and an emptyDir in the pod
TOOLS = ("podman", "runc", "containerd", "ctr", "debootstrap", "unshare", "chroot")
# One worker under make test's --dist loadgroup: one build, one podman store, one containerd.
pytestmark = [pytest.mark.xdist_group("server_image"), pytest.mark.image]


def _run(args, timeout=300, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    missing = [t for t in TOOLS if shutil.which(t) is None]
    assert not missing, f"the image test needs {', '.join(missing)}: make sysdeps installs them (as root)"
    assert os.geteuid() == 0, "make image needs root (debootstrap, chroot, a mount namespace): run the test as root"
    out = str(tmp_path_factory.mktemp("image") / "node-config-server-image.tar")
    # A cold base is a debootstrap (1 to 2.5 minutes here, more on a slow mirror); then cached.
    done = _run(["bash", BUILD, out], timeout=1800)
    assert done.returncode == 0, f"build-image.sh failed:\n{done.stdout}\n{done.stderr}"
    assert done.stdout.split()[0] == TAG, done.stdout
    return out


def read_archive(path):
    """The manifest, the config and each layer's members (name -> TarInfo), lowest layer first."""
    with tarfile.open(path) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))
        (entry,) = manifest
        config = json.load(outer.extractfile(entry["Config"]))
        layers = []
        for name in entry["Layers"]:
            with tarfile.open(fileobj=outer.extractfile(name), mode="r|") as layer:
                layers.append({m.name: m for m in layer})
    return entry, config, layers


def layer_file(path, index, name):
    """The bytes of one file of layer ``index``."""
    with tarfile.open(path) as outer:
        entry = json.load(outer.extractfile("manifest.json"))[0]
        with tarfile.open(fileobj=io.BytesIO(outer.extractfile(entry["Layers"][index]).read())) as layer:
            return layer.extractfile(name).read()


@pytest.fixture(scope="module")
def contents(archive):
    return read_archive(archive)


def test_the_archive_is_tagged_with_the_version_and_its_config_runs_the_server_as_numeric_user_1001(contents):
    entry, config, layers = contents
    assert entry["RepoTags"] == [TAG]
    run = config["config"]
    assert run["Entrypoint"] == [ENTRYPOINT] and run["Cmd"] is None  # the DaemonSet gives only args
    assert run["User"] == USER  # numeric: runAsNonRoot can check it without the image's passwd
    assert any(e.startswith("PATH=") for e in run["Env"])
    assert len(config["rootfs"]["diff_ids"]) == len(layers) == len(config["history"]) == 2


def test_deploy_names_this_image_and_runs_it_as_the_images_user_with_a_read_only_root(contents):
    _, config, _ = contents
    with open(os.path.join(REPO, "deploy", "daemonset.yaml")) as f:
        daemonset = next(d for d in yaml.safe_load_all(f) if d["kind"] == "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == TAG and "command" not in container  # args only: the entry point runs
    assert str(pod["securityContext"]["runAsUser"]) == config["config"]["User"].split(":")[0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]  # the only place it writes


def test_no_layer_holds_a_setuid_or_setgid_file_or_anything_world_writable_but_sticky_tmp(contents):
    _, _, layers = contents
    setid = [n for layer in layers for n, m in layer.items() if m.mode & 0o6000]
    writable = [n for layer in layers for n, m in layer.items()
                if m.mode & 0o002 and not m.issym() and not (n in STICKY_TMP and m.isdir() and m.mode & 0o1000)]
    assert (setid, writable) == ([], [])
    assert not [n for layer in layers for n, m in layer.items() if m.isdev() or m.isfifo()]


def test_the_wheel_layer_holds_the_server_its_bytecode_and_the_entry_point(archive, contents):
    _, _, (base, app) = contents
    site = next(n for n in app if n.endswith("dist-packages/agent/server/cli/main.py")).rsplit("/agent/", 1)[0]
    version = site.split("/")[-2].replace("python", "").replace(".", "")  # python3.13 -> 313
    for module in ("agent/server/cli/main.py", "agent/server/http/gevent_worker.py", "agent/core/__init__.py"):
        assert f"{site}/{module}" in app
        folder, leaf = module.rsplit("/", 1)
        assert f"{site}/{folder}/__pycache__/{leaf[:-3]}.cpython-{version}.pyc" in app  # the root is read-only
    assert f"{site}/node_agent-{__version__}.dist-info/METADATA" in app
    script = app[ENTRYPOINT.lstrip("/")]
    assert script.isfile() and script.mode == 0o755 and (script.uid, script.gid) == (0, 0)
    assert layer_file(archive, 1, ENTRYPOINT.lstrip("/")).startswith(b"#!/usr/bin/python3\n")
    assert "from agent.server.cli import main" in layer_file(archive, 1, ENTRYPOINT.lstrip("/")).decode()
    assert "usr/bin/python3" in base  # the interpreter comes from the base, not from the wheel's layer


def test_the_base_layer_names_user_1001_and_holds_the_servers_dependencies_from_debian(archive, contents):
    _, _, (base, _) = contents
    passwd = layer_file(archive, 0, "etc/passwd").decode()
    assert "node-config-server:x:1001:1001::/nonexistent:/usr/sbin/nologin" in passwd.splitlines()
    for module in ("gunicorn", "gevent", "prometheus_client", "yaml", "requests", "tenacity", "rich"):
        assert f"usr/lib/python3/dist-packages/{module}/__init__.py" in base, module
    assert not [n for n in base if n.startswith(("usr/share/doc/", "usr/share/man/", "var/lib/apt/lists/"))]


def test_the_same_tree_gives_the_same_archive_byte_for_byte(archive, tmp_path):
    again = str(tmp_path / "again.tar")
    done = _run(["bash", BUILD, again], timeout=600)
    assert done.returncode == 0, done.stderr
    with open(archive, "rb") as a, open(again, "rb") as b:
        assert a.read() == b.read()


class Podman:
    """podman with its storage under ``root`` (nothing of the host's is touched)."""

    def __init__(self, root):
        self.root = root
        self.runroot = tempfile.mkdtemp(prefix="ncs-podman-")  # podman wants it under 50 characters
        self.base = ["podman", "--root", f"{root}/storage", "--runroot", self.runroot, "--storage-driver",
                     "overlay", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
        # As the DaemonSet runs it: a read-only root (podman gives /tmp a tmpfs, the pod an emptyDir),
        # no capability, no privilege escalation, the image's own (numeric) user.
        self.secure = ["--read-only", "--cap-drop=all", "--security-opt=no-new-privileges",
                       "--ulimit=nofile=4096:4096", "--ulimit=nproc=4096:4096"]

    def __call__(self, *args, timeout=300):
        return _run([*self.base, *args], timeout=timeout)

    def close(self):
        self("rm", "--all", "--force", "--time", "5")
        self("rmi", "--all", "--force")
        overlay = f"{self.root}/storage/overlay"
        if os.path.ismount(overlay):  # podman's overlay driver bind-mounts its own directory
            subprocess.run(["umount", overlay], check=False)
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.runroot, ignore_errors=True)


@pytest.fixture(scope="module")
def podman(archive, tmp_path_factory):
    pm = Podman(str(tmp_path_factory.mktemp("podman")))
    try:
        loaded = pm("load", "-i", archive)
        assert loaded.returncode == 0 and f"Loaded image: {TAG}" in loaded.stdout, loaded.stderr
        yield pm
    finally:
        pm.close()


def test_podman_runs_it_read_only_as_user_1001_with_no_capability(podman):
    ident = podman("run", "--rm", "--network=none", *podman.secure, "--entrypoint", "/bin/sh", TAG, "-c",
                   "id; grep CapEff /proc/self/status; touch /usr/x 2>&1; touch /tmp/x && echo tmp writable")
    assert ident.returncode == 0, ident.stderr
    lines = ident.stdout.splitlines()
    assert lines[0].startswith("uid=1001(node-config-server) gid=1001(node-config-server)")
    assert lines[1].split() == ["CapEff:", "0000000000000000"]
    assert "Read-only file system" in lines[2] and lines[3] == "tmp writable"
    version = podman("run", "--rm", "--network=none", *podman.secure, TAG, "--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"node-config-server {__version__}"), version.stderr


def test_the_server_in_podman_serves_tls_healthz_and_a_config_as_the_daemonset_runs_it(podman, tmp_path):
    tls = make_tls(str(tmp_path / "tls"))
    secrets = tmp_path / "tokens"
    secrets.mkdir()
    (secrets / "bootstrap").write_text("s3cret-bootstrap\n")
    (secrets / "admin").write_text("s3cret-admin\n")
    for f in (tls.cert, tls.key, secrets / "bootstrap", secrets / "admin"):
        os.chmod(f, 0o644)  # a Secret's files are 0644 in the pod (defaultMode), readable by 1001
    port = free_port()
    name = f"nodeconfig-{port}"
    started = podman("run", "-d", "--name", name, "--network=host", *podman.secure,
                     "-v", f"{tmp_path / 'tls'}:/etc/node-config-server/tls:ro",
                     "-v", f"{secrets}:/etc/node-config-server/tokens:ro",
                     "-v", f"{os.path.join(REPO, 'examples', 'state')}:/state:ro", TAG,
                     "serve", "--state=/state", "--data-dir=/tmp/data", f"--listen=127.0.0.1:{port}",
                     f"--tls-cert=/etc/node-config-server/tls/{os.path.basename(tls.cert)}",
                     f"--tls-key=/etc/node-config-server/tls/{os.path.basename(tls.key)}",
                     "--token-file=/etc/node-config-server/tokens/bootstrap",
                     "--admin-token-file=/etc/node-config-server/tokens/admin")
    assert started.returncode == 0, started.stderr
    try:
        url = f"https://127.0.0.1:{port}"

        def healthz():
            if podman("inspect", "--format", "{{.State.Running}}", name).stdout.strip() != "true":
                pytest.fail(f"the server's container stopped:\n{podman('logs', name).stderr}")
            return healthz_answer(f"{url}/healthz", verify=tls.ca_cert)

        health = wait_for(healthz, "the server in podman answering /healthz over TLS", timeout=120)
        assert health.status_code == 200 and health.json()["status"] == "ok", health.text
        config = requests.get(f"{url}/config/worker", verify=tls.ca_cert, timeout=10,
                              headers={"Authorization": "Bearer s3cret-bootstrap"})
        assert config.status_code == 200 and "ignition" in config.json(), config.text
        metrics = requests.get(f"{url}/metrics", verify=tls.ca_cert, timeout=10)  # its multiprocess dir is in /tmp
        assert metrics.status_code == 200 and "node_config_server_requests_total" in metrics.text
    finally:
        podman("stop", "--time", "20", name)
        logs = podman("logs", name)
        podman("rm", "--force", name)
    assert "Traceback" not in logs.stdout + logs.stderr, logs.stderr


@pytest.fixture(scope="module")
def containerd(tmp_path_factory):
    """A private containerd (its own root, state and socket; no CRI plugin) for ``ctr``."""
    d = tmp_path_factory.mktemp("containerd")
    sock = f"{d}/containerd.sock"
    (d / "config.toml").write_text(f'version = 2\nroot = "{d}/root"\nstate = "{d}/state"\n'
                                   f'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n[grpc]\n  address = "{sock}"\n')
    with open(d / "containerd.log", "wb") as log:
        proc = subprocess.Popen(["containerd", "--config", str(d / "config.toml")], stdout=log, stderr=log,
                                start_new_session=True)
    try:
        wait_for(lambda: proc.poll() is not None or _run(["ctr", "-a", sock, "version"], timeout=30).returncode == 0,
                 "the private containerd answering ctr version", timeout=60)
        assert proc.poll() is None, (d / "containerd.log").read_text()
        yield ["ctr", "-a", sock, "-n", "k8s.io"]  # kubelet's namespace, as in the VM guest
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for mount in reversed(open("/proc/self/mounts").read().split("\n")):
            if f" {d}/" in mount:
                subprocess.run(["umount", mount.split()[1]], check=False)


def test_containerd_imports_it_and_ctr_runs_it_read_only_as_user_1001(archive, containerd):
    imported = _run([*containerd, "images", "import", archive])
    assert imported.returncode == 0, imported.stderr
    listed = _run([*containerd, "images", "list", "--quiet"])
    assert TAG in listed.stdout.split(), listed.stdout
    ident = _run([*containerd, "run", "--rm", "--read-only", TAG, "image-id", "/usr/bin/id"], timeout=120)
    assert ident.stdout.startswith("uid=1001(node-config-server) gid=1001(node-config-server)"), ident.stderr
    version = _run([*containerd, "run", "--rm", "--read-only", TAG, "image-version", ENTRYPOINT, "--version"], timeout=120)
    assert version.stdout.strip() == f"node-config-server {__version__}", version.stderr
