"""Every view at 80 and 200 columns: each line fits, pool and node names and states are whole,
and at 200 a rendered config's whole name is there to paste into ``oc get mc`` (issue 40).
Every view that leaves a column out says so under the table, and ``-o wide`` adds columns as
kubectl's does (issue 49)."""

import io

import pytest

from agent.server.cli import tables, views, watch

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
    """The table's rows, without the line that names hidden columns."""
    return [line.split() for line in text.splitlines()[1:] if line.strip() and "hidden at this width" not in line]


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
    assert tables.terminal_width(io.StringIO()) == 132
    monkeypatch.delenv("COLUMNS")
    assert tables.terminal_width(io.StringIO()) is None  # a pipe or a file: every value whole


# -- hidden columns, -o wide (issue 49) -------------------------------------------------------------

def tables_at(width, wide=False):
    pools, nodes = [pool(n) for n in POOLS], [node(*n) for n in NODES]
    # READY is the Node object's: these nodes (a directory backend's) have none, so the column is
    # not there at all rather than hidden
    node_columns = tuple(c for c in views.NODE_COLUMNS if c != "READY")
    return {"get pools": (views.pools_table(pools, NOW, wide=wide, width=width), views.POOL_COLUMNS),
            "get nodes": (views.nodes_table(nodes, NOW, wide=wide, width=width), node_columns),
            "get nodes --watch": (rich_text(watch.render_nodes(nodes, now=NOW), width), node_columns)}


@pytest.mark.parametrize("width", [80, 100, 120, 200])
def test_every_table_that_leaves_columns_out_says_how_many_under_it_and_that_o_wide_shows_them(width):
    for view, (text, columns) in tables_at(width).items():
        lines = text.rstrip("\n").splitlines()
        hidden = [c for c in columns if c not in lines[0].split()]
        notes = [line for line in lines if "hidden at this width" in line]
        if not hidden:
            assert not notes, (view, text)
            continue
        assert len(notes) == 1 and notes[0] == lines[len(rows(text)) + 1], (view, text)  # right under the rows
        n = len(hidden)
        assert notes[0].startswith(f"{n} column{'s' if n > 1 else ''} hidden at this width"), (view, text)
        assert "-o wide" in notes[0] and len(notes[0]) <= width, (view, text)
        named = notes[0].split("(", 1)[1].split(")")[0].split(", ") if "(" in notes[0] else hidden
        assert named == hidden, (view, text)


def test_at_80_columns_the_tables_the_issue_tried_name_what_they_hide():
    text = tables_at(80)
    assert "1 column hidden at this width (DEGRADED-M): -o wide shows every column" in text["get pools"][0]
    assert "3 columns hidden at this width: -o wide" in text["get nodes"][0]  # the names do not fit in 80
    assert "3 columns hidden at this width (READY, UPDATED-M, DEGRADED-M)" in tables_at(100)["get pools"][0]


def test_any_column_a_view_adds_is_named_when_it_is_left_out():
    """The mechanism knows no column by name: a view's new optional column (a READY, say) is named too."""
    def build(short):
        return [["NAME", "STATE", "READY", "NEWCOLUMN"], ["node-0", "Done", "True", "x" * 40]]

    text = tables.fit(build, width=40, optional=("NEWCOLUMN", "READY"))
    assert text.splitlines()[-1] == "1 column hidden at this width: -o wide"
    assert tables.fit(build, width=80, optional=("NEWCOLUMN",)).count("hidden") == 0
    assert tables.hidden_note(["NEWCOLUMN"], 200) == \
        "1 column hidden at this width (NEWCOLUMN): -o wide shows every column\n"


def test_o_wide_adds_the_wide_only_columns_as_kubectl_adds_its_priority_columns():
    for view, (text, columns) in tables_at(200, wide=True).items():
        if view.endswith("--watch"):
            continue
        header = text.splitlines()[0].split()
        extra = views.POOL_WIDE if view == "get pools" else views.NODE_WIDE
        assert set(columns) | set(extra) == set(header) and len(header) == len(columns) + len(extra), (view, header)
        assert "hidden" not in text and "…" not in text, (view, text)
    for view, (text, columns) in tables_at(None).items():  # to a pipe: the default columns, whole
        if not view.endswith("--watch"):
            assert text.splitlines()[0].split() == list(columns), (view, text)
    wide = views.pools_table([pool("worker")], NOW, wide=True, width=80).splitlines()
    cells = dict(zip(wide[0].split(), wide[1].split()))
    assert cells["TARGET"] == f"rendered-worker-{HASH}" and cells["PAUSED"] == "False" and cells["MAXUNAVAILABLE"] == "1"


def test_the_node_tables_wide_columns_come_before_the_reason():
    header = views.nodes_table([node(*NODES[2])], NOW, wide=True).splitlines()[0].split()
    assert header[-1] == "REASON" and header[-4:-1] == list(views.NODE_WIDE)
