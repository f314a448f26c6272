"""systemd unit enablement rules (pure): the links an offline root needs (as ``systemctl --root``
would make them); agent.host.units looks at a root, agent.host.systemd drives the live manager.

On an offline root, enabling a unit means creating the links its ``[Install]`` section asks for:
``WantedBy=X`` -> ``/etc/systemd/system/X.wants/<unit>``, ``RequiredBy=X`` -> ``X.requires/``,
``Alias=A`` -> ``/etc/systemd/system/A``, and ``Also=`` enables the named units too. Links are
absolute and point at the unit file as seen from inside the root (``/etc/systemd/system/<unit>``
for a unit the config writes, else its vendor path). Disabling removes those links (and any
other ``*.wants``/``*.requires`` link to the unit found under ``/etc/systemd/system``).

On the live root the same changes go through systemd's Manager over D-Bus
(``agent.host.systemd.Systemd``), which also handles presets and generators correctly.
"""

from typing import Dict, List, Tuple

SYSTEM_DIR = "/etc/systemd/system"
VENDOR_DIRS = ("/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")
_INSTALL_KEYS = ("WantedBy", "RequiredBy", "UpheldBy", "Alias", "Also")
_LINK_DIR_SUFFIX = {"WantedBy": ".wants", "RequiredBy": ".requires", "UpheldBy": ".upholds"}


def parse_install(text: str) -> Dict[str, List[str]]:
    """The ``[Install]`` section of a unit file: key -> values (space-separated lists split)."""
    out: Dict[str, List[str]] = {}
    section = ""
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        if section != "Install" or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip()
        if key not in _INSTALL_KEYS:
            continue
        if not value.strip():
            out[key] = []  # an empty assignment resets the list, as in systemd
        else:
            out.setdefault(key, []).extend(value.split())
    return out


def has_install(text: str) -> bool:
    return any(parse_install(text).values())


def install_links(unit: str, text: str, unit_path: str) -> List[Tuple[str, str]]:
    """(link path, link target) pairs that enabling ``unit`` creates; ``unit_path`` is its file.

    Template instances and ``DefaultInstance=`` are not expanded (configs name concrete units).
    """
    links = []
    install = parse_install(text)
    for key, suffix in _LINK_DIR_SUFFIX.items():
        for target in install.get(key, []):
            links.append((f"{SYSTEM_DIR}/{target}{suffix}/{unit}", unit_path))
    for alias in install.get("Alias", []):
        if alias != unit:
            links.append((f"{SYSTEM_DIR}/{alias}", unit_path))
    return links


def also_units(text: str) -> List[str]:
    return list(parse_install(text).get("Also", []))
