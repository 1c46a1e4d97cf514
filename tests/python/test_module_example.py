"""examples/train_logreg_fashion_mnist.py trains to a sensible accuracy."""
import os
import re
import subprocess
import sys

import pytest

from module_util import FASHION, PY_PATH, ROOT


@pytest.mark.skipif(not os.path.isdir(FASHION), reason="dataset-fashion-mnist not installed")
def test_logistic_regression_example_learns():
    path = os.path.join(ROOT, "examples", "train_logreg_fashion_mnist.py")
    env = dict(os.environ)
    env["PYTHONPATH"] = PY_PATH + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, path, "--epochs", "2"], capture_output=True, text=True,
                       env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    acc = [float(a) for a in re.findall(r"test accuracy ([0-9.]+)", p.stdout)]
    assert len(acc) == 2 and acc[-1] > 0.80, p.stdout


def test_resnet_example_reports_data_wait_for_both_loaders(tmp_path):
    """examples/train_resnet.py on a tiny image folder: both loaders train,
    log 'Train [e][i/N] Time .. Data ..' lines and print the data-wait share."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    for c in ["a", "b"]:
        (tmp_path / c).mkdir()
        for i in range(8):
            Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(
                tmp_path / c / ("%d.jpg" % i))
    path = os.path.join(ROOT, "examples", "train_resnet.py")
    env = dict(os.environ)
    env["PYTHONPATH"] = PY_PATH + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, path, "--data", str(tmp_path), "--loader", "both",
                        "--batches", "3", "--batch", "4", "--image-size", "32",
                        "--print-freq", "1"], capture_output=True, text=True, env=env,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    for name in ("stoker", "torch"):
        assert re.search(r"\[%s\] Train \[0\]\[2/3\] Time [0-9.]+ Data [0-9.]+ Loss" % name,
                         p.stdout), p.stdout
        share = re.search(r"%s\s+data-wait share of epoch time: ([0-9.]+)%%" % name, p.stdout)
        assert share and 0.0 <= float(share.group(1)) <= 100.0, p.stdout
