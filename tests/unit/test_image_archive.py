"""tools/image_archive.py: the docker-archive tarballs the VM guest imports with
``ctr -n k8s.io images import`` (no registry is reachable from it). The format is docker save's:
manifest.json names the config and the layers by path, the config's diff_ids are the layers'
sha256, and repositories maps the tag to the layer. And make image's parts (tools/image): a layer of
a directory tree, a pure wheel unpacked as pip installs it, an image of several layers."""

import hashlib
import io
import json
import os
import tarfile
import zipfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools.image_archive import (
    PATH,
    _console_scripts,
    console_script,
    docker_archive,
    layer_from_dir,
    layer_tar,
    main,
    wheel_files,
)


def members(data):
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: (m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()}


PAUSE = [("/pause", b"\x7fELF static pause", 0o755)]


def test_the_manifest_names_the_config_and_the_layer_with_the_tag():
    got = members(docker_archive("localhost/pause:3.4", PAUSE, entrypoint=["/pause"]))
    manifest = json.loads(got["manifest.json"][1])
    assert len(manifest) == 1 and manifest[0]["RepoTags"] == ["localhost/pause:3.4"]
    config_name, (layer_name,) = manifest[0]["Config"], manifest[0]["Layers"]
    config = got[config_name][1]
    assert config_name == hashlib.sha256(config).hexdigest() + ".json"  # the image ID names the config
    layer = got[layer_name][1]
    assert layer_name == hashlib.sha256(layer).hexdigest() + "/layer.tar"
    assert json.loads(got["repositories"][1]) == {"localhost/pause": {"3.4": layer_name.split("/")[0]}}


def test_the_configs_diff_id_is_the_uncompressed_layers_sha256_and_the_entrypoint_is_kept():
    got = members(docker_archive("localhost/pause:3.4", PAUSE, entrypoint=["/pause"]))
    manifest = json.loads(got["manifest.json"][1])[0]
    config = json.loads(got[manifest["Config"]][1])
    layer = got[manifest["Layers"][0]][1]
    assert config["rootfs"] == {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]}
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    assert config["config"]["Entrypoint"] == ["/pause"] and config["config"]["Cmd"] is None


def test_the_layer_holds_the_files_their_parent_directories_and_symlinks_root_owned():
    files = [("/bin/busybox", b"busybox bytes", 0o755)]
    data = docker_archive("localhost/busybox:1", files, links=[("/bin/sh", "busybox")], cmd=["sh"])
    got = members(data)
    layer = members(got[json.loads(got["manifest.json"][1])[0]["Layers"][0]][1])
    assert sorted(layer) == ["bin", "bin/busybox", "bin/sh"]
    assert layer["bin"][0].isdir()
    info, content = layer["bin/busybox"]
    assert content == b"busybox bytes" and info.mode == 0o755 and (info.uid, info.gid) == (0, 0)
    assert layer["bin/sh"][0].issym() and layer["bin/sh"][0].linkname == "busybox"


def test_the_same_input_gives_the_same_bytes():
    assert docker_archive("localhost/pause:3.4", PAUSE) == docker_archive("localhost/pause:3.4", PAUSE)
    assert docker_archive("localhost/pause:3.4", PAUSE) != docker_archive("localhost/pause:3.5", PAUSE)


def test_a_tag_without_a_version_is_refused_naming_it():
    with pytest.raises(ValueError, match="'localhost:5000/pause' has no ':version'"):
        docker_archive("localhost:5000/pause", PAUSE)


def test_the_command_line_writes_the_archive(tmp_path):
    src = tmp_path / "pause"
    src.write_bytes(b"pause bytes")
    out = tmp_path / "pause.tar"
    assert main([str(out), "localhost/pause:3.4", "--file", f"{src}=/pause", "--entrypoint", "/pause"]) == 0
    assert out.read_bytes() == docker_archive("localhost/pause:3.4", [("/pause", b"pause bytes", 0o755)],
                                              entrypoint=["/pause"])


# --- make image's parts: layers of a tree, pure wheels, images of several layers (tools/image) ---

def make_wheel(purelib=True, entry_points="[console_scripts]\nnode-config-server = agent.server.cli:main\n"):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("agent/__init__.py", "__version__ = '0.1.0'\n")
        zf.writestr("agent/server/cli/__init__.py", "def main():\n    return 0\n")
        zf.writestr("node_agent-0.1.0.dist-info/WHEEL",
                    f"Wheel-Version: 1.0\nRoot-Is-Purelib: {'true' if purelib else 'false'}\nTag: py3-none-any\n")
        if entry_points is not None:
            zf.writestr("node_agent-0.1.0.dist-info/entry_points.txt", entry_points)
    return out.getvalue()


SITE = "/usr/local/lib/python3.13/dist-packages"


def test_a_wheel_is_unpacked_under_the_site_directory_with_its_console_script_as_pip_writes_it():
    files = {path: (content, mode) for path, content, mode in wheel_files(make_wheel(), SITE, ["node-config-server"])}
    assert files[f"{SITE}/agent/server/cli/__init__.py"] == (b"def main():\n    return 0\n", 0o644)
    assert files[f"{SITE}/node_agent-0.1.0.dist-info/INSTALLER"][0] == b"tools/image_archive.py\n"
    script, mode = files["/usr/local/bin/node-config-server"]
    assert mode == 0o755
    compile(script, "node-config-server", "exec")  # Python, as the image's python3 reads it
    assert script.startswith(b"#!/usr/bin/python3\n") and b"from agent.server.cli import main\n" in script


def test_a_platform_wheel_a_zip_without_wheel_metadata_and_a_missing_script_are_refused_naming_them():
    with pytest.raises(ValueError, match="not pure Python"):
        wheel_files(make_wheel(purelib=False), SITE, [])
    with pytest.raises(ValueError, match=r"not a wheel: no \*.dist-info/WHEEL"):
        wheel_files(layer_zip(), SITE, [])
    with pytest.raises(ValueError, match="no console script 'node-agent' \\(it has: node-config-server\\)"):
        wheel_files(make_wheel(), SITE, ["node-agent"])
    with pytest.raises(ValueError, match="it has: none"):
        wheel_files(make_wheel(entry_points=None), SITE, ["node-config-server"])


def layer_zip():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("setup.py", "")
    return out.getvalue()


def test_an_entry_point_that_is_not_module_colon_function_is_refused():
    with pytest.raises(ValueError, match="'agent.server.cli' is not module:function"):
        console_script("agent.server.cli")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=4096))
def test_any_bytes_as_a_wheel_end_in_files_or_a_named_error(data):
    try:
        wheel_files(data, SITE, [])
    except (ValueError, zipfile.BadZipFile):
        pass


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=2048))
def test_any_entry_points_text_ends_in_a_mapping_of_names(text):
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in _console_scripts(text).items())


def test_a_layer_of_a_tree_keeps_modes_owners_links_and_hard_links_sorted_and_leaves_fifos_out(tmp_path):
    root = tmp_path / "root"
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "tmp").mkdir()
    os.chmod(root / "tmp", 0o1777)
    (root / "usr" / "bin" / "python3.13").write_bytes(b"python")
    os.chmod(root / "usr" / "bin" / "python3.13", 0o755)
    os.symlink("python3.13", root / "usr" / "bin" / "python3")
    os.link(root / "usr" / "bin" / "python3.13", root / "usr" / "bin" / "python3.13-again")
    os.mkfifo(root / "tmp" / "fifo")
    out = tmp_path / "layer.tar"
    layer_from_dir(str(root), str(out), mtime=0)
    with tarfile.open(out) as tar:
        got = {m.name: m for m in tar.getmembers()}
        names = [m.name for m in tar.getmembers()]
    assert names == ["tmp", "usr", "usr/bin", "usr/bin/python3", "usr/bin/python3.13", "usr/bin/python3.13-again"]
    assert got["tmp"].mode == 0o1777 and got["usr/bin/python3.13"].mode == 0o755
    assert got["usr/bin/python3"].issym() and got["usr/bin/python3"].linkname == "python3.13"
    assert got["usr/bin/python3.13-again"].islnk() and got["usr/bin/python3.13-again"].linkname == "usr/bin/python3.13"
    assert {(m.uid, m.uname, m.mtime) for m in got.values()} == {(os.geteuid(), "", 0)}


def test_an_image_of_two_layers_names_both_lowest_first_with_the_user_env_labels_and_history(tmp_path):
    low, high = tmp_path / "low.tar", tmp_path / "high.tar"
    low.write_bytes(layer_tar([("/etc/passwd", b"root:x:0:0::/root:/bin/sh\n", 0o644)]))
    high.write_bytes(layer_tar([("/usr/local/bin/node-config-server", b"#!/usr/bin/python3\n", 0o755)]))
    out = tmp_path / "image.tar"
    assert main(["image", str(out), "localhost/node-config-server:0.1.0", "--layer", str(low), "--layer", str(high),
                 "--history", "base", "--history", "wheel", "--entrypoint", "/usr/local/bin/node-config-server",
                 "--user", "1001:1001", "--env", "PYTHONUNBUFFERED=1", "--label", "a=b"]) == 0
    got = members(out.read_bytes())
    manifest = json.loads(got["manifest.json"][1])[0]
    sums = [hashlib.sha256(p.read_bytes()).hexdigest() for p in (low, high)]
    assert manifest["Layers"] == [f"{s}/layer.tar" for s in sums]
    assert [got[name][1] for name in manifest["Layers"]] == [low.read_bytes(), high.read_bytes()]
    config = json.loads(got[manifest["Config"]][1])
    assert config["rootfs"]["diff_ids"] == ["sha256:" + s for s in sums]
    assert [h["created_by"] for h in config["history"]] == ["base", "wheel"]
    run = config["config"]
    assert (run["User"], run["Entrypoint"], run["Labels"]) == ("1001:1001", ["/usr/local/bin/node-config-server"], {"a": "b"})
    assert run["Env"] == [PATH, "PYTHONUNBUFFERED=1"]
    assert json.loads(got["repositories"][1]) == {"localhost/node-config-server": {"0.1.0": sums[1]}}
    assert not os.path.exists(str(out) + ".tmp")


def test_an_image_with_a_history_per_layer_missing_is_refused(tmp_path, capsys):
    layer = tmp_path / "l.tar"
    layer.write_bytes(layer_tar([("/a", b"", 0o644)]))
    with pytest.raises(SystemExit):
        main(["image", str(tmp_path / "o.tar"), "localhost/x:1", "--layer", str(layer), "--layer", str(layer),
              "--history", "only one"])
    assert "1 --history for 2 --layer: give one per layer or none" in capsys.readouterr().err
