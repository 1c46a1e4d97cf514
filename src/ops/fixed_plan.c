/*
 * fixed_plan.c — a spec of pad / crop / flip / normalize / to compiled
 * against a fixed input shape into the fused kernel (kernel.h), and run on
 * one sample (fixed_plan.h). plan.c hands it the specs that need nothing
 * else; image_plan.c its prefix of pads.
 *
 * Compile walks the ops once, tracking the image size after each, and checks
 * what needs the shape: a crop no larger than its input, reflect/symmetric
 * padding narrower than the image it mirrors, per-channel lists that match
 * the channel count. It keeps the geometric ops (pad, random_crop,
 * center_crop, hflip, vflip) with their input and output sizes, and folds
 * the value ops into constants: ToTensor's 1/255 and Normalize's mean/std
 * become one scale and bias per channel (scale = 1/(255 std), bias =
 * -mean/std), f16 output gets a 256-entry table per channel, and each
 * constant pad's fill is converted once to the output dtype.
 *
 * Run draws the random parameters in op order (random_crop: top then left,
 * each stk_rng_range(0, in - out); flips: stk_rng_uniform < p), always, even
 * when the range is a single value or p is 0 or 1, so the stream consumed is
 * a function of the spec alone. It then derives, per axis, the list of
 * segments mapping output coordinates to source coordinates (kernel.h) by
 * walking the ops backwards from one identity segment over the output:
 *
 *   crop by o:      src += o
 *   flip (drawn):   src = n - 1 - src, step = -step
 *   pad b before:   src -= b, then the part of the segment that falls outside
 *                   [0, n) is cut off and becomes a fill segment (constant),
 *                   a step-0 segment at the edge (edge), or a mirrored
 *                   segment (reflect: q -> -q, 2(n-1) - q; symmetric:
 *                   q -> -q-1, 2n-1-q). Reflect needs pad < n and symmetric
 *                   pad <= n, which compile checks, so one mirror suffices.
 *
 * A segment splits into at most three per pad, and the segments partition
 * the output axis, so there are at most min(3^pads, size) of them; compile
 * rejects specs whose bound exceeds STK_MAX_SEGS. For the CIFAR recipe
 * (pad 4 | random_crop 32 | flip) each axis has at most three segments, and
 * the kernel writes each output row as fill, one forward or reversed run,
 * fill.
 *
 * Invariants: a plan is immutable after compile and shared by every worker;
 * stk_fixplan_run touches only its stack and `out`, and writes every byte of
 * the sample exactly once.
 */

#include "ops/fixed_plan.h"

#include "core/error.h"
#include "core/util.h"
#include "ops/half.h"
#include "ops/kernel.h"

#include <stdlib.h>
#include <string.h>

#define MAX_AXIS STK_PLAN_MAX_AXIS
#define MAX_ROW (1 << 28) /* values in one row (width x channels) */

enum { P_PAD, P_RCROP, P_CCROP, P_HFLIP, P_VFLIP };

typedef struct plan_op {
    int kind;
    stk_pad_mode mode;        /* P_PAD */
    double p;                 /* flips */
    int32_t in_h, in_w;       /* size of this op's input */
    int32_t out_h, out_w;     /* and of its output */
    int32_t top, left;        /* pad before; center crop offsets */
} plan_op;

struct stk_fixplan {
    uint32_t in_h, in_w, channels;
    uint32_t out_h, out_w;
    stk_dtype dtype;
    stk_layout layout;
    size_t sample_bytes;
    int random;          /* some op draws from the rng */
    int nops;
    plan_op ops[STK_SPEC_MAX_OPS];
    stk_kctx kc;         /* tables point into `mem` */
    stk_kernel_fn kernel;
    void *mem;           /* owned: stk_aligned_alloc'd tables */
};

static size_t dtype_size(stk_dtype dt) { return dt == STK_U8 ? 1 : dt == STK_F32 ? 4 : 2; }

/* torchvision CenterCrop: int(round(d / 2.0)) with Python's round, which
 * rounds halves to even. d >= 0. */
static int32_t center_offset(int32_t d)
{
    int32_t q = d / 2;
    if (d % 2 == 0)
        return q;
    return (q % 2 == 0) ? q : q + 1; /* q + 0.5 -> the even one of q, q+1 */
}

/* Bound on segments after `npads` splitting pads, capped by the axis size. */
static int64_t seg_bound(int npads, int64_t size)
{
    int64_t b = 1;
    for (int i = 0; i < npads && b < size; i++)
        b *= 3;
    return b < size ? b : size;
}

/* Allocate the kernel's tables and fill them. scale/bias are double inputs. */
static int build_tables(stk_fixplan *p, const stk_spec *spec, int nops, const double *scale,
                        const double *bias)
{
    uint32_t C = p->channels;
    size_t es = dtype_size(p->dtype);
    size_t off[6], total = 0;
    size_t sizes[6] = {
        (size_t)C * sizeof(float),                      /* scale */
        (size_t)C * sizeof(float),                      /* bias */
        p->dtype != STK_U8 && p->layout == STK_HWC ? (size_t)p->out_w * C * sizeof(float) : 0,
        p->dtype != STK_U8 && p->layout == STK_HWC ? (size_t)p->out_w * C * sizeof(float) : 0,
        p->dtype == STK_F16 || p->dtype == STK_BF16 ? (size_t)C * 256 * sizeof(uint16_t) : 0,
        (size_t)(p->nops ? p->nops : 1) * C * es,       /* fill */
    };
    for (int i = 0; i < 6; i++) {
        off[i] = total;
        total += (sizes[i] + STK_ALIGN - 1) / STK_ALIGN * STK_ALIGN;
    }
    uint8_t *mem = stk_aligned_alloc(total);
    if (!mem)
        return stk_fail(STK_ENOMEM, "pipeline plan: out of memory (%zu bytes of tables)", total);
    memset(mem, 0, total);
    p->mem = mem;

    float *sc = (float *)(mem + off[0]), *bi = (float *)(mem + off[1]);
    for (uint32_t c = 0; c < C; c++) {
        sc[c] = (float)scale[c];
        bi[c] = (float)bias[c];
    }
    p->kc.channels = C;
    p->kc.out_h = p->out_h;
    p->kc.out_w = p->out_w;
    p->kc.layout = p->layout;
    p->kc.scale = sc;
    p->kc.bias = bi;
    if (sizes[2]) {
        float *sr = (float *)(mem + off[2]), *br = (float *)(mem + off[3]);
        for (size_t i = 0; i < (size_t)p->out_w * C; i++) {
            sr[i] = sc[i % C];
            br[i] = bi[i % C];
        }
        p->kc.scale_rep = sr;
        p->kc.bias_rep = br;
    }
    uint16_t *lut = NULL;
    if (sizes[4]) {
        /* The same float expression as the f32 kernel, then rounded: f16
         * (bf16) output is exactly the f32 output rounded to half (bfloat16).
         * bf16 runs the f16 kernel's table path (stk_kernel_select). */
        lut = (uint16_t *)(mem + off[4]);
        for (uint32_t c = 0; c < C; c++)
            for (unsigned v = 0; v < 256; v++)
                lut[c * 256 + v] = p->dtype == STK_BF16
                                       ? stk_f32_to_bf16((float)v * sc[c] + bi[c])
                                       : stk_f32_to_f16((float)v * sc[c] + bi[c]);
        p->kc.lut16 = lut;
    }

    /* Constant fills in the output dtype, indexed by op. The spec's op list
     * and the plan's geometric list differ (normalize/to are dropped), so
     * walk both. */
    void *fill = mem + off[5];
    int k = 0;
    for (int i = 0; i < nops; i++) {
        const stk_spec_op *o = &spec->ops[i];
        if (o->kind == STK_OP_NORMALIZE || o->kind == STK_OP_TO || o->kind == STK_OP_DECODE)
            continue;
        if (o->kind == STK_OP_PAD && o->u.pad.mode == STK_PAD_CONSTANT) {
            for (uint32_t c = 0; c < C; c++) {
                uint8_t v = o->u.pad.fill[o->u.pad.nfill == 1 ? 0 : c];
                size_t at = (size_t)k * C + c;
                if (p->dtype == STK_U8)
                    ((uint8_t *)fill)[at] = v;
                else if (p->dtype == STK_F16 || p->dtype == STK_BF16)
                    ((uint16_t *)fill)[at] = lut[c * 256 + v];
                else
                    ((float *)fill)[at] = (float)v * sc[c] + bi[c];
            }
        }
        k++;
    }
    p->kc.fill = fill;
    return 0;
}

/* Compile ops [0, nops) of a parsed spec for a fixed input shape. With
 * force_u8 the output is uint8 HWC whatever the spec says (the prefix of an
 * image pipeline). */
int stk_fixplan_compile(const char *text, const stk_spec *spec, int nops, int force_u8,
                        uint32_t in_height, uint32_t in_width, uint32_t in_channels,
                        stk_fixplan **out)
{
    int rc;
    stk_fixplan *p = NULL;
    double *scale = NULL, *bias = NULL;

    *out = NULL;
    p = calloc(1, sizeof *p);
    scale = malloc(sizeof(double) * in_channels);
    bias = malloc(sizeof(double) * in_channels);
    if (!p || !scale || !bias) {
        rc = stk_fail(STK_ENOMEM, "pipeline spec: out of memory");
        goto fail;
    }

    uint32_t C = in_channels;
    int64_t h = in_height, w = in_width;
    int npad_y = 0, npad_x = 0, last_pad_col = 1;
    p->in_h = in_height;
    p->in_w = in_width;
    p->channels = C;
    p->dtype = force_u8 ? STK_U8 : spec->dtype;
    p->layout = force_u8 ? STK_HWC : spec->layout;
    for (uint32_t c = 0; c < C; c++) {
        scale[c] = p->dtype == STK_U8 ? 1.0 : 1.0 / 255.0;
        bias[c] = 0.0;
    }

    for (int i = 0; i < nops; i++) {
        const stk_spec_op *o = &spec->ops[i];
        plan_op *q = &p->ops[p->nops];
        memset(q, 0, sizeof *q);
        q->in_h = (int32_t)h;
        q->in_w = (int32_t)w;
        switch (o->kind) {
        case STK_OP_PAD: {
            uint32_t l = o->u.pad.left, t = o->u.pad.top, r = o->u.pad.right, b = o->u.pad.bottom;
            if (o->u.pad.mode == STK_PAD_REFLECT &&
                ((int64_t)l >= w || (int64_t)r >= w || (int64_t)t >= h || (int64_t)b >= h)) {
                rc = stk_spec_fail(text, o->arg_col,
                                   "reflect padding must be smaller than the image it pads "
                                   "(%lldx%lld HxW), got left %u, top %u, right %u, bottom %u",
                                   (long long)h, (long long)w, l, t, r, b);
                goto fail;
            }
            if (o->u.pad.mode == STK_PAD_SYMMETRIC &&
                ((int64_t)l > w || (int64_t)r > w || (int64_t)t > h || (int64_t)b > h)) {
                rc = stk_spec_fail(text, o->arg_col,
                                   "symmetric padding must not exceed the image it pads "
                                   "(%lldx%lld HxW), got left %u, top %u, right %u, bottom %u",
                                   (long long)h, (long long)w, l, t, r, b);
                goto fail;
            }
            if (o->u.pad.nfill != 1 && o->u.pad.nfill != C) {
                rc = stk_spec_fail(text, o->u.pad.fill_col,
                                   "fill has %u values but the image has %u channel%s "
                                   "(give 1 value or %u)",
                                   o->u.pad.nfill, C, C == 1 ? "" : "s", C);
                goto fail;
            }
            h += (int64_t)t + b;
            w += (int64_t)l + r;
            if (h > MAX_AXIS || w > MAX_AXIS) {
                rc = stk_spec_fail(text, o->arg_col, "the padded image is too large (%lldx%lld)",
                                   (long long)h, (long long)w);
                goto fail;
            }
            q->kind = P_PAD;
            q->mode = o->u.pad.mode;
            q->top = (int32_t)t;
            q->left = (int32_t)l;
            npad_y += (t || b);
            npad_x += (l || r);
            last_pad_col = o->col;
            break;
        }
        case STK_OP_RANDOM_CROP:
        case STK_OP_CENTER_CROP: {
            uint32_t ch = o->u.crop.height, cw = o->u.crop.width;
            if ((int64_t)ch > h || (int64_t)cw > w) {
                rc = stk_spec_fail(text, o->arg_col,
                                   "%s %ux%u (HxW) is larger than its input %lldx%lld%s",
                                   o->kind == STK_OP_RANDOM_CROP ? "random_crop" : "center_crop",
                                   ch, cw, (long long)h, (long long)w,
                                   o->kind == STK_OP_RANDOM_CROP
                                       ? " (pad first, e.g. padding=N)"
                                       : " (center_crop does not pad; add a pad stage)");
                goto fail;
            }
            q->kind = o->kind == STK_OP_RANDOM_CROP ? P_RCROP : P_CCROP;
            if (q->kind == P_CCROP) {
                q->top = center_offset((int32_t)(h - ch));
                q->left = center_offset((int32_t)(w - cw));
            } else {
                p->random = 1;
            }
            h = ch;
            w = cw;
            break;
        }
        case STK_OP_HFLIP:
        case STK_OP_VFLIP:
            q->kind = o->kind == STK_OP_HFLIP ? P_HFLIP : P_VFLIP;
            q->p = o->u.flip.p;
            p->random = 1;
            break;
        case STK_OP_NORMALIZE: {
            uint32_t nm = o->u.normalize.nmean, ns = o->u.normalize.nstd;
            if (nm != 1 && nm != C) {
                rc = stk_spec_fail(text, o->u.normalize.mean_col,
                                   "normalize has %u mean values but the image has %u "
                                   "channel%s (give 1 value or %u)",
                                   nm, C, C == 1 ? "" : "s", C);
                goto fail;
            }
            if (ns != 1 && ns != C) {
                rc = stk_spec_fail(text, o->u.normalize.std_col,
                                   "normalize has %u std values but the image has %u "
                                   "channel%s (give 1 value or %u)",
                                   ns, C, C == 1 ? "" : "s", C);
                goto fail;
            }
            for (uint32_t c = 0; c < C; c++) {
                double m = o->u.normalize.mean[nm == 1 ? 0 : c];
                double s = o->u.normalize.std[ns == 1 ? 0 : c];
                scale[c] = 1.0 / (255.0 * s);
                bias[c] = -m / s;
            }
            continue; /* not a geometric op */
        }
        case STK_OP_TO:
        case STK_OP_DECODE:
            continue;
        case STK_OP_RANDOM_RESIZED_CROP: /* image ops: never here (image_plan.c) */
        case STK_OP_RESIZE:
        case STK_OP_ROTATE:
        case STK_OP_COLOR_JITTER:
        case STK_OP_LUT:
        case STK_OP_FLOAT:
        case STK_OP_RANDOM_ERASING:
        case STK_OP_RANDOM_APPLY:
        case STK_OP_POLICY:
        case STK_OP_AFFINE:
        case STK_OP_BBOX_CROP:
        case STK_OP_USER:
            rc = stk_spec_fail(text, o->col, "internal: image op in a fixed-shape plan");
            goto fail;
        }
        q->out_h = (int32_t)h;
        q->out_w = (int32_t)w;
        p->nops++;
    }

    p->out_h = (uint32_t)h;
    p->out_w = (uint32_t)w;
    /* The kernel indexes a row's elements with 32-bit ints. */
    if ((uint64_t)w * C > MAX_ROW || (uint64_t)in_width * C > MAX_ROW) {
        rc = stk_fail(STK_ELIMIT,
                      "pipeline spec: rows of %lld x %u values are too wide (at most %d)",
                      (long long)(w > in_width ? w : in_width), C, MAX_ROW);
        goto fail;
    }
    if (seg_bound(npad_y, h) > STK_MAX_SEGS || seg_bound(npad_x, w) > STK_MAX_SEGS) {
        rc = stk_spec_fail(text, last_pad_col,
                           "too many pad stages: they would split each row into more than "
                           "%d pieces; use fewer pad stages",
                           STK_MAX_SEGS);
        goto fail;
    }
    uint64_t bytes;
    if (!stk_mul_ok((uint64_t)h * (uint64_t)w, (uint64_t)C * dtype_size(p->dtype), &bytes) ||
        bytes > (uint64_t)SIZE_MAX / 2) {
        rc = stk_fail(STK_ELIMIT, "pipeline spec: output sample of %lldx%lldx%u is too large",
                      (long long)h, (long long)w, C);
        goto fail;
    }
    p->sample_bytes = (size_t)bytes;
    rc = build_tables(p, spec, nops, scale, bias);
    if (rc < 0)
        goto fail;
    p->kernel = stk_kernel_select(p->dtype);

    free(scale);
    free(bias);
    *out = p;
    return 0;

fail:
    free(scale);
    free(bias);
    stk_fixplan_free(p);
    return rc;
}

void stk_fixplan_free(stk_fixplan *p)
{
    if (!p)
        return;
    stk_aligned_free(p->mem);
    free(p);
}

void stk_output_describe(uint32_t channels, uint32_t out_h, uint32_t out_w, stk_dtype d,
                         stk_layout l, size_t bytes, int64_t shape[3], stk_dtype *dtype,
                         stk_layout *layout, size_t *sample_bytes)
{
    if (shape) {
        if (l == STK_CHW) {
            shape[0] = channels;
            shape[1] = out_h;
            shape[2] = out_w;
        } else {
            shape[0] = out_h;
            shape[1] = out_w;
            shape[2] = channels;
        }
    }
    if (dtype)
        *dtype = d;
    if (layout)
        *layout = l;
    if (sample_bytes)
        *sample_bytes = bytes;
}

void stk_fixplan_output(const stk_fixplan *p, int64_t shape[3], stk_dtype *dtype,
                        stk_layout *layout, size_t *sample_bytes)
{
    stk_output_describe(p->channels, p->out_h, p->out_w, p->dtype, p->layout, p->sample_bytes,
                        shape, dtype, layout, sample_bytes);
}

/* ---------------------------------------------------------------------- */
/* Segments                                                                */
/* ---------------------------------------------------------------------- */

/* Where a pad sends a coordinate q outside [0, n). below: q < 0. */
static void pad_outside(stk_seg *s, int32_t q, int32_t step, int below, int32_t n,
                        stk_pad_mode mode, int32_t fill_id)
{
    switch (mode) {
    case STK_PAD_CONSTANT:
        s->fill = fill_id;
        s->src0 = 0;
        s->step = 0;
        return;
    case STK_PAD_EDGE:
        s->src0 = below ? 0 : n - 1;
        s->step = 0;
        return;
    case STK_PAD_REFLECT:
        s->src0 = below ? -q : 2 * (n - 1) - q;
        s->step = -step;
        return;
    case STK_PAD_SYMMETRIC:
        s->src0 = below ? -q - 1 : 2 * n - 1 - q;
        s->step = -step;
        return;
    }
}

static inline int32_t clamp32(int64_t v, int32_t lo, int32_t hi)
{
    return v < lo ? lo : v > hi ? hi : (int32_t)v;
}

/* Map segments through a pad (walking backwards): `before` pixels were
 * added before the n source pixels. Returns the new count. */
static int seg_pad(const stk_seg *in, int cnt, stk_seg *out, int32_t before, int32_t n,
                   stk_pad_mode mode, int32_t fill_id)
{
    int m = 0;
    for (int i = 0; i < cnt; i++) {
        stk_seg s = in[i];
        if (s.fill >= 0) {
            out[m++] = s;
            continue;
        }
        int32_t q0 = s.src0 - before;
        if (s.step == 0) {
            stk_seg t = s;
            if (q0 >= 0 && q0 < n)
                t.src0 = q0;
            else
                pad_outside(&t, q0, 0, q0 < 0, n, mode, fill_id);
            out[m++] = t;
            continue;
        }
        /* Pieces [0,k1) [k1,k2) [k2,len): outside, inside, outside. */
        int32_t k1, k2;
        int first_below;
        if (s.step > 0) {
            k1 = clamp32(-(int64_t)q0, 0, s.len);
            k2 = clamp32((int64_t)n - q0, 0, s.len);
            first_below = 1;
        } else {
            k1 = clamp32((int64_t)q0 - n + 1, 0, s.len);
            k2 = clamp32((int64_t)q0 + 1, 0, s.len);
            first_below = 0;
        }
        if (k2 < k1)
            k2 = k1;
        int32_t ka[3] = {0, k1, k2}, kb[3] = {k1, k2, s.len};
        for (int j = 0; j < 3; j++) {
            if (kb[j] <= ka[j])
                continue;
            stk_seg t;
            int32_t q = q0 + s.step * ka[j];
            t.out0 = s.out0 + ka[j];
            t.len = kb[j] - ka[j];
            t.fill = -1;
            t.src0 = q;
            t.step = s.step;
            if (j == 0)
                pad_outside(&t, q, s.step, first_below, n, mode, fill_id);
            else if (j == 2)
                pad_outside(&t, q, s.step, !first_below, n, mode, fill_id);
            out[m++] = t;
        }
    }
    return m;
}

/* Segments of one axis (0 = rows, 1 = columns) for the drawn parameters.
 * a and b are two buffers of STK_MAX_SEGS; returns the one holding the result. */
static const stk_seg *axis_segments(const stk_fixplan *p, int axis, const int32_t *off,
                                    const uint8_t *flip, stk_seg *a, stk_seg *b, int *count)
{
    stk_seg *cur = a, *nxt = b;
    int n = 1;
    cur[0].out0 = 0;
    cur[0].len = (int32_t)(axis ? p->out_w : p->out_h);
    cur[0].src0 = 0;
    cur[0].step = 1;
    cur[0].fill = -1;
    for (int i = p->nops - 1; i >= 0; i--) {
        const plan_op *o = &p->ops[i];
        int32_t in_n = axis ? o->in_w : o->in_h;
        switch (o->kind) {
        case P_RCROP:
        case P_CCROP: {
            int32_t d = o->kind == P_RCROP ? off[2 * i + axis] : (axis ? o->left : o->top);
            for (int j = 0; j < n; j++)
                if (cur[j].fill < 0)
                    cur[j].src0 += d;
            break;
        }
        case P_HFLIP:
        case P_VFLIP:
            if ((o->kind == P_HFLIP) == (axis == 1) && flip[i]) {
                for (int j = 0; j < n; j++) {
                    if (cur[j].fill < 0) {
                        cur[j].src0 = in_n - 1 - cur[j].src0;
                        cur[j].step = -cur[j].step;
                    }
                }
            }
            break;
        case P_PAD: {
            int32_t before = axis ? o->left : o->top;
            int32_t grow = (axis ? o->out_w : o->out_h) - in_n;
            if (grow == 0)
                break;
            n = seg_pad(cur, n, nxt, before, in_n, o->mode, i);
            stk_seg *t = cur;
            cur = nxt;
            nxt = t;
            break;
        }
        }
    }
    *count = n;
    return cur;
}

int stk_fixplan_run(const stk_fixplan *p, const stk_image_view *in, stk_rng *rng, void *out)
{
    if (!p || !in || !out || !in->pixels)
        return stk_fail(STK_EINVAL, "stk_plan_run: NULL argument");
    if (in->height != p->in_h || in->width != p->in_w || in->channels != p->channels)
        return stk_fail(STK_EINVAL,
                        "stk_plan_run: image is %ux%ux%u (HxWxC) but the plan was compiled "
                        "for %ux%ux%u",
                        in->height, in->width, in->channels, p->in_h, p->in_w, p->channels);
    if (p->random && !rng)
        return stk_fail(STK_EINVAL, "stk_plan_run: the pipeline draws random numbers but rng "
                                    "is NULL");

    int32_t off[2 * STK_SPEC_MAX_OPS];
    uint8_t flip[STK_SPEC_MAX_OPS];
    for (int i = 0; i < p->nops; i++) {
        const plan_op *o = &p->ops[i];
        off[2 * i] = off[2 * i + 1] = 0;
        flip[i] = 0;
        if (o->kind == P_RCROP) {
            off[2 * i] = (int32_t)stk_rng_range(rng, 0, o->in_h - o->out_h);
            off[2 * i + 1] = (int32_t)stk_rng_range(rng, 0, o->in_w - o->out_w);
        } else if (o->kind == P_HFLIP || o->kind == P_VFLIP) {
            flip[i] = stk_rng_uniform(rng) < o->p;
        }
    }

    stk_seg ya[STK_MAX_SEGS], yb[STK_MAX_SEGS], xa[STK_MAX_SEGS], xb[STK_MAX_SEGS];
    int ny, nx;
    const stk_seg *ys = axis_segments(p, 0, off, flip, ya, yb, &ny);
    const stk_seg *xs = axis_segments(p, 1, off, flip, xa, xb, &nx);
    p->kernel(&p->kc, in, ys, ny, xs, nx, out);
    return 0;
}
