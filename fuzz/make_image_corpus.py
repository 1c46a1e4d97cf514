#!/usr/bin/python3
"""Write the WebP, BMP, TIFF and GIF seeds of fuzz/corpus/codec/ (docs/fuzzing.md).

Small files (a few hundred bytes each, so the fuzzer mutates them quickly),
made with Debian's python3-pil and numpy, deterministic for a given Pillow,
libwebp and libtiff; the generated files are committed and replayed by CTest
(fuzz_codec_replay). Each format's layouts that the codec decodes have a
seed, plus a few damaged copies (truncated, and a BMP and a TIFF over the
fuzzer's 2^18-pixel limit).

    /usr/bin/python3 fuzz/make_image_corpus.py [OUT_DIR]
"""
import io
import os
import struct
import sys

import numpy as np
from PIL import Image

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "codec")
os.makedirs(out, exist_ok=True)

yy, xx = np.mgrid[0:12, 0:16]
rgb = Image.fromarray(np.dstack([xx * 16, yy * 20, (xx + yy) * 8]).astype(np.uint8))
alpha = ((xx * 17 + yy * 5) % 256).astype(np.uint8)
rgba = Image.fromarray(np.dstack([np.asarray(rgb), alpha]), "RGBA")
pal = rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)


def save(name, im, **kw):
    buf = io.BytesIO()
    im.save(buf, **kw)
    data = buf.getvalue()
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
    return data


# WebP
save("webp-lossy.webp", rgb, format="WEBP", quality=60)
lossless = save("webp-lossless.webp", rgb, format="WEBP", lossless=True)
save("webp-lossy-alpha.webp", rgba, format="WEBP", quality=60)
save("webp-lossless-alpha.webp", rgba, format="WEBP", lossless=True)
save("webp-anim.webp", rgb, format="WEBP", save_all=True, append_images=[pal.convert("RGB")])
with open(os.path.join(out, "webp-truncated.webp"), "wb") as f:
    f.write(lossless[: len(lossless) * 2 // 3])

# BMP
save("bmp-24.bmp", rgb, format="BMP")
save("bmp-p8.bmp", rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=200), format="BMP")
save("bmp-p4.bmp", pal, format="BMP")
save("bmp-1.bmp", rgb.convert("1"), format="BMP")
bmp32 = save("bmp-32-bitfields.bmp", rgba, format="BMP")
# 16-bit 5-6-5 bit fields, top-down rows, by hand
w, h = 6, 5
pix = b"".join(struct.pack("<6H", *[(x * 7919 + y * 104729) & 0xFFFF for x in range(w)]) +
               b"\0\0" for y in range(h))
info = struct.pack("<IiiHHIIiiII", 40, w, -h, 1, 16, 3, len(pix), 0, 0, 0, 0)
masks = struct.pack("<III", 0xF800, 0x7E0, 0x1F)
off = 14 + len(info) + len(masks)
with open(os.path.join(out, "bmp-565-topdown.bmp"), "wb") as f:
    f.write(b"BM" + struct.pack("<IHHI", off + len(pix), 0, 0, off) + info + masks + pix)
rle = bytes([3, 1, 0, 3, 4, 5, 6, 0, 2, 2, 7, 0, 0, 0, 2, 0, 0, 2, 1, 1, 4, 0, 0,
             0, 5, 1, 2, 3, 4, 5, 0, 4, 15, 0, 0, 6, 9, 0, 0, 6, 9, 0, 0, 6, 9, 0, 1])
info = struct.pack("<IiiHHIIiiII", 40, 6, 4, 1, 8, 1, len(rle), 0, 0, 16, 0)
palb = b"".join(bytes([i * 16, 255 - i * 9, i * 5, 0]) for i in range(16))
off = 14 + len(info) + len(palb)
with open(os.path.join(out, "bmp-rle8.bmp"), "wb") as f:
    f.write(b"BM" + struct.pack("<IHHI", off + len(rle), 0, 0, off) + info + palb + rle)
with open(os.path.join(out, "bmp-over-limit.bmp"), "wb") as f:  # 1024x1024 > 2^18
    f.write(bmp32[:18] + struct.pack("<ii", 1024, 1024) + bmp32[26:])

# TIFF
save("tiff-raw.tif", rgb, format="TIFF")
lzw = save("tiff-lzw.tif", rgb, format="TIFF", compression="tiff_lzw")
save("tiff-deflate-rgba.tif", rgba, format="TIFF", compression="tiff_adobe_deflate")
save("tiff-packbits-gray.tif", rgb.convert("L"), format="TIFF", compression="packbits")
save("tiff-tiled.tif", rgb, format="TIFF", tiled=True, tile_size=(16, 16), compression="tiff_lzw")
save("tiff-jpeg.tif", rgb, format="TIFF", compression="jpeg", quality=60)
save("tiff-palette.tif", pal, format="TIFF")
save("tiff-g4.tif", rgb.convert("1"), format="TIFF", compression="group4")
save("tiff-cmyk.tif", rgb.convert("CMYK"), format="TIFF")
with open(os.path.join(out, "tiff-truncated.tif"), "wb") as f:
    f.write(lzw[: len(lzw) // 2])

# GIF
save("gif-pal.gif", pal, format="GIF")
save("gif-interlaced.gif", pal, format="GIF", interlace=True)
gif_t = save("gif-transparent.gif", pal, format="GIF", transparency=3)
save("gif-anim.gif", pal, format="GIF", save_all=True,
     append_images=[rgb.rotate(90).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)])
with open(os.path.join(out, "gif-truncated.gif"), "wb") as f:
    f.write(gif_t[: len(gif_t) - 20])
print("wrote the WebP, BMP, TIFF and GIF seeds to", out)
