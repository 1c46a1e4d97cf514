#!/usr/bin/python3
"""The cost of boxes: the coco: loader delivering (image, boxes, box_labels,
image_id) against the same loader delivering only (image, label), on the
same images, in the same run (issue 12: >= 0.9x).

    /usr/bin/python3 bench/coco_fields.py [--photos DIR] [--images N]
        [--threads T] [--rounds R] [--spec SPEC]

A COCO instances file is written for N photos of the photos set
(shared/datasets/make_photos.sh) with 2-9 random boxes per image over 80
categories (written with Python's json module, as pycocotools reads it).
Each round runs both loaders over one epoch, alternating which goes first,
and reports images/s (wall) and images per CPU-second of the process; the
ratio is of the medians. Needs the stoker module on PYTHONPATH
(build/python) and Debian's python3 (numpy).
"""
import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time

import numpy as np

import stoker


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def photos(root, n):
    train = os.path.join(root, "train")
    out = []
    for cls in sorted(os.listdir(train)):
        for name in sorted(os.listdir(os.path.join(train, cls))):
            out.append(os.path.join(cls, name))
    step = max(1, len(out) // n)
    return train, out[::step][:n]


def write_coco(train, files, path, seed=0):
    from PIL import Image
    rng = np.random.default_rng(seed)
    images, anns = [], []
    aid = 1
    for i, rel in enumerate(files):
        with Image.open(os.path.join(train, rel)) as im:
            w, h = im.size
        images.append({"id": i + 1, "file_name": rel, "width": w, "height": h})
        for _ in range(int(rng.integers(2, 10))):
            bw, bh = rng.uniform(8, w / 2), rng.uniform(8, h / 2)
            x, y = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
            anns.append({"id": aid, "image_id": i + 1, "category_id": int(rng.integers(1, 81)),
                         "bbox": [x, y, bw, bh], "area": bw * bh, "iscrowd": 0})
            aid += 1
    cats = [{"id": c, "name": "class%d" % c, "supercategory": "thing"} for c in range(1, 81)]
    with open(path, "w") as f:
        json.dump({"images": images, "annotations": anns, "categories": cats}, f)
    return len(anns)


def one_epoch(uri, spec, fields, threads):
    loader = stoker.Loader(uri, batch_size=64, shuffle=True, seed=1, pipeline=spec,
                           num_threads=threads, output="numpy", fields=fields)
    t0, c0 = time.perf_counter(), cpu_s()
    n = 0
    for item in loader:
        n += len(item[1]) if not isinstance(item[1], stoker.Ragged) else len(item[1])
    wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    loader.close()
    return n / wall, n / cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--photos", default=os.environ.get("STOKER_PHOTOS", "/work/data/photos"))
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--spec", default="resize 300,300 | flip 0.5 | normalize imagenet | "
                                      "to f32 chw")
    a = ap.parse_args()
    train, files = photos(a.photos, a.images)
    tmp = tempfile.mkdtemp(prefix="stoker-coco-")
    ann = os.path.join(tmp, "instances.json")
    nann = write_coco(train, files, ann)
    uri = "coco:%s?annotations=%s" % (train, ann)
    print("coco: %d images, %d boxes; pipeline %r; %d threads; %d rounds"
          % (len(files), nann, a.spec, a.threads, a.rounds))
    plain, boxes = [], []
    one_epoch(uri, a.spec, "image,label", a.threads)  # warm the page cache
    for r in range(a.rounds):
        order = [("plain", "image,label"), ("boxes", "image,boxes,box_labels,image_id")]
        if r % 2:
            order.reverse()
        for name, fields in order:
            (plain if name == "plain" else boxes).append(one_epoch(uri, a.spec, fields,
                                                                   a.threads))
    mp = statistics.median(p[0] for p in plain), statistics.median(p[1] for p in plain)
    mb = statistics.median(b[0] for b in boxes), statistics.median(b[1] for b in boxes)
    print("image,label                      %8.1f img/s  %8.1f img/CPU-s" % mp)
    print("image,boxes,box_labels,image_id  %8.1f img/s  %8.1f img/CPU-s" % mb)
    print("ratio (boxes / plain)            %8.3f        %8.3f" % (mb[0] / mp[0], mb[1] / mp[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
