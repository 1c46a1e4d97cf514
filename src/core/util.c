/*
 * util.c — allocation, scratch buffers, time, version.
 */
#include "core/util.h"

#include "core/error.h"

#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

unsigned stk_version_number(void) { return STK_VERSION_NUMBER; }
const char *stk_version_string(void) { return STK_VERSION_STRING; }

void *stk_aligned_alloc(size_t bytes)
{
    void *p = NULL;
    if (bytes == 0)
        bytes = 1;
    if (posix_memalign(&p, STK_ALIGN, bytes) != 0)
        return NULL;
    return p;
}

void stk_aligned_free(void *p) { free(p); }

void stk_free(void *p) { free(p); }

int stk_reserved_check(const uint64_t *words, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (words[i])
            return stk_fail(STK_EINVAL,
                            "%s: reserved_[%zu] is not zero (zero-initialise the struct; a "
                            "program built against a newer stoker.h needs a newer libstoker)",
                            what, i);
    return 0;
}

int stk_scratch_reserve(stk_scratch *s, size_t bytes)
{
    if (s->cap >= bytes)
        return 0;
    size_t cap = s->cap ? s->cap : 4096;
    while (cap < bytes) {
        if (cap > SIZE_MAX / 2) {
            cap = bytes;
            break;
        }
        cap *= 2;
    }
    void *p = stk_aligned_alloc(cap);
    if (!p)
        return stk_fail(STK_ENOMEM, "out of memory allocating %zu bytes of scratch", cap);
    stk_aligned_free(s->data);
    s->data = p;
    s->cap = cap;
    return 0;
}

void stk_scratch_free(stk_scratch *s)
{
    stk_aligned_free(s->data);
    s->data = NULL;
    s->cap = 0;
}

double stk_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double clock_s(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double stk_thread_cpu_s(void) { return clock_s(CLOCK_THREAD_CPUTIME_ID); }
double stk_process_cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

int stk_memdup(const void *src, size_t n, void **out)
{
    *out = malloc(n ? n : 1);
    if (!*out)
        return stk_fail(STK_ENOMEM, "out of memory copying %zu bytes", n);
    if (n)
        memcpy(*out, src, n);
    return 0;
}

char *stk_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (!p) {
        stk_fail(STK_ENOMEM, "out of memory");
        return NULL;
    }
    memcpy(p, s, n);
    return p;
}

#if !defined(__x86_64__)
uint64_t stk_ticks(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
#endif

static double ticks_rate;
static pthread_once_t ticks_once = PTHREAD_ONCE_INIT;

static void calibrate_ticks(void)
{
#if defined(__x86_64__)
    /* Count TSC ticks across ~2 ms of monotonic time. */
    double t0 = stk_now();
    uint64_t c0 = stk_ticks();
    double t1;
    do
        t1 = stk_now();
    while (t1 - t0 < 0.002);
    uint64_t c1 = stk_ticks();
    ticks_rate = (double)(c1 - c0) / (t1 - t0);
#else
    ticks_rate = 1e9;
#endif
}

double stk_ticks_per_second(void)
{
    pthread_once(&ticks_once, calibrate_ticks);
    return ticks_rate;
}

void stk_textbuf_put(stk_textbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

int stk_strlist_push(stk_strlist *l, char *s)
{
    if (!s)
        return stk_fail(STK_ENOMEM, "out of memory");
    if (l->n + 2 > l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **g = realloc(l->v, cap * sizeof *g);
        if (!g) {
            free(s);
            return stk_fail(STK_ENOMEM, "out of memory");
        }
        l->v = g;
        l->cap = cap;
    }
    l->v[l->n++] = s;
    l->v[l->n] = NULL;
    return 0;
}

void stk_strlist_free(stk_strlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}
