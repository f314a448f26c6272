"""The cluster's client CA, as the API server publishes it: what signs the kubelets' client
certificates (``CN=system:node:<name>``, ``O=system:nodes``), so that node-config-server can
verify one a node presents and take it as the cluster's proof of the node's name (issue 45;
docs/security.md "Identity").

kube-apiserver writes its ``--client-ca-file`` into the ConfigMap
``kube-system/extension-apiserver-authentication`` (key ``client-ca-file``; the
``start-cluster-authentication-info-controller`` post-start hook), for aggregated API servers
to authenticate clients with; the bootstrap RBAC policy has a Role
``extension-apiserver-authentication-reader`` in kube-system that may read exactly that
ConfigMap (deploy/rbac.yaml binds the server to it). OpenShift publishes the same ConfigMap;
its bundle holds every CA the API server trusts for clients (kubelets' signer included).
"""

import ssl
from typing import Optional, Tuple

from agent.server.store.kube.client import CONFIGMAPS, KubeClient, KubeError, KubeUnavailable

NAMESPACE, NAME, KEY = "kube-system", "extension-apiserver-authentication", "client-ca-file"
WHERE = f"{NAMESPACE}/{NAME} ({KEY})"


def read_client_ca(client: KubeClient) -> Tuple[Optional[str], str]:
    """(the client CA bundle as PEM, "") or (None, why there is none): not published, not
    readable by this server's user (deploy/rbac.yaml's RoleBinding in kube-system), the API
    away, or not a PEM certificate bundle."""
    try:
        obj = client.get(CONFIGMAPS.path(NAME, NAMESPACE))
    except KubeUnavailable as exc:
        return None, f"the Kubernetes API could not be reached to read {WHERE}: {exc}"
    except KubeError as exc:
        if exc.status == 404:
            return None, f"the API server publishes no client CA ({WHERE} does not exist)"
        if exc.status in (401, 403):
            return None, (f"this server's user may not read {WHERE}: bind it to the Role "
                          f"extension-apiserver-authentication-reader in kube-system (deploy/rbac.yaml)")
        return None, f"reading {WHERE}: {exc}"
    pem = str(((obj or {}).get("data") or {}).get(KEY) or "")
    problem = check_bundle(pem)
    if problem:
        return None, f"{WHERE}: {problem}"
    return pem, ""


def check_bundle(pem: str) -> str:
    """"" when ``pem`` is a bundle of CA certificates an SSL context can load, else why not."""
    if "-----BEGIN CERTIFICATE-----" not in pem:
        return "no PEM certificate in it"
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as exc:
        return f"not a certificate bundle ({exc})"
    return ""
