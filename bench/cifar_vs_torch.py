#!/usr/bin/python3
"""stoker vs PyTorch DataLoader on the CIFAR pipeline, in one run.

Both loaders read the same CIFAR-10 binary files (data_batch_1..5.bin) and
produce float32 NCHW batches of 256 through the classic CIFAR augmentation:

    stoker:      pad 4 | random_crop 32 | flip 0.5 | normalize cifar10 | to f32 chw
    torchvision: RandomCrop(32, padding=4), RandomHorizontalFlip(), ToTensor(),
                 Normalize(mean, std) on PIL images, exactly as
                 torchvision.datasets.CIFAR10.__getitem__ does (Image.fromarray)

Each configuration runs in its own subprocess so memory is not shared between
them; peak memory is sampled every 20 ms over the whole process tree (the
DataLoader's worker processes included): the peak of the summed RSS, and the
peak of the summed PSS (shared pages split between the processes that map
them, which is fairer to forked workers). stoker's own getrusage peak is
printed too.

Run with Debian's Python (it has torch, torchvision, PIL, numpy, psutil):

    /usr/bin/python3 bench/cifar_vs_torch.py [--data DIR] [--stoker build/stoker]

Without --data, a deterministic synthetic CIFAR-10-format set of 50,000
records is written to /tmp/stoker-bench-cifar (pixel values do not change the
cost of these ops). ../shared/datasets/make_cifar.py makes one from real
photos if you prefer.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = "pad 4 | random_crop 32 | flip 0.5 | normalize cifar10 | to f32 chw"
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def make_synthetic(out, per_file=10000, seed=0):
    """CIFAR-10 binary files: 1 label byte + 3072 CHW pixel bytes a record."""
    os.makedirs(out, exist_ok=True)
    names = ["data_batch_%d.bin" % i for i in range(1, 6)] + ["test_batch.bin"]
    if all(os.path.exists(os.path.join(out, n)) for n in names):
        return
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:32, 0:32]
    for n in names:
        labels = rng.integers(0, 10, per_file, dtype=np.uint8)
        # Smooth gradients plus noise: photo-like value ranges.
        base = rng.integers(0, 256, (per_file, 3, 1, 1))
        slope = rng.normal(0, 3, (per_file, 3, 2))
        img = base + slope[..., 0, None, None] * yy + slope[..., 1, None, None] * xx
        img = img + rng.normal(0, 12, img.shape)
        img = np.clip(img, 0, 255).astype(np.uint8).reshape(per_file, 3072)
        rec = np.concatenate([labels[:, None], img], axis=1)
        with open(os.path.join(out, n), "wb") as f:
            f.write(rec.tobytes())


# --------------------------------------------------------------------------
# The PyTorch side (runs in a child process: `--child-torch WORKERS`)
# --------------------------------------------------------------------------

def torch_child(data, workers, epochs, batch):
    import torch
    from PIL import Image
    from torch.utils.data import DataLoader, Dataset
    from torchvision import transforms

    class CIFAR10Binary(Dataset):
        """The same files; __getitem__ mirrors torchvision.datasets.CIFAR10."""

        def __init__(self, root, transform):
            recs = [np.fromfile(os.path.join(root, "data_batch_%d.bin" % i), dtype=np.uint8)
                    .reshape(-1, 3073) for i in range(1, 6)]
            recs = np.concatenate(recs)
            self.targets = recs[:, 0].astype(np.int64).tolist()
            self.data = recs[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).copy()  # HWC
            self.transform = transform

        def __len__(self):
            return len(self.data)

        def __getitem__(self, i):
            img = Image.fromarray(self.data[i])
            return self.transform(img), self.targets[i]

    tf = transforms.Compose([
        transforms.RandomCrop(32, padding=4),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
    ])
    ds = CIFAR10Binary(data, tf)
    torch.manual_seed(0)
    loader = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers)
    n = 0
    t0 = time.perf_counter()
    for _ in range(epochs):
        for images, labels in loader:
            assert images.dtype == torch.float32 and images.shape[1:] == (3, 32, 32)
            n += images.shape[0]
    dt = time.perf_counter() - t0
    print(json.dumps({"samples": n, "elapsed_s": dt, "samples_per_s": n / dt}))


# --------------------------------------------------------------------------
# Measuring a child process tree
# --------------------------------------------------------------------------

def tree_memory(proc):
    rss = pss = 0
    try:
        procs = [proc] + proc.children(recursive=True)
    except psutil.Error:
        return 0, 0
    for p in procs:
        try:
            m = p.memory_full_info()
            rss += m.rss
            pss += getattr(m, "pss", m.rss)
        except psutil.Error:
            pass
    return rss, pss


def run_measured(cmd):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ps = psutil.Process(proc.pid)
    peak_rss = peak_pss = 0
    while proc.poll() is None:
        rss, pss = tree_memory(ps)
        peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
        time.sleep(0.02)
    out, err = proc.communicate()
    if proc.returncode != 0:
        sys.exit("command failed (%d): %s\n%s" % (proc.returncode, " ".join(cmd), err))
    res = json.loads(out.strip().splitlines()[-1])
    res["tree_peak_rss_mb"] = peak_rss / 2**20
    res["tree_peak_pss_mb"] = peak_pss / 2**20
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="CIFAR-10 binary directory (default: synthetic)")
    ap.add_argument("--stoker", default=os.path.join(ROOT, "build", "stoker"))
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--stoker-epochs", type=int, default=20)
    ap.add_argument("--torch-epochs", type=int, default=1)
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--child-torch", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()

    data = args.data or "/tmp/stoker-bench-cifar"
    if args.child_torch is not None:
        torch_child(data, args.child_torch, args.torch_epochs, args.batch)
        return
    if not args.data:
        make_synthetic(data)

    print("CIFAR pipeline, float32 NCHW output, batch %d, data %s" % (args.batch, data))
    print("machine: %d cores; %s" % (os.cpu_count(), " ".join(os.uname()[2:3])))
    rows = []
    for t in [int(x) for x in args.threads.split(",")]:
        r = run_measured([args.stoker, "bench", "cifar10:" + data, "--pipeline", SPEC,
                          "--threads", str(t), "--batch", str(args.batch),
                          "--epochs", str(args.stoker_epochs), "--json"])
        rows.append(("stoker, %d thread%s" % (t, "s" if t > 1 else ""), t, r))
    for w in [int(x) for x in args.workers.split(",")]:
        r = run_measured([sys.executable, os.path.abspath(__file__), "--child-torch", str(w),
                          "--data", data, "--torch-epochs", str(args.torch_epochs),
                          "--batch", str(args.batch)])
        rows.append(("torch DataLoader, %d worker%s" % (w, "s" if w != 1 else ""), w, r))

    print()
    print("%-30s %12s %10s %14s %14s" % ("loader", "images/s", "samples", "tree peak RSS",
                                         "tree peak PSS"))
    for name, _, r in rows:
        print("%-30s %12.0f %10d %11.1f MB %11.1f MB" % (
            name, r["samples_per_s"], r["samples"], r["tree_peak_rss_mb"], r["tree_peak_pss_mb"]))
    st2 = next((r for n, k, r in rows if n.startswith("stoker") and k == 2), None)
    tw2 = next((r for n, k, r in rows if n.startswith("torch") and k == 2), None)
    if st2 and tw2:
        print()
        print("stoker 2 threads / DataLoader 2 workers: %.1fx images/s" %
              (st2["samples_per_s"] / tw2["samples_per_s"]))
        print("peak RSS (tree): stoker %.1f MB vs DataLoader %.1f MB (%.2fx); "
              "PSS %.1f vs %.1f MB" % (st2["tree_peak_rss_mb"], tw2["tree_peak_rss_mb"],
                                       st2["tree_peak_rss_mb"] / tw2["tree_peak_rss_mb"],
                                       st2["tree_peak_pss_mb"], tw2["tree_peak_pss_mb"]))
        print("stoker's own getrusage peak: %.1f MB" % st2["peak_rss_mb"])
        print("stoker stages (s, summed over threads): %s" % json.dumps(st2["stages"]))


if __name__ == "__main__":
    main()
