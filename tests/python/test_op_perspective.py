"""`perspective` (src/ops/op_perspective.c) against torchvision 0.14's
RandomPerspective / F.perspective (Debian's python3-torchvision) as the
independent reference.

stoker draws from its own stream, so each sample's drawn corners (the
trace's float_ops, through bench/image_ops_dump `runraw`) are replayed
through torchvision on the same image:

- F.perspective(tensor, startpoints, endpoints, BILINEAR, fill): the whole
  op, torchvision's coefficients included. torchvision solves them in
  float32 with torch.linalg.lstsq (LAPACK sgels); stoker in double, so the
  sampling points differ by float32 rounding of the coefficients, which
  moves interpolated values by up to ~1e-4 (0-1 units): PERSP_TOL.
- torchvision's own grid and grid_sample (functional_tensor.perspective)
  with the coefficients solved in double as stoker does: the float32 grid
  and bilinear tap alone, within float rounding (torch's grid is a batched
  matrix product that may sum in another order): GRID_TOL.

PIL input is not the reference: torchvision resamples a PIL image in uint8
with Pillow's Image.transform(PERSPECTIVE), rounding every pixel to an
integer (and filling by Pillow's rule at the border), while stoker works on
the float image, like rotate and affine; test_pil_path_is_the_same_picture
states how close the two are.
"""
import json
import os
import subprocess

import numpy as np
import pytest
import torch
import torchvision.transforms.functional as F
import torchvision.transforms.functional_tensor as F_t
from PIL import Image
from torchvision.transforms import InterpolationMode

import stoker
from conftest import BUILD, CI

DUMP = os.path.join(BUILD, "image_ops_dump")
PERSP_TOL = 2e-4   # 0-1 units, vs F.perspective (float32 lstsq coefficients); measured 8.6e-5
GRID_TOL = 1e-5    # 0-1 units, vs torchvision's grid with stoker's coefficients; measured 2.3e-6

pytestmark = pytest.mark.skipif(not os.path.exists(DUMP) and not CI,
                                reason="image_ops_dump not built")


def dump(*args):
    p = subprocess.run([DUMP, *map(str, args)], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise AssertionError("image_ops_dump %s failed: %s" % (args, p.stderr))
    return p.stdout


def images():
    rng = np.random.default_rng(11)
    out = []
    for h, w in [(61, 80), (96, 73), (40, 40)]:
        y, x = np.mgrid[0:h, 0:w].astype(np.float32)
        a = np.stack([128 + 100 * np.sin(x / 5.0), 128 + 90 * np.cos(y / 7.0), (x * 3 + y) % 256],
                     axis=2)
        a[(x // 9 + y // 9) % 2 == 0] *= 0.6
        a += rng.normal(0, 6, a.shape)
        out.append(np.clip(a, 0, 255).astype(np.uint8))
    out.append(np.ascontiguousarray(out[0][:, :, :1]))  # one channel
    return out


def run(tmp_path, a, spec, seed, index):
    h, w, c = a.shape
    src, out = str(tmp_path / "in.raw"), str(tmp_path / "out.raw")
    a.tofile(src)
    full = "center_crop %d,%d | %s | to f32 chw" % (h, w, spec)
    tr = json.loads(dump("runraw", full, src, h, w, c, out, seed, index))
    return np.fromfile(out, np.float32).reshape(-1, h, w), tr  # (gray comes out as RGB)


def corners(tr):
    ops = [o for o in tr["float_ops"] if o[0] == "perspective"]
    if not ops:
        return None
    e = [int(v) for v in ops[0][1]]
    assert all(v == float(p) for v, p in zip(e, ops[0][1]))
    return [[e[0], e[1]], [e[2], e[3]], [e[4], e[5]], [e[6], e[7]]]


def start(h, w):
    return [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]


def coeffs_double(startpoints, endpoints):
    """_get_perspective_coeffs' system, solved in float64."""
    a, b = [], []
    for (x, y), (sx, sy) in zip(endpoints, startpoints):
        a.append([x, y, 1, 0, 0, 0, -sx * x, -sx * y])
        a.append([0, 0, 0, x, y, 1, -sy * x, -sy * y])
        b += [sx, sy]
    return np.linalg.solve(np.array(a, np.float64), np.array(b, np.float64)).tolist()


@pytest.mark.parametrize("spec,fill", [("perspective 0.5 p=1", 0),
                                       ("perspective 0.8 p=1 fill=200", 200),
                                       ("perspective distortion_scale=0.2 p=1", 0)])
def test_replays_in_torchvision(tmp_path, spec, fill):
    worst, worst_grid = 0.0, 0.0
    for i, a in enumerate(images()):
        h, w, c = a.shape
        rgb = np.repeat(a, 3, axis=2) if c == 1 else a
        t = torch.from_numpy(rgb).permute(2, 0, 1).contiguous().float() / 255
        c = 3
        f = [float(np.float32(fill) / np.float32(255))] * c
        for index in range(5):
            got, tr = run(tmp_path, a, spec, 3, 10 * i + index)
            end = corners(tr)
            assert end is not None  # p=1
            ref = F.perspective(t, start(h, w), end, InterpolationMode.BILINEAR, f).numpy()
            worst = max(worst, float(np.abs(got - ref).max()))
            grid = F_t.perspective(t, coeffs_double(start(h, w), end), "bilinear", f).numpy()
            worst_grid = max(worst_grid, float(np.abs(got - grid).max()))
    print("%s: max %.3g vs F.perspective, %.3g vs its grid with double coefficients "
          "(0-1 units)" % (spec, worst, worst_grid))
    assert worst <= PERSP_TOL
    assert worst_grid <= GRID_TOL


def test_draws_follow_get_params(tmp_path):
    """Corner ranges of RandomPerspective.get_params; u < p decides, one
    uniform always drawn; distortion 0 keeps the corners."""
    a = images()[0]
    h, w, _ = a.shape
    dw, dh = int(0.6 * (w // 2)), int(0.6 * (h // 2))
    applied, seen = 0, set()
    for index in range(200):
        _, tr = run(tmp_path, a, "perspective 0.6", 1, index)
        e = corners(tr)
        if e is None:
            continue
        applied += 1
        (x0, y0), (x1, y1), (x2, y2), (x3, y3) = e
        assert 0 <= x0 <= dw and 0 <= y0 <= dh
        assert w - dw - 1 <= x1 <= w - 1 and 0 <= y1 <= dh
        assert w - dw - 1 <= x2 <= w - 1 and h - dh - 1 <= y2 <= h - 1
        assert 0 <= x3 <= dw and h - dh - 1 <= y3 <= h - 1
        seen.add((x0, y0))
    assert 70 <= applied <= 130  # p defaults to 0.5
    assert len(seen) > 20
    t = torch.from_numpy(a).permute(2, 0, 1).float() / 255
    for index in range(5):
        got, tr = run(tmp_path, a, "perspective 0 p=1", 1, index)
        assert corners(tr) == start(h, w)  # the identity, within float rounding of the grid
        ref = F.perspective(t, start(h, w), start(h, w), InterpolationMode.BILINEAR, [0.0] * 3)
        assert np.abs(got - ref.numpy()).max() <= PERSP_TOL
        assert np.abs(got - t.numpy()).max() <= 1e-5
        got, tr = run(tmp_path, a, "perspective 0.9 p=0", 1, index)
        assert corners(tr) is None
        # not applied: the image as ToTensor makes it (v * (1/255) without a float stage)
        assert np.abs(got - t.numpy()).max() <= 1e-7


def test_pil_path_is_the_same_picture(tmp_path):
    """torchvision on the PIL image (uint8, Pillow's transform) against
    stoker's float result rounded to uint8: as close as torchvision's own
    tensor path is to its PIL path (measured: ~97% of values within one
    level, mean ~1 level, a few border pixels far off where Pillow's fill
    rule and grid_sample's mask blend differ)."""
    a = images()[1]
    h, w, c = a.shape
    ours_d, tv_d = [], []
    t = torch.from_numpy(a).permute(2, 0, 1).float() / 255
    for index in range(5):
        got, tr = run(tmp_path, a, "perspective 0.5 p=1", 7, index)
        ref = np.asarray(F.perspective(Image.fromarray(a), start(h, w), corners(tr),
                                       InterpolationMode.BILINEAR, 0)).astype(np.int32)
        tv = F.perspective(t, start(h, w), corners(tr), InterpolationMode.BILINEAR, [0.0] * 3)
        for x, d in ((got, ours_d), (tv.numpy(), tv_d)):
            d.append(np.abs(np.rint(x.transpose(1, 2, 0) * 255).astype(np.int32) - ref).ravel())
    d, dt = np.concatenate(ours_d), np.concatenate(tv_d)
    print("vs the PIL path: stoker %.2f%% of values within 1 level, mean %.3f; torchvision's "
          "tensor path %.2f%%, mean %.3f"
          % (100 * (d <= 1).mean(), d.mean(), 100 * (dt <= 1).mean(), dt.mean()))
    assert (d <= 1).mean() >= (dt <= 1).mean() - 0.002
    assert d.mean() <= dt.mean() + 0.01


def test_order_rules_and_python_class():
    with pytest.raises(stoker.SpecError, match="flip after perspective is not supported"):
        stoker.spec_check("resize 32,32 | perspective | flip | to f32", 0, 0, 0)
    with pytest.raises(stoker.SpecError, match="normalize"):
        stoker.spec_check("resize 32,32 | normalize imagenet | perspective", 0, 0, 0)
    stoker.spec_check("resize 32,32 | flip | perspective 0.3 | grayscale | to f32", 0, 0, 0)
    stoker.spec_check("resize 32,32 | random_apply 0.5 | perspective | to f32", 0, 0, 0)
    tf = stoker.RandomPerspective(0.3, p=0.7)
    spec = stoker.transforms.to_spec([stoker.Resize((32, 32)), tf])
    assert "perspective" in spec
    stoker.spec_check(spec + " | to f32", 0, 0, 0)
