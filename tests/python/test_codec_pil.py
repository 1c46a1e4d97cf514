"""stoker's image codec (src/codec/) against PIL, the reference torchvision uses.

The codec is internal to the library, so these tests drive it through
bench/decode_dump (built with the benchmarks: $STOKER_BUILD/decode_dump),
which writes the decoded RGB as a PPM. The images are made here with PIL and
NumPy; the expected pixels are PIL's Image.open(f).convert("RGB"), exactly
what torchvision's default loader returns.

Claims checked (docs/codec.md):
  * JPEG at full size is bit-exact with PIL for baseline and progressive,
    4:4:4 / 4:2:2 / 4:2:0, grayscale and CMYK (the same libjpeg-turbo, the
    same IDCT and upsampling);
  * a region decode equals the same window of PIL's decode exactly;
  * a DCT-scaled decode (1/2, 1/4, 1/8) equals PIL's draft() decode exactly,
    and its regions equal the same windows;
  * PNG equals PIL for every colour type and depth except 16-bit
    grayscale, where PIL clips (documented);
  * corrupt files fail with the documented codes; a PNG named .jpg decodes.
"""
import glob
import io
import os
import struct
import subprocess
import zlib

import numpy as np
import pytest
from PIL import Image

from conftest import BUILD, need_photos

DUMP = os.path.join(BUILD, "decode_dump")

# Under CI the tool must exist (a missing build fails, never skips).
pytestmark = pytest.mark.skipif(not os.path.exists(DUMP) and os.environ.get("CI") != "true",
                                reason="decode_dump not built (STK_BUILD_BENCH=OFF?)")


def parse_ppm(data):
    """Parse the P6 that decode_dump writes (no comments) into H x W x 3."""
    parts = data.split(b"\n", 3)
    assert parts[0] == b"P6", data[:20]
    w, h = map(int, parts[1].split())
    assert parts[2] == b"255"
    return np.frombuffer(parts[3], np.uint8).reshape(h, w, 3)


def decode(path, region=None, scale=1):
    args = [DUMP, str(path)]
    if region is not None:
        args += ["--region", "%d,%d,%d,%d" % region]
    if scale != 1:
        args += ["--scale", str(scale)]
    p = subprocess.run(args, capture_output=True, timeout=60)
    if p.returncode != 0:
        raise DecodeError(p.returncode, p.stderr.decode(errors="replace").strip())
    return parse_ppm(p.stdout)


class DecodeError(Exception):
    def __init__(self, rc, message):
        super().__init__("rc %d: %s" % (rc, message))
        self.rc = rc
        self.message = message


def pil_rgb(path):
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def photo_like(h, w, seed=0):
    """Smooth structure plus sensor-like noise, as a photograph has."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([128 + 90 * np.sin(xx / (23.0 + 7 * c) + c) * np.cos(yy / (17.0 + 5 * c) - c)
                     for c in range(3)], -1)
    return np.clip(base + rng.normal(0, 6, (h, w, 3)), 0, 255).astype(np.uint8)


JPEG_CASES = {
    "baseline444_q96": dict(quality=96, subsampling=0),
    "baseline420_q75": dict(quality=75, subsampling=2),
    "baseline422_q90": dict(quality=90, subsampling=1),
    "progressive420": dict(quality=90, subsampling=2, progressive=True),
    "progressive444": dict(quality=95, subsampling=0, progressive=True),
    "optimized420": dict(quality=85, subsampling=2, optimize=True),
}


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    d = tmp_path_factory.mktemp("jpegs")
    img = Image.fromarray(photo_like(371, 421))
    files = {}
    for name, kw in JPEG_CASES.items():
        files[name] = d / (name + ".jpg")
        img.save(files[name], **kw)
    files["gray"] = d / "gray.jpg"
    img.convert("L").save(files["gray"], quality=90)
    files["gray_progressive"] = d / "gray_p.jpg"
    img.convert("L").save(files["gray_progressive"], quality=90, progressive=True)
    files["cmyk"] = d / "cmyk.jpg"  # PIL writes Adobe-inverted CMYK
    img.convert("CMYK").save(files["cmyk"], quality=90)
    files["odd_17x9"] = d / "odd.jpg"
    Image.fromarray(photo_like(9, 17, 3)).save(files["odd_17x9"], quality=90, subsampling=2)
    files["one_pixel"] = d / "one.jpg"
    Image.fromarray(photo_like(1, 1, 4)).save(files["one_pixel"], quality=90)
    return files


@pytest.mark.parametrize("name", list(JPEG_CASES) + ["gray", "gray_progressive", "cmyk",
                                                      "odd_17x9", "one_pixel"])
def test_jpeg_full_decode_equals_pil(jpegs, name):
    got = decode(jpegs[name])
    want = pil_rgb(jpegs[name])
    assert got.shape == want.shape
    diff = np.abs(got.astype(int) - want.astype(int))
    assert diff.max() == 0, "%s: max abs error %d, mean %.4f" % (name, diff.max(), diff.mean())


@pytest.mark.parametrize("name", ["baseline444_q96", "baseline420_q75", "progressive420",
                                  "gray", "cmyk"])
def test_jpeg_regions_equal_pil_window(jpegs, name):
    want = pil_rgb(jpegs[name])
    h, w = want.shape[:2]
    rng = np.random.default_rng(1)
    regions = [(0, 0, w, h), (w - 1, h - 1, 1, 1), (16, 16, 32, 32), (15, 7, 33, 19),
               (w - 100, h - 50, 100, 50)]
    for _ in range(25):
        rw, rh = int(rng.integers(1, w + 1)), int(rng.integers(1, h + 1))
        regions.append((int(rng.integers(0, w - rw + 1)), int(rng.integers(0, h - rh + 1)), rw, rh))
    for x, y, rw, rh in regions:
        got = decode(jpegs[name], region=(x, y, rw, rh))
        assert np.array_equal(got, want[y:y + rh, x:x + rw]), (name, x, y, rw, rh)


def pil_draft_rgb(path, scale):
    """PIL's own DCT-scaled decode (Image.draft), converted to RGB, or None
    when PIL picks a different scale."""
    with Image.open(path) as im:
        w, h = im.size
        im.draft("RGB", (w // scale, h // scale))
        out = np.asarray(im.convert("RGB"))
    if out.shape[:2] != (-(-h // scale), -(-w // scale)):
        return None
    return out


@pytest.mark.parametrize("scale", [2, 4, 8])
@pytest.mark.parametrize("name", list(JPEG_CASES) + ["gray", "gray_progressive", "cmyk"])
def test_jpeg_scaled_equals_pil_draft(jpegs, name, scale):
    """A DCT-scaled decode equals PIL's draft mode (the same libjpeg scaled
    IDCT and upsampling), and regions of it equal its windows."""
    want = pil_draft_rgb(jpegs[name], scale)
    assert want is not None
    got = decode(jpegs[name], scale=scale)
    assert np.array_equal(got, want), (name, scale, np.abs(got.astype(int) - want).max())
    for x, y, w, h in [(0, 0, 421, 371), (13, 17, 100, 60), (400, 300, 21, 71)]:
        r = decode(jpegs[name], region=(x, y, w, h), scale=scale)
        x0, y0 = x // scale, y // scale
        x1, y1 = -(-(x + w) // scale), -(-(y + h) // scale)
        assert np.array_equal(r, want[y0:y1, x0:x1]), (name, scale, (x, y, w, h))


# ---------------------------------------------------------------------------
# PNG
# ---------------------------------------------------------------------------

def _chunk(tag, data):
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def png_bytes(w, h, depth, color_type, rows, interlace=0, extra=b""):
    """A PNG from raw filtered-or-not rows (filter byte 0 added here)."""
    raw = b"".join(b"\0" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, interlace))
            + extra + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b""))


def adam7_rgb8(img):
    """Adam7-interlaced RGB8 PNG of img (H x W x 3)."""
    h, w = img.shape[:2]
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    raw = b""
    for x0, y0, dx, dy in passes:
        sub = img[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        raw += b"".join(b"\0" + sub[y].tobytes() for y in range(sub.shape[0]))
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1))
            + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def pngs(tmp_path_factory):
    d = tmp_path_factory.mktemp("pngs")
    rng = np.random.default_rng(2)
    h, w = 61, 77
    rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    a = rng.integers(0, 256, (h, w), dtype=np.uint8)
    f = {}

    def save(name, im, **kw):
        f[name] = d / (name + ".png")
        im.save(f[name], **kw)

    save("RGB", Image.fromarray(rgb))
    save("RGBA", Image.fromarray(np.dstack([rgb, a])))
    save("L", Image.fromarray(a))
    save("LA", Image.fromarray(a).convert("LA"))
    save("P", Image.fromarray(rgb).convert("P", palette=Image.ADAPTIVE, colors=200))
    save("P4", Image.fromarray(rgb).convert("P", palette=Image.ADAPTIVE, colors=16), bits=4)
    save("P_trns", Image.fromarray(rgb).convert("P", palette=Image.ADAPTIVE, colors=50), transparency=3)
    save("RGB_trns", Image.fromarray(rgb), transparency=(1, 2, 3))
    save("1bit", Image.fromarray(a > 128))
    r16 = rng.integers(0, 65536, (h, w, 3), dtype=np.uint16)
    f["RGB16"] = d / "rgb16.png"
    f["RGB16"].write_bytes(png_bytes(w, h, 16, 2, [r16[y].astype(">u2").tobytes() for y in range(h)]))
    for bits in (2, 4):
        v = rng.integers(0, 1 << bits, (h, w)).astype(np.uint8)
        per = 8 // bits
        rows = []
        for y in range(h):
            row = np.zeros((w + per - 1) // per, np.uint8)
            for x in range(w):
                row[x // per] |= v[y, x] << (8 - bits * (x % per + 1))
            rows.append(row.tobytes())
        f["L%d" % bits] = d / ("l%d.png" % bits)
        f["L%d" % bits].write_bytes(png_bytes(w, h, bits, 0, rows))
    f["interlaced"] = d / "adam7.png"
    f["interlaced"].write_bytes(adam7_rgb8(rgb))
    return f


@pytest.mark.parametrize("name", ["RGB", "RGBA", "L", "LA", "P", "P4", "P_trns", "RGB_trns",
                                  "1bit", "RGB16", "L2", "L4", "interlaced"])
def test_png_equals_pil(pngs, name):
    want = pil_rgb(pngs[name])
    got = decode(pngs[name])
    assert np.array_equal(got, want), name
    h, w = want.shape[:2]
    for region in [(0, 0, w, h), (5, 7, 30, 20), (w - 1, h - 1, 1, 1), (0, h - 3, w, 3)]:
        x, y, rw, rh = region
        assert np.array_equal(decode(pngs[name], region=region), want[y:y + rh, x:x + rw]), (name, region)


def test_png_gray16_high_byte(tmp_path):
    """16-bit grayscale: stoker keeps the high byte; PIL opens it as mode I
    and its I -> RGB conversion clips at 255 (nearly white). Documented."""
    rng = np.random.default_rng(3)
    g = rng.integers(0, 65536, (20, 30), dtype=np.uint16)
    p = tmp_path / "g16.png"
    p.write_bytes(png_bytes(30, 20, 16, 0, [g[y].astype(">u2").tobytes() for y in range(20)]))
    got = decode(p)
    assert np.array_equal(got, np.repeat((g >> 8).astype(np.uint8)[:, :, None], 3, axis=2))
    assert np.array_equal(pil_rgb(p)[:, :, 0], np.minimum(g, 255).astype(np.uint8))


# ---------------------------------------------------------------------------
# Corrupt files (the kinds of make_photos.py --corrupt)
# ---------------------------------------------------------------------------

def test_corrupt_kinds(tmp_path, jpegs, pngs):
    good = jpegs["baseline444_q96"].read_bytes()
    cases = {
        "truncated": (good[: len(good) // 2], "STK_EDATA", "Premature end of JPEG file"),
        "empty": (b"", "STK_EDATA", "empty input"),
        "random_bytes": (np.random.default_rng(4).integers(0, 256, 5000, dtype=np.uint8).tobytes(),
                         "STK_EDATA", "not a JPEG, PNG, WebP, BMP, TIFF or GIF"),
    }
    sof = good.index(b"\xff\xc0")
    huge = bytearray(good)
    huge[sof + 5:sof + 9] = struct.pack(">HH", 65500, 65500)
    cases["huge_dims_65500x65500"] = (bytes(huge), "STK_ELIMIT", "65500x65500")
    for kind, (data, code, needle) in cases.items():
        p = tmp_path / (kind + ".jpg")
        p.write_bytes(data)
        with pytest.raises(DecodeError) as e:
            decode(p)
        assert e.value.rc == 2 and code in e.value.message and needle in e.value.message, (kind, e.value.message)
    # A PNG named .jpg decodes, as PIL opens it.
    p = tmp_path / "png_named.jpg"
    p.write_bytes(pngs["RGB"].read_bytes())
    assert np.array_equal(decode(p), pil_rgb(p))


# ---------------------------------------------------------------------------
# Real photographs (shared/datasets/make_photos.sh), when present
# ---------------------------------------------------------------------------

def test_real_photos_equal_pil():
    files = sorted(glob.glob(os.path.join(need_photos("train"), "train", "*", "*.jpg")))
    assert files
    step = max(1, len(files) // 300)
    sample = files[::step][:300]
    # Make sure the rare kinds are in: grayscale, CMYK and progressive files.
    kinds = {"L": 0, "CMYK": 0, "progressive": 0}
    for f in files:
        if sum(kinds.values()) >= 30:
            break
        with Image.open(f) as im:
            k = "progressive" if im.info.get("progressive") else im.mode
        if k in kinds and kinds[k] < 10:
            kinds[k] += 1
            sample.append(f)
    bad = []
    for i, f in enumerate(sample):
        got, want = decode(f), pil_rgb(f)
        if got.shape != want.shape or not np.array_equal(got, want):
            bad.append(f)
        if i % 5 == 0:  # every fifth file also at a DCT scale, against PIL's draft
            scale = (2, 4, 8)[i // 5 % 3]
            want = pil_draft_rgb(f, scale)
            if want is not None and not np.array_equal(decode(f, scale=scale), want):
                bad.append("%s@1/%d" % (f, scale))
    assert not bad, "%d of %d differ from PIL, e.g. %s" % (len(bad), len(sample), bad[:3])


def test_real_corrupt_folder():
    files = sorted(glob.glob(os.path.join(need_photos("corrupt"), "corrupt", "*")))
    assert files
    for f in files:
        if "png_named_jpg" in f:
            assert np.array_equal(decode(f), pil_rgb(f))
            continue
        with pytest.raises(DecodeError) as e:
            decode(f)
        want = "STK_ELIMIT" if "huge_dims" in f else "STK_EDATA"
        assert want in e.value.message, (f, e.value.message)
