/*
 * op_bbox_crop.c — `random_bbox_crop [thresholds=T,...] [scale=LO:HI]
 * [ratio=LO:HI] [trials=N]`: the detection crop of SSD, as
 * torchvision.transforms.v2.RandomIoUCrop draws it (DALI calls it
 * RandomBBoxCrop), on the sample's boxes.
 *
 * Per sample, from the sample's Philox stream: draw one of the minimum-IoU
 * options (stk_rng_below over the list); an option >= 1 means "keep the
 * whole image". Otherwise try `trials` crops: width and height are
 * int(W * u) and int(H * u') for u, u' uniform in scale (each side on its
 * own, as torchvision), refused when w / h is outside ratio; the position
 * is int((W - w) * u) and int((H - h) * u'); a crop is accepted when some
 * box's centre lies strictly inside it and the largest IoU between the
 * crop and those boxes reaches the option. When no trial is accepted a new
 * option is drawn (torchvision loops for ever; here after 64 rounds the
 * whole image is kept, which a sample without boxes reaches unless an
 * option >= 1 is drawn first). The boxes whose centre was outside the crop
 * are dropped; the others are cropped and clipped (ops/spatial.c).
 *
 * The draw reads the sample's boxes, so the op must be the first
 * geometric op of the pipeline (the boxes are then in the coordinates of
 * the decoded image), and the crop's size varies, so a resize to a fixed
 * size must follow it.
 */
#include "ops/image_plan_impl.h"

#include <string.h>

#define BBOX_ROUNDS 64

static int parse_bbox_crop(stk_spec_parser *P, const stk_spec_stage *st,
                           const stk_spec_opdef *def)
{
    static const char *const keys[] = {"thresholds|options", "scale", "ratio", "trials", NULL};
    static const double default_opt[] = {0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0};
    int rc = 0;
    stk_spec_arg a = {0};
    stk_spec_op *op = stk_spec_new_op(P, def, st->name.a, &rc);
    if (!op)
        return rc;
    op->u.bbox.nopt = (int)(sizeof default_opt / sizeof default_opt[0]);
    memcpy(op->u.bbox.opt, default_opt, sizeof default_opt);
    op->u.bbox.scale[0] = 0.3;
    op->u.bbox.scale[1] = 1.0;
    op->u.bbox.ratio[0] = 0.5;
    op->u.bbox.ratio[1] = 2.0;
    op->u.bbox.trials = 40;
    while ((rc = stk_spec_next_arg(P, st, keys, "thresholds, scale, ratio, trials", &a)) > 0) {
        int va = a.va, vb = a.vb;
        if (a.key < 0)
            return stk_spec_unexpected(P, st, a.t);
        if (a.key == 0) {
            stk_spec_numlist L;
            if ((rc = stk_spec_list(P, va, vb, &L, "in thresholds=")) < 0)
                return rc;
            for (int k = 0; k < L.n; k++)
                if (!(L.v[k] >= 0.0 && L.v[k] <= 1.0))
                    return stk_spec_err(P, L.a[k],
                                        "random_bbox_crop thresholds are minimum IoUs in [0, 1] "
                                        "(1 means no crop)");
            op->u.bbox.nopt = L.n;
            memcpy(op->u.bbox.opt, L.v, (size_t)L.n * sizeof L.v[0]);
        } else if (a.key == 1 || a.key == 2) {
            double v[2];
            int n;
            if ((rc = stk_spec_range(P, va, vb, v, &n,
                                     a.key == 1 ? "in scale=" : "in ratio=")) < 0)
                return rc;
            if (n != 2 || !(v[0] > 0.0) || !(v[0] <= v[1]) ||
                (a.key == 1 && v[1] > 1.0))
                return stk_spec_err(P, va,
                                    a.key == 1 ? "random_bbox_crop scale=LO:HI needs "
                                                 "0 < LO <= HI <= 1 (fractions of each side)"
                                               : "random_bbox_crop ratio=LO:HI needs "
                                                 "0 < LO <= HI (width / height)");
            double *dst = a.key == 1 ? op->u.bbox.scale : op->u.bbox.ratio;
            dst[0] = v[0];
            dst[1] = v[1];
        } else {
            uint32_t t;
            int n;
            if ((rc = stk_spec_ints(P, va, vb, 1u << 1, 1, 10000, &t, &n, "in trials=",
                                    "trials takes one number")) < 0)
                return rc;
            op->u.bbox.trials = (int)t;
        }
    }
    return rc < 0 ? rc : 0;
}

/* IoU of box b (x0, y0, x1, y1) with the crop, in float32 like
 * torchvision's box_iou on float boxes. */
static double crop_iou(const float *b, double l, double t, double r, double btm)
{
    double iw = (b[2] < r ? b[2] : r) - (b[0] > l ? b[0] : l);
    double ih = (b[3] < btm ? b[3] : btm) - (b[1] > t ? b[1] : t);
    if (iw <= 0.0 || ih <= 0.0)
        return 0.0;
    double inter = iw * ih;
    double area_b = ((double)b[2] - b[0]) * ((double)b[3] - b[1]);
    double area_c = (r - l) * (btm - t);
    return inter / (area_b + area_c - inter);
}

void stk_bbox_crop_draw(const stk_geo_op *g, stk_rng *rng, int64_t W, int64_t H,
                        const float *boxes, uint32_t nboxes, int64_t *top, int64_t *left,
                        int64_t *h, int64_t *w)
{
    *top = 0;
    *left = 0;
    *h = H;
    *w = W;
    for (int round = 0; round < BBOX_ROUNDS; round++) {
        double min_iou = g->opt[stk_rng_below(rng, (uint32_t)g->nopt)];
        if (min_iou >= 1.0)
            return;
        for (int t = 0; t < g->trials; t++) {
            double u0 = stk_rng_uniform(rng), u1 = stk_rng_uniform(rng);
            int64_t nw = (int64_t)((double)W * (g->bscale[0] + (g->bscale[1] - g->bscale[0]) * u0));
            int64_t nh = (int64_t)((double)H * (g->bscale[0] + (g->bscale[1] - g->bscale[0]) * u1));
            if (nw < 1 || nh < 1)
                continue;
            double ar = (double)nw / (double)nh;
            if (!(g->bratio[0] <= ar && ar <= g->bratio[1]))
                continue;
            double u2 = stk_rng_uniform(rng), u3 = stk_rng_uniform(rng);
            int64_t l = (int64_t)((double)(W - nw) * u2), tp = (int64_t)((double)(H - nh) * u3);
            double r = (double)(l + nw), b = (double)(tp + nh);
            double best = -1.0;
            for (uint32_t k = 0; k < nboxes; k++) {
                const float *bx = boxes + 4 * (size_t)k;
                double cx = 0.5 * ((double)bx[0] + bx[2]), cy = 0.5 * ((double)bx[1] + bx[3]);
                if (!((double)l < cx && cx < r && (double)tp < cy && cy < b))
                    continue;
                double iou = crop_iou(bx, (double)l, (double)tp, r, b);
                if (iou > best)
                    best = iou;
            }
            if (best < 0.0 || best < min_iou)
                continue;
            *top = tp;
            *left = l;
            *h = nh;
            *w = nw;
            return;
        }
    }
}

const stk_op_desc stk_op_random_bbox_crop = {
    .syntax = {"random_bbox_crop", NULL, STK_OP_BBOX_CROP, 0, NULL, parse_bbox_crop,
               NULL, 0, "[thresholds=T,...] [scale=LO:HI] [ratio=LO:HI] [trials=N]"},
    .torchvision = "RandomIoUCrop",
};
