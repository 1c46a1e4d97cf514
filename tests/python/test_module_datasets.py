"""stoker.open / from_numpy / Resize against independent references (issue 9,
defect 8, and the Python side of defect 6).

- ``Resize((h, w))`` must give exactly h x w, also when h == w (it used to
  emit ``resize S``, the shorter-side form): checked against
  ``torchvision.transforms.Resize((h, w))`` on PIL images, value for value.
- ``stoker.open(image_folder)[i]`` must decode the JPEG/PNG at its own size
  (it failed with "needs N bytes but the buffer holds 0") and equal PIL's
  decode; ``shape`` is None when sizes vary. The same through packed shards.
- ``from_numpy`` must refuse labels that are not integers instead of
  truncating them.
- Class names with a newline or bytes that are not UTF-8 come back as
  torchvision lists them (``ds.classes``), before and after pack; a symlink
  loop is reported (warning, ``skipped_inputs``, pack ``strict``).
"""
import os
import warnings

import numpy as np
import pytest

from module_util import run_stoker, stoker

PIL = pytest.importorskip("PIL.Image")
torchvision = pytest.importorskip("torchvision")


def _rgb(rng, h, w):
    return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)


# ---------------------------------------------------------------- Resize


@pytest.mark.parametrize("size", [(20, 20), (20, 30), (31, 17), [12, 12]])
def test_resize_pair_is_exact_size_like_torchvision(size):
    h, w = size
    assert stoker.Resize(size).spec() == "resize %d,%d" % (h, w)
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (5, 37, 23, 3), dtype=np.uint8)  # not square
    ds = stoker.from_numpy(x, np.arange(5))
    loader = stoker.Loader(ds, batch_size=5, transforms=[stoker.Resize(size)],
                           dtype="uint8", layout="NHWC", output="numpy")
    got, labels = next(iter(loader))
    got = np.asarray(got)
    ref = torchvision.transforms.Resize(tuple(size))
    assert got.shape == (5, h, w, 3)
    for i in range(5):
        want = np.asarray(ref(PIL.fromarray(x[i])))
        assert want.shape == (h, w, 3)
        assert np.array_equal(got[i], want), i


def test_resize_int_is_the_shorter_side_like_torchvision():
    assert stoker.Resize(16).spec() == "resize 16"
    assert stoker.Resize([16]).spec() == "resize 16"  # torchvision: (S,) is the shorter side
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, (1, 40, 24, 3), dtype=np.uint8)
    ds = stoker.from_numpy(x)
    loader = stoker.Loader(ds, batch_size=1, transforms=[stoker.Resize(16),
                                                         stoker.CenterCrop(16)],
                           dtype="uint8", layout="NHWC", output="numpy")
    got = np.asarray(next(iter(loader))[0])[0]
    ref = torchvision.transforms.Compose([torchvision.transforms.Resize(16),
                                          torchvision.transforms.CenterCrop(16)])
    assert np.array_equal(got, np.asarray(ref(PIL.fromarray(x[0]))))


# ------------------------------------------------- open(folder)[i] decodes


def _photo_folder(root, rng):
    """JPEG and PNG files of different sizes (one grayscale PNG)."""
    files = {
        "cat/a.jpg": (_rgb(rng, 21, 34), "JPEG"),
        "cat/b.png": (_rgb(rng, 9, 13), "PNG"),
        "dog/c.png": (rng.integers(0, 256, (16, 11), dtype=np.uint8), "PNG"),
        "dog/sub/d.jpeg": (_rgb(rng, 40, 8), "JPEG"),
    }
    for rel, (arr, fmt) in files.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        PIL.fromarray(arr).save(p, format=fmt, quality=90)
    return files


def test_open_image_folder_indexing_decodes_like_pil(tmp_path):
    root = str(tmp_path / "photos")
    _photo_folder(root, np.random.default_rng(3))
    ref = torchvision.datasets.ImageFolder(root)
    ds = stoker.open(root)
    assert ds.format == "imagefolder" and len(ds) == len(ref.samples) == 4
    assert ds.shape is None  # sizes vary: no single shape to report
    assert "varying size" in repr(ds)
    assert ds.classes == ref.classes == ["cat", "dog"]
    for i, (path, label) in enumerate(ref.samples):
        x, y = ds[i]
        want = np.asarray(PIL.open(path).convert("RGB"))
        assert isinstance(x, np.ndarray) and x.dtype == np.uint8
        assert x.shape == want.shape, (path, x.shape, want.shape)
        assert np.array_equal(x, want), path
        assert y == label
    assert np.array_equal(ds[-1][0], ds[3][0])

    # The same samples through keep-mode shards (encoded bytes kept).
    out = str(tmp_path / "shards")
    res = stoker.pack(root, out)
    assert res["records"] == 4 and res["skipped_inputs"] == []
    packed = stoker.open(out)
    assert packed.shape is None and packed.classes == ref.classes
    for i, (path, label) in enumerate(ref.samples):
        x, y = packed[i]
        assert np.array_equal(x, np.asarray(PIL.open(path).convert("RGB"))) and y == label


def test_open_image_folder_corrupt_sample_names_the_file(tmp_path):
    root = tmp_path / "bad"
    (root / "c").mkdir(parents=True)
    (root / "c" / "x.jpg").write_bytes(b"\xff\xd8\xff not really a jpeg")
    ds = stoker.open(str(root))
    with pytest.raises(stoker.DataError, match="c/x.jpg"):
        ds[0]


def test_fixed_shape_datasets_keep_their_shape():
    ds = stoker.from_numpy(np.zeros((3, 4, 5, 3), np.uint8))
    assert ds.shape == (4, 5, 3) and ds.classes is None


# ------------------------------------------------------- from_numpy labels


def test_from_numpy_refuses_fractional_labels():
    x = np.zeros((4, 2, 2, 3), np.uint8)
    with pytest.raises(ValueError, match=r"labels\[0\] = 0\.2 is not \(4 non-integer values\)"):
        stoker.from_numpy(x, [0.2, 0.9, 1.7, 2.5])
    with pytest.raises(ValueError, match=r"labels\[2\] = 1\.5 is not \(1 non-integer value\)"):
        stoker.from_numpy(x, np.array([0, 1, 1.5, 2], np.float32))
    with pytest.raises(ValueError, match=r"labels\[1\] = nan"):
        stoker.from_numpy(x, [0.0, float("nan"), 1.0, 2.0])
    with pytest.raises(ValueError, match=r"labels\[3\]"):
        stoker.from_numpy(x, [0.0, 1.0, 2.0, 2.0 ** 63])  # past int64
    with pytest.raises(ValueError, match=r"labels\[0\] = 18446744073709551615 does not"):
        stoker.from_numpy(x, np.array([2 ** 64 - 1, 0, 0, 0], np.uint64))
    with pytest.raises(ValueError, match=r"labels\[1\] = 0\.5 is not"):
        stoker.from_numpy(x, np.array([0, 0.5, 2 ** 70, 0], dtype=object))
    with pytest.raises(ValueError, match=r"labels\[2\] = 1180591620717411303424 does not"):
        stoker.from_numpy(x, np.array([0, 1.0, 2 ** 70, 0], dtype=object))
    with pytest.raises(TypeError, match="labels must be integers"):
        stoker.from_numpy(x, ["a", "b", "c", "d"])


def test_from_numpy_keeps_exact_integer_labels():
    x = np.zeros((4, 2, 2, 3), np.uint8)
    for labels, want in (([0.0, 3.0, -2.0, 2.0 ** 53], [0, 3, -2, 2 ** 53]),
                         (np.array([1, 0, 7, 2], np.uint8), [1, 0, 7, 2]),
                         ([5, 6, 7, 2 ** 62], [5, 6, 7, 2 ** 62]),
                         (np.array([True, False, True, True]), [1, 0, 1, 1])):
        ds = stoker.from_numpy(x, labels)
        assert [ds[i][1] for i in range(4)] == want


# ------------------------------------------------ class names, symlink loops


def test_class_names_with_newline_and_bad_utf8_round_trip(tmp_path):
    root = tmp_path / "odd"
    rng = np.random.default_rng(4)
    names = [b"a\nb", b"plain", b"\xc3\xa9t\xc3\xa9", b"\xff-not-utf8"]
    for k, n in enumerate(names):
        d = os.path.join(os.fsencode(str(root)), n)
        os.makedirs(d)
        PIL.fromarray(_rgb(rng, 3, 4 + k)).save(os.fsdecode(os.path.join(d, b"i.png")),
                                                 format="PNG")
    ref = torchvision.datasets.ImageFolder(str(root))
    assert ref.classes == [os.fsdecode(n) for n in names]  # sorted alike here
    ds = stoker.open(str(root))
    assert ds.classes == ref.classes
    out = str(tmp_path / "odd_shards")
    stoker.pack(str(root), out)
    packed = stoker.open(out)
    assert packed.num_classes == 4 and packed.classes == ref.classes
    for i, (path, label) in enumerate(ref.samples):
        x, y = packed[i]
        assert y == label and x.shape == (3, 4 + label, 3)
    # inspect prints every name on its own line, escaped.
    lines = run_stoker("inspect", out).stdout.splitlines()
    assert any(l.split()[:2] == ["0", "a\\nb"] for l in lines), lines
    assert any(l.split()[:2] == ["3", "\\xff-not-utf8"] for l in lines), lines


def test_symlink_loop_is_reported_not_packed_twice(tmp_path):
    root = tmp_path / "loop"
    rng = np.random.default_rng(5)
    for rel in ("a/x.png", "b/y.png"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        PIL.fromarray(_rgb(rng, 4, 4)).save(str(root / rel), format="PNG")
    os.symlink("..", str(root / "a" / "up"))  # a/up -> the root
    with pytest.warns(RuntimeWarning, match="a/up: is the dataset root again"):
        ds = stoker.open(str(root))
    assert len(ds) == 2 and [ds[i][1] for i in range(2)] == [0, 1]
    assert len(ds.skipped_inputs) == 1 and "symlink loop" in ds.skipped_inputs[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = stoker.pack(str(root), str(tmp_path / "o1"))
    assert res["records"] == 2 and res["skipped"] == 1
    assert res["skipped_inputs"] == [(None, ds.skipped_inputs[0])]
    with pytest.raises(stoker.DataError, match="a/up: is the dataset root again"):
        stoker.pack(str(root), str(tmp_path / "o2"), strict=True)
    with pytest.raises(stoker.DataError, match="strict=1"):
        stoker.open("imagefolder:%s?strict=1" % root)
