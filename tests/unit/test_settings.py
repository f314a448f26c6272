"""Agent settings: defaults, the shipped example, and a clear error for each bad field."""

import logging
import os
import shutil

import pytest

from agent.core.settings import (
    DEFAULT_PATH,
    FetchSettings,
    Settings,
    default_node_name,
    parse_settings,
)
from agent.errors import EXIT_INVALID_CONFIG, ConfigError
from agent.host.root import Root
from agent.node.settingsfile import load_settings
from tests.helpers import paths

EXAMPLE = os.path.join(paths.REPO, "examples", "agent.yaml")


def write(root_dir, text, path=DEFAULT_PATH):
    host = os.path.join(str(root_dir), path.lstrip("/"))
    os.makedirs(os.path.dirname(host), exist_ok=True)
    with open(host, "w") as f:
        f.write(text)


def test_missing_default_file_means_defaults(tmp_path):
    s = load_settings(Root(str(tmp_path)))
    assert s == Settings()
    assert s.node_name == default_node_name() and s.state_dir == "/var/lib/node-agent"
    assert (s.fetch.total_timeout, s.fetch.attempt_timeout, s.fetch.initial_delay, s.fetch.max_delay) == (0, 10, 0.2, 5)
    assert s.update.interval == 60 and s.report.token_file == ""


def test_shipped_example_is_valid_and_matches_the_defaults(tmp_path, caplog):
    os.makedirs(tmp_path / "etc/node-agent")
    shutil.copy(EXAMPLE, tmp_path / "etc/node-agent/agent.yaml")
    with caplog.at_level(logging.WARNING):
        assert load_settings(Root(str(tmp_path))) == Settings()
    assert not caplog.records  # every key in the example is known


def test_valid_file(tmp_path):
    write(tmp_path, """
nodeName: worker-3.lab
stateDir: /var/lib/na
fetch: {totalTimeout: 120, attemptTimeout: 2.5, initialDelay: 1, maxDelay: 30, maxRetryAfter: 0}
report: {tokenFile: /etc/node-agent/token, retryInterval: 5}
update: {interval: 300, drainTimeout: 900}
""")
    s = load_settings(Root(str(tmp_path)))
    assert s.node_name == "worker-3.lab" and s.state_dir == "/var/lib/na"
    assert s.fetch == FetchSettings(total_timeout=120, attempt_timeout=2.5, initial_delay=1, max_delay=30,
                                    max_retry_after=0)
    assert isinstance(s.fetch.total_timeout, float)
    assert (s.report.token_file, s.report.retry_interval) == ("/etc/node-agent/token", 5)
    assert (s.update.interval, s.update.drain_timeout) == (300, 900)


def test_empty_file_and_null_token_file(tmp_path):
    write(tmp_path, "# nothing\n")
    assert load_settings(Root(str(tmp_path))) == Settings()
    assert parse_settings({"report": {"tokenFile": None}}).report.token_file == ""


def test_explicit_path_inside_root(tmp_path):
    write(tmp_path, "update: {interval: 5}\n", path="/srv/my.yaml")
    assert load_settings(Root(str(tmp_path)), "/srv/my.yaml").update.interval == 5


def test_explicit_missing_path_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="/srv/nope.yaml does not exist"):
        load_settings(Root(str(tmp_path)), "/srv/nope.yaml")


@pytest.mark.parametrize("text, field, expected", [
    ("nodeName: Worker_1", "nodeName", "node name"),
    ("nodeName: 7", "nodeName", "node name"),
    ("stateDir: var/lib", "stateDir", "absolute path"),
    ("fetch: {totalTimeout: -1}", "fetch.totalTimeout", ">= 0"),
    ("fetch: {totalTimeout: forever}", "fetch.totalTimeout", "number of seconds"),
    ("fetch: {attemptTimeout: 0}", "fetch.attemptTimeout", "> 0"),
    ("fetch: {attemptTimeout: true}", "fetch.attemptTimeout", "number of seconds"),
    ("fetch: {attemptTimeout: .nan}", "fetch.attemptTimeout", "number of seconds"),
    ("fetch: {initialDelay: '1'}", "fetch.initialDelay", "number of seconds"),
    ("fetch: {maxDelay: 100000}", "fetch.maxDelay", "<= 3600"),
    ("fetch: {initialDelay: 2, maxDelay: 1}", "fetch.maxDelay", ">= fetch.initialDelay"),
    ("fetch: {maxRetryAfter: -5}", "fetch.maxRetryAfter", ">= 0"),
    ("report: {tokenFile: token}", "report.tokenFile", "absolute path"),
    ("report: {retryInterval: 0}", "report.retryInterval", "> 0"),
    ("update: {interval: []}", "update.interval", "number of seconds"),
    ("update: {drainTimeout: -1}", "update.drainTimeout", "> 0"),
    ("fetch: 10", "fetch", "mapping"),
])
def test_each_invalid_field_names_its_path_and_the_file(tmp_path, text, field, expected):
    write(tmp_path, text + "\n")
    with pytest.raises(ConfigError) as err:
        load_settings(Root(str(tmp_path)))
    msg = str(err.value)
    assert DEFAULT_PATH in msg
    [problem] = err.value.problems
    assert problem.path == field and expected in problem.message
    assert f"\n{field}: error: expected" in msg
    assert err.value.exit_code == EXIT_INVALID_CONFIG


def test_all_bad_fields_reported_together(tmp_path):
    write(tmp_path, "fetch: {attemptTimeout: 0, maxDelay: x}\nupdate: {interval: -1}\n")
    with pytest.raises(ConfigError) as err:
        load_settings(Root(str(tmp_path)))
    assert [p.path for p in err.value.problems] == ["fetch.attemptTimeout", "fetch.maxDelay", "update.interval"]


def test_invalid_yaml_names_file_and_line(tmp_path):
    write(tmp_path, "fetch:\n  attemptTimeout: 1\n bad: [\n")
    with pytest.raises(ConfigError, match=r"/etc/node-agent/agent.yaml is not valid YAML at line \d+"):
        load_settings(Root(str(tmp_path)))


def test_top_level_must_be_a_mapping(tmp_path):
    write(tmp_path, "- a\n- b\n")
    with pytest.raises(ConfigError, match="must be a YAML mapping"):
        load_settings(Root(str(tmp_path)))


def test_unknown_keys_are_warnings(tmp_path, caplog):
    write(tmp_path, "nodName: x\nfetch: {attemptTimeOut: 3, maxDelay: 7}\n")
    with caplog.at_level(logging.WARNING, logger="agent.core.settings"):
        s = load_settings(Root(str(tmp_path)))
    assert s.fetch.max_delay == 7 and s.fetch.attempt_timeout == 10
    messages = [r.getMessage() for r in caplog.records]
    assert any("unknown setting 'nodName'" in m for m in messages)
    assert any("unknown setting 'fetch.attemptTimeOut'" in m for m in messages)
