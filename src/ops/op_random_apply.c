/*
 * op_random_apply.c — `random_apply [P] [n=N]`: torchvision's
 * RandomApply(transforms, p) over the next N stages (default 1).
 *
 * Per sample one stk_rng_uniform() u, always drawn; when u < P the N ops
 * that follow run (and make their own draws), otherwise they are skipped
 * and draw nothing — as torchvision, whose skipped transforms draw nothing
 * either. So `random_apply 0.8 | color_jitter 0.4 0.4 0.4 0.1` is
 * `RandomApply([ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8)`.
 *
 * The group may hold the ops of the image pipeline's tail: flips after the
 * resize, rotate, color_jitter, grayscale, gaussian_blur and uint8 point ops
 * after the resize (image_plan.c checks, naming the op that is not
 * allowed); not crops, resizes, pads, normalize, random_erasing or another
 * random_apply.
 */
#include "ops/op.h"

static int parse(stk_spec_parser *P, const stk_spec_stage *st, const stk_spec_opdef *def)
{
    static const char *const keys[] = {"p", "n", NULL};
    int rc = 0, npos = 0, have[2] = {0, 0};
    stk_spec_arg a = {0};
    stk_spec_op *op = stk_spec_new_op(P, def, st->name.a, &rc);
    if (!op)
        return rc;
    op->u.apply.p = 0.5;
    op->u.apply.n = 1;
    while ((rc = stk_spec_next_arg(P, st, keys, "p, n", &a)) > 0) {
        int which = a.key, va = a.va, vb = a.vb;
        if (which < 0) {
            if (npos++ == 1)
                return stk_spec_unexpected(P, st, a.t);
            which = 0;
            if (have[0])
                return stk_spec_err(P, a.t->a, "'p' is given twice");
        } else if (have[which]) {
            return stk_spec_twice(P, a.ka, a.kb);
        }
        have[which] = 1;
        double v;
        if ((rc = stk_spec_number(P, va, vb, &v, which ? "for n" : "after 'random_apply'")) < 0)
            return rc;
        if (which == 0) {
            if (!(v >= 0.0 && v <= 1.0))
                return stk_spec_err(P, va, "random_apply p must be from 0 to 1, got '%.*s'",
                                    STK_SPEC_TOKARG(P, va, vb));
            op->u.apply.p = v;
            op->arg_col = va + 1;
        } else {
            if (!(v >= 1.0 && v <= 16.0) || v != (double)(int)v)
                return stk_spec_err(P, va,
                                    "random_apply n must be a whole number from 1 to 16, got "
                                    "'%.*s'",
                                    STK_SPEC_TOKARG(P, va, vb));
            op->u.apply.n = (uint32_t)v;
        }
    }
    return rc;
}

const stk_op_desc stk_op_random_apply = {
    .syntax = {"random_apply", NULL, STK_OP_RANDOM_APPLY, 0, NULL, parse, NULL, 0, "[P] [n=N]"},
    .torchvision = "RandomApply",
};
