/*
 * fuzz_shard.c — libFuzzer target for the .stk shard reader (header, field
 * table, metadata, index, footer, records; src/format/stk/stk_shard.c,
 * stk_record.c, stk_dataset.c, and stk_verify in src/tools/verify.c).
 *
 * The input is the bytes of one shard file. It is written to a memfd (no
 * disk, reused across runs) and opened through the public API only, the way
 * an application would: stk_dataset_open("stk:/proc/self/fd/N?...") with
 * every checksum policy, through mmap and through pread, then every public
 * accessor is called and every byte handed out is touched; then a glob
 * matching two more descriptors of the file is opened as a two-shard
 * dataset (the multi-shard index space and schema comparison), and finally
 * stk_verify walks the shard and the pair.
 *
 * Two passes per input:
 *
 *  1. the bytes as given: exercises the checks that reject damage (magic,
 *     version, the four checksums);
 *  2. the same bytes with their checksums recomputed (header, footer,
 *     index, every record whose index entry lies inside the file), so that
 *     mutations reach the layout checks, the field-table and metadata
 *     parsing, the per-record bounds checks and the raw-image/zstd path
 *     instead of dying at the first checksum. Skipped when the input already
 *     carries correct checksums (a valid shard).
 *
 * Oracle beyond "no crash, leak, hang or huge allocation" (ASan/UBSan and
 * libFuzzer's limits): the mmap and the pread reader must agree — both open
 * or both fail, and every read returns the same code and the same bytes;
 * no raw image larger than the max_pixels option is delivered; in the
 * two-shard dataset record r and record n + r are the same; stk_verify's
 * counts and its on_damage reports agree. A failed check aborts.
 *
 * Work per input is bounded so a slow input means a slow library, not a slow
 * harness: at most READ_BUDGET records are read per opened dataset (the
 * first and the last ones); stk_verify reads them all.
 */
#include "format/stk/stk_format.h" /* layout constants + stk_checksum, for the fixup pass */

#include <stoker/stoker.h>

#define FUZZ_NAME "fuzz_shard"
#include "fuzz_util.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define READ_BUDGET 48 /* records read per opened dataset */

static int g_fd = -1;
static char g_path[64];
static char g_glob[64]; /* matches two more descriptors of the file: a two-shard dataset */
static volatile uint64_t g_sink; /* touched bytes go here */

/* Small limits: a 64 KiB input has no business allocating more. */
static const stk_dataset_options g_opts = {.max_bytes = 1u << 24, .max_samples = 1u << 20,
                                           .max_pixels = 1u << 20};

static void put_file(const uint8_t *data, size_t size)
{
    if (g_fd < 0) {
        g_fd = fuzz_memfd("fuzz_shard.stk");
        snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
        /* Two more descriptors in one decade (900 and 901 usually), named
         * by one glob ("/proc/self/fd/90[01]"): no temporary files, and the
         * reader's glob listing gets exercised too. */
        struct rlimit rl;
        long top = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 1000 ? (long)rl.rlim_cur : 1000;
        int a = -1, b = -1;
        for (long base = top / 10 * 10 - (top >= 1000 ? 100 : 10); base >= 10 && b < 0;
             base -= 10) {
            a = fcntl(g_fd, F_DUPFD_CLOEXEC, (int)base);
            b = a >= 0 && a / 10 == base / 10 ? fcntl(g_fd, F_DUPFD_CLOEXEC, a + 1) : -1;
            if (b >= 0 && b / 10 != a / 10) {
                close(b);
                b = -1;
            }
            if (b < 0 && a >= 0)
                close(a);
        }
        check(b >= 0, "two more descriptors of the file in one decade");
        snprintf(g_glob, sizeof g_glob, "/proc/self/fd/%d[%d%d]", a / 10, a % 10, b % 10);
    }
    fuzz_write_fd(g_fd, data, size);
}

/* Sum every 64th byte and the last one: each page handed out is read. The
 * full copy made by read_field is touched by memcmp in compare(). */
static void touch(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t s = 0;
    for (size_t i = 0; i < n; i += 64)
        s += b[i];
    if (n)
        s += b[n - 1];
    g_sink += s;
}

/* ------------------------------------------------------------------------ */
/* Checksum fixup                                                            */
/* ------------------------------------------------------------------------ */

/* A field entry's storage (docs/format.md): int64/float32 are variable when
 * their leading dimension varies (ndim >= 1, dims[0] == 0; format 1.2). */
static int is_variable(const uint8_t *e)
{
    uint8_t type = e[FLD_TYPE];
    if (type == STK_FIELD_INT64 || type == STK_FIELD_FLOAT32)
        return e[FLD_NDIM] >= 1 && stk_rd32(e + FLD_DIMS) == 0;
    return type == STK_FIELD_BYTES || type == STK_FIELD_IMAGE || type == STK_FIELD_RAW_IMAGE ||
           type == STK_FIELD_STRING;
}

/* Recompute what a writer would have: record checksums (for index entries
 * inside the buffer), the index checksum, the header checksum and its copy
 * in the footer, the footer checksum. Garbage stays garbage otherwise. */
static void fixup(uint8_t *b, size_t size)
{
    uint8_t *footer = b + size - STK_FOOTER_SIZE;
    uint64_t header_size = stk_rd32(b + HDR_SIZE);
    uint64_t index_offset = stk_rd64(footer + FTR_INDEX_OFFSET);
    uint64_t index_size = stk_rd64(footer + FTR_INDEX_SIZE);
    uint64_t n = stk_rd64(footer + FTR_RECORD_COUNT);
    uint32_t nfields = stk_rd32(b + HDR_FIELD_COUNT);

    if (index_offset <= size && index_size <= size - index_offset) {
        uint8_t *index = b + index_offset;
        uint32_t nvar = 0;
        if (nfields >= 1 && nfields <= STK_MAX_FIELDS &&
            STK_HEADER_SIZE + (uint64_t)nfields * STK_FIELD_ENTRY_SIZE <= size)
            for (uint32_t i = 0; i < nfields; i++)
                nvar += is_variable(b + STK_HEADER_SIZE + i * STK_FIELD_ENTRY_SIZE);
        uint64_t lengths_at = n * 8, sums_at = lengths_at + stk_pad_to(n * nvar * 4, 8);
        if (n <= index_size / 16 && sums_at + n * 8 <= index_size) {
            for (uint64_t r = 0; r < n; r++) {
                uint64_t off = stk_rd64(index + r * 8), len = 0;
                for (uint32_t v = 0; v < nvar; v++)
                    len += stk_rd32(index + lengths_at + (r * nvar + v) * 4);
                if (off <= size && len <= size - off)
                    stk_wr64(index + sums_at + r * 8, stk_checksum(b + off, (size_t)len));
            }
        }
        stk_wr64(footer + FTR_INDEX_CHECKSUM, stk_checksum(index, (size_t)index_size));
    }
    if (header_size >= STK_HEADER_SIZE && header_size <= size - STK_FOOTER_SIZE) {
        stk_wr64(b + HDR_CHECKSUM, 0);
        uint64_t sum = stk_checksum(b, (size_t)header_size);
        stk_wr64(b + HDR_CHECKSUM, sum);
        stk_wr64(footer + FTR_HEADER_CHECKSUM, sum);
    }
    stk_wr32(footer + FTR_CHECKSUM, (uint32_t)stk_checksum(footer, FTR_CHECKSUM));
}

/* ------------------------------------------------------------------------ */
/* Exercising an opened dataset (and its pread twin)                         */
/* ------------------------------------------------------------------------ */

static void compare_reads(int ra, void *da, size_t na, const uint32_t *sa, int rb, void *db,
                          size_t nb, const uint32_t *sb, int raw, const char *errb)
{
    if (ra != rb)
        fprintf(stderr, "fuzz_shard: mmap read: %d, pread read: %d (%s)\n", ra, rb, errb);
    check(ra == rb, "read_field: mmap and pread return different codes");
    if (ra == 0) {
        touch(da, na);
        check(na == nb && memcmp(da, db, na) == 0, "read_field: mmap and pread differ");
        if (raw) {
            check(!memcmp(sa, sb, 3 * sizeof *sa), "read_field: shapes differ");
            check((uint64_t)sa[0] * sa[1] <= g_opts.max_pixels,
                  "read_field: a raw image over max_pixels was delivered");
        }
    }
    stk_free(da);
    stk_free(db);
}

static void read_record(stk_dataset *a, stk_dataset *b, uint64_t r, uint32_t nfields)
{
    for (uint32_t f = 0; f <= nfields; f++) {
        stk_field_info info;
        const char *name = NULL; /* f == nfields: the default image field */
        if (f < nfields) {
            check(stk_dataset_field_info(a, f, &info) == 0, "field_info");
            name = info.name;
        }
        void *da = NULL, *db = NULL;
        size_t na = 0, nb = 0;
        uint32_t sa[3] = {0}, sb[3] = {0};
        int ra = stk_dataset_read_field(a, r, name, &da, &na, sa);
        int rb = stk_dataset_read_field(b, r, name, &db, &nb, sb);
        compare_reads(ra, da, na, sa, rb, db, nb, sb,
                      f < nfields && info.type == STK_FIELD_RAW_IMAGE, stk_errmsg());
    }
    int64_t la = 0, lb = 0;
    int ra = stk_dataset_label(a, r, &la), rb = stk_dataset_label(b, r, &lb);
    check(ra == rb && la == lb, "label: mmap and pread differ");
    const char *cls = stk_dataset_class_name(a, (uint32_t)la);
    if (cls)
        touch(cls, strlen(cls));

    /* The source name (a source_name field, escaped): the same from both. */
    char *pa_name = NULL, *pb_name = NULL;
    int na_rc = stk_dataset_sample_path(a, r, &pa_name);
    int nb_rc = stk_dataset_sample_path(b, r, &pb_name);
    check(na_rc == nb_rc, "sample_path: mmap and pread return different codes");
    if (na_rc == 0) {
        check(pa_name && pb_name && !strcmp(pa_name, pb_name), "sample_path: mmap and pread differ");
        touch(pa_name, strlen(pa_name));
    }
    stk_free(pa_name);
    stk_free(pb_name);

    /* The pixel copy of the public read (raw images; encoded ones copy 0). */
    static uint8_t pa[1 << 16], pb[1 << 16];
    int64_t ka = stk_dataset_read(a, r, pa, sizeof pa, &la);
    int64_t kb = stk_dataset_read(b, r, pb, sizeof pb, &lb);
    check(ka == kb, "stk_dataset_read: mmap and pread return different codes");
    if (ka > 0)
        check(la == lb && !memcmp(pa, pb, (size_t)ka), "stk_dataset_read: mmap and pread differ");
}

static void exercise(stk_dataset *a, stk_dataset *b, uint32_t shards)
{
    stk_dataset_info ia, ib;
    stk_dataset_info_get(a, &ia);
    stk_dataset_info_get(b, &ib);
    check(ia.count == ib.count && ia.num_classes == ib.num_classes && ia.height == ib.height &&
              ia.width == ib.width && ia.channels == ib.channels,
          "info: mmap and pread differ");
    check(ia.count > 0, "an opened dataset has records");

    uint32_t nfields = stk_dataset_field_count(a);
    check(nfields == stk_dataset_field_count(b), "field_count differs");
    for (uint32_t f = 0; f < nfields; f++) {
        stk_field_info fa, fb;
        check(stk_dataset_field_info(a, f, &fa) == 0 && stk_dataset_field_info(b, f, &fb) == 0,
              "field_info fails for a field below field_count");
        check(!strcmp(fa.name, fb.name) && fa.type == fb.type && fa.ndim == fb.ndim,
              "field_info differs");
        touch(fa.name, strlen(fa.name));
    }
    stk_field_info dummy;
    check(stk_dataset_field_info(a, nfields, &dummy) == STK_EINVAL, "field_info past the end");

    static const char *const keys[] = {"class_names", "source", "created_by", "shard", "", "x"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        const char *va = stk_dataset_metadata(a, keys[k]), *vb = stk_dataset_metadata(b, keys[k]);
        check((va == NULL) == (vb == NULL) && (!va || !strcmp(va, vb)), "metadata differs");
        if (va)
            touch(va, strlen(va));
    }
    for (uint32_t c = 0; c <= ia.num_classes && c < 4096; c++) {
        const char *na = stk_dataset_class_name(a, c), *nb = stk_dataset_class_name(b, c);
        check((na == NULL) == (nb == NULL) && (!na || !strcmp(na, nb)), "class name differs");
        if (na)
            touch(na, strlen(na));
    }
    check(stk_dataset_class_name(a, UINT32_MAX) == NULL, "class name of label 2^32-1");

    check(stk_dataset_shard_count(a) == shards && stk_dataset_shard_count(b) == shards,
          "shard_count");
    stk_shard_info si;
    for (uint32_t i = 0; i < shards; i++) {
        check(stk_dataset_shard_info(a, i, &si) == 0 && si.records * shards == ia.count &&
                  si.first_index == i * si.records,
              "shard_info");
        touch(si.path, strlen(si.path));
    }
    check(stk_dataset_shard_info(a, shards, &si) == STK_EINVAL, "shard_info past the end");

    uint64_t n = ia.count;
    for (uint64_t r = 0; r < n && r < READ_BUDGET / 2; r++)
        read_record(a, b, r, nfields);
    for (uint64_t r = n > READ_BUDGET / 2 ? n - READ_BUDGET / 2 : n; r < n; r++)
        if (r >= READ_BUDGET / 2)
            read_record(a, b, r, nfields);

    /* Out of range reads are refused, not served. */
    void *p = NULL;
    size_t sz = 0;
    check(stk_dataset_read_field(a, n, NULL, &p, &sz, NULL) == STK_EINVAL && !p,
          "read_field past the end");
    check(stk_dataset_read_field(a, 0, "no such field", &p, &sz, NULL) == STK_EINVAL && !p,
          "read_field of an unknown field");
}

static void damage(void *ctx, const char *shard, uint64_t record, const char *reason)
{
    (void)shard;
    (void)record;
    *(uint64_t *)ctx += 1;
    touch(reason, strlen(reason));
}

static void run_file(void)
{
    static const char *const verify[] = {"first", "always", "off"};
    char ua[128], ub[128];
    for (size_t v = 0; v < sizeof verify / sizeof *verify; v++) {
        snprintf(ua, sizeof ua, "stk:%s?verify=%s", g_path, verify[v]);
        snprintf(ub, sizeof ub, "stk:%s?io=pread&verify=%s", g_path, verify[v]);
        stk_dataset *a = NULL, *b = NULL;
        int ra = stk_dataset_open(ua, &g_opts, &a);
        touch(stk_errmsg(), strlen(stk_errmsg()));
        int rb = stk_dataset_open(ub, &g_opts, &b);
        check((ra == 0) == (rb == 0), "open: mmap and pread disagree");
        check((ra == 0) == (a != NULL) && (rb == 0) == (b != NULL), "open: *out and code agree");
        if (ra == 0 && rb == 0)
            exercise(a, b, 1);
        stk_dataset_close(a);
        stk_dataset_close(b);
        if (ra != 0)
            return; /* the policy does not change what open accepts */
    }
    /* The same shard twice: a two-shard dataset, records 0..n-1 then again. */
    snprintf(ua, sizeof ua, "stk:%s", g_glob);
    snprintf(ub, sizeof ub, "stk:%s?io=pread", g_glob);
    stk_dataset *a = NULL, *b = NULL;
    int ra = stk_dataset_open(ua, &g_opts, &a), rb = stk_dataset_open(ub, &g_opts, &b);
    if (ra == STK_EFORMAT && rb == STK_EFORMAT && strstr(stk_errmsg(), "repeats shard 0/1")) {
        /* A shard of a one-shard set (metadata shard_set, shard = 0/1)
         * twice is a set with an extra copy: refused (docs/format.md). */
        check(!a && !b, "open: *out and code agree");
        return;
    }
    check(ra == 0 && rb == 0, "a shard that opens alone opens twice");
    exercise(a, b, 2);
    stk_dataset_info info;
    stk_dataset_info_get(a, &info);
    for (uint64_t r = 0; r < info.count / 2 && r < 4; r++) {
        void *d0 = NULL, *d1 = NULL;
        size_t n0 = 0, n1 = 0;
        int r0 = stk_dataset_read_field(a, r, NULL, &d0, &n0, NULL);
        int r1 = stk_dataset_read_field(a, r + info.count / 2, NULL, &d1, &n1, NULL);
        check(r0 == r1 && n0 == n1 && (r0 < 0 || !memcmp(d0, d1, n0)),
              "record r of shard 0 and of shard 1 (the same file) differ");
        stk_free(d0);
        stk_free(d1);
    }
    stk_dataset_close(a);
    stk_dataset_close(b);
}

/* stk_verify over `path` (one shard, or the glob of two). */
static void verify(const char *path, uint32_t shards)
{
    char uri[96];
    snprintf(uri, sizeof uri, "stk:%s", path);
    uint64_t damaged = 0;
    stk_verify_options vo = {.on_damage = damage, .ctx = &damaged};
    stk_verify_result res;
    memset(&res, 0xff, sizeof res);
    int rc = stk_verify(uri, &vo, &res);
    check(res.shards == shards && res.bad_shards <= shards && res.bad_records <= res.records,
          "verify: result out of range");
    check((rc == 0) == (damaged == 0), "verify: code and on_damage disagree");
    check(damaged == res.bad_shards + res.bad_records, "verify: one report per damage");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    put_file(data, size);
    run_file();
    verify(g_path, 1);
    verify(g_glob, 2);
    if (size < STK_PAGE + STK_FOOTER_SIZE)
        return 0; /* refused on size alone: nothing to fix */
    uint8_t *fixed = malloc(size);
    if (!fixed)
        return 0;
    memcpy(fixed, data, size);
    fixup(fixed, size);
    if (memcmp(fixed, data, size) != 0) {
        put_file(fixed, size);
        run_file();
        verify(g_path, 1);
        verify(g_glob, 2);
    }
    free(fixed);
    return 0;
}
