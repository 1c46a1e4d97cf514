/*
 * fuzz_recordio.c — libFuzzer target for the MXNet RecordIO reader
 * (src/format/recordio.c), through the public API.
 *
 * The input plays two roles:
 *
 *   - a .rec file, opened as recordio:/proc/self/fd/N?idx=none (the frame
 *     walk, split records, IRHeaders, label vectors);
 *   - a .idx file for a fixed, valid three-record .rec the harness writes
 *     (one record split in two parts): the index parser and the check of
 *     its offsets against the walk.
 *
 * Everything opened is read sample by sample (at most READ_BUDGET records)
 * through stk_dataset_read_field and stk_dataset_label, with every byte
 * handed out touched; a read must return 0 or STK_EDATA (per-record damage)
 * and the two calls must agree on which records are damaged.
 */
#include <stoker/stoker.h>

#define FUZZ_NAME "fuzz_recordio"
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define READ_BUDGET 64

enum { F_INPUT, F_REC, F_COUNT };
static int g_fd[F_COUNT] = {-1, -1};
static char g_path[F_COUNT][64];
static volatile uint64_t g_sink;

static void put_file(int which, const uint8_t *data, size_t size)
{
    if (g_fd[which] < 0) {
        g_fd[which] = fuzz_memfd("fuzz_recordio");
        snprintf(g_path[which], sizeof g_path[which], "/proc/self/fd/%d", g_fd[which]);
    }
    fuzz_write_fd(g_fd[which], data, size);
}

static void exercise(stk_dataset *ds)
{
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    check(info.count > 0, "an open set has records");
    for (uint64_t j = 0; j < info.count && j < READ_BUDGET; j++) {
        uint64_t i = j < READ_BUDGET / 2 ? j : info.count - 1 - (j - READ_BUDGET / 2);
        void *p = NULL;
        size_t n = 0;
        int rc = stk_dataset_read_field(ds, i, NULL, &p, &n, NULL);
        check(rc == 0 || rc == STK_EDATA, "read_field: 0 or STK_EDATA");
        int64_t label;
        int lrc = stk_dataset_label(ds, i, &label);
        check((rc == 0) == (lrc == 0), "read_field and label agree on damage");
        if (rc == 0) {
            check(n > 0, "an image has bytes");
            uint64_t s = 0;
            for (size_t k = 0; k < n; k++)
                s += ((const uint8_t *)p)[k];
            g_sink += s + (uint64_t)label;
            stk_free(p);
        } else {
            check(strstr(stk_errmsg(), ": record ") != NULL, "a damage message names the record");
        }
    }
}

static void try_open(const char *uri)
{
    stk_dataset_options opts = {.max_bytes = 16u << 20, .max_samples = 1u << 20,
                                .max_pixels = 1u << 20};
    stk_dataset *ds = NULL;
    int rc = stk_dataset_open(uri, &opts, &ds);
    if (rc == 0) {
        exercise(ds);
        stk_dataset_close(ds);
    } else {
        check(ds == NULL, "a failed open leaves no dataset");
        check(*stk_errmsg() != '\0', "a failed open says why");
    }
}

static void le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

/* Three records at bytes 0, 40 and 88: a whole one (label 1, 8 image
 * bytes), one split in two parts (label 2), a whole one (label 3). */
static void put_fixed_rec(void)
{
    uint8_t b[160] = {0};
    size_t o = 0;
    /* record 0: 24 + 8 bytes */
    le32(b + o, 0xced7230a), le32(b + o + 4, 32), le32(b + o + 12, 0x3f800000);
    memset(b + o + 32, 0xd8, 8);
    o += 40;
    /* record 1: header(24) + 4 image bytes, then the magic, then 4 more:
     * part 1 = 28 bytes (cflag 1), part 2 = 4 bytes (cflag 3) */
    le32(b + o, 0xced7230a), le32(b + o + 4, 1u << 29 | 28), le32(b + o + 12, 0x40000000);
    memset(b + o + 32, 0xab, 4);
    o += 36;
    le32(b + o, 0xced7230a), le32(b + o + 4, 3u << 29 | 4);
    memset(b + o + 8, 0xcd, 4);
    o += 12;
    /* record 2 */
    le32(b + o, 0xced7230a), le32(b + o + 4, 30), le32(b + o + 12, 0x40400000);
    memset(b + o + 32, 0xef, 6);
    o += 40;
    put_file(F_REC, b, o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char uri[256];
    put_file(F_INPUT, data, size);
    snprintf(uri, sizeof uri, "recordio:%s?idx=none", g_path[F_INPUT]);
    try_open(uri);
    put_fixed_rec();
    snprintf(uri, sizeof uri, "recordio:%s?idx=%s", g_path[F_REC], g_path[F_INPUT]);
    try_open(uri);
    return 0;
}
