/*
 * fuzz_codec.c — libFuzzer target for the image codec (src/codec/): JPEG
 * through libjpeg-turbo, PNG through libspng, WebP through libwebp, BMP
 * through stoker's own parser, TIFF through libtiff, GIF through giflib,
 * and the sniffing in between. The seed corpus fuzz/corpus/codec/ has files
 * of every format (fuzz/make_image_corpus.py makes the WebP, BMP, TIFF and
 * GIF ones).
 *
 * The input is one image file. The harness probes it, then decodes it whole
 * at every scale the format allows, and a few regions derived from the
 * input's bytes at each scale. Oracles, beyond "no crash, no leak, no
 * sanitizer report":
 *
 *   - probe and decode agree: a decode that succeeds has the probed size
 *     (scaled: ceil(size / d));
 *   - a region decode equals the same window of the whole decode at the
 *     same scale, byte for byte, whenever both succeed (the codec's
 *     exactness claim, docs/codec.md);
 *   - only JPEG accepts a scale_denom other than 1 (the rest: STK_EINVAL);
 *   - every failure is one of the documented codes, with a message.
 *
 * Every byte of every view is read (summed into a sink), so an
 * uninitialised or out-of-bounds pixel shows under MSan/ASan. The pixel
 * limit is small (2^18), so a short input cannot cost much time or memory.
 */
#include "codec/codec.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_codec"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_PIXELS (1u << 18)
#define REGIONS 3

static volatile uint64_t g_sink;

static void check_code(int rc)
{
    check(rc == STK_EDATA || rc == STK_ELIMIT || rc == STK_ENOMEM || rc == STK_EINVAL,
          "undocumented error code");
    check(stk_errmsg()[0] != '\0', "error without a message");
}

static void touch(const stk_image_view *v)
{
    uint64_t s = 0;
    for (uint32_t y = 0; y < v->height; y++)
        for (uint32_t x = 0; x < v->width; x++)
            for (uint32_t c = 0; c < v->channels; c++)
                s += v->pixels[(ptrdiff_t)y * v->row_stride + (ptrdiff_t)x * v->col_stride +
                               (ptrdiff_t)c * v->chan_stride];
    g_sink += s;
}

static uint32_t pick(const uint8_t *data, size_t size, size_t k, uint32_t mod)
{
    uint32_t h = 2166136261u ^ (uint32_t)k;
    for (size_t i = 0; i < size && i < 64; i++)
        h = (h ^ data[(i * 7 + k * 13) % size]) * 16777619u;
    return mod ? h % mod : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    stk_codec_limits lim = {.max_pixels = MAX_PIXELS};
    stk_scratch full = {0}, part = {0};
    stk_image_info info;
    int rc = stk_image_probe(data, size, &lim, &info);

    if (rc) {
        check_code(rc);
        /* The decoder must fail too. */
        stk_image_view v;
        rc = stk_image_decode(data, size, &lim, NULL, 1, &full, &v);
        check(rc != 0, "probe failed but decode succeeded");
        check_code(rc);
        goto out;
    }
    check(info.width > 0 && info.height > 0, "probe: zero size");
    check((uint64_t)info.width * info.height <= MAX_PIXELS, "probe: over the limit");

    for (unsigned d = 1; d <= 8; d *= 2) {
        stk_image_view fv, v;
        rc = stk_image_decode(data, size, &lim, NULL, d, &full, &fv);
        if (!(stk_image_format_scales(info.format) & (1u << d))) {
            check(rc == STK_EINVAL, "a format accepted a scale its codec row does not list");
            continue;
        }
        if (rc) {
            check_code(rc);
            continue;
        }
        check(fv.width == (info.width + d - 1) / d && fv.height == (info.height + d - 1) / d,
              "decoded size differs from the probed size");
        check(fv.channels == 3, "not RGB");
        touch(&fv);
        for (size_t k = 0; k < REGIONS; k++) {
            stk_rect r;
            r.width = 1 + pick(data, size, 4 * k + d, info.width);
            r.height = 1 + pick(data, size, 4 * k + d + 1, info.height);
            r.x = pick(data, size, 4 * k + d + 2, info.width - r.width + 1);
            r.y = pick(data, size, 4 * k + d + 3, info.height - r.height + 1);
            rc = stk_image_decode(data, size, &lim, &r, d, &part, &v);
            if (rc) {
                check_code(rc);
                continue;
            }
            uint32_t x0 = r.x / d, y0 = r.y / d;
            check(v.width == (r.x + r.width + d - 1) / d - x0 &&
                      v.height == (r.y + r.height + d - 1) / d - y0,
                  "region size");
            for (uint32_t y = 0; y < v.height; y++)
                for (uint32_t x = 0; x < v.width; x++)
                    for (uint32_t c = 0; c < 3; c++) {
                        uint8_t a = v.pixels[(ptrdiff_t)y * v.row_stride +
                                             (ptrdiff_t)x * v.col_stride +
                                             (ptrdiff_t)c * v.chan_stride];
                        uint8_t b = fv.pixels[(ptrdiff_t)(y0 + y) * fv.row_stride +
                                              (ptrdiff_t)(x0 + x) * fv.col_stride +
                                              (ptrdiff_t)c * fv.chan_stride];
                        check(a == b, "region differs from the whole decode");
                    }
        }
    }
out:
    stk_scratch_free(&full);
    stk_scratch_free(&part);
    return 0;
}
