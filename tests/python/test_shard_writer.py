"""stoker.ShardWriter: shards written from Python, read back value by value.

References: NumPy arrays the test builds, PIL for the encoded images, the
library's own reader through ctypes (stk_dataset_read_field, field_info)
and an independent reader of the file bytes written here from
docs/format.md alone (struct only: the checksums are left to `stoker
verify`). Covers every field type, a varying boxes field with 0 and
many rows, a dataset made by a Python generator (as a Hugging Face dataset
would give it), tuples in field order, sharding by record count, the label
map, stoker.open / stoker.Loader / `stoker inspect` / `stoker verify` on
the result, and the errors: wrong types and shapes named by record and
field, a ragged raw image in a fixed-shape field, unknown or missing keys,
closing twice, writing after close, and an exception inside `with` leaving
nothing behind.
"""
import ctypes as C
import io
import os
import struct

import numpy as np
import pytest

import stoker
from conftest import STOKER, run_stoker
from stk_ctypes import lib

PIL = pytest.importorskip("PIL.Image")


class FieldInfo(C.Structure):
    """stk_field_info (include/stoker/stoker.h)."""
    _fields_ = [("name", C.c_char_p), ("type", C.c_int), ("ndim", C.c_uint32),
                ("dims", C.c_uint32 * 4), ("compressed", C.c_int),
                ("reserved_", C.c_uint64 * 2)]


lib.stk_dataset_field_count.argtypes = [C.c_void_p]
lib.stk_dataset_field_count.restype = C.c_uint32
lib.stk_dataset_field_info.argtypes = [C.c_void_p, C.c_uint32, C.POINTER(FieldInfo)]


class CDataset:
    """The C reader through ctypes: field info and read_field."""

    def __init__(self, uri):
        self.ds = C.c_void_p()
        rc = lib.stk_dataset_open(str(uri).encode(), None, C.byref(self.ds))
        assert rc == 0, lib.stk_errmsg().decode()

    def close(self):
        lib.stk_dataset_close(self.ds)

    def fields(self):
        out = {}
        for i in range(lib.stk_dataset_field_count(self.ds)):
            fi = FieldInfo()
            assert lib.stk_dataset_field_info(self.ds, i, C.byref(fi)) == 0
            out[fi.name.decode()] = (fi.type, tuple(fi.dims[:fi.ndim]), bool(fi.compressed))
        return out

    def read(self, index, name):
        data, size, shape = C.c_void_p(), C.c_size_t(), (C.c_uint32 * 3)()
        rc = lib.stk_dataset_read_field(self.ds, index, name.encode(), C.byref(data),
                                        C.byref(size), shape)
        if rc != 0:
            raise stoker.StokerError(lib.stk_errmsg().decode())
        raw = C.string_at(data, size.value) if size.value else b""
        lib.stk_free(data)
        return raw, tuple(shape)


# -- an independent reader of the file bytes (docs/format.md) ---------------

def read_shard(path):
    """(fields, metadata, records) of one shard, from its bytes: fields a
    list of (name, type, storage, ndim, dims, elem_size, fixed_size),
    records a list of {name: bytes}."""
    with open(path, "rb") as f:
        b = f.read()
    assert b[:8] == b"\x89STK\r\n\x1a\n" and b[-8:] == b"STKFOOT\n"
    vmajor, vminor, header_size, data_offset, nfields, nmeta = struct.unpack_from(
        "<HHIQII", b, 8)
    assert vmajor == 1
    index_offset, index_size, n, data_end = struct.unpack_from("<QQQQ", b, len(b) - 64)
    fields = []
    for i in range(nfields):
        e = 64 + 64 * i
        name = b[e:e + 32].split(b"\0")[0].decode()
        ftype, storage, comp, ndim = struct.unpack_from("<BBBB", b, e + 32)
        dims = struct.unpack_from("<4I", b, e + 36)[:ndim]
        elem, fixed = struct.unpack_from("<IQ", b, e + 52)
        fields.append((name, ftype, storage, ndim, dims, elem, fixed, comp))
    at = 64 + 64 * nfields
    meta = {}
    for _ in range(nmeta):
        (kl,) = struct.unpack_from("<I", b, at)
        key = b[at + 4:at + 4 + kl].decode()
        at += 4 + kl
        (vl,) = struct.unpack_from("<I", b, at)
        meta[key] = b[at + 4:at + 4 + vl].decode()
        at += 4 + vl
    var = [f for f in fields if f[2] == 0]
    pad8 = lambda x: (x + 7) // 8 * 8  # noqa: E731
    at = index_offset
    offsets = struct.unpack_from("<%dQ" % n, b, at)
    at += 8 * n
    lengths = struct.unpack_from("<%dI" % (n * len(var)), b, at)
    at += pad8(4 * n * len(var))
    at += 8 * n  # checksums
    columns = {}
    for f in fields:
        if f[2] == 1:
            columns[f[0]] = (at, f[6])
            at += pad8(n * f[6])
    assert at - index_offset == index_size
    records = []
    for r in range(n):
        rec, pos = {}, offsets[r]
        for v, f in enumerate(var):
            ln = lengths[r * len(var) + v]
            rec[f[0]] = b[pos:pos + ln]
            pos += ln
        for name, (col, size) in columns.items():
            rec[name] = b[col + r * size:col + (r + 1) * size]
        records.append(rec)
    return fields, meta, records, (vmajor, vminor)


# -- the records ------------------------------------------------------------

FIELDS = {
    "image": "image",
    "label": "int64",
    "raw": "raw_image",
    "mask": {"type": "raw_image", "shape": (6, 5, 1), "zstd_level": 3},
    "vec": ("float32", (3,)),
    "boxes": ("float32", (None, 4)),
    "box_labels": ("int64", (None,)),
    "blob": "bytes",
    "caption": "string",
    "grid": ("int64", (2, 3)),
}


def png_bytes(arr):
    buf = io.BytesIO()
    PIL.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def make(i):
    """Record i as Python/NumPy values (the reference)."""
    rng = np.random.default_rng(i)
    img = rng.integers(0, 256, (7 + i % 3, 9, 3), dtype=np.uint8)
    k = i % 5
    return {
        "image": png_bytes(img),
        "label": i % 3,
        "raw": rng.integers(0, 256, (1 + i % 4, 2 + i % 3, 1 + 2 * (i % 2)), dtype=np.uint8),
        "mask": (np.arange(30, dtype=np.uint8).reshape(6, 5, 1) + i) % 4,
        "vec": np.array([i, -i / 3, 1e-3 * i], dtype=np.float64),  # cast to float32
        "boxes": rng.uniform(0, 100, (k, 4)).astype(np.float32),
        "box_labels": list(range(i, i + k)),
        "blob": rng.bytes(i * 7 % 50),
        "caption": "caption %d — é ✓" % i,
        "grid": np.arange(6).reshape(2, 3) + (i << 40),
    }


def generator(n):
    """A dataset that exists only as Python code (a Hugging Face dataset
    yields dicts like these)."""
    for i in range(n):
        yield make(i)


def expected_bytes(name, value):
    """The bytes a reader must give back for field `name`."""
    spec = FIELDS[name]
    t = spec if isinstance(spec, str) else spec[0] if isinstance(spec, tuple) else spec["type"]
    if t in ("image", "bytes"):
        return bytes(value)
    if t == "string":
        return value.encode()
    if t == "raw_image":
        return np.ascontiguousarray(value).tobytes()
    return np.asarray(value, dtype=np.int64 if t == "int64" else np.float32).tobytes()


N = 13


@pytest.fixture
def written(tmp_path):
    dest = tmp_path / "out"
    with stoker.ShardWriter(dest, fields=FIELDS, records_per_shard=4,
                            class_names=["cat", "dog", "fish"],
                            metadata={"source": "test generator"}) as w:
        assert w.write_many(generator(N)) == N
        assert not os.path.exists(dest / "shard-00000.stk")  # nothing before close
    assert w.closed and w.records == N
    assert w.close() == {"records": N, "shards": 4, "bytes": w.close()["bytes"]}
    return dest


def test_round_trip_every_type_through_the_c_reader(written):
    ds = CDataset(written)
    try:
        got = ds.fields()
        assert list(got) == list(FIELDS)
        assert got["boxes"] == (5, (0, 4), False)
        assert got["box_labels"] == (4, (0,), False)
        assert got["mask"] == (3, (6, 5, 1), True)
        assert got["grid"] == (4, (2, 3), False)
        assert got["label"] == (4, (), False)
        for i in range(N):
            rec = make(i)
            for name, value in rec.items():
                data, shape = ds.read(i, name)
                assert data == expected_bytes(name, value), (i, name)
                if name in ("raw", "mask"):
                    assert shape == value.shape
            boxes = np.frombuffer(ds.read(i, "boxes")[0], np.float32).reshape(-1, 4)
            np.testing.assert_array_equal(boxes, rec["boxes"])
            assert boxes.shape == (i % 5, 4)
    finally:
        ds.close()


def test_file_bytes_match_the_format_document(written):
    """Read with a parser written from docs/format.md alone."""
    shards = sorted(os.listdir(written))
    assert shards == ["shard-%05d.stk" % k for k in range(4)]
    i = 0
    for k, name in enumerate(shards):
        fields, meta, records, version = read_shard(written / name)
        assert version == (1, 2)  # a varying field: format 1.2
        assert meta["shard"] == "%d/4" % k and len(meta["shard_set"]) == 32
        assert meta["class_names"] == "cat\ndog\nfish"
        assert meta["source"] == "test generator"
        assert meta["created_by"].startswith("stoker.ShardWriter ")
        byname = {f[0]: f for f in fields}
        # type, storage, ndim, dims, element size, fixed size
        assert byname["boxes"][1:7] == (5, 0, 2, (0, 4), 4, 0)
        assert byname["box_labels"][1:7] == (4, 0, 1, (0,), 8, 0)
        assert byname["label"][1:7] == (4, 1, 0, (), 8, 8)
        assert byname["grid"][1:7] == (4, 1, 2, (2, 3), 8, 48)
        for rec in records:
            ref = make(i)
            for f in ("image", "label", "vec", "boxes", "box_labels", "blob", "caption", "grid"):
                assert rec[f] == expected_bytes(f, ref[f]), (i, f)
            h, w, c = struct.unpack_from("<3I", rec["raw"])
            assert (h, w, c) == ref["raw"].shape
            assert rec["raw"][12:] == ref["raw"].tobytes()
            i += 1
    assert i == N


def test_python_reader_loader_and_cli(written):
    ds = stoker.open(written)
    assert len(ds) == N and ds.classes == ["cat", "dog", "fish"]
    for i in range(N):
        pixels, label = ds[i]
        ref = np.asarray(PIL.open(io.BytesIO(make(i)["image"])).convert("RGB"))
        np.testing.assert_array_equal(pixels, ref)
        assert label == i % 3
    loader = stoker.Loader(written, batch_size=4, transforms=[stoker.Resize((8, 8))],
                           output="numpy", dtype="uint8", layout="hwc")
    labels = np.concatenate([np.asarray(lab) for _, lab in loader])
    np.testing.assert_array_equal(labels, [i % 3 for i in range(N)])
    out = run_stoker("inspect", written).stdout
    assert "boxes" in out and "[*x4]" in out and "box_labels" in out and "[*]" in out
    assert "mask" in out and "[6x5x1], zstd" in out
    run_stoker("verify", written, "--decode")


def test_tuples_in_field_order_and_defaults(tmp_path):
    dest = tmp_path / "t"
    w = stoker.ShardWriter(dest, {"x": "float32", "ids": ("int64", [None]), "s": "string"})
    w.write((1.5, [], "a"))
    w.write([np.float32(-2), np.array([7, 8, 9], np.uint8), ""])
    w.write({"x": 3, "ids": np.int64(4).reshape(1), "s": "ü"})
    assert w.fields == {"x": ("float32", ()), "ids": ("int64", (None,)), "s": ("string", ())}
    res = w.close()
    assert res["records"] == 3 and res["shards"] == 1
    _, meta, recs, version = read_shard(dest / "shard-00000.stk")
    assert version == (1, 2)
    assert [np.frombuffer(r["x"], np.float32)[0] for r in recs] == [1.5, -2, 3]
    assert [np.frombuffer(r["ids"], np.int64).tolist() for r in recs] == [[], [7, 8, 9], [4]]
    assert [r["s"].decode() for r in recs] == ["a", "", "ü"]
    # No image field: opens, has no shape, and a Loader says why it cannot batch it.
    assert len(stoker.open(dest)) == 3
    # Without a varying field: format 1.1, as every shard before.
    dest2 = tmp_path / "fixed"
    with stoker.ShardWriter(dest2, {"x": ("float32", (2,))}) as w2:
        w2.write({"x": [1, 2]})
    assert read_shard(dest2 / "shard-00000.stk")[3] == (1, 1)


def test_sharding_by_size(tmp_path):
    dest = tmp_path / "sz"
    with stoker.ShardWriter(dest, {"b": "bytes"}, shard_size=64 << 10) as w:
        for i in range(40):
            w.write({"b": bytes([i]) * 10000})
    shards = sorted(os.listdir(dest))
    assert len(shards) > 4 and w.close()["shards"] == len(shards)
    got = [r["b"] for s in shards for r in read_shard(dest / s)[2]]
    assert got == [bytes([i]) * 10000 for i in range(40)]
    run_stoker("verify", dest)


# -- errors -----------------------------------------------------------------

@pytest.fixture
def w(tmp_path):
    writer = stoker.ShardWriter(tmp_path / "e", fields=FIELDS)
    writer.write(make(0))
    writer.write(make(1))
    yield writer
    if not writer.closed:
        writer.abort()


@pytest.mark.parametrize("field, value, exc, words", [
    ("image", "not bytes", TypeError, "expected bytes, got str"),
    ("image", b"GIF89 but not really an image", ValueError, "not an encoded image"),
    ("label", 1.5, TypeError, "expected integers"),
    ("label", [1, 2], ValueError, "shape (2,), the field's is () (a scalar)"),
    ("label", 2 ** 64 - 1, ValueError, "does not fit in int64"),
    ("vec", [1, 2], ValueError, "shape (2,), the field's is (3,)"),
    ("vec", "abc", TypeError, "expected numbers"),
    ("boxes", np.zeros((2, 3), np.float32), ValueError, "the field's is (None, 4)"),
    ("boxes", np.zeros(8, np.float32), ValueError, "the field's is (None, 4)"),
    ("box_labels", [[1, 2]], ValueError, "the field's is (None)"),
    ("raw", np.zeros((4, 4, 3), np.float32), TypeError, "expected dtype uint8"),
    ("raw", b"\0" * 48, TypeError, "expected a uint8 numpy array"),
    ("raw", np.zeros((4, 4, 5), np.uint8), ValueError, "1 to 4 channels"),
    ("raw", np.zeros((4,), np.uint8), ValueError, "expected shape (H, W, C) or (H, W)"),
    ("mask", np.zeros((6, 4, 1), np.uint8), ValueError, "shape (6, 4, 1), the field's is (6, 5, 1)"),
    ("caption", b"bytes", TypeError, "expected str"),
    ("caption", "\udcff", ValueError, "UTF-8"),
    ("blob", 42, TypeError, "expected bytes"),
    ("grid", np.zeros((3, 2), np.int64), ValueError, "the field's is (2, 3)"),
])
def test_bad_values_name_the_record_and_field(w, field, value, exc, words):
    rec = make(2)
    rec[field] = value
    with pytest.raises(exc) as e:
        w.write(rec)
    msg = str(e.value)
    assert "record 2, field %r" % field in msg, msg
    assert words in msg, msg
    w.write(make(2))  # still usable: the bad record was not written
    assert w.records == 3
    assert w.close()["records"] == 3


def test_ragged_raw_images_in_a_fixed_field(tmp_path):
    with pytest.raises(ValueError, match=r"record 1, field 'px' \(raw_image\): shape \(3, 4, 3\), "
                                         r"the field's is \(4, 4, 3\)"):
        with stoker.ShardWriter(tmp_path / "r", {"px": ("raw_image", (4, 4, 3))}) as w:
            w.write({"px": np.zeros((4, 4, 3), np.uint8)})
            w.write({"px": np.zeros((3, 4, 3), np.uint8)})
    assert os.listdir(tmp_path / "r") == []  # the exception left nothing


def test_record_shape_errors(w):
    with pytest.raises(ValueError, match="record 2: missing field 'blob'; unknown key 'blobb'"):
        rec = make(2)
        rec["blobb"] = rec.pop("blob")
        w.write(rec)
    with pytest.raises(ValueError, match="record 2: 2 values for 10 fields"):
        w.write((1, 2))
    with pytest.raises(TypeError, match="record 2: a dict or a tuple"):
        w.write(5)


def test_close_twice_write_after_close_and_abort(tmp_path):
    w = stoker.ShardWriter(tmp_path / "c", {"x": "int64"})
    w.write({"x": 1})
    first = w.close()
    assert w.close() == first  # a second close returns the same
    with pytest.raises(stoker.StateError, match="closed"):
        w.write({"x": 2})
    a = stoker.ShardWriter(tmp_path / "a", {"x": "int64"}, records_per_shard=1)
    for i in range(3):
        a.write({"x": i})
    assert len(os.listdir(tmp_path / "a")) == 3  # temporaries
    a.abort()
    assert os.listdir(tmp_path / "a") == []
    with pytest.raises(stoker.StateError, match="aborted"):
        a.close()
    # No record: nothing written, and closing says so.
    e = stoker.ShardWriter(tmp_path / "empty", {"x": "int64"})
    with pytest.raises(stoker.InvalidArgument, match="no records"):
        e.close()
    assert os.listdir(tmp_path / "empty") == []


def test_a_writer_never_closed_is_aborted_with_a_warning(tmp_path):
    w = stoker.ShardWriter(tmp_path / "g", {"x": "int64"})
    w.write({"x": 1})
    with pytest.warns(ResourceWarning, match="never closed: its 1 records were discarded"):
        del w
        import gc
        gc.collect()
    assert os.listdir(tmp_path / "g") == []


def test_exception_inside_with_leaves_no_shard(tmp_path):
    dest = tmp_path / "x"

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with stoker.ShardWriter(dest, {"b": "bytes"}, records_per_shard=2) as w:
            for i in range(7):
                w.write({"b": b"abc"})
            raise Boom()
    assert os.listdir(dest) == []
    # ... and the directory takes a new writer.
    with stoker.ShardWriter(dest, {"b": "bytes"}) as w:
        w.write({"b": b"x"})
    assert os.listdir(dest) == ["shard-00000.stk"]


def test_two_writers_into_one_directory(tmp_path):
    """The second is refused while the first writes; neither loses a file."""
    a = stoker.ShardWriter(tmp_path / "d", {"x": "int64"})
    a.write({"x": 1})
    with pytest.raises(stoker.InvalidArgument, match="being written by this process"):
        stoker.ShardWriter(tmp_path / "d", {"x": "int64"})
    assert a.close()["records"] == 1
    assert os.listdir(tmp_path / "d") == ["shard-00000.stk"]


def test_schema_and_destination_errors(tmp_path, written):
    bad = [
        ({"x": "int32"}, ValueError, "unknown type 'int32'"),
        ({"x": ("float32", (4, None))}, ValueError, "only the first dimension"),
        ({"x": ("image", (3,))}, ValueError, "no shape"),
        ({"x": ("raw_image", (3, 3))}, ValueError, "(height, width, channels)"),
        ({"x": 5}, TypeError, "give a type name"),
        ({"x": {"type": "raw_image", "zstd": 3}}, ValueError, "optionally 'shape' and 'zstd_level'"),
        ({"x": {"type": "bytes", "zstd_level": 3}}, ValueError, "raw_image fields only"),
        ({"a" * 40: "bytes"}, ValueError, "1 to 31 bytes"),
        ({}, TypeError, "non-empty dict"),
    ]
    for fields, exc, words in bad:
        with pytest.raises(exc) as e:
            stoker.ShardWriter(tmp_path / "s", fields)
        assert words in str(e.value), (fields, str(e.value))
    with pytest.raises(stoker.InvalidArgument, match="already holds shards"):
        stoker.ShardWriter(written, {"x": "int64"})
    with pytest.raises(stoker.InvalidArgument, match="the writer's own"):
        stoker.ShardWriter(tmp_path / "m", {"x": "int64"}, metadata={"shard": "0/1"})
    with pytest.raises(TypeError, match="metadata keys and values must be str"):
        stoker.ShardWriter(tmp_path / "m", {"x": "int64"}, metadata={"k": 1})


def test_pack_carries_every_field(written, tmp_path):
    """`stoker pack` of the multi-field set keeps every field."""
    out = tmp_path / "packed"
    run_stoker("pack", written, out, "-q")
    ds = CDataset(out)
    try:
        names = list(ds.fields())
        assert names[:4] == ["image", "label", "source_index", "source_name"]
        assert names[4:] == [n for n in FIELDS if n not in ("image", "label")]
        for i in range(N):
            ref = make(i)
            for name in FIELDS:
                assert ds.read(i, name)[0] == expected_bytes(name, ref[name]), (i, name)
    finally:
        ds.close()
    run_stoker("verify", out)
    assert os.path.exists(STOKER)
