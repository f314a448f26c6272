"""``make demo`` runs examples/demo.py: it must keep working (it broke once unnoticed, when
fetching a pool's target by node name started to need the node's own credential). Run as
make demo does, in a scratch directory; the demo itself checks every exit code it expects."""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_make_demo_runs_to_the_end(tmp_path):
    env = dict(os.environ, NODE_AGENT_DEMO_DIR=str(tmp_path / "demo-run"), NO_COLOR="1")
    out = subprocess.run([sys.executable, os.path.join(REPO, "examples", "demo.py")], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "demo finished in" in out.stdout
    assert "Restart chronyd.service" in out.stdout  # step 4: the plan under the node disruption policy
    assert "(exit 78)" in out.stdout  # step 3: worker-0's boot image refused by the skew rules
