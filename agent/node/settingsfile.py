"""Reading ``/etc/node-agent/agent.yaml`` from a root (what it may hold: agent.core.settings)."""

import posixpath
from typing import Optional

from agent.core.settings import DEFAULT_PATH, Settings, parse_settings_file
from agent.errors import ConfigError
from agent.host.root import Root


def load_settings(root: Root, path: Optional[str] = None) -> Settings:
    """Load the agent settings at ``path`` (a path inside ``root``; default /etc/node-agent/agent.yaml).

    The default file missing means all defaults; a file named explicitly must exist.
    """
    config_path = posixpath.normpath(path) if path else DEFAULT_PATH
    if not config_path.startswith("/"):
        config_path = "/" + config_path
    host_path = root.path(config_path)
    try:
        with open(host_path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        if path and config_path != DEFAULT_PATH:
            raise ConfigError(f"settings file {config_path} does not exist (under root {root.top}); "
                              "create it or leave out --settings for the defaults", source=config_path)
        return Settings()
    except OSError as exc:
        raise ConfigError(f"cannot read settings file {config_path}: {exc.strerror or exc}", source=config_path)
    return parse_settings_file(raw, config_path)
