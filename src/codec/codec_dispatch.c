/*
 * codec_dispatch.c — the dispatcher: stk_image_probe, stk_image_decode and
 * stk_image_decode_mask check what needs no header, find the codec that
 * owns the bytes in the codec table (codec_table.c) and call its row's
 * hook. It names no format: the codecs (jpeg.c, png.c, webp.c, bmp.c,
 * tiff.c, gif.c) are rows of the table, and a new one is its own file plus
 * one line there (codec_table.c says how; docs/codec.md "Adding a codec").
 *
 * The format is decided by the content, never by a file name: ImageNet has
 * a PNG named .JPEG, and a dataset of strangers' files has worse. Each row
 * sniffs its own magic (a JPEG starts with SOI and the first byte of the
 * next marker, FF D8 FF; a PNG with its 8-byte signature; a WebP with
 * "RIFF" size "WEBP"; a BMP with "BM"; a TIFF with "II*\0" or "MM\0*"; a GIF
 * with "GIF87a" / "GIF89a"). Anything else is STK_EDATA, explained as well
 * as the bytes allow: a row may recognise its own format cut before its
 * magic is whole (near_miss: "JPEG: truncated after 2 bytes"), and a
 * format we know by sight but do not decode (PNM, BigTIFF) is named, so a
 * user learns why the sample was skipped instead of being told it is
 * corrupt; else the first bytes are shown in hex.
 *
 * What is checked here, before a decoder runs: the arguments that need no
 * header (NULLs, scale_denom in {1, 2, 4, 8} and among the row's scales —
 * only 1 for everything but JPEG —, a region of nonzero size) and the
 * limits (zero fields replaced by their defaults). Everything that needs
 * the header — the pixel limit, the region bounds, the decode budget — is
 * checked by the decoder right after it has read the header and before it
 * allocates, with the helpers of codec_util.c.
 *
 * The formats without a region decode of their own (WebP, BMP, TIFF, GIF)
 * decode the whole image into the scratch and stk_codec_finish_view points
 * the view at the region inside it, so a region equals the same window of
 * a whole decode trivially.
 *
 * The includes run one way: this file -> codec_table.h -> codec_internal.h
 * and codec.h (the module `codec`: the interface and what the codecs share,
 * with no source file of its own); the codecs include codec_internal.h
 * only, and codec_table.c reaches them by their rows' names. (This file is
 * not codec.c because a codec.c would make codec_internal.h its private
 * header, and every codec, including it, a user of the dispatcher:
 * scripts/check_circles.py.)
 */
#include "codec/codec_table.h"

#include "core/error.h"

#include <stdio.h>
#include <string.h>

static int stk_unknown_format(const uint8_t *data, size_t size)
{
    char hex[3 * 8 + 1], names[256];
    size_t k = size < 8 ? size : 8;
    const char *other;
    int rc;

    if (!data || size == 0)
        return stk_fail(STK_EDATA, "image: empty input (0 bytes)");
    if ((rc = stk_codec_near_miss(data, size)) != 0)
        return rc;
    other = stk_codec_unsupported(data, size);
    if (other)
        return stk_fail(STK_EDATA, "image: %s data, which stoker does not decode (%s only)",
                        other, stk_image_format_names(names, sizeof names, "and"));
    for (size_t i = 0; i < k; i++)
        snprintf(hex + 3 * i, sizeof hex - 3 * i, "%02x%s", data[i], i + 1 < k ? " " : "");
    return stk_fail(STK_EDATA, "image: not a %s image (%zu bytes starting %s)",
                    stk_image_format_names(names, sizeof names, "or"), size, hex);
}

static uint64_t stk_limits_pixels(const stk_codec_limits *limits)
{
    return limits && limits->max_pixels ? limits->max_pixels : STK_DEFAULT_MAX_PIXELS;
}

int stk_image_probe(const uint8_t *data, size_t size, const stk_codec_limits *limits,
                    stk_image_info *info)
{
    const stk_codec_desc *c;
    if (!info)
        return stk_fail(STK_EINVAL, "stk_image_probe: info is NULL");
    memset(info, 0, sizeof *info);
    if (!(c = stk_codec_sniff(data, size)))
        return stk_unknown_format(data, size);
    return c->probe(data, size, stk_limits_pixels(limits), info);
}

int stk_image_decode(const uint8_t *data, size_t size, const stk_codec_limits *limits,
                     const stk_rect *region, unsigned scale_denom, stk_scratch *out,
                     stk_image_view *view)
{
    stk_decode_req req;
    const stk_codec_desc *c;

    if (!out || !view)
        return stk_fail(STK_EINVAL, "stk_image_decode: %s is NULL", !out ? "out" : "view");
    memset(view, 0, sizeof *view);
    if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8)
        return stk_fail(STK_EINVAL, "image: scale_denom %u is not 1, 2, 4 or 8", scale_denom);
    if (region && (region->width == 0 || region->height == 0))
        return stk_fail(STK_EINVAL, "image: empty region %ux%u at (%u, %u)", region->width,
                        region->height, region->x, region->y);

    if (!(c = stk_codec_sniff(data, size)))
        return stk_unknown_format(data, size);
    if (!(c->scales & STK_CODEC_SCALE(scale_denom))) {
        if (c->scales == STK_CODEC_SCALE(1))
            return stk_fail(STK_EINVAL,
                            "%s: scale_denom %u requested; %s decodes at full size only",
                            c->name, scale_denom, c->name);
        return stk_fail(STK_EINVAL, "%s: scale_denom %u requested; %s does not decode at 1/%u",
                        c->name, scale_denom, c->name, scale_denom);
    }

    req.data = data;
    req.size = size;
    req.max_pixels = stk_limits_pixels(limits);
    req.max_bytes = limits ? limits->max_bytes : 0;
    stk_codec_need_clear();
    req.region = region;
    req.scale_denom = scale_denom;
    req.out = out;
    req.view = view;
    return c->decode(&req);
}

int stk_image_decode_mask(const uint8_t *data, size_t size, const stk_codec_limits *limits,
                          stk_scratch *out, stk_image_view *view)
{
    const stk_codec_desc *c;
    if (!out || !view)
        return stk_fail(STK_EINVAL, "stk_image_decode_mask: NULL argument");
    memset(view, 0, sizeof *view);
    c = stk_codec_sniff(data, size);
    if (c && c->decode_mask)
        return c->decode_mask(data, size, stk_limits_pixels(limits), out, view);
    int rc = stk_image_decode(data, size, limits, NULL, 1, out, view);
    if (rc == 0)
        view->channels = 1; /* the first channel; col_stride stays the decoder's */
    return rc;
}
