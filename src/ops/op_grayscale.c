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
 * It runs in the image pipeline's float tail through its row hook (op.h,
 * STK_OP_FLOAT), one row at a time like saturation, so it costs no pass of
 * its own; like rotate and color_jitter it makes the pixels float, so it
 * comes before normalize and after the uint8 point ops (order flags
 * below). The GPU's colour kernels run it too ("gray", src/gpu/stage.c).
 */
#include "ops/op.h"
#include "ops/plan_io.h"

static const stk_spec_param params[] = {
    {"p", 0, 0, 1, 0, 0.1},
};

/* state[0] = P (the schema's value, copied by the compiler). */
static int draw(const double *state, stk_rng *rng, double *param, stk_plan_trace *tr)
{
    (void)param;
    if (!(stk_rng_uniform(rng) < state[0]))
        return 0;
    if (tr)
        tr->ngray++;
    return 1;
}

static void row(const double *state, const double *param, const stk_color_kernels *ck,
                float *const *p, int32_t w, int nc)
{
    (void)state;
    (void)param;
    ck->grayscale(p, w, nc);
}

static const stk_float_hooks hooks = {
    .gpu_kernel = "gray",
    .draw = draw,
    .row = row,
};

const stk_op_desc stk_op_grayscale = {
    .syntax = {"grayscale", NULL, STK_OP_FLOAT,
               STK_ORD_PIXELS | STK_ORD_FLOAT, "(it works on pixel values)", NULL, params, 1,
               "[P]"},
    .torchvision = "RandomGrayscale",
    .fl = &hooks,
};
