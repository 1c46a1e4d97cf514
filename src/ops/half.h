/*
 * half.h — IEEE 754 binary16 ("half", f16) conversions, in portable C.
 *
 * stk_f32_to_f16 rounds to nearest, ties to even, exactly as the hardware
 * conversion (F16C's VCVTPS2PH with rounding mode 0) and as C's _Float16 do:
 *
 *   |x| >= 65520          -> +-inf  (65520 is the midpoint between the largest
 *                                    half, 65504, and the next power 65536;
 *                                    the tie goes to the even side, inf)
 *   2^-14 <= |x| < 65520  -> normal half, 10-bit mantissa rounded
 *   |x| < 2^-14           -> subnormal half (multiples of 2^-24), rounded;
 *                            |x| <= 2^-25 becomes a signed zero
 *   NaN                   -> a quiet NaN keeping the top payload bits
 *
 * Rounding on the bit pattern: the bits to drop are compared with half of
 * their weight; above rounds up, below truncates, exactly half rounds to make
 * the kept mantissa even. A carry out of the mantissa correctly bumps the
 * exponent (1.11111111111b rounds to 2.0, the largest subnormal rounds to the
 * smallest normal).
 *
 * stk_f16_to_f32 is exact (every half is a float).
 *
 * The kernels do not call these per element: f16 output of a uint8 image has
 * only 256 possible values per channel, so a plan tabulates them once
 * (see plan.c). Tests check both functions against known bit patterns.
 */
#ifndef STK_OPS_HALF_H
#define STK_OPS_HALF_H

#include <stdint.h>
#include <string.h>

/* Callable from CUDA device code too (src/gpu/kernels.h includes this file
 * under nvcc). */
#ifdef __CUDACC__
#define STK_HALF_FN __host__ __device__ static inline
#else
#define STK_HALF_FN static inline
#endif

STK_HALF_FN uint16_t stk_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;

    if (ax >= 0x7f800000u) /* inf or NaN */
        return (uint16_t)(sign | 0x7c00u |
                          (ax > 0x7f800000u ? 0x0200u | ((ax >> 13) & 0x03ffu) : 0u));
    if (ax >= 0x477ff000u) /* >= 65520: rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) { /* >= 2^-14: normal half */
        uint32_t v = ax - 0x38000000u; /* rebias the exponent: 127 -> 15 */
        uint32_t r = v >> 13, rem = v & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    if (ax < 0x33000000u) /* < 2^-25: rounds to zero */
        return sign;
    /* Subnormal half: the value is m * 2^(e - 150) with the implicit bit set;
     * in units of 2^-24 that is m >> (126 - e), shift in [14, 24]. */
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x007fffffu) | 0x00800000u;
    uint32_t shift = 126u - e;
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (r & 1u)))
        r++;
    return (uint16_t)(sign | r);
}

/* float -> bfloat16: the top half of the float's bits, rounded to nearest,
 * ties to even (as torch's c10::BFloat16 round_to_nearest_even: NaN becomes
 * the quiet NaN 0x7fc0; a finite value that rounds past the largest
 * bfloat16 becomes infinity). */
STK_HALF_FN uint16_t stk_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)0x7fc0u;
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* bfloat16 -> float, exact. */
STK_HALF_FN float stk_bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

STK_HALF_FN float stk_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x03ffu, x;
    if (exp == 0x1fu) {
        x = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        x = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        x = sign;
    } else { /* subnormal: normalise */
        uint32_t e = 113u;
        while (!(man & 0x0400u)) {
            man <<= 1;
            e--;
        }
        x = sign | (e << 23) | ((man & 0x03ffu) << 13);
    }
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

#endif
