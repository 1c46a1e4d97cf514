#!/usr/bin/env bash
# Regenerate fuzz/corpus/tfrecord/: seeds for fuzz/fuzz_tfrecord.c
# (docs/fuzzing.md). Each input plays every role (a TFRecord file, one
# Example, a DALI index, cache offsets), so the seeds are one of each kind:
# TFRecord files and Examples serialized by protobuf (tests/python/
# tfrecord_writer.py: classes built from a descriptor), damaged copies, DALI
# index texts and offset tables for the harness's 3-record file (records of
# 74 bytes). Deterministic; inputs found by fuzzing (found-*, crash-*) are
# kept: only seed-* is replaced.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=fuzz/corpus/tfrecord
mkdir -p "$dir"
rm -f "$dir"/seed-*
/usr/bin/python3 - "$dir" <<'PY'
import struct
import sys

sys.path.insert(0, "tests/python")
from tfrecord_writer import CLASSES, example, frame

out = sys.argv[1]


def w(name, data):
    with open("%s/seed-%s" % (out, name), "wb") as f:
        f.write(data)


ex = [example({"image/encoded": b"\xff\xd8\xff\xe0" + bytes(range(i * 7 % 40)),
               "image/class/label": i * 3 - 1, "image/format": b"jpeg",
               "image/height": [12, 13], "score": [0.25]}) for i in range(4)]
ab = example({"a": [b"first", b"second"], "b": 5})
w("ex0.pb", ex[0])
w("ex-ab.pb", ab)
w("ex-float-label.pb", example({"image/encoded": b"x", "image/class/label": 1.5}))
w("ex-bytes-label.pb", example({"image/encoded": b"x", "image/class/label": b"7"}))
w("ex-no-label.pb", example({"image/encoded": b"x"}))
e = CLASSES["Example"]()
e.features.feature["image/encoded"].bytes_list.SetInParent()
e.features.feature["image/class/label"].int64_list.value.append(-(1 << 63))
w("ex-empty-bytes.pb", e.SerializeToString())
w("ex-empty.pb", b"")
good = b"".join(frame(x) for x in ex)
w("file4.tfrecord", good)
w("file-ab.tfrecord", frame(ab) + frame(ex[1]))
w("file-truncated.tfrecord", good[:-9])
w("file-header-cut.tfrecord", good + good[:7])
bad = bytearray(good)
bad[len(frame(ex[0])) + 3] ^= 0x10  # record 1's length (its CRC no longer matches)
w("file-len-crc.tfrecord", bytes(bad))
bad = bytearray(good)
bad[20] ^= 0x01  # record 0's data
w("file-data-crc.tfrecord", bytes(bad))
# DALI index texts for the harness's file of 3 records of 74 bytes.
w("dali-ok.idx", b"0 74\n74 74\n148 74\n")
w("dali-gap.idx", b"0 74\n148 74\n")
w("dali-split.idx", b"0 74\n74 148\n")
w("dali-junk.idx", b"0 74\r\n74 x\n")
# Cache offset tables for that file.
w("offsets-ok.bin", struct.pack("<3Q", 0, 74, 148))
w("offsets-bad.bin", struct.pack("<3Q", 0, 75, 148))
PY
echo "tfrecord corpus: $(ls "$dir" | wc -l) files, $(du -sh "$dir" | cut -f1)"
