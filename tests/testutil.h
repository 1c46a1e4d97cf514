/*
 * testutil.h — shared helpers for the C tests (cmocka).
 */
#ifndef STK_TESTUTIL_H
#define STK_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* A fresh empty directory for this test process (under $STK_TEST_TMP or
 * /tmp), created on first call; returns its path (static storage). */
const char *tu_tmpdir(void);
/* Path tu_tmpdir()/name in a static rotating buffer (8 slots). */
const char *tu_path(const char *name);
/* Write bytes to path (creating/truncating). Aborts the test on failure. */
void tu_write_file(const char *path, const void *data, size_t n);
/* The whole file at path in a new malloc'd buffer (the caller frees it)
 * and its size in *n; NULL when it cannot be opened. */
uint8_t *tu_read_file(const char *path, size_t *n);
/* Write gzip-compressed bytes to path. */
void tu_write_gz(const char *path, const void *data, size_t n);
/* Deterministic pseudo-random bytes (splitmix64 of seed). */
void tu_fill_random(void *buf, size_t n, uint64_t seed);

#endif
