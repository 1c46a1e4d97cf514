"""`stoker doctor` in three constructed cases (issue 13): decode-bound
(3000x2000 JPEGs through a cheap pipeline), consumer-bound (a 5 s training
step per batch), storage-bound (every pread of the dataset's files sleeps
40 ms, through the LD_PRELOAD shim tests/slowio_preload.c built as
build/libstk_slowio.so). Plus its usage errors and the text report.

No assertion here depends on how fast the machine runs (the machines are
shared and noisy; issue 26). Each is one of:
  - computed, not measured: the consumer's rate is batch / step; a shim that
    sleeps 40 ms in every pread bounds the storage terms from above (a sleep
    is a lower bound on a read's wait, whatever the load);
  - the report's own consistency: the verdict, each prediction's bottleneck,
    the threads advice and every gain are recomputed here from the report's
    terms by the model of docs/doctor.md, so they hold whatever was
    measured, yet fail when the tool's logic is wrong;
  - CPU time (CLOCK_THREAD_CPUTIME_ID), which waiting for a core does not
    inflate, compared only where the margin is one of orders of magnitude;
  - "the shim is the cause": the read's wall time with the shim (>= 40 ms
    by construction) against without it, at a factor of 10.
A verdict that comes from wall-clock rates (decode vs storage) is checked
for consistency with the rates, not asserted outright."""
import io
import json
import os
import re
import subprocess

import pytest
from PIL import Image

from conftest import BUILD, STOKER, need_photos, run_stoker

CHEAP = "resize 256 | center_crop 224 | to u8 hwc"
SMALL = "resize 32,32 | to f32 chw"


def jpeg_bytes(w, h, seed=0):
    import numpy as np
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    px = np.stack([x * 255 // w, y * 255 // h, (x ^ y) & 255], axis=-1).astype(np.int32)
    px = np.clip(px + rng.integers(0, 32, px.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(px).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def folder(root, classes, per_class, w, h):
    data = jpeg_bytes(w, h)
    for c in range(classes):
        d = root / ("c%d" % c)
        d.mkdir(parents=True)
        for i in range(per_class):
            (d / ("%03d.jpg" % i)).write_bytes(data)
    return str(root)


def doctor(*args, env=None):
    p = subprocess.run([STOKER, "doctor", *map(str, args), "--json"], capture_output=True,
                       text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def kinds(r):
    return [x["kind"] for x in r["recommendations"]]


def check(r, cores):
    assert [p["cores"] for p in r["predictions"]] == list(range(1, cores + 1))
    rates = [p["images_per_s"] for p in r["predictions"]]
    assert rates == sorted(rates) and rates[0] > 0
    threads = [x for x in r["recommendations"] if x["kind"] == "threads"]
    if threads:  # now: one thread per core; the table's rates have the threads they list
        assert r["images_per_s"] < rates[-1]
        assert threads[0]["images_per_s"] == pytest.approx(rates[-1], rel=1e-3)
    else:
        assert r["images_per_s"] == rates[-1]
    gains = [x["gain"] for x in r["recommendations"]]
    assert gains == sorted(gains, reverse=True) and all(g >= 1.05 for g in gains)
    # Every gain is relative to the rate the report calls "now" (issue 26: a
    # "+33% 1222/s" advice when 1222/s was given as the current rate).
    for x in r["recommendations"]:
        assert x["images_per_s"] / r["images_per_s"] == pytest.approx(x["gain"], rel=1e-4), x
    assert r["bottleneck"] + "-bound" in r["summary"]
    # The verdicts follow from the report's own terms (whatever they are):
    assert r["bottleneck"] in verdicts(r, cores), r
    for p in r["predictions"]:
        assert p["bottleneck"] in verdicts(r, p["cores"]), (p, r)
    advise = threads_advised(r, cores)
    if advise is not None:
        assert ("threads" in kinds(r)) == advise, r


# The report's numbers are printed with 6 significant digits: two terms
# closer than this are a tie, and either answer is accepted.
TIE = 1e-3


def near(a, b):
    return abs(a - b) <= TIE * max(abs(a), abs(b))


def terms(r, cores):
    """The model's terms at `cores` (docs/doctor.md): images/s of the CPU
    (cores x per core), of storage and of the consumer (inf when none)."""
    inf = float("inf")
    st = r["stages"]
    storage = st["storage"]["ceiling_per_s"]
    consumer = st["consumer"]["images_per_s"]
    return {"cpu": cores * r["per_core_per_s"],
            "storage": storage if storage else inf,
            "consumer": consumer if consumer else inf}


def verdicts(r, cores):
    """The bottleneck names the model allows at `cores`: the smallest term
    (the consumer first, then storage, on a tie), a CPU term named by its
    largest part (decode, augment, read). A set, for ties."""
    t = terms(r, cores)
    low = min(t.values())
    out = {k for k, v in t.items() if v == low or near(v, low)}
    if "cpu" in out:
        st = r["stages"]
        parts = {"decode": st["decode"]["cpu_ms"], "augment": st["augment"]["cpu_ms"],
                 "read": st["storage"]["read_cpu_ms"]}
        top = max(parts.values())
        out.discard("cpu")
        out |= {k for k, v in parts.items() if v == top or near(v, top)}
    return out


def threads_advised(r, cores):
    """Whether the model advises more threads than cores (docs/doctor.md):
    the loader needs more threads than cores (the table's row for `cores`)
    and one thread per core, each busy (read wall + decode + augment) ms a
    sample, gives at least 5% less than the table's rate. None on a tie."""
    st = r["stages"]
    wait_ms = (max(st["storage"]["read_wall_ms"], st["storage"]["read_cpu_ms"]) +
               st["decode"]["cpu_ms"] + st["augment"]["cpu_ms"])
    row = r["predictions"][-1]
    with_n = cores * 1e3 / wait_ms
    if near(with_n * 1.05, row["images_per_s"]):
        return None
    return row["threads"] > cores and with_n * 1.05 <= row["images_per_s"]


def test_decode_bound_large_photos(tmp_path):
    d = folder(tmp_path / "large", 2, 3, 3000, 2000)
    r = doctor(d, "--pipeline", CHEAP, "--samples", 6, "--cores", 2, "--time", 2)
    check(r, 2)
    assert r["median_size"] == [3000, 2000]
    st = r["stages"]
    # CPU time of decoding 6 megapixels against resizing a 1/8-scale decode
    # (12 ms against 0.2 ms here) and against copying the 1.7 MB file in
    # (1.8 ms): margins of 60x and 7x that load does not move, as a
    # thread's CPU time does not count its waits for a core. With check()'s
    # verdicts(), a CPU-bound verdict is therefore "decode"; it is
    # "storage" only if the concurrent reads (wall clock) came out slower
    # than the decodes, which the report's numbers then show.
    assert st["decode"]["cpu_ms"] > st["augment"]["cpu_ms"]
    assert st["decode"]["cpu_ms"] > st["storage"]["read_cpu_ms"]
    assert r["bottleneck"] in ("decode", "storage"), r
    rec = [x for x in r["recommendations"] if x["kind"] == "reencode"]
    # Re-encoding at 448 cuts the timed decode+augment CPU (a CPU-time
    # ratio, ~0.04 here; 0.5 would do), so whenever the verdict is decode,
    # one thread per core suffices and storage leaves 10% of room above
    # "now", the recommendation must be there with a gain of at least 1.05;
    # otherwise the model may leave it out (the gain is capped by storage).
    ceiling = terms(r, 2)["storage"]
    if (r["bottleneck"] == "decode" and "threads" not in kinds(r) and
            ceiling >= 1.1 * r["images_per_s"]):
        assert rec, r
    if rec:
        assert rec[0]["measured"] and rec[0]["param"] == 448, rec
        # a rate the model predicted: never above the storage ceiling
        assert rec[0]["images_per_s"] <= ceiling * (1 + TIE), (rec, r)


def test_consumer_bound_long_step(tmp_path):
    d = folder(tmp_path / "small", 2, 10, 64, 48)
    r = doctor(d, "--pipeline", SMALL, "--step-ms", 5000, "--batch", 256, "--cores", 2, "--time", 1)
    check(r, 2)
    # computed: batch / step
    assert r["stages"]["consumer"]["images_per_s"] == pytest.approx(256 / 5.0)
    # 51.2 images/s is far below what a core decodes of 64x48 JPEGs, but the
    # storage term is a wall-clock rate, so the verdict is checked against
    # the terms (check()) rather than asserted; when it is the consumer,
    # every row is the consumer's rate, and (one thread per core being
    # enough) no change to the loader can beat the step: every other
    # recommendation's rate is capped by it, a gain of 1.
    if r["bottleneck"] == "consumer":
        for p in r["predictions"]:
            if p["bottleneck"] == "consumer":
                assert p["images_per_s"] == pytest.approx(256 / 5.0, rel=TIE)
        if "threads" not in kinds(r):
            assert r["recommendations"] == [], r


def test_storage_bound_throttled_reads(tmp_path):
    shim = os.path.join(BUILD, "libstk_slowio.so")
    if not os.path.exists(shim):
        pytest.skip("no %s (built with the tests)" % shim)
    # 80 files: the one-reader pass reads a quarter of them, so the read
    # time without the shim below is a mean over 20 reads.
    d = folder(tmp_path / "slow", 2, 40, 64, 48)
    env = dict(os.environ, LD_PRELOAD=shim, STK_SLOWIO_DIR=os.path.realpath(d) + "/",
               STK_SLOWIO_MS="40")
    r = doctor(d, "--pipeline", SMALL, "--readers", 4, "--cores", 2, "--time", 2, env=env)
    check(r, 2)
    s = r["stages"]["storage"]
    # Each read sleeps 40 ms without CPU: its wall minus CPU is >= 40 ms
    # whatever the load (a sleep only ever lasts longer), so the one
    # reader's mean wall is >= 40 ms, and 4 readers give at most
    # 4 / 40 ms = 100 records/s, ceiling and measured rate alike: computed,
    # not raced.
    assert s["read_wall_ms"] >= 40, s
    assert s["ceiling_per_s"] <= 100 * (1 + TIE), s
    # The read's CPU (an open, a 2 KB pread, a close, the shim's readlink)
    # is tens of microseconds of thread CPU time, which a wait for a core
    # does not add to: 10 ms (a quarter of the sleep) is a 100x margin.
    assert s["read_cpu_ms"] < s["read_wall_ms"] / 4, s
    # So storage is the verdict: the CPU's term, 2 cores / per-sample CPU
    # time of a 64x48 JPEG (~0.1 ms), is ~100x the computed bound of 100/s.
    assert r["bottleneck"] == "storage", r
    # The same folder without the shim: the shim is the cause of the wait.
    # Compare the reads themselves, not a verdict from rates: a page-cached
    # 2 KB read takes microseconds, and a mean over 20 reads of 4 ms (a
    # tenth of the sleep) would need ~80 ms of preemption among them.
    r2 = doctor(d, "--pipeline", SMALL, "--readers", 4, "--cores", 2, "--time", 1)
    check(r2, 2)
    s2 = r2["stages"]["storage"]
    assert s2["read_wall_ms"] * 10 < s["read_wall_ms"], (s2, s)


def test_text_report(tmp_path):
    d = folder(tmp_path / "small", 2, 5, 64, 48)
    p = run_stoker("doctor", d, "--pipeline", SMALL, "--step-ms", 5000, "--time", 1, "--cores", 2)
    out = p.stdout
    for text in ("stage", "storage, 1 reader", "decode", "augment", "consumer, batch 256",
                 "cores  threads   images/s  limited by"):
        assert text in out, out
    # the one-line verdict (which one comes from measured rates: see
    # test_consumer_bound_long_step)
    assert re.search(r"\n(storage|read|decode|augment|consumer)-bound: ", out), out
    assert "\n    1 " in out and "\n    2 " in out


def test_photos(tmp_path):
    photos = need_photos("train")
    r = doctor(os.path.join(photos, "train"), "--pipeline", "imagenet-train-few", "--time", 2,
               "--samples", 32)
    check(r, len(r["predictions"]))
    assert r["format"] == "imagefolder" and r["output_size"] == [224, 224]
    assert r["bottleneck"] in ("storage", "read", "decode", "augment")


@pytest.mark.parametrize("args, message", [
    (["--pipeline", "resize 32,32 | frobnicate"], "frobnicate"),
    (["--pipeline", SMALL, "--step-ms", "0"], "--step-ms: expected a positive number"),
    (["--pipeline", SMALL, "--step-ms", "-5"], "--step-ms"),
    (["--pipeline", SMALL, "--step-ms", "abc"], "--step-ms"),
    (["--pipeline", SMALL, "--samples", "0"], "--samples must be at least 1"),
    (["--pipeline", SMALL, "--samples", "5000"], "more than 4096"),
    (["--pipline", SMALL], "did you mean '--pipeline'?"),
    ([], "--pipeline is required"),
])
def test_usage_errors(tmp_path, args, message):
    d = folder(tmp_path / "small", 1, 2, 16, 16)
    p = run_stoker("doctor", d, *args, check=False)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert message in p.stderr, p.stderr


def test_runtime_errors(tmp_path):
    p = run_stoker("doctor", tmp_path / "missing", "--pipeline", SMALL, check=False)
    assert p.returncode == 1
    assert "no such file or directory" in p.stderr
    p = run_stoker("doctor", check=False)
    assert p.returncode == 2 and "doctor: missing DATASET" in p.stderr
    p = run_stoker("help", "doctor")
    assert p.returncode == 0 and "--step-ms" in p.stdout
    p = run_stoker("doctr", check=False)
    assert p.returncode == 2 and "did you mean 'doctor'?" in p.stderr


def test_python_doctor_matches_cli_shape(tmp_path):
    import stoker
    d = folder(tmp_path / "small", 2, 10, 64, 48)
    r = stoker.doctor(d, SMALL, step_ms=5000, time_budget=1, cores=2)
    check(r, 2)
    assert r["stages"]["consumer"]["images_per_s"] == pytest.approx(256 / 5.0)
    assert r["pipeline"] == SMALL and r["format"] == "imagefolder"
    with pytest.raises(stoker.SpecError):
        stoker.doctor(d, "resize 32,32 | frobnicate")
    with pytest.raises(stoker.NotFound):
        stoker.doctor(tmp_path / "missing", SMALL)
    with pytest.raises(ValueError):
        stoker.doctor(d, SMALL, step_ms=0)
