"""Where node-agent's own files are on a node (pure constants; imported by the CLI, so nothing else)."""

DEFAULT_POINTER = "/etc/node-agent/pointer.ign"
