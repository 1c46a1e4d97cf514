"""torchvision objects passed to stoker as they are must not fail where
torchvision does not (issue 26): RandomRotation(10), whose default
interpolation is NEAREST, runs (as the affine op) and matches
torchvision's F.rotate pixel for pixel; an interpolation stoker lacks is
refused with a message that says what to pass."""
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


def test_center_crop_larger_than_the_image_says_why(tmp_path):
    # torchvision's CenterCrop zero-pads a smaller image; stoker does not
    # (yet) on images of varying size: the error says so and what to do.
    from PIL import Image
    (tmp_path / "a").mkdir()
    rng = np.random.default_rng(2)
    for i, (h, w) in enumerate([(30, 40), (50, 20)]):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(
            tmp_path / "a" / ("%d.png" % i))
    loader = stoker.Loader("imagefolder:" + str(tmp_path), batch_size=2,
                           transforms=[T.CenterCrop(64)], output="numpy")
    with pytest.raises(stoker.DataError, match=r"center_crop 64x64 \(HxW\) does not fit the "
                                               r"\d+x\d+ image; .*torchvision's CenterCrop pads "
                                               r"a smaller image with zeros.*put a Resize"):
        next(iter(loader))
