"""``node-config-server get pools|nodes --watch``: a live view of a rollout, one progress bar per
pool, or the node table refreshed.

Drawn with rich (Live + Table + ProgressBar): redrawing in place, colour only on a terminal and
NO_COLOR are its job, and it is packaged for RHEL 9 (EPEL python3-rich) and installs on Python 3.9.
The pool view takes the terminal's width and gives up the progress bar's length first (24 columns
down to 6), then the target config name's (tables.SHORTER), never a pool's name or state. When
stdout is not a terminal, the columns of ``get pools`` / ``get nodes`` are printed, the header
once and then a row each time a pool (node) changes, as ``kubectl get -w`` does, so the output can
be logged, piped or read by a script with the same columns as the table.
"""

import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from agent.server.cli import firstbootviews, tables, views
from agent.server.cli.client import ClientError

Fetch = Callable[[], List[Dict[str, Any]]]


def _numbers(pool: Dict[str, Any]) -> Tuple[int, int, int, int]:
    st = pool.get("status") or {}
    return (int(st.get("machineCount", 0)), int(st.get("updatedMachineCount", 0)),
            int(st.get("readyMachineCount", 0)), int(st.get("degradedMachineCount", 0)))


def _state(pool: Dict[str, Any]) -> str:
    if views._condition(pool, "Degraded") == "True":
        return "Degraded"
    if views._condition(pool, "Updating") == "True":
        return "Updating"
    return "Updated"


BAR_MAX, BAR_MIN = 24, 6
POOL_WATCH_COLUMNS = ("NAME", "STATE", "PROGRESS", "UPDATED", "READY", "DEGRADED", "TARGET")


def render(pools: List[Dict[str, Any]], error: str = "", now: Optional[float] = None):
    """A rich renderable: name, state, bar of updated/machines, counts, target config; sized to
    the console's width when drawn (``_PoolTable``)."""
    from rich.console import Group
    from rich.text import Text

    parts: List[Any] = [_PoolTable(pools)]
    if error:
        parts.append(Text(f"error: {error} (retrying)", style="red"))
    return Group(*parts)


def _pool_cells(p: Dict[str, Any]) -> Tuple[str, str, str, str, str, str]:
    machines, updated, ready, degraded = _numbers(p)
    target = ((p.get("spec") or {}).get("configuration") or {}).get("name", "")
    return ((p.get("metadata") or {}).get("name", ""), _state(p), f"{updated}/{machines}", str(ready),
            str(degraded), target)


def layout(pools: List[Dict[str, Any]], width: int) -> Tuple[int, Callable[[str], str]]:
    """(the bar's width, how to show a target name) for ``width`` columns: the bar gives way first,
    from ``BAR_MAX`` to ``BAR_MIN``, then the target name as tables.fit shortens a config name."""
    cells = [_pool_cells(p) for p in pools]
    others = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(POOL_WATCH_COLUMNS[:2] +
                                                                                POOL_WATCH_COLUMNS[3:6])]
    gaps = len(tables.GAP) * (len(POOL_WATCH_COLUMNS) - 1)
    shorts: List[Callable[[str], str]] = [lambda name: name] + [
        (lambda name, keep=keep, drop=drop: tables.shorten_config(name, keep, drop)) for keep, drop in tables.SHORTER]
    for short in shorts:
        target = max([len("TARGET")] + [len(short(c[5])) for c in cells])
        room = width - sum(others) - target - gaps
        if room >= BAR_MIN:
            return min(room, BAR_MAX), short
    return BAR_MIN, shorts[-1]


class _PoolTable:
    def __init__(self, pools: List[Dict[str, Any]]):
        self.pools = pools

    def __rich_console__(self, console, options):
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        bar_width, short = layout(self.pools, options.max_width)
        table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 2, 0, 0))
        for col in POOL_WATCH_COLUMNS:
            table.add_column(col, no_wrap=True, overflow="ellipsis")
        styles = {"Updated": "green", "Updating": "yellow", "Degraded": "red"}
        for p in self.pools:
            name, state, counts, ready, degraded, target = _pool_cells(p)
            machines, updated = _numbers(p)[:2]
            bar = ProgressBar(total=max(machines, 1), completed=updated if machines else 1, width=bar_width,
                              complete_style=styles[state], finished_style="green")
            table.add_row(name, Text(state, style=styles[state]), bar, counts, ready, degraded, short(target))
        yield table


def line(pool: Dict[str, Any]) -> str:
    """What makes a pool's row change (its AGE aside, which changes every second)."""
    return "  ".join(_pool_cells(pool))


def node_line(node: Dict[str, Any]) -> str:
    """What makes a node's row change (its REPORTED age aside)."""
    rep = node.get("report") or {}
    return "  ".join((str(node.get("name", "")), str(node.get("pool") or ""), str(rep.get("state", "")),
                      str(bool(node.get("updated"))), str(rep.get("currentConfig") or ""),
                      firstbootviews.cell(node), str(rep.get("skew") or ""), views.node_reason(node)))


def pool_rows(pools: List[Dict[str, Any]], now: float) -> List[str]:
    """The ``get pools`` table to a pipe (every value whole), header first, no drain lines."""
    return views.pools_table(pools, now, width=None, draining=False).splitlines()


def node_rows(nodes: List[Dict[str, Any]], now: float) -> List[str]:
    return views.nodes_table(nodes, now, width=None).splitlines()


def render_nodes(nodes: List[Dict[str, Any]], error: str = "", now: Optional[float] = None):
    """The ``get nodes`` table, cut to the terminal's width as ``get nodes`` cuts it to 100."""
    from rich.console import Group
    from rich.text import Text

    parts: List[Any] = [_NodeTable(nodes, time.time() if now is None else now)]
    if error:
        parts.append(Text(f"error: {error} (retrying)", style="red"))
    return Group(*parts)


class _NodeTable:
    def __init__(self, nodes: List[Dict[str, Any]], now: float):
        self.nodes, self.now = nodes, now

    def __rich_console__(self, console, options):
        from rich.text import Text

        text = views.nodes_table(self.nodes, self.now, width=options.max_width) if self.nodes else "No nodes found."
        yield Text(text.rstrip("\n"), no_wrap=True, overflow="ellipsis")


def _pool_name(pool: Dict[str, Any]) -> str:
    return str((pool.get("metadata") or {}).get("name", ""))


def _node_name(node: Dict[str, Any]) -> str:
    return str(node.get("name", ""))


POOLS = (render, line, pool_rows, _pool_name)
NODES = (render_nodes, node_line, node_rows, _node_name)


def watch_pools(fetch: Fetch, interval: float, sleep=time.sleep, out=None, rounds: Optional[int] = None) -> int:
    """Until Ctrl-C (or ``rounds`` refreshes, for tests). A first failure ends it; later ones retry."""
    return watch(fetch, interval, POOLS, sleep, out, rounds)


def watch_nodes(fetch: Fetch, interval: float, sleep=time.sleep, out=None, rounds: Optional[int] = None) -> int:
    """``get nodes --watch``: as watch_pools, the node table refreshed."""
    return watch(fetch, interval, NODES, sleep, out, rounds)


def watch(fetch: Fetch, interval: float, kind, sleep=time.sleep, out=None, rounds: Optional[int] = None) -> int:
    out = out or sys.stdout
    items = fetch()  # a wrong URL or token fails at once, with its exit code
    try:
        if out.isatty():
            return _live(fetch, items, interval, sleep, out, rounds, kind[0])
        return _lines(fetch, items, interval, sleep, out, rounds, kind[1:])
    except KeyboardInterrupt:
        return 0


def _live(fetch: Fetch, items, interval, sleep, out, rounds, draw) -> int:
    from rich.console import Console
    from rich.live import Live

    console = Console(file=out)
    with Live(draw(items), console=console, auto_refresh=False) as live:
        n = 0
        while rounds is None or n < rounds:
            sleep(interval)
            n += 1
            try:
                items, error = fetch(), ""
            except ClientError as exc:
                error = str(exc)
            live.update(draw(items, error), refresh=True)
    return 0


def _lines(fetch: Fetch, items, interval, sleep, out, rounds, kind) -> int:
    """As ``kubectl get -w`` to a pipe: the table's header once, then the row of each item whose
    key (``line``/``node_line``) changed, in the table's columns."""
    key_of, rows_of, name_of = kind
    last: Dict[str, str] = {}
    last_error = ""
    header = True
    n = 0
    while True:
        rows = rows_of(items, time.time()) if items else []
        changed = [i for i, item in enumerate(items) if last.get(name_of(item)) != key_of(item)]
        if changed and header:
            out.write(rows[0] + "\n")
            header = False
        for i in changed:
            out.write(rows[i + 1] + "\n")
        last.update((name_of(item), key_of(item)) for item in items)
        out.flush()
        if rounds is not None and n >= rounds:
            return 0
        sleep(interval)
        n += 1
        try:
            items = fetch()
            last_error = ""
        except ClientError as exc:
            if str(exc) != last_error:
                out.write(f"error: {exc} (retrying)\n")
                last_error = str(exc)
