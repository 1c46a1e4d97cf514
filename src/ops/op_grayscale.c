/*
 * op_grayscale.c — `grayscale [P]`: torchvision's RandomGrayscale(p) on the
 * float tensor.
 *
 * With probability P (default 0.1, torchvision's: one stk_rng_uniform() per
 * sample, always drawn, applied when u < P, as torch.rand(1) < p) every
 * pixel becomes its ITU-R 601-2 luma, as F.rgb_to_grayscale computes it on
 * a float tensor, replicated to the three channels
 * (num_output_channels = 3, as RandomGrayscale keeps the channel count):
 *
 *     l = (0.2989f * r + 0.587f * g) + 0.114f * b      (float32, no FMA)
 *
 * One channel: nothing to do (the image already is gray).
 *
 * It runs in the image pipeline's float tail (image_plan.c), one row at a
 * time like saturation, so it costs no pass of its own; like rotate and
 * color_jitter it makes the pixels float, so it comes before normalize and
 * after the uint8 point ops (order flags below).
 */
#include "ops/op.h"

static const stk_spec_param params[] = {
    {"p", 0, 0, 1, 0, 0.1},
};

const stk_op_desc stk_op_grayscale = {
    .syntax = {"grayscale", NULL, STK_OP_GRAYSCALE,
               STK_ORD_PIXELS | STK_ORD_FLOAT, "(it works on pixel values)", NULL, params, 1,
               "[P]"},
    .torchvision = "RandomGrayscale",
};
