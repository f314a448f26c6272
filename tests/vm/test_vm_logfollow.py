"""Boot 2's server log as the VM scenario follows it (tests/vm/logfollow.py): a `kubectl logs -f`
stream that ends while the guest is up is opened again where it ended, and nothing is read once
the guest goes down. No guest here: a kubectl that serves two streams as the kubelet does."""

import json
import os
import stat
import sys
import textwrap

from tests.vm.logfollow import LogFollower, Resume

KUBECTL = textwrap.dedent('''\
    #!{python}
    import json, os, sys
    calls = os.path.join(os.path.dirname(sys.argv[0]), "calls.json")
    seen = json.load(open(calls)) if os.path.exists(calls) else []
    seen.append(sys.argv[1:])
    json.dump(seen, open(calls, "w"))
    streams = [["2026-12-01T18:40:01.100Z first", "2026-12-01T18:40:02.200Z drain asked"],
               # opened again --since-time 18:40:02Z: the kubelet sends that second's lines again
               ["2026-12-01T18:40:02.200Z drain asked", "2026-12-01T18:40:02.900Z cordoned and drained",
                "2026-12-01T18:40:03.000Z reboot"]]
    for line in streams[min(len(seen), 2) - 1]:
        print(line, flush=True)
    ''')


def fake_kubectl(tmp_path):
    path = tmp_path / "kubectl"
    path.write_text(KUBECTL.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_stream_that_ends_while_the_guest_is_up_is_opened_again_from_its_last_second_writing_no_line_twice(tmp_path):
    follower = LogFollower("kc", "ns", "node-config-server", str(tmp_path), kubectl=fake_kubectl(tmp_path), pause=0)
    streams = iter([False, True])  # the guest goes down after the second stream
    follower.start("pod-0", lambda: next(streams))
    follower._thread.join(60)
    out = follower.stop()
    assert out["text"].splitlines() == ["2026-12-01T18:40:01.100Z first", "2026-12-01T18:40:02.200Z drain asked",
                                        "2026-12-01T18:40:02.900Z cordoned and drained",
                                        "2026-12-01T18:40:03.000Z reboot"]
    assert out["streams"] == [0, 0] and out["exit"] == 0
    calls = json.load(open(os.path.join(tmp_path, "calls.json")))
    assert [c for c in calls[1] if c.startswith("--since-time")] == ["--since-time=2026-12-01T18:40:02Z"]
    assert not any(c.startswith("--since-time") for c in calls[0]) and "--timestamps" in calls[0]


def test_once_the_guest_goes_down_no_stream_is_opened_again(tmp_path):
    follower = LogFollower("kc", "ns", "node-config-server", str(tmp_path), kubectl=fake_kubectl(tmp_path), pause=0)
    follower.start("pod-0", lambda: True)
    follower._thread.join(60)
    out = follower.stop()
    assert out["streams"] == [0] and len(json.load(open(os.path.join(tmp_path, "calls.json")))) == 1
    assert "cordoned and drained" not in out["text"]


def test_lines_without_a_timestamp_are_kept_and_an_earlier_second_is_not_written_again():
    resume = Resume()
    assert resume.fresh("2026-12-01T18:40:02.2Z a\n") and resume.fresh("no stamp\n")
    assert resume.fresh("2026-12-01T18:40:03.1Z b\n")
    assert not resume.fresh("2026-12-01T18:40:02.9Z late\n") and not resume.fresh("2026-12-01T18:40:03.1Z b\n")
    assert resume.fresh("2026-12-01T18:40:03.10000001Z c\n")
