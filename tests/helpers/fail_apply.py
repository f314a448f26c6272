"""Run ``node-agent`` with a disk that fills up during the apply (fault injection).

    python -m tests.helpers.fail_apply -- firstboot --root DIR ...

The first write of the apply fails with ENOSPC ("No space left on device"), as on a node whose
/var fills up mid-apply: the product's own journal rolls everything back and the run exits 75.
The product has no test hooks: this wrapper patches the apply's two write paths (a batch of
files, one step), as kill_at_stage.py patches the run recorder.
"""

import errno
import os
import sys

from agent.node import apply

_batch, _step = apply._write_batch, apply._run_step


def _full(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


apply._write_batch = _full
apply._run_step = _full

if __name__ == "__main__":
    from agent.cli import main

    sys.exit(main(sys.argv[sys.argv.index("--") + 1:]))
