"""The data-stall profile and the autotuner from Python (docs/engine.md,
"Profile" and "Autotune"): loader.profile()'s data share against a timer
around the training loop, the verdict in a data-bound and a step-bound
loop, the same batches whatever the knobs do, report_every, memory_limit
and the argument checks."""
import hashlib
import logging
import time

import numpy as np
import pytest

import stoker

HEAVY = ("resize 160 | color_jitter 0.4 0.4 0.4 0.1 | gaussian_blur 9 sigma=2 | "
         "normalize imagenet | to f32 chw")
LIGHT = "random_crop 48 | flip | to u8 hwc"


def images(n=400, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (n, 64, 64, 3), dtype=np.uint8),
            rng.integers(0, 10, n).astype(np.int64))


def burn(seconds):
    """The consumer's step: one core busy for `seconds` (a host thread
    spinning on the accelerator)."""
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        pass


def timed_loop(loader, step, limit=None):
    """Run an epoch as a training loop would, timing the data wait from the
    outside: the time from the end of one step to the start of the next
    (the first from before the loop), over the loop's whole time."""
    wait = 0.0
    t_start = time.perf_counter()
    t_end = None
    n = 0
    for batch in loader:
        t = time.perf_counter()
        wait += t - (t_end if t_end is not None else t_start)
        burn(step)
        t_end = time.perf_counter()
        n += 1
        if limit and n >= limit:
            break
    return n, wait / (t_end - t_start)


@pytest.mark.parametrize("step,threads,spec,bound", [
    (0.0, 1, HEAVY, "data"),     # data-bound: the loop waits most of the time
    (0.004, 1, HEAVY, "data"),   # partly data-bound
    (0.030, 2, LIGHT, "step"),   # step-bound: the loader is far ahead
])
def test_profile_data_share_matches_a_timer_around_the_loop(step, threads, spec, bound):
    x, y = images()
    ds = stoker.from_numpy(x, y)
    loader = stoker.Loader(ds, batch_size=16, shuffle=True, pipeline=spec,
                           num_threads=threads, prefetch=2, output="numpy")
    n, outside = timed_loop(loader, step, limit=25)
    p = loader.profile()
    assert p["batches"] == n
    assert abs(p["data_share"] - outside) < 0.02, (p["data_share"], outside)
    assert p["bound"] == bound
    assert p["verdict"].startswith(bound + "-bound")
    assert abs(p["wall_s"] - (p["wait_s"] + p["step_s"])) < 1e-9
    if step == 0:
        assert p["stage"] == "augment"  # in-memory pixels: no read or decode to speak of
        assert p["stages_s"]["augment"] > p["stages_s"]["read"]
    else:
        assert p["step_p50_s"] >= step
    events = loader.profile_events()
    assert len(events) == n
    assert all(e[4] == threads for e in events)
    assert "data share" in p["text"]
    loader.close()


def digest(loader, move=False):
    h = hashlib.sha256()
    for i, (im, lab) in enumerate(loader):
        h.update(np.ascontiguousarray(im).tobytes())
        h.update(np.asarray(lab).tobytes())
        del im, lab
        if move:
            loader.set_threads(1 + i * 7 % 3)
            loader.set_prefetch(1 + i * 5 % 3)
    return h.hexdigest()


def test_auto_and_moving_knobs_give_the_fixed_run_s_batches():
    x, y = images(300, seed=3)
    ds = stoker.from_numpy(x, y)
    kw = dict(batch_size=32, shuffle=True, seed=5, pipeline=LIGHT, output="numpy")
    fixed = digest(stoker.Loader(ds, num_threads=1, prefetch=1, **kw))
    auto = stoker.Loader(ds, **kw)
    assert auto.options["num_threads"] == "auto" and auto.options["prefetch"] == "auto"
    assert digest(auto) == fixed
    assert digest(stoker.Loader(ds, num_threads=3, prefetch=3, **kw), move=True) == fixed


def test_report_every_calls_the_callback_with_each_window():
    x, y = images(320)
    got = []
    loader = stoker.Loader(stoker.from_numpy(x, y), batch_size=32, pipeline=LIGHT,
                           output="numpy", report_every=3, report=got.append)
    n = sum(1 for _ in loader)
    assert n == 10
    assert len(got) == 3
    assert all(p["batches"] == 3 for p in got)
    assert all(isinstance(p["text"], str) and p["verdict"] in p["text"] for p in got)


def test_report_log_and_decisions_go_to_the_stoker_logger(caplog):
    x, y = images(320)
    loader = stoker.Loader(stoker.from_numpy(x, y), batch_size=32, pipeline=LIGHT,
                           output="numpy", report_every=5, report="log")
    with caplog.at_level(logging.DEBUG, logger="stoker"):
        for _ in loader:
            pass
    lines = [r.getMessage() for r in caplog.records if r.name == "stoker"]
    assert sum(1 for m in lines if m.startswith("stoker: 5 batches")) == 2
    # every decision the tuner made is logged (it may have made none)
    made = loader.stats()["decisions"]
    assert sum(1 for m in lines if m.startswith("autotune: ")) == made


def test_memory_limit_caps_the_pool_and_is_kept():
    x, y = images(400)
    batch = 16 * 64 * 64 * 3 + 16 * 16 + 16
    limit = 3 * batch + 64 * 1024
    loader = stoker.Loader(stoker.from_numpy(x, y), batch_size=16, pipeline="to u8 hwc",
                           output="numpy", memory_limit=limit)
    assert loader.max_batches == 3
    for im, lab in loader:
        st = loader.stats()
        assert st["memory_bytes"] <= limit
        assert st["batches_allocated"] <= 3
        del im, lab
    with pytest.raises(stoker.StokerError, match="fewer than two batches"):
        stoker.Loader(stoker.from_numpy(x, y), batch_size=16, pipeline="to u8 hwc",
                      memory_limit=batch)


@pytest.mark.parametrize("kw,msg", [
    (dict(num_threads="many"), "num_threads must be 'auto' or a number"),
    (dict(num_threads=0), "num_threads must be >= 1 or 'auto'"),
    (dict(prefetch=-1), "prefetch must be >= 1 or 'auto'"),
    (dict(report_every=0), "report_every must be >= 1"),
    (dict(report=42), "report must be a callable"),
    (dict(memory_limit=0), "memory_limit must be >= 1"),
])
def test_bad_knobs_are_refused_by_name(kw, msg):
    x, y = images(20)
    with pytest.raises(ValueError, match=msg):
        stoker.Loader(stoker.from_numpy(x, y), batch_size=4, pipeline="to u8 hwc", **kw)


def test_set_threads_out_of_range_names_the_range():
    x, y = images(20)
    loader = stoker.Loader(stoker.from_numpy(x, y), batch_size=4, pipeline="to u8 hwc",
                           num_threads=2, prefetch=2)
    with pytest.raises(stoker.StokerError, match=r"1\.\.2"):
        loader.set_threads(3)
    loader.set_threads(1)
    assert loader.stats()["threads"] == 1
