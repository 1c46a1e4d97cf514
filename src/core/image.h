/*
 * image.h — a read-only view of one uint8 image in any plane layout.
 *
 * Pixel (y, x, c) lives at pixels + y*row_stride + x*col_stride + c*chan_stride
 * (strides in bytes). HWC interleaved has col_stride = channels,
 * chan_stride = 1; CIFAR's planar CHW has col_stride = 1, chan_stride = H*W.
 * Ops read through the strides, so no source is converted before use.
 */
#ifndef STK_CORE_IMAGE_H
#define STK_CORE_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct stk_image_view {
    const uint8_t *pixels; /* lent by the dataset; valid until the next read
                              with the same scratch */
    uint32_t height, width, channels;
    ptrdiff_t row_stride, col_stride, chan_stride;
} stk_image_view;

/* Copy the view into dst as dense HWC (height * width * channels bytes). */
void stk_image_copy_hwc(const stk_image_view *v, uint8_t *dst);

#endif
