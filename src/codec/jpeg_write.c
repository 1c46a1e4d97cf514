/*
 * jpeg_write.c — JPEG encoding with libjpeg-turbo's compressor, for
 * `stoker pack --reencode` (downscale large images, store smaller JPEGs).
 *
 * Like the decoder, every libjpeg call of one encode happens inside the one
 * function that holds the setjmp, and libjpeg's errors come back as an
 * stk_fail message; nothing longjmps across other frames. The compressed
 * bytes go to a libjpeg-owned memory buffer (jpeg_mem_dest) and are copied
 * into the caller's scratch, so the scratch is reused from image to image.
 */
#include "codec/codec_write.h"

#include "core/error.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

typedef struct encode_err {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
    /* jpeg_mem_dest's buffer: kept here, in memory libjpeg writes through a
     * pointer, so the error path sees its current value after longjmp. */
    unsigned char *mem;
    unsigned long len;
} encode_err;

static void encode_error_exit(j_common_ptr cinfo)
{
    encode_err *e = (encode_err *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->jump, 1);
}

static void encode_output_message(j_common_ptr cinfo) { (void)cinfo; }

int stk_jpeg_encode(const uint8_t *pixels, uint32_t width, uint32_t height, uint32_t channels,
                    size_t stride, int quality, stk_scratch *out, size_t *size)
{
    if (!pixels || !width || !height || (channels != 1 && channels != 3) || quality < 1 ||
        quality > 100 || width > 65500 || height > 65500 || stride < (size_t)width * channels)
        return stk_fail(STK_EINVAL, "JPEG encode: bad arguments (%ux%ux%u, quality %d)", width,
                        height, channels, quality);
    /* Locals the error path reads are volatile or set before setjmp. */
    struct jpeg_compress_struct cinfo;
    encode_err err;
    int rc = 0;
    memset(&cinfo, 0, sizeof cinfo);
    err.mem = NULL;
    err.len = 0;
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = encode_error_exit;
    err.pub.output_message = encode_output_message;
    if (setjmp(err.jump)) {
        rc = stk_fail(strstr(err.msg, "memory") ? STK_ENOMEM : STK_EIO, "JPEG encode: %s",
                      err.msg);
        goto done;
    }
    jpeg_create_compress(&cinfo);
    jpeg_mem_dest(&cinfo, &err.mem, &err.len);
    cinfo.image_width = width;
    cinfo.image_height = height;
    cinfo.input_components = (int)channels;
    cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&cinfo);
    jpeg_set_quality(&cinfo, quality, TRUE);
    jpeg_start_compress(&cinfo, TRUE);
    while (cinfo.next_scanline < cinfo.image_height) {
        JSAMPROW row = (JSAMPROW)(pixels + (size_t)cinfo.next_scanline * stride);
        jpeg_write_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_compress(&cinfo);
    if ((rc = stk_scratch_reserve(out, err.len)) == 0) {
        memcpy(out->data, err.mem, err.len);
        *size = err.len;
    }
done:
    jpeg_destroy_compress(&cinfo);
    free(err.mem);
    return rc;
}
