#!/usr/bin/python3
"""ImageNet-style pipelines: stoker vs PyTorch DataLoader + torchvision/PIL, in one run.

On the photos dataset (../shared/datasets/make_photos.sh: ImageFolder layout, ~420x370
JPEGs, 4:4:4 q96 mostly), for each preset:

    imagenet-train-few        RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize
    imagenet-train-extensive  ... + ColorJitter(0.4, 0.4, 0.4) after the flip
    imagenet-val              Resize(256) + CenterCrop(224) + ToTensor + Normalize

it measures, each configuration in its own subprocess:

  (a) the decode floor: a plain full-size libjpeg-turbo decode of the same files with 2
      threads (build/decode_floor), no augmentation at all;
  (b) stoker, 2 threads, batch 256, float32 NCHW, from .stk shards (packed once with
      `stoker pack`, encoded bytes kept), from .stk shards packed with `--restart 4` (each
      JPEG rewritten losslessly with restart markers, so a crop decodes only the intervals
      it covers: docs/codec.md) and from the image folder; plus the floor of the rewritten
      bytes (decode_floor --dataset), so that gain is seen apart from the crop's;
  (c) torchvision.datasets.ImageFolder (PIL decode) + the same transforms through
      torch.utils.data.DataLoader(batch_size=256, shuffle=True, num_workers=0, 1, 2).

It prints images/s, the ratios asked for (stoker/DataLoader-2-workers per preset,
stoker/decode floor), CPU use (user+sys seconds of the process tree per wall second) and
peak memory of the process tree (summed RSS and PSS, sampled every 20 ms).

    /usr/bin/python3 bench/imagenet_vs_torch.py [--photos /work/data/photos] [--images N]

The DataLoader is slow (~100-200 images/s per core), so by default it runs on the first
--torch-images images of a shuffled epoch (throughput is per image, so this is fair);
stoker runs full epochs.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRESETS = ["imagenet-train-few", "imagenet-train-extensive", "imagenet-val"]
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def torch_child(folder, preset, workers, images, batch):
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    tail = [transforms.ToTensor(), transforms.Normalize(MEAN, STD)]
    if preset == "imagenet-train-few":
        tf = [transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip()] + tail
    elif preset == "imagenet-train-extensive":
        tf = [transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
              transforms.ColorJitter(0.4, 0.4, 0.4)] + tail
    else:
        tf = [transforms.Resize(256), transforms.CenterCrop(224)] + tail
    ds = datasets.ImageFolder(folder, transforms.Compose(tf))  # PIL loader, .convert('RGB')
    torch.manual_seed(0)
    loader = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers)
    n = 0
    t0 = time.perf_counter()
    for x, y in loader:
        n += x.shape[0]
        if n >= images:
            break
    dt = time.perf_counter() - t0
    print(json.dumps({"samples": n, "elapsed_s": dt, "samples_per_s": n / dt}))


def tree(proc):
    try:
        return [proc] + proc.children(recursive=True)
    except psutil.Error:
        return [proc]


def run_measured(cmd):
    """Run cmd; return its last JSON line plus tree peak RSS/PSS and CPU use."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ps = psutil.Process(proc.pid)
    peak_rss = peak_pss = 0
    cpu = {}
    while proc.poll() is None:
        rss = pss = 0
        for p in tree(ps):
            try:
                m = p.memory_full_info()
                rss += m.rss
                pss += getattr(m, "pss", m.rss)
                t = p.cpu_times()
                cpu[p.pid] = t.user + t.system + getattr(t, "children_user", 0) + \
                    getattr(t, "children_system", 0)
            except psutil.Error:
                pass
        peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    out, err = proc.communicate()
    if proc.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (proc.returncode, " ".join(cmd), err[-2000:]))
    res = json.loads(out.strip().splitlines()[-1])
    res["tree_peak_rss_mb"] = peak_rss / 2**20
    res["tree_peak_pss_mb"] = peak_pss / 2**20
    res["cpu_per_wall"] = sum(cpu.values()) / wall if wall else 0.0
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", default="/work/data/photos")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--shards", default="/tmp/stoker-bench-photos-stk")
    ap.add_argument("--shards-restart", default="/tmp/stoker-bench-photos-stk-restart4")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--torch-images", type=int, default=2560)
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--child-torch", nargs=3, metavar=("PRESET", "WORKERS", "IMAGES"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    train = os.path.join(args.photos, "train")
    if args.child_torch:
        preset, w, n = args.child_torch
        torch_child(train, preset, int(w), int(n), args.batch)
        return
    stoker = os.path.join(args.build, "stoker")
    if not os.path.isdir(train):
        sys.exit("no photos dataset at %s: run ../shared/datasets/make_photos.sh --out %s"
                 % (args.photos, args.photos))
    if not os.path.isdir(args.shards):
        subprocess.run([stoker, "pack", train, args.shards, "--quiet"], check=True)
    if not os.path.isdir(args.shards_restart):
        subprocess.run([stoker, "pack", train, args.shards_restart, "--quiet", "--restart", "4"],
                       check=True)

    print("ImageNet-style pipelines on %s (%s), batch %d, float32 NCHW 224x224"
          % (train, "%d cores" % os.cpu_count(), args.batch))
    rows = []
    floor = run_measured([os.path.join(args.build, "decode_floor"), train,
                          "--threads", str(args.threads), "--json"])
    rows.append(("decode floor (full-size libjpeg-turbo, %d threads)" % args.threads, "-", floor))
    floor_rst = run_measured([os.path.join(args.build, "decode_floor"), "--dataset",
                              args.shards_restart, "--threads", str(args.threads), "--json"])
    rows.append(("decode floor of the --restart 4 bytes", "-", floor_rst))
    results = {}
    for preset in args.presets.split(","):
        for label, src in (("stk shards", args.shards),
                           ("stk shards --restart 4", args.shards_restart),
                           ("image folder", train)):
            r = run_measured([stoker, "bench", src, "--pipeline", preset, "--threads",
                              str(args.threads), "--batch", str(args.batch), "--epochs",
                              str(args.epochs), "--json"])
            rows.append(("stoker %d threads, %s" % (args.threads, label), preset, r))
            results[(preset, label)] = r
        for w in [int(x) for x in args.workers.split(",")]:
            r = run_measured([sys.executable, os.path.abspath(__file__), "--photos", args.photos,
                              "--batch", str(args.batch), "--child-torch", preset, str(w),
                              str(args.torch_images)])
            rows.append(("DataLoader+PIL, %d worker%s" % (w, "" if w == 1 else "s"), preset, r))
            results[(preset, "torch%d" % w)] = r

    print()
    print("%-52s %-26s %9s %8s %10s %10s" % ("loader", "preset", "images/s", "CPU/wall",
                                               "peak RSS", "peak PSS"))
    for name, preset, r in rows:
        print("%-52s %-26s %9.1f %8.2f %7.0f MB %7.0f MB" % (
            name, preset, r["samples_per_s"], r["cpu_per_wall"], r["tree_peak_rss_mb"],
            r["tree_peak_pss_mb"]))
    print()
    goals = {"imagenet-train-few": 3.0, "imagenet-train-extensive": 4.0}

    def per_cpu(r):  # images per CPU-second: steadier than wall time on a shared machine
        return r["samples_per_s"] / r["cpu_per_wall"] if r["cpu_per_wall"] else 0.0
    for preset in args.presets.split(","):
        t2 = results.get((preset, "torch2"))
        for label in ("stk shards", "stk shards --restart 4"):
            st = results.get((preset, label))
            if not st or not t2:
                continue
            goal = goals.get(preset)
            print("%-26s stoker(%s)/DataLoader(2): %5.2fx%s   stoker/decode floor: %4.2fx "
                  "(goal >= 1.2x; by CPU time %4.2fx; vs the rewritten bytes' floor %4.2fx)   "
                  "peak RSS %0.f vs %.0f MB" % (
                      preset, label, st["samples_per_s"] / t2["samples_per_s"],
                      " (goal >= %.0fx)" % goal if goal else "",
                      st["samples_per_s"] / floor["samples_per_s"],
                      per_cpu(st) / per_cpu(floor),
                      st["samples_per_s"] / floor_rst["samples_per_s"], st["tree_peak_rss_mb"],
                      t2["tree_peak_rss_mb"]))


if __name__ == "__main__":
    main()
