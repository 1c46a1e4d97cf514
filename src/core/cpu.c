/*
 * cpu.c — SIMD feature detection (see cpu.h).
 */
#include "core/cpu.h"

#include <stdatomic.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

enum { FEAT_AVX2_F16C = 1, FEAT_AVX512BW = 2, FEAT_SSE42 = 4, FEAT_KNOWN = 1 << 30 };

static int detect(void)
{
    unsigned a, b, c, d, lo = 0, hi = 0;
    int f = FEAT_KNOWN;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return f;
    if (c & (1u << 20)) /* SSE4.2: crc32 (no OS state to check) */
        f |= FEAT_SSE42;
    if (!(c & (1u << 27))) /* OSXSAVE: xgetbv is available */
        return f;
    unsigned f16c_avx = (c & (1u << 28)) && (c & (1u << 29));
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return f;
    if (f16c_avx && (lo & 6u) == 6u && (b & (1u << 5)))
        f |= FEAT_AVX2_F16C;
    if ((lo & 0xE6u) == 0xE6u && (b & (1u << 16)) && (b & (1u << 30)))
        f |= FEAT_AVX512BW;
    return f;
}

static int features(void)
{
    static _Atomic int cached;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (!v) {
        v = detect();
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}

bool stk_cpu_has_avx2_f16c(void) { return features() & FEAT_AVX2_F16C; }
bool stk_cpu_has_avx512bw(void) { return features() & FEAT_AVX512BW; }
bool stk_cpu_has_sse42(void) { return features() & FEAT_SSE42; }
#else
bool stk_cpu_has_avx2_f16c(void) { return false; }
bool stk_cpu_has_avx512bw(void) { return false; }
bool stk_cpu_has_sse42(void) { return false; }
#endif
