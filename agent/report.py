"""Reports to node-config-server. They never block provisioning.

A report that cannot be delivered is kept (the newest one only: a report is the node's state,
so a later one supersedes an earlier one) under the state directory and sent again by the next
run of the agent or by the day-2 loop.
"""

import json
import logging
import os
import urllib.parse
from typing import Any, Dict, Optional

from agent.host.files import atomic_write
from agent.host.root import Root

log = logging.getLogger(__name__)

PENDING = "pending-report.json"


def server_base(config_url: str) -> str:
    """``https://host:22623/config/worker`` -> ``https://host:22623``."""
    parts = urllib.parse.urlsplit(config_url)
    return f"{parts.scheme}://{parts.netloc}"


class Reporter:
    def __init__(self, base_url: str, node: str, root: Root, state_dir: str, *, session=None,
                 token: Optional[str] = None, timeout: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self.node = node
        self.root = root
        self.state_dir = state_dir
        self.session = session
        self.token = token
        self.timeout = timeout

    def _session(self):
        if self.session is None:
            import requests

            self.session = requests.Session()
        return self.session

    def _headers(self) -> Dict[str, str]:
        from agent import __version__

        headers = {"User-Agent": f"node-agent/{__version__}", "Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def _url(self, what: str) -> str:
        return f"{self.base_url}/api/v1/nodes/{urllib.parse.quote(self.node, safe='')}/{what}"

    def _pending_path(self) -> str:
        return self.root.path(os.path.join(self.state_dir, PENDING))

    def send(self, payload: Dict[str, Any]) -> bool:
        """POST a report once; on failure keep it for later. Returns whether it was delivered."""
        body = {k: v for k, v in payload.items() if v is not None}
        try:
            resp = self._session().post(self._url("report"), data=json.dumps(body), headers=self._headers(),
                                        timeout=self.timeout)
            if resp.status_code >= 300:
                raise RuntimeError(f"HTTP {resp.status_code}: {resp.text[:200]}")
        except Exception as exc:  # any failure: keep it, never block provisioning
            log.warning("report to %s not delivered (%s); kept to send later", self.base_url, exc)
            self._keep(body)
            return False
        self._drop_pending()
        log.info("reported state %s to %s", body.get("state"), self.base_url)
        return True

    def flush(self) -> Optional[bool]:
        """Send a kept report, if any. None when there was nothing to send."""
        path = self._pending_path()
        try:
            with open(path, encoding="utf-8") as f:
                body = json.load(f)
        except FileNotFoundError:
            return None
        except ValueError:
            log.warning("dropping unreadable kept report %s", path)
            os.unlink(path)
            return None
        return self.send(body)

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
        while True:
            try:
                resp = self._session().post(self._url("drain"), data=body, headers=self._headers(),
                                            timeout=self.timeout)
            except Exception as exc:
                raise FetchError(f"could not ask {self.base_url} for a drain lease: {exc}", url=self._url("drain"))
            if resp.status_code == 200:
                log.info("drain lease granted by %s for pool %s", self.base_url, pool)
                return True
            if resp.status_code != 429:
                raise FetchError(f"drain lease refused by {self.base_url}: HTTP {resp.status_code}: "
                                 f"{resp.text[:300]}", url=self._url("drain"), status=resp.status_code)
            try:
                wait = float(resp.headers.get("Retry-After", "10"))
            except ValueError:
                wait = 10.0
            reason = ""
            try:
                reason = resp.json().get("reason", "")
            except ValueError:
                pass
            if clock() + wait > deadline:
                raise FetchError(f"no drain lease from {self.base_url} within {timeout:.0f} s: {reason}",
                                 url=self._url("drain"), status=429)
            log.info("waiting %.0f s for a drain lease: %s", wait, reason)
            sleep(wait)

    def release_drain(self) -> None:
        """Give the lease back (uncordon). A failure is logged: the lease expires on its own."""
        try:
            resp = self._session().delete(self._url("drain"), headers=self._headers(), timeout=self.timeout)
            if resp.status_code >= 300 and resp.status_code != 404:
                log.warning("drain lease release answered HTTP %s; it will expire", resp.status_code)
        except Exception as exc:
            log.warning("could not release the drain lease (%s); it will expire", exc)

    def _keep(self, body: Dict[str, Any]) -> None:
        try:
            path = self._pending_path()
            os.makedirs(os.path.dirname(path), exist_ok=True)
            atomic_write(path, json.dumps(body, sort_keys=True).encode(), mode=0o600)
        except OSError as exc:
            log.warning("could not keep the report for later: %s", exc)

    def _drop_pending(self) -> None:
        try:
            os.unlink(self._pending_path())
        except FileNotFoundError:
            pass
