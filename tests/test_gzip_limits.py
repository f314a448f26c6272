"""gzip contents: linear in concatenated members, capped per resource and per config."""

import base64
import gzip

import pytest

from agent.core.nodeconfig import NodeConfig
from agent.errors import ConfigError
from agent.ignition import dataurl
from agent.ignition.dataurl import decompress
from agent.resource.contents import resolve_contents


def data_url(raw: bytes) -> str:
    return "data:;base64," + base64.b64encode(raw).decode()


def test_many_concatenated_members_decompress_to_their_concatenation():
    # 40000 tiny members (the 768 KB case took minutes: each member copied the rest).
    member = gzip.compress(b"ab")
    assert decompress(member * 40000, "gzip") == b"ab" * 40000
    assert decompress(member + member + b"\0" * 64, "gzip") == b"abab"  # NUL padding after the end


@pytest.mark.parametrize("data,words", [
    (gzip.compress(b"x")[:-3], "truncated"),
    (gzip.compress(b"x") + b"junk", "invalid gzip"),
    (b"", "truncated"),
])
def test_bad_gzip(data, words):
    with pytest.raises(ConfigError, match=words):
        decompress(data, "gzip")


def test_limit_per_resource():
    bomb = gzip.compress(b"\0" * (4 << 20))
    with pytest.raises(ConfigError, match="expands beyond 1000 bytes"):
        decompress(bomb, "gzip", 1000)


def test_limit_per_config(monkeypatch):
    monkeypatch.setattr(dataurl, "MAX_CONFIG_DECOMPRESSED", 3000)
    two_k = data_url(gzip.compress(b"y" * 2000))
    files = [{"path": f"/etc/f{i}", "contents": {"source": two_k, "compression": "gzip"}} for i in range(2)]
    cfg = NodeConfig(ignition={"ignition": {"version": "3.4.0"}, "storage": {"files": files}}, name="r")
    with pytest.raises(ConfigError, match=r"\$\.storage\.files\.1\.contents\.compression: .*beyond 1000 bytes"):
        resolve_contents(cfg)
    files[1]["contents"] = {"source": data_url(b"z" * 5000)}  # not compressed: the fetch limit bounds it
    assert len(resolve_contents(cfg)["$.storage.files.1.contents"]) == 5000
