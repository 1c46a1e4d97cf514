/*
 * fuzz_wds.c — libFuzzer target for the WebDataset tar reader
 * (src/format/wds.c), through the public API.
 *
 * The input is the bytes of one tar file, written to a memfd and opened as
 * "wds:/proc/self/fd/N" (default extensions), with other query keys
 * (image=jpg;png;bin, label=cls;txt, missing=skip), and as a brace pattern
 * naming two descriptors of the same file ("wds:/proc/self/fd/{900,901}":
 * two shards, so sample i and i + n must be the same bytes and label).
 *
 * Every header is checksummed, so random mutations would almost always stop
 * at the first checksum. Each input therefore runs twice: as given (the
 * rejection paths), and with the checksum of every header on the member
 * chain recomputed the way a writer would, so mutations reach the size
 * fields, the long-name and pax parsers, the grouping and the labels.
 *
 * Each opened dataset is read sample by sample (the first and last
 * READ_BUDGET/2) through stk_dataset_read_field and stk_dataset_label, every
 * byte touched; the first few are also decoded (stk_dataset_read_alloc), so
 * the error path that names a member (sample_name re-reads its header)
 * runs. Limits are small (max_bytes 16 MiB).
 */
#include <stoker/stoker.h>

#define FUZZ_NAME "fuzz_wds"
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define READ_BUDGET 64
#define DECODE_BUDGET 4
#define FD_A 900
#define FD_B 901

static int g_fd = -1;
static volatile uint64_t g_sink;

static void put_file(const uint8_t *data, size_t size)
{
    if (g_fd < 0) {
        g_fd = fuzz_memfd("fuzz_wds");
        check(dup2(g_fd, FD_A) == FD_A && dup2(g_fd, FD_B) == FD_B, "dup2");
    }
    fuzz_write_fd(g_fd, data, size);
}

static void touch(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += b[i];
    g_sink += s;
}

/* Sample i's image bytes (malloc'd by the library) and label. */
static void read_one(stk_dataset *ds, uint64_t i, void **p, size_t *n, int64_t *label)
{
    *p = NULL;
    *n = 0;
    check(stk_dataset_read_field(ds, i, "image", p, n, NULL) == 0, "read_field of a valid index");
    touch(*p, *n);
    check(stk_dataset_label(ds, i, label) == 0, "stk_dataset_label of a valid index");
}

/* `twice`: the dataset is the file listed two times. */
static void exercise(stk_dataset *ds, int twice)
{
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    check(info.count > 0, "an opened dataset has samples");
    check(!twice || info.count % 2 == 0, "two copies: an even count");
    for (uint64_t i = 0; i < info.count; i++) {
        if (i == READ_BUDGET / 2 && info.count > READ_BUDGET)
            i = info.count - READ_BUDGET / 2;
        void *p;
        size_t n;
        int64_t label;
        read_one(ds, i, &p, &n, &label);
        check(info.num_classes == 0 || (label >= 0 && label < info.num_classes),
              "label within num_classes");
        if (twice) {
            uint64_t j = i < info.count / 2 ? i + info.count / 2 : i - info.count / 2;
            void *q;
            size_t m;
            int64_t l2;
            read_one(ds, j, &q, &m, &l2);
            check(m == n && !memcmp(p, q, n) && l2 == label, "both copies agree");
            stk_free(q);
        }
        stk_free(p);
        if (i < DECODE_BUDGET) {
            uint8_t *px = NULL;
            uint32_t shape[3];
            int64_t k = stk_dataset_read_alloc(ds, i, &px, shape, &label);
            if (k > 0)
                touch(px, (size_t)k);
            else
                touch(stk_errmsg(), strlen(stk_errmsg()));
            stk_free(px);
        }
    }
    check(stk_dataset_label(ds, info.count, NULL) == STK_EINVAL, "label past the end");
    for (uint64_t i = 0; i < stk_dataset_skipped_count(ds); i++)
        touch(stk_dataset_skipped(ds, i), strlen(stk_dataset_skipped(ds, i)));
}

static void try_open(const char *uri, int twice)
{
    stk_dataset_options opts = {.max_bytes = 16u << 20, .max_samples = 1u << 20,
                                .max_pixels = 1u << 20};
    stk_dataset *ds = NULL;
    int rc = stk_dataset_open(uri, &opts, &ds);
    touch(stk_errmsg(), strlen(stk_errmsg()));
    check((rc == 0) == (ds != NULL), "open: *out and code agree");
    check(rc <= 0, "open returns 0 or a negative code");
    if (rc == 0)
        exercise(ds, twice);
    stk_dataset_close(ds);
}

/* A tar number field, leniently (the harness only needs the chain). */
static uint64_t field_number(const uint8_t *f, size_t n)
{
    uint64_t v = 0;
    if (f[0] & 0x80) {
        for (size_t i = 1; i < n && !(v >> 55); i++)
            v = v << 8 | f[i];
        return v;
    }
    for (size_t i = 0; i < n && f[i]; i++)
        if (f[i] >= '0' && f[i] <= '7' && !(v >> 60))
            v = v * 8 + (uint64_t)(f[i] - '0');
    return v;
}

/* Recompute the checksum of every header on the member chain, as a writer
 * would ("%06o\0 "). */
static void fix_checksums(uint8_t *d, size_t size)
{
    size_t pos = 0;
    while (size - pos >= 512) {
        uint8_t *h = d + pos;
        int zero = 1;
        for (int k = 0; k < 512 && zero; k++)
            zero = !h[k];
        if (zero)
            return;
        memset(h + 148, ' ', 8);
        unsigned sum = 0;
        for (int k = 0; k < 512; k++)
            sum += h[k];
        snprintf((char *)h + 148, 8, "%06o", sum & 0777777);
        h[155] = ' ';
        uint64_t n = field_number(h + 124, 12);
        if (h[156] >= '1' && h[156] <= '6')
            n = 0;
        if (n > size)
            return;
        pos += 512 + (size_t)((n + 511) & ~(uint64_t)511);
        if (pos > size)
            return;
    }
}

static void run_all(void)
{
    char uri[128];
    snprintf(uri, sizeof uri, "wds:/proc/self/fd/%d", g_fd);
    try_open(uri, 0);
    snprintf(uri, sizeof uri, "wds:/proc/self/fd/%d?image=jpg;png;bin&label=cls,txt&missing=skip",
             g_fd);
    try_open(uri, 0);
    snprintf(uri, sizeof uri, "webdataset:/proc/self/fd/{%d,%d}", FD_A, FD_B);
    try_open(uri, 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20))
        return 0;
    put_file(data, size);
    run_all();
    uint8_t *copy = malloc(size ? size : 1);
    check(copy != NULL, "malloc");
    memcpy(copy, data, size);
    fix_checksums(copy, size);
    if (size && memcmp(copy, data, size)) {
        put_file(copy, size);
        run_all();
    }
    free(copy);
    return 0;
}
