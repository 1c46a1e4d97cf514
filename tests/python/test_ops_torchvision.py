"""Raw-image ops against torchvision (Debian's python3-torchvision) as the
independent reference: same parameters, same values."""
import numpy as np
import pytest
import torch
import torchvision.transforms.functional as F
from torchvision import transforms

from stk_ctypes import Error, run_epoch

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


def images(n, h=32, w=32, c=3, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, h, w, c), dtype=np.uint8), rng.integers(0, 10, n)


def tv(img_hwc):
    return torch.from_numpy(img_hwc).permute(2, 0, 1).contiguous()  # uint8 CHW tensor


def to_float_normalized(t_u8, mean, std):
    return F.normalize(t_u8.float().div(255), mean, std)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric"])
def test_pad_center_crop_flip_normalize_match_torchvision(mode):
    x, y = images(20, 30, 26)
    spec = ("pad 3,2 fill=7 mode=%s | center_crop 31,29 | flip 1 | normalize cifar10 | to f32 chw"
            % mode) if mode == "constant" else \
           ("pad 3,2 mode=%s | center_crop 31,29 | flip 1 | normalize cifar10 | to f32 chw" % mode)
    out, labels, idx = run_epoch(x, y, spec, batch_size=8, no_shuffle=1)
    assert out.shape == (20, 3, 31, 29)
    assert (labels == y).all() and (idx == np.arange(20)).all()
    for i in range(20):
        t = F.pad(tv(x[i]), [3, 2], fill=7 if mode == "constant" else 0, padding_mode=mode)
        t = F.center_crop(t, [31, 29])
        t = F.hflip(t)
        ref = to_float_normalized(t, CIFAR_MEAN, CIFAR_STD).numpy()
        np.testing.assert_allclose(out[i], ref, rtol=1e-5, atol=1e-5)


def test_random_crop_flip_is_some_torchvision_crop_and_uniform():
    """Every output equals RandomCrop(32, padding=4)+flip for some (top, left,
    flip) torchvision could draw; over many samples all 81 offsets appear
    about equally often and half are flipped."""
    n = 3000
    x, y = images(n, seed=1)
    out, _, idx = run_epoch(x, y, "pad 4 | random_crop 32 | flip 0.5 | to u8 hwc",
                            batch_size=100, seed=3)
    counts = np.zeros((9, 9), int)
    flips = 0
    for k in range(n):
        src = np.pad(x[idx[k]], ((4, 4), (4, 4), (0, 0)))
        found = None
        for top in range(9):
            for left in range(9):
                crop = src[top:top + 32, left:left + 32]
                if np.array_equal(out[k], crop):
                    found = (top, left, 0)
                elif np.array_equal(out[k], crop[:, ::-1]):
                    found = (top, left, 1)
                if found:
                    break
            if found:
                break
        assert found is not None, "sample %d is not a padded crop" % k
        counts[found[0], found[1]] += 1
        flips += found[2]
    expect = n / 81
    chi2 = ((counts - expect) ** 2 / expect).sum()
    assert chi2 < 160, chi2  # df = 80: P(chi2 > 160) ~ 1e-7
    assert abs(flips / n - 0.5) < 0.05


def test_normalize_values_match_torchvision_f16_and_hwc():
    x, y = images(10, 28, 28, 1)
    out, _, _ = run_epoch(x, y, "normalize fashion-mnist | to f16 hwc", batch_size=4, no_shuffle=1)
    assert out.dtype == np.float16 and out.shape == (10, 28, 28, 1)
    for i in range(10):
        ref = to_float_normalized(tv(x[i]), (0.2860,), (0.3530,)).permute(1, 2, 0)
        # Both round a float32 to half; the float32s may differ by an ulp, so
        # allow one half-precision step.
        np.testing.assert_allclose(out[i].astype(np.float32), ref.half().float().numpy(),
                                   rtol=2 ** -10, atol=2 ** -14)


def test_f32_without_normalize_is_to_tensor():
    x, y = images(6, 8, 8, 3)
    out, _, _ = run_epoch(x, y, "to f32 chw", batch_size=6, no_shuffle=1)
    for i in range(6):
        np.testing.assert_allclose(out[i], F.to_tensor(x[i]).numpy(), rtol=1e-6, atol=1e-7)


def test_bad_spec_raises_with_position():
    x, y = images(2, 8, 8, 3)
    with pytest.raises(Error, match="random_crop"):
        run_epoch(x, y, "pad 1 | random_crop 40")


def bf16_bits(t):
    """torch's own float32 -> bfloat16 rounding, as the uint16 bit patterns."""
    return torch.from_numpy(np.ascontiguousarray(t, np.float32)).to(torch.bfloat16) \
        .view(torch.int16).numpy().view(np.uint16)


@pytest.mark.parametrize("spec", [
    "pad 2 | random_crop 12 | flip | normalize cifar10",          # fixed-shape kernel
    "flip | normalize 0.5 0.25",
    "resize 9,11 | normalize cifar10",                             # image pipeline, u8 rows
    "resize 9,11 | color_jitter 0.4 0.4 0.4 0.1 | normalize cifar10",  # float rows
])
@pytest.mark.parametrize("layout", ["chw", "hwc"])
def test_bf16_is_torch_rounding_of_f32(spec, layout):
    """`to bf16` is exactly torch's .to(torch.bfloat16) of the `to f32`
    output of the same spec (round to nearest even), in both layouts."""
    x, y = images(12, 14, 13, 3, seed=5)
    f32, _, _ = run_epoch(x, y, spec + " | to f32 " + layout, batch_size=5, seed=9)
    b16, _, _ = run_epoch(x, y, spec + " | to bf16 " + layout, batch_size=5, seed=9)
    assert b16.dtype == np.uint16 and b16.shape == f32.shape
    assert np.array_equal(b16, bf16_bits(f32))


def test_bf16_ties_and_specials():
    """Values exactly halfway between two bfloat16s round to the even one,
    as torch does: 1/255 * v for every v is checked bit for bit, with the
    aliases `bfloat16`."""
    x = np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1)
    out, _, _ = run_epoch(x, [0], "to bfloat16 hwc", batch_size=1)
    ref = F.to_tensor(x[0]).permute(1, 2, 0).numpy()
    assert np.array_equal(out[0], bf16_bits(ref))
    with pytest.raises(Error, match="known: u8, f16, bf16, f32"):
        run_epoch(x, [0], "to b16")
