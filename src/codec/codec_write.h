/*
 * codec_write.h — writing images (internal): PNG through libspng's encoder,
 * for `stoker preview` (stk_preview). Kept apart from codec.h, which is the
 * decoding side.
 */
#ifndef STK_CODEC_CODEC_WRITE_H
#define STK_CODEC_CODEC_WRITE_H

#include <stddef.h>
#include <stdint.h>

/* Write `rgb` (height rows of width RGB8 pixels, rows `stride` bytes apart)
 * to `path` as an 8-bit RGB PNG. The file is written to "path.tmp" and
 * renamed into place, so a reader never sees half a file. Returns 0, or
 * STK_EIO (the OS or the encoder failed, with the reason), STK_EINVAL (bad
 * arguments) or STK_ENOMEM, via stk_fail. */
int stk_png_write_rgb8(const char *path, const uint8_t *rgb, uint32_t width, uint32_t height,
                       size_t stride);

#endif
