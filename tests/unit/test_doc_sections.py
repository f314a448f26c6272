"""A reference to a section of the project's documents names a heading that is there.

Code, tests and documents point readers at ``docs/<name>.md, "<section>"``; a renamed or merged
section left such pointers leading nowhere. Each quoted section must be (the start of) a heading
of that document; the words may wrap over lines and comment markers."""

import os
import re
from typing import Dict, List, Set, Tuple

from tests.helpers import paths

REPO = paths.REPO
SKIP_DIRS = {".git", ".venv", ".venv39", "build", "demo-run", "__pycache__", ".pytest_cache", "node_modules"}
TEXT_FILES = (".py", ".md", ".yaml", ".yml", ".spec", ".service", ".sh", ".txt", ".j2", ".toml", ".cfg")
# docs/<name>.md (or README.md ...), then a comma and a section in quotes
REFERENCE = re.compile(r'((?:docs/)?[A-Za-z0-9_-]+\.md)(?:\))?,\s*"([^"\s][^"]{1,119})"')
WRAP = re.compile(r"\s*(?:#|\*|//)?\s*\n\s*(?:#|\*|//)?\s*")


def headings() -> Dict[str, Set[str]]:
    out: Dict[str, Set[str]] = {}
    for folder in ("", "docs"):
        for name in os.listdir(os.path.join(REPO, folder) if folder else REPO):
            if name.endswith(".md"):
                rel = os.path.join(folder, name) if folder else name
                with open(os.path.join(REPO, rel), encoding="utf-8") as f:
                    out[rel] = {m.group(1).strip() for m in re.finditer(r"^#+\s+(.+?)\s*$", f.read(), re.M)}
    return out


def project_files() -> List[str]:
    found = []
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        found += [os.path.join(folder, f) for f in files if f.endswith(TEXT_FILES) or f == "Makefile"]
    return found


def dangling() -> List[Tuple[str, str, str]]:
    heads = headings()
    out = []
    for path in project_files():
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for m in REFERENCE.finditer(text):
            doc = m.group(1) if m.group(1) in heads else "docs/" + m.group(1)
            if doc not in heads:
                continue
            section = WRAP.sub(" ", m.group(2)).strip()
            if not any(h.replace("`", "").startswith(section.replace("`", "")) for h in heads[doc]):
                out.append((os.path.relpath(path, REPO), doc, section))
    return out


def test_every_quoted_section_of_a_document_is_one_of_its_headings():
    assert dangling() == [], "a reference names a section the document has no heading for (rename it, or the heading)"
