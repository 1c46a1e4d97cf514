"""The hdf5: reader against files written by h5py (the reference writer):
every pixel and label of (N,H,W[,C]) uint8 arrays, contiguous and
chunks=True+gzip, for every integer label dtype; the exact bytes of
variable-length uint8 records (encoded images); the same digest as the .stk
pack of the same JPEGs in the same order (the photos set); `stoker pack
hdf5:...` (and --restart); and the files the reader refuses or the records
it reports damaged, with the message. C-level cases (libhdf5 as the writer,
threads, truncation under the mapping) are in tests/test_hdf5.c."""
import ctypes as C
import json
import os
import struct
import subprocess

import numpy as np
import pytest

from conftest import STOKER, need_photos, run_stoker

h5py = pytest.importorskip("h5py")

from stk_ctypes import Info, lib, open_ds  # noqa: E402

STK_EDATA = -11



def open_ok(uri):
    rc, ds = open_ds(uri)
    assert rc == 0, lib.stk_errmsg().decode()
    return ds


def open_error(uri):
    rc, ds = open_ds(uri)
    assert rc < 0
    return lib.stk_errmsg().decode()


def read_pixels(uri):
    ds = open_ok(uri)
    info = Info()
    lib.stk_dataset_info_get(ds, C.byref(info))
    assert info.format == b"hdf5"
    images = np.zeros((info.count, info.height, info.width, info.channels), np.uint8)
    labels = np.zeros(info.count, np.int64)
    for i in range(info.count):
        lab = C.c_int64()
        got = lib.stk_dataset_read(ds, i, images[i].ctypes.data, images[i].nbytes, C.byref(lab))
        assert got == images[i].nbytes, lib.stk_errmsg().decode()
        labels[i] = lab.value
    lib.stk_dataset_close(ds)
    return images, labels


def read_record(ds, i):
    """(rc, bytes or the message) of record i's image field."""
    p, n = C.c_void_p(), C.c_size_t()
    rc = lib.stk_dataset_read_field(ds, i, None, C.byref(p), C.byref(n), None)
    if rc:
        return rc, lib.stk_errmsg().decode()
    data = C.string_at(p, n.value)
    lib.stk_free(p)
    return 0, data


def write_vlen(path, blobs, labels, **kw):
    with h5py.File(path, "w") as f:
        d = f.create_dataset("images", (len(blobs),), dtype=h5py.vlen_dtype(np.uint8), **kw)
        for i, b in enumerate(blobs):
            d[i] = np.frombuffer(b, np.uint8)
        f["labels"] = np.asarray(labels)


@pytest.mark.parametrize("layout", [{}, {"chunks": True, "compression": "gzip"}])
@pytest.mark.parametrize("channels", [None, 1, 3, 4])
def test_pixels_match_numpy(tmp_path, layout, channels):
    rng = np.random.default_rng(5)
    shape = (19, 7, 11) + ((channels,) if channels else ())
    images = rng.integers(0, 256, size=shape, dtype=np.uint8)
    labels = rng.integers(0, 50, size=19)
    path = tmp_path / "a.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=images, **layout)
        f.create_dataset("labels", data=labels)
    got, got_labels = read_pixels(f"hdf5:{path}")
    np.testing.assert_array_equal(got, images if channels else images[..., None])
    np.testing.assert_array_equal(got_labels, labels)
    got2, _ = read_pixels(str(path))  # detected
    np.testing.assert_array_equal(got2, got)


@pytest.mark.parametrize("ldtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                    np.uint32])
def test_label_dtypes_and_dataset_names(tmp_path, ldtype):
    images = np.arange(6 * 2 * 3, dtype=np.uint8).reshape(6, 2, 3)
    labels = np.array([0, 3, 1, 127, 2, 5]).astype(ldtype)
    path = tmp_path / "n.hdf5"
    with h5py.File(path, "w") as f:
        g = f.create_group("train")
        g["x"] = images
        g["y"] = labels
    got, got_labels = read_pixels(f"hdf5:{path}?images=/train/x&labels=train/y")
    np.testing.assert_array_equal(got[..., 0], images)
    np.testing.assert_array_equal(got_labels, labels.astype(np.int64))


@pytest.mark.parametrize("layout", [{}, {"chunks": True, "compression": "gzip"}])
def test_vlen_bytes_identical(tmp_path, layout):
    rng = np.random.default_rng(9)
    blobs = [bytes(rng.integers(0, 256, int(k), dtype=np.uint8))
             for k in rng.integers(1, 9000, 40)]
    labels = rng.integers(0, 7, 40)
    path = tmp_path / "v.h5"
    write_vlen(path, blobs, labels, **layout)
    ds = open_ok(f"hdf5:{path}")
    for i, b in enumerate(blobs):
        rc, got = read_record(ds, i)
        assert rc == 0, got
        assert got == b
        lab = C.c_int64()
        assert lib.stk_dataset_label(ds, i, C.byref(lab)) == 0 and lab.value == labels[i]
    lib.stk_dataset_close(ds)


def photos_subset(n_per_class=3):
    root = need_photos("train")
    files, labels = [], []
    for c, cls in enumerate(sorted(os.listdir(os.path.join(root, "train")))):
        names = sorted(os.listdir(os.path.join(root, "train", cls)))[:n_per_class]
        for name in names:
            files.append(os.path.join(root, "train", cls, name))
            labels.append(c)
    return files, labels


def digest(uri, *extra):
    p = run_stoker("bench", uri, "--pipeline", "imagenet-train-few", "--batch", 8, "--threads",
                   2, "--digest", *extra)
    return [l.split()[1] for l in p.stdout.splitlines() if l.startswith("digest: ")][0]


def test_same_digest_as_stk_pack_of_the_same_files(tmp_path):
    """The photos' JPEGs as vlen uint8 records (h5py), and the same files in
    the same order as a list packed to .stk: same bench digest; the
    records are the files byte for byte; `stoker pack hdf5:` round-trips."""
    files, labels = photos_subset()
    blobs = [open(f, "rb").read() for f in files]
    h5 = tmp_path / "photos.h5"
    write_vlen(h5, blobs, np.array(labels, np.int64))
    listing = tmp_path / "photos.txt"
    listing.write_text("".join("%s\t%d\n" % (f, l) for f, l in zip(files, labels)))
    run_stoker("pack", "list:%s" % listing, tmp_path / "ref")
    want = digest("stk:%s" % (tmp_path / "ref"))
    assert digest("hdf5:%s" % h5) == want
    assert digest(str(h5), "--seed", 3) == digest("stk:%s" % (tmp_path / "ref"), "--seed", 3)

    ds = open_ok(h5)
    for i, b in enumerate(blobs):
        assert read_record(ds, i) == (0, b)
    lib.stk_dataset_close(ds)

    p = run_stoker("pack", "hdf5:%s" % h5, tmp_path / "packed")
    assert "packed %d records" % len(blobs) in p.stdout
    assert digest("stk:%s" % (tmp_path / "packed")) == want
    for i in (0, len(blobs) - 1):
        cat = subprocess.run([STOKER, "cat", "stk:%s" % (tmp_path / "packed"), str(i)],
                             capture_output=True, check=True, timeout=300)
        assert cat.stdout == blobs[i]
    run_stoker("pack", "hdf5:%s" % h5, tmp_path / "restart", "--restart", 4)
    assert digest("stk:%s" % (tmp_path / "restart")) == digest(
        "stk:%s" % (tmp_path / "packed"))


def test_refused_files(tmp_path):
    p = tmp_path / "f.h5"
    with h5py.File(p, "w") as f:
        f["images"] = np.zeros((4, 3, 3), np.float32)
        f["labels"] = np.zeros(4, np.int64)
        f["u8"] = np.zeros((4, 3, 3), np.uint8)
        f["flat"] = np.zeros((4, 9), np.uint8)
        f["flabels"] = np.zeros(4, np.float32)
        f["five"] = np.zeros(5, np.int64)
        f["strings"] = np.array([b"a", b"b", b"c", b"d"], dtype=h5py.string_dtype())
    assert "%s: images dataset /images has type float32" % p in open_error(p)
    assert "images dataset /flat of uint8 has rank 2 (N,H,W or N,H,W,C expected)" in \
        open_error(f"hdf5:{p}?images=/flat")
    assert "labels dataset /flabels holds float32 values: float labels are refused" in \
        open_error(f"hdf5:{p}?images=/u8&labels=/flabels")
    assert "labels dataset /five holds 5 labels but images dataset /u8 holds 4 images" in \
        open_error(f"hdf5:{p}?images=/u8&labels=/five")
    assert "no images dataset /missing" in open_error(f"hdf5:{p}?images=/missing")
    assert "no labels dataset /labelz" in open_error(f"hdf5:{p}?images=/u8&labels=/labelz")
    assert "images dataset /strings has type string" in open_error(f"hdf5:{p}?images=/strings")
    np.save(tmp_path / "x.npy", np.zeros(3))
    os.rename(tmp_path / "x.npy", tmp_path / "x.h5")
    assert "x.h5: not an HDF5 file" in open_error(tmp_path / "x.h5")
    # A contiguous array cut short: libhdf5 or the reader says "truncated".
    good = tmp_path / "g.h5"
    with h5py.File(good, "w") as f:
        f["images"] = np.zeros((50, 8, 8), np.uint8)
        f["labels"] = np.zeros(50, np.int64)
    data = good.read_bytes()
    (tmp_path / "cut.h5").write_bytes(data[:len(data) - 64])
    msg = open_error(tmp_path / "cut.h5")
    assert "cut.h5" in msg and "truncated" in msg


def test_damaged_records_are_named_and_skipped_once(tmp_path):
    """A corrupt global heap: the records whose references break are
    STK_EDATA naming file, dataset, record, element and collection offsets;
    the others read; `bench --on-error skip` skips each exactly once."""
    files, labels = photos_subset(2)
    blobs = [open(f, "rb").read() for f in files]
    path = tmp_path / "d.h5"
    write_vlen(path, blobs, np.array(labels))
    with h5py.File(path, "r") as f:
        elems = f["images"].id.get_offset()
    data = bytearray(path.read_bytes())
    # record 1: an object index no object has
    struct.pack_into("<I", data, elems + 16 + 12, 999)
    # record 2: its collection's signature destroyed
    coll2 = struct.unpack_from("<Q", data, elems + 2 * 16 + 4)[0]
    assert data[coll2:coll2 + 4] == b"GCOL"
    data[coll2:coll2 + 4] = b"XXXX"
    path.write_bytes(bytes(data))
    bad = {1, 2} | {i for i in range(len(blobs))
                    if struct.unpack_from("<Q", data, elems + i * 16 + 4)[0] == coll2}
    ds = open_ok(path)
    for i in range(len(blobs)):
        rc, got = read_record(ds, i)
        if i in bad:
            assert rc == STK_EDATA
            assert got.startswith("%s: dataset /images, record %d (element at byte %d, global "
                                  "heap collection at byte " % (path, i, elems + 16 * i))
            # record 1 may share record 2's collection (small photos): the
            # destroyed signature is then found first
            in_coll2 = struct.unpack_from("<Q", data, elems + i * 16 + 4)[0] == coll2
            assert ('no "GCOL" signature' in got) if in_coll2 else \
                ("holds no object with its index" in got)
        else:
            assert (rc, got) == (0, blobs[i])
    lib.stk_dataset_close(ds)
    p = run_stoker("bench", path, "--pipeline", "imagenet-train-few", "--batch", 4,
                   "--on-error", "skip", "--json")
    report = json.loads(p.stdout)
    assert report["skipped"] == len(bad)
    assert report["samples"] == len(blobs) - len(bad)
    p = run_stoker("bench", path, "--pipeline", "imagenet-train-few", "--batch", 4, check=False)
    assert p.returncode != 0 and "dataset /images, record" in p.stderr


def test_userblock_file(tmp_path):
    """A user block shifts the superblock; heap addresses stay relative to it."""
    blobs = [b"\x01" * 10, b"\x02" * 3000, b"hello"]
    path = tmp_path / "ub.h5"
    with h5py.File(path, "w", userblock_size=1024) as f:
        d = f.create_dataset("images", (3,), dtype=h5py.vlen_dtype(np.uint8))
        for i, b in enumerate(blobs):
            d[i] = np.frombuffer(b, np.uint8)
        f["labels"] = np.arange(3)
    ds = open_ok(f"hdf5:{path}")
    assert [read_record(ds, i) for i in range(3)] == [(0, b) for b in blobs]
    lib.stk_dataset_close(ds)


@pytest.mark.parametrize("layout", [{}, {"chunks": (4, 8, 8, 3), "compression": "gzip"}])
def test_raw_pixels_same_digest_as_npy(tmp_path, layout):
    """The same uint8 array saved by numpy.save and by h5py: the npy: and
    hdf5: readers give the same batches (bench --digest, a pipeline that
    crops and flips), and `stoker pack hdf5:` stores the same pixels."""
    rng = np.random.default_rng(11)
    images = rng.integers(0, 256, (37, 20, 24, 3), dtype=np.uint8)
    labels = rng.integers(0, 5, 37)
    np.save(tmp_path / "images.npy", images)
    np.save(tmp_path / "labels.npy", labels)
    h5 = tmp_path / "raw.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("images", data=images, **layout)
        f.create_dataset("labels", data=labels)
    spec = "random_resized_crop 16 | flip 0.5 | to u8 hwc"

    def dig(uri):
        p = run_stoker("bench", uri, "--pipeline", spec, "--batch", 8, "--threads", 2,
                       "--digest")
        return [l.split()[1] for l in p.stdout.splitlines() if l.startswith("digest: ")][0]

    assert dig("hdf5:%s" % h5) == dig("npy:%s" % tmp_path)
    run_stoker("pack", "hdf5:%s" % h5, tmp_path / "packed")
    assert dig("stk:%s" % (tmp_path / "packed")) == dig("npy:%s" % tmp_path)


FORK_SCRIPT = r'''
import os, signal, sys, threading, time
import numpy as np
import stoker

path, n = sys.argv[1], int(sys.argv[2])
ds = stoker.open("hdf5:" + path)
want = ds[0][0].copy()
stop = False
def busy():  # the parent keeps libhdf5 busy while it forks
    i = 0
    while not stop:
        ds[i % len(ds)]
        i += 1
t = threading.Thread(target=busy, daemon=True)
t.start()
pids = []
for k in range(n):
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            px, lab = ds[0]
            code = 0 if np.array_equal(px, want) and lab == 7 else 2
        finally:
            os._exit(code)
    pids.append(pid)
    time.sleep(0.002)
stop = True
t.join()
done = hung = bad = 0
deadline = time.monotonic() + 60
for pid in pids:
    while True:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            ok = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            done, bad = done + ok, bad + (not ok)
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            hung += 1
            break
        time.sleep(0.01)
print("done %d hung %d bad %d" % (done, hung, bad))
'''


def test_chunked_dataset_reads_in_forked_children(tmp_path):
    """40 children forked while a parent thread reads a chunked, gzip'd
    dataset through libhdf5 (under the reader's process-wide lock): each
    child reads ds[0] with the right pixels and label. Before the fork
    handler, the child inherited the lock held by the busy thread and about
    half of the children hung in ds[0]."""
    from module_util import PY_PATH
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, size=(64, 48, 48, 3), dtype=np.uint8)
    path = str(tmp_path / "chunked.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=images, chunks=(1, 48, 48, 3), compression="gzip")
        f["labels"] = (np.arange(64) + 7) % 10
    script = tmp_path / "fork.py"
    script.write_text(FORK_SCRIPT)
    env = dict(os.environ, PYTHONPATH=PY_PATH)
    p = subprocess.run(["/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3",
                        str(script), path, "40"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["done", "40", "hung", "0", "bad", "0"], p.stdout + p.stderr
