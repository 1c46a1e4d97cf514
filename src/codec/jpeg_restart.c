/*
 * jpeg_restart.c — rewrite a JPEG with restart markers, losslessly, for
 * `stoker pack --restart N`.
 *
 * A crop decode can skip the Huffman decoding of everything outside the
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
 * boundary: about +2.5% of the file at R = 4 on 4:4:4 photographs at
 * quality 96, +9% at R = 1. A row length with no small divisor (a prime
 * number of MCUs) falls back to R = 1.
 *
 * What is left as it is (returns 0): colour spaces other than YCbCr and
 * grayscale (CMYK/YCCK and RGB JPEGs, whose colour handling depends on the
 * Adobe marker), and files whose coefficients libjpeg cannot read.
 * And progressive files whose scans leave some coefficients unrefined
 * (coef_bits not all 0 after the last scan): libjpeg's decoder smooths such
 * blocks from their neighbours, which it would not do for the same
 * coefficients in a baseline file, so the pixels would change.
 * Metadata segments (EXIF, ICC, comments) are not copied: stoker's decoder
 * ignores them, as torchvision does. A progressive file becomes a baseline
 * one with the same coefficients.
 *
 * Errors: as in jpeg.c, every libjpeg call happens in the one frame that
 * holds the setjmp, and a warning (corrupt data) is an error.
 */
#include "codec/codec_write.h"

#include "core/error.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

typedef struct rst_err {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
    unsigned char *mem; /* jpeg_mem_dest's buffer; see jpeg_write.c */
    unsigned long len;
} rst_err;

static void rst_error_exit(j_common_ptr cinfo)
{
    rst_err *e = (rst_err *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->jump, 1);
}

static void rst_emit_message(j_common_ptr cinfo, int level)
{
    if (level >= 0)
        return;
    switch (cinfo->err->msg_code) {
    case JWRN_JFIF_MAJOR:
    case JWRN_ADOBE_XFORM:
    case JWRN_BOGUS_ICC:
    case JWRN_EXTRANEOUS_DATA:
        return; /* metadata or skipped junk: the coefficients are intact */
    default:
        rst_error_exit(cinfo);
    }
}

static void rst_output_message(j_common_ptr cinfo) { (void)cinfo; }

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
    rst_err err;
    volatile int have_out = 0;
    int rc = 0;
    memset(&din, 0, sizeof din);
    memset(&cout, 0, sizeof cout);
    err.mem = NULL;
    err.len = 0;
    din.err = jpeg_std_error(&err.pub);
    cout.err = &err.pub;
    err.pub.error_exit = rst_error_exit;
    err.pub.emit_message = rst_emit_message;
    err.pub.output_message = rst_output_message;
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
