"""Run ``node-agent`` and SIGKILL it when a first-boot stage starts or ends (crash injection).

    python -m tests.helpers.kill_at_stage STAGE enter|exit -- firstboot --root DIR ...

The product has no test hooks: this wrapper patches the run recorder's stage context manager.
"""

import contextlib
import os
import signal
import sys

from agent.node import status

STAGE, WHEN = sys.argv[1], sys.argv[2]
_original = status.RunRecorder.stage


@contextlib.contextmanager
def _stage(self, name):
    if name == STAGE and WHEN == "enter":
        os.kill(os.getpid(), signal.SIGKILL)
    with _original(self, name) as handle:
        yield handle
    if name == STAGE and WHEN == "exit":
        os.kill(os.getpid(), signal.SIGKILL)


status.RunRecorder.stage = _stage

if __name__ == "__main__":
    from agent.cli import main

    sys.exit(main(sys.argv[sys.argv.index("--") + 1:]))
