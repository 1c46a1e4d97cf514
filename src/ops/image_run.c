/*
 * image_run.c — the pixel work of the image pipeline (stk_imgplan_run; the
 * essay in image_plan.c describes the steps): size the input, take the
 * draws (image_draws.c), choose the DCT scale, decode or copy the region
 * the resample windows touch into the worker's scratch, apply the point-op
 * table of the ops before the resize, resample (horizontal then vertical
 * pass), apply the table of the ops after it, and write each row out,
 * through the float tail's segments when there are rotations or colour
 * jitter.
 */
#include "ops/image_plan_impl.h"

#include "ops/half.h"
#include "core/error.h"
#include "core/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------- */
/* Scratch                                                                 */
/* ---------------------------------------------------------------------- */

static size_t al64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Make s->cap >= bytes keeping its first `keep` bytes. Grows by doubling,
 * but never past `limit` when it is nonzero (a decode budget) and bytes
 * fits within it. */
static int reserve_keep(stk_scratch *s, size_t bytes, size_t keep, uint64_t limit)
{
    if (s->cap >= bytes)
        return 0;
    size_t cap = s->cap ? s->cap : 65536;
    while (cap < bytes)
        cap = cap > SIZE_MAX / 2 ? bytes : cap * 2;
    if (limit && cap > limit && bytes <= limit)
        cap = bytes;
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

/* The pipeline's own scratch for an encoded image against the decode
 * budget: `need` bytes (the decoded region and the resampling workspace).
 * STK_EDATA over it: one image too large for the memory given is one bad
 * sample, which the loader names and on_error may skip. */
static int budget_check(const stk_plan_input *in, const stk_image_info *info, uint64_t need)
{
    if (!in->decode_budget || need <= in->decode_budget)
        return 0;
    return stk_fail(STK_EDATA,
                    "%s: the %ux%u image needs %llu bytes (%.1f MiB) of pipeline scratch, over "
                    "the decode budget of %llu bytes (%.1f MiB) that memory_limit leaves each "
                    "worker thread",
                    stk_image_format_name(info->format), info->width, info->height,
                    (unsigned long long)need, (double)need / (1024.0 * 1024.0),
                    (unsigned long long)in->decode_budget,
                    (double)in->decode_budget / (1024.0 * 1024.0));
}

/* Copy rows [y0, y0+h) and columns [x0, x0+w) of a raw view into dst as
 * nc-channel HWC rows `dstride` bytes apart: 1 -> 3 channels replicates, 2
 * (gray + alpha) takes the gray, 4 drops alpha. */
static void copy_raw(const stk_image_view *v, int64_t x0, int64_t y0, int64_t w, int64_t h,
                     int nc, uint8_t *dst, size_t dstride)
{
    uint32_t C = v->channels;
    for (int64_t y = 0; y < h; y++) {
        const uint8_t *row = v->pixels + (y0 + y) * v->row_stride + x0 * v->col_stride;
        uint8_t *d = dst + (size_t)y * dstride;
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

/* Output row y of the head: the vertical pass (or the row itself), then the
 * table of the point ops after the resize (lut, or NULL). */
static const uint8_t *head_row(const stk_rs_kernels *rk, const stk_rs_axis *ay, int32_t y,
                               int need_v, const uint8_t *vsrc, ptrdiff_t vstride, size_t rowb,
                               uint8_t *rowbuf, int32_t *acc, int32_t OH, int vflip,
                               const uint8_t *lut)
{
    const uint8_t *row;
    if (need_v) {
        rk->vpass(ay, y, vsrc, vstride, rowb, rowbuf, acc);
        row = rowbuf;
    } else {
        row = vsrc + (ptrdiff_t)(vflip ? OH - 1 - y : y) * vstride;
    }
    if (lut) { /* point ops after the resize: on each row */
        for (size_t i = 0; i < rowb; i++)
            rowbuf[i] = lut[row[i]];
        row = rowbuf;
    }
    return row;
}

typedef struct axis_plan {
    stk_rs_params p;   /* in decoded pixels, relative to the decoded domain */
    int64_t dd0;       /* decoded index of the domain start */
    int32_t f, e;      /* used range, relative to the domain */
    int identity;
} axis_plan;

static int axis_setup(const stk_axis_geo *g, unsigned d, int filter, axis_plan *a)
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
    a->p.filter = g->resized ? filter : STK_RS_BILINEAR;
    a->p.out = (int32_t)out;
    a->p.off = (int32_t)off;
    a->p.in0 = d == 1 ? 0.0 : (double)dom0 / d - (double)a->dd0;
    a->p.scale = scale / d;
    if (stk_rs_range(&a->p, &a->f, &a->e, &a->identity) < 0)
        return stk_fail(STK_EDATA, "image geometry out of range");
    return 0;
}

/* One output element of value v in the output dtype (u8: rounded, clamped). */
static void put_value(const stk_outfmt *o, void *out, size_t at, float v)
{
    switch (o->dtype) {
    case STK_U8: {
        float u = nearbyintf(v);
        ((uint8_t *)out)[at] = (uint8_t)(u < 0.0f ? 0.0f : u > 255.0f ? 255.0f : u);
        break;
    }
    case STK_F32: ((float *)out)[at] = v; break;
    case STK_BF16: ((uint16_t *)out)[at] = stk_f32_to_bf16(v); break;
    default: ((uint16_t *)out)[at] = stk_f32_to_f16(v); break;
    }
}

/* random_erasing: the rectangle r = (top, left, h, w) of the finished
 * output takes e's value[c] (output units) in the output dtype, or with
 * value=random standard normal noise drawn from `rng` in C, H, W order
 * (Box-Muller: u1, u2 -> two normals). */
static void erase_out(const stk_outfmt *o, const stk_erase_op *e, const int32_t *r, stk_rng *rng,
                      void *out)
{
    int nc = o->nc, have = 0;
    size_t W = (size_t)o->width, plane = W * (size_t)o->height;
    double spare = 0.0;
    for (int c = 0; c < nc; c++)
        for (int32_t y = r[0]; y < r[0] + r[2]; y++)
            for (int32_t x = r[1]; x < r[1] + r[3]; x++) {
                size_t at = o->layout == STK_CHW || nc == 1
                                ? (size_t)c * plane + (size_t)y * W + (size_t)x
                                : ((size_t)y * W + (size_t)x) * (size_t)nc + (size_t)c;
                float v = e->value[c];
                if (e->random) {
                    if (have) {
                        v = (float)spare;
                        have = 0;
                    } else {
                        double u1 = 1.0 - stk_rng_uniform(rng), u2 = stk_rng_uniform(rng);
                        double m = sqrt(-2.0 * log(u1)), a = 6.283185307179586 * u2;
                        v = (float)(m * cos(a));
                        spare = m * sin(a);
                        have = 1;
                    }
                }
                put_value(o, out, at, v);
            }
}

static int run_impl(const stk_imgplan *ip, const stk_plan_input *in, stk_rng *rng, void *out,
                    stk_scratch *scratch, stk_plan_trace *trace, int decode_pixels,
                    stk_draws *dr_out);

int stk_imgplan_run(const stk_imgplan *ip, const stk_plan_input *in, stk_rng *rng, void *out,
                    stk_scratch *scratch, stk_plan_trace *trace, int decode_pixels)
{
    return run_impl(ip, in, rng, out, scratch, trace, decode_pixels, NULL);
}

int stk_imgplan_run_draws(const stk_imgplan *ip, const stk_plan_input *in, stk_rng *rng,
                          void *out, stk_scratch *scratch, stk_draws *dr)
{
    return run_impl(ip, in, rng, out, scratch, NULL, 1, dr);
}

/* What steps 1-4 of a run found: where the pixels come from, the DCT
 * scale, both axes in decoded pixels and the region they touch. */
enum { SRC_ENC, SRC_RAW, SRC_PREFIX };
typedef struct img_geo {
    int kind;
    stk_image_info info;
    int64_t W, H;
    unsigned d;
    axis_plan xa, ya;
    int64_t rx0, rx1, ry0, ry1;
    int32_t cols, rows;
    /* A domain that leaves the source (a padding center_crop): the region
     * [rx0, rx1) x [ry0, ry1) reaches outside it, d is 1, and only its part
     * [ix0, ix1) x [iy0, iy1) inside the source is decoded (at least one
     * pixel, so a corrupt image still fails); the rest reads as pad_val. */
    int padded;
    int64_t ix0, ix1, iy0, iy1;
} img_geo;

/* Steps 1-4: size the input (running the prefix plan into the scratch),
 * draw, choose the DCT scale (at most 1/dmax: 8, or 1 for a GPU decoder
 * without scaled decoding), set up both axes; fill the trace. */
static int img_geometry(const stk_imgplan *ip, const stk_plan_input *in, stk_rng *rng,
                        stk_scratch *scratch, stk_plan_trace *trace, int decode_pixels,
                        unsigned dmax, stk_draws *dr, img_geo *g)
{
    int kind;
    stk_image_info info;
    int64_t W, H;
    int rc, nc = ip->nc;

    if (trace)
        memset(trace, 0, sizeof *trace);
    (void)decode_pixels;
    if (!in || !scratch)
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
            if ((rc = reserve_keep(scratch, pb + 64, 0, 0)) < 0)
                return rc;
            if ((rc = stk_fixplan_run(ip->prefix, v, rng, scratch->data)) < 0)
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
    if ((rc = stk_imgplan_draw(ip, rng, W, H, in->boxes, in->nboxes, dr, trace)) < 0)
        return rc;

    /* 3. DCT scale. (Never with a border: a pad is whole source pixels,
     * which a reduced decode's pixels do not line up with.) */
    unsigned d = 1;
    int padded = dr->ax.a < 0 || dr->ax.b > W || dr->ay.a < 0 || dr->ay.b > H;
    if (padded && kind == SRC_PREFIX)
        return stk_fail(STK_EINVAL, "image pipeline: a border on a fixed-size image");
    /* (nearest picks pixels: a reduced IDCT would average them, so never) */
    /* (the scales a format decodes at come from its codec's row: JPEG's
     * 1/2, 1/4, 1/8 today) */
    if (!padded && kind == SRC_ENC && ip->filter != STK_RS_NEAREST) {
        unsigned scales = stk_image_format_scales(info.format);
        double sx = dr->ax.resized ? dr->ax.scale : 1.0, sy = dr->ay.resized ? dr->ay.scale : 1.0;
        for (d = dmax; d > 1; d /= 2)
            if ((scales & (1u << d)) && sx >= (double)d && sy >= (double)d)
                break;
    }

    /* 4. What the windows touch. */
    axis_plan xa, ya;
    if ((rc = axis_setup(&dr->ax, d, ip->filter, &xa)) < 0 ||
        (rc = axis_setup(&dr->ay, d, ip->filter, &ya)) < 0)
        return rc;
    if (xa.p.out != (int32_t)ip->head_w || ya.p.out != (int32_t)ip->head_h)
        return stk_fail(STK_EINVAL, "image pipeline: geometry gave %dx%d, expected %ux%u",
                        ya.p.out, xa.p.out, ip->head_h, ip->head_w);
    int64_t rx0 = (xa.dd0 + xa.f) * d, rx1 = (xa.dd0 + xa.e) * d;
    int64_t ry0 = (ya.dd0 + ya.f) * d, ry1 = (ya.dd0 + ya.e) * d;
    if (rx1 > W && !padded)
        rx1 = W;
    if (ry1 > H && !padded)
        ry1 = H;
    int32_t cols = xa.e - xa.f, rows = ya.e - ya.f;
    /* The decoded part of a padded region: inside the source, not empty. */
    int64_t ix0 = rx0 < 0 ? 0 : rx0, ix1 = rx1 > W ? W : rx1;
    int64_t iy0 = ry0 < 0 ? 0 : ry0, iy1 = ry1 > H ? H : ry1;
    if (ix0 >= ix1) {
        ix0 = ix0 >= W ? W - 1 : ix0;
        ix1 = ix0 + 1;
    }
    if (iy0 >= iy1) {
        iy0 = iy0 >= H ? H - 1 : iy0;
        iy1 = iy0 + 1;
    }

    if (trace) {
        stk_plan_trace *t = trace;
        t->src_width = (uint32_t)W;
        t->src_height = (uint32_t)H;
        t->resized = dr->ax.resized;
        t->rrc_attempt = dr->rrc_attempt;
        t->box[0] = dr->ax.a;
        t->box[1] = dr->ay.a;
        t->box[2] = dr->ax.b - dr->ax.a;
        t->box[3] = dr->ay.b - dr->ay.a;
        t->scale[0] = dr->ax.resized ? dr->ax.scale : 1.0;
        t->scale[1] = dr->ay.resized ? dr->ay.scale : 1.0;
        t->off[0] = dr->ax.resized ? (int32_t)dr->ax.g0 : 0;
        t->off[1] = dr->ay.resized ? (int32_t)dr->ay.g0 : 0;
        t->scale_denom = d;
        t->region[0] = (uint32_t)ix0;
        t->region[1] = (uint32_t)iy0;
        t->region[2] = (uint32_t)(ix1 - ix0);
        t->region[3] = (uint32_t)(iy1 - iy0);
        t->hflip = dr->hflip;
        t->vflip = dr->vflip;
        t->nrot = dr->nrot < 4 ? dr->nrot : 4;
        for (int r = 0; r < t->nrot; r++)
            t->angle[r] = dr->angle[r];
        for (int r = 0; r < t->nrot; r++) {
            t->rot_affine[r] = dr->affine[r];
            if (dr->affine[r])
                memcpy(t->affine[r], dr->aff[r], sizeof t->affine[r]);
        }
        t->naug = dr->naug;
        for (int k = 0; k < dr->naug; k++) {
            t->aug_prim[k] = dr->aug[k].prim;
            t->aug_bin[k] = dr->aug[k].bin;
            t->aug_neg[k] = dr->aug[k].neg;
            t->aug_mag[k] = dr->aug[k].mag;
        }
    }
    g->kind = kind;
    g->info = info;
    g->W = W;
    g->H = H;
    g->d = d;
    g->xa = xa;
    g->ya = ya;
    g->rx0 = rx0;
    g->rx1 = rx1;
    g->ry0 = ry0;
    g->ry1 = ry1;
    g->cols = cols;
    g->rows = rows;
    g->padded = padded;
    g->ix0 = ix0;
    g->ix1 = ix1;
    g->iy0 = iy0;
    g->iy1 = iy1;
    return 0;
}

/* Decode the rectangle x0, y0, w x h (full-resolution pixels) of an
 * encoded input at scale 1/g->d into the scratch (*view), guessing its
 * size from `rows` decoded rows and `extra` bytes to follow. */
static int decode_rect(const stk_plan_input *in, stk_scratch *scratch, const img_geo *g,
                       int64_t x0, int64_t y0, int64_t w, int64_t h, int32_t rows, size_t extra,
                       stk_image_view *view)
{
    int rc;
    unsigned d = g->d;
    int64_t W = g->W;
    uint64_t ow = (uint64_t)((W + d - 1) / d), est;
    if (!stk_mul_ok(ow * 4, (uint64_t)rows + 17, &est) || est > SIZE_MAX / 4)
        return stk_fail(STK_EDATA, "image too large");
    /* (A guess, to save the decoder a reallocation. Under a decode
     * budget it is made only within the budget, and the scratch never
     * doubles past it: the decoder checks what it needs once it has
     * read the header, and the workspace is checked below.) */
    size_t guess = (size_t)est + extra;
    if ((!in->decode_budget || guess <= in->decode_budget) &&
        (rc = reserve_keep(scratch, guess, 0, in->decode_budget)) < 0)
        return rc;
    stk_rect r = {(uint32_t)x0, (uint32_t)y0, (uint32_t)w, (uint32_t)h};
    stk_codec_limits lim = {0, in->decode_budget};
    uint64_t t_dec = in->decode_ticks ? stk_ticks() : 0;
    rc = stk_image_decode(in->encoded, in->encoded_size, in->decode_budget ? &lim : NULL, &r,
                          d, scratch, view);
    if (in->decode_ticks)
        *in->decode_ticks += stk_ticks() - t_dec;
    if (in->decode_own_bytes) {
        uint64_t own;
        stk_image_last_need(NULL, &own);
        if (own > *in->decode_own_bytes)
            *in->decode_own_bytes = own;
    }
    if (rc == STK_ELIMIT)
        rc = STK_EDATA; /* one oversized image is one bad sample */
    return rc < 0 ? rc : 0;
}

/* Step 6 for a region that leaves the source (g->padded, d = 1): its
 * part inside the source decoded or copied as img_source does, then laid
 * into a cols x rows buffer after it whose border reads pad_val, so the
 * resample windows see the zeros of torchvision's padded image (and a
 * resize after the crop averages over them, as Pillow's does). The table
 * of the point ops before the resize maps the source part only: the
 * border's value already went through the ops after its pad. */
static int img_source_padded(const stk_imgplan *ip, const stk_plan_input *in,
                             stk_scratch *scratch, const img_geo *g, const stk_draws *dr,
                             size_t ws, size_t slack, stk_image_view *view_out,
                             size_t *ws_off_out)
{
    int rc, nc = ip->nc;
    int32_t cols = g->cols, rows = g->rows;
    int64_t iw = g->ix1 - g->ix0, ih = g->iy1 - g->iy0;
    size_t sb = (size_t)cols * (size_t)rows * (size_t)nc;
    stk_image_view sv;      /* the source part */
    int64_t sx = 0, sy = 0; /* its first column and row in source pixels */
    size_t sv_off = 0, keep = 0, pad_off = 0;
    if (g->kind == SRC_ENC) {
        if ((rc = decode_rect(in, scratch, g, g->ix0, g->iy0, iw, ih, (int32_t)ih,
                              al64(sb) + slack + ws, &sv)) < 0)
            return rc;
        if (sv.width != (uint32_t)iw || sv.height != (uint32_t)ih || sv.channels != 3 ||
            sv.col_stride != 3 || sv.chan_stride != 1)
            return stk_fail(STK_EDATA,
                            "decoder returned %ux%ux%u pixels for a %lldx%lld region",
                            sv.height, sv.width, sv.channels, (long long)ih, (long long)iw);
        sv_off = (size_t)(sv.pixels - scratch->data);
        keep = sv_off + (size_t)(ih - 1) * (size_t)sv.row_stride + (size_t)iw * 3;
        pad_off = al64(keep);
        sx = g->ix0;
        sy = g->iy0;
    } else if (g->kind == SRC_RAW) {
        sv = *in->image;
    } else {
        return stk_fail(STK_EINVAL, "image pipeline: a border on a fixed-size image");
    }
    size_t src_end = pad_off + sb, ws_off = al64(src_end + slack);
    if (g->kind == SRC_ENC && (rc = budget_check(in, &g->info, (uint64_t)ws_off + ws)) < 0)
        return rc;
    if ((rc = reserve_keep(scratch, ws_off + ws, keep,
                           g->kind == SRC_ENC ? in->decode_budget : 0)) < 0)
        return rc;
    uint8_t *base = scratch->data, *dst = base + pad_off;
    if (g->kind == SRC_ENC)
        sv.pixels = base + sv_off;
    memset(dst, dr->pad_val, sb);
    /* The source inside the region (none when a later crop kept only
     * border: the pixel decoded then only checks the image decodes). */
    int64_t ox0 = g->rx0 > 0 ? g->rx0 : 0, ox1 = g->rx1 < g->W ? g->rx1 : g->W;
    int64_t oy0 = g->ry0 > 0 ? g->ry0 : 0, oy1 = g->ry1 < g->H ? g->ry1 : g->H;
    size_t dstride = (size_t)cols * (size_t)nc;
    if (ox0 < ox1 && oy0 < oy1) {
        uint8_t *at = dst + (size_t)(oy0 - g->ry0) * dstride + (size_t)(ox0 - g->rx0) * nc;
        size_t n = (size_t)(ox1 - ox0) * (size_t)nc;
        copy_raw(&sv, ox0 - sx, oy0 - sy, ox1 - ox0, oy1 - oy0, nc, at, dstride);
        if (dr->has_lut[0])
            for (int64_t r = 0; r < oy1 - oy0; r++) {
                uint8_t *px = at + (size_t)r * dstride;
                for (size_t i = 0; i < n; i++)
                    px[i] = dr->lut[0][px[i]];
            }
    }
    memset(base + src_end, 0, ws_off - src_end);
    stk_image_view view = {0};
    view.pixels = dst;
    view.width = (uint32_t)cols;
    view.height = (uint32_t)rows;
    view.channels = (uint32_t)nc;
    view.row_stride = (ptrdiff_t)dstride;
    view.col_stride = nc;
    view.chan_stride = 1;
    *view_out = view;
    *ws_off_out = ws_off;
    return 0;
}

/* Step 6: the source pixels at the start of the scratch, with `ws` bytes
 * of workspace after them at *ws_off (64-aligned, past the resample
 * slack of `kx` taps, zeroed up to it); then the point-op table of the ops
 * before the resize, applied to them. */
static int img_source(const stk_imgplan *ip, const stk_plan_input *in, stk_scratch *scratch,
                      const img_geo *g, const stk_draws *dr, size_t ws, int32_t kx,
                      stk_image_view *view_out, size_t *ws_off_out)
{
    int rc, nc = ip->nc;
    int kind = g->kind;
    unsigned d = g->d;
    int64_t rx0 = g->rx0, rx1 = g->rx1, ry0 = g->ry0, ry1 = g->ry1;
    int32_t cols = g->cols, rows = g->rows;
    size_t slack = STK_RS_SLACK(kx, nc) + 64;
    stk_image_view view;
    size_t src_end;
    if (g->padded)
        return img_source_padded(ip, in, scratch, g, dr, ws, slack, view_out, ws_off_out);
    if (kind == SRC_ENC) {
        if ((rc = decode_rect(in, scratch, g, rx0, ry0, rx1 - rx0, ry1 - ry0, rows, slack + ws,
                              &view)) < 0)
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
        if ((rc = reserve_keep(scratch, al64(sb + slack) + ws, 0, 0)) < 0)
            return rc;
        copy_raw(in->image, rx0, ry0, cols, rows, nc, scratch->data, (size_t)cols * nc);
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
    if (kind == SRC_ENC && (rc = budget_check(in, &g->info, (uint64_t)ws_off + ws)) < 0)
        return rc;
    if ((rc = reserve_keep(scratch, ws_off + ws, src_end,
                           kind == SRC_ENC ? in->decode_budget : 0)) < 0)
        return rc;
    uint8_t *base = scratch->data;
    view.pixels = base + pix_off;
    memset(base + src_end, 0, ws_off - src_end);
    if (dr->has_lut[0]) /* point ops before the resize: on the source pixels */
        for (int32_t r = 0; r < rows; r++) {
            uint8_t *px = base + pix_off + (size_t)r * (size_t)view.row_stride;
            for (size_t i = 0; i < (size_t)cols * (size_t)nc; i++)
                px[i] = dr->lut[0][px[i]];
        }
    *view_out = view;
    *ws_off_out = ws_off;
    return 0;
}

/* Both axes of a prepared row, from its geometry and draws. */
static void prepared_axes(const img_geo *g, const stk_draws *dr, stk_img_prepared *pr)
{
    pr->xp = g->xa.p;
    pr->yp = g->ya.p;
    pr->xf = g->xa.f;
    pr->yf = g->ya.f;
    pr->need_h = !g->xa.identity || dr->hflip;
    pr->need_v = !g->ya.identity;
}

int stk_imgplan_prepare(const stk_imgplan *ip, const stk_plan_input *in, stk_rng *rng,
                        stk_scratch *scratch, stk_draws *dr, stk_img_prepared *pr)
{
    img_geo g;
    int rc;
    if ((rc = img_geometry(ip, in, rng, scratch, NULL, 1, 8, dr, &g)) < 0)
        return rc;
    int32_t kx = stk_rs_ksize(g.xa.p.scale, g.xa.p.filter);
    if ((rc = img_source(ip, in, scratch, &g, dr, 0, kx, &pr->view, &pr->ws_off)) < 0)
        return rc;
    prepared_axes(&g, dr, pr);
    return 0;
}

int stk_imgplan_prepare_jpeg(const stk_imgplan *ip, const stk_plan_input *in, stk_rng *rng,
                             stk_scratch *scratch, unsigned dmax, stk_draws *dr,
                             stk_img_prepared *pr, stk_img_jpeg *jr)
{
    img_geo g;
    int rc;
    if (dmax != 1 && dmax != 2 && dmax != 4 && dmax != 8)
        return stk_fail(STK_EINVAL, "stk_imgplan_prepare_jpeg: dmax %u", dmax);
    if ((rc = img_geometry(ip, in, rng, scratch, NULL, 1, dmax, dr, &g)) < 0)
        return rc;
    if (g.kind != SRC_ENC || g.info.format != STK_IMAGE_JPEG || dr->has_lut[0] || g.padded)
        return 0;
    memset(pr, 0, sizeof *pr);
    pr->view.width = (uint32_t)g.cols;
    pr->view.height = (uint32_t)g.rows;
    pr->view.channels = 3;
    prepared_axes(&g, dr, pr);
    jr->info = g.info;
    jr->region.x = (uint32_t)g.rx0;
    jr->region.y = (uint32_t)g.ry0;
    jr->region.width = (uint32_t)(g.rx1 - g.rx0);
    jr->region.height = (uint32_t)(g.ry1 - g.ry0);
    jr->d = g.d;
    jr->cols = (uint32_t)g.cols;
    jr->rows = (uint32_t)g.rows;
    return 1;
}

/* Whether a float-tail step reads other rows of the image: a rotation, or
 * a whole-image float op (op.h). Such a step starts a segment. */
static int reads_image(const stk_imgplan *ip, const stk_draw_step *st)
{
    return st->kind == S_ROT || (st->kind == S_FOP && ip->tail[st->tail].lut->fl->whole_image);
}

static int run_impl(const stk_imgplan *ip, const stk_plan_input *in, stk_rng *rng, void *out,
                    stk_scratch *scratch, stk_plan_trace *trace, int decode_pixels,
                    stk_draws *dr_out)
{
    int rc, nc = ip->nc;
    /* The draws: the caller's (stk_imgplan_run_draws hands them on to
     * spatial.c), else this frame's. */
    stk_draws own, *dr = dr_out ? dr_out : &own;
    img_geo g;
    if (decode_pixels && !out)
        return stk_fail(STK_EINVAL, "stk_plan_run_input: NULL argument");
    if ((rc = img_geometry(ip, in, rng, scratch, trace, decode_pixels, 8, dr, &g)) < 0)
        return rc;
    if (!decode_pixels)
        return 0;
    axis_plan xa = g.xa, ya = g.ya;
    int32_t rows = g.rows;

    /* 5. Workspace sizes. OW x OH x nc is the head's output here; after the
     * uint8 stage (user ops may resize) it becomes the plan's output. */
    const stk_rs_kernels *rk = ip->rk;
    const stk_color_kernels *ck = ip->ck;
    int group = nc == 3 ? rk->group : 0;
    int32_t OW = (int32_t)ip->head_w, OH = (int32_t)ip->head_h;
    int need_h = !xa.identity || dr->hflip, need_v = !ya.identity;
    int32_t ky = stk_rs_ksize(ya.p.scale, ya.p.filter), kx = stk_rs_ksize(xa.p.scale, xa.p.filter);
    size_t bx = stk_rs_axis_bytes(&xa.p, group), by = stk_rs_axis_bytes(&ya.p, 0);
    if (!bx || !by)
        return stk_fail(STK_EDATA, "image geometry out of range");
    size_t rowb = (size_t)OW * nc, tstride = al64(rowb + 64);
    size_t tmp_bytes = (need_h || need_v) ? tstride * ((size_t)rows + (size_t)ky + 1) : 0;
    size_t fplane = al64((size_t)ip->out_w * 4),
           fimg = (size_t)ip->out_w * ip->out_h * 4 * (size_t)ip->fmt.nc;

    /* Segments of the float tail: boundaries before contrast, rotations
     * and the whole-image float ops (the last two read other rows of the
     * image). */
    int nseg = 1, segb[4 * STK_SPEC_MAX_OPS + 2], nimg = 0;
    segb[0] = 0;
    for (int k = 0; k < dr->nsteps; k++)
        if (dr->steps[k].kind == S_CONTRAST || reads_image(ip, &dr->steps[k]))
            segb[nseg++] = k;
    segb[nseg] = dr->nsteps;
    int float_path = dr->nsteps > 0;
    if (nseg > 1)
        nimg = 1;
    for (int s = 1; s < nseg - 1; s++)
        if (reads_image(ip, &dr->steps[segb[s]]))
            nimg = 2;
    /* Every term is below 2^50 (sides < 2^30, region under the pixel
     * limit); refuse a sum no machine could hold rather than wrap. */
    size_t aug_bytes = dr->naug || dr->nuser ? al64(ip->u8_bytes) : 0;
    uint64_t ws64 = (uint64_t)bx + by + tmp_bytes + al64(rowb + 64) + al64(rowb * 4) +
                    2 * (uint64_t)aug_bytes +
                    (float_path ? 4 * (uint64_t)fplane + (uint64_t)nimg * al64(fimg) : 0) + 256;
    if (ws64 > SIZE_MAX / 4)
        return stk_fail(STK_EDATA, "image too large for this pipeline (%llu bytes of buffers)",
                        (unsigned long long)ws64);
    size_t ws = (size_t)ws64;

    /* 6. The source pixels at the start of the scratch, the workspace after. */
    stk_image_view view;
    size_t ws_off;
    if ((rc = img_source(ip, in, scratch, &g, dr, ws, kx, &view, &ws_off)) < 0)
        return rc;
    uint8_t *base = scratch->data;

    /* 7. Tables and buffers. */
    uint8_t *m = base + ws_off;
    stk_rs_axis ax, ay;
    stk_rs_build(&xa.p, xa.f, dr->hflip, group, m, &ax);
    m += al64(bx);
    stk_rs_build(&ya.p, ya.f, dr->vflip, 0, m, &ay);
    m += al64(by);
    uint8_t *tmp = m;
    m += al64(tmp_bytes);
    uint8_t *rowbuf = m;
    m += al64(rowb + 64);
    int32_t *acc = (int32_t *)m;
    m += al64(rowb * 4);
    uint8_t *aug_img = NULL, *aug_tmp = NULL;
    if (aug_bytes) {
        aug_img = m;
        m += aug_bytes;
        aug_tmp = m;
        m += aug_bytes;
    }
    float *frow[3] = {NULL, NULL, NULL}, *img[2] = {NULL, NULL}, *brow = NULL;
    if (float_path) {
        for (int c = 0; c < 3; c++, m += fplane)
            frow[c] = (float *)m;
        brow = (float *)m; /* a whole-image op's row (the blur's vertical pass) */
        m += fplane;
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

    /* 9. The uint8 stage: the policy steps and the user ops in spec order,
     * on the whole image (each user op from aug_img into aug_tmp, then
     * swapped; it may change the size). Then the plan's output size. */
    if (aug_img) {
        for (int32_t y = 0; y < OH; y++)
            memcpy(aug_img + (size_t)y * rowb,
                   head_row(rk, &ay, y, need_v, vsrc, vstride, rowb, rowbuf, acc, OH, dr->vflip,
                            dr->has_lut[1] ? dr->lut[1] : NULL),
                   rowb);
        int32_t cw = OW, ch = OH, cc = nc;
        for (int k = 0, ku = 0; k <= dr->naug; k++) {
            for (; ku < dr->nuser && dr->user_at[ku] <= k; ku++) {
                const stk_user_inst *u = &ip->user[ku];
                if ((rc = stk_user_run(u, dr->uparam[ku], aug_img, aug_tmp)) < 0)
                    return rc;
                uint8_t *t = aug_img;
                aug_img = aug_tmp;
                aug_tmp = t;
                ch = (int32_t)u->out[0];
                cw = (int32_t)u->out[1];
                cc = (int)u->out[2];
            }
            if (k == dr->naug)
                break;
            uint8_t *res = stk_aug_apply(dr->aug[k].prim, dr->aug[k].mag, dr->aug[k].fill, aug_img,
                                         aug_tmp, cw, ch, cc);
            if (res != aug_img) {
                aug_tmp = aug_img;
                aug_img = res;
            }
        }
    }
    OW = (int32_t)ip->out_w;
    OH = (int32_t)ip->out_h;
    nc = ip->fmt.nc;
    rowb = (size_t)OW * nc;

    /* 10. Rows: vertical pass, then the output or the float segments. */
    const stk_outfmt *fmt = &ip->fmt;
    stk_rotation rots[MAX_ROT];
    for (int r = 0; r < dr->nrot; r++) {
        const stk_tail_op *t = NULL;
        for (int k = 0, seen = 0; k < ip->ntail; k++)
            if ((ip->tail[k].kind == T_ROTATE || ip->tail[k].kind == T_AFFINE) && seen++ == r)
                t = &ip->tail[k];
        if (!dr->affine[r]) {
            stk_rotation_init(&rots[r], dr->angle[r], OW, OH, t ? t->fill : NULL, nc);
            continue;
        }
        const double *a = dr->aff[r];
        double am[6];
        stk_aug_inverse_affine(0.0, 0.0, a[0], a[1], a[2], a[3], a[4], a[5], am);
        if (dr->aff_mx[r]) { /* mirror o A o mirror, x */
            am[1] = -am[1];
            am[2] = -am[2];
            am[3] = -am[3];
        }
        if (dr->aff_my[r]) {
            am[1] = -am[1];
            am[3] = -am[3];
            am[5] = -am[5];
        }
        stk_affine_init(&rots[r], am, OW, OH, t ? t->fill : NULL, nc, t ? t->nearest : 1);
    }
    size_t plane = (size_t)OW * OH;
    int cur = 0;
    float contrast_b = 0.0f;
    stk_fop_ctx fctx; /* the set-up of the whole-image float op starting the segment */
    const stk_float_hooks *fop = NULL;
    for (int s = 0; s < nseg; s++) {
        int k0 = segb[s], k1 = segb[s + 1], last = s == nseg - 1;
        int first_kind = s > 0 ? dr->steps[k0].kind : -1;
        int want_gray = !last && dr->steps[k1].kind == S_CONTRAST;
        int dst_img = cur;
        if ((first_kind == S_ROT || first_kind == S_FOP) && !last)
            dst_img = 1 - cur;
        double gsum = 0.0;
        if (first_kind == S_CONTRAST)
            k0++; /* applied below with the image's mean */
        else if (first_kind == S_ROT)
            k0++;
        else if (first_kind == S_FOP) {
            const stk_draw_step *st = &dr->steps[k0];
            const stk_tail_op *t = &ip->tail[st->tail];
            fop = t->lut->fl;
            fop->begin(t->state, dr->fparam[st->rot], OW, OH, nc, brow, &fctx);
            k0++;
        }
        for (int32_t y = 0; y < OH; y++) {
            const uint8_t *row = NULL;
            if (s == 0) {
                row = aug_img ? aug_img + (size_t)y * rowb
                              : head_row(rk, &ay, y, need_v, vsrc, vstride, rowb, rowbuf, acc,
                                         OH, dr->vflip, dr->has_lut[1] ? dr->lut[1] : NULL);
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
                ck->rotate_row(&rots[dr->steps[k0 - 1].rot], img[cur], nc, y, p);
            } else if (first_kind == S_FOP) {
                if (!last)
                    for (int c = 0; c < nc; c++)
                        p[c] = img[dst_img] + c * plane + (size_t)y * OW;
                fop->image_row(&fctx, ck, img[cur], nc, y, p);
            } else {
                for (int c = 0; c < nc; c++)
                    p[c] = img[cur] + c * plane + (size_t)y * OW;
                ck->contrast(p, OW, nc, dr->steps[k0 - 1].f, contrast_b);
            }
            for (int k = k0; k < k1; k++) {
                const stk_draw_step *st = &dr->steps[k];
                switch (st->kind) {
                case S_BRIGHT: ck->brightness(p, OW, nc, st->f); break;
                case S_SAT: ck->saturation(p, OW, nc, st->f, st->g); break;
                case S_HUE: ck->hue(p, OW, nc, st->f); break;
                case S_FOP: { /* a row op (whole-image ones start segments) */
                    const stk_tail_op *t = &ip->tail[st->tail];
                    t->lut->fl->row(t->state, dr->fparam[st->rot], ck, p, OW, nc);
                    break;
                }
                default: break; /* contrast and rotations start segments */
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
            contrast_b = dr->steps[k1].g * mean;
        }
    }
    ck->fence();
    if (dr->nerase) {
        for (int k = 0; k < dr->nerase; k++)
            erase_out(fmt, &ip->erase[dr->erase[k][4]], dr->erase[k], rng, out);
        ck->fence();
    }
    return 0;
}

