"""Parity with Ignition's own validator on every config of Ignition's tests and docs.

The corpus (``<repo>/../shared/ignition-corpus/ignition-tests.jsonl``, one JSON object a line)
holds 1,055 configs found in coreos/ignition v2.26.0-74 (blackbox tests, config tests, docs),
each with what ``ignition-validate`` said: ``ign.valid``, ``ign.errors`` / ``ign.warnings``
(JSON paths, "" where Ignition names none). Each config goes through what ``node-agent
validate`` runs (``check_node_config`` on the raw bytes). Agreement:

- the same verdict;
- when both reject and Ignition names a path: one of our error paths equals one of Ignition's
  or is a parent/child of it (at least two components, e.g. ``$.storage.files.1`` and
  ``$.storage.files.1.path``);
- every warning path Ignition gives is a warning path here too (same path, or parent/child).

KNOWN_DIFFERENCES would list records where we knowingly answer differently, each with the
Ignition code that shows ours is right. It is empty: every record agrees.
"""

import json
import os
from typing import Dict, List, Optional, Tuple

import pytest

from agent.core.loadconfig import check_node_config
from agent.errors import ConfigError
from tests.helpers import paths

REPO = paths.REPO
# <repo>/../shared, or NODE_AGENT_SHARED_DIR when the clone lives elsewhere (a git worktree)
SHARED = os.environ.get("NODE_AGENT_SHARED_DIR") or os.path.join(REPO, "..", "shared")
CORPUS = os.path.join(SHARED, "ignition-corpus", "ignition-tests.jsonl")

KNOWN_DIFFERENCES: Dict[str, str] = {}


def _records() -> List[dict]:
    if not os.path.exists(CORPUS):
        return []
    with open(CORPUS, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


RECORDS = _records()
needs_corpus = pytest.mark.skipif(not RECORDS, reason=f"Ignition corpus not found at {os.path.normpath(CORPUS)} "
                                  "(it lives beside the clone in shared/ignition-corpus; or set NODE_AGENT_SHARED_DIR)")


def ours(text: str) -> Tuple[bool, List[str], List[str]]:
    """(valid, error paths, warning paths) as ``node-agent validate`` finds them."""
    try:
        nc, problems = check_node_config(text.encode("utf-8", "surrogatepass"), "<corpus>")
    except ConfigError:
        return False, ["$"], []
    return (nc is not None, [p.path for p in problems if p.is_error],
            [p.path for p in problems if not p.is_error])


def related(a: str, b: str) -> bool:
    if a == b:
        return True
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    return long_.startswith(short + ".") and short.count(".") >= 2


def disagreement(rec: dict) -> Optional[str]:
    valid, errors, warnings = ours(rec["config"])
    ign = rec["ign"]
    if valid != ign["valid"]:
        return f"verdict: Ignition {'accepts' if ign['valid'] else 'rejects'} ({ign['msgs'][:3]}), we " \
               f"{'accept' if valid else 'reject'} ({errors[:3]})"
    named = [p for p in ign["errors"] if p]
    if not valid and named and not any(related(a, b) for a in errors for b in named):
        return f"path: Ignition names {named[:3]}, we name {errors[:3]}"
    missing = [w for w in ign["warnings"] if w and not any(related(w, ours_) for ours_ in warnings)]
    if missing:
        return f"warnings: Ignition warns at {missing[:3]}, we do not ({warnings[:3]})"
    return None


@needs_corpus
def test_every_record_agrees_with_ignition():
    found = {}
    for rec in RECORDS:
        why = disagreement(rec)
        if why and rec["id"] not in KNOWN_DIFFERENCES:
            found[rec["id"]] = why
    agree = len(RECORDS) - len(found)
    assert not found, (f"{agree}/{len(RECORDS)} agree ({100.0 * agree / len(RECORDS):.1f}%); first differences:\n"
                       + "\n".join(f"{k}: {v}" for k, v in list(found.items())[:20]))


@needs_corpus
def test_known_differences_are_still_different():
    ids = {rec["id"]: rec for rec in RECORDS}
    for rid in KNOWN_DIFFERENCES:
        assert rid in ids and disagreement(ids[rid]), f"{rid} now agrees: drop it from KNOWN_DIFFERENCES"


def test_the_agreement_rule_itself():
    assert related("$.storage.files.1", "$.storage.files.1.path")
    assert not related("$.storage", "$.storage.files.1")  # a parent needs two components
    assert not related("$.storage.files.1", "$.storage.files.10")


@pytest.mark.parametrize("text,valid", [
    ('\ufeff{"ignition": {"version": "3.4.0"}}', False),  # Go's json refuses a BOM
    ('# a comment\n{"ignition": {"version": "3.4.0"}}', False),  # ... and any other byte before it
    ('---\n{"ignition": {"version": "3.4.0"}}', False),
    ('ignition:\n  version: 3.4.0\n', False),  # an Ignition config in YAML is not one Ignition reads
    ('kind: MachineConfig\napiVersion: machineconfiguration.openshift.io/v1\nspec: {}\n', True),
    ('  \n{"ignition": {"version": "3.4.0"}}', True),
    ('{"Ignition": {"Version": "3.4.0"}}', True),  # Go matches keys case-insensitively
    ('{"ignition": {"version": "3.4.0"}, "storage": {"files": [null]}}', False),
    ('{"ignition": {"version": "3.4.0"}, "passwd": {"users": [null]}}', True),  # zero user: no rule fails
])
def test_bytes_as_ignition_decodes_them(text, valid):
    assert ours(text)[0] is valid
