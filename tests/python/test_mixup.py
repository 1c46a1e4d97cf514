"""stoker.Mixup (Loader(batch_transform=...)): batch-level Mixup/CutMix with
soft labels, checked against an independent NumPy reference of timm's
formulas (timm.data.mixup: mixup_target, rand_bbox, rand_bbox_minmax,
cutmix_bbox_and_lam, Mixup._mix_batch/_mix_pair/_mix_elem) fed with the drawn
parameters, the documented draw procedure replayed from its Philox key, and
hand-computed label values. Float32 results are compared exactly (the same
IEEE operations in the same order); float16/bfloat16 exactly too (one
rounding of the float32 result)."""
import math

import numpy as np
import pytest

import stoker

torch = pytest.importorskip("torch")

N, H, W, C, NC = 22, 12, 10, 3, 7
DOMAIN = 0x6D69787570


@pytest.fixture(scope="module")
def ds():
    rng = np.random.default_rng(5)
    return stoker.from_numpy(rng.integers(0, 256, (N, H, W, C), dtype=np.uint8),
                             rng.integers(0, NC, N))


def raw_batches(ds, **kw):
    """(images float32 numpy, labels) of a Loader without mixing."""
    L = stoker.Loader(ds, output="numpy", **kw)
    return [(np.array(x), np.array(y)) for x, y in L]


# -- the independent reference ------------------------------------------------

def ref_generator(seed, epoch, position, rank=0):
    bits = np.random.Philox(key=np.array([seed, DOMAIN], dtype=np.uint64),
                            counter=np.array([0, position, epoch, rank], dtype=np.uint64))
    return np.random.Generator(bits)


def ref_rand_bbox(h, w, lam, g):
    """timm.data.mixup.rand_bbox (margin 0) with g's integers."""
    ratio = np.sqrt(1 - lam)
    cut_h, cut_w = int(h * ratio), int(w * ratio)
    cy = g.integers(0, h)
    cx = g.integers(0, w)
    yl = np.clip(cy - cut_h // 2, 0, h)
    yh = np.clip(cy + cut_h // 2, 0, h)
    xl = np.clip(cx - cut_w // 2, 0, w)
    xh = np.clip(cx + cut_w // 2, 0, w)
    return int(yl), int(yh), int(xl), int(xh)


def ref_batch_params(seed, epoch, position, mixup_alpha, cutmix_alpha, prob, switch_prob,
                     h=H, w=W):
    """timm's _params_per_batch + cutmix_bbox_and_lam(correct_lam=True)."""
    g = ref_generator(seed, epoch, position)
    lam, use_cutmix, box = 1.0, False, None
    if g.random() < prob:
        if mixup_alpha > 0 and cutmix_alpha > 0:
            use_cutmix = g.random() < switch_prob
            lam = g.beta(cutmix_alpha, cutmix_alpha) if use_cutmix else \
                g.beta(mixup_alpha, mixup_alpha)
        elif mixup_alpha > 0:
            lam = g.beta(mixup_alpha, mixup_alpha)
        else:
            use_cutmix = True
            lam = g.beta(cutmix_alpha, cutmix_alpha)
        lam = float(lam)
    if use_cutmix and lam != 1.0:
        box = ref_rand_bbox(h, w, lam, g)
        yl, yh, xl, xh = box
        lam = 1.0 - (yh - yl) * (xh - xl) / float(h * w)
    return lam, use_cutmix, box


def ref_targets(labels, lam, smoothing, nc=NC, mode="batch"):
    """timm.data.mixup.mixup_target, float32, lam per row: in 'batch' mode
    lam is a Python float (1 - lam in double, then float32), in 'pair' and
    'elem' a float32 tensor (the stored lam rounded, 1 - lam in float32)."""
    off = smoothing / nc
    on = 1.0 - smoothing + off
    y = np.asarray(labels).astype(np.int64)
    y1 = np.full((len(y), nc), off, dtype=np.float32)
    y1[np.arange(len(y)), y] = on
    y2 = y1[::-1]
    lam = np.broadcast_to(np.asarray(lam, dtype=np.float64), (len(y),))
    if mode == "batch":
        return (y1 * lam.astype(np.float32)[:, None]
                + y2 * (1.0 - lam).astype(np.float32)[:, None])
    lam32 = lam.astype(np.float32)
    return y1 * lam32[:, None] + y2 * (np.float32(1.0) - lam32)[:, None]


def ref_mix_rows(x, lam, cutmix, boxes):
    """timm's _mix_elem loop (the reference of every mode): row i mixed with
    the original row B-1-i; lam in float32 arithmetic."""
    orig = x.copy()
    out = x.copy()
    b = len(x)
    for i in range(b):
        j = b - i - 1
        if lam[i] == 1.0 and not cutmix[i]:
            continue
        if cutmix[i]:
            yl, yh, xl, xh = boxes[i]
            out[i][:, yl:yh, xl:xh] = orig[j][:, yl:yh, xl:xh]
        else:
            out[i] = orig[i] * np.float32(lam[i]) + orig[j] * np.float32(1.0 - lam[i])
    return out


# -- tests ----------------------------------------------------------------------

@pytest.mark.parametrize("output", ["numpy", "torch"])
def test_mixup_only_matches_reference(ds, output):
    kw = dict(batch_size=8, shuffle=True, seed=3, transforms=[stoker.Normalize([0.5] * 3, [0.25] * 3)])
    raw = raw_batches(ds, **kw)
    m = stoker.Mixup(mixup_alpha=0.8, cutmix_alpha=0.0, num_classes=NC, label_smoothing=0.1)
    L = stoker.Loader(ds, output=output, batch_transform=m, **kw)
    n = 0
    for pos, ((x, y), (rx, ry)) in enumerate(zip(L, raw)):
        lam, cut, box = ref_batch_params(3, 0, pos, 0.8, 0.0, 1.0, 0.5)
        assert not cut and m.last_params.position == pos
        assert m.last_params.lam[0] == lam
        want = rx * np.float32(lam) + rx[::-1] * np.float32(1.0 - lam)
        np.testing.assert_array_equal(np.asarray(x), want)
        np.testing.assert_array_equal(np.asarray(y), ref_targets(ry, lam, 0.1))
        assert np.asarray(y).dtype == np.float32 and np.asarray(y).shape == (len(rx), NC)
        n += 1
    assert n == len(raw) == 3


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_cutmix_only_box_and_lam(ds, layout):
    kw = dict(batch_size=10, shuffle=True, seed=11, layout=layout)
    raw = raw_batches(ds, **kw)
    m = stoker.Mixup(mixup_alpha=0.0, cutmix_alpha=1.0, num_classes=NC, label_smoothing=0.0)
    L = stoker.Loader(ds, output="numpy", batch_transform=m, **kw)
    for pos, ((x, y), (rx, ry)) in enumerate(zip(L, raw)):
        lam, cut, box = ref_batch_params(11, 0, pos, 0.0, 1.0, 1.0, 0.5)
        assert cut and tuple(m.last_params.boxes[0]) == box
        assert m.last_params.lam[0] == lam
        yl, yh, xl, xh = box
        assert lam == 1.0 - (yh - yl) * (xh - xl) / (H * W)  # corrected by the clipped area
        want = rx.copy()
        if layout == "NCHW":
            want[:, :, yl:yh, xl:xh] = rx[::-1, :, yl:yh, xl:xh]
        else:
            want[:, yl:yh, xl:xh, :] = rx[::-1, yl:yh, xl:xh, :]
        np.testing.assert_array_equal(x, want)
        np.testing.assert_array_equal(y, ref_targets(ry, lam, 0.0))


def test_switch_and_correct_lam_false():
    both = stoker.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=NC, switch_prob=0.5)
    kinds = set()
    for pos in range(40):
        p = both.params(8, H, W, seed=2, epoch=1, position=pos)
        g = ref_generator(2, 1, pos)
        assert g.random() < 1.0
        use_cut = g.random() < 0.5
        lam = float(g.beta(1.0, 1.0) if use_cut else g.beta(0.8, 0.8))
        kinds.add(bool(use_cut))
        assert bool(p.cutmix[0]) == use_cut
        if use_cut:
            box = ref_rand_bbox(H, W, lam, g)
            assert tuple(p.boxes[0]) == box
            yl, yh, xl, xh = box
            assert p.lam[0] == 1.0 - (yh - yl) * (xh - xl) / (H * W)
        else:
            assert p.lam[0] == lam
    assert kinds == {True, False}
    # correct_lam=False keeps the drawn lam with the (clipped) box.
    nc = stoker.Mixup(mixup_alpha=0.0, cutmix_alpha=1.0, num_classes=NC, correct_lam=False)
    p = nc.params(8, H, W, seed=2, epoch=0, position=0)
    g = ref_generator(2, 0, 0)
    g.random()
    lam = float(g.beta(1.0, 1.0))
    assert p.lam[0] == lam and tuple(p.boxes[0]) == ref_rand_bbox(H, W, lam, g)


def test_cutmix_minmax():
    m = stoker.Mixup(mixup_alpha=0.0, cutmix_alpha=0.3, cutmix_minmax=(0.2, 0.8), num_classes=NC)
    assert m.cutmix_alpha == 1.0  # forced, as timm
    for pos in range(10):
        p = m.params(4, 20, 30, seed=1, position=pos)
        g = ref_generator(1, 0, pos)
        g.random()
        g.beta(1.0, 1.0)
        cut_h = g.integers(int(20 * 0.2), int(20 * 0.8))
        cut_w = g.integers(int(30 * 0.2), int(30 * 0.8))
        yl = g.integers(0, 20 - cut_h)
        xl = g.integers(0, 30 - cut_w)
        assert tuple(p.boxes[0]) == (yl, yl + cut_h, xl, xl + cut_w)
        assert p.lam[0] == 1.0 - cut_h * cut_w / 600.0


def test_label_smoothing_hand_values():
    m = stoker.Mixup(mixup_alpha=1.0, num_classes=10, label_smoothing=0.1)
    y = m.soft_labels(np.array([3, 3, 5]), 0.7)
    # off = 0.1/10 = 0.01, on = 1 - 0.1 + 0.01 = 0.91; row 0 pairs with row 2 (label 5).
    assert y.dtype == np.float32 and y.shape == (3, 10)
    assert y[0, 3] == pytest.approx(0.91 * 0.7 + 0.01 * 0.3, abs=1e-7)  # 0.64
    assert y[0, 5] == pytest.approx(0.01 * 0.7 + 0.91 * 0.3, abs=1e-7)  # 0.28
    assert y[0, 0] == pytest.approx(0.01, abs=1e-7)
    assert y[1, 3] == pytest.approx(0.91, abs=1e-7)  # paired with itself (middle row)
    np.testing.assert_allclose(y.sum(1), 1.0, atol=1e-6)


@pytest.mark.parametrize("output", ["numpy", "torch"])
def test_prob_zero_unchanged_with_smoothed_labels(ds, output):
    kw = dict(batch_size=8, shuffle=True, seed=4)
    raw = raw_batches(ds, **kw)
    m = stoker.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, prob=0.0, num_classes=NC)
    for (x, y), (rx, ry) in zip(stoker.Loader(ds, output=output, batch_transform=m, **kw), raw):
        np.testing.assert_array_equal(np.asarray(x), rx)
        want = np.full((len(ry), NC), 0.1 / NC, dtype=np.float32)
        want[np.arange(len(ry)), ry] = 1.0 - 0.1 + 0.1 / NC
        np.testing.assert_array_equal(np.asarray(y), want)
    m.mixup_enabled = False  # timm's switch: no mixing, smoothed labels
    m.mix_prob = 1.0
    for (x, y), (rx, ry) in zip(stoker.Loader(ds, output=output, batch_transform=m, **kw), raw):
        np.testing.assert_array_equal(np.asarray(x), rx)


@pytest.mark.parametrize("mode", ["pair", "elem"])
def test_pair_elem_modes(ds, mode):
    kw = dict(batch_size=9, shuffle=True, seed=8)  # odd: pair leaves the middle row
    raw = raw_batches(ds, **kw)
    m = stoker.Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, mode=mode, num_classes=NC,
                     label_smoothing=0.1)
    for pos, ((x, y), (rx, ry)) in enumerate(zip(stoker.Loader(ds, output="torch",
                                                                batch_transform=m, **kw), raw)):
        p = m.last_params
        b = len(rx)
        n = b // 2 if mode == "pair" else b
        # the documented draws (timm's _params_per_elem), then boxes sample by sample
        g = ref_generator(8, 0, pos)
        use_cut = g.random(n) < 0.5
        lam_mix = np.where(use_cut, g.beta(1.0, 1.0, n), g.beta(0.8, 0.8, n))
        lam = np.where(g.random(n) < 1.0, lam_mix.astype(np.float32), np.float32(1.0))
        lam = lam.astype(np.float64)
        boxes = np.zeros((n, 4), dtype=np.int64)
        for i in range(n):
            if use_cut[i] and lam[i] != 1.0:
                boxes[i] = ref_rand_bbox(H, W, lam[i], g)
                yl, yh, xl, xh = boxes[i]
                lam[i] = 1.0 - (yh - yl) * (xh - xl) / float(H * W)
        if mode == "pair":
            mid = b - 2 * n
            lam = np.concatenate([lam, np.ones(mid), lam[::-1]])
            use_cut = np.concatenate([use_cut, np.zeros(mid, bool), use_cut[::-1]])
            boxes = np.concatenate([boxes, np.zeros((mid, 4), np.int64), boxes[::-1]])
        np.testing.assert_array_equal(p.lam, lam)
        np.testing.assert_array_equal(p.cutmix, use_cut)
        np.testing.assert_array_equal(p.boxes, boxes)
        np.testing.assert_array_equal(x.numpy(), ref_mix_rows(rx, lam, use_cut, boxes))
        np.testing.assert_array_equal(y.numpy(), ref_targets(ry, lam, 0.1, mode=mode))
        if mode == "pair" and b % 2:
            np.testing.assert_array_equal(x.numpy()[b // 2], rx[b // 2])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_dtypes_round_once(ds, dtype):
    kw = dict(batch_size=8, shuffle=True, seed=6)
    raw = raw_batches(ds, **kw)  # float32
    m = stoker.Mixup(mixup_alpha=0.8, num_classes=NC)
    for out in ("torch", "numpy"):
        for pos, ((x, y), (rx, ry)) in enumerate(zip(
                stoker.Loader(ds, output=out, dtype=dtype, batch_transform=m, **kw), raw)):
            lam = m.last_params.lam[0]
            hx = torch.from_numpy(rx).to(getattr(torch, dtype)).float().numpy()  # the unmixed batch
            want = torch.from_numpy(hx * np.float32(lam) + hx[::-1] * np.float32(1.0 - lam))
            want = want.to(getattr(torch, dtype))  # round to nearest even, once
            got = x if out == "torch" else torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) \
                if dtype == "bfloat16" else torch.from_numpy(x)
            assert torch.equal(got, want)


def test_deterministic_across_loaders_and_resume(ds):
    def loader(threads, **kw):
        return stoker.Loader(ds, batch_size=4, shuffle=True, seed=1, aug_seed=9, output="numpy",
                             num_threads=threads,
                             transforms=[stoker.RandomHorizontalFlip()],
                             batch_transform=stoker.Mixup(0.8, 1.0, num_classes=NC), **kw)
    a, b = loader(1), loader(3, prefetch=2)
    a.set_epoch(2)
    b.set_epoch(2)
    ea = [(x.copy(), y) for x, y in a]
    eb = [(x.copy(), y) for x, y in b]
    assert len(ea) == 6
    for (xa, ya), (xb, yb) in zip(ea, eb):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    # another aug_seed draws other parameters
    other = stoker.Mixup(0.8, 1.0, num_classes=NC)
    assert any(other.params(4, H, W, seed=9, position=p).lam[0]
               != other.params(4, H, W, seed=10, position=p).lam[0] for p in range(4))
    # resume mid-epoch: the remaining batches are the same
    c = loader(2)
    c.set_epoch(2)
    it = iter(c)
    for _ in range(2):
        next(it)
    st = c.state_dict()
    assert st["batch_transform"].startswith("Mixup(")
    d = loader(1)
    d.load_state_dict(st)
    rest = [(x.copy(), y) for x, y in d]
    assert len(rest) == 4
    for (xr, yr), (xa, ya) in zip(rest, ea[2:]):
        np.testing.assert_array_equal(xr, xa)
        np.testing.assert_array_equal(yr, ya)
    # a state taken with other Mixup settings is refused, with the fix named
    e = stoker.Loader(ds, batch_size=4, shuffle=True, seed=1, aug_seed=9, output="numpy",
                      transforms=[stoker.RandomHorizontalFlip()],
                      batch_transform=stoker.Mixup(0.2, num_classes=NC))
    with pytest.raises(ValueError, match=r"batch_transform .*delete state\['batch_transform'\]"):
        e.load_state_dict(st)


def test_positions_and_indices(ds):
    m = stoker.Mixup(1.0, 1.0, num_classes=NC)
    L = stoker.Loader(ds, batch_size=5, shuffle=True, seed=2, output="torch", batch_transform=m)
    L.set_epoch(3)
    ref = stoker.Mixup(1.0, 1.0, num_classes=NC)
    n = 0
    for pos, (x, y, idx) in enumerate(L.iter_with_indices()):
        assert y.dtype == torch.float32 and y.shape == (len(idx), NC)
        p = m.last_params
        assert (p.epoch, p.position) == (3, pos)
        q = ref.params(len(idx), H, W, seed=2, epoch=3, position=pos)
        np.testing.assert_array_equal(p.lam, q.lam)
        np.testing.assert_array_equal(p.boxes, q.boxes)
        # and the documented draws, replayed independently ('batch' mode)
        g = ref_generator(2, 3, pos)
        assert g.random() < 1.0  # prob
        use_cut = g.random() < 0.5  # switch_prob
        lam = float(g.beta(1.0, 1.0))
        if use_cut and lam != 1.0:
            yl, yh, xl, xh = ref_rand_bbox(H, W, lam, g)
            lam = 1.0 - (yh - yl) * (xh - xl) / float(H * W)
        np.testing.assert_array_equal(p.lam, np.full(len(idx), lam))
        n += 1
    assert n == len(L) == 5
    assert L.epoch == 4  # the pass completed as without a batch transform
    for x, y, paths in L.iter_with_paths():
        assert y.shape[1] == NC


def test_views_rows(ds):
    m = stoker.Mixup(0.8, 0.0, num_classes=NC, label_smoothing=0.0)
    kw = dict(batch_size=4, seed=3, views=2)
    raw = raw_batches(ds, **kw)
    L = stoker.Loader(ds, output="numpy", batch_transform=m, **kw)
    (x, y), (rx, ry) = next(iter(L)), raw[0]
    assert x.shape[0] == 8 and np.array_equal(ry[0::2], ry[1::2])
    lam = m.last_params.lam[0]
    np.testing.assert_array_equal(x, rx * np.float32(lam) + rx[::-1] * np.float32(1.0 - lam))
    np.testing.assert_array_equal(y, ref_targets(ry, lam, 0.0))


def test_refusals(ds):
    m = stoker.Mixup(0.8, 1.0, num_classes=NC)
    with pytest.raises(ValueError, match="needs float output.*dtype='float32'"):
        stoker.Loader(ds, dtype="uint8", batch_transform=m)
    with pytest.raises(ValueError, match="not 'dlpack'"):
        stoker.Loader(ds, output="dlpack", batch_transform=m)
    with pytest.raises(TypeError, match="must be a callable or a stoker.Mixup"):
        stoker.Loader(ds, batch_transform=42)  # any callable is a batch transform
    with pytest.raises(TypeError, match="needs float images .* got uint8"):
        m(np.zeros((2, 3, 4, 4), np.uint8), np.zeros(2, np.int64))
    bad = [
        (dict(mixup_alpha=0.0, cutmix_alpha=0.0), ValueError, "mixup_alpha or cutmix_alpha must be > 0"),
        (dict(mixup_alpha=-1.0), ValueError, "mixup_alpha must be >= 0"),
        (dict(prob=1.5), ValueError, "prob must be <= 1"),
        (dict(switch_prob=float("nan")), ValueError, "switch_prob must be finite"),
        (dict(mode="row"), ValueError, "mode must be 'batch', 'pair' or 'elem'"),
        (dict(num_classes=0), ValueError, "num_classes must be >= 1"),
        (dict(num_classes=2.5), TypeError, "num_classes must be an int"),
        (dict(cutmix_minmax=(0.5,)), ValueError, "cutmix_minmax must be a pair"),
        (dict(cutmix_minmax=(0.8, 0.2)), ValueError, "cutmix_minmax must have min < max"),
        (dict(label_smoothing="x"), TypeError, "label_smoothing must be a number"),
    ]
    for kw, exc, msg in bad:
        with pytest.raises(exc, match=msg):
            stoker.Mixup(**kw)
    small = stoker.Mixup(0.0, cutmix_minmax=(0.1, 0.2), num_classes=NC)
    with pytest.raises(ValueError, match="leaves no box size for an image height of 4"):
        small(np.zeros((2, 3, 4, 40), np.float32), np.zeros(2, np.int64))
    with pytest.raises(ValueError, match=r"label 9 \(row 1\) is outside \[0, num_classes=7\)"):
        m(np.zeros((2, 3, 4, 4), np.float32), np.array([1, 9]))
    with pytest.raises(ValueError, match="3 labels for 2 images"):
        m(np.zeros((2, 3, 4, 4), np.float32), np.array([1, 2, 3]))
    few = stoker.from_numpy(np.zeros((4, 4, 4, 3), np.uint8), [0, 1, 2, 9])
    L = stoker.Loader(few, batch_size=4, output="numpy",
                      batch_transform=stoker.Mixup(num_classes=5))
    with pytest.raises(ValueError, match=r"label 9 \(row 3\) is outside \[0, num_classes=5\)"):
        next(iter(L))

