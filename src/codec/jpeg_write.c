/*
 * jpeg_write.c — writing JPEGs with libjpeg-turbo's compressor, for
 * `stoker pack`: encoding pixels (--reencode: downscale large images, store
 * smaller JPEGs), and rewriting a JPEG losslessly with restart markers
 * (--restart; below).
 *
 * Like the decoder, every libjpeg call of one encode happens inside the one
 * function that holds the setjmp, and libjpeg's errors come back as an
 * stk_fail message; nothing longjmps across other frames. The compressed
 * bytes go to a libjpeg-owned memory buffer (jpeg_mem_dest) and are copied
 * into the caller's scratch, so the scratch is reused from image to image.
 *
 * Restart markers (stk_jpeg_add_restarts). A crop decode can skip the Huffman decoding of everything outside the
 * crop only when the scan is cut into restart intervals that line up with
 * MCU rows (jpeg_window.c explains the decode side). Most JPEGs have no
 * restart markers, so the packer adds them: libjpeg reads the file's DCT
 * coefficients (jpeg_read_coefficients — no IDCT, nothing is re-quantized)
 * and writes them again as a baseline, single-scan JPEG with a DRI of R
 * MCUs and optimal Huffman tables, as `jpegtran -restart NB -optimize`
 * does. Decoded pixels are therefore unchanged; the packer still checks
 * that by decoding both and comparing, and keeps the original bytes if they
 * ever differ.
 *
 * R is the largest divisor of the MCU row length not above the requested
 * maximum, so that every MCU row is a whole number of intervals (which the
 * window needs). Each interval costs its RSTn marker and padding to a byte
 * boundary, which the optimal Huffman tables more than pay for on the
 * photos benchmark set (q96, mostly 4:4:4): the rewrite is 1.8% smaller at
 * N = 4 and 1.1% larger at N = 1 (docs/codec.md). A row length with no
 * small divisor (a prime number of MCUs) falls back to R = 1.
 *
 * What is left as it is (returns 0): colour spaces other than YCbCr and
 * grayscale (CMYK/YCCK and RGB JPEGs, whose colour handling depends on the
 * Adobe marker), and progressive files whose scans leave some coefficients unrefined
 * (coef_bits not all 0 after the last scan): libjpeg's decoder smooths such
 * blocks from their neighbours, which it would not do for the same
 * coefficients in a baseline file, so the pixels would change.
 * Metadata segments (EXIF, ICC, comments) are not copied: stoker's decoder
 * ignores them, as torchvision does. A progressive file becomes a baseline
 * one with the same coefficients.
 *
 * A source libjpeg cannot read is STK_EDATA with libjpeg's reason; reading
 * it, a warning is an error too (stk_jpeg_warning_is_benign decides, as
 * for the decoder), so a damaged file is never rewritten.
 */
#include "codec/codec_write.h"

#include "codec/codec_internal.h"
#include "core/error.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
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

/* Warnings while reading a source JPEG (the transcoder). */
static void encode_emit_message(j_common_ptr cinfo, int level)
{
    if (level < 0 && !stk_jpeg_warning_is_benign(cinfo->err->msg_code))
        encode_error_exit(cinfo);
}

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

static unsigned largest_divisor_upto(unsigned n, unsigned max)
{
    for (unsigned r = max < n ? max : n; r > 1; r--)
        if (n % r == 0)
            return r;
    return 1;
}

int stk_jpeg_add_restarts(const uint8_t *data, size_t size, uint64_t max_pixels,
                          unsigned max_interval, stk_scratch *out, size_t *out_size)
{
    if (!data || !out || !out_size || max_interval < 1 || max_interval > 65535)
        return stk_fail(STK_EINVAL, "JPEG restart: bad arguments (interval %u)", max_interval);
    struct jpeg_decompress_struct din;
    struct jpeg_compress_struct cout;
    encode_err err;
    volatile int have_out = 0;
    int rc = 0;
    memset(&din, 0, sizeof din);
    memset(&cout, 0, sizeof cout);
    err.mem = NULL;
    err.len = 0;
    din.err = jpeg_std_error(&err.pub);
    cout.err = &err.pub;
    err.pub.error_exit = encode_error_exit;
    err.pub.emit_message = encode_emit_message;
    err.pub.output_message = encode_output_message;
    if (setjmp(err.jump)) {
        rc = stk_fail(strstr(err.msg, "memory") ? STK_ENOMEM : STK_EDATA, "JPEG: %s", err.msg);
        goto done;
    }
    jpeg_create_decompress(&din);
    jpeg_mem_src(&din, data, (unsigned long)size);
    jpeg_read_header(&din, TRUE);
    if ((uint64_t)din.image_width * din.image_height > max_pixels) {
        rc = stk_fail(STK_ELIMIT, "JPEG: %ux%u is over the limit of %llu pixels",
                      din.image_width, din.image_height, (unsigned long long)max_pixels);
        goto done;
    }
    if (din.jpeg_color_space != JCS_YCbCr && din.jpeg_color_space != JCS_GRAYSCALE)
        goto done; /* rc 0: left as it is */
    jvirt_barray_ptr *coef = jpeg_read_coefficients(&din);
    if (din.progressive_mode)
        for (int c = 0; c < din.num_components; c++)
            for (int k = 0; k < DCTSIZE2; k++)
                if (din.coef_bits[c][k] != 0)
                    goto done; /* rc 0: not fully refined; see the essay */

    jpeg_create_compress(&cout);
    have_out = 1;
    jpeg_mem_dest(&cout, &err.mem, &err.len);
    jpeg_copy_critical_parameters(&din, &cout);
    unsigned mcu_w = din.num_components == 1 ? 8 : 8 * (unsigned)din.max_h_samp_factor;
    unsigned cols = (din.image_width + mcu_w - 1) / mcu_w;
    cout.restart_interval = largest_divisor_upto(cols, max_interval);
    cout.optimize_coding = TRUE;
    jpeg_write_coefficients(&cout, coef);
    jpeg_finish_compress(&cout);
    jpeg_finish_decompress(&din);
    if ((rc = stk_scratch_reserve(out, err.len)) == 0) {
        memcpy(out->data, err.mem, err.len);
        *out_size = err.len;
        rc = 1;
    }
done:
    if (have_out)
        jpeg_destroy_compress(&cout);
    jpeg_destroy_decompress(&din);
    free(err.mem);
    return rc;
}
