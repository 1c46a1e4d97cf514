/*
 * cpu.h — which SIMD instruction sets this CPU and OS can run (internal).
 *
 * Read from cpuid and xgetbv directly (__builtin_cpu_supports does not know
 * every feature on every compiler: "f16c" on clang 14), once per process;
 * the race on first use is benign, every thread computes the same answer.
 * Always false on other architectures.
 */
#ifndef STK_CORE_CPU_H
#define STK_CORE_CPU_H

#include <stdbool.h>

/* AVX2 and F16C, with YMM state saved by the OS (XCR0 bits 1-2). */
bool stk_cpu_has_avx2_f16c(void);
/* AVX-512 F and BW, with opmask/ZMM state saved by the OS (XCR0 0xE6). */
bool stk_cpu_has_avx512bw(void);
/* SSE4.2 (its crc32 instruction: core/crc32c.c). */
bool stk_cpu_has_sse42(void);

#endif
