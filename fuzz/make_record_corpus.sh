#!/usr/bin/env bash
# Regenerate the seed corpora of fuzz/fuzz_recordio.c and fuzz/fuzz_lmdb.c,
# fuzz/corpus/recordio/ and fuzz/corpus/lmdb/ (docs/fuzzing.md), with the
# independent writers of the Python tests (tests/python/mxnet_recordio.py,
# tests/python/caffe_datum.py; Debian's python3-protobuf). Deterministic;
# the generated files are committed. Inputs found by fuzzing (names not
# starting with "seed-") are kept.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p fuzz/corpus/recordio fuzz/corpus/lmdb
rm -f fuzz/corpus/recordio/seed-* fuzz/corpus/lmdb/seed-*
PYTHONPATH=tests/python /usr/bin/python3 - <<'PY'
import struct
import numpy as np
import mxnet_recordio as mr
from caffe_datum import Datum, encoded_datum, raw_datum

R, L = "fuzz/corpus/recordio/", "fuzz/corpus/lmdb/"
img = b"\xff\xd8\xff\xe0" + bytes(range(20))
split = img[:4] + mr.MAGIC_BYTES + img[4:12] + mr.MAGIC_BYTES  # aligned after the 24-byte header


def rec(name, records):
    with open(R + name, "wb") as f:
        for r in records:
            f.write(mr.frames(r))


rec("seed-whole.rec", [mr.pack(1, img), mr.pack(2, img[:5]), mr.pack(0, img[:1])])
rec("seed-split.rec", [mr.pack(3, split), mr.pack(4, img)])
rec("seed-vector.rec", [mr.pack([5.0, 1.5], img), mr.pack([0.0], img)])
rec("seed-damaged.rec", [mr.pack(2.5, img), struct.pack("<IfQ", 0, 1.0, 0), mr.pack(9, b""),
                         struct.pack("<IfQQ", 1000, 0.0, 0, 0) + img])
whole = b"".join(mr.frames(r) for r in [mr.pack(1, img), mr.pack(2, img)])
with open(R + "seed-cut.rec", "wb") as f:
    f.write(whole[:-6])
# index texts for the harness's fixed three-record file (offsets 0, 40, 88)
for name, text in [("seed-good.idx", "0\t0\n1\t40\n2\t88\n"),
                   ("seed-shuffled.idx", "7 88\r\n3\t0\n\n5\t40"),
                   ("seed-stale.idx", "0\t0\n1\t44\n2\t88\n"),
                   ("seed-missing.idx", "0\t0\n2\t88\n"),
                   ("seed-twice.idx", "0\t0\n1\t40\n1\t40\n2\t88\n")]:
    open(R + name, "w").write(text)


def env(name, flags, values):
    """flags byte, then (kind, len8, bytes) per value; kind 1: a .cls key."""
    out = bytearray([flags])
    for kind, v in values:
        assert len(v) < 256
        out += bytes([kind, len(v)]) + v
    open(L + name, "wb").write(bytes(out))


rng = np.random.default_rng(1)
env("seed-raw", 0, [(0, raw_datum(rng.integers(0, 256, (3, 4, 5), dtype=np.uint8), 3)),
                    (0, raw_datum(rng.integers(0, 256, (1, 6, 7), dtype=np.uint8), -2))])
env("seed-raw-rgb", 2, [(0, raw_datum(rng.integers(0, 256, (3, 2, 9), dtype=np.uint8), 1))])
env("seed-encoded", 0, [(0, encoded_datum(img, 7)), (0, encoded_datum(img[:3], 0))])
env("seed-damaged", 0, [(0, Datum(channels=3, height=2, width=2, data=b"\0" * 11).SerializeToString()),
                        (0, Datum(channels=1, height=1, width=2, float_data=[1.0]).SerializeToString()),
                        (0, b"\xff\xff\xff"), (0, b"\x0b\x00"),
                        (0, raw_datum(np.zeros((1, 2, 2), np.uint8), 1)[:-3])])
env("seed-plain", 1, [(0, img), (1, b"4\n"), (0, img[:9]), (1, b"12"), (0, img[:2])])
env("seed-plain-badcls", 1, [(0, img), (1, b"four")])
PY
ls fuzz/corpus/recordio fuzz/corpus/lmdb
