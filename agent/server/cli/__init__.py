"""``node-config-server``: the command line (serve, render, status, load-state, and the operator
views get/describe/watch through the HTTP API). ``main`` is the console script's entry point."""

from agent.server.cli.main import main

__all__ = ["main"]
