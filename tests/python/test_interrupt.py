"""Ctrl-C at random times never loses or repeats a batch (issue 26).

SIGINT is sent to this process from a timer thread at a random moment of an
epoch (100 epochs interrupted per output kind); Python's default handler raises KeyboardInterrupt in the consumer
wherever it is: waiting in next() with the GIL released, building the item,
running a wrap (as_dict, a batch_transform), or in the loop's own code. After
each interruption the loop goes on with next() on the same iterator. What the
loop received in the end, batch by batch, must equal an uninterrupted epoch,
and the state_dict() taken at the interruption must be the uninterrupted
run's state after the batches received so far (no batch counted that the
loop did not get).

The loop is written with next() rather than `for`, on purpose: CPython
checks for signals right after a call returns, so a batch returned with a
handler pending is dropped before it is stored (what the old code did, 6 of
6 trials in the issue). `pending` keeps a batch that was stored but not yet
digested when the interrupt came; nothing between the digest being recorded
and `pending = None` is a point where CPython runs handlers.
"""
import os
import random
import signal
import threading
import time

import numpy as np
import pytest
import xxhash

from module_util import as_numpy, stoker

TRIALS = 100


@pytest.fixture
def sigint_raises():
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def _digest(item):
    h = xxhash.xxh3_128()
    parts = item.values() if isinstance(item, dict) else item
    for a in parts:
        h.update(np.ascontiguousarray(as_numpy(a)).view(np.uint8).tobytes())
    return h.hexdigest()


def _make(kind):
    rng = np.random.default_rng(5)
    ds = stoker.from_numpy(rng.integers(0, 256, (192, 40, 40, 3), dtype=np.uint8),
                           rng.integers(0, 10, 192))
    opts = dict(batch_size=4, shuffle=True, seed=3, num_threads=1, prefetch=1,
                pipeline="resize 64 | random_crop 56 | flip 0.5 | to f32 chw")
    if kind == "torch":
        opts.update(output="torch")
    elif kind == "fields-dict":  # the item goes through a Python wrap (dicts)
        opts.update(output="numpy", fields=["image", "label"], as_dict=True)
    elif kind == "batch_transform":
        opts.update(output="numpy", batch_transform=lambda b: (b[0] * 2, b[1]))
    return stoker.Loader(ds, **opts)


def _reference(loader):
    loader.set_epoch(0)
    it = loader.iter_with_indices() if not loader.options["as_dict"] else iter(loader)
    digests, states = [], [loader.state_dict()]
    t0 = time.monotonic()
    for item in it:
        digests.append(_digest(item))
        states.append(loader.state_dict())
    took = time.monotonic() - t0
    return digests, states, loader.state_dict(), took


def _interrupted_epoch(loader, delay):
    """One epoch with one SIGINT after `delay` seconds: (digests, [(n, state)])."""
    main = threading.main_thread().ident
    fire = threading.Timer(delay, signal.pthread_kill, (main, signal.SIGINT))
    loader.set_epoch(0)
    it = loader.iter_with_indices() if not loader.options["as_dict"] else iter(loader)
    got, seen, pending, done, started = [], [], None, False, False
    while not done:
        try:
            if not started:
                started = True
                fire.start()
            while True:
                try:
                    item = next(it)
                    pending = item
                    d = _digest(item)
                    got += (d,)
                    pending = None
                except StopIteration:
                    done = True
                    break
                except KeyboardInterrupt:
                    if pending is not None:
                        got += (_digest(pending),)
                        pending = None
                    seen.append((len(got), loader.state_dict()))
        except KeyboardInterrupt:  # raised at the loop's back edge
            seen.append((len(got), loader.state_dict()))
    while True:
        try:
            fire.cancel()
            fire.join()
            time.sleep(0)
            break
        except KeyboardInterrupt:  # the signal came after the epoch's end
            seen.append((None, None))
    return got, seen


@pytest.mark.parametrize("kind", ["numpy", "torch", "fields-dict", "batch_transform"])
def test_sigint_at_random_times_loses_no_batch(kind, sigint_raises):
    if kind == "torch":
        pytest.importorskip("torch")
    loader = _make(kind)
    ref, states, end, took = _reference(loader)
    assert len(ref) == 48 and len(set(ref)) == 48
    rnd = random.Random(int(os.environ.get("STK_TEST_SEED", "26")))
    # TRIALS epochs interrupted inside the epoch. A signal that comes after
    # the epoch's end (the machine ran faster than the delay drawn) tests
    # nothing: that epoch is checked all the same but not counted, and the
    # next delay is drawn within the last epoch's own duration. The attempt
    # cap is a hang guard, not a timing threshold.
    interrupted = attempts = 0
    while interrupted < TRIALS:
        attempts += 1
        assert attempts <= 20 * TRIALS, "only %d of %d epochs interrupted" % (interrupted,
                                                                           attempts)
        before = loader.stats()["delivered"]
        t0 = time.monotonic()
        got, seen = _interrupted_epoch(loader, rnd.uniform(0, took))
        took = time.monotonic() - t0
        # stats()["delivered"]: the rows handed over, each batch once.
        assert loader.stats()["delivered"] - before == 192
        assert got == ref, "trial %d: %d batches, lost or repeated (interrupted at %s)" % (
            attempts, len(got), [n for n, _ in seen])
        for n, st in seen:
            if n is not None:
                assert st == states[n], "trial %d: state_dict after %d batches" % (attempts, n)
        interrupted += any(n is not None for n, _ in seen)
        assert loader.state_dict() == end  # the pass ended: the next epoch, position 0
