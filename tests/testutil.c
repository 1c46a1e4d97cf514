/*
 * testutil.c — temp files and deterministic data for the C tests.
 */
#include "testutil.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

const char *tu_tmpdir(void)
{
    static char dir[512];
    if (dir[0])
        return dir;
    const char *base = getenv("STK_TEST_TMP");
    if (!base || !*base)
        base = "/tmp";
    mkdir(base, 0700);
    snprintf(dir, sizeof dir, "%s/stk-test-XXXXXX", base);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        abort();
    }
    return dir;
}

const char *tu_path(const char *name)
{
    static char bufs[8][600];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", tu_tmpdir(), name);
    return b;
}

uint8_t *tu_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n ? *n : 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

void tu_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n)
        assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

void tu_write_gz(const char *path, const void *data, size_t n)
{
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    if (n)
        assert_int_equal(gzwrite(f, data, (unsigned)n), (int)n);
    assert_int_equal(gzclose(f), Z_OK);
}

void tu_fill_random(void *buf, size_t n, uint64_t seed)
{
    uint8_t *p = buf;
    uint64_t x = seed;
    for (size_t i = 0; i < n; i++) {
        x += 0x9E3779B97F4A7C15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        p[i] = (uint8_t)(z ^ (z >> 31));
    }
}
