/*
 * fuzz_zarr.c — libFuzzer target for the Zarr reader (src/format/zarr.c:
 * the .zarray JSON parser, chunk keys, chunk decoding with zstd, blosc and
 * zlib, the per-thread chunk cache) and the .npz side of the npy reader
 * (src/format/npy.c: the ZIP end records, ZIP64, central directory and
 * local headers).
 *
 * The input plays two roles:
 *
 *   - A Zarr group laid out in a temporary directory from the input's
 *     sections, split at each "\n--\n":
 *       0  images/.zarray
 *       1  labels/.zarray (empty: a generated uint8 labels array of the N
 *          that section 0's "shape" starts with, one chunk "0" of zeros)
 *       2  labels/0 (the labels chunk when section 1 is given)
 *       3+ image chunk files 0, 1, ... each written under the keys of
 *          every rank and separator ("c", "c.0", "c.0.0", "c.0.0.0",
 *          "c/0/0/0"), so the chunk is found whatever the .zarray says.
 *     Opened as zarr:DIR; every sample read (the first and last
 *     READ_BUDGET/2) through stk_dataset_read, and again through the
 *     reader's vtable with one scratch kept across reads, forwards then
 *     backwards (so the chunk cache hits and misses): a cached read must
 *     return what an uncached one does, or fail the same way.
 *   - The whole input as FILE.npz, opened as npy:FILE.npz, every sample
 *     read.
 *
 * Limits are small (max_bytes 16 MiB, max_pixels 1 Mi), so an input that
 * makes a reader allocate more is a finding.
 */
#include <stoker/stoker.h>

#define FUZZ_NAME "fuzz_zarr"
#include "fuzz_util.h"

#include "core/util.h"
#include "format/dataset.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define READ_BUDGET 32
#define MAX_SECTIONS 12

static char g_dir[512];
static volatile uint64_t g_sink;

static void touch(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += b[i];
    g_sink += s;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void rm_tree(void) { nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static void put(const char *rel, const void *data, size_t size)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", g_dir, rel);
    FILE *f = fopen(path, "wb");
    check(f != NULL, "fopen");
    check(size == 0 || fwrite(data, 1, size, f) == size, "fwrite");
    check(fclose(f) == 0, "fclose");
}

static void dir(const char *rel)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", g_dir, rel);
    mkdir(path, 0700);
}

/* The first number after "shape" and '[' in the text, or 1. */
static unsigned long first_dim(const uint8_t *p, size_t n)
{
    const char *key = "\"shape\"";
    for (size_t i = 0; i + 7 < n; i++) {
        if (memcmp(p + i, key, 7))
            continue;
        size_t j = i + 7;
        while (j < n && (p[j] == ' ' || p[j] == ':' || p[j] == '['))
            j++;
        unsigned long v = 0;
        while (j < n && p[j] >= '0' && p[j] <= '9' && v < 100000)
            v = v * 10 + (unsigned long)(p[j++] - '0');
        return v ? v : 1;
    }
    return 1;
}

/* Open uri with small limits; NULL when the open refused it (the message
 * touched, the code and *out checked to agree). */
static stk_dataset *open_input(const char *uri)
{
    stk_dataset_options opts = {.max_bytes = 16u << 20, .max_samples = 1u << 20,
                                .max_pixels = 1u << 20};
    stk_dataset *ds = NULL;
    int rc = stk_dataset_open(uri, &opts, &ds);
    touch(stk_errmsg(), strlen(stk_errmsg()));
    if (getenv("FUZZ_ZARR_VERBOSE")) /* which seeds open: docs/fuzzing.md */
        fprintf(stderr, "fuzz_zarr: %s: %s\n", uri, rc == 0 ? "opened" : stk_errmsg());
    check((rc == 0) == (ds != NULL), "open: *out and code agree");
    if (rc < 0)
        return NULL;
    return ds;
}

static void read_zarr(const char *uri)
{
    stk_dataset *ds = open_input(uri);
    if (!ds)
        return;
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    size_t bytes = (size_t)info.height * info.width * info.channels;
    check(info.count > 0 && bytes > 0 && bytes <= (4u << 20), "a sane shape");
    uint8_t *px = malloc(bytes);
    int8_t *ok = calloc(info.count < READ_BUDGET ? info.count : READ_BUDGET, 1);
    uint8_t **want = calloc(READ_BUDGET, sizeof *want);
    check(px && ok && want, "malloc");
    uint64_t idx[READ_BUDGET];
    size_t n = 0;
    for (uint64_t i = 0; i < info.count && n < READ_BUDGET; i++) {
        if (i == READ_BUDGET / 2 && info.count > READ_BUDGET)
            i = info.count - READ_BUDGET / 2;
        idx[n++] = i;
    }
    for (size_t k = 0; k < n; k++) {
        int64_t label;
        int64_t got = stk_dataset_read(ds, idx[k], px, bytes, &label);
        check(got == (int64_t)bytes || got == STK_EDATA, "read: the sample or STK_EDATA");
        touch(stk_errmsg(), strlen(stk_errmsg()));
        if (got == (int64_t)bytes) {
            ok[k] = 1;
            want[k] = malloc(bytes);
            check(want[k] != NULL, "malloc");
            memcpy(want[k], px, bytes);
        }
        char name[512];
        stk_dataset_sample_name(ds, idx[k], name, sizeof name);
        touch(name, strlen(name));
    }
    /* the same reads through one scratch (the chunk cache), both ways */
    stk_scratch scratch = {0};
    for (int pass = 0; pass < 2; pass++)
        for (size_t j = 0; j < n; j++) {
            size_t k = pass ? n - 1 - j : j;
            stk_sample s;
            int rc = ds->vt->read(ds, idx[k], &s, &scratch);
            check((rc == 0) == ok[k], "cached and uncached reads agree on failure");
            if (rc == 0) {
                check(s.image.pixels && s.image.row_stride == (ptrdiff_t)info.width *
                                                                 info.channels,
                      "a packed view");
                check(!memcmp(s.image.pixels, want[k], bytes),
                      "cached and uncached reads agree on pixels");
            }
        }
    stk_scratch_free(&scratch);
    for (size_t k = 0; k < n; k++)
        free(want[k]);
    free(want);
    free(ok);
    free(px);
    stk_dataset_close(ds);
}

static void read_npz(const char *uri)
{
    stk_dataset *ds = open_input(uri);
    if (!ds)
        return;
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    size_t bytes = (size_t)info.height * info.width * info.channels;
    check(info.count > 0 && bytes > 0 && bytes <= (16u << 20), "a sane shape");
    uint8_t *px = malloc(bytes);
    check(px != NULL, "malloc");
    for (uint64_t i = 0; i < info.count; i++) {
        if (i == READ_BUDGET / 2 && info.count > READ_BUDGET)
            i = info.count - READ_BUDGET / 2;
        int64_t label;
        check(stk_dataset_read(ds, i, px, bytes, &label) == (int64_t)bytes, "npz read");
        touch(px, bytes);
    }
    free(px);
    stk_dataset_close(ds);
}

/* Group `g` (under g_dir) from the sections: see the essay. `slash`:
 * image chunks under "c/0/0/0" only. */
static void put_group(const char *g, int slash, const uint8_t *const *sec, const size_t *len,
                      size_t ns)
{
    char rel[96];
    snprintf(rel, sizeof rel, "%s", g);
    dir(rel);
    snprintf(rel, sizeof rel, "%s/images", g);
    dir(rel);
    snprintf(rel, sizeof rel, "%s/labels", g);
    dir(rel);
    snprintf(rel, sizeof rel, "%s/.zgroup", g);
    put(rel, "{\"zarr_format\": 2}", 18);
    snprintf(rel, sizeof rel, "%s/images/.zarray", g);
    put(rel, sec[0], len[0]);
    if (ns > 1 && len[1]) {
        snprintf(rel, sizeof rel, "%s/labels/.zarray", g);
        put(rel, sec[1], len[1]);
        if (ns > 2) {
            snprintf(rel, sizeof rel, "%s/labels/0", g);
            put(rel, sec[2], len[2]);
        }
    } else {
        unsigned long n = first_dim(sec[0], len[0]);
        char meta[256];
        int m = snprintf(meta, sizeof meta,
                         "{\"zarr_format\": 2, \"shape\": [%lu], \"chunks\": [%lu], \"dtype\": "
                         "\"|u1\", \"compressor\": null, \"fill_value\": 0, \"order\": \"C\", "
                         "\"filters\": null}", n, n);
        snprintf(rel, sizeof rel, "%s/labels/.zarray", g);
        put(rel, meta, (size_t)m);
        uint8_t *z = calloc(n, 1);
        check(z != NULL, "calloc");
        snprintf(rel, sizeof rel, "%s/labels/0", g);
        put(rel, z, n);
        free(z);
    }
    for (size_t s = 3; s < ns; s++) {
        static const char *const suffix[] = {"", ".0", ".0.0", ".0.0.0"};
        if (slash) {
            static const char *const parts[] = {"", "/0", "/0/0"};
            for (int k = 0; k < 3; k++) {
                snprintf(rel, sizeof rel, "%s/images/%zu%s", g, s - 3, parts[k]);
                dir(rel);
            }
            snprintf(rel, sizeof rel, "%s/images/%zu/0/0/0", g, s - 3);
            put(rel, sec[s], len[s]);
            continue;
        }
        for (int k = 0; k < 4; k++) {
            snprintf(rel, sizeof rel, "%s/images/%zu%s", g, s - 3, suffix[k]);
            put(rel, sec[s], len[s]);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *sec[MAX_SECTIONS];
    size_t len[MAX_SECTIONS], ns = 0;
    char uri[1024];
    if (!g_dir[0]) {
        fuzz_tempdir(g_dir, sizeof g_dir, "fuzz_zarr");
        atexit(rm_tree);
    }
    rm_tree(); /* a fresh directory for each input */
    check(mkdir(g_dir, 0700) == 0, "mkdir");

    size_t start = 0;
    for (size_t i = 0; ns < MAX_SECTIONS; i++) {
        if (i + 4 > size) {
            sec[ns] = data + start;
            len[ns++] = size - start;
            break;
        }
        if (!memcmp(data + i, "\n--\n", 4)) {
            sec[ns] = data + start;
            len[ns++] = i - start;
            start = i + 4;
            i += 3;
        }
    }
    put_group("g", 0, sec, len, ns);
    snprintf(uri, sizeof uri, "zarr:%s/g", g_dir);
    read_zarr(uri);
    if (ns > 3) { /* the same with '/' separated chunk keys */
        put_group("h", 1, sec, len, ns);
        snprintf(uri, sizeof uri, "zarr:%s/h", g_dir);
        read_zarr(uri);
    }

    /* the whole input as an .npz */
    put("in.npz", data, size);
    snprintf(uri, sizeof uri, "npy:%s/in.npz", g_dir);
    read_npz(uri);
    return 0;
}
