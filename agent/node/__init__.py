"""The node's pipelines: first boot and the day-2 update loop, each a sequence of stages with one
entry (``run``), the transactional apply and its journal, the disruption actions, reports to the
server and the run's status record. Facts come from agent.host and agent.resource, decisions from
agent.core."""
