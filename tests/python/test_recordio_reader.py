"""The recordio: reader against .rec/.idx files written by mxnet_recordio.py
(MXNet's documented layout with struct.pack, independent of the reader):
payload bytes and labels, split records (data holding the magic), label
vectors, the .idx, damaged records, and the photos set: `stoker bench
--digest` equals that of the .stk pack of the same files in the same order,
and `stoker pack recordio:...` (also --restart) works. C-level cases with
hand-built bytes are in tests/test_recordio.c."""
import ctypes as C
import os
import struct

import numpy as np

import mxnet_recordio as mr
from conftest import BUILD, run_stoker
from record_sets import digest, photo_subset, tiny_jpegs

lib = C.CDLL(os.path.join(BUILD, "libstoker.so"))
lib.stk_errmsg.restype = C.c_char_p
lib.stk_dataset_open.argtypes = [C.c_char_p, C.c_void_p, C.POINTER(C.c_void_p)]
lib.stk_dataset_close.argtypes = [C.c_void_p]
lib.stk_dataset_read_field.argtypes = [C.c_void_p, C.c_uint64, C.c_char_p,
                                       C.POINTER(C.c_void_p), C.POINTER(C.c_size_t), C.c_void_p]
lib.stk_dataset_label.argtypes = [C.c_void_p, C.c_uint64, C.POINTER(C.c_int64)]
lib.stk_free.argtypes = [C.c_void_p]


def open_ds(uri):
    ds = C.c_void_p()
    rc = lib.stk_dataset_open(uri.encode(), None, C.byref(ds))
    return rc, ds


def read(ds, i):
    d = C.c_void_p()
    n = C.c_size_t()
    rc = lib.stk_dataset_read_field(ds, i, None, C.byref(d), C.byref(n), None)
    if rc != 0:
        return rc, lib.stk_errmsg().decode()
    b = C.string_at(d, n.value)
    lib.stk_free(d)
    lab = C.c_int64()
    assert lib.stk_dataset_label(ds, i, C.byref(lab)) == 0
    return b, lab.value


def test_records_splits_and_label_vectors(tmp_path):
    rng = np.random.default_rng(5)
    images, labels, recs = [], [], []
    for i in range(40):
        img = bytearray(rng.integers(0, 256, 50 + 7 * i, dtype=np.uint8).tobytes())
        if i % 5 == 1:  # the magic at aligned offsets of the record: split by the writer
            for at in (0, 8, 8 * (i % 3) + 16):
                img[at:at + 4] = mr.MAGIC_BYTES
        images.append(bytes(img))
        labels.append(i % 7)
        label = float(i % 7) if i % 3 else [float(i % 7), 0.5, 100.0]  # flag 0 / a vector
        recs.append(mr.pack(label, bytes(img), id=i))
    assert sum(len(mr.frames(r)) > len(r) + 11 for r in recs) >= 8  # some really split
    rec = tmp_path / "set.rec"
    mr.write_rec(rec, recs, tmp_path / "set.idx")
    for uri in ("recordio:%s" % rec, str(rec), "recordio:%s?idx=none" % rec,
                "recordio:%s?idx=%s" % (rec, tmp_path / "set.idx")):
        rc, ds = open_ds(uri)
        assert rc == 0, lib.stk_errmsg().decode()
        for i in range(40):
            assert read(ds, i) == (images[i], labels[i]), i
        lib.stk_dataset_close(ds)


def test_damaged_records(tmp_path):
    img = b"\xff\xd8" + bytes(range(40))
    recs = [mr.pack(1, img), mr.pack(2.5, img), struct.pack("<IfQ", 0, 1.0, 0),
            mr.pack(3, img)]
    rec = tmp_path / "d.rec"
    offs = mr.write_rec(rec, recs, tmp_path / "d.idx")
    rc, ds = open_ds(str(rec))
    assert rc == 0, lib.stk_errmsg().decode()
    assert read(ds, 0) == (img, 1)
    assert read(ds, 1) == (-11, "%s: record 1 (byte %d): the label 2.5 is not an integer "
                                "(stoker's labels are int64 classes)" % (rec, offs[1]))
    assert read(ds, 2) == (-11, "%s: record 2 (byte %d): the record holds 16 bytes, fewer than "
                                "the 24 of an IRHeader" % (rec, offs[2]))
    assert read(ds, 3) == (img, 3)
    lib.stk_dataset_close(ds)
    # the .idx of another file: the open names the first record it misses
    other = mr.write_rec(tmp_path / "other.rec", [mr.pack(0, b"x" * 9)] + recs)
    rc, ds = open_ds("recordio:%s?idx=%s" % (tmp_path / "other.rec", tmp_path / "d.idx"))
    assert rc == -5  # STK_EFORMAT
    assert "other.rec: record 1 (byte %d) is not listed in the index %s" % (
        other[1], tmp_path / "d.idx") in lib.stk_errmsg().decode()
    # an index line past the records
    with open(tmp_path / "d2.idx", "w") as f:
        f.write("".join("%d\t%d\n" % (i, o) for i, o in enumerate(offs + [offs[3] + 4])))
    rc, ds = open_ds("recordio:%s?idx=%s" % (rec, tmp_path / "d2.idx"))
    assert rc == -5
    assert "d2.idx: line 5: offset %d is not where a record of" % (offs[3] + 4) in \
        lib.stk_errmsg().decode()
    # a cut file
    data = open(rec, "rb").read()
    open(rec, "wb").write(data[:offs[3] + 12])
    rc, ds = open_ds("recordio:%s?idx=none" % rec)
    assert rc == -5
    assert "d.rec: record 3 (byte %d): truncated" % offs[3] in lib.stk_errmsg().decode()


def test_photos_same_digest_as_stk_pack(tmp_path):
    photos = photo_subset()
    recs = [mr.pack(label, open(f, "rb").read(), id=i) for i, (f, label) in enumerate(photos)]
    mr.write_rec(tmp_path / "photos.rec", recs, tmp_path / "photos.idx")
    with open(tmp_path / "list.txt", "w") as o:
        for f, label in photos:
            o.write("%s\t%d\n" % (f, label))
    run_stoker("pack", "-q", "list:%s" % (tmp_path / "list.txt"), tmp_path / "ref")
    want = digest(str(tmp_path / "ref"))
    assert digest("recordio:%s" % (tmp_path / "photos.rec")) == want
    assert digest(str(tmp_path / "photos.rec")) == want  # detected
    # im2rec --pack-label style: the label as a one-element vector
    recs = [mr.pack([float(label)], open(f, "rb").read()) for f, label in photos]
    mr.write_rec(tmp_path / "vec.rec", recs)
    assert digest("recordio:%s" % (tmp_path / "vec.rec")) == want
    run_stoker("pack", "-q", "recordio:%s" % (tmp_path / "photos.rec"), tmp_path / "out")
    assert digest(str(tmp_path / "out")) == want
    run_stoker("pack", "-q", "--restart", 4, "recordio:%s" % (tmp_path / "photos.rec"),
               tmp_path / "rst")
    assert "samples:  %d" % len(photos) in run_stoker("inspect", tmp_path / "rst").stdout


def test_loader_skips_each_damaged_record_once(tmp_path):
    import stoker
    jpegs = tiny_jpegs(12)
    bad = {2: mr.pack(0.5, jpegs[2]), 7: struct.pack("<IfQ", 0, 1.0, 0),
           9: struct.pack("<IfQQ", 50, 0.0, 0, 0) + b"\0" * 8}
    recs = [bad.get(i, mr.pack(i % 3, j)) for i, j in enumerate(jpegs)]
    mr.write_rec(tmp_path / "s.rec", recs)
    loader = stoker.Loader("recordio:%s" % (tmp_path / "s.rec"), batch_size=4, shuffle=True,
                           seed=2, transforms=[stoker.RandomResizedCrop(8)], output="numpy",
                           on_error="skip")
    seen = []
    for images, labels, indices in loader.iter_with_indices():
        seen += [int(i) for i in indices]
        assert all(int(l) == int(i) % 3 for l, i in zip(labels, indices))
    assert sorted(seen) == sorted(set(range(12)) - set(bad))
    # (stats() also counts batches the loader already prefetched for the
    # next epoch, so it is at least the number of damaged records)
    assert loader.stats()["skipped"] >= len(bad)
