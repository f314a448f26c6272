import base64
import json

import pytest

from agent.core.pullsecret import check_pull_secret, pull_secret_problems
from agent.errors import ConfigError


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def test_valid_pull_secret():
    doc = {"auths": {"quay.io": {"auth": b64("user:pa:ss"), "email": "a@b"}, "registry.ci": {"auth": b64("u:p")}}}
    check_pull_secret(json.dumps(doc).encode())


@pytest.mark.parametrize("data, path, text", [
    (b"{not json", "$", "not valid JSON"),
    (b"[]", "$", "JSON object"),
    (b"{}", "$.auths", "needs an 'auths' object"),
    (json.dumps({"auths": {"q": "str"}}).encode(), "$.auths.q", "must be an object"),
    (json.dumps({"auths": {"q": {}}}).encode(), "$.auths.q.auth", "missing 'auth'"),
    (json.dumps({"auths": {"q": {"auth": "!!notb64"}}}).encode(), "$.auths.q.auth", "not valid base64"),
    (json.dumps({"auths": {"q": {"auth": b64("nocolon")}}}).encode(), "$.auths.q.auth", "user:password"),
    (json.dumps({"auths": {"q": {"auth": b64(":pw")}}}).encode(), "$.auths.q.auth", "user:password"),
])
def test_invalid_pull_secrets_name_the_field(data, path, text):
    problems = pull_secret_problems(data)
    assert problems and problems[0].path == path and text in problems[0].message
    with pytest.raises(ConfigError) as ei:
        check_pull_secret(data, "$")
    assert path in str(ei.value) and "nothing was written" in str(ei.value)
