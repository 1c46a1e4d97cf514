"""The npy: reader against arrays written by numpy.save (the reference
writer): every pixel and label read through stk_dataset_read for every URI
form, shape and label dtype, a version 2.0 header, and the arrays the reader
refuses (Fortran order, float pixels or labels, a count mismatch) with the
file named. C-level header cases are in
tests/test_npy.c."""
import ctypes as C

import numpy as np
import pytest


from stk_ctypes import Info, lib, open_ds  # noqa: E402



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


# --- .npz: np.savez archives (uncompressed ZIP), members mapped in place ---

def npz_arrays(n=17, channels=3):
    rng = np.random.default_rng(11)
    images = rng.integers(0, 256, size=(n, 6, 7) + ((channels,) if channels else ()),
                          dtype=np.uint8)
    labels = rng.integers(-3, 50, size=n).astype(np.int64)
    return images, labels


@pytest.mark.parametrize("channels", [None, 3])
def test_npz_savez_round_trip(tmp_path, channels):
    images, labels = npz_arrays(channels=channels)
    np.savez(tmp_path / "d.npz", images=images, labels=labels, extra=np.zeros(3))
    want = images if channels else images[..., None]
    for uri in (f"npy:{tmp_path}/d.npz", str(tmp_path / "d.npz")):
        fmt, got, got_labels = read_all(uri)
        assert fmt == "npy"
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got_labels, labels)


def test_npz_member_names(tmp_path):
    images, labels = npz_arrays()
    np.savez(tmp_path / "d.npz", x_train=images, y_train=labels.astype(np.int32))
    for q in ("images=x_train&labels=y_train", "labels=y_train.npy&images=x_train.npy"):
        _, got, got_labels = read_all(f"npy:{tmp_path}/d.npz?{q}")
        np.testing.assert_array_equal(got, images)
        np.testing.assert_array_equal(got_labels, labels)
    rc, _ = open_ds(f"npy:{tmp_path}/d.npz")
    msg = lib.stk_errmsg().decode()
    assert rc == -4 and f"{tmp_path}/d.npz: no member images.npy" in msg
    rc, _ = open_ds(f"npy:{tmp_path}/d.npz?images=x_train&labels=nope")
    assert rc == -4 and "no member nope.npy" in lib.stk_errmsg().decode()
    rc, _ = open_ds(f"npy:{tmp_path}/d.npz?image=x")
    assert rc == -1 and "unknown query key 'image'" in lib.stk_errmsg().decode()


def test_npz_zip64(tmp_path):
    """ZIP64 as zipfile writes it past 4 GiB, made small by lowering
    zipfile's limit: saturated central-directory sizes and offsets with the
    ZIP64 extra field, a ZIP64 end record; the end record's 32-bit fields
    are then saturated by hand, as a >4 GiB archive has them."""
    import zipfile
    images, labels = npz_arrays()
    old = zipfile.ZIP64_LIMIT
    zipfile.ZIP64_LIMIT = 100
    try:
        np.savez(tmp_path / "d.npz", images=images, labels=labels)
    finally:
        zipfile.ZIP64_LIMIT = old
    data = bytearray((tmp_path / "d.npz").read_bytes())
    assert b"PK\x06\x06" in data and b"\xff\xff\xff\xff" in data
    e = data.rindex(b"PK\x05\x06")
    data[e + 8:e + 20] = b"\xff" * 12
    (tmp_path / "d.npz").write_bytes(bytes(data))
    z = np.load(tmp_path / "d.npz")  # numpy still reads it
    np.testing.assert_array_equal(z["images"], images)
    _, got, got_labels = read_all(f"npy:{tmp_path}/d.npz")
    np.testing.assert_array_equal(got, images)
    np.testing.assert_array_equal(got_labels, labels)
    # the ZIP64 record gone: the saturated fields have nothing behind them
    loc = data.rindex(b"PK\x06\x07")
    data[loc:loc + 4] = b"XXXX"
    (tmp_path / "d.npz").write_bytes(bytes(data))
    rc, _ = open_ds(f"npy:{tmp_path}/d.npz")
    assert rc == -5 and "without a ZIP64 locator" in lib.stk_errmsg().decode()


def npz_damage(tmp_path, how):
    images, labels = npz_arrays()
    path = tmp_path / "d.npz"
    if how == "compressed":
        np.savez_compressed(path, images=images, labels=labels)
        return path
    np.savez(path, images=images, labels=labels)
    data = bytearray(path.read_bytes())
    cd = data.index(b"PK\x01\x02")
    if how == "truncated":
        data = data[:len(data) // 2]
    elif how == "eocd-signature":
        e = data.rindex(b"PK\x05\x06")
        data[e + 3] = 7
    elif how == "central-signature":
        data[cd + 2] = 9
    elif how == "local-signature":
        data[0:4] = b"PK\x07\x08"
    elif how == "local-name":
        data[30] = ord("I")  # "Images.npy" in the local header only
    elif how == "labels-crc":
        lab = data.index(b"\x93NUMPY", data.index(b"labels.npy"))
        data[lab + 200] ^= 1
    elif how == "cd-outside":
        e = data.rindex(b"PK\x05\x06")
        data[e + 16:e + 20] = (len(data)).to_bytes(4, "little")
    elif how == "images-header":
        data[data.index(b"\x93NUMPY") + 1] = ord("X")
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("how,code,text", [
    ("compressed", -10, "member images.npy: compressed (ZIP method 8, deflate); members are "
                        "mapped in place, so write the archive with np.savez"),
    ("truncated", -5, "no end-of-central-directory record"),
    ("eocd-signature", -5, "no end-of-central-directory record"),
    ("central-signature", -5, "bad central directory entry 0 at byte"),
    ("local-signature", -5, "member images.npy: bad local header at byte 0"),
    ("local-name", -5, "member images.npy: the local header at byte 0 disagrees"),
    ("labels-crc", -5, "member labels.npy: CRC-32 mismatch"),
    ("cd-outside", -5, "the central directory (" ),
    ("images-header", -5, "member images.npy: not a .npy file (bad magic"),
])
def test_npz_damage(tmp_path, how, code, text):
    path = npz_damage(tmp_path, how)
    rc, _ = open_ds(f"npy:{path}")
    msg = lib.stk_errmsg().decode()
    assert rc == code, msg
    assert f"{path}" in msg and text in msg, msg
