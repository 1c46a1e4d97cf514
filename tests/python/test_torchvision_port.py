"""Porting by changing imports: torchvision transform objects handed to
stoker.Loader as they are (stoker/_torchvision.py).

The reference for each translation is the stoker-native spelling of the same
transform, written by hand here: both Loaders run with the same seed over
the same images, and their batches must be equal element for element (the
same spec means the same drawn parameters). examples/train_resnet.py's
torchvision Compose is taken from the example itself, unchanged.
"""
import importlib.util
import os

import numpy as np
import pytest

import stoker
from module_util import ROOT

torch = pytest.importorskip("torch")
T = pytest.importorskip("torchvision.transforms")
IM = T.InterpolationMode
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A small image folder of JPEGs of different sizes (written by Pillow)."""
    from PIL import Image
    root = tmp_path_factory.mktemp("tvport")
    rng = np.random.default_rng(5)
    for c in ("cat", "dog", "eel"):
        (root / c).mkdir()
        for i in range(5):
            h, w = rng.integers(40, 90, 2)
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(
                root / c / ("%d.jpg" % i), quality=90)
    return str(root)


def batches(data, transforms, **kw):
    opts = dict(batch_size=4, shuffle=True, seed=7, num_threads=2, output="numpy")
    opts.update(kw)
    with stoker.Loader(data, transforms=transforms, **opts) as loader:
        out = [(np.array(x), np.array(y)) for x, y in loader]
        return loader.pipeline, out


def assert_same(data, tv, native, **kw):
    spec_tv, got = batches(data, tv, **kw)
    spec_native, want = batches(data, native, **kw)
    assert len(got) == len(want) > 0
    for (x, y), (x2, y2) in zip(got, want):
        assert x.dtype == x2.dtype and x.shape == x2.shape
        np.testing.assert_array_equal(x, x2)
        np.testing.assert_array_equal(y, y2)
    return spec_tv, spec_native


def example_module():
    path = os.path.join(ROOT, "examples", "train_resnet.py")
    spec = importlib.util.spec_from_file_location("train_resnet_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_train_resnet_compose_passed_unchanged(folder):
    """The example's torchvision pipeline, the Compose object itself, gives
    the batches of the stoker-native spelling (same seed, same draws)."""
    ex = example_module()
    compose = ex.torchvision_transforms(48)
    assert type(compose).__module__.startswith("torchvision.transforms")
    native = [stoker.RandomResizedCrop(48), stoker.RandomHorizontalFlip(),
              stoker.Normalize(MEAN, STD)]
    spec_tv, spec_native = assert_same(folder, compose, native)
    assert spec_tv == spec_native == (
        "random_resized_crop 48 scale=0.08:1 ratio=0.75:1.3333333333333333 | flip 0.5 | "
        "normalize mean=0.485,0.456,0.406 std=0.229,0.224,0.225 | to f32 chw")
    # and the example's own stoker loader, made with --port, runs that Compose
    args = ex.argparse.Namespace(data=folder, batch=4, workers=1, port=True)
    loader = ex.stoker_loader(args, 48)
    assert loader.pipeline == spec_native
    loader.close()


@pytest.mark.parametrize("tv, native", [
    (T.RandomResizedCrop(40), stoker.RandomResizedCrop(40)),
    (T.RandomResizedCrop((30, 44), scale=(0.3, 0.9), ratio=(0.5, 2.0)),
     stoker.RandomResizedCrop((30, 44), scale=(0.3, 0.9), ratio=(0.5, 2.0))),
    (T.Resize(36), stoker.Resize(36)),
    (T.AutoAugment(), stoker.AutoAugment()),
    (T.AutoAugment(T.AutoAugmentPolicy.CIFAR10, fill=[9, 9, 9]),
     stoker.AutoAugment("cifar10", fill=9)),
    (T.RandAugment(), stoker.RandAugment(2, 9, 31, 0)),
    (T.RandAugment(num_ops=3, magnitude=5, num_magnitude_bins=11, fill=4),
     stoker.RandAugment(3, 5, 11, 4)),
    (T.TrivialAugmentWide(), stoker.TrivialAugmentWide(31, 0)),
    (T.Resize(36, interpolation=IM.BICUBIC), stoker.Resize(36, interpolation="bicubic")),
    (T.RandomResizedCrop(40, interpolation=IM.NEAREST),
     stoker.RandomResizedCrop(40, interpolation="nearest")),
    (T.Resize([36]), stoker.Resize(36)),
    (T.Resize((30, 30)), stoker.Resize((30, 30))),
    (T.Resize((28, 40)), stoker.Resize((28, 40))),
    (T.CenterCrop(32), stoker.CenterCrop(32)),
    (T.CenterCrop((30, 36)), stoker.CenterCrop((30, 36))),
    (T.RandomCrop(36, padding=4), stoker.RandomCrop(36, padding=4)),
    (T.RandomCrop(36, padding=(1, 2), fill=7), stoker.RandomCrop(36, padding=(1, 2), fill=7)),
    (T.RandomCrop(38, padding=3, padding_mode="reflect"),
     stoker.RandomCrop(38, padding=3, padding_mode="reflect")),
    (T.Pad((1, 2, 3, 4), fill=(10, 20, 30)), stoker.Pad((1, 2, 3, 4), fill=(10, 20, 30))),
    (T.Pad(3, padding_mode="edge"), stoker.Pad(3, padding_mode="edge")),
    (T.RandomHorizontalFlip(), stoker.RandomHorizontalFlip()),
    (T.RandomHorizontalFlip(0.25), stoker.RandomHorizontalFlip(0.25)),
    (T.RandomVerticalFlip(0.7), stoker.RandomVerticalFlip(0.7)),
    (T.ColorJitter(0.4, 0.4, 0.4, 0.1), stoker.ColorJitter(0.4, 0.4, 0.4, 0.1)),
    (T.ColorJitter(brightness=(0.5, 1.5), hue=(-0.2, 0.1)),
     stoker.ColorJitter(brightness=(0.5, 1.5), hue=(-0.2, 0.1))),
    (T.ColorJitter(saturation=0.3), stoker.ColorJitter(saturation=0.3)),
    (T.Normalize(MEAN, STD), stoker.Normalize(MEAN, STD)),
    (T.RandomRotation(15, interpolation=IM.BILINEAR), stoker.RandomRotation(15)),
    (T.RandomRotation((-5, 20), interpolation=IM.BILINEAR, fill=9),
     stoker.RandomRotation((-5, 20), fill=9)),
    (T.RandomPosterize(3, p=0.4), stoker.RandomPosterize(3, p=0.4)),
    (T.RandomSolarize(100, p=0.6), stoker.RandomSolarize(100, p=0.6)),
    (T.RandomInvert(0.3), stoker.RandomInvert(0.3)),
    (T.RandomPerspective(0.3, p=0.8), stoker.RandomPerspective(0.3, p=0.8)),
    (T.RandomPerspective(0.6, p=1.0, fill=40), stoker.RandomPerspective(0.6, p=1.0, fill=40)),
], ids=lambda v: repr(v)[:60])
def test_each_transform_translates_to_its_stoker_class(folder, tv, native):
    # The folder's images differ in size: ops that keep the size run on
    # images of one size, so that they batch.
    if isinstance(tv, (T.RandomResizedCrop, T.CenterCrop)) or (
            isinstance(tv, T.Resize) and not isinstance(tv.size, int) and len(tv.size) == 2):
        tvs, nat = [tv], [native]
    elif isinstance(tv, T.Resize):
        tvs, nat = [tv, T.CenterCrop(30)], [native, stoker.CenterCrop(30)]
    else:  # pads need a source of one fixed size: raw images in memory
        tvs, nat = [tv], [native]
        rng = np.random.default_rng(3)
        folder = stoker.from_numpy(rng.integers(0, 256, (12, 40, 44, 3), dtype=np.uint8),
                                   rng.integers(0, 3, 12))
    assert_same(folder, T.Compose(tvs), nat)
    # the objects alone, in a list (no Compose)
    assert_same(folder, tvs, nat, seed=11)


def test_colorjitter_ranges_written_as_pairs():
    """torchvision keeps [1 - x, 1 + x] (and None for 0): the pair gives the
    same draws as the number (checked on batches above); the spec shows it."""
    spec = stoker.build_spec([T.ColorJitter(0.4, 0, 0.2, 0.1)])
    assert spec == ("color_jitter brightness=0.6:1.4 contrast=0 saturation=0.8:1.2 "
                    "hue=-0.1:0.1 | to f32 chw")


def test_output_conversions(folder):
    """ToTensor: float32 in [0, 1]; PILToTensor: uint8; ConvertImageDtype:
    its dtype; the last conversion wins; NCHW like a torchvision tensor."""
    crop = T.CenterCrop(32)
    assert stoker.build_spec(T.Compose([crop, T.ToTensor()])) == "center_crop 32 | to f32 chw"
    assert stoker.build_spec(T.Compose([crop, T.PILToTensor()])) == "center_crop 32 | to u8 chw"
    assert stoker.build_spec(T.Compose([crop, T.PILToTensor(),
                                        T.ConvertImageDtype(torch.float32)])) == \
        "center_crop 32 | to f32 chw"
    assert stoker.build_spec(T.Compose([crop, T.ConvertImageDtype(torch.float16)])) == \
        "center_crop 32 | to f16 chw"
    _, got = batches(folder, T.Compose([crop, T.PILToTensor()]))
    _, want = batches(folder, [stoker.CenterCrop(32)], dtype="uint8")
    assert got[0][0].dtype == np.uint8 and got[0][0].shape == (4, 3, 32, 32)
    for (x, _), (x2, _) in zip(got, want):
        np.testing.assert_array_equal(x, x2)
    # float32 output is the uint8 pixels / 255, as ToTensor gives
    _, flt = batches(folder, T.Compose([crop, T.ToTensor()]))
    np.testing.assert_allclose(flt[0][0], got[0][0] / np.float32(255), rtol=0, atol=1e-7)
    with pytest.raises(ValueError, match=r"torchvision.transforms.PILToTensor gives uint8 output; "
                                         r"it cannot be combined with dtype='float32'"):
        stoker.build_spec(T.Compose([crop, T.PILToTensor()]), dtype="float32")
    with pytest.raises(ValueError, match=r"ConvertImageDtype\(dtype=int32\) is not supported"):
        stoker.build_spec([T.ConvertImageDtype(torch.int32)])


def test_nested_compose_and_mixed_list():
    inner = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip()])
    spec = stoker.build_spec([inner, "vflip 0.1", stoker.Normalize(MEAN, STD)])
    assert spec == stoker.build_spec([stoker.RandomResizedCrop(32), stoker.RandomHorizontalFlip(),
                                      "vflip 0.1", stoker.Normalize(MEAN, STD)])
    assert stoker.transforms.to_spec(inner) == "random_resized_crop 32 scale=0.08:1 " \
        "ratio=0.75:1.3333333333333333 | flip 0.5"


@pytest.mark.parametrize("tv, message", [
    (T.Lambda(lambda x: x), r"^torchvision.transforms.Lambda has no stoker equivalent: it runs "
                            r"Python code per sample"),
    (T.ToPILImage(), r"^torchvision.transforms.ToPILImage has no stoker equivalent: stoker "
                     r"decodes images itself"),
    (T.ElasticTransform(), r"^torchvision.transforms.ElasticTransform has no stoker "
                           r"equivalent: stoker has no transform of that name"),
    (T.RandomPerspective(interpolation=IM.NEAREST),
     r"^torchvision.transforms.RandomPerspective cannot be translated: .*bilinearly only"),
    (T.RandomPerspective(fill=[1, 2, 3]), r"^torchvision.transforms.RandomPerspective cannot "
                                          r"be translated: .*one value"),
    (T.FiveCrop(10), r"^torchvision.transforms.FiveCrop has no stoker equivalent"),
    (T.RandAugment(interpolation=IM.BILINEAR), r"^torchvision.transforms.RandAugment.*interpolation"),
    (T.TrivialAugmentWide(fill=[1, 2, 3]), r"^torchvision.transforms.TrivialAugmentWide.*fill"),
    (T.AutoAugment(interpolation=IM.BILINEAR), r"^torchvision.transforms.AutoAugment.*interpolation"),
    (T.RandomResizedCrop(32, interpolation=IM.BOX),
     r"^torchvision.transforms.RandomResizedCrop: .*interpolation"),
    (T.Resize(32, interpolation=IM.HAMMING), r"^torchvision.transforms.Resize: .*interpolation"),
    (T.RandomRotation(10, interpolation=IM.BICUBIC),
     r"^torchvision.transforms.RandomRotation: .*pass interpolation=InterpolationMode.BILINEAR "
     r"or InterpolationMode.NEAREST"),
    (T.RandomRotation(10, interpolation=IM.BILINEAR, expand=True),
     r"^torchvision.transforms.RandomRotation: RandomRotation\(expand=True\) is not supported"),
    (T.RandomRotation(10, interpolation=IM.BILINEAR, center=(3, 4)),
     r"^torchvision.transforms.RandomRotation: RandomRotation\(center=...\) is not supported"),
    (T.RandomCrop(32, pad_if_needed=True),
     r"^torchvision.transforms.RandomCrop: RandomCrop\(pad_if_needed=True\) is not supported"),
    (T.Resize(32, max_size=40),
     r"^torchvision.transforms.Resize: Resize\(max_size=...\) is not supported"),
])
def test_refusals_name_the_transform_and_argument(tv, message):
    with pytest.raises(ValueError, match=message):
        stoker.build_spec(T.Compose([T.CenterCrop(8), tv]))


def test_refused_value_from_the_spec_parser_names_the_transform():
    """A value the C parser refuses (p > 1) is a SpecError naming the torchvision class."""
    tv = T.RandomHorizontalFlip(1.5)
    with pytest.raises(stoker.SpecError, match=r"^torchvision.transforms.RandomHorizontalFlip: "
                                               r"pipeline spec, column 6: flip probability must "
                                               r"be from 0 to 1, got '1.5'") as e:
        stoker.build_spec([tv])
    assert e.value.code == -6  # STK_ESPEC, kept from the stoker class's error


def test_stoker_does_not_import_torchvision():
    """stoker works without torchvision: importing it and building a native
    pipeline loads no torchvision module (checked in a fresh interpreter)."""
    import subprocess
    import sys
    code = ("import sys, stoker; stoker.build_spec([stoker.RandomResizedCrop(32)]); "
            "print(any(m.startswith('torchvision') for m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ), timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"


def test_object_missing_an_attribute_is_refused_by_name():
    """An object that lacks an attribute stoker reads (another torchvision
    version) is a ValueError naming it, not an AttributeError."""
    tv = T.RandomCrop(32, padding=2)
    del tv.padding_mode
    with pytest.raises(ValueError, match=r"^torchvision.transforms.RandomCrop cannot be "
                                         r"translated: the object has no attribute "
                                         r"'padding_mode' that stoker reads"):
        stoker.build_spec([tv])


def test_other_stoker_classes_are_built_from_same_named_attributes(monkeypatch):
    """A stoker class of the torchvision name without a written translation
    is built from the attributes named as its parameters; a torchvision
    argument it does not take is refused, never dropped."""
    made = []

    class ElasticTransform(stoker.Transform):
        op = "vflip"  # any op: only the argument passing is under test

        def __init__(self, alpha=50.0, sigma=5.0, interpolation="bilinear", fill=0):
            made.append((alpha, sigma, interpolation, fill))

        def spec(self):
            return "vflip 0.5"

    monkeypatch.setattr(stoker.transforms, "ElasticTransform", ElasticTransform, raising=False)
    tv = T.ElasticTransform(30.0, 4.0, interpolation=IM.BILINEAR, fill=5)
    assert stoker.build_spec([tv]) == "vflip 0.5 | to f32 chw"
    assert made == [([30.0, 30.0], [4.0, 4.0], "bilinear", 5)]

    class Narrow(ElasticTransform):
        def __init__(self, alpha=50.0, sigma=5.0):
            made.append((alpha, sigma))

    monkeypatch.setattr(stoker.transforms, "ElasticTransform", Narrow)
    with pytest.raises(ValueError, match=r"^torchvision.transforms.ElasticTransform cannot be "
                                         r"translated: stoker.Narrow takes no 'interpolation', "
                                         r"'fill' argument"):
        stoker.build_spec([tv])
