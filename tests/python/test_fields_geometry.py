"""Masks and boxes follow the image (docs/fields.md), checked against
torchvision with the parameters stoker drew.

The photos set with synthetic masks (class ids in blocks plus an ellipse)
and boxes, packed with stoker.ShardWriter. Each row's drawn steps come back
in the ``geometry`` field; the reference replays them with torchvision's
functional ops on the mask tensor (nearest, as torchvision.transforms.v2
does for tv_tensors.Mask: its mask kernels call these same tensor ops), and
with torchvision.transforms.v2's bounding-box formulas for the boxes
(Debian's torchvision 0.14 predates v2, so those few lines are written out
here from v2's _geometry.py: crop subtracts and clamps, resize scales,
flip mirrors, rotate maps the corners through the forward affine matrix and
clamps; SanitizeBoundingBoxes(min_size=1) then drops degenerate boxes).
"""
import io
import math
import os

import numpy as np
import pytest

import stoker
from conftest import need_photos

torch = pytest.importorskip("torch")
F = pytest.importorskip("torchvision.transforms.functional")
from torchvision.transforms import InterpolationMode  # noqa: E402

GEO_HFLIP, GEO_VFLIP, GEO_CROP, GEO_RESIZE, GEO_ROTATE, GEO_AFFINE, GEO_BBOX, GEO_PAD = range(8)


def _photos(n=24):
    root = os.path.join(need_photos("train"), "train")
    out = []
    for cls in sorted(os.listdir(root)):
        for name in sorted(os.listdir(os.path.join(root, cls))):
            out.append(os.path.join(root, cls, name))
    step = max(1, len(out) // n)
    return out[::step][:n]


def _mask_for(h, w, k):
    y, x = np.mgrid[0:h, 0:w]
    m = (1 + ((x * 7) // w + 3 * ((y * 5) // h)) % 20).astype(np.uint8)
    ell = ((x - w * 0.4) / (w * 0.25)) ** 2 + ((y - h * 0.55) / (h * 0.2)) ** 2 < 1
    m[ell] = 21 + k % 3
    return m


def _boxes_for(h, w, rng):
    b = []
    for _ in range(5):
        x0, x1 = sorted(rng.uniform(0, w, 2))
        y0, y1 = sorted(rng.uniform(0, h, 2))
        b.append([x0, y0, x1 + 1.0 if x1 + 1 <= w else x1, y1])
    return np.asarray(b, np.float32)


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    from PIL import Image
    dest = str(tmp_path_factory.mktemp("fields") / "shards")
    rng = np.random.default_rng(5)
    truth = []
    fields = {"image": "image", "label": "int64", "mask": "raw_image",
              "boxes": ("float32", (None, 4)), "box_labels": ("int64", (None,))}
    with stoker.ShardWriter(dest, fields) as w:
        for k, path in enumerate(_photos()):
            data = open(path, "rb").read()
            with Image.open(io.BytesIO(data)) as im:
                wd, ht = im.size
            mask = _mask_for(ht, wd, k)
            boxes = _boxes_for(ht, wd, rng)
            labels = np.arange(len(boxes), dtype=np.int64) + 10 * k
            w.write({"image": data, "label": k % 10, "mask": mask, "boxes": boxes,
                     "box_labels": labels})
            truth.append((mask, boxes, labels))
    return dest, truth


# -- references ---------------------------------------------------------------

def _ref_mask(mask, steps):
    t = torch.from_numpy(mask)[None]
    for s in steps:
        kind = int(s[0])
        top, left, h, w = (int(v) for v in s[1:5])
        if kind == GEO_HFLIP:
            t = F.hflip(t)
        elif kind == GEO_VFLIP:
            t = F.vflip(t)
        elif kind in (GEO_CROP, GEO_BBOX):
            t = F.crop(t, top, left, h, w)
        elif kind == GEO_RESIZE:
            t = F.resize(t, [h, w], interpolation=InterpolationMode.NEAREST)
        elif kind == GEO_ROTATE:
            t = F.rotate(t, float(s[5]), interpolation=InterpolationMode.NEAREST, fill=0)
        elif kind == GEO_AFFINE:
            t = F.affine(t, float(s[5]), [float(s[6]), float(s[7])], float(s[8]),
                         [float(s[9]), float(s[10])], interpolation=InterpolationMode.NEAREST,
                         fill=0)
        else:
            raise AssertionError("step kind %d" % kind)
    return t[0].numpy()


def _forward_affine(center, angle, translate, scale, shear):
    """torchvision.transforms.v2's _get_inverse_affine_matrix(...,
    inverted=False)."""
    rot, sx, sy = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -(a * math.tan(sx) + math.sin(rot))
    c = math.sin(rot - sy) / math.cos(sy)
    d = math.cos(rot) - c * math.tan(sx)
    m = [a * scale, b * scale, 0.0, c * scale, d * scale, 0.0]
    m[2] += cx + tx - m[0] * cx - m[1] * cy
    m[5] += cy + ty - m[3] * cx - m[4] * cy
    return m


def _ref_boxes(boxes, h, w, steps):
    """Boxes through v2's kernels; returns (kept boxes, keep flags)."""
    b = boxes.astype(np.float64).copy()
    keep = np.ones(len(b), bool)

    def clamp(b, h, w):
        b[:, 0::2] = b[:, 0::2].clip(0, w)
        b[:, 1::2] = b[:, 1::2].clip(0, h)

    for s in steps:
        kind = int(s[0])
        top, left, sh, sw = (int(v) for v in s[1:5])
        if kind == GEO_HFLIP:
            b[:, [0, 2]] = w - b[:, [2, 0]]
        elif kind == GEO_VFLIP:
            b[:, [1, 3]] = h - b[:, [3, 1]]
        elif kind in (GEO_CROP, GEO_BBOX):
            if kind == GEO_BBOX and (sh, sw) != (h, w):
                cx, cy = (b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2
                keep &= (left < cx) & (cx < left + sw) & (top < cy) & (cy < top + sh)
            b -= [left, top, left, top]
            h, w = sh, sw
            clamp(b, h, w)
        elif kind == GEO_RESIZE:
            b *= [sw / w, sh / h, sw / w, sh / h]
            h, w = sh, sw
        elif kind in (GEO_ROTATE, GEO_AFFINE):
            if kind == GEO_ROTATE:
                m = _forward_affine([w * 0.5, h * 0.5], -float(s[5]), [0, 0], 1.0, [0, 0])
            else:
                m = _forward_affine([w * 0.5, h * 0.5], float(s[5]), [float(s[6]), float(s[7])],
                                    float(s[8]), [float(s[9]), float(s[10])])
            pts = b[:, [[0, 1], [2, 1], [2, 3], [0, 3]]].reshape(-1, 2)
            x = m[0] * pts[:, 0] + m[1] * pts[:, 1] + m[2]
            y = m[3] * pts[:, 0] + m[4] * pts[:, 1] + m[5]
            x, y = x.reshape(-1, 4), y.reshape(-1, 4)
            b = np.stack([x.min(1), y.min(1), x.max(1), y.max(1)], 1)
            clamp(b, h, w)
    keep &= (b[:, 2] - b[:, 0] >= 1) & (b[:, 3] - b[:, 1] >= 1)
    return b[keep], keep


SPECS = [
    "random_resized_crop 96 scale=0.25:1 | flip 0.5 | rotate 30 | to u8 hwc",
    "resize 80 | random_crop 64 | flip 0.5 | vflip 0.5 | to u8 hwc",
    "flip 0.5 | resize 70,90 | affine 20 translate=0.1,0.1 scale=0.8:1.2 shear=10 | to u8 hwc",
    "random_bbox_crop | resize 64,64 | flip 0.5 | to u8 hwc",
]


@pytest.mark.parametrize("spec", SPECS)
def test_masks_and_boxes_equal_torchvision(packed, spec):
    dest, truth = packed
    fields = "image,label,mask,boxes,box_labels,geometry,index"
    loader = stoker.Loader(dest, batch_size=8, shuffle=True, seed=3, pipeline=spec,
                           num_threads=2, output="numpy", fields=fields)
    assert loader.fields == fields.split(",")
    rows = rotated = 0
    mism = 0
    total_px = 0
    for images, labels, masks, boxes, box_labels, geometry, index in loader:
        assert isinstance(boxes, stoker.Ragged) and isinstance(geometry, stoker.Ragged)
        for r in range(len(labels)):
            i = int(index[r])
            mask, b0, l0 = truth[i]
            steps = np.asarray(geometry[r])
            ref = _ref_mask(mask, steps)
            got = np.asarray(masks[r])
            assert got.shape == ref.shape
            has_rot = any(int(s[0]) in (GEO_ROTATE, GEO_AFFINE) for s in steps)
            if has_rot:
                # grid_sample's float32 matrix product can move a sampling
                # point within ~1e-5 of a half (docs/pipeline.md, affine)
                mism += int((got != ref).sum())
                total_px += got.size
                rotated += 1
            else:
                np.testing.assert_array_equal(got, ref)
            rb, keep = _ref_boxes(b0, mask.shape[0], mask.shape[1], steps)
            gb = np.asarray(boxes[r])
            assert gb.shape == rb.shape, (steps, gb, rb)
            np.testing.assert_allclose(gb, rb, atol=1e-4, rtol=0)
            np.testing.assert_array_equal(np.asarray(box_labels[r]), l0[keep])
            rows += 1
    assert rows == len(truth)
    if total_px:
        assert mism / total_px < 1e-3, (mism, total_px)


def test_image_pixels_unchanged_by_fields(packed):
    dest, _ = packed
    spec = SPECS[0]
    a = stoker.Loader(dest, batch_size=6, shuffle=True, seed=9, pipeline=spec, num_threads=2,
                      output="numpy")
    b = stoker.Loader(dest, batch_size=6, shuffle=True, seed=9, pipeline=spec, num_threads=1,
                      output="numpy", fields="image,mask,boxes,box_labels,label")
    for (ia, la), (ib, mb, bb, bl, lb) in zip(a, b):
        np.testing.assert_array_equal(np.asarray(ia), np.asarray(ib))
        np.testing.assert_array_equal(np.asarray(la), np.asarray(lb))


def test_dict_padded_path_and_views(packed):
    dest, truth = packed
    loader = stoker.Loader(dest, batch_size=5, pipeline="resize 32,32 | to u8 hwc",
                           num_threads=2, output="torch", as_dict=True, views=2,
                           fields=["image", "boxes", "box_labels", "path", "index"])
    batch = next(iter(loader))
    assert list(batch) == ["image", "boxes", "box_labels", "path", "index"]
    assert batch["image"].shape == (10, 32, 32, 3)
    boxes = batch["boxes"]
    assert len(boxes) == 10 and isinstance(boxes.values, torch.Tensor)
    padded, present = boxes.padded(fill=-1)
    assert padded.shape[0] == 10 and padded.shape[2] == 4
    for r in range(10):
        n = int(present[r].sum())
        assert n == boxes.lengths()[r]
        assert torch.equal(padded[r, :n], boxes[r])
        assert bool((padded[r, n:] == -1).all())
    # views: the rows of one sample carry the same index; paths are strings
    idx = batch["index"]
    assert torch.equal(idx[0::2], idx[1::2])
    assert all(isinstance(p, str) for p in batch["path"])


def test_field_errors(packed):
    dest, _ = packed
    with pytest.raises(stoker.InvalidArgument, match="no field 'nope'"):
        stoker.Loader(dest, pipeline="resize 32,32", fields="image,nope")
    with pytest.raises(stoker.InvalidArgument, match="unknown role"):
        stoker.Loader(dest, pipeline="resize 32,32", fields="image,mask:colour")
    with pytest.raises(stoker.InvalidArgument, match="per_box but no boxes"):
        stoker.Loader(dest, pipeline="resize 32,32", fields="image,box_labels")
    with pytest.raises(stoker.InvalidArgument, match="cannot be boxes"):
        stoker.Loader(dest, pipeline="resize 32,32", fields="image,label:boxes")
    with pytest.raises(stoker.InvalidArgument, match="no 'image'"):
        stoker.Loader(dest, pipeline="resize 32,32", fields="label")
    with pytest.raises(stoker.SpecError, match="mask or box"):
        stoker.Loader(dest, pipeline="resize 32,32 | auto_augment", fields="image,mask")


def test_external_source_fields_follow_the_image():
    """An ExternalSource's declared fields go through fields= like a
    reader's: boxes scaled by the resize and mirrored by the flip the
    geometry field reports, box_labels kept with them."""
    rng = np.random.default_rng(0)
    items = []
    for i in range(20):
        img = rng.integers(0, 255, (40, 50, 3), dtype=np.uint8)
        k = i % 3 + 1
        items.append((img, i % 4, np.array([[2, 3, 20, 30]] * k, np.float32) + i,
                      np.arange(k, dtype=np.int64)))
    src = stoker.ExternalSource(items, fields={"boxes": ("float32", (None, 4)),
                                               "box_labels": ("int64", (None,))})
    loader = stoker.Loader(src, batch_size=8, pipeline="resize 20,25 | flip 0.5 | to u8 hwc",
                           num_threads=2, output="numpy",
                           fields="image,label,boxes,box_labels,index,geometry")
    seen = 0
    for img, lab, boxes, box_labels, index, geometry in loader:
        for r in range(len(index)):
            i = int(index[r])
            ref = items[i][2].astype(np.float64) * 0.5
            if any(int(s[0]) == GEO_HFLIP for s in np.asarray(geometry[r])):
                ref[:, [0, 2]] = 25 - ref[:, [2, 0]]
            np.testing.assert_allclose(np.asarray(boxes[r]), ref, atol=1e-4, rtol=0)
            np.testing.assert_array_equal(np.asarray(box_labels[r]), items[i][3])
            assert int(lab[r]) == i % 4
            seen += 1
    assert seen == 20


def test_dataset_fields_and_read_field(packed):
    dest, truth = packed
    ds = stoker.open(dest)
    f = ds.fields
    assert f["boxes"] == ("float32", (None, 4)) and f["box_labels"] == ("int64", (None,))
    assert f["mask"][0] == "raw_image" and f["image"][0] == "image"
    for i in (0, 5, len(truth) - 1):
        mask, boxes, labels = truth[i]
        np.testing.assert_array_equal(ds.read_field(i, "boxes"), boxes)
        np.testing.assert_array_equal(ds.read_field(i, "box_labels"), labels)
        np.testing.assert_array_equal(ds.read_field(i, "mask")[..., 0], mask)
        assert ds.read_field(i, "image")[:3] == b"\xff\xd8\xff"
    with pytest.raises(KeyError, match="no field 'nope'"):
        ds.read_field(0, "nope")


def test_cli_bench_fields_digest(packed):
    """stoker bench --fields: the digest covers the fields and is the same
    for any thread count."""
    import subprocess
    from conftest import STOKER
    dest, _ = packed

    def digest(*extra):
        out = subprocess.run([STOKER, "bench", dest, "--pipeline",
                              "random_resized_crop 48 | flip 0.5 | rotate 20 | to u8 hwc",
                              "--batch", "5", "--digest", "--seed", "2"] + list(extra),
                             capture_output=True, text=True, check=True).stdout
        return [l for l in out.splitlines() if l.startswith("digest:")][0]

    f = "image,label,mask,boxes,box_labels,geometry"
    one, two = digest("--fields", f, "-t", "1"), digest("--fields", f, "-t", "2")
    assert one == two
    assert one != digest("-t", "1")
    assert digest("-t", "2") == digest("--fields", "image,label", "-t", "1")
