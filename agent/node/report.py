"""Reports to node-config-server. They never block provisioning.

A report that cannot be delivered is kept (the newest one only: a report is the node's state,
so a later one supersedes an earlier one) under the state directory and sent again by the next
run of the agent or by the day-2 loop.

Identity: before its first report the node registers once (``POST /api/v1/nodes/<node>/register``
with the bootstrap token of ``report.tokenFile``); reports, drain leases and member fetches then
carry its own credential, so only this node can act as itself (agent/server/rollout/identity.py).
Like the bootstrap token, it is sent only over https.

Registration survives a kill at any point: the node makes its credential first and keeps it in
``<stateDir>/node-credential`` (0600, written atomically, under ``--root``) marked
``"registered": false``, then registers sending it (the server keeps its hash), then marks it
registered. A run that finds an unregistered credential registers again with the same one, which
the server answers as done (idempotent): a kill between the server's answer and the mark costs a
request, never an admin. A server that makes the credential itself (an older one) is still
understood: the answer's credential is kept.
"""

import datetime
import hashlib
import json
import logging
import os
import time
import urllib.parse
from typing import Any, Callable, Dict, Optional

from agent.host.files import atomic_write
from agent.host.root import Root
from agent.node.credential import (  # noqa: F401 - read_credential, remove_credential: also the API's names
    CREDENTIAL,
    _load_json,
    credential_path,
    new_credential,
    read_credential,
    remove_credential,
)
from agent.node.kubeletid import KubeletIdentity
from agent.node.refusal import refusal_hint, refusal_text  # noqa: F401 - refusal_text: also this module's name
from agent.node.turn import UpdateDeferred, deferral, remember

log = logging.getLogger(__name__)

PENDING = "pending-report.json"
# Answers worth sending again later (as the fetcher retries them); any other 4xx is final.
RETRIED_4XX = (408, 429)
CONTENT_REFUSALS = (400, 413, 415, 422)  # the body was refused: that report is held back, the next one is sent
# Seconds until a body refused for itself is sent again (ours): a node's state often stands, so its next
# report is that body, and a refusal kept for ever silenced it (a VM run's Done report answered 400 for a
# connection broken while it was read: the node never reported again). docs/api.md "Report body".
REFUSED_BODY_RETRY = 600.0


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _server_message(resp) -> str:
    """The server's JSON error message (``{"error": {"message"}}``), else the start of the body."""
    try:
        data = resp.json()
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"][:300]
    except ValueError:
        pass
    return (resp.text or "").strip()[:200]


def read_kept(path: str) -> Optional[Dict[str, Any]]:
    """The kept report at ``path``; a report kept by an older version (the bare body) is wrapped."""
    data, readable = _load_json(path)
    if not readable:
        log.warning("dropping unreadable kept report %s", path)
        try:
            os.unlink(path)
        except OSError:
            pass
        return None
    if not isinstance(data, dict):
        return None
    if not isinstance(data.get("report"), dict):
        data = {"report": data}
    return data


def server_base(config_url: str) -> str:
    """``https://host:22623/config/worker`` -> ``https://host:22623``."""
    parts = urllib.parse.urlsplit(config_url)
    return f"{parts.scheme}://{parts.netloc}"


class Reporter(KubeletIdentity):
    def __init__(self, base_url: str, node: str, root: Root, state_dir: str, *, session=None,
                 token: Optional[str] = None, timeout: float = 10.0, kubelet_cert: str = "", fetcher=None,
                 clock: Callable[[], float] = time.time):
        """``kubelet_cert``: report.kubeletCertFile (under ``root``; "" presents none);
        ``fetcher``: the run's Fetcher, whose session presents it to this server alone
        (without one, this session presents it everywhere: tests); ``clock``: wall-clock seconds."""
        self.base_url = base_url.rstrip("/")
        self.node = node
        self.root = root
        self.state_dir = state_dir
        self.session = session
        self.token = token
        self.timeout = timeout
        self.clock = clock
        self.refused: Optional[Dict[str, Any]] = None  # set when the server refused a report
        self._warned_clear = False
        self._unregistered: Optional[str] = None  # made and kept, not yet taken by the server
        self.credential = self._load_credential()
        self.register_refused = ""  # why the server refused to register this node (said once)
        self._kubelet_setup(kubelet_cert, fetcher)

    def _session(self):
        if self.session is None:
            import requests

            self.session = requests.Session()
        return self.session

    def _headers(self, bootstrap: bool = False) -> Dict[str, str]:
        from agent import __version__

        headers = {"User-Agent": f"node-agent/{__version__}", "Content-Type": "application/json"}
        headers.update(self.auth_headers(bootstrap))
        return headers

    def auth_headers(self, bootstrap: bool = False) -> Dict[str, str]:
        """``Authorization`` with this node's credential (else the bootstrap token; ``bootstrap``:
        always the token), only over https."""
        secret = self.token if bootstrap else (self.credential or self.token)
        if secret and self.base_url.lower().startswith("https://"):
            return {"Authorization": f"Bearer {secret}"}
        if secret and not self._warned_clear:
            # Never in clear: a token sent over http is everyone's on the path (docs/security.md).
            log.warning("not sending the node's token or credential to %s: it is not https", self.base_url)
            self._warned_clear = True
        return {}

    def member_headers(self) -> Dict[str, str]:
        """Headers of a day-2 config fetch: with its credential the node names itself (a member
        gets the pool's target); naming itself without one is refused by a server with tokens,
        so then it sends the bootstrap token alone (it gets what a new node gets). Over http
        (an open lab server) it names itself and sends nothing secret."""
        if self.credential or not self.base_url.lower().startswith("https://"):
            return {"X-Node-Name": self.node, **self.auth_headers()}
        return self.auth_headers(bootstrap=True)

    # -- identity -------------------------------------------------------------------------------

    def _credential_path(self) -> str:
        return credential_path(self.root, self.state_dir)

    def _load_credential(self) -> Optional[str]:
        """The credential this node registered with this server under this name (None
        otherwise; one made but not yet taken by the server is kept to register with)."""
        kept = read_credential(self.root, self.state_dir, registered_only=False)
        if kept is None or kept["server"] != self.base_url or kept["node"] != self.node:
            return None  # none, or another server or another name: it means nothing there
        if not kept["registered"]:
            self._unregistered = kept["credential"]
            return None
        return kept["credential"]

    def ensure_registered(self) -> bool:
        """Register this node once (bootstrap token -> own credential, kept 0600). Returns
        whether the node has a credential now. Never raises: a report is never blocked by it;
        a refusal is said once and the next report says why the server refuses it."""
        if self.credential or self.register_refused or not self.token:
            return bool(self.credential)
        if not self.base_url.lower().startswith("https://"):
            self.auth_headers()  # warns once: nothing secret goes over http
            return False
        # Made and kept first (0600, atomically), then sent: whatever is cut off, the next run
        # registers again with the same credential and the server answers it as done.
        secret = self._unregistered
        if secret is None:
            secret = self._unregistered = new_credential()
            self._save_credential(secret, registered=False)
        try:
            resp = self._request("POST", self._url("register"), data=json.dumps({"credential": secret}),
                                 headers=self._headers(bootstrap=True), timeout=self.timeout, allow_redirects=False)
        except Exception as exc:  # the server is away: the next report tries again
            log.warning("could not register node %s with %s: %s; will try again", self.node, self.base_url, exc)
            return False
        if resp.status_code in (200, 201):
            try:
                answer = resp.json()
                issued = answer.get("credential") if isinstance(answer, dict) else None
            except ValueError:
                answer, issued = {}, None
            if isinstance(issued, str) and issued:
                secret = issued  # an older server made its own and ignored ours
            self._save_credential(secret)
            self._unregistered = None
            pending = isinstance(answer, dict) and answer.get("approval") == "Pending"
            log.info("node %s registered with %s; its credential is in %s%s", self.node, self.base_url,
                     os.path.join(self.state_dir, CREDENTIAL),
                     "; it counts in its pool once the admin approves it" if pending else "")
            return True
        said = _server_message(resp)
        if resp.status_code >= 500 or resp.status_code in RETRIED_4XX:
            log.warning("registering node %s with %s: HTTP %s: %s; will try again", self.node, self.base_url,
                        resp.status_code, said)
            return False
        self.register_refused = f"HTTP {resp.status_code}: {said}"
        log.error("%s refused to register node %s (%s): %s", self.base_url, self.node, self.register_refused,
                  refusal_hint(resp.status_code))
        return False

    def forget_credential(self, why: str) -> None:
        """The server no longer knows this node's credential (an admin deleted the node, or the
        server's store was reset): drop it, so that the node registers again with the bootstrap
        token (which may register any name without a credential anyway). Kept, it made every
        report, lease and member fetch fail with 401 for ever."""
        if not self.credential:
            return
        log.warning("%s no longer accepts node %s's credential (%s); the node registers again",
                    self.base_url, self.node, why)
        self.credential = None
        self._unregistered = None
        remove_credential(self.root, self.state_dir)

    def _save_credential(self, secret: str, registered: bool = True) -> None:
        if registered:
            self.credential = secret
        record = {"server": self.base_url, "node": self.node, "credential": secret, "registered": registered}
        try:
            path = self._credential_path()
            os.makedirs(os.path.dirname(path), exist_ok=True)
            atomic_write(path, json.dumps(record, sort_keys=True).encode(), mode=0o600)
        except OSError as exc:  # kept in memory for this run; the next run registers... and is refused
            log.error("could not keep the node credential in %s: %s", self._credential_path(), exc)

    def _url(self, what: str) -> str:
        return f"{self.base_url}/api/v1/nodes/{urllib.parse.quote(self.node, safe='')}/{what}"

    def _pending_path(self) -> str:
        return self.root.path(os.path.join(self.state_dir, PENDING))

    def _fingerprint(self, body: Optional[Dict[str, Any]] = None) -> str:
        """What a refusal depends on: the server, the node name and the token or credential sent;
        and, for a refusal of the body itself (CONTENT_REFUSALS: 413 too large), that body, so
        that the node's next, different report is sent."""
        parts = [self.base_url, self.node, self.credential or self.token or ""]
        if body is not None:
            parts.append(json.dumps(body, sort_keys=True))
        return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:16]

    def send(self, payload: Dict[str, Any], _renewed: bool = False) -> bool:
        """POST a report once; on failure keep it for later. Returns whether it was delivered.

        A transport error, a 5xx, 408 or 429 leaves the report pending: the next run or the
        day-2 loop sends it. Any other 4xx is the server's final word on this request (a
        missing token, a name it does not accept): the report is kept as *refused* and not
        sent again until the server, the node name or the token changes (``refused`` says
        why; ``node-agent status`` shows it and reports degraded). A refusal of the body
        (CONTENT_REFUSALS) holds back only that body, for REFUSED_BODY_RETRY seconds.
        """
        body = {k: _bounded(v) for k, v in payload.items() if v is not None}
        self.ensure_registered()
        kept = self.kept()
        if kept and self._still_refused(kept.get("refused"), body):
            # The same request would be refused again: keep the newest report, do not ask.
            self.refused = kept["refused"]
            self._keep(body, self.refused)
            return False
        try:
            resp = self._request("POST", self._url("report"), data=json.dumps(body), headers=self._headers(),
                                 timeout=self.timeout, allow_redirects=False)
        except Exception as exc:  # any transport failure: keep it, never block provisioning
            self._pending(body, f"not delivered: {exc}")
            return False
        if resp.status_code < 300:
            self._drop_pending()
            self.refused = None
            remember(self.root, self.state_dir, body)
            self._delivered(body)
            log.info("reported state %s to %s", body.get("state"), self.base_url)
            return True
        said = _server_message(resp)
        what = f"HTTP {resp.status_code}" + (f": {said}" if said else "")
        if resp.status_code == 401 and self.credential and not _renewed:
            self.forget_credential(what)
            if self.ensure_registered():
                return self.send(payload, _renewed=True)
        if resp.status_code >= 500 or resp.status_code in RETRIED_4XX:
            self._pending(body, f"not delivered: {what}")
            return False
        about_body = resp.status_code in CONTENT_REFUSALS
        withheld = self.base_url if self.token and not self.base_url.lower().startswith("https://") else ""
        self.refused = {"status": resp.status_code, "message": said, "at": _now(), "server": self.base_url,
                        "fingerprint": self._fingerprint(body if about_body else None), "node": self.node,
                        **({"withheld": withheld} if withheld else {}),
                        **({"retryAt": self.clock() + REFUSED_BODY_RETRY} if about_body else {})}
        again = (f"this report is sent again in {REFUSED_BODY_RETRY / 60:.0f} minutes (the next, different one at "
                 f"once)" if about_body else "not sending it again until the token, the node name or the server changes")
        log.warning("report to %s refused (%s); %s: %s", self.base_url, what, again,
                    refusal_hint(resp.status_code, withheld))
        self._keep(body, self.refused)
        return False

    def _still_refused(self, refused: Any, body: Dict[str, Any]) -> bool:
        """Whether the kept refusal stands: one of who sends (until the token, name or server changes),
        or of this very body until its ``retryAt`` (one kept by an older version has none: tried again)."""
        if not isinstance(refused, dict):
            return False
        if refused.get("fingerprint") == self._fingerprint():
            return True
        retry, now = refused.get("retryAt"), self.clock()  # one further off than it can be: the clock went back
        return refused.get("fingerprint") == self._fingerprint(body) and isinstance(retry, (int, float)) \
            and now < retry <= now + REFUSED_BODY_RETRY

    def _pending(self, body: Dict[str, Any], error: str) -> None:
        log.warning("report to %s %s; kept to send later", self.base_url, error)
        self._keep(body, None, error)

    def kept(self) -> Optional[Dict[str, Any]]:
        """The kept report record (``{"report", "keptAt", "error"?, "refused"?}``), or None."""
        return read_kept(self._pending_path())

    def flush(self) -> Optional[bool]:
        """Send a kept report, if any; else, when the kubelet's certificate is newly there, the
        node's last report again with it (its identity is upgraded: kubeletcert.py). None when
        there was nothing to send."""
        kept = self.kept()
        if kept is None:
            return self.upgrade_identity()
        return self.send(kept["report"])

    def acquire_drain(self, pool: str, config: str, *, sleep=None, timeout: float = 600.0,
                      clock=None) -> bool:
        """Ask the server for a drain lease and wait until it is granted (at most ``timeout`` s).

        The server grants at most ``maxUnavailable`` nodes of a pool at once; a "wait" answer
        carries Retry-After. A server that cannot be reached, or a wait past ``timeout``, is a
        failure: a disruptive update never starts without the lease.
        """
        import time

        from agent.errors import FetchError

        sleep = sleep or time.sleep
        clock = clock or time.monotonic
        deadline = clock() + timeout
        body = json.dumps({"pool": pool, "config": config})
        self.ensure_registered()
        while True:
            try:
                resp = self._request("POST", self._url("drain"), data=body, headers=self._headers(),
                                     timeout=self.timeout, allow_redirects=False)
            except Exception as exc:
                raise FetchError(f"could not ask {self.base_url} for a drain lease: {exc}", url=self._url("drain"))
            if resp.status_code == 200:
                log.info("drain lease granted by %s for pool %s", self.base_url, pool)
                return True
            if deferral(resp) is not None:  # the server gave the slot to another node; this one keeps its config
                raise UpdateDeferred(f"the update to {config} is deferred by {self.base_url}: {deferral(resp)}")
            # 429: maxUnavailable nodes hold a lease; 503: the server's shared store is away
            # (a replica on etcd): both say when to ask again, and neither granted anything.
            if resp.status_code not in (429, 503):
                raise FetchError(f"drain lease refused by {self.base_url}: HTTP {resp.status_code}: "
                                 f"{resp.text[:300]}", url=self._url("drain"), status=resp.status_code)
            try:
                wait = float(resp.headers.get("Retry-After", "10"))
            except ValueError:
                wait = 10.0
            reason = ""
            try:
                answer = resp.json()
                reason = answer.get("reason") or (answer.get("error") or {}).get("message", "")
            except (ValueError, AttributeError):
                pass
            if clock() + wait > deadline:
                raise FetchError(f"no drain lease from {self.base_url} within {timeout:.0f} s: {reason}",
                                 url=self._url("drain"), status=429)
            log.info("waiting %.0f s for a drain lease: %s", wait, reason)
            sleep(wait)

    def release_drain(self) -> None:
        """Give the lease back (uncordon). A failure is logged: the lease expires on its own."""
        try:
            resp = self._request("DELETE", self._url("drain"), headers=self._headers(), timeout=self.timeout,
                                 allow_redirects=False)
            if resp.status_code >= 300 and resp.status_code != 404:
                log.warning("drain lease release answered HTTP %s; it will expire", resp.status_code)
        except Exception as exc:
            log.warning("could not release the drain lease (%s); it will expire", exc)

    def _keep(self, body: Dict[str, Any], refused: Optional[Dict[str, Any]] = None, error: str = "") -> None:
        record: Dict[str, Any] = {"report": body, "keptAt": _now()}
        if refused:
            record["refused"] = refused
        if error:
            record["error"] = error
        try:
            path = self._pending_path()
            os.makedirs(os.path.dirname(path), exist_ok=True)
            atomic_write(path, json.dumps(record, sort_keys=True).encode(), mode=0o600)
        except OSError as exc:
            log.warning("could not keep the report for later: %s", exc)

    def _drop_pending(self) -> None:
        try:
            os.unlink(self._pending_path())
        except FileNotFoundError:
            pass


MAX_TEXT = 1000  # characters of a report's text field (the server refuses over 4096, for good)


def _bounded(value: Any) -> Any:
    """A text field cut to MAX_TEXT characters: a long error's reason must still arrive."""
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return value[:MAX_TEXT - 1] + "\u2026"
    return value
