"""Who is asking: the bootstrap token, the admin token, a node's own credential, or nobody.

The model is the kubelet's TLS bootstrap: a shared, low-privilege bootstrap token lets a new
machine ask once for its own credential, and from then on the node acts only as itself
(kubernetes pkg/kubelet/certificate/bootstrap/bootstrap.go; the CSR's CN is
``system:node:<name>``, and OpenShift's cluster-machine-approver refuses a bootstrap CSR for a
node that already exists: pkg/controller/csr_check.go, authorizeNodeClientCSR, "node %s already
exists, cannot approve"). Here the credential is a random bearer secret instead of a client
certificate (no CA to run), issued by ``POST /api/v1/nodes/<node>/register``; the server keeps
only its SHA-256 (a 256-bit random secret needs no salt or slow hash: there is nothing to guess),
and compares with ``hmac.compare_digest``.

| caller | proves | may |
|---|---|---|
| admin (``--admin-token-file``) | the admin token | everything but reporting as a node: GET APIs, re-register a node (rotate its credential), delete a node, release any drain lease, fetch configs |
| node ``N`` | N's credential | report as N, hold/release N's lease, fetch configs as a member (``?node=N`` / ``X-Node-Name: N`` or no name), GET APIs |
| bootstrap (``--token-file``) | the bootstrap token | register a node that has no credential yet, fetch configs as a new node, GET APIs |
| anonymous | nothing | fetch configs that carry no secrets as a new node (what stock Ignition does), ``/healthz``, ``/metrics`` |

Besides the bearer token, a TLS client certificate the cluster's client CA verified that is N's
kubelet's (``kubelet_node``: CN ``system:node:N``, O ``system:nodes``; the gevent worker hands
it over in the environ, ``KUBELET_NODE``) proves the name N: the registration it comes with, or
N's credential, is approved at once by ``kubelet`` (never held by the caps or the rate limit),
and acting for another node with it is a 403 naming both (issue 45).

A server with neither token ("open": a lab on loopback) checks only what it can: a node that has
registered must still use its credential, and configs with secrets are withheld unless
``--serve-secrets-anonymously``.

Approval (``Admission``): upstream a node becomes a node only once its CSR is approved (the
cluster-machine-approver checks that a Machine exists). On a server with a token (bootstrap or
admin) a newly registered name is *pending* by default: it counts for nothing (no proof for the
gate, no share of the pool's size or maxUnavailable, no drain lease) until the admin approves it
(``POST /api/v1/nodes/<node>/approve``, ``node-config-server approve node NAME``), its kubelet's
certificate proves it, or a rule the operator set on ``serve`` does (``--auto-approve REGEX``;
``'.*'`` approves every name, an explicit choice serve logs at start; with ``--backend
kubernetes`` a rule binds no name to a Node: service.Approval.unbound). Registrations are bounded
in total, counted in the store so every replica shares the caps: at most ``--max-pending`` names
wait (``--max-pending-per-address`` from one address), and at most ``--max-unvetted`` names exist
that no admin approved and no kubelet proved; 429 beyond any. They are also rate-limited per
server process (``--register-rate`` / ``--register-burst``, a token bucket). Only an open server
(no token: a lab on loopback) approves every name as it registers.
"""

import hashlib
import hmac
import math
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Pattern, Tuple

CREDENTIAL_PREFIX = "nac1_"  # names the kind (and version) of secret in logs and leak scanners
ANONYMOUS, BOOTSTRAP, ADMIN, NODE = "anonymous", "bootstrap", "admin", "node"
# The kubelet's client certificate names its node as the API server's Node authorizer reads it
# (kubernetes plugin/pkg/auth/authorizer/node/node_authorizer.go, NodeIdentifier in
# pkg/auth/nodeidentifier/default.go: user "system:node:<name>" in group "system:nodes"); the x509
# authenticator takes the user from the subject's CN and the groups from its O values.
KUBELET_USER_PREFIX, KUBELET_GROUP = "system:node:", "system:nodes"
# The WSGI environ key under which the gevent worker hands the app the node a verified kubelet
# client certificate names ("" without one): agent/server/http/gevent_worker.py. A client cannot
# set it: headers arrive as HTTP_* keys.
KUBELET_NODE = "node_agent.kubelet_node"
PROVEN_BY = "kubelet"  # a registration's approver when the node proved its name with that certificate
_CHALLENGE = [("WWW-Authenticate", 'Bearer realm="node-config-server"')]


class Denied(Exception):
    """A request this caller may not make: ``code`` 401 (no or unknown credential) or 403."""

    def __init__(self, code: int, message: str, headers: Optional[List[Tuple[str, str]]] = None):
        self.code = code
        self.message = message
        self.headers = headers if headers is not None else (_CHALLENGE if code == 401 else [])
        super().__init__(message)


MIN_CREDENTIAL_CHARS = 43  # 256 bits of URL-safe base64 after the prefix
_CREDENTIAL_CHARS = re.compile(r"^[A-Za-z0-9_-]+$")


def valid_credential(secret: Any) -> bool:
    """A credential a node made itself (sent when it registers): our prefix, then at least 256
    bits of URL-safe base64 (what ``new_credential`` makes), at most 512 characters."""
    if not isinstance(secret, str) or not secret.startswith(CREDENTIAL_PREFIX) or len(secret) > 512:
        return False
    rest = secret[len(CREDENTIAL_PREFIX):]
    return len(rest) >= MIN_CREDENTIAL_CHARS and bool(_CREDENTIAL_CHARS.match(rest))


def new_credential() -> str:
    """A fresh node credential: 256 random bits, URL-safe (a valid RFC 6750 bearer token)."""
    return CREDENTIAL_PREFIX + secrets.token_urlsafe(32)


def credential_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def same_secret(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def kubelet_node(peercert: Optional[Dict[str, Any]]) -> str:
    """The node a peer certificate names as its kubelet's (pure): one CN ``system:node:<name>``
    and ``system:nodes`` among its O values, as the API server's x509 authenticator and Node
    authorizer read a kubelet's certificate; "" for no certificate or any other. ``peercert`` is
    ``ssl.SSLSocket.getpeercert()``, which holds a certificate only once the TLS layer verified
    it (the caller's context trusts nothing but the cluster's client CA)."""
    if not peercert:
        return ""
    cns: List[str] = []
    orgs: List[str] = []
    for rdn in peercert.get("subject") or ():
        for key, value in rdn:
            if key == "commonName":
                cns.append(value)
            elif key == "organizationName":
                orgs.append(value)
    if len(cns) != 1 or KUBELET_GROUP not in orgs or not cns[0].startswith(KUBELET_USER_PREFIX):
        return ""
    name = cns[0][len(KUBELET_USER_PREFIX):]
    return name if len(name) <= 253 and _NODE_NAME.match(name) else ""


def bearer(environ: Dict[str, Any]) -> str:
    header = environ.get("HTTP_AUTHORIZATION", "") or ""
    return header[7:].strip() if header[:7].lower() == "bearer " else ""


class TokenBucket:
    """``rate`` registrations a second, ``burst`` at once; per server process (thread-safe)."""

    def __init__(self, rate: float, burst: int, clock=time.monotonic):
        self.rate, self.burst, self.clock = float(rate), max(1, int(burst)), clock
        self.tokens = float(self.burst)
        self.at = clock()
        self._lock = threading.Lock()

    def take(self) -> float:
        """0 when a registration may go ahead (one token taken), else the seconds to wait."""
        with self._lock:
            now = self.clock()
            self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.rate)
            self.at = now
            if self.tokens >= 1:
                self.tokens -= 1
                return 0.0
            return (1 - self.tokens) / self.rate if self.rate > 0 else 3600.0


DEFAULT_MAX_PENDING = 100
# Pending names from one address: a flood from one place fills this, not --max-pending for
# everyone (docs/security.md "Limits"). Nodes behind one NAT or TCP load balancer share an
# address: a scale-up of more than this many new nodes at once registers the rest as names are
# approved or proven (node-agent retries a 429), or name the proxy in --forwarded-allow-ips.
DEFAULT_MAX_PER_ADDRESS = 20
DEFAULT_MAX_UNVETTED = 5000  # OpenShift supports clusters of up to 2,000 nodes: room for that, twice
DEFAULT_REGISTER_RATE = 20.0  # a second, per server process
DEFAULT_REGISTER_BURST = 200


@dataclass
class Admission:
    """How a new name is approved (serve's flags): ``auto_approve`` names matching the pattern
    (the whole name), at most ``max_pending`` waiting (``max_per_address`` of them from one
    address) and ``max_unvetted`` not approved by the admin, registrations through a token
    bucket. A name proven by its kubelet's certificate is never held by any of these."""
    auto_approve: Optional[Pattern[str]] = None
    max_pending: int = DEFAULT_MAX_PENDING
    rate: float = DEFAULT_REGISTER_RATE
    burst: int = DEFAULT_REGISTER_BURST
    max_unvetted: int = DEFAULT_MAX_UNVETTED
    max_per_address: int = DEFAULT_MAX_PER_ADDRESS
    bucket: TokenBucket = field(init=False)

    def __post_init__(self) -> None:
        self.bucket = TokenBucket(self.rate, self.burst)

    def rule_approves(self, node: str) -> bool:
        return self.auto_approve is not None and self.auto_approve.fullmatch(node) is not None


@dataclass(frozen=True)
class Caller:
    kind: str  # ANONYMOUS, BOOTSTRAP, ADMIN or NODE
    node: str = ""  # the node a NODE caller is
    kubelet: str = ""  # the node a verified kubelet client certificate on the connection names ("" none)

    @property
    def anonymous(self) -> bool:
        return self.kind == ANONYMOUS

    def describe(self) -> str:
        who = f"node {self.node}'s credential" if self.kind == NODE else {
            ANONYMOUS: "no credential", BOOTSTRAP: "the bootstrap token", ADMIN: "the admin token"}[self.kind]
        return who + (f" (with node {self.kubelet}'s kubelet certificate)" if self.kubelet else "")

    def check_acting_for(self, node: str) -> None:
        """A kubelet certificate proves one name: acting for another node with it is a 403."""
        if self.kubelet and self.kubelet != node:
            raise Denied(403, f"the client certificate is node {self.kubelet}'s kubelet's (CN "
                              f"{KUBELET_USER_PREFIX}{self.kubelet}), but this request acts for node {node}: a "
                              f"certificate proves only the node it names")


def approve_hint(node: str, admin: bool) -> str:
    """What an operator does to make a pending ``node`` count, on a server with (``admin``) or
    without an admin token (``approve node`` needs one)."""
    if admin:
        return (f"the admin approves it: node-config-server approve node {node} (the admin token), or serve "
                f"--auto-approve REGEX approves matching names as they register")
    return (f"this server has no --admin-token-file, so nobody can approve it through the API: restart serve with "
            f"--admin-token-file FILE and run node-config-server approve node {node}, or with --auto-approve "
            f"REGEX to approve names matching REGEX as they register (docs/security.md \"Identity\")")


def register_hint(node: str) -> str:
    return (f"register it once: POST /api/v1/nodes/{node}/register with the bootstrap token "
            f"(node-agent does this at first boot and keeps the credential in its state directory)")


class Auth:
    """The server's credentials and the rules above. ``store`` is a ``nodestore.NodeStore``."""

    def __init__(self, bootstrap: Optional[str] = None, admin: Optional[str] = None,
                 anonymous_secrets: bool = False, admission: Optional[Admission] = None):
        self.bootstrap = bootstrap or None
        self.admin = admin or None
        self.anonymous_secrets = anonymous_secrets
        self.admission = admission or Admission()
        # Whether a verified kubelet client certificate can reach the app (serve: a client CA on
        # the TLS listener of the gevent worker): it proves a node's name (docs/security.md).
        self.kubelet_proof = False

    @property
    def approves(self) -> bool:
        """Whether new names wait for approval: on any server with a token (the default), even
        without an admin token; only an open server, which takes any unregistered name at its
        word anyway, approves every name as it registers."""
        return self.enabled

    def approval_of(self, caller: "Caller", node: str) -> Tuple[bool, str]:
        """(approved, by) for a name registering now."""
        if caller.kind == ADMIN:
            return True, "admin"
        if caller.kubelet == node:
            return True, PROVEN_BY
        if not self.approves:
            return True, "open"
        if self.admission.rule_approves(node):
            return True, "rule"
        return False, ""

    def nobody_approved(self, real_nodes: bool) -> str:
        """Why no registered name can ever count on this server ("" when one can): it keeps new
        names pending (a token) but has no admin token, no --auto-approve rule (which binds no
        name to a Node with ``real_nodes``, the Kubernetes backend) and no kubelet certificate to
        prove a name with. Then no pool counts a node-agent's report, no drain is granted and the
        rollout gate has nothing to prove a rendering with: serve says so at start and /healthz
        carries it (issue 45)."""
        if not self.approves or self.admin or self.kubelet_proof:
            return ""
        if self.admission.auto_approve is not None and not real_nodes:
            return ""
        rule = (" (--auto-approve binds no name to its Node with --backend kubernetes)"
                if self.admission.auto_approve is not None else ", no --auto-approve rule")
        return (f"nobody can be approved: this server has a token but no --admin-token-file{rule} and no kubelet "
                f"client CA to prove a node's name with, so every newly registered name stays pending and counts "
                f"for nothing (no pool counts its reports, no drain lease is granted, nothing proves a rendering "
                f"to the rollout gate): give serve --admin-token-file, or TLS with the cluster's client CA "
                f"(docs/security.md \"Identity\")")

    def throttle(self, caller: "Caller", node: str) -> None:
        """The registration rate limit (the admin is not limited): 429 with Retry-After."""
        if caller.kind == ADMIN:
            return
        wait = self.admission.bucket.take()
        if wait > 0:
            raise Denied(429, f"too many registrations: at most {self.admission.rate:g} a second (burst "
                              f"{self.admission.burst}) per server process; node {node} may try again in "
                              f"{math.ceil(wait)} s", [("Retry-After", str(max(1, math.ceil(wait))))])

    @property
    def enabled(self) -> bool:
        """Whether the server holds any token (else it is "open")."""
        return bool(self.bootstrap or self.admin)

    def identify(self, environ: Dict[str, Any], store: Any) -> Caller:
        """The caller behind the Authorization header; an unknown bearer token is a 401 (a
        mistyped token should not silently become anonymous)."""
        given = bearer(environ)
        kubelet = str(environ.get(KUBELET_NODE) or "")
        if not given:
            return Caller(ANONYMOUS, kubelet=kubelet)
        if self.admin and same_secret(given, self.admin):
            return Caller(ADMIN, kubelet=kubelet)
        if self.bootstrap and same_secret(given, self.bootstrap):
            return Caller(BOOTSTRAP, kubelet=kubelet)
        if given.startswith(CREDENTIAL_PREFIX):
            node = store.credential_owner(credential_hash(given))
            if node is not None:
                return Caller(NODE, node, kubelet)
        raise Denied(401, "the bearer token is not one this server issued or was given (Authorization: Bearer "
                          "<token>): a node uses its own credential (from registering) or the bootstrap token "
                          "(--token-file); an admin the admin token (--admin-token-file)")

    # -- rules --------------------------------------------------------------------------------

    def require_reader(self, caller: Caller) -> None:
        """GET APIs: any credential (nodes' reports and the fleet's state are not for everyone);
        an open server answers everyone."""
        if self.enabled and caller.anonymous:
            raise Denied(401, "this API needs a credential (Authorization: Bearer <token>): the admin token, "
                              "the bootstrap token or a node's credential; /healthz and /metrics are open")

    def require_admin(self, caller: Caller, what: str) -> None:
        if caller.kind == ADMIN or not self.enabled:
            return
        if not self.admin:
            raise Denied(403, f"{what} needs the admin token, and this server has none: start it with "
                              f"--admin-token-file FILE")
        raise Denied(401 if caller.anonymous else 403,
                     f"{what} needs the admin token (--admin-token-file); {caller.describe()} is not enough")

    def require_node(self, caller: Caller, node: str, has_credential: bool, what: str,
                     admin_may: bool = False) -> None:
        """Only node ``node`` itself (its credential) may do ``what``; ``admin_may``: the admin too.
        An open server lets anyone act for a node that never registered (TOFU)."""
        if caller.kind == NODE and caller.node == node:
            return
        if admin_may and caller.kind == ADMIN:
            return
        if not self.enabled and not has_credential:
            return
        if caller.kind == NODE:
            raise Denied(403, f"{what}: the credential sent is node {caller.node}'s; only node {node} may do "
                              f"this, with its own credential")
        if caller.anonymous:
            raise Denied(401, f"{what} needs node {node}'s own credential (Authorization: Bearer <credential>)"
                              + ("" if has_credential else f"; node {node} is not registered: {register_hint(node)}"))
        if not has_credential:
            raise Denied(403, f"{what}: node {node} is not registered; {caller.describe()} does not make a node: "
                              f"{register_hint(node)}")
        raise Denied(403, f"{what}: only node {node} itself may do this, with its own credential "
                          f"(Authorization: Bearer <credential>); {caller.describe()} is not enough")

    def may_register(self, caller: Caller, node: str, registered: bool) -> None:
        """A new name: the bootstrap token (or the admin); an existing one: the admin only, so a
        bootstrap-token holder cannot take a node over (as the machine-approver refuses a
        bootstrap CSR for an existing node)."""
        if caller.kind == ADMIN:
            return
        if registered:
            raise Denied(403, f"node {node} is already registered: only the admin may register it again "
                              f"(POST with the admin token rotates its credential), or delete it first "
                              f"(DELETE /api/v1/nodes/{node} with the admin token)")
        if caller.kind == BOOTSTRAP or not self.bootstrap and not self.enabled:
            return
        if caller.kind == NODE:
            raise Denied(403, f"node {caller.node}'s credential cannot register node {node}: use the bootstrap "
                              f"token (--token-file) or the admin token")
        raise Denied(401, f"registering node {node} needs the bootstrap token (Authorization: Bearer <token>, "
                          f"the server's --token-file) or the admin token")

    def member_name(self, caller: Caller, named: Optional[str], has_credential: bool) -> Optional[str]:
        """The node a config fetch may be answered as (a member gets the pool's unproven
        target, so naming a node needs its credential); None: answer as to a new node."""
        if named is None:
            return caller.node if caller.kind == NODE else None
        if caller.kind == NODE and caller.node == named:
            return named
        if caller.kind == NODE:
            raise Denied(403, f"the fetch names node {named} (?node= or X-Node-Name) but the credential sent is "
                              f"node {caller.node}'s: a node fetches only as itself")
        if not self.enabled and not has_credential:
            return named  # an open server: an unregistered name is taken at its word
        raise Denied(401 if caller.anonymous else 403,
                     f"the fetch names node {named} (?node= or X-Node-Name), which gets the pool's target before "
                     f"any node proved it: send node {named}'s credential (Authorization: Bearer <credential>), "
                     f"or leave the name out to get what a new node gets")

    def may_get_secrets(self, caller: Caller, pool: str, paths: Tuple[str, ...]) -> None:
        """A config carrying secrets (``paths``) needs a credential unless --serve-secrets-anonymously."""
        if not paths or not caller.anonymous or self.anonymous_secrets:
            return
        what = f"the config of pool {pool} carries secrets ({', '.join(paths)})"
        if self.bootstrap:
            raise Denied(401, f"{what}: send the bootstrap token (Authorization: Bearer <token>; an Ignition "
                              f"pointer config carries it in ignition.config.merge[].httpHeaders) or a node's "
                              f"credential")
        raise Denied(403, f"{what} and this server has no --token-file to check a node with: give it one (nodes "
                          f"send it from the pointer config's httpHeaders), or start it with "
                          f"--serve-secrets-anonymously to rely on the network alone, as the MCS does")
