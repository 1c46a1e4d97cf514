#!/usr/bin/env python3
"""bench/remote.py — a .stk dataset read over HTTP on a shaped link vs the same shards on
local disk, in one run (issue 14; docs/benchmarks.md, "Remote datasets").

    /usr/bin/python3 bench/remote.py --stk DIR [--pipeline imagenet-train-few]
        [--rate 1gbit] [--rtt-ms 20] [--rounds 2] [--threads 2] [--batch 64]

DIR holds shard-NNNNN.stk files (e.g. `stoker pack PHOTOS/train DIR --restart 4
--shard-size 64M`). Each round runs, with `build/stoker bench --json --digest`:

  local   the shards on this machine's disk (read once before the first round, so
          the page cache is warm for every local run)
  cold    stk:http://.../shard-{00000..N}.stk with an empty cache directory
  warm    the same URL again, the cache now full

The HTTP runs happen inside a network namespace (tests/net/servers.py, shaped_netns)
whose loopback is shaped to --rate with tbf; nginx serves DIR there. The round-trip time
comes from netem where the kernel has it, else from nginx itself (servers.nginx(delay_ms=):
the echo module's echo_sleep holds every request --rtt-ms on nginx's timer before the
static file handler answers it: one RTT per request, as a real link adds; connection set-up
is not delayed), so the emulation costs the 2-core machine no CPU. (An earlier Python
shim in front of nginx cost a third of a core at 900 requests/s, which the cold run paid.) Reported per run: images/s (wall), images
per CPU-second of the stoker process tree (getrusage of the children), bytes fetched per
epoch over the dataset's size, and the ratios to the local run of the same round. The
link's ceiling (rate / bytes per image) is printed beside them: a cold epoch cannot beat
it, whatever the local throughput.
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "net"))
import servers  # noqa: E402


def rate_bits(text):
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    for u, m in units.items():
        if text.endswith(u):
            return float(text[: -len(u)]) * m
    return float(text)


def machine_busy_s():
    """Busy CPU-seconds of the whole machine so far (every process and the kernel's
    softirq work: the server, the TCP stack and the shaper as well as stoker)."""
    with open("/proc/stat") as f:
        cols = [int(x) for x in f.readline().split()[1:]]
    idle = cols[3] + (cols[4] if len(cols) > 4 else 0)  # idle + iowait
    return (sum(cols[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def run_bench(argv, env, ns=None):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    m0 = machine_busy_s()
    cmd = ns.wrap(argv) if ns else argv
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    m1 = machine_busy_s()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit("bench failed (%d): %s\n%s" % (p.returncode, " ".join(argv), p.stderr[-2000:]))
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["cpu_s"] = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    out["machine_cpu_s"] = m1 - m0
    out["retry_lines"] = p.stderr.count("stoker: retrying")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stk", required=True, help="directory of shard-NNNNN.stk files")
    ap.add_argument("--stoker", default=os.path.join(HERE, "..", "build", "stoker"))
    ap.add_argument("--pipeline", default="imagenet-train-few")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--rtt-ms", type=float, default=20.0)
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--faults", action="store_true",
                    help="also one cold run through the fault proxy: 5%% of requests reset, 5%% "
                         "answered 503/500/429, 1%% truncated (digest must equal the clean run's)")
    a = ap.parse_args()

    shards = sorted(f for f in os.listdir(a.stk) if f.startswith("shard-") and f.endswith(".stk"))
    if not shards:
        sys.exit("%s: no shard-NNNNN.stk files" % a.stk)
    nums = [f[len("shard-"):-len(".stk")] for f in shards]
    if nums != ["%05d" % i for i in range(len(shards))]:
        sys.exit("%s: shards must be shard-00000.stk .. without gaps" % a.stk)
    dataset_bytes = sum(os.path.getsize(os.path.join(a.stk, f)) for f in shards)
    stoker = os.path.abspath(a.stoker)
    common = ["--pipeline", a.pipeline, "--threads", str(a.threads), "--batch",
              str(a.batch), "--epochs", "1", "--json", "--digest"]
    env = dict(os.environ, STOKER_HTTP_QUIET="0")

    # Every local run reads a warm page cache, as every warm HTTP run reads a warm
    # cache: the shards are read once first (else round 0's local run may read the
    # disk, after other work pushed the shards out of memory).
    for f in shards:
        with open(os.path.join(a.stk, f), "rb") as fh:
            while fh.read(16 << 20):
                pass
    refused = servers.netns_missing()
    if refused:
        sys.exit("bench/remote.py needs network namespaces: %s" % refused)
    results = []
    with servers.shaped_netns(rate=a.rate, delay_ms=a.rtt_ms / 2) as ns:
        print("link: %s" % ns.applied)
        latency = ns.fallback_latency_ms if ns.delay_ms is None else 0
        with servers.nginx(a.stk, netns=ns, delay_ms=latency) as ng:
            if True:
                if latency:
                    print("rtt: %.0f ms per request, held by nginx (echo_sleep; netem "
                          "refused: %s)" % (latency, ns.netem_refused))
                url = "stk:%s/shard-{%s..%s}.stk" % (ng.url, nums[0], nums[-1])
                for rnd in range(a.rounds):
                    cache = tempfile.mkdtemp(prefix="stoker-remote-bench-")
                    try:
                        renv = dict(env, STOKER_CACHE_DIR=cache)
                        row = {"round": rnd}
                        row["local"] = run_bench([stoker, "bench", a.stk] + common, env)
                        row["cold"] = run_bench([stoker, "bench", url] + common, renv, ns)
                        row["warm"] = run_bench([stoker, "bench", url] + common, renv, ns)
                    finally:
                        shutil.rmtree(cache, ignore_errors=True)
                    results.append(row)
                    report(row, dataset_bytes, rate_bits(a.rate))
                if a.faults:
                    faults(a, ng, ns, nums, stoker, common, env, results[-1]["local"],
                           dataset_bytes)
    summary(results, dataset_bytes, rate_bits(a.rate))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"dataset_bytes": dataset_bytes, "rounds": results}, f, indent=1)


def faults(a, ng, ns, nums, stoker, common, env, local, dataset_bytes):
    rates = {"reset": 0.05, "status": 0.05, "truncate": 0.01}
    with servers.fault_proxy(ng.url, rates=rates, seed=14, process=True, netns=ns) as px:
        url = "stk:%s/shard-{%s..%s}.stk" % (px.url, nums[0], nums[-1])
        cache = tempfile.mkdtemp(prefix="stoker-remote-bench-")
        try:
            r = run_bench([stoker, "bench", url] + common, dict(env, STOKER_CACHE_DIR=cache), ns)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        counts = px.counts()
        print("proxy counts: %s" % json.dumps(counts))
    rem = r["remote"]
    print("faults (%s): stoker: %d retries logged, %d "
          "retries counted, %d failed requests, fetched %.3fx dataset, %.0f img/s; digest %s the "
          "clean run's" % (
              ", ".join("%s %.0f%%" % (k, 100 * v) for k, v in rates.items()),
              r["retry_lines"], rem["retries"], rem["failures"],
              rem["bytes_fetched"] / dataset_bytes, r["samples_per_s"],
              "equals" if r["digest"] == local["digest"] else "DIFFERS FROM"))
    if r["digest"] != local["digest"]:
        sys.exit("digest mismatch under faults")


def report(row, dataset_bytes, rate):
    local = row["local"]
    print("round %d" % row["round"])
    for kind in ("local", "cold", "warm"):
        r = row[kind]
        rem = r.get("remote", {})
        per_cpu = r["samples"] / r["cpu_s"] if r["cpu_s"] else 0
        line = ("  %-5s %7.0f img/s  %7.0f img/CPU-s  %.3fx wall  %.3fx CPU  "
                "(CPU ms/img: stoker %.2f, whole machine %.2f)" % (
                    kind, r["samples_per_s"], per_cpu, r["samples_per_s"] / local["samples_per_s"],
                    per_cpu / (local["samples"] / local["cpu_s"]),
                    1e3 * r["cpu_s"] / r["samples"], 1e3 * r["machine_cpu_s"] / r["samples"]))
        if rem:
            line += "  fetched %.3fx dataset, %d requests, %d retries, wait %.2f s" % (
                rem["bytes_fetched"] / dataset_bytes, rem["requests"], rem["retries"],
                rem["network_wait_s"])
        print(line)
        if r["digest"] != local["digest"]:
            sys.exit("digest mismatch: %s %s vs local %s" % (kind, r["digest"], local["digest"]))
    ceiling = rate / 8 / (dataset_bytes / local["samples"])
    print("  link ceiling %.0f img/s; cold at %.1f%% of min(local, ceiling)" % (
        ceiling, 100 * row["cold"]["samples_per_s"] / min(ceiling, local["samples_per_s"])))


def summary(results, dataset_bytes, rate):
    if not results:
        return
    import statistics
    med = lambda xs: statistics.median(xs)  # noqa: E731
    print("median over %d rounds (digests equal in every run):" % len(results))
    for kind in ("cold", "warm"):
        wall = med([r[kind]["samples_per_s"] / r["local"]["samples_per_s"] for r in results])
        cpu = med([(r[kind]["samples"] / r[kind]["cpu_s"]) / (r["local"]["samples"] / r["local"]["cpu_s"])
                   for r in results])
        fetched = med([r[kind]["remote"]["bytes_fetched"] / dataset_bytes for r in results])
        print("  %-5s %.3fx local wall, %.3fx local per CPU-s, %.3fx dataset fetched" % (
            kind, wall, cpu, fetched))


if __name__ == "__main__":
    main()
