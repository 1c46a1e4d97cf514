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

/*
 * The CPU this process may really use, in cores (may be fractional): the
 * smallest of the affinity mask's CPU count (sched_getaffinity), the cgroup
 * quota (v2 `cpu.max` "QUOTA PERIOD", v1 `cpu.cfs_quota_us` /
 * `cpu.cfs_period_us`, on the process's own cgroup path and its ancestors)
 * and, when set, the environment variable STOKER_CPUS (a positive number:
 * what a launcher wants this process to assume, e.g. cores per rank).
 * Read afresh on every call (a few small files): the autotuner calls it
 * about once a second, so a changed quota is seen. Never below 1 core's
 * worth of a fraction: a quota of 0.5 cores gives 0.5.
 */
double stk_cpu_available(void);

/* The same computation over another root (tests): `cgroup_root` stands for
 * /sys/fs/cgroup and `self_cgroup` for the text of /proc/self/cgroup;
 * `affinity` is the affinity mask's CPU count (0: not limited). */
double stk_cpu_available_from(const char *cgroup_root, const char *self_cgroup,
                              unsigned affinity);

#endif
