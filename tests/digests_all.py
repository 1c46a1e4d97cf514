#!/usr/bin/python3
"""Digests of every preset, op, reader and loader option, compared across builds.

The instrument behind issue 27's "digests identical to before on every preset and reader
(GCC, clang, pip)": the same small datasets run through every build given, and every
digest must agree. tests/compare_builds.py (run by scripts/test.sh) checks five pipelines;
this checks the whole surface a refactor could move:

    /usr/bin/python3 tests/digests_all.py --cli /work/base/build/stoker --cli build-x/stoker \\
        [--cli build-clang/stoker] [--python-site DIR] [--photos DIR] [--only REGEX] [--out FILE]

Rows ("configs"), each one digest per build:

- `preset:*`  every named pipeline of src/ops/spec.c's preset table (and a replaced `to`),
  and every normalize preset of ops_builtin.c, on the photos set;
- `op:*`      specs that use every row of src/ops/op_table.c at least once (pad modes,
  random_crop, center_crop with and without padding, flips, random_resized_crop and resize
  with each interpolation, rotate, affine, color_jitter, the uint8 point ops, grayscale,
  gaussian_blur, random_apply, random_erasing, the three augmentation policies, a plugin's
  user op, random_bbox_crop), ending in each dtype and layout;
- `read:*`    one dataset of every reader: imagefolder, list, cifar10, cifar100, mnist, idx,
  fashion-mnist, stk (pack keep, --restart, --raw --zstd, --reencode, a raw pack; io and
  verify query keys), tfrecord, wds, lmdb (encoded and raw Datums), recordio, hdf5 (vlen
  and arrays), npy (.npy and .npz), zarr, coco (boxes, semantic and instance masks),
  segfolder (masks);
- `loader:*`  shuffle global/block/none, rank 1 of 2, drop_last, seeds, aug_seed, views,
  indices, weights, balance_classes, num_samples, epochs, on_error skip/replace over
  corrupt files, threads 1 against 2 (a `threads1` row must equal its twin in every build),
  and the emulated GPU path (STOKER_CUDA_EMULATE=1: equal to the host's row);
- `order:*`   `stoker order` of the sampler's modes (the hash of its output);
- `pack:*`    the bytes of `stoker pack` outputs, packed by each build;
- `py:*`      through the Python module (each CMake build's DIR/python, and --python-site):
  transforms objects, keyword options, concat, mixing, from_numpy (the in-memory reader),
  ExternalSource (the callback reader), fields.

With --python-site the pip build also runs every CLI row through `python -m stoker` (the
same C tool compiled into the extension). Datasets are written by the generators the tests
and benchmarks use (bench/write_formats.py, tests/python/caffe_datum.py,
tests/python/test_{zarr,segfolder}_reader.py's writers; Pillow for the codecs) into
/tmp/digests-all-work (--work): a fixed path, since shards and fields name their sources'
paths. The .stk sets read by `read:` rows are packed by the first --cli. The photos set is the small
one of scripts/photos-small.sh, kept in /tmp/digests-photos (--photos DIR for another).
Not covered: the remote readers (http/s3 need the servers of tests/net).

Prints a table (config x build); exits 1 when any row differs across builds, or a twin row
differs from its twin, 0 otherwise. Deterministic: the same builds give the same table.
"""
import argparse
import ast
import glob
import gzip
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
SEED = 11
PHOTO_ARGS = ["--classes", "10", "--train-per-class", "20", "--val-per-class", "2",
              "--corrupt", "20", "--seed", "0", "--profile", "imagenet"]

# --- the rows -------------------------------------------------------------------------
# (name, dataset key, spec, extra CLI args, batch, options); options: "twin" = a row this one
# must equal in every build, "env" = extra environment.
ENC = "random_resized_crop 48 | flip | normalize imagenet | to f16"
CIFAR = "pad 4 | random_crop 32 | flip 0.5 | normalize cifar10 | to f32 chw"
ROWS = []


def row(name, ds, spec, *extra, batch=16, twin=None, env=None):
    ROWS.append((name, ds, spec, [str(e) for e in extra], batch, {"twin": twin, "env": env}))


# presets (src/ops/spec.c) on the whole photos train set
for p in ("imagenet-train-few", "imagenet-train-extensive", "imagenet-val"):
    row("preset:" + p, "photos", p, batch=32)
row("preset:imagenet-val|to f16", "photos", "imagenet_val | to f16", batch=32)
row("preset:imagenet-train-few|to bf16 hwc", "sub", "imagenet-train-few | to bf16 hwc")
# normalize presets (ops_builtin.c)
row("preset:normalize cifar10", "cifar10", CIFAR, batch=64)
row("preset:normalize imagenet", "sub", "resize 40 | center_crop 32 | normalize imagenet")
row("preset:normalize mnist", "mnist", "normalize mnist | to f32", batch=64)
row("preset:normalize fashion-mnist", "fashion-mnist",
    "pad 2 | random_crop 28 | normalize fashion-mnist | to f16 hwc", batch=64)
row("preset:normalize fashion_mnist", "mnist", "normalize fashion_mnist | to bf16", batch=64)

# every op of src/ops/op_table.c; images of varying size (the "sub" list of 40 photos)
OPS = [
    ("decode+rrc bilinear", "decode | random_resized_crop 64 | hflip | normalize imagenet | to f32 chw"),
    ("rrc bicubic ranges", "random_resized_crop 64,48 scale=0.2:1 ratio=0.5:2 interpolation=bicubic"
     " | vflip 0.3 | to u8 hwc"),
    ("resize+center_crop", "resize 72 | center_crop 64 | to f16 hwc"),
    ("resize nearest", "resize 64,80 interpolation=nearest | flip 1 | to uint8"),
    ("resize bicubic+normalize 255", "resize 96 interpolation=bicubic | center_crop 80 | normalize "
     "mean=123.675,116.28,103.53 std=58.395,57.12,57.375 scale=255 | to bf16 chw"),
    ("center_crop pads", "center_crop 500 | resize 64,64 | to u8"),
    ("center_crop pads+flip+rrc", "center_crop 400,480 | flip 1 | random_resized_crop 56 | "
     "normalize imagenet | to f32 hwc"),
    ("center_crop pads+posterize", "center_crop 460 | posterize 3 p=1 | resize 48,48 | to u8"),
    ("random_crop", "resize 80 | random_crop 64 | vflip | to f32 hwc"),
    ("rotate", "random_resized_crop 64 | rotate 30 fill=128 | normalize imagenet | to f32"),
    ("rotate range", "resize 60,70 | rotate -10:45 fill=1,2,3 | to float16 hwc"),
    ("affine nearest", "random_resized_crop 64 | affine 20 translate=0.1,0.2 scale=0.8:1.2 "
     "shear=10 | to f32"),
    ("affine bilinear", "resize 56,64 | affine 15 shear=-5,5,-3,3 interpolation=bilinear "
     "fill=10,20,30 | flip | normalize imagenet | to half"),
    ("color_jitter", "random_resized_crop 64 | color_jitter 0.4 0.4 0.4 0.1 | normalize imagenet"),
    ("color_jitter keys", "resize 48,48 | color_jitter brightness=0.2:1.5 saturation=0.5 hue=0.3 "
     "| to f32 hwc"),
    ("point ops after resize", "resize 64,64 | posterize 3 p=0.7 | solarize 128 | invert 0.4 "
     "| to u8"),
    ("point ops before resize", "posterize bits=4 | solarize threshold=100 p=0.6 | "
     "random_resized_crop 48 | to f16"),
    ("grayscale+blur", "random_resized_crop 64 | grayscale 0.5 | gaussian_blur 5 sigma=0.1:2 | "
     "normalize imagenet | to f32"),
    ("blur kx,ky", "resize 40,52 | gaussian_blur 7,3 sigma=1.5 | to bfloat16 hwc"),
    ("simclr", "random_resized_crop 96 interpolation=bicubic | flip | random_apply 0.8 | "
     "color_jitter 0.4 0.4 0.4 0.1 | grayscale 0.2 | gaussian_blur 9 | normalize imagenet | "
     "random_erasing 0.5 | to bf16"),
    ("random_apply n=2", "resize 48,48 | invert 1 | random_apply 0.5 n=2 | rotate 10 | "
     "grayscale 1 | normalize imagenet"),
    ("random_erasing random", "random_resized_crop 48 | normalize imagenet | random_erasing 0.9 "
     "scale=0.1:0.4 ratio=0.5:2 value=random | random_erasing 1 value=0.5 | to f32 hwc"),
    ("random_erasing u8", "resize 40,40 | random_erasing 1 value=1,2,3 | to u8 chw"),
    ("auto_augment imagenet", "random_resized_crop 64 | flip | auto_augment imagenet | "
     "normalize imagenet"),
    ("auto_augment cifar10 fill", "resize 48,48 | auto_augment cifar10 fill=128 | to u8"),
    ("auto_augment svhn", "resize 48,48 | auto_augment policy=svhn | to f16"),
    ("rand_augment", "random_resized_crop 64 | flip | rand_augment | normalize imagenet | "
     "to f32 chw"),
    ("rand_augment keys", "resize 48,48 | rand_augment num_ops=3 magnitude=5 fill=64 | to u8"),
    ("trivial_augment_wide", "random_resized_crop 64 | trivial_augment_wide | normalize imagenet"),
    ("trivial_augment_wide 15", "resize 48,48 | trivial_augment_wide 15 fill=7 | rotate 5 | to u8"),
    ("random_apply flip+point+blur", "resize 48,48 | random_apply 0.6 n=3 | flip 1 | solarize 100 "
     "| gaussian_blur 3 | normalize imagenet"),
    ("plugin user op", "plugin {plugin} | resize 48,48 | brightness 1.5 | normalize imagenet"),
]
for n, s in OPS:
    row("op:" + n, "sub", s)
# fixed-shape raw input: the fused kernel (CIFAR 32x32x3)
FIXED = [
    ("identity", ""),
    ("pad reflect", "pad 2,4 mode=reflect | random_crop 32 | vflip | to f16 hwc"),
    ("pad ltrb fill", "pad 1,2,3,4 fill=1,2,3 | center_crop 30 | to bf16"),
    ("pad edge", "pad 3 mode=edge | random_crop 30 | flip | to f32 hwc"),
    ("pad symmetric", "pad 3 padding_mode=symmetric | random_crop 32 | normalize 0.5 0.25 | to f16"),
    ("random_crop padding", "random_crop 28 padding=4 fill=9 | normalize mean=0.5,0.4,0.3 "
     "std=0.2,0.3,0.4 | to f32 chw"),
    ("point ops", "posterize 5 p=0.5 | solarize 64 | invert | to u8"),
    ("color_jitter", "random_crop 28 | color_jitter 0.3 0.3 0.3 0.05 | to f32"),
    ("resize", "resize 40 | random_crop 36 | to u8"),
    ("rand_augment", "rand_augment 2 9 | normalize cifar10"),
    ("auto_augment", "pad 4 | random_crop 32 | flip | auto_augment cifar10 | normalize cifar10 | "
     "random_erasing 0.25"),
]
for n, s in FIXED:
    row("op:fixed " + n, "cifar10", s, batch=64)

# readers: one dataset of each
for key in ("val", "sub", "stk-keep", "stk-restart", "stk-raw", "stk-reencode", "tfrecord",
            "wds", "lmdb", "recordio", "hdf5"):
    row("read:" + key, key, ENC, "--epochs", 2)
row("read:codecs", "codecs", ENC, "--epochs", 2, batch=8)
row("read:codecs resize", "codecs", "resize 40,40 | flip | to u8", batch=8)
row("read:codecs center_crop pads", "codecs", "center_crop 64 | to f32 hwc", batch=8)
row("read:stk-keep io=pread verify=always", "stk-keep-q", ENC)
row("read:stk-restart crops", "stk-restart", "random_resized_crop 32 scale=0.05:0.2 | to u8")
row("read:stk-cifar", "stk-cifar", CIFAR, batch=64)
row("read:cifar10", "cifar10", CIFAR, "--epochs", 2, batch=64)
row("read:cifar100 fine", "cifar100", CIFAR, batch=64)
row("read:cifar100 coarse", "cifar100-coarse", "random_crop 30 | to u8", batch=64)
row("read:mnist gz", "mnist", "pad 2 | random_crop 28 | flip | normalize mnist", batch=64)
row("read:idx", "idx", "resize 20,20 | to u8", batch=64)
row("read:npy", "npy", "random_crop 56 | flip | normalize imagenet | to f32", batch=8)
row("read:npz", "npz", "pad 2 | random_crop 9,13 | flip | to f32", batch=8)
row("read:zarr zstd", "zarr", "pad 2 | random_crop 9,13 | vflip | to f16 hwc", batch=8)
row("read:zarr blosc gray", "zarr-gray", "resize 12,12 | to u8", batch=8)
row("read:lmdb raw datum", "lmdb-raw", CIFAR, batch=16)
row("read:hdf5 arrays", "hdf5-raw", "random_crop 56 | normalize imagenet", batch=8)
row("read:segfolder mask", "segfolder", "random_resized_crop 24 | flip | vflip | to u8",
    "--fields", "image,label,mask", batch=4)
row("read:segfolder mask float ops", "segfolder", "random_resized_crop 24 | rotate 15 | "
    "color_jitter 0.2 0.2 | affine 10 | to f32", "--fields", "image,mask", batch=4)
row("op:gray float ops", "mnist", "resize 32,32 | rotate 20 | grayscale 1 | color_jitter 0.3 0.3 "
    "| gaussian_blur 3 | normalize mnist | random_erasing 1", batch=64)
row("read:coco instance views 2", "coco-instance", "random_resized_crop 32 | flip | to u8",
    "--fields", "image,mask,boxes", "--views", 2, batch=4)
row("read:coco boxes", "coco", "random_bbox_crop | resize 32,32 | flip 0.5 | normalize imagenet",
    "--fields", "image,label,boxes,box_labels,image_id,iscrowd", batch=4)
row("read:coco semantic", "coco-semantic", "random_resized_crop 32 | flip | to u8",
    "--fields", "image,mask,boxes,box_labels", batch=4)
row("read:coco instance", "coco-instance", "resize 40,40 | vflip | to u8",
    "--fields", "image,label,mask,geometry,index,path", batch=4)

# loader options (on the 40-photo list unless said)
L = "random_resized_crop 40 | flip | color_jitter 0.2 0.2 0.2 | normalize imagenet | to f16"
row("loader:base", "sub", L, "--epochs", 2)
row("loader:threads1", "sub", L, "--epochs", 2, "--threads", 1, twin="loader:base")
row("loader:threads2 prefetch1", "sub", L, "--epochs", 2, "--prefetch", 1, twin="loader:base")
row("loader:seed 12345", "sub", L, "--seed", 12345)
row("loader:aug-seed", "sub", L, "--aug-seed", 3)
row("loader:no-shuffle", "sub", L, "--no-shuffle")
row("loader:shuffle none", "sub", L, "--shuffle", "none", twin="loader:no-shuffle")
row("loader:shuffle block", "sub", L, "--shuffle", "block", "--block-size", 8,
    "--shuffle-window", 3, "--epochs", 2)
row("loader:shuffle block threads1", "sub", L, "--shuffle", "block", "--block-size", 8,
    "--shuffle-window", 3, "--epochs", 2, "--threads", 1, twin="loader:shuffle block")
row("loader:rank1 of 2", "sub", L, "--rank", 1, "--world-size", 2, "--epochs", 2)
row("loader:rank1 of 2 drop-last", "sub", L, "--rank", 1, "--world-size", 2, "--drop-last",
    batch=6)
row("loader:drop-last", "sub", L, "--drop-last", batch=12)
row("loader:views 3", "sub", L, "--views", 3, batch=8)
row("loader:indices", "sub", L, "--indices", "{work}/indices.txt")
row("loader:weights", "sub", L, "--weights", "{work}/weights.txt", "--num-samples", 50)
row("loader:balance-classes", "sub", L, "--balance-classes", "--num-samples", 30)
row("loader:num-samples 70", "sub", L, "--num-samples", 70)
row("loader:on-error skip", "corrupt-mix", ENC, "--on-error", "skip", "--epochs", 2)
row("loader:on-error replace", "corrupt-mix", ENC, "--on-error", "replace", "--epochs", 2)
row("loader:on-error replace threads1", "corrupt-mix", ENC, "--on-error", "replace", "--epochs",
    2, "--threads", 1, twin="loader:on-error replace")
row("loader:memory-limit", "sub", L, "--memory-limit", "64M", "--threads", 1,
    twin="loader:seed 11 one epoch")
row("loader:seed 11 one epoch", "sub", L)
row("loader:cifar threads1", "cifar10", CIFAR, "--threads", 1, "--epochs", 2, batch=64,
    twin="read:cifar10")
row("loader:cifar block rank1/2", "cifar10", CIFAR, "--shuffle", "block", "--block-size", 16,
    "--rank", 1, "--world-size", 2, "--drop-last", batch=48)
G = "random_resized_crop 48 | flip | normalize imagenet | to f16"
row("loader:gpu host twin", "sub", G)
row("loader:gpu emulated placement gpu", "sub", G, "--device", "cuda:0", "--placement", "gpu",
    twin="loader:gpu host twin", env={"STOKER_CUDA_EMULATE": "1"})
row("loader:gpu emulated placement cpu", "sub", G, "--device", "cuda:0", "--placement", "cpu",
    twin="loader:gpu host twin", env={"STOKER_CUDA_EMULATE": "1"})
GC = "random_resized_crop 32 scale=0.5:1 | flip | normalize cifar10 | to f32 hwc"
row("loader:gpu host twin cifar", "cifar10", GC, batch=64)
row("loader:gpu emulated cifar", "cifar10", GC, "--device", "cuda:0", "--placement", "gpu",
    batch=64, twin="loader:gpu host twin cifar", env={"STOKER_CUDA_EMULATE": "1"})

ORDERS = [  # stoker order ARGS...: the hash of what it prints
    ("global", ["1000", "--seed", "3", "--epoch", "2"]),
    ("none rank", ["1000", "--no-shuffle", "--rank", "1", "--world-size", "3"]),
    ("block", ["1000", "--shuffle", "block", "--block-size", "16", "--shuffle-window", "4",
               "--rank", "2", "--world-size", "4", "--epoch", "1"]),
    ("drop-last", ["1001", "--batch", "32", "--drop-last", "--rank", "1", "--world-size", "2"]),
    ("start-slot", ["1000", "--world-size", "3", "--start-slot", "640", "--seed", "5"]),
    ("weights", ["{sub}", "--weights", "{work}/weights.txt", "--num-samples", "77"]),
    ("balance", ["{sub}", "--balance-classes", "--num-samples", "60", "--seed", "9"]),
    ("indices", ["{sub}", "--indices", "{work}/indices.txt", "--seed", "2"]),
    ("mix", ["205", "--mix-sizes", "185,20", "--mix-weights", "1,1", "--num-samples", "400"]),
]

PACKS = [  # pack:NAME: SRC key, options; each build packs, the shard bytes are hashed
    ("keep", "sub", []),
    ("restart 4", "sub", ["--restart", "4"]),
    ("raw zstd", "val", ["--raw", "--zstd", "3"]),
    ("reencode", "val", ["--reencode", "--max-side", "128", "--quality", "85"]),
    ("cifar", "cifar10", ["--shard-size", "200K"]),
]

# --- the Python module's rows (run in a fresh interpreter per build) -------------------
PY_CODE = r'''
import json, sys, numpy as np, xxhash, stoker
uris, work = json.loads(sys.argv[1]), sys.argv[2]
SEED = 11
def h_of(batches):
    """Hashed as they come: a Loader lends only so many batch buffers."""
    h = xxhash.xxh3_128()
    for b in batches:
        for part in (b if isinstance(b, tuple) else (b,)):
            if isinstance(part, np.ndarray):
                h.update(str(part.dtype).encode() + str(part.shape).encode())
                h.update(np.ascontiguousarray(part).view(np.uint8).tobytes())
            elif hasattr(part, "values") and hasattr(part, "offsets"):
                h.update(np.ascontiguousarray(np.asarray(part.values)).view(np.uint8).tobytes())
                h.update(np.asarray(part.offsets, dtype="<i8").tobytes())
            elif isinstance(part, (list, tuple)):
                h.update(repr(part).encode())
            else:
                a = np.asarray(part)
                h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
    return "%032x" % h.intdigest()
def L(ds, **kw):
    kw.setdefault("batch_size", 16); kw.setdefault("seed", SEED); kw.setdefault("shuffle", True)
    kw.setdefault("num_threads", 2); kw.setdefault("output", "numpy")
    return stoker.Loader(ds, **kw)
def epochs(loader, n=1):
    for e in range(n):
        loader.set_epoch(e)
        yield from loader
def rows():
    T = stoker
    sub, cifar = uris["sub"], uris["cifar10"]
    yield "py:pipeline=preset", lambda: epochs(L(uris["photos"], pipeline="imagenet-train-few",
                                                 batch_size=32))
    yield "py:transforms f16 nhwc", lambda: epochs(L(sub, transforms=[
        T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
        T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))], dtype="float16",
        layout="NHWC"), 2)
    yield "py:transforms cifar bf16", lambda: epochs(L(cifar, batch_size=64, transforms=[
        T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.Normalize(
            (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))], dtype="bfloat16"))
    yield "py:torchvision compose", lambda: epochs(L(sub, transforms=__import__(
        "torchvision").transforms.Compose([__import__("torchvision").transforms.Resize(56),
        __import__("torchvision").transforms.CenterCrop(48),
        __import__("torchvision").transforms.RandomHorizontalFlip(),
        __import__("torchvision").transforms.ToTensor()])))
    yield "py:options", lambda: epochs(L(sub, pipeline="random_resized_crop 40 | flip | to u8",
        shuffle="block", block_size=8, shuffle_window=3, rank=1, world_size=2, drop_last=True,
        batch_size=6, aug_seed=5, num_threads=1, prefetch=1), 2)
    yield "py:views indices", lambda: epochs(L(sub, pipeline="random_resized_crop 40 | to f32",
        views=2, indices=[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 35], batch_size=5), 2)
    yield "py:weights num_samples", lambda: epochs(L(sub, pipeline="resize 32,32 | flip | to u8",
        weights=[(i % 7) + 0.5 for i in range(40)], num_samples=50))
    yield "py:balance_classes", lambda: epochs(L(sub, pipeline="resize 32,32 | to u8",
        balance_classes=True, num_samples=30))
    yield "py:on_error replace", lambda: epochs(L(uris["corrupt-mix"], on_error="replace",
        pipeline="random_resized_crop 32 | to u8"))
    yield "py:with indices", lambda: L(cifar, pipeline="random_crop 28 | to u8",
        batch_size=64).iter_with_indices()
    yield "py:concat", lambda: epochs(L(stoker.concat([stoker.open(uris["val"]),
        stoker.open(uris["tfrecord"])]), pipeline="random_resized_crop 40 | flip | to f16"))
    yield "py:mix proportions", lambda: epochs(L([uris["val"], uris["wds"]], proportions=[1, 3],
        num_samples=50, pipeline="random_resized_crop 40 | flip | to u8"), 2)
    rng = np.random.default_rng(5)
    arr = rng.integers(0, 256, (50, 24, 20, 3), dtype=np.uint8)
    lab = rng.integers(0, 7, 50)
    yield "py:from_numpy", lambda: epochs(L(stoker.from_numpy(arr, lab),
        pipeline="pad 2 | random_crop 24,20 | flip | normalize imagenet | to f32"), 2)
    files = sorted(__import__("glob").glob(uris["val_dir"] + "/*/*.jpg"))
    class Src:
        def __len__(self): return len(files)
        def __getitem__(self, i):
            with open(files[i], "rb") as f: return f.read(), i % 4
    yield "py:ExternalSource encoded", lambda: epochs(L(stoker.ExternalSource(Src()),
        pipeline="random_resized_crop 40 | flip | normalize imagenet | to f16", batch_size=6), 2)
    class Arrays:
        def __len__(self): return 50
        def __getitem__(self, i): return arr[i], int(lab[i])
    yield "py:ExternalSource arrays", lambda: epochs(L(stoker.ExternalSource(Arrays()),
        pipeline="random_crop 20 | flip | to u8", batch_size=8))
    def resume(ws_from, ws_to, batch_to):
        spec = "random_resized_crop 32 | flip | to u8"
        a = L(sub, pipeline=spec, batch_size=4, world_size=ws_from, rank=0)
        a.set_epoch(1)
        it = iter(a)
        for _ in range(3):
            next(it)
        st = a.state_dict()
        yield [repr(sorted(st.items()))]
        b = L(sub, pipeline=spec, batch_size=batch_to, world_size=ws_to, rank=ws_to - 1)
        b.load_state_dict(st)
        yield from b
    yield "py:resume", lambda: resume(1, 1, 4)
    yield "py:resume other world size", lambda: resume(2, 3, 3)
    yield "py:coco fields", lambda: epochs(L(uris["coco"], batch_size=4,
        pipeline="random_bbox_crop | resize 32,32 | flip 0.5 | normalize imagenet | to f32 chw",
        fields=["image", "boxes", "box_labels", "image_id"]))
    yield "py:segfolder mask", lambda: epochs(L(uris["segfolder"], batch_size=4,
        pipeline="random_resized_crop 24 | flip | to u8", fields=["image", "mask", "geometry"]))
out = {}
for name, make in rows():
    try:
        out[name] = h_of(make())
    except Exception as e:  # a row that fails is a value to compare, not a crash
        out[name] = "ERROR %s: %s" % (type(e).__name__, str(e).splitlines()[0][:80])
print(json.dumps({"file": stoker.__file__, "digests": out}))
'''


# --- datasets --------------------------------------------------------------------------

def load_defs(path, names, ns):
    """The top-level definitions `names` of a test module, without running its imports
    (which open a build's library): the tests' own writers, reused as they are."""
    tree = ast.parse(open(path).read(), path)
    body = [n for n in tree.body if (isinstance(n, ast.FunctionDef) and n.name in names) or
            (isinstance(n, ast.Assign) and any(getattr(t, "id", None) in names for t in n.targets))]
    missing = set(names) - {getattr(n, "name", None) for n in body} - {
        t.id for n in body if isinstance(n, ast.Assign) for t in n.targets}
    if missing:
        sys.exit("digests_all: %s no longer defines %s" % (path, ", ".join(sorted(missing))))
    exec(compile(ast.Module(body=body, type_ignores=[]), path, "exec"), ns)
    return ns


def photos_set(where):
    """The small photos set (scripts/photos-small.sh's arguments), made once in `where`."""
    want = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "make_photos.py"),
                           "--stamp"] + PHOTO_ARGS, capture_output=True, text=True, check=True)
    try:
        have = open(os.path.join(where, "DONE")).read()
    except OSError:
        have = None
    if have != want.stdout:
        print("making the photos set in %s" % where, flush=True)
        shutil.rmtree(where + ".tmp", ignore_errors=True)
        subprocess.run(["nice", "-n", "10", "/usr/bin/python3",
                        os.path.join(ROOT, "scripts", "make_photos.py"), "--out", where + ".tmp"]
                       + PHOTO_ARGS, check=True, stdout=subprocess.DEVNULL)
        shutil.rmtree(where, ignore_errors=True)
        os.rename(where + ".tmp", where)
    return where


def write_idx(path, arr, gz=False):
    """IDX (MNIST) files: magic 0 0 type ndim, big-endian u32 dims, the bytes."""
    head = struct.pack(">BBBB", 0, 0, 0x08, arr.ndim) + struct.pack(">%dI" % arr.ndim, *arr.shape)
    data = head + arr.astype(np.uint8).tobytes()
    with (gzip.GzipFile(path, "wb", mtime=0) if gz else open(path, "wb")) as f:
        f.write(data)


def write_coco(root, n=16, seed=0):
    """A COCO instances file of polygons and (uncompressed RLE) crowd regions, after
    tests/python/test_coco_reader.py's build() (its compressed RLE needs pycocotools)."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    img_dir = os.path.join(root, "images")
    os.makedirs(img_dir)
    cats = [{"id": 18, "name": "dog"}, {"id": 1, "name": "person"}, {"id": 3, "name": "car"}]
    images, anns = [], []
    for k in range(n):
        image_id = 10 * k + 7
        h, w = int(rng.integers(20, 90)), int(rng.integers(20, 120))
        name = "%012d.jpg" % image_id
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(
            os.path.join(img_dir, name), quality=90)
        images.append({"id": image_id, "file_name": name, "height": h, "width": w})
        for _ in range(0 if k == 3 else int(rng.integers(1, 6))):
            cat = int(rng.choice([c["id"] for c in cats]))
            if rng.random() < 0.75:
                nv = int(rng.integers(3, 9))
                xs, ys = rng.uniform(-0.2 * w, 1.2 * w, nv), rng.uniform(-0.2 * h, 1.2 * h, nv)
                seg = [[round(float(v), 2) for v in np.stack([xs, ys], 1).ravel()]]
                bbox = [float(xs.min()), float(ys.min()), float(xs.max() - xs.min()),
                        float(ys.max() - ys.min())]
                crowd = 0
            else:
                m = np.zeros((h, w), np.uint8)
                y0, x0 = int(rng.integers(0, h)), int(rng.integers(0, w))
                m[y0:y0 + int(rng.integers(1, h)), x0:x0 + int(rng.integers(1, w))] = 1
                flat = m.ravel(order="F")
                edges = np.concatenate([[0], np.flatnonzero(np.diff(flat)) + 1, [flat.size]])
                counts = np.diff(edges).tolist()
                if flat[0] == 1:
                    counts = [0] + counts
                seg = {"size": [h, w], "counts": counts}
                ys_, xs_ = np.nonzero(m)
                bbox = [float(xs_.min()), float(ys_.min()), float(xs_.max() - xs_.min() + 1),
                        float(ys_.max() - ys_.min() + 1)]
                crowd = 1
            anns.append({"id": 100 + len(anns), "image_id": image_id, "category_id": cat,
                         "segmentation": seg, "area": 1.0, "bbox": bbox, "iscrowd": crowd})
    rng.shuffle(anns)
    path = os.path.join(root, "instances.json")
    with open(path, "w") as f:
        json.dump({"images": images, "annotations": anns, "categories": cats}, f)
    return img_dir, path


def make_data(work, photos, packer):
    """Every dataset, in `work`; returns {key: URI}. .stk sets are packed by `packer`."""
    import write_formats as wf
    from caffe_datum import raw_datum
    t0 = time.time()
    train, val = os.path.join(photos, "train"), os.path.join(photos, "val")
    items = wf.listing(train, 0)[::5]  # 40 photos, 2 of each class... in class order
    u = {"photos": "imagefolder:" + train, "val": "imagefolder:" + val, "val_dir": val}
    with open(os.path.join(work, "sub.txt"), "w") as f:
        f.writelines("%s\t%d\n" % (p, l) for p, l in items)
    u["sub"] = "list:" + os.path.join(work, "sub.txt")
    corrupt = sorted(glob.glob(os.path.join(photos, "corrupt", "*")))[:10]
    with open(os.path.join(work, "corrupt.txt"), "w") as f:
        for i, (p, l) in enumerate(items[:30]):
            f.write("%s\t%d\n" % (p, l))
            if i % 3 == 1:
                f.write("%s\t%d\n" % (corrupt[i // 3], l))
    u["corrupt-mix"] = "list:" + os.path.join(work, "corrupt.txt")
    with open(os.path.join(work, "indices.txt"), "w") as f:
        f.write("# a subset with repeats\n3, 1, 4, 1, 5, 9, 2, 6\n5 3 5 8 9 7 9 3 2 38 39 0\n")
    with open(os.path.join(work, "weights.txt"), "w") as f:
        f.writelines("%g\n" % ((i * 7) % 5 + 0.25) for i in range(len(items)))
    # raw arrays: CIFAR-10, CIFAR-100, MNIST/IDX
    rng = np.random.default_rng(0)
    cdir = os.path.join(work, "cifar")
    os.makedirs(cdir)
    cimgs, clabs = [], []
    for i in range(1, 6):
        lab = rng.integers(0, 10, 40, dtype=np.uint8)
        img = rng.integers(0, 256, (40, 3 * 32 * 32), dtype=np.uint8)
        np.concatenate([lab[:, None], img], axis=1).tofile(os.path.join(cdir, "data_batch_%d.bin" % i))
        cimgs.append(img)
        clabs.append(lab)
    u["cifar10"] = "cifar10:" + cdir
    c100 = os.path.join(work, "cifar100")
    os.makedirs(c100)
    coarse, fine = rng.integers(0, 20, 150, dtype=np.uint8), rng.integers(0, 100, 150, dtype=np.uint8)
    np.concatenate([coarse[:, None], fine[:, None], rng.integers(0, 256, (150, 3072), dtype=np.uint8)],
                   axis=1).tofile(os.path.join(c100, "train.bin"))
    u["cifar100"] = "cifar100:" + c100
    u["cifar100-coarse"] = "cifar100:" + c100 + "?label=coarse"
    mdir = os.path.join(work, "mnist")
    os.makedirs(mdir)
    mim, mlab = rng.integers(0, 256, (300, 28, 28), dtype=np.uint8), rng.integers(0, 10, 300)
    write_idx(os.path.join(mdir, "train-images-idx3-ubyte.gz"), mim, gz=True)
    write_idx(os.path.join(mdir, "train-labels-idx1-ubyte.gz"), mlab, gz=True)
    write_idx(os.path.join(work, "imgs-idx3-ubyte"), mim[:130])
    write_idx(os.path.join(work, "labs-idx1-ubyte"), mlab[:130])
    u["mnist"] = "mnist:" + mdir
    u["fashion-mnist"] = "fashion-mnist:" + mdir
    u["idx"] = "idx:%s,%s" % (os.path.join(work, "imgs-idx3-ubyte"),
                              os.path.join(work, "labs-idx1-ubyte"))
    # record formats of the same 40 photos (bench/write_formats.py)
    wf.write_tfrecord(items, os.path.join(work, "tfrecord"), 2)
    u["tfrecord"] = "tfrecord:" + os.path.join(work, "tfrecord")
    wf.write_recordio(items, os.path.join(work, "recordio"))
    u["recordio"] = "recordio:" + os.path.join(work, "recordio", "photos.rec")
    wf.write_lmdb(items, os.path.join(work, "lmdb"))
    u["lmdb"] = "lmdb:" + os.path.join(work, "lmdb")
    wf.write_wds(items, os.path.join(work, "wds"), 3)
    u["wds"] = "wds:" + os.path.join(work, "wds")
    wf.write_h5(items, os.path.join(work, "h5"))
    u["hdf5"] = "hdf5:" + os.path.join(work, "h5", "photos.h5")
    wf.write_raw(items[:24], os.path.join(work, "raw"), 64)
    u["npy"] = "npy:" + os.path.join(work, "raw")
    import h5py
    with h5py.File(os.path.join(work, "arrays.h5"), "w") as f:
        f.create_dataset("pix", data=np.load(os.path.join(work, "raw", "images.npy")),
                         chunks=(5, 64, 64, 3))
        f.create_dataset("y", data=np.load(os.path.join(work, "raw", "labels.npy")).astype(np.int32))
    u["hdf5-raw"] = "hdf5:%s?images=/pix&labels=/y" % os.path.join(work, "arrays.h5")
    import lmdb
    env = lmdb.open(os.path.join(work, "lmdb-raw"), map_size=1 << 26)
    with env.begin(write=True) as t:
        for i in range(48):
            t.put(b"%08d" % i, raw_datum(cimgs[0][i % 40].reshape(3, 32, 32), int(clabs[0][i % 40])))
    env.close()
    u["lmdb-raw"] = "lmdb:" + os.path.join(work, "lmdb-raw") + "?value=datum&color=rgb"
    # zarr and npz: the zarr test's arrays and writer
    import numcodecs
    import zarr
    z = load_defs(os.path.join(ROOT, "tests", "python", "test_zarr_reader.py"),
                  {"write_group", "sample_arrays"}, {"np": np, "zarr": zarr})
    images, labels = z["sample_arrays"](n=23, channels=3)
    z["write_group"](os.path.join(work, "zarr"), images, labels, 7, numcodecs.Zstd(level=3))
    u["zarr"] = "zarr:" + os.path.join(work, "zarr")
    gimages, glabels = z["sample_arrays"](n=19, channels=0, seed=3)
    z["write_group"](os.path.join(work, "zarr-gray"), gimages, glabels, 5,
                     numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
                     lcompressor=numcodecs.Zlib(level=6))
    u["zarr-gray"] = "zarr:" + os.path.join(work, "zarr-gray")
    np.savez(os.path.join(work, "arrays.npz"), images=images, labels=labels)
    u["npz"] = "npy:" + os.path.join(work, "arrays.npz")
    # every codec: photos re-saved by Pillow as PNG (RGB, RGBA, gray, 16-bit, palette),
    # WebP (lossy, lossless), BMP, TIFF (raw, LZW), GIF; one class per kind
    from PIL import Image
    kinds = [("png", {}, "RGB"), ("png", {}, "RGBA"), ("png", {}, "L"), ("png", {}, "I;16"),
             ("png", {}, "P"), ("webp", {"quality": 80}, "RGB"), ("webp", {"lossless": True}, "RGBA"),
             ("bmp", {}, "RGB"), ("tiff", {}, "RGB"), ("tiff", {"compression": "tiff_lzw"}, "L"),
             ("gif", {}, "RGB"), ("jpg", {"quality": 70, "progressive": True}, "L")]
    cod = os.path.join(work, "codecs")
    for k, (ext, kw, mode) in enumerate(kinds):
        os.makedirs(os.path.join(cod, "%02d_%s_%s" % (k, ext, mode.replace(";", ""))))
        for j, (path, _) in enumerate(items[k::len(kinds)][:3]):
            with Image.open(path) as im:
                im = im.convert("RGB").resize((48 + 7 * j, 40 + 5 * k), Image.BILINEAR)
                if mode == "RGBA":
                    im.putalpha(Image.linear_gradient("L").resize(im.size))
                elif mode == "I;16":
                    im = Image.fromarray(np.asarray(im.convert("L"), np.uint16) * 257)
                elif mode != "RGB":
                    im = im.convert(mode)
                im.save(os.path.join(cod, "%02d_%s_%s" % (k, ext, mode.replace(";", "")),
                                     "%d.%s" % (j, ext)), **kw)
    with open(os.path.join(work, "codecs.txt"), "w") as f:  # the list reader: any extension
        for k, d in enumerate(sorted(os.listdir(cod))):
            f.writelines("%s\t%d\n" % (os.path.join(cod, d, n), k)
                         for n in sorted(os.listdir(os.path.join(cod, d))))
    u["codecs"] = "list:" + os.path.join(work, "codecs.txt")
    # segfolder (the segfolder test's writer) and COCO
    s = load_defs(os.path.join(ROOT, "tests", "python", "test_segfolder_reader.py"),
                  {"write_set"}, {"np": np, "os": os, "Image": Image})
    s["write_set"](os.path.join(work, "seg"), n=12)
    u["segfolder"] = "segfolder:" + os.path.join(work, "seg")
    img_dir, ann = write_coco(os.path.join(work, "coco"))
    u["coco"] = "coco:%s?annotations=%s" % (img_dir, ann)
    u["coco-semantic"] = u["coco"] + "&masks=semantic&crowd=drop"
    u["coco-instance"] = u["coco"] + "&masks=instance"
    # .stk, packed by the first build
    for key, src, opts in (("stk-keep", "sub", []), ("stk-restart", "sub", ["--restart", "4"]),
                           ("stk-raw", "val", ["--raw", "--zstd", "3"]),
                           ("stk-reencode", "sub", ["--reencode", "--max-side", "160"]),
                           ("stk-cifar", "cifar10", [])):
        dest = os.path.join(work, key)
        run(packer + ["pack", u[src], dest, "-q"] + opts, env=None)
        u[key] = "stk:" + dest
    u["stk-keep-q"] = u["stk-keep"] + "?io=pread&verify=always"
    print("datasets written in %.1f s" % (time.time() - t0), flush=True)
    return u


# --- running ----------------------------------------------------------------------------

def run(argv, env=None, timeout=300):
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, cwd="/")
    if p.returncode != 0:
        err = [l for l in p.stderr.splitlines() if l.startswith("stoker")] or p.stderr.splitlines()
        raise RuntimeError("exit %d: %s" % (p.returncode, (err or [""])[-1][:160]))
    return p.stdout


class Build:
    """A CLI (argv prefix) and, where it has one, a Python module folder."""

    def __init__(self, name, argv, env, pysite, plugin):
        self.name, self.argv, self.env, self.pysite, self.plugin = name, argv, env, pysite, plugin

    def cli(self, args, extra_env=None):
        env = dict(self.env)
        env.update(extra_env or {})
        return run(self.argv + args, env=env)


def builds_of(a):
    out = []
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("STOKER_CUDA")}
    base_env.pop("PYTHONPATH", None)
    for c in a.cli:
        c = os.path.abspath(c)
        d = os.path.dirname(c)
        py = os.path.join(d, "python")
        plugin = os.path.join(d, "libstk_plugin_brightness.so")
        out.append(Build(c, [c], base_env,
                         py if os.path.isdir(os.path.join(py, "stoker")) and not a.no_python
                         else None, plugin if os.path.exists(plugin) else None))
    if a.python_site:
        site = os.path.abspath(a.python_site)
        env = dict(base_env, PYTHONPATH=site)
        out.append(Build("pip:" + site, ["/usr/bin/python3", "-m", "stoker"], env, site, None))
    plugins = [b.plugin for b in out if b.plugin]
    for b in out:  # the pip build has no plugin of its own: the first CLI's
        b.plugin = b.plugin or (plugins[0] if plugins else None)
    return out


def digest_line(out):
    d = [l.split()[1] for l in out.splitlines() if l.startswith("digest: ")]
    if len(d) != 1:
        raise RuntimeError("no digest line")
    return d[0]


def cli_rows(b, uris, work, only):
    res = {}
    for name, ds, spec, extra, batch, opt in ROWS:
        if only and not only.search(name):
            continue
        if "{plugin}" in spec and not b.plugin:
            res[name] = "SKIP no plugin"
            continue
        spec = spec.replace("{plugin}", b.plugin or "")
        extra = [e.replace("{work}", work) for e in extra]
        threads = [] if "--threads" in extra else ["--threads", "2"]
        try:
            res[name] = digest_line(b.cli(["bench", uris[ds], "--pipeline", spec, "--batch",
                                           str(batch), "--seed", str(SEED), "--digest"]
                                          + threads + extra, opt["env"]))
        except Exception as e:
            res[name] = "ERROR " + str(e)
    for name, args in ORDERS:
        name = "order:" + name
        if only and not only.search(name):
            continue
        args = [x.replace("{work}", work).replace("{sub}", uris["sub"]) for x in args]
        try:
            res[name] = hashlib.sha256(b.cli(["order"] + args).encode()).hexdigest()[:32]
        except Exception as e:
            res[name] = "ERROR " + str(e)
    for name, src, opts in PACKS:
        name = "pack:" + name
        if only and not only.search(name):
            continue
        dest = tempfile.mkdtemp(prefix="pack-", dir=work)
        os.rmdir(dest)
        try:
            b.cli(["pack", uris[src], dest, "-q"] + opts)
            h = hashlib.sha256()
            for f in sorted(os.listdir(dest)):
                h.update(f.encode() + b"\0" + open(os.path.join(dest, f), "rb").read())
            res[name] = h.hexdigest()[:32]
        except Exception as e:
            res[name] = "ERROR " + str(e)
        shutil.rmtree(dest, ignore_errors=True)
    return res


def py_rows(b, uris, work, only):
    if not b.pysite:
        return {}
    env = dict(b.env, PYTHONPATH=b.pysite)
    try:
        out = json.loads(run(["/usr/bin/python3", "-c", PY_CODE, json.dumps(uris), work],
                             env=env, timeout=600))
    except Exception as e:
        return {"py:*": "ERROR " + str(e)}
    if not os.path.realpath(out["file"]).startswith(os.path.realpath(b.pysite)):
        return {"py:*": "ERROR imported %s, not from %s" % (out["file"], b.pysite)}
    return {k: v for k, v in out["digests"].items() if not only or only.search(k)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", action="append", default=[], help="a stoker CLI (repeat)")
    ap.add_argument("--python-site", help="a pip --target folder holding the stoker package")
    ap.add_argument("--photos", default="/tmp/digests-photos",
                    help="the photos set (made here when missing or stale)")
    ap.add_argument("--only", help="run only the rows whose name matches this regex")
    ap.add_argument("--no-python", action="store_true",
                    help="skip the py: rows of the CMake builds' python/ folders")
    ap.add_argument("--out", help="also write the table to this file")
    ap.add_argument("--work", default="/tmp/digests-all-work",
                    help="where the datasets are written (emptied first, left for a look after): "
                    "a fixed path, since packed shards and fields name their source's path")
    a = ap.parse_args()
    if not a.cli:
        ap.error("give at least one --cli")
    only = re.compile(a.only) if a.only else None
    builds = builds_of(a)
    t0 = time.time()
    photos = photos_set(os.path.abspath(a.photos))
    work = os.path.abspath(a.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    uris = make_data(work, photos, builds[0].argv)
    results = []
    for b in builds:
        t = time.time()
        r = cli_rows(b, uris, work, only)
        r.update(py_rows(b, uris, work, only))
        results.append(r)
        print("%-60s %4d rows %6.1f s" % (b.name, len(r), time.time() - t), flush=True)
    names = []
    for r in results:
        names += [n for n in r if n not in names]
    twins = {n: opt["twin"] for n, _, _, _, _, opt in ROWS if opt["twin"]}
    lines = ["digests_all: %d builds, %d rows (seed %d)" % (len(builds), len(names), SEED)]
    for i, b in enumerate(builds):
        lines.append("  [%d] %s%s" % (i, b.name, "" if not b.pysite else "  (python: %s)" % b.pysite))
    lines.append("%-48s %s" % ("config", "  ".join("[%d]%-29s" % (i, "") for i in range(len(builds)))))
    bad = []
    for n in names:
        vals = [r.get(n, "-") for r in results]
        flags = []
        if len({v for v in vals if v != "-"}) > 1:  # "-": a build without the row (no python/)
            flags.append("DIFFERS")
        if n in twins:
            for i, r in enumerate(results):
                if n in r and twins[n] in r and r[n] != r[twins[n]]:
                    flags.append("[%d] != %s" % (i, twins[n]))
        if any(v.startswith("ERROR") for v in vals):
            flags.append("ERROR")
        if flags:
            bad.append(n)
        lines.append("%-48s %s%s" % (n[:48], "  ".join("%-32s" % v for v in vals),
                                     ("  <- " + ", ".join(flags)) if flags else ""))
    lines.append("digests_all: %s in %.0f s" % (
        "%d of %d rows differ or fail: %s" % (len(bad), len(names), ", ".join(bad)) if bad
        else "all %d rows identical across builds" % len(names), time.time() - t0))
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
