/*
 * image.c — operations on image views that every module needs.
 */
#include "core/image.h"

#include <string.h>

void stk_image_copy_hwc(const stk_image_view *v, uint8_t *dst)
{
    size_t row_bytes = (size_t)v->width * v->channels;
    bool dense_rows = v->col_stride == (ptrdiff_t)v->channels && v->chan_stride == 1;
    if (dense_rows && v->row_stride == (ptrdiff_t)row_bytes) {
        memcpy(dst, v->pixels, row_bytes * v->height);
        return;
    }
    for (uint32_t y = 0; y < v->height; y++) {
        const uint8_t *row = v->pixels + (ptrdiff_t)y * v->row_stride;
        if (dense_rows) {
            memcpy(dst, row, row_bytes);
            dst += row_bytes;
            continue;
        }
        for (uint32_t x = 0; x < v->width; x++) {
            const uint8_t *px = row + (ptrdiff_t)x * v->col_stride;
            for (uint32_t c = 0; c < v->channels; c++)
                *dst++ = px[(ptrdiff_t)c * v->chan_stride];
        }
    }
}
