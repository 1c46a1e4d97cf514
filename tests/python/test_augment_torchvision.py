"""The augmentation policies (auto_augment, rand_augment,
trivial_augment_wide) and their primitives against torchvision 0.14
(Debian's python3-torchvision) as the independent reference.

Primitives run through bench/image_ops_dump's `aug` command on uint8 HWC
images and are compared with torchvision.transforms.autoaugment._apply_op
(the function every policy calls: F.affine / F.rotate with nearest
interpolation, F.adjust_*, F.posterize, F.solarize, F.autocontrast,
F.equalize, F.invert) on the same uint8 tensor. Policies run through a
whole plan (`image_ops_dump runraw` / `run`), whose trace lists the drawn
ops, magnitude bins and signs; the test rebuilds each magnitude from
torchvision's own augmentation space (so the torch.linspace values are
checked too) and replays the ops through _apply_op.

Tolerance: the uint8 results are identical (0 differing values) in every
case measured. The geometric ops may, in principle, move a pixel whose
sampling point falls within float rounding of a half between two source
pixels (torch's matrix product rounds in its own order), so they are
allowed GEO_FRACTION of differing values; the other ops must be exact.
"""
import glob
import json
import os
import subprocess

import numpy as np
import pytest
import torch
import torchvision.transforms.functional as F
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms import autoaugment as AA

import stoker
from conftest import BUILD, CI, PHOTOS, need_photos

DUMP = os.path.join(BUILD, "image_ops_dump")
GEO = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}
GEO_FRACTION = 1e-3
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]

pytestmark = pytest.mark.skipif(not os.path.exists(DUMP) and not CI,
                                reason="image_ops_dump not built")


def dump(*args):
    p = subprocess.run([DUMP, *map(str, args)], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise AssertionError("image_ops_dump %s failed: %s" % (args, p.stderr))
    return p.stdout


@pytest.fixture(scope="module")
def images():
    """uint8 HWC images: photos when there are some, else a synthetic one
    with edges, smooth fields and noise; odd and even sizes; gray too."""
    files = sorted(glob.glob(os.path.join(PHOTOS, "*", "*", "*.jpg")))[:3]
    if len(files) < 3 and CI:
        need_photos("val")
    out = [np.asarray(Image.open(f).convert("RGB")) for f in files]
    rng = np.random.default_rng(7)
    y, x = np.mgrid[0:131, 0:150].astype(np.float32)
    syn = np.stack([128 + 100 * np.sin(x / 9.0), 128 + 90 * np.cos(y / 13.0),
                    (x + y) % 256], axis=2)
    syn[(x // 20 + y // 20) % 2 == 0] *= 0.6
    syn += rng.normal(0, 6, syn.shape)
    out.append(np.clip(syn, 0, 255).astype(np.uint8))
    crops = [np.ascontiguousarray(a[:161, :173]) for a in out]
    crops.append(np.ascontiguousarray(crops[0][:120, :96, :1]))  # one channel, even sizes
    return crops


def ours(tmp_path, prim, mag, a, fill=0):
    h, w, c = a.shape
    src, dst = str(tmp_path / "in.raw"), str(tmp_path / "out.raw")
    np.ascontiguousarray(a).tofile(src)
    dump("aug", prim, repr(float(mag)), fill, src, dst, h, w, c)
    return np.fromfile(dst, np.uint8).reshape(h, w, c)


def tv(img_hwc):
    return torch.from_numpy(np.ascontiguousarray(img_hwc)).permute(2, 0, 1).contiguous()


def hwc(t):
    return t.permute(1, 2, 0).numpy()


def reference(prim, mag, a, fill=None):
    return hwc(AA._apply_op(tv(a), prim, mag, interpolation=InterpolationMode.NEAREST,
                            fill=fill))


def check_same(prim, got, want, what):
    nd = int((got != want).sum())
    if prim in GEO:
        assert nd <= GEO_FRACTION * got.size, (what, nd)
    else:
        assert nd == 0, (what, nd, int(np.abs(got.astype(int) - want.astype(int)).max()))
    return nd


# Magnitudes: both signs, the ends of torchvision's ranges and values in
# between (RandAugment's bins reach 0.3 / 30 degrees / 0.9, TrivialAugmentWide's
# 0.99 / 135 degrees / 32 pixels).
MAGNITUDES = {
    "Identity": [0.0],
    "ShearX": [-0.99, -0.3, 0.01, 0.09, 0.3, 0.99],
    "ShearY": [-0.5, 0.14, 0.99],
    "TranslateX": [-67.97, -10.0, 1.9, 32.0, 200.0],
    "TranslateY": [-31.0, 5.0, 45.3],
    "Rotate": [-135.0, -30.0, -0.7, 9.0, 90.0, 135.0],
    "Brightness": [-0.99, -0.9, -0.3, 0.0, 0.27, 0.99],
    "Color": [-0.99, -0.3, 0.3, 0.99],
    "Contrast": [-0.99, -0.33, 0.33, 0.99],
    "Sharpness": [-0.99, -0.3, 0.3, 0.99],
    "Posterize": [1.0, 2.0, 4.0, 7.0, 8.0],
    "Solarize": [255.0, 246.5, 128.0, 8.5, 0.0],
    "AutoContrast": [0.0],
    "Equalize": [0.0],
    "Invert": [0.0],
}


@pytest.mark.parametrize("prim", sorted(MAGNITUDES))
def test_primitive_matches_torchvision(tmp_path, images, prim):
    total = 0
    for k, a in enumerate(images):
        for mag in MAGNITUDES[prim]:
            total += check_same(prim, ours(tmp_path, prim, mag, a), reference(prim, mag, a),
                                (prim, mag, k, a.shape))
    print("%s: %d differing values" % (prim, total))


@pytest.mark.parametrize("prim", sorted(GEO))
def test_geometric_fill(tmp_path, images, prim):
    """fill=V brings in V where torchvision's fill=[V] * C does."""
    a = images[0]
    for mag in MAGNITUDES[prim]:
        got = ours(tmp_path, prim, mag, a, fill=200)
        check_same(prim, got, reference(prim, mag, a, fill=[200.0] * 3), (prim, mag))


def test_autocontrast_and_equalize_edge_cases(tmp_path):
    """A flat channel (autocontrast keeps it; equalize's step is 0), two
    values only, and a gradient: each against torchvision."""
    flat = np.full((9, 11, 3), 77, np.uint8)
    two = np.zeros((9, 11, 3), np.uint8)
    two[::2] = 200
    grad = np.tile(np.arange(256, dtype=np.uint8)[None, :, None], (4, 1, 3))
    for a in (flat, two, grad):
        for prim in ("AutoContrast", "Equalize", "Sharpness", "Contrast"):
            check_same(prim, ours(tmp_path, prim, 0.5, a), reference(prim, 0.5, a), prim)
    # hand-computed: equalize of two values 0 (55 px) and 200 (44 px) —
    # step = 55 // 255 = 0, so the channel is unchanged
    assert (ours(tmp_path, "Equalize", 0, two) == two).all()


# ---------------------------------------------------------------- policies

def space(kind, bins, h, w):
    if kind == "trivial":
        return AA.TrivialAugmentWide(bins)._augmentation_space(bins)
    if kind == "rand":
        return AA.RandAugment(num_magnitude_bins=bins)._augmentation_space(bins, (h, w))
    return AA.AutoAugment()._augmentation_space(10, (h, w))


def replay(kind, bins, trace, t, fill):
    """Apply the traced ops to uint8 tensor t with torchvision, checking
    that each magnitude is torchvision's for that bin and sign."""
    sp = space(kind, bins, t.shape[1], t.shape[2])
    for name, b, neg, mag in trace["aug"]:
        if name == "Invert":
            m = 0.0
        else:
            mags, signed = sp[name]
            m = float(mags[b].item()) if b >= 0 else 0.0
            assert (b >= 0) == (mags.ndim > 0), (name, b)
            if neg:
                assert signed, name
                m = -m
        assert m == mag, (name, b, neg, m, mag)
        t = AA._apply_op(t, name, m, interpolation=InterpolationMode.NEAREST, fill=fill)
    return t


POLICIES = [  # spec, space, bins, fill, ops per sample (None: AutoAugment's 0-2)
    ("trivial_augment_wide", "trivial", 31, None, 1),
    ("trivial_augment_wide 7 fill=9", "trivial", 7, 9, 1),
    ("rand_augment", "rand", 31, None, 2),
    ("rand_augment 4 30", "rand", 31, None, 4),
    ("rand_augment num_ops=3 magnitude=5 num_magnitude_bins=11 fill=128", "rand", 11, 128, 3),
    ("rand_augment 2 0 2", "rand", 2, None, 2),
    ("auto_augment", "auto", 10, None, None),
    ("auto_augment imagenet fill=255", "auto", 10, 255, None),
    ("auto_augment cifar10", "auto", 10, None, None),
    ("auto_augment policy=svhn fill=40", "auto", 10, 40, None),
]


@pytest.mark.parametrize("spec,kind,bins,fill,nops", POLICIES)
def test_policy_replays_in_torchvision(tmp_path, images, spec, kind, bins, fill, nops):
    seen = {}
    total = 0
    for i, a in enumerate(images):
        h, w, c = a.shape
        src, out = str(tmp_path / "in.raw"), str(tmp_path / "o.raw")
        a.tofile(src)
        full = "center_crop %d,%d | %s | to u8 hwc" % (h, w, spec)
        for index in range(10):
            tr = json.loads(dump("runraw", full, src, h, w, c, out, 5, 1000 * i + index))
            # variable-size input leaves with 3 channels (gray is replicated)
            a3 = np.repeat(a, 3, axis=2) if c == 1 else a
            got = np.fromfile(out, np.uint8).reshape(h, w, 3)
            want = hwc(replay(kind, bins, tr, tv(a3), None if fill is None else [float(fill)] * 3))
            assert len(tr["aug"]) == nops if nops is not None else len(tr["aug"]) <= 2
            for step in tr["aug"]:
                seen[step[0]] = seen.get(step[0], 0) + 1
            geo = any(s[0] in GEO for s in tr["aug"])
            nd = int((got != want).sum())
            assert nd <= (GEO_FRACTION * got.size if geo else 0), (spec, i, index, tr["aug"], nd)
            total += nd
    print("%s: ops drawn %s, %d differing values" % (spec, seen, total))


def test_policy_draws_cover_every_op_and_bin():
    """Over many samples trivial_augment_wide draws each of its 14 ops and
    every magnitude bin; rand_augment's count is num_ops; auto_augment
    draws sub-policies whose ops all appear. Seeds and indexes are the
    stream: the same (seed, index) gives the same draws."""
    a = np.zeros((16, 16, 3), np.uint8)
    src = os.path.join(os.environ.get("TMPDIR", "/tmp"), "stoker_aug_%d.raw" % os.getpid())
    a.tofile(src)
    try:
        ops, bins = set(), set()
        for index in range(300):
            tr = json.loads(dump("runraw", "center_crop 16 | trivial_augment_wide 5 | to u8",
                                 src, 16, 16, 3, "/dev/null", 11, index))
            assert len(tr["aug"]) == 1
            ops.add(tr["aug"][0][0])
            if tr["aug"][0][1] >= 0:
                bins.add(tr["aug"][0][1])
        assert ops == set(MAGNITUDES) - {"Invert"}
        assert bins == set(range(5))
        auto = set()
        for index in range(400):
            tr = json.loads(dump("runraw", "center_crop 16 | auto_augment | to u8",
                                 src, 16, 16, 3, "/dev/null", 11, index))
            assert len(tr["aug"]) <= 2
            auto.update(s[0] for s in tr["aug"])
        assert auto == {"Posterize", "Rotate", "Solarize", "AutoContrast", "Equalize", "Color",
                        "Contrast", "Invert", "Sharpness", "ShearX"}
        one = dump("runraw", "center_crop 16 | rand_augment 5 | to u8", src, 16, 16, 3,
                   "/dev/null", 3, 42)
        assert len(json.loads(one)["aug"]) == 5
        assert one == dump("runraw", "center_crop 16 | rand_augment 5 | to u8", src, 16, 16, 3,
                           "/dev/null", 3, 42)
        assert one != dump("runraw", "center_crop 16 | rand_augment 5 | to u8", src, 16, 16, 3,
                           "/dev/null", 3, 43)
    finally:
        os.unlink(src)


def test_rand_augment_pipeline_on_photos_replays(tmp_path, images):
    """random_resized_crop | flip | rand_augment | normalize on JPEGs: the
    drawn crop, flip and ops replayed in torchvision (PIL resized_crop,
    uint8 tensor ops, ToTensor, Normalize) give the same tensor."""
    files = sorted(glob.glob(os.path.join(PHOTOS, "*", "*", "*.jpg")))[:6]
    if not files:
        pytest.skip("no photos (STOKER_PHOTOS)")
    spec = "random_resized_crop 224 | flip | rand_augment 2 9 | normalize imagenet | to f32 chw"
    for i, f in enumerate(files):
        out = str(tmp_path / "p.raw")
        tr = json.loads(dump("run", spec, f, out, 9, i))
        got = np.fromfile(out, np.float32).reshape(3, 224, 224)
        x, y, w, h = tr["box"]
        im = F.resized_crop(Image.open(f).convert("RGB"), y, x, h, w, [224, 224])
        if tr["hflip"]:
            im = F.hflip(im)
        t = replay("rand", 31, tr, F.pil_to_tensor(im), None)
        want = F.normalize(t.float() / 255.0, MEAN, STD).numpy()
        d = np.abs(got - want) * np.array(STD)[:, None, None] * 255
        if tr["scale_denom"] == 1:
            geo = any(s[0] in GEO for s in tr["aug"])
            assert (d > 1e-2).sum() <= (GEO_FRACTION * d.size if geo else 0), (f, tr)


# ---------------------------------------------------------------- errors, Python

@pytest.mark.parametrize("spec,message", [
    ("resize 64,64 | rand_augment 2 31", "rand_augment magnitude 31 must be below "
                                         "num_magnitude_bins 31 (it is a bin index)"),
    ("resize 64,64 | rand_augment num_ops=17", "rand_augment num_ops must be a whole number "
                                                "from 0 to 16, got '17'"),
    ("resize 64,64 | trivial_augment_wide 1", "trivial_augment_wide num_magnitude_bins must be "
                                               "a whole number from 2 to 1024, got '1'"),
    ("resize 64,64 | trivial_augment_wide fill=256", "trivial_augment_wide fill must be a whole "
                                                     "number from 0 to 255, got '256'"),
    ("resize 64,64 | auto_augment cifar100", "auto_augment policy must be imagenet, cifar10 "
                                             "or svhn, got 'cifar100'"),
    ("resize 64,64 | auto_augment fill=1.5", "auto_augment fill must be a whole number from 0 "
                                             "to 255, got '1.5'"),
    ("resize 64,64 | auto_augment fill=1e300", "auto_augment fill must be a whole number from "
                                               "0 to 255, got '1e300'"),
    ("resize 64,64 | auto_augment imagenet imagenet", "unexpected"),
    ("resize 64,64 | auto_augment speed=1", "unknown key 'speed'"),
    ("trivial_augment_wide | resize 64,64", "trivial_augment_wide before resize is not "
                                            "supported; put the crops and the resize first"),
    ("resize 64,64 | rand_augment | flip", "flip after rand_augment is not supported; flip "
                                           "before it"),
    ("resize 64,64 | auto_augment | posterize 3", "posterize after auto_augment is not "
                                                  "supported; put it before"),
    ("resize 64,64 | color_jitter 0.4 | rand_augment", "rand_augment must come before"),
    ("resize 64,64 | normalize imagenet | rand_augment", "rand_augment must come before "
                                                         "normalize"),
    ("resize 64,64 | rand_augment 16 | rand_augment 16 | trivial_augment_wide",
     "at most 32 augmentation-policy steps per sample (the policies' ops add up to 33)"),
])
def test_spec_errors(spec, message):
    with pytest.raises(stoker.SpecError) as e:
        stoker.spec_check(spec, 0, 0, 0)
    assert message in str(e.value)
    assert "column" in str(e.value)


def test_python_classes():
    assert stoker.AutoAugment().spec() == "auto_augment imagenet"
    assert stoker.AutoAugment(AA.AutoAugmentPolicy.IMAGENET, InterpolationMode.NEAREST,
                              fill=3).spec() == "auto_augment imagenet fill=3"
    assert stoker.AutoAugment(AA.AutoAugmentPolicy.CIFAR10).spec() == "auto_augment cifar10"
    assert stoker.AutoAugment("SVHN").spec() == "auto_augment svhn"
    with pytest.raises(ValueError, match="IMAGENET, CIFAR10 or SVHN"):
        stoker.AutoAugment("cifar100")
    with pytest.raises(ValueError, match="nearest only"):
        stoker.AutoAugment(interpolation=InterpolationMode.BILINEAR)
    with pytest.raises(stoker.SpecError, match="fill must be a whole number"):
        stoker.AutoAugment(fill=300)
    r = stoker.RandAugment(3, magnitude=5)
    assert r.spec() == "rand_augment num_ops=3 magnitude=5 num_magnitude_bins=31 fill=0"
    assert stoker.TrivialAugmentWide().spec() == \
        "trivial_augment_wide num_magnitude_bins=31 fill=0"
    spec = stoker.transforms.to_spec([stoker.RandomResizedCrop(32), stoker.RandomHorizontalFlip(),
                                      stoker.TrivialAugmentWide(), stoker.AutoAugment()])
    stoker.spec_check(spec + " | to u8", 0, 0, 0)


# ---------------------------------------------------------------- affine

AFFINE = [  # spec, flips after it; nearest without a flip is exact
    ("affine 30 translate=0.2,0.1 scale=0.7:1.3 shear=10", ""),
    ("affine 0:90 shear=-20,20,-10,10 fill=10,200,30", ""),
    ("affine 180 shear=-20:20 interpolation=bilinear fill=10,200,30", ""),
    ("affine 45 translate=0.3,0.3 fill=99", " | flip 1 | vflip 1"),
    ("affine 10 scale=0.5:2 interpolation=bilinear", " | flip 1"),
    ("affine 0", ""),
]


def fill_of(spec):
    m = [a for a in spec.split() if a.startswith("fill=")]
    vals = [int(v) for v in m[0][5:].split(",")] if m else [0]
    return [float(np.float32(v) / np.float32(255)) for v in (vals * 3 if len(vals) == 1 else vals)]


@pytest.mark.parametrize("spec,flips", AFFINE)
def test_affine_replays_in_torchvision(tmp_path, images, spec, flips):
    """The drawn angle, translation, scale and shears replayed through
    F.affine on the float tensor (then the flips): nearest exact (a
    flip after it may move a pixel whose sampling point is a tie); bilinear
    within float rounding."""
    bilinear = "bilinear" in spec
    worst, ndiff, total = 0.0, 0, 0
    for i, a in enumerate(images[:4]):
        h, w, c = a.shape
        src, out = str(tmp_path / "in.raw"), str(tmp_path / "o.raw")
        a.tofile(src)
        full = "center_crop %d,%d | %s%s | to f32 chw" % (h, w, spec, flips)
        for index in range(6):
            tr = json.loads(dump("runraw", full, src, h, w, c, out, 2, 100 * i + index))
            got = np.fromfile(out, np.float32).reshape(3, h, w)
            ang, tx, ty, sc, shx, shy = tr["affine"][0]
            assert tx == int(tx) and ty == int(ty)
            if "translate=" not in spec:
                assert tx == ty == 0
            t = tv(np.repeat(a, 3, axis=2) if c == 1 else a).float() / 255
            ref = F.affine(t, ang, [int(tx), int(ty)], sc, [shx, shy],
                           InterpolationMode.BILINEAR if bilinear else InterpolationMode.NEAREST,
                           fill_of(spec))
            if "| flip 1" in flips:
                ref = F.hflip(ref)
            if "vflip 1" in flips:
                ref = F.vflip(ref)
            d = np.abs(got - ref.numpy())
            worst = max(worst, float(d.max()))
            ndiff += int((d > 1e-4).sum())
            total += d.size
    print("%s%s: max %.3g (0-1 units), %d of %d values off by more than 1e-4"
          % (spec, flips, worst, ndiff, total))
    if bilinear:
        assert worst <= 1e-4
    elif not flips:
        assert worst == 0.0
    else:
        assert ndiff <= GEO_FRACTION * total


def test_affine_draws_follow_the_ranges(tmp_path):
    a = np.zeros((40, 50, 3), np.uint8)
    src = str(tmp_path / "z.raw")
    a.tofile(src)
    spec = ("center_crop 40,50 | affine 5:25 translate=0.1,0.2 scale=0.5:0.75 "
            "shear=1,2,3,4 | to u8")
    txs, tys = set(), set()
    for index in range(200):
        tr = json.loads(dump("runraw", spec, src, 40, 50, 3, str(tmp_path / "o"), 1, index))
        ang, tx, ty, sc, shx, shy = tr["affine"][0]
        assert 5 <= ang <= 25 and 0.5 <= sc <= 0.75 and 1 <= shx <= 2 and 3 <= shy <= 4
        assert abs(tx) <= 5 and abs(ty) <= 8  # round(u(-0.1 * 50, 5)), round(u(-0.2 * 40, 8))
        txs.add(tx)
        tys.add(ty)
    assert txs == set(range(-5, 6)) and tys == set(range(-8, 9))


@pytest.mark.parametrize("spec,message", [
    ("resize 64,64 | affine", "expected DEGREES after 'affine'"),
    ("resize 64,64 | affine -5", "affine DEGREES must be >= 0"),
    ("resize 64,64 | affine 5 translate=0.5", "translate takes 2 values (TX,TY), got 1"),
    ("resize 64,64 | affine 5 translate=0.5,1.5", "translate values must be between 0 and 1"),
    ("resize 64,64 | affine 5 scale=0:1", "scale takes a range LO:HI with 0 < LO <= HI"),
    ("resize 64,64 | affine 5 scale=2:1", "must be low:high"),
    ("resize 64,64 | affine 5 shear=1,2,3", "shear takes 1, 2 or 4 values"),
    ("resize 64,64 | affine 5 shear=-1", "shear S must be >= 0"),
    ("resize 64,64 | affine 5 shear=0,90", "shear ranges must be low:high within -89:89"),
    ("resize 64,64 | affine 5 interpolation=bicubic", "affine interpolation must be nearest "
                                                      "or bilinear, got 'bicubic'"),
    ("resize 64,64 | affine 5 fill=1,2", "fill has 2 values but the image has 3 channels"),
    ("resize 64,64 | normalize imagenet | affine 5", "affine must come before normalize"),
    ("resize 64,64 | affine 5 | posterize 3", "posterize must come before"),
    ("affine 5 | resize 64,64", "resize after affine is not supported"),
    ("resize 64,64 | flip | affine 5 | resize 32,32", "resize after affine is not supported"),
])
def test_affine_spec_errors(spec, message):
    with pytest.raises(stoker.SpecError) as e:
        stoker.spec_check(spec, 0, 0, 0)
    assert message in str(e.value)


def test_random_affine_class():
    t = stoker.RandomAffine(15, translate=(0.1, 0.2), scale=(0.8, 1.2), shear=(-5, 5, -2, 2),
                            interpolation=InterpolationMode.BILINEAR, fill=(1, 2, 3))
    assert t.spec() == ("affine 15 translate=0.1,0.2 scale=0.8:1.2 shear=-5,5,-2,2 "
                        "interpolation=bilinear fill=1,2,3")
    assert stoker.RandomAffine((-3, 7)).spec() == "affine -3:7"
    assert stoker.RandomAffine(0, shear=4.5).spec() == "affine 0 shear=4.5"
    with pytest.raises(ValueError, match="nearest or bilinear"):
        stoker.RandomAffine(5, interpolation=InterpolationMode.BICUBIC)
    with pytest.raises(ValueError, match="center"):
        stoker.RandomAffine(5, center=(1, 1))
    with pytest.raises(stoker.SpecError, match="translate values must be between 0 and 1"):
        stoker.RandomAffine(5, translate=(2, 0))


@pytest.mark.parametrize("shape", [(48, 32, 32, 3), (48, 28, 28)])
def test_fixed_shape_input_any_thread_count(shape):
    """Raw fixed-shape images (CIFAR, MNIST) through pad / crop / flip /
    policy / affine: the same bytes with 1 and 2 threads, and the same
    again on a second run (draws are a function of seed, epoch, index)."""
    x = np.random.default_rng(1).integers(0, 256, shape, dtype=np.uint8)
    ds = stoker.from_numpy(x, np.arange(shape[0]))
    side = shape[1]
    for spec in ["pad 4 | random_crop %d | flip | rand_augment 3 | to u8" % side,
                 "trivial_augment_wide fill=7 | to u8",
                 "auto_augment | affine 10 shear=5 translate=0.1,0.1 | to f32"]:
        outs = []
        for threads in (1, 2, 2):
            loader = stoker.Loader(ds, batch_size=16, pipeline=spec, num_threads=threads,
                                   output="numpy", seed=3, shuffle=True)
            outs.append(np.concatenate([b[0] for b in loader]))
        assert (outs[0] == outs[1]).all() and (outs[1] == outs[2]).all(), spec
        assert outs[0].shape[0] == shape[0]


def test_transform_classes_give_the_spec_pipelines_batches():
    x = np.random.default_rng(2).integers(0, 256, (32, 40, 36, 3), dtype=np.uint8)
    ds = stoker.from_numpy(x, np.arange(32))
    classes = [stoker.RandomCrop(32), stoker.RandomHorizontalFlip(),
               stoker.RandAugment(num_ops=3, magnitude=12), stoker.TrivialAugmentWide(),
               stoker.AutoAugment(fill=5), stoker.RandomAffine(20, translate=(0.1, 0.2))]
    spec = ("random_crop 32 | flip 0.5 | rand_augment 3 12 | trivial_augment_wide | "
            "auto_augment imagenet fill=5 | affine 20 translate=0.1,0.2 | to u8")
    a = stoker.Loader(ds, batch_size=8, transforms=classes, dtype="uint8", layout="hwc",
                      output="numpy", seed=9, shuffle=True)
    b = stoker.Loader(ds, batch_size=8, pipeline=spec, output="numpy", seed=9, shuffle=True)
    n = 0
    for (xa, ya), (xb, yb) in zip(a, b):
        assert xa.shape == (8, 32, 32, 3)
        assert (xa == xb).all() and (ya == yb).all()
        n += 1
    assert n == 4
