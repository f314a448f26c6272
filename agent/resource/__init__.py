"""Every fetch node-agent makes, in one place (as Ignition's internal/resource): HTTP(S) with
Ignition's retries and a deadline over the whole exchange, proxies, CA bundles and TLS trust,
``data:`` URLs, ``verification.hash``, and pointer configs resolved into the config they name.
Callers ask for bytes; nothing else in the agent opens a connection for configs or contents."""
