"""Dataset conveniences a torchvision user expects: classes, class_to_idx,
ds.path(i) / ds.paths / Loader.iter_with_paths, len, ds[i], repr — and the
source names stoker pack keeps in the shards (field source_name).

References: torchvision's ImageFolder (samples, classes, class_to_idx),
Pillow's decoder, os.fsencode of the files written here, and the .stk field
table parsed here from docs/format.md (not by stoker).
"""
import os
import struct

import numpy as np
import pytest

import stoker
from conftest import write_cifar10
from module_util import PY_PATH  # noqa: F401  (imports stoker from the build)

torchvision = pytest.importorskip("torchvision")
PIL = pytest.importorskip("PIL.Image")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """An image folder with awkward names: a class that sorts before another
    by case, a space, a backslash and a byte that is not UTF-8 in file names."""
    from PIL import Image
    root = tmp_path_factory.mktemp("names") / "train"
    rng = np.random.default_rng(1)
    files = [b"Bee/x 1.png", b"Bee/back\\slash.jpg", b"ant/\xff-latin1.jpg", b"ant/a.jpg",
             b"ant/sub/deep.png", b"cow/c.jpg"]
    for rel in files:
        p = os.path.join(os.fsencode(str(root)), rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        h, w = rng.integers(20, 50, 2)
        img = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        img.save(os.fsdecode(p), format="PNG" if rel.endswith(b".png") else "JPEG")
    return str(root)


def field_table(shard):
    """(name, type, storage) of each field of a .stk shard, read as
    docs/format.md lays them out (header at 0, 64-byte field entries at 64)."""
    with open(shard, "rb") as f:
        head = f.read(64)
        assert head[:8] == b"\x89STK\r\n\x1a\n"
        (count,) = struct.unpack_from("<I", head, 24)
        out = []
        for _ in range(count):
            e = f.read(64)
            out.append((e[:32].rstrip(b"\0").decode(), e[32], e[33]))
        return out


def test_imagefolder_names_match_torchvision(folder):
    ref = torchvision.datasets.ImageFolder(folder)
    ds = stoker.open(folder)
    assert len(ds) == len(ref.samples) == 6
    assert ds.classes == ref.classes == ["Bee", "ant", "cow"]
    assert ds.class_to_idx == ref.class_to_idx
    for i, (path, label) in enumerate(ref.samples):
        assert ds.path(i) == path
        assert ds.path(i - len(ds)) == path  # negative indices count from the end
        pixels, lab = ds[i]
        assert lab == label
        np.testing.assert_array_equal(pixels, np.asarray(PIL.open(path).convert("RGB")))
    assert ds.paths(np.array([5, 0])) == [ref.samples[5][0], ref.samples[0][0]]
    assert ds.paths([]) == []
    with pytest.raises(IndexError, match=r"dataset index 6 out of range \(6 samples\)"):
        ds.path(6)
    assert repr(ds) == ("<stoker.Dataset imagefolder %r: 6 samples of varying size, "
                        "3 classes ['Bee', 'ant', 'cow']>" % folder)


def test_loader_iter_with_paths(folder):
    ds = stoker.open(folder)
    with stoker.Loader(ds, batch_size=4, shuffle=True, seed=3, output="numpy",
                       transforms=[stoker.CenterCrop(16)]) as loader:
        seen = []
        for x, y, paths in loader.iter_with_paths():
            assert len(paths) == len(y) == x.shape[0]
            seen += paths
        loader.set_epoch(0)
        order = [int(i) for _, _, idx in loader.iter_with_indices() for i in np.asarray(idx)]
    assert seen == [ds.path(i) for i in order]
    assert sorted(seen) == sorted(ds.path(i) for i in range(len(ds)))


def test_formats_without_names(tmp_path):
    d = tmp_path / "cifar"
    write_cifar10(str(d), per_file=3, files=5)
    ds = stoker.open("cifar10:%s" % d)
    assert ds.path(0) is None and ds.paths([1, 2]) == [None, None]
    assert ds.classes is None and ds.class_to_idx is None
    assert repr(ds) == "<stoker.Dataset cifar10 %r: 15 samples of 32x32x3, 10 classes>" % (
        "cifar10:%s" % d)
    mem = stoker.from_numpy(np.zeros((2, 4, 5, 3), np.uint8), [0, 1])
    assert mem.path(1) is None
    assert repr(mem).startswith("<stoker.Dataset memory ") and \
        repr(mem).endswith(": 2 samples of 4x5x3, 2 classes>")


def test_pack_keeps_source_names(folder, tmp_path):
    ref = torchvision.datasets.ImageFolder(folder)
    out = tmp_path / "shards"
    res = stoker.pack(folder, str(out), jobs=2)
    assert res["records"] == 6
    shard = str(out / "shard-00000.stk")
    fields = field_table(shard)
    assert ("source_name", 6, 0) in fields  # type 6 = string, storage 0 = variable
    assert [f[0] for f in fields] == ["image", "label", "source_index", "source_name"]
    ds = stoker.open(str(out))
    assert ds.classes == ref.classes and ds.class_to_idx == ref.class_to_idx
    for i, (path, label) in enumerate(ref.samples):
        assert ds.path(i) == path  # the bytes of the name, escaped and back
        assert ds[i][1] == label
    assert "varying size, 3 classes ['Bee', 'ant', 'cow']>" in repr(ds)
    # repacking shards keeps the names of the original files
    again = tmp_path / "again"
    stoker.pack(str(out), str(again), jobs=1)
    ds2 = stoker.open(str(again))
    assert [ds2.path(i) for i in range(len(ds2))] == [p for p, _ in ref.samples]
    # and the escaped form on disk is valid UTF-8 (the \xff byte is written \\xff)
    data = open(shard, "rb").read()
    assert b"\\xff-latin1.jpg" in data and b"back\\\\slash.jpg" in data


def test_pack_of_a_source_without_names_has_no_source_name_field(tmp_path):
    d = tmp_path / "cifar"
    write_cifar10(str(d), per_file=4, files=5)
    out = tmp_path / "shards"
    stoker.pack("cifar10:%s" % d, str(out))
    names = [f[0] for f in field_table(str(out / "shard-00000.stk"))]
    assert names == ["image", "label", "source_index"]
    assert stoker.open(str(out)).path(0) == "%s: record 0 (sample 0)" % (out / "shard-00000.stk")
