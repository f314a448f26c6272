"""``make demo``: a local node-config-server and first boots into scratch roots, narrated.

1. node-config-server on loopback (gunicorn, TLS with a throw-away CA, a bearer token), state
   copied from examples/state: pools master, worker and the custom pool infra, a node
   disruption policy, boot image skew enforcement (the demo leaves out the example's layered OS
   image, so that its nodes need no reboot).
2. infra-0 and infra-1 first-boot into the custom pool infra: their boot image already is the
   served OS image, so they join at once with no reboot.
3. worker-0 first-boots from a boot image too old for the skew rules: refused, console message.
4. An admin changes infra's chrony config: `node-agent plan` tells what it will do; the server
   targets infra-0 first (infra's maxUnavailable is 1) while infra-1 waits, and says why;
   `node-agent update --once` applies it under the policy (a restart, no drain, no reboot), and
   then infra-1 gets its turn.
5. The pools' status and the cluster's progress over all pools.

It ends with the commands that start the server again on the demo's state and data and look at
its pools and nodes (get, describe, get --watch), as printed they work from the checkout.

Everything lives under ./demo-run, ignored by git (removed and made again at each run;
$NODE_AGENT_DEMO_DIR elsewhere): state/ (the YAML), data/ (nodes.db), tls/, token, client.yaml.
Its server listens on 127.0.0.1:22623 ($NODE_AGENT_DEMO_PORT another port), the port its nodes'
pointer configs name, and the command printed at the end starts it there again. While that
server runs, the demo refuses to start (it would wipe ./demo-run under it) and says how to stop
it; Ctrl-C stops the demo and its server with one line.
"""

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from examples import demoprocs  # noqa: E402
from tests.helpers.certs import make_tls  # noqa: E402
from tests.helpers.noderoot import make_node_root, not_layered  # noqa: E402
from tests.helpers.server_proc import ServerProcess  # noqa: E402

RUN = os.environ.get("NODE_AGENT_DEMO_DIR") or os.path.join(REPO, "demo-run")  # tests run it elsewhere
TOKEN = "demo-token"
PORT = int(os.environ.get("NODE_AGENT_DEMO_PORT") or 22623)  # of the server the demo's last words start
BIN = os.path.dirname(sys.executable)


def title(text: str) -> None:
    Interrupt.check()
    # Bold only on a terminal: a log file or a pipe gets no escape codes.
    bold = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    print(f"\n\033[1m== {text}\033[0m" if bold else f"\n== {text}", flush=True)


def show(cmd, check_codes=(0,), quiet_stderr=False):
    shown = " ".join(os.path.relpath(c, REPO) if c.startswith(RUN) else c for c in cmd)
    print(f"$ {shown}", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    Interrupt.check()  # before the exit check: a command the Ctrl-C ended is no failure of its own
    out = proc.stdout.rstrip()
    if out:
        print(textwrap.indent(out, "  "))
    if proc.stderr.strip() and not quiet_stderr:
        print(textwrap.indent(_plain_log(proc.stderr).rstrip(), "  | "))
    print(f"  (exit {proc.returncode})", flush=True)
    if proc.returncode not in check_codes:
        raise SystemExit(f"demo: unexpected exit {proc.returncode} from {shown}")
    return proc


_STAGE_STARTED = re.compile(r"(?:[a-z]+: )?stage \S+ started")


def _plain_log(text: str) -> str:
    # The agent writes sd-daemon priority prefixes (<6>...) when not on a terminal; the demo
    # drops them and the "stage ... started" lines, "info: stage fetch started" (each stage's
    # end line says the same).
    lines = []
    for line in text.splitlines():
        if line[:1] == "<" and line[2:3] == ">":
            line = line[3:]
        if _STAGE_STARTED.fullmatch(line):
            continue
        lines.append(line)
    return "\n".join(lines)


def agent(*args):
    return [os.path.join(BIN, "node-agent"), *args]


def refuse_if_served() -> None:
    """The server the last demo printed how to start may still run on ./demo-run: wiping the
    directory under it would leave it serving files that are gone, and its clients a new CA."""
    pids = demoprocs.servers_of(RUN)
    if pids:
        listed = " ".join(str(p) for p in pids)
        raise SystemExit(f"demo: {_shown(RUN)}/ is in use: node-config-server (pid {listed}) serves from it, as the "
                         f"last demo printed; make demo would wipe it under the server\nwhat to do: stop that server "
                         f"(Ctrl-C in its terminal, or kill {listed}), then run make demo again")


class Interrupt:
    """Ctrl-C, once. The handler raises KeyboardInterrupt wherever the main thread is, and Python
    drops an exception raised inside a __del__ or a weakref callback (the collector runs them at any
    allocation): a Ctrl-C taken there would leave the demo running on. So the handler also records
    it, and every step starts by checking (``check``). A second Ctrl-C is recorded already and does
    nothing: it must not cut the server's stop short."""

    seen = False

    @classmethod
    def handler(cls, *_) -> None:
        if not cls.seen:
            cls.seen = True
            raise KeyboardInterrupt

    @classmethod
    def check(cls) -> None:
        if cls.seen:
            raise KeyboardInterrupt


def main() -> int:
    refuse_if_served()
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # a background job ignores Ctrl-C: so do we
        signal.signal(signal.SIGINT, Interrupt.handler)
    started = time.monotonic()
    shutil.rmtree(RUN, ignore_errors=True)
    os.makedirs(RUN)
    state = os.path.join(RUN, "state")
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    not_layered(state)  # no layered OS image: no reboot in this demo
    data = os.path.join(RUN, "data")  # nodes.db: kept for the commands printed at the end
    tls = make_tls(os.path.join(RUN, "tls"))

    title("1. node-config-server on loopback (TLS, bearer token), state from examples/state")
    # On the port the printed commands reopen it on: the nodes' pointer configs name that server.
    with ServerProcess(state, tls=tls, token=TOKEN, workers=2, threads=4, data_dir=data, port=_free(PORT)) as srv:
        api = srv.session()
        print(f"  listening on {srv.base_url}")
        for pool in api.get(srv.url("/api/v1/pools")).json()["items"]:
            served = pool["status"].get("served", {})
            print(f"  pool {pool['metadata']['name']:7} target {pool['spec']['configuration']['name']}"
                  f"\n  {'':12} serves {served.get('config')} + {served.get('image')}"
                  f"\n  {'':12} because {served.get('reason')}")

        title("2. infra-0 and infra-1 first-boot into the custom pool 'infra'")
        infra = api.get(srv.url("/config/infra"),
                        headers={"Accept": "application/vnd.coreos.ignition+json;version=3.4.0"})
        image = infra.headers.get("X-Served-Image", "")
        with open(os.path.join(RUN, "infra-before.ign"), "wb") as f:
            f.write(infra.content)
        kargs = _served_kargs(infra.json())
        print(f"  their boot image already runs {image} with kernel arguments {' '.join(kargs) or '(none)'}")
        roots = {}
        for name in ("infra-0", "infra-1"):
            roots[name] = make_node_root(os.path.join(RUN, name), srv.base_url, "infra", ca_pem=tls.ca_pem(),
                                         token=TOKEN, node_name=name, booted_image=image, cmdline=" ".join(kargs))
            show(agent("firstboot", "--root", roots[name]), quiet_stderr=name != "infra-0")
        infra0, infra1 = roots["infra-0"], roots["infra-1"]
        show(agent("status", "--root", infra0))
        with open(os.path.join(infra0, "etc/kubernetes/kubelet-env")) as f:
            print("  kubelet registers with: " + f.read().strip().replace("\n", "; "))
        seen = api.get(srv.url("/api/v1/nodes/infra-0")).json()
        print(f"  the server counts infra-0 in pool {seen['pool']} ({seen.get('membership', '')})")

        title("3. worker-0 boots from a boot image too old for the skew rules")
        worker0 = make_node_root(os.path.join(RUN, "worker-0"), srv.base_url, "worker", ca_pem=tls.ca_pem(),
                                 token=TOKEN, node_name="worker-0", aleph_version="48.84.202109241901-0")
        show(agent("firstboot", "--root", worker0), check_codes=(78,))
        issue_dir = os.path.join(worker0, "etc/issue.d")
        for name in sorted(os.listdir(issue_dir)):
            print(f"  console message ({os.path.relpath(os.path.join(issue_dir, name), RUN)}):")
            with open(os.path.join(issue_dir, name)) as f:
                print(textwrap.indent(f.read().rstrip(), "  | "))

        title("4. the admin changes infra's chrony config; the server rolls it out a node at a time")
        before = _target(api, srv, "infra")
        mc = os.path.join(state, "machineconfigs", "50-infra.yaml")
        with open(mc) as f:
            text = f.read()
        with open(mc, "w") as f:
            f.write(text.replace("pool%20ntp.infra.example.com%20iburst", "pool%20ntp2.infra.example.com%20iburst"))
        new_target = _wait_for_new_target(api, srv, "infra", before)
        print(f"  pool infra's target is now {new_target}")
        # What infra-0 itself will fetch: its desired config, which only the node's own credential
        # (kept by its first boot) may ask for by name.
        after = _member_fetch(api, srv, "infra-0", infra0)
        with open(os.path.join(RUN, "infra-after.ign"), "wb") as f:
            f.write(after.content)
        show(agent("plan", "--from", os.path.join(RUN, "infra-before.ign"), "--to",
                   os.path.join(RUN, "infra-after.ign"), "--policy",
                   os.path.join(state, "machineconfiguration.yaml")))
        print("  the server targets the nodes in turn (maxUnavailable 1): ROLLOUT says who updates, who waits")
        client = _client_config(tls, srv.base_url)
        show([os.path.join(BIN, "node-config-server"), "get", "nodes", "--config", client])
        show(agent("update", "--once", "--root", infra1))  # not its turn: it says so and changes nothing
        show(agent("update", "--once", "--root", infra0))
        _wait_for_turn(api, srv, "infra", "infra-1")  # the step that takes infra-0's Done targets infra-1
        show(agent("update", "--once", "--root", infra1))  # infra-0 is done: infra-1's turn
        show([os.path.join(BIN, "node-config-server"), "describe", "pool", "infra", "--config", client])

        title("5. pools and the cluster's progress over all pools")
        # exit 1: the cluster update is not complete (worker-0 is held back by its boot image)
        show([os.path.join(BIN, "node-config-server"), "status", "--state", state, "--data-dir", data],
             check_codes=(0, 1), quiet_stderr=True)
        cluster = api.get(srv.url("/api/v1/cluster")).json()
        print(f"  /api/v1/cluster: complete={cluster['complete']}")
        for block in cluster.get("blocking", []):
            print(f"    held back by {block['pool']}: {block['reason']}")
    print(f"\ndemo finished in {time.monotonic() - started:.1f} s; everything is under {_shown(RUN)}/")
    print_look_again(state, data, tls)
    return 0


def _free(port: int) -> int:
    from agent.server.cli.serveargs import ListenError, check_listen

    try:  # binds as gunicorn will: the last run's connections in TIME_WAIT are no obstacle
        check_listen("127.0.0.1", port)
    except ListenError as exc:
        raise SystemExit(f"demo: {str(exc).splitlines()[0].replace('--listen ', '', 1)}\nwhat to do: stop what listens there (the demo's "
                         f"server started again?), or choose another port: NODE_AGENT_DEMO_PORT=N") from None
    return port


def _shown(path: str) -> str:
    """``path`` as the printed commands name it: relative to the checkout when inside it."""
    path = os.path.abspath(path)
    return os.path.relpath(path, REPO) if path.startswith(REPO + os.sep) else path


def look_again_commands(state: str, data: str, tls) -> list:
    """[(what, argv)]: start the server on the demo's state and data, then look at it. Writes the
    token file and a client config (server, CA, token) under RUN."""
    token_file = os.path.join(RUN, "token")
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(TOKEN + "\n")
    client = os.path.join(RUN, "client.yaml")
    with open(client, "w") as f:
        f.write(f"server: https://127.0.0.1:{PORT}\ncertificateAuthority: {tls.ca_cert}\n"
                f"tokenFile: {os.path.abspath(token_file)}\n")
    ncs = _shown(os.path.join(BIN, "node-config-server"))
    serve = [ncs, "serve", "--state", _shown(state), "--data-dir", _shown(data), "--listen", f"127.0.0.1:{PORT}",
             "--tls-cert", _shown(tls.cert), "--tls-key", _shown(tls.key), "--token-file", _shown(token_file),
             # The demo's scratch nodes must count at once; a real server keeps new names pending until approved.
             "--auto-approve", ".*"]
    conf = ["--config", _shown(client)]
    return [("serve", serve), ("look", [ncs, "get", "pools", *conf]),
            ("look", [ncs, "describe", "pool", "worker", *conf]),
            ("look", [ncs, "describe", "node", "infra-0", *conf]),
            ("watch", [ncs, "get", "pools", "--watch", *conf])]


def print_look_again(state: str, data: str, tls) -> None:
    title(f"to look at this cluster again (from {_shown(REPO) if os.getcwd() != REPO else 'the checkout'})")
    commands = look_again_commands(state, data, tls)
    print("  start its server (TLS and the token, on the demo's state and data; Ctrl-C stops it):")
    print("    " + shlex.join(commands[0][1]))
    print("  then, in another terminal:")
    for _, argv in commands[1:]:
        print("    " + shlex.join(argv))


def _member_fetch(api, srv, node: str, root: str):
    credential = _node_credential(root)
    got = api.get(srv.url("/config/infra"), params={"node": node},
                  headers={"Accept": "application/vnd.coreos.ignition+json;version=3.4.0",
                           "Authorization": f"Bearer {credential}"})
    got.raise_for_status()
    return got


def _client_config(tls, base_url: str) -> str:
    """A client config for the demo's running server (its URL, CA and token)."""
    token_file = os.path.join(RUN, "token")
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(TOKEN + "\n")
    path = os.path.join(RUN, "client-during.yaml")
    with open(path, "w") as f:
        f.write(f"server: {base_url}\ncertificateAuthority: {tls.ca_cert}\ntokenFile: {os.path.abspath(token_file)}\n")
    return path


def _node_credential(root: str) -> str:
    from agent.host.root import Root
    from agent.node.report import read_credential
    from agent.node.status import STATE_DIR

    kept = read_credential(Root(root), STATE_DIR)
    if kept is None:
        raise SystemExit(f"demo: {root} has no node credential after its first boot")
    return kept["credential"]


def _served_kargs(ignition: dict):
    from agent.core.served import node_config_from_served

    return list(node_config_from_served(ignition).kernel_arguments)


def _target(api, srv, pool: str) -> str:
    return api.get(srv.url(f"/api/v1/pools/{pool}")).json()["spec"]["configuration"]["name"]


def _wait_for_turn(api, srv, pool: str, node: str, timeout: float = 60.0) -> None:
    """A report only wakes its pool's step, which decides the next turns a moment later, off the
    report's path (docs/rollout.md): wait until the pool's view shows ``node`` updating."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rollout = api.get(srv.url(f"/api/v1/pools/{pool}")).json()["status"]["rollout"]
        if node in rollout.get("updating", []):
            return
        time.sleep(0.1)
    raise SystemExit(f"demo: pool {pool} did not target {node} within {timeout:.0f} s; server log:\n"
                     f"{srv.log_text()[-3000:]}")


def _wait_for_new_target(api, srv, pool: str, old: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = _target(api, srv, pool)
        if new != old:
            return new
        time.sleep(0.25)
    status = api.get(srv.url(f"/api/v1/pools/{pool}")).json()["status"]
    raise SystemExit(f"demo: the server did not pick up the change within {timeout:.0f} s "
                     f"(held: {status.get('held') or 'no'}); server log:\n{srv.log_text()[-3000:]}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # its server is stopped by then (ServerProcess); the nodes' commands got the Ctrl-C too
        print(f"\ndemo: interrupted (Ctrl-C); its server is stopped, and what it made is under {_shown(RUN)}/ "
              f"(make demo starts over)", file=sys.stderr)
        # Under make, which got the Ctrl-C too and ends by it (the shell sees 130 all the same), an
        # exit 130 here would add make's "*** [Makefile: demo] Error 130" under this line.
        sys.exit(0 if os.environ.get("MAKELEVEL") else 130)
