"""The guest images' cache (tests/vm/prune-images.sh, which build-image.sh runs under its lock
before a build): a new machine's empty cache is no error, and of the images at most KEEP stay,
the most recently used."""

import os
import subprocess
import time

from tests.helpers.kube_cluster import REPO

PRUNE = os.path.join(REPO, "tests", "vm", "prune-images.sh")


def _image(cache, name, age_seconds):
    os.makedirs(cache / name)
    done = cache / name / "done"
    done.touch()
    t = time.time() - age_seconds
    os.utime(done, (t, t))


def test_an_empty_cache_is_nothing_to_prune_and_no_error(tmp_path):
    # a fresh machine: no image yet (ls of image-*/done fails; under pipefail it ended the build)
    proc = subprocess.run(["bash", PRUNE, str(tmp_path), "3"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert os.listdir(tmp_path) == []


def test_the_three_most_recently_used_images_stay_and_a_killed_builds_directory_goes(tmp_path):
    for i, age in enumerate((50, 10, 40, 20, 30)):
        _image(tmp_path, f"image-{i}", age)
    _image(tmp_path, "image-old", 2 * 86400)  # not used for two days: goes whatever the count
    os.makedirs(tmp_path / ".image-killed" / "root")
    proc = subprocess.run(["bash", PRUNE, str(tmp_path), "3"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["image-1", "image-3", "image-4"]
