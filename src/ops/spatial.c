/*
 * spatial.c — the fields that follow the image: segmentation masks and
 * detection boxes, moved by the same random draws as the image's pixels.
 *
 * The image's geometry is fused (image_draws.c composes the crops, flips
 * and resize into one map per axis, and moves a flip after a rotation
 * before it); the fields are not resampled through that fused map but
 * through the steps as the spec wrote them, replayed from the draws' log
 * (stk_draws.gs), so that each step has torchvision.transforms.v2's
 * semantics for masks and boxes exactly:
 *
 *   mask (one uint8 channel of class ids, never interpolated):
 *     pad      the image's padding mode; constant padding fills 0
 *     flip     mirror
 *     crop     the kept rectangle (random_crop, center_crop, the crop of
 *              random_resized_crop and random_bbox_crop)
 *     resize   torch's "nearest" (interpolate(mode="nearest"), what
 *              torchvision uses for masks): source index
 *              min(floor(i * (float)in / out), in - 1), identity when the
 *              sizes are equal, i >> 1 when the output is twice the input
 *     rotate / affine   F.affine(mask, ..., NEAREST, fill=0): the same
 *              sampling as the image's nearest affine (augment.c)
 *   boxes (XYXY, in double, stored as float32):
 *     pad      shifted by (left, top), clamped to the new canvas
 *     flip     x0' = W - x1, x1' = W - x0 (and likewise vertically)
 *     crop     shifted by (-left, -top), clamped to the crop
 *     random_bbox_crop  also drops the boxes whose centre is outside it
 *     resize   scaled by new / old per axis (no clamping, as torchvision)
 *     rotate / affine   the four corners through the forward matrix of
 *              _get_inverse_affine_matrix(centre, ..., inverted=False),
 *              their bounding box clamped to the canvas
 *   After the last step a box whose width or height is below min_size is
 *   dropped with its row of every per-box field (SanitizeBoundingBoxes).
 *
 * Photometric ops never touch these fields. Augmentation policies
 * (auto_augment, ...) are refused at compile time with fields (their
 * geometric steps are drawn inside the policy and not logged).
 */
#include "ops/image_plan_impl.h"
#include "ops/plan_io.h"
#include "ops/spec.h"

#include "core/error.h"

#include <math.h>
#include <string.h>

/* The source index of output i of a nearest resize from n_in to n_out. */
static int64_t nearest_src(int64_t i, int64_t n_in, int64_t n_out)
{
    if (n_in == n_out)
        return i;
    if (n_out == 2 * n_in)
        return i >> 1;
    float scale = (float)n_in / (float)n_out;
    int64_t s = (int64_t)floorf((float)i * scale);
    return s < n_in - 1 ? s : n_in - 1;
}

/* Index of padded coordinate i (may be < 0 or >= n) in an axis of n. */
static int64_t pad_src(int64_t i, int64_t n, int mode)
{
    if (i >= 0 && i < n)
        return i;
    switch (mode) {
    case STK_PAD_EDGE:
        return i < 0 ? 0 : n - 1;
    case STK_PAD_REFLECT:
        return i < 0 ? -i : 2 * n - 2 - i;
    case STK_PAD_SYMMETRIC:
        return i < 0 ? -i - 1 : 2 * n - 1 - i;
    default:
        return -1; /* constant: 0 */
    }
}

typedef struct mask_buf {
    uint8_t *a, *b; /* current plane, spare plane */
    int64_t h, w;
} mask_buf;

static void swap_planes(mask_buf *m)
{
    uint8_t *t = m->a;
    m->a = m->b;
    m->b = t;
}

static void mask_pad(mask_buf *m, const stk_pad_step *p)
{
    int64_t nh = m->h + p->top + p->bottom, nw = m->w + p->left + p->right;
    for (int64_t y = 0; y < nh; y++) {
        int64_t sy = pad_src(y - (int64_t)p->top, m->h, p->mode);
        uint8_t *d = m->b + y * nw;
        for (int64_t x = 0; x < nw; x++) {
            int64_t sx = pad_src(x - (int64_t)p->left, m->w, p->mode);
            d[x] = (sy < 0 || sx < 0) ? 0 : m->a[sy * m->w + sx];
        }
    }
    m->h = nh;
    m->w = nw;
    swap_planes(m);
}

static void mask_flip(mask_buf *m, int horizontal)
{
    if (horizontal) {
        for (int64_t y = 0; y < m->h; y++) {
            uint8_t *r = m->a + y * m->w;
            for (int64_t i = 0, j = m->w - 1; i < j; i++, j--) {
                uint8_t t = r[i];
                r[i] = r[j];
                r[j] = t;
            }
        }
        return;
    }
    for (int64_t i = 0, j = m->h - 1; i < j; i++, j--)
        for (int64_t x = 0; x < m->w; x++) {
            uint8_t t = m->a[i * m->w + x];
            m->a[i * m->w + x] = m->a[j * m->w + x];
            m->a[j * m->w + x] = t;
        }
}

/* A crop of the mask; a center_crop larger than it (top or left negative,
 * or the rectangle past its end) pads with 0, as torchvision's CenterCrop
 * does masks. */
static void mask_crop(mask_buf *m, const stk_geo_step *s)
{
    if (s->top < 0 || s->left < 0 || s->top + s->h > m->h || s->left + s->w > m->w) {
        int64_t x0 = s->left < 0 ? -s->left : 0;
        int64_t x1 = m->w - s->left < s->w ? m->w - s->left : s->w;
        for (int64_t y = 0; y < s->h; y++) {
            uint8_t *d = m->b + y * s->w;
            int64_t sy = s->top + y;
            memset(d, 0, (size_t)s->w);
            if (sy >= 0 && sy < m->h && x0 < x1)
                memcpy(d + x0, m->a + sy * m->w + s->left + x0, (size_t)(x1 - x0));
        }
    } else {
        for (int64_t y = 0; y < s->h; y++)
            memcpy(m->b + y * s->w, m->a + (s->top + y) * m->w + s->left, (size_t)s->w);
    }
    m->h = s->h;
    m->w = s->w;
    swap_planes(m);
}

static void mask_resize(mask_buf *m, int64_t nh, int64_t nw, int64_t *xs)
{
    for (int64_t x = 0; x < nw; x++)
        xs[x] = nearest_src(x, m->w, nw);
    for (int64_t y = 0; y < nh; y++) {
        const uint8_t *s = m->a + nearest_src(y, m->h, nh) * m->w;
        uint8_t *d = m->b + y * nw;
        for (int64_t x = 0; x < nw; x++)
            d[x] = s[xs[x]];
    }
    m->h = nh;
    m->w = nw;
    swap_planes(m);
}

static void mask_affine(mask_buf *m, const double inv[6])
{
    static const uint8_t zero[3] = {0, 0, 0};
    stk_aug_affine_nearest(inv, m->a, m->b, (int32_t)m->w, (int32_t)m->h, 1, zero);
    swap_planes(m);
}

/* The inverse matrix torchvision resamples a rotation or affine step with
 * (F.rotate: the angle negated; F.affine: as drawn), centre 0. */
static void step_inverse(const stk_geo_step *s, double inv[6])
{
    if (s->kind == GS_ROTATE)
        stk_aug_inverse_affine(0.0, 0.0, -s->a[0], 0.0, 0.0, 1.0, 0.0, 0.0, inv);
    else
        stk_aug_inverse_affine(0.0, 0.0, s->a[0], s->a[1], s->a[2], s->a[3], s->a[4], s->a[5],
                               inv);
}

/* The forward matrix of _get_inverse_affine_matrix(..., inverted=False). */
static void forward_affine(double cx, double cy, double angle, double tx, double ty, double scale,
                           double shx, double shy, double m[6])
{
    const double deg = 3.141592653589793 / 180.0;
    double rot = angle * deg, sx = shx * deg, sy = shy * deg;
    double a = cos(rot - sy) / cos(sy);
    double b = -(a * tan(sx) + sin(rot));
    double c = sin(rot - sy) / cos(sy);
    double d = cos(rot) - c * tan(sx);
    m[0] = a * scale;
    m[1] = b * scale;
    m[2] = 0.0;
    m[3] = c * scale;
    m[4] = d * scale;
    m[5] = 0.0;
    m[2] += cx + tx - m[0] * cx - m[1] * cy;
    m[5] += cy + ty - m[3] * cx - m[4] * cy;
}

static double clampd(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

static void box_clamp(double *b, double w, double h)
{
    b[0] = clampd(b[0], 0.0, w);
    b[2] = clampd(b[2], 0.0, w);
    b[1] = clampd(b[1], 0.0, h);
    b[3] = clampd(b[3], 0.0, h);
}

/* One step on one box of a canvas w x h (updated by the caller). */
static void box_step(const stk_geo_step *s, double *b, double w, double h, uint8_t *keep)
{
    switch (s->kind) {
    case GS_HFLIP: {
        double x0 = b[0];
        b[0] = w - b[2];
        b[2] = w - x0;
        break;
    }
    case GS_VFLIP: {
        double y0 = b[1];
        b[1] = h - b[3];
        b[3] = h - y0;
        break;
    }
    case GS_BBOX_CROP: {
        double cx = 0.5 * (b[0] + b[2]), cy = 0.5 * (b[1] + b[3]);
        double l = (double)s->left, t = (double)s->top;
        if (s->w != (int64_t)w || s->h != (int64_t)h) /* a crop was taken */
            if (!(l < cx && cx < l + (double)s->w && t < cy && cy < t + (double)s->h))
                *keep = 0;
    }
        /* fall through */
    case GS_CROP:
        b[0] -= (double)s->left;
        b[2] -= (double)s->left;
        b[1] -= (double)s->top;
        b[3] -= (double)s->top;
        box_clamp(b, (double)s->w, (double)s->h);
        break;
    case GS_RESIZE: {
        double rw = (double)s->w / w, rh = (double)s->h / h;
        b[0] *= rw;
        b[2] *= rw;
        b[1] *= rh;
        b[3] *= rh;
        break;
    }
    case GS_ROTATE:
    case GS_AFFINE: {
        double m[6];
        if (s->kind == GS_ROTATE)
            forward_affine(0.5 * w, 0.5 * h, -s->a[0], 0.0, 0.0, 1.0, 0.0, 0.0, m);
        else
            forward_affine(0.5 * w, 0.5 * h, s->a[0], s->a[1], s->a[2], s->a[3], s->a[4],
                           s->a[5], m);
        double px[4] = {b[0], b[2], b[2], b[0]}, py[4] = {b[1], b[1], b[3], b[3]};
        double x0 = INFINITY, y0 = INFINITY, x1 = -INFINITY, y1 = -INFINITY;
        for (int k = 0; k < 4; k++) {
            double x = m[0] * px[k] + m[1] * py[k] + m[2];
            double y = m[3] * px[k] + m[4] * py[k] + m[5];
            x0 = x < x0 ? x : x0;
            x1 = x > x1 ? x : x1;
            y0 = y < y0 ? y : y0;
            y1 = y > y1 ? y : y1;
        }
        b[0] = x0;
        b[1] = y0;
        b[2] = x1;
        b[3] = y1;
        box_clamp(b, w, h);
        break;
    }
    }
}

/* The canvas size after step s. */
static void step_size(const stk_geo_step *s, int64_t *h, int64_t *w)
{
    if (s->kind == GS_CROP || s->kind == GS_BBOX_CROP || s->kind == GS_RESIZE) {
        *h = s->h;
        *w = s->w;
    }
}

static int run_boxes(const stk_imgplan *ip, const stk_draws *dr, int64_t H0, int64_t W0,
                     stk_spatial *sp)
{
    sp->nkept = 0;
    for (uint32_t i = 0; i < sp->nboxes; i++) {
        const float *in = sp->boxes_in + 4 * (size_t)i;
        double b[4] = {in[0], in[1], in[2], in[3]};
        uint8_t keep = 1;
        int64_t h = H0, w = W0;
        for (int k = 0; k < ip->npads; k++) {
            const stk_pad_step *p = &ip->pads[k];
            h += p->top + p->bottom;
            w += p->left + p->right;
            b[0] += p->left;
            b[2] += p->left;
            b[1] += p->top;
            b[3] += p->top;
            box_clamp(b, (double)w, (double)h);
        }
        for (int k = 0; k < dr->ngs; k++) {
            box_step(&dr->gs[k], b, (double)w, (double)h, &keep);
            step_size(&dr->gs[k], &h, &w);
        }
        if (keep && !(b[2] - b[0] >= (double)sp->min_size && b[3] - b[1] >= (double)sp->min_size))
            keep = 0;
        if (sp->keep)
            sp->keep[i] = keep;
        if (keep) {
            float *o = sp->boxes_out + 4 * (size_t)sp->nkept++;
            for (int c = 0; c < 4; c++)
                o[c] = (float)b[c];
        }
    }
    return 0;
}

static int run_mask(const stk_imgplan *ip, const stk_draws *dr, int64_t H0, int64_t W0,
                    const stk_image_view *in, uint8_t *dst, stk_scratch *work)
{
    if ((int64_t)in->height != H0 || (int64_t)in->width != W0 || in->channels != 1)
        return stk_fail(STK_EDATA, "mask of %ux%ux%u (HxWxC) does not match its %lldx%lld image",
                        in->height, in->width, in->channels, (long long)H0, (long long)W0);
    /* The largest plane any step makes. */
    int64_t h = H0, w = W0, maxpix = H0 * W0, maxside = W0 > H0 ? W0 : H0;
    for (int k = 0; k < ip->npads; k++) {
        h += ip->pads[k].top + ip->pads[k].bottom;
        w += ip->pads[k].left + ip->pads[k].right;
        maxpix = h * w > maxpix ? h * w : maxpix;
    }
    for (int k = 0; k < dr->ngs; k++) {
        step_size(&dr->gs[k], &h, &w);
        maxpix = h * w > maxpix ? h * w : maxpix;
        maxside = w > maxside ? w : maxside;
    }
    size_t plane = ((size_t)maxpix + 63) & ~(size_t)63;
    int rc = stk_scratch_reserve(work, 2 * plane + (size_t)maxside * sizeof(int64_t) + 64);
    if (rc < 0)
        return rc;
    mask_buf m = {work->data, work->data + plane, H0, W0};
    int64_t *xs = (int64_t *)(void *)(work->data + 2 * plane);
    for (int64_t y = 0; y < H0; y++) {
        const uint8_t *s = in->pixels + y * in->row_stride;
        uint8_t *d = m.a + y * W0;
        if (in->col_stride == 1)
            memcpy(d, s, (size_t)W0);
        else
            for (int64_t x = 0; x < W0; x++)
                d[x] = s[x * in->col_stride];
    }
    for (int k = 0; k < ip->npads; k++)
        mask_pad(&m, &ip->pads[k]);
    for (int k = 0; k < dr->ngs; k++) {
        const stk_geo_step *s = &dr->gs[k];
        switch (s->kind) {
        case GS_HFLIP:
        case GS_VFLIP:
            mask_flip(&m, s->kind == GS_HFLIP);
            break;
        case GS_CROP:
        case GS_BBOX_CROP:
            mask_crop(&m, s);
            break;
        case GS_RESIZE:
            mask_resize(&m, s->h, s->w, xs);
            break;
        default: {
            double inv[6];
            step_inverse(s, inv);
            mask_affine(&m, inv);
            break;
        }
        }
    }
    if (m.h != (int64_t)ip->out_h || m.w != (int64_t)ip->out_w)
        return stk_fail(STK_EINVAL, "mask geometry gave %lldx%lld, expected %ux%u",
                        (long long)m.h, (long long)m.w, ip->out_h, ip->out_w);
    memcpy(dst, m.a, (size_t)m.h * (size_t)m.w);
    return 0;
}

int stk_imgplan_run_spatial(const stk_imgplan *ip, const stk_plan_input *in0, stk_rng *rng,
                            void *out, stk_scratch *scratch, stk_spatial *sp, stk_scratch *work)
{
    if (!ip->spatial)
        return stk_fail(STK_EINVAL,
                        "stk_plan_run_spatial: the plan was not compiled for masks and boxes");
    stk_plan_input in = *in0;
    in.boxes = sp->boxes_in;
    in.nboxes = sp->nboxes;
    stk_draws dr;
    int rc = stk_imgplan_run_draws(ip, &in, rng, out, scratch, &dr);
    if (rc < 0)
        return rc;
    /* The image as it was before the prefix's pads. */
    int64_t H0 = in.image ? (int64_t)in.image->height : dr.src_h;
    int64_t W0 = in.image ? (int64_t)in.image->width : dr.src_w;
    if (sp->geo_out) {
        _Static_assert((int)GS_HFLIP == (int)STK_GEO_HFLIP &&
                           (int)GS_BBOX_CROP == (int)STK_GEO_BBOX_CROP &&
                           (int)GS_AFFINE == (int)STK_GEO_AFFINE,
                       "the geometry field's kinds are the log's");
        sp->ngeo = 0;
        for (int k = 0; k < ip->npads && sp->ngeo < STK_GEO_MAX_STEPS; k++) {
            double *g = sp->geo_out + (size_t)sp->ngeo++ * STK_GEO_VALUES;
            memset(g, 0, STK_GEO_VALUES * sizeof *g);
            g[0] = STK_GEO_PAD;
            g[1] = ip->pads[k].top;
            g[2] = ip->pads[k].left;
            g[3] = ip->pads[k].bottom;
            g[4] = ip->pads[k].right;
            g[5] = ip->pads[k].mode;
        }
        for (int k = 0; k < dr.ngs && sp->ngeo < STK_GEO_MAX_STEPS; k++) {
            const stk_geo_step *st = &dr.gs[k];
            double *g = sp->geo_out + (size_t)sp->ngeo++ * STK_GEO_VALUES;
            g[0] = st->kind;
            g[1] = (double)st->top;
            g[2] = (double)st->left;
            g[3] = (double)st->h;
            g[4] = (double)st->w;
            memcpy(g + 5, st->a, 6 * sizeof *g);
        }
    }
    for (uint32_t i = 0; i < sp->nmasks; i++)
        if ((rc = run_mask(ip, &dr, H0, W0, &sp->mask_in[i], sp->mask_out[i], work)) < 0)
            return rc;
    return run_boxes(ip, &dr, H0, W0, sp);
}
