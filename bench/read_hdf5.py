#!/usr/bin/python3
"""HDF5 side of bench/read_formats.py: the same JPEG bytes read from h5py.

The layout the published loader comparisons used: one HDF5 dataset of
variable-length bytes, h5py.vlen_dtype(np.uint8), one element per image.
The file (WORK/photos.h5) is written once from WORK/files.txt (the record
order of bench/read_formats.c) and reused while its length matches.

Reads follow WORK/perm.u32, the random order read_formats.c used; with T
threads, thread t takes positions t, t+T, t+2T... (as the C benchmark
does). Each record is read with `dset[i]` and consumed like the C side:
every 64th byte summed (numpy slicing), so the touch sums must match.

Every figure is the median of --reps runs (default 3), taken in rounds like
the C side. Warm: after one untimed run. Cold: os.sync(), then
posix_fadvise(POSIX_FADV_DONTNEED) on the file (best effort on a VM), and a
run with the file reopened. CPU time (time.process_time) is reported too. With 1 and 2 threads (h5py serialises calls
on a global lock, so 2 threads mostly add contention). Prints JSON.

    /usr/bin/python3 bench/read_hdf5.py --work DIR [--threads 1,2] [--reps 3] [--no-cold]
"""
import argparse
import json
import os
import sys
import threading
import time

import h5py
import numpy as np


def write_h5(path, files):
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        d = f.create_dataset("images", (len(files),), dtype=h5py.vlen_dtype(np.uint8))
        for i, p in enumerate(files):
            with open(p, "rb") as fh:
                d[i] = np.frombuffer(fh.read(), dtype=np.uint8)
    os.replace(tmp, path)


def one_run(path, perm, nthreads):
    t0, c0 = time.perf_counter(), time.process_time()
    f = h5py.File(path, "r")
    d = f["images"]
    sums = [0] * nthreads
    nbytes = [0] * nthreads

    def work(t):
        s = b = 0
        for i in perm[t::nthreads]:
            a = d[int(i)]
            s += int(a[::64].sum())
            b += a.size
        sums[t], nbytes[t] = s, b

    threads = [threading.Thread(target=work, args=(t,)) for t in range(nthreads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    f.close()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    return dt, cpu, sum(sums), sum(nbytes)


def drop(path):
    os.sync()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def median_run(runs, n):
    """The median run by wall time; CPU time is the median on its own."""
    runs = sorted(runs)
    dt, _, s, b = runs[len(runs) // 2]
    cpu = sorted(r[1] for r in runs)[len(runs) // 2]
    return {"seconds": dt, "records_per_s": n / dt, "mb_per_s": b / dt / 1e6,
            "cpu_s": cpu, "records_per_cpu_s": n / cpu, "touch_sum": s, "errors": 0,
            "runs_s": [r[0] for r in runs]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--no-cold", action="store_true")
    ap.add_argument("--reps", type=int, default=3, help="runs per figure (median)")
    a = ap.parse_args()
    with open(os.path.join(a.work, "files.txt")) as fh:
        files = fh.read().splitlines()
    perm = np.fromfile(os.path.join(a.work, "perm.u32"), dtype=np.uint32)
    assert len(perm) == len(files)
    path = os.path.join(a.work, "photos.h5")
    ok = False
    if os.path.exists(path):
        with h5py.File(path, "r") as f:
            ok = "images" in f and f["images"].shape == (len(files),)
    if not ok:
        print("writing %s (%d records)" % (path, len(files)), file=sys.stderr)
        write_h5(path, files)
    n = len(files)
    out = {"records": n, "h5py": h5py.version.version, "hdf5": h5py.version.hdf5_version,
           "methods": {}}
    counts = [int(x) for x in a.threads.split(",")]
    names = {t: "hdf5_%dthread%s" % (t, "s" if t > 1 else "") for t in counts}
    warm = {t: [] for t in counts}
    cold = {t: [] for t in counts}
    one_run(path, perm, 1)  # brings the file in
    for r in range(a.reps):  # rounds, as the C side does
        print("hdf5 warm, round %d/%d..." % (r + 1, a.reps), file=sys.stderr)
        for t in counts:
            warm[t].append(one_run(path, perm, t))
    for r in range(0 if a.no_cold else a.reps):
        print("hdf5 cold, round %d/%d..." % (r + 1, a.reps), file=sys.stderr)
        for t in counts:
            drop(path)
            cold[t].append(one_run(path, perm, t))
    for t in counts:
        m = {"warm": median_run(warm[t], n)}
        if cold[t]:
            m["cold"] = median_run(cold[t], n)
        out["methods"][names[t]] = m
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
