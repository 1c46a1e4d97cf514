"""Zero copy and batch lifetime: tensors/arrays share the pooled batch
buffer, keep it alive, and it is never overwritten while referenced; pool
exhaustion; the DLPack capsule and buffer protocol contracts."""
import ctypes
import gc
import sys
import threading

import numpy as np
import pytest
import torch

from module_util import CIFAR_SPEC, as_numpy, stoker

PyCapsule_GetName = ctypes.pythonapi.PyCapsule_GetName
PyCapsule_GetName.restype = ctypes.c_char_p
PyCapsule_GetName.argtypes = [ctypes.py_object]


def np_ptr(a):
    return a.__array_interface__["data"][0]


def test_every_export_shares_the_batch_buffer(cifar_dir):
    loader = stoker.Loader("cifar10:" + cifar_dir[0], pipeline=CIFAR_SPEC, batch_size=32,
                           output="dlpack")
    batch, labels = next(iter(loader))
    assert isinstance(batch, stoker.Batch)
    p = batch.data_ptr()
    t = torch.from_dlpack(batch)
    a = np.from_dlpack(batch)
    b = np.asarray(batch)  # buffer protocol
    m = memoryview(batch)
    assert t.data_ptr() == p and np_ptr(a) == p and np_ptr(b) == p
    assert t.shape == (32, 3, 32, 32) and t.dtype == torch.float32 and t.is_contiguous()
    assert a.shape == b.shape == m.shape == (32, 3, 32, 32) and b.dtype == np.float32
    assert m.format == "f" and m.itemsize == 4 and m.ndim == 4 and m.c_contiguous
    assert m.strides == (3 * 32 * 32 * 4, 32 * 32 * 4, 32 * 4, 4) and not m.readonly
    assert m.nbytes == batch.nbytes == 32 * 3 * 32 * 32 * 4
    assert batch.shape == (32, 3, 32, 32) and batch.dtype == "float32"
    assert batch.layout == "NCHW" and len(batch) == 32
    assert batch.epoch == 0 and batch.position == 0 and batch.skipped == 0
    # All views see the same bytes; writing through one shows in the others.
    t[0, 0, 0, 0] = 1234.5
    assert a[0, 0, 0, 0] == b[0, 0, 0, 0] == 1234.5
    # Labels: an int64 array of its own (a copy), exported the same ways.
    assert labels.dtype == "int64" and labels.shape == (32,)
    assert np.array_equal(np.asarray(labels), torch.from_dlpack(labels).numpy())
    assert np.asarray(labels).tolist() == labels.tolist() == np.asarray(batch.labels).tolist()
    assert labels.data_ptr() != batch.data_ptr()
    assert len(set(np.asarray(batch.indices).tolist())) == 32
    assert batch.__dlpack_device__() == (1, 0)


@pytest.mark.parametrize("output", ["torch", "numpy"])
def test_pointers_recur_within_the_pool(cifar_dir, output):
    loader = stoker.Loader("cifar10:" + cifar_dir[0], pipeline=CIFAR_SPEC, batch_size=8,
                           output=output, prefetch=2)
    ptrs = []
    for images, labels in loader:
        ptrs.append(images.data_ptr() if output == "torch" else np_ptr(images))
    st = loader.stats()
    assert len(ptrs) == len(loader) == 24
    # At most prefetch + 1 filling/ready plus the one held: the same few
    # buffers come back again and again.
    assert len(set(ptrs)) <= st["batches_allocated"] <= loader.max_batches
    assert len(set(ptrs)) < len(ptrs) / 3
    assert st["pool_bytes"] == st["batches_allocated"] * 8 * 3 * 32 * 32 * 4


def test_kept_batches_are_never_overwritten(cifar_dir):
    uri = "cifar10:" + cifar_dir[0]
    per_epoch = -(-185 // 16)
    loader = stoker.Loader(uri, pipeline=CIFAR_SPEC, batch_size=16, shuffle=True,
                           max_batches=3 * per_epoch + 8, output="torch")
    kept, copies = [], []
    for epoch in range(3):
        loader.set_epoch(epoch)
        for images, labels in loader:
            kept.append((images, labels))
            copies.append((images.clone(), labels.clone()))
    assert len(kept) == 3 * per_epoch
    assert len({x.data_ptr() for x, _ in kept}) == len(kept)  # one buffer each
    assert loader.stats()["batches_alive"] == len(kept)
    # Churn the pool some more with a second pass over other epochs.
    for epoch in range(3, 5):
        loader.set_epoch(epoch)
        for item in loader:
            pass
    for (x, y), (cx, cy) in zip(kept, copies):
        assert torch.equal(x, cx) and torch.equal(y, cy)
    del kept, x, y, images, labels, item
    assert loader.stats()["batches_alive"] == 0


def test_batches_outlive_the_loader_object(cifar_dir):
    loader = stoker.Loader("cifar10:" + cifar_dir[0], pipeline=CIFAR_SPEC, batch_size=16,
                           output="numpy")
    it = iter(loader)
    x, y = next(it)
    copy = x.copy()
    del loader, it
    gc.collect()
    assert np.array_equal(x, copy)  # still alive: the array holds the batch, which holds the loader
    del x


def test_close_keeps_held_batches_valid(cifar_dir):
    loader = stoker.Loader("cifar10:" + cifar_dir[0], pipeline=CIFAR_SPEC, batch_size=16,
                           output="torch")
    x, _ = next(iter(loader))
    copy = x.clone()
    loader.close()
    loader.close()  # idempotent
    assert loader.closed
    with pytest.raises(ValueError, match="closed"):
        iter(loader)
    assert torch.equal(x, copy)
    del x  # the last batch frees the native loader
    with stoker.Loader("cifar10:" + cifar_dir[0], pipeline=CIFAR_SPEC, output="numpy") as l2:
        assert len(l2) == 1
    assert l2.closed


def test_pool_exhausted_is_clear_and_recoverable(cifar_dir):
    loader = stoker.Loader("cifar10:" + cifar_dir[0], pipeline=CIFAR_SPEC, batch_size=8,
                           prefetch=2, output="torch")
    assert loader.max_batches == 6
    it = iter(loader)
    held = [next(it) for _ in range(6)]
    with pytest.raises(stoker.PoolExhausted, match="max_batches") as e:
        next(it)
    assert isinstance(e.value, RuntimeError) and e.value.code == -13
    st = loader.stats()
    assert st["pool_exhausted"] >= 1 and st["batches_allocated"] == 6
    assert st["batches_alive"] == 6 and st["gc_collects"] == 1
    del held
    # The same iterator carries on with the next batch in order.
    rest = [(x.clone(), y) for x, y in it]
    fresh = stoker.Loader("cifar10:" + cifar_dir[0], pipeline=CIFAR_SPEC, batch_size=8,
                          output="torch")
    ref = [(x.clone(), y) for x, y in fresh]
    assert len(rest) == len(ref) - 6 == len(loader) - 6
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(rest, ref[6:]))


def test_pool_exhaustion_runs_gc_once(cifar_dir):
    loader = stoker.Loader("cifar10:" + cifar_dir[0], pipeline=CIFAR_SPEC, batch_size=8,
                           prefetch=2, max_batches=4, output="dlpack")
    it = iter(loader)
    gc.disable()
    try:
        cycle = []
        cycle.append(cycle)  # only the cyclic GC can free what it holds
        cycle.extend(next(it) for _ in range(4))
        del cycle
        x = next(it)  # every buffer is held by garbage: gc.collect() frees them
        assert x[0].position == 4
        assert loader.stats()["gc_collects"] == 1
    finally:
        gc.enable()


def test_dlpack_capsules(cifar_dir):
    loader = stoker.Loader("cifar10:" + cifar_dir[0], pipeline=CIFAR_SPEC, batch_size=8,
                           output="dlpack")
    batch, labels = next(iter(loader))
    base = sys.getrefcount(batch)
    cap = batch.__dlpack__()
    assert PyCapsule_GetName(cap) == b"dltensor"
    assert sys.getrefcount(batch) == base + 1
    del cap  # never consumed: the destructor drops the reference
    assert sys.getrefcount(batch) == base
    cap = batch.__dlpack__(stream=None)
    t = torch.utils.dlpack.from_dlpack(cap)  # consumes it
    assert PyCapsule_GetName(cap) == b"used_dltensor"
    del cap  # consumed: the tensor owns the reference now
    assert sys.getrefcount(batch) == base + 1
    del t
    assert sys.getrefcount(batch) == base
    capv = batch.__dlpack__(max_version=(1, 0))
    assert PyCapsule_GetName(capv) == b"dltensor_versioned"
    del capv
    assert sys.getrefcount(batch) == base
    assert PyCapsule_GetName(batch.__dlpack__(max_version=(0, 8))) == b"dltensor"
    with pytest.raises(BufferError):
        batch.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        batch.__dlpack__(dl_device=(2, 0))


def test_tensor_freed_on_another_thread_returns_the_buffer(cifar_dir):
    loader = stoker.Loader("cifar10:" + cifar_dir[0], pipeline=CIFAR_SPEC, batch_size=8,
                           output="torch")
    it = iter(loader)
    box = [next(it)]
    assert loader.stats()["batches_alive"] == 1
    th = threading.Thread(target=box.clear)
    th.start()
    th.join()
    assert loader.stats()["batches_alive"] == 0
    assert sum(1 for _ in it) == len(loader) - 1


def test_stats_keys(cifar_dir):
    loader = stoker.Loader("cifar10:" + cifar_dir[0], pipeline=CIFAR_SPEC, batch_size=32)
    for _ in loader:
        pass
    st = loader.stats()
    for key in ("samples", "batches", "skipped", "read_s", "augment_s", "worker_idle_s",
                "consumer_wait_s", "batches_allocated", "pool_bytes", "pool_exhausted",
                "batches_alive", "gc_collects"):
        assert key in st, key
    assert st["batches"] == len(loader) == 6 and st["skipped"] == 0
    assert st["samples"] >= 185 and st["consumer_wait_s"] >= 0 and st["pool_bytes"] > 0


def test_labels_do_not_pin_the_batch(cifar_dir):
    """Keeping only labels (a copy) lets every batch buffer go back."""
    loader = stoker.Loader("cifar10:" + cifar_dir[0], pipeline=CIFAR_SPEC, batch_size=8,
                           prefetch=2, max_batches=3, output="torch")
    all_labels = [labels for _, labels in loader]
    assert len(all_labels) == len(loader)
    assert as_numpy(torch.cat(all_labels)).shape == (185,)
