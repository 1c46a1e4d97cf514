"""stoker.ExternalSource: a dataset fed by Python objects (a list of NumPy
arrays, a torch Dataset, a generator, PIL images, encoded JPEG bytes).

The references are stoker datasets over the same data read natively: a list
of arrays gives the batches of stoker.from_numpy over those arrays, JPEG
bytes the batches of an image folder holding the same files (written by
PIL), CHW tensors and PIL images the batches of their NumPy HWC pixels (as
np.asarray / tensor.permute give them). Batches are compared bit for bit,
with augmentation and shuffle on, for 1 and 2 threads. Failures are checked
by their messages (the sample index, the exception type and text)."""
import gc
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import weakref

import numpy as np
import pytest

from module_util import PY_PATH, stoker

PIL = pytest.importorskip("PIL.Image")
torch = pytest.importorskip("torch")

N, H, W, C = 21, 12, 10, 3
AUG = [stoker.RandomCrop(8), stoker.RandomHorizontalFlip()]


def images_and_labels(n=N, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (n, H, W, C), dtype=np.uint8),
            rng.integers(0, 5, n).astype(np.int64))


def batches(ds, threads=2, transforms=AUG, **kw):
    kw.setdefault("shuffle", True)
    kw.setdefault("batch_size", 4)
    L = stoker.Loader(ds, transforms=transforms, dtype="uint8", num_threads=threads, seed=7,
                      output="numpy", **kw)
    return [(np.array(x), np.array(y)) for x, y in L]


def assert_same(a, b):
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert xa.shape == xb.shape
        assert np.array_equal(xa, xb)
        assert np.array_equal(ya, yb)


@pytest.fixture
def sigint_raises():
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


# -- sources of each kind, against a native reference ---------------------------


def test_list_of_arrays_is_from_numpy_for_any_thread_count():
    imgs, labels = images_and_labels()
    ref = batches(stoker.from_numpy(imgs, labels))
    items = [(imgs[i], int(labels[i])) for i in range(N)]
    for shape in ((H, W, C), None):
        src = stoker.ExternalSource(items, shape=shape)
        assert len(src) == N and src.format == "callback" and src.uri == "external:list"
        assert src.shape == shape
        for threads in (1, 2):
            assert_same(batches(src, threads), ref)
    # a NumPy array of images is an indexable too (items without labels: -1)
    src = stoker.ExternalSource(imgs, shape=(H, W, C))
    got = batches(src)
    assert_same([(x, np.full_like(y, 5)) for x, y in got],
                [(x, np.full_like(y, 5)) for x, y in ref])
    assert all((y == -1).all() for _, y in got)
    # ds[i] reads one sample
    x, y = stoker.ExternalSource(items)[3]
    assert np.array_equal(x, imgs[3]) and y == labels[3]


class TorchSet(torch.utils.data.Dataset):
    """A map-style torch Dataset of CHW uint8 tensors (torchvision's layout)."""

    def __init__(self, imgs, labels):
        self.imgs, self.labels = imgs, labels
        self.classes = ["a", "b", "c", "d", "e"]

    def __len__(self):
        return len(self.imgs)

    def __getitem__(self, i):
        return torch.from_numpy(self.imgs[i]).permute(2, 0, 1).contiguous(), \
            torch.tensor(self.labels[i])


def test_torch_dataset_of_chw_tensors():
    imgs, labels = images_and_labels()
    src = stoker.ExternalSource(TorchSet(imgs, labels))
    assert src.uri == "external:TorchSet"
    assert src.classes == ["a", "b", "c", "d", "e"] and src.num_classes == 5
    ref = batches(stoker.from_numpy(imgs, labels))
    for threads in (1, 2):
        assert_same(batches(src, threads), ref)
    # a non-contiguous CHW view (no copy made by the source) reads the same
    src = stoker.ExternalSource([(torch.from_numpy(imgs[i]).permute(2, 0, 1), int(labels[i]))
                                 for i in range(N)])
    assert_same(batches(src), ref)
    # HW gray tensors and arrays are one channel
    gray = imgs[..., 0].copy()
    src = stoker.ExternalSource([torch.from_numpy(g) for g in gray])
    assert np.array_equal(src[2][0], gray[2][:, :, None])


def test_generator_in_order_every_epoch_and_resume():
    imgs, labels = images_and_labels()
    made, pulled = [], []

    def gen():
        made.append(1)
        for i in range(N):
            pulled.append(i)
            yield imgs[i], int(labels[i])

    src = stoker.ExternalSource(gen, length=N, shape=(H, W, C))
    assert src.iterable and src.uri == "external:gen"
    ref = stoker.from_numpy(imgs, labels)
    L = stoker.Loader(src, batch_size=4, transforms=AUG, dtype="uint8", num_threads=2,
                      output="numpy", seed=3)
    R = stoker.Loader(ref, batch_size=4, transforms=AUG, dtype="uint8", num_threads=2,
                      output="numpy", seed=3)
    for epoch in range(2):  # a new pass each epoch: augmentations differ, order is kept
        got = [(np.array(x), np.array(y)) for x, y in L]
        assert_same(got, [(np.array(x), np.array(y)) for x, y in R])
    # one pass per epoch, and the loader's read-ahead into the next epoch
    # opens at most one more: no item is read twice within a pass
    assert 2 <= len(made) <= 3 and len(pulled) <= 3 * N

    # resume mid-epoch: the feed reads and drops up to the position
    it = iter(L)
    next(it)
    next(it)
    state = L.state_dict()
    rest = [(np.array(x), np.array(y)) for x, y in it]
    L2 = stoker.Loader(stoker.ExternalSource(gen, length=N, shape=(H, W, C)), batch_size=4,
                       transforms=AUG, dtype="uint8", num_threads=2, output="numpy", seed=3)
    L2.load_state_dict(state)
    assert_same([(np.array(x), np.array(y)) for x, y in L2], rest)

    # a one-shot generator object cannot give a pass per epoch
    with pytest.raises(TypeError, match=r"one-shot iterator \(generator\).*give the generator "
                                        r"function itself"):
        stoker.ExternalSource(gen(), length=N)


def test_iterable_rules():
    def gen():
        yield from (np.zeros((4, 4, 3), np.uint8) for _ in range(10))

    with pytest.raises(TypeError, match="give length="):
        stoker.ExternalSource(gen)
    src = stoker.ExternalSource(gen, length=10, shape=(4, 4, 3))
    for kw, what in ((dict(shuffle=True), "shuffle=True"), (dict(world_size=2, rank=0),
                     "world_size=2"), (dict(indices=[1, 2]), "indices")):
        with pytest.raises(ValueError, match="in order: it cannot run with %s" % what):
            stoker.Loader(src, **kw)
    # shorter than its length: the loader stops with a FormatError saying so
    # (naming the index a worker asked for past the end: 10, 11 or 12,
    # whichever thread got there first)
    short = stoker.ExternalSource(gen, length=13, shape=(4, 4, 3))
    with pytest.raises(stoker.FormatError,
                       match=r"external:gen: sample 1[012]: the iterable ended after 10 items, "
                             r"but the ExternalSource has length 13 \(pass length=10"):
        for _ in stoker.Loader(short, batch_size=4, num_threads=2, dtype="uint8"):
            pass
    # on_error="skip" does not hide it
    with pytest.raises(stoker.FormatError):
        for _ in stoker.Loader(short, batch_size=4, num_threads=2, on_error="skip"):
            pass
    # longer: only `length` items are read per pass
    src = stoker.ExternalSource(gen, length=6, shape=(4, 4, 3))
    assert sum(len(y) for _, y in stoker.Loader(src, batch_size=4)) == 6
    # random access into an iterable works by restarting it
    counting = stoker.ExternalSource(lambda: iter([(np.full((2, 2), i, np.uint8), i)
                                                   for i in range(5)]), length=5)
    assert [counting[i][1] for i in (3, 1, 4)] == [3, 1, 4]


def test_pil_images():
    imgs, labels = images_and_labels()
    pil = [PIL.fromarray(im) for im in imgs]
    src = stoker.ExternalSource([(p, int(labels[i])) for i, p in enumerate(pil)])
    assert_same(batches(src), batches(stoker.from_numpy(imgs, labels)))
    # L as one channel; a palette image converted to RGB (its colours, not its indices)
    pal = pil[0].convert("P")
    src = stoker.ExternalSource([pil[0].convert("L"), pal])
    assert np.array_equal(src[0][0], np.asarray(pil[0].convert("L"))[:, :, None])
    assert np.array_equal(src[1][0], np.asarray(pal.convert("RGB")))


@pytest.fixture
def jpeg_folder(tmp_path):
    """An image folder of JPEGs of varying sizes written by PIL."""
    rng = np.random.default_rng(4)
    root = tmp_path / "folder"
    for c in ("cat", "dog", "eel"):
        (root / c).mkdir(parents=True)
        for k in range(7):
            h, w = int(rng.integers(20, 40)), int(rng.integers(20, 40))
            px = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            PIL.fromarray(px).save(str(root / c / ("%02d.jpg" % k)), quality=90)
    return str(root)


def test_jpeg_bytes_match_the_image_folder(jpeg_folder):
    ds = stoker.open(jpeg_folder)
    labels = {}
    L = stoker.Loader(ds, batch_size=len(ds), pipeline="center_crop 8 | to u8", output="numpy")
    for _, y, idx in L.iter_with_indices():
        labels.update(zip(idx.tolist(), y.tolist()))
    raw = []
    for i in range(len(ds)):
        with open(ds.path(i), "rb") as f:
            raw.append(f.read())
    aug = [stoker.RandomResizedCrop(16), stoker.RandomHorizontalFlip()]
    ref = batches(ds, transforms=aug)
    for kind in ("bytes", "numpy", "torch"):
        enc = {"bytes": lambda b: b, "numpy": lambda b: np.frombuffer(b, np.uint8),
               "torch": lambda b: torch.frombuffer(bytearray(b), dtype=torch.uint8)}[kind]
        src = stoker.ExternalSource([(enc(b), labels[i]) for i, b in enumerate(raw)],
                                    classes=ds.classes)
        assert src.shape is None and src.classes == ["cat", "dog", "eel"]
        for threads in (1, 2):
            assert_same(batches(src, threads, transforms=aug), ref)
    # dict items read the same
    src = stoker.ExternalSource([{"image": b, "label": labels[i]} for i, b in enumerate(raw)])
    assert_same(batches(src, transforms=aug), ref)


# -- failures -------------------------------------------------------------------


class Flaky:
    """Items 0..n-1; __getitem__ raises for the indices in `bad`."""

    def __init__(self, n, bad):
        self.n, self.bad = n, bad
        self.imgs, self.labels = images_and_labels(n)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i in self.bad:
            raise KeyError("no record %d in the table" % i)
        return self.imgs[i], int(self.labels[i])


def test_exceptions_name_the_sample_and_skip_works():
    src = stoker.ExternalSource(Flaky(N, {5}), shape=(H, W, C))
    with pytest.raises(stoker.DataError) as e:
        for _ in stoker.Loader(src, batch_size=4, num_threads=2):
            pass
    msg = str(e.value)
    assert "external:Flaky: sample 5: KeyError: 'no record 5 in the table'" in msg, msg
    assert "test_external_source.py:" in msg and "in __getitem__" in msg, msg
    with pytest.raises(stoker.DataError, match="sample 5: KeyError"):
        src[5]

    flaky = Flaky(N, {3, 11, 12})
    src = stoker.ExternalSource(flaky, shape=(H, W, C))
    L = stoker.Loader(src, batch_size=4, num_threads=2, on_error="skip", dtype="uint8",
                      layout="NHWC", output="numpy")
    seen = []
    for x, y, idx in L.iter_with_indices():
        for row, i in zip(np.array(x), idx.tolist()):
            assert np.array_equal(row, flaky.imgs[i])
        seen += idx.tolist()
    assert sorted(seen) == sorted(set(range(N)) - {3, 11, 12})
    assert L.stats()["skipped"] == 3


@pytest.mark.parametrize("item, text", [
    (3.5, "the image is a float; ExternalSource reads encoded bytes"),
    (None, "the image is a NoneType"),
    ("a.jpg", "the image is a str"),
    (np.zeros((4, 4, 3), np.float32), "an image array of float32; ExternalSource reads uint8"),
    (np.zeros((1, 4, 4, 3), np.uint8), "an image array of 4 dimensions"),
    (np.zeros((4, 4, 5), np.uint8), "pixels of 4x4x5 (height, width and channels"),
    ((np.zeros((4, 4), np.uint8), 2.5), "the label is a float (2.5), not an integer"),
    ((np.zeros((4, 4), np.uint8), 1, "extra"), "a tuple of 3 values; an item is an image, "
                                               "(image, label) (declare more values"),
    ({"img": b"..."}, "a dict item needs an 'image' key; this one has ['img']"),
    (b"not a jpeg", "sample 1: "),
])
def test_wrong_items_are_clear_errors_naming_the_index(item, text):
    good = np.zeros((4, 4), np.uint8)
    src = stoker.ExternalSource([good, item, good])
    with pytest.raises(stoker.DataError) as e:
        for _ in stoker.Loader(src, batch_size=3, pipeline="resize 4,4 | to u8", num_threads=1):
            pass
    assert "external:list: sample 1: " in str(e.value), str(e.value)
    assert text in str(e.value), str(e.value)


def test_fixed_shape_is_checked_and_a_varying_one_needs_a_resize():
    good, other = np.zeros((4, 4, 3), np.uint8), np.zeros((4, 5, 3), np.uint8)
    src = stoker.ExternalSource([good, other], shape=(4, 4, 3))
    with pytest.raises(stoker.DataError, match="sample 1 is 4x5x3 pixels, but this dataset "
                                               "declares 4x4x3"):
        for _ in stoker.Loader(src, batch_size=2):
            pass
    with pytest.raises(stoker.SpecError, match="vary in size"):
        stoker.Loader(stoker.ExternalSource([good, other]), batch_size=2)


def test_extra_fields_are_read_by_field():
    rng = np.random.default_rng(2)
    boxes = [rng.random((i % 3, 4)).astype(np.float32) for i in range(6)]
    items = [(np.zeros((4, 4, 3), np.uint8), i, boxes[i], 100 + i, "caption %d" % i)
             for i in range(6)]
    fields = {"boxes": ("float32", (None, 4)), "image_id": "int64", "caption": "str"}
    src = stoker.ExternalSource(items, fields)
    assert src._field_infos() == [("image", 2, ()), ("label", 4, ()), ("boxes", 5, (0, 4)),
                                  ("image_id", 4, ()), ("caption", 6, ())]
    for i in range(6):
        data, _ = src._read_field(i, "boxes")
        assert np.array_equal(np.frombuffer(data, "<f4").reshape(-1, 4), boxes[i])
        assert np.frombuffer(src._read_field(i, "image_id")[0], "<i8")[0] == 100 + i
        assert src._read_field(i, "caption")[0] == b"caption %d" % i
        assert np.frombuffer(src._read_field(i, "label")[0], "<i8")[0] == i
    # dict items; lists convert; the loader reads image + label as before
    src = stoker.ExternalSource([{"image": it[0], "label": it[1], "boxes": it[2].tolist(),
                                  "image_id": it[3], "caption": it[4]} for it in items], fields)
    assert np.array_equal(np.frombuffer(src._read_field(4, "boxes")[0], "<f4"),
                          boxes[4].ravel())
    L = stoker.Loader(src, batch_size=6, pipeline="resize 4,4 | to u8", output="numpy")
    assert [y.tolist() for _, y in L] == [list(range(6))]
    # a value that does not fit its declaration names the sample and the field
    bad = stoker.ExternalSource([(np.zeros((2, 2), np.uint8), 0, [[1, 2, 3]], 1, "x")], fields)
    with pytest.raises(stoker.DataError,
                       match=r"sample 0: field 'boxes': ValueError: field 'boxes' \(float32 "
                             r"\(None, 4\)\): a value of shape \(1, 3\)"):
        bad._read_field(0, "boxes")
    bad = stoker.ExternalSource([(np.zeros((2, 2), np.uint8), 0, [], 1.5, "x")], fields)
    with pytest.raises(stoker.DataError, match="non-integer values"):
        bad._read_field(0, "image_id")
    with pytest.raises(stoker.DataError, match="a tuple of 2 values"):
        stoker.ExternalSource([(np.zeros((2, 2), np.uint8), 0)], fields)[0]
    for f, text in (({"label": "int64"}, "always there"), ({"x": "float64"}, "is not a type"),
                    ({"x": ("float32", (4, None))}, "the first may be None")):
        with pytest.raises(ValueError, match=text):
            stoker.ExternalSource(items, f)


def test_getitem_runs_once_per_sample_with_fields():
    """A sample's fields are read on the thread that read its image, right
    after it (the loader's order): __getitem__ runs once for all of them,
    whatever other threads read meanwhile."""
    calls = []

    class Src:
        def __len__(self):
            return 8

        def __getitem__(self, i):
            calls.append(i)
            return np.full((2, 2), i, np.uint8), i, [float(i)]

    src = stoker.ExternalSource(Src(), {"score": ("float32", (1,))})
    image_read = [threading.Event() for _ in range(2)]
    got = {}

    def worker(k, index):
        got[index] = [src[index][1]]
        image_read[k].set()
        image_read[1 - k].wait(10)  # both images read before either field
        got[index].append(np.frombuffer(src._read_field(index, "score")[0], "<f4")[0])

    threads = [threading.Thread(target=worker, args=(k, i)) for k, i in enumerate((3, 5))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {3: [3, 3.0], 5: [5, 5.0]}
    assert sorted(calls) == [3, 5]
    # a field read without the image read first fetches the item itself
    assert np.frombuffer(src._read_field(6, "score")[0], "<f4")[0] == 6.0
    assert sorted(calls) == [3, 5, 6]


# -- lifetime, interrupts, pickling -------------------------------------------------


def test_references_are_dropped():
    class Src(list):
        pass

    imgs, labels = images_and_labels()
    items = Src((imgs[i], int(labels[i])) for i in range(N))
    ref = weakref.ref(items)
    src = stoker.ExternalSource(items, shape=(H, W, C))
    del items
    L = stoker.Loader(src, batch_size=4, num_threads=2, transforms=AUG)
    for _ in range(3):
        for x, y in L:
            pass
    L.close()
    del L, src, x, y
    gc.collect()
    assert ref() is None


def test_keyboard_interrupt_with_a_slow_source(sigint_raises):
    class Slow:
        def __len__(self):
            return 40

        def __getitem__(self, i):
            time.sleep(0.01)
            return np.full((4, 4, 3), i, np.uint8), i

    L = stoker.Loader(stoker.ExternalSource(Slow(), shape=(4, 4, 3)), batch_size=2,
                      num_threads=2, prefetch=1, output="numpy", dtype="uint8", layout="NHWC")
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
    got = [(np.array(x), np.array(y)) for x, y in L]  # the epoch runs again, whole
    assert np.concatenate([y for _, y in got]).tolist() == list(range(40))
    assert all((x[:, 0, 0, 0] == y).all() for x, y in got)


def test_pickle_round_trip():
    imgs, labels = images_and_labels()
    src = stoker.ExternalSource([(imgs[i], int(labels[i])) for i in range(N)], shape=(H, W, C))
    again = pickle.loads(pickle.dumps(src))
    assert type(again) is stoker.ExternalSource and len(again) == N
    assert_same(batches(again), batches(src))


EXIT_CHILD = r"""
import time, numpy as np, stoker
class Slow:
    def __len__(self):
        return 1000
    def __getitem__(self, i):
        time.sleep(0.001)
        return np.full((4, 4, 3), i % 256, np.uint8), i
L = stoker.Loader(stoker.ExternalSource(Slow(), shape=(4, 4, 3)), batch_size=8, num_threads=2,
                  pipeline="to u8")
it = iter(L)
for _ in range(3):
    next(it)
print("exiting", flush=True)
"""


def test_interpreter_exit_with_a_loader_reading_python():
    """Workers in the middle of __getitem__ when the script ends: the loader
    is closed at exit, before the interpreter shuts down."""
    env = dict(os.environ)
    env["PYTHONPATH"] = PY_PATH + os.pathsep + env.get("PYTHONPATH", "")
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", EXIT_CHILD], capture_output=True, text=True,
                           env=env, timeout=120)
        assert p.returncode == 0 and p.stdout == "exiting\n", p.stderr
        assert "Fatal" not in p.stderr, p.stderr
