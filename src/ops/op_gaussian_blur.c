/*
 * op_gaussian_blur.c — `gaussian_blur K | gaussian_blur KX,KY [sigma=LO:HI]`:
 * torchvision's GaussianBlur(kernel_size, sigma=(0.1, 2.0)) on the float
 * tensor.
 *
 * Per sample, sigma = float32(LO + (HI - LO) * u) with one stk_rng_uniform()
 * (torchvision: torch.empty(1).uniform_(LO, HI), a float32); `sigma=S` is
 * the range S:S. The kernel sizes are odd, KX along the width and KY along
 * the height, in torchvision's order (kernel_size=(kx, ky)); one value is
 * both. The kernel is torchvision's _get_gaussian_kernel1d in float32:
 *
 *     x_i = i - (K - 1) / 2,  pdf_i = expf(-0.5f * (x_i / sigma)^2),
 *     k_i = pdf_i / sum(pdf)
 *
 * and the image is reflect-padded by K / 2 (F.gaussian_blur: torch's
 * "reflect", the edge pixel not repeated) and convolved with the outer
 * product k_y k_x^T. stoker runs it separably (a vertical then a horizontal
 * pass per output row), which sums in another order than torch's conv2d: a
 * few float ulps (docs/pipeline.md, "Accuracy"). The blur reads
 * neighbouring rows, so it is a whole-image op of the float tail (op.h's
 * STK_OP_FLOAT hooks below): it starts a pass over the parked float image,
 * like rotate. K / 2 must be smaller than the image side (torch's reflect
 * pad refuses otherwise), checked by the compile hook.
 */
#include "ops/op.h"
#include "ops/plan_io.h"

#include <stdio.h>

#define MAX_KERNEL 255 /* a 255-tap kernel is already sigma ~ 40 */

static int parse(stk_spec_parser *P, const stk_spec_stage *st, const stk_spec_opdef *def)
{
    static const char *const keys[] = {"kernel_size", "sigma", NULL};
    int rc = 0, npos = 0, have[2] = {0, 0};
    stk_spec_arg a = {0};
    stk_spec_op *op = stk_spec_new_op(P, def, st->name.a, &rc);
    if (!op)
        return rc;
    op->u.blur.sigma[0] = 0.1;
    op->u.blur.sigma[1] = 2.0;
    while ((rc = stk_spec_next_arg(P, st, keys, "kernel_size, sigma", &a)) > 0) {
        int which = a.key, va = a.va, vb = a.vb;
        if (which < 0) { /* positional: K, then sigma */
            if (npos == 2)
                return stk_spec_unexpected(P, st, a.t);
            which = npos++;
            if (have[which])
                return stk_spec_err(P, a.t->a, "'%s' is given twice", keys[which]);
        } else if (have[which]) {
            return stk_spec_twice(P, a.ka, a.kb);
        }
        have[which] = 1;
        if (which == 0) {
            uint32_t v[2];
            int n;
            if ((rc = stk_spec_ints(P, va, vb, (1u << 1) | (1u << 2), 1, MAX_KERNEL, v, &n,
                                    "for the gaussian_blur kernel size",
                                    "a kernel size is K or KX,KY")) < 0)
                return rc;
            if (!(v[0] & 1) || (n == 2 && !(v[1] & 1)))
                return stk_spec_err(P, va, "gaussian_blur kernel sizes must be odd, got '%.*s'",
                                    STK_SPEC_TOKARG(P, va, vb));
            op->u.blur.kx = v[0];
            op->u.blur.ky = n == 2 ? v[1] : v[0];
            op->arg_col = va + 1;
        } else {
            double v[2];
            int n;
            if ((rc = stk_spec_range(P, va, vb, v, &n, "for sigma")) < 0)
                return rc;
            if (n == 1)
                v[1] = v[0];
            /* > 0 as the float32 it is drawn in: a sigma that rounds to 0
             * would make the kernel 0/0 */
            if (!((float)v[0] > 0.0f) || v[1] > 1e6)
                return stk_spec_err(P, va, "sigma must be > 0 as a float32 (and at most 1e6), "
                                           "got '%.*s'",
                                    STK_SPEC_TOKARG(P, va, vb));
            op->u.blur.sigma[0] = v[0];
            op->u.blur.sigma[1] = v[1];
        }
    }
    if (rc < 0)
        return rc;
    if (!have[0])
        return stk_spec_err(P, st->after_name,
                            "expected a kernel size after 'gaussian_blur' (K or KX,KY, odd)");
    return 0;
}

/* state: KX, KY, sigma LO, HI. */
static int compile(const char *text, const stk_spec_op *o, uint32_t h, uint32_t w, int nc,
                   double *state)
{
    (void)nc;
    if ((int64_t)(o->u.blur.kx / 2) >= (int64_t)w || (int64_t)(o->u.blur.ky / 2) >= (int64_t)h)
        return stk_spec_fail(text, o->arg_col,
                             "gaussian_blur kernel %ux%u (KX,KY) needs an image larger than "
                             "half of it (reflect padding); the image here is %lldx%lld "
                             "(HxW)",
                             o->u.blur.kx, o->u.blur.ky, (long long)h, (long long)w);
    state[0] = o->u.blur.kx;
    state[1] = o->u.blur.ky;
    state[2] = o->u.blur.sigma[0];
    state[3] = o->u.blur.sigma[1];
    return 0;
}

/* One uniform, always: sigma = float32(LO + (HI - LO) * u). */
static int draw(const double *state, stk_rng *rng, double *param, stk_plan_trace *tr)
{
    double u = stk_rng_uniform(rng);
    float sigma = (float)(state[2] + (state[3] - state[2]) * u);
    param[0] = (double)sigma;
    if (tr && tr->nblur++ == 0)
        tr->sigma = (double)sigma;
    return 1;
}

_Static_assert(sizeof(stk_blur) <= sizeof(stk_fop_ctx), "the blur's set-up fits the context");

static void begin(const double *state, const double *param, int32_t w, int32_t h, int nc,
                  float *tmp, stk_fop_ctx *ctx)
{
    (void)nc;
    stk_blur_init((stk_blur *)(void *)ctx, (float)param[0], (int)state[0], (int)state[1], w, h,
                  tmp);
}

static void image_row(const stk_fop_ctx *ctx, const stk_color_kernels *ck, const float *src,
                      int nc, int32_t y, float *const *p)
{
    ck->blur_row((const stk_blur *)(const void *)ctx, src, nc, y, p);
}

static const stk_float_hooks hooks = {
    .whole_image = 1,
    .compile = compile,
    .draw = draw,
    .begin = begin,
    .image_row = image_row,
};

const stk_op_desc stk_op_gaussian_blur = {
    .syntax = {"gaussian_blur", NULL, STK_OP_FLOAT, STK_ORD_PIXELS | STK_ORD_FLOAT,
               "(it works on pixel values)", parse, NULL, 0, "K | KX,KY [sigma=LO:HI]"},
    .torchvision = "GaussianBlur",
    .fl = &hooks,
};
