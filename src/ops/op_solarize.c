/*
 * op_solarize.c — `solarize THRESHOLD [p=P]`: torchvision's
 * RandomSolarize(threshold, p) on uint8 pixels.
 *
 * With probability P (default 0.5: one stk_rng_uniform() per sample,
 * always drawn, applied when u < P, as torchvision's torch.rand(1) < p)
 * every channel value v >= THRESHOLD becomes 255 - v, which is
 * torchvision.transforms.functional.solarize on a uint8 tensor. THRESHOLD
 * is a number from 0 to 255 (torchvision refuses more than the uint8
 * bound); it may be fractional (v >= 127.5 is v >= 128).
 *
 * It is a uint8 point op (op.h), placed like posterize: before normalize
 * and the float stages (rotate, color_jitter).
 */
#include "ops/op.h"

static const stk_spec_param params[] = {
    {"threshold", 0, 0, 255, 1, 0},
    {"p", 0, 0, 1, 0, 0.5},
};

static int draw(const double *arg, stk_rng *rng) { return stk_rng_uniform(rng) < arg[1]; }

static void lut(const double *arg, uint8_t t[256])
{
    for (unsigned v = 0; v < 256; v++)
        t[v] = (double)v >= arg[0] ? (uint8_t)(255 - v) : (uint8_t)v;
}

const stk_op_desc stk_op_solarize = {
    .syntax = {"solarize", NULL, STK_OP_LUT, STK_ORD_PIXELS | STK_ORD_U8,
               "(it works on uint8 pixels)", NULL, params, 2, "THRESHOLD [p=P]"},
    .torchvision = "RandomSolarize",
    .draw = draw,
    .lut = lut,
};
