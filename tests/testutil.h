/*
 * testutil.h — shared helpers for the C tests (cmocka).
 */
#ifndef STK_TESTUTIL_H
#define STK_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/stoker.h"

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

/* Everything the batches of a loader delivered, concatenated (the loader
 * tests compare runs with each other and with the sampler). */
typedef struct tu_run {
    uint8_t *data;
    int64_t *labels;
    uint64_t *indices;
    uint64_t rows, batches;
    uint64_t skipped;     /* sum of batch.skipped */
    uint32_t sizes[4096]; /* each batch's size (the first 4096 batches) */
} tu_run;
void tu_run_free(tu_run *r);
/* Take up to max_batches batches (all of the epoch if 0) into r, checking
 * each batch's shape and releasing it. Returns next()'s last result (1
 * when max_batches were taken). */
int tu_drain(stk_loader *l, tu_run *r, uint64_t max_batches);

/* A byte buffer to build files in: protobuf messages, TFRecord frames,
 * Datums (test_tfrecord.c, test_lmdb.c). Appending past its 64 KiB fails
 * the test. */
typedef struct tu_buf {
    uint8_t d[1 << 16];
    size_t n;
} tu_buf;
void tu_put(tu_buf *b, const void *p, size_t n);
/* A protobuf varint; `bytes` little-endian bytes of v. */
void tu_put_varint(tu_buf *b, uint64_t v);
void tu_put_le(tu_buf *b, uint64_t v, int bytes);
/* Protobuf fields: a varint (wire type 0; negative int32/int64 as 10
 * bytes, sign-extended) and a length-delimited one (wire type 2). */
void tu_pb_varint(tu_buf *b, uint32_t field, int64_t v);
void tu_pb_bytes(tu_buf *b, uint32_t field, const void *p, size_t n);

/* A smooth, colourful test image (JPEG-friendly), h x w x 3, malloc'd. */
uint8_t *tu_smooth_image(int h, int w, int seed);
/* JPEG of an h x w RGB image (4:4:4, quality q) in a malloc'd buffer. */
uint8_t *tu_encode_jpeg(const uint8_t *rgb, int h, int w, int q, size_t *size);

#endif
