"""`kubectl logs -f` of one container of the server's pod, for as long as that container runs.

Boot 2's server log is read this way, from the move until the day-2 reboot stops its container:
after the reboot `kubectl logs --previous` needs the kubelet to still list that container
(``lastState.terminated``), which the guest's kubelet 1.20 did not always post (docs/vm-test.md).

One stream may not be enough: it goes from the host's API server to the guest's kubelet, and a
stream that ends while the container still runs loses what comes after (a CI run's followed log
had the drain's asks but not the line of the answer that granted it; the stream was not kept to
tell). So a stream that ends is opened again from its last line's timestamp (``--since-time``,
lines stamped with ``--timestamps``; the lines of that second are not written twice) until the
guest is going down (``going_down``: the serial console's shutdown line). Only the reboot ends
the container; a stream opened after it could read the next container's log (the API's pod
status lags the kubelet), so none is.
"""

import os
import subprocess
import threading
from typing import Any, Callable, Dict, List, Optional, Set

from tests.helpers.kube_cluster import KUBECTL

RESUME_PAUSE = 2.0  # seconds between a stream's end and the look at the guest (its shutdown line is read by then)
STREAMS_MAX = 200  # a bound: a kubelet that ends every stream at once is not followed forever
# A container's whole log, which tests compare from its first line (a text cut to its last
# 200,000 characters, as once, could start anywhere): the kubelet rotates a container's log at
# 10 MiB (containerLogMaxSize), so this keeps all of it.
TEXT_MAX = 16 * 1024 * 1024


def second_of(line: str) -> str:
    """The second (YYYY-MM-DDTHH:MM:SS) of the RFC 3339 timestamp ``--timestamps`` puts first on a
    line ("" if none): fixed width, so compared as text."""
    head = line.split(" ", 1)[0]
    return head[:19] if len(head) >= 20 and head[:4].isdigit() and head.endswith("Z") else ""


class Resume:
    """Where a stream ended: the second of its last line, and the lines of that second (written
    already). ``--since-time`` reaches the kubelet to the second (metav1.Time), so a stream opened
    again sends that second's lines again."""

    def __init__(self) -> None:
        self.since: str = ""
        self.seen: Set[str] = set()

    def fresh(self, line: str) -> bool:
        """Whether ``line`` is not written yet (and note it as written)."""
        second = second_of(line)
        if not second:
            return True
        if self.since and (second < self.since or (second == self.since and line in self.seen)):
            return False
        if second != self.since:
            self.since, self.seen = second, set()
        self.seen.add(line)
        return True


class LogFollower:
    """``start(pod, going_down)``, then ``stop()``: what was read (``text``), each stream's exit code
    (``streams``) and the stream's last exit (``exit``: None when still streaming at ``stop``)."""

    def __init__(self, kubeconfig: str, namespace: str, container: str, workdir: str, kubectl: str = KUBECTL,
                 pause: float = RESUME_PAUSE):
        self.kubeconfig, self.namespace, self.container = kubeconfig, namespace, container
        self.kubectl, self.pause = kubectl, pause
        self.path = os.path.join(workdir, "server-log-followed.txt")
        self.proc: Optional[subprocess.Popen] = None
        self.streams: List[Optional[int]] = []
        self.problems: List[str] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self, pod: str, going_down: Callable[[], bool]) -> None:
        self._thread = threading.Thread(target=self._follow, args=(pod, going_down), name="log-follower",
                                        daemon=True)
        self._thread.start()

    def _follow(self, pod: str, going_down: Callable[[], bool]) -> None:
        resume = Resume()
        with open(self.path, "w", encoding="utf-8") as out:
            while not self._stop.is_set() and len(self.streams) < STREAMS_MAX:
                since = [f"--since-time={resume.since}Z"] if resume.since else []
                self.proc = subprocess.Popen([self.kubectl, f"--kubeconfig={self.kubeconfig}", "-n", self.namespace,
                                              "logs", "-f", "--timestamps", *since, pod, "-c", self.container],
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
                if self._stop.is_set():  # stop() came as it started
                    self.proc.kill()
                for raw in self.proc.stdout:  # type: ignore[union-attr]
                    line = raw.decode("utf-8", errors="replace")
                    if resume.fresh(line):
                        out.write(line)
                        out.flush()
                code = self.proc.wait()
                self.streams.append(None if self._stop.is_set() else code)
                if code != 0 and not self._stop.is_set():
                    self.problems.append(self.proc.stderr.read().decode(errors="replace").strip()[-300:])  # type: ignore[union-attr]
                if self._stop.wait(self.pause) or going_down():
                    return

    def stop(self) -> Dict[str, Any]:
        if self._thread is None:
            return {"exit": None, "streams": [], "problems": [], "text": ""}
        self._stop.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        self._thread.join(60)
        with open(self.path, encoding="utf-8", errors="replace") as f:
            text = f.read()[-TEXT_MAX:]
        return {"exit": self.streams[-1] if self.streams else None, "streams": list(self.streams),
                "problems": self.problems[-5:], "text": text}
