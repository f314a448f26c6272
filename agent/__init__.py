"""node-agent: first-boot and day-2 node agent, and node-config-server."""

__version__ = "0.1.0"
