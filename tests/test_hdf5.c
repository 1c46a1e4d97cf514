/*
 * test_hdf5.c — the hdf5: reader on files written here with libhdf5 (the
 * reference writer): every pixel and label of contiguous and chunked+gzip
 * uint8 arrays (N,H,W) and (N,H,W,C), the exact bytes of variable-length
 * uint8 records (contiguous, with a user block, chunked+gzip), reads from
 * several threads at once (the mapped paths and the libhdf5 path), and each
 * kind of damage with its code and message: wrong types and ranks, missing
 * datasets, a count mismatch, float labels, a truncated file, a corrupt
 * global heap (bad signature, an index not found, an object size past the
 * collection, an empty element), a file truncated while open, not an HDF5
 * file. tests/python/test_hdf5_reader.py checks the same against h5py.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "stoker/stoker.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#ifdef STK_HAVE_HDF5
#include <hdf5.h>

static uint8_t px_of(uint64_t i, uint64_t k)
{
    return (uint8_t)(i * 37 + k * 11 + 1);
}

/* A record's bytes: its length varies (1..300), its content from i. */
static size_t blob_of(uint64_t i, uint8_t *out)
{
    size_t n = 1 + (i * 97) % 300;
    for (size_t k = 0; k < n; k++)
        out[k] = (uint8_t)(i * 13 + k * 7 + 5);
    return n;
}

enum { CONTIG = 0, CHUNKED_GZIP = 1 };

static hid_t make_dcpl(int layout, int rank, const hsize_t *dims)
{
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (layout == CHUNKED_GZIP) {
        hsize_t chunk[4] = {3, 1, 1, 1};
        for (int k = 1; k < rank; k++) {
            chunk[0] = 2;
            chunk[k] = dims[k];
        }
        assert_true(H5Pset_chunk(dcpl, rank, chunk) >= 0);
        assert_true(H5Pset_deflate(dcpl, 6) >= 0);
    }
    return dcpl;
}

static void write_labels(hid_t f, const char *name, hid_t type, uint64_t n, int rank)
{
    hsize_t dims[2] = {n, 1};
    int64_t *v = malloc(n * sizeof *v);
    for (uint64_t i = 0; i < n; i++)
        v[i] = (int64_t)((i * 7) % 10);
    hid_t s = H5Screate_simple(rank, dims, NULL);
    hid_t d = H5Dcreate2(f, name, type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(d >= 0);
    assert_true(H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    H5Dclose(d);
    H5Sclose(s);
    free(v);
}

/* images (n,h,w[,c]) of `type` (written from px_of bytes), labels int16. */
static void write_fixed(const char *path, int layout, uint64_t n, int rank, hid_t type)
{
    hsize_t dims[4] = {n, 5, 7, 3};
    size_t per = 5 * 7 * (rank == 4 ? 3 : 1);
    uint8_t *px = malloc(n * per);
    for (uint64_t i = 0; i < n; i++)
        for (size_t k = 0; k < per; k++)
            px[i * per + k] = px_of(i, k);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(f >= 0);
    hid_t s = H5Screate_simple(rank, dims, NULL);
    hid_t dcpl = make_dcpl(layout, rank, dims);
    hid_t d = H5Dcreate2(f, "/images", type, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    assert_true(d >= 0);
    assert_true(H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, px) >= 0);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(s);
    write_labels(f, "/labels", H5T_STD_I16LE, n, 1);
    H5Fclose(f);
    free(px);
}

/* n records of blob_of(i) (record `empty` left empty, unless it is >= n)
 * as vlen uint8; returns the file offset of the raw elements (contiguous). */
static uint64_t write_vlen(const char *path, int layout, uint64_t n, hsize_t userblock,
                           uint64_t empty)
{
    hvl_t *v = calloc(n, sizeof *v);
    uint8_t *bytes = malloc(n * 300);
    for (uint64_t i = 0; i < n; i++) {
        v[i].p = bytes + i * 300;
        v[i].len = i == empty ? 0 : blob_of(i, bytes + i * 300);
    }
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    if (userblock)
        H5Pset_userblock(fcpl, userblock);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
    assert_true(f >= 0);
    hsize_t dims[1] = {n};
    hid_t s = H5Screate_simple(1, dims, NULL);
    hid_t t = H5Tvlen_create(H5T_NATIVE_UINT8);
    hid_t dcpl = make_dcpl(layout, 1, dims);
    hid_t d = H5Dcreate2(f, "/images", t, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    assert_true(d >= 0);
    assert_true(H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    uint64_t off = layout == CONTIG ? (uint64_t)H5Dget_offset(d) : 0;
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Tclose(t);
    H5Sclose(s);
    write_labels(f, "/labels", H5T_STD_U8LE, n, 1);
    H5Fclose(f);
    H5Pclose(fcpl);
    free(bytes);
    free(v);
    return off;
}

static stk_dataset *open_ok(const char *uri)
{
    stk_dataset *ds = NULL;
    int rc = stk_dataset_open(uri, NULL, &ds);
    if (rc)
        fail_msg("%s: %s", uri, stk_errmsg());
    return ds;
}

static void expect_open_error(const char *uri, int code, const char *needle)
{
    stk_dataset *ds = NULL;
    int rc = stk_dataset_open(uri, NULL, &ds);
    if (rc != code || !strstr(stk_errmsg(), needle))
        fail_msg("%s: got %d '%s', want %d with '%s'", uri, rc, stk_errmsg(), code, needle);
    assert_null(ds);
}

static void check_fixed(stk_dataset *ds, uint64_t n, uint32_t c)
{
    stk_dataset_info info;
    uint8_t buf[5 * 7 * 3];
    stk_dataset_info_get(ds, &info);
    assert_string_equal(info.format, "hdf5");
    assert_int_equal(info.count, n);
    assert_int_equal(info.height, 5);
    assert_int_equal(info.width, 7);
    assert_int_equal(info.channels, c);
    assert_int_equal(info.num_classes, 10); /* labels (i * 7) % 10, n >= 10 */
    for (uint64_t i = 0; i < n; i++) {
        int64_t label = -1;
        assert_int_equal(stk_dataset_read(ds, i, buf, sizeof buf, &label), 5 * 7 * c);
        for (size_t k = 0; k < 5 * 7 * c; k++)
            if (buf[k] != px_of(i, k))
                fail_msg("record %llu byte %zu: %u, want %u", (unsigned long long)i, k, buf[k],
                         px_of(i, k));
        assert_int_equal(label, (int64_t)((i * 7) % 10));
    }
}

static void test_fixed_arrays(void **state)
{
    (void)state;
    char uri[512];
    const char *p = tu_path("fixed4.h5");
    write_fixed(p, CONTIG, 11, 4, H5T_STD_U8LE);
    snprintf(uri, sizeof uri, "hdf5:%s", p);
    stk_dataset *ds = open_ok(uri);
    check_fixed(ds, 11, 3);
    stk_dataset_close(ds);
    /* a bare *.h5 is detected */
    ds = open_ok(p);
    check_fixed(ds, 11, 3);
    stk_dataset_close(ds);

    p = tu_path("fixed3.h5");
    write_fixed(p, CONTIG, 11, 3, H5T_STD_U8LE);
    snprintf(uri, sizeof uri, "hdf5:%s?images=images&labels=/labels", p);
    ds = open_ok(uri);
    check_fixed(ds, 11, 1);
    stk_dataset_close(ds);
}

static void test_fixed_chunked_gzip(void **state)
{
    (void)state;
    char uri[512];
    const char *p = tu_path("gz4.hdf5");
    write_fixed(p, CHUNKED_GZIP, 11, 4, H5T_STD_U8LE);
    snprintf(uri, sizeof uri, "hdf5:%s", p);
    stk_dataset *ds = open_ok(uri);
    check_fixed(ds, 11, 3);
    stk_dataset_close(ds);
    p = tu_path("gz3.hdf5");
    write_fixed(p, CHUNKED_GZIP, 11, 3, H5T_STD_U8LE);
    ds = open_ok(p);
    check_fixed(ds, 11, 1);
    stk_dataset_close(ds);
}

static void check_vlen(stk_dataset *ds, uint64_t n)
{
    uint8_t want[300];
    for (uint64_t i = 0; i < n; i++) {
        void *data = NULL;
        size_t size = 0;
        int64_t label = -1;
        int rc = stk_dataset_read_field(ds, i, NULL, &data, &size, NULL);
        if (rc)
            fail_msg("record %llu: %s", (unsigned long long)i, stk_errmsg());
        size_t wn = blob_of(i, want);
        assert_int_equal(size, wn);
        assert_memory_equal(data, want, wn);
        stk_free(data);
        assert_int_equal(stk_dataset_label(ds, i, &label), 0);
        assert_int_equal(label, (int64_t)((i * 7) % 10));
    }
}

static void test_vlen_records(void **state)
{
    (void)state;
    char uri[512];
    stk_dataset_info info;
    const char *p = tu_path("vlen.h5");
    write_vlen(p, CONTIG, 57, 0, UINT64_MAX);
    snprintf(uri, sizeof uri, "hdf5:%s", p);
    stk_dataset *ds = open_ok(uri);
    stk_dataset_info_get(ds, &info);
    assert_int_equal(info.count, 57);
    assert_int_equal(info.height, 0); /* varies */
    check_vlen(ds, 57);
    stk_dataset_close(ds);

    /* a user block moves every address by its size */
    p = tu_path("vlen_ub.h5");
    write_vlen(p, CONTIG, 57, 1024, UINT64_MAX);
    ds = open_ok(p);
    check_vlen(ds, 57);
    stk_dataset_close(ds);

    p = tu_path("vlen_gz.h5");
    write_vlen(p, CHUNKED_GZIP, 57, 0, UINT64_MAX);
    ds = open_ok(p);
    check_vlen(ds, 57);
    stk_dataset_close(ds);
}

/* Several threads read every record of one dataset at once. */
typedef struct reader_arg {
    stk_dataset *ds;
    uint64_t n;
    int vlen, bad;
} reader_arg;

static void *reader_main(void *p)
{
    reader_arg *a = p;
    uint8_t buf[5 * 7 * 3], want[300];
    for (int round = 0; round < 3; round++)
        for (uint64_t i = 0; i < a->n; i++) {
            if (a->vlen) {
                void *data = NULL;
                size_t size = 0, wn = blob_of(i, want);
                if (stk_dataset_read_field(a->ds, i, NULL, &data, &size, NULL) ||
                    size != wn || memcmp(data, want, wn))
                    a->bad++;
                stk_free(data);
            } else {
                if (stk_dataset_read(a->ds, i, buf, sizeof buf, NULL) != (int64_t)sizeof buf)
                    a->bad++;
                for (size_t k = 0; k < sizeof buf; k++)
                    a->bad += buf[k] != px_of(i, k);
            }
        }
    return NULL;
}

static void run_threads(stk_dataset *ds, uint64_t n, int vlen)
{
    pthread_t t[4];
    reader_arg a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (reader_arg){ds, n, vlen, 0};
        assert_int_equal(pthread_create(&t[i], NULL, reader_main, &a[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].bad, 0);
    }
}

static void test_threads(void **state)
{
    (void)state;
    const char *files[4] = {tu_path("t_fixed.h5"), tu_path("t_fixed_gz.h5"), tu_path("t_vlen.h5"),
                            tu_path("t_vlen_gz.h5")};
    write_fixed(files[0], CONTIG, 40, 4, H5T_STD_U8LE);
    write_fixed(files[1], CHUNKED_GZIP, 40, 4, H5T_STD_U8LE);
    write_vlen(files[2], CONTIG, 40, 0, UINT64_MAX);
    write_vlen(files[3], CHUNKED_GZIP, 40, 0, UINT64_MAX);
    for (int k = 0; k < 4; k++) {
        stk_dataset *ds = open_ok(files[k]);
        run_threads(ds, 40, k >= 2);
        stk_dataset_close(ds);
    }
}

/* The bytes of `path`, patched at `at`, written back. */
static void patch(const char *path, uint64_t at, const void *bytes, size_t n)
{
    size_t size;
    uint8_t *d = tu_read_file(path, &size);
    assert_true(at + n <= size);
    memcpy(d + at, bytes, n);
    tu_write_file(path, d, size);
    free(d);
}

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Read record i: expect STK_EDATA with each needle in the message. */
static void expect_read_error(stk_dataset *ds, uint64_t i, const char *n1, const char *n2)
{
    void *data = NULL;
    size_t size;
    int rc = stk_dataset_read_field(ds, i, NULL, &data, &size, NULL);
    if (rc != STK_EDATA || !strstr(stk_errmsg(), n1) || (n2 && !strstr(stk_errmsg(), n2)))
        fail_msg("record %llu: got %d '%s', want STK_EDATA with '%s' and '%s'",
                 (unsigned long long)i, rc, stk_errmsg(), n1, n2 ? n2 : "");
    assert_null(data);
}

static void test_heap_damage(void **state)
{
    (void)state;
    const char *p = tu_path("heap.h5");
    char want[256];
    size_t size;
    /* Record 3 is empty; records share collections. */
    uint64_t elems = write_vlen(p, CONTIG, 20, 0, 3);
    uint8_t *d = tu_read_file(p, &size);
    uint64_t coll0 = rd64(d + elems + 4);         /* record 0's collection */
    uint64_t coll9 = rd64(d + elems + 9 * 16 + 4); /* record 9's */
    free(d);
    assert_true(coll0 != 0);

    stk_dataset *ds = open_ok(p);
    snprintf(want, sizeof want, "%s: dataset /images, record 3 (element at byte %llu): ", p,
             (unsigned long long)(elems + 3 * 16));
    expect_read_error(ds, 3, want, "empty array (length 0)");
    stk_dataset_close(ds);

    /* An index no object has: record 1 points at object 77. */
    uint8_t idx[4] = {77, 0, 0, 0};
    patch(p, elems + 16 + 12, idx, 4);
    ds = open_ok(p);
    snprintf(want, sizeof want, "record 1 (element at byte %llu, global heap collection at byte "
             "%llu, object 77)", (unsigned long long)(elems + 16), (unsigned long long)coll0);
    expect_read_error(ds, 1, want, "holds no object with its index");
    check_vlen(ds, 1); /* record 0 is fine */
    stk_dataset_close(ds);

    /* Object 1 (record 0) of collection 0 with a size past the collection. */
    uint8_t big[8] = {0, 0, 0, 0, 0, 1, 0, 0};
    patch(p, coll0 + 16 + 8, big, 8);
    ds = open_ok(p);
    expect_read_error(ds, 0, "record 0", "an object's size runs past the collection");
    stk_dataset_close(ds);

    /* Record 9's collection without its signature. */
    patch(p, coll9, "GCOX", 4);
    ds = open_ok(p);
    snprintf(want, sizeof want, "global heap collection at byte %llu", (unsigned long long)coll9);
    expect_read_error(ds, 9, want, "no \"GCOL\" signature");
    stk_dataset_close(ds);

    /* A collection address past the end of the file (libhdf5 refuses a
     * file cut short at open, so the reader's own check is reached through
     * an address). */
    p = tu_path("heap_far.h5");
    elems = write_vlen(p, CONTIG, 20, 0, UINT64_MAX);
    uint8_t far[8] = {0, 0, 0, 0x40, 0, 0, 0, 0};
    patch(p, elems + 19 * 16 + 4, far, 8);
    ds = open_ok(p);
    expect_read_error(ds, 19, "global heap collection at byte 1073741824",
                      "lies past the end of the file");
    check_vlen(ds, 19);
    stk_dataset_close(ds);
}

static void test_truncated(void **state)
{
    (void)state;
    char uri[512];
    size_t size;
    const char *p = tu_path("cut.h5");
    write_fixed(p, CONTIG, 30, 4, H5T_STD_U8LE);
    uint8_t *d = tu_read_file(p, &size);
    tu_write_file(p, d, size - 100);
    snprintf(uri, sizeof uri, "hdf5:%s", p);
    /* libhdf5 refuses a file shorter than the end of its address space
     * ("truncated file"); the reader checks the data's extent too */
    stk_dataset *ds = NULL;
    int rc = stk_dataset_open(uri, NULL, &ds);
    assert_int_equal(rc, STK_EFORMAT);
    assert_non_null(strstr(stk_errmsg(), p));
    assert_non_null(strstr(stk_errmsg(), "truncated"));
    free(d);
}

static void test_truncated_while_open(void **state)
{
    (void)state;
    const char *p = tu_path("shrink.h5");
    size_t size;
    write_fixed(p, CONTIG, 30, 4, H5T_STD_U8LE);
    uint8_t *d = tu_read_file(p, &size);
    free(d);
    stk_dataset *ds = open_ok(p);
    assert_int_equal(truncate(p, 4096), 0); /* record 29 lies past 4096 */
    void *data = NULL;
    size_t n;
    int rc = stk_dataset_read_field(ds, 29, NULL, &data, &n, NULL);
    assert_int_equal(rc, STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "record 29"));
    assert_non_null(strstr(stk_errmsg(), "truncated while open"));
    stk_dataset_close(ds);
}

static void test_wrong_datasets(void **state)
{
    (void)state;
    char uri[600];
    const char *p = tu_path("f32.h5");
    write_fixed(p, CONTIG, 4, 4, H5T_IEEE_F32LE);
    expect_open_error(p, STK_EUNSUPPORTED, "images dataset /images has type float32");
    p = tu_path("i16.h5");
    write_fixed(p, CONTIG, 4, 4, H5T_STD_I16LE);
    expect_open_error(p, STK_EUNSUPPORTED, "images dataset /images has type int16");
    p = tu_path("rank2.h5");
    write_fixed(p, CONTIG, 4, 2, H5T_STD_U8LE);
    expect_open_error(p, STK_EFORMAT, "images dataset /images of uint8 has rank 2");

    /* labels: float, uint64, rank 2, count mismatch, missing */
    p = tu_path("labels.h5");
    write_fixed(p, CONTIG, 4, 4, H5T_STD_U8LE);
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    write_labels(f, "/lf", H5T_IEEE_F64LE, 4, 1);
    write_labels(f, "/lu64", H5T_STD_U64LE, 4, 1);
    write_labels(f, "/l2", H5T_STD_I32LE, 4, 2);
    write_labels(f, "/l5", H5T_STD_I32LE, 5, 1);
    H5Fclose(f);
    snprintf(uri, sizeof uri, "hdf5:%s?labels=/lf", p);
    expect_open_error(uri, STK_EUNSUPPORTED, "labels dataset /lf holds float64 values: float "
                                             "labels are refused");
    snprintf(uri, sizeof uri, "hdf5:%s?labels=lu64", p);
    expect_open_error(uri, STK_EUNSUPPORTED, "labels dataset /lu64 has type uint64");
    snprintf(uri, sizeof uri, "hdf5:%s?labels=/l2", p);
    expect_open_error(uri, STK_EFORMAT, "labels dataset /l2 has rank 2");
    snprintf(uri, sizeof uri, "hdf5:%s?labels=/l5", p);
    expect_open_error(uri, STK_EFORMAT, "labels dataset /l5 holds 5 labels but images dataset "
                                        "/images holds 4 images");
    snprintf(uri, sizeof uri, "hdf5:%s?labels=/nothing", p);
    expect_open_error(uri, STK_EFORMAT, "no labels dataset /nothing");
    snprintf(uri, sizeof uri, "hdf5:%s?images=/a/b", p);
    expect_open_error(uri, STK_EFORMAT, "no images dataset /a/b");
    snprintf(uri, sizeof uri, "hdf5:%s?images=/labels", p); /* int16 labels as images */
    expect_open_error(uri, STK_EUNSUPPORTED, "images dataset /labels has type int16");

    /* the query */
    snprintf(uri, sizeof uri, "hdf5:%s?image=/x", p);
    expect_open_error(uri, STK_EINVAL, "unknown query key 'image'");
    snprintf(uri, sizeof uri, "hdf5:%s?images=/x&images=/y", p);
    expect_open_error(uri, STK_EINVAL, "query key 'images' given twice");
    snprintf(uri, sizeof uri, "hdf5:%s?images", p);
    expect_open_error(uri, STK_EINVAL, "has no '=value'");
    snprintf(uri, sizeof uri, "hdf5:%s?labels=", p);
    expect_open_error(uri, STK_EINVAL, "needs a dataset path");

    /* vlen of int32 */
    p = tu_path("vlen32.h5");
    f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t one = 1;
    hid_t s = H5Screate_simple(1, &one, NULL);
    hid_t t = H5Tvlen_create(H5T_NATIVE_INT32);
    hid_t ds = H5Dcreate2(f, "/images", t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(ds);
    H5Tclose(t);
    H5Sclose(s);
    H5Fclose(f);
    expect_open_error(p, STK_EUNSUPPORTED, "has type variable-length int32");

    /* not HDF5 at all, and empty */
    p = tu_path("text.h5");
    tu_write_file(p, "just some text, long enough to look for a signature", 51);
    expect_open_error(p, STK_EFORMAT, "not an HDF5 file (no HDF5 signature");
    p = tu_path("empty.h5");
    tu_write_file(p, "", 0);
    expect_open_error(p, STK_EFORMAT, "not an HDF5 file (empty file)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixed_arrays),      cmocka_unit_test(test_fixed_chunked_gzip),
        cmocka_unit_test(test_vlen_records),      cmocka_unit_test(test_threads),
        cmocka_unit_test(test_heap_damage),       cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_truncated_while_open), cmocka_unit_test(test_wrong_datasets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else /* built without libhdf5 */

static void test_refused_without_libhdf5(void **state)
{
    (void)state;
    const char *p = tu_path("x.h5");
    stk_dataset *ds = NULL;
    tu_write_file(p, "\211HDF\r\n\032\n", 8);
    assert_int_equal(stk_dataset_open(p, NULL, &ds), STK_EUNSUPPORTED);
    assert_non_null(strstr(stk_errmsg(), "no libhdf5"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_refused_without_libhdf5)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
