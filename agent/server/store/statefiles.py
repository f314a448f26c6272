"""Reading the state directory's files safely: what a file can make the server spend is bounded.

The state directory is written by an admin (or a ConfigMap mount), but one bad file must not
take the server down (docs/security.md, "State directory"):

- only regular files are read; a FIFO, socket or device node is refused without blocking
  (opened with ``O_NONBLOCK``, checked with ``fstat``);
- a symlink may point only inside the state directory (ConfigMap mounts use ``..data``
  links inside the mount); one pointing out of it is refused;
- at most ``MAX_FILE_BYTES`` per file;
- YAML aliases may add at most ``MAX_ALIAS_NODES`` nodes when expanded (the 652-byte "billion
  laughs" file expands to billions), a document may nest at most ``MAX_DEPTH`` levels, and a
  recursive alias is refused: all measured on the composed node graph, before any object is
  built, in time linear in the file.
"""

import errno
import os
import stat
from typing import Any, Dict, List, Optional, Tuple

import yaml

from agent.errors import Problem
from agent.ignition.yamlsafe import MAX_ALIAS_NODES, Constructor, check_node_graph  # noqa: F401 (re-exported)

MAX_FILE_BYTES = 8 << 20  # etcd refuses objects over 1.5 MiB; a MachineConfig is far smaller
MAX_DEPTH = 100  # as agent.ignition.yamlsafe's, which check_node_graph also applies

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class StateFileError(Exception):
    """A file that is not read; ``rule`` says which rule refused it."""

    def __init__(self, message: str, rule: str):
        super().__init__(message)
        self.rule = rule


def read_bounded(path: str, state_dir: str, limit: Optional[int] = None) -> bytes:
    """The bytes of ``path`` (a regular file inside ``state_dir``); FileNotFoundError when absent."""
    limit = MAX_FILE_BYTES if limit is None else limit
    _check_inside(path, state_dir)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise FileNotFoundError(path) from exc
        if exc.errno == errno.ENXIO:  # a FIFO without a writer (O_NONBLOCK does not block)
            raise StateFileError("not a regular file (a FIFO or socket): refused; put a file here", "filetype")
        raise StateFileError(f"cannot read: {exc.strerror}", "read")
    try:
        kind = _file_kind(os.fstat(fd).st_mode)
        if kind:
            raise StateFileError(f"not a regular file ({kind}): refused; put a YAML file here", "filetype")
        chunks = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise StateFileError(f"too large: more than {limit} bytes", "size")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "" if stat.S_ISREG(mode) else "not a regular file"


def _check_inside(path: str, state_dir: str) -> None:
    if not os.path.islink(path) and not os.path.islink(os.path.dirname(path)):
        return
    real = os.path.realpath(path)
    root = os.path.realpath(state_dir)
    if os.path.commonpath([real, root]) != root:
        raise StateFileError(f"a symlink out of the state directory (to {real}): refused; copy the file into "
                             f"the state directory instead", "symlink")


def load_yaml_docs(data: bytes) -> List[Any]:
    """All documents of a YAML stream, safely loaded, with the alias and depth limits."""
    text = data.decode("utf-8")
    _check_depth(text)  # before composing: the composer recurses (libyaml's: a segfault when deep)
    out = []
    for node in yaml.compose_all(text, Loader=_LOADER):
        if node is None:
            continue
        check_node_graph(node)
        out.append(Constructor().construct_document(node))  # a bad scalar is a YAMLError too
    return out


def _check_depth(text: str) -> None:
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise yaml.YAMLError(f"nested deeper than {MAX_DEPTH} levels: refused")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1


def read_docs(path: str, src: str, state_dir: str, problems: List[Problem]) -> List[Tuple[str, Dict[str, Any]]]:
    """The objects of one state file as (where, object); problems appended, never raised."""
    docs = _load(path, src, state_dir, problems)
    if docs is None:
        return []
    if not docs:  # emptied, or cut before its first document: never "the objects are gone"
        problems.append(Problem("$", "holds no object (an empty file, or one being rewritten): the objects it "
                                "held keep serving; to delete them, remove the file", "empty", source=src))
        return []
    out = []
    for i, doc in enumerate(docs):
        where = src if len(docs) == 1 else f"{src} (document {i + 1})"
        if not isinstance(doc, dict):
            problems.append(Problem("$", "must be a YAML map (an object)", "object", source=where))
            continue
        if doc.get("kind") == "List" or (isinstance(doc.get("items"), list) and "spec" not in doc):
            for j, item in enumerate(doc.get("items") or []):
                if isinstance(item, dict):
                    out.append((f"{where} (item {j})", item))
                else:
                    problems.append(Problem(f"$.items.{j}", "must be an object", "object", source=where))
        else:
            out.append((where, doc))
    return out


def _load(path: str, src: str, state_dir: str, problems: List[Problem]) -> Optional[List[Any]]:
    try:
        return load_yaml_docs(read_bounded(path, state_dir))
    except FileNotFoundError:
        problems.append(Problem("$", "vanished while being read", "read", source=src))
    except StateFileError as exc:
        problems.append(Problem("$", str(exc), exc.rule, source=src))
    except UnicodeDecodeError as exc:
        problems.append(Problem("$", f"not UTF-8 text: {exc}", "read", source=src))
    except RecursionError:
        problems.append(Problem("$", f"nested too deeply (at most {MAX_DEPTH} levels)", "yaml", source=src))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problems.append(Problem("$", f"not valid YAML{where}: {getattr(exc, 'problem', None) or exc}", "yaml",
                                source=src))
    return None
