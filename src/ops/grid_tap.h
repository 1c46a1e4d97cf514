/*
 * grid_tap.h — one bilinear tap of torch's grid_sample (align_corners=False,
 * zero padding, with the constant-one mask channel torchvision samples to
 * blend the fill), shared by the float ops that resample through a grid:
 * rotate (color_impl.h's rotate_row) and perspective (op_perspective.c).
 *
 * Given the normalised grid point (gx, gy) of an output pixel and the input
 * size, stk_grid_tap finds the four neighbours and their weights, a weight
 * zeroed where its neighbour lies outside the image; stk_grid_blend reads
 * one channel plane through them. The output is v * mask + (1 - mask) *
 * fill, with mask the sum of the kept weights. The order of every float
 * operation is the one the ops had when each wrote it out (bit for bit:
 * the tests compare them with torchvision); indices are formed only where
 * a weight is kept, so a far-off point is never converted to int.
 *
 * Header-only, always inlined: the callers are compiled once per CPU
 * target (color_impl.h), and the tap must be compiled with them.
 */
#ifndef STK_OPS_GRID_TAP_H
#define STK_OPS_GRID_TAP_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

typedef struct stk_grid_tap {
    int32_t x0, y0;           /* the north-west neighbour (0 when no weight uses it) */
    float mnw, mne, msw, mse; /* the kept weights */
    float mask;               /* their sum: 1 inside, falling to 0 across the border */
} stk_grid_tap;

__attribute__((always_inline)) static inline stk_grid_tap stk_grid_tap_at(float gx, float gy,
                                                                       float fw, float fh)
{
    stk_grid_tap t;
    float ix = ((gx + 1.0f) * fw - 1.0f) / 2.0f;
    float iy = ((gy + 1.0f) * fh - 1.0f) / 2.0f;
    float x0f = floorf(ix), y0f = floorf(iy);
    float we = ix - x0f, wn = iy - y0f; /* distances past the west / north taps */
    float ee = 1.0f - we, ss = 1.0f - wn;
    float wnw = ss * ee, wne = ss * we, wsw = wn * ee, wse = wn * we;
    int in_x0 = x0f >= 0.0f && x0f < fw, in_x1 = x0f + 1.0f >= 0.0f && x0f + 1.0f < fw;
    int in_y0 = y0f >= 0.0f && y0f < fh, in_y1 = y0f + 1.0f >= 0.0f && y0f + 1.0f < fh;
    t.mnw = in_x0 && in_y0 ? wnw : 0.0f;
    t.mne = in_x1 && in_y0 ? wne : 0.0f;
    t.msw = in_x0 && in_y1 ? wsw : 0.0f;
    t.mse = in_x1 && in_y1 ? wse : 0.0f;
    t.mask = ((t.mnw + t.mne) + t.msw) + t.mse;
    t.x0 = in_x0 || in_x1 ? (int32_t)x0f : 0;
    t.y0 = in_y0 || in_y1 ? (int32_t)y0f : 0;
    return t;
}

/* One channel plane `s` (w pixels a row) read through tap `t`. */
__attribute__((always_inline)) static inline float stk_grid_blend(const float *s, size_t w,
                                                               const stk_grid_tap *t)
{
    size_t n = (size_t)t->y0 * w + (size_t)t->x0, s_ = n + w; /* north-west, south-west */
    float vnw = t->mnw != 0.0f ? s[n] : 0.0f;
    float vne = t->mne != 0.0f ? s[n + 1] : 0.0f;
    float vsw = t->msw != 0.0f ? s[s_] : 0.0f;
    float vse = t->mse != 0.0f ? s[s_ + 1] : 0.0f;
    return ((vnw * t->mnw + vne * t->mne) + vsw * t->msw) + vse * t->mse;
}

#endif /* STK_OPS_GRID_TAP_H */
