"""OS-level changes through rpm-ostree: kernel arguments, the OS image, kernel type, extensions.

Both are *staged* (a new deployment for the next boot); the caller reboots once afterwards.
Command lines are the MCO's: ``rpm-ostree kargs --append=A --delete-if-present=D``,
``rpm-ostree rebase --experimental ostree-unverified-registry:<image>``, the kernel switch of
the MCD's ``switchKernel`` (pkg/daemon/update.go:2005) and the extension packages of its
``generateExtensionsArgs`` (update.go:1814), built by the pure functions of agent.core.applyplan.ospackages. Each call is retried a
bounded number of times with exponential back-off: the rebase pulls the image over the network,
and any call fails while another rpm-ostree transaction holds the daemon.
"""

import json
import logging
import shutil
import subprocess
from typing import List, Optional, Sequence, Tuple

from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from agent.core.applyplan.ospackages import extensions_command, kernel_switch_commands
from agent.errors import HostError

log = logging.getLogger(__name__)

IMAGE_TRANSPORTS = ("ostree-unverified-registry:", "ostree-unverified-image:docker://",
                    "ostree-image-signed:docker://", "ostree-remote-registry:", "ostree-remote-image:")


class RpmOstreeError(HostError):
    pass


class RpmOstree:
    def __init__(self, executable: str = "rpm-ostree", attempts: int = 5, wait_initial: float = 2.0,
                 wait_max: float = 60.0, timeout: float = 3600.0):
        self.executable = executable
        self.attempts = max(1, attempts)
        self.wait_initial = wait_initial
        self.wait_max = wait_max
        self.timeout = timeout

    def available(self) -> bool:
        return shutil.which(self.executable) is not None

    def _run_once(self, args: List[str]) -> str:
        argv = [self.executable] + args
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=self.timeout, check=False)
        except FileNotFoundError:
            raise RpmOstreeError(f"{self.executable} not found: OS-level changes (kernel arguments, "
                                 "OS image) need an rpm-ostree based host")
        except subprocess.TimeoutExpired:
            raise RpmOstreeError(f"{' '.join(argv)} did not finish within {self.timeout:.0f} s")
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace").strip() or proc.stdout.decode("utf-8", "replace").strip()
            raise RpmOstreeError(f"{' '.join(argv)} failed (exit {proc.returncode}): {err[-2000:]}")
        return proc.stdout.decode("utf-8", "replace")

    def run(self, args: List[str], retry: bool = True) -> str:
        if not retry or self.attempts == 1:
            return self._run_once(args)
        retrying = Retrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=self.wait_initial, max=self.wait_max),
            retry=retry_if_exception_type(RpmOstreeError),
            before_sleep=lambda rs: log.warning("rpm-ostree %s failed (attempt %d of %d), retrying: %s",
                                                args[0], rs.attempt_number, self.attempts,
                                                rs.outcome.exception()),
            reraise=True,
        )
        try:
            return retrying(self._run_once, args)
        except RetryError as e:  # pragma: no cover - reraise=True gives the last error instead
            raise RpmOstreeError(str(e))

    def kargs(self, append: Sequence[str] = (), delete: Sequence[str] = ()) -> None:
        args = ["kargs"] + [f"--append={a}" for a in append] + [f"--delete-if-present={d}" for d in delete]
        if len(args) > 1:
            self.run(args)

    def rebase(self, image: str) -> None:
        self.run(["rebase", "--experimental", f"ostree-unverified-registry:{image}"])

    def switch_kernel(self, old: str, new: str) -> None:
        for args in kernel_switch_commands(old, new):
            self.run(args)

    def update_extensions(self, added: Sequence[str], removed: Sequence[str]) -> None:
        args = extensions_command(added, removed)
        if args:
            self.run(args)

    def cleanup_pending(self) -> None:
        """Drop a staged deployment (undo of kargs/rebase before the reboot)."""
        self.run(["cleanup", "--pending"], retry=False)

    def rollback(self) -> None:
        """``rpm-ostree rollback``: the deployment booted before becomes the default at the next
        boot (the revert of an OS change after a failed health check, agent/node/revert.py)."""
        self.run(["rollback"], retry=False)

    def status(self) -> dict:
        out = self.run(["status", "--json"], retry=False)
        try:
            return json.loads(out)
        except ValueError as e:
            raise RpmOstreeError(f"rpm-ostree status --json printed invalid JSON: {e}")

    def booted_kargs(self) -> Tuple[str, ...]:
        return tuple(self.run(["kargs"], retry=False).split())


def image_of(deployment: dict) -> str:
    """The container image pull spec of a deployment ('' when booted from an ostree ref)."""
    ref = deployment.get("container-image-reference") or ""
    for prefix in IMAGE_TRANSPORTS:
        if ref.startswith(prefix):
            ref = ref[len(prefix):]
            break
    if ref.startswith("docker://"):
        ref = ref[len("docker://"):]
    return ref


def booted_os(root, rpmostree: Optional[RpmOstree] = None) -> Optional[Tuple[str, Tuple[str, ...]]]:
    """(booted image, booted kernel arguments) on a live rpm-ostree host; None offline or without it."""
    if not root.is_live:
        return None
    rpmostree = rpmostree or RpmOstree()
    if not rpmostree.available():
        return None
    status = rpmostree.status()
    booted = next((d for d in status.get("deployments", []) if d.get("booted")), None)
    if booted is None:
        return None
    return image_of(booted), rpmostree.booted_kargs()
