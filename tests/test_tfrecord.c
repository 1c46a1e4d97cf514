/*
 * test_tfrecord.c — the tfrecord: reader, on files built byte by byte here:
 * tf.train.Example messages encoded by a small protobuf writer of the
 * test's own, framed with a bitwise CRC-32C (not the library's). Checked:
 * every image byte and label through the public API, the URI forms and
 * detection, custom keys, packed and unpacked labels, protobuf's
 * last-wins rules; the index from a scan, from the cache (and a stale,
 * damaged or ill-tiled cache rebuilt with its reason), from a DALI
 * tfrecord2idx index (and every mismatch of one refused); damage at open
 * (truncated header, a length past the end, a length CRC mismatch) and at
 * read (a data CRC mismatch under each verify policy, malformed Examples of
 * every kind, missing keys, float labels), each with its code and message.
 * tests/python/test_tfrecord_reader.py checks the reader against files
 * written with protobuf's own serializer.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "stoker/stoker.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

/* --- an independent writer ------------------------------------------------ */

static uint32_t crc32c_bitwise(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ ((c & 1) ? 0x82f63b78u : 0);
    }
    return c ^ 0xffffffffu;
}

static uint32_t masked(const uint8_t *p, size_t n)
{
    uint32_t c = crc32c_bitwise(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void put_msg(tu_buf *b, uint32_t field, const tu_buf *m) { tu_pb_bytes(b, field, m->d, m->n); }

/* Feature kinds, as the builder writes them. */
enum { K_BYTES, K_INT64_PACKED, K_INT64_UNPACKED, K_FLOAT, K_EMPTY_FEATURE };

/* One map entry {key, Feature{list}} appended to `features`. */
static void feature(tu_buf *features, const char *key, int kind, const void *val, size_t n)
{
    tu_buf list = {.n = 0}, feat = {.n = 0}, entry = {.n = 0};
    if (kind == K_BYTES) {
        tu_pb_bytes(&list, 1, val, n);
        put_msg(&feat, 1, &list);
    } else if (kind == K_INT64_PACKED || kind == K_INT64_UNPACKED) {
        const int64_t *v = val;
        tu_buf packed = {.n = 0};
        for (size_t i = 0; i < n; i++) {
            if (kind == K_INT64_PACKED) {
                tu_put_varint(&packed, (uint64_t)v[i]);
            } else {
                tu_put_varint(&list, 1 << 3 | 0);
                tu_put_varint(&list, (uint64_t)v[i]);
            }
        }
        if (kind == K_INT64_PACKED)
            put_msg(&list, 1, &packed);
        put_msg(&feat, 3, &list);
    } else if (kind == K_FLOAT) {
        tu_buf packed = {.n = 0};
        tu_put_le(&packed, 0x3fc00000u, 4); /* 1.5f */
        put_msg(&list, 1, &packed);
        put_msg(&feat, 2, &list);
    }
    tu_pb_bytes(&entry, 1, key, strlen(key));
    put_msg(&entry, 2, &feat);
    put_msg(features, 1, &entry);
}

/* Example{features} of an image and a label under the default keys. */
static void example(tu_buf *ex, const char *img, int64_t label)
{
    tu_buf fs = {.n = 0};
    feature(&fs, "image/encoded", K_BYTES, img, strlen(img));
    feature(&fs, "image/class/label", K_INT64_PACKED, &label, 1);
    ex->n = 0;
    put_msg(ex, 1, &fs);
}

/* Append one framed record of `data` to the file buffer. */
static void frame(tu_buf *file, const uint8_t *data, size_t n)
{
    uint8_t len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (uint8_t)((uint64_t)n >> (8 * i));
    tu_put(file, len, 8);
    tu_put_le(file, masked(len, 8), 4);
    tu_put(file, data, n);
    tu_put_le(file, masked(data, n), 4);
}

/* A file of `n` records: image "img-F-I", label F * 100 + I; offsets out. */
static void records_file(tu_buf *file, int fileno, int n, uint64_t *offsets)
{
    file->n = 0;
    for (int i = 0; i < n; i++) {
        char img[32];
        tu_buf ex;
        snprintf(img, sizeof img, "img-%d-%d", fileno, i);
        example(&ex, img, fileno * 100 + i);
        if (offsets)
            offsets[i] = file->n;
        frame(file, ex.d, ex.n);
    }
}

static const char *dir_with(const char *name)
{
    const char *d = tu_path(name);
    mkdir(d, 0755);
    return d;
}

static char *join(const char *a, const char *b)
{
    char *p = malloc(strlen(a) + strlen(b) + 2);
    sprintf(p, "%s/%s", a, b);
    return p;
}

static void write_buf(const char *path, const tu_buf *b) { tu_write_file(path, b->d, b->n); }

/* --- checks ----------------------------------------------------------------- */

static stk_dataset *open_ok(const char *uri)
{
    stk_dataset *ds = NULL;
    if (stk_dataset_open(uri, NULL, &ds) != 0)
        fail_msg("open %s: %s", uri, stk_errmsg());
    return ds;
}

static void expect_open_fail(const char *uri, int code, const char *a, const char *b)
{
    stk_dataset *ds = NULL;
    int rc = stk_dataset_open(uri, NULL, &ds);
    if (rc != code)
        fail_msg("%s: rc %d, expected %d (%s)", uri, rc, code, stk_errmsg());
    assert_null(ds);
    if (a && !strstr(stk_errmsg(), a))
        fail_msg("%s: message '%s' lacks '%s'", uri, stk_errmsg(), a);
    if (b && !strstr(stk_errmsg(), b))
        fail_msg("%s: message '%s' lacks '%s'", uri, stk_errmsg(), b);
}

/* Sample i's encoded bytes and label are `img` and `label`. */
static void expect_sample(stk_dataset *ds, uint64_t i, const char *img, int64_t label)
{
    void *data = NULL;
    size_t size = 0;
    int64_t l = -99;
    if (stk_dataset_read_field(ds, i, NULL, &data, &size, NULL) != 0)
        fail_msg("read_field %llu: %s", (unsigned long long)i, stk_errmsg());
    assert_int_equal(size, strlen(img));
    assert_memory_equal(data, img, size);
    stk_free(data);
    if (stk_dataset_label(ds, i, &l) != 0)
        fail_msg("label %llu: %s", (unsigned long long)i, stk_errmsg());
    assert_int_equal(l, label);
    l = -99;
    assert_int_equal(stk_dataset_read_field(ds, i, "label", &data, &size, NULL), 0);
    assert_int_equal(size, 8);
    memcpy(&l, data, 8);
    stk_free(data);
    assert_int_equal(l, label);
}

/* Reading sample i fails with STK_EDATA and a message holding a, b. */
static void expect_read_fail(stk_dataset *ds, uint64_t i, const char *a, const char *b)
{
    void *data = NULL;
    size_t size = 0;
    int rc = stk_dataset_read_field(ds, i, NULL, &data, &size, NULL);
    if (rc != STK_EDATA)
        fail_msg("sample %llu: rc %d, expected STK_EDATA (%s)", (unsigned long long)i, rc,
                 stk_errmsg());
    if (a && !strstr(stk_errmsg(), a))
        fail_msg("message '%s' lacks '%s'", stk_errmsg(), a);
    if (b && !strstr(stk_errmsg(), b))
        fail_msg("message '%s' lacks '%s'", stk_errmsg(), b);
}

static void expect_note(stk_dataset *ds, const char *a)
{
    const char *note = stk_dataset_metadata(ds, "index");
    assert_non_null(note);
    if (!strstr(note, a))
        fail_msg("index note '%s' lacks '%s'", note, a);
}

/* --- tests ------------------------------------------------------------------ */

static void test_values_and_uri_forms(void **state)
{
    (void)state;
    const char *d = dir_with("forms");
    static const char *const names[] = {"a.tfrecord", "b.tfrec", "c.tfrecords"};
    tu_buf file;
    for (int f = 0; f < 3; f++) {
        records_file(&file, f, 3 + f, NULL);
        char *p = join(d, names[f]);
        write_buf(p, &file);
        free(p);
    }
    char *other = join(d, "notes.txt");
    tu_write_file(other, "x", 1);
    free(other);
    char uri[1200];
    /* Directory (prefixed and detected), glob (the cache files the first
     * open wrote beside the data are not data), a detected glob. */
    const char *forms[] = {"tfrecord:%s", "%s", "tfrecord:%s/[abc]*", "%s/a*.tfrecord"};
    for (int k = 0; k < 4; k++) {
        snprintf(uri, sizeof uri, forms[k], d);
        stk_dataset *ds = open_ok(uri);
        stk_dataset_info info;
        stk_dataset_info_get(ds, &info);
        assert_string_equal(info.format, "tfrecord");
        assert_int_equal(info.count, k == 3 ? 3 : 12);
        for (int f = 0, i = 0; f < (k == 3 ? 1 : 3); f++)
            for (int r = 0; r < 3 + f; r++, i++) {
                char img[32];
                snprintf(img, sizeof img, "img-%d-%d", f, r);
                expect_sample(ds, (uint64_t)i, img, f * 100 + r);
            }
        stk_dataset_close(ds);
    }
    /* One file, and a bare file without an extension detected by content. */
    records_file(&file, 7, 2, NULL);
    const char *bare = tu_path("train-00000-of-00001");
    write_buf(bare, &file);
    stk_dataset *ds = open_ok(bare);
    expect_sample(ds, 1, "img-7-1", 701);
    stk_dataset_close(ds);
    snprintf(uri, sizeof uri, "tfrecord:%s/b.tfrec", d);
    ds = open_ok(uri);
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    assert_int_equal(info.count, 4);
    expect_sample(ds, 3, "img-1-3", 103);
    stk_dataset_close(ds);
}

static void test_protobuf_rules(void **state)
{
    (void)state;
    tu_buf fs = {.n = 0}, ex = {.n = 0}, file = {.n = 0}, junk = {.n = 0};
    /* Unknown fields everywhere, unpacked labels, several values, a key
     * given twice (the last wins), custom keys. */
    tu_put_varint(&ex, 5 << 3 | 0); /* unknown varint field of Example */
    tu_put_varint(&ex, 42);
    int64_t labels[3] = {-5, 9, 10};
    feature(&fs, "image/encoded", K_BYTES, "first", 5);
    feature(&fs, "image/encoded", K_BYTES, "second", 6);
    feature(&fs, "image/class/label", K_INT64_UNPACKED, labels, 3);
    feature(&fs, "other", K_FLOAT, NULL, 0);
    tu_pb_bytes(&junk, 9, "zz", 2); /* unknown field inside Features */
    tu_put(&fs, junk.d, junk.n);
    put_msg(&ex, 1, &fs);
    frame(&file, ex.d, ex.n);
    /* Custom keys. */
    fs.n = ex.n = 0;
    int64_t cls = 3;
    feature(&fs, "jpg", K_BYTES, "JJ", 2);
    feature(&fs, "cls", K_INT64_PACKED, &cls, 1);
    put_msg(&ex, 1, &fs);
    frame(&file, ex.d, ex.n);
    const char *p = tu_path("rules.tfrecord");
    write_buf(p, &file);
    char uri[1200];
    snprintf(uri, sizeof uri, "tfrecord:%s?cache=off", p);
    stk_dataset *ds = open_ok(uri);
    expect_sample(ds, 0, "second", -5);
    expect_read_fail(ds, 1, "rules.tfrecord: record 1 (byte ", "no feature 'image/encoded' (the "
                     "image_key; it has 'jpg', 'cls')");
    stk_dataset_close(ds);
    snprintf(uri, sizeof uri, "tfrecord:%s?image_key=jpg&label_key=cls&verify=always&cache=off",
             p);
    ds = open_ok(uri);
    expect_sample(ds, 1, "JJ", 3);
    expect_read_fail(ds, 0, "record 0 (byte 0)", "no feature 'jpg'");
    stk_dataset_close(ds);
    /* Query errors. */
    snprintf(uri, sizeof uri, "tfrecord:%s?imagekey=x", p);
    expect_open_fail(uri, STK_EINVAL, "unknown query key 'imagekey'", "image_key");
    snprintf(uri, sizeof uri, "tfrecord:%s?verify=sometimes", p);
    expect_open_fail(uri, STK_EINVAL, "unknown value 'sometimes' for query key 'verify'", NULL);
    snprintf(uri, sizeof uri, "tfrecord:%s?image_key=a&image_key=b", p);
    expect_open_fail(uri, STK_EINVAL, "query key 'image_key' given twice", NULL);
    snprintf(uri, sizeof uri, "tfrecord:%s?label_key=", p);
    expect_open_fail(uri, STK_EINVAL, "'label_key' has an empty value", NULL);
    snprintf(uri, sizeof uri, "tfrecord:%s?index=%s/nonexistent", p, tu_tmpdir());
    expect_open_fail(uri, STK_ENOENT, "no such directory", NULL);
    snprintf(uri, sizeof uri, "tfrecord:%s/none-*.tfrecord", tu_tmpdir());
    expect_open_fail(uri, STK_ENOENT, NULL, NULL);
}

/* A one-record file holding Example bytes `ex` (CRCs right). */
static void one_record(const char *path, const tu_buf *ex)
{
    tu_buf file = {.n = 0};
    char pad[] = "pad";
    tu_buf good;
    example(&good, pad, 1);
    frame(&file, good.d, good.n); /* record 0 is fine */
    frame(&file, ex->d, ex->n);   /* record 1 is the case */
    write_buf(path, &file);
}

static void test_malformed_examples(void **state)
{
    (void)state;
    const char *p = tu_path("bad.tfrecord");
    char uri[1200];
    snprintf(uri, sizeof uri, "tfrecord:%s?cache=off", p);
    tu_buf ex, fs, entry, feat, list;
    int64_t one = 1;

    /* Example.features as a varint. */
    ex.n = 0;
    tu_put_varint(&ex, 1 << 3 | 0);
    tu_put_varint(&ex, 7);
    one_record(p, &ex);
    stk_dataset *ds = open_ok(uri);
    expect_sample(ds, 0, "pad", 1);
    expect_read_fail(ds, 1, "bad.tfrecord: record 1 (byte ",
                     "Example.features has the wrong wire type (not a message) (at byte 0 of");
    stk_dataset_close(ds);

    /* A map entry as fixed32. */
    fs.n = ex.n = 0;
    tu_put_varint(&fs, 1 << 3 | 5);
    tu_put_le(&fs, 0, 4);
    put_msg(&ex, 1, &fs);
    one_record(p, &ex);
    ds = open_ok(uri);
    expect_read_fail(ds, 1, "a Features map entry has the wrong wire type", "(at byte 2 of");
    stk_dataset_close(ds);

    /* A key as a varint. */
    entry.n = fs.n = ex.n = 0;
    tu_put_varint(&entry, 1 << 3 | 0);
    tu_put_varint(&entry, 3);
    put_msg(&fs, 1, &entry);
    put_msg(&ex, 1, &fs);
    one_record(p, &ex);
    ds = open_ok(uri);
    expect_read_fail(ds, 1, "a feature's key has the wrong wire type", NULL);
    stk_dataset_close(ds);

    /* A length past the end of the Example. */
    ex.n = 0;
    tu_put_varint(&ex, 1 << 3 | 2);
    tu_put_varint(&ex, 100);
    tu_put(&ex, "abc", 3);
    one_record(p, &ex);
    ds = open_ok(uri);
    expect_read_fail(ds, 1, "malformed tf.train.Example: a length runs past the end of the "
                            "message (at byte 0",
                     NULL);
    stk_dataset_close(ds);

    /* A length past the end of a nested message (the Features). */
    fs.n = ex.n = 0;
    tu_put_varint(&fs, 1 << 3 | 2);
    tu_put_varint(&fs, 50);
    tu_put(&fs, "k", 1);
    put_msg(&ex, 1, &fs);
    one_record(p, &ex);
    ds = open_ok(uri);
    expect_read_fail(ds, 1, "a length runs past the end of the message (at byte 2 of", NULL);
    stk_dataset_close(ds);

    /* A group wire type. */
    ex.n = 0;
    tu_put_varint(&ex, 2 << 3 | 3);
    one_record(p, &ex);
    ds = open_ok(uri);
    expect_read_fail(ds, 1, "a group (wire type 3/4)", NULL);
    stk_dataset_close(ds);

    /* Float label, bytes label, empty lists, an empty Feature, image as int64. */
    struct {
        int img_kind, lab_kind;
        size_t lab_n;
        const char *why;
    } kinds[] = {
        {K_BYTES, K_FLOAT, 1,
         "feature 'image/class/label' (the label_key) holds a float_list, an int64_list "
         "expected"},
        {K_BYTES, K_BYTES, 1,
         "feature 'image/class/label' (the label_key) holds a bytes_list, an int64_list "
         "expected"},
        {K_BYTES, K_INT64_PACKED, 0, "feature 'image/class/label' (the label_key) has an empty "
                                     "int64_list"},
        {K_BYTES, K_EMPTY_FEATURE, 0, "(the label_key) holds an empty Feature (no list)"},
        {K_INT64_PACKED, K_INT64_PACKED, 1,
         "feature 'image/encoded' (the image_key) holds an int64_list, a bytes_list expected"},
        {K_BYTES + 100, K_INT64_PACKED, 1, "feature 'image/encoded' (the image_key) has an empty "
                                           "bytes_list"},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        fs.n = ex.n = 0;
        if (kinds[k].img_kind == K_BYTES + 100) {
            /* Feature{bytes_list{}}: no values. */
            feat.n = list.n = entry.n = 0;
            put_msg(&feat, 1, &list);
            tu_pb_bytes(&entry, 1, "image/encoded", 13);
            put_msg(&entry, 2, &feat);
            put_msg(&fs, 1, &entry);
        } else {
            feature(&fs, "image/encoded", kinds[k].img_kind,
                    kinds[k].img_kind == K_BYTES ? (const void *)"im" : (const void *)&one,
                    kinds[k].img_kind == K_BYTES ? 2 : 1);
        }
        feature(&fs, "image/class/label", kinds[k].lab_kind,
                kinds[k].lab_kind == K_BYTES ? (const void *)"7" : (const void *)&one,
                kinds[k].lab_n);
        put_msg(&ex, 1, &fs);
        one_record(p, &ex);
        ds = open_ok(uri);
        expect_read_fail(ds, 1, "bad.tfrecord: record 1 (byte ", kinds[k].why);
        int64_t l;
        if (kinds[k].img_kind == K_BYTES) /* the label alone fails the same way */
            assert_int_equal(stk_dataset_label(ds, 1, &l), STK_EDATA);
        stk_dataset_close(ds);
    }

    /* Missing label key; an empty Example. */
    fs.n = ex.n = 0;
    feature(&fs, "image/encoded", K_BYTES, "im", 2);
    put_msg(&ex, 1, &fs);
    one_record(p, &ex);
    ds = open_ok(uri);
    expect_read_fail(ds, 1, "no feature 'image/class/label' (the label_key; it has "
                            "'image/encoded')",
                     NULL);
    stk_dataset_close(ds);
    ex.n = 0;
    one_record(p, &ex);
    ds = open_ok(uri);
    expect_read_fail(ds, 1, "no feature 'image/encoded' (the image_key; it has no features)",
                     NULL);
    stk_dataset_close(ds);
}

/* Flip one byte of a file in place (the mapping sees it: MAP_SHARED). */
static void poke(const char *path, uint64_t off, uint8_t x)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t c;
    assert_int_equal(pread(fd, &c, 1, (off_t)off), 1);
    c ^= x;
    assert_int_equal(pwrite(fd, &c, 1, (off_t)off), 1);
    close(fd);
}

static void test_data_crc_and_verify(void **state)
{
    (void)state;
    const char *p = tu_path("crc.tfrecord");
    tu_buf file;
    uint64_t off[4];
    records_file(&file, 0, 4, off);
    /* Damage record 2's image bytes ("img-0-2" -> "img-0-3"): the Example
     * still parses, only the CRC can tell. */
    uint8_t *img = memmem(file.d + off[2], file.n - off[2], "img-0-2", 7);
    assert_non_null(img);
    img[6] = '3';
    write_buf(p, &file);
    char uri[1200], want[1400];
    snprintf(want, sizeof want, "crc.tfrecord: record 2 (byte %llu): the data's CRC does not "
                                "match",
             (unsigned long long)off[2]);
    snprintf(uri, sizeof uri, "tfrecord:%s?verify=off&cache=off", p);
    stk_dataset *ds = open_ok(uri);
    expect_sample(ds, 2, "img-0-3", 2); /* unverified: the damaged bytes */
    stk_dataset_close(ds);
    for (int k = 0; k < 4; k++) {
        snprintf(uri, sizeof uri, "tfrecord:%s?verify=%s&cache=off%s", p,
                 k % 2 ? "always" : "first", k >= 2 ? "&io=pread" : "");
        ds = open_ok(uri);
        expect_read_fail(ds, 2, want, "the record is damaged");
        expect_read_fail(ds, 2, want, NULL); /* a failure is not remembered as verified */
        expect_sample(ds, 1, "img-0-1", 1);
        stk_dataset_close(ds);
    }
    /* io=pread: the same bytes, read into the scratch. */
    snprintf(uri, sizeof uri, "tfrecord:%s?verify=off&cache=off&io=pread", p);
    ds = open_ok(uri);
    expect_sample(ds, 2, "img-0-3", 2);
    expect_sample(ds, 3, "img-0-3", 3);
    stk_dataset_close(ds);
    /* Default policy: first. A record verified once is not checked again;
     * under always it is. The file is changed under the open dataset. */
    records_file(&file, 0, 4, off);
    write_buf(p, &file);
    snprintf(uri, sizeof uri, "tfrecord:%s?cache=off", p);
    ds = open_ok(uri);
    snprintf(uri, sizeof uri, "tfrecord:%s?cache=off&verify=always", p);
    stk_dataset *always = open_ok(uri);
    expect_sample(ds, 3, "img-0-3", 3);
    expect_sample(always, 3, "img-0-3", 3);
    img = memmem(file.d + off[3], file.n - off[3], "img-0-3", 7);
    poke(p, (uint64_t)(img - file.d) + 6, '3' ^ '4');
    expect_sample(ds, 3, "img-0-4", 3);
    expect_read_fail(always, 3, "record 3 (byte", "the data's CRC does not match");
    /* The length header changed behind the index. */
    poke(p, off[1], 1);
    expect_read_fail(ds, 1, "record 1 (byte", "the length header says");
    stk_dataset_close(ds);
    stk_dataset_close(always);
}

static void test_damage_at_open(void **state)
{
    (void)state;
    const char *p = tu_path("damaged.tfrecord");
    char uri[1200], want[1400];
    tu_buf file;
    uint64_t off[3];
    for (int io = 0; io < 2; io++) {
        snprintf(uri, sizeof uri, "tfrecord:%s?cache=off%s", p, io ? "&io=pread" : "");

        /* A length CRC mismatch: the framing is lost. */
        records_file(&file, 0, 3, off);
        file.d[off[1] + 2] ^= 0x40;
        write_buf(p, &file);
        snprintf(want, sizeof want, "damaged.tfrecord: record 1 (byte %llu): the length's CRC does "
                                    "not match",
                 (unsigned long long)off[1]);
        expect_open_fail(uri, STK_EFORMAT, want, "the framing is lost from here on");
        /* A length CRC right for a length past the end (truncated file). */
        records_file(&file, 0, 3, off);
        file.n -= 5;
        write_buf(p, &file);
        snprintf(want, sizeof want, "damaged.tfrecord: record 2 (byte %llu): its length of",
                 (unsigned long long)off[2]);
        expect_open_fail(uri, STK_EFORMAT, want, "runs past the end of the file");
        /* Cut inside the last record's length header. */
        records_file(&file, 0, 3, off);
        file.n = off[2] + 7;
        write_buf(p, &file);
        expect_open_fail(uri, STK_EFORMAT, "record 2 (byte", "the file ends inside the record's "
                                                             "12-byte length header (truncated)");
        /* A huge length whose CRC is right. */
        records_file(&file, 0, 3, off);
        for (int i = 0; i < 8; i++)
            file.d[off[1] + i] = 0xff;
        uint32_t c = masked(file.d + off[1], 8);
        for (int i = 0; i < 4; i++)
            file.d[off[1] + 8 + i] = (uint8_t)(c >> (8 * i));
        write_buf(p, &file);
        expect_open_fail(uri, STK_EFORMAT, "record 1 (byte", "runs past the end of the file");
        /* Empty. */
        tu_write_file(p, "", 0);
        expect_open_fail(uri, STK_EFORMAT, "no records", NULL);
    }
}

/* A file cut while open: its lost records are STK_EDATA, mapped or read. */
static void test_truncated_while_open(void **state)
{
    (void)state;
    const char *p = tu_path("cut.tfrecord");
    tu_buf file;
    uint64_t off[40];
    char uri[1200];
    for (int io = 0; io < 2; io++) {
        records_file(&file, 3, 40, off);
        write_buf(p, &file);
        snprintf(uri, sizeof uri, "tfrecord:%s?cache=off%s", p, io ? "&io=pread" : "");
        stk_dataset *ds = open_ok(uri);
        expect_sample(ds, 39, "img-3-39", 339);
        assert_int_equal(truncate(p, (off_t)off[1]), 0);
        expect_sample(ds, 0, "img-3-0", 300);
        expect_read_fail(ds, 39, "cut.tfrecord: record 39 (byte",
                         io ? "the file ends before the record's end" : "truncated while open");
        int64_t l;
        assert_int_equal(stk_dataset_label(ds, 38, &l), STK_EDATA);
        stk_dataset_close(ds);
    }
}

/* The cache file of FILE: FILE.stkidx. */
static void test_cache(void **state)
{
    (void)state;
    const char *d = dir_with("cache");
    char *p = join(d, "set.tfrecord"), *cpath = join(d, "set.tfrecord.stkidx");
    tu_buf file;
    uint64_t off[6];
    records_file(&file, 1, 5, off);
    write_buf(p, &file);
    char uri[1200];
    snprintf(uri, sizeof uri, "tfrecord:%s", p);
    stk_dataset *ds = open_ok(uri);
    expect_note(ds, "5 records, scanned");
    stk_dataset_close(ds);
    struct stat st;
    assert_int_equal(stat(cpath, &st), 0);
    assert_int_equal(st.st_size, 48 + 5 * 8 + 4);
    /* Its layout, checked byte by byte. */
    size_t n;
    uint8_t *c = tu_read_file(cpath, &n);
    assert_memory_equal(c, "STKTFIDX", 8);
    assert_int_equal(c[8], 1);
    uint64_t v;
    memcpy(&v, c + 16, 8);
    assert_int_equal(v, file.n);
    memcpy(&v, c + 40, 8);
    assert_int_equal(v, 5);
    for (int i = 0; i < 5; i++) {
        memcpy(&v, c + 48 + 8 * i, 8);
        assert_int_equal(v, off[i]);
    }
    uint32_t crc;
    memcpy(&crc, c + n - 4, 4);
    assert_int_equal(crc, crc32c_bitwise(c, n - 4));
    ds = open_ok(uri);
    expect_note(ds, "5 records from the cache");
    expect_sample(ds, 4, "img-1-4", 104);
    stk_dataset_close(ds);
    snprintf(uri, sizeof uri, "tfrecord:%s?io=pread", p); /* the probes by pread */
    ds = open_ok(uri);
    expect_note(ds, "5 records from the cache");
    expect_sample(ds, 3, "img-1-3", 103);
    stk_dataset_close(ds);
    snprintf(uri, sizeof uri, "tfrecord:%s", p);

    /* Damaged contents: noted, rebuilt, rewritten. */
    c[50] ^= 1;
    tu_write_file(cpath, c, n);
    ds = open_ok(uri);
    expect_note(ds, "its checksum does not match (damaged); indexed afresh");
    expect_note(ds, "5 records, scanned");
    expect_sample(ds, 2, "img-1-2", 102);
    stk_dataset_close(ds);
    ds = open_ok(uri);
    expect_note(ds, "from the cache");
    stk_dataset_close(ds);

    /* Offsets that do not tile the file, with a right checksum. */
    uint64_t bad = off[1] + 1;
    memcpy(c + 48 + 8, &bad, 8);
    crc = crc32c_bitwise(c, n - 4);
    memcpy(c + n - 4, &crc, 4);
    tu_write_file(cpath, c, n);
    ds = open_ok(uri);
    expect_note(ds, "its offsets do not tile the file");
    stk_dataset_close(ds);
    /* Wrong magic; a truncated cache. */
    tu_write_file(cpath, "STKTFIDY", 8);
    ds = open_ok(uri);
    expect_note(ds, "not a stoker TFRecord index");
    stk_dataset_close(ds);
    free(c);

    /* Stale: a record appended (size). */
    records_file(&file, 1, 6, off);
    write_buf(p, &file);
    ds = open_ok(uri);
    expect_note(ds, "stale: the file's size changed");
    expect_sample(ds, 5, "img-1-5", 105);
    stk_dataset_close(ds);
    /* Stale: same size, same mtime, other bytes at the end. */
    struct stat before;
    assert_int_equal(stat(p, &before), 0);
    file.d[file.n - 1] ^= 0xff; /* the last record's data CRC */
    write_buf(p, &file);
    struct timespec ts[2] = {before.st_atim, before.st_mtim};
    assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
    ds = open_ok(uri);
    expect_note(ds, "stale: the file's first or last bytes changed");
    stk_dataset_close(ds);
    /* Stale: touched (mtime). */
    ts[1].tv_nsec = (ts[1].tv_nsec + 1000) % 1000000000;
    assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
    ds = open_ok(uri);
    expect_note(ds, "stale: the file's modification time changed");
    stk_dataset_close(ds);

    /* cache=off writes none; index=DIR puts the cache there. */
    unlink(cpath);
    snprintf(uri, sizeof uri, "tfrecord:%s?cache=off", p);
    ds = open_ok(uri);
    stk_dataset_close(ds);
    assert_int_not_equal(stat(cpath, &st), 0);
    const char *idir = dir_with("cache-idx");
    snprintf(uri, sizeof uri, "tfrecord:%s?index=%s", p, idir);
    ds = open_ok(uri);
    stk_dataset_close(ds);
    char *incache = join(idir, "set.tfrecord.stkidx");
    assert_int_equal(stat(incache, &st), 0);
    assert_int_not_equal(stat(cpath, &st), 0);
    ds = open_ok(uri);
    expect_note(ds, "from the cache");
    stk_dataset_close(ds);
    /* A glob skips the cache files beside the data. */
    snprintf(uri, sizeof uri, "tfrecord:%s/set*", idir);
    expect_open_fail(uri, STK_ENOENT, "only index files", NULL);
    /* A cache that cannot be written (a directory in its place) is noted. */
    mkdir(cpath, 0755);
    snprintf(uri, sizeof uri, "tfrecord:%s", p);
    ds = open_ok(uri);
    expect_note(ds, "cache not");
    expect_sample(ds, 0, "img-1-0", 100);
    stk_dataset_close(ds);
    rmdir(cpath);
    /* The failed atomic write left no temporary file behind. */
    DIR *dh = opendir(d);
    assert_non_null(dh);
    struct dirent *e;
    while ((e = readdir(dh)))
        if (strstr(e->d_name, ".tmp-"))
            fail_msg("temporary file %s left behind", e->d_name);
    closedir(dh);
    free(incache);
    free(p);
    free(cpath);
}

static void write_text(const char *path, const char *text) { tu_write_file(path, text, strlen(text)); }

static void test_dali_index(void **state)
{
    (void)state;
    const char *d = dir_with("dali");
    char *p = join(d, "part.tfrecord"), *ipath = join(d, "part.tfrecord.idx");
    tu_buf file;
    uint64_t off[3];
    records_file(&file, 2, 3, off);
    write_buf(p, &file);
    uint64_t s0 = off[1], s1 = off[2] - off[1], s2 = file.n - off[2];
    char idx[512], uri[1200];
    snprintf(uri, sizeof uri, "tfrecord:%s?cache=off", p);
    /* The index as tfrecord2idx writes it. */
    snprintf(idx, sizeof idx, "0 %llu\n%llu %llu\n%llu %llu\n", (unsigned long long)s0,
             (unsigned long long)off[1], (unsigned long long)s1, (unsigned long long)off[2],
             (unsigned long long)s2);
    write_text(ipath, idx);
    stk_dataset *ds = open_ok(uri);
    expect_note(ds, "3 records from the DALI index");
    expect_sample(ds, 2, "img-2-2", 202);
    stk_dataset_close(ds);
    snprintf(uri, sizeof uri, "tfrecord:%s?cache=off&io=pread", p);
    ds = open_ok(uri);
    expect_note(ds, "3 records from the DALI index");
    expect_sample(ds, 1, "img-2-1", 201);
    stk_dataset_close(ds);
    snprintf(uri, sizeof uri, "tfrecord:%s?cache=off", p);
    /* STEM.idx, and index=DIR with the data file's own name. */
    unlink(ipath);
    char *stem = join(d, "part.idx");
    write_text(stem, idx);
    ds = open_ok(uri);
    expect_note(ds, "part.idx");
    stk_dataset_close(ds);
    unlink(stem);
    const char *idir = dir_with("dali-idx");
    char *named = join(idir, "part.tfrecord");
    write_text(named, idx);
    snprintf(uri, sizeof uri, "tfrecord:%s?cache=off&index=%s", p, idir);
    ds = open_ok(uri);
    expect_note(ds, "from the DALI index");
    stk_dataset_close(ds);
    unlink(named);

    /* Mismatches. */
    snprintf(uri, sizeof uri, "tfrecord:%s?cache=off", p);
    struct {
        const char *why;
    } bad[6];
    char t[6][256];
    snprintf(t[0], 256, "0 %llu\n%llu %llu\n", (unsigned long long)s0,
             (unsigned long long)off[2], (unsigned long long)s2);
    bad[0].why = "line 2: entry";
    snprintf(t[1], 256, "0 %llu\n%llu %llu\n%llu %llu\n", (unsigned long long)s0,
             (unsigned long long)off[1] - 1, (unsigned long long)s1, (unsigned long long)off[2],
             (unsigned long long)s2);
    bad[1].why = "overlaps the record before it";
    snprintf(t[2], 256, "0 %llu\n%llu %llu\n", (unsigned long long)s0,
             (unsigned long long)off[1], (unsigned long long)(s1 + s2 + 1));
    bad[2].why = "runs past the end of the file";
    snprintf(t[3], 256, "0 %llu\n%llu %llu\n", (unsigned long long)s0,
             (unsigned long long)off[1], (unsigned long long)(s1 + s2));
    bad[3].why = "disagrees with the length header there";
    snprintf(t[4], 256, "0 %llu\n%llu %llu\n", (unsigned long long)s0,
             (unsigned long long)off[1], (unsigned long long)s1);
    bad[4].why = "records after them are missing from the index";
    snprintf(t[5], 256, "0 %llu\nten 20\n", (unsigned long long)s0);
    bad[5].why = "line 2: not \"OFFSET SIZE\"";
    bad[0].why = "leaves a gap after the record before it";
    for (int k = 0; k < 6; k++) {
        write_text(ipath, t[k]);
        expect_open_fail(uri, STK_EFORMAT,
                         k == 4 ? "part.tfrecord.idx: its entries end at byte"
                                : "part.tfrecord.idx: line",
                         bad[k].why);
        if (k != 4 && k != 5 && !strstr(stk_errmsg(), "regenerate it with tfrecord2idx"))
            fail_msg("'%s' lacks the advice", stk_errmsg());
    }
    /* An entry at an offset with no record: both tile, the header's CRC fails. */
    records_file(&file, 2, 3, off);
    uint8_t *mid = file.d + off[1];
    mid[9] ^= 1; /* the length CRC of record 1 */
    write_buf(p, &file);
    write_text(ipath, idx);
    expect_open_fail(uri, STK_EFORMAT, "line 2: entry", "the length header there has a bad CRC");
    free(p);
    free(ipath);
    free(stem);
    free(named);
}

static void test_reader_table(void **state)
{
    (void)state;
    const char *form = NULL, *desc = NULL, *name;
    int found = 0;
    for (uint32_t i = 0; (name = stk_dataset_reader(i, &form, &desc)); i++)
        if (!strcmp(name, "tfrecord")) {
            found = 1;
            assert_non_null(strstr(form, "image_key"));
            assert_non_null(strstr(form, "verify=off|first|always"));
        }
    assert_true(found);
    /* A file that is not TFRecord is not detected as one. */
    const char *p = tu_path("not-a-record");
    write_text(p, "hello, this is text and not a record at all\n");
    stk_dataset *ds = NULL;
    assert_int_not_equal(stk_dataset_open(p, NULL, &ds), 0);
    assert_null(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_and_uri_forms),
        cmocka_unit_test(test_protobuf_rules),
        cmocka_unit_test(test_malformed_examples),
        cmocka_unit_test(test_data_crc_and_verify),
        cmocka_unit_test(test_damage_at_open),
        cmocka_unit_test(test_truncated_while_open),
        cmocka_unit_test(test_cache),
        cmocka_unit_test(test_dali_index),
        cmocka_unit_test(test_reader_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
