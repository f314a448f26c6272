"""The pure core of node-agent: decisions and plans computed from data, with no I/O.

Nothing here reads or writes a file, talks to D-Bus, runs a process, sleeps or fetches; every
function returns the same answer for the same arguments (``make lint`` checks that nothing here
imports agent.host, agent.resource, agent.node or the server). The shell around it
(agent.node, agent.host, agent.resource) gathers the facts and carries the answers out.
"""
