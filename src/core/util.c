/*
 * util.c — allocation, scratch buffers, time, version.
 */
#include "core/util.h"

#include "core/error.h"

#include <stdlib.h>
#include <string.h>
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
