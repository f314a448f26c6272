"""Bounded reading of the server's state directory: aliases, depth, size, file types, symlinks."""

import os
import shutil
import threading

import pytest
import yaml

from agent.server.store import statefiles
from agent.server.store.stateformat import load_state
from tests.helpers.server_proc import REPO

EXAMPLE = os.path.join(REPO, "examples", "state")
MC_HEAD = "metadata: {name: 99-x, labels: {machineconfiguration.openshift.io/role: worker}}\n"
# The 652-byte file: a "billion laughs" under a key validation does not look at.
BOMB = MC_HEAD + "spec:\n  unknownKey:\n" + "".join(
    f"    l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9 if i else ['"lol"'] * 9) + "]\n" for i in range(9))


def state_copy(tmp_path):
    d = tmp_path / "state"
    shutil.copytree(EXAMPLE, d)
    return d


def problems_of(state, rel):
    return [p for p in load_state(str(state)).problems if p.source.startswith(rel)]


def bounded(fn):
    """Run ``fn`` in a thread; a hang is a failure, not a stuck test run, and an exception in
    ``fn`` is raised here, in the test."""
    out = {}

    def run():
        try:
            out["v"] = fn()
        except BaseException as exc:  # handed to the test below
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "blocked"
    if "error" in out:
        raise out["error"]
    return out["v"]


@pytest.mark.parametrize("text", [
    BOMB,  # aliases that expand past the limit
    MC_HEAD + "spec: {unknownKey: " + "[" * 5000 + "]" * 5000 + "}\n",  # nested 5,000 deep
    MC_HEAD + "spec: &s {unknownKey: *s}\n",  # a recursive alias
    MC_HEAD + "spec: {kernelArguments: [\x00]}\n",  # not YAML at all
], ids=["alias-bomb", "nested-5000", "recursive-alias", "nul-byte"])
def test_hostile_yaml_is_refused_naming_the_file(tmp_path, text):
    # The behaviour, not a sentence: refused in bounded time, the file named, nothing of it loaded
    # (PyYAML >= 6.0.2 refuses deep nesting itself, in its own words, before our depth check).
    state = state_copy(tmp_path)
    (state / "machineconfigs" / "99-x.yaml").write_text(text)
    found = bounded(lambda: problems_of(state, "machineconfigs/99-x.yaml"))
    assert found, "the hostile file was not reported"
    st = load_state(str(state))
    assert "99-x" not in st.machine_configs
    assert {"worker", "master"} <= set(st.pools)  # the rest still loads


@pytest.mark.parametrize("text,words", [
    (BOMB, "aliases expand to"),
    (MC_HEAD + "spec: &s {unknownKey: *s}\n", "recursive alias"),
])
def test_our_own_yaml_limits_say_what_they_refused(tmp_path, text, words):
    state = state_copy(tmp_path)
    (state / "machineconfigs" / "99-x.yaml").write_text(text)
    found = bounded(lambda: problems_of(state, "machineconfigs/99-x.yaml"))
    assert found and words in str(found[0]), [str(p) for p in found]


def test_our_depth_limit_holds_whatever_the_library_allows():
    # 101 levels: under PyYAML's own limit (if it has one), over ours.
    with pytest.raises(yaml.YAMLError, match="nested deeper than 100"):
        statefiles.load_yaml_docs(("a: " + "[" * 101 + "]" * 101 + "\n").encode())


def test_anchors_within_the_limit_still_work():
    docs = statefiles.load_yaml_docs(b"base: &b {a: 1}\nx: *b\ny: {<<: *b, c: 2}\n---\nz: 1\n")
    assert docs == [{"base": {"a": 1}, "x": {"a": 1}, "y": {"a": 1, "c": 2}}, {"z": 1}]


def test_too_large_file_is_refused(tmp_path, monkeypatch):
    state = state_copy(tmp_path)
    monkeypatch.setattr(statefiles, "MAX_FILE_BYTES", 1000)
    (state / "machineconfigs" / "99-x.yaml").write_text(MC_HEAD + "spec: {kernelArguments: [" + "a," * 600 + "]}\n")
    found = problems_of(state, "machineconfigs/99-x.yaml")
    assert found and "too large: more than 1000 bytes" in str(found[0])


def test_fifo_is_refused_without_blocking(tmp_path):
    state = state_copy(tmp_path)
    os.mkfifo(state / "machineconfigs" / "99-x.yaml")
    os.makedirs(state / "bootstrap")
    os.mkfifo(state / "bootstrap" / "kubeconfig")
    found = bounded(lambda: load_state(str(state)).problems)
    text = [str(p) for p in found]
    assert any("FIFO" in t and "machineconfigs/99-x.yaml" in t for t in text), text
    assert any("FIFO" in t and "bootstrap/kubeconfig" in t for t in text), text


def test_device_node_is_refused(tmp_path):
    state = state_copy(tmp_path)
    try:
        os.mknod(state / "machineconfigs" / "99-x.yaml", 0o600 | 0o020000, os.makedev(1, 3))  # /dev/null
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    found = problems_of(state, "machineconfigs/99-x.yaml")
    assert found and "a character device" in str(found[0]) and found[0].rule == "filetype"


def test_symlinks_only_inside_the_state_directory(tmp_path):
    state = state_copy(tmp_path)
    outside = tmp_path / "outside.yaml"
    outside.write_text(MC_HEAD)
    os.symlink(outside, state / "machineconfigs" / "99-x.yaml")
    found = problems_of(state, "machineconfigs/99-x.yaml")
    assert found and "symlink out of the state directory" in str(found[0])
    # a ConfigMap mount: the file is a link to ..data/ inside the same directory
    os.remove(state / "machineconfigs" / "99-x.yaml")
    os.makedirs(state / "machineconfigs" / "..data")
    (state / "machineconfigs" / "..data" / "99-y.yaml").write_text(MC_HEAD.replace("99-x", "99-y"))
    os.symlink("..data/99-y.yaml", state / "machineconfigs" / "99-y.yaml")
    st = load_state(str(state))
    assert "99-y" in st.machine_configs and not st.problems, [str(p) for p in st.problems]


def test_symlinked_directory_out_of_the_state_directory(tmp_path):
    state = state_copy(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "99-x.yaml").write_text(MC_HEAD)
    shutil.rmtree(state / "machineosbuilds")
    os.symlink(elsewhere, state / "machineosbuilds")
    found = problems_of(state, "machineosbuilds/99-x.yaml")
    assert found and "symlink out of the state directory" in str(found[0])
