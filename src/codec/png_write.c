/*
 * png_write.c — an RGB8 image to a PNG file with libspng's encoder.
 *
 * The image is packed into one contiguous buffer (libspng's
 * spng_encode_image takes the whole image), encoded with SPNG_FMT_PNG (the
 * pixels as given, RGB 8-bit, no conversion) and SPNG_ENCODE_FINALIZE
 * (IEND written), into "PATH.tmp", which is flushed, closed and renamed to
 * PATH. Any failure removes the temporary file.
 */
#include "codec/codec_write.h"

#include "core/error.h"
#include "core/util.h"

#include <errno.h>
#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int stk_png_write_rgb8(const char *path, const uint8_t *rgb, uint32_t width, uint32_t height,
                       size_t stride)
{
    int rc = 0, e;
    spng_ctx *ctx = NULL;
    FILE *f = NULL;
    uint8_t *packed = NULL;
    char *tmp = NULL;
    uint64_t bytes;

    if (!path || !rgb || !width || !height || stride < (size_t)width * 3 ||
        width > (1u << 24) || height > (1u << 24))
        return stk_fail(STK_EINVAL, "PNG write: bad arguments (%ux%u image)", width, height);
    if (!stk_mul_ok((uint64_t)width * 3, height, &bytes) || bytes > SIZE_MAX / 2)
        return stk_fail(STK_EINVAL, "PNG write: %ux%u image is too large", width, height);

    size_t plen = strlen(path) + 5;
    tmp = malloc(plen);
    packed = malloc((size_t)bytes);
    if (!tmp || !packed) {
        rc = stk_fail(STK_ENOMEM, "PNG write: out of memory");
        goto fail;
    }
    snprintf(tmp, plen, "%s.tmp", path);
    for (uint32_t y = 0; y < height; y++)
        memcpy(packed + (size_t)y * width * 3, rgb + (size_t)y * stride, (size_t)width * 3);

    f = fopen(tmp, "wb");
    if (!f) {
        rc = stk_fail(STK_EIO, "%s: cannot create: %s", tmp, strerror(errno));
        goto fail;
    }
    ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    if (!ctx) {
        rc = stk_fail(STK_ENOMEM, "PNG write: out of memory (encoder)");
        goto fail;
    }
    struct spng_ihdr ihdr;
    memset(&ihdr, 0, sizeof ihdr);
    ihdr.width = width;
    ihdr.height = height;
    ihdr.bit_depth = 8;
    ihdr.color_type = SPNG_COLOR_TYPE_TRUECOLOR;
    if ((e = spng_set_png_file(ctx, f)) || (e = spng_set_ihdr(ctx, &ihdr)) ||
        (e = spng_encode_image(ctx, packed, (size_t)bytes, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE))) {
        rc = stk_fail(STK_EIO, "%s: PNG encoder: %s", path, spng_strerror(e));
        goto fail;
    }
    spng_ctx_free(ctx);
    ctx = NULL;
    if (fflush(f) != 0 || ferror(f)) {
        rc = stk_fail(STK_EIO, "%s: write failed: %s", tmp, strerror(errno));
        goto fail;
    }
    e = fclose(f);
    f = NULL;
    if (e != 0) {
        rc = stk_fail(STK_EIO, "%s: close failed: %s", tmp, strerror(errno));
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        rc = stk_fail(STK_EIO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        goto fail;
    }
    free(tmp);
    free(packed);
    return 0;

fail:
    spng_ctx_free(ctx);
    if (f)
        fclose(f);
    if (tmp)
        remove(tmp);
    free(tmp);
    free(packed);
    return rc;
}
