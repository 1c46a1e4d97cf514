/*
 * test_wds.c — the wds: reader on tar files built byte by byte here (512-
 * byte headers as POSIX ustar, GNU tar and pax lay them out, checksums
 * computed by hand): every image byte and label of the samples, WebDataset's
 * grouping rule on tricky names, long names (GNU 'L', ustar prefix, pax
 * path and size), base-256 sizes, signed checksums, brace patterns and
 * detection, and each kind of damage with its code, the tar, the byte
 * offset and the reason in the message. tests/python/test_wds_reader.py
 * checks the same reader against tars written by Python's tarfile.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "format/dataset.h"
#include "stoker/stoker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

/* ------------------------------------------------------------------------ */
/* A tar writer                                                              */
/* ------------------------------------------------------------------------ */

typedef struct tb {
    uint8_t d[1 << 20];
    size_t n;
} tb;

enum { V7, USTAR, GNU };

static void tb_raw(tb *t, const void *p, size_t n)
{
    assert_true(t->n + n <= sizeof t->d);
    memcpy(t->d + t->n, p, n);
    t->n += n;
}

static void tb_pad(tb *t)
{
    while (t->n % 512)
        t->d[t->n++] = 0;
}

/* Recompute the checksum of the header at `off` ("%06o\0 " as tar writes). */
static void tb_sum(tb *t, size_t off)
{
    uint8_t *h = t->d + off;
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
}

/* A header; returns its offset. `prefix` only with USTAR. */
static size_t tb_header(tb *t, const char *name, const char *prefix, uint64_t size, char type,
                        int fmt)
{
    size_t off = t->n;
    uint8_t h[512] = {0};
    memcpy(h, name, strlen(name) < 100 ? strlen(name) : 100);
    memcpy(h + 100, "0000644", 8);
    memcpy(h + 108, "0001750", 8);
    memcpy(h + 116, "0001750", 8);
    snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
    memcpy(h + 136, "14567034562", 12);
    h[156] = (uint8_t)type;
    if (fmt == USTAR)
        memcpy(h + 257, "ustar\0" "00", 8);
    else if (fmt == GNU)
        memcpy(h + 257, "ustar  \0", 8);
    if (prefix)
        memcpy(h + 345, prefix, strlen(prefix));
    tb_raw(t, h, 512);
    tb_sum(t, off);
    return off;
}

/* A regular member (type '0'); returns its header's offset. */
static size_t tb_file(tb *t, const char *name, const void *data, size_t n, int fmt)
{
    size_t off = tb_header(t, name, NULL, n, '0', fmt);
    tb_raw(t, data, n);
    tb_pad(t);
    return off;
}

static size_t tb_str(tb *t, const char *name, const char *text)
{
    return tb_file(t, name, text, strlen(text), USTAR);
}

/* A meta member ('L', 'x', 'g') with `data`. */
static size_t tb_meta(tb *t, char type, const char *data, size_t n)
{
    size_t off = tb_header(t, type == 'L' ? "././@LongLink" : "PaxHeader", NULL, n, type,
                           type == 'L' ? GNU : USTAR);
    tb_raw(t, data, n);
    tb_pad(t);
    return off;
}

/* "LEN key=value\n" with LEN counting itself. */
static size_t pax_record(char *out, const char *key, const char *value)
{
    size_t body = strlen(key) + strlen(value) + 3, len = body + 1;
    while (snprintf(NULL, 0, "%zu", len) + body != len)
        len++;
    return (size_t)sprintf(out, "%zu %s=%s\n", len, key, value);
}

static void tb_end(tb *t)
{
    uint8_t z[1024] = {0};
    tb_raw(t, z, sizeof z);
}

static const char *tb_save(const tb *t, const char *name)
{
    const char *p = tu_path(name);
    tu_write_file(p, t->d, t->n);
    return p;
}

/* "Image" bytes, distinct per sample. */
static void img_of(int i, uint8_t *out, size_t n)
{
    for (size_t k = 0; k < n; k++)
        out[k] = (uint8_t)(i * 31 + k * 7 + 3);
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

static stk_dataset *open_ok(const char *uri)
{
    stk_dataset *ds = NULL;
    if (stk_dataset_open(uri, NULL, &ds) != 0)
        fail_msg("open %s: %s", uri, stk_errmsg());
    return ds;
}

static void expect_image(const stk_dataset *ds, uint64_t i, const void *want, size_t n,
                         int64_t label)
{
    void *data = NULL;
    size_t size = 0;
    if (stk_dataset_read_field(ds, i, "image", &data, &size, NULL) != 0)
        fail_msg("read %llu: %s", (unsigned long long)i, stk_errmsg());
    assert_int_equal(size, n);
    assert_memory_equal(data, want, n);
    stk_free(data);
    int64_t l = 12345;
    assert_int_equal(stk_dataset_label(ds, i, &l), 0);
    assert_int_equal(l, label);
}

static void expect_name(const stk_dataset *ds, uint64_t i, const char *want)
{
    char buf[1024];
    stk_dataset_sample_name(ds, i, buf, sizeof buf);
    if (!strstr(buf, want))
        fail_msg("sample %llu is named '%s', expected '%s'", (unsigned long long)i, buf, want);
}

static void expect_fail(const char *uri, int code, const char *a, const char *b)
{
    stk_dataset *ds = (stk_dataset *)1;
    int rc = stk_dataset_open(uri, NULL, &ds);
    if (rc != code)
        fail_msg("%s: rc %d, expected %d (%s)", uri, rc, code, stk_errmsg());
    assert_null(ds);
    if (a && !strstr(stk_errmsg(), a))
        fail_msg("%s: message '%s' lacks '%s'", uri, stk_errmsg(), a);
    if (b && !strstr(stk_errmsg(), b))
        fail_msg("%s: message '%s' lacks '%s'", uri, stk_errmsg(), b);
}

/* A 2-sample tar (000000.jpg/.cls, 000001.jpg/.cls); offsets out. */
static void two_samples(tb *t, size_t hdr[4])
{
    uint8_t img[700];
    t->n = 0;
    img_of(0, img, 700);
    hdr[0] = tb_file(t, "000000.jpg", img, 700, USTAR);
    hdr[1] = tb_str(t, "000000.cls", "3\n");
    img_of(1, img, 300);
    hdr[2] = tb_file(t, "000001.jpg", img, 300, USTAR);
    hdr[3] = tb_str(t, "000001.cls", "4");
}

/* ------------------------------------------------------------------------ */
/* Values                                                                    */
/* ------------------------------------------------------------------------ */

static void test_values_and_grouping(void **state)
{
    (void)state;
    static tb t;
    uint8_t img[5][1000];
    for (int i = 0; i < 5; i++)
        img_of(i, img[i], sizeof img[i]);
    t.n = 0;
    tb_header(&t, "train/", NULL, 0, '5', USTAR);            /* directory: not a member */
    tb_str(&t, "__meta__/info.json", "{}");                  /* metadata: left out */
    tb_str(&t, "README", "no dot: no key");                  /* left out */
    size_t h0 = tb_file(&t, "train/a.b/x.JPG", img[0], 1000, USTAR); /* key train/a.b/x */
    tb_str(&t, "train/a.b/x.cls", " 7 \n");
    tb_str(&t, "train/a.b/x.seg.png", "not the image");      /* extension seg.png */
    tb_header(&t, "train/a.b/x.lnk", NULL, 0, '2', USTAR);   /* symlink: not a member */
    /* png first, jpg preferred; label .txt (no .cls) with a sign. */
    size_t hy = tb_file(&t, "y.png", img[2], 10, USTAR);
    size_t h1 = tb_file(&t, "y.jpg", img[1], 999, USTAR);
    tb_str(&t, "y.txt", "-12");
    /* Label before image; GNU headers; old-style '\0' type. */
    tb_file(&t, "z.cls", "+0", 2, GNU);
    size_t off = tb_header(&t, "z.webp", NULL, 1, '\0', V7);
    tb_raw(&t, img[3], 1);
    tb_pad(&t);
    /* The same key again later: a new sample, as in WebDataset. */
    tb_file(&t, "y.png", img[2], 20, USTAR);
    tb_str(&t, "y.cls", "-9223372036854775808");
    tb_end(&t);
    const char *p = tb_save(&t, "values.tar");
    char uri[1200];
    snprintf(uri, sizeof uri, "wds:%s", p);
    stk_dataset *ds = open_ok(uri);
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    assert_string_equal(info.format, "wds");
    assert_int_equal(info.count, 4);
    assert_int_equal(info.num_classes, 0); /* negative labels */
    assert_int_equal(stk_dataset_skipped_count(ds), 0);
    expect_image(ds, 0, img[0], 1000, 7);
    expect_image(ds, 1, img[1], 999, -12);
    expect_image(ds, 2, img[3], 1, 0);
    expect_image(ds, 3, img[2], 20, INT64_MIN);
    char want[1200];
    snprintf(want, sizeof want, "%s: member train/a.b/x.JPG (byte %zu)", p, h0);
    expect_name(ds, 0, want);
    snprintf(want, sizeof want, "%s: member y.jpg (byte %zu)", p, h1);
    expect_name(ds, 1, want);
    snprintf(want, sizeof want, "member z.webp (byte %zu)", off);
    expect_name(ds, 2, want);
    /* Views point into the mapping, and the check passes. */
    stk_sample s;
    stk_scratch scratch = {0};
    assert_int_equal(ds->vt->read(ds, 1, &s, &scratch), 0);
    assert_null(s.image.pixels);
    assert_int_equal(s.encoded_size, 999);
    assert_memory_equal(s.encoded, img[1], 999);
    assert_null(scratch.data); /* no copy */
    assert_int_equal(stk_dataset_check(ds, 1), 0);
    stk_dataset_close(ds);

    /* Other extensions by query; '.' before an extension and ',' allowed. */
    snprintf(uri, sizeof uri, "webdataset:%s?image=seg.png&label=.CLS,txt&missing=skip", p);
    ds = open_ok(uri);
    stk_dataset_info_get(ds, &info);
    assert_string_equal(info.format, "wds");
    assert_int_equal(info.count, 1); /* only x has a seg.png */
    expect_image(ds, 0, "not the image", 13, 7);
    assert_int_equal(stk_dataset_skipped_count(ds), 3);
    snprintf(want, sizeof want, "values.tar: sample 'y' (byte %zu): no image member (looked for "
                                ".seg.png; it has .png, .jpg, .txt)",
             hy);
    assert_non_null(strstr(stk_dataset_skipped(ds, 0), want));
    stk_dataset_close(ds);

    /* A basename starting with '.': the regex backtracks, so "d/.q.jpeg"
     * is key "d/", extension "q.jpeg" (when "d" holds no '.'); ".top.jpg"
     * and "e.x/.r.jpg" do not match and are left out. */
    t.n = 0;
    tb_file(&t, "d/.q.jpeg", img[4], 513, USTAR);
    tb_str(&t, "d/.q.cls", "9223372036854775807");
    tb_str(&t, ".top.jpg", "x");
    tb_str(&t, "e.x/.r.jpg", "x");
    tb_end(&t);
    p = tb_save(&t, "dots.tar");
    snprintf(uri, sizeof uri, "wds:%s?image=q.jpeg;top.jpg;r.jpg&label=q.cls", p);
    ds = open_ok(uri);
    stk_dataset_info_get(ds, &info);
    assert_int_equal(info.count, 1);
    expect_image(ds, 0, img[4], 513, INT64_MAX);
    expect_name(ds, 0, "dots.tar: member d/.q.jpeg (byte 0)");
    stk_dataset_close(ds);
}

/* Long names: GNU 'L', ustar prefix, pax path and size, a global header. */
static void test_long_names(void **state)
{
    (void)state;
    static tb t;
    char longname[300], rec[600];
    uint8_t img[3][600];
    for (int i = 0; i < 3; i++)
        img_of(i + 10, img[i], sizeof img[i]);
    memset(longname, 'n', 250);
    longname[0] = 'd';
    longname[1] = '/';
    strcpy(longname + 250, ".jpg");
    t.n = 0;
    /* a global header (git archive writes one): parsed, ignored */
    size_t n = pax_record(rec, "comment", "0123456789abcdef");
    tb_meta(&t, 'g', rec, n);
    size_t h0 = tb_meta(&t, 'L', longname, strlen(longname) + 1);
    tb_header(&t, "truncated-name", NULL, 600, '0', GNU);
    tb_raw(&t, img[0], 600);
    tb_pad(&t);
    strcpy(longname + 250, ".cls");
    tb_meta(&t, 'L', longname, strlen(longname)); /* no NUL: the size ends it */
    tb_header(&t, "x", NULL, 1, '0', GNU);
    tb_raw(&t, "5", 1);
    tb_pad(&t);
    /* ustar prefix + name */
    tb_header(&t, "s.png", "some/prefix/dir", 333, '0', USTAR);
    tb_raw(&t, img[1], 333);
    tb_pad(&t);
    tb_header(&t, "s.cls", "some/prefix/dir", 1, '0', USTAR);
    tb_raw(&t, "6", 1);
    tb_pad(&t);
    /* pax path and size (the header's size field says 7: pax wins) */
    char big[400];
    memset(big, 'p', 180);
    big[0] = '/';
    strcpy(big + 180, "/k.jpg");
    n = pax_record(rec, "path", big + 1);
    n += pax_record(rec + n, "size", "555");
    n += pax_record(rec + n, "mtime", "1700000000.5");
    size_t h2 = tb_meta(&t, 'x', rec, n);
    tb_header(&t, "ignored-name.gif", NULL, 7, '0', USTAR);
    tb_raw(&t, img[2], 555);
    tb_pad(&t);
    strcpy(big + 180, "/k.cls");
    n = pax_record(rec, "path", big + 1);
    tb_meta(&t, 'x', rec, n);
    tb_header(&t, "ignored", NULL, 2, '0', USTAR);
    tb_raw(&t, "11", 2);
    tb_pad(&t);
    tb_end(&t);
    const char *p = tb_save(&t, "long.tar");
    char uri[1200];
    snprintf(uri, sizeof uri, "wds:%s", p);
    stk_dataset *ds = open_ok(uri);
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    assert_int_equal(info.count, 3);
    assert_int_equal(info.num_classes, 12);
    expect_image(ds, 0, img[0], 600, 5);
    expect_image(ds, 1, img[1], 333, 6);
    expect_image(ds, 2, img[2], 555, 11);
    char want[1200];
    strcpy(longname + 250, ".jpg");
    snprintf(want, sizeof want, "%s: member %s (byte %zu)", p, longname, h0);
    expect_name(ds, 0, want);
    expect_name(ds, 1, "member some/prefix/dir/s.png (byte ");
    strcpy(big + 180, "/k.jpg");
    snprintf(want, sizeof want, "member %s (byte %zu)", big + 1, h2);
    expect_name(ds, 2, want);
    stk_dataset_close(ds);
}

/* Base-256 sizes, signed checksums, a file that ends after a member. */
static void test_numbers_and_endings(void **state)
{
    (void)state;
    static tb t;
    uint8_t img[800];
    img_of(5, img, sizeof img);
    t.n = 0;
    /* base-256 size: 0x80, then big-endian */
    size_t off = tb_header(&t, "\xc3\xa9t\xc3\xa9.jpg", NULL, 0, '0', GNU);
    uint8_t *h = t.d + off;
    memset(h + 124, 0, 12);
    h[124] = 0x80;
    h[134] = 800 >> 8;
    h[135] = 800 & 0xff;
    /* a signed checksum: the name's bytes >= 0x80 counted negative */
    memset(h + 148, ' ', 8);
    int sum = 0;
    for (int i = 0; i < 512; i++)
        sum += (int8_t)h[i];
    snprintf((char *)h + 148, 8, "%06o", (unsigned)sum);
    tb_raw(&t, img, 800);
    tb_pad(&t);
    /* the checksum field as "  12345\0" with leading spaces (old tars) */
    off = tb_str(&t, "\xc3\xa9t\xc3\xa9.cls", "1");
    h = t.d + off;
    memset(h + 148, ' ', 8);
    unsigned usum = 0;
    for (int i = 0; i < 512; i++)
        usum += h[i];
    snprintf((char *)h + 148, 8, "%7o", usum);
    /* no end-of-archive blocks, and no padding after the last member */
    t.n -= 511;
    const char *p = tb_save(&t, "numbers.tar");
    char uri[1200];
    snprintf(uri, sizeof uri, "wds:%s", p);
    stk_dataset *ds = open_ok(uri);
    expect_image(ds, 0, img, 800, 1);
    stk_dataset_close(ds);
    /* The padding, then a short run of zeros (less than a block): the end. */
    uint8_t z[511] = {0};
    tb_raw(&t, z, 511);
    tb_raw(&t, z, 100);
    tb_save(&t, "numbers.tar");
    ds = open_ok(uri);
    expect_image(ds, 0, img, 800, 1);
    stk_dataset_close(ds);
}

/* Brace patterns, globs, directories, detection. */
static void test_uri_forms(void **state)
{
    (void)state;
    static tb t;
    char dir[1024], path[1200], uri[1400];
    snprintf(dir, sizeof dir, "%s", tu_path("shards"));
    mkdir(dir, 0755);
    for (int s = 0; s < 3; s++) {
        uint8_t img[100];
        char label[8];
        t.n = 0;
        for (int k = 0; k < 2; k++) {
            char name[32];
            img_of(s * 2 + k, img, sizeof img);
            snprintf(name, sizeof name, "%d%d.jpg", s, k);
            tb_file(&t, name, img, 100, USTAR);
            snprintf(name, sizeof name, "%d%d.cls", s, k);
            snprintf(label, sizeof label, "%d", s * 2 + k);
            tb_str(&t, name, label);
        }
        tb_end(&t);
        snprintf(path, sizeof path, "%s/shard-%03d.tar", dir, s);
        tu_write_file(path, t.d, t.n);
    }
    tu_write_file(tu_path("shards/notes.txt"), "x", 1); /* not listed */
    const char *forms[] = {"wds:%s", "wds:%s/shard-*.tar", "wds:%s/shard-{000..002}.tar",
                           "%s", "%s/shard-*.tar", "%s/shard-{000..002}.tar",
                           "webdataset:%s/shard-{000,001,002}.tar"};
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        snprintf(uri, sizeof uri, forms[f], dir);
        stk_dataset *ds = open_ok(uri);
        stk_dataset_info info;
        stk_dataset_info_get(ds, &info);
        assert_string_equal(info.format, "wds");
        assert_int_equal(info.count, 6);
        assert_int_equal(info.num_classes, 6);
        for (int i = 0; i < 6; i++) {
            uint8_t img[100];
            img_of(i, img, sizeof img);
            expect_image(ds, (uint64_t)i, img, 100, i);
        }
        stk_dataset_close(ds);
    }
    /* A range counting down keeps its order; one shard alone. */
    snprintf(uri, sizeof uri, "wds:%s/shard-{002..001}.tar", dir);
    stk_dataset *ds = open_ok(uri);
    int64_t l;
    assert_int_equal(stk_dataset_label(ds, 0, &l), 0);
    assert_int_equal(l, 4);
    assert_int_equal(stk_dataset_label(ds, 3, &l), 0);
    assert_int_equal(l, 3);
    stk_dataset_close(ds);
    snprintf(path, sizeof path, "%s/shard-001.tar", dir);
    ds = open_ok(path); /* detected */
    assert_int_equal(stk_dataset_label(ds, 0, &l), 0);
    assert_int_equal(l, 2);
    stk_dataset_close(ds);

    /* No padding when neither end has a leading zero: shard-0.tar missing. */
    snprintf(uri, sizeof uri, "wds:%s/shard-{0..2}.tar", dir);
    expect_fail(uri, STK_ENOENT, "shard-0.tar: no such tar file or directory", NULL);
    snprintf(uri, sizeof uri, "wds:%s/shard-{000,001,000}.tar", dir);
    expect_fail(uri, STK_EINVAL, "shard-000.tar is named twice", NULL);
    snprintf(uri, sizeof uri, "wds:%s/shard-{000..002.tar", dir);
    expect_fail(uri, STK_EINVAL, "a '{' without its '}'", NULL);
    snprintf(uri, sizeof uri, "wds:%s/shard-{a..c}.tar", dir);
    expect_fail(uri, STK_EINVAL, "{a..c} is not a range of decimal integers", NULL);
    snprintf(uri, sizeof uri, "wds:%s/shard-{0..1000000}.tar", dir);
    expect_fail(uri, STK_ELIMIT, "expands to more than 1000000 names", NULL);
    snprintf(uri, sizeof uri, "wds:%s/none-*.tar", dir);
    expect_fail(uri, STK_ENOENT, "no tar file matches this pattern", NULL);

    /* Query keys. */
    snprintf(uri, sizeof uri, "wds:%s?imgae=jpg", dir);
    expect_fail(uri, STK_EINVAL, "unknown query key 'imgae'",
                "known keys: image, label and missing");
    snprintf(uri, sizeof uri, "wds:%s?image=jpg&image=png", dir);
    expect_fail(uri, STK_EINVAL, "query key 'image' given twice", NULL);
    snprintf(uri, sizeof uri, "wds:%s?image=jpg;;png", dir);
    expect_fail(uri, STK_EINVAL, "'' is not an extension", NULL);
    snprintf(uri, sizeof uri, "wds:%s?label=a/b", dir);
    expect_fail(uri, STK_EINVAL, "'a/b' is not an extension", NULL);
    snprintf(uri, sizeof uri, "wds:%s?image=jpg;JPG", dir);
    expect_fail(uri, STK_EINVAL, "extension 'jpg' listed twice", NULL);
    snprintf(uri, sizeof uri, "wds:%s?label=jpg", dir);
    expect_fail(uri, STK_EINVAL, "'jpg' is both an image and a label extension", NULL);
    snprintf(uri, sizeof uri, "wds:%s?missing=maybe", dir);
    expect_fail(uri, STK_EINVAL, "unknown value 'maybe' for query key 'missing'", NULL);
    snprintf(uri, sizeof uri, "wds:%s?image=jpg&", dir);
    expect_fail(uri, STK_EINVAL, "empty item at the end of the query", NULL);
    snprintf(uri, sizeof uri, "wds:%s?image", dir);
    expect_fail(uri, STK_EINVAL, "query item 'image' has no '=value'", NULL);

    /* A directory named *.tar does not make a directory WebDataset. */
    char notar[1024];
    snprintf(notar, sizeof notar, "%s", tu_path("dir-of-dir"));
    mkdir(notar, 0755);
    snprintf(path, sizeof path, "%s/x.tar", notar);
    mkdir(path, 0755);
    expect_fail(notar, STK_ENOENT, "no dataset detected in this directory", NULL);

    /* An image folder holding a .tar stays an image folder. */
    char folder[1024];
    snprintf(folder, sizeof folder, "%s", tu_path("folder-with-tar"));
    mkdir(folder, 0755);
    snprintf(path, sizeof path, "%s/cat", folder);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/cat/a.jpg", folder);
    tu_write_file(path, "\xff\xd8\xff", 3);
    snprintf(path, sizeof path, "%s/backup.tar", folder);
    tu_write_file(path, t.d, t.n);
    ds = open_ok(folder);
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    assert_string_equal(info.format, "imagefolder");
    stk_dataset_close(ds);
    snprintf(uri, sizeof uri, "wds:%s", folder); /* the prefix still reads its *.tar */
    ds = open_ok(uri);
    stk_dataset_info_get(ds, &info);
    assert_int_equal(info.count, 2);
    stk_dataset_close(ds);
}

/* ------------------------------------------------------------------------ */
/* Damage                                                                    */
/* ------------------------------------------------------------------------ */

static void test_damage(void **state)
{
    (void)state;
    static tb t;
    size_t hdr[4];
    char uri[1200], want[1300];
    const char *p = tu_path("bad.tar");
    snprintf(uri, sizeof uri, "wds:%s", p);

    /* Bad checksum in the second sample's image header. */
    two_samples(&t, hdr);
    tb_end(&t);
    t.d[hdr[2] + 3] ^= 0x40;
    tb_save(&t, "bad.tar");
    snprintf(want, sizeof want, "%s: byte %zu: header checksum mismatch", p, hdr[2]);
    expect_fail(uri, STK_EFORMAT, want, NULL);
    /* Not a tar at all. */
    tu_write_file(p, "hello, this is not a tar file", 29);
    expect_fail(uri, STK_EFORMAT, "truncated header (29 of its 512 bytes", NULL);
    memset(t.d, 'A', 1024);
    tu_write_file(p, t.d, 1024);
    expect_fail(uri, STK_EFORMAT, "byte 0: header checksum mismatch", "not a tar archive?");
    /* Compressed. */
    memcpy(t.d, "\x1f\x8b\x08\x00", 4);
    tu_write_file(p, t.d, 1024);
    expect_fail(uri, STK_EUNSUPPORTED, "a compressed tar (gzip)", NULL);
    memcpy(t.d, "\x28\xb5\x2f\xfd", 4);
    tu_write_file(p, t.d, 1024);
    expect_fail(uri, STK_EUNSUPPORTED, "a compressed tar (zstd)", NULL);
    /* Empty. */
    tu_write_file(p, "", 0);
    expect_fail(uri, STK_EFORMAT, "bad.tar: empty file (not a tar archive)", NULL);

    /* Absurd size (checksum right). */
    two_samples(&t, hdr);
    tb_end(&t);
    snprintf((char *)t.d + hdr[2] + 124, 12, "%011llo", 07777777777ull);
    tb_sum(&t, hdr[2]);
    tb_save(&t, "bad.tar");
    snprintf(want, sizeof want, "%s: byte %zu: member '000001.jpg': its size, %llu bytes, runs "
                                "past the end of the file",
             p, hdr[2], 07777777777ull);
    expect_fail(uri, STK_EFORMAT, want, "truncated tar or absurd size");
    /* Truncated member: the file cut inside the last image's data. */
    two_samples(&t, hdr);
    t.n = hdr[2] + 512 + 100;
    tb_save(&t, "bad.tar");
    snprintf(want, sizeof want, "byte %zu: member '000001.jpg': its size, 300 bytes, runs past the "
                                "end of the file (%zu bytes)",
             hdr[2], t.n);
    expect_fail(uri, STK_EFORMAT, want, NULL);
    /* Truncated header. */
    two_samples(&t, hdr);
    t.n = hdr[3] + 200;
    tb_save(&t, "bad.tar");
    snprintf(want, sizeof want, "byte %zu: truncated header (200 of its 512 bytes", hdr[3]);
    expect_fail(uri, STK_EFORMAT, want, NULL);
    /* Bad size field; a negative base-256 size. */
    two_samples(&t, hdr);
    tb_end(&t);
    memcpy(t.d + hdr[1] + 124, "0000000009x", 11);
    tb_sum(&t, hdr[1]);
    tb_save(&t, "bad.tar");
    snprintf(want, sizeof want, "byte %zu: member '000000.cls': bad size field '0000000009x'",
             hdr[1]);
    expect_fail(uri, STK_EFORMAT, want, NULL);
    two_samples(&t, hdr);
    tb_end(&t);
    memset(t.d + hdr[1] + 124, 0xff, 12);
    tb_sum(&t, hdr[1]);
    tb_save(&t, "bad.tar");
    expect_fail(uri, STK_EFORMAT, "member '000000.cls': bad size field", NULL);
    /* Bytes of the file are escaped in messages, never sent raw to the
     * terminal (an ESC would drive it). */
    assert_null(strchr(stk_errmsg(), '\xff'));
    assert_non_null(strstr(stk_errmsg(), "bad size field '\\xff\\xff\\xff"));
    two_samples(&t, hdr);
    tb_end(&t);
    memcpy(t.d + hdr[1] + 124, "\x1b[2J\\0009\x07", 11);
    memcpy(t.d + hdr[1] + 100, "\x1b]0;pwned\x07", 11); /* the mode field: not printed */
    tb_sum(&t, hdr[1]);
    tb_save(&t, "bad.tar");
    expect_fail(uri, STK_EFORMAT, "member '000000.cls': bad size field '\\x1b[2J\\x5c0009\\x07'",
                NULL);
    assert_null(strchr(stk_errmsg(), '\x1b'));
    /* A checksum field that is not octal. */
    two_samples(&t, hdr);
    tb_end(&t);
    memcpy(t.d + hdr[1] + 148, "12345z\0 ", 8);
    tb_save(&t, "bad.tar");
    snprintf(want, sizeof want, "byte %zu: header checksum mismatch (stored '12345z'", hdr[1]);
    expect_fail(uri, STK_EFORMAT, want, NULL);
    two_samples(&t, hdr);
    tb_end(&t);
    memcpy(t.d + hdr[1] + 148, "\x1b[31m\x9b\0", 8);
    tb_save(&t, "bad.tar");
    snprintf(want, sizeof want, "byte %zu: header checksum mismatch (stored '\\x1b[31m\\x9b'",
             hdr[1]);
    expect_fail(uri, STK_EFORMAT, want, NULL);

    /* Garbage after the end-of-archive marker. */
    two_samples(&t, hdr);
    tb_end(&t);
    size_t end = t.n - 1024;
    tb_raw(&t, "junk", 4);
    tb_save(&t, "bad.tar");
    snprintf(want, sizeof want, "byte %zu: data after the end-of-archive marker at byte %zu",
             end + 1024, end);
    expect_fail(uri, STK_EFORMAT, want, NULL);
    /* A second archive after one zero block. */
    two_samples(&t, hdr);
    uint8_t zero[512] = {0};
    tb_raw(&t, zero, 512);
    tb_str(&t, "000002.jpg", "x");
    tb_save(&t, "bad.tar");
    expect_fail(uri, STK_EFORMAT, "data after the end-of-archive marker", NULL);

    /* A long-name header with no member after it. */
    two_samples(&t, hdr);
    size_t l = tb_meta(&t, 'L', "000002.jpg", 11);
    tb_end(&t);
    tb_save(&t, "bad.tar");
    snprintf(want, sizeof want, "byte %zu: the archive ends after a GNU long name header", l);
    expect_fail(uri, STK_EFORMAT, want, NULL);
    t.n -= 1024;
    tb_save(&t, "bad.tar");
    snprintf(want, sizeof want, "byte %zu: the file ends after a GNU long name header", l);
    expect_fail(uri, STK_EFORMAT, want, NULL);
    /* Meta header running past the end; too big. */
    two_samples(&t, hdr);
    l = tb_header(&t, "././@LongLink", NULL, 5000, 'L', GNU);
    tb_save(&t, "bad.tar");
    snprintf(want, sizeof want, "byte %zu: GNU long name header: its 5000 bytes run past the end",
             l);
    expect_fail(uri, STK_EFORMAT, want, NULL);
    two_samples(&t, hdr);
    tb_header(&t, "PaxHeader", NULL, 1u << 21, 'x', USTAR);
    tb_save(&t, "bad.tar");
    expect_fail(uri, STK_ELIMIT, "pax extended header of 2097152 bytes (at most 1048576)", NULL);
    /* Malformed pax records. */
    const char *bad_pax[] = {"12 path=a.jpg",  "99 path=a.jpg\n", "x path=a.jpg\n",
                             "13 patha.jpg\n", "12 =a.jpgxx\n",   "0 \n"};
    for (size_t k = 0; k < sizeof bad_pax / sizeof bad_pax[0]; k++) {
        two_samples(&t, hdr);
        l = tb_meta(&t, 'x', bad_pax[k], strlen(bad_pax[k]));
        tb_str(&t, "000002.jpg", "x");
        tb_end(&t);
        tb_save(&t, "bad.tar");
        snprintf(want, sizeof want, "byte %zu: pax header: ", l);
        expect_fail(uri, STK_EFORMAT, want, k >= 3 && k < 5 ? "has no KEY=VALUE"
                                                            : "malformed record at its byte 0");
    }
    char rec[200];
    size_t n = pax_record(rec, "size", "12a");
    two_samples(&t, hdr);
    tb_meta(&t, 'x', rec, n);
    tb_str(&t, "000002.jpg", "x");
    tb_end(&t);
    tb_save(&t, "bad.tar");
    expect_fail(uri, STK_EFORMAT, "pax header: size '12a' is not a decimal number", NULL);
    /* pax size past the end. */
    n = pax_record(rec, "size", "99999");
    two_samples(&t, hdr);
    tb_meta(&t, 'x', rec, n);
    tb_str(&t, "000002.jpg", "x");
    tb_end(&t);
    tb_save(&t, "bad.tar");
    expect_fail(uri, STK_EFORMAT, "member '000002.jpg': its size, 99999 bytes, runs past", NULL);
    /* Sparse members. */
    two_samples(&t, hdr);
    tb_header(&t, "000002.jpg", NULL, 0, 'S', GNU);
    tb_end(&t);
    tb_save(&t, "bad.tar");
    expect_fail(uri, STK_EUNSUPPORTED, "member '000002.jpg' is a GNU sparse file", NULL);
    n = pax_record(rec, "GNU.sparse.major", "1");
    two_samples(&t, hdr);
    tb_meta(&t, 'x', rec, n);
    tb_str(&t, "000002.jpg", "x");
    tb_end(&t);
    tb_save(&t, "bad.tar");
    expect_fail(uri, STK_EUNSUPPORTED, "a GNU sparse member (pax GNU.sparse.major)", NULL);

    /* Labels. */
    const char *bad_labels[] = {"abc", "1.5", "", "  ", "12 3", "99999999999999999999", "-",
                                "0x10", "\x1b[2J"};
    for (size_t k = 0; k < sizeof bad_labels / sizeof bad_labels[0]; k++) {
        t.n = 0;
        tb_str(&t, "000000.jpg", "img");
        tb_str(&t, "000000.cls", "1");
        tb_str(&t, "000001.jpg", "img");
        size_t lh = tb_str(&t, "000001.cls", bad_labels[k]);
        tb_end(&t);
        tb_save(&t, "bad.tar");
        snprintf(want, sizeof want, "%s: member 000001.cls (byte %zu): label '%s' is not a decimal "
                                    "integer",
                 p, lh, bad_labels[k][0] == 0x1b ? "\\x1b[2J" : bad_labels[k]);
        expect_fail(uri, STK_EFORMAT, want, NULL);
    }
    t.n = 0;
    tb_str(&t, "000000.jpg", "img");
    tb_str(&t, "000000.TXT", "a long caption, not a label: a photo of a cat on a mat");
    tb_end(&t);
    tb_save(&t, "bad.tar");
    expect_fail(uri, STK_EFORMAT,
                "member 000000.TXT (byte 1024): label 'a long caption, not a label: a photo of "
                "...' is not a decimal integer",
                "label=EXTS picks the label member");
    static char huge[5000];
    memset(huge, '1', sizeof huge - 1);
    t.n = 0;
    tb_str(&t, "000000.jpg", "img");
    tb_str(&t, "000000.cls", huge);
    tb_end(&t);
    tb_save(&t, "bad.tar");
    expect_fail(uri, STK_EFORMAT, "member 000000.cls (byte 1024): a label member of 4999 bytes",
                NULL);

    /* Missing members, duplicate members. */
    t.n = 0;
    tb_str(&t, "000000.jpg", "img");
    tb_str(&t, "000000.cls", "1");
    tb_str(&t, "000001.jpg", "img");
    tb_str(&t, "000001.json", "{}");
    tb_str(&t, "000002.cls", "2");
    tb_str(&t, "000003.json", "{}");
    tb_end(&t);
    tb_save(&t, "bad.tar");
    snprintf(want, sizeof want, "%s: sample '000001' (byte 2048): no label member (looked for "
                                ".cls, .txt; it has .jpg, .json)",
             p);
    expect_fail(uri, STK_EFORMAT, want, "missing=skip leaves such samples out");
    char skip_uri[1300];
    snprintf(skip_uri, sizeof skip_uri, "%s?missing=skip", uri);
    stk_dataset *ds = open_ok(skip_uri);
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    assert_int_equal(info.count, 1);
    assert_int_equal(stk_dataset_skipped_count(ds), 3);
    assert_non_null(strstr(stk_dataset_skipped(ds, 0), "sample '000001' (byte 2048): no label"));
    assert_non_null(strstr(stk_dataset_skipped(ds, 1),
                           "sample '000002' (byte 4096): no image member (looked for .jpg, "
                           ".jpeg, .png, .webp, .bmp, .tif, .tiff, .gif; it has .cls)"));
    assert_non_null(strstr(stk_dataset_skipped(ds, 2),
                           "sample '000003' (byte 5120): no image member and no label member"));
    stk_dataset_close(ds);
    t.n = 0;
    tb_str(&t, "000000.jpg", "img");
    size_t dup = tb_str(&t, "000000.JPG", "img");
    tb_str(&t, "000000.cls", "1");
    tb_end(&t);
    tb_save(&t, "bad.tar");
    snprintf(want, sizeof want, "member '000000.JPG' (byte %zu): sample '000000' already has a "
                                ".jpg member",
             dup);
    expect_fail(uri, STK_EFORMAT, want, NULL);
    /* Nothing that makes a sample. */
    t.n = 0;
    tb_header(&t, "dir/", NULL, 0, '5', USTAR);
    tb_end(&t);
    tb_save(&t, "bad.tar");
    expect_fail(uri, STK_EFORMAT, "no samples in", NULL);
    t.n = 0;
    tb_end(&t);
    tb_save(&t, "bad.tar");
    expect_fail(uri, STK_EFORMAT, "no samples in", NULL);
    /* Too many members under one key. */
    static tb big;
    big.n = 0;
    for (int k = 0; k <= 1024; k++) {
        char name[32];
        snprintf(name, sizeof name, "k.e%d", k);
        tb_header(&big, name, NULL, 0, '0', USTAR);
    }
    tb_end(&big);
    tb_save(&big, "bad.tar");
    expect_fail(uri, STK_ELIMIT, "sample 'k' (byte 0): more than 1024 members share its key",
                NULL);
}

/* A view taken before the tar is cut and used after it: zeros, and the
 * after-use check names the member. */
static void test_truncated_while_open(void **state)
{
    (void)state;
    static tb t;
    uint8_t img[3][20000];
    t.n = 0;
    for (int i = 0; i < 3; i++) {
        char name[32];
        img_of(i, img[i], sizeof img[i]);
        snprintf(name, sizeof name, "%06d.jpg", i);
        tb_file(&t, name, img[i], sizeof img[i], USTAR);
        snprintf(name, sizeof name, "%06d.cls", i);
        tb_str(&t, name, "1");
    }
    tb_end(&t);
    const char *p = tb_save(&t, "cut.tar");
    stk_dataset *ds = open_ok(p);
    stk_sample s;
    stk_scratch scratch = {0};
    assert_int_equal(ds->vt->read(ds, 2, &s, &scratch), 0);
    assert_memory_equal(s.encoded, img[2], sizeof img[2]);
    assert_int_equal(stk_dataset_check(ds, 2), 0);
    assert_int_equal(truncate(p, 24576), 0); /* sample 0 (22016 bytes) stays whole */
    unsigned sum = 0;
    for (size_t k = 0; k < s.encoded_size; k++)
        sum += s.encoded[k];
    assert_int_equal(sum, 0); /* lost pages read as zeros */
    assert_int_equal(stk_dataset_check(ds, 2), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "cut.tar: sample 2 of the file (byte "));
    assert_non_null(
        strstr(stk_errmsg(), "the tar was truncated while open (only its first 24576 "));
    assert_int_equal(stk_dataset_check(ds, 0), 0); /* its bytes lie below the cut */
    stk_scratch_free(&scratch);
    stk_dataset_close(ds);
}

static void test_reader_table(void **state)
{
    (void)state;
    int seen = 0;
    const char *form, *desc, *prefix;
    for (uint32_t i = 0; (prefix = stk_dataset_reader(i, &form, &desc)); i++)
        if (!strcmp(prefix, "wds") || !strcmp(prefix, "webdataset")) {
            seen++;
            assert_non_null(strstr(form, "?image="));
        }
    assert_int_equal(seen, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_and_grouping),
        cmocka_unit_test(test_long_names),
        cmocka_unit_test(test_numbers_and_endings),
        cmocka_unit_test(test_uri_forms),
        cmocka_unit_test(test_damage),
        cmocka_unit_test(test_truncated_while_open),
        cmocka_unit_test(test_reader_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
