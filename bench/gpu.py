#!/usr/bin/python3
"""The CUDA backend on a GPU machine: what GPU augmentation buys, and whether the copy is hidden.

    /usr/bin/python3 bench/gpu.py DATASET [--device cuda:0] [--threads16] [--parts 1,2,3]
                                          [--out FILE]
    /usr/bin/python3 bench/gpu.py DATASET --emulate          # smoke test without a GPU

DATASET is a .stk shard set or an image folder (ImageNet-like JPEGs: the photos set).
Run on an H100 on 2026-11-27: the figures are in docs/benchmarks.md, "Benchmarks: GPU".

Part 1, throughput. imagenet-train-extensive (random_resized_crop 224 | flip | color_jitter
0.4 0.4 0.4 | normalize | float32 NCHW), batch --batch, shuffled, delivered on --device, with
placement "cpu" (the CPU runs the whole pipeline; the finished batch is copied), "gpu" (the
CPU reads and decodes the region the crop needs; the GPU resamples, flips, jitters,
normalizes and casts) and "nvjpeg" (placement gpu with decoder="nvjpeg": the GPU decodes too;
--no-nvjpeg leaves it out), at --threads worker threads (2) and also 16 with --threads16. The
consumer takes each batch as a torch CUDA tensor (torch's current stream waits for it) and
does nothing else; after the window it synchronises the device, so the GPU's share of the
work is inside the time. Each configuration runs in a process of its own; after one warm-up
batch (start-up left out) it reads --images images. Recorded: images/s, the CPU-seconds of
the process (every thread: workers, the loader's GPU feeder, the consumer) over the window
and images per CPU-second, the rows decoder nvjpeg left to the CPU, and the ratios to "cpu".
The issue's target: >= 1.5x images/s at 2 threads.

Part 2, the data share of a training loop. A simulated training step on the GPU: --step-ms
of matrix products (calibrated at start: K products of 1024x1024 float32, K chosen so that a
step takes --step-ms on this GPU), made to depend on the batch (its mean is added), ending
with a host synchronisation as `loss.item()` does. Two ways to feed it:

    device delivery   Loader(device=DEVICE, placement=--placement): images arrive on the GPU
                      (and again with decoder="nvjpeg" unless --no-nvjpeg)
    host delivery     Loader(device=None) + images.cuda(non_blocking=True) in the loop
                      (pageable memory: the copy is synchronous for the host)

Recorded per way: the loop's wait in next(), the time of the .cuda() copy (host delivery),
the step time, and the data share = (wait + copy) / loop time. The issue's target: the
device delivery's data share is no higher than the host delivery's (the copy is hidden).

Part 3, the kernels: one launch per op or one fused launch (docs/gpu.md, "Kernels and their
cost"). placement gpu, at --threads threads, for imagenet-train-few (no colour jitter: the
vertical pass and the output run as one fused kernel) and imagenet-train-extensive (a
contrast step in every row: its mean needs the whole image first, so both ways launch per
op), each with STOKER_GPU_KERNELS=per-op and =fused. Recorded: images/s, and from
Loader.device_timing the device milliseconds per batch from the first launch to the last
one's end, launches per batch, and the fused share. Part 1 also records the device time per
batch of its gpu and nvjpeg runs (kernels; nvJPEG's decode as stream time).

--emulate sets STOKER_CUDA_EMULATE=1: the device is emulated (host memory, kernels on the
CPU), torch runs on the CPU, and the sizes shrink (--images 48, --batch 16, --steps 6,
--step-ms 5) unless given. It checks that the script runs end to end; its numbers mean
nothing.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SPEC = "imagenet-train-extensive"


def import_stoker():
    try:
        import stoker
    except ImportError:
        sys.path.insert(0, os.path.join(os.environ.get("STOKER_BUILD",
                                                       os.path.join(ROOT, "build")), "python"))
        import stoker
    return stoker


def torch_device(cfg):
    """The torch device the consumer uses: the CUDA device, or the CPU when
    emulating (the emulated device's batches are host memory)."""
    import torch
    if cfg["emulate"]:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        sys.exit("bench/gpu.py: torch sees no CUDA device (use --emulate on a machine "
                 "without a GPU)")
    return torch.device(cfg["device"])


def check_epoch(loader, cfg):
    if len(loader) == 0:
        sys.exit("bench/gpu.py: %s has fewer images than a batch (%d; drop_last): pass a "
                 "smaller --batch" % (cfg["dataset"], cfg["batch"]))


def sync(dev):
    import torch
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


# --------------------------------------------------------------------------- children

def child_throughput(cfg):
    stoker = import_stoker()
    dev = torch_device(cfg)
    loader = stoker.Loader(cfg["dataset"], batch_size=cfg["batch"], shuffle=True, seed=0,
                           pipeline=cfg.get("spec", SPEC), num_threads=cfg["threads"],
                           prefetch=4, drop_last=True, output="torch", device=cfg["device"],
                           placement=cfg["placement"], decoder=cfg.get("decoder", "cpu"))
    check_epoch(loader, cfg)
    info = loader.device_info
    it = iter(loader)
    images, _ = next(it)  # warm-up: threads, pool, device, first fill
    sync(dev)
    n = 0
    c0, t0 = time.process_time(), time.perf_counter()
    while n < cfg["images"]:
        try:
            images, _ = next(it)
        except StopIteration:
            loader.set_epoch(loader.epoch)
            it = iter(loader)
            continue
        n += images.shape[0]
        assert (images.device.type == "cuda") == (dev.type == "cuda"), images.device
        del images
    sync(dev)
    t, c = time.perf_counter() - t0, time.process_time() - c0
    st = loader.stats()
    timing = loader.device_timing
    loader.close()
    return {"images": n, "elapsed_s": t, "cpu_s": c, "images_per_s": n / t,
            "images_per_cpu_s": n / c if c > 0 else None,
            "gpu_decode_cpu_rows": st["gpu_decode_cpu_rows"], "samples": st["samples"],
            "device_info": info, "device_timing": timing}


def per_batch_ms(r, key="kernel_s", count="batches"):
    """Device ms per timed batch of a throughput result, or None."""
    t = r.get("device_timing")
    return 1e3 * t[key] / t[count] if t and t.get(count) else None


def fmt_ms(v):
    return "%8.3f" % v if v is not None else "%8s" % "-"


def calibrate_step(dev, step_ms):
    """(matrix, K): K products of the matrix take about step_ms on dev."""
    import torch
    size = 1024 if dev.type == "cuda" else 128
    a = torch.randn(size, size, device=dev)
    for _ in range(3):
        a @ a
    sync(dev)
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ a
    sync(dev)
    per = (time.perf_counter() - t0) / reps
    return a, max(1, round(step_ms / 1000.0 / per))


def child_train(cfg):
    stoker = import_stoker()
    dev = torch_device(cfg)
    a, k = calibrate_step(dev, cfg["step_ms"])
    device_delivery = cfg["way"] != "host"
    loader = stoker.Loader(cfg["dataset"], batch_size=cfg["batch"], shuffle=True, seed=0,
                           pipeline=SPEC, num_threads=cfg["threads"], prefetch=4,
                           drop_last=True, output="torch",
                           device=cfg["device"] if device_delivery else None,
                           placement=cfg["placement"] if device_delivery else "auto",
                           decoder="nvjpeg" if cfg["way"] == "device+nvjpeg" else "cpu")
    check_epoch(loader, cfg)
    it = iter(loader)
    next(it)  # warm-up
    wait = copy = step = 0.0
    steps = 0
    t_start = time.perf_counter()
    while steps < cfg["steps"]:
        t0 = time.perf_counter()
        try:
            images, labels = next(it)
        except StopIteration:
            loader.set_epoch(loader.epoch)
            it = iter(loader)
            continue
        t1 = time.perf_counter()
        if not device_delivery and dev.type == "cuda":
            images = images.cuda(dev, non_blocking=True)
        t2 = time.perf_counter()
        y = images.float().mean()
        for _ in range(k):
            y = y + (a @ a)[0, 0]
        float(y)  # the step ends with a host synchronisation, as loss.item()
        t3 = time.perf_counter()
        wait, copy, step = wait + (t1 - t0), copy + (t2 - t1), step + (t3 - t2)
        steps += 1
        del images, labels
    total = time.perf_counter() - t_start
    loader.close()
    return {"way": cfg["way"], "steps": steps, "matmuls_per_step": k, "wait_s": wait,
            "copy_s": copy, "step_s": step, "loop_s": total,
            "data_share": (wait + copy) / total if total > 0 else None}


# --------------------------------------------------------------------------- parent

def run_child(cfg):
    env = dict(os.environ)
    if cfg["emulate"]:
        env["STOKER_CUDA_EMULATE"] = "1"
    if cfg.get("kernels"):
        env["STOKER_GPU_KERNELS"] = cfg["kernels"]
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps(cfg)],
                       env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("bench/gpu.py: child %s failed (%d):\n%s" % (cfg, p.returncode, p.stderr))
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset", nargs="?", help=".stk shards or an image folder")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--placement", default="auto", choices=["auto", "cpu", "gpu"],
                    help="part 2's device delivery (auto)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--threads16", action="store_true", help="part 1 at 16 threads too")
    ap.add_argument("--batch", type=int, default=None, help="batch size (256)")
    ap.add_argument("--images", type=int, default=None, help="part 1's window (5120)")
    ap.add_argument("--steps", type=int, default=None, help="part 2's steps (40)")
    ap.add_argument("--step-ms", type=float, default=None, help="part 2's step (100 ms)")
    ap.add_argument("--emulate", action="store_true",
                    help="STOKER_CUDA_EMULATE=1, torch on the CPU, tiny sizes: a smoke test")
    ap.add_argument("--no-nvjpeg", action="store_true",
                    help="leave out decoder nvjpeg (a machine without libnvjpeg)")
    ap.add_argument("--parts", default="1,2,3", help="which parts to run (1,2,3)")
    ap.add_argument("--out", help="write the results here (JSON)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        cfg = json.loads(args.child)
        r = child_throughput(cfg) if cfg["part"] == 1 else child_train(cfg)
        print(json.dumps(r))
        return
    if not args.dataset:
        ap.error("DATASET is required")
    tiny = args.emulate
    base = {"dataset": args.dataset, "device": args.device, "emulate": args.emulate,
            "batch": args.batch or (16 if tiny else 256)}
    images = args.images or (48 if tiny else 5120)
    results = {"dataset": args.dataset, "device": args.device, "emulated": args.emulate,
               "spec": SPEC, "batch": base["batch"], "throughput": [], "train": [],
               "kernels": []}
    parts = {int(x) for x in args.parts.split(",") if x}
    if 1 in parts:
        part1(args, base, images, results)
    if 2 in parts:
        part2(args, base, tiny, results)
    if 3 in parts:
        part3(args, base, images, results)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
        print("results: %s" % args.out)


def part1(args, base, images, results):
    print("part 1: %s, batch %d, %d images per run%s" % (SPEC, base["batch"], images,
                                                         " (EMULATED: numbers mean nothing)"
                                                         if args.emulate else ""))
    print("  %-8s %-10s %12s %14s %9s %9s" % ("threads", "placement", "images/s", "images/CPU-s",
                                              "GPU ms/b", "jpeg ms/b"))
    for threads in [args.threads] + ([16] if args.threads16 and args.threads != 16 else []):
        row = {"threads": threads}
        for name, placement, decoder in (("cpu", "cpu", "cpu"), ("gpu", "gpu", "cpu"),
                                         ("nvjpeg", "gpu", "nvjpeg")):
            if name == "nvjpeg" and args.no_nvjpeg:
                continue
            r = run_child(dict(base, part=1, threads=threads, placement=placement,
                               decoder=decoder, images=images))
            row[name] = r
            print("  %-8d %-10s %12.1f %14.1f %s %s%s" % (
                threads, name, r["images_per_s"], r["images_per_cpu_s"] or 0.0,
                fmt_ms(per_batch_ms(r)), fmt_ms(per_batch_ms(r, "decode_s", "decode_batches")),
                "   (%d of %d rows decoded on the CPU)" % (r["gpu_decode_cpu_rows"],
                                                           r["samples"])
                if name == "nvjpeg" else ""))
        for name in ("gpu", "nvjpeg"):
            if name not in row:
                continue
            ratio = row[name]["images_per_s"] / row["cpu"]["images_per_s"]
            cpu_g, cpu_c = row[name]["images_per_cpu_s"], row["cpu"]["images_per_cpu_s"]
            ratio_cpu = cpu_g / cpu_c if cpu_g and cpu_c else None
            row["ratio_images_per_s" + ("" if name == "gpu" else "_nvjpeg")] = ratio
            row["ratio_images_per_cpu_s" + ("" if name == "gpu" else "_nvjpeg")] = ratio_cpu
            print("  %-8d %-10s %12.2fx %13.2fx" % (threads, name + "/cpu", ratio,
                                                     ratio_cpu or 0.0))
        results["throughput"].append(row)


def part2(args, base, tiny, results):
    steps = args.steps or (6 if tiny else 40)
    step_ms = args.step_ms or (5.0 if tiny else 100.0)
    print("part 2: simulated training step of %.0f ms, %d steps, %d threads, device delivery "
          "placement %s" % (step_ms, steps, args.threads, args.placement))
    print("  %-16s %9s %9s %9s %11s" % ("delivery", "wait s", "copy s", "step s", "data share"))
    for way in ("device",) + (() if args.no_nvjpeg else ("device+nvjpeg",)) + ("host",):
        r = run_child(dict(base, part=2, way=way, threads=args.threads,
                           placement=args.placement, steps=steps, step_ms=step_ms))
        results["train"].append(r)
        print("  %-16s %9.3f %9.3f %9.3f %10.1f%%" % (
            way + (" + .cuda()" if way == "host" else ""), r["wait_s"], r["copy_s"],
            r["step_s"], 100.0 * (r["data_share"] or 0.0)))


def part3(args, base, images, results):
    print("part 3: kernels per op vs fused, placement gpu, %d threads, batch %d, %d images per "
          "run" % (args.threads, base["batch"], images))
    print("  %-26s %-7s %10s %9s %9s %8s %8s" % ("spec", "kernels", "images/s", "GPU ms/b",
                                                 "GPU us/im", "launch/b", "fused"))
    for spec in ("imagenet-train-few", "imagenet-train-extensive"):
        by = {}
        for kernels in ("per-op", "fused"):
            r = run_child(dict(base, part=1, threads=args.threads, placement="gpu",
                               decoder="cpu", images=images, spec=spec, kernels=kernels))
            t = r["device_timing"] or {}
            ms = per_batch_ms(r)
            row = {"spec": spec, "kernels": kernels, "images_per_s": r["images_per_s"],
                   "images_per_cpu_s": r["images_per_cpu_s"], "gpu_ms_per_batch": ms,
                   "launches_per_batch": t["launches"] / t["batches"] if t.get("batches")
                   else None,
                   "fused_share": t["fused_batches"] / t["batches"] if t.get("batches")
                   else None, "device_timing": t}
            by[kernels] = row
            results["kernels"].append(row)
            print("  %-26s %-7s %10.1f %s %9.2f %8.2f %7.0f%%" % (
                spec, kernels, row["images_per_s"], fmt_ms(ms),
                1e3 * ms / base["batch"] if ms else 0.0, row["launches_per_batch"] or 0.0,
                100.0 * (row["fused_share"] or 0.0)))
        a, b = by["per-op"]["gpu_ms_per_batch"], by["fused"]["gpu_ms_per_batch"]
        if a and b:
            print("  %-26s fused/per-op device time %.2fx" % (spec, b / a))


if __name__ == "__main__":
    main()
