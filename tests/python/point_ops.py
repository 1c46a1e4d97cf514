"""What the uint8 point-op tests (test_op_posterize/solarize/invert) share:
test images that hold every byte value, torchvision applied to an HWC
array, the per-sample probability check and the C-message check."""
import numpy as np
import pytest
import torch

import stoker
from stk_ctypes import run_epoch


def images(n, h=12, w=10, c=3, seed=0):
    """n uint8 HWC images (the first 256 bytes are 0..255, so every value
    occurs) and n labels."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (n, h, w, c), dtype=np.uint8)
    flat = x.reshape(-1)
    flat[:min(256, flat.size)] = np.arange(256, dtype=np.uint8)[:flat.size]
    return x, rng.integers(0, 10, n)


def tv_hwc(fn, hwc, *args):
    """torchvision functional `fn` on a uint8 HWC array, back to HWC."""
    t = torch.from_numpy(np.array(hwc)).permute(2, 0, 1).contiguous()
    return fn(t, *args).permute(1, 2, 0).numpy()


def check_per_sample_draw(x, y, spec, ref, p, seed):
    """Run `spec` (applied with probability p) over x, whose every image the
    op changes: each output is either its input or ref(input), and the
    count applied lies within 6 standard deviations of binomial(n, p)."""
    n = len(x)
    out, _, idx = run_epoch(x, y, spec, batch_size=50, seed=seed)
    hit = 0
    for i in range(n):
        if not np.array_equal(out[i], x[idx[i]]):
            np.testing.assert_array_equal(out[i], ref(x[idx[i]]))
            hit += 1
    sd = (n * p * (1 - p)) ** 0.5
    assert n * p - 6 * sd < hit < n * p + 6 * sd, hit
    return hit


def assert_c_refuses(spec, words):
    """stoker.spec_check refuses `spec` with C's message containing `words`."""
    with pytest.raises(stoker.SpecError) as e:
        stoker.spec_check(spec, 8, 8, 3)
    assert words in str(e.value)
