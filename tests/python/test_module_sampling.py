"""Sampling options from Python: a lazy Loader (no worker thread and no
batch buffer until the first iteration or warmup(); the same batches as an
eager one), indices= (a subset, each once per epoch), weights= and
balance_classes= (frequencies against the weights / equal classes, within 3
sigma), num_samples=, aug_seed= (the order kept, the augmentation changed)
and views=K (K*B rows, view 0 the plain row), with state_dict resume."""
import os

import numpy as np
import pytest

from module_util import CIFAR_SPEC, assert_same_batches, epoch_copies, stoker

N = 185  # conftest.write_cifar10: 5 files of 37


def make(cifar_dir, **kw):
    opts = dict(pipeline=CIFAR_SPEC, batch_size=8, shuffle=True, seed=11, output="numpy")
    opts.update(kw)
    return stoker.Loader("cifar10:" + cifar_dir[0], **opts)


def threads():
    return len(os.listdir("/proc/self/task"))


def drawn(loader):
    return np.concatenate([b[2] for b in epoch_copies(loader, True)])


def test_lazy_loader_starts_nothing_until_iterated(cifar_dir):
    before = threads()
    lazy = make(cifar_dir, num_threads=3)
    st = lazy.stats()
    assert st["batches_allocated"] == 0 and st["pool_bytes"] == 0
    assert threads() == before
    assert len(lazy) == 24  # what needs no worker still works
    warm = make(cifar_dir, num_threads=3)
    warm.warmup()
    warm.warmup()
    assert threads() == before + 3 and warm.stats()["batches_allocated"] == 5
    eager = make(cifar_dir, num_threads=3, eager=True)
    assert threads() == before + 6 and eager.stats()["batches_allocated"] == 5
    a = epoch_copies(lazy, True)
    assert threads() == before + 9
    assert_same_batches(a, epoch_copies(warm, True))
    assert_same_batches(a, epoch_copies(eager, True))
    for l in (lazy, warm, eager):
        l.close()


def test_indices_subset_once_per_epoch(cifar_dir):
    subset = np.array([3, 180, 7, 50, 51, 52, 99, 100, 0, 184, 33], dtype=np.int64)
    loader = make(cifar_dir, indices=subset)
    assert len(loader) == 2
    seen = []
    for e in range(3):
        loader.set_epoch(e)
        got = drawn(loader)
        assert sorted(got.tolist()) == sorted(subset.tolist())
        seen.append(got.tolist())
    assert seen[0] != seen[1]
    # shuffle=False: the list in its order; labels follow the index.
    plain = make(cifar_dir, indices=subset.tolist(), shuffle=False)
    batches = epoch_copies(plain, True)
    assert np.concatenate([b[2] for b in batches]).tolist() == subset.tolist()
    assert np.concatenate([b[1] for b in batches]).tolist() == cifar_dir[2][subset].tolist()
    with pytest.raises(stoker.InvalidArgument, match=r"indices\[1\] = 185 is not below the "
                                                     r"dataset size 185"):
        make(cifar_dir, indices=[0, 185])
    with pytest.raises(ValueError, match="indices must not be negative"):
        make(cifar_dir, indices=[0, -1])
    with pytest.raises(ValueError, match="indices must not be negative"):
        make(cifar_dir, indices=np.array([0, -1]))
    with pytest.raises(ValueError, match="indices is empty"):
        make(cifar_dir, indices=np.array([], dtype=np.int64))


def test_a_boolean_mask_as_indices_is_refused(cifar_dir):
    # Issue 26: as integers a mask is indices 0 and 1, so it used to read
    # samples 0 and 1 over and over without a word.
    mask = np.zeros(N, dtype=bool)
    mask[[4, 9, 60, 184]] = True
    masks = [mask, mask.tolist(), [True, 3]]
    try:
        import torch
        masks.append(torch.from_numpy(mask))
    except ImportError:
        pass
    for m in masks:
        with pytest.raises(TypeError, match=r"indices is a boolean mask.*numpy\.flatnonzero"):
            make(cifar_dir, indices=m)
    # What the message suggests selects exactly the mask's samples.
    loader = make(cifar_dir, indices=np.flatnonzero(mask), shuffle=False)
    assert drawn(loader).tolist() == [4, 9, 60, 184]
    # Weights of 0/1 flags stay meaningful (a weight, not an index).
    make(cifar_dir, weights=mask)


def test_weights_frequencies_within_3_sigma(cifar_dir):
    w = np.zeros(N)
    w[[5, 17, 40, 41, 150]] = [1, 2, 3, 4, 10]
    draws = 40000
    loader = make(cifar_dir, pipeline="to u8 chw", batch_size=1000, weights=w, num_samples=draws)
    assert len(loader) == 40
    got = drawn(loader)
    assert len(got) == draws
    count = np.bincount(got, minlength=N)
    p = w / w.sum()
    sigma = np.sqrt(draws * p * (1 - p))
    assert np.all(np.abs(count - draws * p) <= 3 * sigma + (p == 0) * 0)
    assert count[p == 0].sum() == 0
    # A second loader draws the same; another epoch draws otherwise.
    again = make(cifar_dir, pipeline="to u8 chw", batch_size=1000, weights=w.tolist(),
                 num_samples=draws)
    assert np.array_equal(drawn(again), got)
    again.set_epoch(1)
    assert not np.array_equal(drawn(again), got)
    with pytest.raises(stoker.InvalidArgument, match="weight 3 is -1"):
        make(cifar_dir, weights=[1, 1, 1, -1] + [1] * (N - 4))
    with pytest.raises(stoker.InvalidArgument, match="3 weights for a population of 185"):
        make(cifar_dir, weights=[1, 2, 3])


def test_balance_classes_equalises_classes(cifar_dir):
    labels = cifar_dir[2].astype(np.int64)
    draws = 40000
    loader = make(cifar_dir, pipeline="to u8 chw", batch_size=1000, balance_classes=True,
                  num_samples=draws)
    got = drawn(loader)
    per_class = np.bincount(labels[got], minlength=10)
    classes = np.unique(labels)
    pc = 1 / len(classes)
    sigma = np.sqrt(draws * pc * (1 - pc))
    assert np.all(np.abs(per_class[classes] - draws * pc) <= 3 * sigma), per_class
    # The dataset itself is not balanced (the test means something).
    natural = np.bincount(labels, minlength=10)[classes] / N
    assert natural.max() - natural.min() > 0.03


def test_num_samples_subset_and_passes(cifar_dir):
    loader = make(cifar_dir, num_samples=50)
    got = drawn(loader)
    assert len(got) == 50 and len(set(got.tolist())) == 50
    full = drawn(make(cifar_dir))
    assert got.tolist() == full[:50].tolist()  # the first 50 of the epoch's order
    more = drawn(make(cifar_dir, num_samples=2 * N + 10))
    assert sorted(more[:N].tolist()) == list(range(N))
    assert sorted(more[N:2 * N].tolist()) == list(range(N))
    assert more[:N].tolist() != more[N:2 * N].tolist()


def test_aug_seed_and_views(cifar_dir):
    base = epoch_copies(make(cifar_dir), True)
    same = epoch_copies(make(cifar_dir, aug_seed=11), True)
    assert_same_batches(base, same)
    other = epoch_copies(make(cifar_dir, aug_seed=12), True)
    for a, b in zip(base, other):
        assert np.array_equal(a[2], b[2]) and np.array_equal(a[1], b[1])
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(base, other))

    views = epoch_copies(make(cifar_dir, views=2), True)
    assert len(views) == len(base)
    for (vi, vl, vx), (bi, bl, bx) in zip(views, base):
        assert vi.shape == (2 * bi.shape[0],) + bi.shape[1:]
        k = vi.reshape(bi.shape[0], 2, *bi.shape[1:])
        assert np.array_equal(k[:, 0], bi)  # view 0 is the plain row
        assert np.array_equal(vl[::2], bl) and np.array_equal(vl[1::2], bl)
        assert np.array_equal(vx[::2], bx)
    diff = [not np.array_equal(v[0][2 * i], v[0][2 * i + 1]) for v in views
            for i in range(len(v[0]) // 2)]
    assert sum(diff) > 0.8 * len(diff)
    with pytest.raises(ValueError, match="views must be >= 1"):
        make(cifar_dir, views=0)


def test_weighted_views_resume(cifar_dir):
    w = np.arange(1, N + 1, dtype=np.float64)
    kw = dict(weights=w, num_samples=100, views=2, aug_seed=3)
    whole = epoch_copies(make(cifar_dir, **kw), True)
    first = make(cifar_dir, **kw)
    it = iter(first)
    head = [tuple(np.array(a) for a in next(it)) for _ in range(4)]
    state = first.state_dict()
    resumed = make(cifar_dir, **kw)
    resumed.load_state_dict(state)
    rest = epoch_copies(resumed)
    assert len(head) + len(rest) == len(whole)
    for got, want in zip(head + rest, whole):
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    other = make(cifar_dir, weights=w, num_samples=100, views=2, aug_seed=4)
    with pytest.raises(stoker.InvalidArgument, match="sampling options"):
        other.load_state_dict(state)


def test_cli_order_and_bench_match_the_loader(cifar_dir, tmp_path):
    from module_util import cli_digest, loader_digest, run_stoker
    uri = "cifar10:" + cifar_dir[0]
    idx = tmp_path / "idx.txt"
    idx.write_text("# a subset\n3 180 7\n50,51\n99\n")
    w = tmp_path / "w.txt"
    w.write_text("\n".join(str(1 + i % 4) for i in range(6)) + "\n")
    want = drawn(make(cifar_dir, indices=[3, 180, 7, 50, 51, 99], weights=[1, 2, 3, 4, 1, 2],
                      num_samples=40))
    got = run_stoker("order", uri, "--seed", 11, "--indices", idx, "--weights", w,
                     "--num-samples", 40).stdout.split()
    assert [int(x) for x in got] == want.tolist()
    want = drawn(make(cifar_dir, balance_classes=True, num_samples=64))
    got = run_stoker("order", uri, "--seed", 11, "--balance-classes", "--num-samples",
                     64).stdout.split()
    assert [int(x) for x in got] == want.tolist()
    digest = loader_digest(make(cifar_dir, seed=4, aug_seed=9, views=3, indices=list(range(40)),
                                num_samples=50))
    assert cli_digest(uri, CIFAR_SPEC, 8, 4, 1, "--aug-seed", 9, "--views", 3, "--indices", idx,
                      "--num-samples", 50) != digest  # another subset
    full = tmp_path / "full.txt"
    full.write_text(" ".join(map(str, range(40))))
    assert cli_digest(uri, CIFAR_SPEC, 8, 4, 1, "--aug-seed", 9, "--views", 3, "--indices",
                      full, "--num-samples", 50) == digest
    assert loader_digest(make(cifar_dir, seed=4, balance_classes=True)) == cli_digest(
        uri, CIFAR_SPEC, 8, 4, 1, "--balance-classes")
    bad = tmp_path / "bad.txt"
    bad.write_text("1\n2\n-3\n")
    p = run_stoker("order", uri, "--indices", bad, check=False)
    assert p.returncode == 2 and "line 3: '-3' is not a non-negative integer" in p.stderr
    p = run_stoker("order", 10, "--balance-classes", check=False)
    assert p.returncode == 2 and "--balance-classes needs a DATASET" in p.stderr


def test_mixing_datasets_with_proportions(cifar_dir, tmp_path):
    from conftest import write_cifar10
    other_dir = str(tmp_path / "other")
    other_images, other_labels = write_cifar10(other_dir, per_file=4, files=5, seed=5)
    a = stoker.open("cifar10:" + cifar_dir[0])
    both = stoker.concat([a, "cifar10:" + other_dir])
    assert len(both) == N + 20 and both.format == "concat"
    img, lab = both[N + 3]
    assert lab == other_labels[3] and np.array_equal(img, other_images[3].transpose(1, 2, 0))
    loader = stoker.Loader([a, "cifar10:" + other_dir], proportions=[0.5, 0.5], batch_size=10,
                           num_samples=400, pipeline="to u8 chw", shuffle=True, seed=2,
                           output="numpy")
    assert len(loader) == 40
    for e in range(2):
        loader.set_epoch(e)
        batches = epoch_copies(loader, True)
        idx = np.concatenate([b[2] for b in batches])
        labels = np.concatenate([b[1] for b in batches])
        images = np.concatenate([b[0] for b in batches])
        small = idx >= N
        assert small.sum() == 200  # exactly half of the epoch from each
        # the 20 samples of the small set: 10 passes of its own permutation
        assert np.all(np.bincount(idx[small] - N, minlength=20) == 10)
        # ... interleaved: about half of them in the first half of the epoch
        assert 200 / 2 - 3 * np.sqrt(50) <= small[:200].sum() <= 200 / 2 + 3 * np.sqrt(50)
        want_labels = np.where(small, other_labels[np.clip(idx - N, 0, 19)],
                               cifar_dir[2][np.minimum(idx, N - 1)])
        assert np.array_equal(labels, want_labels)
        want_images = np.where(small[:, None, None, None],
                               other_images[np.clip(idx - N, 0, 19)],
                               cifar_dir[1][np.minimum(idx, N - 1)])
        assert np.array_equal(images, want_images)
    # `stoker order` prints the mixing loader's order (epoch 1 here).
    from module_util import run_stoker
    cli = run_stoker("order", N + 20, "--seed", 2, "--epoch", 1, "--mix-sizes", "%d,20" % N,
                     "--mix-weights", "0.5,0.5", "--num-samples", 400).stdout.split()
    assert [int(x) for x in cli] == idx.tolist()
    # Default proportions: the sizes (a shuffled concatenation, each sample once).
    plain = stoker.Loader([a, "cifar10:" + other_dir], batch_size=10, pipeline="to u8 chw",
                          shuffle=True, output="numpy")
    assert sorted(drawn(plain).tolist()) == list(range(N + 20))
    with pytest.raises(ValueError, match="proportions: 1 for 2 datasets"):
        stoker.Loader([a, a], proportions=[1])
    with pytest.raises(stoker.InvalidArgument, match="mix weight 1 is -1"):
        stoker.Loader([a, a], proportions=[1, -1])
    import pickle
    again = pickle.loads(pickle.dumps(both))
    assert len(again) == len(both) and again.format == "concat"
