/*
 * png.c — PNG decoding through libspng.
 *
 * What it produces. 8-bit RGB, HWC, through libspng's SPNG_FMT_RGB8 output,
 * which handles every PNG colour type and depth: palettes are expanded,
 * grayscale (1, 2, 4, 8 bits) is scaled to 8 bits and replicated, alpha is
 * dropped (not composited: PIL's convert("RGB") drops it too), tRNS and
 * gAMA are ignored (neither SPNG_DECODE_TRNS nor SPNG_DECODE_GAMMA is
 * asked for; PIL ignores both in convert("RGB") as well), and 16-bit
 * samples keep their high byte. For 8-bit files and 16-bit colour files
 * this equals PIL's Image.open(f).convert("RGB") exactly. PIL opens 16-bit
 * grayscale as mode "I" and its I -> RGB conversion clips the 16-bit value
 * to 255 instead of scaling it, so such files are nearly white in PIL; here
 * they keep their high byte (docs/codec.md).
 *
 * Hostile input. The IHDR is read first (spng_get_ihdr) and
 * width * height is checked against max_pixels before the pixel buffer
 * exists; libspng's own per-dimension limits are set to the same bound so
 * it refuses earlier still. Ancillary chunks that libspng stores (text,
 * ICC, eXIf) are bounded by a cache limit of 64 MiB, which also bounds
 * what a compressed text or ICC chunk may inflate to, and by libspng's
 * fixed limit of 1000 stored chunks (SPNG_CHUNK_COUNT_LIMIT cannot be
 * changed in libspng 0.7.3); image data inflates into the image buffer
 * only, so it is bounded by the image size.
 * CRC errors in critical and ancillary chunks are errors. After the last
 * row (of a whole image, or of a region that reaches it) the chunks up to
 * IEND are read too, because libspng stops before the last IDAT's CRC; a
 * file that simply ends without IEND is accepted, as PIL does. Also
 * errors: a zlib stream that ends early, a bad zlib checksum, a bad filter
 * byte, a missing IDAT or PLTE, a stream that ends before the rows needed.
 * libspng is stricter than PIL about ancillary chunks: a misplaced or
 * malformed one (gAMA after PLTE, a text chunk with a bad keyword) is an
 * error here and is ignored by PIL. Every failure is STK_EDATA
 * "PNG: <libspng's reason>" (STK_ENOMEM for libspng's out-of-memory,
 * STK_ELIMIT for a dimension over the limit).
 *
 * Region. PNG rows are deflated as one stream and filtered against the row
 * above, so there is no way into the middle of an image. scale_denom must
 * be 1. A region of a non-interlaced image is decoded row by row (libspng's
 * progressive mode) only down to its last row: rows above it are decoded
 * into a one-row buffer and dropped, the region's columns of its rows are
 * kept, and decoding stops there, so the output holds just the region. An
 * interlaced (Adam7) image is decoded whole and the view points at the
 * region inside it.
 */
#include "codec/codec_internal.h"

#include "core/error.h"

#include <stdio.h>
#include <string.h>

#include <spng.h>

/* Bytes of ancillary chunk data libspng may keep (text, iCCP, sPLT...). */
#define STK_PNG_CACHE_MAX ((size_t)64 << 20)
/* Largest ancillary chunk libspng will store or inflate (libspng requires
 * it to be no larger than the cache; IDAT chunks are streamed, not
 * stored, and are not bound by it). */
#define STK_PNG_CHUNK_MAX ((size_t)64 << 20)

static int stk_png_err(int e, const char *doing)
{
    int code = e == SPNG_EMEM ? STK_ENOMEM : STK_EDATA;
    return stk_fail(code, "PNG: %s%s%s", doing ? doing : "", doing ? ": " : "",
                    spng_strerror(e));
}

/* A context reading `data`, its IHDR read and checked. *ctx owns the
 * context on success and on failure (free it with spng_ctx_free). */
static int stk_png_open(const uint8_t *data, size_t size, uint64_t max_pixels, spng_ctx **ctx,
                        struct spng_ihdr *ihdr, stk_image_info *info)
{
    uint32_t dim_max = max_pixels < (uint64_t)INT32_MAX ? (uint32_t)max_pixels : INT32_MAX;
    spng_ctx *c;
    int e;

    *ctx = c = spng_ctx_new(0);
    if (!c)
        return stk_fail(STK_ENOMEM, "PNG: out of memory creating a decoder");
    if ((e = spng_set_crc_action(c, SPNG_CRC_ERROR, SPNG_CRC_ERROR)) ||
        (e = spng_set_image_limits(c, dim_max, dim_max)) ||
        (e = spng_set_chunk_limits(c, STK_PNG_CHUNK_MAX, STK_PNG_CACHE_MAX)) ||
        (e = spng_set_png_buffer(c, data, size)))
        return stk_png_err(e, "setting up the decoder");
    if ((e = spng_get_ihdr(c, ihdr))) {
        if (e == SPNG_EUSER_WIDTH || e == SPNG_EUSER_HEIGHT)
            return stk_fail(STK_ELIMIT, "PNG: image %s exceeds the max_pixels limit of %llu",
                            e == SPNG_EUSER_WIDTH ? "width" : "height",
                            (unsigned long long)max_pixels);
        return stk_png_err(e, "reading the header");
    }

    memset(info, 0, sizeof *info);
    info->format = STK_IMAGE_PNG;
    info->width = ihdr->width;
    info->height = ihdr->height;
    switch (ihdr->color_type) {
    case SPNG_COLOR_TYPE_GRAYSCALE:
        info->components = 1;
        break;
    case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA:
        info->components = 2;
        break;
    case SPNG_COLOR_TYPE_TRUECOLOR_ALPHA:
        info->components = 4;
        break;
    default: /* truecolour, palette */
        info->components = 3;
        break;
    }
    return stk_codec_check_pixels("PNG", ihdr->width, ihdr->height, max_pixels);
}

static int stk_png_probe(const uint8_t *data, size_t size, uint64_t max_pixels,
                         stk_image_info *info)
{
    struct spng_ihdr ihdr;
    spng_ctx *ctx = NULL;
    int rc = stk_png_open(data, size, max_pixels, &ctx, &ihdr, info);
    spng_ctx_free(ctx);
    return rc;
}

/* libspng's own memory: the current and previous scanline (up to 8 bytes
 * a pixel), the row it converts into, and zlib's inflate state. */
static uint64_t stk_png_own_bytes(const struct spng_ihdr *ihdr)
{
    return (uint64_t)ihdr->width * 8 * 3 + ((uint64_t)64 << 10);
}

/* Rows 0 .. r->y + r->height - 1 of a non-interlaced image, keeping the
 * region's columns of its rows, densely, at out->data. */
static int stk_png_decode_rows(spng_ctx *ctx, const struct spng_ihdr *ihdr, const stk_rect *r,
                               const stk_decode_req *req)
{
    stk_scratch *out = req->out;
    size_t row_bytes = (size_t)ihdr->width * 3, keep = (size_t)r->width * 3;
    uint64_t total;
    uint8_t *tmp;
    int e;

    /* region rows + one full row to decode into; bounded by max_pixels */
    if (!stk_mul_ok(keep, r->height, &total) || !stk_add_ok(total, row_bytes, &total) ||
        total > SIZE_MAX)
        return stk_fail(STK_ELIMIT, "PNG: region does not fit in memory");
    int rc = stk_codec_check_bytes(req, "PNG", ihdr->width, ihdr->height, total,
                                   stk_png_own_bytes(ihdr));
    if (rc || (rc = stk_codec_reserve(req, (size_t)total)))
        return rc;
    tmp = out->data + keep * r->height;

    if ((e = spng_decode_image(ctx, NULL, 0, SPNG_FMT_RGB8, SPNG_DECODE_PROGRESSIVE)))
        return stk_png_err(e, "starting to decode");
    for (uint32_t y = 0; y < r->y + r->height; y++) {
        e = spng_decode_row(ctx, tmp, row_bytes);
        /* SPNG_EOI comes with the last row of the image, decoded. */
        if (e && !(e == SPNG_EOI && y + 1 == ihdr->height))
            return stk_png_err(e, NULL);
        if (y >= r->y)
            memcpy(out->data + (size_t)(y - r->y) * keep, tmp + (size_t)r->x * 3, keep);
    }
    /* Down to the last row: check the rest as a whole decode does. */
    if (r->y + r->height == ihdr->height) {
        e = spng_decode_chunks(ctx);
        if (e && e != SPNG_IO_EOF && e != SPNG_EOF)
            return stk_png_err(e, "after the image data");
    }
    return 0;
}

static int stk_png_decode(const stk_decode_req *req)
{
    struct spng_ihdr ihdr;
    stk_image_info info;
    spng_ctx *ctx = NULL;
    const stk_rect *r = req->region;
    stk_image_view *v = req->view;
    size_t len;
    int rc, e;

    rc = stk_png_open(req->data, req->size, req->max_pixels, &ctx, &ihdr, &info);
    if (rc)
        goto out;
    if (r && (rc = stk_codec_check_region("PNG", r, ihdr.width, ihdr.height)))
        goto out;

    v->channels = 3;
    v->col_stride = 3;
    v->chan_stride = 1;
    if (r && !ihdr.interlace_method) {
        rc = stk_png_decode_rows(ctx, &ihdr, r, req);
        if (rc)
            goto out;
        v->pixels = req->out->data;
        v->width = r->width;
        v->height = r->height;
        v->row_stride = (ptrdiff_t)r->width * 3;
        goto out;
    }

    if ((e = spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &len))) {
        rc = stk_png_err(e, NULL);
        goto out;
    }
    if ((rc = stk_codec_check_bytes(req, "PNG", ihdr.width, ihdr.height, len,
                                    stk_png_own_bytes(&ihdr))) ||
        (rc = stk_codec_reserve(req, len)))
        goto out;
    if ((e = spng_decode_image(ctx, req->out->data, len, SPNG_FMT_RGB8, 0))) {
        rc = stk_png_err(e, NULL);
        goto out;
    }
    /* libspng stops once the pixels are complete, before the last IDAT's
     * CRC; reading the chunks after it checks that CRC (and those of any
     * chunks up to IEND). A file that ends without IEND keeps its pixels. */
    e = spng_decode_chunks(ctx);
    if (e && e != SPNG_IO_EOF && e != SPNG_EOF) {
        rc = stk_png_err(e, "after the image data");
        goto out;
    }
    v->row_stride = (ptrdiff_t)ihdr.width * 3;
    if (r) {
        v->pixels = req->out->data + (size_t)r->y * v->row_stride + (size_t)r->x * 3;
        v->width = r->width;
        v->height = r->height;
    } else {
        v->pixels = req->out->data;
        v->width = ihdr.width;
        v->height = ihdr.height;
    }

out:
    if (rc)
        memset(v, 0, sizeof *v);
    spng_ctx_free(ctx);
    return rc;
}

/*
 * A segmentation mask: one byte per pixel holding the stored value, not a
 * colour — the palette index of an indexed PNG (PASCAL VOC's masks), the
 * sample of an 8-bit (or 1/2/4-bit, unpacked) grayscale one. Other colour
 * types and 16-bit samples are refused: a mask's values are class ids.
 */
static int stk_png_decode_mask(const uint8_t *data, size_t size, uint64_t max_pixels,
                               stk_scratch *out, stk_image_view *v)
{
    struct spng_ihdr ihdr;
    stk_image_info info;
    spng_ctx *ctx = NULL;
    size_t len;
    int rc, e;

    rc = stk_png_open(data, size, max_pixels, &ctx, &ihdr, &info);
    if (rc)
        goto out;
    if (ihdr.color_type != SPNG_COLOR_TYPE_INDEXED && ihdr.color_type != SPNG_COLOR_TYPE_GRAYSCALE) {
        rc = stk_fail(STK_EDATA,
                      "PNG mask: colour type %u; a mask is an indexed or grayscale PNG of class "
                      "ids",
                      (unsigned)ihdr.color_type);
        goto out;
    }
    if (ihdr.bit_depth > 8) {
        rc = stk_fail(STK_EDATA, "PNG mask: %u-bit samples; masks of 8 bits or fewer are read",
                      (unsigned)ihdr.bit_depth);
        goto out;
    }
    if ((e = spng_decoded_image_size(ctx, SPNG_FMT_RAW, &len))) {
        rc = stk_png_err(e, NULL);
        goto out;
    }
    size_t npix = (size_t)ihdr.width * ihdr.height;
    if ((rc = stk_scratch_reserve(out, len + npix)))
        goto out;
    uint8_t *raw = out->data + npix;
    if ((e = spng_decode_image(ctx, raw, len, SPNG_FMT_RAW, 0))) {
        rc = stk_png_err(e, NULL);
        goto out;
    }
    unsigned depth = ihdr.bit_depth;
    size_t row_bytes = len / ihdr.height;
    for (uint32_t y = 0; y < ihdr.height; y++) {
        const uint8_t *s = raw + (size_t)y * row_bytes;
        uint8_t *d = out->data + (size_t)y * ihdr.width;
        if (depth == 8) {
            memcpy(d, s, ihdr.width);
            continue;
        }
        unsigned per = 8 / depth, mask = (1u << depth) - 1;
        for (uint32_t x = 0; x < ihdr.width; x++) {
            unsigned shift = 8 - depth * (x % per + 1);
            d[x] = (uint8_t)((s[x / per] >> shift) & mask);
        }
    }
    v->pixels = out->data;
    v->width = ihdr.width;
    v->height = ihdr.height;
    v->channels = 1;
    v->row_stride = (ptrdiff_t)ihdr.width;
    v->col_stride = 1;
    v->chan_stride = 1;
out:
    spng_ctx_free(ctx);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The row (codec_table.c)                                                  */
/* ------------------------------------------------------------------------ */

static const uint8_t stk_png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

/* The 8-byte signature. */
static int stk_png_sniff(const uint8_t *data, size_t size)
{
    return size >= sizeof stk_png_sig && memcmp(data, stk_png_sig, sizeof stk_png_sig) == 0;
}

const stk_codec_desc stk_codec_png = {
    .format = STK_IMAGE_PNG,
    .name = "PNG",
    .sniff = stk_png_sniff,
    .probe = stk_png_probe,
    .decode = stk_png_decode,
    .decode_mask = stk_png_decode_mask,
    .near_miss = NULL,
    .scales = STK_CODEC_SCALE(1),
};
