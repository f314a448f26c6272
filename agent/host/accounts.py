"""The account databases of a root, read (agent.core.applyplan.accounts computes the changes)."""

from agent.core.applyplan.accounts import Accounts


def read_accounts(root) -> Accounts:
    """The account databases of ``root`` (missing files read as empty)."""
    texts = {}
    for name in ("passwd", "group", "shadow", "gshadow"):
        try:
            texts[name] = root.read_text(f"/etc/{name}")
        except (FileNotFoundError, NotADirectoryError):
            texts[name] = ""
    return Accounts(**texts)
