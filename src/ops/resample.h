/*
 * resample.h — antialiased bilinear resampling of uint8 images, exactly as
 * Pillow's Image.resize(size, Image.BILINEAR, box) computes it (internal);
 * also Image.BICUBIC (the same machinery with the cubic filter) and
 * Image.NEAREST (one tap of weight 1 per output), see the filters below.
 *
 * Pillow (ImagingResample in libImaging/Resample.c) resizes in two separable
 * passes, horizontal then vertical, each rounding back to uint8. For every
 * output coordinate it takes a window of source pixels under a triangle
 * filter whose support is stretched by the downscale factor (that stretch
 * is the antialiasing), normalises the weights to sum to one, and turns
 * them into 22-bit fixed point; a pass then sums pixel * weight in 32-bit
 * integers starting from one half (1 << 21) and shifts the sum right by 22
 * with a clamp to 0..255. This module reproduces those numbers exactly — the
 * same doubles for the window and the weights, the same integer sums — so
 * for the same source pixels the output bytes are Pillow's, bit for bit
 * (tests/python/test_image_ops_torchvision.py checks this on photos).
 *
 * One axis is described by stk_rs_params: the window centre of output index
 * xx is  in0 + (xx + off + 0.5) * scale  in source pixels, and windows are
 * clamped to [0, in_size) of the source axis. Pillow's `box=(x0, .., x1, ..)`
 * is in0 = x0, scale = (x1 - x0) / out, off = 0; a window of a larger
 * resize, as `resize 256 | center_crop 224` evaluates only the cropped
 * outputs of the full resize, is off = the crop offset.
 *
 * The tables for an axis (stk_rs_axis) live in caller-provided memory
 * (stk_rs_axis_bytes), because the image pipeline builds them per sample in
 * its per-thread scratch. Passes read their source through row pointers and
 * tolerate windows padded with zero weights up to `taps`: the source rows
 * must stay readable for STK_RS_SLACK(taps, nc) bytes past the last pixel a
 * window covers (what is read there is multiplied by zero).
 */
#ifndef STK_OPS_RESAMPLE_H
#define STK_OPS_RESAMPLE_H

#include <stddef.h>
#include <stdint.h>

#define STK_RS_PRECISION 22 /* Pillow's PRECISION_BITS for 8-bit images */

/* Pillow's filters: the triangle (support 1) of Image.BILINEAR, and the
 * cubic convolution with a = -0.5 (support 2) of Image.BICUBIC. Both are
 * stretched by the downscale factor (antialiasing); bicubic weights can be
 * negative, and the passes clamp each sum to 0..255 as Pillow's clip8.
 * STK_RS_NEAREST is Pillow's Image.NEAREST resize (ImagingScaleAffine):
 * output x takes source pixel (int)(in0 + (x + 0.5) * scale), as a window
 * of one tap of weight 1. */
enum { STK_RS_BILINEAR = 0, STK_RS_BICUBIC = 1, STK_RS_NEAREST = 2 };

/* Bytes that may be read past the last used source pixel of a row. */
#define STK_RS_SLACK(taps, nc) ((size_t)(taps) * (size_t)(nc) + 64)

typedef struct stk_rs_params {
    int32_t in_size; /* source pixels on this axis (the clamp range) */
    int32_t out;     /* output pixels, >= 1 */
    int32_t off;     /* output index offset */
    double in0;      /* box start */
    double scale;    /* source pixels per output pixel, > 0 */
    int filter;      /* STK_RS_BILINEAR, STK_RS_BICUBIC or STK_RS_NEAREST (Pillow's) */
} stk_rs_params;

typedef struct stk_rs_axis {
    int32_t out;
    int32_t ksize;   /* Pillow's window bound: ceil(max(scale,1)) * 2 + 1 */
    int32_t taps;    /* longest window actually used (<= ksize); coef stride */
    int32_t first;   /* source range used by all windows: [first, end) */
    int32_t end;
    int identity;    /* out[i] = in[first + i] exactly (scale 1, integral start) */
    int32_t *bounds; /* [out]: window start, relative to the `base` given to build */
    int32_t *coef;   /* [out * taps]: fixed-point weights, zero past each window */
    int32_t *lanes;  /* SIMD horizontal layout for `group` pixels at a time (see
                        resample.c), or NULL */
    int group;       /* 2 (AVX2) or 4 (AVX-512); 0 without `lanes` */
} stk_rs_axis;

/* Pillow's window length bound for `scale` and `filter`. */
int32_t stk_rs_ksize(double scale, int filter);

/* Source range [first, end) that the windows of `p` cover, without building
 * tables. Returns 0, or -1 when the parameters are out of range. */
int stk_rs_range(const stk_rs_params *p, int32_t *first, int32_t *end, int *identity);

/* Bytes of memory stk_rs_build needs for `p` (0 on overflow). */
size_t stk_rs_axis_bytes(const stk_rs_params *p, int group);

/* Build the tables of one axis into `mem` (stk_rs_axis_bytes(p, group)
 * bytes, 64-byte aligned). Window starts are stored relative to `base` (the
 * first source index present in the caller's buffer, <= first). With
 * `reverse` the outputs come in reverse order (a flip folded into the
 * resample). `group` 2 or 4: also build the SIMD layout of the horizontal
 * pass for 3-channel pixels (the kernels' `group`); 0: none. */
void stk_rs_build(const stk_rs_params *p, int32_t base, int reverse, int group, void *mem,
                  stk_rs_axis *ax);

/* Kernels chosen for the CPU (stk_kernel_select's ISA choice). */
typedef struct stk_rs_kernels {
    /* Horizontal pass over one row of nc-channel interleaved pixels: dst
     * gets ax->out pixels. nc is 1 or 3. dst needs 16 bytes of slack. */
    void (*hpass)(const stk_rs_axis *ax, const uint8_t *src, uint8_t *dst, int nc);
    /* Vertical pass for output row y: n values from rows src + (bounds[y] +
     * t) * stride, t < taps. `acc` is n int32 of scratch. */
    void (*vpass)(const stk_rs_axis *ax, int32_t y, const uint8_t *src, ptrdiff_t stride,
                  size_t n, uint8_t *dst, int32_t *acc);
    int group; /* hpass wants ax->lanes in groups of this many (0: none) */
    const char *name; /* "c", "avx2", "avx512" */
} stk_rs_kernels;

/* The kernels for the ISA stk_kernel_select would use now: AVX-512 (F+BW)
 * where the CPU has it and the kernel ISA is AVX2, unless the environment
 * variable STK_NO_AVX512 is set. */
const stk_rs_kernels *stk_rs_kernels_get(void);
/* Every variant, for tests: index 0 plain C, 1 AVX2, 2 AVX-512; NULL when
 * this build or CPU lacks it. All give identical bytes. */
const stk_rs_kernels *stk_rs_kernels_variant(int i);

/*
 * Whole-image convenience (tests, tools): resize `src` (h x w x nc uint8,
 * rows `stride` bytes apart, nc 1 or 3) to out_h x out_w as
 * Image.resize((out_w, out_h), BILINEAR, box=(x0, y0, x1, y1)); box may be
 * NULL for the whole image. As in Pillow, the box is held in floats and
 * scale = (double)(float)(x1 - x0) / out_w (the difference taken in float). Allocates; returns 0 or a negative STK_E* code.
 */
int stk_rs_resize_u8(const uint8_t *src, uint32_t h, uint32_t w, ptrdiff_t stride, int nc,
                     const double box[4], uint32_t out_h, uint32_t out_w, uint8_t *dst,
                     const stk_rs_kernels *k);
/* The same with Pillow's `filter` (STK_RS_BILINEAR or STK_RS_BICUBIC). */
int stk_rs_resize_u8_filter(const uint8_t *src, uint32_t h, uint32_t w, ptrdiff_t stride, int nc,
                            const double box[4], uint32_t out_h, uint32_t out_w, uint8_t *dst,
                            const stk_rs_kernels *k, int filter);

#endif
