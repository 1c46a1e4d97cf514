"""The epoch order from Python: shuffle="block" (the same order as
`stoker order --shuffle block`, each block read within one window), and a
state_dict taken with 4 ranks resumed on 3 (every sample of the epoch once
over the union of ranks, apart from the pad rule)."""
import collections

import numpy as np
import pytest

from module_util import CIFAR_SPEC, cli_digest, epoch_copies, loader_digest, run_stoker, stoker

N = 185  # conftest.write_cifar10: 5 files of 37


def make(cifar_dir, **kw):
    opts = dict(pipeline=CIFAR_SPEC, batch_size=8, shuffle=True, seed=11, output="numpy")
    opts.update(kw)
    return stoker.Loader("cifar10:" + cifar_dir[0], **opts)


def indices(loader):
    return [int(i) for batch in epoch_copies(loader, True) for i in batch[2]]


def test_block_shuffle_is_the_cli_order_and_block_local(cifar_dir):
    loader = make(cifar_dir, shuffle="block", block_size=10, shuffle_window=3)
    loader.set_epoch(2)
    got = indices(loader)
    assert sorted(got) == list(range(N))
    cli = run_stoker("order", N, "--seed", 11, "--epoch", 2, "--shuffle", "block",
                     "--block-size", 10, "--shuffle-window", 3).stdout.split()
    assert got == [int(x) for x in cli]
    # 19 blocks (the last one of 5 records) in windows of 3: taking the
    # blocks in the order they first appear, each 3 of them fill exactly the
    # next run of positions (the last window has 1).
    where = collections.defaultdict(list)
    for pos, i in enumerate(got):
        where[i // 10].append(pos)
    order = sorted(where, key=lambda b: where[b][0])
    start = 0
    for w in range(0, 19, 3):
        group = [p for b in order[w:w + 3] for p in where[b]]
        assert sorted(group) == list(range(start, start + len(group)))
        start += len(group)
    assert start == N
    # Not the dataset order, and another epoch gives another order.
    assert got != sorted(got)
    loader.set_epoch(3)
    assert indices(loader) != got


def test_bench_block_shuffle_same_batches_as_python(cifar_dir):
    uri = "cifar10:" + cifar_dir[0]
    want = loader_digest(make(cifar_dir, shuffle="block", block_size=10, shuffle_window=3,
                              seed=4), epochs=2)
    assert cli_digest(uri, CIFAR_SPEC, 8, 4, 2, "--shuffle", "block", "--block-size", 10,
                      "--shuffle-window", 3) == want
    assert cli_digest(uri, CIFAR_SPEC, 8, 4, 2) != want
    p = run_stoker("bench", uri, "--pipeline", CIFAR_SPEC, "--block-size", 10, check=False)
    assert p.returncode == 2 and "need --shuffle block" in p.stderr


def test_shuffle_values(cifar_dir):
    plain = indices(make(cifar_dir, shuffle=False))
    assert plain == list(range(N))
    assert indices(make(cifar_dir, shuffle="none")) == plain
    assert indices(make(cifar_dir, shuffle="global")) == indices(make(cifar_dir, shuffle=True))
    defaults = make(cifar_dir, shuffle="block")
    state = defaults.state_dict()
    assert (state["block_size"], state["shuffle_window"], state["flags"]) == (64, 16, 4)
    with pytest.raises(ValueError, match="shuffle must be"):
        make(cifar_dir, shuffle="blocks")
    with pytest.raises(ValueError, match="need shuffle='block'"):
        make(cifar_dir, block_size=8)
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        make(cifar_dir, shuffle="block", block_size=0)
    # A block-shuffle state does not fit a global-shuffle loader, nor one
    # with another block size.
    with pytest.raises(stoker.InvalidArgument, match="does not match"):
        make(cifar_dir).load_state_dict(state)
    with pytest.raises(stoker.InvalidArgument, match="does not match"):
        make(cifar_dir, shuffle="block", block_size=32).load_state_dict(state)


@pytest.mark.parametrize("shuffle", ["block", True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_resume_on_another_world_size(cifar_dir, shuffle, drop_last):
    kw = dict(shuffle=shuffle, drop_last=drop_last)
    seen = collections.Counter()
    states = []
    for r in range(4):
        a = make(cifar_dir, rank=r, world_size=4, **kw)
        a.set_epoch(1)
        it = a.iter_with_indices()
        for _ in range(3):
            seen.update(int(i) for i in np.asarray(next(it)[2]))
        states.append(a.state_dict())
    start = 3 * 8 * 4
    rest = N - start
    per = rest // 3 // 8 * 8 if drop_last else -(-rest // 3)
    taken = 0
    for r in range(3):
        b = make(cifar_dir, rank=r, world_size=3, **kw)
        full = len(b)
        b.load_state_dict(states[(r + 1) % 4])  # any old rank's state
        assert b.epoch == 1
        assert len(b) == -(-per // 8)
        st = b.state_dict()
        assert (st["start_slot"], st["position"], st["world_size"]) == (start, 0, 3)
        b.set_epoch(1)  # the usual loop: keeps the restored place
        rows = indices(b)
        assert len(rows) == per
        seen.update(rows)
        taken += len(rows)
        assert b.epoch == 2 and len(b) == full  # then full epochs again
    if drop_last:
        assert max(seen.values()) == 1
        assert sum(seen.values()) == start + taken
    else:
        assert set(seen) == set(range(N))
        assert sum(seen.values()) - N == per * 3 - rest  # the padded slots
        assert max(seen.values()) <= 2
