"""Planning an apply (pure): a config becomes desired operations (``operations``, ``osops``),
operations compared with what is on disk become steps (``steps``). agent.node.apply carries the
steps out; the pure helpers it shares with the host layer (passwd/group lines, unit [Install]
links, rpm-ostree command lines) live here too."""
