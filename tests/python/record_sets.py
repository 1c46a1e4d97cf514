"""Helpers shared by the record-format reader tests (test_lmdb_reader.py,
test_recordio_reader.py): a subset of the photos set with ImageFolder
labels, the `stoker bench --digest` of a dataset, and tiny JPEGs."""
import glob
import io
import os

from conftest import need_photos, run_stoker


def photo_subset(n=30):
    root = need_photos("train")
    files = sorted(glob.glob(os.path.join(root, "train", "*", "*.jpg")))
    files = files[::max(1, len(files) // n)][:n]
    classes = sorted({os.path.basename(os.path.dirname(f)) for f in files})
    return [(f, classes.index(os.path.basename(os.path.dirname(f)))) for f in files]


def digest(uri):
    p = run_stoker("bench", uri, "--pipeline", "imagenet-train-few", "--digest", "--batch", 8,
                   "--epochs", 1, "--threads", 2, "--seed", 11)
    return [l.split()[1] for l in p.stdout.splitlines() if l.startswith("digest: ")][0]


def tiny_jpegs(n):
    from PIL import Image
    out = []
    for i in range(n):
        im = Image.new("RGB", (20, 16), (i * 20 % 256, 100, 200 - i))
        b = io.BytesIO()
        im.save(b, "JPEG", quality=90)
        out.append(b.getvalue())
    return out
