"""imagefolder: datasets against torchvision.datasets.ImageFolder itself.

The C tests (tests/test_imagefolder.c) check the order against a list
worked out by hand; this one asks torchvision. A tree with the awkward
cases (nested directories whose names sort differently as paths and as
directories, upper-case and odd extensions, hidden files, non-image files,
a symlinked class) is built, and every sample index must hold the same file
with the same label in both. Each file's bytes are unique (its own relative
path), so `stoker cat` identifies it.
"""
import os
import struct
import subprocess

import pytest

from conftest import STOKER, run_stoker

torchvision = pytest.importorskip("torchvision")

FILES = [
    "a/x10.JPG", "a/x2.jpg", "a/X.JpEg", "a/readme.txt", "a/notes.jpg.txt",
    "a/sub/y.png", "a/sub/deep/d.bmp", "a/sub-z/q.jpeg", "a/sub.z/r.jpg",
    "a/zz.webp", "a/t.TIFF", "a/.hidden.png",
    "B_upper/1.png", "B_upper/0.jpg", "B_upper/deeper/and/deeper/k.ppm",
    "c d (space)/k.pgm", "c d (space)/k.PGM", "c d (space)/é-accent.jpg",
]


def cat(uri, index, *extra):
    p = subprocess.run([STOKER, "cat", uri, str(index), *extra], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def build(root):
    for rel in FILES:
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(rel.encode())
    other = os.path.join(os.path.dirname(root), "elsewhere")
    os.makedirs(os.path.join(other, "in"), exist_ok=True)
    for rel in ("e.jpg", "in/f.png"):
        with open(os.path.join(other, rel), "wb") as f:
            f.write(("elsewhere/" + rel).encode())
    os.symlink(other, os.path.join(root, "linked"))


def test_same_samples_as_torchvision(tmp_path):
    root = tmp_path / "tree"
    root.mkdir()
    build(str(root))
    ref = torchvision.datasets.ImageFolder(str(root), loader=lambda p: p)

    info = run_stoker("inspect", "imagefolder:%s" % root).stdout
    assert "format:   imagefolder" in info
    assert ("samples:  %d" % len(ref.samples)) in info

    for i, (path, label) in enumerate(ref.samples):
        with open(path, "rb") as f:
            want = f.read()
        assert cat("imagefolder:%s" % root, i) == want, (i, path)
        lab = cat("imagefolder:%s" % root, i, "--field", "label")
        assert struct.unpack("<q", lab)[0] == label, (i, path)


def test_classes_as_torchvision(tmp_path):
    root = tmp_path / "tree"
    root.mkdir()
    build(str(root))
    ref = torchvision.datasets.ImageFolder(str(root), loader=lambda p: p)
    info = run_stoker("inspect", "imagefolder:%s" % root).stdout
    for idx, name in enumerate(ref.classes):
        assert any(line.split()[:2] == [str(idx), name.split()[0]] for line in info.splitlines()), (idx, name)
