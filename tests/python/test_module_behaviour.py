"""What a Python user expects: epochs and iteration, resume, Ctrl-C, fork,
pickling, errors, rank/world_size discovery."""
import copy
import itertools
import os
import pickle
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from module_util import (CIFAR_SPEC, PY_PATH, assert_same_batches, epoch_copies, stoker)


def make(cifar_dir, **kw):
    opts = dict(pipeline=CIFAR_SPEC, batch_size=16, shuffle=True, seed=11, output="numpy")
    opts.update(kw)
    return stoker.Loader("cifar10:" + cifar_dir[0], **opts)


def reference(cifar_dir, epoch, **kw):
    loader = make(cifar_dir, **kw)
    loader.set_epoch(epoch)
    return epoch_copies(loader, with_indices=True)


# -- epochs -----------------------------------------------------------------

def test_set_epoch_is_deterministic_for_any_thread_count(cifar_dir):
    a = make(cifar_dir, num_threads=1)
    b = make(cifar_dir, num_threads=3, prefetch=1)
    for epoch in (3, 0, 3):
        a.set_epoch(epoch)
        b.set_epoch(epoch)
        ea, eb = epoch_copies(a, True), epoch_copies(b, True)
        assert_same_batches(ea, eb)
        assert_same_batches(ea, reference(cifar_dir, epoch))
    e0, e1 = reference(cifar_dir, 0), reference(cifar_dir, 1)
    assert not np.array_equal(e0[0][2], e1[0][2])  # another epoch, another order


def test_passes_advance_the_epoch_like_a_shuffling_dataloader(cifar_dir):
    loader = make(cifar_dir)
    assert loader.epoch == 0
    first = epoch_copies(loader, True)
    assert loader.epoch == 1
    second = epoch_copies(loader, True)
    assert loader.epoch == 2
    assert_same_batches(first, reference(cifar_dir, 0))
    assert_same_batches(second, reference(cifar_dir, 1))
    # set_epoch before each pass (DistributedSampler style) is the same thing.
    loader.set_epoch(1)
    assert_same_batches(epoch_copies(loader, True), second)


def test_break_then_next_pass(cifar_dir):
    loader = make(cifar_dir)
    for i, _ in enumerate(loader):
        if i == 2:
            break
    assert loader.epoch == 0
    # Abandoned midway: the next iter() restarts the same epoch from the start.
    assert_same_batches(epoch_copies(loader, True), reference(cifar_dir, 0))
    # Break, then set_epoch(next): that epoch, complete.
    for i, _ in enumerate(loader):
        if i == 5:
            break
    loader.set_epoch(4)
    assert_same_batches(epoch_copies(loader, True), reference(cifar_dir, 4))
    # Took every batch but never saw StopIteration: the pass counts as done.
    for _ in itertools.islice(loader, len(loader)):
        pass
    assert loader.epoch == 6


def test_new_iter_makes_the_old_one_stale(cifar_dir):
    loader = make(cifar_dir)
    it1 = iter(loader)
    next(it1)
    it2 = iter(loader)
    with pytest.raises(RuntimeError, match="stale"):
        next(it1)
    assert sum(1 for _ in it2) == len(loader)
    assert next(it2, None) is None  # exhausted stays exhausted


def test_resume_mid_epoch(cifar_dir):
    a = make(cifar_dir, num_threads=2)
    a.set_epoch(2)
    it = a.iter_with_indices()
    head = [tuple(np.asarray(v).copy() for v in next(it)) for _ in range(4)]
    state = a.state_dict()
    assert state["epoch"] == 2 and state["position"] == 4 and state["version"] == 1
    tail = [tuple(np.asarray(v).copy() for v in item) for item in it]
    a_next = epoch_copies(a, True)  # epoch 3

    state = pickle.loads(pickle.dumps(state))  # as a checkpoint would
    b = make(cifar_dir, num_threads=1, prefetch=2)
    b.load_state_dict(state)
    assert b.epoch == 2
    b.set_epoch(2)  # the usual loop calls this: it keeps the restored position
    got = epoch_copies(b, True)
    assert_same_batches(got, tail)
    assert_same_batches(head + tail, reference(cifar_dir, 2))
    assert b.epoch == 3
    assert_same_batches(epoch_copies(b, True), a_next)

    # set_epoch to another epoch drops the restored position.
    c = make(cifar_dir)
    c.load_state_dict(state)
    c.set_epoch(5)
    assert_same_batches(epoch_copies(c, True), reference(cifar_dir, 5))


def test_resume_refuses_another_configuration(cifar_dir):
    state = make(cifar_dir).state_dict()
    with pytest.raises(stoker.InvalidArgument, match="does not match"):
        make(cifar_dir, drop_last=True).load_state_dict(state)
    # Another batch size (or world size) continues the epoch instead
    # (test_module_sampler.py).
    make(cifar_dir, batch_size=8).load_state_dict(state)
    with pytest.raises(stoker.InvalidArgument):
        make(cifar_dir, seed=12).load_state_dict(state)
    with pytest.raises(ValueError, match="pipeline"):
        make(cifar_dir, pipeline="flip | to f32").load_state_dict(state)
    del state["pipeline"]
    with pytest.raises(stoker.InvalidArgument, match="another pipeline spec"):
        make(cifar_dir, pipeline="flip | to f32").load_state_dict(state)  # the C check
    del state["spec_hash"]
    make(cifar_dir, pipeline="flip | to f32").load_state_dict(state)


def test_resume_mismatch_names_the_settings_in_words(cifar_dir):
    # Issue 26: it said "flags 0 ... flags 2"; only what differs is named.
    state = make(cifar_dir).state_dict()  # shuffle=True, drop_last=False
    with pytest.raises(stoker.InvalidArgument) as e:
        make(cifar_dir, drop_last=True).load_state_dict(state)
    assert str(e.value).endswith("the state was saved with drop_last=False; this loader has "
                                 "drop_last=True"), str(e.value)
    with pytest.raises(stoker.InvalidArgument) as e:
        make(cifar_dir, shuffle="block", block_size=8, seed=12).load_state_dict(state)
    assert str(e.value).endswith("the state was saved with seed 11, shuffle=global; this "
                                 "loader has seed 12, shuffle=block (block_size 8, "
                                 "shuffle_window 16)"), str(e.value)
    with pytest.raises(stoker.InvalidArgument, match="saved with shuffle=global; this loader "
                                                     "has shuffle=none$"):
        make(cifar_dir, shuffle=False).load_state_dict(state)
    assert "flags" not in str(e.value)


def test_stats_samples_counts_prefetched_rows_delivered_does_not(cifar_dir):
    # Issue 26: stats()["samples"] counts what the workers wrote, prefetched
    # batches included; "delivered" the rows next() handed over.
    loader = make(cifar_dir, batch_size=8, num_threads=2, prefetch=3)
    it = iter(loader)
    next(it)
    next(it)
    st = loader.stats()
    assert st["delivered"] == 16 and st["batches"] == 2
    for _ in it:
        pass
    st = loader.stats()
    assert st["delivered"] == 185 and st["batches"] == 24
    assert st["samples"] >= st["delivered"]  # plus what was read ahead into epoch 1


def test_unknown_arguments_say_what_to_pass(cifar_dir):
    # Issue 26: a bare TypeError before; DataLoader's names get the stoker
    # spelling (or why none is needed), typos a did-you-mean.
    cases = {
        "num_workers": r"num_workers= is a DataLoader argument: use num_threads=",
        "prefetch_factor": r"use prefetch=",
        "persistent_workers": r"not needed: a Loader's threads live as long as the Loader",
        "pin_memory": r"not needed: .*device='cuda'",
        "collate_fn": r"not needed: the native workers collate the batch; use batch_transform=",
        "shufle": r"unexpected keyword argument 'shufle': did you mean shuffle=\?",
        "batchsize": r"did you mean batch_size=\?",
        "num_thread": r"did you mean num_threads=\?",
        "zzz": r"unexpected keyword argument 'zzz' \(the arguments are in help\(stoker.Loader\)",
    }
    for name, pattern in cases.items():
        with pytest.raises(TypeError, match=pattern):
            make(cifar_dir, **{name: 2})
    with pytest.raises(TypeError, match=r"(?s)2 keyword arguments it does not take:.*num_workers=.*"
                                        r"pin_memory="):
        make(cifar_dir, num_workers=2, pin_memory=True)


# -- Ctrl-C -------------------------------------------------------------------

SLOW_CHILD = r"""
import signal, sys, numpy as np, stoker
# A shell's background job starts with SIGINT ignored, and Python then keeps
# it ignored: ask for the normal Ctrl-C behaviour whatever we inherited.
signal.signal(signal.SIGINT, signal.default_int_handler)
ds = stoker.from_numpy(np.zeros((64, 28, 28, 1), np.uint8))
# ~10 ms of work per batch on one thread: the consumer spends its time
# waiting in next() with the GIL released.
loader = stoker.Loader(ds, batch_size=1, num_threads=1, prefetch=1, output="numpy",
                       pipeline="pad 1500 mode=edge | random_crop 3028 | to f32 hwc")
print("started", flush=True)
for epoch in range(10 ** 6):
    for x, y in loader:
        pass
"""


def test_ctrl_c_in_a_child_process_raises_keyboard_interrupt():
    env = dict(os.environ)
    env["PYTHONPATH"] = PY_PATH + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.Popen([sys.executable, "-c", SLOW_CHILD], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout.readline().strip() == "started"
        time.sleep(0.5)
        t0 = time.monotonic()
        os.kill(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=60)  # a hang guard, not a speed threshold
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode != 0
    assert "KeyboardInterrupt" in err, err
    assert "Traceback" in err
    print("SIGINT to exit: %.3f s" % took)


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt during the test (even when pytest was
    started with SIGINT ignored, as background jobs are)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_keyboard_interrupt_leaves_the_loader_reusable(cifar_dir, sigint_raises):
    loader = stoker.Loader(stoker.from_numpy(np.zeros((64, 28, 28, 1), np.uint8)),
                           batch_size=1, num_threads=1, prefetch=1, output="numpy",
                           pipeline="pad 1500 mode=edge | random_crop 3028 | to f32 hwc")
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        deadline = time.monotonic() + 60  # a hang guard only
        with pytest.raises(KeyboardInterrupt):
            while time.monotonic() < deadline:
                for _ in loader:
                    pass
    finally:
        timer.cancel()
    # The same loader runs a whole epoch again afterwards.
    assert sum(1 for _ in loader) == 64

    # Interrupted midway through an epoch (wherever the signal lands): the
    # next pass restarts that epoch and delivers all of it, correctly.
    small = make(cifar_dir, batch_size=4)
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in small:
                time.sleep(0.02)
    finally:
        timer.cancel()
    assert small.epoch == 0
    assert_same_batches(epoch_copies(small, True), reference(cifar_dir, 0, batch_size=4))


def test_one_consumer_thread_others_may_watch():
    """While one thread waits in next() (GIL released), another may read
    stats()/state_dict() but not move the loader."""
    loader = stoker.Loader(stoker.from_numpy(np.zeros((10, 28, 28, 1), np.uint8)),
                           batch_size=1, num_threads=1, prefetch=1, output="numpy",
                           pipeline="pad 1500 mode=edge | random_crop 3028 | to f32 hwc")
    refused = 0
    for _ in range(20):  # each round: one pass on a thread, one attempt to interfere
        errors, started, done = [], threading.Event(), threading.Event()

        def consume():
            try:
                for _ in loader:
                    started.set()
            except Exception as e:  # noqa: BLE001
                errors.append(e)
            started.set()
            done.set()

        th = threading.Thread(target=consume)
        th.start()
        started.wait(60)
        time.sleep(0.002)  # the consumer waits ~all the time (~9 ms a batch)
        loader.stats()
        loader.state_dict()
        try:
            loader.set_epoch(0)
        except RuntimeError as e:
            assert "another thread" in str(e)
            refused += 1
        th.join(60)
        # A set_epoch that slipped in between two waits makes that pass stale.
        assert all("stale" in str(e) for e in errors), errors
        if refused >= 3:
            break
    assert refused >= 3


# -- fork, pickling -------------------------------------------------------------

def test_fork_child_gets_a_clear_error_parent_continues(cifar_dir):
    loader = make(cifar_dir)
    it = loader.iter_with_indices()
    first = next(it)
    kept = tuple(np.asarray(v).copy() for v in first)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            os.close(r)
            msgs = []
            for call in (lambda: next(it), lambda: iter(loader), lambda: loader.set_epoch(1),
                         lambda: loader.state_dict(), lambda: loader.stats()):
                try:
                    call()
                    msgs.append("no error")
                except stoker.ForkError as e:
                    msgs.append("ok" if "Create the Loader in the child" in str(e) else str(e))
            # Batches inherited from the parent stay readable in the child,
            # and dropping them (and the loader) neither hangs nor crashes.
            same = all(np.array_equal(np.asarray(a), b) for a, b in zip(first, kept))
            msgs.append("same" if same else "changed")
            # A dataset works after fork; so does a new Loader made here.
            ds = stoker.open("cifar10:" + cifar_dir[0])
            n = sum(1 for _ in stoker.Loader(ds, batch_size=50, output="numpy"))
            msgs.append("new loader %d" % n)
            os.write(w, ("|".join(msgs)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    deadline = time.monotonic() + 120
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("forked child hung")
        time.sleep(0.05)
    report = os.read(r, 4096).decode()
    os.close(r)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, report
    assert report == "ok|ok|ok|ok|ok|same|new loader 4", report
    # The parent's loader and iterator carry on untouched.
    rest = [tuple(np.asarray(v).copy() for v in item) for item in it]
    del first
    assert_same_batches([kept] + rest, reference(cifar_dir, 0))


def test_loader_is_not_picklable(cifar_dir):
    loader = make(cifar_dir)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(loader)
    with pytest.raises(TypeError, match="cannot be pickled"):
        copy.copy(loader)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(loader._core)
    with pytest.raises(TypeError):
        pickle.dumps(stoker.from_numpy(np.zeros((1, 2, 2, 1), np.uint8)))


# -- errors ----------------------------------------------------------------------

def test_missing_path_is_file_not_found(tmp_path):
    path = str(tmp_path / "no-such-dir")
    with pytest.raises(FileNotFoundError) as e:
        stoker.Loader("cifar10:" + path)
    assert isinstance(e.value, stoker.NotFound) and isinstance(e.value, stoker.StokerError)
    assert isinstance(e.value, OSError) and e.value.code == -4
    assert path in str(e.value)
    with pytest.raises(stoker.NotFound, match="no-such-dir"):
        stoker.open(tmp_path / "no-such-dir")


def test_malformed_file_is_format_error(tmp_path):
    d = tmp_path / "bad"
    d.mkdir()
    good = bytes([3]) + bytes(3072)
    (d / "data_batch_1.bin").write_bytes(good + good[:100])
    for i in range(2, 6):
        (d / ("data_batch_%d.bin" % i)).write_bytes(good)
    with pytest.raises(stoker.FormatError, match="data_batch_1.bin") as e:
        stoker.open("cifar10:%s" % d)
    assert isinstance(e.value, ValueError) and e.value.code == -5


def test_bad_spec_is_spec_error_with_caret(cifar_dir):
    with pytest.raises(stoker.SpecError) as e:
        make(cifar_dir, pipeline="pad 4 | frobnicate")
    msg = str(e.value)
    assert isinstance(e.value, ValueError)
    assert "frobnicate" in msg and "^" in msg and "column 9" in msg
    with pytest.raises(stoker.SpecError, match="random_crop"):
        make(cifar_dir, pipeline="random_crop 40")


def test_bad_arguments(cifar_dir):
    with pytest.raises(ValueError, match="rank"):
        make(cifar_dir, rank=4, world_size=4)
    with pytest.raises(ValueError, match="output"):
        make(cifar_dir, output="jax")
    with pytest.raises(ValueError, match="max_batches"):
        make(cifar_dir, prefetch=4, max_batches=4)
    with pytest.raises(ValueError, match="on_error"):
        make(cifar_dir, on_error="ignore")
    with pytest.raises(ValueError, match="batch_size"):
        make(cifar_dir, batch_size=0)
    with pytest.raises(TypeError):
        make(cifar_dir, batch_size=1.5)


# -- ranks -------------------------------------------------------------------------

def test_rank_and_world_size_from_environment(cifar_dir, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    loader = make(cifar_dir)
    assert (loader.rank, loader.world_size) == (2, 3)
    assert len(loader) == -(-(-(-185 // 3)) // 16)
    assert make(cifar_dir, rank=0).rank == 0
    assert make(cifar_dir, rank=1, world_size=2).world_size == 2
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    assert (make(cifar_dir).rank, make(cifar_dir).world_size) == (0, 1)


@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_cover_the_epoch_as_documented(cifar_dir, drop_last):
    n, w, b = 185, 3, 16
    seen = []
    for r in range(w):
        loader = make(cifar_dir, rank=r, world_size=w, drop_last=drop_last)
        loader.set_epoch(1)
        seen.append(np.concatenate([i for _, _, i in epoch_copies(loader, True)]))
    counts = np.bincount(np.concatenate(seen), minlength=n)
    if drop_last:
        per = (n // w) // b * b
        assert all(len(s) == per for s in seen) and counts.max() == 1
    else:
        per = -(-n // w)
        assert all(len(s) == per for s in seen)
        assert counts.min() == 1 and (counts == 2).sum() == per * w - n
