#!/usr/bin/python3
"""Read throughput of the same JPEG bytes from .stk, files, TFRecord and HDF5.

Runs, in one go on one machine:

  1. `stoker pack IMAGES STK` if STK does not exist yet (with --no-validate
     if validation fails because no decoder is available);
  2. build/read_formats (bench/read_formats.c): .stk through the library
     (mmap, zero copy; verify=first, verify=always, io=pread), individual
     files, a TFRecord-style file (CRC32C checked in software, with the
     SSE4.2 instruction, and not at all) — 2 threads, random order;
  3. bench/read_hdf5.py: one h5py dataset of variable-length uint8, the same
     order, 1 and 2 Python threads (the file is the one read_formats wrote
     and read through stoker's hdf5: reader as `stoker_hdf5`);

then prints records/s and MB/s, warm and cold, and the ratios. Every method
reads every byte of every record (the consumer sums every 64th byte) and
the sums are compared, so they provably read the same bytes.

    /usr/bin/python3 bench/read_formats.py [--images /work/data/photos/train]
        [--stk /tmp/bench-stk] [--work /tmp/stoker-bench-formats]
        [--build build] [--no-cold] [--json FILE]

Warm = the second of two runs, each opening afresh (stk: a new mapping,
verify=first hashes every record, as in a new process's first epoch; the
stk rows "2nd epoch" read again through the same handle); cold = after `sync` and
posix_fadvise(POSIX_FADV_DONTNEED) on every file involved, which is best
effort on a VM (a host cache below it is not dropped): the C side reports
what mincore still saw resident right after the drop.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_json(cmd):
    print("+ " + " ".join(cmd), file=sys.stderr)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit("command failed (%d): %s" % (p.returncode, " ".join(cmd)))
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", default="/work/data/photos/train")
    ap.add_argument("--stk", default="/tmp/bench-stk")
    ap.add_argument("--work", default="/tmp/stoker-bench-formats")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--no-cold", action="store_true")
    ap.add_argument("--reps", type=int, default=3, help="runs per figure (median)")
    ap.add_argument("--json", help="also write all results to this file")
    a = ap.parse_args()

    stoker = os.path.join(a.build, "stoker")
    if not os.path.exists(a.stk):
        cmd = [stoker, "pack", "-q", a.images, a.stk]
        print("+ " + " ".join(cmd), file=sys.stderr)
        if subprocess.run(cmd).returncode != 0:
            print("pack with validation failed; packing with --no-validate", file=sys.stderr)
            subprocess.run(["rm", "-rf", a.stk])
            subprocess.run(cmd[:2] + ["--no-validate"] + cmd[2:], check=True)

    cold = (["--no-cold"] if a.no_cold else []) + ["--reps", str(a.reps)]
    c = run_json([os.path.join(a.build, "read_formats"), "--images", a.images, "--stk", a.stk,
                  "--work", a.work, "--threads", "2"] + cold)
    h = run_json(["/usr/bin/python3", os.path.join(ROOT, "bench", "read_hdf5.py"),
                  "--work", a.work, "--threads", "1,2"] + cold)
    methods = dict(c["methods"])
    methods.update(h["methods"])

    sums = {m: r["warm"]["touch_sum"] for m, r in methods.items()}
    if len(set(sums.values())) != 1:
        sys.exit("the methods did not read the same bytes: %s" % sums)

    n, mb = c["records"], c["bytes"] / 1e6
    print("\n%d JPEG records, %.1f MB (%.1f KB mean), random order; C methods 2 threads"
          % (n, mb, c["bytes"] / n / 1e3))
    print("h5py %s / HDF5 %s" % (h["h5py"], h["hdf5"]))
    print("\nMedians of %d runs, taken in rounds. CPU = the process's user + sys time: on a busy"
          " machine\nrecords per CPU-second compares the methods' cost better than wall time." % c["reps"])
    print("\n| method | warm records/s | warm MB/s | warm records/CPU-s | cold records/s | cold MB/s "
          "| resident after drop |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    rows_ = []
    for m, r in methods.items():
        rows_.append((m, r))
        if "warm_epoch2" in r:
            rows_.append((m + " (2nd epoch, same handle)", {"warm": r["warm_epoch2"]}))
    for m, r in rows_:
        w, cd = r["warm"], r.get("cold")
        res = cd.get("resident_after_drop") if cd else None
        print("| %s | %.0f | %.0f | %.0f | %s | %s | %s |" % (
            m, w["records_per_s"], w["mb_per_s"], w["records_per_cpu_s"],
            "%.0f" % cd["records_per_s"] if cd else "-",
            "%.0f" % cd["mb_per_s"] if cd else "-",
            "%.1f%%" % (100 * res) if res is not None else "-"))

    def ratio(a_, b_, kind, key="records_per_s"):
        if a_ in methods and b_ in methods and kind in methods[a_] and kind in methods[b_]:
            return methods[a_][kind][key] / methods[b_][kind][key]
        return None

    print("\nratios (records/s; the same bytes, so MB/s ratios are equal; [per CPU-second]):")
    for m in [k for k in methods if k.startswith(("stk", "stoker_"))]:
        if "warm_epoch2" in methods[m]:
            methods[m + "@epoch2"] = {"warm": methods[m]["warm_epoch2"]}
    # The 3x goal is read as sustained throughput: stk@epoch2 (every pass
    # after a process's first, through the same open dataset) carries the
    # verdict. A fresh open's first pass also pays one-time costs — mapping
    # set-up and, with the default verify=first, an XXH3 pass over every
    # record — so stk and stk_verify_off (first pass, no checksums, as files
    # have none) are reported beside it (docs/benchmarks.md).
    rows = [("stk", "files", None), ("stk_verify_off", "files", None),
            ("stk@epoch2", "files", 3.0),
            ("stk", "hdf5_2threads", 2.0), ("stk@epoch2", "hdf5_2threads", 2.0),
            ("stk", "hdf5_1thread", None),
            ("stk", "tfrecord_crc", None), ("stk", "tfrecord_hwcrc", None),
            ("stk", "tfrecord", None), ("stk_always", "tfrecord_hwcrc", None),
            ("stk_pread", "files", None), ("stk_willneed", "files", None),
            # the tfrecord: reader against .stk (issue 10: raw reads >= 0.8x .stk)
            ("stoker_tfrecord", "stk", 0.8), ("stoker_tfrecord@epoch2", "stk@epoch2", 0.8),
            ("stoker_tfrecord_always", "stk_always", None),
            ("stoker_tfrecord", "tfrecord_hwcrc", None),
            # issue 10: the hdf5: reader (2 threads, no HDF5 lock on the hot
            # path) against h5py with 2 threads on the same file
            ("stoker_hdf5", "hdf5_2threads", 10.0), ("stoker_hdf5", "hdf5_1thread", None),
            ("stoker_hdf5", "stk", None)]
    for x, y, goal in rows:
        for kind in ("warm", "cold"):
            r = ratio(x, y, kind)
            if r is None:
                continue
            g = ""
            if goal and kind == "warm":
                g = "  (goal >= %.0fx: %s)" % (goal, "met" if r >= goal else "MISSED")
            rc = ratio(x, y, kind, "records_per_cpu_s")
            print("  %-14s / %-15s %s: %6.2fx [%5.2fx]%s" % (x, y, kind, r, rc, g))
    print("\n" + c["note"])
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"c": c, "hdf5": h}, fh, indent=2)


if __name__ == "__main__":
    main()
