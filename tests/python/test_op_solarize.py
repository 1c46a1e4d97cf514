"""`solarize` (src/ops/op_solarize.c) against torchvision's
F.solarize / RandomSolarize on uint8 images, before and after a resize,
and its C-side argument checks."""
import numpy as np
import pytest
import torch
import torchvision.transforms.functional as F
from PIL import Image

import stoker
from point_ops import assert_c_refuses, check_per_sample_draw, images, tv_hwc
from stk_ctypes import run_epoch


def tv_solarize(hwc, threshold):
    return tv_hwc(F.solarize, hwc, threshold)


@pytest.mark.parametrize("threshold", [0, 1, 100, 127.5, 128, 200.25, 254, 255])
def test_values_match_torchvision(threshold):
    x, y = images(6)
    out, _, idx = run_epoch(x, y, "solarize %r p=1 | to u8 hwc" % threshold, batch_size=3,
                            no_shuffle=1)
    for i in range(6):
        np.testing.assert_array_equal(out[i], tv_solarize(x[idx[i]], threshold))


def test_position_before_and_after_resize_and_with_normalize():
    x, y = images(3, 40, 36)
    before, _, ib = run_epoch(x, y, "solarize 128 p=1 | resize 15,17", batch_size=3,
                              no_shuffle=1)
    after, _, ia = run_epoch(x, y, "resize 15,17 | vflip 1 | solarize threshold=128 p=1 | "
                             "normalize imagenet", batch_size=3, no_shuffle=1)
    for i in range(3):
        src = tv_solarize(x[ib[i]], 128)
        ref = np.asarray(Image.fromarray(src).resize((17, 15), Image.BILINEAR))
        np.testing.assert_array_equal(before[i], ref)
        resized = np.asarray(Image.fromarray(x[ia[i]]).resize((17, 15), Image.BILINEAR))
        t = torch.from_numpy(tv_solarize(resized[::-1], 128)).permute(2, 0, 1)
        ref = F.normalize(t.float().div(255), [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
        np.testing.assert_allclose(after[i], ref.numpy(), rtol=1e-6, atol=1e-6)


def test_probability_is_a_per_sample_draw():
    n = 400
    x, y = images(n, 4, 4)
    x |= 0x80  # solarize 128 changes every value
    check_per_sample_draw(x, y, "solarize 128 p=0.25", lambda v: tv_solarize(v, 128), 0.25,
                          seed=3)


@pytest.mark.parametrize("spec, words", [
    ("solarize 256", "solarize threshold must be a number from 0 to 255, got '256'"),
    ("solarize -1", "solarize threshold must be a number from 0 to 255, got '-1'"),
    ("solarize", "expected threshold after 'solarize' (solarize THRESHOLD [p=P])"),
    ("solarize 9 p=-0.5", "solarize p must be a number from 0 to 1, got '-0.5'"),
    ("solarize 9 0.5 7", "unexpected argument '7' to 'solarize'"),
    ("solarise 9", "did you mean 'solarize'?"),
    ("rotate 10 | solarize 9", "solarize must come before rotate"),
])
def test_argument_and_order_errors_come_from_c(spec, words):
    assert_c_refuses(spec, words)


def test_class_spec():
    assert stoker.RandomSolarize(127.5, p=1).spec() == "solarize threshold=127.5 p=1"
    with pytest.raises(stoker.SpecError, match="from 0 to 255"):
        stoker.RandomSolarize(300)
    x, y = images(2)
    out, _, idx = run_epoch(x, y, stoker.to_spec([stoker.RandomSolarize(64, p=1)]),
                            batch_size=2, no_shuffle=1)
    np.testing.assert_array_equal(out[0], tv_solarize(x[idx[0]], 64))
