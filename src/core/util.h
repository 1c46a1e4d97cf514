/*
 * util.h — small helpers every module uses: checked size arithmetic, aligned
 * allocation, a per-thread growable scratch buffer, monotonic time.
 */
#ifndef STK_CORE_UTIL_H
#define STK_CORE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define STK_ALIGN 64 /* cache line; batch buffers and scratch are aligned to it */

/* a*b into *out; false on overflow. */
static inline bool stk_mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool stk_add_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

void *stk_aligned_alloc(size_t bytes); /* STK_ALIGN-aligned, NULL on failure */
void stk_aligned_free(void *p);

/* STK_EINVAL naming `what` unless all `n` words of a public struct's
 * reserved_ space are zero (docs/abi.md). */
int stk_reserved_check(const uint64_t *words, size_t n, const char *what);

/* A growable buffer owned by one thread. */
typedef struct stk_scratch {
    uint8_t *data; /* stk_aligned_alloc'd */
    size_t cap;
} stk_scratch;

/* Make cap >= bytes (contents not kept). Returns STK_ENOMEM via stk_fail. */
int stk_scratch_reserve(stk_scratch *s, size_t bytes);
void stk_scratch_free(stk_scratch *s);

/* Cheap timestamps for per-sample stage timers: the TSC on x86-64 (a few
 * nanoseconds), CLOCK_MONOTONIC nanoseconds elsewhere. Convert differences
 * with stk_ticks_per_second() (calibrated once, thread-safe). */
#if defined(__x86_64__)
#include <x86intrin.h>
static inline uint64_t stk_ticks(void) { return __rdtsc(); }
#else
uint64_t stk_ticks(void);
#endif
double stk_ticks_per_second(void);

/* Seconds from an arbitrary start, CLOCK_MONOTONIC. */
double stk_now(void);
/* CPU seconds of the calling thread (CLOCK_THREAD_CPUTIME_ID) and of the
 * whole process (CLOCK_PROCESS_CPUTIME_ID); 0 if the clock is missing. */
double stk_thread_cpu_s(void);
double stk_process_cpu_s(void);

/* A malloc'd copy of n bytes (at least 1 byte allocated) in *out; returns 0
 * or STK_ENOMEM via stk_fail. */
int stk_memdup(const void *src, size_t n, void **out);

/* strdup that reports ENOMEM through stk_fail (returns NULL). */
char *stk_strdup(const char *s);

/* A growable NUL-terminated string for building request bodies and
 * canonical forms (io/sigv4.c, io/s3.c). Out of memory is sticky: `oom`
 * is set, later appends do nothing, and the caller checks it once. */
typedef struct stk_textbuf {
    char *p;      /* malloc'd (free it), NUL-terminated while !oom */
    size_t n, cap;
    bool oom;
} stk_textbuf;
void stk_textbuf_put(stk_textbuf *b, const char *s, size_t n);
static inline void stk_textbuf_str(stk_textbuf *b, const char *s) { stk_textbuf_put(b, s, strlen(s)); }

/* A list of owned strings, kept NULL-terminated (v[n] == NULL once one
 * was pushed): file names a reader collects (format/wds.c), URLs a
 * pattern expands to (io/remote.c). */
typedef struct stk_strlist {
    char **v;
    size_t n, cap;
} stk_strlist;
/* Append s, taken over (NULL: out of memory, reported). 0 or STK_ENOMEM
 * (s freed). */
int stk_strlist_push(stk_strlist *l, char *s);
/* Free every string and the array; *l becomes empty. */
void stk_strlist_free(stk_strlist *l);

#endif
