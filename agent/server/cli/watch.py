"""``node-config-server get pools|nodes --watch``: a live view of a rollout, one progress bar per
pool, or the node table refreshed.

Drawn with rich (Live + Table + ProgressBar): redrawing in place, terminal width, colour only on
a terminal and NO_COLOR are its job, and it is packaged for RHEL 9 (EPEL python3-rich) and
installs on Python 3.9. When stdout is not a terminal, a line per pool (node) is printed each time
it changes (as ``oc get -w`` prints changed rows), so the output can be logged or piped.
"""

import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from agent.server.cli import views
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


def render(pools: List[Dict[str, Any]], error: str = "", now: Optional[float] = None):
    """A rich renderable: name, state, bar of updated/machines, counts, target config."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("NAME", "STATE", "PROGRESS", "UPDATED", "READY", "DEGRADED", "TARGET"):
        table.add_column(col, no_wrap=True)
    styles = {"Updated": "green", "Updating": "yellow", "Degraded": "red"}
    for p in pools:
        machines, updated, ready, degraded = _numbers(p)
        state = _state(p)
        target = ((p.get("spec") or {}).get("configuration") or {}).get("name", "")
        bar = ProgressBar(total=max(machines, 1), completed=updated if machines else 1, width=24,
                          complete_style=styles[state], finished_style="green")
        table.add_row((p.get("metadata") or {}).get("name", ""), Text(state, style=styles[state]), bar,
                      f"{updated}/{machines}", str(ready), str(degraded), views.shorten_config(target, 8))
    parts: List[Any] = [table]
    if error:
        parts.append(Text(f"error: {error} (retrying)", style="red"))
    return Group(*parts)


def line(pool: Dict[str, Any]) -> str:
    machines, updated, ready, degraded = _numbers(pool)
    target = ((pool.get("spec") or {}).get("configuration") or {}).get("name", "")
    return (f"{(pool.get('metadata') or {}).get('name', '')}  {_state(pool)}  {updated}/{machines} updated  "
            f"ready {ready}  degraded {degraded}  target {target}")


def node_line(node: Dict[str, Any]) -> str:
    """A node's row without its age (which changes every time): printed when the node changes."""
    rep = node.get("report") or {}
    reason = views.node_reason(node)
    return (f"{node.get('name', '')}  {node.get('pool') or '<none>'}  {rep.get('state', '')}  "
            f"{'updated' if node.get('updated') else 'not updated'}  {rep.get('currentConfig') or '-'}  "
            f"skew {rep.get('skew') or '-'}" + (f"  {reason}" if reason else ""))


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


POOLS = (render, line, _pool_name)
NODES = (render_nodes, node_line, _node_name)


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
        return _lines(fetch, items, interval, sleep, out, rounds, kind[1], kind[2])
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


def _lines(fetch: Fetch, items, interval, sleep, out, rounds, text_of, name_of) -> int:
    last: Dict[str, str] = {}
    last_error = ""
    n = 0
    while True:
        for item in items:
            text = text_of(item)
            name = name_of(item)
            if last.get(name) != text:
                out.write(text + "\n")
                last[name] = text
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
