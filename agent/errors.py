"""Error types shared by every part of node-agent, and the exit codes they map to.

Exit codes are a contract (docs/commands.md; what to do about each: docs/troubleshooting.md).
Every error says what was wrong, where (JSON path, file, field) and what to do.
"""

from dataclasses import dataclass
from typing import Any, List, Optional

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INVALID_CONFIG = 65  # EX_DATAERR
EXIT_NO_INPUT = 66  # EX_NOINPUT: a file or directory named on the command line is not there (or not readable)
EXIT_UNREACHABLE = 69  # EX_UNAVAILABLE
EXIT_INTERNAL = 70  # EX_SOFTWARE
EXIT_ROLLED_BACK = 75  # EX_TEMPFAIL: retry is safe
EXIT_SKEW_REFUSED = 78  # EX_CONFIG
EXIT_DRIFTED = 79  # not a sysexits code: the node's disk differs from its config (update refuses to apply over it)


_MISSING = object()


@dataclass(frozen=True)
class Problem:
    """One validation finding, anchored at a JSON path such as ``$.storage.files.3.path``."""

    path: str
    message: str
    rule: str = ""
    severity: str = "error"  # "error" or "warning"
    value: Any = _MISSING
    source: str = ""  # file name, when known
    line: Optional[int] = None  # of the offending value in the source text, from 1
    column: Optional[int] = None

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def __str__(self) -> str:
        text = f"{self.path}: {self.severity}: {self.message}"
        if self.value is not _MISSING:
            text += f" (got {self.value!r})"
        if self.rule:
            text += f" [{self.rule}]"
        if self.line is not None:
            text += f" at line {self.line}, column {self.column}"
        if self.source:
            text += f" in {self.source}"
        return text

    def to_dict(self) -> dict:
        out = {"path": self.path, "severity": self.severity, "message": self.message, "rule": self.rule}
        if self.value is not _MISSING:
            out["value"] = self.value
        if self.source:
            out["source"] = self.source
        if self.line is not None:
            out["line"], out["column"] = self.line, self.column
        return out


class NodeAgentError(Exception):
    """Base class. ``exit_code`` is what ``node-agent`` exits with when this ends a run."""

    exit_code = EXIT_INTERNAL


class UsageError(NodeAgentError):
    exit_code = EXIT_USAGE


class InputMissing(NodeAgentError):
    """A file or directory the command line names does not exist or cannot be read (a typo,
    most often): said as such, never as an invalid config or a node that never ran."""

    exit_code = EXIT_NO_INPUT


class ConfigError(NodeAgentError):
    """A config (Ignition, MachineConfig, policy, rules, settings) is invalid.

    ``problems`` lists every finding; ``str()`` gives one per line, each starting with its path.
    """

    exit_code = EXIT_INVALID_CONFIG

    def __init__(self, message: str, problems: Optional[List[Problem]] = None, source: str = ""):
        self.problems = list(problems or [])
        self.source = source
        super().__init__(message)

    def __str__(self) -> str:
        head = self.args[0] if self.args else "invalid config"
        if self.source and self.source not in head:
            head = f"{self.source}: {head}"
        errors = [p for p in self.problems if p.is_error]
        if not errors:
            return head
        return head + "\n" + "\n".join(str(p) for p in errors)


class FetchError(NodeAgentError):
    """A config or resource could not be fetched (final answer, or retry budget spent).

    A server that answered a final 4xx was reached: it refused what the pointer or the config
    asks for (an unknown pool, a missing token). That is a configuration to fix (65), not an
    unreachable server (69), which only a transport error, 5xx, 408 or 429 past the retry
    budget is.
    """

    def __init__(self, message: str, url: str = "", status: Optional[int] = None, final: bool = True):
        self.url = url
        self.status = status
        self.final = final
        super().__init__(message)

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        if self.final and self.status is not None and 400 <= self.status < 500:
            return EXIT_INVALID_CONFIG
        return EXIT_UNREACHABLE


class NotReady(NodeAgentError):
    """Not now, but later is fine: first boot has not completed, another update holds the lock."""

    exit_code = EXIT_ROLLED_BACK  # EX_TEMPFAIL: trying again later is safe


class ApplyError(NodeAgentError):
    """Applying a config failed; the node was rolled back (retry is safe).

    ``undone`` is False when the rollback could not undo everything (the message lists what)."""

    exit_code = EXIT_ROLLED_BACK
    undone = True


class UpdateReverted(ApplyError):
    """A health check failed after an update (agent/core/health.py): the node put back the config
    it ran before (``undone`` False: it could not, and says so). ``reason`` is its Degraded report's."""

    def __init__(self, reason: str, undone: bool = True):
        super().__init__(reason)
        self.reason = reason
        self.undone = undone
        if not undone:
            self.exit_code = EXIT_INTERNAL


class HostError(NodeAgentError):
    """An effect on the host (D-Bus, rpm-ostree, filesystem) failed."""

    exit_code = EXIT_INTERNAL


class SkewRefused(NodeAgentError):
    """The booted boot image is too old (or too new) for the target; the node must not pivot."""

    exit_code = EXIT_SKEW_REFUSED


# What to do, per exit code: printed once with the error that ends a run.
HINTS = {
    EXIT_USAGE: "see --help",
    EXIT_NO_INPUT: "check the path named above (a typo?), then run again",
    EXIT_INVALID_CONFIG: "fix the file or setting named above ('node-agent validate FILE' checks a config "
                         "offline), then run again",
    EXIT_UNREACHABLE: "check DNS, routing, the server's port (22623 by default), the CA in the pointer config and that "
                      "node-config-server runs; 'journalctl NODE_AGENT_STAGE=fetch' shows each attempt",
    EXIT_INTERNAL: "a bug: run again with NODE_AGENT_DEBUG=1 for a traceback and report it with "
                   "'node-agent status --json'",
    EXIT_ROLLED_BACK: "the node is as before; trying again is safe once the cause is fixed",
    EXIT_SKEW_REFUSED: "update the boot image to one the skew rules accept ('node-agent skew' names it), then "
                       "re-provision this node; or, to accept the skew, set the cluster's bootImageSkewEnforcement "
                       "mode to None, then reboot this node",
    EXIT_DRIFTED: "restore the paths 'node-agent status' lists, or re-apply the config: 'node-agent update --force' "
                  "(or touch /run/node-agent-force)",
}


def hint_for(exit_code: int) -> str:
    return HINTS.get(exit_code, "")
