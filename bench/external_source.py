#!/usr/bin/python3
"""stoker.ExternalSource over encoded JPEG bytes vs the same image folder
read natively, in one short run (docs/python.md, "ExternalSource").

Both loaders run the same pipeline (random_resized_crop 112 | flip 0.5 |
to u8 chw), batch 128, shuffle, the same seed, so they decode and augment
the same samples the same way (tests/python/test_external_source.py checks
that the batches are identical); what differs is where each sample's bytes
come from: a file read by the C reader, or a Python list's bytes object
handed over by a worker holding the GIL. The list is read into memory
before the clock starts; the folder's files are in the page cache after a
warm-up pass. Rounds alternate the two, and the medians are printed.

    /usr/bin/python3 bench/external_source.py [--data DIR] [--images N]
        [--threads T] [--rounds R]

Without --data, $STOKER_PHOTOS or /work/data/photos/train is used.
"""
import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.environ.get("STOKER_BUILD", os.path.join(ROOT, "build")),
                                "python"))
import stoker  # noqa: E402

PIPELINE = "random_resized_crop 112 | flip 0.5 | to u8 chw"


def run(ds, threads, images):
    loader = stoker.Loader(ds, pipeline=PIPELINE, batch_size=128, shuffle=True, seed=1,
                           num_threads=threads, output="numpy")
    loader.warmup()
    t0, n = time.perf_counter(), 0
    for _, labels in loader:
        n += len(labels)
        if n >= images:
            break
    dt = time.perf_counter() - t0
    loader.close()
    return n / dt


def main():
    ap = argparse.ArgumentParser()
    default = os.environ.get("STOKER_PHOTOS", "/work/data/photos")
    ap.add_argument("--data", default=os.path.join(default, "train")
                    if os.path.isdir(os.path.join(default, "train")) else default)
    ap.add_argument("--images", type=int, default=3072, help="images timed per run")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()

    folder = stoker.open(a.data)
    items, paths = [], [folder.path(i) for i in range(len(folder))]
    labels = {}
    for _, y, idx in stoker.Loader(folder, pipeline="center_crop 8 | to u8", batch_size=512,
                                   num_threads=a.threads, output="numpy").iter_with_indices():
        labels.update(zip(idx.tolist(), y.tolist()))
    for i, p in enumerate(paths):
        with open(p, "rb") as f:
            items.append((f.read(), labels[i]))
    external = stoker.ExternalSource(items, classes=folder.classes)
    print("%d JPEGs (%.1f MB) from %s; %d threads, %d images per run, load average %.1f"
          % (len(items), sum(len(b) for b, _ in items) / 1e6, a.data, a.threads, a.images,
             os.getloadavg()[0]))
    rates = {"folder": [], "external": []}
    run(folder, a.threads, a.images)  # page cache and code warm
    for _ in range(a.rounds):
        rates["folder"].append(run(folder, a.threads, a.images))
        rates["external"].append(run(external, a.threads, a.images))
    f, e = statistics.median(rates["folder"]), statistics.median(rates["external"])
    print("image folder (native read): %6.0f images/s  %s" % (f, [round(r) for r in rates["folder"]]))
    print("ExternalSource (JPEG bytes): %6.0f images/s  %s" % (e, [round(r) for r in rates["external"]]))
    print("ratio ExternalSource / folder: %.3f" % (e / f))


if __name__ == "__main__":
    main()
