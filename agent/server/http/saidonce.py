"""Saying a thing once across serve's gunicorn workers (each reads the state directory on its
own: agent/server/store/statedir/watcher.py): the first process to claim a key in the server's
per-run directory (the metrics' multiprocess directory, made at start and removed at exit) says
it; the others stay quiet. A state directory problem was logged once per worker before."""

import hashlib
import os
from typing import Callable

PREFIX = "said-"  # not *.db: prometheus-client's multiprocess collector reads only those


def said_once(directory: str) -> Callable[[str], bool]:
    """``claim(key)``: True for the first claim of ``key`` in ``directory`` by any process, False
    after; True as well when the directory cannot tell (better said twice than never)."""
    def claim(key: str) -> bool:
        path = os.path.join(directory, PREFIX + hashlib.sha256(key.encode("utf-8")).hexdigest()[:32])
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return False
        except OSError:
            return True
        return True
    return claim
