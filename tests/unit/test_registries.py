"""registries.conf: only added digest-only mirrors avoid a drain."""

import pytest

from agent.core.registries import only_adds_digest_only_mirrors, why_drain

BASE = '''unqualified-search-registries = ["registry.access.redhat.com", "docker.io"]
short-name-mode = ""

[[registry]]
  prefix = ""
  location = "quay.io/ocp"
  [[registry.mirror]]
    location = "m1.local/ocp"
    pull-from-mirror = "digest-only"
'''
ADD_DIGEST = BASE + '''  [[registry.mirror]]
    location = "m2.local/ocp"
    pull-from-mirror = "digest-only"
'''
NEW_REGISTRY = BASE + '''
[[registry]]
  location = "registry.redhat.io/ubi9"
  [[registry.mirror]]
    location = "m.local/ubi9"
    pull-from-mirror = "digest-only"
'''


@pytest.mark.parametrize("old,new", [
    (BASE, BASE),
    (BASE, ADD_DIGEST),
    (BASE, NEW_REGISTRY),
    (BASE.encode(), ADD_DIGEST.encode()),
])
def test_safe_changes(old, new):
    assert why_drain(old, new) is None
    assert only_adds_digest_only_mirrors(old, new)


@pytest.mark.parametrize("old,new,reason", [
    (ADD_DIGEST, BASE, "removed"),
    (BASE, BASE.replace('"digest-only"', '"tag-only"'), "removed or changed"),
    (BASE, ADD_DIGEST.replace('"digest-only"\n', '"tag-only"\n').replace(
        'pull-from-mirror = "tag-only"', 'pull-from-mirror = "digest-only"', 1), "not digest-only"),
    (BASE, BASE + '  [[registry.mirror]]\n    location = "m3.local/ocp"\n', "not digest-only"),
    (BASE, BASE.replace('"docker.io"', '"quay.io"'), "unqualified-search-registries"),  # replaced, not appended
    (BASE, BASE.replace('prefix = ""', 'prefix = ""\n  blocked = true'), "settings changed"),
    (NEW_REGISTRY, BASE, "removed"),
    (BASE, BASE + '\n[[registry]]\n  location = "x.io"\n  insecure = true\n', "added"),
    (BASE, BASE + '\n[[registry]]\n  location = "x.io"\n', "added"),
    (BASE, "[[registry", "cannot compare"),
    (b"\xff\xfe", BASE, "cannot compare"),
    (None, BASE, "cannot compare"),
])
def test_unsafe_changes_drain(old, new, reason):
    why = why_drain(old, new)
    assert why is not None and reason in why, why


def test_inserting_a_digest_only_mirror_before_existing_ones_is_safe():
    old = BASE
    new = BASE.replace('  [[registry.mirror]]\n    location = "m1.local/ocp"',
                       '  [[registry.mirror]]\n    location = "m0.local/ocp"\n    pull-from-mirror = "digest-only"\n'
                       '  [[registry.mirror]]\n    location = "m1.local/ocp"')
    assert why_drain(old, new) is None
