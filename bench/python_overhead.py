#!/usr/bin/python3
"""What the Python module costs on top of the C loader, in one run.

Runs the CIFAR training pipeline

    pad 4 | random_crop 32 | flip 0.5 | normalize cifar10 | to f32 chw

(2 threads, batch 256) over the same CIFAR-10 binary files twice per round:

  CLI:    build/stoker bench cifar10:DIR --pipeline SPEC --threads 2 --batch 256
          --epochs N --json                    (its samples_per_s)
  Python: stoker.Loader(cifar10:DIR, pipeline=SPEC, num_threads=2, batch_size=256,
          output="torch"), iterated N epochs touching nothing

and prints images/s of each and the ratio Python / CLI (goal: >= 0.95).
Both time the same span: from opening the dataset to the last batch. The
Python side runs in a fresh child interpreter (torch imported before the
clock starts). Rounds alternate CLI and Python so drift on a shared machine
hits both; the medians are compared.

    /usr/bin/python3 bench/python_overhead.py [--data DIR] [--epochs N] [--rounds R]
        [--build build] [--output torch|numpy|dlpack]

Without --data, /tmp/stoker-bench-cifar is used (made by
bench/cifar_vs_torch.py's make_synthetic if missing).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = "pad 4 | random_crop 32 | flip 0.5 | normalize cifar10 | to f32 chw"


def child(args):
    sys.path.insert(0, os.path.join(args.build, "python"))
    if args.output == "torch":
        import torch  # noqa: F401  (import cost outside the clock)
    import stoker
    t0 = time.perf_counter()
    c0 = time.process_time()
    loader = stoker.Loader("cifar10:" + args.data, pipeline=SPEC, num_threads=args.threads,
                           batch_size=args.batch, shuffle=True, seed=0, output=args.output)
    samples = 0
    tc0 = time.thread_time()  # this (consumer) thread only
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:
            samples += len(labels)
    consumer_cpu = time.thread_time() - tc0
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    st = loader.stats()
    print(json.dumps({"samples": samples, "elapsed_s": elapsed, "cpu_s": cpu,
                      "consumer_cpu_s": consumer_cpu, "samples_per_s": samples / elapsed,
                      "stats": st}))


def children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_cli(args):
    c0 = children_cpu()
    p = subprocess.run([os.path.join(args.build, "stoker"), "bench", "cifar10:" + args.data,
                        "--pipeline", SPEC, "--threads", str(args.threads), "--batch",
                        str(args.batch), "--epochs", str(args.epochs), "--seed", "0", "--json"],
                       capture_output=True, text=True, check=True)
    r = json.loads(p.stdout)
    r["cpu_s"] = children_cpu() - c0  # the whole process, start-up included
    return r


def run_python(args):
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "--data", args.data,
                        "--build", args.build, "--threads", str(args.threads), "--batch",
                        str(args.batch), "--epochs", str(args.epochs), "--output", args.output],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("python child failed:\n" + p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/stoker-bench-cifar")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--output", default="torch", choices=("torch", "numpy", "dlpack"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    if args.child:
        return child(args)
    if not os.path.exists(os.path.join(args.data, "data_batch_5.bin")):
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        from cifar_vs_torch import make_synthetic
        print("writing synthetic CIFAR-10 files to %s" % args.data)
        make_synthetic(args.data)

    print("pipeline: %s\nthreads %d, batch %d, %d epochs of 50,000 per run, %d rounds, "
          "output=%s" % (SPEC, args.threads, args.batch, args.epochs, args.rounds, args.output))
    cli, py, cli_cpu, py_cpu, ratios, cons = [], [], [], [], [], []
    run_cli(args)  # warm the page cache
    for r in range(args.rounds):
        c = run_cli(args)
        p = run_python(args)
        cli.append(c["samples_per_s"])
        py.append(p["samples_per_s"])
        ratios.append(py[-1] / cli[-1])
        cli_cpu.append(c["cpu_s"] / c["samples"] * 1e6)
        py_cpu.append(p["cpu_s"] / p["samples"] * 1e6)
        cons.append(p["consumer_cpu_s"] / p["stats"]["batches"] * 1e6)
        print("round %d: CLI %10.0f images/s   Python %10.0f images/s   ratio %.3f   "
              "CPU us/image: CLI %.3f Python %.3f"
              % (r + 1, cli[-1], py[-1], ratios[-1], cli_cpu[-1], py_cpu[-1]))
    mc, mp = statistics.median(cli), statistics.median(py)
    print("median:  CLI %10.0f images/s   Python %10.0f images/s" % (mc, mp))
    print("best:    CLI %10.0f images/s   Python %10.0f images/s" % (max(cli), max(py)))
    print("ratio Python / CLI images/s: %.3f (medians), %.3f (median of rounds), %.3f (bests)"
          "  -- goal >= 0.95" % (mp / mc, statistics.median(ratios), max(py) / max(cli)))
    mcc, mpc = statistics.median(cli_cpu), statistics.median(py_cpu)
    print("CPU time per image (all threads; robust to other load on the machine): CLI %.3f us,"
          " Python %.3f us: CLI / Python = %.3f" % (mcc, mpc, mcc / mpc))
    mcons = statistics.median(cons)
    print("Python consumer thread: %.1f us of CPU per batch (median: the loop body and the "
          "wake-ups of its waits; a C consumer doing nothing spends ~12 us a batch on the "
          "wake-ups alone), against %.0f us of worker CPU per batch"
          % (mcons, mcc * args.batch))
    print("last Python run: consumer waited in next() %.3f s of %.3f s over %d batches"
          % (p["stats"]["consumer_wait_s"], p["elapsed_s"], p["stats"]["batches"]))


if __name__ == "__main__":
    main()
