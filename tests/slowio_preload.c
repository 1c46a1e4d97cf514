/*
 * slowio_preload.c — an LD_PRELOAD shim that makes storage slow, for the
 * storage-bound case of `stoker doctor` (tests/python/test_doctor_cli.py).
 *
 * Every pread/pread64 of a file whose path starts with $STK_SLOWIO_DIR
 * sleeps $STK_SLOWIO_MS milliseconds first, then reads as usual: reads wait
 * without using CPU, as on a slow disk or network file system, and several
 * readers wait at once (the sleeps overlap across threads). The image
 * folder reader opens each file (openat) and reads it with pread
 * (src/io/source.c), so every sample read pays the delay. Built by CMake as
 * the module stk_slowio next to the tests; the library has no test hooks.
 * The two functions are exported explicitly: the build hides symbols by
 * default (-fvisibility=hidden).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static void throttle(int fd)
{
    const char *dir = getenv("STK_SLOWIO_DIR"), *ms = getenv("STK_SLOWIO_MS");
    if (!dir || !*dir || !ms)
        return;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, path, sizeof path - 1);
    if (k <= 0)
        return;
    path[k] = '\0';
    if (strncmp(path, dir, strlen(dir)) == 0)
        usleep((useconds_t)(atof(ms) * 1000));
}

__attribute__((visibility("default"))) ssize_t pread(int fd, void *buf, size_t n, off_t at)
{
    static ssize_t (*real)(int, void *, size_t, off_t);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "pread");
    throttle(fd);
    return real(fd, buf, n, at);
}

__attribute__((visibility("default"))) ssize_t pread64(int fd, void *buf, size_t n, off64_t at)
{
    static ssize_t (*real)(int, void *, size_t, off64_t);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "pread64");
    throttle(fd);
    return real(fd, buf, n, at);
}
