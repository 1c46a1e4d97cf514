/*
 * op_invert.c — `invert [P]`: torchvision's RandomInvert(p) on uint8
 * pixels.
 *
 * With probability P (default 0.5: one stk_rng_uniform() per sample,
 * always drawn, applied when u < P, as torchvision's torch.rand(1) < p)
 * every channel value v becomes 255 - v, which is
 * torchvision.transforms.functional.invert on a uint8 tensor (and
 * PIL.ImageOps.invert).
 *
 * It is a uint8 point op (op.h), placed like posterize: before normalize
 * and the float stages (rotate, color_jitter).
 */
#include "ops/op.h"

static const stk_spec_param params[] = {
    {"p", 0, 0, 1, 0, 0.5},
};

static int draw(const double *arg, stk_rng *rng) { return stk_rng_uniform(rng) < arg[0]; }

static void lut(const double *arg, uint8_t t[256])
{
    (void)arg;
    for (unsigned v = 0; v < 256; v++)
        t[v] = (uint8_t)(255 - v);
}

const stk_op_desc stk_op_invert = {
    .syntax = {"invert", NULL, STK_OP_LUT, STK_ORD_PIXELS | STK_ORD_U8,
               "(it works on uint8 pixels)", NULL, params, 1, "[P]"},
    .torchvision = "RandomInvert",
    .draw = draw,
    .lut = lut,
};
