"""The proxy hook into requests: each request (redirects included) goes through the proxy its URL
calls for, by the rules of agent.core.proxyrules (re-exported here for the fetchers)."""

from typing import Any, Callable, Dict, Optional
from urllib.parse import urlsplit

from requests.adapters import HTTPAdapter

from agent.core.proxyrules import (  # noqa: F401 (re-exported: the fetchers use them as proxies.X)
    ProxySettings,
    bypasses,
    check_proxy_url,
    from_environment,
    from_ignition,
    proxy_for,
    redacted,
)


class RoutedAdapter(HTTPAdapter):
    """An adapter that picks each request's proxy itself (``route(url)``), whatever requests'
    environment handling passed: the one place the agent's proxy decision meets requests."""

    def __init__(self, route: Callable[[str], Optional[str]], **kwargs: Any):
        self._route = route
        super().__init__(**kwargs)

    def send(self, request: Any, stream: bool = False, timeout: Any = None, verify: Any = True,
             cert: Any = None, proxies: Optional[Dict[str, str]] = None) -> Any:
        chosen = self._route(request.url)
        scheme = urlsplit(request.url).scheme
        return super().send(request, stream=stream, timeout=timeout, verify=verify, cert=cert,
                            proxies={scheme: chosen} if chosen else {})
