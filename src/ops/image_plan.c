/*
 * image_plan.c — the image pipeline: decode only what is needed, resample
 * it to the output size as Pillow would, then flips, rotation, colour
 * jitter, Normalize, dtype and layout, fused into as few passes as the ops
 * allow.
 *
 * Compile splits a spec into three parts:
 *
 *   prefix  fixed-shape input only: the ops up to the last `pad`, run by
 *           the fixed-shape kernel into uint8 HWC (plan.c). Pads need a
 *           known image size, so variable input cannot have them.
 *   head    flips, crops and at most one resize or random_resized_crop, in
 *           any order. They compose into one affine map per axis: the
 *           output is the Pillow resample of a source rectangle (the
 *           "domain": windows are clamped to it) at `scale` source pixels per
 *           output pixel, starting `off` outputs into the resized grid, and
 *           possibly mirrored. `resize 256 | center_crop 224` is thus the
 *           224 central outputs of the full resize, evaluated directly;
 *           random_resized_crop is a crop (the domain) resized to its size.
 *   tail    flips, rotations and colour jitter after the head, then
 *           normalize and to.
 *
 * Run, per sample:
 *
 *   1. size: stk_image_probe for encoded input (the header only), the view
 *      for raw input, the prefix's output otherwise;
 *   2. draws, in spec order (docs/pipeline.md lists them), giving the
 *      domain, scale and offset of each axis and the mirrorings. A flip
 *      after a rotation is moved before it by negating the angle (mirror o
 *      rotate(a) = rotate(-a) o mirror, exactly, on torchvision's centred
 *      grid), so every mirroring folds into the resample: the coefficient
 *      tables are built in reverse order, and the flip costs nothing;
 *   3. DCT scale: the largest d in {8, 4, 2, 1} with scale >= d on both axes
 *      (JPEG only), so the scaled decode never has fewer pixels than the
 *      output needs;
 *   4. the source rows and columns every resample window touches
 *      (stk_rs_range) — beyond the crop for `resize | center_crop`, whose
 *      windows reach past it — decoded at scale 1/d, or copied for raw
 *      input, into the start of the worker's scratch;
 *   5. horizontal pass over those rows into a uint8 buffer, then for each
 *      output row the vertical pass, giving a row of exactly the bytes
 *      Pillow's resize would produce, which is written out at once:
 *      without a float stage straight as v * scale + bias in the output
 *      dtype and layout (the fixed-shape kernel's formula); with colour
 *      jitter or rotation it is converted to float (ToTensor) and the tail
 *      runs in "segments". A segment ends where an op needs the whole image
 *      first: contrast needs the mean gray level of the image as it stands,
 *      rotation reads any pixel. Until then each row goes through the
 *      segment's ops while it is in L1; at a barrier rows are parked in a
 *      float image (and the gray sum accumulated), and the next segment
 *      reads them back. imagenet-train-extensive is thus 2 passes after the
 *      resample when contrast comes after another op, 1 otherwise.
 *
 * Memory: everything per sample lives in the caller's scratch, laid out as
 * [source pixels | slack | tables | row buffers | float images]. The scratch
 * only grows (keeping the decoded pixels when it must grow after decoding),
 * so after the first few samples nothing is allocated.
 *
 * Errors: undecodable input is the codec's STK_EDATA; an image over the
 * pixel limit becomes STK_EDATA too (one bad sample, skippable); a crop that
 * does not fit a variable-size image is STK_EDATA. Raw input of the wrong
 * shape for a fixed plan is STK_EINVAL.
 */
#include "ops/image_plan.h"

#include "core/error.h"
#include "core/util.h"
#include "ops/color.h"
#include "ops/op.h"
#include "ops/resample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIDE ((1 << 30) - 1)
#define MAX_ROT 8 /* rotations remembered per sample (more are refused at compile) */

enum { G_HFLIP, G_VFLIP, G_RCROP, G_CCROP, G_RRC, G_RESIZE, G_LUT };
enum { T_HFLIP, T_VFLIP, T_ROTATE, T_JITTER, T_LUT };
enum { S_BRIGHT, S_CONTRAST, S_SAT, S_HUE, S_ROT };

typedef struct geo_op {
    int kind;
    double p;              /* flips */
    uint32_t h, w;         /* crop size; rrc/resize output (resize S: h = w = S) */
    int shorter;           /* resize S */
    double scale[2], ratio[2];
    float logr[2];         /* rrc: log(ratio) in float32, as torch */
    const stk_op_desc *lut; /* G_LUT: the op's row (draw and lut hooks) */
    double arg[STK_SPEC_MAX_PARAMS]; /* G_LUT: its arguments */
} geo_op;

typedef struct tail_op {
    int kind;
    double p;              /* flips */
    double lo, hi;         /* rotate: degrees */
    float fill[3];         /* rotate: in [0, 1] */
    int has[4];            /* jitter: b, c, s, h on */
    double rlo[4], rhi[4];
    const stk_op_desc *lut; /* T_LUT: the op's row */
    double arg[STK_SPEC_MAX_PARAMS];
} tail_op;

struct stk_imgplan {
    uint32_t in_h, in_w, in_c; /* 0: any size */
    int nc;                    /* channels through the pipeline and out */
    stk_plan *prefix;          /* owned, or NULL */
    uint32_t pre_h, pre_w;
    int ngeo, ntail;
    geo_op geo[STK_SPEC_MAX_OPS];
    tail_op tail[STK_SPEC_MAX_OPS];
    int float_path;            /* a rotate or color_jitter */
    uint32_t out_h, out_w;
    stk_outfmt fmt;
    size_t sample_bytes;
    const stk_rs_kernels *rk;    /* chosen at compile, like the fixed-shape kernel */
    const stk_color_kernels *ck;
};

/* ---------------------------------------------------------------------- */
/* Compile                                                                 */
/* ---------------------------------------------------------------------- */

static int is_image_op(stk_op_kind k)
{
    return k == STK_OP_RANDOM_RESIZED_CROP || k == STK_OP_RESIZE || k == STK_OP_ROTATE ||
           k == STK_OP_COLOR_JITTER || k == STK_OP_LUT;
}

int stk_imgplan_needed(const stk_spec *spec, uint32_t in_h, uint32_t in_w, uint32_t in_c)
{
    if (in_h == 0 && in_w == 0 && in_c == 0)
        return 1;
    for (int i = 0; i < spec->nops; i++)
        if (is_image_op(spec->ops[i].kind))
            return 1;
    return 0;
}

/* torchvision CenterCrop offset: int(round(d / 2.0)), halves to even. */
static int64_t center_offset(int64_t d)
{
    int64_t q = d / 2;
    if (d % 2 == 0)
        return q;
    return (q % 2 == 0) ? q : q + 1;
}

/* torchvision's Resize(S) size: the shorter side to S, the longer
 * int(S * long / short). Returns 0, or -1 when a side exceeds MAX_SIDE. */
static int resize_shorter(int64_t h, int64_t w, int64_t s, int64_t *nh, int64_t *nw)
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

static size_t dtype_size(stk_dtype dt) { return dt == STK_U8 ? 1 : dt == STK_F16 ? 2 : 4; }

int stk_imgplan_compile(const char *text, const stk_spec *spec, uint32_t in_h, uint32_t in_w,
                        uint32_t in_c, stk_imgplan **out, uint32_t *out_h, uint32_t *out_w,
                        uint32_t *out_c, size_t *sample_bytes)
{
    int rc = 0;
    int variable = in_h == 0 && in_w == 0 && in_c == 0;
    stk_imgplan *ip = calloc(1, sizeof *ip);
    *out = NULL;
    if (!ip)
        return stk_fail(STK_ENOMEM, "pipeline plan: out of memory");
    ip->in_h = in_h;
    ip->in_w = in_w;
    ip->in_c = in_c;

    int first_img = -1, last_pad = -1;
    for (int k = 0; k < spec->nops; k++) {
        const stk_spec_op *o = &spec->ops[k];
        if (is_image_op(o->kind) && first_img < 0)
            first_img = k;
        if (o->kind == STK_OP_PAD) {
            if (variable) {
                rc = stk_spec_fail(text, o->col,
                                   "pad needs images of one fixed size, and these vary; crop "
                                   "or resize them instead");
                goto fail;
            }
            if (first_img >= 0) {
                rc = stk_spec_fail(text, o->col,
                                   "pad after %s is not supported; pad before it",
                                   spec->ops[first_img].def->name);
                goto fail;
            }
            last_pad = k;
        }
    }
    ip->nc = variable ? 3 : (int)in_c;
    if (ip->nc != 1 && ip->nc != 3) {
        const stk_spec_op *o = &spec->ops[first_img >= 0 ? first_img : 0];
        rc = stk_spec_fail(text, o->col, "%s needs images with 1 or 3 channels, got %u",
                           o->def->name, in_c);
        goto fail;
    }
    int nc = ip->nc;

    /* Size entering the head, when known. */
    int known = !variable;
    int64_t kh = in_h, kw = in_w, short_s = 0;
    if (last_pad >= 0) {
        if ((rc = stk_plan_compile_prefix(text, spec, last_pad + 1, in_h, in_w, in_c,
                                          &ip->prefix)) < 0)
            goto fail;
        int64_t shape[3];
        stk_plan_output(ip->prefix, shape, NULL, NULL, NULL);
        ip->pre_h = (uint32_t)shape[0];
        ip->pre_w = (uint32_t)shape[1];
        kh = shape[0];
        kw = shape[1];
    }

    int last_geo = -1;
    for (int k = last_pad + 1; k < spec->nops; k++) {
        stk_op_kind kd = spec->ops[k].kind;
        if (kd == STK_OP_RANDOM_CROP || kd == STK_OP_CENTER_CROP ||
            kd == STK_OP_RANDOM_RESIZED_CROP || kd == STK_OP_RESIZE)
            last_geo = k;
    }

    double mean[3] = {0, 0, 0}, stdv[3] = {1, 1, 1};
    int have_norm = 0, have_resize = 0, seen_color = 0, nrot = 0, last_geo_col = 1;
    for (int k = last_pad + 1; k < spec->nops; k++) {
        const stk_spec_op *o = &spec->ops[k];
        switch (o->kind) {
        case STK_OP_DECODE:
        case STK_OP_TO:
        case STK_OP_PAD: /* not reached: pads are in the prefix */
            break;
        case STK_OP_NORMALIZE: {
            uint32_t nm = o->u.normalize.nmean, ns = o->u.normalize.nstd;
            if (nm != 1 && nm != (uint32_t)nc) {
                rc = stk_spec_fail(text, o->u.normalize.mean_col,
                                   "normalize has %u mean values but the image has %d "
                                   "channel%s (give 1 value or %d)",
                                   nm, nc, nc == 1 ? "" : "s", nc);
                goto fail;
            }
            if (ns != 1 && ns != (uint32_t)nc) {
                rc = stk_spec_fail(text, o->u.normalize.std_col,
                                   "normalize has %u std values but the image has %d "
                                   "channel%s (give 1 value or %d)",
                                   ns, nc, nc == 1 ? "" : "s", nc);
                goto fail;
            }
            for (int c = 0; c < nc; c++) {
                mean[c] = o->u.normalize.mean[nm == 1 ? 0 : c];
                stdv[c] = o->u.normalize.std[ns == 1 ? 0 : c];
            }
            have_norm = 1;
            break;
        }
        case STK_OP_HFLIP:
        case STK_OP_VFLIP:
            if (k < last_geo) {
                geo_op *g = &ip->geo[ip->ngeo++];
                g->kind = o->kind == STK_OP_HFLIP ? G_HFLIP : G_VFLIP;
                g->p = o->u.flip.p;
            } else {
                tail_op *t = &ip->tail[ip->ntail++];
                t->kind = o->kind == STK_OP_HFLIP ? T_HFLIP : T_VFLIP;
                t->p = o->u.flip.p;
            }
            break;
        case STK_OP_LUT: /* the parser keeps these before rotate and color_jitter */
            if (k < last_geo) {
                geo_op *g = &ip->geo[ip->ngeo++];
                g->kind = G_LUT;
                g->lut = stk_op_desc_of(o);
                memcpy(g->arg, o->u.num.v, sizeof g->arg);
            } else {
                tail_op *t = &ip->tail[ip->ntail++];
                t->kind = T_LUT;
                t->lut = stk_op_desc_of(o);
                memcpy(t->arg, o->u.num.v, sizeof t->arg);
            }
            break;
        case STK_OP_RANDOM_CROP:
        case STK_OP_CENTER_CROP:
        case STK_OP_RANDOM_RESIZED_CROP:
        case STK_OP_RESIZE: {
            last_geo_col = o->col;
            if (seen_color) {
                rc = stk_spec_fail(text, o->col,
                                   "%s after rotate or color_jitter is not supported; put the "
                                   "crops and the resize first",
                                   o->def->name);
                goto fail;
            }
            geo_op *g = &ip->geo[ip->ngeo++];
            if (o->kind == STK_OP_RANDOM_CROP || o->kind == STK_OP_CENTER_CROP) {
                g->kind = o->kind == STK_OP_RANDOM_CROP ? G_RCROP : G_CCROP;
                g->h = o->u.crop.height;
                g->w = o->u.crop.width;
                if (known && ((int64_t)g->h > kh || (int64_t)g->w > kw)) {
                    rc = stk_spec_fail(text, o->arg_col,
                                       "%s %ux%u (HxW) is larger than its input %lldx%lld",
                                       o->def->name, g->h, g->w, (long long)kh,
                                       (long long)kw);
                    goto fail;
                }
                if (!known && short_s && ((int64_t)g->h > short_s || (int64_t)g->w > short_s)) {
                    rc = stk_spec_fail(text, o->arg_col,
                                       "%s %ux%u (HxW) does not fit every image: 'resize %lld' "
                                       "makes the shorter side %lld; crop at most %lld",
                                       o->def->name, g->h, g->w, (long long)short_s,
                                       (long long)short_s, (long long)short_s);
                    goto fail;
                }
                known = 1;
                short_s = 0;
                kh = g->h;
                kw = g->w;
                break;
            }
            if (have_resize++) {
                rc = stk_spec_fail(text, o->col,
                                   "only one resize or random_resized_crop per pipeline");
                goto fail;
            }
            if (o->kind == STK_OP_RANDOM_RESIZED_CROP) {
                g->kind = G_RRC;
                g->h = o->u.rrc.height;
                g->w = o->u.rrc.width;
                memcpy(g->scale, o->u.rrc.scale, sizeof g->scale);
                memcpy(g->ratio, o->u.rrc.ratio, sizeof g->ratio);
                g->logr[0] = logf((float)g->ratio[0]);
                g->logr[1] = logf((float)g->ratio[1]);
                known = 1;
                kh = g->h;
                kw = g->w;
            } else {
                g->kind = G_RESIZE;
                g->h = o->u.resize.height;
                g->w = o->u.resize.width;
                g->shorter = o->u.resize.shorter;
                if (!g->shorter) {
                    known = 1;
                    kh = g->h;
                    kw = g->w;
                } else if (known) {
                    int64_t nh, nw;
                    if (resize_shorter(kh, kw, g->h, &nh, &nw) < 0) {
                        rc = stk_spec_fail(text, o->arg_col, "the resized image is too large");
                        goto fail;
                    }
                    kh = nh;
                    kw = nw;
                } else {
                    short_s = g->h;
                }
            }
            break;
        }
        case STK_OP_ROTATE: {
            if (nrot++ == MAX_ROT) {
                rc = stk_spec_fail(text, o->col, "at most %d rotate stages", MAX_ROT);
                goto fail;
            }
            uint32_t nf = o->u.rotate.nfill;
            if (nf != 1 && nf != (uint32_t)nc) {
                rc = stk_spec_fail(text, o->u.rotate.fill_col,
                                   "fill has %u values but the image has %d channel%s "
                                   "(give 1 value or %d)",
                                   nf, nc, nc == 1 ? "" : "s", nc);
                goto fail;
            }
            tail_op *t = &ip->tail[ip->ntail++];
            t->kind = T_ROTATE;
            t->lo = o->u.rotate.lo;
            t->hi = o->u.rotate.hi;
            for (int c = 0; c < 3; c++)
                t->fill[c] = (float)o->u.rotate.fill[nf == 1 ? 0 : (c < nc ? c : 0)] / 255.0f;
            seen_color = 1;
            ip->float_path = 1;
            break;
        }
        case STK_OP_COLOR_JITTER: {
            tail_op *t = &ip->tail[ip->ntail++];
            t->kind = T_JITTER;
            t->has[0] = o->u.jitter.has_b;
            t->has[1] = o->u.jitter.has_c;
            t->has[2] = o->u.jitter.has_s;
            t->has[3] = o->u.jitter.has_h;
            const double *r[4] = {o->u.jitter.b, o->u.jitter.c, o->u.jitter.s, o->u.jitter.h};
            for (int q = 0; q < 4; q++) {
                t->rlo[q] = r[q][0];
                t->rhi[q] = r[q][1];
            }
            seen_color = 1;
            ip->float_path = 1;
            break;
        }
        }
    }
    if (!known) {
        rc = stk_spec_fail(text, last_geo >= 0 ? last_geo_col : 1,
                           "these images vary in size, so the pipeline needs a stage that "
                           "fixes the output size: random_resized_crop S, resize H,W, "
                           "center_crop or random_crop (e.g. resize 256 | center_crop 224)");
        goto fail;
    }
    if (kh > (int64_t)STK_SPEC_MAX_SIZE || kw > (int64_t)STK_SPEC_MAX_SIZE) {
        rc = stk_fail(STK_ELIMIT, "pipeline spec: output of %lldx%lld is too large",
                      (long long)kh, (long long)kw);
        goto fail;
    }
    ip->out_h = (uint32_t)kh;
    ip->out_w = (uint32_t)kw;

    uint64_t bytes;
    if (!stk_mul_ok((uint64_t)kh * (uint64_t)kw, (uint64_t)nc * dtype_size(spec->dtype), &bytes) ||
        bytes > (uint64_t)SIZE_MAX / 2) {
        rc = stk_fail(STK_ELIMIT, "pipeline spec: output sample of %lldx%lldx%d is too large",
                      (long long)kh, (long long)kw, nc);
        goto fail;
    }
    ip->sample_bytes = (size_t)bytes;

    stk_outfmt *f = &ip->fmt;
    f->dtype = spec->dtype;
    f->layout = spec->layout;
    f->nc = nc;
    f->width = (int32_t)kw;
    f->height = (int32_t)kh;
    for (int c = 0; c < 3; c++) {
        int cc = c < nc ? c : 0;
        if (have_norm) {
            f->scale[c] = (float)(1.0 / (255.0 * stdv[cc]));
            f->bias[c] = (float)(-mean[cc] / stdv[cc]);
            f->fscale[c] = (float)(1.0 / stdv[cc]);
            f->fbias[c] = (float)(-mean[cc] / stdv[cc]);
        } else {
            f->scale[c] = (float)(1.0 / 255.0);
            f->bias[c] = 0.0f;
            f->fscale[c] = 1.0f;
            f->fbias[c] = 0.0f;
        }
    }
    ip->rk = stk_rs_kernels_get();
    ip->ck = stk_color_kernels_get();
    *out_h = ip->out_h;
    *out_w = ip->out_w;
    *out_c = (uint32_t)nc;
    *sample_bytes = ip->sample_bytes;
    *out = ip;
    return 0;

fail:
    stk_imgplan_free(ip);
    return rc;
}

void stk_imgplan_free(stk_imgplan *ip)
{
    if (!ip)
        return;
    stk_plan_free(ip->prefix);
    free(ip);
}

/* ---------------------------------------------------------------------- */
/* Geometry                                                                */
/* ---------------------------------------------------------------------- */

/* One axis of the head, in source pixels. Before a resize the current view
 * is [a, b); after it, the resized grid is [0, n) over the domain [a, b)
 * and the view is [g0, g1) of the grid. `flip`: the view runs backwards
 * relative to the source. */
typedef struct axis_geo {
    int64_t a, b;
    int flip, resized;
    double scale;
    int64_t g0, g1;
} axis_geo;

static int64_t view_len(const axis_geo *g) { return g->resized ? g->g1 - g->g0 : g->b - g->a; }

/* Keep c pixels starting o pixels into the view (view coordinates). */
static void axis_crop(axis_geo *g, int64_t o, int64_t c)
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

static void axis_resize(axis_geo *g, int64_t n)
{
    g->resized = 1;
    g->scale = (double)(g->b - g->a) / (double)n;
    g->g0 = 0;
    g->g1 = n;
}

/* torchvision RandomResizedCrop.get_params on a W x H view. */
static int rrc_draw(const geo_op *g, stk_rng *rng, int64_t W, int64_t H, int64_t *i, int64_t *j,
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

typedef struct step {
    int kind;   /* S_* */
    float f, g; /* factor; (float)(1 - factor) */
    int rot;    /* S_ROT: index into rots */
} step;

/* Everything drawn for one sample. */
typedef struct draws {
    axis_geo ax, ay;
    int hflip, vflip;
    int rrc_attempt;
    int nsteps;
    step steps[4 * STK_SPEC_MAX_OPS];
    int nrot;
    double angle[MAX_ROT];
    /* uint8 point ops that apply to this sample, composed into one table
     * each: [0] before the resize (applied to the source pixels), [1] after
     * it (applied to each resampled row). */
    int has_lut[2];
    uint8_t lut[2][256];
} draws;

/* Compose the table of op `desc` (arguments `arg`) after lut `at` of d. */
static void lut_then(draws *d, int at, const stk_op_desc *desc, const double *arg)
{
    uint8_t t[256];
    desc->lut(arg, t);
    if (!d->has_lut[at]) {
        memcpy(d->lut[at], t, sizeof t);
        d->has_lut[at] = 1;
        return;
    }
    for (int v = 0; v < 256; v++)
        d->lut[at][v] = t[d->lut[at][v]];
}

static int draw_all(const stk_imgplan *ip, stk_rng *rng, int64_t W, int64_t H, draws *d,
                    stk_plan_trace *tr)
{
    memset(d, 0, sizeof *d);
    d->ax.b = W;
    d->ay.b = H;
    d->rrc_attempt = -1;
    int resized = 0;
    for (int k = 0; k < ip->ngeo; k++) {
        const geo_op *g = &ip->geo[k];
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
            }
            break;
        case G_RCROP:
        case G_CCROP: {
            int64_t vh = view_len(&d->ay), vw = view_len(&d->ax);
            if ((int64_t)g->h > vh || (int64_t)g->w > vw)
                return stk_fail(STK_EDATA,
                                "%s %ux%u (HxW) does not fit the %lldx%lld image; resize "
                                "first or crop less",
                                g->kind == G_RCROP ? "random_crop" : "center_crop", g->h, g->w,
                                (long long)vh, (long long)vw);
            int64_t top, left;
            if (g->kind == G_RCROP) {
                top = stk_rng_range(rng, 0, vh - g->h);
                left = stk_rng_range(rng, 0, vw - g->w);
            } else {
                top = center_offset(vh - g->h);
                left = center_offset(vw - g->w);
            }
            axis_crop(&d->ay, top, g->h);
            axis_crop(&d->ax, left, g->w);
            break;
        }
        case G_RRC: {
            int64_t i, j, h, w;
            d->rrc_attempt = rrc_draw(g, rng, view_len(&d->ax), view_len(&d->ay), &i, &j, &h, &w);
            axis_crop(&d->ay, i, h);
            axis_crop(&d->ax, j, w);
            axis_resize(&d->ay, g->h);
            axis_resize(&d->ax, g->w);
            resized = 1;
            break;
        }
        case G_RESIZE: {
            int64_t nh = g->h, nw = g->w;
            if (g->shorter &&
                resize_shorter(view_len(&d->ay), view_len(&d->ax), g->h, &nh, &nw) < 0)
                return stk_fail(STK_EDATA,
                                "resizing the %lldx%lld image's shorter side to %u makes it "
                                "too large",
                                (long long)view_len(&d->ay), (long long)view_len(&d->ax), g->h);
            axis_resize(&d->ay, nh);
            axis_resize(&d->ax, nw);
            resized = 1;
            break;
        }
        }
    }
    d->hflip = d->ax.flip;
    d->vflip = d->ay.flip;

    for (int k = 0; k < ip->ntail; k++) {
        const tail_op *t = &ip->tail[k];
        switch (t->kind) {
        case T_LUT:
            if (t->lut->draw(t->arg, rng))
                lut_then(d, 1, t->lut, t->arg);
            break;
        case T_HFLIP:
        case T_VFLIP:
            if (stk_rng_uniform(rng) < t->p) {
                if (t->kind == T_HFLIP)
                    d->hflip ^= 1;
                else
                    d->vflip ^= 1;
                /* Move the flip before every earlier rotation. */
                for (int r = 0; r < d->nrot; r++)
                    d->angle[r] = -d->angle[r];
            }
            break;
        case T_ROTATE: {
            double u = stk_rng_uniform(rng);
            d->angle[d->nrot] = t->lo + (t->hi - t->lo) * u;
            step *s = &d->steps[d->nsteps++];
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
                step *s = &d->steps[d->nsteps++];
                s->kind = which == 0 ? S_BRIGHT : which == 1 ? S_CONTRAST : which == 2 ? S_SAT
                                                                                      : S_HUE;
                s->f = (float)fac[which];
                s->g = (float)(1.0 - fac[which]);
            }
            break;
        }
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Scratch                                                                 */
/* ---------------------------------------------------------------------- */

static size_t al64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Make s->cap >= bytes keeping its first `keep` bytes. */
static int reserve_keep(stk_scratch *s, size_t bytes, size_t keep)
{
    if (s->cap >= bytes)
        return 0;
    size_t cap = s->cap ? s->cap : 65536;
    while (cap < bytes)
        cap = cap > SIZE_MAX / 2 ? bytes : cap * 2;
    uint8_t *p = stk_aligned_alloc(cap);
    if (!p)
        return stk_fail(STK_ENOMEM, "out of memory allocating %zu bytes of scratch", cap);
    if (keep)
        memcpy(p, s->data, keep);
    stk_aligned_free(s->data);
    s->data = p;
    s->cap = cap;
    return 0;
}

/* Copy rows [y0, y0+h) and columns [x0, x0+w) of a raw view into dst as
 * nc-channel HWC: 1 -> 3 channels replicates, 2 (gray + alpha) takes the
 * gray, 4 drops alpha. */
static void copy_raw(const stk_image_view *v, int64_t x0, int64_t y0, int64_t w, int64_t h,
                     int nc, uint8_t *dst)
{
    uint32_t C = v->channels;
    for (int64_t y = 0; y < h; y++) {
        const uint8_t *row = v->pixels + (y0 + y) * v->row_stride + x0 * v->col_stride;
        uint8_t *d = dst + (size_t)y * (size_t)w * nc;
        if (C == (uint32_t)nc && v->col_stride == nc && v->chan_stride == 1) {
            memcpy(d, row, (size_t)w * nc);
            continue;
        }
        for (int64_t x = 0; x < w; x++) {
            const uint8_t *px = row + x * v->col_stride;
            for (int c = 0; c < nc; c++) {
                int sc = C >= 3 ? c : 0;
                d[x * nc + c] = px[sc * v->chan_stride];
            }
        }
    }
}

/* ---------------------------------------------------------------------- */
/* Run                                                                     */
/* ---------------------------------------------------------------------- */

typedef struct axis_plan {
    stk_rs_params p;   /* in decoded pixels, relative to the decoded domain */
    int64_t dd0;       /* decoded index of the domain start */
    int32_t f, e;      /* used range, relative to the domain */
    int identity;
} axis_plan;

static int axis_setup(const axis_geo *g, unsigned d, axis_plan *a)
{
    int64_t dom0, dom1, off, out;
    double scale;
    if (g->resized) {
        dom0 = g->a;
        dom1 = g->b;
        scale = g->scale;
        off = g->g0;
        out = g->g1 - g->g0;
    } else {
        dom0 = g->a;
        dom1 = g->b;
        scale = 1.0;
        off = 0;
        out = g->b - g->a;
    }
    a->dd0 = dom0 / d;
    int64_t dd1 = (dom1 + d - 1) / d;
    a->p.in_size = (int32_t)(dd1 - a->dd0);
    a->p.out = (int32_t)out;
    a->p.off = (int32_t)off;
    a->p.in0 = d == 1 ? 0.0 : (double)dom0 / d - (double)a->dd0;
    a->p.scale = scale / d;
    if (stk_rs_range(&a->p, &a->f, &a->e, &a->identity) < 0)
        return stk_fail(STK_EDATA, "image geometry out of range");
    return 0;
}

int stk_imgplan_run(const stk_imgplan *ip, const stk_plan_input *in, stk_rng *rng, void *out,
                    stk_scratch *scratch, stk_plan_trace *trace, int decode_pixels)
{
    enum { SRC_ENC, SRC_RAW, SRC_PREFIX } kind;
    stk_image_info info;
    int64_t W, H;
    int rc, nc = ip->nc;
    draws dr;

    if (trace)
        memset(trace, 0, sizeof *trace);
    if (!in || !scratch || (decode_pixels && !out))
        return stk_fail(STK_EINVAL, "stk_plan_run_input: NULL argument");
    if (!rng)
        return stk_fail(STK_EINVAL, "stk_plan_run_input: rng is NULL");
    memset(&info, 0, sizeof info);

    /* 1. The size of the image entering the head. */
    if (in->image) {
        const stk_image_view *v = in->image;
        if (!v->pixels)
            return stk_fail(STK_EINVAL, "stk_plan_run_input: image without pixels");
        if (ip->in_h && (v->height != ip->in_h || v->width != ip->in_w ||
                         v->channels != ip->in_c))
            return stk_fail(STK_EINVAL,
                            "stk_plan_run: image is %ux%ux%u (HxWxC) but the plan was compiled "
                            "for %ux%ux%u",
                            v->height, v->width, v->channels, ip->in_h, ip->in_w, ip->in_c);
        if (!ip->in_h && (v->channels < 1 || v->channels > 4 || !v->width || !v->height ||
                          v->width > MAX_SIDE || v->height > MAX_SIDE))
            return stk_fail(STK_EINVAL,
                            "raw image of %ux%ux%u (HxWxC): images of any size need 1 to 4 "
                            "channels",
                            v->height, v->width, v->channels);
        if (ip->prefix) {
            size_t pb = (size_t)ip->pre_h * ip->pre_w * (size_t)nc;
            if ((rc = reserve_keep(scratch, pb + 64, 0)) < 0)
                return rc;
            if ((rc = stk_plan_run(ip->prefix, v, rng, scratch->data)) < 0)
                return rc;
            W = ip->pre_w;
            H = ip->pre_h;
            kind = SRC_PREFIX;
        } else {
            W = v->width;
            H = v->height;
            kind = SRC_RAW;
        }
    } else if (in->encoded) {
        if (ip->in_h)
            return stk_fail(STK_EINVAL,
                            "this pipeline was compiled for raw %ux%ux%u images, not encoded ones",
                            ip->in_h, ip->in_w, ip->in_c);
        rc = stk_image_probe(in->encoded, in->encoded_size, NULL, &info);
        if (rc == STK_ELIMIT)
            rc = STK_EDATA; /* one oversized image is one bad sample */
        if (rc < 0)
            return rc;
        W = info.width;
        H = info.height;
        if (W < 1 || H < 1)
            return stk_fail(STK_EDATA, "image of %lldx%lld pixels", (long long)W, (long long)H);
        kind = SRC_ENC;
    } else {
        return stk_fail(STK_EINVAL, "stk_plan_run_input: no image and no encoded bytes");
    }

    /* 2. Draws. */
    if ((rc = draw_all(ip, rng, W, H, &dr, trace)) < 0)
        return rc;

    /* 3. DCT scale. */
    unsigned d = 1;
    if (kind == SRC_ENC && info.format == STK_IMAGE_JPEG) {
        double sx = dr.ax.resized ? dr.ax.scale : 1.0, sy = dr.ay.resized ? dr.ay.scale : 1.0;
        for (d = 8; d > 1; d /= 2)
            if (sx >= (double)d && sy >= (double)d)
                break;
    }

    /* 4. What the windows touch. */
    axis_plan xa, ya;
    if ((rc = axis_setup(&dr.ax, d, &xa)) < 0 || (rc = axis_setup(&dr.ay, d, &ya)) < 0)
        return rc;
    if (xa.p.out != (int32_t)ip->out_w || ya.p.out != (int32_t)ip->out_h)
        return stk_fail(STK_EINVAL, "image pipeline: geometry gave %dx%d, expected %ux%u",
                        ya.p.out, xa.p.out, ip->out_h, ip->out_w);
    int64_t rx0 = (xa.dd0 + xa.f) * d, rx1 = (xa.dd0 + xa.e) * d;
    int64_t ry0 = (ya.dd0 + ya.f) * d, ry1 = (ya.dd0 + ya.e) * d;
    if (rx1 > W)
        rx1 = W;
    if (ry1 > H)
        ry1 = H;
    int32_t cols = xa.e - xa.f, rows = ya.e - ya.f;

    if (trace) {
        stk_plan_trace *t = trace;
        t->src_width = (uint32_t)W;
        t->src_height = (uint32_t)H;
        t->resized = dr.ax.resized;
        t->rrc_attempt = dr.rrc_attempt;
        t->box[0] = dr.ax.a;
        t->box[1] = dr.ay.a;
        t->box[2] = dr.ax.b - dr.ax.a;
        t->box[3] = dr.ay.b - dr.ay.a;
        t->scale[0] = dr.ax.resized ? dr.ax.scale : 1.0;
        t->scale[1] = dr.ay.resized ? dr.ay.scale : 1.0;
        t->off[0] = dr.ax.resized ? (int32_t)dr.ax.g0 : 0;
        t->off[1] = dr.ay.resized ? (int32_t)dr.ay.g0 : 0;
        t->scale_denom = d;
        t->region[0] = (uint32_t)rx0;
        t->region[1] = (uint32_t)ry0;
        t->region[2] = (uint32_t)(rx1 - rx0);
        t->region[3] = (uint32_t)(ry1 - ry0);
        t->hflip = dr.hflip;
        t->vflip = dr.vflip;
        t->nrot = dr.nrot < 4 ? dr.nrot : 4;
        for (int r = 0; r < t->nrot; r++)
            t->angle[r] = dr.angle[r];
    }
    if (!decode_pixels)
        return 0;

    /* 5. Workspace sizes. */
    const stk_rs_kernels *rk = ip->rk;
    const stk_color_kernels *ck = ip->ck;
    int group = nc == 3 ? rk->group : 0;
    int32_t OW = (int32_t)ip->out_w, OH = (int32_t)ip->out_h;
    int need_h = !xa.identity || dr.hflip, need_v = !ya.identity;
    int32_t ky = stk_rs_ksize(ya.p.scale), kx = stk_rs_ksize(xa.p.scale);
    size_t bx = stk_rs_axis_bytes(&xa.p, group), by = stk_rs_axis_bytes(&ya.p, 0);
    if (!bx || !by)
        return stk_fail(STK_EDATA, "image geometry out of range");
    size_t rowb = (size_t)OW * nc, tstride = al64(rowb + 64);
    size_t tmp_bytes = (need_h || need_v) ? tstride * ((size_t)rows + (size_t)ky + 1) : 0;
    size_t fplane = al64((size_t)OW * 4), fimg = (size_t)OW * OH * 4 * (size_t)nc;

    /* Segments of the float tail: boundaries before contrast and rotation. */
    int nseg = 1, segb[4 * STK_SPEC_MAX_OPS + 2], nimg = 0;
    segb[0] = 0;
    for (int k = 0; k < dr.nsteps; k++)
        if (dr.steps[k].kind == S_CONTRAST || dr.steps[k].kind == S_ROT)
            segb[nseg++] = k;
    segb[nseg] = dr.nsteps;
    int float_path = dr.nsteps > 0;
    if (nseg > 1)
        nimg = 1;
    for (int s = 1; s < nseg - 1; s++)
        if (dr.steps[segb[s]].kind == S_ROT)
            nimg = 2;
    /* Every term is below 2^50 (sides < 2^30, region under the pixel
     * limit); refuse a sum no machine could hold rather than wrap. */
    uint64_t ws64 = (uint64_t)bx + by + tmp_bytes + al64(rowb + 64) + al64(rowb * 4) +
                    (float_path ? 3 * (uint64_t)fplane + (uint64_t)nimg * al64(fimg) : 0) + 256;
    if (ws64 > SIZE_MAX / 4)
        return stk_fail(STK_EDATA, "image too large for this pipeline (%llu bytes of buffers)",
                        (unsigned long long)ws64);
    size_t ws = (size_t)ws64;
    size_t slack = STK_RS_SLACK(kx, nc) + 64;

    /* 6. The source pixels at the start of the scratch. */
    stk_image_view view;
    size_t src_end;
    if (kind == SRC_ENC) {
        uint64_t ow = (uint64_t)((W + d - 1) / d), est;
        if (!stk_mul_ok(ow * 4, (uint64_t)rows + 17, &est) || est > SIZE_MAX / 4)
            return stk_fail(STK_EDATA, "image too large");
        if ((rc = reserve_keep(scratch, (size_t)est + slack + ws, 0)) < 0)
            return rc;
        stk_rect r = {(uint32_t)rx0, (uint32_t)ry0, (uint32_t)(rx1 - rx0), (uint32_t)(ry1 - ry0)};
        rc = stk_image_decode(in->encoded, in->encoded_size, NULL, &r, d, scratch, &view);
        if (rc == STK_ELIMIT)
            rc = STK_EDATA;
        if (rc < 0)
            return rc;
        if (view.width != (uint32_t)cols || view.height != (uint32_t)rows || view.channels != 3 ||
            view.col_stride != 3 || view.chan_stride != 1)
            return stk_fail(STK_EDATA,
                            "decoder returned %ux%ux%u pixels for a %dx%d region (scale 1/%u)",
                            view.height, view.width, view.channels, rows, cols, d);
        src_end = (size_t)(view.pixels - scratch->data) +
                  (size_t)(rows - 1) * (size_t)view.row_stride + (size_t)cols * 3;
    } else if (kind == SRC_RAW) {
        size_t sb = (size_t)cols * rows * nc;
        if ((rc = reserve_keep(scratch, al64(sb + slack) + ws, 0)) < 0)
            return rc;
        copy_raw(in->image, rx0, ry0, cols, rows, nc, scratch->data);
        view.pixels = scratch->data;
        view.width = (uint32_t)cols;
        view.height = (uint32_t)rows;
        view.channels = (uint32_t)nc;
        view.row_stride = (ptrdiff_t)cols * nc;
        view.col_stride = nc;
        view.chan_stride = 1;
        src_end = sb;
    } else {
        size_t pb = (size_t)ip->pre_h * ip->pre_w * (size_t)nc;
        view.pixels = NULL; /* set below, after the scratch may have moved */
        view.width = (uint32_t)cols;
        view.height = (uint32_t)rows;
        view.channels = (uint32_t)nc;
        view.row_stride = (ptrdiff_t)ip->pre_w * nc;
        view.col_stride = nc;
        view.chan_stride = 1;
        src_end = pb;
    }
    size_t pix_off = view.pixels ? (size_t)(view.pixels - scratch->data)
                                 : (size_t)(ry0 * (int64_t)ip->pre_w + rx0) * (size_t)nc;
    size_t ws_off = al64(src_end + slack);
    if ((rc = reserve_keep(scratch, ws_off + ws, src_end)) < 0)
        return rc;
    uint8_t *base = scratch->data;
    view.pixels = base + pix_off;
    memset(base + src_end, 0, ws_off - src_end);
    if (dr.has_lut[0]) /* point ops before the resize: on the source pixels */
        for (int32_t r = 0; r < rows; r++) {
            uint8_t *px = base + pix_off + (size_t)r * (size_t)view.row_stride;
            for (size_t i = 0; i < (size_t)cols * (size_t)nc; i++)
                px[i] = dr.lut[0][px[i]];
        }

    /* 7. Tables and buffers. */
    uint8_t *m = base + ws_off;
    stk_rs_axis ax, ay;
    stk_rs_build(&xa.p, xa.f, dr.hflip, group, m, &ax);
    m += al64(bx);
    stk_rs_build(&ya.p, ya.f, dr.vflip, 0, m, &ay);
    m += al64(by);
    uint8_t *tmp = m;
    m += al64(tmp_bytes);
    uint8_t *rowbuf = m;
    m += al64(rowb + 64);
    int32_t *acc = (int32_t *)m;
    m += al64(rowb * 4);
    float *frow[3] = {NULL, NULL, NULL}, *img[2] = {NULL, NULL};
    if (float_path) {
        for (int c = 0; c < 3; c++, m += fplane)
            frow[c] = (float *)m;
        for (int i = 0; i < nimg; i++, m += al64(fimg))
            img[i] = (float *)m;
    }

    /* 8. Horizontal pass (or a plain copy, so the vertical windows padded
     * with zero weights can read past the last row). */
    const uint8_t *vsrc = view.pixels;
    ptrdiff_t vstride = view.row_stride;
    if (need_h || need_v) {
        for (int32_t r = 0; r < rows; r++) {
            const uint8_t *s = view.pixels + (ptrdiff_t)r * view.row_stride;
            if (need_h)
                rk->hpass(&ax, s, tmp + (size_t)r * tstride, nc);
            else
                memcpy(tmp + (size_t)r * tstride, s, rowb);
        }
        memset(tmp + (size_t)rows * tstride, 0, tstride * ((size_t)ky + 1));
        vsrc = tmp;
        vstride = (ptrdiff_t)tstride;
    }

    /* 9. Rows: vertical pass, then the output or the float segments. */
    const stk_outfmt *fmt = &ip->fmt;
    stk_rotation rots[MAX_ROT];
    for (int r = 0; r < dr.nrot; r++) {
        const tail_op *t = NULL;
        for (int k = 0, seen = 0; k < ip->ntail; k++)
            if (ip->tail[k].kind == T_ROTATE && seen++ == r)
                t = &ip->tail[k];
        stk_rotation_init(&rots[r], dr.angle[r], OW, OH, t ? t->fill : NULL, nc);
    }
    size_t plane = (size_t)OW * OH;
    int cur = 0;
    float contrast_b = 0.0f;
    for (int s = 0; s < nseg; s++) {
        int k0 = segb[s], k1 = segb[s + 1], last = s == nseg - 1;
        int first_kind = s > 0 ? dr.steps[k0].kind : -1;
        int want_gray = !last && dr.steps[k1].kind == S_CONTRAST;
        int dst_img = cur;
        if (first_kind == S_ROT && !last)
            dst_img = 1 - cur;
        double gsum = 0.0;
        if (first_kind == S_CONTRAST)
            k0++; /* applied below with the image's mean */
        else if (first_kind == S_ROT)
            k0++;
        for (int32_t y = 0; y < OH; y++) {
            const uint8_t *row = NULL;
            if (s == 0) {
                if (need_v) {
                    rk->vpass(&ay, y, vsrc, vstride, rowb, rowbuf, acc);
                    row = rowbuf;
                } else {
                    row = vsrc + (ptrdiff_t)(dr.vflip ? OH - 1 - y : y) * vstride;
                }
                if (dr.has_lut[1]) { /* point ops after the resize: on each row */
                    for (size_t i = 0; i < rowb; i++)
                        rowbuf[i] = dr.lut[1][row[i]];
                    row = rowbuf;
                }
                if (!float_path) {
                    ck->u8_to_out(fmt, row, y, out);
                    continue;
                }
            }
            float *p[3] = {frow[0], frow[1], frow[2]};
            if (s == 0) {
                if (!last) /* straight into the parked image */
                    for (int c = 0; c < nc; c++)
                        p[c] = img[dst_img] + c * plane + (size_t)y * OW;
                ck->u8_to_float(row, OW, nc, p);
            } else if (first_kind == S_ROT) {
                if (!last)
                    for (int c = 0; c < nc; c++)
                        p[c] = img[dst_img] + c * plane + (size_t)y * OW;
                ck->rotate_row(&rots[dr.steps[k0 - 1].rot], img[cur], nc, y, p);
            } else {
                for (int c = 0; c < nc; c++)
                    p[c] = img[cur] + c * plane + (size_t)y * OW;
                ck->contrast(p, OW, nc, dr.steps[k0 - 1].f, contrast_b);
            }
            for (int k = k0; k < k1; k++) {
                const step *st = &dr.steps[k];
                switch (st->kind) {
                case S_BRIGHT: ck->brightness(p, OW, nc, st->f); break;
                case S_SAT: ck->saturation(p, OW, nc, st->f, st->g); break;
                case S_HUE: ck->hue(p, OW, nc, st->f); break;
                default: break; /* contrast and rotation start segments */
                }
            }
            if (last) {
                ck->float_to_out(fmt, p, y, out);
                continue;
            }
            if (want_gray)
                gsum += ck->gray_sum(p, OW, nc);
            for (int c = 0; c < nc; c++) {
                float *dst = img[dst_img] + c * plane + (size_t)y * OW;
                if (dst != p[c])
                    memcpy(dst, p[c], (size_t)OW * 4);
            }
        }
        cur = dst_img;
        if (want_gray) {
            float mean = (float)(gsum / (double)plane);
            contrast_b = dr.steps[k1].g * mean;
        }
    }
    ck->fence();
    return 0;
}
