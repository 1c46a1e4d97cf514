"""The npy: reader against arrays written by numpy.save (the reference
writer): every pixel and label read through stk_dataset_read for every URI
form, shape and label dtype, a version 2.0 header, and the arrays the reader
refuses (Fortran order, float pixels or labels, a count mismatch) with the
file named. C-level header cases are in
tests/test_npy.c."""
import ctypes as C
import os

import numpy as np
import pytest

from conftest import BUILD

lib = C.CDLL(os.path.join(BUILD, "libstoker.so"))
lib.stk_errmsg.restype = C.c_char_p
lib.stk_dataset_open.argtypes = [C.c_char_p, C.c_void_p, C.POINTER(C.c_void_p)]
lib.stk_dataset_close.argtypes = [C.c_void_p]
lib.stk_dataset_read.argtypes = [C.c_void_p, C.c_uint64, C.c_void_p, C.c_size_t,
                                 C.POINTER(C.c_int64)]
lib.stk_dataset_read.restype = C.c_int64


class Info(C.Structure):
    """stk_dataset_info, whole: the library writes its reserved words too."""
    _fields_ = [("uri", C.c_char_p), ("format", C.c_char_p), ("count", C.c_uint64),
                ("height", C.c_uint32), ("width", C.c_uint32), ("channels", C.c_uint32),
                ("num_classes", C.c_uint32), ("reserved_", C.c_uint64 * 4)]


lib.stk_dataset_info_get.argtypes = [C.c_void_p, C.POINTER(Info)]


def open_ds(uri):
    ds = C.c_void_p()
    rc = lib.stk_dataset_open(uri.encode(), None, C.byref(ds))
    return rc, ds


def read_all(uri):
    rc, ds = open_ds(uri)
    assert rc == 0, lib.stk_errmsg().decode()
    info = Info()
    lib.stk_dataset_info_get(ds, C.byref(info))
    shape = (info.height, info.width, info.channels)
    images = np.zeros((info.count,) + shape, np.uint8)
    labels = np.zeros(info.count, np.int64)
    for i in range(info.count):
        lab = C.c_int64()
        got = lib.stk_dataset_read(ds, i, images[i].ctypes.data, images[i].nbytes, C.byref(lab))
        assert got == images[i].nbytes, lib.stk_errmsg().decode()
        labels[i] = lab.value
    fmt = info.format.decode()
    lib.stk_dataset_close(ds)
    return fmt, images, labels


@pytest.mark.parametrize("channels", [None, 1, 3, 4])
@pytest.mark.parametrize("ldtype", [np.int64, np.int32, np.uint8])
def test_npy_save_round_trip(tmp_path, channels, ldtype):
    rng = np.random.default_rng(7)
    shape = (23, 9, 13) + ((channels,) if channels else ())
    images = rng.integers(0, 256, size=shape, dtype=np.uint8)
    labels = rng.integers(0, 100, size=23).astype(ldtype)
    np.save(tmp_path / "images.npy", images)
    np.save(tmp_path / "labels.npy", labels)
    want = images if channels else images[..., None]
    for uri in (f"npy:{tmp_path}", str(tmp_path),
                f"npy:{tmp_path}/images.npy,{tmp_path}/labels.npy"):
        fmt, got, got_labels = read_all(uri)
        assert fmt == "npy"
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got_labels, labels.astype(np.int64))


def test_npy_version_2_header(tmp_path):
    # numpy writes format 2.0 when asked (or when the header passes 64 KiB).
    from numpy.lib import format as npf
    images = np.arange(4 * 3 * 5, dtype=np.uint8).reshape(4, 3, 5)
    labels = np.array([5, -1, 0, 2], np.int64)
    with open(tmp_path / "images.npy", "wb") as f:
        npf.write_array(f, images, version=(2, 0))
    with open(tmp_path / "labels.npy", "wb") as f:
        npf.write_array(f, labels, version=(2, 0))
    assert (tmp_path / "images.npy").read_bytes()[6:8] == b"\x02\x00"
    _, got, got_labels = read_all(f"npy:{tmp_path}")
    np.testing.assert_array_equal(got[..., 0], images)
    np.testing.assert_array_equal(got_labels, labels)


def test_npy_refused_arrays(tmp_path):
    labels = np.zeros(6, np.int64)
    np.save(tmp_path / "labels.npy", labels)
    np.save(tmp_path / "images.npy", np.asfortranarray(np.zeros((6, 4, 5), np.uint8)))
    rc, _ = open_ds(f"npy:{tmp_path}")
    msg = lib.stk_errmsg().decode()
    assert rc < 0 and "images.npy: fortran_order is True" in msg
    np.save(tmp_path / "images.npy", np.zeros((6, 4, 5), np.float32))
    rc, _ = open_ds(f"npy:{tmp_path}")
    assert rc < 0 and "images.npy: images dtype '<f4'" in lib.stk_errmsg().decode()
    np.save(tmp_path / "images.npy", np.zeros((6, 4, 5), np.uint8))
    np.save(tmp_path / "labels.npy", np.zeros(5, np.int64))
    rc, _ = open_ds(f"npy:{tmp_path}")
    assert rc < 0 and "labels.npy: labels shape must be (6,)" in lib.stk_errmsg().decode()
    np.save(tmp_path / "labels.npy", np.zeros(6, np.float64))
    rc, _ = open_ds(f"npy:{tmp_path}")
    assert rc < 0 and "labels.npy: labels dtype '<f8'" in lib.stk_errmsg().decode()
