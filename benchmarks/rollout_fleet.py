"""Light agents for benchmarks/bench_rollout.py: one greenlet per simulated node, speaking the HTTP
protocol node-agent speaks to node-config-server, in a process of its own (gevent monkey-patches
it, which must not happen to the benchmark's process: run.py runs the other benchmarks there).

    python benchmarks/rollout_fleet.py SPEC.json      # SPEC: {"url", "token", "admin", "pool", "names", "update_s"}

Each node, as after its first boot: registers (``POST /api/v1/nodes/<n>/register`` with the
bootstrap token and the credential it made itself, ``nac1_...``), is approved as the admin
approves a name (``POST /api/v1/nodes/<n>/approve`` with the admin token: with
``--backend kubernetes`` a report counts only once a kubelet certificate or the admin proved the
name, docs/security.md; a kubelet certificate per simulated node would measure TLS set-up), fetches its config as a member
and reports Done on it. Then the day-2 loop of agent/node/update.py: a member fetch of
``/config/<pool>?wait=25`` with its credential, ``X-Node-Name`` and ``If-None-Match`` of the config it
runs (held by the server until its desired config changes), ``turn.HELD_IDLE`` between passes. When
served another config with ``X-Rollout: updating`` it plans the change with node-agent's own planner
(agent/node/planning.make_plan, memoised per pair of configs: every node makes the same move), asks
for its drain lease when the plan drains (``POST .../drain`` until granted; 409 deferred or
retargeted: it keeps its config and goes back to the loop), reports Working (desiredConfig the new
one), takes the fixed update time, reports Working "reboot pending" when the plan reboots, then Done
on the new config, and gives its lease back when it did not reboot (the server ends it on Done
otherwise), as update.Updater._carry_out does. On a layered pool each of these reports carries the
desiredImage the server targeted, read as Updater reads it (the served node annotations'
``desiredImage``, which the server writes only when it serves a layered image), and Done the image
served as its currentImage: the server keeps a layered node's entry until its report carries the
image (targeting ``_done_on``), so without it a layered rollout stops after its first wave.

What it does goes to stdout as JSON lines, one per event, as it happens: ``{"t": time.time(), "n":
node, "e": event, ...}`` with events ``learned`` (a fetch served it a new config to update to;
``c`` the config, ``drain``/``reboot`` the plan, ``img`` the desiredImage on a layered pool),
``granted`` (its drain lease), ``working``, ``done`` (the Done report was sent: the update is over
on the node; ``img`` its currentImage on a layered pool), ``deferred``, ``refused`` (a
drain lease refused: ``wait`` the Retry-After, ``why`` the server's reason), ``retry`` (a
request that failed and was tried again: ``why``); ``{"ready": N}`` once every node reported Done
on its first config. The benchmark reads them as they come.
"""

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any, Dict, Optional, Tuple  # noqa: E402

import gevent  # noqa: E402
import gevent.lock  # noqa: E402
import gevent.pool  # noqa: E402
import requests  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agent import __version__  # noqa: E402
from agent.node import turn  # noqa: E402
from agent.node.credential import new_credential  # noqa: E402
from agent.resource.fetch import IGNITION_ACCEPT  # noqa: E402

SETUP_CONCURRENCY = 64  # registrations and first reports at once (not measured: the fleet's set-up)
RETRY = 1.0  # seconds before a failed request is tried again
TIMEOUT = 30.0  # seconds a request may take beyond what the server may hold it


class Out:
    """JSON lines on stdout, one write each (greenlets never interleave a line)."""

    def __init__(self) -> None:
        self.lock = gevent.lock.Semaphore()

    def __call__(self, **event: Any) -> None:
        line = json.dumps(event, separators=(",", ":")) + "\n"
        with self.lock:
            sys.stdout.write(line)
            sys.stdout.flush()


class Plans:
    """node-agent's plan of each move between two served configs, made once per pair (every node
    of the pool makes the same move; planning it a thousand times would measure the client)."""

    def __init__(self) -> None:
        self.bodies: Dict[str, bytes] = {}
        self.done: Dict[Tuple[str, str], Tuple[bool, bool]] = {}
        self.images: Dict[str, str] = {}
        self.lock = gevent.lock.Semaphore()

    def keep(self, etag: str, body: bytes) -> None:
        self.bodies.setdefault(etag, body)

    def desired_image(self, etag: str) -> str:
        """The layered image the server targeted with the config of ETag ``etag``: the served node
        annotations' desiredImage, which the server writes only when it serves a layered image, as
        Updater reads it (``served.annotations``); "" on a pool that is not layered."""
        with self.lock:
            if etag not in self.images:
                from agent.core.served import ANN, read_served

                self.images[etag] = read_served(json.loads(self.bodies[etag])).annotations.get(ANN + "desiredImage", "")
            return self.images[etag]

    def plan(self, old: str, new: str) -> Tuple[bool, bool]:
        """(drain, reboot) of the move from the config with ETag ``old`` to ``new``."""
        with self.lock:
            if (old, new) not in self.done:
                from agent.node import planning

                cur, _ = planning.target_from_served(json.loads(self.bodies[old]), source="current")
                tgt, served = planning.target_from_served(json.loads(self.bodies[new]), source="served")
                plan = planning.make_plan(cur, tgt, served.policy_text, firstboot=False)
                self.done[(old, new)] = (bool(plan.drain), bool(plan.reboot))
            return self.done[(old, new)]


class Agent:
    def __init__(self, spec: Dict[str, Any], name: str, out: Out, plans: Plans):
        self.base, self.pool, self.name = spec["url"].rstrip("/"), spec["pool"], name
        self.token, self.admin, self.update_s = spec["token"], spec["admin"], float(spec["update_s"])
        self.out, self.plans = out, plans
        self.s = requests.Session()
        self.s.trust_env = False
        self.s.headers["User-Agent"] = f"node-agent/{__version__}"
        self.credential = new_credential()
        self.config, self.etag, self.image = "", "", ""

    def _url(self, what: str) -> str:
        return f"{self.base}/api/v1/nodes/{self.name}/{what}"

    def _auth(self) -> Dict[str, str]:
        return {"Authorization": f"Bearer {self.credential}"}

    def _call(self, method: str, url: str, ok: Tuple[int, ...], **kw: Any) -> requests.Response:
        """One request, tried again after RETRY while the answer is not ``ok`` (a 5xx, a reset)."""
        while True:
            try:
                r = self.s.request(method, url, timeout=kw.pop("timeout", TIMEOUT), **kw)
                if r.status_code in ok:
                    return r
                why = f"HTTP {r.status_code} {r.text[:200]}"
            except requests.RequestException as exc:
                why = f"{type(exc).__name__}: {exc}"[:300]
            self.out(t=time.time(), n=self.name, e="retry", why=f"{method} {url}: {why}")
            gevent.sleep(RETRY)

    def report(self, state: str, current: str, desired: str, reason: str = "", image: str = "",
               desired_image: str = "") -> None:
        body = {"pool": self.pool, "state": state, "currentConfig": current, "desiredConfig": desired}
        if reason:
            body["reason"] = reason
        if image:
            body["currentImage"] = image
        if desired_image:
            body["desiredImage"] = desired_image
        self._call("POST", self._url("report"), (200,), data=json.dumps(body),
                   headers={**self._auth(), "Content-Type": "application/json"})

    def fetch(self, hold: float) -> requests.Response:
        url = f"{self.base}/config/{self.pool}"
        headers = {**self._auth(), "X-Node-Name": self.name, "Accept": IGNITION_ACCEPT, "Accept-Encoding": "identity"}
        if self.etag:
            headers["If-None-Match"] = self.etag
        return self._call("GET", turn.with_wait(url, hold) if hold else url, (200, 304), headers=headers,
                          timeout=TIMEOUT + hold)

    def first_boot(self) -> None:
        """Registered, on the pool's config, Done: a node after its first boot."""
        self._call("POST", self._url("register"), (200, 201), data=json.dumps({"credential": self.credential}),
                   headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
        self._call("POST", self._url("approve"), (200,), headers={"Authorization": f"Bearer {self.admin}"})
        r = self.fetch(0)
        self._took(r)
        self.report("Done", self.config, self.config, image=self.image)

    def _took(self, r: requests.Response) -> None:
        self.config, self.etag = r.headers["X-Served-Config"], r.headers["ETag"]
        self.image = r.headers.get("X-Served-Image", "")
        self.plans.keep(self.etag, r.content)

    def loop(self) -> None:
        while True:
            r = self.fetch(turn.HOLD)
            told, served = time.time(), r.headers.get("X-Served-Config", "")
            if r.status_code == 200 and r.headers.get("X-Rollout") == "updating" and served != self.config:
                self.update(r, served, told)
            gevent.sleep(turn.HELD_IDLE)

    def update(self, r: requests.Response, target: str, told: float) -> None:
        """``told``: when the fetch that served ``target`` returned. The desiredImage the server
        targeted (a layered pool) goes with every report on the way, as Updater sends it; Done
        carries it with the image served as currentImage (after the reboot: the image booted)."""
        etag = r.headers["ETag"]
        self.plans.keep(etag, r.content)
        drain, reboot = self.plans.plan(self.etag, etag)
        want = self.plans.desired_image(etag)
        self.out(t=told, n=self.name, e="learned", c=target, drain=drain, reboot=reboot, **({"img": want} if want else {}))
        if drain and not self.lease(target):
            return
        self.report("Working", self.config, target, desired_image=want)
        self.out(t=time.time(), n=self.name, e="working", c=target)
        gevent.sleep(self.update_s)
        image = r.headers.get("X-Served-Image", "")
        if reboot:  # before the reboot the node still runs its old image
            self.report("Working", target, target, reason="reboot pending", image=self.image, desired_image=want)
        self.out(t=time.time(), n=self.name, e="done", c=target, **({"img": image} if want else {}))
        self.report("Done", target, target, image=image, desired_image=want)
        self.config, self.etag, self.image = target, etag, image
        if drain and not reboot:
            self._call("DELETE", self._url("drain"), (200, 404), headers=self._auth())

    def lease(self, target: str) -> bool:
        """The drain lease for ``target``, as Reporter.acquire_drain asks for it: False when the
        server deferred or retargeted the node (it keeps its config: back to the loop)."""
        body = json.dumps({"pool": self.pool, "config": target})
        while True:
            r = self._call("POST", self._url("drain"), (200, 409, 429, 503), data=body,
                           headers={**self._auth(), "Content-Type": "application/json"})
            if r.status_code == 200:
                self.out(t=time.time(), n=self.name, e="granted", c=target)
                return True
            answer = _json(r)
            if r.status_code == 409:
                self.out(t=time.time(), n=self.name, e="deferred", c=target, status=answer.get("status"),
                         why=str(answer.get("reason") or answer)[:500])
                return False
            wait = float(r.headers.get("Retry-After") or 1)
            if answer.get("status") != "draining":  # refused a slot (draining: granted, the drain goes on)
                self.out(t=time.time(), n=self.name, e="refused", c=target, code=r.status_code, wait=wait,
                         why=str(answer.get("reason") or answer)[:300])
            gevent.sleep(wait)


def _json(r: requests.Response) -> Dict[str, Any]:
    try:
        doc = r.json()
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def main(argv: Optional[list] = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    with open(args[0]) as f:
        spec = json.load(f)
    out, plans = Out(), Plans()
    agents = [Agent(spec, name, out, plans) for name in spec["names"]]
    start = time.time()
    gevent.pool.Pool(SETUP_CONCURRENCY).map(Agent.first_boot, agents)
    out(ready=len(agents), seconds=round(time.time() - start, 3))
    gevent.joinall([gevent.spawn(a.loop) for a in agents])
    return 0


if __name__ == "__main__":
    sys.exit(main())
