/*
 * op_random_erasing.c — `random_erasing [P] [scale=LO:HI] [ratio=LO:HI]
 * [value=V]`: torchvision's RandomErasing(p=0.5, scale=(0.02, 0.33),
 * ratio=(0.3, 3.3), value=0) on the finished tensor (after Normalize, where
 * torchvision recipes put it).
 *
 * Per sample (docs/pipeline.md, "Random numbers"), as RandomErasing.forward
 * and get_params, on the H x W output:
 *
 *   u = uniform(); erase only when u < P
 *   up to 10 attempts:
 *       s  = float32(scale.lo + (scale.hi - scale.lo) * uniform())
 *       lr = float32(logf(ratio.lo) + (logf(ratio.hi) - logf(ratio.lo)) * uniform())
 *       a  = expf(lr);  area = H * W * s
 *       h  = round(sqrt(area * a)),  w = round(sqrt(area / a))  (halves to even)
 *       if h < H and w < W:
 *           top = randint(0, H - h), left = randint(0, W - w); erase; stop
 *   (no attempt fits: nothing is erased, as torchvision returns the image)
 *
 * The erased rectangle takes `value` (one number, or one per channel) in
 * the units of the tensor at that point — normalized units after
 * normalize — written in the output dtype (rounded to half / bfloat16 as
 * every output value; for u8 output, rounded to nearest and clamped to
 * 0-255). `value=random` (torchvision's value='random') fills it with
 * standard normal noise, drawn per element in C, H, W order from the
 * sample's stream after every other draw (Box-Muller on stk_rng_uniform
 * pairs: the same distribution as torch's normal_(), not its numbers). It
 * must be the last op before `to` (several
 * random_erasing stages may follow one another, as timm's count), since it
 * works on the output.
 */
#include "ops/op.h"

#include <math.h>
#include <string.h>

static int range_arg(stk_spec_parser *P, int va, int vb, double v[2], const char *what)
{
    int n, rc;
    if ((rc = stk_spec_range(P, va, vb, v, &n, what[0] == 's' ? "in scale=" : "in ratio=")) < 0)
        return rc;
    if (n != 2)
        return stk_spec_err(P, va, "%s= takes a range low:high, e.g. %s, got '%.*s'", what,
                            what[0] == 's' ? "0.02:0.33" : "0.3:3.3", STK_SPEC_TOKARG(P, va, vb));
    if (what[0] == 's' ? !(v[0] >= 0.0 && v[1] <= 1.0) : !(v[0] > 0.0 && v[1] < 1e6))
        return stk_spec_err(P, va, "random_erasing %s= must lie within %s, got '%.*s'", what,
                            what[0] == 's' ? "0:1" : "(0, 1e6)", STK_SPEC_TOKARG(P, va, vb));
    return 0;
}

static int parse(stk_spec_parser *P, const stk_spec_stage *st, const stk_spec_opdef *def)
{
    static const char *const keys[] = {"p", "scale", "ratio", "value", NULL};
    int rc = 0, npos = 0;
    unsigned have = 0;
    stk_spec_arg a = {0};
    stk_spec_op *op = stk_spec_new_op(P, def, st->name.a, &rc);
    if (!op)
        return rc;
    op->u.erase.p = 0.5;
    op->u.erase.scale[0] = 0.02;
    op->u.erase.scale[1] = 0.33;
    op->u.erase.ratio[0] = 0.3;
    op->u.erase.ratio[1] = 3.3;
    op->u.erase.nvalue = 1;
    op->u.erase.value[0] = 0.0;
    op->u.erase.value_col = op->col;
    while ((rc = stk_spec_next_arg(P, st, keys, "p, scale, ratio, value", &a)) > 0) {
        int which = a.key, va = a.va, vb = a.vb;
        if (which < 0) {
            if (npos++ == 1)
                return stk_spec_unexpected(P, st, a.t);
            which = 0;
            if (have & 1u)
                return stk_spec_err(P, a.t->a, "'p' is given twice");
        } else if (have & (1u << which)) {
            return stk_spec_twice(P, a.ka, a.kb);
        }
        have |= 1u << which;
        if (which == 0) {
            double p;
            if ((rc = stk_spec_number(P, va, vb, &p, "after 'random_erasing'")) < 0)
                return rc;
            if (!(p >= 0.0 && p <= 1.0))
                return stk_spec_err(P, va, "random_erasing p must be from 0 to 1, got '%.*s'",
                                    STK_SPEC_TOKARG(P, va, vb));
            op->u.erase.p = p;
            op->arg_col = va + 1;
        } else if (which == 1 || which == 2) {
            if ((rc = range_arg(P, va, vb, which == 1 ? op->u.erase.scale : op->u.erase.ratio,
                                which == 1 ? "scale" : "ratio")) < 0)
                return rc;
        } else {
            if (stk_spec_tok_is(P, va, vb, "random")) {
                op->u.erase.random = 1;
                op->u.erase.nvalue = 1;
                op->u.erase.value_col = va + 1;
                continue;
            }
            op->u.erase.random = 0;
            stk_spec_numlist L;
            if ((rc = stk_spec_list(P, va, vb, &L, "in value=")) < 0)
                return rc;
            for (int k = 0; k < L.n; k++)
                if (!(fabs(L.v[k]) < 1e30))
                    return stk_spec_err(P, L.a[k], "random_erasing values must be finite and "
                                                   "below 1e30 in magnitude");
            op->u.erase.nvalue = (uint32_t)L.n;
            memcpy(op->u.erase.value, L.v, sizeof(double) * (size_t)L.n);
            op->u.erase.value_col = va + 1;
        }
    }
    return rc;
}

const stk_op_desc stk_op_random_erasing = {
    .syntax = {"random_erasing", NULL, STK_OP_RANDOM_ERASING, 0, NULL, parse, NULL, 0,
               "[P] [scale=LO:HI] [ratio=LO:HI] [value=V]"},
    .torchvision = "RandomErasing",
};
