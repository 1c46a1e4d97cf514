/*
 * kernel_impl.h — template of the fused kernel, included by kernel.c once per
 * (output dtype, instruction set). No include guard, on purpose.
 *
 * Parameters (defined by the includer, undefined here at the end):
 *   KNAME   suffix of every function name (u8_c, f32_avx2, ...)
 *   KDT     0 = u8, 1 = f16, 2 = f32
 *   KISA    0 = plain C (any CPU), 1 = SSE2 intrinsics (x86-64 baseline),
 *           2 = AVX2 + F16C intrinsics
 *   KATTR   function attribute selecting the instruction set, or nothing
 *
 * Shape of the work. The row segments times the column segments cut the
 * output into blocks (at most 3 x 3 for pad | crop | flip). Each block is
 * either constant fill or a 2-D run: `rows` output rows, each `n` pixels
 * read from the source at a fixed pixel step (ps: +-1 planar, +-C
 * interleaved, 0 edge padding), the source row advancing by a fixed stride
 * (row_stride times the row segment's step). Everything that selects a loop
 * is decided once per block, so the per-row work is a pointer increment and
 * the run itself. CHW output is written plane by plane (the channel's scale
 * and bias stay in registers); HWC output row by row.
 *
 * Why a template and not a switch on dtype: the inner loops must be plain
 * counted loops with one store type and constant strides, or the compiler
 * does not vectorise them.
 *
 * Runs are short (a CIFAR row is 28-32 pixels), and for short runs the
 * compiler's own vectorisation spends most of its time in scalar epilogues.
 * So the hot runs (forward and reversed single-channel runs, contiguous
 * interleaved runs) are written with intrinsics in chunks of 8 (16 for u8),
 * and the remainder is done by one more chunk that ends exactly at the end of
 * the run, overlapping the previous one: the overlapped elements are
 * computed and stored again with identical values, which is harmless and
 * branch-free. Runs shorter than one chunk, and the other shapes, take plain
 * loops (which the compiler vectorises where it can).
 */

#define KCAT2_(a, b) a##_##b
#define KCAT2(a, b) KCAT2_(a, b)
#define KFN(x) KCAT2(x, KNAME)

#if KDT == 0
#define KT uint8_t
typedef struct {
    int unused;
} KFN(ch);
#define KCH(kc, c) ((KFN(ch)){0})
#define KCVT(st, v) ((void)(st), (uint8_t)(v))
#elif KDT == 1
#define KT uint16_t
typedef struct {
    const uint16_t *lut;
    float k, b;
} KFN(ch);
#define KCH(kc, c) \
    ((KFN(ch)){(kc)->lut16 + (size_t)(c) * 256u, (kc)->scale[(c)], (kc)->bias[(c)]})
#define KCVT(st, v) ((st).lut[(v)])
#elif KDT == 2
#define KT float
typedef struct {
    float k, b;
} KFN(ch);
#define KCH(kc, c) ((KFN(ch)){(kc)->scale[(c)], (kc)->bias[(c)]})
#define KCVT(st, v) ((float)(v) * (st).k + (st).b)
#else
#error "KDT must be 0, 1 or 2"
#endif

/* ---- SIMD chunks ------------------------------------------------------- */

#if KISA == 1
/* 8 bytes -> lanes 0-3 and 4-7 as floats. */
static inline KATTR void KFN(load8)(const uint8_t *s, __m128 *lo, __m128 *hi)
{
    __m128i z = _mm_setzero_si128();
    __m128i x = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(const void *)s), z);
    *lo = _mm_cvtepi32_ps(_mm_unpacklo_epi16(x, z));
    *hi = _mm_cvtepi32_ps(_mm_unpackhi_epi16(x, z));
}
#define KREV4(v) _mm_shuffle_ps((v), (v), _MM_SHUFFLE(0, 1, 2, 3))
/* d[0..7] = s[0..7] * k + b */
static inline KATTR void KFN(x8)(float *d, const uint8_t *s, __m128 k, __m128 b)
{
    __m128 lo, hi;
    KFN(load8)(s, &lo, &hi);
    _mm_storeu_ps(d, _mm_add_ps(_mm_mul_ps(lo, k), b));
    _mm_storeu_ps(d + 4, _mm_add_ps(_mm_mul_ps(hi, k), b));
}
/* d[0..7] = s[0], s[-1], ..., s[-7], converted */
static inline KATTR void KFN(x8r)(float *d, const uint8_t *s, __m128 k, __m128 b)
{
    __m128 lo, hi;
    KFN(load8)(s - 7, &lo, &hi);
    _mm_storeu_ps(d, _mm_add_ps(_mm_mul_ps(KREV4(hi), k), b));
    _mm_storeu_ps(d + 4, _mm_add_ps(_mm_mul_ps(KREV4(lo), k), b));
}
/* with per-element scale/bias tables */
static inline KATTR void KFN(x8t)(float *d, const uint8_t *s, const float *k, const float *b)
{
    __m128 lo, hi;
    KFN(load8)(s, &lo, &hi);
    _mm_storeu_ps(d, _mm_add_ps(_mm_mul_ps(lo, _mm_loadu_ps(k)), _mm_loadu_ps(b)));
    _mm_storeu_ps(d + 4, _mm_add_ps(_mm_mul_ps(hi, _mm_loadu_ps(k + 4)), _mm_loadu_ps(b + 4)));
}
/* 16 bytes reversed: d[0..15] = s[0], s[-1], ..., s[-15] */
static inline KATTR void KFN(u8x16r)(uint8_t *d, const uint8_t *s)
{
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(s - 15));
    x = _mm_shuffle_epi32(x, _MM_SHUFFLE(0, 1, 2, 3));
    x = _mm_shufflelo_epi16(x, _MM_SHUFFLE(2, 3, 0, 1));
    x = _mm_shufflehi_epi16(x, _MM_SHUFFLE(2, 3, 0, 1));
    x = _mm_or_si128(_mm_slli_epi16(x, 8), _mm_srli_epi16(x, 8));
    _mm_storeu_si128((__m128i *)(void *)d, x);
}
#define KVEC_T __m128
#define KVEC_SET1(x) _mm_set1_ps(x)
#elif KISA == 2
static inline KATTR __m256 KFN(load8)(const uint8_t *s)
{
    return _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)s)));
}
static inline KATTR __m256 KFN(load8r)(const uint8_t *s)
{
    const __m128i rev = _mm_setr_epi8(7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8);
    __m128i x = _mm_shuffle_epi8(_mm_loadl_epi64((const __m128i *)(const void *)(s - 7)), rev);
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(x));
}
#if KDT == 2
#define KSTORE8(d, v) _mm256_storeu_ps((d), (v))
#else /* f16: F16C rounds to nearest even, like stk_f32_to_f16 */
#define KSTORE8(d, v)                                                                     \
    _mm_storeu_si128((__m128i *)(void *)(d),                                              \
                     _mm256_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#endif
static inline KATTR void KFN(x8)(KT *d, const uint8_t *s, __m256 k, __m256 b)
{
    KSTORE8(d, _mm256_add_ps(_mm256_mul_ps(KFN(load8)(s), k), b));
}
static inline KATTR void KFN(x8r)(KT *d, const uint8_t *s, __m256 k, __m256 b)
{
    KSTORE8(d, _mm256_add_ps(_mm256_mul_ps(KFN(load8r)(s), k), b));
}
static inline KATTR void KFN(x8t)(KT *d, const uint8_t *s, const float *k, const float *b)
{
    KSTORE8(d, _mm256_add_ps(_mm256_mul_ps(KFN(load8)(s), _mm256_loadu_ps(k)),
                             _mm256_loadu_ps(b)));
}
static inline KATTR void KFN(u8x16r)(uint8_t *d, const uint8_t *s)
{
    const __m128i rev = _mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(s - 15));
    _mm_storeu_si128((__m128i *)(void *)d, _mm_shuffle_epi8(x, rev));
}
#define KVEC_T __m256
#define KVEC_SET1(x) _mm256_set1_ps(x)
#endif

#if KISA >= 1
static inline KATTR void KFN(u8x16)(uint8_t *d, const uint8_t *s)
{
    _mm_storeu_si128((__m128i *)(void *)d,
                     _mm_loadu_si128((const __m128i *)(const void *)s));
}
#endif

/* Which SIMD chunk kinds this variant has. */
#if KISA >= 1 && (KDT == 2 || (KDT == 1 && KISA == 2))
#define KSIMD_CVT 1 /* x8, x8r, x8t: converting chunks of 8 */
#endif
#if KISA >= 1 && KDT == 0
#define KSIMD_U8 1 /* u8x16, u8x16r: byte chunks of 16 */
#endif

/* ---- Plain runs -------------------------------------------------------- */

/* One channel: d[i] = cvt(s[i * ps]), i < n. */
static inline KATTR void KFN(chan)(KT *restrict d, const uint8_t *restrict s, ptrdiff_t ps,
                                   int32_t n, KFN(ch) st)
{
    if (ps == 1) {
#if KDT == 0
        memcpy(d, s, (size_t)n);
#else
        for (int32_t i = 0; i < n; i++)
            d[i] = KCVT(st, s[i]);
#endif
    } else if (ps == -1) {
        for (int32_t i = 0; i < n; i++)
            d[i] = KCVT(st, s[-(ptrdiff_t)i]);
    } else if (ps == 0) {
        KT v = KCVT(st, s[0]);
        for (int32_t i = 0; i < n; i++)
            d[i] = v;
    } else {
        for (int32_t i = 0; i < n; i++)
            d[i] = KCVT(st, s[(ptrdiff_t)i * ps]);
    }
}

/* HWC output, source interleaved like the output (cs = 1, ps = C): n*C
 * contiguous elements. x0 is the output column (for the repeated tables). */
static inline KATTR void KFN(hwc_contig)(KT *restrict d, const uint8_t *restrict s, int32_t n,
                                         uint32_t C, int32_t x0, const stk_kctx *kc)
{
    size_t m = (size_t)n * C;
#if KDT == 0
    (void)x0;
    (void)kc;
    memcpy(d, s, m);
#elif KDT == 2
    const float *restrict k = kc->scale_rep + (size_t)x0 * C;
    const float *restrict b = kc->bias_rep + (size_t)x0 * C;
    for (size_t i = 0; i < m; i++)
        d[i] = (float)s[i] * k[i] + b[i];
#else
    (void)x0;
    (void)m;
    for (size_t i = 0; i < (size_t)n; i++)
        for (uint32_t c = 0; c < C; c++)
            d[i * C + c] = kc->lut16[c * 256u + s[i * C + c]];
#endif
}

/* ---- Byte staging ----------------------------------------------------- */

#if KISA == 2
/* Three 16-byte registers through permutation k of stk_perm48. */
static inline KATTR void KFN(p48)(int k, __m128i a, __m128i b, __m128i c, __m128i o[3])
{
    for (int r = 0; r < 3; r++) {
        const uint8_t(*m)[16] = stk_perm48[k][r];
        o[r] = _mm_or_si128(
            _mm_or_si128(_mm_shuffle_epi8(a, _mm_loadu_si128((const __m128i *)(const void *)m[0])),
                         _mm_shuffle_epi8(b, _mm_loadu_si128((const __m128i *)(const void *)m[1]))),
            _mm_shuffle_epi8(c, _mm_loadu_si128((const __m128i *)(const void *)m[2])));
    }
}
#define KLD(p) _mm_loadu_si128((const __m128i *)(const void *)(p))

/* 16 bytes -> 16 outputs: converted with one scale/bias, or copied (u8). */
static inline KATTR void KFN(x16)(KT *d, __m128i x, __m256 k, __m256 b)
{
#if KDT == 0
    (void)k;
    (void)b;
    _mm_storeu_si128((__m128i *)(void *)d, x);
#else
    __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(x));
    __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(x, x)));
    KSTORE8(d, _mm256_add_ps(_mm256_mul_ps(lo, k), b));
    KSTORE8(d + 8, _mm256_add_ps(_mm256_mul_ps(hi, k), b));
#endif
}
/* the same with per-element scale/bias tables, from element `at` (u8: no
 * tables, the pointers are NULL and never offset) */
static inline KATTR void KFN(x16t)(KT *d, __m128i x, const float *k, const float *b, size_t at)
{
#if KDT == 0
    (void)k;
    (void)b;
    (void)at;
    _mm_storeu_si128((__m128i *)(void *)d, x);
#else
    k += at;
    b += at;
    __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(x));
    __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(x, x)));
    KSTORE8(d, _mm256_add_ps(_mm256_mul_ps(lo, _mm256_loadu_ps(k)), _mm256_loadu_ps(b)));
    KSTORE8(d + 8,
            _mm256_add_ps(_mm256_mul_ps(hi, _mm256_loadu_ps(k + 8)), _mm256_loadu_ps(b + 8)));
#endif
}

/* HWC output, three channels, n >= 16 pixels from a planar (ps = +-1) or
 * flipped interleaved (cs = 1, ps = -3) source: 16 pixels at a time through
 * the byte shuffles, converted in registers. k, b: the repeated tables at
 * the run's first column. Returns 0 for other shapes. */
static inline KATTR int KFN(hwc3_simd)(KT *d, const uint8_t *s, ptrdiff_t ps, ptrdiff_t cs,
                                       int32_t n, const float *k, const float *b)
{
    __m128i o[3];
    int32_t last = n - 16;
    if (cs == 1 && ps == -3) {
        for (int32_t i = 0;; i += 16) {
            if (i > last)
                i = last;
            const uint8_t *p = s - 3 * (ptrdiff_t)(i + 15);
            KFN(p48)(STK_P48_RV, KLD(p), KLD(p + 16), KLD(p + 32), o);
            for (int r = 0; r < 3; r++)
                KFN(x16t)(d + 3 * i + 16 * r, o[r], k, b, (size_t)(3 * i + 16 * r));
            if (i == last)
                break;
        }
        return 1;
    }
    if (ps == 1 || ps == -1) {
        const uint8_t *p0 = s, *p1 = s + cs, *p2 = s + 2 * cs;
        int kk = ps == 1 ? STK_P48_IL : STK_P48_ILR;
        ptrdiff_t back = ps == 1 ? 0 : 15; /* reversed: the 16 bytes ending at i */
        for (int32_t i = 0;; i += 16) {
            if (i > last)
                i = last;
            ptrdiff_t off = ps * (ptrdiff_t)i - back;
            KFN(p48)(kk, KLD(p0 + off), KLD(p1 + off), KLD(p2 + off), o);
            for (int r = 0; r < 3; r++)
                KFN(x16t)(d + 3 * i + 16 * r, o[r], k, b, (size_t)(3 * i + 16 * r));
            if (i == last)
                break;
        }
        return 1;
    }
    return 0;
}

/* CHW output from a 3-channel interleaved source (cs = 1, ps = +-3), n >= 16:
 * deinterleaved 16 pixels at a time, converted in registers. */
static inline KATTR void KFN(chw3_simd)(KT *d, size_t plane, const uint8_t *s, ptrdiff_t ps,
                                        int32_t n, const __m256 *k, const __m256 *b)
{
    __m128i o[3];
    int32_t last = n - 16;
    int kk = ps == 3 ? STK_P48_DI : STK_P48_DIR;
    for (int32_t i = 0;; i += 16) {
        if (i > last)
            i = last;
        const uint8_t *p = ps == 3 ? s + 3 * (ptrdiff_t)i : s - 3 * (ptrdiff_t)(i + 15);
        KFN(p48)(kk, KLD(p), KLD(p + 16), KLD(p + 32), o);
        for (int c = 0; c < 3; c++)
            KFN(x16)(d + (size_t)c * plane + i, o[c], k[c], b[c]);
        if (i == last)
            break;
    }
}
#endif

/* A row of n pixels in HWC byte order, from any source shape except the
 * contiguous interleaved one. */
static inline KATTR void KFN(b_hwc)(uint8_t *restrict t, const uint8_t *restrict s, ptrdiff_t ps,
                                    ptrdiff_t cs, int32_t n, uint32_t C)
{
    if (C == 3) {
        if (cs == 1 && ps == -3) {
            for (int32_t i = 0; i < n; i++) {
                const uint8_t *p = s - (ptrdiff_t)i * 3;
                t[3 * i] = p[0];
                t[3 * i + 1] = p[1];
                t[3 * i + 2] = p[2];
            }
            return;
        }
        const uint8_t *p0 = s, *p1 = s + cs, *p2 = s + 2 * cs;
        if (ps == 1) {
            for (int32_t i = 0; i < n; i++) {
                t[3 * i] = p0[i];
                t[3 * i + 1] = p1[i];
                t[3 * i + 2] = p2[i];
            }
        } else if (ps == -1) {
            for (int32_t i = 0; i < n; i++) {
                t[3 * i] = p0[-(ptrdiff_t)i];
                t[3 * i + 1] = p1[-(ptrdiff_t)i];
                t[3 * i + 2] = p2[-(ptrdiff_t)i];
            }
        } else {
            for (int32_t i = 0; i < n; i++) {
                ptrdiff_t o = (ptrdiff_t)i * ps;
                t[3 * i] = p0[o];
                t[3 * i + 1] = p1[o];
                t[3 * i + 2] = p2[o];
            }
        }
        return;
    }
    for (int32_t i = 0; i < n; i++)
        for (uint32_t c = 0; c < C; c++)
            t[(size_t)i * C + c] = s[(ptrdiff_t)i * ps + (ptrdiff_t)c * cs];
}

/* A row of n pixels as three byte planes, from a 3-channel interleaved
 * source (cs = 1; ps = +-3, or 0 for edge padding). */
static inline KATTR void KFN(b_chw3)(uint8_t *restrict t0, uint8_t *restrict t1,
                                     uint8_t *restrict t2, const uint8_t *restrict s,
                                     ptrdiff_t ps, int32_t n)
{
    if (ps == 3) {
        for (int32_t i = 0; i < n; i++) {
            const uint8_t *p = s + (ptrdiff_t)i * 3;
            t0[i] = p[0];
            t1[i] = p[1];
            t2[i] = p[2];
        }
    } else if (ps == -3) {
        for (int32_t i = 0; i < n; i++) {
            const uint8_t *p = s - (ptrdiff_t)i * 3;
            t0[i] = p[0];
            t1[i] = p[1];
            t2[i] = p[2];
        }
    } else { /* 0 (edge padding) */
        for (int32_t i = 0; i < n; i++) {
            const uint8_t *p = s + (ptrdiff_t)i * ps;
            t0[i] = p[0];
            t1[i] = p[1];
            t2[i] = p[2];
        }
    }
}

#if KDT != 0
/* Convert staged bytes: one channel, n contiguous. */
static inline KATTR void KFN(conv1)(KT *restrict d, const uint8_t *restrict t, int32_t n,
                                    KFN(ch) st)
{
#if defined(KSIMD_CVT)
    if (n >= 8) {
        KVEC_T kv = KVEC_SET1(st.k), bv = KVEC_SET1(st.b);
        int32_t last = n - 8;
        for (int32_t i = 0; i < last; i += 8)
            KFN(x8)(d + i, t + i, kv, bv);
        KFN(x8)(d + last, t + last, kv, bv);
        return;
    }
#endif
    for (int32_t i = 0; i < n; i++)
        d[i] = KCVT(st, t[i]);
}
#endif

/* Contiguous interleaved: n pixels of C, output column x0. */
static inline KATTR void KFN(convt)(KT *restrict d, const uint8_t *restrict t, int32_t n,
                                    uint32_t C, int32_t x0, const stk_kctx *kc)
{
#if defined(KSIMD_CVT)
    int32_t m = n * (int32_t)C;
    if (m >= 8) {
        const float *k = kc->scale_rep + (size_t)x0 * C, *b = kc->bias_rep + (size_t)x0 * C;
        int32_t last = m - 8;
        for (int32_t i = 0; i < last; i += 8)
            KFN(x8t)(d + i, t + i, k + i, b + i);
        KFN(x8t)(d + last, t + last, k + last, b + last);
        return;
    }
#elif defined(KSIMD_U8)
    int32_t m = n * (int32_t)C;
    if (m >= 16) {
        int32_t last = m - 16;
        for (int32_t i = 0; i < last; i += 16)
            KFN(u8x16)(d + i, t + i);
        KFN(u8x16)(d + last, t + last);
        return;
    }
#endif
    KFN(hwc_contig)(d, t, n, C, x0, kc);
}

#define KTMP 3072 /* bytes of staging per piece of a row */

/* Constant fill of n pixels, HWC. Short fills (the pad columns of a row)
 * are plain stores; long ones write the first pixel and then copy the
 * written prefix onto the rest, doubling each time. */
static inline KATTR void KFN(fill_hwc)(KT *d, size_t n, uint32_t C, const KT *fv)
{
    size_t m = n * C, have = C;
    if (n == 0)
        return;
    if (m < 256) {
        if (C == 3) {
            KT f0 = fv[0], f1 = fv[1], f2 = fv[2];
            for (size_t i = 0; i < n; i++) {
                d[3 * i] = f0;
                d[3 * i + 1] = f1;
                d[3 * i + 2] = f2;
            }
        } else {
            for (size_t i = 0; i < n; i++)
                for (uint32_t c = 0; c < C; c++)
                    d[i * C + c] = fv[c];
        }
        return;
    }
    memcpy(d, fv, C * sizeof(KT));
    while (have < m) {
        size_t k = have < m - have ? have : m - have;
        memcpy(d + have, d, k * sizeof(KT));
        have += k;
    }
}

/* ---- Blocks ------------------------------------------------------------ */

/* One channel, rows x n: output rows W apart, source rows srs apart. */
static inline KATTR void KFN(block1)(KT *d, size_t W, const uint8_t *s, ptrdiff_t srs,
                                     ptrdiff_t ps, int32_t rows, int32_t n, KFN(ch) st)
{
#if defined(KSIMD_CVT)
    if (n >= 8 && (ps == 1 || ps == -1)) {
        KVEC_T kv = KVEC_SET1(st.k), bv = KVEC_SET1(st.b);
        int32_t last = n - 8;
        if (ps == 1) {
            for (int32_t r = 0; r < rows; r++, d += W, s += srs) {
                for (int32_t i = 0; i < last; i += 8)
                    KFN(x8)(d + i, s + i, kv, bv);
                KFN(x8)(d + last, s + last, kv, bv);
            }
        } else {
            for (int32_t r = 0; r < rows; r++, d += W, s += srs) {
                for (int32_t i = 0; i < last; i += 8)
                    KFN(x8r)(d + i, s - i, kv, bv);
                KFN(x8r)(d + last, s - last, kv, bv);
            }
        }
        return;
    }
#elif defined(KSIMD_U8)
    if (n >= 16 && (ps == 1 || ps == -1)) {
        int32_t last = n - 16;
        if (ps == 1) {
            for (int32_t r = 0; r < rows; r++, d += W, s += srs) {
                for (int32_t i = 0; i < last; i += 16)
                    KFN(u8x16)(d + i, s + i);
                KFN(u8x16)(d + last, s + last);
            }
        } else {
            for (int32_t r = 0; r < rows; r++, d += W, s += srs) {
                for (int32_t i = 0; i < last; i += 16)
                    KFN(u8x16r)(d + i, s - i);
                KFN(u8x16r)(d + last, s - last);
            }
        }
        return;
    }
#endif
    for (int32_t r = 0; r < rows; r++, d += W, s += srs)
        KFN(chan)(d, s, ps, n, st);
}

/* d[0..n) = v. The SIMD variants store whole registers, the last one
 * ending exactly at n (overlapping), so short pad columns cost two stores
 * and no call; the compiler would otherwise turn a u8 loop into memset. */
static inline KATTR void KFN(fillrow)(KT *d, int32_t n, KT v)
{
#if KISA >= 1 && KDT == 0
    if (n >= 16) {
        __m128i x = _mm_set1_epi8((char)v);
        for (int32_t i = 0; i < n - 16; i += 16)
            _mm_storeu_si128((__m128i *)(void *)(d + i), x);
        _mm_storeu_si128((__m128i *)(void *)(d + n - 16), x);
        return;
    }
    if (n >= 4) {
        uint32_t w = 0x01010101u * v;
        uint64_t q = (uint64_t)w << 32 | w;
        if (n >= 8) {
            memcpy(d, &q, 8);
            memcpy(d + n - 8, &q, 8);
        } else {
            memcpy(d, &w, 4);
            memcpy(d + n - 4, &w, 4);
        }
        return;
    }
#elif KISA >= 1 && KDT == 1
    if (n >= 8) {
        __m128i x = _mm_set1_epi16((short)v);
        for (int32_t i = 0; i < n - 8; i += 8)
            _mm_storeu_si128((__m128i *)(void *)(d + i), x);
        _mm_storeu_si128((__m128i *)(void *)(d + n - 8), x);
        return;
    }
    if (n >= 4) {
        uint64_t q = 0x0001000100010001ull * v;
        memcpy(d, &q, 8);
        memcpy(d + n - 4, &q, 8);
        return;
    }
#elif KISA >= 1 && KDT == 2
    if (n >= 4) {
        __m128 x = _mm_set1_ps(v);
        for (int32_t i = 0; i < n - 4; i += 4)
            _mm_storeu_ps(d + i, x);
        _mm_storeu_ps(d + n - 4, x);
        return;
    }
#endif
#if KISA >= 1
    for (int32_t i = 0; i < n && i < 4; i++) /* n < 4 here */
        d[i] = v;
#else
    for (int32_t i = 0; i < n; i++)
        d[i] = v;
#endif
}

/* One channel of constant fill, rows x n. */
static inline KATTR void KFN(fill1)(KT *d, size_t W, int32_t rows, int32_t n, KT v)
{
    if ((size_t)n == W) { /* whole rows: one contiguous run */
        n *= rows;
        rows = 1;
    }
    for (int32_t r = 0; r < rows; r++, d += W)
        KFN(fillrow)(d, n, v);
}

/* HWC, C > 1, rows x n pixels: output rows rl = W*C elements apart. */
static inline KATTR void KFN(block_hwc)(KT *d, size_t rl, const uint8_t *s, ptrdiff_t srs,
                                        ptrdiff_t ps, ptrdiff_t cs, int32_t rows, int32_t n,
                                        uint32_t C, int32_t x0, const stk_kctx *kc)
{
    if (cs == 1 && ps == (ptrdiff_t)C) {
        for (int32_t r = 0; r < rows; r++, d += rl, s += srs)
            KFN(convt)(d, s, n, C, x0, kc);
        return;
    }
#if KISA == 2
    if (C == 3 && n >= 16 && ((cs == 1 && ps == -3) || ps == 1 || ps == -1)) {
        const float *k = KDT == 0 ? NULL : kc->scale_rep + (size_t)x0 * 3;
        const float *b = KDT == 0 ? NULL : kc->bias_rep + (size_t)x0 * 3;
        for (int32_t r = 0; r < rows; r++, d += rl, s += srs)
            KFN(hwc3_simd)(d, s, ps, cs, n, k, b);
        return;
    }
#endif
#if KDT == 0
    for (int32_t r = 0; r < rows; r++, d += rl, s += srs)
        KFN(b_hwc)(d, s, ps, cs, n, C);
#else
    uint8_t tmp[KTMP];
    int32_t piece = KTMP / (int32_t)C;
    for (int32_t r = 0; r < rows; r++, d += rl, s += srs) {
        for (int32_t p = 0; p < n; p += piece) {
            int32_t q = n - p < piece ? n - p : piece;
            KFN(b_hwc)(tmp, s + (ptrdiff_t)p * ps, ps, cs, q, C);
            KFN(convt)(d + (size_t)p * C, tmp, q, C, x0 + p, kc);
        }
    }
#endif
}

/* CHW from a 3-channel interleaved source, rows x n. */
static inline KATTR void KFN(block_chw3)(KT *d, size_t W, size_t plane, const uint8_t *s,
                                         ptrdiff_t srs, ptrdiff_t ps, int32_t rows, int32_t n,
                                         const stk_kctx *kc)
{
#if KISA == 2
    if (n >= 16 && (ps == 3 || ps == -3)) {
        __m256 k[3], b[3];
        for (int c = 0; c < 3; c++) {
            k[c] = _mm256_set1_ps(KDT == 0 ? 0.0f : kc->scale[c]);
            b[c] = _mm256_set1_ps(KDT == 0 ? 0.0f : kc->bias[c]);
        }
        for (int32_t r = 0; r < rows; r++, d += W, s += srs)
            KFN(chw3_simd)(d, plane, s, ps, n, k, b);
        return;
    }
#endif
#if KDT == 0
    (void)kc;
    for (int32_t r = 0; r < rows; r++, d += W, s += srs)
        KFN(b_chw3)(d, d + plane, d + 2 * plane, s, ps, n);
#else
    uint8_t tmp[KTMP];
    const int32_t piece = KTMP / 3;
    KFN(ch) s0 = KCH(kc, 0), s1 = KCH(kc, 1), s2 = KCH(kc, 2);
    for (int32_t r = 0; r < rows; r++, d += W, s += srs) {
        for (int32_t p = 0; p < n; p += piece) {
            int32_t q = n - p < piece ? n - p : piece;
            KFN(b_chw3)(tmp, tmp + piece, tmp + 2 * piece, s + (ptrdiff_t)p * ps, ps, q);
            KFN(conv1)(d + p, tmp, q, s0);
            KFN(conv1)(d + plane + p, tmp + piece, q, s1);
            KFN(conv1)(d + 2 * plane + p, tmp + 2 * piece, q, s2);
        }
    }
#endif
}

/* ---- The kernel -------------------------------------------------------- */

static KATTR void KFN(kernel)(const stk_kctx *kc, const stk_image_view *in, const stk_seg *ys,
                              int nys, const stk_seg *xs, int nxs, void *outv)
{
    KT *out = outv;
    const KT *fill = kc->fill;
    uint32_t C = kc->channels;
    size_t W = kc->out_w, plane = (size_t)kc->out_h * W;
    ptrdiff_t rs = in->row_stride, cols = in->col_stride, cs = C == 1 ? 1 : in->chan_stride;
    int joint3 = C == 3 && cs == 1 && (cols == 3 || cols == -3);

    if (kc->layout == STK_CHW && !joint3) {
        /* Plane by plane; HWC with one channel is the same memory. */
        for (uint32_t c = 0; c < C; c++) {
            KFN(ch) st = KCH(kc, c);
            KT *dplane = out + (size_t)c * plane;
            const uint8_t *splane = in->pixels + (ptrdiff_t)c * cs;
            for (int a = 0; a < nys; a++) {
                const stk_seg sy = ys[a];
                for (int b = 0; b < nxs; b++) {
                    const stk_seg sx = xs[b];
                    int32_t fid = sy.fill > sx.fill ? sy.fill : sx.fill;
                    KT *d = dplane + (size_t)sy.out0 * W + (size_t)sx.out0;
                    if (fid >= 0)
                        KFN(fill1)(d, W, sy.len, sx.len, fill[(size_t)fid * C + c]);
                    else
                        KFN(block1)(d, W, splane + (ptrdiff_t)sy.src0 * rs +
                                              (ptrdiff_t)sx.src0 * cols,
                                    (ptrdiff_t)sy.step * rs, (ptrdiff_t)sx.step * cols, sy.len,
                                    sx.len, st);
                }
            }
        }
        return;
    }
    if (C == 1) { /* HWC = CHW for one channel */
        KFN(ch) st = KCH(kc, 0);
        for (int a = 0; a < nys; a++) {
            const stk_seg sy = ys[a];
            for (int b = 0; b < nxs; b++) {
                const stk_seg sx = xs[b];
                int32_t fid = sy.fill > sx.fill ? sy.fill : sx.fill;
                KT *d = out + (size_t)sy.out0 * W + (size_t)sx.out0;
                if (fid >= 0)
                    KFN(fill1)(d, W, sy.len, sx.len, fill[fid]);
                else
                    KFN(block1)(d, W, in->pixels + (ptrdiff_t)sy.src0 * rs +
                                          (ptrdiff_t)sx.src0 * cols,
                                (ptrdiff_t)sy.step * rs, (ptrdiff_t)sx.step * cols, sy.len,
                                sx.len, st);
            }
        }
        return;
    }
    size_t rl = kc->layout == STK_CHW ? W : W * C; /* elements between output rows */
    for (int a = 0; a < nys; a++) {
        const stk_seg sy = ys[a];
        for (int b = 0; b < nxs; b++) {
            const stk_seg sx = xs[b];
            int32_t fid = sy.fill > sx.fill ? sy.fill : sx.fill;
            const KT *fv = fill + (size_t)(fid < 0 ? 0 : fid) * C;
            const uint8_t *s =
                in->pixels + (ptrdiff_t)sy.src0 * rs + (ptrdiff_t)sx.src0 * cols;
            ptrdiff_t srs = (ptrdiff_t)sy.step * rs, ps = (ptrdiff_t)sx.step * cols;
            if (kc->layout == STK_CHW) { /* joint3 */
                KT *d = out + (size_t)sy.out0 * W + (size_t)sx.out0;
                if (fid >= 0) {
                    for (uint32_t c = 0; c < 3; c++)
                        KFN(fill1)(d + c * plane, W, sy.len, sx.len, fv[c]);
                } else {
                    KFN(block_chw3)(d, W, plane, s, srs, ps, sy.len, sx.len, kc);
                }
            } else {
                KT *d = out + ((size_t)sy.out0 * W + (size_t)sx.out0) * C;
                if (fid >= 0) {
                    if ((size_t)sx.len == W)
                        KFN(fill_hwc)(d, (size_t)sx.len * (size_t)sy.len, C, fv);
                    else
                        for (int32_t r = 0; r < sy.len; r++, d += rl)
                            KFN(fill_hwc)(d, (size_t)sx.len, C, fv);
                } else {
                    KFN(block_hwc)(d, rl, s, srs, ps, cs, sy.len, sx.len, C, sx.out0, kc);
                }
            }
        }
    }
}

#undef KT
#undef KSTORE8
#undef KTMP
#undef KLD
#undef KSIMD_CVT
#undef KSIMD_U8
#undef KVEC_T
#undef KVEC_SET1
#undef KREV4
#undef KCH
#undef KCVT
#undef KFN
#undef KCAT2
#undef KCAT2_
#undef KNAME
#undef KDT
#undef KISA
#undef KATTR
