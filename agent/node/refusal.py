"""What a node says about a report the server refused (pure): one line each, and what to do.

A refusal is the server's final word on a report (agent/node/report.py keeps it and does not send
it again until the server, the node name or the token changes); ``node-agent status`` and the
first boot's end show it with these words.
"""

from typing import Any, Dict


def refusal_hint(status: int, withheld: str = "") -> str:
    """What to do about a report the server refused with ``status``; ``withheld``: the plain
    http server the node held its token back from (the refusal's cause, whatever it says)."""
    if status in (401, 403) and withheld:
        return (f"the node did not send its token: {withheld} is plain http, and a token or credential goes "
                f"over https only; serve over https (node-config-server serve --tls-cert FILE --tls-key FILE) "
                f"and point the pointer config at https://, with the server's CA (docs/security.md, \"Tokens "
                f"only over https\")")
    if status in (401, 403):
        return ("the node registers with the bootstrap token of report.tokenFile (/etc/node-agent/agent.yaml; the "
                "server's --token-file) and then uses its own credential (<stateDir>/node-credential); if the "
                "server says the node is already registered (a reinstalled machine), an admin deletes it or "
                "registers it again (DELETE /api/v1/nodes/<node> with the admin token)")
    if status == 400:
        return "check the node name (--node-name or nodeName in agent.yaml) and the server's log"
    if status == 404:
        return "check the server URL in the pointer config"
    if status == 413:
        return "the report is larger than the server takes (its message names the limit); a bug: file it"
    return "check the server's log for why it refused the report"


def refusal_text(refused: Dict[str, Any]) -> str:
    """One line: which server refused the report, why, and what to do."""
    status = int(refused.get("status") or 0)
    said = f": {refused['message']}" if refused.get("message") else ""
    return (f"report refused by {refused.get('server', 'the server')} (HTTP {status}{said}); the server does not "
            f"count this node: {refusal_hint(status, str(refused.get('withheld') or ''))}")
