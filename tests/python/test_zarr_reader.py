"""The zarr: reader against groups written by zarr-python (Debian's
python3-zarr 2.x with numcodecs, the independent writer): every pixel and
label read through stk_dataset_read for each compressor (none, zstd, blosc
with lz4/zstd and each shuffle, zlib), chunk sizes 1, 7 and N, '/'
separated chunk keys, each label dtype, missing chunks (fill_value), query
names and detection; the arrays it refuses at open and the chunk damage it
reports at read (STK_EDATA naming the chunk file and sample, each sample of
a damaged chunk skipped once); and the same digest from zarr:, npy: and the
.stk pack of the same photos. C-level parser cases are in tests/test_zarr.c."""
import ctypes as C
import json
import os

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")
numcodecs = pytest.importorskip("numcodecs")

from conftest import need_photos, run_stoker  # noqa: E402

from stk_ctypes import Info, lib, open_ds  # noqa: E402

STK_ENOENT, STK_EFORMAT, STK_EUNSUPPORTED, STK_EDATA, STK_EINVAL = -4, -5, -10, -11, -1



def open_error(uri):
    rc, ds = open_ds(uri)
    assert rc < 0, "open of %s succeeded" % uri
    return rc, lib.stk_errmsg().decode()


def read_all(uri, order=None):
    rc, ds = open_ds(uri)
    assert rc == 0, lib.stk_errmsg().decode()
    info = Info()
    lib.stk_dataset_info_get(ds, C.byref(info))
    shape = (info.height, info.width, info.channels)
    images = np.zeros((info.count,) + shape, np.uint8)
    labels = np.zeros(info.count, np.int64)
    for i in order if order is not None else range(info.count):
        lab = C.c_int64()
        got = lib.stk_dataset_read(ds, i, images[i].ctypes.data, images[i].nbytes, C.byref(lab))
        assert got == images[i].nbytes, lib.stk_errmsg().decode()
        labels[i] = lab.value
    fmt = info.format.decode()
    lib.stk_dataset_close(ds)
    return fmt, images, labels


def read_one(ds, i, nbytes):
    buf = np.zeros(nbytes, np.uint8)
    lab = C.c_int64()
    got = lib.stk_dataset_read(ds, i, buf.ctypes.data, nbytes, C.byref(lab))
    return got, (lib.stk_errmsg().decode() if got < 0 else None)


def write_group(path, images, labels, chunk, compressor, lcompressor=None, lchunk=None, **kw):
    store = zarr.DirectoryStore(str(path), **kw)
    g = zarr.group(store=store, overwrite=True)
    g.create_dataset("images", data=images, chunks=(chunk,) + images.shape[1:],
                     compressor=compressor)
    g.create_dataset("labels", data=labels, chunks=(lchunk or 10,), compressor=lcompressor)
    return g


COMPRESSORS = {
    "none": None,
    "zstd": numcodecs.Zstd(level=3),
    "blosc-lz4-noshuffle": numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.NOSHUFFLE),
    "blosc-lz4-shuffle": numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
    "blosc-zstd-bitshuffle": numcodecs.Blosc(cname="zstd", clevel=3,
                                             shuffle=numcodecs.Blosc.BITSHUFFLE),
    "blosc-blosclz": numcodecs.Blosc(cname="blosclz", clevel=9, shuffle=numcodecs.Blosc.SHUFFLE),
    "zlib": numcodecs.Zlib(level=6),
}


def sample_arrays(n=23, channels=3, seed=7):
    rng = np.random.default_rng(seed)
    # smooth-ish content so the codecs actually compress, plus noise
    base = np.arange(9 * 13, dtype=np.uint8).reshape(9, 13)
    shape = (n, 9, 13) + ((channels,) if channels else ())
    images = rng.integers(0, 256, size=shape, dtype=np.uint8)
    images[::2] = (base[None, :, :, None] if channels else base[None]) + np.uint8(3)
    labels = rng.integers(0, 10, size=n).astype(np.int64)
    return images, labels


@pytest.mark.parametrize("codec", sorted(COMPRESSORS))
@pytest.mark.parametrize("chunk", [1, 7, 23])
def test_zarr_pixels_identical(tmp_path, codec, chunk):
    images, labels = sample_arrays()
    g = write_group(tmp_path / "g", images, labels, chunk, COMPRESSORS[codec],
                    lcompressor=COMPRESSORS[codec])
    ref = g["images"][:]  # zarr's own reading
    np.testing.assert_array_equal(ref, images)
    for uri in (f"zarr:{tmp_path}/g", str(tmp_path / "g")):
        fmt, got, got_labels = read_all(uri)
        assert fmt == "zarr"
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(got_labels, labels)
    # a random order exercises the per-thread chunk cache's misses and hits
    order = np.random.default_rng(1).permutation(len(images))
    _, got, _ = read_all(f"zarr:{tmp_path}/g", order)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("channels", [None, 1, 4])
def test_zarr_shapes(tmp_path, channels):
    images, labels = sample_arrays(n=11, channels=channels)
    write_group(tmp_path / "g", images, labels, 4, numcodecs.Zstd())
    _, got, got_labels = read_all(f"zarr:{tmp_path}/g")
    np.testing.assert_array_equal(got, images if channels else images[..., None])
    np.testing.assert_array_equal(got_labels, labels)


def test_zarr_slash_separator(tmp_path):
    images, labels = sample_arrays()
    write_group(tmp_path / "g", images, labels, 5, numcodecs.Blosc(), dimension_separator="/")
    assert os.path.isfile(tmp_path / "g" / "images" / "4" / "0" / "0" / "0")
    _, got, got_labels = read_all(f"zarr:{tmp_path}/g")
    np.testing.assert_array_equal(got, images)
    np.testing.assert_array_equal(got_labels, labels)


@pytest.mark.parametrize("dtype", ["|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8",
                                   ">i4", ">u2", ">i8"])
def test_zarr_label_dtypes(tmp_path, dtype):
    images, _ = sample_arrays(n=13)
    labels = np.array([0, 1, 2, 127, 5, 6, 7, 8, 9, 10, 11, 12, 3], dtype=np.dtype(dtype))
    if np.dtype(dtype).kind == "i":
        labels[4] = -5
    write_group(tmp_path / "g", images, labels, 3, None, lchunk=4,
                lcompressor=numcodecs.Zlib())
    _, _, got = read_all(f"zarr:{tmp_path}/g")
    np.testing.assert_array_equal(got, labels.astype(np.int64))


def test_zarr_query_names_and_errors(tmp_path):
    images, labels = sample_arrays(n=5)
    g = zarr.group(store=zarr.DirectoryStore(str(tmp_path / "g")))
    g.create_dataset("x/pix", data=images, chunks=(2, 9, 13, 3))
    g.create_dataset("y", data=labels, chunks=(5,))
    _, got, got_labels = read_all(f"zarr:{tmp_path}/g?images=x/pix&labels=y")
    np.testing.assert_array_equal(got, images)
    np.testing.assert_array_equal(got_labels, labels)
    rc, msg = open_error(f"zarr:{tmp_path}/g?image=x")
    assert rc == STK_EINVAL and "unknown query key 'image'" in msg
    rc, msg = open_error(f"zarr:{tmp_path}/g")
    assert rc == STK_ENOENT and f"{tmp_path}/g/images" in msg
    rc, msg = open_error(f"zarr:{tmp_path}/g?images=x/pix&labels=y&labels=y")
    assert rc == STK_EINVAL and "given twice" in msg


def test_zarr_missing_chunk_is_fill_value(tmp_path):
    images, labels = sample_arrays(n=14)
    images[7:14] = 0  # chunk 1 is all fill_value: zarr does not write it
    g = zarr.group(store=zarr.DirectoryStore(str(tmp_path / "g")))
    g.create_dataset("images", data=images, chunks=(7, 9, 13, 3), compressor=numcodecs.Zstd(),
                     write_empty_chunks=False, fill_value=0)
    g.create_dataset("labels", data=labels, chunks=(14,))
    assert not os.path.exists(tmp_path / "g" / "images" / "1.0.0.0")
    _, got, _ = read_all(f"zarr:{tmp_path}/g")
    np.testing.assert_array_equal(got, g["images"][:])
    # another fill value, uncompressed: the chunk deleted by hand reads as it
    g.create_dataset("images", data=images, chunks=(7, 9, 13, 3), compressor=None,
                     fill_value=9, overwrite=True)
    os.unlink(tmp_path / "g" / "images" / "0.0.0.0")
    _, got, _ = read_all(f"zarr:{tmp_path}/g")
    np.testing.assert_array_equal(got, g["images"][:])
    assert (got[:7] == 9).all()
    # fill_value None: a missing chunk is damage
    g.create_dataset("images", data=images, chunks=(7, 9, 13, 3), compressor=None,
                     fill_value=None, overwrite=True)
    os.unlink(tmp_path / "g" / "images" / "1.0.0.0")
    rc, ds = open_ds(f"zarr:{tmp_path}/g")
    assert rc == 0
    got, msg = read_one(ds, 9, 9 * 13 * 3)
    assert got == STK_EDATA
    assert f"sample 9: {tmp_path}/g/images/1.0.0.0: chunk file missing" in msg
    assert read_one(ds, 3, 9 * 13 * 3)[0] == 9 * 13 * 3
    lib.stk_dataset_close(ds)


def test_verify_warns_of_missing_chunks(tmp_path):
    """A missing chunk reads as fill_value (the spec), so black images would
    pass unseen: verify passes but prints a warning naming the array, the
    count and the chunk keys."""
    images, labels = sample_arrays(n=14)
    g = zarr.group(store=zarr.DirectoryStore(str(tmp_path / "g")))
    g.create_dataset("images", data=images, chunks=(2, 9, 13, 3), compressor=numcodecs.Zstd(),
                     fill_value=0)
    g.create_dataset("labels", data=labels, chunks=(14,))
    p = run_stoker("verify", tmp_path / "g")
    assert "chunk files of" not in p.stdout + p.stderr
    for c in (1, 4):
        os.unlink(tmp_path / "g" / "images" / ("%d.0.0.0" % c))
    p = run_stoker("verify", tmp_path / "g")  # not damage: exit 0
    want = ("warning: 2 of 7 chunk files of %s/g/images are missing (their samples read as "
            "fill_value 0): 1.0.0.0, 4.0.0.0" % tmp_path)
    assert want in p.stdout, p.stdout
    _, got, _ = read_all(f"zarr:{tmp_path}/g")
    assert (got[2:4] == 0).all() and (got[8:10] == 0).all()


def edit_zarray(path, **changes):
    meta = json.load(open(path))
    meta.update(changes)
    with open(path, "w") as f:
        json.dump(meta, f)


@pytest.fixture
def group(tmp_path):
    images, labels = sample_arrays(n=21)
    write_group(tmp_path / "g", images, labels, 7, numcodecs.Zstd())
    return tmp_path / "g"


@pytest.mark.parametrize("what,change,code,text", [
    ("images", dict(order="F"), STK_EUNSUPPORTED, "order is not \"C\""),
    ("images", dict(dtype="<f4"), STK_EUNSUPPORTED, "dtype '<f4'"),
    ("images", dict(dtype="<u2"), STK_EUNSUPPORTED, "images dtype '<u2'"),
    ("images", dict(compressor={"id": "lz4", "acceleration": 1}), STK_EUNSUPPORTED,
     "compressor 'lz4' is not supported"),
    ("images", dict(filters=[{"id": "delta", "dtype": "|u1"}]), STK_EUNSUPPORTED,
     "filters ['delta', ...] are not supported"),
    ("images", dict(chunks=[7, 3, 13, 3]), STK_EUNSUPPORTED, "chunked along axis 1"),
    ("images", dict(shape=[21, 9 * 13 * 3], chunks=[7, 9 * 13 * 3]), STK_EFORMAT,
     "images have 2 dimensions"),
    ("images", dict(zarr_format=3), STK_EUNSUPPORTED, "zarr_format is not 2"),
    ("images", dict(fill_value=300), STK_EFORMAT, "fill_value 300 is not a uint8"),
    ("images", dict(fill_value="NaN"), STK_EFORMAT, "fill_value is neither null nor an integer"),
    ("images", dict(dimension_separator="-"), STK_EFORMAT, "dimension_separator"),
    ("labels", dict(shape=[20], chunks=[10]), STK_EFORMAT, "labels must have shape (21,)"),
    ("labels", dict(dtype="<f8"), STK_EUNSUPPORTED, "dtype '<f8'"),
])
def test_zarr_refused_at_open(group, what, change, code, text):
    edit_zarray(group / what / ".zarray", **change)
    rc, msg = open_error(f"zarr:{group}")
    assert rc == code, msg
    assert text in msg and f"{group}/{what}/.zarray" in msg


@pytest.mark.parametrize("text,why", [
    ('{"zarr_format": 2,}', "malformed JSON at byte 18"),
    ('{"zarr_format": 2, "zarr_format": 2}', "duplicate key"),
    ('{"a": [1, 2}', "',' or ']' expected"),
    ('{"a": 01}', "',' or '}' expected"),
    ('{"a": "\\x"}', "bad escape"),
    ('{"a": NaN}', "unexpected character"),
    ('[' * 40 + ']' * 40, "nested too deeply"),
    ('{"zarr_format": 2} x', "text after the value"),
    ('{"zarr_format": 2}', "lacks 'shape'"),
    ('[]', "not a JSON object"),
])
def test_zarr_malformed_zarray(group, text, why):
    (group / "images" / ".zarray").write_text(text)
    rc, msg = open_error(f"zarr:{group}")
    assert rc == STK_EFORMAT
    assert why in msg and f"{group}/images/.zarray" in msg


def test_zarr_v3_refused(tmp_path):
    (tmp_path / "v3").mkdir()
    (tmp_path / "v3" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    for uri in (f"zarr:{tmp_path}/v3", str(tmp_path / "v3")):
        rc, msg = open_error(uri)
        assert rc == STK_EUNSUPPORTED and "Zarr v3 is not read" in msg


def test_zarr_damaged_labels_fail_open(group):
    p = group / "labels" / "1"
    p.write_bytes(p.read_bytes()[:-3])
    rc, msg = open_error(f"zarr:{group}")
    assert rc == STK_EFORMAT and f"labels: {group}/labels/1: chunk file of 77 bytes" in msg


@pytest.mark.parametrize("codec,damage,text", [
    ("zstd", "flip", "corrupt zstd data"),
    ("zstd", "truncate", "corrupt zstd data"),
    ("zstd", "garbage", "not a zstd frame"),
    ("zstd", "other-size", "decompresses to 1053 bytes, the chunk has 2457"),
    ("blosc", "flip-header", "blosc header says"),
    ("blosc", "truncate", "corrupt blosc"),
    ("blosc", "garbage", "corrupt blosc header"),
    ("zlib", "flip", "corrupt zlib data"),
    ("zlib", "truncate", "corrupt zlib data"),
    ("none", "truncate", "chunk file of 2456 bytes; a none chunk of 2457 decoded bytes"),
    ("none", "garbage", "chunk file of 5 bytes"),
])
def test_zarr_chunk_damage_at_read(tmp_path, codec, damage, text):
    images, labels = sample_arrays(n=21)
    comp = {"zstd": numcodecs.Zstd(), "blosc": numcodecs.Blosc(cname="lz4"),
            "zlib": numcodecs.Zlib(), "none": None}[codec]
    g = tmp_path / "g"
    write_group(g, images, labels, 7, comp)
    chunk = g / "images" / "1.0.0.0"
    data = bytearray(chunk.read_bytes())
    if damage == "flip":
        # the block headers (zstd frames carry no checksum here: damage in
        # a raw block's literal bytes would go unseen, by numcodecs too)
        for i in range(8, 24):
            data[i] ^= 0x5A
        with pytest.raises(Exception):
            comp.decode(bytes(data))
    elif damage == "flip-header":
        data[4] ^= 0x01  # nbytes
    elif damage == "truncate":
        data = data[:-1]
    elif damage == "garbage":
        data = bytearray(b"hello")
    elif damage == "other-size":
        data = bytearray(numcodecs.Zstd().encode(np.zeros(1053, np.uint8)))
    chunk.write_bytes(bytes(data))
    rc, ds = open_ds(f"zarr:{g}")
    assert rc == 0, lib.stk_errmsg().decode()
    nb = 9 * 13 * 3
    for i in range(21):
        got, msg = read_one(ds, i, nb)
        if 7 <= i < 14:
            assert got == STK_EDATA, (i, got)
            assert f"zarr:{g}: sample {i}: {g}/images/1.0.0.0: " in msg and text in msg, msg
        else:
            assert got == nb, msg
    lib.stk_dataset_close(ds)
    # on_error=skip: each sample of the damaged chunk skipped exactly once
    p = run_stoker("bench", f"zarr:{g}", "--pipeline", "normalize imagenet", "--batch", 5,
                   "--epochs", 1, "--threads", 2, "--on-error", "skip", "--json")
    report = json.loads(p.stdout.strip().splitlines()[-1])
    assert report["skipped"] == 7 and report["samples"] == 14


def test_zarr_same_digest_as_npy_and_pack(tmp_path):
    """Photos decoded and resized to 40x48 with PIL, written once with
    zarr-python (blosc, chunks of 5), with numpy.save and with np.savez:
    zarr:, npy:, the .npz and the .stk pack made from zarr: give the same
    digest."""
    from PIL import Image
    root = need_photos("train")
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(os.path.join(root, "train"))
                   for f in fs if f.lower().endswith((".jpg", ".jpeg", ".png")))[:24]
    assert len(files) >= 8
    classes = sorted({os.path.basename(os.path.dirname(f)) for f in files})
    images = np.stack([np.asarray(Image.open(f).convert("RGB").resize((48, 40))) for f in files])
    labels = np.array([classes.index(os.path.basename(os.path.dirname(f))) for f in files],
                      np.int64)
    write_group(tmp_path / "z", images, labels, 5, numcodecs.Blosc(cname="zstd"))
    (tmp_path / "n").mkdir()
    np.save(tmp_path / "n" / "images.npy", images)
    np.save(tmp_path / "n" / "labels.npy", labels)
    np.savez(tmp_path / "n.npz", images=images, labels=labels)
    run_stoker("pack", "-q", f"zarr:{tmp_path}/z", tmp_path / "pack")

    def digest(uri):
        p = run_stoker("bench", uri, "--pipeline", "imagenet-train-few", "--batch", 6,
                       "--epochs", 2, "--threads", 2, "--seed", 3, "--digest")
        return [l.split()[1] for l in p.stdout.splitlines() if l.startswith("digest: ")][0]

    dz = digest(f"zarr:{tmp_path}/z")
    assert dz == digest(f"npy:{tmp_path}/n")
    assert dz == digest(str(tmp_path / "n.npz"))
    assert dz == digest(str(tmp_path / "pack"))
