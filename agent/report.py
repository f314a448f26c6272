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
                 verify: Any = True, token: Optional[str] = None, timeout: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self.node = node
        self.root = root
        self.state_dir = state_dir
        self.session = session
        self.verify = verify
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
                                        timeout=self.timeout, verify=self.verify)
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
