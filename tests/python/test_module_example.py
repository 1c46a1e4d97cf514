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
