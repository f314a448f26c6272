"""What the node's health-check and revert tests share: a scratch root that says it is the running
system (so units and the kubelet are checked), a clock the runner's waits move, and a reporter
that keeps what it was sent and remembers it as node-agent's report loop does, once the server's
own validation took it (a body the server would answer 400 fails the test where it is sent)."""

from agent.host.root import Root
from agent.node import turn
from agent.server.cluster.reports import validate_report


class LiveRoot(Root):
    @property
    def is_live(self):
        return True


class Clock:
    def __init__(self, start=0.0):
        self.now = start

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class Reporter:
    def __init__(self, root, state_dir="/var/lib/node-agent"):
        self.root, self.state_dir, self.sent = root, state_dir, []

    def send(self, body):
        self.sent.append(body)
        sent = {k: v for k, v in body.items() if v is not None}  # as report.Reporter.send drops them
        validate_report(sent)
        turn.remember(self.root, self.state_dir, sent)
        return True
