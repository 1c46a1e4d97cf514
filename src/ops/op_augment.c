/*
 * op_augment.c — the augmentation-policy ops, torchvision's AutoAugment,
 * RandAugment and TrivialAugmentWide (three rows of the op table, one file:
 * they share the primitives and the compile path; ops/augment.c does the
 * work):
 *
 *   auto_augment [imagenet|cifar10|svhn] [fill=V]
 *   rand_augment [NUM_OPS] [MAGNITUDE] [NUM_MAGNITUDE_BINS] [fill=V]
 *   trivial_augment_wide [NUM_MAGNITUDE_BINS] [fill=V]
 *
 * with torchvision's defaults (rand_augment 2 9 31, trivial_augment_wide
 * 31) and its default nearest interpolation; fill (default 0, as
 * torchvision's fill=None) is one pixel value 0-255 for every channel, the
 * value of the pixels that the geometric primitives bring in from outside
 * the image. AutoAugment has torchvision's three policies.
 *
 * They are uint8 whole-image ops: the image plan runs them on the resampled
 * uint8 image after the crops, resize and flips, before the float stages
 * (rotate, color_jitter), normalize and to. The parser keeps them before
 * the float stages and normalize; the image plan refuses one before a crop
 * or resize, and a flip or point op after one.
 */
#include "ops/augment.h"
#include "ops/op.h"

#include <math.h>

static const stk_spec_param rand_params[] = {
    {"num_ops", 1, 0, STK_AUG_MAX_OPS, 0, 2},
    {"magnitude", 1, 0, 1023, 0, 9},
    {"num_magnitude_bins", 1, 2, 1024, 0, 31},
    {"fill", 1, 0, 255, 0, 0},
};

static const stk_spec_param trivial_params[] = {
    {"num_magnitude_bins", 1, 2, 1024, 0, 31},
    {"fill", 1, 0, 255, 0, 0},
};

/* auto_augment [POLICY | policy=POLICY] [fill=V]: u.num.v[0] = fill, v[1] =
 * the policy (0 imagenet, the default; 1 cifar10; 2 svhn). */
static int parse_auto(stk_spec_parser *P, const stk_spec_stage *st, const stk_spec_opdef *def)
{
    static const char *const keys[] = {"policy", "fill", NULL};
    int rc = 0, have_policy = 0;
    stk_spec_arg a = {0};
    stk_spec_op *op = stk_spec_new_op(P, def, st->name.a, &rc);
    if (!op)
        return rc;
    op->u.num.v[0] = 0.0;
    while ((rc = stk_spec_next_arg(P, st, keys, "policy, fill", &a)) > 0) {
        if (a.key <= 0) {
            if (have_policy++)
                return a.key == 0 ? stk_spec_twice(P, a.ka, a.kb) : stk_spec_unexpected(P, st, a.t);
            if (stk_spec_tok_is(P, a.va, a.vb, "imagenet"))
                op->u.num.v[1] = 0.0;
            else if (stk_spec_tok_is(P, a.va, a.vb, "cifar10"))
                op->u.num.v[1] = 1.0;
            else if (stk_spec_tok_is(P, a.va, a.vb, "svhn"))
                op->u.num.v[1] = 2.0;
            else
                return stk_spec_err(P, a.va,
                                    "auto_augment policy must be imagenet, cifar10 or svhn, got "
                                    "'%.*s'",
                                    STK_SPEC_TOKARG(P, a.va, a.vb));
        } else {
            double v;
            if ((rc = stk_spec_number(P, a.va, a.vb, &v, "for fill after 'auto_augment'")) < 0)
                return rc;
            if (!(v >= 0.0 && v <= 255.0) || v != floor(v)) /* range first: no cast of 1e300 */
                return stk_spec_err(P, a.va,
                                    "auto_augment fill must be a whole number from 0 to 255, "
                                    "got '%.*s'",
                                    STK_SPEC_TOKARG(P, a.va, a.vb));
            op->u.num.v[0] = v;
        }
    }
    return rc < 0 ? rc : 0;
}

#define ORDER STK_ORD_PIXELS | STK_ORD_U8
#define WHY "(it works on uint8 pixels)"

const stk_op_desc stk_op_auto_augment = {
    .syntax = {"auto_augment", NULL, STK_OP_POLICY, ORDER, WHY, parse_auto, NULL, 0,
               "[imagenet|cifar10|svhn] [fill=V]"},
    .torchvision = "AutoAugment",
    .aug_policy = STK_AUG_POLICY_AUTO,
};

const stk_op_desc stk_op_rand_augment = {
    .syntax = {"rand_augment", NULL, STK_OP_POLICY, ORDER, WHY, NULL, rand_params, 4,
               "[NUM_OPS] [MAGNITUDE] [NUM_MAGNITUDE_BINS] [fill=V]"},
    .torchvision = "RandAugment",
    .aug_policy = STK_AUG_POLICY_RAND,
};

const stk_op_desc stk_op_trivial_augment_wide = {
    .syntax = {"trivial_augment_wide", NULL, STK_OP_POLICY, ORDER, WHY, NULL,
               trivial_params, 2, "[NUM_MAGNITUDE_BINS] [fill=V]"},
    .torchvision = "TrivialAugmentWide",
    .aug_policy = STK_AUG_POLICY_TRIVIAL,
};
