#!/usr/bin/python3
"""The stall study: how long a training epoch waits for data, per loader, reader and augmentation.

One command runs everything and rewrites the chart and the tables in docs/benchmarks.md:

    /usr/bin/python3 bench/stall_study.py

(~25 minutes on 2 shared cores: ~6 per simulated GPU, ~5-10 for part 2. `--no-write` only
prints, `--no-real` skips part 2, `--real` runs only part 2, `--from-json
docs/stall-study.json` redraws the chart and tables from the last run's measurements.)

Part 1, a simulated accelerator. The training loop is the usual one,

    for images, labels in loader:        # the time spent in next() is "data wait"
        step(images, labels)             # here: time.sleep(step_s)

where the step is a simulated accelerator: the host thread only waits while the GPU works
(a real training step launches kernels asynchronously and blocks on the result), so the
step costs the host no CPU and the loader keeps both cores. step_s = batch / throughput,
with the throughput a published per-GPU ResNet-50 training figure (table GPUS below),
divided by --scale to match this small host (see SCALE below). It is fed by

    {image folder, .stk shards} x {stoker, DataLoader + torchvision (PIL), DALI CPU pipeline}
    x {few, extensive} x {1, 2 threads / worker processes}

plus stoker from shards packed with `stoker pack --restart 4` (lossless JPEG rewrite with
restart markers: docs/codec.md). "few" is RandomResizedCrop(224) + RandomHorizontalFlip +
ToTensor + Normalize (stoker preset imagenet-train-few), "extensive" adds
ColorJitter(0.4, 0.4, 0.4) (imagenet-train-extensive); float32 NCHW 224x224, batch 256.

  - stoker: stoker.Loader(src, pipeline=PRESET, num_threads=T, prefetch=4, shuffle=True,
    drop_last=True, output="torch") on the folder, on `stoker pack` shards (encoded bytes
    kept) and on `--restart 4` shards.
  - DataLoader: DataLoader(ds, batch_size=256, shuffle=True, num_workers=T, drop_last=True)
    (prefetch_factor 2 per worker), the torchvision transforms, ds =
    torchvision.datasets.ImageFolder (PIL decode) for the folder; for the .stk column a map
    Dataset over the same shards (stoker.open(shards)[i]: the record read and decoded whole
    by libjpeg-turbo, as PIL decodes a file) + Image.fromarray + the same transforms, so
    the DataLoader gets the dedicated reader and keeps torchvision's augmentation.
  - DALI (nvidia-dali, CPU pipeline, device_id=None, run from --dali-python, a separate
    venv; skipped and said so when it is missing): readers.file(file_root=folder) for the
    folder; DALI has no reader of .stk shards, so the .stk column gets DALI's own dedicated
    record reader instead: readers.mxnet over a RecordIO file of the same JPEG bytes
    (bench/write_formats.py writes it). Then decoders.image_random_crop (its fused ROI
    decode, RandomResizedCrop's area/ratio ranges) + resize 224x224 + [extensive:
    color_twist with brightness, contrast, saturation drawn in [0.6, 1.4]] +
    crop_mirror_normalize(mirror=coin_flip, FLOAT, CHW); prefetch_queue_depth 2. Batches are
    taken as dense tensors (as_tensor()).

Every configuration runs in its own process. An "epoch" is the first --images images of a
shuffled epoch after one warm-up batch (every loader is left to prefetch past the window as
it would in a long epoch, so CPU before and after the window balance out) (the loader's start-up is left out: in a real epoch
of 1.28 M images it is paid once); time.perf_counter() is read before and after each
next() of every loader alike. Recorded: epoch time, data wait (sum of the next() times),
data share = wait / epoch time, images/s, the CPU-seconds of the process tree (workers
included) over the epoch and images per CPU-second, and the CPU the rest of the machine
used meanwhile (/proc/stat busy time minus ours), since the machine is shared.

--gpu picks the simulated accelerators (default: a100-amp, v100-amp, a100-amp-lean).

SCALE. The published figures are for GPUs in DGX systems with many host cores per GPU
(DGX-1: 2 x 20-core Xeon E5-2698 v4 for 8 V100 = 5 cores per GPU; DGX A100: 2 x 64-core
EPYC 7742 for 8 A100 = 16 cores per GPU). This host has os.cpu_count() cores, so it can
stand for one such host's share of a GPU: --scale defaults to (cores per GPU in the
published system) / (cores here), e.g. 16 / 2 = 8 for an A100, and the simulated GPU
processes throughput / scale images/s. A loader that scales with cores then sees the same
ratio of work to time as on the full system, so the data share is the one a 16-core host
would see feeding a whole A100 (what a loader cannot hide, like a single-threaded part, is
not scaled). --scale 1 simulates a whole GPU on these 2 cores: every CPU loader stalls.
The DGX counts are physical cores; this VM's CPUs are vCPUs, so counting hardware threads
there (256 per DGX A100) would halve the simulated GPU: the scale errs on the demanding side.
a100-amp-lean puts the same A100 behind 6 cores per GPU (48 cores for 8 GPUs; an assumed
host, not a published system), where CPU loaders are pressed hardest.

Part 2, the real thing (--real; also run by default after part 1): torchvision
resnet18(num_classes=100) trained on the CPU for --real-steps steps (SGD, batch 32,
imagenet-train-few at --real-size px, default 112, to keep it feasible on 2 cores) on the
image folder, fed by stoker (2 threads) and by DataLoader + torchvision (2 workers);
torch.set_num_threads(--torch-threads, default 2) is set explicitly (intra-op threads share
the cores with the loader). Reported: step time, data share, images/s, CPU/wall.
"""
import argparse
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
PRESETS = {"few": "imagenet-train-few", "extensive": "imagenet-train-extensive"}

# Published ResNet-50 v1.5 training throughput of ONE GPU (images/s), with what the figure
# is. Source for every row: NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/
# resnet50v1.5/README.md, "Training performance results" (the 1-GPU rows of the tables
# "Training performance: NVIDIA DGX A100 (8x A100 80GB)" and "... NVIDIA DGX-1 16GB (8x V100
# 16GB)"), measured with the pytorch-21.03 NGC container, DALI CPU data backend by default
# (the data pipeline is not the limit there). The tables do not state the batch size; the
# training script's default is 256 per GPU, which this study uses. No H100 row: we found no
# per-GPU ResNet-50 training figure for it in a document we could check, and invent none.
# cores_per_gpu: host CPU cores per GPU of the system the figure was measured on, except
# a100-amp-lean: the same published A100 figure, on a leaner host with 6 cores per GPU (48
# cores for 8 GPUs), an assumption about the host, not a published measurement.
GPUS = {
    "v100-fp32": dict(ips=367, cores_per_gpu=5, what="V100 16GB, FP32, DGX-1"),
    "v100-amp": dict(ips=1200, cores_per_gpu=5, what="V100 16GB, mixed precision (AMP), DGX-1"),
    "a100-tf32": dict(ips=938, cores_per_gpu=16, what="A100 80GB, TF32, DGX A100"),
    "a100-amp": dict(ips=2470, cores_per_gpu=16,
                     what="A100 80GB, mixed precision (AMP), DGX A100"),
    "a100-amp-lean": dict(ips=2470, cores_per_gpu=6,
                          what="A100 80GB, mixed precision (AMP), on a host with 6 cores per "
                               "GPU"),
}
GPU_SOURCE = ("NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/"
              "README.md, Training performance results, 1 GPU, pytorch-21.03 NGC container")

LOADER_NAMES = {"torch": "DataLoader+torchvision", "dali": "DALI CPU", "stoker": "stoker"}
SOURCE_NAMES = {"folder": "image folder", "stk": ".stk shards", "stk-r4": ".stk --restart 4"}
# (loader, source) columns, in the chart's and tables' order; the DALI .stk column reads
# RecordIO (DALI has no .stk reader).
COLUMNS = [("torch", "folder"), ("torch", "stk"), ("dali", "folder"), ("dali", "stk"),
           ("stoker", "folder"), ("stoker", "stk"), ("stoker", "stk-r4")]


def source_label(loader, source):
    if loader == "dali" and source == "stk":
        return "RecordIO (DALI has no .stk reader)"
    return SOURCE_NAMES[source]


# ---------------------------------------------------------------------------------------
# measurement helpers (run inside the children; no psutil in the DALI venv)

def machine_busy_s():
    """CPU-seconds the whole machine has been busy (all CPUs), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest is inside user)
    busy = v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)
    return busy / os.sysconf("SC_CLK_TCK")


def tree_cpu_s():
    """CPU-seconds (user + sys) of this process and its live descendants."""
    try:
        import psutil
    except ImportError:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime
    me = psutil.Process()
    total = 0.0
    for p in [me] + me.children(recursive=True):
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def timed_epoch(batches, nbatches, step_s):
    """The training loop: one warm-up batch (its step included, its wait not measured), then
    nbatches batches, each waited for with perf_counter around next() and 'trained' with a
    sleep of step_s. Returns the measurements."""
    it = iter(batches)
    t_start = time.perf_counter()
    first = next(it)
    first_s = time.perf_counter() - t_start
    del first
    time.sleep(step_s)
    cpu0, busy0 = tree_cpu_s(), machine_busy_s()
    t0 = time.perf_counter()
    wait = 0.0
    n = 0
    for _ in range(nbatches):
        a = time.perf_counter()
        images, labels = next(it)
        wait += time.perf_counter() - a
        n += len(labels)
        del images, labels
        time.sleep(step_s)  # the simulated accelerator
    epoch = time.perf_counter() - t0
    cpu, busy = tree_cpu_s() - cpu0, machine_busy_s() - busy0
    return {"images": n, "epoch_s": epoch, "wait_s": wait, "first_batch_s": first_s,
            "cpu_s": cpu, "others_cpu_s": max(0.0, busy - cpu), "step_s": step_s,
            "ideal_s": nbatches * step_s}


# ---------------------------------------------------------------------------------------
# children: one configuration each

def torchvision_tf(preset, size=224):
    from torchvision import transforms as T
    tf = [T.RandomResizedCrop(size), T.RandomHorizontalFlip()]
    if preset == "extensive":
        tf.append(T.ColorJitter(0.4, 0.4, 0.4))
    return T.Compose(tf + [T.ToTensor(), T.Normalize(MEAN, STD)])


class StkMapDataset:
    """A map-style torch Dataset over .stk shards: stoker's reader and decoder (whole image,
    libjpeg-turbo), then the torchvision transforms on a PIL image. Opened lazily in each
    worker process."""

    def __init__(self, path, transform):
        import stoker
        self.path, self.transform = path, transform
        self.n = len(stoker.open(path))
        self.ds = None

    def __len__(self):
        return self.n

    def __getstate__(self):
        d = dict(self.__dict__)
        d["ds"] = None
        return d

    def __getitem__(self, i):
        from PIL import Image
        if self.ds is None:
            import stoker
            self.ds = stoker.open(self.path)
        pixels, label = self.ds[i]
        return self.transform(Image.fromarray(pixels)), label


def batches_torch(a, preset, source, threads):
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets
    tf = torchvision_tf(preset)
    ds = datasets.ImageFolder(a.photos, tf) if source == "folder" else StkMapDataset(a.stk, tf)
    torch.manual_seed(0)
    return DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=threads,
                      drop_last=True, prefetch_factor=2)


def batches_stoker(a, preset, source, threads):
    # A whole shuffled epoch, cut short by the loop as the other loaders are: a loader
    # limited to exactly the measured batches would do no work after the window while the
    # others keep prefetching, and its CPU per image would look better than it is.
    import stoker
    src = {"folder": a.photos, "stk": a.stk, "stk-r4": a.stk_restart}[source]
    return stoker.Loader(src, batch_size=a.batch, shuffle=True, seed=0,
                         pipeline=PRESETS[preset], num_threads=threads, prefetch=4,
                         drop_last=True, output="torch")


def batches_dali(a, preset, source, threads):
    from nvidia.dali import fn, pipeline_def, types
    mean = [m * 255 for m in MEAN]
    std = [s * 255 for s in STD]

    @pipeline_def(batch_size=a.batch, num_threads=threads, device_id=None, seed=1,
                  prefetch_queue_depth=2)
    def pipe():
        if source == "folder":
            jpegs, labels = fn.readers.file(file_root=a.photos, random_shuffle=True, name="r")
        else:
            jpegs, labels = fn.readers.mxnet(path=[a.recordio + "/recordio/photos.rec"],
                                             index_path=[a.recordio + "/recordio/photos.idx"],
                                             random_shuffle=True, name="r")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                               random_area=[0.08, 1.0],
                                               random_aspect_ratio=[3 / 4, 4 / 3])
        images = fn.resize(images, resize_x=224, resize_y=224)
        if preset == "extensive":
            images = fn.color_twist(images, brightness=fn.random.uniform(range=[0.6, 1.4]),
                                    contrast=fn.random.uniform(range=[0.6, 1.4]),
                                    saturation=fn.random.uniform(range=[0.6, 1.4]))
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                          mean=mean, std=std, mirror=fn.random.coin_flip())
        return images, labels

    p = pipe()
    p.build()

    def gen():
        while True:
            images, labels = p.run()
            yield images.as_tensor(), [0] * len(labels)
    return gen()


def child_sim(a, loader, source, preset, threads):
    nbatches = a.images // a.batch
    gpu = GPUS[a.gpu]
    step_s = a.batch / (gpu["ips"] / float(a.scale))
    if loader == "stoker":
        b = batches_stoker(a, preset, source, threads)
    elif loader == "torch":
        b = batches_torch(a, preset, source, threads)
    else:
        b = batches_dali(a, preset, source, threads)
    r = timed_epoch(b, nbatches, step_s)
    r.update(loader=loader, source=source, preset=preset, threads=threads)
    return r


def child_real(a, loader):
    import torch
    import torchvision
    torch.set_num_threads(a.torch_threads)
    size, bs, w = a.real_size, a.real_batch, a.real_workers
    if loader == "stoker":
        import stoker
        spec = "random_resized_crop %d | flip 0.5 | normalize imagenet | to f32 chw" % size
        data = stoker.Loader(a.photos, batch_size=bs, shuffle=True, seed=0, pipeline=spec,
                             num_threads=w, prefetch=4, drop_last=True, output="torch")
    else:
        from torchvision import transforms as T
        tf = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(),
                        T.Normalize(MEAN, STD)])
        ds = torchvision.datasets.ImageFolder(a.photos, tf)
        torch.manual_seed(0)
        data = torch.utils.data.DataLoader(ds, batch_size=bs, shuffle=True, num_workers=w,
                                           drop_last=True)
    classes = len(torchvision.datasets.folder.find_classes(a.photos)[0])
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=classes)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    it = iter(data)
    warm = a.real_warmup
    steps = []
    wait = 0.0
    n = 0
    t0 = cpu0 = busy0 = None
    losses = []
    for i in range(warm + a.real_steps):
        if i == warm:
            cpu0, busy0, t0 = tree_cpu_s(), machine_busy_s(), time.perf_counter()
        s = time.perf_counter()
        images, labels = next(it)
        got = time.perf_counter()
        loss = loss_fn(model(images), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if i >= warm:
            wait += got - s
            steps.append(time.perf_counter() - s)
            n += len(labels)
    epoch = time.perf_counter() - t0
    cpu, busy = tree_cpu_s() - cpu0, machine_busy_s() - busy0
    return {"loader": loader, "images": n, "steps": len(steps), "epoch_s": epoch,
            "wait_s": wait, "step_mean_s": statistics.mean(steps),
            "step_median_s": statistics.median(steps), "cpu_s": cpu,
            "others_cpu_s": max(0.0, busy - cpu), "torch_threads": torch.get_num_threads(),
            "workers": w, "size": size, "batch": bs, "loss_first": losses[0],
            "loss_last": statistics.mean(losses[-10:])}


# ---------------------------------------------------------------------------------------
# parent

def run_child(cmd, env, timeout):
    t = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after %d s" % timeout}
    if r.returncode != 0:
        return {"error": (r.stderr or r.stdout)[-1500:]}
    res = json.loads(r.stdout.strip().splitlines()[-1])
    res["process_s"] = time.perf_counter() - t
    return res


def prepare(a, need_dali):
    stoker_bin = os.path.join(a.build, "stoker")
    for path, extra in ((a.stk, []), (a.stk_restart, ["--restart", "4"])):
        if not os.path.isdir(path) or not os.listdir(path):
            print("packing %s -> %s %s" % (a.photos, path, " ".join(extra)), flush=True)
            subprocess.run([stoker_bin, "pack", a.photos, path, "--quiet"] + extra, check=True)
    if need_dali and not os.path.exists(os.path.join(a.recordio, "recordio", "DONE")):
        print("writing the RecordIO file for DALI's record reader -> %s" % a.recordio,
              flush=True)
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "write_formats.py"),
                        "--images", a.photos, "--out", a.recordio, "--formats", "recordio"],
                       check=True)


def dali_available(py):
    if not os.path.exists(py):
        return "no %s" % py
    r = subprocess.run([py, "-c", "import nvidia.dali as d; print(d.__version__)"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return "nvidia.dali does not import in %s" % py
    return None, r.stdout.strip()


def pct(x):
    return "%.0f%%" % (100 * x)


def sim_key(r):
    return (r.get("gpu"), r["preset"], r["threads"], r["loader"], r["source"])


def scale_of(gpu, scale):
    """--scale: 'auto' = the published system's host cores per GPU / this machine's."""
    return GPUS[gpu]["cores_per_gpu"] / os.cpu_count() if scale == "auto" else float(scale)


def render_sim(res, gm):
    """The table and summary of one simulated GPU."""
    meta = res["meta"]
    gpu = gm["gpu"]
    g = GPUS[gpu]
    sims = {sim_key(r): r for r in res.get("sim", []) if "error" not in r}
    ideal = (meta["images"] // meta["batch"]) * gm["step_s"]
    lines = [
        "**Simulated %s** (`--gpu %s`): %d images/s published / %.2f (%d host cores per GPU "
        "there, %d here) = %.0f images/s; a step of batch %d sleeps %.3f s; the GPU-bound "
        "epoch (steps back to back, no wait) is %.2f s." % (
            g["what"], gpu, g["ips"], gm["scale"], g["cores_per_gpu"], meta["cpus"],
            g["ips"] / gm["scale"], meta["batch"], gm["step_s"], ideal),
        "",
        "| preset | threads / workers | loader | reader | epoch s | vs baseline | data wait s "
        "| data share | images/s | images/CPU-s | others' load |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for preset in PRESETS:
        for th in meta["threads"]:
            base = sims.get((gpu, preset, th, "torch", "folder"))
            for lo, so in COLUMNS:
                r = sims.get((gpu, preset, th, lo, so))
                if r is None:
                    err = [x for x in res["sim"] if sim_key(x) == (gpu, preset, th, lo, so)]
                    why = ("not run: " + meta["dali"]) if lo == "dali" and not \
                        meta["dali_ok"] else ("failed" if err else "not run")
                    lines.append("| %s | %d | %s | %s | %s |  |  |  |  |  |  |" % (
                        preset, th, LOADER_NAMES[lo], source_label(lo, so), why))
                    continue
                red = "baseline" if (lo, so) == ("torch", "folder") else (
                    "%+.0f%%" % (100 * (r["epoch_s"] / base["epoch_s"] - 1)) if base else "")
                lines.append("| %s | %d | %s | %s | %.2f | %s | %.2f | %s | %.0f | %.0f | "
                             "%.2f |" % (
                                 preset, th, LOADER_NAMES[lo], source_label(lo, so),
                                 r["epoch_s"], red, r["wait_s"],
                                 pct(r["wait_s"] / r["epoch_s"]),
                                 r["images"] / r["epoch_s"],
                                 r["images"] / r["cpu_s"] if r["cpu_s"] else 0,
                                 r["others_cpu_s"] / r["epoch_s"]))
    lines += ["", "Epoch time against the baseline (DataLoader + torchvision on the image "
              "folder, same preset and workers; the seed study reports 20-40% shorter epochs):",
              ""]
    for preset in PRESETS:
        for th in meta["threads"]:
            b = sims.get((gpu, preset, th, "torch", "folder"))
            if not b:
                continue
            parts = []
            for lo, so, what in (("torch", "stk", "DataLoader on .stk (dedicated reader only)"),
                                 ("dali", "folder", "DALI, folder"),
                                 ("dali", "stk", "DALI, RecordIO"),
                                 ("stoker", "folder", "stoker, folder"),
                                 ("stoker", "stk", "stoker, .stk"),
                                 ("stoker", "stk-r4", "stoker, .stk --restart 4")):
                r = sims.get((gpu, preset, th, lo, so))
                if r:
                    parts.append("%s %.0f%%" % (what, 100 * (1 - r["epoch_s"] / b["epoch_s"])))
            lines.append("- %s, %d thread%s/worker%s (baseline data share %s): shorter by %s."
                         % (preset, th, "" if th == 1 else "s", "" if th == 1 else "s",
                            pct(b["wait_s"] / b["epoch_s"]), "; ".join(parts)))
    lines.append("")

    def per_cpu(lo, so):
        return {k[1:3]: r["images"] / r["cpu_s"] for k, r in sims.items()
                if k[0] == gpu and k[3:] == (lo, so) and r["cpu_s"] > 0}

    def ratio_range(num, den):
        v = [num[k] / den[k] for k in num if k in den]
        return ("%.1f-%.1fx" % (min(v), max(v))) if v else "n/a"
    st = {so: per_cpu("stoker", so) for so in ("folder", "stk", "stk-r4")}
    tf, da = per_cpu("torch", "folder"), per_cpu("dali", "folder")
    if st["folder"] and tf:
        lines += ["Images per CPU-second (the loaders' own CPU per image, the steadier figure "
                  "on a shared machine), over the %d rows of each: stoker from the folder "
                  "%s the DataLoader's, %s DALI's (folder); stoker from `--restart 4` shards "
                  "%s the DataLoader's, %s DALI's." % (
                      len(tf), ratio_range(st["folder"], tf), ratio_range(st["folder"], da),
                      ratio_range(st["stk-r4"], tf), ratio_range(st["stk-r4"], da)), ""]
    return lines


def render(res, a):
    """Markdown (tables + text) for docs/benchmarks.md."""
    lines = []
    if res.get("sim"):
        meta = res["meta"]
        lines += [
            "Run of %s UTC (`%s`, %.1f minutes for the whole study, real run included); "
            "epoch = %d images after one warm-up batch, batch %d; DALI %s. Machine: %s, "
            "shared: load average %s at the start, %s at the end. \"others' load\" is the CPU "
            "the rest of the machine used during each epoch (CPU-seconds per second, out of "
            "%d): a row with a high figure ran with less than the whole machine, and its "
            "images per CPU-second (the loader's own CPU cost per image; the simulated step "
            "costs none) is the steadier figure." % (
                meta["date"], meta["command"], meta["minutes"], meta["images"], meta["batch"],
                meta["dali"], meta["machine"], meta["load_start"], meta["load_end"],
                meta["cpus"]),
            "",
            "![stall study: epoch time and data wait per loader, reader, preset and threads]"
            "(stall-study.png)",
            "",
        ]
        for gm in meta["gpus"]:
            lines += render_sim(res, gm)
    if res.get("real"):
        rm = res["real_meta"]
        lines += [
            "**The real thing** (`bench/stall_study.py --real`, run of %s UTC): torchvision "
            "ResNet-18 (%d classes) trained on the CPU, SGD, batch %d, imagenet-train-few at "
            "%d px (`random_resized_crop %d | flip 0.5 | normalize imagenet | to f32 chw` / "
            "the same torchvision transforms), image folder, %d loader threads / worker "
            "processes, `torch.set_num_threads(%d)`, %d steps measured after %d warm-up steps "
            "(%.1f minutes for both)."
            % (rm["date"], rm["classes"], rm["batch"], rm["size"], rm["size"], rm["workers"],
               rm["torch_threads"], rm["steps"], rm["warmup"], rm["minutes"]),
            "",
            "| loader | step s (mean) | step s (median) | data wait s | data share | images/s "
            "| CPU/wall (tree) | others' load | loss: first → mean of last 10 |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in res["real"]:
            if "error" in r:
                lines.append("| %s | failed |  |  |  |  |  |  |  |" % LOADER_NAMES[r["loader"]])
                continue
            lines.append("| %s | %.3f | %.3f | %.2f | %s | %.1f | %.2f | %.2f | %.2f → %.2f |" % (
                LOADER_NAMES[r["loader"]], r["step_mean_s"], r["step_median_s"], r["wait_s"],
                "%.1f%%" % (100 * r["wait_s"] / r["epoch_s"]), r["images"] / r["epoch_s"],
                r["cpu_s"] / r["epoch_s"], r["others_cpu_s"] / r["epoch_s"], r["loss_first"],
                r["loss_last"]))
        lines.append("")
    return "\n".join(lines)


def chart(res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    meta = res.get("meta")
    sims = {sim_key(r): r for r in res.get("sim", []) if "error" not in r}
    real = [r for r in res.get("real", []) if "error" not in r]
    gms = meta["gpus"] if meta and res.get("sim") else []
    nrows = max(1, len(gms))
    fig = plt.figure(figsize=(14 if real else 11.5, 4.6 * nrows))
    gs = fig.add_gridspec(nrows, 2 if real else 1, width_ratios=[4, 1] if real else None)
    colors = {"torch": "#d62728", "dali": "#76b900", "stoker": "#1f77b4"}
    alphas = {"folder": 1.0, "stk": 0.65, "stk-r4": 0.4}
    for row, gm in enumerate(gms):
        ax = fig.add_subplot(gs[row, 0])
        gpu = gm["gpu"]
        groups = [(p, t) for p in PRESETS for t in meta["threads"]]
        width = 0.8 / len(COLUMNS)
        for gi, (preset, th) in enumerate(groups):
            for ci, (lo, so) in enumerate(COLUMNS):
                r = sims.get((gpu, preset, th, lo, so))
                x = gi + (ci - (len(COLUMNS) - 1) / 2) * width
                if r is None:
                    ax.text(x, 0.1, "n/a", rotation=90, ha="center", va="bottom", fontsize=7)
                    continue
                ax.bar(x, r["epoch_s"], width, color=colors[lo], alpha=alphas[so],
                       edgecolor="black", linewidth=0.4)
                ax.bar(x, r["wait_s"], width, color="none", hatch="////", edgecolor="black",
                       linewidth=0.4)
        ideal = (meta["images"] // meta["batch"]) * gm["step_s"]
        ax.axhline(ideal, color="gray", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(["%s, %d thread%s/worker%s" % (p, t, "" if t == 1 else "s",
                                                          "" if t == 1 else "s")
                            for p, t in groups], fontsize=9)
        ax.set_ylabel("epoch time, s (%d images)" % meta["images"])
        g = GPUS[gpu]
        ax.set_title("Simulated %s: %d img/s published / %.1f = %.0f img/s on %d cores; "
                     "hatched = waiting for data" % (g["what"], g["ips"], gm["scale"],
                                                     g["ips"] / gm["scale"], meta["cpus"]),
                     fontsize=9.5)
        if row == 0:
            handles = [Patch(facecolor=colors[lo], alpha=alphas[so], edgecolor="black",
                             label="%s, %s" % (LOADER_NAMES[lo],
                                               source_label(lo, so).split(" (")[0]))
                       for lo, so in COLUMNS]
            handles.append(Patch(facecolor="white", hatch="////", edgecolor="black",
                                 label="data wait"))
            handles.append(Line2D([0], [0], color="gray", linestyle="--",
                                  label="GPU-bound epoch (no wait)"))
            ax.legend(handles=handles, fontsize=7.5, ncol=2, loc="upper right")
        ax.margins(y=0.12)
    if real:
        bx = fig.add_subplot(gs[:, 1] if gms else gs[0, 0])
        for i, r in enumerate(real):
            per = r["epoch_s"] / r["steps"]
            wait = r["wait_s"] / r["steps"]
            bx.bar(i, per, 0.6, color=colors[r["loader"]], edgecolor="black", linewidth=0.4)
            bx.bar(i, wait, 0.6, color="none", hatch="////", edgecolor="black", linewidth=0.4)
            bx.text(i, per, "%.1f%% wait\n%.1f img/s" % (100 * r["wait_s"] / r["epoch_s"],
                                                        r["images"] / r["epoch_s"]),
                    ha="center", va="bottom", fontsize=8)
        bx.set_xticks(range(len(real)))
        bx.set_xticklabels([LOADER_NAMES[r["loader"]].replace("+", "+\n") for r in real],
                           fontsize=8)
        bx.set_ylabel("s per training step")
        rm = res["real_meta"]
        bx.set_title("Real: ResNet-18 trained on the CPU\nbatch %d, %d px, %d steps,\n"
                     "torch threads %d" % (rm["batch"], rm["size"], rm["steps"],
                                           rm["torch_threads"]), fontsize=9.5)
        bx.margins(y=0.2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_docs(text, bench_md):
    begin, end = "<!-- stall-study:begin -->", "<!-- stall-study:end -->"
    with open(bench_md) as f:
        doc = f.read()
    if begin not in doc or end not in doc:
        sys.exit("%s has no %s ... %s markers" % (bench_md, begin, end))
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(bench_md, "w") as f:
        f.write(head + begin + "\n" + text + "\n" + end + tail)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", default="/work/data/photos/train")
    ap.add_argument("--stk", default="/work/data/photos-stk")
    ap.add_argument("--stk-restart", default="/work/data/photos-stk-r4")
    ap.add_argument("--recordio", default="/work/data/photos-dali",
                    help="bench/write_formats.py --out for DALI's RecordIO reader")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dali-python", default="/work/venv-dali/bin/python")
    ap.add_argument("--gpu", default="a100-amp,v100-amp,a100-amp-lean",
                    help="simulated accelerators, comma-separated: " + ", ".join(sorted(GPUS)))
    ap.add_argument("--scale", default="auto",
                    help="divide the GPU's images/s by this (auto: its host's cores per GPU / "
                         "this machine's cores)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--images", type=int, default=2048, help="images per measured epoch")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--loaders", default="torch,dali,stoker")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--real", action="store_true", help="only part 2, the real training")
    ap.add_argument("--no-real", action="store_true", help="only part 1")
    ap.add_argument("--real-steps", type=int, default=200)
    ap.add_argument("--real-warmup", type=int, default=5)
    ap.add_argument("--real-size", type=int, default=112)
    ap.add_argument("--real-batch", type=int, default=32)
    ap.add_argument("--real-workers", type=int, default=2)
    ap.add_argument("--torch-threads", type=int, default=2)
    ap.add_argument("--json", default=os.path.join(ROOT, "docs", "stall-study.json"))
    ap.add_argument("--from-json", help="redraw chart and tables from this file, no runs")
    ap.add_argument("--no-write", action="store_true", help="print only; docs untouched")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        if a.child[0] == "sim":
            _, lo, so, preset, th = a.child
            print(json.dumps(child_sim(a, lo, so, preset, int(th))))
        else:
            print(json.dumps(child_real(a, a.child[1])))
        return

    me = os.path.abspath(__file__)
    doc_png = os.path.join(ROOT, "docs", "stall-study.png")
    bench_md = os.path.join(ROOT, "docs", "benchmarks.md")
    if a.from_json:
        with open(a.from_json) as f:
            res = json.load(f)
    else:
        t_all = time.perf_counter()
        res = {}
        if os.path.exists(a.json):  # keep the other part's last results when running one
            with open(a.json) as f:
                old = json.load(f)
            if a.real:
                res = {k: v for k, v in old.items() if k in ("sim", "meta")}
            elif a.no_real:
                res = {k: v for k, v in old.items() if k in ("real", "real_meta")}
        env = dict(os.environ, PYTHONPATH=os.path.join(a.build, "python"),
                   STOKER_BUILD=a.build)
        date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
        machine = "%d CPUs (%s)" % (os.cpu_count(), cpu_model())
        if not a.real:
            loaders = a.loaders.split(",")
            dali = dali_available(a.dali_python) if "dali" in loaders else "not asked for"
            dali_ok = isinstance(dali, tuple)
            dali_text = ("%s from %s" % (dali[1], a.dali_python)) if dali_ok else dali
            if not dali_ok:
                print("DALI: %s; its rows are left out" % dali_text, flush=True)
                loaders = [x for x in loaders if x != "dali"]
            prepare(a, dali_ok)
            threads = [int(x) for x in a.threads.split(",")]
            load_start = "%.2f" % os.getloadavg()[0]
            t_sim = time.perf_counter()
            sim = []
            gpus = a.gpu.split(",")
            for gpu in gpus:
                if gpu not in GPUS:
                    sys.exit("--gpu %s: not one of %s" % (gpu, ", ".join(sorted(GPUS))))
            for gpu in gpus:
              base = ["--photos", a.photos, "--stk", a.stk, "--stk-restart", a.stk_restart,
                      "--recordio", a.recordio, "--gpu", gpu,
                      "--scale", str(scale_of(gpu, a.scale)),
                      "--batch", str(a.batch), "--images", str(a.images)]
              for preset in PRESETS:
                for th in threads:
                    for lo, so in COLUMNS:
                        if lo not in loaders:
                            continue
                        py = a.dali_python if lo == "dali" else sys.executable
                        r = run_child([py, me] + base + ["--child", "sim", lo, so, preset,
                                                         str(th)], env, a.timeout)
                        r.update(gpu=gpu, loader=lo, source=so, preset=preset, threads=th)
                        sim.append(r)
                        if "error" in r:
                            print("%-9s %-9s %d %-7s %-7s FAILED %s" % (
                                gpu, preset, th, lo, so, r["error"][-600:]), flush=True)
                        else:
                            print("%-9s %-9s %d %-7s %-7s epoch %6.2f s  wait %6.2f s (%3.0f%%)  "
                                  "%6.0f img/s  %6.0f img/CPU-s  others %.2f CPUs" % (
                                      gpu, preset, th, lo, so, r["epoch_s"], r["wait_s"],
                                      100 * r["wait_s"] / r["epoch_s"],
                                      r["images"] / r["epoch_s"], r["images"] / r["cpu_s"],
                                      r["others_cpu_s"] / r["epoch_s"]), flush=True)
            res["sim"] = sim
            res["meta"] = dict(date=date, gpus=[dict(
                gpu=g, scale=scale_of(g, a.scale),
                step_s=a.batch / (GPUS[g]["ips"] / scale_of(g, a.scale))) for g in gpus],
                               batch=a.batch,
                               images=a.images, threads=threads, cpus=os.cpu_count(),
                               dali=dali_text, dali_ok=dali_ok, machine=machine,
                               load_start=load_start, load_end="%.2f" % os.getloadavg()[0],
                               sim_minutes=(time.perf_counter() - t_sim) / 60,
                               command="/usr/bin/python3 bench/stall_study.py")
        if not a.no_real:
            t_real = time.perf_counter()
            real = []
            base = ["--photos", a.photos, "--real-steps", str(a.real_steps), "--real-warmup",
                    str(a.real_warmup), "--real-size", str(a.real_size), "--real-batch",
                    str(a.real_batch), "--real-workers", str(a.real_workers),
                    "--torch-threads", str(a.torch_threads)]
            for lo in ("stoker", "torch"):
                r = run_child([sys.executable, me] + base + ["--child", "real", lo], env,
                              max(a.timeout, 60 * 30))
                r.setdefault("loader", lo)
                real.append(r)
                if "error" in r:
                    print("real %-7s FAILED %s" % (lo, r["error"][-600:]), flush=True)
                else:
                    print("real %-7s step %.3f s  wait %.2f s of %.1f s (%.1f%%)  %.1f img/s  "
                          "CPU/wall %.2f" % (lo, r["step_mean_s"], r["wait_s"], r["epoch_s"],
                                             100 * r["wait_s"] / r["epoch_s"],
                                             r["images"] / r["epoch_s"],
                                             r["cpu_s"] / r["epoch_s"]), flush=True)
            import torchvision
            res["real"] = real
            res["real_meta"] = dict(date=date, size=a.real_size, batch=a.real_batch,
                                    workers=a.real_workers, torch_threads=a.torch_threads,
                                    steps=a.real_steps, warmup=a.real_warmup,
                                    classes=len(torchvision.datasets.folder.find_classes(
                                        a.photos)[0]),
                                    minutes=(time.perf_counter() - t_real) / 60)
        minutes = (time.perf_counter() - t_all) / 60
        if "meta" in res and not a.real:
            res["meta"]["minutes"] = minutes
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
        print("measurements -> %s (%.1f minutes)" % (a.json, minutes))
    text = render(res, a)
    print()
    print(text)
    if not a.no_write:
        chart(res, doc_png)
        write_docs(text, bench_md)
        print("wrote %s and the stall-study section of %s" % (doc_png, bench_md))


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    main()
