/*
 * color.h — the per-row float stages of the image pipeline (internal):
 * ToTensor, torchvision's colour adjustments on float tensors, rotation,
 * Normalize and the dtype/layout of the output row.
 *
 * Images here are planar float rows, values in [0, 1] as after ToTensor:
 * p[c][i] is channel c of pixel i, nc = 1 or 3. Every function mirrors the
 * float32 arithmetic of torchvision 0.14's functional_tensor.py operation by
 * operation (same operands, same order, no fused multiply-add), so for the
 * same input and factor the results agree with torchvision to the last bit
 * or within a few ulps (tests/python/test_image_ops_torchvision.py):
 *
 *   brightness f   x = clamp(f * x, 0, 1)                      (_blend with 0)
 *   contrast f     x = clamp(f * x + (1 - f) * m, 0, 1), m the mean over
 *                  the image of gray = 0.2989 r + 0.587 g + 0.114 b
 *   saturation f   x = clamp(f * x + (1 - f) * gray, 0, 1)
 *   hue f          RGB -> HSV (Pillow's formulas as torchvision writes
 *                  them), h = (h + f) mod 1, HSV -> RGB
 *
 * (1 - f) is computed in double and rounded to float, as torch does with a
 * Python scalar; the contrast mean is summed in double (torch sums float32
 * with a cascade, the two differ by a few ulps at most). With one channel,
 * saturation and hue do nothing and contrast uses the channel's own mean,
 * as in torchvision.
 *
 * The functions come in a plain C and an AVX2 build of the same source
 * (color_impl.h); stk_color_kernels_get picks with the kernel ISA.
 */
#ifndef STK_OPS_COLOR_H
#define STK_OPS_COLOR_H

#include "stoker/stoker.h"

#include <stddef.h>
#include <stdint.h>

/* How a finished row is written into the sample. */
typedef struct stk_outfmt {
    stk_dtype dtype;
    stk_layout layout;
    int nc;
    int32_t width, height;
    /* uint8 pixels v -> v * scale[c] + bias[c] (scale = 1/(255 std),
     * bias = -mean/std; 1/255 and 0 without normalize), as the fixed-shape
     * kernel computes them. */
    float scale[3], bias[3];
    /* float values x in [0, 1] -> x * fscale[c] + fbias[c] (fscale = 1/std,
     * fbias = -mean/std; 1 and 0 without normalize). */
    float fscale[3], fbias[3];
} stk_outfmt;

/* A rotation about the image centre, as torchvision's F.rotate(tensor,
 * angle, BILINEAR, expand=False, fill) computes it. */
typedef struct stk_rotation {
    int32_t w, h;
    float m[4];     /* rescaled theta: gx = x*m[0] + y*m[1], gy = x*m[2] + y*m[3] */
    float t[2];     /* translation (affine): gx += t[0], gy += t[1]; 0 for a rotation */
    int nearest;    /* nearest instead of bilinear sampling (affine) */
    float fill[3];  /* in [0, 1] */
} stk_rotation;

/* A Gaussian blur of a w x h image, as torchvision's F.gaussian_blur on a
 * float tensor: 1-D kernels of kx (along the width) and ky taps, reflect
 * padding; run separably, vertical then horizontal, through `tmp` (w
 * floats, owned by the caller). */
#define STK_BLUR_MAX 255
typedef struct stk_blur {
    int32_t w, h;
    int kx, ky;
    float wx[STK_BLUR_MAX], wy[STK_BLUR_MAX];
    float *tmp;
} stk_blur;

typedef struct stk_color_kernels {
    /* ToTensor: p[c][i] = row[i*nc + c] / 255 (float division). */
    void (*u8_to_float)(const uint8_t *row, int32_t n, int nc, float *const *p);
    /* Output row y from uint8 pixels (no float stage): the fixed-shape
     * kernel's values. */
    void (*u8_to_out)(const stk_outfmt *o, const uint8_t *row, int32_t y, void *out);
    /* Output row y from float rows: Normalize, dtype (u8: round(x * 255)
     * to nearest, clamped), layout. */
    void (*float_to_out)(const stk_outfmt *o, float *const *p, int32_t y, void *out);
    void (*brightness)(float *const *p, int32_t n, int nc, float f);
    /* b = (float)(1 - factor) * mean, computed once per image */
    void (*contrast)(float *const *p, int32_t n, int nc, float f, float b);
    void (*saturation)(float *const *p, int32_t n, int nc, float f, float g);
    void (*hue)(float *const *p, int32_t n, int nc, float f);
    /* Sum over the row of the grayscale value (nc 3) or the value (nc 1). */
    double (*gray_sum)(float *const *p, int32_t n, int nc);
    /* Output row y of a rotation of the planar image `src` (nc planes of
     * h x w floats, plane c at src + c*h*w). */
    void (*rotate_row)(const stk_rotation *r, const float *src, int nc, int32_t y,
                       float *const *p);
    /* After the last row of a sample: orders streaming stores (x86 SFENCE). */
    void (*fence)(void);
    /* RandomGrayscale: every channel becomes 0.2989 r + 0.587 g + 0.114 b
     * (nc 3; nothing for nc 1). */
    void (*grayscale)(float *const *p, int32_t n, int nc);
    /* Output row y of the Gaussian blur of the planar image `src`. */
    void (*blur_row)(const stk_blur *b, const float *src, int nc, int32_t y, float *const *p);
} stk_color_kernels;

/* torchvision's kernels for sigma (float32, as _get_gaussian_kernel1d). */
void stk_blur_init(stk_blur *b, float sigma, int kx, int ky, int32_t w, int32_t h, float *tmp);

const stk_color_kernels *stk_color_kernels_get(void);
const stk_color_kernels *stk_color_kernels_c(void);

/* The rotation by `degrees` (counter-clockwise, as torchvision) of a w x h
 * image with fill values fill[0..nc-1] in [0, 1]. */
void stk_rotation_init(stk_rotation *r, double degrees, int32_t w, int32_t h,
                       const float *fill, int nc);

/* The affine map of torchvision's F.affine(tensor) with the inverse matrix
 * m (_get_inverse_affine_matrix's six values, in double), nearest or
 * bilinear. */
void stk_affine_init(stk_rotation *r, const double m[6], int32_t w, int32_t h, const float *fill,
                     int nc, int nearest);

#endif
