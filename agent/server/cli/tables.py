"""How a ``get`` table fits the terminal (pure: rows in, text out); views.py says what the rows hold.

A table takes the terminal's width (``terminal_width``: COLUMNS, else the terminal's; on a pipe,
as kubectl, every value whole). When it does not fit, it gives up, in this order: the optional
columns (counts other columns already imply), then the length of a rendered config name
(``rendered-worker-c7f50b7f…``, ``worker-c7f50b7f…``, ``c7f50b7f…``), then the widest cells of the
other columns; a pool or node name is cut last of all. A column left out is never left out
silently: a line under the table names it and says that ``-o wide`` shows it (kubectl has no
such line: it never leaves out a column, it wraps). A cut value ends in ``…``.

``-o wide`` prints every column, and the wide-only ones (kubectl's columns of priority > 0:
``wide_only``), with every value whole.
"""

import os
import sys
from typing import Any, Callable, List, Optional, Sequence

WIDTH = 100
GAP = "  "
ELLIPSIS = "…"
MIN_CELL = 12  # a cut cell keeps at least this many characters (its header's, when longer)
SHORTER = ((64, ""), (12, ""), (8, ""), (8, "prefix"), (8, "name"))

Rows = List[List[str]]


def terminal_width(stream: Any = None) -> Optional[int]:
    """The width a table may take: $COLUMNS, else the terminal ``stream`` (stdout) is; None (no
    limit, every value whole, as ``kubectl get`` prints to a pipe) when it is no terminal."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    try:
        fd = (stream if stream is not None else sys.stdout).fileno()
        return os.get_terminal_size(fd).columns if os.isatty(fd) else None
    except (AttributeError, ValueError, OSError):
        return None


def shorten_config(name: str, keep: int, drop: str = "") -> str:
    """``rendered-worker-<32 hex>`` -> ``rendered-worker-<keep hex>…``; other names unchanged.

    ``drop="prefix"`` also leaves out ``rendered-`` (``worker-c7f50b7f…``), ``drop="name"`` all
    but the hash (``c7f50b7f…``: the NAME column already says which pool's config it is).
    """
    head, sep, digest = name.rpartition("-")
    if not sep or len(digest) <= keep or not all(c in "0123456789abcdef" for c in digest):
        return name
    short = digest[:keep] + ELLIPSIS
    if drop == "name":
        return short
    if drop == "prefix" and head.startswith("rendered-"):
        head = head[len("rendered-"):]
    return f"{head}-{short}"


def table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join(GAP.join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n" for r in rows)


def fit(build: Callable[[Callable[[str], str]], Rows], width: Optional[int] = WIDTH, wide: bool = False,
        optional: Sequence[str] = (), free: str = "", wide_only: Sequence[str] = ()) -> str:
    """The table ``build(short)`` that fits in ``width`` giving up least, and under it the line
    that names the columns it left out (``hidden_note``). Whole config names come first: the
    ``optional`` columns go (in their order) while that makes them fit; else the names are
    shortened (``SHORTER``) with every column kept, and only at their shortest do the optional
    columns go. At each step the ``free`` column (a reason: prose) may be cut before anything
    else; at the end the widest cells of any column, a name last. ``wide``: every column (the
    ``wide_only`` ones too) and value whole; no ``width``: every column but those, values whole."""
    if wide:
        return table(build(lambda name: name))

    def base(short: Callable[[str], str]) -> Rows:
        return without(build(short), wide_only)

    whole = base(lambda name: name)
    if not width:
        return table(whole)
    steps = [without(whole, optional[:n]) for n in range(len(optional) + 1)]
    for keep, drop in SHORTER:
        steps.append(base(lambda name, keep=keep, drop=drop: shorten_config(name, keep, drop)))
    steps += [without(steps[-1], optional[:n]) for n in range(1, len(optional) + 1)]
    chosen = _first_fitting(steps, free, width) or cut_rows(steps[-1], width)
    return table(chosen) + hidden_note([h for h in whole[0] if h not in chosen[0]], width)


def _first_fitting(steps: List[Rows], free: str, width: int) -> Optional[Rows]:
    for rows in steps:
        for candidate in (rows, cut_column(rows, free, width)):
            if candidate is not None and _fits(candidate, width):
                return candidate
    return None


def hidden_note(hidden: Sequence[str], width: int) -> str:
    """The line under a table that left columns out: how many, which (when the line has room),
    and that ``-o wide`` shows them; "" when none was left out."""
    if not hidden:
        return ""
    n = len(hidden)
    what = f"{n} column{'s' if n > 1 else ''} hidden at this width"
    named = f"{what} ({', '.join(hidden)}): -o wide shows every column"
    return (named if len(named) <= width else f"{what}: -o wide") + "\n"


def cut_column(rows: Rows, header: str, width: int) -> Optional[Rows]:
    """``rows`` with the cells of the column ``header`` cut as far as a line must shrink to fit
    ``width``, not below ``MIN_CELL``; None when there is no such column or it cannot give enough."""
    if header not in rows[0]:
        return None
    i = rows[0].index(header)
    excess = max(len(line) for line in table(rows).splitlines()) - width
    limit = max(len(r[i]) for r in rows) - excess
    if limit < max(MIN_CELL, len(header)):
        return None
    return [rows[0]] + [r[:i] + [cut(r[i], limit)] + r[i + 1:] for r in rows[1:]]


def without(rows: Rows, columns: Sequence[str]) -> Rows:
    """``rows`` (a header first) without the columns headed ``columns``."""
    keep = [i for i, h in enumerate(rows[0]) if h not in columns]
    return [[r[i] for i in keep] for r in rows]


def _fits(rows: Rows, width: int) -> bool:
    return max(len(line) for line in table(rows).splitlines()) <= width


def cut(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[:max(limit - 1, 0)] + ELLIPSIS


def cut_rows(rows: Rows, width: int) -> Rows:
    """``rows`` (a header first) with the widest columns' cells cut until a line fits ``width``."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    floors = [max(MIN_CELL, len(h)) for h in rows[0]]
    floors[0] = widths[0]  # the name stays whole while another column can give
    if sum(floors) + len(GAP) * (len(widths) - 1) > width:
        floors[0] = max(MIN_CELL, len(rows[0][0]))
    while sum(widths) + len(GAP) * (len(widths) - 1) > width:
        cuttable = [i for i, w in enumerate(widths) if w > floors[i]]
        if not cuttable:
            break
        widths[max(cuttable, key=lambda k: (widths[k], k))] -= 1  # the widest; of equals, the rightmost
    return [rows[0]] + [[cut(c, w) for c, w in zip(r, widths)] for r in rows[1:]]
