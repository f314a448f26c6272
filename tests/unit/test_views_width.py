"""Every view at 80 and 200 columns: each line fits, pool and node names and states are whole,
and at 200 a rendered config's whole name is there to paste into ``oc get mc`` (issue 40)."""

import io

import pytest

from agent.server.cli import views, watch

HASH = "c7f50b7fa4545f0bbd8222ee6d0f9201"
NOW = views.parse_time("2026-11-22T10:00:00Z")
POOLS = ("worker", "infra", "master")
NODES = (("infra-0", "infra", "Done"), ("worker-0", "worker", "Working"), ("worker-17", "worker", "Degraded"))


def pool(name, machines=3, updated=1):
    cond = [{"type": "Updated", "status": "False"}, {"type": "Updating", "status": "True"},
            {"type": "Degraded", "status": "False"}]
    config = f"rendered-{name}-{HASH}"
    return {"metadata": {"name": name, "creationTimestamp": "2026-11-22T09:59:00Z"},
            "spec": {"configuration": {"name": config}},
            "status": {"configuration": {"name": config}, "machineCount": machines, "updatedMachineCount": updated,
                       "readyMachineCount": updated, "degradedMachineCount": 0, "conditions": cond}}


def node(name, pool_name, state):
    return {"name": name, "pool": pool_name, "updated": state == "Done", "reportedAt": "2026-11-22T09:59:00Z",
            "report": {"state": state, "currentConfig": f"rendered-{pool_name}-{HASH}", "skew": "ok",
                       "reason": "rpm-ostree failed: " + "x" * 150 if state == "Degraded" else ""}}


def rich_text(renderable, width):
    from rich.console import Console

    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def pool_views(width):
    pools = [pool(n) for n in POOLS]
    return {"get pools": views.pools_table(pools, NOW, width=width),
            "get pools --watch": rich_text(watch.render(pools), width)}


def node_views(width):
    nodes = [node(*n) for n in NODES]
    return {"get nodes": views.nodes_table(nodes, NOW, width=width),
            "get nodes --watch": rich_text(watch.render_nodes(nodes, now=NOW), width)}


def rows(text):
    return [line.split() for line in text.splitlines()[1:] if line.strip()]


@pytest.mark.parametrize("width", [80, 200])
def test_every_pool_view_fits_and_keeps_each_pools_name_and_state_whole(width):
    for view, text in pool_views(width).items():
        assert max(len(line) for line in text.splitlines()) <= width, (view, text)
        assert [r[0] for r in rows(text)] == list(POOLS), (view, text)
        if view.endswith("--watch"):
            assert [r[1] for r in rows(text)] == ["Updating"] * 3, text
        if width == 200:
            assert all(f"rendered-{r[0]}-{HASH}" in r for r in rows(text)), (view, text)


@pytest.mark.parametrize("width", [80, 200])
def test_every_node_view_fits_and_keeps_each_nodes_name_pool_and_state_whole(width):
    for view, text in node_views(width).items():
        assert max(len(line) for line in text.splitlines()) <= width, (view, text)
        assert [tuple(r[:3]) for r in rows(text)] == list(NODES), (view, text)
        if width == 200:
            assert all(f"rendered-{r[1]}-{HASH}" in r for r in rows(text)), (view, text)


def test_the_watch_bar_gives_way_before_the_target_name():
    pools = [pool(n) for n in POOLS]
    assert watch.layout(pools, 200)[0] == watch.BAR_MAX
    bar, short = watch.layout(pools, 110)  # the whole name fits beside a shorter bar
    assert watch.BAR_MIN <= bar < watch.BAR_MAX and short(f"rendered-worker-{HASH}") == f"rendered-worker-{HASH}"
    # at 80 the whole name does not fit even beside the shortest bar: the name is shortened, and
    # the bar takes what that frees (9 columns here), still below its widest
    bar, short = watch.layout(pools, 80)
    assert short(f"rendered-worker-{HASH}") != f"rendered-worker-{HASH}" and watch.BAR_MIN <= bar < watch.BAR_MAX


def test_terminal_width_is_columns_else_the_terminal_else_no_limit(monkeypatch):
    monkeypatch.setenv("COLUMNS", "132")
    assert views.terminal_width(io.StringIO()) == 132
    monkeypatch.delenv("COLUMNS")
    assert views.terminal_width(io.StringIO()) is None  # a pipe or a file: every value whole
