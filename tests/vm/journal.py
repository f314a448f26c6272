"""The guest's journal, read back from its disk image, through the host's journalctl -D."""

import json
import subprocess
from typing import Any, Dict, List


def journalctl(directory: str, *args: str) -> List[Dict[str, Any]]:
    """Entries (as dicts of strings) that ``journalctl -D directory ARGS`` selects."""
    proc = subprocess.run(["journalctl", "-D", directory, "--no-pager", "-o", "json", *args],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode not in (0, 1) or (proc.returncode == 1 and proc.stdout.strip()):
        raise RuntimeError(f"journalctl -D {directory} {' '.join(args)} failed: {proc.stderr}")
    out = []
    for line in proc.stdout.splitlines():
        entry = json.loads(line)
        for key, value in entry.items():
            if isinstance(value, list) and all(isinstance(b, int) for b in value):  # binary field
                entry[key] = bytes(value).decode("utf-8", "replace")
        out.append(entry)
    return out


class Journal:
    def __init__(self, directory: str):
        self.directory = directory
        self.entries = journalctl(directory)
        first_seen: Dict[str, int] = {}
        for e in self.entries:
            ts = int(e["__REALTIME_TIMESTAMP"])
            first_seen[e["_BOOT_ID"]] = min(ts, first_seen.get(e["_BOOT_ID"], ts))
        self.boots = sorted(first_seen, key=first_seen.get)  # boot ids, oldest first

    def boot_of(self, entry: Dict[str, Any]) -> int:
        """1 for the first boot."""
        return self.boots.index(entry["_BOOT_ID"]) + 1

    def select(self, boot: int = 0, **fields: str) -> List[Dict[str, Any]]:
        out = [e for e in self.entries if all(e.get(k) == v for k, v in fields.items())]
        return [e for e in out if not boot or self.boot_of(e) == boot]

    def messages(self, boot: int = 0, contains: str = "", **fields: str) -> List[str]:
        return [str(e.get("MESSAGE", "")) for e in self.select(boot, **fields) if contains in str(e.get("MESSAGE", ""))]

    def first_time(self, boot: int, contains: str, **fields: str) -> int:
        times = [int(e["__REALTIME_TIMESTAMP"]) for e in self.select(boot, **fields)
                 if contains in str(e.get("MESSAGE", ""))]
        assert times, f"no journal entry in boot {boot} with {fields} containing {contains!r}"
        return min(times)
