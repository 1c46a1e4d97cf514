#!/usr/bin/python3
"""Make the realistic photos set the tests and benchmarks read: JPEGs cut
from photographs that Debian packages ship, in torchvision's ImageFolder
layout, plus hostile files that a loader must refuse cleanly.

    OUT/train/<class>/NNNNN.jpg   OUT/val/<class>/NNNNN.jpg
    OUT/corrupt/NNNN_<kind>.jpg   (--corrupt N)
    OUT/classes.txt               class -> source photo (with its package, for attribution)
    OUT/stats.json                what was made: sizes, JPEG settings, shares of each kind
    OUT/DONE                      written last: the generator's hash and the arguments

Why real photographs. A loader's cost is dominated by JPEG entropy decoding,
which depends on how much detail a file holds; synthetic noise or flat
gradients are far from what ImageNet's snapshots cost. The sources are the
wallpapers of lomiri-wallpapers-16.04/-20.04, mate-backgrounds and
plasma-workspace-wallpapers (large landscapes and close-ups) and the sample
photos of opencv-doc (objects: fruit, a baboon, a building, street scenes).
scripts/install-deps.sh installs the packages; `--check` lists what is missing.

How a class is made. Each source photo is cut along its long side into 1 to
4 tiles (one per ~1.5 megapixels). Classes take the tiles in rounds: round 0
takes the first tile of every photo, in an order that alternates between the
packages (so even a 10-class set mixes wallpapers and object photos), round
1 the second tile of the photos that have one, and so on. Past the last tile
the rounds start again with the colour channels permuted (a "_v1" class;
after five permutations also darker), so any number of classes can be made.

How an image is made (make_image). A random window of the tile, of an
ImageNet-like aspect ratio and 25-100% of the largest such window, resized
with Lanczos to a long side of 500 px (40%: Flickr's size, common in
ImageNet) or 260-640 px; half are mirrored; then a camera's unsharp mask,
an exposure change and sensor grain (the wallpapers are smoother than
consumer snapshots; the grain brings the bytes per pixel, and so the decode
cost, near ImageNet's). It is saved with the quality and chroma subsampling
of the profile: `imagenet` follows M. Ehrlich's survey of ILSVRC-2012 (most
files 4:4:4 at quality 96), `web` is a re-encoded-for-the-web mix (4:2:0,
q75-95).

The rare kinds come on a schedule, not by chance, so that a small set has
them too: in every class, one image in 64 is grayscale, one in 200 is CMYK
(Adobe-inverted, as PIL writes it) and one in 25 is progressive (with
optimised Huffman tables), each at an offset that depends on the class. A
10 x (20 + 2) set holds 4 grayscale, 2 CMYK and 11 progressive files, and
the first class holds one of each among its first 7 images.

Determinism. Image i of class c in a split depends only on (seed, split, c,
i): its draws come from numpy's generator seeded with exactly those, and its
source tile from the class plan. So the files are byte-identical whatever
--workers is, and a larger set (more classes or images) contains a smaller
one made with the same seed and profile. Byte-identical output also needs the
same versions of the Debian packages (PIL, libjpeg-turbo, NumPy and the
photos); stats.json records them.

The corrupt files cycle through five kinds, in this order (tests take the
first five as one of each): `truncated` (a baseline JPEG cut at 25-75% of
its length), `empty` (0 bytes), `png_named_jpg` (a real PNG, which decoders
may open as PIL does), `random_bytes` (100 B to 50 kB) and
`huge_dims_65500x65500` (a sound JPEG whose SOF0 header claims 65500x65500:
a decoder that allocates before checking asks for 12.9 GB).

    /usr/bin/python3 scripts/make_photos.py --out DIR [--classes 10 --train-per-class 20
        --val-per-class 2 --corrupt 20 --seed 0 --profile imagenet --workers N]
    /usr/bin/python3 scripts/make_photos.py --check     # the source photos present?
    /usr/bin/python3 scripts/make_photos.py --stamp ARGS  # what OUT/DONE will hold

Use Debian's /usr/bin/python3 (python3-pil, python3-numpy). About 40 ms of
CPU per image; the tests' set (220 images) takes 5-10 s on 2 cores.
"""
import argparse
import hashlib
import io
import json
import math
import os
import subprocess
import sys
import time
from multiprocessing import Pool

import numpy as np
from PIL import Image, ImageFile, ImageFilter

# Progressive and optimised encodes keep the whole file in PIL's buffer.
ImageFile.MAXBLOCK = 16 << 20
Image.MAX_IMAGE_PIXELS = 64 << 20  # the largest source is 20 MP

# The source photographs, per Debian package, in the order classes take them
# (see the essay). Paths are absolute on Debian 12.
_KDE = "/usr/share/wallpapers/%s/contents/images/2560x1600.jpg"
_OCV = "/usr/share/doc/opencv-doc/examples/"
PACKAGES = {
    "lomiri-wallpapers-16.04 lomiri-wallpapers-20.04": [
        "/usr/share/backgrounds/%s.jpg" % n for n in (
            "Bridge_by_Sander_Klootwijk", "Dragonfly_by_Bolly", "Picture_0B_by_freespace",
            "Picture_1A_by_freespace", "Wine_by_Jakkub_Mede", "aitzgorri_by_Aitzol_Berasategi",
            "analogpattern_by_Peter_Nerlich", "free_by_Peter_Nerlich",
            "friends_by_Aitzol_Berasategi", "greentock_by_Peter_Nerlich",
            "life_by_Aitzol_Berasategi", "picosdeeuropa_by_Aitzol_Berasategi",
            "seeding_by_Clements_Engelhardt", "sunset_by_Aitzol_Berasategi",
            "Kleiber_by_Lukas_Baubkus")],
    "mate-backgrounds": [
        "/usr/share/backgrounds/mate/nature/%s.jpg" % n for n in (
            "Aqua", "Blinds", "Dune", "Garden", "GreenMeadow", "LadyBird", "RainDrops", "Storm",
            "TwoWings", "Wood", "YellowFlower")],
    "plasma-workspace-wallpapers": [
        _KDE % n for n in (
            "BytheWater", "ColdRipple", "ColorfulCups", "DarkestHour", "EveningGlow", "FallenLeaf",
            "Grey", "Kite", "OneStandsOut", "Path", "summer_1am")],
    "opencv-doc": [
        _OCV + n for n in (
            "data/aloeL.jpg", "data/baboon.jpg", "data/board.jpg", "data/building.jpg",
            "data/chicky_512.png", "data/fruits.jpg", "data/graf1.png", "data/leuvenA.jpg",
            "data/messi5.jpg", "data/squirrel_cls.jpg", "data/ela_original.jpg",
            "text/scenetext01.jpg", "text/scenetext02.jpg", "text/scenetext05.jpg",
            "alphamat/input_images/plant.jpg")],
}
# Debian packages whose versions decide the output bytes (recorded in stats.json).
VERSIONED = ["python3-pil", "libjpeg62-turbo", "python3-numpy"] + " ".join(PACKAGES).split()


def source_order():
    """[(package, path)]: one photo of each package in turn, until all are taken."""
    lists = [[(pkg, p) for p in paths] for pkg, paths in PACKAGES.items()]
    out = []
    for k in range(max(map(len, lists))):
        out += [l[k] for l in lists if k < len(l)]
    return out


SOURCES = source_order()
TILE_PIXELS = 1.5e6
MAX_TILES = 4
# (aspect w/h, weight): ImageNet's mix, a third of it portrait.
ASPECTS = [(4 / 3, 40), (3 / 2, 20), (1.0, 6), (16 / 9, 5), (3 / 4, 18), (2 / 3, 11)]
PROFILES = {
    # quality ranges (lo, hi inclusive, weight); subsampling (PIL: 0 4:4:4, 1 4:2:2, 2 4:2:0, weight)
    "imagenet": dict(quality=[(96, 96, 60), (90, 95, 20), (75, 89, 10), (97, 98, 10)],
                     subsampling=[(0, 75), (2, 18), (1, 7)]),
    "web": dict(quality=[(75, 89, 35), (90, 95, 65)], subsampling=[(2, 80), (0, 15), (1, 5)]),
}
GRAIN = [1.3, 3.2, 5.0, 8.0, 12.0]  # sensor noise sigma, 8-bit levels
# The rare kinds' schedule: image i of class c is of the kind when
# i % period == (first + step * c) % period (see the essay).
SCHEDULE = {"gray": (64, 3, 7), "cmyk": (200, 5, 13), "progressive": (25, 1, 3)}
SPLITS = {"train": 0, "val": 1}
PERMUTATIONS = [[1, 2, 0], [2, 0, 1], [0, 2, 1], [2, 1, 0], [1, 0, 2]]  # all but the identity
CORRUPT_KINDS = ["truncated", "empty", "png_named_jpg", "random_bytes", "huge_dims_65500x65500"]


def scheduled(kind, c, i):
    period, first, step = SCHEDULE[kind]
    return i % period == (first + step * c) % period


def weighted(rng, table):
    """One row of `table` (its last column is the weight), without the weight."""
    w = np.array([row[-1] for row in table], dtype=np.float64)
    row = table[int(rng.choice(len(table), p=w / w.sum()))]
    return row[0] if len(row) == 2 else row[:-1]


def missing_sources():
    """[(package, path)] of the source photos that are not on this machine."""
    return [(pkg, p) for pkg, p in SOURCES if not os.path.isfile(p)]


def plan(n_classes):
    """[(name, source index, tile box, colour variant)] for classes 0..n-1."""
    sizes = []
    for _, path in SOURCES:
        with Image.open(path) as im:
            sizes.append(im.size)
    tiles = [max(1, min(MAX_TILES, int(w * h / TILE_PIXELS))) for w, h in sizes]
    rounds = [(s, t) for t in range(MAX_TILES) for s in range(len(SOURCES)) if t < tiles[s]]
    width = len(str(max(0, n_classes - 1)))
    out = []
    for c in range(n_classes):
        s, t = rounds[c % len(rounds)]
        variant = c // len(rounds)
        (w, h), n = sizes[s], tiles[s]
        # tile t of n along the long side
        if w >= h:
            box = (w * t // n, 0, w * (t + 1) // n, h)
        else:
            box = (0, h * t // n, w, h * (t + 1) // n)
        path = SOURCES[s][1]
        stem = path.split("/")[4] if path.startswith("/usr/share/wallpapers/") else \
            os.path.splitext(os.path.basename(path))[0].split("_by_")[0]
        name = "c%0*d_%s_t%d" % (width, c, stem.lower(), t) + ("_v%d" % variant if variant else "")
        out.append((name, s, box, variant))
    return out


def make_image(tile, variant, profile, rng, c, i):
    """(JPEG bytes, facts) for one image cut from `tile` (a PIL RGB image)."""
    aspect = weighted(rng, ASPECTS)
    long_side = 500 if rng.random() < 0.4 else int(rng.triangular(260, 380, 640))
    short = int(round(long_side / max(aspect, 1 / aspect)))
    w, h = (long_side, short) if aspect >= 1 else (short, long_side)
    tw, th = tile.size
    fit_w = min(tw, th * w / h)                      # the largest window of this aspect
    cw = fit_w * math.sqrt(rng.uniform(0.25, 1.0))   # 25-100% of its area
    ch = cw * h / w
    x0, y0 = rng.uniform(0, tw - cw), rng.uniform(0, th - ch)
    im = tile.resize((w, h), Image.LANCZOS, box=(x0, y0, x0 + cw, y0 + ch), reducing_gap=2.0)
    if rng.random() < 0.5:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    im = im.filter(ImageFilter.UnsharpMask(radius=1.0, percent=int(rng.integers(30, 121)), threshold=0))
    px = np.asarray(im, dtype=np.float32)
    if variant:  # the classes past the last tile: channels permuted, then also darker
        px = px[..., PERMUTATIONS[(variant - 1) % len(PERMUTATIONS)]]
        gamma = 1.0 + 0.25 * ((variant - 1) // len(PERMUTATIONS))
        if gamma != 1.0:
            px = 255.0 * (px / 255.0) ** gamma
    px = px * rng.uniform(0.85, 1.15) + rng.uniform(-12.0, 12.0)  # exposure
    sigma = float(rng.choice(GRAIN))
    px += rng.standard_normal((h, w, 1), dtype=np.float32) * sigma           # luminance grain
    px += rng.standard_normal((h, w, 3), dtype=np.float32) * (sigma / 2)     # chroma grain
    im = Image.fromarray(np.clip(np.rint(px), 0, 255).astype(np.uint8), "RGB")
    mode = "L" if scheduled("gray", c, i) else "CMYK" if scheduled("cmyk", c, i) else "RGB"
    if mode != "RGB":
        im = im.convert(mode)
    lo, hi = weighted(rng, PROFILES[profile]["quality"])
    quality = int(rng.integers(lo, hi + 1))
    subsampling = weighted(rng, PROFILES[profile]["subsampling"])
    progressive = scheduled("progressive", c, i)
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=quality, subsampling=subsampling, progressive=progressive,
            optimize=progressive)
    return buf.getvalue(), dict(w=w, h=h, mode=mode, quality=quality, progressive=progressive,
                                subsampling=subsampling if mode == "RGB" else None)


def make_class(job):
    """Write every image of one class; returns the facts of each."""
    out, seed, profile, counts, c, (name, s, box, variant) = job
    with Image.open(SOURCES[s][1]) as src:
        tile = src.convert("RGB").crop(box)
    facts = []
    for split, n in counts:
        folder = os.path.join(out, split, name)
        os.makedirs(folder, exist_ok=True)
        for i in range(n):
            rng = np.random.default_rng([seed, SPLITS[split], c, i])
            data, f = make_image(tile, variant, profile, rng, c, i)
            with open(os.path.join(folder, "%05d.jpg" % i), "wb") as fh:
                fh.write(data)
            f["bytes"] = len(data)
            facts.append(f)
    return facts


def sof_offset(jpeg):
    """Offset of the SOF0 marker, found by walking the segments (a search for
    the bytes FF C0 could hit a table's contents)."""
    pos = 2
    while pos + 4 <= len(jpeg):
        if jpeg[pos] != 0xFF:
            break
        marker = jpeg[pos + 1]
        if marker == 0xC0:
            return pos
        pos += 2 + int.from_bytes(jpeg[pos + 2:pos + 4], "big")
    raise ValueError("no SOF0 segment before the scan")


def write_corrupt(out, n, seed):
    folder = os.path.join(out, "corrupt")
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng([seed, 2])
    with Image.open(SOURCES[0][1]) as src:
        photo = src.convert("RGB")
    good = io.BytesIO()
    photo.resize((400, 300), Image.LANCZOS).save(good, "JPEG", quality=90)  # baseline, 4:2:0
    good = good.getvalue()
    png = io.BytesIO()
    photo.resize((64, 48), Image.LANCZOS).save(png, "PNG")
    sof = sof_offset(good)  # FF C0, length (2), precision (1), height (2), width (2)
    huge = good[:sof + 5] + (65500).to_bytes(2, "big") * 2 + good[sof + 9:]
    for k in range(n):
        kind = CORRUPT_KINDS[k % len(CORRUPT_KINDS)]
        if kind == "truncated":
            data = good[:int(rng.integers(len(good) // 4, len(good) * 3 // 4))]
        elif kind == "empty":
            data = b""
        elif kind == "png_named_jpg":
            data = png.getvalue()
        elif kind == "random_bytes":
            data = rng.bytes(int(rng.integers(100, 50001)))
        else:
            data = huge
        with open(os.path.join(folder, "%04d_%s.jpg" % (k, kind)), "wb") as fh:
            fh.write(data)


def package_versions():
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\n"] + VERSIONED,
                             capture_output=True, text=True).stdout
    except OSError:
        return {}
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def stamp(args):
    """What DONE holds: the generator's hash and the arguments that decide
    the output (scripts/photos-small.sh remakes a set whose stamp differs)."""
    with open(os.path.abspath(__file__), "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()[:16]
    return "make_photos.py %s classes=%d train=%d val=%d corrupt=%d seed=%d profile=%s\n" % (
        digest, args.classes, args.train_per_class, args.val_per_class, args.corrupt, args.seed,
        args.profile)


def summary(facts, args):
    n = len(facts)
    share = lambda pred: "%.2f%%" % (100.0 * sum(1 for f in facts if pred(f)) / n)
    sizes = sorted(f["bytes"] for f in facts)
    shorts = sorted(min(f["w"], f["h"]) for f in facts)
    return dict(
        images=n, classes=args.classes,
        total_mb=round(sum(sizes) / 2**20, 1), mean_kb=round(sum(sizes) / n / 1024, 1),
        median_kb=round(sizes[n // 2] / 1024, 1),
        mean_wxh="%.0fx%.0f" % (sum(f["w"] for f in facts) / n, sum(f["h"] for f in facts) / n),
        short_side_p10_p50_p90=[shorts[n // 10], shorts[n // 2], shorts[9 * n // 10]],
        mean_quality=round(sum(f["quality"] for f in facts) / n, 1),
        rgb_444=share(lambda f: f["subsampling"] == 0), rgb_422=share(lambda f: f["subsampling"] == 1),
        rgb_420=share(lambda f: f["subsampling"] == 2), grayscale=share(lambda f: f["mode"] == "L"),
        cmyk=share(lambda f: f["mode"] == "CMYK"), progressive=share(lambda f: f["progressive"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--out", help="the folder to write (made; files in it are overwritten)")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--train-per-class", type=int, default=20)
    ap.add_argument("--val-per-class", type=int, default=2)
    ap.add_argument("--corrupt", type=int, default=0, metavar="N", help="N hostile files in OUT/corrupt/")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", choices=sorted(PROFILES), default="imagenet", help="JPEG settings mix")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--check", action="store_true",
                    help="only check that the source photos are present (exit 1 naming the packages if not)")
    ap.add_argument("--stamp", action="store_true",
                    help="only print what OUT/DONE will hold for these arguments (scripts/photos-small.sh)")
    args = ap.parse_args()
    if args.stamp:
        sys.stdout.write(stamp(args))
        return

    missing = missing_sources()
    if missing:
        pkgs = sorted({pkg for pkg, _ in missing})
        print("make_photos.py: %d source photos missing, e.g. %s: install %s (scripts/install-deps.sh)"
              "; if they are installed, a dpkg path-exclude (/etc/dpkg/dpkg.cfg.d/) may drop "
              "/usr/share/doc or /usr/share/backgrounds" % (len(missing), missing[0][1], " ".join(pkgs)),
              file=sys.stderr)
        sys.exit(1)
    if args.check:
        print("make_photos.py: all %d source photos present" % len(SOURCES))
        return
    if not args.out:
        ap.error("--out is required")
    if args.classes < 1 or min(args.train_per_class, args.val_per_class, args.corrupt) < 0:
        ap.error("--classes must be at least 1; the counts at least 0")

    t0 = time.time()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    done = os.path.join(out, "DONE")
    if os.path.exists(done):
        os.unlink(done)
    classes = plan(args.classes)
    counts = [("train", args.train_per_class), ("val", args.val_per_class)]
    jobs = [(out, args.seed, args.profile, counts, c, cls) for c, cls in enumerate(classes)]
    jobs.sort(key=lambda j: -os.path.getsize(SOURCES[j[5][1]][1]))  # the slow big photos first
    facts = []
    with Pool(max(1, args.workers)) as pool:
        for k, f in enumerate(pool.imap_unordered(make_class, jobs)):
            facts += f
            if (k + 1) % max(1, len(jobs) // 10) == 0 or k + 1 == len(jobs):
                print("make_photos.py: %d/%d classes, %d images, %.0f s"
                      % (k + 1, len(jobs), len(facts), time.time() - t0), file=sys.stderr, flush=True)
    if args.corrupt:
        write_corrupt(out, args.corrupt, args.seed)
    with open(os.path.join(out, "classes.txt"), "w") as fh:
        for name, s, box, variant in classes:
            fh.write("%s\t%s\t%s\tbox=%s\tvariant=%d\n" % (name, SOURCES[s][0], SOURCES[s][1],
                                                        ",".join(map(str, box)), variant))
    # no times in the files: the whole folder is the same for the same arguments
    info = summary(facts, args) if facts else dict(images=0)
    kept = ("classes", "train_per_class", "val_per_class", "corrupt", "seed", "profile")
    info.update(args={k: getattr(args, k) for k in kept}, packages=package_versions())
    with open(os.path.join(out, "stats.json"), "w") as fh:
        json.dump(info, fh, indent=1, sort_keys=True)
        fh.write("\n")
    print("make_photos.py: %.1f s" % (time.time() - t0), file=sys.stderr)
    for k in ("images", "total_mb", "mean_kb", "mean_wxh", "rgb_444", "rgb_420", "grayscale", "cmyk",
              "progressive"):
        if k in info:
            print("%14s: %s" % (k, info[k]))
    with open(done, "w") as fh:  # last: a set without it is unfinished
        fh.write(stamp(args))


if __name__ == "__main__":
    main()
