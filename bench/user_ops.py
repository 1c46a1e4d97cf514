"""Throughput of one brightness op written four ways, through the loader
(docs/ops.md, "Cost"): the built-in ``color_jitter brightness=F:F``, the C
plugin (examples/plugin_brightness), a NumbaOp and a PythonOp, after a
random_resized_crop on generated raw images, uint8 output.

    STOKER_BUILD=build PYTHONPATH=build/python /usr/bin/python3 bench/user_ops.py \\
        [--images 512] [--side 256] [--crop 224] [--threads 2] [--seconds 3]

Prints images/s per variant (best of --repeats passes of at least --seconds
each) and the ratio to the built-in op; the issue's goal is NumbaOp >= 0.8x.
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("STOKER_BUILD", os.path.join(HERE, "..", "build"))
try:
    import stoker
except ImportError:
    sys.path.insert(0, os.path.join(BUILD, "python"))
    import stoker
import numba  # noqa: E402

FACTOR = 1.5


@numba.cfunc(stoker.NumbaOp.SIGNATURE)
def numba_brightness(src, h, w, c, dst, oh, ow, oc, args, random):
    n = h * w * c
    a = numba.carray(src, (n,))
    b = numba.carray(dst, (n,))
    f = numba.float32(args[0])
    for i in range(n):
        v = f * (numba.float32(a[i]) / numba.float32(255.0))
        v = min(max(v, numba.float32(0.0)), numba.float32(1.0))
        b[i] = numba.uint8(round(v * numba.float32(255.0)))
    return 0


def python_brightness(image, random):
    x = np.float32(FACTOR) * (image.astype(np.float32) / np.float32(255))
    return np.rint(np.clip(x, 0, 1) * np.float32(255)).astype(np.uint8)


def measure(ds, transforms, threads, seconds, repeats, batch):
    loader = stoker.Loader(ds, batch_size=batch, transforms=transforms, dtype="uint8",
                           layout="NHWC", output="numpy", num_threads=threads, shuffle=True,
                           prefetch=4)
    for _ in zip(range(2), loader):  # warm up (scratch buffers, numba, first pages)
        pass
    best = 0.0
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for images, _labels in loader:
                n += len(images)
                if time.perf_counter() - t0 >= seconds:
                    break
        best = max(best, n / (time.perf_counter() - t0))
    loader.close()
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=512)
    ap.add_argument("--side", type=int, default=256)
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--plugin", default=os.path.join(BUILD, "libstk_plugin_brightness.so"))
    a = ap.parse_args()
    imgs = np.random.default_rng(0).integers(0, 256, (a.images, a.side, a.side, 3),
                                             dtype=np.uint8)
    ds = stoker.from_numpy(imgs)
    stoker.load_plugin(a.plugin)
    head = [stoker.RandomResizedCrop(a.crop)]
    variants = [
        ("no brightness", head),
        ("built-in color_jitter", head + ["color_jitter brightness=%r:%r" % (FACTOR, FACTOR)]),
        ("C plugin", head + [stoker.UserOp("brightness", FACTOR)]),
        ("NumbaOp", head + [stoker.NumbaOp(numba_brightness, args=(FACTOR,))]),
        ("PythonOp", head + [stoker.PythonOp(python_brightness)]),
    ]
    print("%d raw %dx%d images, random_resized_crop %d, %d threads, batch %d"
          % (a.images, a.side, a.side, a.crop, a.threads, a.batch))
    rates = {}
    for name, tr in variants:
        rates[name] = measure(ds, tr, a.threads, a.seconds, a.repeats, a.batch)
    base = rates["built-in color_jitter"]
    for name, r in rates.items():
        print("%-24s %9.0f images/s  %5.2fx built-in" % (name, r, r / base))


if __name__ == "__main__":
    main()
