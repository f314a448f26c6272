"""Kubernetes names the agent accepts (pure; imported by the CLI, so only ``re``)."""

import re

# A Kubernetes node name is a DNS-1123 subdomain (RFC 1123): lower case, dots between labels.
NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
NODE_NAME_RULE = "a node name: lower-case letters, digits, '-' and '.', at most 253 characters"


def is_node_name(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 253 and bool(NODE_NAME.match(value))
