/*
 * image_draws.c — the random draws of one image-pipeline sample
 * (image_plan_impl.h): a pure function of the compiled plan, the size of
 * the image entering the head and the sample's Philox stream. It reads no
 * pixel and allocates nothing, so the same code serves the CPU run
 * (image_run.c), stk_plan_trace_input, and a GPU backend that launches its
 * own kernels with the result.
 *
 * Order (docs/pipeline.md, "Random numbers"): the head ops in spec order
 * (flips, crops, random_resized_crop's attempts, point ops), then the tail
 * (flips, rotations, colour jitter, point ops, the float ops' draw hooks
 * (grayscale, blur sigmas, perspective corners: op.h), policy steps, user
 * ops' draw hooks; random_apply skips its group's draws when it does not
 * apply), then the
 * random_erasing rectangles on the output size. The head composes into one
 * affine map per axis (stk_axis_geo); a flip after a rotation is moved
 * before it by negating the angle; the point ops that apply compose into
 * two 256-entry tables, before and after the resize.
 */
#include "ops/image_plan_impl.h"

#include "core/error.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

/* torchvision CenterCrop offset: int(round(d / 2.0)), halves to even. */
int64_t stk_center_offset(int64_t d)
{
    int64_t q = d / 2;
    if (d % 2 == 0)
        return q;
    return (q % 2 == 0) ? q : q + 1;
}

/* torchvision's Resize(S) size: the shorter side to S, the longer
 * int(S * long / short). Returns 0, or -1 when a side exceeds MAX_SIDE. */
int stk_resize_shorter(int64_t h, int64_t w, int64_t s, int64_t *nh, int64_t *nw)
{
    int64_t shorter = w <= h ? w : h, longer = w <= h ? h : w;
    long double q = (long double)s * (long double)longer / (long double)shorter;
    double qd = (double)q; /* Python: exact product, correctly rounded quotient */
    if (!(qd < (double)MAX_SIDE))
        return -1;
    int64_t nl = (int64_t)qd;
    if (nl < 1)
        nl = 1;
    if (w <= h) {
        *nw = s;
        *nh = nl;
    } else {
        *nh = s;
        *nw = nl;
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Geometry                                                                */
/* ---------------------------------------------------------------------- */

static int64_t view_len(const stk_axis_geo *g) { return g->resized ? g->g1 - g->g0 : g->b - g->a; }

/* Keep c pixels starting o pixels into the view (view coordinates). */
static void axis_crop(stk_axis_geo *g, int64_t o, int64_t c)
{
    int64_t *lo = g->resized ? &g->g0 : &g->a, *hi = g->resized ? &g->g1 : &g->b;
    if (!g->flip) {
        *lo += o;
        *hi = *lo + c;
    } else {
        *hi -= o;
        *lo = *hi - c;
    }
}

static void axis_resize(stk_axis_geo *g, int64_t n)
{
    g->resized = 1;
    g->scale = (double)(g->b - g->a) / (double)n;
    g->g0 = 0;
    g->g1 = n;
}

/* torchvision RandomResizedCrop.get_params on a W x H view. */
static int rrc_draw(const stk_geo_op *g, stk_rng *rng, int64_t W, int64_t H, int64_t *i, int64_t *j,
                    int64_t *h, int64_t *w)
{
    double area = (double)H * (double)W;
    for (int attempt = 1; attempt <= 10; attempt++) {
        double u1 = stk_rng_uniform(rng), u2 = stk_rng_uniform(rng);
        float s = (float)(g->scale[0] + (g->scale[1] - g->scale[0]) * u1);
        double target = area * (double)s;
        float lr = (float)((double)g->logr[0] + ((double)g->logr[1] - (double)g->logr[0]) * u2);
        double aspect = (double)expf(lr);
        double wd = nearbyint(sqrt(target * aspect)), hd = nearbyint(sqrt(target / aspect));
        if (wd > 0 && wd <= (double)W && hd > 0 && hd <= (double)H) {
            *w = (int64_t)wd;
            *h = (int64_t)hd;
            *i = stk_rng_range(rng, 0, H - *h);
            *j = stk_rng_range(rng, 0, W - *w);
            return attempt;
        }
    }
    double in_ratio = (double)W / (double)H;
    double rmin = g->ratio[0], rmax = g->ratio[1];
    if (in_ratio < rmin) {
        *w = W;
        *h = (int64_t)nearbyint((double)W / rmin);
    } else if (in_ratio > rmax) {
        *h = H;
        *w = (int64_t)nearbyint((double)H * rmax);
    } else {
        *w = W;
        *h = H;
    }
    /* torchvision would make an empty crop of a degenerate image here. */
    if (*h < 1)
        *h = 1;
    if (*w < 1)
        *w = 1;
    if (*h > H)
        *h = H;
    if (*w > W)
        *w = W;
    *i = (H - *h) / 2;
    *j = (W - *w) / 2;
    return 0;
}



/* Compose the table of op `desc` (arguments `arg`) after lut `at` of d. */
static void lut_then(stk_draws *d, int at, const stk_op_desc *desc, const double *arg)
{
    uint8_t t[256];
    desc->lut(arg, t);
    if (at == 0 && d->padded) /* the border is made before this op: it maps it too */
        d->pad_val = t[d->pad_val];
    if (!d->has_lut[at]) {
        memcpy(d->lut[at], t, sizeof t);
        d->has_lut[at] = 1;
        return;
    }
    for (int v = 0; v < 256; v++)
        d->lut[at][v] = t[d->lut[at][v]];
}

/* Remember a geometric step for the fields that follow the image. */
static stk_geo_step *log_step(stk_draws *d, int kind)
{
    stk_geo_step *s = &d->gs[d->ngs++];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    return s;
}

static void log_rect(stk_draws *d, int kind, int64_t top, int64_t left, int64_t h, int64_t w)
{
    stk_geo_step *s = log_step(d, kind);
    s->top = top;
    s->left = left;
    s->h = h;
    s->w = w;
}

_Static_assert(sizeof(((stk_plan_trace *)0)->float_param[0]) == STK_FOP_PARAMS * sizeof(double),
               "the trace holds a float op's parameters");

int stk_imgplan_draw(const stk_imgplan *ip, stk_rng *rng, int64_t W, int64_t H,
                     const float *boxes, uint32_t nboxes, stk_draws *d, stk_plan_trace *tr)
{
    /* (not memset whole: gs and steps are filled as counted) */
    memset(d, 0, offsetof(stk_draws, gs));
    memset(&d->ax, 0, sizeof *d - offsetof(stk_draws, ax));
    d->src_w = W;
    d->src_h = H;
    d->ax.b = W;
    d->ay.b = H;
    d->rrc_attempt = -1;
    int resized = 0;
    for (int k = 0; k < ip->ngeo; k++) {
        const stk_geo_op *g = &ip->geo[k];
        switch (g->kind) {
        case G_LUT:
            if (g->lut->draw(g->arg, rng))
                lut_then(d, resized, g->lut, g->arg);
            break;
        case G_HFLIP:
        case G_VFLIP:
            if (stk_rng_uniform(rng) < g->p) {
                if (g->kind == G_HFLIP)
                    d->ax.flip ^= 1;
                else
                    d->ay.flip ^= 1;
                log_step(d, g->kind == G_HFLIP ? GS_HFLIP : GS_VFLIP);
            }
            break;
        case G_RCROP:
        case G_CCROP: {
            int64_t vh = view_len(&d->ay), vw = view_len(&d->ax);
            int64_t top, left;
            if (g->kind == G_RCROP) {
                /* torchvision's RandomCrop (without pad_if_needed) raises. */
                if ((int64_t)g->h > vh || (int64_t)g->w > vw)
                    return stk_fail(STK_EDATA,
                                    "random_crop %ux%u (HxW) does not fit the %lldx%lld image; "
                                    "resize first or crop less",
                                    g->h, g->w, (long long)vh, (long long)vw);
                top = stk_rng_range(rng, 0, vh - g->h);
                left = stk_rng_range(rng, 0, vw - g->w);
            } else {
                /* torchvision's CenterCrop zero-pads an axis shorter than
                 * the crop, (c - n) // 2 before and the rest after, and
                 * then takes all of it: the crop starts that many pixels
                 * before the view. Before a resize the view's ends are
                 * source coordinates, which may then leave the source
                 * (image_run.c reads zeros there); after one they are
                 * grid outputs, which cannot (compile refuses a crop
                 * larger than a resize's smaller side, and a resize or
                 * random_resized_crop fixes the size). */
                if (((int64_t)g->h > vh || (int64_t)g->w > vw) && d->ax.resized)
                    return stk_fail(STK_EDATA,
                                    "center_crop %ux%u (HxW) is larger than the %lldx%lld "
                                    "resized image; padding after a resize is not supported",
                                    g->h, g->w, (long long)vh, (long long)vw);
                top = (int64_t)g->h > vh ? -(((int64_t)g->h - vh) / 2)
                                         : stk_center_offset(vh - g->h);
                left = (int64_t)g->w > vw ? -(((int64_t)g->w - vw) / 2)
                                          : stk_center_offset(vw - g->w);
                if ((int64_t)g->h > vh || (int64_t)g->w > vw) {
                    /* One border value per sample: a second pad after a
                     * point op that changed the first border's zeros
                     * would need two. */
                    if (d->padded && d->pad_val != 0)
                        return stk_fail(STK_EDATA,
                                        "center_crop %ux%u (HxW) pads the %lldx%lld image "
                                        "again after a point op changed an earlier "
                                        "center_crop's zero border; this is not supported",
                                        g->h, g->w, (long long)vh, (long long)vw);
                    d->padded = 1;
                }
            }
            axis_crop(&d->ay, top, g->h);
            axis_crop(&d->ax, left, g->w);
            log_rect(d, GS_CROP, top, left, g->h, g->w);
            break;
        }
        case G_BBOX_CROP: { /* first in the head (compile): boxes are in view coordinates */
            int64_t top, left, h, w;
            stk_bbox_crop_draw(g, rng, view_len(&d->ax), view_len(&d->ay), boxes, nboxes, &top,
                               &left, &h, &w);
            axis_crop(&d->ay, top, h);
            axis_crop(&d->ax, left, w);
            log_rect(d, GS_BBOX_CROP, top, left, h, w);
            break;
        }
        case G_RRC: {
            int64_t i, j, h, w;
            d->rrc_attempt = rrc_draw(g, rng, view_len(&d->ax), view_len(&d->ay), &i, &j, &h, &w);
            axis_crop(&d->ay, i, h);
            axis_crop(&d->ax, j, w);
            axis_resize(&d->ay, g->h);
            axis_resize(&d->ax, g->w);
            log_rect(d, GS_CROP, i, j, h, w);
            log_rect(d, GS_RESIZE, 0, 0, g->h, g->w);
            resized = 1;
            break;
        }
        case G_RESIZE: {
            int64_t nh = g->h, nw = g->w;
            if (g->shorter &&
                stk_resize_shorter(view_len(&d->ay), view_len(&d->ax), g->h, &nh, &nw) < 0)
                return stk_fail(STK_EDATA,
                                "resizing the %lldx%lld image's shorter side to %u makes it "
                                "too large",
                                (long long)view_len(&d->ay), (long long)view_len(&d->ax), g->h);
            axis_resize(&d->ay, nh);
            axis_resize(&d->ax, nw);
            log_rect(d, GS_RESIZE, 0, 0, nh, nw);
            resized = 1;
            break;
        }
        }
    }
    d->hflip = d->ax.flip;
    d->vflip = d->ay.flip;

    int napply = 0;
    for (int k = 0; k < ip->ntail; k++) {
        const stk_tail_op *t = &ip->tail[k];
        switch (t->kind) {
        case T_APPLY: { /* RandomApply: u < p runs the group, else it is skipped (no draws) */
            int run = stk_rng_uniform(rng) < t->p;
            if (tr && run && napply < 31)
                tr->applied |= 1 << napply;
            napply++;
            if (!run)
                k += (int)t->n;
            break;
        }
        case T_FLOAT: { /* the op's draw hook: a step when it applies to this sample */
            double *prm = d->fparam[d->nfop];
            if (!t->lut->fl->draw(t->state, rng, prm, tr))
                break;
            stk_draw_step *s = &d->steps[d->nsteps++];
            s->kind = S_FOP;
            s->rot = d->nfop++;
            s->tail = k;
            if (tr && tr->nfloat < STK_TRACE_FOPS) {
                tr->float_name[tr->nfloat] = t->lut->syntax.name;
                memcpy(tr->float_param[tr->nfloat++], prm, sizeof tr->float_param[0]);
            }
            break;
        }
        case T_LUT:
            if (t->lut->draw(t->arg, rng))
                lut_then(d, 1, t->lut, t->arg);
            break;
        case T_POLICY: /* after the head, on the image as it is there */
            d->naug += stk_aug_draw(&t->pol, rng, (int32_t)t->iw, (int32_t)t->ih,
                                    &d->aug[d->naug]);
            break;
        case T_USER: /* the op's own draw hook, after the policy steps so far */
            d->user_at[d->nuser] = d->naug;
            stk_user_draw(&ip->user[t->user], rng, d->uparam[d->nuser]);
            d->nuser++;
            break;
        case T_HFLIP:
        case T_VFLIP:
            if (stk_rng_uniform(rng) < t->p) {
                if (t->kind == T_HFLIP)
                    d->hflip ^= 1;
                else
                    d->vflip ^= 1;
                log_step(d, t->kind == T_HFLIP ? GS_HFLIP : GS_VFLIP);
                /* Move the flip before every earlier rotation. */
                for (int r = 0; r < d->nrot; r++) {
                    if (!d->affine[r])
                        d->angle[r] = -d->angle[r];
                    else if (t->kind == T_HFLIP)
                        d->aff_mx[r] ^= 1;
                    else
                        d->aff_my[r] ^= 1;
                }
            }
            break;
        case T_ROTATE: {
            double u = stk_rng_uniform(rng);
            d->angle[d->nrot] = t->lo + (t->hi - t->lo) * u;
            log_step(d, GS_ROTATE)->a[0] = d->angle[d->nrot];
            stk_draw_step *s = &d->steps[d->nsteps++];
            s->kind = S_ROT;
            s->rot = d->nrot++;
            break;
        }
        case T_AFFINE: { /* RandomAffine.get_params, on the output's size */
            double u[6], *a = d->aff[d->nrot];
            for (int q = 0; q < 6; q++)
                u[q] = stk_rng_uniform(rng);
            double mx = t->tr[0] * (double)ip->out_w, my = t->tr[1] * (double)ip->out_h;
            a[0] = t->lo + (t->hi - t->lo) * u[0];
            a[1] = nearbyint(-mx + 2.0 * mx * u[1]);
            a[2] = nearbyint(-my + 2.0 * my * u[2]);
            a[3] = t->scale[0] + (t->scale[1] - t->scale[0]) * u[3];
            a[4] = t->shear[0] + (t->shear[1] - t->shear[0]) * u[4];
            a[5] = t->shear[2] + (t->shear[3] - t->shear[2]) * u[5];
            d->angle[d->nrot] = a[0];
            d->affine[d->nrot] = 1;
            memcpy(log_step(d, GS_AFFINE)->a, a, 6 * sizeof *a);
            stk_draw_step *s = &d->steps[d->nsteps++];
            s->kind = S_ROT;
            s->rot = d->nrot++;
            break;
        }
        case T_JITTER: {
            int perm[4] = {0, 1, 2, 3};
            for (int i = 3; i > 0; i--) { /* Fisher-Yates: below(4), below(3), below(2) */
                int jj = (int)stk_rng_below(rng, (uint32_t)i + 1);
                int tmp = perm[i];
                perm[i] = perm[jj];
                perm[jj] = tmp;
            }
            double fac[4];
            for (int q = 0; q < 4; q++)
                fac[q] = t->has[q] ? t->rlo[q] + (t->rhi[q] - t->rlo[q]) * stk_rng_uniform(rng)
                                   : NAN;
            if (tr && tr->njitter == 0) {
                tr->njitter = 1;
                memcpy(tr->perm, perm, sizeof perm);
                memcpy(tr->factor, fac, sizeof fac);
            }
            for (int q = 0; q < 4; q++) {
                int which = perm[q];
                if (!t->has[which])
                    continue;
                stk_draw_step *s = &d->steps[d->nsteps++];
                s->kind = which == 0 ? S_BRIGHT : which == 1 ? S_CONTRAST : which == 2 ? S_SAT
                                                                                      : S_HUE;
                s->f = (float)fac[which];
                s->g = (float)(1.0 - fac[which]);
            }
            break;
        }
        }
    }

    /* random_erasing on the output (RandomErasing.forward, get_params). */
    for (int k = 0; k < ip->nerase; k++) {
        const stk_erase_op *e = &ip->erase[k];
        if (!(stk_rng_uniform(rng) < e->p))
            continue;
        int64_t OH = ip->out_h, OW = ip->out_w;
        double area = (double)OH * (double)OW;
        for (int attempt = 0; attempt < 10; attempt++) {
            double u1 = stk_rng_uniform(rng), u2 = stk_rng_uniform(rng);
            float s = (float)(e->scale[0] + (e->scale[1] - e->scale[0]) * u1);
            float lr = (float)((double)e->logr[0] + ((double)e->logr[1] - (double)e->logr[0]) * u2);
            double aspect = (double)expf(lr), target = area * (double)s;
            double hd = nearbyint(sqrt(target * aspect)), wd = nearbyint(sqrt(target / aspect));
            if (!(hd < (double)OH && wd < (double)OW))
                continue;
            int32_t *r = d->erase[d->nerase++];
            r[2] = (int32_t)hd;
            r[3] = (int32_t)wd;
            r[0] = (int32_t)stk_rng_range(rng, 0, OH - r[2]);
            r[1] = (int32_t)stk_rng_range(rng, 0, OW - r[3]);
            r[4] = k;
            if (tr && tr->nerase++ == 0)
                memcpy(tr->erase, r, 4 * sizeof(int32_t));
            break;
        }
    }
    return 0;
}

