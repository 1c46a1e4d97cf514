#!/usr/bin/env bash
# Regenerate the seed corpus of fuzz/fuzz_wds.c, fuzz/corpus/wds/ (docs/fuzzing.md):
# small WebDataset tars written by Python's tarfile (Debian's python3) in its
# ustar, GNU (long names) and pax (path records, non-ASCII) formats, with a
# real tiny JPEG (Pillow) and PNG, labels in .cls and .txt, a sample group
# with extra members, directories and metadata, a second sample set
# repeating a key; and damaged copies (a bad checksum, a truncated member,
# a truncated header, a missing label, a non-integer label, garbage after
# the end marker, a base-256 size). Deterministic (fixed mtimes and names).
# Inputs found by fuzzing (found-*, crash-* ...) are kept: only the
# generated names (seed-*) are replaced.
#
#   fuzz/make_wds_corpus.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p fuzz/corpus/wds
rm -f fuzz/corpus/wds/seed-*
/usr/bin/python3 - fuzz/corpus/wds <<'PY'
import io
import sys
import tarfile

from PIL import Image

out = sys.argv[1]
im = Image.new("RGB", (16, 12))
im.putdata([(x * 16, y * 20, (x + y) * 8) for y in range(12) for x in range(16)])
b = io.BytesIO()
im.save(b, "JPEG", quality=75)
JPG = b.getvalue()
b = io.BytesIO()
Image.new("L", (5, 3), 77).save(b, "PNG")
PNG = b.getvalue()


def member(t, name, data, type_=tarfile.REGTYPE):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 1700000000
    ti.type = type_
    t.addfile(ti, io.BytesIO(data) if data else None)


def write(name, fmt, members):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=fmt) as t:
        for m in members:
            member(t, *m)
    data = b.getvalue()
    # tarfile pads to 10 KiB records; keep the two end blocks only.
    end = len(data)
    while end > 1024 and not any(data[end - 512:end]):
        end -= 512
    data = data[:end + 1024]
    with open("%s/seed-%s" % (out, name), "wb") as f:
        f.write(data)
    return data


basic = [("000000.jpg", JPG), ("000000.cls", b"3"),
         ("000001.png", PNG), ("000001.txt", b" 7\n"),
         ("000002.cls", b"-1"), ("000002.json", b"{}"), ("000002.jpeg", JPG)]
ustar = write("ustar.tar", tarfile.USTAR_FORMAT, basic)
write("gnu-long.tar", tarfile.GNU_FORMAT,
      [("d" * 120 + "/k.jpg", JPG), ("d" * 120 + "/k.cls", b"1"), ("x.webp", b"RIFF"),
       ("x.cls", b"0")])
write("pax.tar", tarfile.PAX_FORMAT,
      [("caf\u00e9/\u4e2d.jpg", JPG), ("caf\u00e9/\u4e2d.cls", b"2"),
       ("p" * 200 + ".png", PNG), ("p" * 200 + ".cls", b"4")])
write("tricky.tar", tarfile.USTAR_FORMAT,
      [("dir/", b"", tarfile.DIRTYPE), ("__meta__/x.json", b"{}"), ("README", b"text"),
       ("a.b/c.seg.png", PNG), ("a.b/c.jpg", JPG), ("a.b/c.cls", b"5"),
       ("ln.jpg", b"", tarfile.SYMTYPE), ("x/.y.jpg", JPG), ("x/.y.cls", b"1"),
       ("r.jpg", JPG), ("r.cls", b"1"), ("s.cls", b"2"), ("s.jpg", JPG),
       ("r.jpg", JPG), ("r.cls", b"3")])


def damaged(name, data):
    with open("%s/seed-%s" % (out, name), "wb") as f:
        f.write(bytes(data))


d = bytearray(ustar)
d[1536 + 3] ^= 0x20  # the header of 000000.cls
damaged("bad-checksum.tar", d)
damaged("truncated-member.tar", ustar[:512 + 100])
damaged("truncated-header.tar", ustar[:1536 + 300])
damaged("garbage-after-end.tar", ustar + b"junk")
write("missing-label.tar", tarfile.USTAR_FORMAT, [("a.jpg", JPG), ("b.jpg", JPG), ("b.cls", b"1")])
write("bad-label.tar", tarfile.USTAR_FORMAT, [("a.jpg", JPG), ("a.cls", b"twelve")])
write("duplicate.tar", tarfile.USTAR_FORMAT, [("a.jpg", JPG), ("a.JPG", JPG), ("a.cls", b"1")])
# A base-256 size field (0x80, big-endian), checksum recomputed.
d = bytearray(ustar)
size = int(d[124:135].decode(), 8)
d[124:136] = b"\x80" + size.to_bytes(11, "big")
d[148:156] = b" " * 8
d[148:156] = b"%06o\0 " % sum(d[:512])
damaged("base256.tar", d)
PY
echo "wds corpus: $(ls fuzz/corpus/wds | wc -l) files, $(du -sh fuzz/corpus/wds | cut -f1)"
