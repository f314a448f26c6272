"""The day-2 loop follows the server the node's pointer config names (issue 49).

First boot fetches the pool's config from the URL of the pointer config
(``/etc/node-agent/pointer.ign``) and saves it with the current config (``current-config.json``
``url``) and the node's credential (``node-credential`` ``server``). A cluster whose config server
moves (a new address, another port: the reopened demo) changes the pointer config; the day-2 loop
reads it before every pass and, when it names another server (scheme, host or port), takes the
saved URL's path (the pool the node joined) to that server, saves it in both files and goes on
there. The node's credential goes with it: the pointer config is the node's word on which server
is its own (it holds that server's CA), and a server that does not know the credential answers
401, after which the node registers again with its bootstrap token (agent/node/report.py).

Also the "what to do" of a fetch that fails in the loop, naming the file that holds what to fix:
the pointer config (the server's address and CA), the saved current config (the pool's path),
the token file or the credential file.
"""

import json
import logging
import os
import urllib.parse
from typing import Any, Dict, Optional

from agent.errors import FetchError
from agent.host.files import atomic_write
from agent.host.root import Root
from agent.node import nodestate
from agent.node.credential import CREDENTIAL, credential_path, read_credential
from agent.node.firstbootreport import pointer_url

log = logging.getLogger(__name__)


def followed_url(saved: str, named: str) -> str:
    """``saved`` (the loop's config URL) on the server ``named`` (the pointer config's config URL)
    names: its scheme and host:port, the saved path and query kept. ``saved`` itself when the
    pointer names no config URL or the same server."""
    if not named or not saved:
        return saved
    new, old = urllib.parse.urlsplit(named), urllib.parse.urlsplit(saved)
    if (new.scheme.lower(), new.netloc.lower()) == (old.scheme.lower(), old.netloc.lower()):
        return saved
    return urllib.parse.urlunsplit((new.scheme, new.netloc, old.path, old.query, old.fragment))


def server_of(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def follow(root: Root, state_dir: str, record: Dict[str, Any], pointer: Optional[Dict[str, Any]],
           pointer_file: str) -> Dict[str, Any]:
    """``record`` (the saved current config) with its URL on the server ``pointer`` names, saved,
    the credential's server with it; ``record`` as it is when nothing moved."""
    saved = str(record.get("url") or "")
    url = followed_url(saved, pointer_url(pointer) if isinstance(pointer, dict) else "")
    if url == saved:
        return record
    log.warning("the pointer config %s names the config server %s; this node's saved config came from %s: "
                "following the pointer config (%s and %s now name %s)", pointer_file, server_of(url),
                server_of(saved), os.path.join(state_dir, nodestate.CURRENT), os.path.join(state_dir, CREDENTIAL),
                server_of(url))
    record = dict(record, url=url)
    nodestate.save_current(root, state_dir, nodestate.current_config(record), record.get("etag"), url)
    move_credential(root, state_dir, server_of(url))
    return record


def move_credential(root: Root, state_dir: str, server: str) -> None:
    """The kept credential, registered or not, now for ``server`` (none kept: nothing to do)."""
    kept = read_credential(root, state_dir, quiet=True, registered_only=False)
    if kept is None or kept["server"] == server:
        return
    kept["server"] = server
    atomic_write(credential_path(root, state_dir), json.dumps(kept, sort_keys=True).encode(), mode=0o600)


def fetch_hint(exc: FetchError, root: Root, pointer_file: str, state_dir: str, token_file: str) -> str:
    """What to do about a fetch of the loop that failed, naming the file that holds what to fix."""
    pointer = root.path(pointer_file)
    url = exc.url or ""
    parts = urllib.parse.urlsplit(url)
    where = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}" if parts.hostname else url
    if exc.status in (401, 403):
        return (f"the server at {where} refused this node's token: its bootstrap token is in "
                f"{root.path(token_file) if token_file else 'report.tokenFile of agent.yaml (none set)'}, its own "
                f"credential in {credential_path(root, state_dir)}; give the node the server's token (serve "
                f"--token-file), or have the admin delete the node's registration so that it registers again")
    if exc.status == 404:
        return (f"the server at {where} has no {parts.path}: the pool this node joined at its first boot (its URL "
                f"is kept in {root.path(os.path.join(state_dir, nodestate.CURRENT))}); restore the pool on the "
                f"server, or, if this is not the node's server, put the right one in the pointer config {pointer} "
                f"(the loop follows it)")
    if exc.exit_code == 65:
        return (f"the server at {where} refused the fetch (HTTP {exc.status}); its log says why; the server's "
                f"address and CA are in the pointer config {pointer}")
    return (f"check that {where} (from the pointer config {pointer}) resolves and is reachable, that "
            f"node-config-server runs there and that the CA in {pointer} is its CA; a server that moved: put its "
            f"URL in {pointer} (the loop follows it); 'journalctl NODE_AGENT_STAGE=fetch' shows each attempt")
