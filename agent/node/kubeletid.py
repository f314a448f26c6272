"""The Reporter's use of the kubelet's client certificate (a mixin of report.Reporter; the file:
kubeletcert.py; why: docs/security.md "Identity").

- Every request to the config server (registration, reports, drain leases, and through the
  run's Fetcher the member config fetch) presents the certificate once it is usable, to that
  server alone.
- A server that refuses the TLS handshake with it (it does not trust the cluster's CA, or the
  certificate is revoked) is asked again once without it; that certificate is then not
  presented again until the file changes (logged once).
- When the certificate newly appears, the node's last delivered report is sent again with it
  (``upgrade_identity``): the server proves the node's name from it, so a custom pool's label
  lands on the Node seconds after the kubelet's CSR was approved, before workloads are placed.
  The day-2 loop looks for it every ``kubeletcert.POLL`` seconds until then (``wait``).
"""

import logging
import math
import os
import ssl
from typing import Any, Callable, Dict, Optional

from agent.node.credential import _load_json
from agent.node.kubeletcert import POLL, KubeletCert
from agent.node.nodestate import write_json

log = logging.getLogger(__name__)

LAST_REPORT = "identity-report.json"  # the newest delivered report, and the kubelet certificate it went with


class KubeletIdentity:
    """Needs ``self.root``, ``self.state_dir``, ``self.base_url``, ``self.node``, ``self._session()``
    and ``self.send(body)``."""

    root: Any
    state_dir: str
    base_url: str
    node: str
    _session: Callable[[], Any]
    send: Callable[..., bool]

    def _kubelet_setup(self, path: str, fetcher: Any) -> None:
        self.kubelet = KubeletCert(self.root, path) if path else None
        self._fetcher = fetcher
        self._presented: Optional[str] = None  # the fingerprint presented now
        self._refused_cert: Optional[str] = None  # one the server's handshake refused

    def _present(self) -> Optional[str]:
        """Present the certificate when it is usable (and not one the server refused), else none;
        returns the fingerprint presented now."""
        https = self.base_url.lower().startswith("https://")
        usable = self.kubelet.current() if self.kubelet is not None and https else None
        if usable is not None and usable.fingerprint == self._refused_cert:
            usable = None
        fingerprint = usable.fingerprint if usable is not None else None
        if fingerprint == self._presented:
            return fingerprint
        try:
            self._mount(usable.path if usable is not None else None)
        except (ssl.SSLError, OSError, ValueError) as exc:  # changed under us: next time
            log.warning("could not present the kubelet's client certificate %s: %s", usable.path if usable else "", exc)
            self._mount(None)
            fingerprint = None
        if fingerprint is not None and not self._probe():
            self._refused_cert, fingerprint = fingerprint, None
        self._presented = fingerprint
        if fingerprint is not None and self.kubelet is not None:  # the configured path (the file a link names)
            log.info("presenting the kubelet's client certificate %s to %s: it proves node %s's name",
                     self.kubelet.path, self.base_url, self.node)
        return fingerprint

    def _probe(self) -> bool:
        """A newly presented certificate, tried once on the server's open /healthz before anything
        rides on it (the member config fetch, through the Fetcher, has no fallback of its own).
        False: the server refused the TLS connection with it and took one without it (it is
        unmounted); True: taken, or the server cannot be reached either way (nothing learned)."""
        import requests

        url = self.base_url + "/healthz"
        try:
            self._session().get(url, timeout=10, allow_redirects=False)
            return True
        except requests.exceptions.ConnectionError as exc:
            refused = exc
        except requests.exceptions.RequestException:
            return True
        path = self.kubelet.path if self.kubelet is not None else ""
        self._mount(None)
        try:
            self._session().get(url, timeout=10, allow_redirects=False)
        except requests.exceptions.RequestException:
            self._mount(self.root.path(path))  # away either way: keep presenting it
            return True
        log.warning("%s refused the TLS connection with the kubelet's client certificate %s (%s): not presented "
                    "until the file changes, so the node's name is not proven", self.base_url, self.root.path(path),
                    refused)
        return False

    def _mount(self, path: Optional[str]) -> None:
        if self._fetcher is not None:  # to this server only, with the Fetcher's trust and proxies
            from agent.resource.transport import present_certificate

            present_certificate(self._fetcher.session, self.base_url, path, self._fetcher.ca_pems)
        else:  # a plain session: its kept-alive connections go (urllib3 1.26 would reuse one without it)
            session = self._session()
            session.cert = path
            for adapter in getattr(session, "adapters", {}).values():
                adapter.close()

    def _request(self, method: str, url: str, **kwargs: Any) -> Any:
        """One request to the config server, with the kubelet's certificate when there is one;
        refused at the handshake with it, once more without."""
        import requests

        presented = self._present()
        send = getattr(self._session(), method.lower())  # session.post / delete (tests give their own)
        try:
            return send(url, **kwargs)
        except requests.exceptions.ConnectionError as exc:  # an SSLError is one
            if presented is None:
                raise
            self._refused_cert = presented
            self._present()
            try:
                resp = send(url, **kwargs)
            except Exception:
                self._refused_cert = None  # the server is away, not refusing the certificate
                raise
            log.warning("%s refused the TLS connection with the kubelet's client certificate (%s); sent without it, "
                        "so the node's name is not proven (not presented again until the file changes)",
                        self.base_url, exc)
            return resp

    def _last_path(self) -> str:
        return self.root.path(os.path.join(self.state_dir, LAST_REPORT))

    def _delivered(self, body: Dict[str, Any]) -> None:
        """Keep the newest delivered report and the certificate it went with (0600)."""
        record = {"server": self.base_url, "node": self.node, "report": body, "kubeletCert": self._presented}
        try:
            write_json(self._last_path(), record)
        except OSError as exc:
            log.debug("could not keep the last report: %s", exc)

    def upgrade_identity(self) -> Optional[bool]:
        """When the certificate is presented and the last report went without it (or with an
        older one), send that report again with it. None when there is nothing to do."""
        fingerprint = self._present()
        if fingerprint is None:
            return None
        last, _ = _load_json(self._last_path())
        if not isinstance(last, dict) or not isinstance(last.get("report"), dict) or \
                (last.get("server"), last.get("node")) != (self.base_url, self.node) or \
                last.get("kubeletCert") == fingerprint:
            return None
        log.info("the kubelet's client certificate is there: sending node %s's last report again with it",
                 self.node)
        return self.send(last["report"])

    def wait(self, seconds: float, idle: Callable[[float], None]) -> None:
        """The day-2 loop's wait of ``seconds`` (``idle``: its own), looking for the kubelet's
        certificate every POLL seconds while none is presented: found, the last report goes
        again at once (``upgrade_identity``) and the wait ends. No clock is read: a test's fake
        sleep drives it."""
        if self.kubelet is None or self._presented is not None or not self.base_url.lower().startswith("https://"):
            idle(seconds)
            return
        slices = max(1, math.ceil(seconds / POLL))
        for _ in range(slices):
            idle(seconds / slices)
            if self.kubelet.current() is not None and self.upgrade_identity() is not None:
                return
