"""Shared fixtures: where the build is, small CIFAR-format data sets, the
photos set, and the CI rule that a missing prerequisite fails.

Under CI (CI=true) a test that would be skipped fails instead: every
prerequisite (tools built with the library, Debian's torchvision and
dataset-fashion-mnist, the photos set that scripts/test.sh generates) must
be there, so that a green run means every test ran. One exception: a skip
whose reason starts with "kernel refuses: " (tests/net/servers.py's
KERNEL_REFUSES: no permission for a network namespace, no tc qdisc), which
issue 14 allows where the kernel refuses.

tests/net/ (servers.py: nginx, moto, the fault proxy, shaped namespaces) is
on sys.path: `import servers`."""
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("STOKER_BUILD", os.path.join(ROOT, "build"))
STOKER = os.path.join(BUILD, "stoker")
CI = os.environ.get("CI") == "true"
# An ImageFolder-layout set of real JPEGs with train/, val/ and corrupt/:
# $STOKER_PHOTOS, else the small one scripts/photos-small.sh makes with
# scripts/make_photos.py (10 classes x (20 + 2), 20 corrupt files), which
# scripts/test.sh makes and names in STOKER_PHOTOS.
PHOTOS = os.environ.get("STOKER_PHOTOS", os.path.join(ROOT, "build", "photos-small"))
NET = os.path.join(ROOT, "tests", "net")
if NET not in sys.path:
    sys.path.insert(0, NET)
KERNEL_REFUSES = "kernel refuses: "


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI a skip is a failure that names what was missing."""
    outcome = yield
    report = outcome.get_result()
    if CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        # "Skipped: kernel refuses: ..." or "servers.Unavailable: kernel refuses: ..."
        if reason.startswith(KERNEL_REFUSES) or reason.split(": ", 1)[-1].startswith(KERNEL_REFUSES):
            return
        report.outcome = "failed"
        report.longrepr = "skipped under CI=true, where every prerequisite must be present: " + reason


def need_photos(*subdirs):
    """The photos set's folder; skips (fails under CI) when it lacks `subdirs`."""
    for sub in subdirs:
        if not os.path.isdir(os.path.join(PHOTOS, sub)):
            pytest.skip("no %s/ in the photos set %s (STOKER_PHOTOS; scripts/photos-small.sh "
                        "makes it)" % (sub, PHOTOS))
    return PHOTOS


def write_cifar10(root, per_file=37, files=5, seed=0):
    """CIFAR-10 binary files; returns (images N,3,32,32 uint8, labels N)."""
    rng = np.random.default_rng(seed)
    os.makedirs(root, exist_ok=True)
    images, labels = [], []
    for i in range(1, files + 1):
        lab = rng.integers(0, 10, per_file, dtype=np.uint8)
        img = rng.integers(0, 256, (per_file, 3, 32, 32), dtype=np.uint8)
        rec = np.concatenate([lab[:, None], img.reshape(per_file, -1)], axis=1)
        rec.tofile(os.path.join(root, "data_batch_%d.bin" % i))
        images.append(img)
        labels.append(lab)
    return np.concatenate(images), np.concatenate(labels)


@pytest.fixture
def cifar_dir(tmp_path):
    d = tmp_path / "cifar"
    images, labels = write_cifar10(str(d))
    return str(d), images, labels


def run_stoker(*args, check=True):
    p = subprocess.run([STOKER, *map(str, args)], capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError("stoker %s failed (%d): %s" % (args, p.returncode, p.stderr))
    return p
