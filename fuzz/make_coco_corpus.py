#!/usr/bin/env python3
"""Seeds for fuzz_coco (fuzz/corpus/coco/): COCO instances files for the
harness's images directory (a.png 8 x 6, b.png 5 x 4), written with Python's
json module. Compressed RLE strings are encoded here as cocoapi's
rleToString does (5-bit groups, 48 + group, + 32 when more follow, counts
after the second as the difference from the one two before).

    /usr/bin/python3 fuzz/make_coco_corpus.py fuzz/corpus/coco
"""
import json
import os
import random
import sys


def rle_string(counts):
    out = []
    for i, c in enumerate(counts):
        x = c - counts[i - 2] if i > 2 else c
        while True:
            g = x & 0x1F
            x >>= 5
            more = x != -1 if g & 0x10 else x != 0
            out.append(chr(48 + (g | (0x20 if more else 0))))
            if not more:
                break
    return "".join(out)


def runs(mask_cols, n):
    """Counts of a column-major 0/1 list."""
    counts, v, c = [], 0, 0
    for p in mask_cols:
        if p != v:
            counts.append(c)
            c, v = 0, p
        c += 1
    counts.append(c)
    assert sum(counts) == n
    return counts


CATS = [{"id": 5, "name": "b"}, {"id": 2, "name": "a"}, {"id": 9, "name": "c"}]
IMAGES = [{"id": 30, "file_name": "a.png", "height": 6, "width": 8},
          {"id": 10, "file_name": "b.png", "height": 4, "width": 5}]


def seed(rng, n_anns):
    anns = []
    for k in range(n_anns):
        im = rng.choice(IMAGES)
        h, w = im["height"], im["width"]
        kind = rng.randrange(4)
        if kind <= 1:
            seg = [[round(rng.uniform(-2, w + 2), 2 if kind else 0) for _ in range(2 * rng.randint(3, 7))]
                   for _ in range(rng.randint(1, 2))]
        else:
            cols = [int(rng.random() < 0.4) for _ in range(h * w)]
            counts = runs(cols, h * w)
            seg = {"size": [h, w], "counts": rle_string(counts) if kind == 2 else counts}
        anns.append({"id": 100 + k, "image_id": im["id"], "category_id": rng.choice(CATS)["id"],
                     "bbox": [round(rng.uniform(-2, w), 1), round(rng.uniform(-2, h), 1),
                              round(rng.uniform(0, w), 1), round(rng.uniform(0, h), 1)],
                     "segmentation": seg, "iscrowd": int(kind >= 2), "area": 1.0})
    return {"images": IMAGES, "annotations": anns, "categories": CATS}


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = random.Random(12)
    seeds = {"empty-anns": {"images": IMAGES, "annotations": [], "categories": CATS}}
    for n in (1, 3, 8):
        seeds["random-%d" % n] = seed(rng, n)
    rects = seed(rng, 0)
    rects["annotations"] = [
        {"id": 1, "image_id": 30, "category_id": 5, "bbox": [1, 1, 3, 2],
         "segmentation": [[1, 1, 4, 1, 4, 3, 1, 3]]},
        {"id": 2, "image_id": 10, "category_id": 9, "bbox": [0, 0, 4, 4], "iscrowd": 1,
         "segmentation": {"size": [4, 5], "counts": "263K5"}}]
    seeds["rects"] = rects
    for name, d in seeds.items():
        with open(os.path.join(out, "seed-%s.json" % name), "w") as f:
            json.dump(d, f)
    with open(os.path.join(out, "seed-broken.json"), "w") as f:
        f.write('{"images": [{"id": 1,, "file_name": "a.png"}]')


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fuzz/corpus/coco")
