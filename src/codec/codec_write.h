/*
 * codec_write.h — writing images (internal): PNG through libspng's encoder,
 * for `stoker preview` (stk_preview); JPEG encoding and the lossless restart
 * transcode for `stoker pack`. Kept apart from codec.h, which is the
 * decoding side.
 */
#ifndef STK_CODEC_CODEC_WRITE_H
#define STK_CODEC_CODEC_WRITE_H

#include "core/util.h"

#include <stddef.h>
#include <stdint.h>

/* Write `rgb` (height rows of width RGB8 pixels, rows `stride` bytes apart)
 * to `path` as an 8-bit RGB PNG. The file is written to "path.tmp" and
 * renamed into place, so a reader never sees half a file. Returns 0, or
 * STK_EIO (the OS or the encoder failed, with the reason), STK_EINVAL (bad
 * arguments) or STK_ENOMEM, via stk_fail. */
int stk_png_write_rgb8(const char *path, const uint8_t *rgb, uint32_t width, uint32_t height,
                       size_t stride);

/* Encode `pixels` (height rows of width pixels of `channels` bytes, 1 gray or
 * 3 RGB, rows `stride` bytes apart) as a baseline JPEG of `quality` (1-100,
 * libjpeg's standard tables, 4:2:0 for color like PIL's default) into `out`
 * (grown as needed); *size gets the byte count. Returns 0, STK_EINVAL or
 * STK_ENOMEM / STK_EIO (the encoder's message) via stk_fail. */
int stk_jpeg_encode(const uint8_t *pixels, uint32_t width, uint32_t height, uint32_t channels,
                    size_t stride, int quality, stk_scratch *out, size_t *size);

/* Rewrite the JPEG `data` losslessly (same DCT coefficients, so the same
 * decoded pixels) as a baseline JPEG with a restart marker every R MCUs, R
 * the largest divisor of the MCU row length up to max_interval
 * (jpeg_write.c). Returns 1 with the new bytes in `out` / *out_size, 0
 * when the file is left as it is (not YCbCr or grayscale), STK_EDATA
 * (corrupt, libjpeg's reason), STK_ELIMIT (over max_pixels), STK_ENOMEM or
 * STK_EINVAL, via stk_fail. */
int stk_jpeg_add_restarts(const uint8_t *data, size_t size, uint64_t max_pixels,
                          unsigned max_interval, stk_scratch *out, size_t *out_size);

#endif
