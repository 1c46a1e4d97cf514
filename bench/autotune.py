#!/usr/bin/python3
"""The autotuner against a hand-picked sweep, in one run (issue: "autotuned
threads and prefetch").

For each dataset the consumer is a training loop whose step burns one core
for a fixed time per batch (a host thread spinning while the accelerator
works, as a CUDA synchronize does). In the same run, for each dataset:

  - the sweep: stoker.Loader with every (num_threads, prefetch) in
    {1, 2, 3, 4} x {1, 2, 4, 8}, each over the same epochs;
  - auto: stoker.Loader with no thread/prefetch argument and a
    memory_limit, sampling the loader's memory (pool + scratch,
    stats()["memory_bytes"]) after every batch;
  - the digest of every batch of the auto run and of a fixed 1-thread run.

It prints images/s of each configuration (wall clock, and per CPU-second of
the process), the best sweep point, auto's ratio to it, auto's peak memory
against the limit, the tuner's decisions, and whether the digests match.

    /usr/bin/python3 bench/autotune.py [--photos /work/data/photos]
        [--cifar /work/data/cifar10] [--epochs 3] [--json OUT]

Datasets: the photos set (imagenet-train-few, batch 64, 4096 samples an
epoch), CIFAR-10 binaries made by shared/datasets/make_cifar.py (the CIFAR
pipeline, batch 256) and Fashion-MNIST from Debian's dataset-fashion-mnist
(batch 256). Each configuration runs in a fresh subprocess so one run's
threads and memory cannot affect the next; the order of configurations is
interleaved (auto between sweep points) so drifting machine load hits both.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DATASETS = {
    "photos": dict(pipeline="imagenet-train-few", batch=64, step_ms=45.0, num_samples=4096,
                   memory_limit=640 << 20, epochs=4),
    "cifar10": dict(pipeline="pad 4 | random_crop 32 | flip | color_jitter 0.2 0.2 0.2 | "
                             "normalize cifar10 | to f32 chw",
                    batch=256, step_ms=12.0, num_samples=None, memory_limit=128 << 20,
                    epochs=2),
    "fashion-mnist": dict(pipeline="pad 2 | random_crop 28 | flip 0.5 | normalize fashion-mnist "
                                   "| to f32 chw",
                          batch=256, step_ms=2.5, num_samples=None, memory_limit=64 << 20,
                          epochs=6),
}
SWEEP = [(t, p) for t in (1, 2, 3, 4) for p in (1, 2, 4, 8)]


def child(args):
    """One configuration: runs the epochs, prints a JSON line."""
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    import logging
    import stoker
    cfg = DATASETS[args.dataset]
    kw = dict(batch_size=cfg["batch"], shuffle=True, seed=1, pipeline=cfg["pipeline"],
              output="numpy")
    if cfg["num_samples"]:
        kw["num_samples"] = cfg["num_samples"]
    if args.threads:
        kw["num_threads"] = args.threads
        kw["prefetch"] = args.prefetch
    else:
        kw["memory_limit"] = cfg["memory_limit"]
    decisions = []
    log = logging.getLogger("stoker")
    log.setLevel(logging.DEBUG)
    log.addHandler(type("H", (logging.Handler,), {"emit": lambda s, r: decisions.append(
        r.getMessage())})())
    log.propagate = False
    loader = stoker.Loader(args.uri, **kw)
    step = cfg["step_ms"] / 1e3
    h = hashlib.sha256()
    peak = 0
    samples = 0
    c0 = os.times()
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:
            if args.digest:
                h.update(images.tobytes())
                h.update(labels.tobytes())
            samples += len(labels)
            if not args.threads:
                peak = max(peak, loader.stats()["memory_bytes"])
            del images, labels
            x = time.perf_counter()
            while time.perf_counter() - x < step:
                pass
    wall = time.perf_counter() - t0
    c1 = os.times()
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    st = loader.stats()
    prof = loader.profile()
    print(json.dumps(dict(samples=samples, wall_s=wall, cpu_s=cpu, images_per_s=samples / wall,
                          images_per_cpu_s=samples / cpu, peak_memory=peak,
                          memory_limit=None if args.threads else cfg["memory_limit"],
                          threads=st["threads"], prefetch=st["prefetch"],
                          data_share=prof["data_share"], decisions=decisions,
                          digest=h.hexdigest() if args.digest else None)))


def run_child(dataset, uri, epochs, threads, prefetch, digest=False):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--dataset", dataset,
           "--uri", uri, "--epochs", str(epochs), "--threads", str(threads),
           "--prefetch", str(prefetch)] + (["--digest"] if digest else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--photos", default=os.environ.get("STOKER_PHOTOS", "/work/data/photos"))
    ap.add_argument("--cifar", default="/work/data/cifar10")
    ap.add_argument("--fashion", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=0,
                    help="epochs per configuration (default: the dataset's own, 2 to 6)")
    ap.add_argument("--only", action="append", help="dataset name (repeatable)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dataset", help=argparse.SUPPRESS)
    ap.add_argument("--uri", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--prefetch", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--digest", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)

    uris = {"photos": os.path.join(args.photos, "train"),
            "cifar10": "cifar10:" + args.cifar,
            "fashion-mnist": "fashion-mnist:" + args.fashion}
    load = os.getloadavg()[0]
    print("machine: %d cores, load average %.2f at start" % (os.cpu_count(), load))
    results = {}
    for name in args.only or list(DATASETS):
        cfg = DATASETS[name]
        uri = uris[name]
        epochs = args.epochs or cfg["epochs"]
        print("\n== %s (%s, batch %d, consumer burns %.1f ms per batch, %d epochs)"
              % (name, cfg["pipeline"], cfg["batch"], cfg["step_ms"], epochs))
        sweep, autos = {}, []
        for i, (t, p) in enumerate(SWEEP):
            sweep[(t, p)] = run_child(name, uri, epochs, t, p)
            if i % 4 == 3:  # auto between sweep points: drifting load hits both
                autos.append(run_child(name, uri, epochs, 0, 0))
        best_key = max(sweep, key=lambda k: sweep[k]["images_per_s"])
        best = sweep[best_key]
        # the digests (hashing costs the consumer time: runs of their own, not timed)
        fixed = run_child(name, uri, epochs, 1, 1, digest=True)
        hashed = run_child(name, uri, epochs, 0, 0, digest=True)
        auto_rate = sum(a["images_per_s"] for a in autos) / len(autos)
        for (t, p), r in sorted(sweep.items()):
            print("  threads %d prefetch %d: %7.0f img/s  %7.0f img/CPU-s  data share %5.1f%%"
                  % (t, p, r["images_per_s"], r["images_per_cpu_s"], 100 * r["data_share"]))
        for a in autos:
            print("  auto (ended at threads %d, prefetch %d): %7.0f img/s  %7.0f img/CPU-s  "
                  "data share %5.1f%%  peak memory %.1f MB of %.1f MB"
                  % (a["threads"], a["prefetch"], a["images_per_s"], a["images_per_cpu_s"],
                     100 * a["data_share"], a["peak_memory"] / 2**20, a["memory_limit"] / 2**20))
        ratio = auto_rate / best["images_per_s"]
        peak = max(a["peak_memory"] for a in autos)
        same = hashed["digest"] == fixed["digest"]
        print("  best sweep point: threads %d prefetch %d, %.0f img/s" % (best_key + (
            best["images_per_s"],)))
        print("  auto / best: %.3f (mean of %d auto runs: %s)"
              % (ratio, len(autos), ", ".join("%.0f" % a["images_per_s"] for a in autos)))
        print("  auto peak memory %.1f MB <= limit %.1f MB: %s"
              % (peak / 2**20, cfg["memory_limit"] / 2**20, peak <= cfg["memory_limit"]))
        print("  digest auto == fixed 1-thread run: %s" % same)
        print("  tuner decisions (first auto run): %d" % len(autos[0]["decisions"]))
        for d in autos[0]["decisions"][:12]:
            print("    " + d)
        results[name] = dict(sweep={"%d,%d" % k: v for k, v in sweep.items()}, auto=autos,
                             best=list(best_key), ratio=ratio, peak_memory=peak,
                             memory_limit=cfg["memory_limit"], digest_equal=same)
    print("\nload average at the end %.2f" % os.getloadavg()[0])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
