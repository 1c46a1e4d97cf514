/*
 * test_lmdb.c — the lmdb: reader on environments written here with liblmdb
 * and Datum messages encoded byte by byte (varints and length-delimited
 * fields as the protobuf wire format defines them): raw Datums of 1 and 3
 * channels checked at every pixel (BGR planes read as RGB, and color=rgb),
 * encoded Datums byte for byte with negative and absent labels,
 * value=encoded with KEY.cls labels, every URI form and detection, and
 * each kind of damage (values that are not Datums, wrong wire types,
 * lengths past the end, a missing data field, a size mismatch, bad dims,
 * float_data, a directory without data.mdb, a data.mdb that is not LMDB)
 * with its code and the environment, key and record in the message.
 * tests/python/test_lmdb_reader.py checks the reader against python3-lmdb
 * and python3-protobuf.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "stoker/stoker.h"

#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

static uint8_t px_of(uint32_t i, uint32_t y, uint32_t x, uint32_t c)
{
    return (uint8_t)(i * 41 + y * 13 + x * 7 + c * 50 + 3);
}

/* A raw Datum: `planes` in the order given (CHW), plane k = px_of(.., k). */
static void raw_datum(tu_buf *b, uint32_t i, uint32_t c, uint32_t h, uint32_t w, int64_t label)
{
    uint8_t data[3 * 64 * 64];
    size_t k = 0;
    for (uint32_t ch = 0; ch < c; ch++)
        for (uint32_t y = 0; y < h; y++)
            for (uint32_t x = 0; x < w; x++)
                data[k++] = px_of(i, y, x, ch);
    b->n = 0;
    tu_pb_varint(b, 1, c);
    tu_pb_varint(b, 2, h);
    tu_pb_varint(b, 3, w);
    tu_pb_bytes(b, 4, data, k);
    tu_pb_varint(b, 5, label);
}

typedef struct kv {
    const char *key;
    size_t key_len; /* 0: strlen */
    tu_buf *val;
} kv;

/* A fresh environment `dir` (under the test tmpdir) holding the pairs. */
static const char *write_env(const char *name, const kv *pairs, size_t n, unsigned flags)
{
    const char *dir = tu_path(name);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    if (!(flags & MDB_NOSUBDIR))
        assert_int_equal(mkdir(dir, 0755), 0);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_mapsize(env, 64u << 20), 0);
    assert_int_equal(mdb_env_open(env, dir, flags, 0644), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, NULL, 0, &dbi), 0);
    for (size_t i = 0; i < n; i++) {
        MDB_val k = {pairs[i].key_len ? pairs[i].key_len : strlen(pairs[i].key),
                     (void *)pairs[i].key};
        MDB_val v = {pairs[i].val->n, pairs[i].val->d};
        assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    }
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
    return dir;
}

static stk_dataset *open_ok(const char *uri)
{
    stk_dataset *ds = NULL;
    if (stk_dataset_open(uri, NULL, &ds) != 0)
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

/* Raw Datums: 3-channel BGR planes come out RGB (or as stored with
 * color=rgb), 1-channel as is; shapes vary per record. */
static void test_raw_datums(void **state)
{
    (void)state;
    static tu_buf v[4];
    const uint32_t shape[4][3] = {{3, 5, 7}, {1, 4, 9}, {3, 1, 1}, {3, 64, 33}};
    const int64_t labels[4] = {7, 0, -3, 1000};
    kv pairs[4] = {{"00000000_a.jpg", 0, &v[0]}, {"00000001_b.jpg", 0, &v[1]},
                   {"00000002_c.jpg", 0, &v[2]}, {"00000003_d.jpg", 0, &v[3]}};
    for (uint32_t i = 0; i < 4; i++)
        raw_datum(&v[i], i, shape[i][0], shape[i][1], shape[i][2], labels[i]);
    const char *dir = write_env("raw", pairs, 4, 0);
    char uri[512];
    for (int rgb = 0; rgb < 2; rgb++) {
        snprintf(uri, sizeof uri, rgb ? "lmdb:%s?color=rgb" : "lmdb:%s", dir);
        stk_dataset *ds = open_ok(uri);
        stk_dataset_info info;
        stk_dataset_info_get(ds, &info);
        assert_string_equal(info.format, "lmdb");
        assert_int_equal(info.count, 4);
        assert_int_equal(info.height, 0); /* varies */
        for (uint32_t i = 0; i < 4; i++) {
            uint32_t c = shape[i][0], h = shape[i][1], w = shape[i][2];
            uint8_t *px = NULL;
            int64_t label;
            uint32_t sh[3];
            int64_t n = stk_dataset_read_alloc(ds, i, &px, sh, &label);
            uint32_t hh = sh[0], ww = sh[1], cc = sh[2];
            if (n < 0)
                fail_msg("read %u: %s", i, stk_errmsg());
            assert_int_equal(hh, h);
            assert_int_equal(ww, w);
            assert_int_equal(cc, c);
            assert_int_equal(label, labels[i]);
            for (uint32_t y = 0; y < h; y++)
                for (uint32_t x = 0; x < w; x++)
                    for (uint32_t ch = 0; ch < c; ch++) {
                        uint32_t plane = c == 3 && !rgb ? 2 - ch : ch;
                        assert_int_equal(px[(y * w + x) * c + ch], px_of(i, y, x, plane));
                    }
            stk_free(px);
        }
        stk_dataset_close(ds);
    }
}

/* Encoded Datums: data handed out byte for byte; a Datum without a label
 * field has label 0 (protobuf's default); bare-directory detection. */
static void test_encoded_datums(void **state)
{
    (void)state;
    static tu_buf v[3];
    uint8_t img[3][100];
    const int64_t labels[3] = {4, -1, 0};
    kv pairs[3] = {{"k0", 0, &v[0]}, {"k1", 0, &v[1]}, {"k2", 0, &v[2]}};
    for (int i = 0; i < 3; i++) {
        tu_fill_random(img[i], sizeof img[i], (uint64_t)i + 5);
        v[i].n = 0;
        tu_pb_bytes(&v[i], 4, img[i], (size_t)(60 + i * 20));
        if (i < 2)
            tu_pb_varint(&v[i], 5, labels[i]);
        if (i < 2) /* k2: no encoded field and no dims: encoded all the same */
            tu_pb_varint(&v[i], 7, 1);
        tu_pb_bytes(&v[i], 99, "unknown field", 13); /* skipped */
    }
    const char *dir = write_env("enc", pairs, 3, 0);
    char uri[512];
    const char *forms[] = {"lmdb:%s", "%s", "lmdb:%s?value=datum"};
    for (int f = 0; f < 3; f++) {
        snprintf(uri, sizeof uri, forms[f], dir);
        stk_dataset *ds = open_ok(uri);
        stk_dataset_info info;
        stk_dataset_info_get(ds, &info);
        assert_string_equal(info.format, "lmdb");
        for (int i = 0; i < 3; i++) {
            void *d;
            size_t sz;
            assert_int_equal(stk_dataset_read_field(ds, (uint64_t)i, NULL, &d, &sz, NULL), 0);
            assert_int_equal(sz, 60 + i * 20);
            assert_memory_equal(d, img[i], sz);
            stk_free(d);
            int64_t l;
            assert_int_equal(stk_dataset_label(ds, (uint64_t)i, &l), 0);
            assert_int_equal(l, labels[i]);
        }
        stk_dataset_close(ds);
    }
}

/* value=encoded: images with WebDataset-style KEY.cls labels. */
static void test_value_encoded(void **state)
{
    (void)state;
    static tu_buf img[3], cls[2];
    for (int i = 0; i < 3; i++) {
        tu_fill_random(img[i].d, 50, (uint64_t)i + 20);
        img[i].n = (size_t)(50 - i);
    }
    memcpy(cls[0].d, "3\n", 2), cls[0].n = 2;
    memcpy(cls[1].d, " 12 ", 4), cls[1].n = 4;
    kv pairs[5] = {{"cat/001.jpg", 0, &img[0]}, {"cat/001.cls", 0, &cls[0]},
                   {"dog/002.png", 0, &img[1]}, {"dog/002.cls", 0, &cls[1]},
                   {"x.y/nolabel", 0, &img[2]}};
    const char *dir = write_env("plain", pairs, 5, 0);
    char uri[512];
    snprintf(uri, sizeof uri, "lmdb:%s?value=encoded", dir);
    stk_dataset *ds = open_ok(uri);
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    assert_int_equal(info.count, 3);
    assert_int_equal(info.num_classes, 0); /* one image has no label */
    /* key order: cat/001.jpg, dog/002.png, x.y/nolabel */
    const int64_t want[3] = {3, 12, -1};
    for (int i = 0; i < 3; i++) {
        void *d;
        size_t sz;
        assert_int_equal(stk_dataset_read_field(ds, (uint64_t)i, NULL, &d, &sz, NULL), 0);
        assert_int_equal(sz, img[i].n);
        assert_memory_equal(d, img[i].d, sz);
        stk_free(d);
        int64_t l;
        assert_int_equal(stk_dataset_label(ds, (uint64_t)i, &l), 0);
        assert_int_equal(l, want[i]);
    }
    stk_dataset_close(ds);
    /* a .cls that is not a number */
    memcpy(cls[1].d, "dog", 3), cls[1].n = 3;
    dir = write_env("plain", pairs, 5, 0);
    snprintf(uri, sizeof uri, "lmdb:%s?value=encoded", dir);
    expect_open_fail(uri, STK_EFORMAT, "plain: key 'dog/002.cls': a .cls value must be a decimal");
    snprintf(uri, sizeof uri, "lmdb:%s?value=encoded&color=rgb", dir);
    expect_open_fail(uri, STK_EINVAL, "color= applies to raw Datums");
    snprintf(uri, sizeof uri, "lmdb:%s?value=png", dir);
    expect_open_fail(uri, STK_EINVAL, "datum or encoded");
}

/* An environment in one file (MDB_NOSUBDIR): lmdb:FILE. */
static void test_nosubdir(void **state)
{
    (void)state;
    static tu_buf v;
    raw_datum(&v, 0, 1, 2, 3, 9);
    kv pairs[1] = {{"only", 0, &v}};
    const char *file = write_env("single.mdb", pairs, 1, MDB_NOSUBDIR);
    char uri[512];
    snprintf(uri, sizeof uri, "lmdb:%s", file);
    stk_dataset *ds = open_ok(uri);
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info); /* one raw shape: the set's */
    assert_int_equal(info.height, 2);
    assert_int_equal(info.width, 3);
    assert_int_equal(info.channels, 1);
    uint8_t px[6];
    int64_t l;
    assert_int_equal(stk_dataset_read(ds, 0, px, sizeof px, &l), 6);
    assert_int_equal(l, 9);
    assert_int_equal(px[5], px_of(0, 1, 2, 0));
    stk_dataset_close(ds);
}

static void expect_read_fail(stk_dataset *ds, uint64_t i, const char *needle)
{
    uint8_t *px = NULL;
    uint32_t sh[3];
    int64_t l;
    int64_t rc = stk_dataset_read_alloc(ds, i, &px, sh, &l);
    if (rc != STK_EDATA || !strstr(stk_errmsg(), needle))
        fail_msg("read %llu: got %lld '%s', wanted STK_EDATA with '%s'", (unsigned long long)i,
                 (long long)rc, stk_errmsg(), needle);
}

/* Values that are not Datums: each fails its own read with STK_EDATA
 * naming the environment, the key (escaped) and the record; the others read. */
static void test_not_datums(void **state)
{
    (void)state;
    static tu_buf v[10];
    uint8_t data[12] = {0};
    raw_datum(&v[0], 0, 1, 2, 2, 1);                   /* good */
    memcpy(v[1].d, "\xff\xff\xff", 3), v[1].n = 3;     /* a varint running off the end */
    v[2].n = 0, tu_pb_bytes(&v[2], 1, "ab", 2);        /* channels as bytes */
    v[3].n = 0, tu_pb_varint(&v[3], 1, 1), tu_pb_varint(&v[3], 2, 1), tu_pb_varint(&v[3], 3, 1);
    tu_put_varint(&v[3], 4 << 3 | 2), tu_put_varint(&v[3], 100), tu_put(&v[3], "x", 1); /* length past the end */
    v[4].n = 0, tu_pb_varint(&v[4], 1, 1), tu_pb_varint(&v[4], 5, 2); /* no data */
    raw_datum(&v[5], 0, 3, 2, 2, 0), v[5].n = 0;
    tu_pb_varint(&v[5], 1, 3), tu_pb_varint(&v[5], 2, 2), tu_pb_varint(&v[5], 3, 2);
    tu_pb_bytes(&v[5], 4, data, 11);                   /* 11 bytes for 3 x 2 x 2 */
    v[6].n = 0, tu_pb_varint(&v[6], 1, 2), tu_pb_varint(&v[6], 2, 2), tu_pb_varint(&v[6], 3, 3);
    tu_pb_bytes(&v[6], 4, data, 12);                   /* 2 channels */
    v[7].n = 0, tu_pb_varint(&v[7], 1, 1), tu_pb_varint(&v[7], 2, 1), tu_pb_varint(&v[7], 3, 1);
    tu_pb_bytes(&v[7], 6, "\0\0\x80\x3f", 4);          /* float_data only (packed) */
    memcpy(v[8].d, "\x0b\x00", 2), v[8].n = 2;         /* wire type 3 (a group) */
    v[9].n = 0, tu_pb_varint(&v[9], 2, -5), tu_pb_varint(&v[9], 1, 1), tu_pb_varint(&v[9], 3, 4);
    tu_pb_bytes(&v[9], 4, data, 4);                    /* negative height */
    kv pairs[10] = {{"a0", 0, &v[0]}, {"a1", 0, &v[1]}, {"a2", 0, &v[2]}, {"a3", 0, &v[3]},
                    {"a4", 0, &v[4]}, {"a5", 0, &v[5]}, {"a6", 0, &v[6]}, {"a7", 0, &v[7]},
                    {"a8\x01'", 4, &v[8]}, {"a9", 0, &v[9]}};
    const char *dir = write_env("bad", pairs, 10, 0);
    char uri[512], want[700];
    snprintf(uri, sizeof uri, "lmdb:%s", dir);
    stk_dataset *ds = open_ok(uri);
    uint8_t px[4];
    int64_t l;
    assert_int_equal(stk_dataset_read(ds, 0, px, sizeof px, &l), 4);
    snprintf(want, sizeof want, "%s: key 'a1' (record 1): not a Caffe Datum:", dir);
    expect_read_fail(ds, 1, want);
    expect_read_fail(ds, 2, "key 'a2' (record 2): not a Caffe Datum: field 1 (channels) at byte "
                            "0 has wire type 2, expected 0");
    expect_read_fail(ds, 3, "key 'a3' (record 3): not a Caffe Datum:");
    expect_read_fail(ds, 4, "key 'a4' (record 4): not a Caffe Datum: no data field (4)");
    expect_read_fail(ds, 5, "key 'a5' (record 5): raw Datum data holds 11 bytes, channels x "
                            "height x width = 3 x 2 x 2 = 12");
    expect_read_fail(ds, 6, "key 'a6' (record 6): raw Datum of 2 x 2 x 3");
    expect_read_fail(ds, 7, "key 'a7' (record 7): the Datum holds float_data");
    expect_read_fail(ds, 8, "key 'a8\\x01\\'' (record 8): not a Caffe Datum:");
    expect_read_fail(ds, 9, "key 'a9' (record 9): raw Datum of 1 x -5 x 4");
    stk_dataset_close(ds);
}

static void test_not_environments(void **state)
{
    (void)state;
    char uri[512], cmd[1024];
    const char *dir = tu_path("notenv");
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(uri, sizeof uri, "lmdb:%s", dir);
    expect_open_fail(uri, STK_EFORMAT, "notenv: not an LMDB environment (the directory holds no "
                                       "data.mdb)");
    char data[256];
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    uint8_t junk[8192];
    tu_fill_random(junk, sizeof junk, 1);
    tu_write_file(data, junk, sizeof junk);
    expect_open_fail(uri, STK_EFORMAT, "notenv: not a readable LMDB environment: MDB_INVALID");
    tu_write_file(data, junk, 10);
    expect_open_fail(uri, STK_EFORMAT, "notenv: not a readable LMDB environment");
    expect_open_fail("lmdb:/nonexistent/env", STK_ENOENT, "/nonexistent/env");
    /* valid meta pages over B-tree pages whose headers are gone */
    static tu_buf v;
    raw_datum(&v, 0, 1, 2, 2, 1);
    kv pairs[3] = {{"a", 0, &v}, {"b", 0, &v}, {"c", 0, &v}};
    const char *cor = write_env("corrupt", pairs, 3, 0);
    snprintf(data, sizeof data, "%s/data.mdb", cor);
    size_t n;
    uint8_t *bytes = tu_read_file(data, &n);
    long page = sysconf(_SC_PAGESIZE);
    assert_true(n >= 3 * (size_t)page);
    for (size_t off = 2 * (size_t)page; off + 16 <= n; off += (size_t)page)
        memset(bytes + off, 0, 16);
    tu_write_file(data, bytes, n);
    free(bytes);
    snprintf(uri, sizeof uri, "lmdb:%s", cor);
    expect_open_fail(uri, STK_EFORMAT, "corrupt: walking the keys (after record 0): "
                                       "MDB_CORRUPTED");
    /* an empty environment */
    const char *empty = write_env("empty", NULL, 0, 0);
    snprintf(uri, sizeof uri, "lmdb:%s", empty);
    expect_open_fail(uri, STK_EFORMAT, "empty: the LMDB environment holds no records");
    snprintf(uri, sizeof uri, "lmdb:%s?label=x", empty);
    expect_open_fail(uri, STK_EINVAL, "unknown query key 'label'");
}

/* Two datasets on one environment at once, closed in either order (the
 * reason for MDB_NOLOCK: LMDB's locks break when a process opens an
 * environment twice). */
static void test_open_twice(void **state)
{
    (void)state;
    static tu_buf v;
    raw_datum(&v, 0, 1, 2, 2, 5);
    kv pairs[1] = {{"k", 0, &v}};
    const char *dir = write_env("twice", pairs, 1, 0);
    char uri[512];
    snprintf(uri, sizeof uri, "lmdb:%s", dir);
    stk_dataset *a = open_ok(uri), *b = open_ok(uri);
    uint8_t px[4];
    int64_t l;
    stk_dataset_close(a);
    assert_int_equal(stk_dataset_read(b, 0, px, sizeof px, &l), 4);
    assert_int_equal(l, 5);
    stk_dataset_close(b);
}

/* data.mdb cut while open: reads of values past the cut fail with
 * STK_EDATA saying so, values before it still read. */
static void test_truncated_while_open(void **state)
{
    (void)state;
    static tu_buf v[40];
    kv pairs[40];
    char keys[40][16];
    for (uint32_t i = 0; i < 40; i++) {
        raw_datum(&v[i], i, 1, 64, 64, i); /* 4 KiB: overflow pages, in key order */
        snprintf(keys[i], sizeof keys[i], "k%02u", i);
        pairs[i] = (kv){keys[i], 0, &v[i]};
    }
    const char *dir = write_env("cut", pairs, 40, 0);
    char uri[512], data[512];
    snprintf(uri, sizeof uri, "lmdb:%s", dir);
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    stk_dataset *ds = open_ok(uri);
    assert_int_equal(truncate(data, 16384), 0);
    static uint8_t px[64 * 64];
    int64_t l;
    int64_t rc = stk_dataset_read(ds, 39, px, sizeof px, &l);
    if (rc != STK_EDATA || !strstr(stk_errmsg(), "key 'k39' (record 39): data.mdb was truncated "
                                                 "while open"))
        fail_msg("read after the cut: %lld '%s'", (long long)rc, stk_errmsg());
    stk_dataset_close(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_raw_datums),     cmocka_unit_test(test_encoded_datums),
        cmocka_unit_test(test_value_encoded),  cmocka_unit_test(test_nosubdir),
        cmocka_unit_test(test_not_datums),     cmocka_unit_test(test_not_environments),
        cmocka_unit_test(test_open_twice),     cmocka_unit_test(test_truncated_while_open),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
