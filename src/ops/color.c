/*
 * color.c — builds the row functions of color.h twice (color_impl.h), plain
 * and for AVX2, adds the hand-written AVX2 store for the hot case (three
 * channels, uint8 pixels to planar f32/f16, the imagenet presets' last
 * step), and sets up rotations.
 *
 * The AVX2 build also has FMA, used in exactly one place: ToTensor's
 * v / 255 as a multiply by the reciprocal and one correction step, which is
 * the correctly rounded quotient for every v (see color_impl.h); nothing
 * else is contracted (-ffp-contract=off, set for every compiler in
 * CMakeLists.txt and setup.py, keeps a*b+c as two roundings).
 *
 * The hot store: 16 interleaved RGB pixels (48 bytes) are split into three
 * planes with PSHUFB, widened to int32, converted to float and written as
 * v * scale + bias (VMULPS then VADDPS: the same two roundings as the plain
 * expression, so both variants give identical bits); f16 goes through
 * VCVTPS2PH with round-to-nearest-even, as stk_f32_to_f16. f32 rows that
 * are 32-byte aligned (224-wide planes in a 64-byte aligned batch are) are
 * written with streaming stores: a 602 KB sample is written once and read
 * by the consumer much later, so fetching its cache lines first only costs
 * memory bandwidth; `fence` (SFENCE) orders them before the sample is
 * published.
 */
#include "ops/color.h"
#include "ops/grid_tap.h" /* rotate_row's bilinear tap (color_impl.h) */

#include "ops/half.h"
#include "ops/kernel.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(STK_NO_SIMD)
#define COLOR_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define COLOR_X86 0
#endif

#define CSFX c
#define CATTR
#define CFMA 0
#include "ops/color_impl.h"
#undef CSFX
#undef CATTR
#undef CFMA

static void u8_to_out_c(const stk_outfmt *o, const uint8_t *row, int32_t y, void *out)
{
    u8_to_out_generic_c(o, row, y, out);
}

static void fence_none(void) {}

static const stk_color_kernels color_c = {
    u8_to_float_c, u8_to_out_c,  float_to_out_c, brightness_c, contrast_c,
    saturation_c,  hue_c,        gray_sum_c,     rotate_row_c, fence_none,
    grayscale_c,   blur_row_c,
};

#if COLOR_X86
#define CSFX avx2
#define CATTR __attribute__((target("avx2,f16c,fma")))
#define CFMA 1
#include "ops/color_impl.h"
#undef CSFX
#undef CFMA


CATTR static void u8_to_out_avx2(const stk_outfmt *o, const uint8_t *row, int32_t y, void *out)
{
    if (o->nc != 3 || o->layout != STK_CHW || (o->dtype != STK_F32 && o->dtype != STK_F16)) {
        u8_to_out_generic_avx2(o, row, y, out);
        return;
    }
    int32_t w = o->width, i = 0;
    size_t plane = (size_t)o->width * (size_t)o->height, at = (size_t)y * w;
    __m128i m[3][3];
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < 3; k++)
            m[c][k] = _mm_loadu_si128((const __m128i *)stk_perm48[STK_P48_DI][c][k]);
    __m256 sc[3], bi[3];
    for (int c = 0; c < 3; c++) {
        sc[c] = _mm256_set1_ps(o->scale[c]);
        bi[c] = _mm256_set1_ps(o->bias[c]);
    }
    for (; i + 16 <= w; i += 16) {
        const uint8_t *s = row + 3 * (size_t)i;
        __m128i a = _mm_loadu_si128((const __m128i *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i d = _mm_loadu_si128((const __m128i *)(s + 32));
        for (int c = 0; c < 3; c++) {
            __m128i v = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, m[c][0]),
                                                  _mm_shuffle_epi8(b, m[c][1])),
                                     _mm_shuffle_epi8(d, m[c][2]));
            __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
            __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)));
            lo = _mm256_add_ps(_mm256_mul_ps(lo, sc[c]), bi[c]);
            hi = _mm256_add_ps(_mm256_mul_ps(hi, sc[c]), bi[c]);
            size_t pos = (size_t)c * plane + at + (size_t)i;
            if (o->dtype == STK_F32) {
                float *dst = (float *)out + pos;
                if (((uintptr_t)dst & 31) == 0) { /* straight to memory: no read for ownership */
                    _mm256_stream_ps(dst, lo);
                    _mm256_stream_ps(dst + 8, hi);
                } else {
                    _mm256_storeu_ps(dst, lo);
                    _mm256_storeu_ps(dst + 8, hi);
                }
            } else {
                uint16_t *dst = (uint16_t *)out + pos;
                _mm_storeu_si128((__m128i *)dst, _mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT));
                _mm_storeu_si128((__m128i *)(dst + 8),
                                 _mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT));
            }
        }
    }
    for (; i < w; i++) {
        for (int c = 0; c < 3; c++) {
            float v = (float)row[3 * (size_t)i + c] * o->scale[c] + o->bias[c];
            size_t pos = (size_t)c * plane + at + (size_t)i;
            if (o->dtype == STK_F32)
                ((float *)out)[pos] = v;
            else
                ((uint16_t *)out)[pos] = stk_f32_to_f16(v);
        }
    }
}
#undef CATTR

/* Orders the streaming stores before whatever publishes the sample. */
static void fence_sfence(void) { _mm_sfence(); }

static const stk_color_kernels color_avx2 = {
    u8_to_float_avx2, u8_to_out_avx2, float_to_out_avx2, brightness_avx2, contrast_avx2,
    saturation_avx2,  hue_avx2,       gray_sum_avx2,     rotate_row_avx2, fence_sfence,
    grayscale_avx2,   blur_row_avx2,
};
#endif

const stk_color_kernels *stk_color_kernels_c(void) { return &color_c; }

#if COLOR_X86
static int have_fma(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 12));
}
#endif

const stk_color_kernels *stk_color_kernels_get(void)
{
#if COLOR_X86
    if (strcmp(stk_kernel_isa(), "avx2") == 0 && have_fma())
        return &color_avx2;
#endif
    return &color_c;
}

void stk_rotation_init(stk_rotation *r, double degrees, int32_t w, int32_t h, const float *fill,
                       int nc)
{
    /* torchvision: matrix = _get_inverse_affine_matrix(center=0, -angle, ...)
     * = [cos a, sin a, 0, -sin a, cos a, 0] with a = radians(-angle), as a
     * float32 theta, then divided by (w/2, h/2) in float32. */
    double a = -degrees * (3.141592653589793 / 180.0);
    float c = (float)cos(a), s = (float)sin(a);
    float hw = (float)(0.5 * w), hh = (float)(0.5 * h);
    r->w = w;
    r->h = h;
    r->m[0] = c / hw;
    r->m[1] = s / hw;
    r->m[2] = -s / hh;
    r->m[3] = c / hh;
    r->t[0] = r->t[1] = 0.0f;
    r->nearest = 0;
    for (int k = 0; k < 3; k++)
        r->fill[k] = fill ? fill[nc == 1 ? 0 : k] : 0.0f;
}

void stk_affine_init(stk_rotation *r, const double m[6], int32_t w, int32_t h, const float *fill,
                     int nc, int nearest)
{
    /* theta = float32(m), then theta^T / (w/2, h/2) in float32 */
    float hw = (float)(0.5 * w), hh = (float)(0.5 * h);
    r->w = w;
    r->h = h;
    r->m[0] = (float)m[0] / hw;
    r->m[1] = (float)m[1] / hw;
    r->t[0] = (float)m[2] / hw;
    r->m[2] = (float)m[3] / hh;
    r->m[3] = (float)m[4] / hh;
    r->t[1] = (float)m[5] / hh;
    r->nearest = nearest;
    for (int k = 0; k < 3; k++)
        r->fill[k] = fill ? fill[nc == 1 ? 0 : k] : 0.0f;
}

void stk_blur_init(stk_blur *b, float sigma, int kx, int ky, int32_t w, int32_t h, float *tmp)
{
    b->w = w;
    b->h = h;
    b->kx = kx;
    b->ky = ky;
    b->tmp = tmp;
    for (int axis = 0; axis < 2; axis++) {
        int k = axis ? ky : kx;
        float *wt = axis ? b->wy : b->wx;
        float half = (float)(k - 1) * 0.5f, sum = 0.0f;
        for (int i = 0; i < k; i++) {
            float x = (float)i - half; /* linspace(-half, half, k): exact */
            float q = x / sigma;
            wt[i] = expf(-0.5f * (q * q));
            sum += wt[i];
        }
        for (int i = 0; i < k; i++)
            wt[i] = wt[i] / sum;
    }
}
