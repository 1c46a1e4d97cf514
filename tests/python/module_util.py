"""Helpers for the Python module tests (tests/python/test_module_*.py).

Imports the `stoker` package: from PYTHONPATH when it is set (scripts/test.sh
sets PYTHONPATH=build/python), else from $STOKER_BUILD/python."""
import os
import subprocess
import sys

import numpy as np
import xxhash

from conftest import BUILD, ROOT, run_stoker  # noqa: F401  (re-exported)

try:
    import stoker  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(BUILD, "python"))
    import stoker  # noqa: F401

PY_PATH = os.path.dirname(os.path.dirname(os.path.abspath(stoker.__file__)))
FASHION = "/usr/share/datasets/fashion-mnist"
CIFAR_SPEC = "pad 4 | random_crop 32 | flip 0.5 | normalize cifar10 | to f32 chw"


def as_numpy(x):
    """A NumPy view of an images/labels object of any output kind."""
    if hasattr(x, "numpy") and type(x).__module__.startswith("torch"):
        return x.numpy()
    return np.asarray(x)


def digest_update(h, images, labels):
    """The CLI's --digest layout: data bytes, then labels as int64 LE."""
    h.update(np.ascontiguousarray(as_numpy(images)).view(np.uint8).tobytes())
    h.update(np.ascontiguousarray(as_numpy(labels), dtype="<i8").tobytes())


def loader_digest(loader, epochs=1, first_epoch=0):
    h = xxhash.xxh3_128()
    for e in range(first_epoch, first_epoch + epochs):
        loader.set_epoch(e)
        for images, labels in loader:
            digest_update(h, images, labels)
    return "%032x" % h.intdigest()


def cli_digest(uri, spec, batch, seed=0, epochs=1, *extra):
    p = run_stoker("bench", uri, "--pipeline", spec, "--batch", batch, "--seed", seed,
                   "--epochs", epochs, "--digest", *extra)
    return [l.split()[1] for l in p.stdout.splitlines() if l.startswith("digest: ")][0]


def epoch_copies(loader, with_indices=False):
    """One pass as lists of NumPy copies: (images, labels[, indices])."""
    out = []
    it = loader.iter_with_indices() if with_indices else iter(loader)
    for item in it:
        out.append(tuple(as_numpy(a).copy() for a in item))
    return out


def assert_same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert len(x) == len(y)
        for u, v in zip(x, y):
            assert u.dtype == v.dtype and u.shape == v.shape
            assert np.array_equal(u.view(np.uint8), v.view(np.uint8))


def run_python(code, env_extra=None, timeout=300, **kw):
    env = dict(os.environ)
    env["PYTHONPATH"] = PY_PATH + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=timeout, **kw)
