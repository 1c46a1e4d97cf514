"""Shared fixtures: where the build is, small CIFAR-format data sets."""
import os
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("STOKER_BUILD", os.path.join(ROOT, "build"))
STOKER = os.path.join(BUILD, "stoker")


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
