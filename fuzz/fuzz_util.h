/*
 * fuzz_util.h — what the fuzz targets share: the oracle check and writing an
 * input into a memory file (memfd) that the library opens by its
 * /proc/self/fd path, so no target touches the disk.
 *
 * Define FUZZ_NAME (the target's name, for messages) before including.
 * Header-only: each target is compiled on its own, with libFuzzer or with
 * replay_main.c.
 */
#ifndef STK_FUZZ_UTIL_H
#define STK_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

/* A failed oracle is a finding: abort, so libFuzzer keeps the input. */
__attribute__((unused)) static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, FUZZ_NAME ": oracle failed: %s\n", what);
        abort();
    }
}

/* A new directory $TMPDIR/STEM-XXXXXX (/tmp without TMPDIR) into buf: a
 * target that needs real files makes them there, and removes them at exit
 * (atexit), so runs leave nothing behind and honour TMPDIR as mktemp does. */
__attribute__((unused)) static void fuzz_tempdir(char *buf, size_t cap, const char *stem)
{
    const char *t = getenv("TMPDIR");
    if (!t || !*t)
        t = "/tmp";
    int n = snprintf(buf, cap, "%s/%s-XXXXXX", t, stem);
    check(n > 0 && (size_t)n < cap, "TMPDIR is too long");
    check(mkdtemp(buf) != NULL, "mkdtemp in TMPDIR");
}

/* A new memory file (named `name` in /proc), close-on-exec. */
__attribute__((unused)) static int fuzz_memfd(const char *name)
{
    int fd = memfd_create(name, MFD_CLOEXEC);
    check(fd >= 0, "memfd_create");
    return fd;
}

/* Make the file open as fd hold exactly data[0, size). */
__attribute__((unused)) static void fuzz_write_fd(int fd, const uint8_t *data, size_t size)
{
    check(ftruncate(fd, 0) == 0, "ftruncate");
    size_t done = 0;
    while (done < size) {
        ssize_t k = pwrite(fd, data + done, size - done, (off_t)done);
        check(k > 0, "pwrite");
        done += (size_t)k;
    }
}

#endif
