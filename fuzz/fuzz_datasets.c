/*
 * fuzz_datasets.c — libFuzzer target for the headerless and IDX dataset
 * readers (src/format/cifar.c, src/format/idx.c), through the public API.
 *
 * The input is the bytes of one file, opened in every role it can play:
 *
 *   - IDX images (plain, or gzip when it starts with 1f 8b — the reader
 *     decides by content), with a generated labels file of the count its
 *     header claims (so the images checks are reached, not the count
 *     mismatch);
 *   - the same images gzip-compressed by the harness (the reader's inflate
 *     path with a well-formed stream around mutated content);
 *   - IDX labels, with generated 1x1 images of the claimed count;
 *   - a CIFAR-10 file, alone and listed twice ("A,A": two files, one index
 *     space), and a CIFAR-100 file with fine and coarse labels;
 *   - NumPy .npy images (src/format/npy.c), with a generated int64 labels
 *     file of the count its header's shape starts with, and .npy labels
 *     with generated (N, 1, 1) images.
 *
 * Everything opened is read sample by sample (the first and last
 * READ_BUDGET/2) through stk_dataset_read and stk_dataset_read_field, with
 * every byte handed out touched. Limits are small (max_bytes 16 MiB), so a
 * 64 KiB input that makes the reader allocate more is a finding.
 */
#include <stoker/stoker.h>

#define FUZZ_NAME "fuzz_datasets"
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define READ_BUDGET 64
#define MAX_COMPANION (1u << 16) /* records in a generated companion file */

enum { F_INPUT, F_GZ, F_COMPANION, F_COUNT };
static int g_fd[F_COUNT] = {-1, -1, -1};
static char g_path[F_COUNT][64];
static volatile uint64_t g_sink;

static void put_file(int which, const uint8_t *data, size_t size)
{
    if (g_fd[which] < 0) {
        g_fd[which] = fuzz_memfd("fuzz_datasets");
        snprintf(g_path[which], sizeof g_path[which], "/proc/self/fd/%d", g_fd[which]);
    }
    fuzz_write_fd(g_fd[which], data, size);
}

static void touch(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += b[i];
    g_sink += s;
}

/* The first `n` bytes of the input's content: gunzipped if it is gzip. */
static size_t peek(const uint8_t *data, size_t size, uint8_t *out, size_t n)
{
    if (size < 2 || data[0] != 0x1f || data[1] != 0x8b) {
        size_t k = size < n ? size : n;
        memcpy(out, data, k);
        return k;
    }
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
        return 0;
    zs.next_in = (Bytef *)data;
    zs.avail_in = (uInt)size;
    zs.next_out = out;
    zs.avail_out = (uInt)n;
    while (zs.avail_out && inflate(&zs, Z_NO_FLUSH) == Z_OK)
        ;
    size_t got = n - zs.avail_out;
    inflateEnd(&zs);
    return got;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* An IDX file of `n` records: labels (00 00 08 01 N, zeros) or 1x1 images. */
static void put_companion(uint32_t n, int images)
{
    size_t hdr = images ? 16 : 8;
    uint8_t *b = calloc(1, hdr + n);
    check(b != NULL, "calloc");
    b[2] = 8;
    b[3] = images ? 3 : 1;
    for (int i = 0; i < 4; i++)
        b[4 + i] = (uint8_t)(n >> (24 - 8 * i));
    if (images)
        b[11] = b[15] = 1; /* H = W = 1 */
    put_file(F_COMPANION, b, hdr + n);
    free(b);
}

/* A .npy file of `n` records: int64 labels (all 1) or (n, 1, 1) uint8
 * images. */
static void put_npy_companion(uint32_t n, int images)
{
    char dict[128];
    uint8_t *b;
    int hl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s%u%s}",
                      images ? "|u1" : "<i8", "(", n, images ? ", 1, 1)" : ",)");
    size_t elem = images ? 1 : 8;
    size_t hdr = (10 + (size_t)hl + 1 + 63) / 64 * 64; /* padded as numpy does */
    b = calloc(1, hdr + (size_t)n * elem);
    check(b != NULL, "calloc");
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (uint8_t)(hdr - 10);
    b[9] = (uint8_t)((hdr - 10) >> 8);
    memcpy(b + 10, dict, (size_t)hl);
    memset(b + 10 + hl, ' ', hdr - 11 - (size_t)hl);
    b[hdr - 1] = '\n';
    for (uint32_t i = 0; !images && i < n; i++)
        b[hdr + (size_t)i * 8] = 1;
    put_file(F_COMPANION, b, hdr + (size_t)n * elem);
    free(b);
}

static void exercise(stk_dataset *ds)
{
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    check(info.count > 0, "an opened dataset has samples");
    size_t bytes = (size_t)info.height * info.width * info.channels;
    check(bytes > 0 && bytes <= (64u << 20), "a fixed, sane sample shape");
    uint8_t *px = malloc(bytes);
    check(px != NULL, "malloc");
    for (uint64_t i = 0; i < info.count; i++) {
        if (i == READ_BUDGET / 2 && info.count > READ_BUDGET)
            i = info.count - READ_BUDGET / 2;
        int64_t label = -1;
        int64_t k = stk_dataset_read(ds, i, px, bytes, &label);
        check(k == (int64_t)bytes, "stk_dataset_read of a valid index");
        touch(px, bytes);
        check(label >= 0 && (info.num_classes == 0 || label < info.num_classes),
              "label within num_classes");
        const char *name = stk_dataset_class_name(ds, (uint32_t)label);
        if (name)
            touch(name, strlen(name));
        void *p = NULL;
        size_t n = 0;
        uint32_t shape[3];
        check(stk_dataset_read_field(ds, i, NULL, &p, &n, shape) == 0 && n == bytes,
              "read_field image");
        check(!memcmp(p, px, n), "read_field and stk_dataset_read agree");
        stk_free(p);
        int64_t l2 = -2;
        check(stk_dataset_label(ds, i, &l2) == 0 && l2 == label, "stk_dataset_label");
    }
    check(stk_dataset_read(ds, info.count, px, bytes, NULL) == STK_EINVAL, "read past the end");
    free(px);
}

static void try_open(const char *uri)
{
    stk_dataset_options opts = {.max_bytes = 16u << 20, .max_samples = 1u << 20,
                                .max_pixels = 1u << 20};
    stk_dataset *ds = NULL;
    int rc = stk_dataset_open(uri, &opts, &ds);
    touch(stk_errmsg(), strlen(stk_errmsg()));
    check((rc == 0) == (ds != NULL), "open: *out and code agree");
    if (rc == 0)
        exercise(ds);
    stk_dataset_close(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char uri[256];
    uint8_t head[8] = {0};
    put_file(F_INPUT, data, size);
    const char *in = g_path[F_INPUT];

    /* IDX: the input as images, then as labels. */
    size_t got = peek(data, size, head, sizeof head);
    uint32_t claimed = got == 8 ? be32(head + 4) : 1;
    uint32_t n = claimed && claimed <= MAX_COMPANION ? claimed : 1;
    put_companion(n, 0);
    snprintf(uri, sizeof uri, "idx:%s,%s", in, g_path[F_COMPANION]);
    try_open(uri);

    if (!(size >= 2 && data[0] == 0x1f && data[1] == 0x8b)) {
        uLong cap = compressBound((uLong)size) + 32;
        uint8_t *gz = malloc(cap);
        check(gz != NULL, "malloc");
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        check(deflateInit2(&zs, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK,
              "deflateInit2");
        zs.next_in = (Bytef *)data;
        zs.avail_in = (uInt)size;
        zs.next_out = gz;
        zs.avail_out = (uInt)cap;
        check(deflate(&zs, Z_FINISH) == Z_STREAM_END, "deflate");
        put_file(F_GZ, gz, zs.total_out);
        deflateEnd(&zs);
        free(gz);
        snprintf(uri, sizeof uri, "idx:%s,%s", g_path[F_GZ], g_path[F_COMPANION]);
        try_open(uri);
    }

    put_companion(n, 1);
    snprintf(uri, sizeof uri, "idx:%s,%s", g_path[F_COMPANION], in);
    try_open(uri);

    /* npy: the first shape entry of the header, as a hint for the companion. */
    n = 1;
    if (size > 10 && size < (1u << 20)) {
        const char *t = memmem(data, size, "'shape': (", 10);
        if (t) {
            uint64_t v = strtoull(t + 10, NULL, 10);
            n = v && v <= MAX_COMPANION ? (uint32_t)v : 1;
        }
    }
    put_npy_companion(n, 0);
    snprintf(uri, sizeof uri, "npy:%s,%s", in, g_path[F_COMPANION]);
    try_open(uri);
    put_npy_companion(n, 1);
    snprintf(uri, sizeof uri, "npy:%s,%s", g_path[F_COMPANION], in);
    try_open(uri);

    /* CIFAR. */
    snprintf(uri, sizeof uri, "cifar10:%s", in);
    try_open(uri);
    snprintf(uri, sizeof uri, "cifar10:%s,%s", in, in);
    try_open(uri);
    snprintf(uri, sizeof uri, "cifar100:%s?label=fine", in);
    try_open(uri);
    snprintf(uri, sizeof uri, "cifar100:%s?label=coarse", in);
    try_open(uri);
    return 0;
}
