/*
 * webp.c — WebP decoding through libwebp (decode.h, libwebp 1.2).
 *
 * What it produces. 8-bit RGB, HWC, through WebPDecode with MODE_RGB:
 * lossy (VP8, with libwebp's default "fancy" chroma upsampling) and
 * lossless (VP8L) alike, with or without an alpha channel. Alpha is
 * dropped, not composited: PIL decodes a still WebP to RGBA (or RGBX) with
 * the same libwebp and the same default options, and convert("RGB") keeps
 * the colour channels as they are, which are the samples MODE_RGB writes
 * (MODE_RGB and MODE_RGBA differ only in the alpha byte; the premultiplied
 * modes are not used). So a still WebP equals PIL's
 * Image.open(f).convert("RGB") exactly (tests/python/test_codec_pil.py).
 *
 * Animated WebP (ANIM/ANMF chunks in a VP8X file): the first frame, as PIL
 * gives it. PIL decodes every WebP through libwebp's WebPAnimDecoder, whose
 * first frame is a key frame: the canvas is zero-filled (transparent black)
 * and the frame is decoded (WebPDecode, RGBA) into its rectangle, no
 * blending. Here libwebpdemux (WebPDemux, WebPDemuxGetFrame) finds frame 1,
 * its offset and its bytes; the canvas is zeroed and the frame decoded with
 * MODE_RGB into its rectangle through the output stride. The background
 * colour of the ANIM chunk is ignored, as WebPAnimDecoder ignores it.
 *
 * Hostile input. WebPGetFeatures reads the RIFF/VP8X/VP8/VP8L headers only;
 * width * height is checked against max_pixels before the output buffer
 * exists and before WebPDecode allocates its own working memory (a few rows
 * for lossy files, the whole ARGB image for lossless ones, so bounded by
 * the limit either way). libwebp has no callbacks and does not print; a
 * failure comes back as a VP8StatusCode, reported as STK_EDATA "WebP:
 * <what the status means>" (STK_ENOMEM for VP8_STATUS_OUT_OF_MEMORY). A
 * file cut short is VP8_STATUS_NOT_ENOUGH_DATA: WebPDecode is told it has
 * all the data, so a RIFF size beyond the end, a short partition or a
 * bitstream that runs out is an error, never a partly grey image.
 *
 * Region and scale: scale_denom must be 1; a region is the window of the
 * whole decode (stk_codec_finish_view). (libwebp's cropping option crops
 * after decoding the rows above, and its scaler is not PIL's, so neither is
 * used.)
 */
#include "codec/codec_internal.h"

#include "core/error.h"

#include <string.h>

#include <webp/decode.h>
#include <webp/demux.h>

static const char *stk_webp_status(VP8StatusCode s)
{
    switch (s) {
    case VP8_STATUS_OK:
        return "ok";
    case VP8_STATUS_OUT_OF_MEMORY:
        return "out of memory";
    case VP8_STATUS_INVALID_PARAM:
        return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR:
        return "bitstream error (corrupt or not WebP)";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
        return "unsupported feature";
    case VP8_STATUS_SUSPENDED:
        return "decoding suspended";
    case VP8_STATUS_USER_ABORT:
        return "decoding aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA:
        return "not enough data (truncated file)";
    }
    return "unknown status";
}

static int stk_webp_err(VP8StatusCode s, const char *doing)
{
    return stk_fail(s == VP8_STATUS_OUT_OF_MEMORY ? STK_ENOMEM : STK_EDATA, "WebP: %s: %s",
                    doing, stk_webp_status(s));
}

/* Read the headers, fill *info and check the limit. */
static int stk_webp_open(const uint8_t *data, size_t size, uint64_t max_pixels,
                         WebPBitstreamFeatures *f, stk_image_info *info)
{
    VP8StatusCode s = WebPGetFeatures(data, size, f);
    if (s != VP8_STATUS_OK)
        return stk_webp_err(s, "reading the header");
    if (f->width <= 0 || f->height <= 0)
        return stk_fail(STK_EDATA, "WebP: bad image size %dx%d", f->width, f->height);
    memset(info, 0, sizeof *info);
    info->format = STK_IMAGE_WEBP;
    info->width = (uint32_t)f->width;
    info->height = (uint32_t)f->height;
    info->components = f->has_alpha ? 4 : 3;
    return stk_codec_check_pixels("WebP", info->width, info->height, max_pixels);
}

static int stk_webp_probe(const uint8_t *data, size_t size, uint64_t max_pixels,
                          stk_image_info *info)
{
    WebPBitstreamFeatures f;
    return stk_webp_open(data, size, max_pixels, &f, info);
}

/* Decode `data` as RGB into `out` (stride bytes a row, `size` bytes). */
static VP8StatusCode stk_webp_decode_into(const uint8_t *data, size_t size, uint8_t *out,
                                          int stride, size_t out_size)
{
    WebPDecoderConfig config;
    if (!WebPInitDecoderConfig(&config))
        return VP8_STATUS_INVALID_PARAM;
    config.output.colorspace = MODE_RGB;
    config.output.is_external_memory = 1;
    config.output.u.RGBA.rgba = out;
    config.output.u.RGBA.stride = stride;
    config.output.u.RGBA.size = out_size;
    VP8StatusCode s = WebPDecode(data, size, &config);
    WebPFreeDecBuffer(&config.output); /* external memory: frees nothing of ours */
    return s;
}

/* The first frame of an animation on its zeroed canvas (already reserved). */
static int stk_webp_first_frame(const stk_decode_req *req, uint32_t cw, uint32_t ch)
{
    WebPData wd = {req->data, req->size};
    WebPIterator it;
    int rc = 0;
    WebPDemuxer *dmux = WebPDemux(&wd);
    if (!dmux)
        return stk_fail(STK_EDATA, "WebP: animation: bad chunk structure (demux failed)");
    if (!WebPDemuxGetFrame(dmux, 1, &it)) {
        WebPDemuxDelete(dmux);
        return stk_fail(STK_EDATA, "WebP: animation without a frame");
    }
    if (WebPDemuxGetI(dmux, WEBP_FF_CANVAS_WIDTH) != cw ||
        WebPDemuxGetI(dmux, WEBP_FF_CANVAS_HEIGHT) != ch || it.x_offset < 0 || it.y_offset < 0 ||
        it.width <= 0 || it.height <= 0 || (uint64_t)it.x_offset + (uint64_t)it.width > cw ||
        (uint64_t)it.y_offset + (uint64_t)it.height > ch) {
        rc = stk_fail(STK_EDATA, "WebP: first frame %dx%d at (%d, %d) outside the %ux%u canvas",
                      it.width, it.height, it.x_offset, it.y_offset, cw, ch);
    } else {
        size_t stride = (size_t)cw * 3;
        uint8_t *at = req->out->data + (size_t)it.y_offset * stride + (size_t)it.x_offset * 3;
        size_t room = (size_t)(it.height - 1) * stride + (size_t)it.width * 3;
        memset(req->out->data, 0, stride * ch);
        VP8StatusCode s = stk_webp_decode_into(it.fragment.bytes, it.fragment.size, at,
                                               (int)stride, room);
        if (s != VP8_STATUS_OK)
            rc = stk_webp_err(s, "decoding the first frame");
    }
    WebPDemuxReleaseIterator(&it);
    WebPDemuxDelete(dmux);
    return rc;
}

static int stk_webp_decode(const stk_decode_req *req)
{
    WebPBitstreamFeatures f;
    stk_image_info info;
    size_t len;
    int rc;

    if ((rc = stk_webp_open(req->data, req->size, req->max_pixels, &f, &info)))
        return rc;
    if (req->region &&
        (rc = stk_codec_check_region("WebP", req->region, info.width, info.height)))
        return rc;
    len = (size_t)info.width * info.height * 3; /* <= 3 * max_pixels: checked */
    /* libwebp's own memory: a lossless (VP8L) image is decoded to a whole
     * ARGB picture (4 bytes a pixel) before it is converted to ours; a
     * lossy one needs a few macroblock rows (counted as 64 rows of 4
     * bytes); the demuxer of an animation, nothing sized by the canvas. */
    uint64_t own = (f.format == 2 || f.has_animation ? (uint64_t)info.width * info.height * 4
                                                      : 0) +
                   (uint64_t)info.width * 64 * 4;
    if ((rc = stk_codec_check_bytes(req, "WebP", info.width, info.height, len, own)) ||
        (rc = stk_codec_reserve(req, len)))
        return rc;
    if (f.has_animation) {
        if ((rc = stk_webp_first_frame(req, info.width, info.height)))
            return rc;
    } else {
        VP8StatusCode s = stk_webp_decode_into(req->data, req->size, req->out->data,
                                               (int)info.width * 3, len);
        if (s != VP8_STATUS_OK)
            return stk_webp_err(s, "decoding");
    }
    stk_codec_finish_view(req, req->out->data, info.width, info.height);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The row (codec_table.c)                                                  */
/* ------------------------------------------------------------------------ */

/* "RIFF", the RIFF size, "WEBP". */
static int stk_webp_sniff(const uint8_t *data, size_t size)
{
    return size >= 12 && memcmp(data, "RIFF", 4) == 0 && memcmp(data + 8, "WEBP", 4) == 0;
}

const stk_codec_desc stk_codec_webp = {
    .format = STK_IMAGE_WEBP,
    .name = "WebP",
    .sniff = stk_webp_sniff,
    .probe = stk_webp_probe,
    .decode = stk_webp_decode,
    .decode_mask = NULL,
    .near_miss = NULL,
    .scales = STK_CODEC_SCALE(1),
};
