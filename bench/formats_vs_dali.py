#!/usr/bin/python3
"""Each container format: stoker's reader vs NVIDIA DALI's own reader, same files, same work.

For every format both read (TFRecord, MXNet RecordIO, Caffe LMDB, WebDataset tar, NumPy),
plus the plain image folder and stoker's .stk shards for reference (stk-restart: packed with
`--restart 4`, the same pixels; DALI reads the original files there), this runs the same
augmentation over the same files (bench/write_formats.py writes them, in one order):

  encoded JPEGs   stoker `imagenet-train-few` (random_resized_crop 224 | flip 0.5 |
                  normalize imagenet | to f32 chw); DALI: decoders.image_random_crop (its
                  fused ROI decode) + resize 224x224 + crop_mirror_normalize(mirror=coin,
                  FLOAT, CHW), CPU pipeline (device_id=None)
  raw arrays      the same without the decode: stoker over images.npy, DALI's numpy reader
                  over one .npy per sample + random_resized_crop + crop_mirror_normalize

Both: 2 threads, batch 256, shuffled (stoker: its permutation; DALI: random_shuffle=True, a
1024-sample shuffle buffer), every sample of --epochs epochs. Each configuration runs in its
own process; the figure is measured inside it over the steady state (from the end of the
first batch to the last), wall time and the process's CPU time (user + sys, all threads), so
the start-up of either library is left out. Images per CPU-second is the headline: it holds
when other work shares the machine. Configurations run in rounds (--rounds), medians kept.

    /usr/bin/python3 bench/formats_vs_dali.py --work WORK [--dali-python /work/venv-dali/bin/python]
           [--formats tfrecord,recordio,lmdb,wds,npy,folder,stk] [--epochs 2] [--rounds 3]

WORK is bench/write_formats.py's --out (written first when WORK/list.txt is missing, from
--images). With --crosscheck it only reads each container with DALI's own reader, in order,
and compares every sample's label and encoded bytes with list.txt: the writers (and so the
data every stoker reader is measured and tested on) checked by a reader that is not stoker's.
"""
import argparse
import glob
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]
STOKER_PIPE = "random_resized_crop 224 | flip 0.5 | normalize imagenet | to f32 chw"


def stoker_uri(work, fmt):
    return {
        "tfrecord": "tfrecord:%s/tfrecord/*.tfrecord" % work,
        "recordio": "recordio:%s/recordio/photos.rec" % work,
        "lmdb": "lmdb:%s/lmdb" % work,
        "wds": "wds:%s/wds/*.tar" % work,
        "npy": "npy:%s/raw/images.npy,%s/raw/labels.npy" % (work, work),
        "folder": "list:%s/list.txt" % work,
        "stk": "stk:%s/stk" % work,
        "stk-restart": "stk:%s/stk-restart" % work,
        "h5": "hdf5:%s/h5/photos.h5?images=/images&labels=/labels" % work,
    }[fmt]


def cpu_now():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child_stoker(work, fmt, epochs, batch, threads):
    import stoker
    loader = stoker.Loader(stoker_uri(work, fmt), batch_size=batch, shuffle=True, seed=1,
                           transforms=[s.strip() for s in STOKER_PIPE.split("|")[:-1]],
                           num_threads=threads, dtype="float32", layout="NCHW",
                           output="numpy")
    n = 0
    t0 = c0 = None
    marks = []
    for e in range(epochs):
        loader.set_epoch(e)
        for images, labels in loader:
            if t0 is None:
                t0, c0 = time.perf_counter(), cpu_now()
                continue
            n += len(labels)
        marks.append((n, time.perf_counter(), cpu_now()))
    return result(n, t0, c0, marks)


def result(n, t0, c0, marks):
    """The steady state from the end of the first batch, and the epochs after the first
    (from the end of epoch 1): stoker's JPEG sync index is made in epoch 1."""
    t1, c1 = time.perf_counter(), cpu_now()
    r = {"images": n, "wall_s": t1 - t0, "cpu_s": c1 - c0}
    if len(marks) > 1:
        m, tm, cm = marks[0]
        r.update({"images_later": n - m, "wall_s_later": t1 - tm, "cpu_s_later": c1 - cm})
    return r


def child_dali(work, fmt, epochs, batch, threads):
    from nvidia.dali import fn, pipeline_def, types
    import nvidia.dali.tfrecord as tfrec

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=1)
    def pipe():
        raw = False
        if fmt == "tfrecord":
            files = sorted(glob.glob(work + "/tfrecord/*.tfrecord"))
            inp = fn.readers.tfrecord(
                path=files, index_path=[f[:-len(".tfrecord")] + ".idx" for f in files],
                features={"image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                          "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1)},
                random_shuffle=True, name="r")
            jpegs, labels = inp["image/encoded"], inp["image/class/label"]
        elif fmt == "recordio":
            jpegs, labels = fn.readers.mxnet(path=[work + "/recordio/photos.rec"],
                                             index_path=[work + "/recordio/photos.idx"],
                                             random_shuffle=True, name="r")
        elif fmt == "lmdb":
            jpegs, labels = fn.readers.caffe(path=work + "/lmdb", random_shuffle=True, name="r")
        elif fmt == "wds":
            jpegs, labels = fn.readers.webdataset(
                paths=sorted(glob.glob(work + "/wds/*.tar")), ext=["jpg", "cls"],
                missing_component_behavior="error", random_shuffle=True, name="r")
        elif fmt in ("folder", "stk", "stk-restart"):
            jpegs, labels = fn.readers.file(file_list=work + "/list.dali.txt",
                                            random_shuffle=True, name="r")
        elif fmt == "npy":
            raw = True
            images = fn.readers.numpy(file_root=work + "/raw/samples", file_filter="*.npy",
                                      random_shuffle=True, name="r")
            labels = images  # the numpy reader has no labels; the work is the images'
        if raw:
            images = fn.random_resized_crop(images, size=[224, 224])
        else:
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
            images = fn.resize(images, resize_x=224, resize_y=224)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                          mean=MEAN, std=STD, mirror=fn.random.coin_flip())
        return images, labels

    p = pipe()
    p.build()
    size = p.reader_meta("r")["epoch_size"]
    n = 0
    t0 = c0 = None
    marks = []
    for e in range(epochs):
        got = 0
        while got < size:
            out = p.run()
            b = len(out[0])
            got += b
            if t0 is None:
                t0, c0 = time.perf_counter(), cpu_now()
                continue
            n += b
        p.reset()
        marks.append((n, time.perf_counter(), cpu_now()))
    return result(n, t0, c0, marks)


def child_crosscheck(work, fmt):
    """DALI's own reader over the files bench/write_formats.py wrote, in file
    order, no shuffle: the (label, MD5 of the encoded bytes) of every sample,
    to compare with list.txt — the writers checked by a reader that is not
    stoker's."""
    import hashlib
    from nvidia.dali import fn, pipeline_def
    import nvidia.dali.tfrecord as tfrec

    @pipeline_def(batch_size=64, num_threads=2, device_id=None)
    def pipe():
        if fmt == "tfrecord":
            files = sorted(glob.glob(work + "/tfrecord/*.tfrecord"))
            inp = fn.readers.tfrecord(
                path=files, index_path=[f[:-len(".tfrecord")] + ".idx" for f in files],
                features={"image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                          "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1)},
                name="r")
            return inp["image/encoded"], inp["image/class/label"]
        if fmt == "recordio":
            return tuple(fn.readers.mxnet(path=[work + "/recordio/photos.rec"],
                                          index_path=[work + "/recordio/photos.idx"], name="r"))
        if fmt == "lmdb":
            return tuple(fn.readers.caffe(path=work + "/lmdb", name="r"))
        return tuple(fn.readers.webdataset(paths=sorted(glob.glob(work + "/wds/*.tar")),
                                           ext=["jpg", "cls"],
                                           missing_component_behavior="error", name="r"))
    p = pipe()
    p.build()
    size = p.reader_meta("r")["epoch_size"]
    got = []
    while len(got) < size:
        jpegs, labels = p.run()
        for i in range(len(jpegs)):
            lab = np.array(labels.at(i)).reshape(-1)
            if lab.dtype.kind == "f":  # RecordIO: the IRHeader's float label
                lab = int(lab[0])
            elif lab.dtype == np.uint8 and fmt == "wds":  # the .cls member's text
                lab = int(bytes(lab).decode())
            else:
                lab = int(lab[0])
            got.append((lab, hashlib.md5(np.array(jpegs.at(i)).tobytes()).hexdigest()))
    return got[:size]


def crosscheck(work, dali_python, formats):
    import hashlib
    want = []
    with open(os.path.join(work, "list.txt")) as f:
        for line in f:
            path, label = line.rstrip("\n").split("\t")
            with open(path, "rb") as g:
                want.append((int(label), hashlib.md5(g.read()).hexdigest()))
    me = os.path.abspath(__file__)
    for fmt in formats:
        r = subprocess.run([dali_python, me, "--work", work, "--child", "crosscheck", fmt],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print("%-9s DALI failed: %s" % (fmt, r.stderr[-500:]))
            continue
        got = [tuple(x) for x in json.loads(r.stdout.strip().splitlines()[-1])]
        same = got == want
        print("%-9s DALI's reader: %d samples, labels and bytes %s list.txt" % (
            fmt, len(got), "identical to" if same else "DIFFERENT from"))


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return {"error": (r.stderr or r.stdout)[-1500:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--images", default="/work/data/photos/train")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dali-python", default="/work/venv-dali/bin/python")
    ap.add_argument("--formats", default="tfrecord,recordio,lmdb,wds,npy,folder,stk")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-dali", action="store_true", help="stoker's readers only")
    ap.add_argument("--crosscheck", action="store_true",
                    help="only check that DALI's readers see list.txt's labels and bytes")
    ap.add_argument("--child", nargs=2, metavar=("LIB", "FORMAT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child and a.child[0] == "crosscheck":
        import numpy as np  # noqa: F401 (used by child_crosscheck)
        globals()["np"] = np
        print(json.dumps(child_crosscheck(a.work, a.child[1])))
        return
    if a.crosscheck:
        crosscheck(os.path.abspath(a.work), a.dali_python,
                   [f for f in a.formats.split(",") if f in ("tfrecord", "recordio", "lmdb",
                                                               "wds")])
        return
    if a.child:
        lib, fmt = a.child
        print(json.dumps((child_stoker if lib == "stoker" else child_dali)(
            a.work, fmt, a.epochs, a.batch, a.threads)))
        return
    work = os.path.abspath(a.work)
    if not os.path.exists(os.path.join(work, "list.txt")):
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "write_formats.py"),
                        "--images", a.images, "--out", work], check=True)
    with open(os.path.join(work, "list.txt")) as f, \
            open(os.path.join(work, "list.dali.txt"), "w") as g:
        g.writelines(line.replace("\t", " ") for line in f)
    for name, extra in (("stk", []), ("stk-restart", ["--restart", "4"])):
        if name in a.formats.split(",") and not os.path.isdir(os.path.join(work, name)):
            subprocess.run([os.path.join(a.build, "stoker"), "pack", "list:%s/list.txt" % work,
                            os.path.join(work, name), "--quiet"] + extra, check=True)
    env = dict(os.environ, PYTHONPATH=os.path.join(a.build, "python"))
    base = ["--work", work, "--epochs", str(a.epochs), "--batch", str(a.batch), "--threads",
            str(a.threads)]
    me = os.path.abspath(__file__)
    res = {}
    libs = ("stoker",) if a.no_dali else ("stoker", "dali")
    for rnd in range(a.rounds):
        for fmt in a.formats.split(","):
            for lib in libs:
                py = sys.executable if lib == "stoker" else a.dali_python
                r = run([py, me] + base + ["--child", lib, fmt], env=env)
                res.setdefault((fmt, lib), []).append(r)
                print("round %d %-9s %-6s %s" % (rnd, fmt, lib, json.dumps(r)[:300]),
                      flush=True)

    def med(rs, key, suffix):
        v = [r["images" + suffix] / r[key + suffix] for r in rs
             if "error" not in r and r.get(key + suffix, 0) > 0]
        return statistics.median(v) if v else float("nan")
    for suffix, title in (("", "all epochs, from the end of the first batch"),
                          ("_later", "epochs 2..%d (after the first)" % a.epochs)):
        if a.epochs < 2 and suffix:
            continue
        print()
        print(title)
        print("%-11s %13s %13s %15s %15s %10s %10s %10s %10s" % (
            "format", "stoker img/s", "DALI img/s", "stoker img/cpu", "DALI img/cpu",
            "vs DALI", "vs DALI", "vs .stk", "vs .stk"))
        print("%-11s %13s %13s %15s %15s %10s %10s %10s %10s" % (
            "", "", "", "", "", "(wall)", "(cpu)", "(wall)", "(cpu)"))
        stk = res.get(("stk", "stoker"))
        for fmt in a.formats.split(","):
            s, d = res[(fmt, "stoker")], res.get((fmt, "dali"), [])
            sw, dw = med(s, "wall_s", suffix), med(d, "wall_s", suffix)
            sc, dc = med(s, "cpu_s", suffix), med(d, "cpu_s", suffix)
            kw, kc = ((med(stk, "wall_s", suffix), med(stk, "cpu_s", suffix)) if stk
                      else (float("nan"),) * 2)
            print("%-11s %13.1f %13.1f %15.1f %15.1f %9.2fx %9.2fx %9.2fx %9.2fx" % (
                fmt, sw, dw, sc, dc, sw / dw, sc / dc, sw / kw, sc / kc))


if __name__ == "__main__":
    main()
