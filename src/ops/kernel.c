/*
 * kernel.c — instantiates the fused kernel (kernel_impl.h) per output dtype
 * and instruction set, and picks one at plan-compile time.
 *
 * Three variants of each dtype's kernel:
 *   c     plain loops, left to the compiler's vectoriser; any CPU.
 *   sse2  the hot runs in SSE2 intrinsics; every x86-64 CPU has SSE2, and
 *         the library is built for that baseline.
 *   avx2  the hot runs in AVX2 intrinsics, f16 output converted by F16C's
 *         VCVTPS2PH (round to nearest even, as stk_f32_to_f16); compiled
 *         under __attribute__((target("avx2,f16c"))) and selected only when
 *         cpuid says the CPU has both and the OS saves the YMM registers.
 * The choice is a plain function pointer stored in each plan, not an ifunc,
 * so it works with any libc and under sanitizers.
 *
 * FMA is deliberately not used: with -std=c11 gcc does not contract a*b+c,
 * so every variant rounds v*scale+bias identically and batches are
 * bit-identical on every machine.
 */
#include "ops/kernel.h"

#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(STK_NO_SIMD)
#define STK_X86_SIMD 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define STK_X86_SIMD 0
#endif

#if STK_X86_SIMD
/*
 * Three-channel byte shuffles for the AVX2 kernels (SSSE3 pshufb): 16 pixels
 * = 48 bytes in three registers, rearranged into three output registers.
 *   IL   interleave: inputs are 16 bytes of each plane, output HWC
 *   ILR  the same with each plane's 16 bytes reversed (flipped planar source)
 *   DI   deinterleave: input 48 HWC bytes, outputs the three planes
 *   DIR  the same, pixel order reversed (flipped interleaved source -> CHW)
 *   RV   reverse the order of 16 HWC pixels (flipped interleaved -> HWC)
 */
enum { STK_P48_IL, STK_P48_ILR, STK_P48_DI, STK_P48_DIR, STK_P48_RV };
/* 48-byte permutations for three-channel pixels (16 pixels), as pshufb masks:
 * mask[perm][output register][input register][byte]; 0x80 zeroes the byte.
 * Generated; see the comment above for what each permutation is. */
static const uint8_t stk_perm48[5][3][3][16] = {
    /* IL */ {
        {{0, 0x80, 0x80, 1, 0x80, 0x80, 2, 0x80, 0x80, 3, 0x80, 0x80, 4, 0x80, 0x80, 5},
         {0x80, 0, 0x80, 0x80, 1, 0x80, 0x80, 2, 0x80, 0x80, 3, 0x80, 0x80, 4, 0x80, 0x80},
         {0x80, 0x80, 0, 0x80, 0x80, 1, 0x80, 0x80, 2, 0x80, 0x80, 3, 0x80, 0x80, 4, 0x80}},
        {{0x80, 0x80, 6, 0x80, 0x80, 7, 0x80, 0x80, 8, 0x80, 0x80, 9, 0x80, 0x80, 10, 0x80},
         {5, 0x80, 0x80, 6, 0x80, 0x80, 7, 0x80, 0x80, 8, 0x80, 0x80, 9, 0x80, 0x80, 10},
         {0x80, 5, 0x80, 0x80, 6, 0x80, 0x80, 7, 0x80, 0x80, 8, 0x80, 0x80, 9, 0x80, 0x80}},
        {{0x80, 11, 0x80, 0x80, 12, 0x80, 0x80, 13, 0x80, 0x80, 14, 0x80, 0x80, 15, 0x80, 0x80},
         {0x80, 0x80, 11, 0x80, 0x80, 12, 0x80, 0x80, 13, 0x80, 0x80, 14, 0x80, 0x80, 15, 0x80},
         {10, 0x80, 0x80, 11, 0x80, 0x80, 12, 0x80, 0x80, 13, 0x80, 0x80, 14, 0x80, 0x80, 15}},
    },
    /* ILR */ {
        {{15, 0x80, 0x80, 14, 0x80, 0x80, 13, 0x80, 0x80, 12, 0x80, 0x80, 11, 0x80, 0x80, 10},
         {0x80, 15, 0x80, 0x80, 14, 0x80, 0x80, 13, 0x80, 0x80, 12, 0x80, 0x80, 11, 0x80, 0x80},
         {0x80, 0x80, 15, 0x80, 0x80, 14, 0x80, 0x80, 13, 0x80, 0x80, 12, 0x80, 0x80, 11, 0x80}},
        {{0x80, 0x80, 9, 0x80, 0x80, 8, 0x80, 0x80, 7, 0x80, 0x80, 6, 0x80, 0x80, 5, 0x80},
         {10, 0x80, 0x80, 9, 0x80, 0x80, 8, 0x80, 0x80, 7, 0x80, 0x80, 6, 0x80, 0x80, 5},
         {0x80, 10, 0x80, 0x80, 9, 0x80, 0x80, 8, 0x80, 0x80, 7, 0x80, 0x80, 6, 0x80, 0x80}},
        {{0x80, 4, 0x80, 0x80, 3, 0x80, 0x80, 2, 0x80, 0x80, 1, 0x80, 0x80, 0, 0x80, 0x80},
         {0x80, 0x80, 4, 0x80, 0x80, 3, 0x80, 0x80, 2, 0x80, 0x80, 1, 0x80, 0x80, 0, 0x80},
         {5, 0x80, 0x80, 4, 0x80, 0x80, 3, 0x80, 0x80, 2, 0x80, 0x80, 1, 0x80, 0x80, 0}},
    },
    /* DI */ {
        {{0, 3, 6, 9, 12, 15, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80},
         {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 2, 5, 8, 11, 14, 0x80, 0x80, 0x80, 0x80, 0x80},
         {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 1, 4, 7, 10, 13}},
        {{1, 4, 7, 10, 13, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80},
         {0x80, 0x80, 0x80, 0x80, 0x80, 0, 3, 6, 9, 12, 15, 0x80, 0x80, 0x80, 0x80, 0x80},
         {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 2, 5, 8, 11, 14}},
        {{2, 5, 8, 11, 14, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80},
         {0x80, 0x80, 0x80, 0x80, 0x80, 1, 4, 7, 10, 13, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80},
         {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0, 3, 6, 9, 12, 15}},
    },
    /* DIR */ {
        {{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 15, 12, 9, 6, 3, 0},
         {0x80, 0x80, 0x80, 0x80, 0x80, 14, 11, 8, 5, 2, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80},
         {13, 10, 7, 4, 1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80}},
        {{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 13, 10, 7, 4, 1},
         {0x80, 0x80, 0x80, 0x80, 0x80, 15, 12, 9, 6, 3, 0, 0x80, 0x80, 0x80, 0x80, 0x80},
         {14, 11, 8, 5, 2, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80}},
        {{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 14, 11, 8, 5, 2},
         {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 13, 10, 7, 4, 1, 0x80, 0x80, 0x80, 0x80, 0x80},
         {15, 12, 9, 6, 3, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80}},
    },
    /* RV */ {
        {{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80},
         {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 14},
         {13, 14, 15, 10, 11, 12, 7, 8, 9, 4, 5, 6, 1, 2, 3, 0x80}},
        {{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 15, 0x80},
         {15, 0x80, 11, 12, 13, 8, 9, 10, 5, 6, 7, 2, 3, 4, 0x80, 0},
         {0x80, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80}},
        {{0x80, 12, 13, 14, 9, 10, 11, 6, 7, 8, 3, 4, 5, 0, 1, 2},
         {1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80},
         {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80}},
    },
};
#endif

#define KNAME u8_c
#define KDT 0
#define KISA 0
#define KATTR
#include "ops/kernel_impl.h"

#define KNAME f16_c
#define KDT 1
#define KISA 0
#define KATTR
#include "ops/kernel_impl.h"

#define KNAME f32_c
#define KDT 2
#define KISA 0
#define KATTR
#include "ops/kernel_impl.h"

#if STK_X86_SIMD
#define KNAME u8_sse2
#define KDT 0
#define KISA 1
#define KATTR
#include "ops/kernel_impl.h"

#define KNAME f16_sse2
#define KDT 1
#define KISA 1
#define KATTR
#include "ops/kernel_impl.h"

#define KNAME f32_sse2
#define KDT 2
#define KISA 1
#define KATTR
#include "ops/kernel_impl.h"

#define KNAME u8_avx2
#define KDT 0
#define KISA 2
#define KATTR __attribute__((target("avx2,f16c")))
#include "ops/kernel_impl.h"

#define KNAME f16_avx2
#define KDT 1
#define KISA 2
#define KATTR __attribute__((target("avx2,f16c")))
#include "ops/kernel_impl.h"

#define KNAME f32_avx2
#define KDT 2
#define KISA 2
#define KATTR __attribute__((target("avx2,f16c")))
#include "ops/kernel_impl.h"
#endif

#if STK_X86_SIMD
/* AVX2 and F16C in the CPU, and YMM state saved by the OS (OSXSAVE and
 * XCR0 bits 1-2), from cpuid directly: __builtin_cpu_supports does not
 * know "f16c" everywhere (clang 14). Computed once; the race on first use
 * is benign (every thread computes the same value). */
static int have_avx2_f16c(void)
{
    static _Atomic int cached = -1;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v >= 0)
        return v;
    unsigned a, b, c, d;
    v = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27)) && (c & (1u << 28)) &&
        (c & (1u << 29))) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        if ((lo & 6u) == 6u && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 5)))
            v = 1;
    }
    atomic_store_explicit(&cached, v, memory_order_relaxed);
    return v;
}
#endif

static _Atomic int forced = STK_ISA_AUTO; /* tests and benchmarks only */

int stk_kernel_isa_available(int isa)
{
    switch (isa) {
    case STK_ISA_C:
        return 1;
#if STK_X86_SIMD
    case STK_ISA_SSE2:
        return 1;
    case STK_ISA_AVX2:
        return have_avx2_f16c();
#endif
    default:
        return 0;
    }
}

int stk_kernel_force_isa(int isa)
{
    return atomic_exchange(&forced, isa);
}

static int pick(void)
{
    int f = atomic_load(&forced);
    if (f != STK_ISA_AUTO && stk_kernel_isa_available(f))
        return f;
    if (stk_kernel_isa_available(STK_ISA_AVX2))
        return STK_ISA_AVX2;
    if (stk_kernel_isa_available(STK_ISA_SSE2))
        return STK_ISA_SSE2;
    return STK_ISA_C;
}

const char *stk_kernel_isa(void)
{
    switch (pick()) {
    case STK_ISA_AVX2: return "avx2";
    case STK_ISA_SSE2: return "sse2";
    default: return "c";
    }
}

stk_kernel_fn stk_kernel_select(stk_dtype dtype)
{
    static const stk_kernel_fn c[3] = {kernel_u8_c, kernel_f16_c, kernel_f32_c};
#if STK_X86_SIMD
    static const stk_kernel_fn sse2[3] = {kernel_u8_sse2, kernel_f16_sse2, kernel_f32_sse2};
    static const stk_kernel_fn avx2[3] = {kernel_u8_avx2, kernel_f16_avx2, kernel_f32_avx2};
#endif
    unsigned d = (unsigned)dtype;
    if (d > 2)
        return NULL;
    switch (pick()) {
#if STK_X86_SIMD
    case STK_ISA_AVX2: return avx2[d];
    case STK_ISA_SSE2: return sse2[d];
#endif
    default: return c[d];
    }
}
