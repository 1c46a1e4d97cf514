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
from stk_ctypes import run_epoch


def images(n, h=12, w=10, c=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (n, h, w, c), dtype=np.uint8)
    flat = x.reshape(-1)
    flat[:min(256, flat.size)] = np.arange(256, dtype=np.uint8)[:flat.size]  # every value
    return x, rng.integers(0, 10, n)


def tv_invert(hwc):
    t = torch.from_numpy(np.array(hwc)).permute(2, 0, 1).contiguous()
    return F.invert(t).permute(1, 2, 0).numpy()


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
    out, _, idx = run_epoch(x, y, "invert", batch_size=50, seed=5)  # p defaults to 0.5
    hit = 0
    for i in range(n):
        if not np.array_equal(out[i], x[idx[i]]):
            np.testing.assert_array_equal(out[i], tv_invert(x[idx[i]]))
            hit += 1
    assert 140 < hit < 260, hit  # binomial(400, 0.5): 6 standard deviations
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
    with pytest.raises(stoker.SpecError) as e:
        stoker.spec_check(spec, 8, 8, 3)
    assert words in str(e.value)


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
