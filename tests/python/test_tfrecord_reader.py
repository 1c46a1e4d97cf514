"""The tfrecord: reader against TFRecord files written independently:
tf.train.Example messages serialized by protobuf itself (classes built at
run time from a descriptor, tfrecord_writer.py), framed with the crc32c
module's CRC-32C, indexed by the algorithm of DALI's tools/tfrecord2idx.
Checked: every record's bytes and label, the DALI index and the cache,
on_error=skip counting a damaged record once, and on the photos set the
same digest as the .stk pack of the same files in the same order (and
`stoker pack tfrecord:...`, with --restart too). The damage cases with
their messages are in tests/test_tfrecord.c."""
import glob
import os
import struct
import subprocess

import numpy as np
import pytest

from conftest import BUILD, STOKER, need_photos, run_stoker
from tfrecord_writer import example, frame, masked_crc, write_dali_index, write_tfrecord

import sys

sys.path.insert(0, os.path.join(BUILD, "python"))
import stoker  # noqa: E402


def cat(uri, i, field=None):
    args = [STOKER, "cat", uri, str(i)] + (["--field", field] if field else [])
    p = subprocess.run(args, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def make_set(tmp_path, files=2, per_file=5, seed=0):
    rng = np.random.default_rng(seed)
    d = tmp_path / "set"
    d.mkdir()
    truth = []
    for f in range(files):
        recs = []
        for i in range(per_file):
            img = rng.integers(0, 256, int(rng.integers(1, 300)), dtype=np.uint8).tobytes()
            label = int(rng.integers(-3, 1000))
            extra = {"image/height": 7, "image/format": b"raw", "score": [0.5, 1.5]}
            recs.append(example({"image/encoded": img, "image/class/label": label, **extra}))
            truth.append((img, label))
        write_tfrecord(str(d / ("part-%02d.tfrecord" % f)), recs)
    return d, truth


def test_protobuf_written_round_trip(tmp_path):
    d, truth = make_set(tmp_path)
    for uri in ("tfrecord:%s" % d, str(d), str(d / "part-00.tfrecord")):
        ds = stoker.open(uri)
        assert ds.format == "tfrecord"
        n = 5 if uri.endswith(".tfrecord") else len(truth)
        assert len(ds) == n
        for i in range(n):
            img, label = truth[i]
            assert cat(uri, i) == img
            assert struct.unpack("<q", cat(uri, i, "label"))[0] == label


def test_custom_keys_and_unpacked_labels(tmp_path):
    # An Int64List written unpacked (protobuf writes packed; build by hand
    # from protobuf's own pieces: the same message parsed back proves it).
    from tfrecord_writer import CLASSES
    ex = CLASSES["Example"]()
    ex.features.feature["jpg"].bytes_list.value.append(b"abc")
    ex.features.feature["cls"].int64_list.value.extend([42, 7])
    data = ex.SerializeToString()
    p = tmp_path / "k.tfrec"
    write_tfrecord(str(p), [data])
    uri = "tfrecord:%s?image_key=jpg&label_key=cls" % p
    assert cat(uri, 0) == b"abc"
    assert struct.unpack("<q", cat(uri, 0, "label"))[0] == 42
    r = run_stoker("cat", "tfrecord:%s" % p, 0, check=False)
    assert r.returncode != 0
    assert "k.tfrec: record 0 (byte 0): the Example has no feature 'image/encoded'" in r.stderr


def test_dali_index_and_cache(tmp_path):
    d, truth = make_set(tmp_path, files=1, per_file=6)
    data = str(d / "part-00.tfrecord")
    write_dali_index(data, data + ".idx")
    first = run_stoker("inspect", "tfrecord:%s" % d).stdout
    assert "6 records from the DALI index %s.idx" % data in first
    assert os.path.exists(data + ".stkidx")
    second = run_stoker("inspect", "tfrecord:%s" % d).stdout
    assert "6 records from the cache %s.stkidx" % data in second
    # A stale DALI index (the file grew) is refused when no cache stands in front.
    with open(data, "ab") as f:
        f.write(frame(example({"image/encoded": b"x", "image/class/label": 1})))
    p = run_stoker("inspect", "tfrecord:%s?cache=off" % d, check=False)
    assert p.returncode != 0 and "records after them are missing from the index" in p.stderr
    os.unlink(data + ".idx")
    p = run_stoker("inspect", "tfrecord:%s" % d).stdout
    assert "stale: the file's size changed" in p and "7 records, scanned" in p


def _tiny_jpeg(seed):
    import io
    from PIL import Image
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def test_skip_counts_damaged_record_once(tmp_path):
    path = tmp_path / "jpegs.tfrecord"
    recs = [example({"image/encoded": _tiny_jpeg(i), "image/class/label": i}) for i in range(8)]
    offs = write_tfrecord(str(path), recs)
    raw = bytearray(path.read_bytes())
    # Damage one byte inside record 3's JPEG (still a decodable JPEG: only
    # the data CRC can tell).
    jpeg = _tiny_jpeg(3)
    at = raw.index(jpeg, offs[3]) + len(jpeg) // 2
    raw[at] ^= 0x01
    path.write_bytes(bytes(raw))
    start = offs[3]
    (n,) = struct.unpack_from("<Q", raw, start)
    stored = struct.unpack_from("<I", raw, start + 12 + n)[0]
    assert masked_crc(bytes(raw[start + 12:start + 12 + n])) != stored  # the reference agrees
    r = run_stoker("cat", "tfrecord:%s" % path, 3, check=False)
    assert r.returncode != 0
    assert ("jpegs.tfrecord: record 3 (byte %d): the data's CRC does not match" % start
            in r.stderr)
    assert cat("tfrecord:%s?verify=off" % path, 3) != jpeg  # unchecked: the damaged bytes
    for verify in ("first", "always"):
        loader = stoker.Loader("tfrecord:%s?verify=%s" % (path, verify), batch_size=3,
                               shuffle=True, seed=2, transforms=[stoker.RandomResizedCrop(8)],
                               output="numpy", on_error="skip")
        for epoch in range(2):
            loader.set_epoch(epoch)
            seen, labels = [], []
            for images, lab, indices in loader.iter_with_indices():
                seen += [int(i) for i in indices]
                labels += [int(x) for x in lab]
            assert sorted(seen) == [0, 1, 2, 4, 5, 6, 7]
            assert labels == seen  # label i was written for record i
        # one damaged record, two epochs: skipped twice, counted once each
        # (read-ahead into the next epoch is not counted)
        assert loader.stats()["skipped"] == 2


def _photos_subset(n_per_class=3):
    root = need_photos("train")
    classes = sorted(os.listdir(os.path.join(root, "train")))
    files = []
    for c, name in enumerate(classes):
        imgs = sorted(glob.glob(os.path.join(root, "train", name, "*.jpg")))[:n_per_class]
        files += [(p, c) for p in imgs]
    return files


def _digest(uri):
    out = run_stoker("bench", uri, "--pipeline", "imagenet-train-few", "--batch", 8, "--epochs",
                     2, "--threads", 2, "--seed", 3, "--digest").stdout
    lines = [l for l in out.splitlines() if l.startswith("digest: ")]
    assert lines, out
    return lines


def test_same_digest_as_stk_pack_of_photos(tmp_path):
    files = _photos_subset()
    # The same files in the same order: a list file, packed to .stk ...
    lst = tmp_path / "files.txt"
    lst.write_text("".join("%s\t%d\n" % (p, c) for p, c in files))
    run_stoker("pack", "list:%s" % lst, tmp_path / "stk")
    # ... and TFRecord files (two, split unevenly) written independently.
    recs = [example({"image/encoded": open(p, "rb").read(), "image/class/label": c,
                     "image/filename": os.path.basename(p).encode()}) for p, c in files]
    tf = tmp_path / "tf"
    tf.mkdir()
    write_tfrecord(str(tf / "train-00000-of-00002.tfrecord"), recs[:7])
    write_tfrecord(str(tf / "train-00001-of-00002.tfrecord"), recs[7:])
    want = _digest(str(tmp_path / "stk"))
    assert _digest("tfrecord:%s" % tf) == want
    assert _digest(str(tf)) == want  # detected; second open from the cache
    # stoker pack from the reader: same digest; --restart packs the same pixels.
    run_stoker("pack", "tfrecord:%s" % tf, tmp_path / "from-tf")
    assert _digest(str(tmp_path / "from-tf")) == want
    p = run_stoker("pack", "tfrecord:%s" % tf, tmp_path / "from-tf-rst", "--restart", 4)
    assert "rewrote" in p.stdout
    assert _digest(str(tmp_path / "from-tf-rst")) == want
    for i in (0, len(files) - 1):
        assert cat(str(tmp_path / "from-tf"), i) == open(files[i][0], "rb").read()
