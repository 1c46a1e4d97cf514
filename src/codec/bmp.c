/*
 * bmp.c — BMP (Windows bitmap) decoding: a small strict parser of its own.
 *
 * What it reads, the layouts PIL 9.4's BmpImagePlugin reads without RLE:
 *
 *   - the 14-byte file header ("BM", size, reserved, pixel data offset) and
 *     an info header of 12 (OS/2 BITMAPCOREHEADER, 16-bit dimensions,
 *     3-byte palette entries), 40 (BITMAPINFOHEADER), 64 (OS/2 v2), 108
 *     (V4) or 124 (V5) bytes; a negative height means rows top-down;
 *   - 1, 4 and 8 bits per pixel with a palette (BGRX, or BGR after a
 *     12-byte header) of `colors` entries (0 meaning 1 << bits); an index
 *     past the palette gives gray (i, i, i), as PIL's palette, which starts
 *     as a gray ramp, does;
 *   - 16 bits: BI_RGB is 5-5-5; BI_BITFIELDS with the masks 5-5-5 or 5-6-5;
 *     each field scaled as PIL's BGR;15 / BGR;16 unpackers do,
 *     v * 255 / max truncated;
 *   - 24 bits: BGR (BI_RGB, or BI_BITFIELDS with the standard masks);
 *   - 32 bits: BI_RGB is BGRX; BI_BITFIELDS with one of the byte-aligned
 *     mask sets PIL accepts (BGRX, XBGR, ABGR, RGBA, BGRA, all-zero =
 *     BGRA). Alpha is dropped, as convert("RGB") does.
 *
 *   - RLE8 (8 bits) and RLE4 (4 bits) compression, run exactly as PIL 9.4's
 *     BmpRleDecoder runs it, quirks included, so the pixels are PIL's: a
 *     run past the row's end is cut at the row's end; an absolute run may
 *     spill into the next row; an RLE4 absolute run of n pixels reads n / 2
 *     bytes (rounded down) and yields two pixels a byte; end-of-line pads
 *     the row with index 0; a delta escape skips two bytes and takes
 *     (right, up) from the two after them, filling with index 0;
 *     end-of-bitmap or the end of the file stops. Fewer pixels than the
 *     image has is an error (PIL: "not enough image data").
 *
 * Refused with a message naming what: embedded JPEG or PNG compression,
 * RLE with a bit depth that does not match it, other bit depths, other
 * bit-field masks, other header sizes.
 *
 * Where the pixels start follows PIL: the file header's offset, except that
 * a palette image whose offset points right after the info header gets the
 * palette size added (PIL's repair for writers that forgot it). Rows are
 * padded to 4 bytes. The whole pixel array must be present (a short file is
 * STK_EDATA "truncated", as PIL's "image file is truncated"); bytes after it
 * are ignored. RLE data is read up to the end of the file at most.
 *
 * Hostile input: every field is read with bounds checks from the buffer;
 * width * height is checked against max_pixels, and the row size and pixel
 * array size are computed in 64 bits, before the output is allocated. No
 * library is involved, so no callbacks and no longjmp. The output equals
 * PIL's Image.open(f).convert("RGB") exactly for every layout above
 * (tests/python/test_codec_pil.py). Region: the window of the whole decode;
 * scale_denom must be 1.
 */
#include "codec/codec_internal.h"

#include "core/error.h"

#include <string.h>

typedef struct stk_bmp {
    uint32_t width, height;
    int top_down;
    unsigned bits;
    uint32_t compression;
    uint64_t offset;       /* of the pixel array in the file */
    uint64_t row_bytes;    /* padded to 4 */
    unsigned pal_entry;    /* 3 or 4 bytes */
    uint32_t colors;       /* palette entries used (<= 256) */
    uint64_t pal_at;       /* file offset of the palette */
    int rgb565;            /* 16 bits: 5-6-5 instead of 5-5-5 */
    unsigned rpos, gpos, bpos; /* 24/32 bits: byte of each channel */
    int has_alpha;
} stk_bmp;

static uint32_t stk_le16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t stk_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static const char *stk_bmp_compression_name(uint32_t c)
{
    switch (c) {
    case 4:
        return "embedded JPEG";
    case 5:
        return "embedded PNG";
    case 6:
        return "BI_ALPHABITFIELDS";
    default:
        return NULL;
    }
}

/* 32-bit bit-field mask sets PIL accepts, as the byte of R, G, B. */
static int stk_bmp_masks32(const uint32_t m[4], stk_bmp *b)
{
    static const struct {
        uint32_t r, g, bl, a;
        unsigned rpos, gpos, bpos;
        int alpha;
    } known[] = {
        {0xFF0000u, 0xFF00u, 0xFFu, 0x0u, 2, 1, 0, 0},               /* BGRX */
        {0xFF000000u, 0xFF0000u, 0xFF00u, 0x0u, 3, 2, 1, 0},         /* XBGR */
        {0xFF000000u, 0xFF0000u, 0xFF00u, 0xFFu, 3, 2, 1, 1},        /* ABGR */
        {0xFFu, 0xFF00u, 0xFF0000u, 0xFF000000u, 0, 1, 2, 1},        /* RGBA */
        {0xFF0000u, 0xFF00u, 0xFFu, 0xFF000000u, 2, 1, 0, 1},        /* BGRA */
        {0x0u, 0x0u, 0x0u, 0x0u, 2, 1, 0, 1},                        /* BGRA */
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (m[0] == known[i].r && m[1] == known[i].g && m[2] == known[i].bl &&
            m[3] == known[i].a) {
            b->rpos = known[i].rpos;
            b->gpos = known[i].gpos;
            b->bpos = known[i].bpos;
            b->has_alpha = known[i].alpha;
            return 0;
        }
    return stk_fail(STK_EDATA,
                    "BMP: unsupported 32-bit bit-field masks R %08x G %08x B %08x A %08x", m[0],
                    m[1], m[2], m[3]);
}

/* Parse the headers into *b, fill *info, check the limit and that the
 * palette and the pixel array are inside the file. */
static int stk_bmp_open(const uint8_t *d, size_t n, uint64_t max_pixels, stk_bmp *b,
                        stk_image_info *info)
{
    uint32_t hsize, colors_field = 0, masks[4] = {0, 0, 0, 0};
    int rc;

    memset(b, 0, sizeof *b);
    if (n < 18)
        return stk_fail(STK_EDATA, "BMP: truncated header (%zu bytes)", n);
    b->offset = stk_le32(d + 10);
    hsize = stk_le32(d + 14);
    if (hsize != 12 && hsize != 40 && hsize != 64 && hsize != 108 && hsize != 124)
        return stk_fail(STK_EDATA, "BMP: unsupported info header size %u", hsize);
    if (n < 14 + (size_t)hsize)
        return stk_fail(STK_EDATA, "BMP: truncated header (%zu bytes, the info header needs %u)",
                        n, 14 + hsize);
    const uint8_t *h = d + 18; /* the info header after its size field */
    if (hsize == 12) {
        b->width = stk_le16(h);
        b->height = stk_le16(h + 2);
        b->bits = stk_le16(h + 6);
        b->compression = 0;
        b->pal_entry = 3;
    } else {
        int32_t w = (int32_t)stk_le32(h), ht = (int32_t)stk_le32(h + 4);
        if (w <= 0 || ht == 0 || ht == INT32_MIN)
            return stk_fail(STK_EDATA, "BMP: bad image size %dx%d", w, ht);
        b->width = (uint32_t)w;
        b->top_down = ht < 0;
        b->height = (uint32_t)(ht < 0 ? -ht : ht);
        b->bits = stk_le16(h + 10);
        b->compression = stk_le32(h + 12);
        colors_field = stk_le32(h + 28);
        b->pal_entry = 4;
        if (b->compression == 3) { /* BI_BITFIELDS */
            if (hsize >= 56) {
                for (int k = 0; k < 4; k++)
                    masks[k] = stk_le32(h + 36 + 4 * k);
            } else {
                /* After a 40-byte header the three masks follow it. */
                if (n < 14 + (size_t)hsize + 12)
                    return stk_fail(STK_EDATA, "BMP: truncated bit-field masks");
                for (int k = 0; k < 3; k++)
                    masks[k] = stk_le32(d + 14 + hsize + 4 * k);
            }
        }
    }
    if (b->width == 0 || b->height == 0)
        return stk_fail(STK_EDATA, "BMP: bad image size %ux%u", b->width, b->height);

    memset(info, 0, sizeof *info);
    info->format = STK_IMAGE_BMP;
    info->width = b->width;
    info->height = b->height;
    info->components = 3;

    if (b->bits != 1 && b->bits != 4 && b->bits != 8 && b->bits != 16 && b->bits != 24 &&
        b->bits != 32)
        return stk_fail(STK_EDATA, "BMP: unsupported pixel depth %u bits", b->bits);
    if ((b->compression == 1 && b->bits != 8) || (b->compression == 2 && b->bits != 4))
        return stk_fail(STK_EDATA, "BMP: %s compression with %u bits per pixel",
                        b->compression == 1 ? "RLE8" : "RLE4", b->bits);
    if (b->compression > 3) {
        const char *name = stk_bmp_compression_name(b->compression);
        if (name)
            return stk_fail(STK_EDATA, "BMP: %s compression is not decoded; convert the file",
                            name);
        return stk_fail(STK_EDATA, "BMP: unknown compression %u", b->compression);
    }
    if (b->compression == 3) {
        if (b->bits == 32) {
            if ((rc = stk_bmp_masks32(masks, b)))
                return rc;
        } else if (b->bits == 24 && masks[0] == 0xFF0000u && masks[1] == 0xFF00u &&
                   masks[2] == 0xFFu) {
            b->rpos = 2, b->gpos = 1, b->bpos = 0;
        } else if (b->bits == 16 && masks[0] == 0xF800u && masks[1] == 0x7E0u &&
                   masks[2] == 0x1Fu) {
            b->rgb565 = 1;
        } else if (b->bits == 16 && masks[0] == 0x7C00u && masks[1] == 0x3E0u &&
                   masks[2] == 0x1Fu) {
            b->rgb565 = 0;
        } else {
            return stk_fail(STK_EDATA,
                            "BMP: unsupported %u-bit bit-field masks R %08x G %08x B %08x",
                            b->bits, masks[0], masks[1], masks[2]);
        }
    } else if (b->bits >= 24) {
        b->rpos = 2, b->gpos = 1, b->bpos = 0; /* BGR, BGRX */
    }
    if (b->has_alpha)
        info->components = 4;

    if (b->bits <= 8) {
        uint64_t colors = colors_field ? colors_field : (1u << b->bits);
        if (colors > 65536)
            return stk_fail(STK_EDATA, "BMP: bad palette size %llu",
                            (unsigned long long)colors);
        if (b->offset == 14 + (uint64_t)hsize)
            b->offset += 4 * colors;
        b->colors = colors > 256 ? 256 : (uint32_t)colors;
        b->pal_at = 14 + (uint64_t)hsize;
        if (b->pal_at + (uint64_t)b->colors * b->pal_entry > n)
            return stk_fail(STK_EDATA, "BMP: truncated palette (%u entries)", b->colors);
    }

    if ((rc = stk_codec_check_pixels("BMP", b->width, b->height, max_pixels)))
        return rc;
    if (b->compression == 1 || b->compression == 2) {
        if (b->offset > n)
            return stk_fail(STK_EDATA, "BMP: pixel data offset %llu is past the end (%zu bytes)",
                            (unsigned long long)b->offset, n);
        return 0;
    }
    b->row_bytes = (((uint64_t)b->width * b->bits + 31) >> 3) & ~(uint64_t)3;
    uint64_t need;
    if (!stk_mul_ok(b->row_bytes, b->height, &need) || b->offset > n || n - b->offset < need)
        return stk_fail(STK_EDATA,
                        "BMP: truncated pixel data (%llu bytes at offset %llu, file has %zu)",
                        (unsigned long long)need, (unsigned long long)b->offset, n);
    return 0;
}

static int stk_bmp_probe(const uint8_t *data, size_t size, uint64_t max_pixels,
                         stk_image_info *info)
{
    stk_bmp b;
    return stk_bmp_open(data, size, max_pixels, &b, info);
}

/* One stored row `src` to RGB at `dst`. */
static void stk_bmp_row(const stk_bmp *b, const uint8_t *pal, const uint8_t *src, uint8_t *dst)
{
    uint32_t w = b->width;
    switch (b->bits) {
    case 1:
    case 4:
    case 8: {
        unsigned per = 8 / b->bits, mask = (1u << b->bits) - 1;
        for (uint32_t x = 0; x < w; x++) {
            unsigned shift = 8 - b->bits * (x % per + 1);
            unsigned i = (src[x / per] >> shift) & mask;
            uint8_t *o = dst + (size_t)x * 3;
            if (i < b->colors) {
                const uint8_t *e = pal + (size_t)i * b->pal_entry;
                o[0] = e[2], o[1] = e[1], o[2] = e[0];
            } else {
                o[0] = o[1] = o[2] = (uint8_t)i;
            }
        }
        break;
    }
    case 16:
        for (uint32_t x = 0; x < w; x++) {
            unsigned p = (unsigned)src[2 * x] | (unsigned)src[2 * x + 1] << 8;
            uint8_t *o = dst + (size_t)x * 3;
            if (b->rgb565) {
                o[0] = (uint8_t)(((p >> 11) & 31) * 255 / 31);
                o[1] = (uint8_t)(((p >> 5) & 63) * 255 / 63);
            } else {
                o[0] = (uint8_t)(((p >> 10) & 31) * 255 / 31);
                o[1] = (uint8_t)(((p >> 5) & 31) * 255 / 31);
            }
            o[2] = (uint8_t)((p & 31) * 255 / 31);
        }
        break;
    default: { /* 24, 32 */
        unsigned bpp = b->bits / 8;
        for (uint32_t x = 0; x < w; x++) {
            const uint8_t *s = src + (size_t)x * bpp;
            uint8_t *o = dst + (size_t)x * 3;
            o[0] = s[b->rpos], o[1] = s[b->gpos], o[2] = s[b->bpos];
        }
        break;
    }
    }
}

/* RLE8 / RLE4 into `idx` (width * height indices, in stored row order),
 * exactly as PIL 9.4's BmpRleDecoder: `len` counts every index PIL appends,
 * only the first width * height are kept. */
static int stk_bmp_rle(const stk_bmp *b, const uint8_t *d, size_t n, uint8_t *idx)
{
    const uint64_t total = (uint64_t)b->width * b->height, w = b->width;
    const int rle4 = b->compression == 2;
    uint64_t len = 0, x = 0;
    size_t pos = (size_t)b->offset;
#define STK_PUSH(v)                                                                            \
    do {                                                                                       \
        if (len < total)                                                                       \
            idx[len] = (uint8_t)(v);                                                           \
        len++;                                                                                 \
    } while (0)
#define STK_ZEROS(k)                                                                           \
    do {                                                                                       \
        uint64_t k_ = (k);                                                                     \
        if (len < total)                                                                       \
            memset(idx + len, 0, (size_t)(k_ < total - len ? k_ : total - len));               \
        len += k_;                                                                             \
    } while (0)

    while (len < total) {
        if (n - pos < 2)
            break;
        unsigned num = d[pos], byte = d[pos + 1];
        pos += 2;
        if (num) { /* encoded run, cut at the row's end */
            if (x + num > w)
                num = x < w ? (unsigned)(w - x) : 0;
            for (unsigned i = 0; i < num; i++)
                STK_PUSH(rle4 ? (i % 2 == 0 ? byte >> 4 : byte & 15) : byte);
            x += num;
        } else if (byte == 0) { /* end of line */
            if (len % w)
                STK_ZEROS(w - len % w);
            x = 0;
        } else if (byte == 1) { /* end of bitmap */
            break;
        } else if (byte == 2) { /* delta, as PIL reads it */
            if (n - pos < 2)
                break;
            pos += 2;
            if (n - pos < 2)
                return stk_fail(STK_EDATA, "BMP: RLE delta escape truncated at byte %zu", pos);
            unsigned right = d[pos], up = d[pos + 1];
            pos += 2;
            STK_ZEROS((uint64_t)right + (uint64_t)up * w);
            x = len % w;
        } else { /* absolute run */
            size_t want = rle4 ? byte / 2 : byte, got = n - pos < want ? n - pos : want;
            for (size_t i = 0; i < got; i++) {
                if (rle4) {
                    STK_PUSH(d[pos + i] >> 4);
                    STK_PUSH(d[pos + i] & 15);
                } else {
                    STK_PUSH(d[pos + i]);
                }
            }
            pos += got;
            if (got < want)
                break;
            x += byte;
            if (pos % 2 && pos < n) /* word alignment (of the file offset, as PIL) */
                pos++;
        }
    }
#undef STK_PUSH
#undef STK_ZEROS
    if (len < total)
        return stk_fail(STK_EDATA, "BMP: %s data ends after %llu of %llu pixels",
                        rle4 ? "RLE4" : "RLE8", (unsigned long long)len,
                        (unsigned long long)total);
    return 0;
}

static int stk_bmp_decode(const stk_decode_req *req)
{
    stk_image_info info;
    stk_bmp b;
    int rc;

    if ((rc = stk_bmp_open(req->data, req->size, req->max_pixels, &b, &info)))
        return rc;
    if (req->region && (rc = stk_codec_check_region("BMP", req->region, b.width, b.height)))
        return rc;
    uint64_t bytes;
    if (!stk_mul_ok((uint64_t)b.width * b.height, 4, &bytes) || bytes > SIZE_MAX)
        return stk_fail(STK_ELIMIT, "BMP: %ux%u image does not fit in memory", b.width, b.height);
    size_t out_row = (size_t)b.width * 3, px = (size_t)b.width * b.height;
    int rle = b.compression == 1 || b.compression == 2;
    if ((rc = stk_codec_check_bytes(req, "BMP", b.width, b.height,
                                    (uint64_t)out_row * b.height + (rle ? px : 0), 0)) ||
        (rc = stk_codec_reserve(req, out_row * b.height + (rle ? px : 0))))
        return rc;
    const uint8_t *pix = req->data + b.offset, *pal = req->data + b.pal_at;
    if (rle) {
        /* Runs to indices after the output, then rows of 8-bit indices. */
        uint8_t *idx = req->out->data + out_row * b.height;
        if ((rc = stk_bmp_rle(&b, req->data, req->size, idx)))
            return rc;
        pix = idx;
        b.bits = 8;
        b.row_bytes = b.width;
    }
    for (uint32_t y = 0; y < b.height; y++) {
        uint32_t stored = b.top_down ? y : b.height - 1 - y;
        stk_bmp_row(&b, pal, pix + (size_t)stored * b.row_bytes, req->out->data + y * out_row);
    }
    stk_codec_finish_view(req, req->out->data, b.width, b.height);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The row (codec_table.c)                                                  */
/* ------------------------------------------------------------------------ */

/* "BM". */
static int stk_bmp_sniff(const uint8_t *data, size_t size)
{
    return size >= 2 && data[0] == 'B' && data[1] == 'M';
}

const stk_codec_desc stk_codec_bmp = {
    .format = STK_IMAGE_BMP,
    .name = "BMP",
    .sniff = stk_bmp_sniff,
    .probe = stk_bmp_probe,
    .decode = stk_bmp_decode,
    .decode_mask = NULL,
    .near_miss = NULL,
    .scales = STK_CODEC_SCALE(1),
};
