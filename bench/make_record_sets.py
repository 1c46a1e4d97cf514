#!/usr/bin/python3
"""Write one image folder as the record formats stoker reads, in one order,
for bench/read_uris.c (and DALI's readers): WORK/stk (stoker pack of a list
file), WORK/lmdb (Caffe encoded Datums, keys "%08d_PATH", as
convert_imageset --encoded writes them) and WORK/photos.rec + .idx (MXNet
RecordIO as im2rec writes it). Labels: the class directory's index.

    /usr/bin/python3 bench/make_record_sets.py --images /work/data/photos/train \\
        --work /tmp/stoker-bench-records [--build build]
    build/read_uris --threads 2 /tmp/stoker-bench-records/stk \\
        lmdb:/tmp/stoker-bench-records/lmdb recordio:/tmp/stoker-bench-records/photos.rec
"""
import argparse
import glob
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import lmdb  # noqa: E402

import mxnet_recordio as mr  # noqa: E402
from caffe_datum import encoded_datum  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", default="/work/data/photos/train")
    ap.add_argument("--work", default="/tmp/stoker-bench-records")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    classes = sorted(d for d in os.listdir(a.images) if os.path.isdir(os.path.join(a.images, d)))
    files = [(f, c) for c, d in enumerate(classes)
             for f in sorted(glob.glob(os.path.join(a.images, d, "*")))]
    os.makedirs(a.work, exist_ok=True)
    with open(os.path.join(a.work, "list.txt"), "w") as o:
        for f, c in files:
            o.write("%s\t%d\n" % (f, c))
    stk = os.path.join(a.work, "stk")
    if not os.path.isdir(stk):
        subprocess.run([os.path.join(a.build, "stoker"), "pack", "-q", "--no-validate",
                        "list:" + os.path.join(a.work, "list.txt"), stk], check=True)
    size = sum(os.path.getsize(f) for f, _ in files)
    env = lmdb.open(os.path.join(a.work, "lmdb"), map_size=2 * size + (1 << 30), sync=False)
    with env.begin(write=True) as t:
        for i, (f, c) in enumerate(files):
            key = b"%08d_%s" % (i, os.path.relpath(f, a.images).encode())
            t.put(key, encoded_datum(open(f, "rb").read(), c))
    env.close()
    mr.write_rec(os.path.join(a.work, "photos.rec"),
                 (mr.pack(c, open(f, "rb").read(), id=i) for i, (f, c) in enumerate(files)),
                 os.path.join(a.work, "photos.idx"))
    print("%d images, %.1f MB, in %s" % (len(files), size / 1e6, a.work))


if __name__ == "__main__":
    main()
