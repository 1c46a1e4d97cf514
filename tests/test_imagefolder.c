/*
 * test_imagefolder.c — file-per-sample datasets (src/format/imagefolder.c):
 * torchvision's ImageFolder layout ("imagefolder:DIR", and a bare DIR by
 * detection) and list files ("list:FILE").
 *
 * The trees are built by the test. The expected order, labels and class
 * names are written out by hand from torchvision's rules (classes sorted;
 * within a class, os.walk's directories sorted by path string, then file
 * names sorted), so the tricky case — "a/sub-z" sorts before "a/sub/deep"
 * because '-' < '/' — is checked against a literal list, not against the
 * reader's own sort. Every sample's bytes are compared with what the test
 * wrote into that file (each file holds its own relative path), and
 * failures assert the code and that the message names the file (and
 * line). Directories that are left out — met again through a symlink, or
 * unreadable (checked by a process that really cannot read them: as root,
 * a child that drops to uid 65534 first) — must be reported with the
 * reason and fail strict=1 / pack --strict; class names with any byte must
 * survive pack and open, stored in the escape docs/format.md specifies.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "codec/codec_write.h"
#include "core/error.h"
#include "format/class_names.h"
#include "format/dataset.h"
#include "stoker/stoker.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "max_allocation_size_mb=512"; }

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static char *fmt(const char *f, ...)
{
    char buf[2048];
    va_list ap;
    char *p;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    p = strdup(buf);
    assert_non_null(p);
    return p;
}

static void mkdirs(const char *root, const char *rel)
{
    char *p = fmt("%s/%s", root, rel);
    for (char *s = p + strlen(root) + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0755);
            *s = '/';
        }
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        fail_msg("mkdir %s", p);
    free(p);
}

/* A file whose content is its own relative path (so reads are checkable). */
static void put(const char *root, const char *rel)
{
    char *p = fmt("%s/%s", root, rel);
    char *dir = strdup(rel);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        mkdirs(root, dir);
    }
    tu_write_file(p, rel, strlen(rel));
    free(dir);
    free(p);
}

static stk_dataset *open_ok(const char *uri, const stk_dataset_options *opts)
{
    stk_dataset *ds = NULL;
    int rc = stk_dataset_open(uri, opts, &ds);
    if (rc)
        print_error("open(%s): %s\n", uri, stk_errmsg());
    assert_int_equal(rc, 0);
    assert_non_null(ds);
    return ds;
}

static void expect_open_fail(const char *uri, const stk_dataset_options *opts, int code,
                             const char *n1, const char *n2)
{
    stk_dataset *ds = (stk_dataset *)(uintptr_t)1;
    int rc = stk_dataset_open(uri, opts, &ds);
    if (rc != code || (n1 && !strstr(stk_errmsg(), n1)) || (n2 && !strstr(stk_errmsg(), n2)))
        print_error("open(%s): rc %d (%s), expected %d; message '%s' (wanted '%s', '%s')\n",
                    uri, rc, stk_strerror(rc), code, stk_errmsg(), n1 ? n1 : "", n2 ? n2 : "");
    assert_int_equal(rc, code);
    assert_null(ds);
    if (n1)
        assert_non_null(strstr(stk_errmsg(), n1));
    if (n2)
        assert_non_null(strstr(stk_errmsg(), n2));
    if (getenv("STK_TEST_VERBOSE"))
        fprintf(stderr, "  %s -> %s\n", stk_strerror(rc), stk_errmsg());
}

/* Read sample i; its bytes must be `content` and its label `label`. */
static void expect_sample(const stk_dataset *ds, uint64_t i, const char *content, int64_t label)
{
    stk_scratch s = {0};
    stk_sample smp;
    memset(&smp, 0xAB, sizeof smp);
    int rc = ds->vt->read(ds, i, &smp, &s);
    if (rc)
        print_error("read %llu: %s\n", (unsigned long long)i, stk_errmsg());
    assert_int_equal(rc, 0);
    assert_null(smp.image.pixels);
    assert_int_equal(smp.image.width, 0);
    assert_non_null(smp.encoded);
    if (smp.encoded_size != strlen(content) || memcmp(smp.encoded, content, strlen(content)))
        print_error("sample %llu holds '%.*s', expected '%s'\n", (unsigned long long)i,
                    (int)smp.encoded_size, (const char *)smp.encoded, content);
    assert_int_equal(smp.encoded_size, strlen(content));
    assert_memory_equal(smp.encoded, content, strlen(content));
    assert_int_equal(smp.label, label);
    stk_scratch_free(&s);
}

static void expect_read_fail(const stk_dataset *ds, uint64_t i, int code, const char *n1,
                             const char *n2)
{
    stk_scratch s = {0};
    stk_sample smp;
    int rc = ds->vt->read(ds, i, &smp, &s);
    if (rc != code || (n1 && !strstr(stk_errmsg(), n1)) || (n2 && !strstr(stk_errmsg(), n2)))
        print_error("read %llu: rc %d, expected %d; message '%s'\n", (unsigned long long)i, rc,
                    code, stk_errmsg());
    assert_int_equal(rc, code);
    if (n1)
        assert_non_null(strstr(stk_errmsg(), n1));
    if (n2)
        assert_non_null(strstr(stk_errmsg(), n2));
    if (getenv("STK_TEST_VERBOSE"))
        fprintf(stderr, "  %s -> %s\n", stk_strerror(rc), stk_errmsg());
    stk_scratch_free(&s);
}

/* ------------------------------------------------------------------------ */
/* ImageFolder                                                              */
/* ------------------------------------------------------------------------ */

/* The tree of test_imagefolder_layout, and the samples in torchvision's
 * order (worked out by hand, see the header comment). */
static const char *const tree_files[] = {
    "b/1.png",        "b/0.jpg",         "a/x10.JPG",       "a/x2.jpg",
    "a/readme.txt",   "a/notes.jpg.txt", "a/X.JpEg",        "a/sub/y.png",
    "a/sub/deep/d.bmp", "a/sub-z/q.jpeg", "a/zz.webp",       "a/t.TIFF",
    "c_dir/k.ppm",    "c_dir/k.pgm",     "c_dir/.hidden.jpg", "top.jpg",
};

static const struct {
    const char *path;
    int label;
} tree_order[] = {
    /* class a: directory "a" (names sorted by code point: 'X' < 'r' ...) */
    {"a/X.JpEg", 0},
    {"a/t.TIFF", 0},
    {"a/x10.JPG", 0},
    {"a/x2.jpg", 0},
    {"a/zz.webp", 0},
    /* then "a/sub", "a/sub-z", "a/sub/deep" — '-' < '/' */
    {"a/sub/y.png", 0},
    {"a/sub-z/q.jpeg", 0},
    {"a/sub/deep/d.bmp", 0},
    /* class b */
    {"b/0.jpg", 1},
    {"b/1.png", 1},
    /* class c_dir: hidden files are kept, as os.walk lists them */
    {"c_dir/.hidden.jpg", 2},
    {"c_dir/k.pgm", 2},
    {"c_dir/k.ppm", 2},
};
#define TREE_N (sizeof tree_order / sizeof tree_order[0])

static char *make_tree(const char *name)
{
    char *root = strdup(tu_path(name));
    assert_non_null(root);
    assert_int_equal(mkdir(root, 0755), 0);
    for (size_t i = 0; i < sizeof tree_files / sizeof tree_files[0]; i++)
        put(root, tree_files[i]);
    return root;
}

static void check_tree(const stk_dataset *ds)
{
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    assert_string_equal(info.format, "imagefolder");
    assert_int_equal(info.count, TREE_N);
    assert_int_equal(info.num_classes, 3);
    assert_int_equal(info.height, 0);
    assert_int_equal(info.width, 0);
    assert_int_equal(info.channels, 0);
    assert_non_null(ds->class_names);
    assert_string_equal(ds->class_names[0], "a");
    assert_string_equal(ds->class_names[1], "b");
    assert_string_equal(ds->class_names[2], "c_dir");
    for (size_t i = 0; i < TREE_N; i++)
        expect_sample(ds, i, tree_order[i].path, tree_order[i].label);
}

static void test_imagefolder_layout(void **state)
{
    (void)state;
    char *root = make_tree("tree");
    char *uri = fmt("imagefolder:%s", root);
    stk_dataset *ds = open_ok(uri, NULL);
    check_tree(ds);
    stk_dataset_close(ds);

    /* A bare path is detected as ImageFolder (last rule), and a trailing
     * slash changes nothing. */
    ds = open_ok(root, NULL);
    check_tree(ds);
    stk_dataset_close(ds);
    free(uri);
    uri = fmt("imagefolder:%s/", root);
    ds = open_ok(uri, NULL);
    check_tree(ds);
    stk_dataset_close(ds);

    free(uri);
    free(root);
}

static void test_imagefolder_symlinks(void **state)
{
    (void)state;
    char *root = strdup(tu_path("links"));
    char *other = strdup(tu_path("links_target"));
    char *p;
    assert_int_equal(mkdir(root, 0755), 0);
    assert_int_equal(mkdir(other, 0755), 0);
    put(root, "real/r.jpg");
    put(other, "o.png");
    put(other, "inner/i.jpg");
    /* A class that is a symlink to a directory elsewhere. */
    p = fmt("%s/linked", root);
    assert_int_equal(symlink(other, p), 0);
    free(p);
    /* A loop: real/loop -> .. (the root); must not be walked forever. */
    p = fmt("%s/real/loop", root);
    assert_int_equal(symlink("..", p), 0);
    free(p);
    /* A loop to itself: real/self -> . */
    p = fmt("%s/real/self", root);
    assert_int_equal(symlink(".", p), 0);
    free(p);
    /* A broken symlink named like an image: listed, fails at read time. */
    p = fmt("%s/real/broken.jpg", root);
    assert_int_equal(symlink("does-not-exist", p), 0);
    free(p);

    /* A link from one class into another: real/tolinked -> ../linked. */
    p = fmt("%s/real/tolinked", root);
    assert_int_equal(symlink("../linked", p), 0);
    free(p);

    char *uri = fmt("imagefolder:%s", root);
    stk_dataset *ds = open_ok(uri, NULL);
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    /* Class "linked" (a symlink): o.png, inner/i.jpg. Class "real":
     * broken.jpg, r.jpg. real/loop is the root, real/self is real/ and
     * real/tolinked is class "linked": each is a directory met again, so
     * each is left out and reported — neither walked forever nor listed a
     * second time under another label (os.walk would list linked's images
     * again under "real", through real/loop/linked and real/tolinked). */
    assert_string_equal(ds->class_names[0], "linked");
    assert_string_equal(ds->class_names[1], "real");
    expect_sample(ds, 0, "o.png", 0);
    expect_sample(ds, 1, "inner/i.jpg", 0);
    expect_read_fail(ds, 2, STK_EDATA, "real/broken.jpg", "cannot open");
    expect_sample(ds, 3, "real/r.jpg", 1);
    assert_int_equal(info.count, 4);
    /* Reported in walk order (subdirectories by name). */
    assert_int_equal(stk_dataset_skipped_count(ds), 3);
    p = fmt("imagefolder: %s/real/loop: is the dataset root again (a symlink loop); not followed",
            root);
    assert_string_equal(stk_dataset_skipped(ds, 0), p);
    free(p);
    p = fmt("imagefolder: %s/real/self: is the same directory as real (a symlink loop or a "
            "second path to it); its images are listed once, under real",
            root);
    assert_string_equal(stk_dataset_skipped(ds, 1), p);
    free(p);
    assert_non_null(strstr(stk_dataset_skipped(ds, 2), "/real/tolinked: is the same directory as "
                                                       "linked"));
    assert_null(stk_dataset_skipped(ds, 3));
    stk_dataset_close(ds);
    free(uri);

    /* strict=1: the first directory left out fails the open. */
    uri = fmt("imagefolder:%s?strict=1", root);
    expect_open_fail(uri, NULL, STK_EDATA, "real/loop: is the dataset root again", "strict=1");
    free(uri);
    uri = fmt("imagefolder:%s?strict=yes", root);
    expect_open_fail(uri, NULL, STK_EINVAL, "strict", NULL);
    free(uri);
    free(root);
    free(other);
}

static void test_imagefolder_errors(void **state)
{
    (void)state;
    stk_dataset_options o = {0};
    char *root, *uri, *p;

    /* A class without images (a text file only). */
    root = strdup(tu_path("emptyclass"));
    assert_int_equal(mkdir(root, 0755), 0);
    put(root, "good/a.jpg");
    put(root, "bad/readme.txt");
    mkdirs(root, "worse/deeper");
    uri = fmt("imagefolder:%s", root);
    expect_open_fail(uri, NULL, STK_EFORMAT, "found no valid file for the classes bad, worse",
                     ".jpeg");
    free(uri);
    free(root);

    /* No class directories at all. */
    root = strdup(tu_path("noclasses"));
    assert_int_equal(mkdir(root, 0755), 0);
    put(root, "loose.jpg");
    uri = fmt("imagefolder:%s", root);
    expect_open_fail(uri, NULL, STK_EFORMAT, "no class directories", root);
    /* ... and such a directory is not detected as ImageFolder. */
    expect_open_fail(root, NULL, STK_ENOENT, "no dataset detected", "ImageFolder");
    free(uri);
    free(root);

    /* Not there; not a directory; a query it does not take. */
    uri = fmt("imagefolder:%s", tu_path("nothing-here"));
    expect_open_fail(uri, NULL, STK_ENOENT, "nothing-here", "no such directory");
    free(uri);
    p = strdup(tu_path("plainfile"));
    tu_write_file(p, "x", 1);
    uri = fmt("imagefolder:%s", p);
    expect_open_fail(uri, NULL, STK_EINVAL, "plainfile", "not a directory");
    free(uri);
    free(p);
    expect_open_fail("imagefolder:", NULL, STK_EINVAL, "empty directory", NULL);
    root = make_tree("tree_q");
    uri = fmt("imagefolder:%s?split=train", root);
    expect_open_fail(uri, NULL, STK_EINVAL, "unknown query key 'split'", NULL);
    free(uri);

    /* max_samples. */
    o.max_samples = TREE_N - 1;
    uri = fmt("imagefolder:%s", root);
    expect_open_fail(uri, &o, STK_ELIMIT, "max_samples", root);
    o.max_samples = TREE_N;
    stk_dataset_close(open_ok(uri, &o));
    free(uri);
    free(root);
}

static void test_imagefolder_read_errors(void **state)
{
    (void)state;
    stk_dataset_options o = {0};
    char *root = strdup(tu_path("readerr"));
    char *uri, *p;
    stk_dataset *ds;
    assert_int_equal(mkdir(root, 0755), 0);
    put(root, "c/a_gone.jpg");
    put(root, "c/b_dir.jpg");
    put(root, "c/c_empty.jpg");
    put(root, "c/d_fifo.jpg");
    put(root, "c/e_ok.jpg");
    put(root, "c/f_big_file_over_the_limit.jpg");
    uri = fmt("imagefolder:%s", root);
    o.max_bytes = 20;
    ds = open_ok(uri, &o);

    /* After open: one file removed, one replaced by a directory, one
     * emptied, one replaced by a FIFO (must not hang the reader). */
    p = fmt("%s/c/a_gone.jpg", root);
    assert_int_equal(unlink(p), 0);
    free(p);
    p = fmt("%s/c/b_dir.jpg", root);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(mkdir(p, 0755), 0);
    free(p);
    p = fmt("%s/c/c_empty.jpg", root);
    tu_write_file(p, "", 0);
    free(p);
    p = fmt("%s/c/d_fifo.jpg", root);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(mkfifo(p, 0644), 0);
    free(p);

    expect_read_fail(ds, 0, STK_EDATA, "readerr/c/a_gone.jpg", "cannot open");
    expect_read_fail(ds, 1, STK_EDATA, "readerr/c/b_dir.jpg", "not a regular file");
    expect_read_fail(ds, 2, STK_EDATA, "readerr/c/c_empty.jpg", "empty file");
    expect_read_fail(ds, 3, STK_EDATA, "readerr/c/d_fifo.jpg", "not a regular file");
    expect_sample(ds, 4, "c/e_ok.jpg", 0);
    expect_read_fail(ds, 5, STK_EDATA, "f_big_file_over_the_limit.jpg", "max_bytes");
    expect_read_fail(ds, 6, STK_EINVAL, "out of range", NULL);
    stk_dataset_close(ds);
    free(uri);
    free(root);
}

/* A directory that cannot be opened must be listed as left out (and fail
 * strict=1 and pack --strict), never lose its images silently. Run by a
 * process that cannot open a mode-000 directory: this one when not root;
 * when root (who may open anything), a child that drops to uid/gid 65534
 * first. The child reports failures by exit status, with the reason on
 * stderr. */
static int unreadable_checks(void)
{
    char dir[] = "/tmp/stk-unreadable-XXXXXX";
    char path[600], dest[600];
    stk_dataset *ds = NULL;
    int rc, bad = 0;
    static uint8_t rgb[4 * 4 * 3];
#define CHECK(c)                                                                          \
    do {                                                                                  \
        if (!(c)) {                                                                       \
            fprintf(stderr, "unreadable_checks: %s:%d: %s (last message: %s)\n", __FILE__, \
                    __LINE__, #c, stk_errmsg());                                          \
            bad = 1;                                                                      \
            goto out;                                                                     \
        }                                                                                 \
    } while (0)

    CHECK(mkdtemp(dir) != NULL);
    static const char *const files[] = {"good/a.png", "good/locked/b.png",
                                        "good/locked/sub/c.png", "other/d.png"};
    for (size_t i = 0; i < 4; i++) {
        char *slash;
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        for (slash = path + strlen(dir) + 1; (slash = strchr(slash, '/')); slash++) {
            *slash = '\0';
            mkdir(path, 0755);
            *slash = '/';
        }
        CHECK(stk_png_write_rgb8(path, rgb, 4, 4, 12) == 0);
    }
    snprintf(path, sizeof path, "%s/good/locked", dir);
    CHECK(chmod(path, 0) == 0);
    {
        int probe = open(path, O_RDONLY | O_DIRECTORY);
        if (probe >= 0) {
            close(probe);
            fprintf(stderr, "unreadable_checks: SKIPPED: this process can still open a mode-000 "
                            "directory (it has CAP_DAC_OVERRIDE)\n");
            bad = 77;
            goto out;
        }
    }

    snprintf(path, sizeof path, "imagefolder:%s", dir);
    CHECK(stk_dataset_open(path, NULL, &ds) == 0);
    CHECK(ds->count == 2); /* good/a.png, other/d.png */
    CHECK(stk_dataset_skipped_count(ds) == 1);
    snprintf(path, sizeof path,
             "imagefolder: %s/good/locked: cannot open directory: Permission denied; its images "
             "are left out",
             dir);
    CHECK(strcmp(stk_dataset_skipped(ds, 0), path) == 0);
    stk_dataset_close(ds);
    ds = NULL;

    snprintf(path, sizeof path, "imagefolder:%s?strict=1", dir);
    rc = stk_dataset_open(path, NULL, &ds);
    CHECK(rc == STK_EDATA && ds == NULL);
    CHECK(strstr(stk_errmsg(), "good/locked: cannot open directory: Permission denied"));

    /* pack: listed as a skipped input (index UINT64_MAX); --strict fails. */
    {
        stk_pack_options po = {0};
        stk_pack_result pr = {0};
        snprintf(path, sizeof path, "imagefolder:%s", dir);
        snprintf(dest, sizeof dest, "%s-out", dir);
        CHECK(stk_pack(path, dest, &po, &pr) == 0);
        CHECK(pr.records == 2 && pr.skipped == 1);
        po.strict = 1;
        snprintf(dest, sizeof dest, "%s-out-strict", dir);
        rc = stk_pack(path, dest, &po, &pr);
        CHECK(rc == STK_EDATA);
        CHECK(strstr(stk_errmsg(), "good/locked: cannot open directory"));
    }

    /* A class directory that cannot be opened: the class is empty, and the
     * error says why. */
    snprintf(path, sizeof path, "%s/other", dir);
    CHECK(chmod(path, 0) == 0);
    snprintf(path, sizeof path, "imagefolder:%s", dir);
    rc = stk_dataset_open(path, NULL, &ds);
    CHECK(rc == STK_EFORMAT && ds == NULL);
    CHECK(strstr(stk_errmsg(), "found no valid file for the class other"));
    CHECK(strstr(stk_errmsg(), "other: cannot open directory: Permission denied"));

out:
    stk_dataset_close(ds);
    snprintf(path, sizeof path, "chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s' '%s-out' '%s-out-strict'",
             dir, dir, dir, dir);
    if (system(path) != 0)
        fprintf(stderr, "unreadable_checks: could not remove %s\n", dir);
    return bad;
#undef CHECK
}

static void test_imagefolder_unreadable(void **state)
{
    (void)state;
    int status = 0;
    pid_t pid;
    if (geteuid() != 0) {
        assert_int_equal(unreadable_checks(), 0);
        return;
    }
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) {
            fprintf(stderr, "test_imagefolder_unreadable: cannot drop root privileges: %s\n",
                    strerror(errno));
            _exit(3);
        }
        _exit(unreadable_checks());
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77)
        skip();
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* The label map survives any directory name: a newline, a backslash, a
 * tab, UTF-8 and bytes that are not UTF-8, through pack and open. The
 * stored text is checked against the escape rule of docs/format.md,
 * written out by hand. */
static void test_imagefolder_class_names(void **state)
{
    (void)state;
    static const char *const names[] = {"a\nb", "back\\slash", "plain", "tab\there",
                                        "\xc3\xa9-utf8", "\xff\xfe bad"}; /* in strcmp order */
    static const char stored[] = "a\\nb\nback\\\\slash\nplain\ntab\\x09here\n\xc3\xa9-utf8\n"
                                 "\\xff\\xfe bad";
    static uint8_t rgb[2 * 3 * 3];
    char *root = strdup(tu_path("names")), *dest = strdup(tu_path("names_out")), *p;
    stk_pack_options po = {0};
    stk_pack_result pr = {0};
    stk_dataset *src, *packed;
    assert_int_equal(mkdir(root, 0755), 0);
    for (size_t i = 0; i < 6; i++) {
        p = fmt("%s/%s", root, names[5 - i]);
        assert_int_equal(mkdir(p, 0755), 0);
        free(p);
        p = fmt("%s/%s/img.png", root, names[5 - i]);
        rgb[0] = (uint8_t)(5 - i);
        assert_int_equal(stk_png_write_rgb8(p, rgb, 3, 2, 9), 0);
        free(p);
    }
    p = fmt("imagefolder:%s", root);
    src = open_ok(p, NULL);
    assert_int_equal(src->num_classes, 6);
    for (uint32_t c = 0; c < 6; c++)
        assert_string_equal(stk_dataset_class_name(src, c), names[c]);
    assert_int_equal(stk_pack(p, dest, &po, &pr), 0);
    free(p);
    assert_int_equal(pr.records, 6);

    packed = open_ok(dest, NULL);
    assert_string_equal(stk_dataset_metadata(packed, "class_names"), stored);
    assert_int_equal(packed->num_classes, 6);
    for (uint32_t c = 0; c < 6; c++) {
        int64_t label = -1;
        uint8_t px[2 * 3 * 3];
        assert_string_equal(stk_dataset_class_name(packed, c), names[c]);
        assert_int_equal(stk_dataset_read(packed, c, px, sizeof px, &label), sizeof px);
        assert_int_equal(label, c);
        assert_int_equal(px[0], c); /* the image of that class's folder */
    }
    stk_dataset_close(packed);
    stk_dataset_close(src);

    /* Decoding is lenient to backslashes that escape nothing (label maps
     * written before the escape existed), and "\x00" is not a byte. */
    {
        char **v = NULL;
        uint32_t n = 0;
        assert_int_equal(stk_class_names_decode("c:\\dir\\q\nx\\x00y\\x4A\\\\n\\", &v, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(v[0], "c:\\dir\\q");
        assert_string_equal(v[1], "x\\x00yJ\\n\\");
        free(v[0]);
        free(v[1]);
        free(v);
    }
    free(root);
    free(dest);
}

/* ------------------------------------------------------------------------ */
/* List files                                                               */
/* ------------------------------------------------------------------------ */

static void test_list(void **state)
{
    (void)state;
    char *root = strdup(tu_path("listroot"));
    char *list, *uri, *text, *abs;
    stk_dataset *ds;
    stk_dataset_info info;
    assert_int_equal(mkdir(root, 0755), 0);
    put(root, "imgs/a.jpg");
    put(root, "imgs/b c.png"); /* spaces in names are fine */
    put(root, "lists/near.jpg");
    put(root, "far.jpg");
    abs = fmt("%s/far.jpg", root);

    /* Relative to the list's own directory (lists/), absolute as is;
     * comments, blank and whitespace-only lines, CRLF, no final newline. */
    list = fmt("%s/lists/train.txt", root);
    text = fmt("# a comment\n"
               "../imgs/a.jpg\t3\n"
               "\n"
               "   \t \n"
               "../imgs/b c.png\t0\r\n"
               "near.jpg\t7\n"
               "#../imgs/a.jpg\t9\n"
               "%s\t12",
               abs);
    tu_write_file(list, text, strlen(text));
    uri = fmt("list:%s", list);
    ds = open_ok(uri, NULL);
    stk_dataset_info_get(ds, &info);
    assert_string_equal(info.format, "list");
    assert_int_equal(info.count, 4);
    assert_int_equal(info.num_classes, 13);
    assert_int_equal(info.height, 0);
    assert_null(ds->class_names);
    expect_sample(ds, 0, "imgs/a.jpg", 3);
    expect_sample(ds, 1, "imgs/b c.png", 0);
    expect_sample(ds, 2, "lists/near.jpg", 7);
    expect_sample(ds, 3, "far.jpg", 12);
    stk_dataset_close(ds);
    free(uri);
    free(text);

    /* A list file in the current directory (no slash in its name). */
    {
        char cwd[4096];
        assert_non_null(getcwd(cwd, sizeof cwd));
        assert_int_equal(chdir(root), 0);
        tu_write_file("here.txt", "far.jpg\t1\n", 10);
        ds = open_ok("list:here.txt", NULL);
        expect_sample(ds, 0, "far.jpg", 1);
        stk_dataset_close(ds);
        assert_int_equal(chdir(cwd), 0);
    }

    /* A missing image is found at read time, naming the resolved path. */
    text = fmt("../imgs/missing.jpg\t1\n");
    tu_write_file(list, text, strlen(text));
    ds = open_ok(uri = fmt("list:%s", list), NULL);
    expect_read_fail(ds, 0, STK_EDATA, "lists/../imgs/missing.jpg", "cannot open");
    stk_dataset_close(ds);
    free(uri);
    free(text);
    free(list);
    free(abs);
    free(root);
}

static void test_list_bad_lines(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *needle;
    } cases[] = {
        {"a.jpg\t1\nb.jpg 2\n", ":2: no tab"},
        {"\t1\n", ":1: empty path"},
        {"a.jpg\t-1\n", ":1: label '-1' is not a non-negative"},
        {"a.jpg\t+1\n", "label '+1'"},
        {"a.jpg\t1.5\n", "label '1.5'"},
        {"a.jpg\t12abc\n", "label '12abc'"},
        {"a.jpg\t 1\n", "label ' 1'"},
        {"a.jpg\t1 \n", "label '1 '"},
        {"a.jpg\t99999999999999999999\n", "too large"},
        {"a.jpg\t9223372036854775808\n", "too large"},
        {"a.jpg\t\n", ":1: missing label"},
        {"a.jpg\t1\t2\n", "more than one tab"},
        {"# only\n\n  \n", "no samples"},
        {"", "no samples"},
    };
    char *list = strdup(tu_path("bad.txt"));
    char *uri = fmt("list:%s", list);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tu_write_file(list, cases[i].text, strlen(cases[i].text));
        expect_open_fail(uri, NULL, STK_EFORMAT, list, cases[i].needle);
    }
    /* A NUL byte inside a line. */
    tu_write_file(list, "a\0b.jpg\t1\n", 10);
    expect_open_fail(uri, NULL, STK_EFORMAT, "bad.txt:1", "NUL");
    /* The largest label is fine. */
    tu_write_file(list, "a.jpg\t9223372036854775807\n", 26);
    stk_dataset *ds = open_ok(uri, NULL);
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    assert_int_equal(info.num_classes, 0); /* too large to be a class count */
    stk_dataset_close(ds);
    free(uri);

    /* Missing list; a directory as the list; query keys. */
    uri = fmt("list:%s", tu_path("no-such-list.txt"));
    expect_open_fail(uri, NULL, STK_ENOENT, "no-such-list.txt", NULL);
    free(uri);
    uri = fmt("list:%s", tu_tmpdir());
    expect_open_fail(uri, NULL, STK_EINVAL, "is a directory", NULL);
    free(uri);
    uri = fmt("list:%s?x=1", list);
    expect_open_fail(uri, NULL, STK_EINVAL, "unknown query key", NULL);
    free(uri);
    expect_open_fail("list:", NULL, STK_EINVAL, "empty file name", NULL);
    free(list);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_imagefolder_layout),
        cmocka_unit_test(test_imagefolder_symlinks),
        cmocka_unit_test(test_imagefolder_errors),
        cmocka_unit_test(test_imagefolder_read_errors),
        cmocka_unit_test(test_imagefolder_unreadable),
        cmocka_unit_test(test_imagefolder_class_names),
        cmocka_unit_test(test_list),
        cmocka_unit_test(test_list_bad_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
