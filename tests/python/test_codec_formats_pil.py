"""WebP, BMP, TIFF and GIF through stoker's codec against PIL (docs/codec.md).

Like test_codec_pil.py, the codec is driven through bench/decode_dump. The
files are written here by PIL (Debian's python3-pil 9.4, whose WebP and
TIFF decoders use the same libwebp and libtiff) or by hand with struct for
layouts PIL does not write (16-bit and bit-field BMPs, top-down rows, odd
palettes); the expected pixels are PIL's Image.open(f).convert("RGB"),
what torchvision's default loader returns.

Claims checked:
  * every variant below decodes bit-exact with PIL, whole and by region;
  * layouts stoker refuses (embedded-JPEG BMP, 16-bit TIFF, ...) fail
    with STK_EDATA and a message naming what;
  * hostile files (truncated anywhere, huge dimensions, bad headers) fail
    with the documented code and message, never pixels.
"""
import io
import os
import struct

import numpy as np
import pytest
from PIL import Image, features

from test_codec_pil import DUMP, DecodeError, decode, photo_like, pil_rgb

pytestmark = pytest.mark.skipif(not os.path.exists(DUMP) and os.environ.get("CI") != "true",
                                reason="decode_dump not built (STK_BUILD_BENCH=OFF?)")


def rgba_like(h, w, seed=0):
    rgb = photo_like(h, w, seed)
    yy, xx = np.mgrid[0:h, 0:w]
    a = ((xx * 7 + yy * 3) % 256).astype(np.uint8)
    a[: h // 4, : w // 4] = 0  # fully transparent corner: colour must survive as PIL keeps it
    return np.dstack([rgb, a])


def assert_same(path, regions=((0, 0, 1, 1), (3, 2, 10, 7))):
    want = pil_rgb(path)
    got = decode(path)
    assert got.shape == want.shape
    assert np.array_equal(got, want), "max diff %d" % np.abs(got.astype(int) - want).max()
    h, w = want.shape[:2]
    for x, y, rw, rh in regions:
        if x + rw <= w and y + rh <= h:
            part = decode(path, region=(x, y, rw, rh))
            assert np.array_equal(part, want[y:y + rh, x:x + rw])


def probe(path):
    import subprocess
    p = subprocess.run([DUMP, str(path), "--probe"], capture_output=True, timeout=60)
    if p.returncode:
        raise DecodeError(p.returncode, p.stderr.decode(errors="replace").strip())
    return p.stdout.decode().split()


def expect_fail(path, code, text):
    with pytest.raises(DecodeError) as e:
        decode(path)
    assert code in e.value.message and text in e.value.message, e.value.message


# --------------------------------------------------------------------------
# WebP
# --------------------------------------------------------------------------

def webp_files(tmp_path):
    assert features.check("webp")
    rgb = Image.fromarray(photo_like(37, 53, 1))
    rgba = Image.fromarray(rgba_like(41, 29, 2), "RGBA")
    out = {}
    for name, im, kw in [
        ("lossy.webp", rgb, dict(quality=80)),
        ("lossy-q30.webp", rgb, dict(quality=30, method=6)),
        ("lossless.webp", rgb, dict(lossless=True)),
        ("lossy-alpha.webp", rgba, dict(quality=70)),
        ("lossless-alpha.webp", rgba, dict(lossless=True, exact=True)),
        ("gray.webp", rgb.convert("L"), dict(quality=90)),
        ("tiny.webp", Image.new("RGB", (1, 1), (200, 10, 30)), dict(lossless=True)),
    ]:
        p = tmp_path / name
        im.save(p, **kw)
        out[name] = p
    return out


def test_webp_equals_pil(tmp_path):
    for name, p in webp_files(tmp_path).items():
        assert_same(p)
    assert probe(tmp_path / "lossy-alpha.webp")[:4] == ["WebP", "29", "41", "4"]


def riff_chunk(tag, payload):
    return tag + struct.pack("<I", len(payload)) + payload + (b"\0" if len(payload) % 2 else b"")


def test_webp_animated_first_frame(tmp_path):
    frames = [Image.fromarray(photo_like(16, 20, s)) for s in range(3)]
    p = tmp_path / "anim.webp"
    frames[0].save(p, save_all=True, append_images=frames[1:], duration=50)
    assert_same(p)
    p = tmp_path / "anim-alpha.webp"
    alpha = [Image.fromarray(rgba_like(16, 20, s), "RGBA") for s in range(2)]
    alpha[0].save(p, save_all=True, append_images=alpha[1:], duration=50, quality=70)
    assert_same(p)

    # By hand: a first frame smaller than the canvas, at an offset; the rest
    # of the canvas is transparent black (WebPAnimDecoder's zero fill).
    for lossless, blend in ((True, 0), (False, 2)):
        still = tmp_path / "frame.webp"
        Image.fromarray(rgba_like(9, 11, 4), "RGBA").save(still, lossless=lossless, quality=80)
        body = still.read_bytes()[12:]
        if body[:4] == b"VP8X":  # keep the frame's ALPH + VP8 chunks only
            body = body[18:]
        cw, ch, x, y = 30, 20, 6, 4
        anmf = ((x // 2).to_bytes(3, "little") + (y // 2).to_bytes(3, "little")
                + (11 - 1).to_bytes(3, "little") + (9 - 1).to_bytes(3, "little")
                + (100).to_bytes(3, "little") + bytes([blend]) + body)
        vp8x = bytes([0x02 | 0x10, 0, 0, 0]) + (cw - 1).to_bytes(3, "little") + \
            (ch - 1).to_bytes(3, "little")
        data = b"WEBP" + riff_chunk(b"VP8X", vp8x) + \
            riff_chunk(b"ANIM", bytes([255, 255, 255, 255, 0, 0])) + riff_chunk(b"ANMF", anmf)
        p = tmp_path / ("inset-%d.webp" % lossless)
        p.write_bytes(b"RIFF" + struct.pack("<I", len(data)) + data)
        got = decode(p)
        assert got.shape == (ch, cw, 3)
        assert not got[:y].any() and not got[:, :x].any()
        assert_same(p, regions=((0, 0, 7, 5), (6, 4, 11, 9)))


def test_webp_hostile(tmp_path):
    src = webp_files(tmp_path)
    for name in ("lossy.webp", "lossless.webp", "lossy-alpha.webp"):
        data = src[name].read_bytes()
        for cut in sorted({12, 20, 30, len(data) // 3, len(data) // 2, len(data) - 1}):
            p = tmp_path / ("cut-%d-%s" % (cut, name))
            p.write_bytes(data[:cut])
            with pytest.raises(DecodeError) as e:
                decode(p)
            assert "STK_EDATA" in e.value.message and "WebP: " in e.value.message
    # a lossless header claiming 16384x16384, the largest a still WebP can
    # state (2^28 pixels, the default limit): the probe reads it from the
    # header alone (the limit itself is tested with a lower max_pixels in
    # tests/test_codec_formats.c)
    data = bytearray(src["lossless.webp"].read_bytes())
    assert data[12:16] == b"VP8L"
    bits = 16383 | (16383 << 14) | (struct.unpack_from("<I", data, 21)[0] & 0xF0000000)
    struct.pack_into("<I", data, 21, bits)
    p = tmp_path / "huge.webp"
    p.write_bytes(bytes(data))
    assert probe(p)[:3] == ["WebP", "16384", "16384"]
    p.write_bytes(b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 8)
    expect_fail(p, "STK_EDATA", "WebP: reading the header")


# --------------------------------------------------------------------------
# BMP
# --------------------------------------------------------------------------

def bmp_bytes(w, h, bits, rows, palette=None, compression=0, masks=None, top_down=False,
              header=40, colors=None, offset=None):
    """A BMP written by hand: `rows` are the stored row bytes, top row first."""
    stride = ((w * bits + 31) >> 3) & ~3
    pix = b"".join(r.ljust(stride, b"\0") for r in (rows if top_down else rows[::-1]))
    pal = b""
    if palette is not None:
        pal = b"".join(bytes([b, g, r]) + (b"" if header == 12 else b"\0") for r, g, b in palette)
    extra = b""
    if header == 12:
        info = struct.pack("<IHHHH", 12, w, h, 1, bits)
    else:
        n = len(palette) if palette is not None and colors is None else (colors or 0)
        info = struct.pack("<IiiHHIIiiII", header, w, -h if top_down else h, 1, bits,
                           compression, len(pix), 2835, 2835, n, 0)
        if header > 40:
            m = list(masks or (0, 0, 0, 0)) + [0] * 4
            info += struct.pack("<IIII", *m[:4]) + b"\0" * (header - 56)
        elif masks is not None:
            extra = struct.pack("<III", *masks[:3])
    off = 14 + len(info) + len(extra) + len(pal) if offset is None else offset
    return (b"BM" + struct.pack("<IHHI", off + len(pix), 0, 0, off) + info + extra + pal + pix)


def test_bmp_pil_written(tmp_path):
    rgb = Image.fromarray(photo_like(23, 31, 3))
    for name, im in [("rgb24.bmp", rgb), ("gray8.bmp", rgb.convert("L")),
                     ("p8.bmp", rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=200)),
                     ("bw1.bmp", rgb.convert("1")),
                     ("p4.bmp", rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)),
                     ("rgba32.bmp", Image.fromarray(rgba_like(19, 13, 4), "RGBA"))]:
        p = tmp_path / name
        im.save(p)
        assert_same(p)


def test_bmp_hand_written(tmp_path):
    rng = np.random.default_rng(5)
    w, h = 13, 7
    pal16 = [tuple(int(v) for v in rng.integers(0, 256, 3)) for _ in range(16)]
    pal2 = [(10, 200, 30), (250, 5, 128)]
    idx4 = rng.integers(0, 16, (h, w))
    idx8 = rng.integers(0, 256, (h, w))
    bits1 = rng.integers(0, 2, (h, w))
    pix24 = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    pix32 = rng.integers(0, 256, (h, w, 4), dtype=np.uint8)
    pix16 = rng.integers(0, 65536, (h, w)).astype("<u2")

    def pack4(r):
        r = list(r) + [0]
        return bytes((r[i] << 4) | r[i + 1] for i in range(0, w, 2))

    def pack1(r):
        return np.packbits(np.array(r, np.uint8)).tobytes()

    cases = {
        "p4.bmp": bmp_bytes(w, h, 4, [pack4(r) for r in idx4], pal16),
        "p4-topdown.bmp": bmp_bytes(w, h, 4, [pack4(r) for r in idx4], pal16, top_down=True),
        "p1.bmp": bmp_bytes(w, h, 1, [pack1(r) for r in bits1], pal2),
        "p1-core.bmp": bmp_bytes(w, h, 1, [pack1(r) for r in bits1], pal2, header=12),
        # 8-bit indices over a 16-entry palette: past its end PIL gives gray
        "p8-short-palette.bmp": bmp_bytes(w, h, 8, [bytes(r.astype(np.uint8)) for r in idx8],
                                          pal16),
        "bgr24.bmp": bmp_bytes(w, h, 24, [r.tobytes() for r in pix24]),
        "bgr24-v5-topdown.bmp": bmp_bytes(w, h, 24, [r.tobytes() for r in pix24], header=124,
                                          top_down=True),
        "bgrx32.bmp": bmp_bytes(w, h, 32, [r.tobytes() for r in pix32]),
        "555.bmp": bmp_bytes(w, h, 16, [r.tobytes() for r in pix16]),
        "565-bitfields.bmp": bmp_bytes(w, h, 16, [r.tobytes() for r in pix16], compression=3,
                                       masks=(0xF800, 0x7E0, 0x1F)),
        "555-bitfields-v4.bmp": bmp_bytes(w, h, 16, [r.tobytes() for r in pix16], compression=3,
                                          masks=(0x7C00, 0x3E0, 0x1F, 0), header=108),
        "bgra-bitfields-v4.bmp": bmp_bytes(w, h, 32, [r.tobytes() for r in pix32], compression=3,
                                           masks=(0xFF0000, 0xFF00, 0xFF, 0xFF000000),
                                           header=108),
        "rgba-bitfields-v5.bmp": bmp_bytes(w, h, 32, [r.tobytes() for r in pix32], compression=3,
                                           masks=(0xFF, 0xFF00, 0xFF0000, 0xFF000000),
                                           header=124),
        "xbgr-bitfields.bmp": bmp_bytes(w, h, 32, [r.tobytes() for r in pix32], compression=3,
                                        masks=(0xFF000000, 0xFF0000, 0xFF00)),
    }
    # a palette offset that forgot the palette (PIL adds it back)
    good = bmp_bytes(w, h, 4, [pack4(r) for r in idx4], pal16)
    cases["p4-offset-without-palette.bmp"] = good[:10] + struct.pack("<I", 54) + good[14:]
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        assert_same(p)


def rle_bmp(w, h, bits, stream, palette):
    pal = b"".join(bytes([b, g, r, 0]) for r, g, b in palette)
    info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, bits, 1 if bits == 8 else 2, len(stream),
                       0, 0, len(palette), 0)
    off = 14 + 40 + len(pal)
    return b"BM" + struct.pack("<IHHI", off + len(stream), 0, 0, off) + info + pal + stream


def test_bmp_rle_equals_pil(tmp_path):
    rng = np.random.default_rng(7)
    pal = [tuple(int(v) for v in rng.integers(0, 256, 3)) for _ in range(16)]
    w, h = 9, 5
    rle8 = bytes([
        3, 1, 0, 3, 4, 5, 6, 0, 2, 2, 7, 0, 0,   # run, absolute 3 (+pad), run past the row
        0, 0, 2, 9, 0, 0,                        # a run of 2, end of line
        0, 2, 0, 0, 2, 1, 1, 12, 0, 0,           # delta (PIL's reading) then a run
        0, 5, 1, 2, 3, 4, 5, 0, 0, 0,            # absolute 5 (+pad), end of line
        4, 15, 0, 11, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0,  # absolute spilling over
        0, 1])
    rle4 = bytes([
        5, 0x12, 0, 4, 0x34, 0x56, 0, 0,         # run of 5 alternating, absolute 4, EOL
        12, 0xAB, 0, 0,                          # a run cut at the row's end, EOL
        0, 5, 0x9C, 0xDE, 0, 0,                  # absolute 5 (reads 2 bytes: PIL's n // 2)
        3, 0x7F, 0, 2, 0, 0, 1, 1, 2, 0x11,      # delta, then a run
        0, 0, 9, 0xEE, 0, 1])
    for name, data in (("rle8.bmp", rle_bmp(w, h, 8, rle8, pal)),
                       ("rle4.bmp", rle_bmp(w, h, 4, rle4, pal))):
        p = tmp_path / name
        p.write_bytes(data)
        assert_same(p)
    # PIL's own RLE reading of a file it cannot read fully is an error; so here
    p = tmp_path / "short.bmp"
    p.write_bytes(rle_bmp(w, h, 8, bytes([9, 1, 0, 0, 0, 1]), pal))
    with pytest.raises(ValueError):
        pil_rgb(p)
    expect_fail(p, "STK_EDATA", "BMP: RLE8 data ends after 9 of 45 pixels")
    p.write_bytes(rle_bmp(w, h, 8, bytes([9, 1, 0, 0, 0, 2, 1]), pal))
    expect_fail(p, "STK_EDATA", "BMP: RLE8 data ends after 9 of 45 pixels")
    p.write_bytes(rle_bmp(w, h, 8, bytes([9, 1, 0, 0, 0, 2, 1, 1, 3]), pal))
    expect_fail(p, "STK_EDATA", "BMP: RLE delta escape truncated")
    data = bytearray(rle_bmp(w, h, 8, rle8, pal))
    data[28] = 4  # RLE8 with 4 bits per pixel
    p.write_bytes(bytes(data))
    expect_fail(p, "STK_EDATA", "BMP: RLE8 compression with 4 bits per pixel")


def test_bmp_refused_and_hostile(tmp_path):
    w, h = 8, 4
    rows = [bytes(range(i, i + 24)) for i in range(h)]
    good = bmp_bytes(w, h, 24, rows)
    cases = [
        (bmp_bytes(w, h, 24, rows, compression=4), "STK_EDATA",
         "BMP: embedded JPEG compression is not decoded"),
        (bmp_bytes(w, h, 24, rows, compression=9), "STK_EDATA", "BMP: unknown compression 9"),
        (bmp_bytes(w, h, 2, [bytes(4)] * h, [(0, 0, 0)] * 4), "STK_EDATA",
         "BMP: unsupported pixel depth 2 bits"),
        (bmp_bytes(w, h, 32, [bytes(32)] * h, compression=3, masks=(0xFF00, 0xFF, 0xFF0000)),
         "STK_EDATA", "BMP: unsupported 32-bit bit-field masks"),
        (good[:14] + struct.pack("<I", 52) + good[18:], "STK_EDATA",
         "BMP: unsupported info header size 52"),
        (good[:-1], "STK_EDATA", "BMP: truncated pixel data (96 bytes at offset 54, file has 149)"),
        (good[:30], "STK_EDATA", "BMP: truncated header (30 bytes, the info header needs 54)"),
        (good[:18] + struct.pack("<i", 0) + good[22:], "STK_EDATA", "BMP: bad image size 0x4"),
        (good[:18] + struct.pack("<ii", 65536, 65536) + good[26:], "STK_ELIMIT",
         "BMP: 65536x65536 image (4294967296 pixels) exceeds the max_pixels limit"),
        (bmp_bytes(w, h, 8, [bytes(8)] * h, [(0, 0, 0)] * 256)[:14 + 40 + 100], "STK_EDATA",
         "BMP: truncated palette (256 entries)"),
    ]
    for i, (data, code, text) in enumerate(cases):
        p = tmp_path / ("bad%d.bmp" % i)
        p.write_bytes(data)
        expect_fail(p, code, text)
    # cut anywhere: an error, never pixels
    for cut in range(0, len(good) - 1, 7):
        p = tmp_path / "cut.bmp"
        p.write_bytes(good[:cut])
        with pytest.raises(DecodeError) as e:
            decode(p)
        assert "STK_EDATA" in e.value.message, e.value.message


# --------------------------------------------------------------------------
# TIFF
# --------------------------------------------------------------------------

def test_tiff_equals_pil(tmp_path):
    assert features.check("libtiff")
    rgb = Image.fromarray(photo_like(45, 67, 6))
    rgba = Image.fromarray(rgba_like(33, 40, 7), "RGBA")
    cases = [
        ("rgb.tif", rgb, {}),
        ("rgb-lzw.tif", rgb, dict(compression="tiff_lzw")),
        ("rgb-deflate.tif", rgb, dict(compression="tiff_adobe_deflate")),
        ("rgb-packbits.tif", rgb, dict(compression="packbits")),
        ("rgb-jpeg.tif", rgb, dict(compression="jpeg", quality=85)),
        ("rgb-tiled.tif", rgb, dict(tiled=True, tile_size=(16, 16), compression="tiff_lzw")),
        ("rgba.tif", rgba, {}),
        ("rgba-deflate.tif", rgba, dict(compression="tiff_adobe_deflate")),
        ("gray.tif", rgb.convert("L"), {}),
        ("gray-lzw.tif", rgb.convert("L"), dict(compression="tiff_lzw")),
        ("la.tif", rgba.convert("LA"), {}),
        ("bw.tif", rgb.convert("1"), {}),
        ("bw-g4.tif", rgb.convert("1"), dict(compression="group4")),
        ("p8.tif", rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=100), {}),
        ("cmyk.tif", rgb.convert("CMYK"), {}),
        ("cmyk-lzw.tif", rgb.convert("CMYK"), dict(compression="tiff_lzw")),
    ]
    for name, im, kw in cases:
        p = tmp_path / name
        im.save(p, **kw)
        assert_same(p)
    # a multi-page file decodes its first page
    p = tmp_path / "pages.tif"
    rgb.save(p, save_all=True, append_images=[rgb.convert("L").convert("RGB")])
    assert_same(p)


def test_tiff_refused_and_hostile(tmp_path):
    rgb = Image.fromarray(photo_like(20, 30, 8))
    p16 = tmp_path / "gray16.tif"
    Image.fromarray(np.arange(600, dtype=np.uint16).reshape(20, 30) * 100).save(p16)
    expect_fail(p16, "STK_EDATA", "TIFF: min-is-black with 1 samples of 16 bits is not decoded")
    pf = tmp_path / "float.tif"
    Image.fromarray(np.zeros((4, 4), np.float32)).save(pf)
    expect_fail(pf, "STK_EDATA", "TIFF: sample format 3 (signed or floating point)")

    good_p = tmp_path / "lzw.tif"
    rgb.save(good_p, compression="tiff_lzw")
    good = good_p.read_bytes()
    for cut in sorted({8, 16, len(good) // 4, len(good) // 2, len(good) - 100, len(good) - 1}):
        p = tmp_path / "cut.tif"
        p.write_bytes(good[:cut])
        with pytest.raises(DecodeError) as e:
            decode(p)
        assert "STK_EDATA" in e.value.message and "TIFF: " in e.value.message, e.value.message
    # damage inside JPEG-compressed and G4 strips: libtiff's codecs only
    # warn (libjpeg pads with grey); an error here
    for name, im, kw in (("jpeg.tif", rgb, dict(compression="jpeg")),
                         ("g4.tif", rgb.convert("1"), dict(compression="group4"))):
        src = tmp_path / name
        im.save(src, **kw)
        data = src.read_bytes()
        offs = dict(Image.open(src).tag_v2)[273]
        start = offs[0] if isinstance(offs, tuple) else offs
        p = tmp_path / ("bad-" + name)
        p.write_bytes(data[:start + 40] + b"\xff\xd9" * 3 + data[start + 46:]
                      if name == "jpeg.tif" else data[:start + 3] + b"\x00" * 8 + data[start + 11:])
        with pytest.raises(DecodeError) as e:
            decode(p)
        assert "STK_EDATA" in e.value.message and "TIFF: reading a strip: " in e.value.message, \
            e.value.message
    # not a TIFF after the magic
    p = tmp_path / "junk.tif"
    p.write_bytes(b"II*\0" + b"\xff" * 60)
    expect_fail(p, "STK_EDATA", "TIFF: reading the header")

    # huge dimensions in an uncompressed file: the limit, before any allocation
    plain = tmp_path / "plain.tif"
    rgb.save(plain)
    data = bytearray(plain.read_bytes())
    ifd = struct.unpack_from("<I", data, 4)[0]
    n = struct.unpack_from("<H", data, ifd)[0]
    for k in range(n):
        tag, typ, cnt = struct.unpack_from("<HHI", data, ifd + 2 + 12 * k)
        if tag in (256, 257):
            if typ == 3:
                struct.pack_into("<HH", data, ifd + 2 + 12 * k + 4, 4, 1)  # LONG
            struct.pack_into("<I", data, ifd + 2 + 12 * k + 8, 100000)
    p = tmp_path / "huge.tif"
    p.write_bytes(bytes(data))
    expect_fail(p, "STK_ELIMIT", "TIFF: 100000x100000 image (10000000000 pixels) exceeds")


# --------------------------------------------------------------------------
# GIF
# --------------------------------------------------------------------------

def test_gif_equals_pil(tmp_path):
    rgb = Image.fromarray(photo_like(29, 41, 9))
    pal = rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=64)
    cases = [("pal.gif", pal, {}), ("interlaced.gif", pal, dict(interlace=True)),
             ("gray.gif", rgb.convert("L"), {}), ("bw.gif", rgb.convert("1"), {}),
             ("transparent.gif", pal, dict(transparency=5))]
    for name, im, kw in cases:
        p = tmp_path / name
        im.save(p, **kw)
        assert_same(p)
    frames = [Image.fromarray(photo_like(24, 32, s)).convert("P", palette=Image.Palette.ADAPTIVE)
              for s in range(3)]
    p = tmp_path / "anim.gif"
    frames[0].save(p, save_all=True, append_images=frames[1:], duration=80, loop=0)
    assert_same(p)


def gif_bytes(screen, frame, pixels, gct=None, lct=None, transparent=None, min_code=None):
    """A one-frame GIF by hand, with uncompressed-style LZW (a clear code
    before every pixel keeps the codes at min_code + 1 bits)."""
    sw, sh = screen
    x, y, w, h = frame
    out = b"GIF89a" + struct.pack("<HH", sw, sh)
    if gct:
        n = len(gct).bit_length() - 1
        out += bytes([0x80 | (n - 1), 0, 0]) + b"".join(bytes(c) for c in gct)
    else:
        out += b"\0\0\0"
    if transparent is not None:
        out += b"\x21\xf9\x04\x01\x00\x00" + bytes([transparent]) + b"\0"
    flags = 0
    if lct:
        flags = 0x80 | (len(lct).bit_length() - 2)
    out += b"," + struct.pack("<HHHHB", x, y, w, h, flags)
    if lct:
        out += b"".join(bytes(c) for c in lct)
    mc = min_code or max(2, ((len(lct or gct or [0] * 4)) - 1).bit_length())
    clear, size = 1 << mc, mc + 1
    bits, nbits, data = 0, 0, bytearray()
    for v in list(pixels) + [None]:
        for code in ([clear, v] if v is not None else [clear + 1]):
            bits |= code << nbits
            nbits += size
            while nbits >= 8:
                data.append(bits & 255)
                bits >>= 8
                nbits -= 8
    if nbits:
        data.append(bits & 255)
    out += bytes([mc])
    for i in range(0, len(data), 255):
        out += bytes([len(data[i:i + 255])]) + bytes(data[i:i + 255])
    return out + b"\0;"


def test_gif_hand_written(tmp_path):
    rng = np.random.default_rng(10)
    gct = [tuple(int(v) for v in rng.integers(0, 256, 3)) for _ in range(8)]
    lct = [tuple(int(v) for v in rng.integers(0, 256, 3)) for _ in range(4)]
    cases = {
        # a frame smaller than the screen: the rest is index 0, or the transparent index
        "inset.gif": gif_bytes((10, 8), (2, 3, 5, 4), rng.integers(0, 8, 20), gct),
        "inset-transparent.gif": gif_bytes((10, 8), (2, 3, 5, 4), rng.integers(0, 8, 20), gct,
                                           transparent=6),
        # a frame reaching past the screen grows the canvas (PIL does too)
        "beyond.gif": gif_bytes((4, 4), (2, 1, 5, 6), rng.integers(0, 8, 30), gct),
        # a local table over the global one; indices past its end are gray
        "local.gif": gif_bytes((6, 5), (0, 0, 6, 5), rng.integers(0, 8, 30), gct, lct,
                               min_code=3),
        # no colour table at all: the index is the gray level
        "no-table.gif": gif_bytes((6, 5), (0, 0, 6, 5), rng.integers(0, 16, 30), min_code=4),
    }
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        assert_same(p)


def test_gif_hostile(tmp_path):
    pal = Image.fromarray(photo_like(29, 41, 11)).convert("P", palette=Image.Palette.ADAPTIVE)
    good_p = tmp_path / "good.gif"
    pal.save(good_p)
    good = good_p.read_bytes()
    # cut anywhere before the frame's terminating block: an error
    for cut in sorted({6, 10, 13, 800, len(good) // 2, len(good) - 3}):
        p = tmp_path / "cut.gif"
        p.write_bytes(good[:cut])
        with pytest.raises(DecodeError) as e:
            decode(p)
        assert "STK_EDATA" in e.value.message and "GIF: " in e.value.message, e.value.message
    p = tmp_path / "huge.gif"
    p.write_bytes(gif_bytes((65535, 65535), (0, 0, 1, 1), [0], [(0, 0, 0)] * 4))
    expect_fail(p, "STK_ELIMIT", "GIF: 65535x65535 image (4294836225 pixels) exceeds")
    p.write_bytes(b"GIF89a\x04\x00\x04\x00\x00\x00\x00;")
    expect_fail(p, "STK_EDATA", "GIF: no image before the trailer")


# --------------------------------------------------------------------------
# Scale, names
# --------------------------------------------------------------------------

def test_scale_refused_for_new_formats(tmp_path):
    p = tmp_path / "a.webp"
    Image.fromarray(photo_like(16, 16)).save(p, lossless=True)
    with pytest.raises(DecodeError) as e:
        decode(p, scale=2)
    assert "WebP: scale_denom 2 requested; WebP decodes at full size only" in e.value.message


def test_content_decides_not_name(tmp_path):
    p = tmp_path / "really-a-bmp.jpg"
    Image.fromarray(photo_like(9, 11)).save(p, format="BMP")
    assert_same(p)


# --------------------------------------------------------------------------
# A scraped folder of mixed formats: open, pack (bytes kept), preview, lists
# --------------------------------------------------------------------------

def test_mixed_format_folder_trains_without_conversion(tmp_path):
    stoker = pytest.importorskip("stoker")
    torchvision = pytest.importorskip("torchvision")
    from conftest import run_stoker
    root = tmp_path / "scraped"
    rng = np.random.default_rng(12)
    files = [("cat", "a.webp", dict(quality=85)), ("cat", "b.bmp", {}),
             ("cat", "c.tif", dict(compression="tiff_lzw")), ("dog", "d.tiff", {}),
             ("dog", "e.WEBP", dict(lossless=True)), ("dog", "f.jpg", dict(quality=90)),
             ("dog", "g.png", {})]
    for cls, name, kw in files:
        (root / cls).mkdir(parents=True, exist_ok=True)
        h, w = (int(v) for v in rng.integers(20, 60, 2))
        fmt = {"webp": "WEBP", "bmp": "BMP", "tif": "TIFF", "tiff": "TIFF", "jpg": "JPEG",
               "png": "PNG"}[name.rsplit(".", 1)[1].lower()]
        Image.fromarray(photo_like(h, w, int(rng.integers(1000)))).save(root / cls / name,
                                                                        format=fmt, **kw)
    ref = torchvision.datasets.ImageFolder(str(root))
    assert len(ref.samples) == len(files)
    ds = stoker.open(str(root))
    assert len(ds) == len(ref.samples) and ds.classes == ref.classes
    for i, (path, label) in enumerate(ref.samples):
        x, y = ds[i]
        assert np.array_equal(x, pil_rgb(path)), path
        assert y == label

    # pack keeps the encoded bytes; the shards decode to the same pixels
    out = tmp_path / "shards"
    res = stoker.pack(str(root), str(out))
    assert res["records"] == len(files) and res["skipped_inputs"] == []
    packed = stoker.open(str(out))
    for i, (path, label) in enumerate(ref.samples):
        x, y = packed[i]
        assert np.array_equal(x, pil_rgb(path)) and y == label, path

    # a list file with a GIF (not in torchvision's IMG_EXTENSIONS, so not a
    # folder member) decodes too
    gif = tmp_path / "h.gif"
    Image.fromarray(photo_like(30, 40, 13)).convert("P", palette=Image.Palette.ADAPTIVE).save(gif)
    lst = tmp_path / "list.txt"
    lst.write_text("%s\t3\n%s\t1\n" % (gif, ref.samples[0][0]))
    lds = stoker.open("list:%s" % lst)
    x, y = lds[0]
    assert np.array_equal(x, pil_rgb(gif)) and y == 3

    # the CLI: preview a pipeline over the folder
    png = tmp_path / "preview.png"
    run_stoker("preview", "imagefolder:%s" % root, "--pipeline",
               "random_resized_crop 24 | flip 0.5", "-o", png, "--count", "6")
    with Image.open(png) as im:
        assert im.size[0] > 24 and im.size[1] > 24


def test_webdataset_default_extensions_take_every_format(tmp_path):
    """A WebDataset tar (Python's tarfile) whose samples are BMP, TIFF, GIF
    and WebP: the default image=jpg;jpeg;png;webp;bmp;tif;tiff;gif finds
    each, and the pixels are PIL's."""
    stoker = pytest.importorskip("stoker")
    import tarfile
    members = []
    for i, (ext, fmt, kw) in enumerate([("bmp", "BMP", {}), ("tif", "TIFF", {}),
                                        ("tiff", "TIFF", dict(compression="tiff_lzw")),
                                        ("gif", "GIF", {}), ("webp", "WEBP", dict(quality=90))]):
        im = Image.fromarray(photo_like(20 + i, 30, 20 + i))
        if fmt == "GIF":
            im = im.convert("P", palette=Image.Palette.ADAPTIVE)
        buf = io.BytesIO()
        im.save(buf, format=fmt, **kw)
        members.append(("%03d.%s" % (i, ext), buf.getvalue()))
        members.append(("%03d.cls" % i, b"%d" % (i + 3)))
    tar = tmp_path / "shard-000.tar"
    with tarfile.open(tar, "w") as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    ds = stoker.open("wds:%s" % tar)
    assert len(ds) == 5
    for i in range(5):
        x, y = ds[i]
        with Image.open(io.BytesIO(members[2 * i][1])) as im:
            assert np.array_equal(x, np.asarray(im.convert("RGB"))), members[2 * i][0]
        assert y == i + 3
