/*
 * op_posterize.c — `posterize BITS [p=P]`: torchvision's
 * RandomPosterize(bits, p) on uint8 pixels.
 *
 * With probability P (default 0.5: one stk_rng_uniform() per sample,
 * always drawn, applied when u < P, as torchvision's torch.rand(1) < p)
 * every channel value v keeps its top BITS bits: v & -(2^(8 - BITS)), which
 * is torchvision.transforms.functional.posterize on a uint8 tensor (and
 * PIL.ImageOps.posterize). BITS is a whole number from 0 to 8 (0 gives 0,
 * 8 changes nothing).
 *
 * It is a uint8 point op (op.h): the image plan applies it to the pixels as
 * they are at its position — the decoded source before a resize, the
 * resampled uint8 rows after it — so it must come before normalize and the
 * float stages (rotate, color_jitter), which the parser checks.
 */
#include "ops/op.h"

static const stk_spec_param params[] = {
    {"bits", 1, 0, 8, 1, 0},
    {"p", 0, 0, 1, 0, 0.5},
};

static int draw(const double *arg, stk_rng *rng) { return stk_rng_uniform(rng) < arg[1]; }

static void lut(const double *arg, uint8_t t[256])
{
    unsigned mask = (0xffu << (8 - (unsigned)arg[0])) & 0xffu;
    for (unsigned v = 0; v < 256; v++)
        t[v] = (uint8_t)(v & mask);
}

const stk_op_desc stk_op_posterize = {
    .syntax = {"posterize", NULL, STK_OP_LUT, STK_ORD_PIXELS | STK_ORD_U8,
               "(it works on uint8 pixels)", NULL, params, 2, "BITS [p=P]"},
    .torchvision = "RandomPosterize",
    .draw = draw,
    .lut = lut,
};
