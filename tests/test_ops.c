/*
 * test_ops.c — the compiled plan and its fused kernel against a naive
 * reference, the f16 conversion, and the random draws.
 *
 * The reference is deliberately simple and shares no code with the library:
 * an image is a full array of ints; pad builds the padded array by
 * concatenating mirrored / repeated / constant columns and rows as numpy.pad
 * and torchvision define them; crop and flip copy; normalize is computed in
 * double; the result is then laid out as HWC or CHW and converted. Every
 * case runs for every kernel variant the CPU has (plain C, SSE2, AVX2),
 * every source layout (planar CHW, interleaved HWC, interleaved with padded
 * rows, and a view with a negative column stride), u8/f16/f32 output, both
 * layouts, and 1, 2 and 3 channels.
 *
 * Every output byte must be written: each run is done twice, over buffers
 * prefilled with two different sentinels, and both results must agree (and
 * match the reference); a guard zone after the sample must stay untouched.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/error.h"
#include "core/rng.h"
#include "ops/half.h"
#include "ops/kernel.h"
#include "ops/plan.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------- */
/* Reference images and ops                                                */
/* ---------------------------------------------------------------------- */

typedef struct rimg {
    int h, w, c;
    int *px; /* HWC, values 0..255 */
} rimg;

static rimg rimg_new(int h, int w, int c)
{
    rimg m = {h, w, c, calloc((size_t)h * w * c, sizeof(int))};
    assert_non_null(m.px);
    return m;
}

static int *rpx(const rimg *m, int y, int x, int c) { return &m->px[((size_t)y * m->w + x) * m->c + c]; }

enum { R_PAD, R_CCROP, R_CROP, R_HFLIP, R_VFLIP };
enum { M_CONSTANT, M_EDGE, M_REFLECT, M_SYMMETRIC };

typedef struct rop {
    int kind;
    int l, t, r, b, mode, nfill, fill[3]; /* pad */
    int h, w;                             /* crops */
    int top, left;                        /* R_CROP (explicit offsets) */
} rop;

/* Source index of each position of a padded axis, -1 for constant fill:
 * the concatenation numpy.pad / torchvision describe. */
static void pad_axis(int n, int before, int after, int mode, int *idx)
{
    int k = 0;
    for (int p = 0; p < before; p++) {
        switch (mode) {
        case M_CONSTANT: idx[k++] = -1; break;
        case M_EDGE: idx[k++] = 0; break;
        case M_REFLECT: idx[k++] = before - p; break;       /* x[before] .. x[1] */
        case M_SYMMETRIC: idx[k++] = before - 1 - p; break; /* x[before-1] .. x[0] */
        }
    }
    for (int i = 0; i < n; i++)
        idx[k++] = i;
    for (int q = 0; q < after; q++) {
        switch (mode) {
        case M_CONSTANT: idx[k++] = -1; break;
        case M_EDGE: idx[k++] = n - 1; break;
        case M_REFLECT: idx[k++] = n - 2 - q; break;        /* x[n-2] .. */
        case M_SYMMETRIC: idx[k++] = n - 1 - q; break;      /* x[n-1] .. */
        }
    }
}

static rimg ref_apply(const rimg *in, const rop *o)
{
    rimg out = {0, 0, 0, NULL};
    switch (o->kind) {
    case R_PAD: {
        out = rimg_new(in->h + o->t + o->b, in->w + o->l + o->r, in->c);
        int *iy = malloc(sizeof(int) * out.h), *ix = malloc(sizeof(int) * out.w);
        pad_axis(in->h, o->t, o->b, o->mode, iy);
        pad_axis(in->w, o->l, o->r, o->mode, ix);
        for (int y = 0; y < out.h; y++)
            for (int x = 0; x < out.w; x++)
                for (int c = 0; c < in->c; c++)
                    *rpx(&out, y, x, c) = (iy[y] < 0 || ix[x] < 0)
                                              ? o->fill[o->nfill == 1 ? 0 : c]
                                              : *rpx(in, iy[y], ix[x], c);
        free(iy);
        free(ix);
        return out;
    }
    case R_CCROP:
    case R_CROP: {
        int top = o->top, left = o->left;
        if (o->kind == R_CCROP) { /* torchvision: int(round((h - H) / 2.0)), half to even */
            top = (int)nearbyint((in->h - o->h) / 2.0);
            left = (int)nearbyint((in->w - o->w) / 2.0);
        }
        assert_true(top >= 0 && left >= 0 && top + o->h <= in->h && left + o->w <= in->w);
        out = rimg_new(o->h, o->w, in->c);
        for (int y = 0; y < out.h; y++)
            for (int x = 0; x < out.w; x++)
                for (int c = 0; c < in->c; c++)
                    *rpx(&out, y, x, c) = *rpx(in, y + top, x + left, c);
        return out;
    }
    case R_HFLIP:
    case R_VFLIP:
        out = rimg_new(in->h, in->w, in->c);
        for (int y = 0; y < out.h; y++)
            for (int x = 0; x < out.w; x++)
                for (int c = 0; c < in->c; c++)
                    *rpx(&out, y, x, c) = o->kind == R_HFLIP ? *rpx(in, y, in->w - 1 - x, c)
                                                             : *rpx(in, in->h - 1 - y, x, c);
        return out;
    }
    fail();
    return out;
}

static rimg ref_run(const rimg *in, const rop *ops, int n)
{
    rimg cur = rimg_new(in->h, in->w, in->c);
    memcpy(cur.px, in->px, sizeof(int) * (size_t)in->h * in->w * in->c);
    for (int i = 0; i < n; i++) {
        rimg nx = ref_apply(&cur, &ops[i]);
        free(cur.px);
        cur = nx;
    }
    return cur;
}

/* Half precision step at |v| (the spacing of halves there). */
static double half_ulp(double v)
{
    v = fabs(v);
    if (v < 0x1p-14)
        return 0x1p-24;
    int e;
    frexp(v, &e); /* v = m * 2^e, m in [0.5, 1) */
    return ldexp(1.0, e - 11);
}

/* Value model: ToTensor then Normalize in double. norm == NULL: v/255 (or
 * the byte itself for u8). */
typedef struct norm {
    double mean[3], std[3];
} norm;

static double ref_value(int v, int c, const norm *nm)
{
    double x = v / 255.0;
    return nm ? (x - nm->mean[c]) / nm->std[c] : x;
}

/* Compare a kernel output against the reference image. Returns 1 when equal
 * (u8 exactly, f32 within 1e-6 relative, f16 within half rounding); on
 * mismatch writes the first difference into why. */
static int compare_out(const void *got, stk_dtype dt, stk_layout lay, const rimg *ref, const norm *nm,
                       char *why, size_t why_n)
{
    int H = ref->h, W = ref->w, C = ref->c;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < C; c++) {
                size_t at = lay == STK_HWC ? ((size_t)y * W + x) * C + c
                                           : (size_t)c * H * W + (size_t)y * W + x;
                int v = *rpx(ref, y, x, c);
                if (dt == STK_U8) {
                    int g = ((const uint8_t *)got)[at];
                    if (g != v) {
                        if (why)
                            snprintf(why, why_n, "(y %d, x %d, c %d): got %d, want %d", y, x, c, g, v);
                        return 0;
                    }
                    continue;
                }
                double r = ref_value(v, c, nm), g, tol;
                if (dt == STK_F32) {
                    g = ((const float *)got)[at];
                    tol = 1e-6 * fmax(1.0, fabs(r));
                } else {
                    g = stk_f16_to_f32(((const uint16_t *)got)[at]);
                    tol = 0.5 * half_ulp(r) + 1e-6 * fmax(1.0, fabs(r));
                }
                if (!(fabs(g - r) <= tol)) {
                    if (why)
                        snprintf(why, why_n, "(y %d, x %d, c %d): got %.9g, want %.9g (pixel %d)", y,
                                 x, c, g, r, v);
                    return 0;
                }
            }
    return 1;
}

/* ---------------------------------------------------------------------- */
/* Sources                                                                 */
/* ---------------------------------------------------------------------- */

enum { SRC_PLANAR, SRC_HWC, SRC_HWC_PADDED, SRC_MIRRORED, SRC_COUNT };
static const char *const src_names[] = {"planar", "hwc", "hwc+rowpad", "mirrored"};

typedef struct source {
    uint8_t *buf;
    stk_image_view v;
} source;

/* A view of `img` in one of the memory layouts. */
static source make_source(const rimg *img, int layout)
{
    int H = img->h, W = img->w, C = img->c;
    source s;
    size_t rowpad = layout == SRC_HWC_PADDED ? 5 : 0;
    size_t n = (size_t)H * ((size_t)W * C + rowpad);
    s.buf = malloc(n); /* exact size: ASan catches any read past the image */
    assert_non_null(s.buf);
    memset(s.buf, 0xEE, n);
    s.v.height = (uint32_t)H;
    s.v.width = (uint32_t)W;
    s.v.channels = (uint32_t)C;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < C; c++) {
                size_t at;
                switch (layout) {
                case SRC_PLANAR: at = (size_t)c * H * W + (size_t)y * W + x; break;
                case SRC_MIRRORED: at = ((size_t)y * W + (W - 1 - x)) * C + c; break;
                default: at = (size_t)y * ((size_t)W * C + rowpad) + (size_t)x * C + c; break;
                }
                s.buf[at] = (uint8_t)*rpx(img, y, x, c);
            }
    switch (layout) {
    case SRC_PLANAR:
        s.v.pixels = s.buf;
        s.v.row_stride = W;
        s.v.col_stride = 1;
        s.v.chan_stride = (ptrdiff_t)H * W;
        break;
    case SRC_MIRRORED: /* logical x is stored at W-1-x: negative column stride */
        s.v.pixels = s.buf + (size_t)(W - 1) * C;
        s.v.row_stride = (ptrdiff_t)W * C;
        s.v.col_stride = -(ptrdiff_t)C;
        s.v.chan_stride = 1;
        break;
    default:
        s.v.pixels = s.buf;
        s.v.row_stride = (ptrdiff_t)((size_t)W * C + rowpad);
        s.v.col_stride = C;
        s.v.chan_stride = 1;
        break;
    }
    return s;
}

static rimg random_image(int h, int w, int c, uint64_t seed)
{
    rimg m = rimg_new(h, w, c);
    size_t n = (size_t)h * w * c;
    uint8_t *b = malloc(n);
    tu_fill_random(b, n, seed);
    for (size_t i = 0; i < n; i++)
        m.px[i] = b[i];
    free(b);
    return m;
}

/* ---------------------------------------------------------------------- */
/* Running a plan with sentinels and a guard zone                          */
/* ---------------------------------------------------------------------- */

#define GUARD 64

typedef struct ran {
    uint8_t *out;
    size_t bytes;
    int64_t shape[3];
    stk_dtype dt;
    stk_layout lay;
} ran;

/* Run the plan on v with the stream (seed, index) twice over different
 * sentinels; fails the test if the two disagree or the guard is touched. */
static ran run_twice(const stk_plan *p, const stk_image_view *v, uint64_t seed, uint64_t index)
{
    ran r;
    stk_plan_output(p, r.shape, &r.dt, &r.lay, &r.bytes);
    uint8_t *a = malloc(r.bytes + GUARD), *b = malloc(r.bytes + GUARD);
    assert_non_null(a);
    assert_non_null(b);
    memset(a, 0x00, r.bytes + GUARD);
    memset(b, 0xFF, r.bytes + GUARD);
    stk_rng ra, rb;
    stk_rng_init(&ra, seed, STK_RNG_DOMAIN_SAMPLE, 0, index);
    stk_rng_init(&rb, seed, STK_RNG_DOMAIN_SAMPLE, 0, index);
    assert_int_equal(stk_plan_run(p, v, &ra, a), 0);
    assert_int_equal(stk_plan_run(p, v, &rb, b), 0);
    if (memcmp(a, b, r.bytes) != 0) {
        size_t i = 0;
        while (a[i] == b[i])
            i++;
        print_error("output byte %zu of %zu not written (sentinels survive: %02x / %02x)\n", i,
                    r.bytes, a[i], b[i]);
        fail();
    }
    for (size_t i = 0; i < GUARD; i++) {
        if (a[r.bytes + i] != 0x00 || b[r.bytes + i] != 0xFF) {
            print_error("write past the end of the sample (byte %zu after)\n", i);
            fail();
        }
    }
    free(b);
    r.out = a;
    return r;
}

static const int isas[] = {STK_ISA_C, STK_ISA_SSE2, STK_ISA_AVX2};
static const char *const isa_names[] = {"c", "sse2", "avx2"};

/* Whether kernel variant isas[ii] runs on this CPU. One that cannot is
 * reported once, so a run on a CPU without it says what it did not compare. */
static int isa_runs(size_t ii)
{
    static int reported[3];
    if (stk_kernel_isa_available(isas[ii]))
        return 1;
    if (!reported[ii]++)
        print_message("[ SKIPPED  ] kernel variant %s: not available on this CPU, not compared\n",
                      isa_names[ii]);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* f16                                                                     */
/* ---------------------------------------------------------------------- */

static float bits_f(uint32_t x)
{
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static void test_half_known(void **state)
{
    (void)state;
    static const struct {
        float f;
        uint16_t h;
    } k[] = {
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {0.5f, 0x3800},
        {65504.0f, 0x7bff},         /* largest half */
        {65519.99f, 0x7bff},        /* just below the midpoint to inf */
        {65520.0f, 0x7c00},         /* midpoint: ties to even = inf */
        {1e6f, 0x7c00},
        {-1e6f, 0xfc00},
        {0x1p-14f, 0x0400},         /* smallest normal */
        {0x1p-24f, 0x0001},         /* smallest subnormal */
        {0x1p-25f, 0x0000},         /* half of it: ties to even = 0 */
        {0x1.000002p-25f, 0x0001},  /* just above: rounds up */
        {0x1.8p-24f, 0x0002},       /* 1.5 ulp: ties to even = 2 */
        {0x1.4p-23f, 0x0002},       /* 2.5 ulp: ties to even = 2 */
        {0x1.ff8p-15f, 0x03ff},     /* largest subnormal */
        {0x1.ffcp-15f, 0x0400},     /* tie: rounds up into the normals (even) */
        {0x1.ffap-15f, 0x03ff},     /* below the tie */
        {1.0f + 0x1p-11f, 0x3c00},  /* tie, even stays */
        {1.0f + 0x3p-11f, 0x3c02},  /* tie, odd rounds up */
        {1.0f + 0x1.8p-11f, 0x3c01},
        {0.1f, 0x2e66},
        {1.0f / 3.0f, 0x3555},
        {3.14159265f, 0x4248},
        {2047.5f, 0x6800},          /* tie between 2047 and 2048: even */
        {2046.5f, 0x67fe},          /* tie between 2046 and 2047: even */
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        uint16_t h = stk_f32_to_f16(k[i].f);
        if (h != k[i].h) {
            print_error("f32_to_f16(%a) = 0x%04x, want 0x%04x\n", (double)k[i].f, h, k[i].h);
            fail();
        }
    }
    assert_int_equal(stk_f32_to_f16(bits_f(0x7f800000u)), 0x7c00);
    assert_int_equal(stk_f32_to_f16(bits_f(0xff800000u)), 0xfc00);
    uint16_t n = stk_f32_to_f16(bits_f(0x7fc00000u));
    assert_true((n & 0x7c00) == 0x7c00 && (n & 0x03ff) != 0);
    n = stk_f32_to_f16(bits_f(0x7f800001u)); /* signalling NaN with a low payload */
    assert_true((n & 0x7c00) == 0x7c00 && (n & 0x03ff) != 0);
    n = stk_f32_to_f16(bits_f(0xffc00000u));
    assert_true((n & 0xfc00) == 0xfc00 && (n & 0x03ff) != 0);
}

/* bfloat16: hand-computed bit patterns (the top 16 bits, rounded to nearest
 * even), and every bfloat16 converts to float and back exactly. */
static void test_bf16_known(void **state)
{
    (void)state;
    static const struct {
        uint32_t f;
        uint16_t h;
    } k[] = {
        {0x00000000u, 0x0000}, {0x80000000u, 0x8000}, {0x3f800000u, 0x3f80}, /* 0, -0, 1 */
        {0x3f808000u, 0x3f80}, /* 1 + half an ulp: tie, even stays */
        {0x3f818000u, 0x3f82}, /* tie, odd rounds up */
        {0x3f808001u, 0x3f81}, /* just above the tie */
        {0x3f807fffu, 0x3f80}, /* just below */
        {0x7f7fffffu, 0x7f80}, /* the largest float rounds past the largest bf16: inf */
        {0x7f7f7fffu, 0x7f7f}, /* below the midpoint: the largest bf16 */
        {0x7f800000u, 0x7f80}, {0xff800000u, 0xff80}, /* +-inf */
        {0x00000001u, 0x0000}, /* the smallest subnormal rounds to 0 */
        {0x00018000u, 0x0002}, /* subnormal tie, odd rounds up */
        {0x3dcccccdu, 0x3dcd}, /* 0.1f */
        {0xbeaaaaabu, 0xbeab}, /* -1/3 */
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        uint16_t h = stk_f32_to_bf16(bits_f(k[i].f));
        if (h != k[i].h) {
            print_error("f32_to_bf16(0x%08x) = 0x%04x, want 0x%04x\n", k[i].f, h, k[i].h);
            fail();
        }
    }
    assert_int_equal(stk_f32_to_bf16(bits_f(0x7fc00000u)), 0x7fc0);
    assert_int_equal(stk_f32_to_bf16(bits_f(0x7f800001u)), 0x7fc0); /* NaN stays NaN */
    assert_int_equal(stk_f32_to_bf16(bits_f(0xffffffffu)), 0x7fc0);
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7f80) == 0x7f80 && (h & 0x7f))
            continue; /* NaN */
        assert_int_equal(stk_f32_to_bf16(stk_bf16_to_f32((uint16_t)h)), h);
    }
}

/* Every half converts to a float and back exactly; the midpoint between
 * neighbours rounds to the even one, and a hair either side of it to the
 * nearer one. */
static void test_half_exhaustive(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint16_t hh = (uint16_t)h;
        if ((hh & 0x7c00) == 0x7c00 && (hh & 0x03ff))
            continue; /* NaN */
        float f = stk_f16_to_f32(hh);
        assert_int_equal(stk_f32_to_f16(f), hh);
        if ((hh & 0x7fff) >= 0x7bff)
            continue; /* no finite neighbour above */
        float g = stk_f16_to_f32((uint16_t)(hh + 1)); /* next away from zero */
        double mid = ((double)f + (double)g) / 2;     /* exact in float: halves have 11 bits */
        float m = (float)mid;
        assert_true((double)m == mid);
        uint16_t even = (hh & 1) ? (uint16_t)(hh + 1) : hh;
        assert_int_equal(stk_f32_to_f16(m), even);
        assert_int_equal(stk_f32_to_f16(nextafterf(m, f)), hh);
        assert_int_equal(stk_f32_to_f16(nextafterf(m, g)), (uint16_t)(hh + 1));
    }
    /* The top: 65504 + 16 is the midpoint to infinity. */
    assert_int_equal(stk_f32_to_f16(nextafterf(65520.0f, 0.0f)), 0x7bff);
}

/* Against the compiler's own correctly rounded conversion where there is one. */
static void test_half_vs_compiler(void **state)
{
    (void)state;
#if defined(__FLT16_MAX__) && !defined(__clang__)
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 2000000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint32_t b = (uint32_t)x;
        if (i & 1) /* concentrate on the half range */
            b = (b & 0x80000000u) | (0x33000000u + (b % (0x47800000u - 0x33000000u)));
        float f = bits_f(b);
        if (isnan(f))
            continue;
        _Float16 c = (_Float16)f;
        uint16_t want;
        memcpy(&want, &c, 2);
        uint16_t got = stk_f32_to_f16(f);
        if (got != want) {
            print_error("f32_to_f16(%a): 0x%04x, compiler 0x%04x\n", (double)f, got, want);
            fail();
        }
    }
#else
    skip();
#endif
}

/* ---------------------------------------------------------------------- */
/* Deterministic pipelines vs the reference                                */
/* ---------------------------------------------------------------------- */

typedef struct gcase {
    const char *spec;
    int nops;
    rop ops[4];
    int only_c3; /* per-channel fill values */
} gcase;

#define PAD(l_, t_, r_, b_, m_, f_) {.kind = R_PAD, .l = l_, .t = t_, .r = r_, .b = b_, .mode = m_, .nfill = 1, .fill = {f_}}
#define CC(h_, w_) {.kind = R_CCROP, .h = h_, .w = w_}
#define HF {.kind = R_HFLIP}
#define VF {.kind = R_VFLIP}

/* Inputs are at least 13 x 21 (H x W). */
static const gcase gcases[] = {
    {"", 0, {{0}}, 0},
    {"center_crop 7,9", 1, {CC(7, 9)}, 0},
    {"center_crop 6", 1, {CC(6, 6)}, 0},
    {"center_crop 12, 20", 1, {CC(12, 20)}, 0},
    {"flip 1", 1, {HF}, 0},
    {"hflip 1.0", 1, {HF}, 0},
    {"flip 0", 0, {{0}}, 0},
    {"vflip 1", 1, {VF}, 0},
    {"vflip p=0 | flip 1 | vflip 1", 2, {HF, VF}, 0},
    {"pad 3", 1, {PAD(3, 3, 3, 3, M_CONSTANT, 0)}, 0},
    {"pad 1,2 fill=7", 1, {PAD(1, 2, 1, 2, M_CONSTANT, 7)}, 0},
    {"pad 2,1,3,4 fill=10,20,30", 1,
     {{.kind = R_PAD, .l = 2, .t = 1, .r = 3, .b = 4, .mode = M_CONSTANT, .nfill = 3, .fill = {10, 20, 30}}},
     1},
    {"pad 2 mode=edge", 1, {PAD(2, 2, 2, 2, M_EDGE, 0)}, 0},
    {"pad 30,1,0,25 mode=edge", 1, {PAD(30, 1, 0, 25, M_EDGE, 0)}, 0},
    {"pad 3,1 mode=reflect", 1, {PAD(3, 1, 3, 1, M_REFLECT, 0)}, 0},
    {"pad 12 mode=reflect", 1, {PAD(12, 12, 12, 12, M_REFLECT, 0)}, 0},
    {"pad 1,2,0,3 mode=symmetric", 1, {PAD(1, 2, 0, 3, M_SYMMETRIC, 0)}, 0},
    {"pad 13 padding_mode=symmetric", 1, {PAD(13, 13, 13, 13, M_SYMMETRIC, 0)}, 0},
    {"pad 4 mode=reflect | center_crop 11,13 | flip 1 | vflip 1", 4,
     {PAD(4, 4, 4, 4, M_REFLECT, 0), CC(11, 13), HF, VF}, 0},
    {"pad 5 fill=200 | center_crop 16,27", 2, {PAD(5, 5, 5, 5, M_CONSTANT, 200), CC(16, 27)}, 0},
    {"pad 2 fill=9 | pad 1 mode=edge", 2, {PAD(2, 2, 2, 2, M_CONSTANT, 9), PAD(1, 1, 1, 1, M_EDGE, 0)}, 0},
    {"pad 1 mode=edge | pad 2 fill=5 | pad 3,1 mode=reflect", 3,
     {PAD(1, 1, 1, 1, M_EDGE, 0), PAD(2, 2, 2, 2, M_CONSTANT, 5), PAD(3, 1, 3, 1, M_REFLECT, 0)}, 0},
    {"pad 2 fill=3 | flip 1 | pad 0,1,4,2 fill=250 | vflip 1", 4,
     {PAD(2, 2, 2, 2, M_CONSTANT, 3), HF, PAD(0, 1, 4, 2, M_CONSTANT, 250), VF}, 0},
    {"vflip 1 | pad 3,1,0,2 mode=symmetric | flip 1 | center_crop 10,20", 4,
     {VF, PAD(3, 1, 0, 2, M_SYMMETRIC, 0), HF, CC(10, 20)}, 0},
    {"pad 6,0 fill=1 | center_crop 13,24 | flip 1", 3, {PAD(6, 0, 6, 0, M_CONSTANT, 1), CC(13, 24), HF}, 0},
    {"center_crop 5,3 | pad 2 mode=reflect | pad 2 mode=symmetric", 3,
     {CC(5, 3), PAD(2, 2, 2, 2, M_REFLECT, 0), PAD(2, 2, 2, 2, M_SYMMETRIC, 0)}, 0},
};

typedef struct vcase {
    const char *suffix;
    stk_dtype dt;
    stk_layout lay;
    int normalize; /* 0 none, 1 per-channel, 2 one value */
} vcase;

static const vcase vcases[] = {
    {"", STK_U8, STK_HWC, 0},
    {" | to u8 chw", STK_U8, STK_CHW, 0},
    {" | to f32 hwc", STK_F32, STK_HWC, 0},
    {" | to float16", STK_F16, STK_CHW, 0},
    {" | NORMALIZE", STK_F32, STK_CHW, 1},
    {" | NORMALIZE | to f32 hwc", STK_F32, STK_HWC, 1},
    {" | NORMALIZE | to f16 chw", STK_F16, STK_CHW, 1},
    {" | NORMALIZE | to half hwc", STK_F16, STK_HWC, 2},
};

static void norm_for(int kind, int C, norm *nm, char *text, size_t n)
{
    static const double mean[3] = {0.4914, 0.4822, 0.4465}, std[3] = {0.2470, 0.2435, 0.2616};
    if (kind == 2) {
        for (int c = 0; c < 3; c++) {
            nm->mean[c] = 0.5;
            nm->std[c] = 0.25;
        }
        snprintf(text, n, "normalize 0.5 0.25");
        return;
    }
    for (int c = 0; c < 3; c++) {
        nm->mean[c] = mean[c];
        nm->std[c] = std[c];
    }
    if (C == 3)
        snprintf(text, n, "normalize cifar10");
    else if (C == 2)
        snprintf(text, n, "normalize mean=%g,%g std=%g,%g", mean[0], mean[1], std[0], std[1]);
    else
        snprintf(text, n, "normalize %g %g", mean[0], std[0]);
}

/* Build the full spec text: geometry, value suffix (NORMALIZE replaced). */
static void build_spec(char *out, size_t n, const char *geo, const vcase *vc, int C, norm *nm)
{
    char ntext[128] = "", suffix[256];
    if (vc->normalize)
        norm_for(vc->normalize, C, nm, ntext, sizeof ntext);
    const char *s = vc->suffix, *at = strstr(s, "NORMALIZE");
    if (at)
        snprintf(suffix, sizeof suffix, "%.*s%s%s", (int)(at - s), s, ntext, at + 9);
    else
        snprintf(suffix, sizeof suffix, "%s", s);
    if (!geo[0] && suffix[0])
        snprintf(out, n, "%s", suffix + 3); /* drop the leading " | " */
    else
        snprintf(out, n, "%s%s", geo, suffix);
}

static void test_geometry_vs_reference(void **state)
{
    (void)state;
    static const int shapes[][2] = {{13, 21}, {40, 37}, {16, 64}};
    int checked = 0;
    for (size_t ii = 0; ii < 3; ii++) {
        if (!isa_runs(ii))
            continue;
        int old = stk_kernel_force_isa(isas[ii]);
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            for (int C = 1; C <= 3; C++) {
                rimg img = random_image(shapes[si][0], shapes[si][1], C, 1000 + si * 10 + C);
                for (int sl = 0; sl < SRC_COUNT; sl++) {
                    source src = make_source(&img, sl);
                    for (size_t gi = 0; gi < sizeof gcases / sizeof gcases[0]; gi++) {
                        const gcase *g = &gcases[gi];
                        if (g->only_c3 && C != 3)
                            continue;
                        rimg ref = ref_run(&img, g->ops, g->nops);
                        for (size_t vi = 0; vi < sizeof vcases / sizeof vcases[0]; vi++) {
                            const vcase *vc = &vcases[vi];
                            char spec[512];
                            norm nm;
                            build_spec(spec, sizeof spec, g->spec, vc, C, &nm);
                            stk_plan *p = NULL;
                            int rc = stk_plan_compile(spec, (uint32_t)img.h, (uint32_t)img.w,
                                                      (uint32_t)C, &p);
                            if (rc != 0) {
                                print_error("compile '%s' (%dx%dx%d): %s\n", spec, img.h, img.w, C,
                                            stk_errmsg());
                                fail();
                            }
                            ran r = run_twice(p, &src.v, 7, gi);
                            assert_int_equal(r.dt, vc->dt);
                            assert_int_equal(r.lay, vc->lay);
                            int64_t want[3] = {ref.h, ref.w, C};
                            if (r.lay == STK_CHW) {
                                want[0] = C;
                                want[1] = ref.h;
                                want[2] = ref.w;
                            }
                            assert_memory_equal(r.shape, want, sizeof want);
                            char why[256];
                            if (!compare_out(r.out, r.dt, r.lay, &ref, vc->normalize ? &nm : NULL,
                                             why, sizeof why)) {
                                print_error("isa %s, source %s, %dx%dx%d, spec '%s': %s\n",
                                            isa_names[ii], src_names[sl], img.h, img.w, C, spec,
                                            why);
                                fail();
                            }
                            free(r.out);
                            stk_plan_free(p);
                            checked++;
                        }
                        free(ref.px);
                    }
                    free(src.buf);
                }
                free(img.px);
            }
        }
        stk_kernel_force_isa(old);
    }
    assert_true(checked > 1000);
}

/* Every kernel variant gives the same bytes. */
static void test_variants_identical(void **state)
{
    (void)state;
    static const char *const specs[] = {
        "pad 4 | random_crop 32 | flip | normalize cifar10 | to f32 chw",
        "pad 4 | random_crop 32 | flip | normalize cifar10 | to f16 chw",
        "pad 4 mode=reflect | random_crop 30,31 | flip | vflip | normalize 0.1,0.2,0.3 0.3,0.2,0.1 | to f32 hwc",
        "pad 4 mode=symmetric | random_crop 32 | flip | normalize imagenet | to f16 hwc",
        "pad 3,5 mode=edge | random_crop 33 | flip | to u8 hwc",
        "pad 3,5 fill=1,2,3 | random_crop 33 | flip | vflip | to u8 chw",
    };
    rimg img = random_image(32, 32, 3, 77);
    for (int sl = 0; sl < SRC_COUNT; sl++) {
        source src = make_source(&img, sl);
        for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
            uint8_t *first = NULL;
            size_t bytes = 0;
            for (size_t ii = 0; ii < 3; ii++) {
                if (!isa_runs(ii))
                    continue;
                int old = stk_kernel_force_isa(isas[ii]);
                stk_plan *p;
                assert_int_equal(stk_plan_compile(specs[k], 32, 32, 3, &p), 0);
                stk_kernel_force_isa(old);
                stk_plan_output(p, NULL, NULL, NULL, &bytes);
                uint8_t *all = malloc(bytes * 64);
                for (uint64_t i = 0; i < 64; i++) {
                    stk_rng rng;
                    stk_rng_init(&rng, 99, STK_RNG_DOMAIN_SAMPLE, 3, i);
                    assert_int_equal(stk_plan_run(p, &src.v, &rng, all + i * bytes), 0);
                }
                if (!first) {
                    first = all;
                } else {
                    if (memcmp(first, all, bytes * 64) != 0) {
                        print_error("variant %s differs on '%s' (%s source)\n", isa_names[ii],
                                    specs[k], src_names[sl]);
                        fail();
                    }
                    free(all);
                }
                stk_plan_free(p);
            }
            free(first);
        }
        free(src.buf);
    }
    free(img.px);
}

/* ---------------------------------------------------------------------- */
/* Random crop and flips                                                   */
/* ---------------------------------------------------------------------- */

typedef struct rcase {
    const char *spec;
    rop pre;      /* the pad before the crop */
    int ch, cw;   /* crop size */
    double ph, pv; /* flip probabilities (negative: no such op) */
    int normalize;
} rcase;

/* Which (top, left, hflip, vflip) reproduces `out`? Returns the number of
 * matches; the first is stored in found[4]. */
static int find_params(const void *out, stk_dtype dt, stk_layout lay, const rimg *padded,
                       const rcase *rc, const norm *nm, int found[4])
{
    int matches = 0;
    for (int top = 0; top <= padded->h - rc->ch; top++)
        for (int left = 0; left <= padded->w - rc->cw; left++)
            for (int hf = 0; hf <= (rc->ph >= 0); hf++)
                for (int vf = 0; vf <= (rc->pv >= 0); vf++) {
                    rop ops[3] = {{.kind = R_CROP, .top = top, .left = left, .h = rc->ch, .w = rc->cw},
                                  HF, VF};
                    rop seq[3];
                    int n = 0;
                    seq[n++] = ops[0];
                    if (hf)
                        seq[n++] = ops[1];
                    if (vf)
                        seq[n++] = ops[2];
                    rimg ref = ref_run(padded, seq, n);
                    if (compare_out(out, dt, lay, &ref, nm, NULL, 0)) {
                        if (!matches) {
                            found[0] = top;
                            found[1] = left;
                            found[2] = hf;
                            found[3] = vf;
                        }
                        matches++;
                    }
                    free(ref.px);
                }
    return matches;
}

static void test_random_crop_flip_matches_reference(void **state)
{
    (void)state;
    static const rcase cases[] = {
        {"pad 4 | random_crop 32 | flip | normalize cifar10 | to f32 chw",
         PAD(4, 4, 4, 4, M_CONSTANT, 0), 32, 32, 0.5, -1, 1},
        {"random_crop 30,28 padding=3,2 mode=reflect | flip 0.3 | vflip 0.6 | to u8 hwc",
         PAD(3, 2, 3, 2, M_REFLECT, 0), 30, 28, 0.3, 0.6, 0},
        {"pad 2,5 mode=edge | random_crop 33,20 | vflip | to f16 hwc",
         PAD(2, 5, 2, 5, M_EDGE, 0), 33, 20, -1, 0.5, 0},
        {"random_crop 32", PAD(0, 0, 0, 0, M_CONSTANT, 0), 32, 32, -1, -1, 0},
    };
    rimg img = random_image(32, 32, 3, 4242);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const rcase *rc = &cases[ci];
        rimg padded = ref_apply(&img, &rc->pre);
        norm nm;
        char ntext[64];
        norm_for(1, 3, &nm, ntext, sizeof ntext);
        for (int sl = 0; sl < SRC_COUNT; sl += 1) {
            source src = make_source(&img, sl);
            stk_plan *p;
            if (stk_plan_compile(rc->spec, 32, 32, 3, &p) != 0) {
                print_error("%s\n", stk_errmsg());
                fail();
            }
            for (uint64_t i = 0; i < 40; i++) {
                ran r = run_twice(p, &src.v, 5, i * 7919);
                int found[4];
                int m = find_params(r.out, r.dt, r.lay, &padded, rc, rc->normalize ? &nm : NULL, found);
                if (m == 0) {
                    print_error("'%s' sample %llu (%s): output matches no crop/flip\n", rc->spec,
                                (unsigned long long)i, src_names[sl]);
                    fail();
                }
                /* The documented draw order: top, left, then each flip. */
                stk_rng rng;
                stk_rng_init(&rng, 5, STK_RNG_DOMAIN_SAMPLE, 0, i * 7919);
                int top = (int)stk_rng_range(&rng, 0, padded.h - rc->ch);
                int left = (int)stk_rng_range(&rng, 0, padded.w - rc->cw);
                int hf = rc->ph >= 0 ? stk_rng_uniform(&rng) < rc->ph : 0;
                int vf = rc->pv >= 0 ? stk_rng_uniform(&rng) < rc->pv : 0;
                if (m != 1 || found[0] != top || found[1] != left || found[2] != hf ||
                    found[3] != vf) {
                    print_error("'%s' sample %llu (%s): %d matches, found %d,%d,%d,%d, drawn "
                                "%d,%d,%d,%d\n",
                                rc->spec, (unsigned long long)i, src_names[sl], m, found[0],
                                found[1], found[2], found[3], top, left, hf, vf);
                }
                assert_int_equal(m, 1); /* random pixels: the parameters are identifiable */
                assert_int_equal(found[0], top);
                assert_int_equal(found[1], left);
                assert_int_equal(found[2], hf);
                assert_int_equal(found[3], vf);
                free(r.out);
            }
            stk_plan_free(p);
            free(src.buf);
        }
        free(padded.px);
    }
    free(img.px);
}

/* Upper quantile of chi-square with k degrees of freedom at p = 1e-6
 * (Wilson-Hilferty). */
static double chi2_bound(int k)
{
    double z = 4.753, a = 2.0 / (9.0 * k);
    double t = 1.0 - a + z * sqrt(a);
    return k * t * t * t;
}

static double chi2(const long *counts, int n, double expected)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (counts[i] - expected) * (counts[i] - expected) / expected;
    return s;
}

/* Over many streams every offset occurs, offsets are uniform, and flips
 * happen with probability p. The image codes each position so the
 * parameters can be read back cheaply. */
static void run_histogram(const char *spec, double p)
{
    enum { H = 8, W = 8, PADN = 2, CH = 8, CW = 8, NT = H + 2 * PADN - CH + 1,
           NL = W + 2 * PADN - CW + 1, N = 20000 };
    rimg img = rimg_new(H, W, 1);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            *rpx(&img, y, x, 0) = 1 + y * W + x; /* unique, never the fill 0 */
    source src = make_source(&img, SRC_HWC);
    rop pad = PAD(PADN, PADN, PADN, PADN, M_CONSTANT, 0);
    rimg padded = ref_apply(&img, &pad);
    stk_plan *pl;
    assert_int_equal(stk_plan_compile(spec, H, W, 1, &pl), 0);
    long cell[NT * NL] = {0}, tops[NT] = {0}, lefts[NL] = {0}, flips = 0;
    uint8_t out[CH * CW];
    for (uint64_t i = 0; i < N; i++) {
        stk_rng rng;
        stk_rng_init(&rng, 123, STK_RNG_DOMAIN_SAMPLE, 1, i);
        assert_int_equal(stk_plan_run(pl, &src.v, &rng, out), 0);
        /* The source pixel at output (y, x) tells the offset: find the first
         * non-fill pixel and where it came from. */
        int found = 0;
        for (int y = 0; y < CH && !found; y++)
            for (int x = 0; x < CW && !found; x++) {
                int v = out[y * CW + x];
                if (!v)
                    continue;
                int sy = (v - 1) / W + PADN, sx = (v - 1) % W + PADN; /* in padded coords */
                for (int f = 0; f < 2 && !found; f++) {
                    int ox = f ? CW - 1 - x : x;
                    int top = sy - y, left = sx - ox;
                    if (top < 0 || left < 0 || top >= NT || left >= NL)
                        continue;
                    /* confirm the whole output */
                    int ok = 1;
                    for (int yy = 0; yy < CH && ok; yy++)
                        for (int xx = 0; xx < CW && ok; xx++) {
                            int px = f ? CW - 1 - xx : xx;
                            ok = out[yy * CW + xx] == *rpx(&padded, top + yy, left + px, 0);
                        }
                    if (ok) {
                        found = 1;
                        cell[top * NL + left]++;
                        tops[top]++;
                        lefts[left]++;
                        flips += f;
                    }
                }
            }
        assert_true(found);
    }
    for (int i = 0; i < NT * NL; i++)
        assert_true(cell[i] > 0);
    double c2 = chi2(cell, NT * NL, (double)N / (NT * NL));
    double b2 = chi2_bound(NT * NL - 1);
    if (!(c2 < b2)) {
        print_error("offset histogram chi-square %.1f >= %.1f\n", c2, b2);
        fail();
    }
    assert_true(chi2(tops, NT, (double)N / NT) < chi2_bound(NT - 1));
    assert_true(chi2(lefts, NL, (double)N / NL) < chi2_bound(NL - 1));
    double sd = sqrt(N * p * (1 - p));
    if (!(fabs(flips - N * p) <= 5 * sd + 0.5)) {
        print_error("flips %ld of %d at p = %g\n", flips, N, p);
        fail();
    }
    stk_plan_free(pl);
    free(padded.px);
    free(src.buf);
    free(img.px);
}

static void test_random_histograms(void **state)
{
    (void)state;
    run_histogram("pad 2 | random_crop 8 | flip", 0.5);
    run_histogram("random_crop 8 padding=2 | hflip 0.25", 0.25);
    run_histogram("pad 2 | random_crop 8 | flip 0", 0.0);
    run_histogram("pad 2 | random_crop 8 | flip p=1", 1.0);
}

/* The same stream gives the same bytes; different streams differ. */
static void test_determinism(void **state)
{
    (void)state;
    rimg img = random_image(32, 32, 3, 9);
    source src = make_source(&img, SRC_PLANAR);
    stk_plan *p;
    assert_int_equal(
        stk_plan_compile("pad 4 | random_crop 32 | flip | vflip 0.5 | normalize cifar10", 32, 32, 3, &p),
        0);
    size_t bytes;
    stk_plan_output(p, NULL, NULL, NULL, &bytes);
    int differ = 0;
    for (uint64_t i = 0; i < 50; i++) {
        ran a = run_twice(p, &src.v, 31, i), b = run_twice(p, &src.v, 31, i),
            c = run_twice(p, &src.v, 32, i);
        assert_memory_equal(a.out, b.out, bytes);
        differ += memcmp(a.out, c.out, bytes) != 0;
        free(a.out);
        free(b.out);
        free(c.out);
    }
    assert_true(differ > 40);
    /* The draws advance the stream by exactly what the spec says: 2 range
     * draws (1 word each for small ranges) and 2 uniforms (2 words each). */
    stk_rng r1, r2;
    stk_rng_init(&r1, 1, STK_RNG_DOMAIN_SAMPLE, 0, 0);
    stk_rng_init(&r2, 1, STK_RNG_DOMAIN_SAMPLE, 0, 0);
    uint8_t *out = malloc(bytes);
    assert_int_equal(stk_plan_run(p, &src.v, &r1, out), 0);
    for (int k = 0; k < 6; k++)
        stk_rng_u32(&r2);
    assert_int_equal(stk_rng_u32(&r1), stk_rng_u32(&r2));
    free(out);
    stk_plan_free(p);
    free(src.buf);
    free(img.px);
}

/* Large images and long rows (multi-chunk runs, staging in pieces). */
static void test_wide_images(void **state)
{
    (void)state;
    static const struct {
        uint32_t h, w, c;
        const char *spec;
        rop ops[3];
        int nops;
    } cases[] = {
        {3, 3000, 3, "pad 5,1 mode=reflect | flip 1 | normalize 0.5 0.5 | to f32 hwc",
         {PAD(5, 1, 5, 1, M_REFLECT, 0), HF}, 2},
        {2, 2500, 3, "flip 1 | to f32 chw", {HF}, 1},
        {4, 1500, 3, "center_crop 3,1400 | flip 1 | to f16 hwc", {CC(3, 1400), HF}, 2},
        {2, 1200, 5, "pad 3,2 mode=symmetric | flip 1 | to f32 hwc", {PAD(3, 2, 3, 2, M_SYMMETRIC, 0), HF}, 2},
    };
    for (size_t ii = 0; ii < 3; ii++) {
        if (!isa_runs(ii))
            continue;
        int old = stk_kernel_force_isa(isas[ii]);
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            rimg img = random_image((int)cases[k].h, (int)cases[k].w, (int)cases[k].c, k);
            rimg ref = ref_run(&img, cases[k].ops, cases[k].nops);
            norm nm;
            for (int c = 0; c < 3; c++)
                nm.mean[c] = nm.std[c] = 0.5;
            for (int sl = 0; sl < SRC_COUNT; sl++) {
                source src = make_source(&img, sl);
                stk_plan *p;
                assert_int_equal(stk_plan_compile(cases[k].spec, cases[k].h, cases[k].w,
                                                  cases[k].c, &p),
                                 0);
                ran r = run_twice(p, &src.v, 1, 1);
                char why[256];
                if (!compare_out(r.out, r.dt, r.lay, &ref,
                                 strstr(cases[k].spec, "normalize") ? &nm : NULL, why, sizeof why)) {
                    print_error("%s '%s' %s: %s\n", isa_names[ii], cases[k].spec, src_names[sl], why);
                    fail();
                }
                free(r.out);
                stk_plan_free(p);
                free(src.buf);
            }
            free(ref.px);
            free(img.px);
        }
        stk_kernel_force_isa(old);
    }
}

/* ---------------------------------------------------------------------- */
/* API edges                                                               */
/* ---------------------------------------------------------------------- */

static void test_run_errors(void **state)
{
    (void)state;
    rimg img = random_image(8, 8, 3, 1);
    source src = make_source(&img, SRC_HWC);
    stk_plan *p;
    uint8_t out[8 * 8 * 3 * 4];
    assert_int_equal(stk_plan_compile("flip", 8, 8, 3, &p), 0);
    assert_int_equal(stk_plan_run(p, &src.v, NULL, out), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "rng"));
    stk_image_view v = src.v;
    v.width = 7;
    stk_rng rng;
    stk_rng_init(&rng, 1, STK_RNG_DOMAIN_SAMPLE, 0, 0);
    assert_int_equal(stk_plan_run(p, &v, &rng, out), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "8x8x3"));
    stk_plan_free(p);

    /* No random op: no rng needed. */
    assert_int_equal(stk_plan_compile("center_crop 4 | normalize imagenet", 8, 8, 3, &p), 0);
    assert_int_equal(stk_plan_run(p, &src.v, NULL, out), 0);
    int64_t shape[3];
    stk_dtype dt;
    stk_layout lay;
    size_t bytes;
    stk_plan_output(p, shape, &dt, &lay, &bytes);
    assert_int_equal(shape[0], 3);
    assert_int_equal(shape[1], 4);
    assert_int_equal(shape[2], 4);
    assert_int_equal(dt, STK_F32);
    assert_int_equal(lay, STK_CHW);
    assert_int_equal(bytes, 3 * 4 * 4 * 4);
    stk_plan_free(p);
    stk_plan_free(NULL);

    assert_int_equal(stk_plan_compile("flip", 0, 8, 3, &p), STK_EINVAL);
    assert_null(p);
    assert_int_equal(stk_plan_compile(NULL, 8, 8, 3, &p), STK_EINVAL);
    assert_int_equal(stk_plan_compile("flip", 8, 8, 3, NULL), STK_EINVAL);
    free(src.buf);
    free(img.px);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_known),
        cmocka_unit_test(test_half_exhaustive),
        cmocka_unit_test(test_bf16_known),
        cmocka_unit_test(test_half_vs_compiler),
        cmocka_unit_test(test_geometry_vs_reference),
        cmocka_unit_test(test_variants_identical),
        cmocka_unit_test(test_random_crop_flip_matches_reference),
        cmocka_unit_test(test_random_histograms),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_wide_images),
        cmocka_unit_test(test_run_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
