/*
 * resample.c — Pillow's antialiased bilinear resize, bit-exact, with plain C
 * and AVX2 passes (see resample.h for what is reproduced and why); bicubic
 * swaps the filter and its support (2), nearest builds one-tap windows at
 * Pillow's accumulated positions, and the passes are unchanged.
 *
 * Tables. stk_rs_build mirrors precompute_coeffs() and
 * normalize_coeffs_8bpc() of Pillow 9 line by line: for output xx,
 *
 *     center = in0 + (xx + off + 0.5) * scale
 *     filterscale = max(scale, 1); support = 1.0 * filterscale
 *     xmin = max(0, (int)(center - support + 0.5))
 *     xmax = min(in_size, (int)(center + support + 0.5)) - xmin
 *     w[x] = tri((x + xmin - center + 0.5) / filterscale), x < xmax
 *     k[x] = (int)(0.5 + w[x] / sum(w) * 2^22)
 *
 * with tri(t) = max(0, 1 - |t|), all in double as Pillow computes them.
 * Windows are monotonic in xx, so the source range all of them cover is the
 * union of the first and the last (stk_rs_range gets it without building
 * anything, which lets the image pipeline decode only that range).
 *
 * Passes. The sum for one output value is 2^21 + sum(pixel * k) in int32
 * (no overflow: the weights are >= 0 and sum to about 2^22, pixels <= 255),
 * shifted right by 22 and clamped to 0..255 — exactly Pillow's clip8. Every
 * variant computes the same integers, so all give identical bytes. The
 * windows are padded with zero weights to one length (`taps`) so the loops
 * have no per-pixel trip count; the padding reads up to taps - 1 pixels
 * past a window, which the caller keeps readable (STK_RS_SLACK).
 *
 * SIMD horizontal pass, 3 channels: one output pixel per 128-bit lane, so
 * two per AVX2 register and four per AVX-512 register. One 16-byte load per
 * pixel covers five taps (15 bytes); PSHUFB spreads tap u's R, G, B bytes
 * into three int32 lanes, VPMULLD multiplies by the tap's weight
 * (pre-broadcast per lane in the `lanes` table: 4 int32 per pixel and tap)
 * and VPADDD accumulates. The vertical pass multiplies 32 (AVX2) or 64
 * (AVX-512) values of each tap row by that row's weight. Every variant
 * computes the same integer sums, so the bytes are identical (tested).
 */
#include "ops/resample.h"

#include "core/cpu.h"

#include "core/error.h"
#include "core/util.h"
#include "ops/kernel.h"
#include "stoker/stoker.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(STK_NO_SIMD)
#define RS_X86 1
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#else
#define RS_X86 0
#endif

/* ---------------------------------------------------------------------- */
/* Tables                                                                  */
/* ---------------------------------------------------------------------- */

#define RS_MAX_COORD 1073741823.0 /* 2^30 - 1: every coordinate fits int32 */

/* Pillow's support: the filter's, stretched by the downscale factor. */
static inline double rs_support(double scale, int filter)
{
    double fs = scale < 1.0 ? 1.0 : scale;
    return (filter == STK_RS_BICUBIC ? 2.0 : 1.0) * fs;
}

/* Pillow's bilinear_filter and bicubic_filter (a = -0.5), in double. */
static inline double rs_filter(double x, int filter)
{
    if (filter == STK_RS_NEAREST) /* the window is the one pixel */
        return 1.0;
    if (x < 0.0)
        x = -x;
    if (filter == STK_RS_BICUBIC) {
        const double a = -0.5;
        if (x < 1.0)
            return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
        if (x < 2.0)
            return (((x - 5) * x + 8) * x - 4) * a;
        return 0.0;
    }
    return x < 1.0 ? 1.0 - x : 0.0;
}

int32_t stk_rs_ksize(double scale, int filter)
{
    if (filter == STK_RS_NEAREST)
        return 1;
    return (int32_t)ceil(rs_support(scale, filter)) * 2 + 1;
}

static inline double rs_center(const stk_rs_params *p, int32_t xx)
{
    return p->in0 + ((double)xx + p->off + 0.5) * p->scale;
}

/* Pillow's nearest (ImagingScaleAffine): the position of output 0 is
 * in0 + scale * 0.5, and each next one adds scale (accumulated, as Pillow
 * does, not multiplied); the pixel is COORD(pos) = (int)pos, -1 below 0,
 * clamped here to the source. */
static inline int32_t rs_nearest_pixel(const stk_rs_params *p, double pos)
{
    int32_t i = pos < 0.0 ? -1 : (int32_t)pos;
    if (i >= p->in_size)
        i = p->in_size - 1;
    return i < 0 ? 0 : i;
}

static double rs_nearest_start(const stk_rs_params *p)
{
    double xo = p->in0 + p->scale * 0.5;
    for (int32_t k = 0; k < p->off; k++)
        xo += p->scale;
    return xo;
}

static inline void rs_window(const stk_rs_params *p, int32_t xx, int32_t *xmin, int32_t *n)
{
    if (p->filter == STK_RS_NEAREST) { /* O(off + xx): only stk_rs_range calls this */
        double xo = rs_nearest_start(p);
        for (int32_t k = 0; k < xx; k++)
            xo += p->scale;
        *xmin = rs_nearest_pixel(p, xo);
        *n = 1;
        return;
    }
    double support = rs_support(p->scale, p->filter);
    double c = rs_center(p, xx);
    int32_t lo = (int32_t)(c - support + 0.5);
    int32_t hi = (int32_t)(c + support + 0.5);
    if (lo < 0)
        lo = 0;
    if (hi > p->in_size)
        hi = p->in_size;
    *xmin = lo;
    *n = hi > lo ? hi - lo : 0;
}

static int rs_params_ok(const stk_rs_params *p)
{
    if (p->out < 1 || p->in_size < 1 || !(p->scale > 0.0) || !isfinite(p->in0))
        return 0;
    /* Every centre and support must stay far inside int32. */
    double c0 = rs_center(p, 0), c1 = rs_center(p, p->out - 1);
    double s = rs_support(p->scale, p->filter);
    return (p->filter == STK_RS_BILINEAR || p->filter == STK_RS_BICUBIC ||
            p->filter == STK_RS_NEAREST) &&
           fabs(c0) + s < RS_MAX_COORD && fabs(c1) + s < RS_MAX_COORD &&
           stk_rs_ksize(p->scale, p->filter) < (1 << 24);
}

static int rs_is_identity(const stk_rs_params *p)
{
    double start = p->in0 + p->off;
    return p->scale == 1.0 && start == floor(start) && start >= 0.0 &&
           start + p->out <= p->in_size;
}

int stk_rs_range(const stk_rs_params *p, int32_t *first, int32_t *end, int *identity)
{
    if (!rs_params_ok(p))
        return -1;
    if (rs_is_identity(p)) {
        *first = (int32_t)(p->in0 + p->off);
        *end = *first + p->out;
        *identity = 1;
        return 0;
    }
    int32_t a, n0, b, n1;
    rs_window(p, 0, &a, &n0);
    rs_window(p, p->out - 1, &b, &n1);
    *first = a;
    *end = b + n1 > a ? b + n1 : a + 1;
    if (*end > p->in_size)
        *end = p->in_size;
    if (*first >= *end)
        *first = *end - 1;
    *identity = 0;
    return 0;
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t stk_rs_axis_bytes(const stk_rs_params *p, int group)
{
    if (!rs_params_ok(p))
        return 0;
    uint64_t k = (uint64_t)stk_rs_ksize(p->scale, p->filter), out = (uint64_t)p->out, coef, pr;
    if (!stk_mul_ok(out, k * 4, &coef))
        return 0;
    /* out, k < 2^24: no overflow. One group's tap holds 4 * group int32. */
    pr = group ? (out / (uint64_t)group + 1) * k * 16 * (uint64_t)group : 0;
    uint64_t total = align64(out * 4) + align64(coef) + align64(pr);
    return total > SIZE_MAX / 2 ? 0 : (size_t)total;
}

void stk_rs_build(const stk_rs_params *p, int32_t base, int reverse, int group, void *mem,
                  stk_rs_axis *ax)
{
    int32_t out = p->out, ksize = stk_rs_ksize(p->scale, p->filter);
    uint8_t *m = mem;
    memset(ax, 0, sizeof *ax);
    ax->out = out;
    ax->ksize = ksize;
    ax->bounds = (int32_t *)m;
    m += align64((size_t)out * 4);
    ax->coef = (int32_t *)m;
    m += align64((size_t)out * (size_t)ksize * 4);
    ax->lanes = group ? (int32_t *)m : NULL;
    ax->group = group;
    stk_rs_range(p, &ax->first, &ax->end, &ax->identity);

    double filterscale = p->scale < 1.0 ? 1.0 : p->scale;
    double ss = 1.0 / filterscale;
    double w[64];
    double *wbuf = ksize <= 64 ? w : NULL;
    int32_t taps = 1;
    if (p->filter == STK_RS_NEAREST) { /* one tap of weight 1 per output */
        double xo = rs_nearest_start(p);
        ax->taps = 1;
        for (int32_t xx = 0; xx < out; xx++, xo += p->scale) {
            int32_t dst = reverse ? out - 1 - xx : xx;
            ax->coef[dst] = 1 << STK_RS_PRECISION;
            ax->bounds[dst] = rs_nearest_pixel(p, xo) - base;
        }
        taps = 1;
        goto lanes;
    }
    /* First pass: window starts and lengths (the lengths go in coef[0] for
     * now), to learn `taps`. */
    for (int32_t xx = 0; xx < out; xx++) {
        int32_t xmin, n;
        rs_window(p, xx, &xmin, &n);
        if (n > taps)
            taps = n;
    }
    ax->taps = taps;
    for (int32_t xx = 0; xx < out; xx++) {
        int32_t xmin, n, dst = reverse ? out - 1 - xx : xx;
        double center = rs_center(p, xx), ww = 0.0;
        rs_window(p, xx, &xmin, &n);
        int32_t *k = ax->coef + (size_t)dst * taps;
        for (int32_t x = 0; x < n; x++) {
            double v = rs_filter(((double)x + xmin - center + 0.5) * ss, p->filter);
            if (wbuf)
                wbuf[x] = v;
            ww += v;
        }
        for (int32_t x = 0; x < n; x++) {
            double v;
            if (wbuf) {
                v = wbuf[x];
            } else { /* very long windows: recompute instead of storing */
                v = rs_filter(((double)x + xmin - center + 0.5) * ss, p->filter);
            }
            if (ww != 0.0)
                v /= ww;
            k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << STK_RS_PRECISION))
                         : (int32_t)(0.5 + v * (1 << STK_RS_PRECISION));
        }
        for (int32_t x = n; x < taps; x++)
            k[x] = 0;
        ax->bounds[dst] = xmin - base;
    }
lanes:
    if (group) {
        /* For each group of `group` outputs and each tap: the tap's weight of
         * each output repeated 4 times (one 128-bit lane per output). */
        int32_t *pr = ax->lanes;
        for (int32_t q = 0; q + group <= out; q += group)
            for (int32_t t = 0; t < taps; t++)
                for (int g = 0; g < group; g++, pr += 4)
                    pr[0] = pr[1] = pr[2] = pr[3] = ax->coef[(size_t)(q + g) * taps + t];
    }
}

/* ---------------------------------------------------------------------- */
/* Plain C passes                                                          */
/* ---------------------------------------------------------------------- */

static inline uint8_t clip8(int32_t v)
{
    v >>= STK_RS_PRECISION; /* arithmetic on every compiler stoker supports */
    return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

static void hpass_c(const stk_rs_axis *ax, const uint8_t *src, uint8_t *dst, int nc)
{
    int32_t taps = ax->taps;
    if (nc == 3) {
        for (int32_t x = 0; x < ax->out; x++) {
            const uint8_t *s = src + (size_t)ax->bounds[x] * 3;
            const int32_t *k = ax->coef + (size_t)x * taps;
            int32_t a0 = 1 << (STK_RS_PRECISION - 1), a1 = a0, a2 = a0;
            for (int32_t t = 0; t < taps; t++) {
                a0 += s[3 * t] * k[t];
                a1 += s[3 * t + 1] * k[t];
                a2 += s[3 * t + 2] * k[t];
            }
            dst[3 * x] = clip8(a0);
            dst[3 * x + 1] = clip8(a1);
            dst[3 * x + 2] = clip8(a2);
        }
    } else {
        for (int32_t x = 0; x < ax->out; x++) {
            const uint8_t *s = src + (size_t)ax->bounds[x] * (size_t)nc;
            const int32_t *k = ax->coef + (size_t)x * taps;
            for (int c = 0; c < nc; c++) {
                int32_t a = 1 << (STK_RS_PRECISION - 1);
                for (int32_t t = 0; t < taps; t++)
                    a += s[t * nc + c] * k[t];
                dst[x * nc + c] = clip8(a);
            }
        }
    }
}

static void vpass_c(const stk_rs_axis *ax, int32_t y, const uint8_t *src, ptrdiff_t stride,
                    size_t n, uint8_t *dst, int32_t *acc)
{
    const int32_t *k = ax->coef + (size_t)y * ax->taps;
    const uint8_t *row = src + (ptrdiff_t)ax->bounds[y] * stride;
    for (size_t i = 0; i < n; i++)
        acc[i] = 1 << (STK_RS_PRECISION - 1);
    for (int32_t t = 0; t < ax->taps; t++, row += stride) {
        int32_t kt = k[t];
        if (!kt)
            continue;
        for (size_t i = 0; i < n; i++)
            acc[i] += row[i] * kt;
    }
    for (size_t i = 0; i < n; i++)
        dst[i] = clip8(acc[i]);
}

static const stk_rs_kernels rs_c = {hpass_c, vpass_c, 0, "c"};

/* ---------------------------------------------------------------------- */
/* AVX2 passes                                                             */
/* ---------------------------------------------------------------------- */

#if RS_X86
#define AVX2 __attribute__((target("avx2")))

/* PSHUFB masks: tap u (0..4) of a 16-byte load -> int32 lanes R, G, B, 0. */
static const uint8_t rs_tapmask[5][16] = {
#define M(u) {3 * (u), 0x80, 0x80, 0x80, 3 * (u) + 1, 0x80, 0x80, 0x80, \
              3 * (u) + 2, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80}
    M(0), M(1), M(2), M(3), M(4)
#undef M
};

AVX2 static void hpass_avx2(const stk_rs_axis *ax, const uint8_t *src, uint8_t *dst, int nc)
{
    if (nc != 3 || ax->group != 2) {
        hpass_c(ax, src, dst, nc);
        return;
    }
    int32_t taps = ax->taps, out = ax->out, x = 0;
    __m256i m[5];
    for (int u = 0; u < 5; u++)
        m[u] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)rs_tapmask[u]));
    const __m256i half = _mm256_set1_epi32(1 << (STK_RS_PRECISION - 1));
    const int32_t *pr = ax->lanes;
    for (; x + 1 < out; x += 2, pr += 8 * taps) {
        const uint8_t *s0 = src + (size_t)ax->bounds[x] * 3;
        const uint8_t *s1 = src + (size_t)ax->bounds[x + 1] * 3;
        __m256i acc = half;
        for (int32_t t0 = 0; t0 < taps; t0 += 5) {
            __m256i px = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(s0 + 3 * t0))),
                _mm_loadu_si128((const __m128i *)(s1 + 3 * t0)), 1);
            int32_t tn = taps - t0 < 5 ? taps - t0 : 5;
            for (int32_t u = 0; u < tn; u++) {
                __m256i v = _mm256_shuffle_epi8(px, m[u]);
                __m256i k = _mm256_load_si256((const __m256i *)(pr + 8 * (t0 + u)));
                acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(v, k));
            }
        }
        acc = _mm256_srai_epi32(acc, STK_RS_PRECISION);
        __m256i w = _mm256_packs_epi32(acc, acc);
        w = _mm256_packus_epi16(w, w);
        uint32_t lo = (uint32_t)_mm256_cvtsi256_si32(w);
        uint32_t hi = (uint32_t)_mm256_extract_epi32(w, 4);
        memcpy(dst + 3 * (size_t)x, &lo, 4); /* 4th byte overwritten next */
        memcpy(dst + 3 * (size_t)x + 3, &hi, 4);
    }
    for (; x < out; x++) { /* odd width: the last pixel */
        const uint8_t *s = src + (size_t)ax->bounds[x] * 3;
        const int32_t *k = ax->coef + (size_t)x * taps;
        int32_t a0 = 1 << (STK_RS_PRECISION - 1), a1 = a0, a2 = a0;
        for (int32_t t = 0; t < taps; t++) {
            a0 += s[3 * t] * k[t];
            a1 += s[3 * t + 1] * k[t];
            a2 += s[3 * t + 2] * k[t];
        }
        dst[3 * x] = clip8(a0);
        dst[3 * x + 1] = clip8(a1);
        dst[3 * x + 2] = clip8(a2);
    }
}

AVX2 static void vpass_avx2(const stk_rs_axis *ax, int32_t y, const uint8_t *src,
                            ptrdiff_t stride, size_t n, uint8_t *dst, int32_t *acc)
{
    (void)acc;
    const int32_t *k = ax->coef + (size_t)y * ax->taps;
    const uint8_t *row0 = src + (ptrdiff_t)ax->bounds[y] * stride;
    int32_t taps = ax->taps;
    const __m256i half = _mm256_set1_epi32(1 << (STK_RS_PRECISION - 1));
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i a0 = half, a1 = half, a2 = half, a3 = half;
        const uint8_t *r = row0 + i;
        for (int32_t t = 0; t < taps; t++, r += stride) {
            __m256i kt = _mm256_set1_epi32(k[t]);
            __m128i b0 = _mm_loadu_si128((const __m128i *)r);
            __m128i b1 = _mm_loadu_si128((const __m128i *)(r + 16));
            a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(b0), kt));
            a1 = _mm256_add_epi32(
                a1, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(b0, 8)), kt));
            a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(b1), kt));
            a3 = _mm256_add_epi32(
                a3, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(b1, 8)), kt));
        }
        a0 = _mm256_srai_epi32(a0, STK_RS_PRECISION);
        a1 = _mm256_srai_epi32(a1, STK_RS_PRECISION);
        a2 = _mm256_srai_epi32(a2, STK_RS_PRECISION);
        a3 = _mm256_srai_epi32(a3, STK_RS_PRECISION);
        /* packs works per 128-bit lane: fix the order with a permute. */
        __m256i w01 = _mm256_packs_epi32(a0, a1); /* a0lo a1lo | a0hi a1hi */
        __m256i w23 = _mm256_packs_epi32(a2, a3);
        w01 = _mm256_permute4x64_epi64(w01, 0xD8); /* a0lo a0hi a1lo a1hi */
        w23 = _mm256_permute4x64_epi64(w23, 0xD8);
        __m256i b = _mm256_packus_epi16(w01, w23); /* per lane: w01 lane, w23 lane */
        b = _mm256_permute4x64_epi64(b, 0xD8);
        _mm256_storeu_si256((__m256i *)(dst + i), b);
    }
    for (; i + 8 <= n; i += 8) {
        __m256i a = half;
        const uint8_t *r = row0 + i;
        for (int32_t t = 0; t < taps; t++, r += stride)
            a = _mm256_add_epi32(a, _mm256_mullo_epi32(
                                        _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)r)),
                                        _mm256_set1_epi32(k[t])));
        a = _mm256_srai_epi32(a, STK_RS_PRECISION);
        __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
        _mm_storel_epi64((__m128i *)(dst + i), _mm_packus_epi16(w, w));
    }
    for (; i < n; i++) {
        int32_t a = 1 << (STK_RS_PRECISION - 1);
        const uint8_t *r = row0 + i;
        for (int32_t t = 0; t < taps; t++, r += stride)
            a += *r * k[t];
        dst[i] = clip8(a);
    }
}

static const stk_rs_kernels rs_avx2 = {hpass_avx2, vpass_avx2, 2, "avx2"};

/* ---------------------------------------------------------------------- */
/* AVX-512 passes (F + BW)                                                 */
/* ---------------------------------------------------------------------- */

#define AVX512 __attribute__((target("avx512f,avx512bw")))

/* Bytes 0-2, 4-6, 8-10, 12-14 of 16: four RGB0 pixels -> 12 RGB bytes. */
static const uint8_t rs_compact12[16] = {0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14,
                                         0x80, 0x80, 0x80, 0x80};

/* Four output pixels with a known number of taps T <= 5 (one 16-byte load
 * per pixel): the tap loop unrolls. */
#define HP512_BODY(T)                                                                      \
    for (; x + 4 <= out; x += 4, pr += 16 * (T)) {                                         \
        const int32_t *b = ax->bounds + x;                                                 \
        __m512i px = _mm512_castsi128_si512(                                               \
            _mm_loadu_si128((const __m128i *)(src + (size_t)b[0] * 3)));                   \
        px = _mm512_inserti32x4(px, _mm_loadu_si128((const __m128i *)(src + (size_t)b[1] * 3)), 1); \
        px = _mm512_inserti32x4(px, _mm_loadu_si128((const __m128i *)(src + (size_t)b[2] * 3)), 2); \
        px = _mm512_inserti32x4(px, _mm_loadu_si128((const __m128i *)(src + (size_t)b[3] * 3)), 3); \
        __m512i acc = half;                                                                \
        for (int u = 0; u < (T); u++)                                                      \
            acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(_mm512_shuffle_epi8(px, m[u]),  \
                                                           _mm512_load_si512(pr + 16 * u))); \
        acc = _mm512_max_epi32(_mm512_srai_epi32(acc, STK_RS_PRECISION), zero);           \
        _mm_storeu_si128((__m128i *)(dst + 3 * (size_t)x),                                 \
                         _mm_shuffle_epi8(_mm512_cvtusepi32_epi8(acc), compact));          \
    }

AVX512 static void hpass_avx512(const stk_rs_axis *ax, const uint8_t *src, uint8_t *dst, int nc)
{
    if (nc != 3 || ax->group != 4) {
        hpass_c(ax, src, dst, nc);
        return;
    }
    int32_t taps = ax->taps, out = ax->out, x = 0;
    __m512i m[5];
    for (int u = 0; u < 5; u++)
        m[u] = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)rs_tapmask[u]));
    const __m512i half = _mm512_set1_epi32(1 << (STK_RS_PRECISION - 1));
    const __m512i zero = _mm512_setzero_si512();
    const __m128i compact = _mm_loadu_si128((const __m128i *)rs_compact12);
    const int32_t *pr = ax->lanes;
    switch (taps) {
    case 1: HP512_BODY(1) break;
    case 2: HP512_BODY(2) break;
    case 3: HP512_BODY(3) break;
    case 4: HP512_BODY(4) break;
    case 5: HP512_BODY(5) break;
    default:
        for (; x + 4 <= out; x += 4, pr += 16 * taps) {
            const uint8_t *s0 = src + (size_t)ax->bounds[x] * 3;
            const uint8_t *s1 = src + (size_t)ax->bounds[x + 1] * 3;
            const uint8_t *s2 = src + (size_t)ax->bounds[x + 2] * 3;
            const uint8_t *s3 = src + (size_t)ax->bounds[x + 3] * 3;
            __m512i acc = half;
            for (int32_t t0 = 0; t0 < taps; t0 += 5) {
                __m512i px =
                    _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(s0 + 3 * t0)));
                px = _mm512_inserti32x4(px, _mm_loadu_si128((const __m128i *)(s1 + 3 * t0)), 1);
                px = _mm512_inserti32x4(px, _mm_loadu_si128((const __m128i *)(s2 + 3 * t0)), 2);
                px = _mm512_inserti32x4(px, _mm_loadu_si128((const __m128i *)(s3 + 3 * t0)), 3);
                int32_t tn = taps - t0 < 5 ? taps - t0 : 5;
                for (int32_t u = 0; u < tn; u++) {
                    __m512i v = _mm512_shuffle_epi8(px, m[u]);
                    __m512i k = _mm512_load_si512((const void *)(pr + 16 * (t0 + u)));
                    acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(v, k));
                }
            }
            acc = _mm512_max_epi32(_mm512_srai_epi32(acc, STK_RS_PRECISION), zero);
            __m128i b = _mm_shuffle_epi8(_mm512_cvtusepi32_epi8(acc), compact);
            _mm_storeu_si128((__m128i *)(dst + 3 * (size_t)x), b); /* 4 bytes spill, rewritten */
        }
        break;
    }
    for (; x < out; x++) {
        const uint8_t *s = src + (size_t)ax->bounds[x] * 3;
        const int32_t *k = ax->coef + (size_t)x * taps;
        int32_t a0 = 1 << (STK_RS_PRECISION - 1), a1 = a0, a2 = a0;
        for (int32_t t = 0; t < taps; t++) {
            a0 += s[3 * t] * k[t];
            a1 += s[3 * t + 1] * k[t];
            a2 += s[3 * t + 2] * k[t];
        }
        dst[3 * x] = clip8(a0);
        dst[3 * x + 1] = clip8(a1);
        dst[3 * x + 2] = clip8(a2);
    }
}

AVX512 static void vpass_avx512(const stk_rs_axis *ax, int32_t y, const uint8_t *src,
                                ptrdiff_t stride, size_t n, uint8_t *dst, int32_t *acc)
{
    const int32_t *k = ax->coef + (size_t)y * ax->taps;
    const uint8_t *row0 = src + (ptrdiff_t)ax->bounds[y] * stride;
    int32_t taps = ax->taps;
    const __m512i half = _mm512_set1_epi32(1 << (STK_RS_PRECISION - 1));
    const __m512i zero = _mm512_setzero_si512();
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i a0 = half, a1 = half, a2 = half, a3 = half;
        const uint8_t *r = row0 + i;
        for (int32_t t = 0; t < taps; t++, r += stride) {
            __m512i kt = _mm512_set1_epi32(k[t]);
            a0 = _mm512_add_epi32(a0, _mm512_mullo_epi32(
                                          _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)r)), kt));
            a1 = _mm512_add_epi32(a1, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                                                             (const __m128i *)(r + 16))),
                                                         kt));
            a2 = _mm512_add_epi32(a2, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                                                             (const __m128i *)(r + 32))),
                                                         kt));
            a3 = _mm512_add_epi32(a3, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                                                             (const __m128i *)(r + 48))),
                                                         kt));
        }
        a0 = _mm512_max_epi32(_mm512_srai_epi32(a0, STK_RS_PRECISION), zero);
        a1 = _mm512_max_epi32(_mm512_srai_epi32(a1, STK_RS_PRECISION), zero);
        a2 = _mm512_max_epi32(_mm512_srai_epi32(a2, STK_RS_PRECISION), zero);
        a3 = _mm512_max_epi32(_mm512_srai_epi32(a3, STK_RS_PRECISION), zero);
        _mm_storeu_si128((__m128i *)(dst + i), _mm512_cvtusepi32_epi8(a0));
        _mm_storeu_si128((__m128i *)(dst + i + 16), _mm512_cvtusepi32_epi8(a1));
        _mm_storeu_si128((__m128i *)(dst + i + 32), _mm512_cvtusepi32_epi8(a2));
        _mm_storeu_si128((__m128i *)(dst + i + 48), _mm512_cvtusepi32_epi8(a3));
    }
    if (i < n)
        vpass_avx2(ax, y, src + i, stride, n - i, dst + i, acc);
}

static const stk_rs_kernels rs_avx512 = {hpass_avx512, vpass_avx512, 4, "avx512"};

#endif

const stk_rs_kernels *stk_rs_kernels_variant(int i)
{
    switch (i) {
    case 0:
        return &rs_c;
#if RS_X86
    case 1:
        return stk_kernel_isa_available(STK_ISA_AVX2) ? &rs_avx2 : NULL;
    case 2:
        return stk_kernel_isa_available(STK_ISA_AVX2) && stk_cpu_has_avx512bw() ? &rs_avx512 : NULL;
#endif
    default:
        return NULL;
    }
}

const stk_rs_kernels *stk_rs_kernels_get(void)
{
#if RS_X86
    if (strcmp(stk_kernel_isa(), "avx2") == 0) {
        if (stk_cpu_has_avx512bw() && !getenv("STK_NO_AVX512"))
            return &rs_avx512;
        return &rs_avx2;
    }
#endif
    return &rs_c;
}

/* ---------------------------------------------------------------------- */
/* Whole-image convenience                                                 */
/* ---------------------------------------------------------------------- */

int stk_rs_resize_u8(const uint8_t *src, uint32_t h, uint32_t w, ptrdiff_t stride, int nc,
                     const double box[4], uint32_t out_h, uint32_t out_w, uint8_t *dst,
                     const stk_rs_kernels *k)
{
    return stk_rs_resize_u8_filter(src, h, w, stride, nc, box, out_h, out_w, dst, k,
                                   STK_RS_BILINEAR);
}

int stk_rs_resize_u8_filter(const uint8_t *src, uint32_t h, uint32_t w, ptrdiff_t stride, int nc,
                            const double box[4], uint32_t out_h, uint32_t out_w, uint8_t *dst,
                            const stk_rs_kernels *k, int filter)
{
    if (!src || !dst || (nc != 1 && nc != 3) || !h || !w || !out_h || !out_w ||
        h > (1u << 24) || w > (1u << 24) || out_h > (1u << 24) || out_w > (1u << 24))
        return stk_fail(STK_EINVAL, "stk_rs_resize_u8: bad arguments");
    if (!k)
        k = stk_rs_kernels_get();
    /* Pillow keeps the box in floats and subtracts in float: scale =
     * (double)(float)(x1 - x0) / out. */
    float b[4] = {0.0f, 0.0f, (float)w, (float)h};
    if (box)
        for (int i = 0; i < 4; i++)
            b[i] = (float)box[i];
    float bw = b[2] - b[0], bh = b[3] - b[1];
    stk_rs_params px = {(int32_t)w, (int32_t)out_w, 0, b[0], (double)bw / out_w, filter};
    stk_rs_params py = {(int32_t)h, (int32_t)out_h, 0, b[1], (double)bh / out_h, filter};
    size_t bx = stk_rs_axis_bytes(&px, k->group), by = stk_rs_axis_bytes(&py, 0);
    if (!bx || !by)
        return stk_fail(STK_EINVAL, "stk_rs_resize_u8: box out of range");
    int32_t kv = stk_rs_ksize(py.scale, filter), kh = stk_rs_ksize(px.scale, filter);
    size_t rowb = (size_t)out_w * nc;
    /* The source copied with slack, so windows padded with zeros stay in
     * bounds. */
    size_t srow = (size_t)w * nc, sbytes = srow * h + STK_RS_SLACK(kh, nc);
    size_t tbytes = rowb * ((size_t)h + (size_t)kv) + 64;
    uint8_t *mem = stk_aligned_alloc(align64(bx) + align64(by) + align64(sbytes) + align64(tbytes) +
                                     rowb * 4 + 64);
    if (!mem)
        return stk_fail(STK_ENOMEM, "stk_rs_resize_u8: out of memory");
    uint8_t *cp = mem + align64(bx) + align64(by), *tmp = cp + align64(sbytes);
    int32_t *acc = (int32_t *)(tmp + align64(tbytes));
    memset(cp, 0, sbytes);
    memset(tmp, 0, tbytes);
    for (uint32_t y = 0; y < h; y++)
        memcpy(cp + y * srow, src + (ptrdiff_t)y * stride, srow);
    stk_rs_axis ax, ay;
    stk_rs_build(&px, 0, 0, nc == 3 ? k->group : 0, mem, &ax);
    stk_rs_build(&py, 0, 0, 0, mem + align64(bx), &ay);
    /* Pillow skips a pass whose axis is the identity over the whole image. */
    int need_h = !(out_w == w && b[0] == 0 && b[2] == w);
    int need_v = !(out_h == h && b[1] == 0 && b[3] == h);
    const uint8_t *vsrc = cp;
    size_t vstride = srow;
    if (need_h) {
        for (uint32_t y = 0; y < h; y++)
            k->hpass(&ax, cp + y * srow, tmp + y * rowb, nc);
        vsrc = tmp;
        vstride = rowb;
    }
    for (uint32_t y = 0; y < out_h; y++) {
        if (need_v)
            k->vpass(&ay, (int32_t)y, vsrc, (ptrdiff_t)vstride, rowb, dst + y * rowb, acc);
        else
            memcpy(dst + y * rowb, vsrc + y * vstride, rowb);
    }
    stk_aligned_free(mem);
    return 0;
}
