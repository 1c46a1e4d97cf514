"""`posterize` (src/ops/op_posterize.c) against torchvision's
F.posterize / RandomPosterize on uint8 images, at both positions a point op
can take (before and after a resize), and its C-side argument checks."""
import numpy as np
import pytest
import torch
import torchvision.transforms.functional as F
from PIL import Image

import stoker
from point_ops import assert_c_refuses, check_per_sample_draw, images, tv_hwc
from stk_ctypes import run_epoch


def tv_posterize(hwc, bits):
    return tv_hwc(F.posterize, hwc, bits)


@pytest.mark.parametrize("bits", range(9))
def test_values_match_torchvision(bits):
    x, y = images(6)
    out, _, idx = run_epoch(x, y, "posterize %d p=1 | to u8 hwc" % bits, batch_size=3,
                            no_shuffle=1)
    for i in range(6):
        np.testing.assert_array_equal(out[i], tv_posterize(x[idx[i]], bits))


def test_gray_and_after_normalize_match_torchvision():
    x, y = images(4, c=1)
    out, _, idx = run_epoch(x, y, "flip 1 | posterize bits=2 p=1 | normalize mnist | to f32 chw",
                            batch_size=4, no_shuffle=1)
    for i in range(4):
        t = torch.from_numpy(x[idx[i]]).permute(2, 0, 1).contiguous()
        ref = F.normalize(F.posterize(F.hflip(t), 2).float().div(255), [0.1307], [0.3081])
        np.testing.assert_allclose(out[i], ref.numpy(), rtol=1e-6, atol=1e-6)


def test_position_before_and_after_resize():
    """Before a resize it posterizes the source (Pillow then resizes the
    posterized image); after it, the resized pixels."""
    x, y = images(3, 40, 36)
    before, _, ib = run_epoch(x, y, "posterize 3 p=1 | resize 15,17", batch_size=3, no_shuffle=1)
    after, _, ia = run_epoch(x, y, "resize 15,17 | posterize 3 p=1", batch_size=3, no_shuffle=1)
    for i in range(3):
        src = x[ib[i]]
        ref_b = np.asarray(Image.fromarray(tv_posterize(src, 3)).resize((17, 15), Image.BILINEAR))
        np.testing.assert_array_equal(before[i], ref_b)
        resized = np.asarray(Image.fromarray(x[ia[i]]).resize((17, 15), Image.BILINEAR))
        np.testing.assert_array_equal(after[i], tv_posterize(resized, 3))
    assert not np.array_equal(before, after)


def test_probability_is_a_per_sample_draw():
    n = 400
    x, y = images(n, 4, 4)
    x |= 0x0f  # posterize 4 changes every value
    # p defaults to 0.5
    check_per_sample_draw(x, y, "posterize 4", lambda v: tv_posterize(v, 4), 0.5, seed=7)
    none, _, _ = run_epoch(x, y, "posterize 4 p=0", batch_size=50, seed=7)
    assert np.array_equal(np.sort(none.reshape(n, -1), 0), np.sort(x.reshape(n, -1), 0))


@pytest.mark.parametrize("spec, words", [
    ("posterize 9", "posterize bits must be a whole number from 0 to 8, got '9'"),
    ("posterize 2.5", "posterize bits must be a whole number from 0 to 8, got '2.5'"),
    ("posterize", "expected bits after 'posterize' (posterize BITS [p=P])"),
    ("posterize 3 p=2", "posterize p must be a number from 0 to 1, got '2'"),
    ("posterize 3 q=1", "unknown key 'q' for 'posterize' (known: bits, p)"),
    ("posterize 3 bits=3", "'bits' is given twice"),
    ("posterize x", "expected a number for bits after 'posterize', got 'x'"),
    ("posterise 3", "did you mean 'posterize'?"),
    ("normalize mnist | posterize 3", "posterize must come before normalize"),
    ("color_jitter 0.1 0.1 0.1 | posterize 3",
     "posterize must come before color_jitter (it works on uint8 pixels"),
])
def test_argument_and_order_errors_come_from_c(spec, words):
    assert_c_refuses(spec, words)
    with pytest.raises(stoker.SpecError) as e:  # the class leaves the checks to C
        stoker.RandomPosterize(9)
    assert "from 0 to 8" in str(e.value)


def test_pad_after_posterize_is_refused():
    with pytest.raises(stoker.SpecError, match="pad after posterize is not supported"):
        stoker.spec_check("posterize 3 | pad 2", 8, 8, 3)


def test_class_spec():
    t = stoker.RandomPosterize(3, p=0.25)
    assert t.spec() == "posterize bits=3 p=0.25"
    with pytest.raises(TypeError, match="bits must be a number"):  # no text into the spec
        stoker.RandomPosterize("3 | rotate 10")
    assert stoker.RandomPosterize(np.int64(2), p=np.float32(0.5)).spec() == \
        "posterize bits=2 p=0.5"
    x, y = images(2)
    out, _, idx = run_epoch(x, y, stoker.to_spec([stoker.RandomPosterize(5, p=1)]),
                            batch_size=2, no_shuffle=1)
    np.testing.assert_array_equal(out[0], tv_posterize(x[idx[0]], 5))


def test_stream_is_shared_with_other_ops():
    """The draw happens in spec order: `flip | posterize` and `posterize |
    flip` consume the stream differently but each sample is one of the four
    outcomes torchvision could give."""
    x, y = images(64, 6, 6)
    x |= 0x0f
    out, _, idx = run_epoch(x, y, "flip | posterize 4", batch_size=64, seed=1)
    seen = set()
    for i in range(64):
        s = x[idx[i]]
        for f in (0, 1):
            for p in (0, 1):
                r = s[:, ::-1] if f else s
                r = tv_posterize(r, 4) if p else r
                if np.array_equal(out[i], r):
                    seen.add((f, p))
    assert seen == {(0, 0), (0, 1), (1, 0), (1, 1)}
