"""The coco: reader against pycocotools, the reference every COCO user has.

A COCO instances file is built here the way COCO's own are: polygons as
flat [x0, y0, ...] lists (random shapes, some reaching outside the image,
some on half-pixel ties, some with repeated vertices), crowd regions as
RLEs made by pycocotools.mask.encode (compressed strings, and uncompressed
counts as COCO stores its crowds), non-contiguous category ids, an image
without annotations, images listed out of id order; it is written with
Python's json module beside small JPEGs written by PIL. pycocotools.coco.COCO
loads the same file as the reference: the boxes (loadAnns' bbox as XYXY,
clipped), the categories (sorted ids -> labels 0..K-1, names), the image
ids and the masks (annToMask, painted in annotation order) read through
stoker equal its values exactly.

pycocotools is not packaged by Debian 12: scripts/test.sh installs it into
build/pycocotools (pip --target, --no-deps: it needs only NumPy); this test
also finds it on sys.path or in $STOKER_PYCOCOTOOLS.
"""
import ctypes as C
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import BUILD, run_stoker
from stk_ctypes import lib

for _d in (os.environ.get("STOKER_PYCOCOTOOLS"), os.path.join(BUILD, "pycocotools")):
    if _d and os.path.isdir(os.path.join(_d, "pycocotools")) and _d not in sys.path:
        sys.path.insert(0, _d)
try:
    from pycocotools import mask as mask_utils
    from pycocotools.coco import COCO
except ImportError as e:  # pragma: no cover - depends on the machine
    pytest.skip("pycocotools is not installed (%s): scripts/test.sh installs it with "
                "'/usr/bin/python3 -m pip install --target build/pycocotools --no-deps "
                "pycocotools'" % e, allow_module_level=True)

from PIL import Image  # noqa: E402

import stoker  # noqa: E402

lib.stk_dataset_close.argtypes = [C.c_void_p]
lib.stk_dataset_read_field.argtypes = [C.c_void_p, C.c_uint64, C.c_char_p,
                                       C.POINTER(C.c_void_p), C.POINTER(C.c_size_t), C.c_void_p]


class CDataset:
    """stk_dataset_open / stk_dataset_read_field through ctypes."""

    def __init__(self, uri):
        self.ds = C.c_void_p()
        rc = lib.stk_dataset_open(uri.encode(), None, C.byref(self.ds))
        if rc != 0:
            raise RuntimeError(lib.stk_errmsg().decode())

    def field(self, i, name):
        d, n, shape = C.c_void_p(), C.c_size_t(), (C.c_uint32 * 3)()
        rc = lib.stk_dataset_read_field(self.ds, i, name.encode(), C.byref(d), C.byref(n), shape)
        if rc != 0:
            raise RuntimeError(lib.stk_errmsg().decode())
        b = C.string_at(d, n.value)
        lib.stk_free(d)
        return b, tuple(shape)

    def close(self):
        lib.stk_dataset_close(self.ds)


CATEGORIES = [{"id": 18, "name": "dog"}, {"id": 1, "name": "person"},
              {"id": 3, "name": "car"}, {"id": 90, "name": "tooth brush"}]


def build(root, seed=0, n_images=24):
    """Images and an instances file under root; returns (images dir, json path)."""
    rng = np.random.default_rng(seed)
    img_dir = os.path.join(root, "val2017")
    os.makedirs(img_dir)
    images, anns = [], []
    ann_id = 100
    ids = rng.permutation(np.arange(1, 10 * n_images, 10))[:n_images]
    for k, image_id in enumerate(ids):
        h, w = int(rng.integers(8, 90)), int(rng.integers(8, 120))
        name = "%012d.jpg" % image_id
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(
            os.path.join(img_dir, name), quality=90)
        images.append({"id": int(image_id), "file_name": name, "height": h, "width": w,
                       "license": 1})
        n_anns = 0 if k == 3 else int(rng.integers(1, 9))
        for _ in range(n_anns):
            cat = int(rng.choice([c["id"] for c in CATEGORIES]))
            kind = rng.integers(0, 5)
            crowd = 0
            if kind <= 2:  # polygons: 1-3 parts
                parts = []
                for _p in range(int(rng.integers(1, 4))):
                    nv = int(rng.integers(3, 12))
                    if kind == 0:  # anywhere, some vertices outside the image
                        xs = rng.uniform(-0.2 * w, 1.2 * w, nv)
                        ys = rng.uniform(-0.2 * h, 1.2 * h, nv)
                    elif kind == 1:  # half-pixel grid: the rounding ties
                        xs = rng.integers(-2, 2 * w + 2, nv) / 2.0
                        ys = rng.integers(-2, 2 * h + 2, nv) / 2.0
                    else:  # a star around a centre, COCO-like precision
                        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
                        a = np.sort(rng.uniform(0, 2 * np.pi, nv))
                        r = rng.uniform(1, max(w, h) / 2, nv)
                        xs, ys = cx + r * np.cos(a), cy + r * np.sin(a)
                    if rng.random() < 0.2:  # a repeated vertex
                        j = int(rng.integers(0, nv))
                        xs, ys = np.insert(xs, j, xs[j]), np.insert(ys, j, ys[j])
                    parts.append([round(float(v), 2) for v in np.stack([xs, ys], 1).ravel()])
                seg = parts
                xs_all = np.concatenate([np.array(p[0::2]) for p in parts])
                ys_all = np.concatenate([np.array(p[1::2]) for p in parts])
                bbox = [float(xs_all.min()), float(ys_all.min()),
                        float(xs_all.max() - xs_all.min()), float(ys_all.max() - ys_all.min())]
            else:  # a crowd region as RLE
                crowd = 1
                m = np.zeros((h, w), np.uint8)
                y0, x0 = int(rng.integers(0, h)), int(rng.integers(0, w))
                m[y0:y0 + int(rng.integers(1, h)), x0:x0 + int(rng.integers(1, w))] = 1
                m &= (rng.random((h, w)) < 0.8).astype(np.uint8)
                rle = mask_utils.encode(np.asfortranarray(m))
                if kind == 3:  # compressed string
                    seg = {"size": [h, w], "counts": rle["counts"].decode("ascii")}
                else:  # uncompressed counts, as COCO's crowds are stored
                    flat = m.ravel(order="F")
                    change = np.flatnonzero(np.diff(flat)) + 1
                    edges = np.concatenate([[0], change, [flat.size]])
                    counts = np.diff(edges).tolist()
                    if flat[0] == 1:
                        counts = [0] + counts
                    seg = {"size": [h, w], "counts": counts}
                bbox = [float(v) for v in mask_utils.toBbox(rle)]
                if rng.random() < 0.5:  # overshooting the image: clipped
                    bbox[2] += 3.5
            anns.append({"id": ann_id, "image_id": int(image_id), "category_id": cat,
                         "segmentation": seg, "area": 1.0, "bbox": bbox, "iscrowd": crowd})
            ann_id += 1
    rng.shuffle(anns)
    path = os.path.join(root, "instances_val2017.json")
    with open(path, "w") as f:
        json.dump({"info": {"description": "test"}, "licenses": [], "images": images,
                   "annotations": anns, "categories": CATEGORIES}, f)
    return img_dir, path


@pytest.fixture(scope="module")
def coco_set(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("coco"))
    img_dir, path = build(root)
    return img_dir, path, COCO(path)


def reference(coco, image_id, crowd=True):
    """pycocotools' view of one image: its annotations in file order."""
    anns = coco.loadAnns(coco.getAnnIds(imgIds=image_id))
    return [a for a in anns if crowd or not a["iscrowd"]]


def test_boxes_categories_ids(coco_set):
    img_dir, path, coco = coco_set
    uri = "coco:%s?annotations=%s" % (img_dir, path)
    cat_ids = sorted(coco.getCatIds())
    label_of = {c: i for i, c in enumerate(cat_ids)}
    ds = stoker.open(uri)
    assert ds.format == "coco"
    assert len(ds) == len(coco.getImgIds())
    assert ds.classes == [coco.loadCats(c)[0]["name"] for c in cat_ids]
    assert ds.num_classes == len(cat_ids)
    cds = CDataset(uri)
    try:
        for i, image_id in enumerate(sorted(coco.getImgIds())):
            info = coco.loadImgs(image_id)[0]
            assert ds.path(i) == os.path.join(img_dir, info["file_name"])
            b, _ = cds.field(i, "image_id")
            assert np.frombuffer(b, np.int64).tolist() == [image_id]
            assert np.frombuffer(cds.field(i, "label")[0], np.int64).tolist() == [-1]
            anns = reference(coco, image_id)
            want = []
            for a in anns:
                x, y, w, h = a["bbox"]
                want.append([min(max(x, 0.0), info["width"]), min(max(y, 0.0), info["height"]),
                             min(max(x + w, 0.0), info["width"]),
                             min(max(y + h, 0.0), info["height"])])
            got = np.frombuffer(cds.field(i, "boxes")[0], np.float32).reshape(-1, 4)
            np.testing.assert_array_equal(got, np.array(want, np.float32).reshape(-1, 4))
            got = np.frombuffer(cds.field(i, "box_labels")[0], np.int64)
            assert got.tolist() == [label_of[a["category_id"]] for a in anns]
            got = np.frombuffer(cds.field(i, "iscrowd")[0], np.int64)
            assert got.tolist() == [a["iscrowd"] for a in anns]
            # the image field is the file as stored
            with open(os.path.join(img_dir, info["file_name"]), "rb") as f:
                assert cds.field(i, "image")[0] == f.read()
    finally:
        cds.close()


@pytest.mark.parametrize("mode,crowd", [("semantic", "keep"), ("instance", "keep"),
                                        ("instance", "drop")])
def test_masks_equal_ann_to_mask(coco_set, mode, crowd):
    img_dir, path, coco = coco_set
    label_of = {c: i for i, c in enumerate(sorted(coco.getCatIds()))}
    cds = CDataset("coco:%s?annotations=%s&masks=%s&crowd=%s" % (img_dir, path, mode, crowd))
    polygons = rles = 0
    try:
        for i, image_id in enumerate(sorted(coco.getImgIds())):
            info = coco.loadImgs(image_id)[0]
            b, shape = cds.field(i, "mask")
            assert shape == (info["height"], info["width"], 1)
            got = np.frombuffer(b, np.uint8).reshape(info["height"], info["width"])
            want = np.zeros_like(got)
            for row, a in enumerate(reference(coco, image_id, crowd == "keep")):
                m = coco.annToMask(a)
                want[m == 1] = label_of[a["category_id"]] + 1 if mode == "semantic" else row + 1
                polygons += isinstance(a["segmentation"], list)
                rles += isinstance(a["segmentation"], dict)
            np.testing.assert_array_equal(got, want, err_msg="image id %d" % image_id)
    finally:
        cds.close()
    assert polygons > 20 and (rles > 5 or crowd == "drop")


def test_empty_drop_and_cli(coco_set, tmp_path):
    img_dir, path, coco = coco_set
    empty = [i for i in coco.getImgIds() if not coco.getAnnIds(imgIds=i)]
    assert empty
    with pytest.warns(RuntimeWarning):
        ds = stoker.open("coco:%s?annotations=%s&empty=drop" % (img_dir, path))
    assert len(ds) == len(coco.getImgIds()) - len(empty)
    assert len(ds.skipped_inputs) == len(empty)
    assert "no annotations (empty=drop)" in ds.skipped_inputs[0]

    uri = "coco:%s?annotations=%s&masks=semantic" % (img_dir, path)
    out = run_stoker("inspect", uri).stdout
    assert "format:   coco" in out
    assert "boxes        float32 [*x4]" in out
    assert "mask         raw_image" in out
    assert "3 tooth brush" in out
    out = run_stoker("verify", uri, "--decode").stdout
    assert "0 damaged" in out
    # stoker cat writes a field's bytes
    first = sorted(coco.getImgIds())[0]
    p = subprocess.run([os.path.join(BUILD, "stoker"), "cat", uri, "0", "--field", "boxes"],
                       capture_output=True, check=True)
    got = np.frombuffer(p.stdout, np.float32).reshape(-1, 4)
    assert len(got) == len(reference(coco, first))


def test_bad_files(tmp_path, coco_set):
    img_dir, path, coco = coco_set
    with open(path) as f:
        data = json.load(f)

    def write(d, name="bad.json"):
        p = str(tmp_path / name)
        with open(p, "w") as f:
            json.dump(d, f)
        return p

    def expect(d, exc, *words, extra=""):
        p = write(d)
        with pytest.raises(exc) as e:
            stoker.open("coco:%s?annotations=%s%s" % (img_dir, p, extra))
        for w in words:
            assert w in str(e.value), (str(e.value), w)
        assert p in str(e.value)

    d = json.loads(json.dumps(data))
    d["annotations"][0]["category_id"] = 7
    a = d["annotations"][0]
    expect(d, stoker.FormatError, "annotation %d (image id %d): category_id 7 is not in"
           % (a["id"], a["image_id"]))
    d = json.loads(json.dumps(data))
    d["annotations"][1]["bbox"][2] = -3.0
    expect(d, stoker.FormatError, "annotation %d" % d["annotations"][1]["id"], "negative width")
    d = json.loads(json.dumps(data))
    d["images"].append(dict(d["images"][0], file_name="other.jpg"))
    expect(d, stoker.FormatError, "image id %d is given twice" % d["images"][0]["id"])
    d = json.loads(json.dumps(data))
    d["images"][2]["file_name"] = "missing.jpg"
    expect(d, stoker.NotFound, "missing.jpg (image id %d): no such file" % d["images"][2]["id"],
           "missing=skip")
    with pytest.warns(RuntimeWarning):
        ds = stoker.open("coco:%s?annotations=%s&missing=skip" % (img_dir, write(d)))
    assert len(ds) == len(data["images"]) - 1
    # malformed JSON: line and column as Python's json module counts them
    p = str(tmp_path / "broken.json")
    with open(p, "w") as f:
        f.write('{"images": [\n  {"id": 1,, "file_name": "a.jpg"}]}')
    with pytest.raises(stoker.FormatError) as e:
        stoker.open("coco:%s?annotations=%s" % (img_dir, p))
    with pytest.raises(json.JSONDecodeError) as py:
        with open(p) as f:
            json.load(f)
    assert "line %d, column %d" % (py.value.lineno, py.value.colno) in str(e.value)
    # over the size limit
    with pytest.raises(stoker.LimitError) as e:
        stoker.open("coco:%s?annotations=%s" % (img_dir, path), max_bytes=1000)
    assert "max_bytes" in str(e.value)
