"""Pure: the test's own process (and the project's own commands as subprocesses); no daemon, no server."""
