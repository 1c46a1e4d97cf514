"""The segfolder: reader on masks written by PIL.

Images (JPEG and PNG, RGB) and masks (8-bit grey "L" PNGs of class ids,
and palette "P" PNGs as VOC stores them) are written by PIL in both
layouts; the pairs stoker reads are the files PIL wrote, byte for byte, in
stem order, and decoding each mask with PIL gives back the array it was
written from; a loader runs over the set; a mask of the wrong size, an
image without a mask and a mask without an image are reported naming the
files (verify, open, skipped_inputs)."""
import ctypes as C
import io
import os

import numpy as np
import pytest
from PIL import Image

from conftest import BUILD, run_stoker
from stk_ctypes import lib

import stoker

lib.stk_dataset_close.argtypes = [C.c_void_p]
lib.stk_dataset_read_field.argtypes = [C.c_void_p, C.c_uint64, C.c_char_p,
                                       C.POINTER(C.c_void_p), C.POINTER(C.c_size_t), C.c_void_p]


def read_field(uri, i, name):
    ds = C.c_void_p()
    assert lib.stk_dataset_open(uri.encode(), None, C.byref(ds)) == 0, lib.stk_errmsg()
    try:
        d, n = C.c_void_p(), C.c_size_t()
        rc = lib.stk_dataset_read_field(ds, i, name.encode(), C.byref(d), C.byref(n), None)
        if rc != 0:
            raise RuntimeError(lib.stk_errmsg().decode())
        b = C.string_at(d, n.value)
        lib.stk_free(d)
        return b
    finally:
        lib.stk_dataset_close(ds)


def write_set(root, flat=False, seed=0, n=7):
    """Images and masks; returns {stem: (image path, mask path, mask array)}."""
    rng = np.random.default_rng(seed)
    idir = root if flat else os.path.join(root, "images")
    mdir = root if flat else os.path.join(root, "masks")
    os.makedirs(idir, exist_ok=True)
    os.makedirs(mdir, exist_ok=True)
    out = {}
    for k in range(n):
        stem = "scene_%02d" % rng.integers(0, 100) if k else "a"
        while stem in out:
            stem += "x"
        h, w = int(rng.integers(5, 40)), int(rng.integers(5, 40))
        ext = ".jpg" if k % 2 else ".png"
        ipath = os.path.join(idir, stem + ext)
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(ipath)
        m = rng.integers(0, 21, (h, w), dtype=np.uint8)
        mpath = os.path.join(mdir, stem + ("_mask" if flat else "") + ".png")
        if k % 3 == 2:  # a palette PNG, as VOC's SegmentationClass
            p = Image.fromarray(m, mode="P")
            p.putpalette([v for i in range(256) for v in (i, 255 - i, (7 * i) % 256)])
            p.save(mpath)
        else:
            Image.fromarray(m, mode="L").save(mpath)
        out[stem] = (ipath, mpath, m)
    return out


@pytest.mark.parametrize("flat", [False, True])
def test_pairs_masks_and_loader(tmp_path, flat):
    root = str(tmp_path / "set")
    files = write_set(root, flat=flat)
    for uri in ("segfolder:" + root, root):  # the bare directory is detected
        ds = stoker.open(uri)
        assert ds.format == "segfolder"
        assert len(ds) == len(files)
        stems = sorted(files)
        for i, stem in enumerate(stems):
            ipath, mpath, m = files[stem]
            assert ds.path(i) == ipath
            with open(ipath, "rb") as f:
                assert read_field(uri, i, "image") == f.read()
            raw = read_field(uri, i, "mask")
            with open(mpath, "rb") as f:
                assert raw == f.read()
            np.testing.assert_array_equal(np.array(Image.open(io.BytesIO(raw))), m)
    loader = stoker.Loader("segfolder:" + root, batch_size=4, output="numpy", shuffle=False,
                           transforms=[stoker.Resize((16, 16))])
    labels = np.concatenate([b[1] for b in loader])
    assert labels.tolist() == [-1] * len(files)


def test_bad_pairs(tmp_path):
    root = str(tmp_path / "set")
    files = write_set(root)
    stems = sorted(files)
    # a mask of the wrong size: found when read, naming both files
    ipath, mpath, m = files[stems[1]]
    Image.fromarray(np.zeros((m.shape[0] + 1, m.shape[1]), np.uint8)).save(mpath)
    p = run_stoker("verify", "segfolder:" + root, check=False)
    assert p.returncode == 1
    assert "%s: the mask is %dx%d (WxH) but its image %s is %dx%d" % (
        mpath, m.shape[1], m.shape[0] + 1, ipath, m.shape[1], m.shape[0]) in p.stdout
    assert "1 damaged" in p.stdout
    with pytest.raises(RuntimeError, match="the mask is"):
        read_field("segfolder:" + root, 1, "mask")
    # an image without its mask, a mask without its image
    os.remove(files[stems[2]][1])
    Image.fromarray(np.zeros((4, 4), np.uint8)).save(os.path.join(root, "masks", "zz.png"))
    with pytest.raises(stoker.FormatError) as e:
        stoker.open("segfolder:" + root)
    assert "%s has no mask %s" % (files[stems[2]][0], files[stems[2]][1]) in str(e.value)
    with pytest.warns(RuntimeWarning):
        ds = stoker.open("segfolder:%s?missing=skip" % root)
    assert len(ds) == len(files) - 1
    assert ds.skipped_inputs == [
        "%s has no mask %s" % (files[stems[2]][0], files[stems[2]][1]),
        "%s has no image %s.*" % (os.path.join(root, "masks", "zz.png"),
                                  os.path.join(root, "images", "zz"))]
