"""Validation of the kubelet pull secret (``/var/lib/kubelet/config.json``) before it is written.

A broken pull secret leaves a node unable to pull any image (the kubelet's and CRI-O's) and is
only found long after the write. Rules: a JSON object with an ``auths`` object; each registry
entry an object whose ``auth`` is base64 of ``user:password`` (both parts non-empty).
"""

import base64
import binascii
import json
from typing import List

from agent.errors import ConfigError, Problem

PULL_SECRET_PATH = "/var/lib/kubelet/config.json"
_HINT = "expected {\"auths\": {\"<registry>\": {\"auth\": \"<base64 of user:password>\"}}}"


def pull_secret_problems(data: bytes, where: str = "$") -> List[Problem]:
    """Every problem of a pull secret's bytes; ``where`` anchors the JSON paths (the config field)."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        return [Problem(where, f"pull secret {PULL_SECRET_PATH} is not UTF-8 text", rule="pull-secret")]
    except ValueError as e:
        return [Problem(where, f"pull secret {PULL_SECRET_PATH} is not valid JSON ({e}); {_HINT}",
                        rule="pull-secret")]
    if not isinstance(doc, dict):
        return [Problem(where, f"pull secret must be a JSON object; {_HINT}", rule="pull-secret")]
    auths = doc.get("auths")
    if not isinstance(auths, dict):
        return [Problem(f"{where}.auths", f"pull secret needs an 'auths' object; {_HINT}", rule="pull-secret")]
    problems = []
    for registry, entry in auths.items():
        at = f"{where}.auths.{registry}"
        if not registry:
            problems.append(Problem(at, "registry name is empty", rule="pull-secret"))
        if not isinstance(entry, dict):
            problems.append(Problem(at, "registry entry must be an object with 'auth'", rule="pull-secret"))
            continue
        auth = entry.get("auth")
        if not isinstance(auth, str) or not auth:
            problems.append(Problem(f"{at}.auth", "missing 'auth' (base64 of user:password)", rule="pull-secret"))
            continue
        try:
            decoded = base64.b64decode(auth, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            problems.append(Problem(f"{at}.auth", "'auth' is not valid base64", rule="pull-secret"))
            continue
        user, sep, password = decoded.partition(":")
        if not sep or not user or not password:
            problems.append(Problem(f"{at}.auth", "'auth' must decode to user:password", rule="pull-secret"))
    return problems


def check_pull_secret(data: bytes, where: str = "$") -> None:
    """Raise ConfigError naming every problem; return quietly when the pull secret is valid."""
    problems = pull_secret_problems(data, where)
    if problems:
        raise ConfigError(f"invalid pull secret for {PULL_SECRET_PATH}: nothing was written", problems)
