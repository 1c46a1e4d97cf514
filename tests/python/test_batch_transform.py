"""Loader(batch_transform=fn) and stoker.BatchOp(fn): per-batch Python steps
on the consumer side.

The reference is the Loader without them: a batch transform's output must
equal fn applied to the plain loader's batch (the same seed gives the same
batches), BatchOps must compose in list order before it, and
iter_with_indices must append the plain loader's indices. The profile must
count their time as the loop's wait (a transform that sleeps 30 ms per
batch adds at least that to each batch's wait and nothing to the steps).
Failure paths: an exception in the transform, Ctrl-C inside it, a BatchOp
before a native op, resume."""
import os
import signal
import threading
import time

import numpy as np
import pytest

from module_util import stoker

torch = pytest.importorskip("torch")

N, H, W, C = 26, 10, 8, 3


@pytest.fixture(scope="module")
def ds():
    rng = np.random.default_rng(3)
    return stoker.from_numpy(rng.integers(0, 256, (N, H, W, C), dtype=np.uint8),
                             rng.integers(0, 4, N))


AUG = [stoker.RandomCrop(6), stoker.RandomHorizontalFlip()]


def loader(ds, **kw):
    kw.setdefault("transforms", AUG)
    return stoker.Loader(ds, batch_size=4, shuffle=True, seed=9, num_threads=2, **kw)


def plain(ds, **kw):
    return [(x.clone(), y.clone()) for x, y in loader(ds, **kw)]


def test_callable_gets_the_batch_and_its_result_is_yielded(ds):
    seen = []

    def fn(batch):
        seen.append(type(batch))
        images, labels = batch
        return images * 2 + 1, labels + 10

    got = list(loader(ds, batch_transform=fn))
    want = plain(ds)
    assert seen == [tuple] * len(want)
    assert len(got) == len(want)
    for (x, y), (wx, wy) in zip(got, want):
        assert torch.equal(x, wx * 2 + 1) and torch.equal(y, wy + 10)


def test_any_return_value_and_indices_appended(ds):
    ref = stoker.Loader(ds, batch_size=4, shuffle=True, seed=9, num_threads=2, transforms=AUG)
    want = [(x.clone(), y.clone(), i.clone()) for x, y, i in ref.iter_with_indices()]

    to_dict = lambda b: {"x": b[0], "y": b[1]}  # noqa: E731
    got = list(loader(ds, batch_transform=to_dict))
    assert len(got) == len(want) and all(set(d) == {"x", "y"} for d in got)
    assert all(torch.equal(d["x"], w[0]) for d, w in zip(got, want))
    # iter_with_indices: a tuple result gets the indices appended, anything else is paired
    got = list(loader(ds, batch_transform=lambda b: b).iter_with_indices())
    assert len(got) == len(want)
    for (x, y, idx), w in zip(got, want):
        assert torch.equal(x, w[0]) and torch.equal(idx, w[2])
    got = list(loader(ds, batch_transform=to_dict).iter_with_indices())
    assert len(got) == len(want)
    for (d, idx), w in zip(got, want):
        assert torch.equal(d["y"], w[1]) and torch.equal(idx, w[2])


def test_torchvision_tensor_transform_as_a_batch_op(ds):
    """torchvision's tensor transforms work on a whole batch (..., H, W): a
    BatchOp runs one on the finished batch."""
    T = pytest.importorskip("torchvision.transforms")
    got = list(loader(ds, transforms=AUG + [stoker.BatchOp(T.RandomVerticalFlip(p=1.0))]))
    for (x, y), (wx, wy) in zip(got, plain(ds)):
        assert torch.equal(x, wx.flip(-2)) and torch.equal(y, wy)


def test_batch_ops_run_in_order_then_the_batch_transform(ds):
    order = []

    def f(x):
        order.append("f")
        return x + 1

    def g(x):
        order.append("g")
        return x * 3

    def bt(batch):
        order.append("bt")
        return batch[0] - 2, batch[1]

    got = list(loader(ds, transforms=AUG + [stoker.BatchOp(f), stoker.BatchOp(g)],
                      batch_transform=bt))
    want = plain(ds)
    assert order == ["f", "g", "bt"] * len(want)
    for (x, y), (wx, wy) in zip(got, want):
        assert torch.equal(x, (wx + 1) * 3 - 2) and torch.equal(y, wy)
    # the spec is the native part only
    L = loader(ds, transforms=AUG + [stoker.BatchOp(f)])
    assert L.pipeline == loader(ds).pipeline
    # BatchOps only at the end
    with pytest.raises(ValueError, match=r"transforms\[1\] .* comes after a BatchOp "
                                         r"\(transforms\[0\]\).* must come last"):
        loader(ds, transforms=[stoker.BatchOp(f), stoker.RandomCrop(6)])
    with pytest.raises(TypeError, match="BatchOp needs a callable"):
        stoker.BatchOp(3)
    with pytest.raises(TypeError, match="must be a callable or a stoker.Mixup"):
        loader(ds, batch_transform="flip")
    # a BatchOp with output="dlpack" gets the Batch object
    kinds = []
    L = loader(ds, output="dlpack", transforms=AUG + [stoker.BatchOp(
        lambda b: kinds.append(type(b)) or b)])
    assert sum(len(b) for b, _ in L) == N and set(kinds) == {stoker.Batch}


def test_transform_time_counts_as_wait(ds):
    def slow(batch):
        time.sleep(0.03)
        return batch

    L = stoker.Loader(ds, batch_size=2, num_threads=2, transforms=AUG, batch_transform=slow)
    L.warmup()
    for _ in L:
        pass
    p = L.profile()
    n = p["batches"]
    assert n == N // 2
    # every batch's wait holds its transform's 30 ms; the loop body did nothing
    assert p["wait_s"] >= 0.03 * n
    assert p["wait_p50_s"] >= 0.03
    assert p["step_s"] < 0.03 * n
    assert L.stats()["consumer_wait_s"] >= 0.03 * n


def test_exception_in_the_transform_then_a_whole_epoch(ds):
    calls = []

    def fn(batch):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("transform failed")
        return batch

    L = loader(ds, batch_transform=fn)
    with pytest.raises(RuntimeError, match="transform failed"):
        for _ in L:
            pass
    # the abandoned pass restarts: the epoch is delivered whole, as without the transform
    got = list(L)
    want = plain(ds)
    assert len(got) == len(want)
    assert all(torch.equal(x, wx) for (x, _), (wx, _) in zip(got, want))


@pytest.fixture
def sigint_raises():
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_ctrl_c_inside_the_transform(ds, sigint_raises):
    def slow(batch):
        time.sleep(0.05)
        return batch

    L = loader(ds, batch_transform=slow)
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        deadline = time.monotonic() + 60  # a hang guard only
        with pytest.raises(KeyboardInterrupt):
            while time.monotonic() < deadline:
                for _ in L:
                    pass
    finally:
        timer.cancel()
    assert sum(len(y) for _, y in L) == N


def test_resume_with_a_callable_transform(ds):
    fn = lambda b: (b[0] + 1, b[1])  # noqa: E731
    L = loader(ds, batch_transform=fn)
    it = iter(L)
    next(it)
    next(it)
    state = L.state_dict()
    assert "batch_transform" not in state  # only a Mixup's settings are recorded
    rest = [x.clone() for x, _ in it]
    L2 = loader(ds, batch_transform=lambda b: (b[0] + 1, b[1]))
    L2.load_state_dict(state)
    got = [x.clone() for x, _ in L2]
    assert len(got) == len(rest) and all(torch.equal(a, b) for a, b in zip(got, rest))


def test_external_source_with_a_batch_transform():
    """The two halves together: Python items in, native augmentation, a
    Python step on the finished batch."""
    rng = np.random.default_rng(8)
    imgs = rng.integers(0, 256, (N, H, W, C), dtype=np.uint8)
    src = stoker.ExternalSource([(im, i) for i, im in enumerate(imgs)], shape=(H, W, C))
    got = list(loader(src, batch_transform=lambda b: (b[0].float() / 255, b[1]),
                      dtype="uint8"))
    want = plain(stoker.from_numpy(imgs, np.arange(N)), dtype="uint8")
    for (x, y), (wx, wy) in zip(got, want):
        assert torch.equal(x, wx.float() / 255) and torch.equal(y, wy)
