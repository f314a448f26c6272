"""The package-level import graph of ``agent``, drawn from the code (every import, including
those inside functions), as the Mermaid block docs/architecture.md carries.

    python tools/import_graph.py           # print the block
    python tools/import_graph.py --check   # exit 1 when docs/architecture.md's block differs

tests/unit/test_architecture.py runs the check, so the picture cannot drift from the code.
"""

import ast
import os
import sys
from collections import Counter
from typing import Dict, Iterator, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(REPO, "docs", "architecture.md")
BEGIN, END = "<!-- import-graph: begin (tools/import_graph.py) -->", "<!-- import-graph: end -->"

# The boxes of the picture, most specific first; a module belongs to the first that prefixes it.
NODES = [
    ("agent.server.cli", "server/cli: serve, get, describe, watch"),
    ("agent.server.http", "server/http: WSGI app, gunicorn, gevent worker"),
    ("agent.server.cluster", "server/cluster: Cluster service"),
    ("agent.server.store.sqlite", "server/store/sqlite: node state in SQLite"),
    ("agent.server.store.etcd", "server/store/etcd: node state and objects in etcd"),
    ("agent.server.store.kube", "server/store/kube: the Kubernetes API"),
    ("agent.server.store.statedir", "server/store/statedir: the YAML directory"),
    ("agent.server.store", "server/store: contracts (NodeStore, ObjectSource), shared parts"),
    ("agent.server.rollout", "server/rollout: render, gate, progress, leases"),
    ("agent.cli", "cli: node-agent"),
    ("agent.commands", "commands: one per subcommand"),
    ("agent.node", "node: first boot, update, apply"),
    ("agent.resource", "resource: every fetch"),
    ("agent.host", "host: effects on the machine"),
    ("agent.core", "core: decisions and plans (pure)"),
    ("agent.ignition", "ignition: config library (pure)"),
    ("agent.errors", "errors: exit codes"),
]


def modules() -> Iterator[Tuple[str, str]]:
    for top, dirs, files in os.walk(os.path.join(REPO, "agent")):
        dirs[:] = sorted(d for d in dirs if d not in ("_vendor", "__pycache__"))
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(top, f)
                name = os.path.relpath(path[:-3], REPO).replace(os.sep, ".")
                yield (name[:-9] if name.endswith(".__init__") else name), path


def imports_of(name: str, path: str) -> Iterator[str]:
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                yield f"{base}.{alias.name}" if base else alias.name
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)


def box(name: str) -> str:
    return next((prefix for prefix, _ in NODES if name == prefix or name.startswith(prefix + ".")), "")


def edges() -> Dict[Tuple[str, str], int]:
    count: Counter = Counter()
    for name, path in modules():
        src = box(name)
        for target in imports_of(name, path):
            dst = box(target)
            if src and dst and src != dst:
                count[(src, dst)] += 1
    return dict(count)


def mermaid() -> str:
    ids = {prefix: prefix.replace("agent.", "").replace(".", "_") for prefix, _ in NODES}
    lines = ["```mermaid", "graph TD"]
    lines += [f'  {ids[p]}["{label}"]' for p, label in NODES]
    lines += [f"  {ids[a]} --> {ids[b]}" for (a, b) in sorted(edges())]  # no counts: they churn
    return "\n".join(lines + ["```"])


def block_in_doc() -> str:
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip()


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        same = block_in_doc() == mermaid()
        print("docs/architecture.md: the import graph is current" if same else
              "docs/architecture.md: the import graph is out of date; paste `python tools/import_graph.py` in it")
        sys.exit(0 if same else 1)
    print(mermaid())
