"""The lmdb: reader against environments written by python3-lmdb with Caffe
Datum messages built by python3-protobuf (caffe_datum.py, a descriptor made
at run time): raw Datums at every pixel (Caffe's BGR planes read as RGB),
encoded Datums byte for byte, value=encoded with KEY.cls labels, values that
are not Datums, and the photos set: `stoker bench --digest` of encoded
Datums equals that of the .stk pack of the same files in the same order, and
`stoker pack lmdb:...` (also --restart) gives a set with the same samples.
C-level cases are in tests/test_lmdb.c."""
import ctypes as C
import os

import lmdb
import numpy as np

from caffe_datum import Datum, encoded_datum, raw_datum
from conftest import BUILD, run_stoker
from record_sets import digest, photo_subset, tiny_jpegs

lib = C.CDLL(os.path.join(BUILD, "libstoker.so"))
lib.stk_errmsg.restype = C.c_char_p
lib.stk_dataset_open.argtypes = [C.c_char_p, C.c_void_p, C.POINTER(C.c_void_p)]
lib.stk_dataset_close.argtypes = [C.c_void_p]
lib.stk_dataset_read_alloc.argtypes = [C.c_void_p, C.c_uint64, C.POINTER(C.POINTER(C.c_uint8)),
                                       C.POINTER(C.c_uint32), C.POINTER(C.c_int64)]
lib.stk_dataset_read_alloc.restype = C.c_int64
lib.stk_dataset_read_field.argtypes = [C.c_void_p, C.c_uint64, C.c_char_p,
                                       C.POINTER(C.c_void_p), C.POINTER(C.c_size_t), C.c_void_p]
lib.stk_free.argtypes = [C.c_void_p]


def open_ds(uri):
    ds = C.c_void_p()
    rc = lib.stk_dataset_open(uri.encode(), None, C.byref(ds))
    assert rc == 0, lib.stk_errmsg().decode()
    return ds


def read_pixels(ds, i):
    px = C.POINTER(C.c_uint8)()
    shape = (C.c_uint32 * 3)()
    lab = C.c_int64()
    n = lib.stk_dataset_read_alloc(ds, i, C.byref(px), shape, C.byref(lab))
    if n < 0:
        return n, lib.stk_errmsg().decode(), None
    a = np.ctypeslib.as_array(px, (n,)).copy().reshape(tuple(shape))
    lib.stk_free(px)
    return a, lab.value, None


def read_bytes(ds, i):
    d = C.c_void_p()
    n = C.c_size_t()
    rc = lib.stk_dataset_read_field(ds, i, None, C.byref(d), C.byref(n), None)
    if rc != 0:
        return rc, lib.stk_errmsg().decode()
    b = C.string_at(d, n.value)
    lib.stk_free(d)
    return 0, b


def write_env(path, pairs):
    env = lmdb.open(str(path), map_size=1 << 28)
    with env.begin(write=True) as t:
        for k, v in pairs:
            t.put(k, v)
    env.close()


def test_raw_datums_pixels(tmp_path):
    rng = np.random.default_rng(3)
    arrays = [rng.integers(0, 256, (c, h, w), dtype=np.uint8)
              for c, h, w in [(3, 17, 9), (1, 5, 31), (3, 1, 1), (3, 40, 40)]]
    labels = [3, 0, -7, 2 ** 31 - 1]
    write_env(tmp_path / "env", [(b"%08d_x.jpg" % i, raw_datum(a, l))
                                 for i, (a, l) in enumerate(zip(arrays, labels))])
    for uri, rgb in [("lmdb:%s" % (tmp_path / "env"), False), (str(tmp_path / "env"), False),
                     ("lmdb:%s?color=rgb" % (tmp_path / "env"), True)]:
        ds = open_ds(uri)
        for i, (a, l) in enumerate(zip(arrays, labels)):
            got, lab, _ = read_pixels(ds, i)
            want = a.transpose(1, 2, 0)
            if a.shape[0] == 3 and not rgb:
                want = want[..., ::-1]  # Caffe's planes are B, G, R
            np.testing.assert_array_equal(got, want)
            assert lab == l
        lib.stk_dataset_close(ds)


def test_encoded_and_plain_values(tmp_path):
    rng = np.random.default_rng(4)
    blobs = [rng.integers(0, 256, 100 + i, dtype=np.uint8).tobytes() for i in range(5)]
    write_env(tmp_path / "enc", [(b"k%d" % i, encoded_datum(b, i * 2)) for i, b in enumerate(blobs)])
    ds = open_ds("lmdb:%s" % (tmp_path / "enc"))
    for i, b in enumerate(blobs):
        assert read_bytes(ds, i) == (0, b)
    lib.stk_dataset_close(ds)
    # value=encoded: the images themselves, labels in KEY.cls
    pairs = [(b"img/%03d.jpg" % i, b) for i, b in enumerate(blobs)]
    pairs += [(b"img/%03d.cls" % i, b"%d" % (10 + i)) for i in range(4)]
    write_env(tmp_path / "plain", pairs)
    ds = open_ds("lmdb:%s?value=encoded" % (tmp_path / "plain"))
    for i, b in enumerate(blobs):
        assert read_bytes(ds, i) == (0, b)
        lab = C.c_int64()
        assert lib.stk_dataset_label(ds, i, C.byref(lab)) == 0
        assert lab.value == (10 + i if i < 4 else -1)
    lib.stk_dataset_close(ds)


def test_values_that_are_not_datums(tmp_path):
    import pickle
    good = raw_datum(np.zeros((1, 2, 2), np.uint8), 1)
    bad = {
        b"b_pickle": pickle.dumps((b"jpeg", 3)),
        b"b_nodata": Datum(channels=3, height=2, width=2, label=1).SerializeToString(),
        b"b_size": Datum(channels=3, height=2, width=2, data=b"\0" * 11).SerializeToString(),
        b"b_float": Datum(channels=1, height=1, width=2, float_data=[1.0, 2.0]).SerializeToString(),
        b"b_cut": good[:-3],
    }
    write_env(tmp_path / "env", [(b"a_good", good)] + list(bad.items()))
    ds = open_ds("lmdb:%s" % (tmp_path / "env"))
    assert read_pixels(ds, 0)[1] == 1
    keys = sorted(bad)
    reasons = {b"b_pickle": "not a Caffe Datum", b"b_nodata": "no data field (4)",
               b"b_size": "raw Datum data holds 11 bytes", b"b_float": "float_data",
               b"b_cut": "not a Caffe Datum"}
    for i, k in enumerate(keys, 1):
        rc, msg, _ = read_pixels(ds, i)
        assert rc == -11, (k, msg)  # STK_EDATA
        assert "%s: key '%s' (record %d)" % (tmp_path / "env", k.decode(), i) in msg
        assert reasons[k] in msg, msg
    lib.stk_dataset_close(ds)


def test_photos_same_digest_as_stk_pack(tmp_path):
    photos = photo_subset()
    write_env(tmp_path / "env", [(b"%08d_%s" % (i, os.path.basename(f).encode()),
                                  encoded_datum(open(f, "rb").read(), label))
                                 for i, (f, label) in enumerate(photos)])
    with open(tmp_path / "list.txt", "w") as o:
        for f, label in photos:
            o.write("%s\t%d\n" % (f, label))
    run_stoker("pack", "-q", "list:%s" % (tmp_path / "list.txt"), tmp_path / "ref")
    want = digest(str(tmp_path / "ref"))
    assert digest("lmdb:%s" % (tmp_path / "env")) == want
    assert digest(str(tmp_path / "env")) == want  # detected
    # pack from the reader, with the bytes as they are and with --restart
    run_stoker("pack", "-q", "lmdb:%s" % (tmp_path / "env"), tmp_path / "out")
    assert digest(str(tmp_path / "out")) == want
    run_stoker("pack", "-q", "--restart", 4, "lmdb:%s" % (tmp_path / "env"), tmp_path / "rst")
    p = run_stoker("inspect", tmp_path / "rst")
    assert "samples:  %d" % len(photos) in p.stdout


def test_loader_skips_each_bad_value_once(tmp_path):
    import stoker
    jpegs = tiny_jpegs(10)
    bad = {1: b"not a datum", 4: Datum(channels=3, height=2, width=2).SerializeToString(),
           8: encoded_datum(b"", 1)}
    write_env(tmp_path / "env", [(b"%08d" % i, bad.get(i, encoded_datum(j, i % 4)))
                                 for i, j in enumerate(jpegs)])
    loader = stoker.Loader("lmdb:%s" % (tmp_path / "env"), batch_size=3, shuffle=True, seed=2,
                           transforms=[stoker.RandomResizedCrop(8)], output="numpy",
                           on_error="skip")
    seen = []
    for images, labels, indices in loader.iter_with_indices():
        seen += [int(i) for i in indices]
        assert all(int(l) == int(i) % 4 for l, i in zip(labels, indices))
    assert sorted(seen) == sorted(set(range(10)) - set(bad))
    # (stats() also counts batches the loader already prefetched for the
    # next epoch, so it is at least the number of damaged records)
    assert loader.stats()["skipped"] >= len(bad)


def test_raw_sets_pack(tmp_path):
    """A raw set of one shape opens with that shape and packs as raw pixels;
    one of several shapes needs --raw (pack says so) and then packs too;
    both packs give the digest of the LMDB set."""
    rng = np.random.default_rng(9)
    same = [rng.integers(0, 256, (3, 24, 20), dtype=np.uint8) for _ in range(12)]
    write_env(tmp_path / "same", [(b"%08d" % i, raw_datum(a, i % 3)) for i, a in enumerate(same)])
    p = run_stoker("inspect", "lmdb:%s" % (tmp_path / "same"))
    assert "24x20x3" in p.stdout.replace(" ", "") or "24 x 20 x 3" in p.stdout, p.stdout
    run_stoker("pack", "-q", "lmdb:%s" % (tmp_path / "same"), tmp_path / "same_out")
    assert digest(str(tmp_path / "same_out")) == digest("lmdb:%s" % (tmp_path / "same"))
    mixed = same[:6] + [rng.integers(0, 256, (1, 30, 18), dtype=np.uint8) for _ in range(6)]
    write_env(tmp_path / "mixed", [(b"%08d" % i, raw_datum(a, 1)) for i, a in enumerate(mixed)])
    p = run_stoker("pack", "-q", "lmdb:%s" % (tmp_path / "mixed"), tmp_path / "m1", check=False)
    assert p.returncode != 0
    assert "source whose shape varies: pack it with --raw" in p.stderr
    run_stoker("pack", "-q", "--raw", "lmdb:%s" % (tmp_path / "mixed"), tmp_path / "m2")
    assert digest(str(tmp_path / "m2")) == digest("lmdb:%s" % (tmp_path / "mixed"))
