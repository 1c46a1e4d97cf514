"""`invert` (src/ops/op_invert.c) against torchvision's F.invert /
RandomInvert on uint8 images, before and after a resize; its C-side
argument checks; and its Python class, generated from the op table (this op
touched no Python file)."""
import numpy as np
import pytest
import torch
import torchvision.transforms as T
import torchvision.transforms.functional as F
from PIL import Image

import stoker
from point_ops import assert_c_refuses, check_per_sample_draw, images, tv_hwc
from stk_ctypes import run_epoch


def tv_invert(hwc):
    return tv_hwc(F.invert, hwc)


@pytest.mark.parametrize("spec", ["invert 1", "invert p=1", "invert 1.0 | to u8 hwc"])
def test_values_match_torchvision(spec):
    x, y = images(6)
    out, _, idx = run_epoch(x, y, spec, batch_size=3, no_shuffle=1)
    for i in range(6):
        np.testing.assert_array_equal(out[i], tv_invert(x[idx[i]]))
    assert 255 - 7 == tv_invert(np.full((1, 1, 1), 7, np.uint8))[0, 0, 0]  # the reference


def test_gray_before_resize_and_after_with_normalize():
    x, y = images(3, 40, 36, c=1)
    before, _, ib = run_epoch(x, y, "invert 1 | resize 15,17", batch_size=3, no_shuffle=1)
    after, _, ia = run_epoch(x, y, "resize 15,17 | invert 1 | normalize mnist", batch_size=3,
                             no_shuffle=1)
    for i in range(3):
        src = tv_invert(x[ib[i]])[:, :, 0]
        ref = np.asarray(Image.fromarray(src).resize((17, 15), Image.BILINEAR))
        np.testing.assert_array_equal(before[i][:, :, 0], ref)
        resized = np.asarray(Image.fromarray(x[ia[i]][:, :, 0]).resize((17, 15), Image.BILINEAR))
        t = torch.from_numpy(tv_invert(resized[:, :, None])).permute(2, 0, 1)
        ref = F.normalize(t.float().div(255), [0.1307], [0.3081])
        np.testing.assert_allclose(after[i], ref.numpy(), rtol=1e-6, atol=1e-6)


def test_probability_is_a_per_sample_draw():
    n = 400
    x, y = images(n, 4, 4)
    check_per_sample_draw(x, y, "invert", tv_invert, 0.5, seed=5)  # p defaults to 0.5
    none, _, _ = run_epoch(x, y, "invert 0", batch_size=50, seed=5)
    assert np.array_equal(np.sort(none.reshape(n, -1), 0), np.sort(x.reshape(n, -1), 0))


@pytest.mark.parametrize("spec, words", [
    ("invert 2", "invert p must be a number from 0 to 1, got '2'"),
    ("invert -0.5", "invert p must be a number from 0 to 1, got '-0.5'"),
    ("invert 0.5 0.5", "unexpected argument '0.5' to 'invert'"),
    ("invert q=1", "unknown key 'q' for 'invert' (known: p)"),
    ("inverse", "did you mean 'invert'?"),
    ("normalize mnist | invert", "invert must come before normalize"),
    ("rotate 10 | invert", "invert must come before rotate (it works on uint8 pixels"),
])
def test_argument_and_order_errors_come_from_c(spec, words):
    assert_c_refuses(spec, words)


def test_generated_class_mirrors_torchvision():
    """stoker.RandomInvert exists with torchvision's signature (p=0.5),
    writes its spec, checks its value in C and gives torchvision's output."""
    assert stoker.RandomInvert().spec() == "invert p=0.5"
    assert stoker.RandomInvert(0.25) == stoker.RandomInvert(p=0.25)
    assert repr(stoker.RandomInvert(1)) == "RandomInvert(p=1)"
    with pytest.raises(stoker.SpecError, match="invert p must be a number from 0 to 1"):
        stoker.RandomInvert(1.5)
    x, y = images(4, c=3)
    loader = stoker.Loader(stoker.from_numpy(x, y), batch_size=4, shuffle=False,
                           transforms=[stoker.RandomInvert(p=1)], dtype="uint8",
                           layout="NCHW", output="numpy")
    (batch, labels), = list(loader)
    tv = T.Compose([T.RandomInvert(p=1)])
    for i in range(4):
        ref = tv(torch.from_numpy(x[i]).permute(2, 0, 1))
        np.testing.assert_array_equal(batch[i], ref.numpy())
