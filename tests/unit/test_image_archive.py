"""tools/image_archive.py: the docker-archive tarballs the VM guest imports with
``ctr -n k8s.io images import`` (no registry is reachable from it). The format is docker save's:
manifest.json names the config and the layers by path, the config's diff_ids are the layers'
sha256, and repositories maps the tag to the layer."""

import hashlib
import io
import json
import tarfile

import pytest

from tools.image_archive import docker_archive, main


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
