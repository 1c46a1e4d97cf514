/*
 * test_recordio.c — the recordio: reader on .rec files built byte by byte
 * here from dmlc-core's documented framing (magic 0xced7230a, lrecord =
 * cflag << 29 | length, 4-byte padding, records split at aligned magics)
 * and MXNet's IRHeader: every payload byte and label through the public
 * API, split records of 2 and 4 parts, label vectors, every URI form and
 * detection, the .idx check, and each kind of damage with its code and
 * the file, record and byte in the message. tests/python/
 * test_recordio_reader.py checks the reader against a Python writer.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "stoker/stoker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#define MAGIC 0xced7230au

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n)
        memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void put32(buf *b, uint32_t v)
{
    uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, le, 4);
}

static void put64(buf *b, uint64_t v)
{
    put32(b, (uint32_t)v);
    put32(b, (uint32_t)(v >> 32));
}

static void putf(buf *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    put32(b, u);
}

/* One frame: magic, lrecord, data, zero padding. */
static void frame(buf *b, uint32_t cflag, const uint8_t *d, uint32_t n)
{
    static const uint8_t zero[4] = {0};
    put32(b, MAGIC);
    put32(b, cflag << 29 | n);
    put(b, d, n);
    put(b, zero, (4 - n % 4) % 4);
}

/* A record as dmlc::RecordIOWriter writes it: split at every magic found
 * at a 4-aligned offset of the data. Returns the number of parts. */
static int write_record(buf *b, const uint8_t *d, uint32_t n)
{
    static const uint8_t m[4] = {0x0a, 0x23, 0xd7, 0xce};
    uint32_t start = 0;
    int parts = 0;
    for (uint32_t i = 0; i + 4 <= (n & ~3u); i += 4)
        if (memcmp(d + i, m, 4) == 0) {
            frame(b, start == 0 ? 1 : 2, d + start, i - start);
            start = i + 4;
            parts++;
        }
    frame(b, start ? 3 : 0, d + start, n - start);
    return parts + 1;
}

/* An image record: IRHeader (flag, label, id, id2), label vector, image. */
static void image_record(buf *rec, uint32_t flag, float label, const float *vec,
                         const uint8_t *img, size_t n)
{
    rec->n = 0;
    put32(rec, flag);
    putf(rec, label);
    put64(rec, 77);
    put64(rec, 0);
    for (uint32_t i = 0; vec && i < flag; i++) /* vec NULL: a flag with no vector */
        putf(rec, vec[i]);
    put(rec, img, n);
}

static void fake_image(uint8_t *img, size_t n, uint64_t seed)
{
    tu_fill_random(img, n, seed);
}

static stk_dataset *open_ok(const char *uri)
{
    stk_dataset *ds = NULL;
    int rc = stk_dataset_open(uri, NULL, &ds);
    if (rc != 0)
        fail_msg("open %s: %s", uri, stk_errmsg());
    return ds;
}

static void expect_open_fail(const char *uri, int code, const char *needle)
{
    stk_dataset *ds = NULL;
    int rc = stk_dataset_open(uri, NULL, &ds);
    if (rc != code || !strstr(stk_errmsg(), needle))
        fail_msg("open %s: got %d '%s', wanted %d with '%s'", uri, rc, stk_errmsg(), code,
                 needle);
    assert_null(ds);
}

static void expect_bytes(stk_dataset *ds, uint64_t i, const uint8_t *want, size_t n, int64_t label)
{
    void *d = NULL;
    size_t sz = 0;
    int rc = stk_dataset_read_field(ds, i, NULL, &d, &sz, NULL);
    if (rc != 0)
        fail_msg("read_field %llu: %s", (unsigned long long)i, stk_errmsg());
    assert_int_equal(sz, n);
    assert_memory_equal(d, want, n);
    stk_free(d);
    int64_t l = 0;
    assert_int_equal(stk_dataset_label(ds, i, &l), 0);
    assert_int_equal(l, label);
}

/* Three whole records, labels 0, 5, 2 (one as a label vector [2, 9]);
 * image sizes 1, 4 and 37 bytes (every padding). */
static void write_basic(const char *rec_path, uint8_t imgs[3][64], size_t sizes[3],
                        uint64_t offsets[3])
{
    buf f = {0}, r = {0};
    const float vec[2] = {2.0f, 9.0f};
    sizes[0] = 1, sizes[1] = 4, sizes[2] = 37;
    for (int i = 0; i < 3; i++) {
        fake_image(imgs[i], sizes[i], (uint64_t)i + 1);
        imgs[i][0] = 0xff;
        offsets[i] = f.n;
        if (i == 2)
            image_record(&r, 2, 0.0f, vec, imgs[i], sizes[i]);
        else
            image_record(&r, 0, i == 0 ? 0.0f : 5.0f, NULL, imgs[i], sizes[i]);
        write_record(&f, r.p, (uint32_t)r.n);
    }
    tu_write_file(rec_path, f.p, f.n);
    free(f.p);
    free(r.p);
}

static void test_basic_every_uri(void **state)
{
    (void)state;
    uint8_t imgs[3][64];
    size_t sizes[3];
    uint64_t off[3];
    char uri[512], idx[64];
    const char *rec = tu_path("basic.rec");
    write_basic(rec, imgs, sizes, off);
    const int64_t labels[3] = {0, 5, 2};

    const char *forms[] = {"recordio:%s", "%s", "recordio:%s?idx=none"};
    for (int f = 0; f < 3; f++) {
        snprintf(uri, sizeof uri, forms[f], rec);
        stk_dataset *ds = open_ok(uri);
        stk_dataset_info info;
        stk_dataset_info_get(ds, &info);
        assert_string_equal(info.format, "recordio");
        assert_int_equal(info.count, 3);
        assert_int_equal(info.num_classes, 6);
        for (int i = 0; i < 3; i++)
            expect_bytes(ds, (uint64_t)i, imgs[i], sizes[i], labels[i]);
        stk_dataset_close(ds);
    }
    /* the default index beside the file, and one named by idx= */
    snprintf(idx, sizeof idx, "%s", "");
    char text[256];
    int k = snprintf(text, sizeof text, "0\t%llu\n1\t%llu\n2\t%llu\n", (unsigned long long)off[0],
                     (unsigned long long)off[1], (unsigned long long)off[2]);
    tu_write_file(tu_path("basic.idx"), text, (size_t)k);
    snprintf(uri, sizeof uri, "recordio:%s", rec);
    stk_dataset *ds = open_ok(uri);
    expect_bytes(ds, 2, imgs[2], sizes[2], 2);
    stk_dataset_close(ds);
    /* lines in another order, keys not 0..n-1: the samples stay in file order */
    k = snprintf(text, sizeof text, "30 %llu\r\n10\t%llu\n\n20\t%llu", (unsigned long long)off[2],
                 (unsigned long long)off[0], (unsigned long long)off[1]);
    tu_write_file(tu_path("other.idx"), text, (size_t)k);
    snprintf(uri, sizeof uri, "recordio:%s?idx=%s", rec, tu_path("other.idx"));
    ds = open_ok(uri);
    for (int i = 0; i < 3; i++)
        expect_bytes(ds, (uint64_t)i, imgs[i], sizes[i], labels[i]);
    stk_dataset_close(ds);
}

/* Records whose data holds the magic at aligned offsets: split into 2 and
 * 4 parts by the writer, joined by the reader; neighbours unaffected. */
static void test_split_records(void **state)
{
    (void)state;
    static const uint8_t m[4] = {0x0a, 0x23, 0xd7, 0xce};
    uint8_t img1[40], img2[41], img0[8];
    buf f = {0}, r = {0};
    fake_image(img0, sizeof img0, 10);
    fake_image(img1, sizeof img1, 11);
    fake_image(img2, sizeof img2, 12);
    /* record data offsets are 24 + image offset: aligned at image 0, 8, 36 */
    memcpy(img1 + 8, m, 4);
    memcpy(img2 + 0, m, 4);
    memcpy(img2 + 4, m, 4);
    memcpy(img2 + 36, m, 4);
    memcpy(img1 + 13, m, 4); /* unaligned: not split */
    image_record(&r, 0, 1.0f, NULL, img0, sizeof img0);
    assert_int_equal(write_record(&f, r.p, (uint32_t)r.n), 1);
    image_record(&r, 0, 3.0f, NULL, img1, sizeof img1);
    assert_int_equal(write_record(&f, r.p, (uint32_t)r.n), 2);
    image_record(&r, 0, 4.0f, NULL, img2, sizeof img2);
    assert_int_equal(write_record(&f, r.p, (uint32_t)r.n), 4);
    image_record(&r, 0, 0.0f, NULL, img0, sizeof img0);
    write_record(&f, r.p, (uint32_t)r.n);
    const char *rec = tu_path("split.rec");
    tu_write_file(rec, f.p, f.n);
    stk_dataset *ds = open_ok(rec);
    assert_int_equal(ds ? 4 : 0, 4);
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    assert_int_equal(info.count, 4);
    expect_bytes(ds, 0, img0, sizeof img0, 1);
    expect_bytes(ds, 1, img1, sizeof img1, 3);
    expect_bytes(ds, 2, img2, sizeof img2, 4);
    expect_bytes(ds, 3, img0, sizeof img0, 0);
    stk_dataset_close(ds);

    /* a header split inside: the id field holds the magic */
    f.n = 0;
    r.n = 0;
    put32(&r, 0);
    putf(&r, 6.0f);
    put(&r, m, 4);
    put(&r, m, 4);
    put64(&r, 0);
    put(&r, img0, sizeof img0);
    assert_int_equal(write_record(&f, r.p, (uint32_t)r.n), 3);
    tu_write_file(rec, f.p, f.n);
    ds = open_ok(rec);
    expect_bytes(ds, 0, img0, sizeof img0, 6);
    stk_dataset_close(ds);

    /* a split record cut after its first part */
    f.n = 0;
    image_record(&r, 0, 3.0f, NULL, img1, sizeof img1);
    write_record(&f, r.p, (uint32_t)r.n);
    tu_write_file(rec, f.p, 8 + 24 + 8);
    expect_open_fail(rec, STK_EFORMAT, "split.rec: record 0 (byte 0): truncated inside a split");
    /* a middle part where a record starts */
    f.n = 0;
    frame(&f, 2, img1, 8);
    tu_write_file(rec, f.p, f.n);
    expect_open_fail(rec, STK_EFORMAT, "record 0 (byte 0): frame at byte 0 has cflag 2");
    free(f.p);
    free(r.p);
}

static void test_damage_at_open(void **state)
{
    (void)state;
    uint8_t imgs[3][64];
    size_t sizes[3];
    uint64_t off[3];
    size_t n;
    const char *rec = tu_path("dmg.rec");
    write_basic(rec, imgs, sizes, off);
    uint8_t *good = tu_read_file(rec, &n);
    uint8_t *b = malloc(n + 16);
    char want[256];

    /* bad magic at record 1 */
    memcpy(b, good, n);
    b[off[1]] ^= 1;
    tu_write_file(rec, b, n);
    snprintf(want, sizeof want, "dmg.rec: record 1 (byte %llu): bad magic 0xced7230b",
             (unsigned long long)off[1]);
    expect_open_fail(rec, STK_EFORMAT, want);
    /* a length past the end of the file */
    memcpy(b, good, n);
    b[off[2] + 4] = 0xf0;
    tu_write_file(rec, b, n);
    snprintf(want, sizeof want, "record 2 (byte %llu): truncated: the frame at byte %llu holds",
             (unsigned long long)off[2], (unsigned long long)off[2]);
    expect_open_fail(rec, STK_EFORMAT, want);
    /* cut inside the last record, and inside a frame header */
    tu_write_file(rec, good, n - 4);
    expect_open_fail(rec, STK_EFORMAT, "record 2");
    tu_write_file(rec, good, off[2] + 5);
    snprintf(want, sizeof want, "record 2 (byte %llu): truncated: a frame header needs 8 bytes, 5",
             (unsigned long long)off[2]);
    expect_open_fail(rec, STK_EFORMAT, want);
    /* a cflag that does not exist */
    memcpy(b, good, n);
    b[off[0] + 7] |= 0xa0; /* cflag 5 */
    tu_write_file(rec, b, n);
    expect_open_fail(rec, STK_EFORMAT, "record 0 (byte 0): frame at byte 0 has cflag 5");
    /* a file that is not RecordIO, and an empty one */
    tu_write_file(rec, "hello world, not a rec", 22);
    expect_open_fail(rec, STK_EFORMAT, "bad magic");
    tu_write_file(rec, "", 0);
    expect_open_fail(rec, STK_EFORMAT, "dmg.rec: no records");
    expect_open_fail("recordio:/nonexistent/x.rec", STK_ENOENT, "/nonexistent/x.rec");
    /* queries */
    tu_write_file(rec, good, n);
    char uri[512];
    snprintf(uri, sizeof uri, "recordio:%s?label=0", rec);
    expect_open_fail(uri, STK_EINVAL, "idx=PATH or idx=none");
    snprintf(uri, sizeof uri, "recordio:%s?idx=/nonexistent.idx", rec);
    expect_open_fail(uri, STK_ENOENT, "/nonexistent.idx: no such index file");
    free(good);
    free(b);
}

static void expect_read_fail(stk_dataset *ds, uint64_t i, const char *needle)
{
    void *d = NULL;
    size_t sz;
    int rc = stk_dataset_read_field(ds, i, NULL, &d, &sz, NULL);
    if (rc != STK_EDATA || !strstr(stk_errmsg(), needle))
        fail_msg("read %llu: got %d '%s', wanted STK_EDATA with '%s'", (unsigned long long)i, rc,
                 stk_errmsg(), needle);
    int64_t l;
    assert_int_equal(stk_dataset_label(ds, i, &l), STK_EDATA);
}

/* Damage inside one record's data: the open succeeds, that record fails
 * with STK_EDATA (so on_error=skip skips it), the others read. */
static void test_damage_at_read(void **state)
{
    (void)state;
    uint8_t img[16];
    const float vec[1] = {1.5f};
    buf f = {0}, r = {0};
    uint64_t off[7];
    fake_image(img, sizeof img, 3);
    image_record(&r, 0, 1.0f, NULL, img, sizeof img);
    off[0] = f.n;
    write_record(&f, r.p, (uint32_t)r.n);
    off[1] = f.n;
    write_record(&f, r.p, 10); /* a 10-byte record: no room for an IRHeader */
    image_record(&r, 1000, 0.0f, NULL, img, sizeof img); /* a vector of 1000 floats */
    off[2] = f.n;
    write_record(&f, r.p, (uint32_t)r.n);
    image_record(&r, 0, 2.5f, NULL, img, sizeof img);
    off[3] = f.n;
    write_record(&f, r.p, (uint32_t)r.n);
    image_record(&r, 1, 0.0f, vec, img, sizeof img);
    off[4] = f.n;
    write_record(&f, r.p, (uint32_t)r.n);
    image_record(&r, 0, 4.0f, NULL, img, 0);
    off[5] = f.n;
    write_record(&f, r.p, (uint32_t)r.n);
    image_record(&r, 0, 1152921504606846976.0f, NULL, img, sizeof img);
    off[6] = f.n;
    write_record(&f, r.p, (uint32_t)r.n);
    const char *rec = tu_path("rd.rec");
    tu_write_file(rec, f.p, f.n);
    stk_dataset *ds = open_ok(rec);
    char want[256];
    expect_bytes(ds, 0, img, sizeof img, 1);
    snprintf(want, sizeof want, "rd.rec: record 1 (byte %llu): the record holds 10 bytes, fewer "
                                "than the 24 of an IRHeader", (unsigned long long)off[1]);
    expect_read_fail(ds, 1, want);
    snprintf(want, sizeof want, "record 2 (byte %llu): the IRHeader's flag announces a label "
                                "vector of 1000 floats", (unsigned long long)off[2]);
    expect_read_fail(ds, 2, want);
    snprintf(want, sizeof want, "record 3 (byte %llu): the label 2.5 is not an integer",
             (unsigned long long)off[3]);
    expect_read_fail(ds, 3, want);
    expect_read_fail(ds, 4, "record 4");
    expect_read_fail(ds, 4, "the label 1.5 is not an integer");
    snprintf(want, sizeof want, "record 5 (byte %llu): no image bytes", (unsigned long long)off[5]);
    expect_read_fail(ds, 5, want);
    /* 2^60 is an integer, but past 2^53: said so, in full (not "1.15292e+18
     * is not an integer") */
    snprintf(want, sizeof want, "record 6 (byte %llu): the label 1152921504606846976 is beyond "
                                "2^53 (9007199254740992)", (unsigned long long)off[6]);
    expect_read_fail(ds, 6, want);
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    assert_int_equal(info.count, 7);
    stk_dataset_close(ds);
    free(f.p);
    free(r.p);
}

static void test_idx_mismatch(void **state)
{
    (void)state;
    uint8_t imgs[3][64];
    size_t sizes[3];
    uint64_t off[3];
    char uri[512], text[256], want[256];
    const char *rec = tu_path("ix.rec"), *idx = tu_path("ix.idx");
    write_basic(rec, imgs, sizes, off);
    snprintf(uri, sizeof uri, "recordio:%s", rec);
    int k;
    /* an offset that is not a record start */
    k = snprintf(text, sizeof text, "0\t0\n1\t12\n2\t%llu\n", (unsigned long long)off[2]);
    tu_write_file(idx, text, (size_t)k);
    expect_open_fail(uri, STK_EFORMAT, "ix.idx: line 2: offset 12 is not where a record");
    /* a record left out */
    k = snprintf(text, sizeof text, "0\t0\n2\t%llu\n", (unsigned long long)off[2]);
    tu_write_file(idx, text, (size_t)k);
    snprintf(want, sizeof want, "ix.rec: record 1 (byte %llu) is not listed in the index",
             (unsigned long long)off[1]);
    expect_open_fail(uri, STK_EFORMAT, want);
    /* listed twice */
    k = snprintf(text, sizeof text, "0\t0\n1\t%llu\n2\t%llu\n3\t%llu\n", (unsigned long long)off[1],
                 (unsigned long long)off[2], (unsigned long long)off[1]);
    tu_write_file(idx, text, (size_t)k);
    expect_open_fail(uri, STK_EFORMAT, "is listed twice");
    /* past the end of the file */
    k = snprintf(text, sizeof text, "0\t0\n1\t%llu\n2\t%llu\n3\t99999\n",
                 (unsigned long long)off[1], (unsigned long long)off[2]);
    tu_write_file(idx, text, (size_t)k);
    expect_open_fail(uri, STK_EFORMAT, "line 4: offset 99999 is not where a record");
    /* not KEY<TAB>OFFSET */
    tu_write_file(idx, "0\t0\nabc\n", 8);
    expect_open_fail(uri, STK_EFORMAT, "ix.idx: line 2: not \"KEY<TAB>OFFSET\"");
    /* ?idx=none reads without it */
    snprintf(uri, sizeof uri, "recordio:%s?idx=none", rec);
    stk_dataset *ds = open_ok(uri);
    stk_dataset_close(ds);
}

/* The .rec cut while open: a record past the cut fails with STK_EDATA
 * naming it, an earlier one still reads. */
static void test_truncated_while_open(void **state)
{
    (void)state;
    static uint8_t img[3000];
    buf f = {0}, r = {0};
    uint64_t off[8];
    for (int i = 0; i < 8; i++) {
        fake_image(img, sizeof img, (uint64_t)i);
        image_record(&r, 0, (float)i, NULL, img, sizeof img);
        off[i] = f.n;
        write_record(&f, r.p, (uint32_t)r.n);
    }
    const char *rec = tu_path("cut.rec");
    tu_write_file(rec, f.p, f.n);
    stk_dataset *ds = open_ok(rec);
    assert_int_equal(truncate(rec, 8192), 0);
    fake_image(img, sizeof img, 0);
    expect_bytes(ds, 0, img, sizeof img, 0);
    void *d = NULL;
    size_t sz;
    int rc = stk_dataset_read_field(ds, 7, NULL, &d, &sz, NULL);
    char want[256];
    snprintf(want, sizeof want, "cut.rec: record 7 (byte %llu): the file was truncated while open",
             (unsigned long long)(off[7] + 8));
    if (rc != STK_EDATA || !strstr(stk_errmsg(), want))
        fail_msg("read after the cut: %d '%s'", rc, stk_errmsg());
    stk_dataset_close(ds);
    free(f.p);
    free(r.p);
}

/* Several files: a directory of *.rec or a glob, one index space in name
 * order, each file's own .idx checked, names per file. */
static void test_several_files(void **state)
{
    (void)state;
    uint8_t imgs[3][64];
    size_t sizes[3];
    uint64_t off[3];
    char uri[1200], cmd[1024], want[1200];
    const char *dir = tu_path("multi");
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    assert_int_equal(system(cmd), 0);
    char a[512], b[512], bidx[512];
    snprintf(a, sizeof a, "%s/a.rec", dir);
    snprintf(b, sizeof b, "%s/b.rec", dir);
    snprintf(bidx, sizeof bidx, "%s/b.idx", dir);
    write_basic(a, imgs, sizes, off);
    write_basic(b, imgs, sizes, off);
    tu_write_file(tu_path("multi/notes.txt"), "x", 1); /* not a .rec: not listed */
    const int64_t labels[3] = {0, 5, 2};
    const char *forms[] = {"recordio:%s", "recordio:%s/*.rec", "%s/*.rec"};
    for (int f = 0; f < 3; f++) {
        snprintf(uri, sizeof uri, forms[f], dir);
        stk_dataset *ds = open_ok(uri);
        stk_dataset_info info;
        stk_dataset_info_get(ds, &info);
        assert_int_equal(info.count, 6);
        for (int i = 0; i < 6; i++)
            expect_bytes(ds, (uint64_t)i, imgs[i % 3], sizes[i % 3], labels[i % 3]);
        stk_dataset_close(ds);
    }
    /* b's record 1 damaged: named in b, numbered within b */
    size_t n;
    uint8_t *bytes = tu_read_file(b, &n);
    uint32_t half = 0x3f000000; /* record 1's IRHeader label (flag 0): 0.5 */
    memcpy(bytes + off[1] + 12, &half, 4);
    tu_write_file(b, bytes, n);
    free(bytes);
    snprintf(uri, sizeof uri, "recordio:%s", dir);
    stk_dataset *ds = open_ok(uri);
    void *d;
    size_t sz;
    assert_int_equal(stk_dataset_read_field(ds, 4, NULL, &d, &sz, NULL), STK_EDATA);
    snprintf(want, sizeof want, "%s: record 1 (byte %llu): the label 0.5 is not an integer", b,
             (unsigned long long)off[1]);
    if (!strstr(stk_errmsg(), want))
        fail_msg("got '%s', wanted '%s'", stk_errmsg(), want);
    stk_dataset_close(ds);
    /* b's stale index fails the open, naming it */
    tu_write_file(bidx, "0\t0\n1\t4\n", 8);
    snprintf(want, sizeof want, "%s: line 2: offset 4 is not where a record of %s starts", bidx, b);
    expect_open_fail(uri, STK_EFORMAT, want);
    snprintf(uri, sizeof uri, "recordio:%s?idx=none", dir);
    ds = open_ok(uri);
    stk_dataset_close(ds);
    /* idx=PATH names one file's index */
    snprintf(uri, sizeof uri, "recordio:%s?idx=%s", dir, bidx);
    expect_open_fail(uri, STK_EINVAL, "idx=PATH names the index of one file");
    snprintf(uri, sizeof uri, "recordio:%s/*.none.rec", dir);
    expect_open_fail(uri, STK_ENOENT, "no RecordIO file matches this pattern");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_every_uri),
        cmocka_unit_test(test_split_records),
        cmocka_unit_test(test_damage_at_open),
        cmocka_unit_test(test_damage_at_read),
        cmocka_unit_test(test_idx_mismatch),
        cmocka_unit_test(test_truncated_while_open),
        cmocka_unit_test(test_several_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
