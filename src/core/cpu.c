/*
 * cpu.c — SIMD feature detection and the CPU budget (see cpu.h).
 */
#include "core/cpu.h"

#include "stoker/stoker.h"

#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* ------------------------------------------------------------------------ */
/* The CPU budget: affinity, cgroup quota, STOKER_CPUS                       */
/* ------------------------------------------------------------------------ */

/* The first line of a small file, or 0 if it cannot be read. */
static int read_line(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    int ok = fgets(buf, (int)size, f) != NULL;
    fclose(f);
    return ok;
}

/* Cores granted by a cgroup directory's quota, or +inf for none. */
static double quota_at(const char *dir, int v2)
{
    char path[4096], line[128];
    if (v2) {
        if (snprintf(path, sizeof path, "%s/cpu.max", dir) >= (int)sizeof path ||
            !read_line(path, line, sizeof line))
            return INFINITY;
        char q[64];
        double period = 0;
        if (sscanf(line, "%63s %lf", q, &period) != 2 || !strcmp(q, "max") || period <= 0)
            return INFINITY;
        double quota = strtod(q, NULL);
        return quota > 0 ? quota / period : INFINITY;
    }
    double quota, period;
    if (snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir) >= (int)sizeof path ||
        !read_line(path, line, sizeof line) || (quota = strtod(line, NULL)) <= 0)
        return INFINITY;
    if (snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir) >= (int)sizeof path ||
        !read_line(path, line, sizeof line) || (period = strtod(line, NULL)) <= 0)
        return INFINITY;
    return quota / period;
}

/* The smallest quota on `rel` (a cgroup path, "/a/b") and its ancestors,
 * under `mount`. */
static double quota_along(const char *mount, const char *rel, int v2)
{
    char dir[4096];
    double best = INFINITY;
    if (snprintf(dir, sizeof dir, "%s%s", mount, rel) >= (int)sizeof dir)
        return best;
    size_t floor_len = strlen(mount);
    for (;;) { /* the cgroup, then each parent up to the mount point */
        double q = quota_at(dir, v2);
        if (q < best)
            best = q;
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= floor_len || !slash || (size_t)(slash - dir) < floor_len)
            break;
        *slash = '\0';
    }
    return best;
}

double stk_cpu_available_from(const char *cgroup_root, const char *self_cgroup,
                              unsigned affinity)
{
    double cores = affinity ? (double)affinity : INFINITY;
    /* /proc/self/cgroup lines: "ID:CONTROLLERS:PATH"; v2 is "0::PATH". */
    const char *p = self_cgroup ? self_cgroup : "";
    while (*p) {
        const char *end = strchr(p, '\n');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char line[4096];
        if (n < sizeof line) {
            memcpy(line, p, n);
            line[n] = '\0';
            char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
            if (c2) {
                *c2 = '\0';
                const char *ctrl = c1 + 1, *rel = c2 + 1;
                char mount[4096];
                double q = INFINITY;
                if (!*ctrl) { /* the unified hierarchy */
                    if (snprintf(mount, sizeof mount, "%s", cgroup_root) < (int)sizeof mount)
                        q = quota_along(mount, rel, 1);
                    if (q == INFINITY && /* hybrid layouts mount it at unified/ */
                        snprintf(mount, sizeof mount, "%s/unified", cgroup_root) <
                            (int)sizeof mount)
                        q = quota_along(mount, rel, 1);
                } else {
                    /* v1: the cpu controller, possibly co-mounted ("cpu,cpuacct") */
                    char list[256];
                    snprintf(list, sizeof list, ",%s,", ctrl);
                    if (strstr(list, ",cpu,")) {
                        const char *names[] = {"cpu", "cpu,cpuacct", "cpuacct,cpu"};
                        for (size_t i = 0; i < 3 && q == INFINITY; i++)
                            if (snprintf(mount, sizeof mount, "%s/%s", cgroup_root, names[i]) <
                                (int)sizeof mount)
                                q = quota_along(mount, rel, 0);
                    }
                }
                if (q < cores)
                    cores = q;
            }
        }
        p += n + (end ? 1 : 0);
        if (!end)
            break;
    }
    return cores;
}

double stk_cpu_available(void)
{
    unsigned affinity = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        affinity = (unsigned)CPU_COUNT(&set);
    char text[8192] = "";
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (f) {
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = '\0';
        fclose(f);
    }
    double cores = stk_cpu_available_from("/sys/fs/cgroup", text, affinity);
    if (cores == INFINITY) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        cores = n > 0 ? (double)n : 1.0;
    }
    const char *env = getenv("STOKER_CPUS");
    if (env && *env) {
        char *end;
        double v = strtod(env, &end);
        if (*end == '\0' && v > 0 && v < cores)
            cores = v;
    }
    return cores;
}

double stk_cpus_available(void)
{
    return stk_cpu_available();
}
