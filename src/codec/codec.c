/*
 * codec.c — format sniffing, names, and the dispatch of stk_image_probe /
 * stk_image_decode to the decoders: JPEG (jpeg.c), PNG (png.c), WebP
 * (webp.c), BMP (bmp.c), TIFF (tiff.c) and GIF (gif.c).
 *
 * The format is decided by the content, never by a file name: ImageNet has
 * a PNG named .JPEG, and a dataset of strangers' files has worse. A JPEG
 * starts with SOI and the first byte of the next marker (FF D8 FF), a PNG
 * with its 8-byte signature, a WebP with "RIFF" size "WEBP", a BMP with
 * "BM", a TIFF with "II*\0" or "MM\0*", a GIF with "GIF87a" / "GIF89a".
 * Anything else is STK_EDATA; when the bytes are a format we know by sight
 * but do not decode (PNM), the message says which, so a user learns why the
 * sample was skipped instead of being told it is corrupt.
 *
 * What is checked here, before a decoder runs: the arguments that need no
 * header (NULLs, scale_denom in {1, 2, 4, 8}, only 1 for everything but
 * JPEG, a region of nonzero size) and the limits (zero fields replaced by
 * their defaults). Everything that needs the header — the pixel limit, the
 * region bounds — is checked by the decoder right after it has read the
 * header and before it allocates.
 *
 * The decode budget (stk_codec_limits.max_bytes) is likewise checked by
 * each decoder once it knows the header: it counts what that decoder will
 * put in the output scratch and what it (or its library) allocates on its
 * own, as a pure function of the header, the region and the scale — never
 * of what the scratch already holds — so a sample is refused or decoded
 * the same way whichever thread, with whatever history, decodes it.
 *
 * The formats without a region decode of their own (WebP, BMP, TIFF, GIF)
 * decode the whole image into the scratch and stk_codec_finish_view points
 * the view at the region inside it, so a region equals the same window of
 * a whole decode trivially.
 */
#include "codec/codec_internal.h"

#include "core/error.h"

#include <stdio.h>
#include <string.h>

static const uint8_t stk_png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

stk_image_format stk_image_sniff(const uint8_t *data, size_t size)
{
    if (!data)
        return STK_IMAGE_UNKNOWN;
    if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF)
        return STK_IMAGE_JPEG;
    if (size >= sizeof stk_png_sig && memcmp(data, stk_png_sig, sizeof stk_png_sig) == 0)
        return STK_IMAGE_PNG;
    if (size >= 12 && memcmp(data, "RIFF", 4) == 0 && memcmp(data + 8, "WEBP", 4) == 0)
        return STK_IMAGE_WEBP;
    if (size >= 2 && data[0] == 'B' && data[1] == 'M')
        return STK_IMAGE_BMP;
    if (size >= 4 && (memcmp(data, "II*\0", 4) == 0 || memcmp(data, "MM\0*", 4) == 0))
        return STK_IMAGE_TIFF;
    if (size >= 6 && (memcmp(data, "GIF87a", 6) == 0 || memcmp(data, "GIF89a", 6) == 0))
        return STK_IMAGE_GIF;
    return STK_IMAGE_UNKNOWN;
}

const char *stk_image_format_name(stk_image_format f)
{
    switch (f) {
    case STK_IMAGE_JPEG:
        return "JPEG";
    case STK_IMAGE_PNG:
        return "PNG";
    case STK_IMAGE_WEBP:
        return "WebP";
    case STK_IMAGE_BMP:
        return "BMP";
    case STK_IMAGE_TIFF:
        return "TIFF";
    case STK_IMAGE_GIF:
        return "GIF";
    case STK_IMAGE_UNKNOWN:
        break;
    }
    return "unknown";
}

/* A name for formats recognised only to explain why they are refused. */
static const char *stk_other_format(const uint8_t *d, size_t n)
{
    if (n >= 4 && (memcmp(d, "II+\0", 4) == 0 || memcmp(d, "MM\0+", 4) == 0))
        return "BigTIFF";
    if (n >= 2 && d[0] == 'P' && d[1] >= '1' && d[1] <= '7')
        return "PNM";
    return NULL;
}

static int stk_unknown_format(const uint8_t *data, size_t size)
{
    char hex[3 * 8 + 1];
    size_t k = size < 8 ? size : 8;
    const char *other;

    if (!data || size == 0)
        return stk_fail(STK_EDATA, "image: empty input (0 bytes)");
    if (data[0] == 0xFF && (size == 1 || (data[1] == 0xD8 && size == 2)))
        return stk_fail(STK_EDATA, "JPEG: truncated after %zu bytes", size);
    if (data[0] == 0xFF && data[1] == 0xD8)
        return stk_fail(STK_EDATA, "JPEG: no marker after SOI (starts ff d8 %02x)", data[2]);
    other = stk_other_format(data, size);
    if (other)
        return stk_fail(STK_EDATA,
                        "image: %s data, which stoker does not decode (JPEG, PNG, WebP, BMP, "
                        "TIFF and GIF only)",
                        other);
    for (size_t i = 0; i < k; i++)
        snprintf(hex + 3 * i, sizeof hex - 3 * i, "%02x%s", data[i], i + 1 < k ? " " : "");
    return stk_fail(STK_EDATA, "image: not a JPEG, PNG, WebP, BMP, TIFF or GIF image (%zu bytes "
                    "starting %s)", size,
                    hex);
}

static uint64_t stk_limits_pixels(const stk_codec_limits *limits)
{
    return limits && limits->max_pixels ? limits->max_pixels : STK_DEFAULT_MAX_PIXELS;
}

int stk_codec_check_region(const char *what, const stk_rect *r, uint32_t width, uint32_t height)
{
    if ((uint64_t)r->x + r->width > width || (uint64_t)r->y + r->height > height)
        return stk_fail(STK_EINVAL,
                        "%s: region %ux%u at (%u, %u) is outside the %ux%u image", what,
                        r->width, r->height, r->x, r->y, width, height);
    return 0;
}

int stk_codec_check_pixels(const char *what, uint32_t width, uint32_t height, uint64_t max_pixels)
{
    uint64_t px = (uint64_t)width * height; /* < 2^64: both < 2^32 */
    if (px > max_pixels)
        return stk_fail(STK_ELIMIT,
                        "%s: %ux%u image (%llu pixels) exceeds the max_pixels limit of %llu",
                        what, width, height, (unsigned long long)px,
                        (unsigned long long)max_pixels);
    return 0;
}

/* The last decode's need on this thread (stk_image_last_need). */
static _Thread_local uint64_t stk_need_out, stk_need_own;

void stk_image_last_need(uint64_t *out_bytes, uint64_t *own_bytes)
{
    if (out_bytes)
        *out_bytes = stk_need_out;
    if (own_bytes)
        *own_bytes = stk_need_own;
}

int stk_codec_check_bytes(const stk_decode_req *req, const char *what, uint32_t width,
                          uint32_t height, uint64_t out_bytes, uint64_t own_bytes)
{
    uint64_t need = out_bytes + own_bytes; /* each < 2^60: sizes of < 2^32 x 2^32 x 8 */
    /* Recorded only when it will be allocated: a refused image used nothing. */
    stk_need_out = stk_need_own = 0;
    if (!req->max_bytes || need <= req->max_bytes) {
        stk_need_out = out_bytes;
        stk_need_own = own_bytes;
    }
    if (req->max_bytes && need > req->max_bytes)
        return stk_fail(STK_ELIMIT,
                        "%s: decoding the %ux%u image needs %llu bytes (%.1f MiB), over the "
                        "decode budget of %llu bytes (%.1f MiB) that memory_limit leaves each "
                        "worker thread",
                        what, width, height, (unsigned long long)need,
                        (double)need / (1024.0 * 1024.0), (unsigned long long)req->max_bytes,
                        (double)req->max_bytes / (1024.0 * 1024.0));
    return 0;
}

int stk_codec_reserve(const stk_decode_req *req, size_t bytes)
{
    stk_scratch *s = req->out;
    if (!req->max_bytes || s->cap >= bytes)
        return stk_scratch_reserve(s, bytes);
    uint8_t *p = stk_aligned_alloc(bytes);
    if (!p)
        return stk_fail(STK_ENOMEM, "out of memory allocating %zu bytes of scratch", bytes);
    stk_aligned_free(s->data);
    s->data = p;
    s->cap = bytes;
    return 0;
}

void stk_codec_finish_view(const stk_decode_req *req, uint8_t *pixels, uint32_t width,
                           uint32_t height)
{
    stk_image_view *v = req->view;
    const stk_rect *r = req->region;
    v->channels = 3;
    v->col_stride = 3;
    v->chan_stride = 1;
    v->row_stride = (ptrdiff_t)width * 3;
    if (r) {
        v->pixels = pixels + (size_t)r->y * (size_t)v->row_stride + (size_t)r->x * 3;
        v->width = r->width;
        v->height = r->height;
    } else {
        v->pixels = pixels;
        v->width = width;
        v->height = height;
    }
}

int stk_image_probe(const uint8_t *data, size_t size, const stk_codec_limits *limits,
                    stk_image_info *info)
{
    if (!info)
        return stk_fail(STK_EINVAL, "stk_image_probe: info is NULL");
    memset(info, 0, sizeof *info);
    switch (stk_image_sniff(data, size)) {
    case STK_IMAGE_JPEG:
        return stk_jpeg_probe(data, size, stk_limits_pixels(limits), info);
    case STK_IMAGE_PNG:
        return stk_png_probe(data, size, stk_limits_pixels(limits), info);
    case STK_IMAGE_WEBP:
        return stk_webp_probe(data, size, stk_limits_pixels(limits), info);
    case STK_IMAGE_BMP:
        return stk_bmp_probe(data, size, stk_limits_pixels(limits), info);
    case STK_IMAGE_TIFF:
        return stk_tiff_probe(data, size, stk_limits_pixels(limits), info);
    case STK_IMAGE_GIF:
        return stk_gif_probe(data, size, stk_limits_pixels(limits), info);
    case STK_IMAGE_UNKNOWN:
        break;
    }
    return stk_unknown_format(data, size);
}

int stk_image_decode(const uint8_t *data, size_t size, const stk_codec_limits *limits,
                     const stk_rect *region, unsigned scale_denom, stk_scratch *out,
                     stk_image_view *view)
{
    stk_decode_req req;
    stk_image_format f;

    if (!out || !view)
        return stk_fail(STK_EINVAL, "stk_image_decode: %s is NULL", !out ? "out" : "view");
    memset(view, 0, sizeof *view);
    if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8)
        return stk_fail(STK_EINVAL, "image: scale_denom %u is not 1, 2, 4 or 8", scale_denom);
    if (region && (region->width == 0 || region->height == 0))
        return stk_fail(STK_EINVAL, "image: empty region %ux%u at (%u, %u)", region->width,
                        region->height, region->x, region->y);

    f = stk_image_sniff(data, size);
    if (f == STK_IMAGE_UNKNOWN)
        return stk_unknown_format(data, size);
    if (f != STK_IMAGE_JPEG && scale_denom != 1)
        return stk_fail(STK_EINVAL, "%s: scale_denom %u requested; %s decodes at full size only",
                        stk_image_format_name(f), scale_denom, stk_image_format_name(f));

    req.data = data;
    req.size = size;
    req.max_pixels = stk_limits_pixels(limits);
    req.max_bytes = limits ? limits->max_bytes : 0;
    stk_need_out = stk_need_own = 0;
    req.region = region;
    req.scale_denom = scale_denom;
    req.out = out;
    req.view = view;
    switch (f) {
    case STK_IMAGE_JPEG:
        return stk_jpeg_decode(&req);
    case STK_IMAGE_PNG:
        return stk_png_decode(&req);
    case STK_IMAGE_WEBP:
        return stk_webp_decode(&req);
    case STK_IMAGE_BMP:
        return stk_bmp_decode(&req);
    case STK_IMAGE_TIFF:
        return stk_tiff_decode(&req);
    case STK_IMAGE_GIF:
        return stk_gif_decode(&req);
    case STK_IMAGE_UNKNOWN:
        break;
    }
    return stk_unknown_format(data, size);
}

int stk_image_decode_mask(const uint8_t *data, size_t size, const stk_codec_limits *limits,
                          stk_scratch *out, stk_image_view *view)
{
    if (!out || !view)
        return stk_fail(STK_EINVAL, "stk_image_decode_mask: NULL argument");
    memset(view, 0, sizeof *view);
    if (stk_image_sniff(data, size) == STK_IMAGE_PNG)
        return stk_png_decode_mask(data, size, stk_limits_pixels(limits), out, view);
    int rc = stk_image_decode(data, size, limits, NULL, 1, out, view);
    if (rc == 0)
        view->channels = 1; /* the first channel; col_stride stays the decoder's */
    return rc;
}
