#!/usr/bin/python3
"""Bit-identical output with every compiler: the same pipelines through the
GCC build's CLI, the clang build's CLI and the Python module built by
`pip install .` must give the same --digest (issue 9, defect 5: clang
contracted a*b+c into fused multiply-adds, so its floats differed in the
last bit).

    /usr/bin/python3 tests/compare_builds.py --cli build/stoker --cli build-clang/stoker \\
        --python-site DIR --photos PHOTOS_DIR

DIR is a site-packages (or --target) folder holding the pip-built `stoker`
package; PHOTOS_DIR an ImageFolder-layout set of real JPEGs
(scripts/make_photos.py; scripts/photos-small.sh makes the small one), whose
train/ folder runs the ImageNet pipelines. CIFAR-10 files are written here
with NumPy. The digest is the CLI's (docs/cli.md): XXH3-128 over every batch
in delivery order, its data bytes then its labels as int64 little-endian.

Run by scripts/test.sh after the clang build; exits 1 when any digest
differs, printing the table either way.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

PIPELINES = [  # (name, dataset, spec, batch)
    ("cifar", "cifar", "pad 4 | random_crop 32 | flip 0.5 | normalize cifar10 | to f32 chw", 64),
    ("cifar-jitter", "cifar",
     "pad 4 | random_crop 32 | flip 0.5 | color_jitter 0.4 0.4 0.4 0.1 | normalize cifar10 "
     "| to f32 chw", 64),
    ("imagenet-train-few", "photos", "imagenet-train-few", 32),
    ("imagenet-train-extensive", "photos", "imagenet-train-extensive", 32),
    ("simclr-bicubic-bf16", "photos",
     "random_resized_crop 96 interpolation=bicubic | flip | random_apply 0.8 | "
     "color_jitter 0.4 0.4 0.4 0.1 | grayscale 0.2 | gaussian_blur 9 | normalize imagenet | "
     "random_erasing 0.5 | to bf16", 32),
]
SEED = 11


def write_cifar10(root, per_file=200, seed=0):
    rng = np.random.default_rng(seed)
    os.makedirs(root, exist_ok=True)
    for i in range(1, 6):
        lab = rng.integers(0, 10, per_file, dtype=np.uint8)
        img = rng.integers(0, 256, (per_file, 3 * 32 * 32), dtype=np.uint8)
        np.concatenate([lab[:, None], img], axis=1).tofile(
            os.path.join(root, "data_batch_%d.bin" % i))


def cli_digest(stoker, uri, spec, batch):
    p = subprocess.run([stoker, "bench", uri, "--pipeline", spec, "--batch", str(batch),
                        "--seed", str(SEED), "--digest"], capture_output=True, text=True,
                       timeout=600)
    if p.returncode != 0:
        sys.exit("%s bench %s failed (%d): %s" % (stoker, uri, p.returncode, p.stderr))
    return [l.split()[1] for l in p.stdout.splitlines() if l.startswith("digest: ")][0]


def python_digest(site, uri, spec, batch):
    """The pip-built module, in a fresh interpreter that sees only `site`."""
    code = r"""
import sys, numpy as np, xxhash, stoker
uri, spec, batch, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
loader = stoker.Loader(uri, batch_size=batch, shuffle=True, seed=seed, pipeline=spec,
                       output="numpy")
h = xxhash.xxh3_128()
for images, labels in loader:
    h.update(np.ascontiguousarray(images).view(np.uint8).tobytes())
    h.update(np.asarray(labels, dtype="<i8").tobytes())
print(stoker.__file__)
print("%032x" % h.intdigest())
"""
    env = dict(os.environ, PYTHONPATH=site)
    p = subprocess.run([sys.executable, "-c", code, uri, spec, str(batch), str(SEED)],
                       capture_output=True, text=True, env=env, timeout=600, cwd="/")
    if p.returncode != 0:
        sys.exit("python module (%s) failed on %s: %s" % (site, uri, p.stderr))
    where, digest = p.stdout.split()
    if not os.path.realpath(where).startswith(os.path.realpath(site)):
        sys.exit("imported stoker from %s, not from the pip build in %s" % (where, site))
    return digest


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", action="append", required=True, help="a stoker CLI (repeat)")
    ap.add_argument("--python-site", help="folder the pip-built stoker package is in")
    ap.add_argument("--photos", required=True, help="ImageFolder set with train/")
    a = ap.parse_args()
    train = os.path.join(os.path.abspath(a.photos), "train")
    if not os.path.isdir(train):
        sys.exit("no %s (scripts/photos-small.sh makes the photos set)" % train)
    with tempfile.TemporaryDirectory() as tmp:
        write_cifar10(os.path.join(tmp, "cifar"))
        uris = {"cifar": "cifar10:" + os.path.join(tmp, "cifar"), "photos": "imagefolder:" + train}
        builds = [(c, lambda u, s, b, c=c: cli_digest(c, u, s, b)) for c in a.cli]
        if a.python_site:
            builds.append(("pip module", lambda u, s, b: python_digest(a.python_site, u, s, b)))
        bad = 0
        for name, ds, spec, batch in PIPELINES:
            digests = [(b, f(uris[ds], spec, batch)) for b, f in builds]
            same = len({d for _, d in digests}) == 1
            bad += not same
            print("%-26s %s" % (name, "same" if same else "DIFFERENT"))
            for b, d in digests:
                print("    %-30s %s" % (b, d))
    if bad:
        print("compare_builds: %d pipeline(s) differ between builds" % bad)
        return 1
    print("compare_builds: %d builds give identical digests on %d pipelines"
          % (len(builds), len(PIPELINES)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
