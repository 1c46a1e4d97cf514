/*
 * op_affine.c — `affine DEGREES [translate=TX,TY] [scale=LO:HI]
 * [shear=S | shear=X1:X2 | shear=X1,X2,Y1,Y2] [interpolation=nearest|bilinear]
 * [fill=V]`: torchvision's RandomAffine on the float image, as
 * F.affine(tensor, ...) computes it (the generalisation of `rotate`, which
 * is F.rotate).
 *
 * Per sample (one stk_rng_uniform() each, always drawn, in this order):
 * angle in DEGREES (D means -D:D), tx = round(u(-TX * width, TX * width)),
 * ty likewise with the height (round half to even, as Python's round),
 * scale in LO:HI, shear x in X1:X2 and shear y in Y1:Y2 — torchvision's
 * RandomAffine.get_params. The image is then resampled through
 * _get_inverse_affine_matrix(centre, angle, (tx, ty), scale, (sx, sy)) on
 * torchvision's centred grid (ops/color.h: stk_affine_init), nearest
 * (torchvision's default) or bilinear, the pixels from outside the image
 * taking `fill` (pixel values 0-255, one or one per channel; default 0).
 *
 * Like rotate it is a float stage: after the crops and resize, before
 * normalize; a flip after it is moved before it by conjugating the matrix.
 */
#include "ops/op.h"

#include <string.h>

static int parse_affine(stk_spec_parser *P, const stk_spec_stage *st, const stk_spec_opdef *def)
{
    static const char *const keys[] = {"degrees",       "translate", "scale", "shear",
                                       "interpolation", "fill",      NULL};
    int rc = 0, have_deg = 0;
    stk_spec_arg a = {0};
    stk_spec_op *op = stk_spec_new_op(P, def, st->name.a, &rc);
    if (!op)
        return rc;
    op->u.affine.scale[0] = op->u.affine.scale[1] = 1.0;
    op->u.affine.nearest = 1;
    op->u.affine.nfill = 1;
    op->u.affine.fill_col = op->col;
    while ((rc = stk_spec_next_arg(P, st, keys,
                                   "degrees, translate, scale, shear, interpolation, fill",
                                   &a)) > 0) {
        int va = a.va, vb = a.vb;
        double v[2];
        int n;
        if (a.key <= 0) { /* DEGREES, or degrees=DEGREES */
            if (have_deg++)
                return a.key == 0 ? stk_spec_twice(P, a.ka, a.kb) : stk_spec_unexpected(P, st, a.t);
            if ((rc = stk_spec_range(P, va, vb, v, &n, "after 'affine'")) < 0)
                return rc;
            if (n == 1) {
                if (v[0] < 0.0)
                    return stk_spec_err(P, va,
                                        "affine DEGREES must be >= 0 (the angle is drawn from "
                                        "-DEGREES:DEGREES), got '%.*s'",
                                        STK_SPEC_TOKARG(P, va, vb));
                v[1] = v[0];
                v[0] = -v[0];
            }
            if (v[0] < -36000.0 || v[1] > 36000.0)
                return stk_spec_err(P, va, "affine angles must be within -36000:36000 degrees");
            op->u.affine.deg[0] = v[0];
            op->u.affine.deg[1] = v[1];
            op->arg_col = va + 1;
        } else if (a.key == 1) { /* translate=TX,TY */
            stk_spec_numlist L;
            if ((rc = stk_spec_list(P, va, vb, &L, "in translate=")) < 0)
                return rc;
            if (L.n != 2)
                return stk_spec_err(P, va, "translate takes 2 values (TX,TY), got %d", L.n);
            for (int k = 0; k < 2; k++) {
                if (!(L.v[k] >= 0.0 && L.v[k] <= 1.0))
                    return stk_spec_err(P, L.a[k],
                                        "translate values must be between 0 and 1 (fractions "
                                        "of the width and height), got '%.*s'",
                                        STK_SPEC_TOKARG(P, L.a[k], L.b[k]));
                op->u.affine.tr[k] = L.v[k];
            }
        } else if (a.key == 2) { /* scale=LO:HI */
            if ((rc = stk_spec_range(P, va, vb, v, &n, "in scale=")) < 0)
                return rc;
            if (n != 2 || !(v[0] > 0.0) || v[1] > 1e6)
                return stk_spec_err(P, va, "scale takes a range LO:HI with 0 < LO <= HI, got "
                                           "'%.*s'",
                                    STK_SPEC_TOKARG(P, va, vb));
            op->u.affine.scale[0] = v[0];
            op->u.affine.scale[1] = v[1];
        } else if (a.key == 3) { /* shear= */
            stk_spec_numlist L;
            int colon = 0;
            for (int i = va; i < vb; i++)
                colon |= P->s[i] == ':';
            if (colon) {
                if ((rc = stk_spec_range(P, va, vb, L.v, &L.n, "in shear=")) < 0)
                    return rc;
            } else if ((rc = stk_spec_list(P, va, vb, &L, "in shear=")) < 0) {
                return rc;
            }
            if (L.n != 1 && L.n != 2 && L.n != 4)
                return stk_spec_err(P, va, "shear takes 1, 2 or 4 values (S, X1:X2 or "
                                           "X1,X2,Y1,Y2), got %d",
                                    L.n);
            double *s = op->u.affine.shear;
            if (L.n == 1) {
                if (L.v[0] < 0.0)
                    return stk_spec_err(P, va, "shear S must be >= 0 (drawn from -S:S), got "
                                               "'%.*s'",
                                        STK_SPEC_TOKARG(P, va, vb));
                s[0] = -L.v[0];
                s[1] = L.v[0];
            } else {
                for (int k = 0; k < L.n; k++)
                    s[k] = L.v[k];
            }
            for (int k = 0; k < 4; k += 2)
                if (s[k] > s[k + 1] || s[k] < -89.0 || s[k + 1] > 89.0)
                    return stk_spec_err(P, va, "shear ranges must be low:high within -89:89 "
                                               "degrees, got '%.*s'",
                                        STK_SPEC_TOKARG(P, va, vb));
        } else if (a.key == 4) { /* interpolation= */
            if (stk_spec_tok_is(P, va, vb, "nearest"))
                op->u.affine.nearest = 1;
            else if (stk_spec_tok_is(P, va, vb, "bilinear"))
                op->u.affine.nearest = 0;
            else
                return stk_spec_err(P, va, "affine interpolation must be nearest or bilinear, "
                                           "got '%.*s'",
                                    STK_SPEC_TOKARG(P, va, vb));
        } else { /* fill= */
            uint32_t f[STK_SPEC_MAX_LIST];
            if ((rc = stk_spec_ints(P, va, vb, 0, 0, 255, f, &n, "in fill=",
                                    "fill takes 1 value or 1 per channel")) < 0)
                return rc;
            op->u.affine.nfill = (uint32_t)n;
            for (int k = 0; k < n; k++)
                op->u.affine.fill[k] = (uint8_t)f[k];
            op->u.affine.fill_col = va + 1;
        }
    }
    if (rc < 0)
        return rc;
    if (!have_deg)
        return stk_spec_err(P, st->after_name,
                            "expected DEGREES after 'affine' (D for -D:D, or A:B; 0 for none)");
    return 0;
}

const stk_op_desc stk_op_affine = {
    .syntax = {"affine", NULL, STK_OP_AFFINE, STK_ORD_PIXELS | STK_ORD_FLOAT,
               "(it works on pixel values)", parse_affine, NULL, 0,
               "DEGREES [translate=TX,TY] [scale=LO:HI] [shear=S|X1:X2|X1,X2,Y1,Y2] "
               "[interpolation=nearest|bilinear] [fill=V]"},
    .torchvision = "RandomAffine",
};
