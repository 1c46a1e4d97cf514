"""stoker.Loader delivers exactly what the C CLI delivers (same --digest),
for every output kind, dtype and layout; transforms build the same specs as
the text; stoker.open reads the same pixels as the raw files."""
import os
import pickle

import numpy as np
import pytest
import torch

from module_util import (CIFAR_SPEC, FASHION, as_numpy, cli_digest, loader_digest, stoker)


@pytest.mark.parametrize("output", ["torch", "numpy", "dlpack"])
def test_digest_equals_cli(cifar_dir, output):
    uri = "cifar10:" + cifar_dir[0]
    ref = cli_digest(uri, CIFAR_SPEC, 16, 7, 3)
    loader = stoker.Loader(uri, pipeline=CIFAR_SPEC, batch_size=16, seed=7, shuffle=True,
                           output=output)
    assert loader_digest(loader, epochs=3) == ref


@pytest.mark.parametrize("dtype,layout,to", [
    ("float32", "NCHW", "to f32 chw"), ("float32", "NHWC", "to f32 hwc"),
    ("float16", "NCHW", "to f16 chw"), ("float16", "NHWC", "to f16 hwc"),
    ("uint8", "NCHW", "to u8 chw"), ("uint8", "NHWC", "to u8 hwc")])
def test_dtype_layout_equal_cli(cifar_dir, dtype, layout, to):
    uri = "cifar10:" + cifar_dir[0]
    float_out = dtype != "uint8"
    stages = "pad 2 mode=reflect | random_crop 30,28 | vflip 0.3 | flip" + (
        " | normalize cifar10" if float_out else "")
    ref = cli_digest(uri, stages + " | " + to, 20, 3, 2, "--threads", 3)
    transforms = [stoker.Pad(2, padding_mode="reflect"), stoker.RandomCrop((30, 28)),
                  stoker.RandomVerticalFlip(0.3), stoker.RandomHorizontalFlip()]
    if float_out:
        transforms.append(stoker.Normalize((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)))
    for output in ("torch", "numpy"):
        loader = stoker.Loader(uri, transforms=transforms, batch_size=20, seed=3, shuffle=True,
                               dtype=dtype, layout=layout, output=output, num_threads=1)
        assert loader.dtype == dtype and loader.layout == layout
        x, y = next(iter(loader))
        shape = (20, 3, 30, 28) if layout == "NCHW" else (20, 30, 28, 3)
        assert tuple(x.shape) == shape and tuple(y.shape) == (20,)
        if output == "torch":
            assert x.dtype == getattr(torch, dtype) and y.dtype == torch.int64
        else:
            assert x.dtype == np.dtype(dtype) and y.dtype == np.int64
        del x, y
        # The preset and the explicit mean/std agree to the float32 bit.
        assert loader_digest(loader, epochs=2) == ref


def test_transforms_build_the_documented_specs():
    assert stoker.RandomCrop(32, padding=4).spec() == "random_crop 32 padding=4"
    assert stoker.RandomCrop([24, 20], padding=(1, 2), fill=(1, 2, 3)).spec() == \
        "random_crop 24,20 padding=1,2 fill=1,2,3"
    assert stoker.RandomCrop(8, padding=[1, 2, 3, 4], padding_mode="edge").spec() == \
        "random_crop 8 padding=1,2,3,4 mode=edge"
    assert stoker.CenterCrop((30,)).spec() == "center_crop 30"
    assert stoker.Pad(3, fill=7).spec() == "pad 3 fill=7"
    assert stoker.Pad((1, 2), padding_mode="symmetric").spec() == "pad 1,2 mode=symmetric"
    assert stoker.RandomHorizontalFlip().spec() == "flip 0.5"
    assert stoker.RandomVerticalFlip(p=1).spec() == "vflip 1"
    assert stoker.Normalize([0.5, 0.25, 1e-3], (0.2, 0.3, 0.4)).spec() == \
        "normalize mean=0.5,0.25,0.001 std=0.2,0.3,0.4"
    assert stoker.ToTensor().spec() == ""
    assert stoker.build_spec([stoker.ToTensor(), stoker.RandomHorizontalFlip(1)]) == \
        "flip 1 | to f32 chw"
    assert stoker.build_spec(None, "normalize mnist", "float16", "NHWC") == \
        "normalize mnist | to f16 hwc"
    assert stoker.build_spec(None, "flip | to u8") == "flip | to u8"
    assert stoker.build_spec(["flip 1"], dtype=torch.float16) == "flip 1 | to f16 chw"
    assert stoker.build_spec([], dtype=np.uint8, layout="nhwc") == "to u8 hwc"


def test_transform_errors_are_clear():
    with pytest.raises(ValueError, match="pad_if_needed"):
        stoker.RandomCrop(32, pad_if_needed=True)
    # The values are checked by the C parser only: SpecError (a ValueError)
    # with its message, when the transform is made.
    with pytest.raises(stoker.SpecError, match="unknown padding mode 'wrap' "
                       r"\(known: constant, edge, reflect, symmetric\)"):
        stoker.Pad(2, padding_mode="wrap")
    with pytest.raises(stoker.SpecError, match="flip probability must be from 0 to 1, got '1.5'"):
        stoker.RandomHorizontalFlip(1.5)
    with pytest.raises(stoker.SpecError, match="std must be > 0, got '0'"):
        stoker.Normalize([0.5], [0.0])
    with pytest.raises(stoker.SpecError, match="whole number from 0 to 255 in fill=, got '300'"):
        stoker.Pad(1, fill=300)
    with pytest.raises(stoker.SpecError, match="a crop size is H or H,W, got 3 values"):
        stoker.CenterCrop((1, 2, 3))
    with pytest.raises(ValueError, match="ToTensor"):
        stoker.build_spec([stoker.ToTensor()], dtype="uint8")
    with pytest.raises(ValueError, match="not both"):
        stoker.build_spec(["flip"], "flip")
    with pytest.raises(ValueError, match="already ends with a 'to'"):
        stoker.build_spec(None, "flip | to f16", dtype="float32")
    with pytest.raises(ValueError, match="dtype"):
        stoker.build_spec([], dtype="int32")
    with pytest.raises(TypeError, match="transforms must be stoker transforms, torchvision "
                                        "transforms or spec strings, got 3"):
        stoker.build_spec([3])
    torchvision = pytest.importorskip("torchvision")
    # torchvision objects are translated (tests/python/test_torchvision_port.py)
    assert stoker.build_spec([torchvision.transforms.RandomCrop(32)]) == \
        stoker.build_spec([stoker.RandomCrop(32)])


def test_open_reads_the_raw_pixels(cifar_dir):
    root, images, labels = cifar_dir
    ds = stoker.open("cifar10:" + root)
    assert len(ds) == len(images) and ds.shape == (32, 32, 3) and ds.format == "cifar10"
    assert ds.num_classes == 10
    for i in (0, 1, 100, len(ds) - 1):
        x, y = ds[i]
        assert isinstance(x, np.ndarray) and x.dtype == np.uint8 and x.shape == (32, 32, 3)
        assert np.array_equal(x, images[i].transpose(1, 2, 0)) and y == labels[i]
    assert np.array_equal(ds[-1][0], ds[len(ds) - 1][0])
    with pytest.raises(IndexError):
        ds[len(ds)]
    ds2 = pickle.loads(pickle.dumps(ds))  # re-opened by URI
    assert ds2.uri == ds.uri and np.array_equal(ds2[5][0], ds[5][0])


@pytest.mark.skipif(not os.path.isdir(FASHION), reason="dataset-fashion-mnist not installed")
def test_open_fashion_mnist():
    ds = stoker.open("fashion-mnist:" + FASHION)
    test = stoker.open("fashion-mnist:%s?split=test" % FASHION)
    assert len(ds) == 60000 and len(test) == 10000 and ds.shape == (28, 28, 1)
    x, y = ds[0]
    assert x.shape == (28, 28, 1) and 0 <= y < 10


def test_from_numpy_loader_values():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (50, 6, 5, 3), dtype=np.uint8)
    y = rng.integers(0, 10, 50)
    ds = stoker.from_numpy(x, y)
    loader = stoker.Loader(ds, batch_size=16, pipeline="flip 1 | to u8 hwc", output="numpy")
    got = [(a.copy(), b.copy()) for a, b in loader]
    assert [len(b) for _, b in got] == [16, 16, 16, 2]
    assert np.array_equal(np.concatenate([a for a, _ in got]), x[:, :, ::-1])
    assert np.array_equal(np.concatenate([b for _, b in got]), y)
    # ToTensor values (float without normalize), like torchvision's to_tensor.
    loader = stoker.Loader(ds, batch_size=50, transforms=[stoker.ToTensor()], output="torch")
    t, _ = next(iter(loader))
    ref = torch.from_numpy(x).permute(0, 3, 1, 2).float() / 255
    assert torch.allclose(t, ref, atol=1e-7)
    gray = stoker.from_numpy(x[..., 0])
    assert gray.shape == (6, 5, 1) and gray[3][1] == 0


def test_normalize_in_0_255_units():
    """DALI's spelling (0-255 means and stds) is refused without scale=255,
    naming the fix, in the spec, stoker.Normalize and a torchvision
    Normalize alike; with scale=255 the values equal NumPy's
    (x - mean) / std on 0-255 pixels."""
    mean, std = (123.7, 116.3, 103.5), (58.4, 57.1, 57.4)
    fix = "these look like 0-255 values: add scale=255 \\(or divide by 255\\)"
    with pytest.raises(stoker.SpecError, match=fix):
        stoker.spec_check("normalize mean=123.7,116.3,103.5 std=58.4,57.1,57.4 | to f32", 6, 5, 3)
    with pytest.raises(stoker.SpecError, match=fix):
        stoker.Normalize(mean, std)
    torchvision = pytest.importorskip("torchvision")
    with pytest.raises(stoker.SpecError, match=fix):
        stoker.build_spec([torchvision.transforms.Normalize(mean, std)])
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (20, 6, 5, 3), dtype=np.uint8)
    ds = stoker.from_numpy(x, np.zeros(20, np.int64))
    want = (x.astype(np.float64) - np.array(mean)) / np.array(std)
    for how in (dict(pipeline="normalize mean=123.7,116.3,103.5 std=58.4,57.1,57.4 scale=255 "
                              "| to f32 hwc"),
                dict(transforms=[stoker.Normalize(mean, std, scale=255)], layout="NHWC")):
        got, _ = next(iter(stoker.Loader(ds, batch_size=20, output="numpy", **how)))
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5)
    # The 0-1 spelling of the same values gives the same floats, bit for bit.
    m1 = ",".join(repr(m / 255) for m in mean)
    s1 = ",".join(repr(s / 255) for s in std)
    a, _ = next(iter(stoker.Loader(ds, batch_size=20, output="numpy",
                                   pipeline="normalize mean=%s std=%s | to f32 hwc" % (m1, s1))))
    np.testing.assert_array_equal(a, got)


def test_spec_check():
    shape, dtype, layout = stoker.spec_check("pad 4 | random_crop 32 | to f16", 32, 32, 3)
    assert shape == (3, 32, 32) and dtype == "float16" and layout == "CHW"
    with pytest.raises(stoker.SpecError):
        stoker.spec_check("random_crop 40", 32, 32, 3)


@pytest.mark.parametrize("make, words", [
    (lambda: stoker.RandomCrop(0), "expected a whole number from 1 to 16777216 after "
                                   "'random_crop', got '0'"),
    (lambda: stoker.RandomCrop(8, padding=(1, 2, 3)), "padding takes 1 (all sides), 2 "
                                                      "(left/right,top/bottom) or 4"),
    (lambda: stoker.RandomCrop(8, padding=4, fill=(1, 2.5)),
     "expected a whole number from 0 to 255 in fill=, got '2.5'"),
    (lambda: stoker.RandomCrop(8, fill=300), "from 0 to 255 in fill=, got '300'"),  # unused
    (lambda: stoker.RandomCrop(8, padding_mode="wrap"), "unknown padding mode 'wrap'"),
    (lambda: stoker.Pad(-1), "expected a whole number from 0 to 16777216 after 'pad', got '-1'"),
    (lambda: stoker.RandomVerticalFlip(-0.1), "flip probability must be from 0 to 1, got '-0.1'"),
    (lambda: stoker.RandomHorizontalFlip(float("nan")), "expected a number after 'flip', "
                                                        "got 'nan'"),
    (lambda: stoker.RandomResizedCrop(8, scale=(0.5, 0.1)),
     "the range in scale= must be low:high, got '0.5:0.1'"),
    (lambda: stoker.RandomResizedCrop(8, ratio=(0, 1)), "ratio= must be > 0, got '0:1'"),
    (lambda: stoker.RandomResizedCrop(8, scale=(0.1, 0.2, 0.3)),
     "expected one number or a range A:B in scale="),
    (lambda: stoker.Resize(0), "expected a whole number from 1 to 16777216 after 'resize'"),
    (lambda: stoker.Resize((3, 0)), "after 'resize', got '0'"),
    (lambda: stoker.Resize((1, 2, 3)), "resize takes S (the shorter side) or H,W, got 3 values"),
    (lambda: stoker.RandomRotation(-5), "rotate DEGREES must be >= 0"),
    (lambda: stoker.RandomRotation((10, 5)), "the range after 'rotate' must be low:high"),
    (lambda: stoker.RandomRotation(5, fill=256), "from 0 to 255 in fill=, got '256'"),
    (lambda: stoker.ColorJitter(brightness=-1), "brightness must be >= 0, got '-1'"),
    (lambda: stoker.ColorJitter(hue=0.7), "hue must be from 0 to 0.5, got '0.7'"),
    (lambda: stoker.ColorJitter(hue=(-0.7, 0.2)), "a hue range must lie within -0.5:0.5"),
    (lambda: stoker.ColorJitter(contrast=(2, 1)), "the range for contrast must be low:high"),
    (lambda: stoker.Normalize([0.5], [1e-45]), "std '1e-45' is too small"),
    (lambda: stoker.Normalize([], []), "normalize needs both mean= and std="),
])
def test_transform_values_are_checked_by_c(make, words):
    """The hand-written classes convert Python values to spec text and leave
    every value check to the C parser: SpecError with its message (column,
    spec and caret), raised when the transform is made."""
    with pytest.raises(stoker.SpecError) as e:
        make()
    assert words in str(e.value)
    assert str(e.value).startswith("pipeline spec, column ")


def test_transforms_let_no_text_into_the_spec():
    """Python checks only types, so that no text can be slipped into the spec."""
    with pytest.raises(TypeError, match="size must be an int"):
        stoker.CenterCrop("8 | flip")
    with pytest.raises(TypeError, match="p must be a number"):
        stoker.RandomHorizontalFlip("1 | rotate 10")
    with pytest.raises(ValueError, match="padding_mode must be one word"):
        stoker.Pad(2, padding_mode="edge | rotate 10")
    with pytest.raises(TypeError, match="fill must be a number"):
        stoker.Pad(2, fill="1 | flip")
    with pytest.raises(TypeError, match="size must be an int"):
        stoker.CenterCrop(8.0)


def test_bfloat16_output_torch_and_numpy(cifar_dir):
    """dtype='bfloat16': torch.bfloat16 tensors equal to torch's rounding of
    the float32 output; output='numpy' gives the same bits as uint16."""
    uri = "cifar10:" + cifar_dir[0]
    kw = dict(pipeline="random_crop 28 | flip | normalize cifar10", batch_size=16, seed=4,
              shuffle=True, num_threads=2)
    ref, _ = next(iter(stoker.Loader(uri, dtype="float32", **kw)))
    x, _ = next(iter(stoker.Loader(uri, dtype=torch.bfloat16, **kw)))
    assert x.dtype == torch.bfloat16 and tuple(x.shape) == (16, 3, 28, 28)
    assert torch.equal(x.view(torch.int16), ref.to(torch.bfloat16).view(torch.int16))
    loader = stoker.Loader(uri, dtype="bfloat16", output="numpy", **kw)
    assert loader.dtype == "bfloat16"
    a, _ = next(iter(loader))
    assert a.dtype == np.uint16
    assert np.array_equal(a, x.view(torch.int16).numpy().view(np.uint16))
    assert stoker.build_spec(["flip 1"], dtype="bf16") == "flip 1 | to bf16 chw"


def test_augmentation_transforms_write_their_specs(cifar_dir):
    """GaussianBlur, RandomGrayscale, RandomApply, RandomErasing take
    torchvision's arguments and write the documented stages; a Loader given
    the classes delivers what the same spec text delivers."""
    assert stoker.GaussianBlur(23).spec() == "gaussian_blur 23 sigma=0.1:2"
    assert stoker.GaussianBlur((5, 3), sigma=1.5).spec() == "gaussian_blur 5,3 sigma=1.5"
    assert stoker.RandomGrayscale().spec() == "grayscale p=0.1"
    assert stoker.RandomErasing().spec() == \
        "random_erasing p=0.5 scale=0.02:0.33 ratio=0.3:3.3 value=0"
    assert stoker.RandomErasing(0.25, value=(1, 2, 3), inplace=True).spec() == \
        "random_erasing p=0.25 scale=0.02:0.33 ratio=0.3:3.3 value=1,2,3"
    jitter = stoker.ColorJitter(0.4, 0.4, 0.4, 0.1)
    assert stoker.RandomApply([jitter, stoker.RandomGrayscale(1)], p=0.8).spec() == \
        "random_apply p=0.8 n=2 | " + jitter.spec() + " | grayscale p=1"
    assert stoker.RandomApply([], p=0.3).spec() == ""
    from torchvision.transforms import InterpolationMode
    assert stoker.Resize(256, interpolation=InterpolationMode.BICUBIC).spec() == \
        "resize 256 interpolation=bicubic"
    assert stoker.Resize((20, 30), interpolation=3).spec() == "resize 20,30 interpolation=bicubic"
    assert stoker.Resize(256, interpolation="bilinear").spec() == "resize 256"
    assert stoker.Resize(32, interpolation=InterpolationMode.NEAREST).spec() == \
        "resize 32 interpolation=nearest"
    assert stoker.RandomResizedCrop(224, interpolation="bicubic", antialias=True).spec() == \
        "random_resized_crop 224 scale=0.08:1 ratio=0.75:1.3333333333333333 interpolation=bicubic"
    with pytest.raises(ValueError, match="antialias=False"):
        stoker.Resize(256, interpolation="bicubic", antialias=False)
    assert stoker.RandomErasing(value="random").spec().endswith(" value=random")
    with pytest.raises(ValueError, match="value='noise'"):
        stoker.RandomErasing(value="noise")
    with pytest.raises(stoker.SpecError, match="kernel sizes must be odd"):
        stoker.GaussianBlur(4)
    with pytest.raises(TypeError, match="list of transforms"):
        stoker.RandomApply(jitter)
    uri = "cifar10:" + cifar_dir[0]
    transforms = [stoker.RandomCrop(28), stoker.RandomApply([jitter], p=0.8),
                  stoker.RandomGrayscale(0.2), stoker.GaussianBlur(3, (0.1, 2.0)),
                  stoker.Normalize((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
                  stoker.RandomErasing()]
    text = stoker.to_spec(transforms)
    kw = dict(batch_size=10, seed=2, shuffle=True, num_threads=2)
    a, _ = next(iter(stoker.Loader(uri, transforms=transforms, **kw)))
    b, _ = next(iter(stoker.Loader(uri, pipeline=text, **kw)))
    assert torch.equal(a, b) and tuple(a.shape) == (10, 3, 28, 28)
    assert (a == 0).any()  # something was erased (p 0.5 over 10 samples)
