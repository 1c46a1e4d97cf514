"""on_error='replace' (issue 26): full batches under drop_last whatever is
corrupt, the same for any thread count and after a resume, and
``loader.skipped`` naming the files that failed. The reference is PIL:
every delivered row must be the decoded pixels of the file its index names,
and never one of the corrupt files."""
import hashlib
import os

import numpy as np
import pytest
from PIL import Image

from module_util import stoker

N, BAD = 48, (3, 17, 18, 40, 45)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("replace")
    rng = np.random.default_rng(5)
    for i in range(N):
        cls = root / ("c%d" % (i % 3))
        cls.mkdir(exist_ok=True)
        path = cls / ("img%02d.png" % i)
        pixels = rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(path)
        if i in BAD:  # cut inside the image data: the header still reads
            data = path.read_bytes()
            path.write_bytes(data[:len(data) // 2])
    return str(root)


def make(folder, **kw):
    opts = dict(batch_size=8, shuffle=True, seed=11, drop_last=True, pipeline="center_crop 6,5 | to u8 hwc",
                on_error="replace", output="numpy")
    opts.update(kw)
    return stoker.Loader("imagefolder:" + folder, **opts)


def run(loader, batches=None):
    out = []
    for x, y, idx in loader.iter_with_indices():
        out.append((np.array(x), np.array(y), np.array(idx)))
        if batches is not None and len(out) == batches:
            break
    return out


def digest(batches):
    h = hashlib.sha256()
    for x, y, idx in batches:
        h.update(x.tobytes()), h.update(y.tobytes()), h.update(idx.tobytes())
    return h.hexdigest()


def test_full_batches_same_for_any_thread_count(folder):
    one = make(folder, num_threads=1)
    ds = one.dataset
    bad_paths = {ds.path(i) for i in range(len(ds))
                 if int(os.path.basename(ds.path(i))[3:5]) in BAD}
    assert len(bad_paths) == len(BAD)
    got = run(one)
    assert [len(x) for x, _, _ in got] == [8] * (N // 8)
    for x, y, idx in got:
        assert len(set(idx.tolist())) == len(idx)  # never twice in a batch
        for row, i in enumerate(idx.tolist()):
            path = ds.path(i)
            assert path not in bad_paths
            np.testing.assert_array_equal(x[row], np.asarray(Image.open(path).convert("RGB")))
            assert y[row] == int(os.path.basename(os.path.dirname(path))[1:])
    # Every corrupt file is named, with its reason, once per failure.
    listed = one.skipped
    assert {p for _, p, _ in listed} == bad_paths
    assert all(ds.path(i) == p and p in r for i, p, r in listed)
    assert one.stats()["skipped"] == len(listed)
    for threads in (4, 2):
        again = make(folder, num_threads=threads)
        assert digest(run(again)) == digest(got)
        assert again.skipped == listed


def test_skip_lists_the_files_too(folder):
    loader = make(folder, on_error="skip", num_threads=3)
    got = run(loader)
    sizes = [len(x) for x, _, _ in got]
    assert sum(sizes) < N and min(sizes) < 8  # skip: short batches
    assert len(loader.skipped) == sum(8 - s for s in sizes)
    loader.skipped.clear()
    assert loader.skipped == []


def test_resume_gives_the_same_continuation(folder):
    ref = run(make(folder, num_threads=2))
    a = make(folder, num_threads=2)
    head = run(a, 2)
    state = a.state_dict()
    b = make(folder, num_threads=4)
    b.load_state_dict(state)
    assert digest(head + run(b)) == digest(ref)


def test_bad_policy_is_named(folder):
    with pytest.raises(ValueError, match="'replace'"):
        make(folder, on_error="fill")
