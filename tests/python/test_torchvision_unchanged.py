"""torchvision objects passed to stoker as they are must not fail where
torchvision does not (issue 26): RandomRotation(10), whose default
interpolation is NEAREST, runs (as the affine op) and matches
torchvision's F.rotate pixel for pixel; an interpolation stoker lacks is
refused with a message that says what to pass. CenterCrop larger than an
image zero-pads it, as torchvision does, bit for bit."""
import numpy as np
import pytest

from module_util import stoker

torch = pytest.importorskip("torch")
T = pytest.importorskip("torchvision.transforms")
F = pytest.importorskip("torchvision.transforms.functional")
IM = T.InterpolationMode


def _images():
    rng = np.random.default_rng(1)
    return rng.integers(0, 256, (6, 37, 45, 3), dtype=np.uint8)


@pytest.mark.parametrize("angle", [30.0, -12.5, 90.0, 173.0])
@pytest.mark.parametrize("fill", [0, 7])
def test_random_rotation_nearest_matches_torchvision(angle, fill):
    x = _images()
    # A fixed angle (LO == HI) makes the draw known, so the pixels can be
    # compared with torchvision's functional rotate on the same images.
    tv = T.RandomRotation((angle, angle), interpolation=IM.NEAREST, fill=fill)
    loader = stoker.Loader(stoker.from_numpy(x), batch_size=6, transforms=[tv],
                           output="numpy", dtype="float32")
    got = np.array(next(iter(loader))[0])
    ref = torch.stack([F.rotate(torch.from_numpy(im).permute(2, 0, 1).float() / 255, angle,
                                IM.NEAREST, fill=[fill / 255.0] * 3) for im in x]).numpy()
    assert got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)


def test_random_rotation_default_is_accepted_and_draws_within_the_range():
    # torchvision's RandomRotation(10) (interpolation NEAREST) used to be
    # refused; it runs now, on every image, with angles within +-10.
    x = _images()
    loader = stoker.Loader(stoker.from_numpy(x), batch_size=6, shuffle=True,
                           transforms=[T.RandomRotation(10)], output="numpy")
    assert loader.pipeline.startswith("affine -10:10 |")
    assert sum(np.array(b[0]).shape[0] for b in loader) == 6
    # The stoker class keeps bilinear as its default (the rotate op).
    assert stoker.RandomRotation(10).spec() == "rotate 10"
    assert stoker.RandomRotation((5, 20), interpolation="nearest").spec() == "affine -20:-5"


def test_random_rotation_refusal_says_what_to_pass():
    with pytest.raises(ValueError, match=r"RandomRotation: RandomRotation\(interpolation=.*"
                                         r"bicubic.*\) is not supported: pass "
                                         r"interpolation=InterpolationMode.BILINEAR or "
                                         r"InterpolationMode.NEAREST"):
        stoker.build_spec([T.RandomRotation(10, interpolation=IM.BICUBIC)])


# Sizes (H, W) against crops of 64: smaller on one axis, on both, odd and
# even differences, equal on one axis, larger on both (no padding).
PAD_SIZES = [(30, 40), (50, 20), (63, 64), (64, 7), (5, 5), (90, 33), (120, 130)]
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def _folder(tmp_path, gray=False):
    """PNGs of PAD_SIZES (lossless, so the pixels are exact) in one class
    folder, in name order; returns the PIL images (RGB, as decoded)."""
    from PIL import Image
    (tmp_path / "a").mkdir()
    rng = np.random.default_rng(2)
    ims = []
    for i, (h, w) in enumerate(PAD_SIZES):
        a = rng.integers(0, 256, (h, w) if gray else (h, w, 3), dtype=np.uint8)
        im = Image.fromarray(a)
        im.save(tmp_path / "a" / ("%d.png" % i))
        ims.append(im)
    return ims


def _run(tmp_path, transforms=None, pipeline=None, **kw):
    loader = stoker.Loader("imagefolder:" + str(tmp_path), batch_size=1,
                           transforms=transforms, pipeline=pipeline, output="numpy", **kw)
    return [np.array(b[0])[0] for b in loader]


@pytest.mark.parametrize("gray", [False, True])
@pytest.mark.parametrize("size", [64, (31, 70), (200, 9)])
def test_center_crop_pads_like_torchvision_uint8(tmp_path, gray, size):
    # torchvision's CenterCrop zero-pads an axis shorter than the crop
    # ((c - n) // 2 before, the rest after) and crops the other at its
    # centre; stoker did not pad (a DataError mid-epoch). Both the
    # torchvision object and the spec, bit for bit on uint8.
    ims = _folder(tmp_path, gray)
    h, w = (size, size) if isinstance(size, int) else size
    spec = "center_crop %d,%d | to u8 hwc" % (h, w)
    for got in (_run(tmp_path, pipeline=spec),
                _run(tmp_path, transforms=[T.CenterCrop(size)], dtype="uint8", layout="hwc")):
        assert len(got) == len(ims)
        for im, g in zip(ims, got):
            # (stoker decodes to RGB; padding gray then converting is the same)
            ref = np.asarray(T.CenterCrop(size)(im).convert("RGB"))
            np.testing.assert_array_equal(g, ref)


@pytest.mark.parametrize("spec,tv", [
    # a resize after the padded crop resamples over the zeros, as Pillow's
    # resize of the padded image does
    ("center_crop 300 | resize 224 | to u8 hwc", lambda: [T.CenterCrop(300), T.Resize(224)]),
    ("center_crop 50,90 | resize 40,30 interpolation=bicubic | to u8 hwc",
     lambda: [T.CenterCrop((50, 90)), T.Resize((40, 30), interpolation=IM.BICUBIC)]),
    ("center_crop 70 | resize 33 interpolation=nearest | to u8 hwc",
     lambda: [T.CenterCrop(70), T.Resize(33, interpolation=IM.NEAREST)]),
    # flips before and after, and a second crop inside the padded one
    ("flip 1 | center_crop 64 | vflip 1 | center_crop 41,50 | to u8 hwc",
     lambda: [T.RandomHorizontalFlip(1.0), T.CenterCrop(64), T.RandomVerticalFlip(1.0),
              T.CenterCrop((41, 50))]),
    ("center_crop 80 | flip 1 | resize 20 | to u8 hwc",
     lambda: [T.CenterCrop(80), T.RandomHorizontalFlip(1.0), T.Resize(20)]),
    # a point op after the pad maps the zeros too; one before it does not
    ("solarize 0 p=1 | center_crop 64 | posterize 3 p=1 | resize 50 | to u8 hwc",
     lambda: [T.RandomSolarize(0, p=1.0), T.CenterCrop(64), T.RandomPosterize(3, p=1.0),
              T.Resize(50)]),
    ("posterize 2 p=1 | center_crop 64 | solarize 0 p=1 | resize 50 | to u8 hwc",
     lambda: [T.RandomPosterize(2, p=1.0), T.CenterCrop(64), T.RandomSolarize(0, p=1.0),
              T.Resize(50)]),
    # resize first (the shorter side to 64) keeps the crop inside: unchanged
    ("resize 64 | center_crop 60 | to u8 hwc", lambda: [T.Resize(64), T.CenterCrop(60)]),
])
def test_center_crop_pads_then_more_ops_uint8(tmp_path, spec, tv):
    ims = _folder(tmp_path)
    got = _run(tmp_path, pipeline=spec)
    for im, g in zip(ims, got):
        ref = np.asarray(T.Compose(tv())(im))
        np.testing.assert_array_equal(g, ref)


def test_center_crop_pads_then_normalize_float(tmp_path):
    # padded pixels become (0 - mean) / std after Normalize, as in
    # torchvision; the float path as exact as the other float tests.
    ims = _folder(tmp_path)
    tv = [T.CenterCrop(300), T.RandomHorizontalFlip(1.0), T.ToTensor(), T.Normalize(MEAN, STD)]
    for got in (_run(tmp_path, pipeline="center_crop 300 | flip 1 | normalize imagenet | "
                                        "to f32 chw"),
                _run(tmp_path, transforms=tv)):
        for im, g in zip(ims, got):
            ref = T.Compose(tv)(im).numpy()
            assert g.shape == ref.shape == (3, 300, 300)
            np.testing.assert_allclose(g, ref, rtol=0, atol=1e-6)
            # a corner is border on every image here
            np.testing.assert_allclose(g[:, 0, 0], -np.array(MEAN) / np.array(STD), atol=1e-6)


def test_random_crop_larger_than_the_image_still_raises(tmp_path):
    # torchvision's RandomCrop (without pad_if_needed) raises on an image
    # smaller than the crop; stoker keeps a DataError naming the sizes.
    _folder(tmp_path)
    loader = stoker.Loader("imagefolder:" + str(tmp_path), batch_size=1,
                           transforms=[T.RandomCrop(64)], output="numpy")
    with pytest.raises(stoker.DataError, match=r"random_crop 64x64 \(HxW\) does not fit the "
                                               r"\d+x\d+ image; resize first or crop less"):
        list(loader)
