/*
 * kernels.h — the GPU image pipeline's per-element code, shared by the CUDA
 * kernels (kernels.cu, compiled by nvcc) and their CPU emulation
 * (emulate.c, compiled by the C compiler) (internal; docs/gpu.md).
 *
 * Why one header for both. CI has no GPU. Every kernel is a thin wrapper
 * that computes its thread's coordinates and calls a STK_HD function from
 * this file; the emulation calls the very same function for every thread
 * of the same grid. So the arithmetic a test checks on the CPU is the
 * arithmetic the GPU runs, and the only thing emulation cannot check is
 * the driver itself. The code here is in the common subset of C11 and
 * CUDA C++: no C-only constructs (designated initialisers, compound
 * literals), no C++-only ones (references, templates).
 *
 * What runs where (stage.c builds the batch): the CPU reads, probes, draws
 * (image_draws.c, unchanged), decodes the JPEG region the windows touch at
 * the DCT scale the CPU path would choose, applies the point-op table of
 * the ops before the resize, and builds the two resample tables (Pillow's
 * fixed-point weights, flips folded in, stk_rs_build). It stages one
 * record per output row in pinned host memory: a descriptor
 * (stk_gpu_sample) plus the region's pixels and the tables. The GPU then
 * runs, over the whole batch:
 *
 *   STK_K_HPASS    horizontal pass: region -> tmp (rows x OW x nc)
 *   STK_K_VPASS    vertical pass and the table of the point ops after the
 *                  resize: tmp (or the region) -> head (OH x OW x nc)
 *   STK_K_ROWSUM   for each colour-jitter segment that ends in a contrast
 *   STK_K_IMGSUM   step: the grayscale sum of every row of the image as it
 *                  is at that point, then of the image (the contrast mean)
 *   STK_K_OUT      every pixel through the colour steps in drawn order,
 *                  normalize, dtype and layout, into the batch
 *
 * or, for a batch none of whose rows has a contrast step (nothing needs
 * the image's mean, so no pixel waits for the whole head), the fused
 *
 *   STK_K_VOUT     STK_K_VPASS's pixel, kept in registers, straight through
 *                  STK_K_OUT's work: one launch instead of two, and the
 *                  head is never written to device memory or read back.
 *
 * The two ways run the same per-element functions in the same order, so
 * their outputs are equal bit for bit (tests compare them in emulation);
 * which is cheaper on a device is measured by bench/gpu.py ("kernels").
 * STOKER_GPU_KERNELS=per-op keeps the separate launches (stage.c).
 *
 * Exactness. Each function repeats the CPU path's operations in the same
 * order: the resample sums are integers (order-free); ToTensor is the
 * correctly rounded v/255; the jitter steps, the grayscale sums (eight
 * float partial sums per 64 pixels, blocks added in double, rows added in
 * order) and normalize are the expressions of ops/color_impl.h, built with
 * no contraction of a*b+c (C: -ffp-contract=off; nvcc: --fmad=false), so
 * emulation equals the CPU pipeline bit for bit, and so does a device
 * whose float operations are IEEE (CUDA's are, without --use_fast_math).
 *
 * Record kinds: STK_GS_REGION (the GPU resamples) and STK_GS_HEAD (the CPU
 * already resampled: a sample whose decoded region would not fit its share
 * of the staging memory, e.g. a huge image whose crop spans it at DCT
 * scale 1/8; its head, OH x OW x nc, always fits). STK_GS_SKIP: a row left
 * out under the skip policy (no output).
 */
#ifndef STK_GPU_KERNELS_H
#define STK_GPU_KERNELS_H

#ifdef __CUDACC__
#define STK_HD __host__ __device__ static inline
#else
#define STK_HD static inline
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/half.h"

typedef enum stk_kernel_id {
    STK_K_HPASS = 0,
    STK_K_VPASS = 1,
    STK_K_ROWSUM = 2,
    STK_K_IMGSUM = 3,
    STK_K_OUT = 4,
    STK_K_VOUT = 5,
    STK_K_COUNT
} stk_kernel_id;

/* The kernels' names in the fat binary (extern "C"), by stk_kernel_id. */
#define STK_KERNEL_NAMES                                                                  \
    { "stk_k_hpass", "stk_k_vpass", "stk_k_rowsum", "stk_k_imgsum", "stk_k_out", "stk_k_vout" }

#define STK_GPU_BLOCK 64      /* threads per block of every kernel (x) */
#define STK_GPU_MAX_STEPS 16  /* colour steps per row the GPU path takes */
#define STK_GPU_MAX_SEGS 8    /* segments (a contrast step starts one) */

enum { STK_GS_SKIP = 0, STK_GS_REGION = 1, STK_GS_HEAD = 2 };
/* Colour steps: image_plan_impl.h's S_BRIGHT .. S_HUE values, and grayscale
 * (a float op whose gpu_kernel is "gray", src/gpu/stage.c). */
enum { STK_GST_BRIGHT = 0, STK_GST_CONTRAST = 1, STK_GST_SAT = 2, STK_GST_HUE = 3,
       STK_GST_GRAY = 5 };
/* Output dtypes and layouts: stoker.h's stk_dtype and stk_layout values. */
enum { STK_GD_U8 = 0, STK_GD_F16 = 1, STK_GD_F32 = 2, STK_GD_BF16 = 3 };
enum { STK_GL_HWC = 0, STK_GL_CHW = 1 };

typedef struct stk_gpu_step {
    int32_t kind; /* STK_GST_* */
    float f, g;   /* the factor and (float)(1 - factor), as stk_draw_step */
} stk_gpu_step;

/* One output row's record. Offsets are bytes from the batch's stage base
 * (copied host -> device) or work base (device only). */
typedef struct stk_gpu_sample {
    int32_t kind;         /* STK_GS_* */
    int32_t out_row;      /* row of the batch it fills */
    int32_t rows, cols;   /* REGION: the decoded region */
    int32_t need_h;       /* REGION: run the horizontal pass (else tmp = region) */
    int32_t need_v;       /* REGION: run the vertical pass (else row y, or OH-1-y) */
    int32_t vflip;        /* REGION without need_v: rows in reverse */
    int32_t xtaps, ytaps; /* coefficient strides of the two tables */
    int32_t has_lut;      /* lut: the point ops after the resize */
    int32_t region_dev;   /* REGION: decoded on the device (nvJPEG, gpu/nvjpeg.c):
                             `region` is a work offset, not a stage one */
    int32_t region_pitch; /* REGION: bytes between its rows (0: cols x nc) */
    uint64_t region;      /* stage (or work) offset: rows x cols x nc */
    uint64_t xbounds, xcoef; /* stage offsets: int32 [OW], [OW * xtaps] */
    uint64_t ybounds, ycoef; /* stage offsets: int32 [OH], [OH * ytaps] */
    uint64_t tmp;         /* work offset: rows x OW x nc (need_h) */
    uint64_t head;        /* REGION: work offset; HEAD: stage offset; OH x OW x nc */
    uint8_t lut[256];
    int32_t nsteps;
    int32_t nseg;         /* segments: [seg[j], seg[j + 1]) of steps */
    int32_t seg[STK_GPU_MAX_SEGS + 1];
    stk_gpu_step steps[STK_GPU_MAX_STEPS];
    /* Written on the device by STK_K_IMGSUM: segment j > 0 starts with a
     * contrast step whose bias is contrast_b[j] = g * mean. */
    float contrast_b[STK_GPU_MAX_SEGS];
} stk_gpu_sample;

/* The output format (ops/color.h's stk_outfmt, plain). */
typedef struct stk_gpu_fmt {
    int32_t dtype, layout, nc, width, height;
    float scale[3], bias[3];   /* uint8 v -> v * scale + bias */
    float fscale[3], fbias[3]; /* float x -> x * fscale + fbias */
} stk_gpu_fmt;

/* Every kernel's one argument (passed by value). */
typedef struct stk_gpu_args {
    uint64_t samples; /* device: stk_gpu_sample[n] */
    uint64_t stage;   /* device: the stage base */
    uint64_t work;    /* device: the work base */
    uint64_t rowsum;  /* device: double[n * out_h] */
    uint64_t out;     /* device: the batch (rows x sample bytes) */
    uint64_t sample_bytes;
    int32_t n;        /* records */
    int32_t seg;      /* ROWSUM/IMGSUM: the segment whose end is summed */
    int32_t nc;       /* channels through the pipeline (1 or 3) */
    int32_t out_w, out_h;
    int32_t pad_;
    stk_gpu_fmt fmt;
} stk_gpu_args;

/* ---------------------------------------------------------------------- */
/* Element helpers (ops/resample.c, ops/color_impl.h)                      */
/* ---------------------------------------------------------------------- */

#define STK_GPU_PRECISION 22 /* STK_RS_PRECISION */

STK_HD uint8_t stk_ge_clip8(int32_t v)
{
    v >>= STK_GPU_PRECISION;
    return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

STK_HD float stk_ge_clamp01(float v) { return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v; }

/* ToTensor: the correctly rounded v / 255 (color_impl.h's non-FMA form). */
STK_HD float stk_ge_unit(uint8_t v) { return (float)((double)v * (1.0 / 255.0)); }

STK_HD const stk_gpu_sample *stk_ge_sample(const stk_gpu_args *a, int32_t s)
{
    return (const stk_gpu_sample *)(uintptr_t)a->samples + s;
}

/* The colour steps [k0, k1) on one pixel (x[0..nc-1] in [0, 1]); a
 * contrast step at k0 uses bias b. */
STK_HD void stk_ge_steps(const stk_gpu_sample *sm, int32_t k0, int32_t k1, float b, int nc,
                         float *x)
{
    for (int32_t k = k0; k < k1; k++) {
        const stk_gpu_step *st = &sm->steps[k];
        switch (st->kind) {
        case STK_GST_BRIGHT:
            for (int c = 0; c < nc; c++)
                x[c] = stk_ge_clamp01(st->f * x[c]);
            break;
        case STK_GST_CONTRAST:
            for (int c = 0; c < nc; c++)
                x[c] = stk_ge_clamp01(st->f * x[c] + b);
            break;
        case STK_GST_SAT:
            if (nc == 3) {
                float gray = (0.2989f * x[0] + 0.587f * x[1]) + 0.114f * x[2];
                float kk = st->g * gray;
                x[0] = stk_ge_clamp01(st->f * x[0] + kk);
                x[1] = stk_ge_clamp01(st->f * x[1] + kk);
                x[2] = stk_ge_clamp01(st->f * x[2] + kk);
            }
            break;
        case STK_GST_GRAY:
            if (nc == 3) {
                float gray = (0.2989f * x[0] + 0.587f * x[1]) + 0.114f * x[2];
                x[0] = x[1] = x[2] = gray;
            }
            break;
        case STK_GST_HUE:
            if (nc == 3) {
                float r = x[0], g = x[1], bb = x[2], f = st->f;
                float mx = r > g ? r : g;
                mx = mx > bb ? mx : bb;
                float mn = r < g ? r : g;
                mn = mn < bb ? mn : bb;
                int eq = mx == mn;
                float cr = mx - mn;
                float s = cr / (eq ? 1.0f : mx);
                float crd = eq ? 1.0f : cr;
                float rc = (mx - r) / crd, gc = (mx - g) / crd, bc = (mx - bb) / crd;
                float hr = (mx == r) ? (bc - gc) : 0.0f;
                float hg = (mx == g && mx != r) ? ((2.0f + rc) - bc) : 0.0f;
                float hb = (mx != g && mx != r) ? ((4.0f + gc) - rc) : 0.0f;
                float h = (hr + hg) + hb;
                h = h / 6.0f + 1.0f;
                h = h - floorf(h);
                h = h + f;
                h = h - floorf(h);
                float h6 = h * 6.0f;
                float fi = floorf(h6);
                float fr = h6 - fi;
                int ii = (int)fi;
                ii = ii >= 6 ? ii - 6 : ii;
                float v = mx;
                float pp = stk_ge_clamp01(v * (1.0f - s));
                float q = stk_ge_clamp01(v * (1.0f - s * fr));
                float t = stk_ge_clamp01(v * (1.0f - s * (1.0f - fr)));
                x[0] = ii == 0 ? v : ii == 1 ? q : ii == 2 ? pp : ii == 3 ? pp : ii == 4 ? t : v;
                x[1] = ii == 0 ? t : ii == 1 ? v : ii == 2 ? v : ii == 3 ? q : ii == 4 ? pp : pp;
                x[2] = ii == 0 ? pp : ii == 1 ? pp : ii == 2 ? t : ii == 3 ? v : ii == 4 ? v : q;
            }
            break;
        default: break;
        }
    }
}

/* Pixel (y, x) of the head, as floats after segments [0, upto) of the
 * colour steps. */
STK_HD void stk_ge_pixel(const stk_gpu_args *a, const stk_gpu_sample *sm, int32_t y, int32_t x,
                         int32_t upto, float *v)
{
    const uint8_t *head = (const uint8_t *)(uintptr_t)(
        (sm->kind == STK_GS_HEAD ? a->stage : a->work) + sm->head);
    const uint8_t *px = head + ((size_t)y * (size_t)a->out_w + (size_t)x) * (size_t)a->nc;
    for (int c = 0; c < a->nc; c++)
        v[c] = stk_ge_unit(px[c]);
    for (int32_t j = 0; j < upto; j++)
        stk_ge_steps(sm, sm->seg[j], sm->seg[j + 1], sm->contrast_b[j], a->nc, v);
}

/* A REGION record's pixels and the bytes between their rows. */
STK_HD const uint8_t *stk_ge_region(const stk_gpu_args *a, const stk_gpu_sample *sm,
                                    size_t *stride)
{
    *stride = sm->region_pitch ? (size_t)sm->region_pitch : (size_t)sm->cols * (size_t)a->nc;
    return (const uint8_t *)(uintptr_t)((sm->region_dev ? a->work : a->stage) + sm->region);
}

STK_HD float stk_ge_gray(const float *v, int nc)
{
    return nc == 3 ? (0.2989f * v[0] + 0.587f * v[1]) + 0.114f * v[2] : v[0];
}

/* ---------------------------------------------------------------------- */
/* Per-thread bodies: the kernels' and the emulation's common code          */
/* ---------------------------------------------------------------------- */

/* STK_K_HPASS: grid (ceil(OW / BLOCK), max region rows, n). Output pixel x
 * of region row r of record s, every channel (resample.c's hpass_c). */
STK_HD void stk_gb_hpass(const stk_gpu_args *a, uint32_t x, uint32_t r, uint32_t s)
{
    if ((int32_t)s >= a->n || (int32_t)x >= a->out_w)
        return;
    const stk_gpu_sample *sm = stk_ge_sample(a, (int32_t)s);
    if (sm->kind != STK_GS_REGION || !sm->need_h || (int32_t)r >= sm->rows)
        return;
    int nc = a->nc;
    size_t pitch;
    const uint8_t *src = stk_ge_region(a, sm, &pitch);
    src += (size_t)r * pitch;
    const int32_t *bounds = (const int32_t *)(uintptr_t)(a->stage + sm->xbounds);
    const int32_t *k = (const int32_t *)(uintptr_t)(a->stage + sm->xcoef) + (size_t)x * sm->xtaps;
    uint8_t *dst = (uint8_t *)(uintptr_t)(a->work + sm->tmp) +
                   ((size_t)r * (size_t)a->out_w + x) * (size_t)nc;
    const uint8_t *p = src + (size_t)bounds[x] * (size_t)nc;
    for (int c = 0; c < nc; c++) {
        int32_t acc = 1 << (STK_GPU_PRECISION - 1);
        /* A zero weight adds nothing: skipping it reads no pixel past the
         * region (the CPU's padded windows read slack there). */
        for (int32_t t = 0; t < sm->xtaps; t++)
            if (k[t])
                acc += p[t * nc + c] * k[t];
        dst[c] = stk_ge_clip8(acc);
    }
}

/* Head pixel (y, x) of REGION record sm, every channel, into v: the
 * vertical pass (vpass_c) or the row itself, then the table. */
STK_HD void stk_ge_vpix(const stk_gpu_args *a, const stk_gpu_sample *sm, int32_t x, int32_t y,
                        uint8_t *v)
{
    int nc = a->nc;
    const uint8_t *src;
    size_t stride;
    if (sm->need_h) {
        src = (const uint8_t *)(uintptr_t)(a->work + sm->tmp);
        stride = (size_t)a->out_w * (size_t)nc;
    } else {
        src = stk_ge_region(a, sm, &stride);
    }
    if (sm->need_v) {
        const int32_t *bounds = (const int32_t *)(uintptr_t)(a->stage + sm->ybounds);
        const int32_t *k =
            (const int32_t *)(uintptr_t)(a->stage + sm->ycoef) + (size_t)y * sm->ytaps;
        const uint8_t *col = src + (size_t)bounds[y] * stride + (size_t)x * nc;
        for (int c = 0; c < nc; c++) {
            int32_t acc = 1 << (STK_GPU_PRECISION - 1);
            for (int32_t t = 0; t < sm->ytaps; t++)
                if (k[t])
                    acc += col[(size_t)t * stride + c] * k[t];
            v[c] = stk_ge_clip8(acc);
        }
    } else {
        int32_t sy = sm->vflip ? a->out_h - 1 - y : y;
        const uint8_t *px = src + (size_t)sy * stride + (size_t)x * nc;
        for (int c = 0; c < nc; c++)
            v[c] = px[c];
    }
    if (sm->has_lut)
        for (int c = 0; c < nc; c++)
            v[c] = sm->lut[v[c]];
}

/* STK_K_VPASS: grid (ceil(OW / BLOCK), OH, n). Head pixel (y, x) of
 * record s into the head. */
STK_HD void stk_gb_vpass(const stk_gpu_args *a, uint32_t x, uint32_t y, uint32_t s)
{
    if ((int32_t)s >= a->n || (int32_t)x >= a->out_w || (int32_t)y >= a->out_h)
        return;
    const stk_gpu_sample *sm = stk_ge_sample(a, (int32_t)s);
    if (sm->kind != STK_GS_REGION)
        return;
    int nc = a->nc;
    uint8_t v[4];
    stk_ge_vpix(a, sm, (int32_t)x, (int32_t)y, v);
    uint8_t *dst = (uint8_t *)(uintptr_t)(a->work + sm->head) +
                   ((size_t)y * (size_t)a->out_w + x) * (size_t)nc;
    for (int c = 0; c < nc; c++)
        dst[c] = v[c];
}

/* STK_K_ROWSUM: grid (ceil(OH / BLOCK), 1, n). Row y's grayscale sum of
 * record s after segments [0, seg], when segment seg + 1 starts with a
 * contrast (color_impl.h's gray_sum: eight float partials per block of
 * 64, the blocks added in double). */
STK_HD void stk_gb_rowsum(const stk_gpu_args *a, uint32_t y, uint32_t unused, uint32_t s)
{
    (void)unused;
    if ((int32_t)s >= a->n || (int32_t)y >= a->out_h)
        return;
    const stk_gpu_sample *sm = stk_ge_sample(a, (int32_t)s);
    if (sm->kind == STK_GS_SKIP || a->seg + 1 >= sm->nseg)
        return;
    int nc = a->nc;
    int32_t n = a->out_w, i = 0;
    double total = 0.0;
    float v[3];
    for (; i + 64 <= n; i += 64) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int32_t j = 0; j < 64; j += 8)
            for (int l = 0; l < 8; l++) {
                stk_ge_pixel(a, sm, (int32_t)y, i + j + l, a->seg + 1, v);
                acc[l] += stk_ge_gray(v, nc);
            }
        total += (double)(((acc[0] + acc[1]) + (acc[2] + acc[3])) +
                          ((acc[4] + acc[5]) + (acc[6] + acc[7])));
    }
    for (; i < n; i++) {
        stk_ge_pixel(a, sm, (int32_t)y, i, a->seg + 1, v);
        total += (double)stk_ge_gray(v, nc);
    }
    ((double *)(uintptr_t)a->rowsum)[(size_t)s * (size_t)a->out_h + y] = total;
}

/* STK_K_IMGSUM: grid (ceil(n / BLOCK), 1, 1). Record s's contrast bias for
 * segment seg + 1: g * (float)(sum of its rows in order / pixels). */
STK_HD void stk_gb_imgsum(const stk_gpu_args *a, uint32_t s, uint32_t u1, uint32_t u2)
{
    (void)u1;
    (void)u2;
    if ((int32_t)s >= a->n)
        return;
    stk_gpu_sample *sm = (stk_gpu_sample *)(uintptr_t)a->samples + s;
    if (sm->kind == STK_GS_SKIP || a->seg + 1 >= sm->nseg)
        return;
    const double *rs = (const double *)(uintptr_t)a->rowsum + (size_t)s * (size_t)a->out_h;
    double gsum = 0.0;
    for (int32_t y = 0; y < a->out_h; y++)
        gsum += rs[y];
    float mean = (float)(gsum / (double)((size_t)a->out_w * (size_t)a->out_h));
    const stk_gpu_step *st = &sm->steps[sm->seg[a->seg + 1]];
    sm->contrast_b[a->seg + 1] = st->g * mean;
}

/* One output element in the output dtype. */
STK_HD void stk_ge_store(const stk_gpu_fmt *o, void *out, size_t at, float v)
{
    switch (o->dtype) {
    case STK_GD_F32: ((float *)out)[at] = v; break;
    case STK_GD_BF16: ((uint16_t *)out)[at] = stk_f32_to_bf16(v); break;
    case STK_GD_F16: ((uint16_t *)out)[at] = stk_f32_to_f16(v); break;
    default: break;
    }
}

/* Output pixel (y, x) of record sm from its head pixel px (nc values):
 * the colour steps, then normalize, dtype and layout (color_impl.h's
 * u8_to_out without colour steps, float_to_out with them). */
STK_HD void stk_ge_emit(const stk_gpu_args *a, const stk_gpu_sample *sm, uint32_t x, uint32_t y,
                        const uint8_t *px)
{
    const stk_gpu_fmt *o = &a->fmt;
    int nc = o->nc;
    void *out = (void *)(uintptr_t)(a->out + (uint64_t)sm->out_row * a->sample_bytes);
    size_t plane = (size_t)o->width * (size_t)o->height;
    int planar = o->layout == STK_GL_CHW || nc == 1;
    if (sm->nsteps == 0) {
        for (int c = 0; c < nc; c++) {
            size_t at = planar ? (size_t)c * plane + (size_t)y * (size_t)o->width + x
                               : ((size_t)y * (size_t)o->width + x) * (size_t)nc + (size_t)c;
            if (o->dtype == STK_GD_U8)
                ((uint8_t *)out)[at] = px[c];
            else
                stk_ge_store(o, out, at, (float)px[c] * o->scale[c] + o->bias[c]);
        }
        return;
    }
    float v[3];
    for (int c = 0; c < nc; c++)
        v[c] = stk_ge_unit(px[c]);
    for (int32_t j = 0; j < sm->nseg; j++)
        stk_ge_steps(sm, sm->seg[j], sm->seg[j + 1], sm->contrast_b[j], nc, v);
    for (int c = 0; c < nc; c++) {
        size_t at = planar ? (size_t)c * plane + (size_t)y * (size_t)o->width + x
                           : ((size_t)y * (size_t)o->width + x) * (size_t)nc + (size_t)c;
        if (o->dtype == STK_GD_U8)
            ((uint8_t *)out)[at] = (uint8_t)(int)rintf(stk_ge_clamp01(v[c]) * 255.0f);
        else
            stk_ge_store(o, out, at, v[c] * o->fscale[c] + o->fbias[c]);
    }
}

/* A record's head pixel (y, x): in the stage (HEAD) or the work arena. */
STK_HD const uint8_t *stk_ge_head_px(const stk_gpu_args *a, const stk_gpu_sample *sm,
                                     uint32_t x, uint32_t y)
{
    const uint8_t *head = (const uint8_t *)(uintptr_t)(
        (sm->kind == STK_GS_HEAD ? a->stage : a->work) + sm->head);
    return head + ((size_t)y * (size_t)a->out_w + x) * (size_t)a->nc;
}

/* The record whose output pixel (y, x) thread (x, y, s) of an output
 * kernel writes; NULL outside the grid's work or for a skipped row. */
STK_HD const stk_gpu_sample *stk_ge_out_record(const stk_gpu_args *a, uint32_t x, uint32_t y,
                                               uint32_t s)
{
    if ((int32_t)s >= a->n || (int32_t)x >= a->out_w || (int32_t)y >= a->out_h)
        return NULL;
    const stk_gpu_sample *sm = stk_ge_sample(a, (int32_t)s);
    return sm->kind == STK_GS_SKIP ? NULL : sm;
}

/* STK_K_OUT: grid (ceil(OW / BLOCK), OH, n). Output pixel (y, x) of record
 * s from its head. */
STK_HD void stk_gb_out(const stk_gpu_args *a, uint32_t x, uint32_t y, uint32_t s)
{
    const stk_gpu_sample *sm = stk_ge_out_record(a, x, y, s);
    if (sm)
        stk_ge_emit(a, sm, x, y, stk_ge_head_px(a, sm, x, y));
}

/* STK_K_VOUT: grid (ceil(OW / BLOCK), OH, n); only for a batch in which no
 * record has a contrast step (nseg == 1: no mean to wait for). Output
 * pixel (y, x) of record s: STK_K_VPASS's pixel, not stored, through
 * STK_K_OUT's work. A HEAD record's pixel comes from the stage as in
 * STK_K_OUT. */
STK_HD void stk_gb_vout(const stk_gpu_args *a, uint32_t x, uint32_t y, uint32_t s)
{
    const stk_gpu_sample *sm = stk_ge_out_record(a, x, y, s);
    if (!sm)
        return;
    if (sm->kind == STK_GS_HEAD) {
        stk_ge_emit(a, sm, x, y, stk_ge_head_px(a, sm, x, y));
        return;
    }
    uint8_t v[4];
    stk_ge_vpix(a, sm, (int32_t)x, (int32_t)y, v);
    stk_ge_emit(a, sm, x, y, v);
}

#endif
