/*
 * test_faultinject.c — every allocation and I/O call of open, pack and a
 * loader epoch, failed one at a time (docs/testing.md).
 *
 * As SQLite's malloc and I/O error tests do: run an operation once counting
 * the wrapped calls it makes (tests/faultinject.c), then run it again with
 * call 1 failing, then call 2, ... until a run makes fewer calls than the
 * one chosen to fail, i.e. every call site the operation reaches has failed
 * once; then again with the nth and every later call failing (persistent
 * mode). Each run must end in either
 *   - a clean error: a pinned negative code with a non-empty message, or
 *   - success with exactly the result of the run without a failure (a
 *     digest of every sample, batch or shard byte): a failure the library
 *     absorbed (a size heuristic's stat, say) must not change the output,
 *   - or, where the API allows it, inputs left out and each one reported
 *     (pack without strict, the loader's skip policy, verify's damage),
 * and must leave no file descriptor, mapping, file in a failed pack's
 * destination or (under ASan, detect_leaks=1) heap block behind, and never
 * crash or hang (an alarm aborts a run that takes over a minute; loader
 * waits time out).
 *
 * The datasets are small (a few samples each, a few larger files to reach
 * buffer growth) so that the ten thousand runs stay well under a minute
 * under ASan; every format and I/O mode is covered: CIFAR-10, IDX plain
 * and gzip, in-memory arrays, an image folder (JPEG and PNG), a list file,
 * and .stk shards raw, zstd and encoded, with mmap and pread I/O. Each
 * scenario prints how many injection points it covered.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "codec/codec_write.h"
#include "core/error.h"
#include "core/util.h"
#include "faultinject.h"
#include "stoker/stoker.h"
#include "testutil.h"

#include <dirent.h>
#include <dlfcn.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* LeakSanitizer's on-demand check, present only in sanitizer builds. */
int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

/* ------------------------------------------------------------------------ */
/* Digests and files                                                        */
/* ------------------------------------------------------------------------ */

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static char *fmt(const char *f, ...)
{
    static char bufs[64][8192];
    static int next;
    char *b = bufs[next++ % 64];
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(b, sizeof bufs[0], f, ap);
    va_end(ap);
    /* a cut path would test something else: say so instead */
    if (n < 0 || (size_t)n >= sizeof bufs[0]) {
        fprintf(stderr, "fmt: %d bytes do not fit the %zu-byte buffer\n", n, sizeof bufs[0]);
        abort();
    }
    return b;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    return remove(p);
}

static void rm_rf(const char *dir) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names in dir, sorted; returns the count (names malloc'd into out[]). */
static int list_dir(const char *dir, char **out, int cap)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    if (!d)
        return 0;
    while ((e = readdir(d)) && n < cap)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            out[n++] = strdup(e->d_name);
    closedir(d);
    qsort(out, (size_t)n, sizeof *out, cmp_str);
    return n;
}

/* ------------------------------------------------------------------------ */
/* The loop                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct scenario scenario;
struct scenario {
    const char *name;
    /* Runs the operation (armed); returns 0 with *digest set, or a negative
     * stoker code with the message copied to sc->msg. */
    int (*run)(scenario *sc, uint64_t *digest);
    /* Unarmed, before each run (may be NULL). */
    void (*prepare)(scenario *sc);
    /* Unarmed, after each run: add to the digest what must be read back
     * (pack's shards), or check what a failed run left (may be NULL). */
    void (*after)(scenario *sc, int rc, uint64_t *digest);
    const char *uri;
    const char *dest;
    const char *spec;
    stk_pack_options pack;
    stk_loader_options loader;
    stk_dataset *ds;
    char msg[STK_ERRMSG_MAX];
    char left[256]; /* set by after(): what a failed run left behind */
    uint64_t skips; /* pack: inputs reported through on_skip */
};

/* run(): success, but inputs were left out and reported (pack, not strict). */
#define FI_SKIPPED 2

static void save_msg(scenario *sc, const char *m)
{
    snprintf(sc->msg, sizeof sc->msg, "%s", m ? m : "");
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char m[] = "test_faultinject: a run took over 60 s (hang)\n";
    (void)!write(2, m, sizeof m - 1);
    abort();
}

static int run_once(scenario *sc, uint64_t fail_at, int persistent, uint64_t *calls,
                    uint64_t *digest)
{
    if (sc->prepare)
        sc->prepare(sc);
    sc->msg[0] = '\0';
    sc->left[0] = '\0';
    stk_errmsg_clear();
    alarm(60);
    fi_arm(fail_at, persistent);
    int rc = sc->run(sc, digest);
    *calls = fi_disarm();
    alarm(0);
    if (sc->after)
        sc->after(sc, rc, digest);
    return rc;
}

/* Where the failed call was made: "exe+0xOFFSET" for addr2line -e. */
static const char *caller_text(void)
{
    static char buf[64];
    Dl_info info;
    void *c = fi_fired_caller();
    if (c && dladdr(c, &info) && info.dli_fbase)
        snprintf(buf, sizeof buf, "+%#lx", (unsigned long)((char *)c - (char *)info.dli_fbase));
    else
        snprintf(buf, sizeof buf, "%p", c);
    return buf;
}

/* A run that broke a rule: reported, and the scenario fails at its end
 * (after trying every point, so that one report lists every bad site). */
#define BAD(...)                                                                                   \
    do {                                                                                           \
        if (bad++ < 20) {                                                                          \
            print_error("%s: call %llu%s (%s from %s) failed: ", sc->name, (unsigned long long)n,  \
                        persistent ? " and on" : "", what, caller_text());                         \
            print_error(__VA_ARGS__);                                                              \
            print_error("\n");                                                                     \
        }                                                                                          \
    } while (0)

static int loop_mode(scenario *sc, int persistent)
{
    uint64_t ref = 0, calls = 0, digest;
    long maps0 = fi_live_maps();
    int fds0 = fi_open_fds();
    int rc = run_once(sc, 0, 0, &calls, &ref);
    if (rc != 0)
        fail_msg("%s: the run without failures failed: %d %s", sc->name, rc, sc->msg);
    assert_int_equal(fi_open_fds(), fds0);
    assert_int_equal(fi_live_maps(), maps0);
    uint64_t absorbed = 0, errors = 0, skipped = 0, n;
    int bad = 0;
    for (n = 1;; n++) {
        digest = 0;
        rc = run_once(sc, n, persistent, &calls, &digest);
        int fired = fi_fired();
        const char *what = fired ? fi_fired_what() : "-";
        int fds = fi_open_fds();
        long maps = fi_live_maps();
        if (rc == FI_SKIPPED) {
            skipped++;
            rc = STK_EDATA; /* reported like an error, checked like one below */
        } else if (rc > 0 || !strcmp(stk_strerror(rc), "unknown error"))
            BAD("the result %d is not a stoker code", rc);
        else if (rc == STK_ETIMEDOUT)
            BAD("the loader hung: %s", sc->msg);
        else if (rc < 0 && !sc->msg[0])
            BAD("%s with an empty message", stk_strerror(rc));
        else if (rc == 0 && digest != ref)
            BAD("the run succeeded with a different result");
        if (fds != fds0)
            BAD("%d file descriptors leaked (%s)", fds - fds0, sc->msg);
        if (maps != maps0)
            BAD("%ld mappings leaked (%s)", maps - maps0, sc->msg);
        if (sc->left[0])
            BAD("%s (%s)", sc->left, sc->msg);
        fds0 = fds;
        maps0 = maps;
        if (getenv("FI_LEAKCHECK_EACH") && __lsan_do_recoverable_leak_check &&
            __lsan_do_recoverable_leak_check())
            BAD("memory leaked (%s)", sc->msg);
        if (getenv("FI_VERBOSE"))
            print_message("  %s #%llu%s %s %s -> %d %s\n", sc->name, (unsigned long long)n,
                          persistent ? "+" : "", what, caller_text(), rc, sc->msg);
        if (!fired)
            break;
        if (rc == 0)
            absorbed++;
        else
            errors++;
    }
    print_message("%-30s %-10s %5llu injection points: %llu clean errors, %llu absorbed",
                  sc->name, persistent ? "persistent" : "single", (unsigned long long)(n - 1),
                  (unsigned long long)(errors - skipped), (unsigned long long)absorbed);
    if (skipped)
        print_message(", %llu inputs left out and reported", (unsigned long long)skipped);
    print_message("\n");
    if (bad)
        print_error("%s: %d runs broke the rules (listed above)\n", sc->name, bad);
    return bad;
}

/* Both modes: the nth call fails alone, then the nth and every later one. */
static int loop(scenario *sc) { return loop_mode(sc, 0) + loop_mode(sc, 1); }

/* ------------------------------------------------------------------------ */
/* Fixtures (made unarmed, once)                                            */
/* ------------------------------------------------------------------------ */

static uint8_t *sample_buf; /* room for any sample of the fixtures */
#define SAMPLE_CAP (1u << 20)

static void put_jpeg(const char *path, uint32_t w, uint32_t h, uint64_t seed)
{
    uint8_t *px = malloc((size_t)w * h * 3);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (int c = 0; c < 3; c++)
                px[((size_t)y * w + x) * 3 + c] = (uint8_t)(x * 7 + y * 3 + c * 40 + seed * 11);
    stk_scratch out = {0};
    size_t n = 0;
    assert_int_equal(stk_jpeg_encode(px, w, h, 3, (size_t)w * 3, 85, &out, &n), 0);
    tu_write_file(path, out.data, n);
    stk_scratch_free(&out);
    free(px);
}

static void put_png(const char *path, uint32_t w, uint32_t h)
{
    uint8_t *px = malloc((size_t)w * h * 3);
    tu_fill_random(px, (size_t)w * h * 3, w * h);
    assert_int_equal(stk_png_write_rgb8(path, px, w, h, (size_t)w * 3), 0);
    free(px);
}

/* A NumPy .npy file (format 1.0): `descr` and `shape` as in the header
 * dict, then `n` bytes of data. */
static void put_npy(const char *path, const char *descr, const char *shape, const void *data,
                    size_t n)
{
    char head[256];
    int len = snprintf(head + 10, sizeof head - 10,
                       "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    assert_true(len > 0 && len < 180);
    while ((10 + len + 1) % 64)
        head[10 + len++] = ' ';
    head[10 + len++] = '\n';
    memcpy(head, "\x93NUMPY\x01\x00", 8);
    head[8] = (char)(len & 0xff);
    head[9] = (char)(len >> 8);
    uint8_t *all = malloc((size_t)(10 + len) + n);
    assert_non_null(all);
    memcpy(all, head, (size_t)(10 + len));
    memcpy(all + 10 + len, data, n);
    tu_write_file(path, all, (size_t)(10 + len) + n);
    free(all);
}

static void put_idx(const char *img, const char *lbl, int gz)
{
    /* 3 images of 6x5 and their labels. */
    uint8_t ih[16 + 3 * 30] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 6, 0, 0, 0, 5};
    uint8_t lh[8 + 3] = {0, 0, 8, 1, 0, 0, 0, 3, 4, 0, 9};
    tu_fill_random(ih + 16, 90, 7);
    if (gz) {
        tu_write_gz(img, ih, sizeof ih);
        tu_write_gz(lbl, lh, sizeof lh);
    } else {
        tu_write_file(img, ih, sizeof ih);
        tu_write_file(lbl, lh, sizeof lh);
    }
}

static const char *root;

static int setup(void **state)
{
    (void)state;
    signal(SIGALRM, on_alarm);
    root = tu_tmpdir();
    sample_buf = malloc(SAMPLE_CAP);
    /* CIFAR-10: five batch files of 2 records. */
    mkdir(fmt("%s/cifar", root), 0755);
    uint8_t rec[2 * 3073];
    for (int f = 1; f <= 5; f++) {
        tu_fill_random(rec, sizeof rec, (uint64_t)f);
        rec[0] %= 10;
        rec[3073] %= 10;
        tu_write_file(fmt("%s/cifar/data_batch_%d.bin", root, f), rec, sizeof rec);
    }
    /* IDX plain and gzip (MNIST layout). */
    mkdir(fmt("%s/idx", root), 0755);
    put_idx(fmt("%s/idx/train-images-idx3-ubyte", root),
            fmt("%s/idx/train-labels-idx1-ubyte", root), 0);
    mkdir(fmt("%s/mnistgz", root), 0755);
    put_idx(fmt("%s/mnistgz/train-images-idx3-ubyte.gz", root),
            fmt("%s/mnistgz/train-labels-idx1-ubyte.gz", root), 1);
    /* NumPy arrays: 6 images 4x5x3 and int64 labels. */
    {
        uint8_t px[6 * 4 * 5 * 3];
        int64_t lb[6] = {0, 2, 1, 1, 0, 2};
        tu_fill_random(px, sizeof px, 9);
        mkdir(fmt("%s/npy", root), 0755);
        put_npy(fmt("%s/npy/images.npy", root), "|u1", "(6, 4, 5, 3)", px, sizeof px);
        put_npy(fmt("%s/npy/labels.npy", root), "<i8", "(6,)", lb, sizeof lb);
    }
    /* Image folder: JPEGs (one big enough for restart intervals) and a PNG. */
    mkdir(fmt("%s/if", root), 0755);
    mkdir(fmt("%s/if/cat", root), 0755);
    mkdir(fmt("%s/if/dog", root), 0755);
    put_jpeg(fmt("%s/if/cat/a.jpg", root), 64, 48, 1);
    put_png(fmt("%s/if/cat/b.png", root), 20, 18);
    put_jpeg(fmt("%s/if/dog/c.jpg", root), 24, 20, 2);
    put_jpeg(fmt("%s/if/dog/d.jpg", root), 40, 33, 3);
    /* A nested folder, and a folder linked from outside the root (its
     * entry is a symlink: whether it is a directory takes an fstatat). */
    mkdir(fmt("%s/if/dog/sub", root), 0755);
    put_jpeg(fmt("%s/if/dog/sub/e.jpg", root), 16, 16, 4);
    mkdir(fmt("%s/extra", root), 0755);
    put_jpeg(fmt("%s/extra/f.jpg", root), 8, 8, 5);
    assert_int_equal(symlink(fmt("%s/extra", root), fmt("%s/if/cat/linked", root)), 0);
    /* A class folder that is a symlink (to a folder outside the root). */
    mkdir(fmt("%s/extra2", root), 0755);
    put_jpeg(fmt("%s/extra2/g.jpg", root), 8, 16, 6);
    assert_int_equal(symlink(fmt("%s/extra2", root), fmt("%s/if/bird", root)), 0);
    /* MNIST gzip larger than the first decompression buffer (1 MiB). */
    {
        const uint32_t count = 1400;
        size_t n = 16 + (size_t)count * 784;
        uint8_t *im = calloc(1, n), lb[8 + 1400] = {0, 0, 8, 1, 0, 0, 5, 0x78};
        memcpy(im, (uint8_t[]){0, 0, 8, 3, 0, 0, 5, 0x78, 0, 0, 0, 28, 0, 0, 0, 28}, 16);
        for (size_t i = 16; i < n; i += 97)
            im[i] = (uint8_t)i;
        for (uint32_t i = 0; i < count; i++)
            lb[8 + i] = (uint8_t)(i % 10);
        mkdir(fmt("%s/mnistbig", root), 0755);
        tu_write_gz(fmt("%s/mnistbig/train-images-idx3-ubyte.gz", root), im, n);
        tu_write_gz(fmt("%s/mnistbig/train-labels-idx1-ubyte.gz", root), lb, sizeof lb);
        free(im);
    }
    /* CIFAR-10 larger than the shard writer's 2 MiB buffer. */
    {
        size_t n = (size_t)720 * 3073;
        uint8_t *big = malloc(n);
        tu_fill_random(big, n, 11);
        for (size_t i = 0; i < n; i += 3073)
            big[i] %= 10;
        mkdir(fmt("%s/cifarbig", root), 0755);
        tu_write_file(fmt("%s/cifarbig/test_batch.bin", root), big, n);
        free(big);
    }
    /* A list file naming three of them. */
    static const char list[] = "if/cat/a.jpg\t0\nif/cat/b.png\t1\nif/dog/d.jpg\t1\n";
    tu_write_file(fmt("%s/list.txt", root), list, sizeof list - 1);
    /* Shards: raw (several shards), zstd, encoded with restart markers. */
    stk_pack_options raw = {.jobs = 1, .mode = STK_PACK_RAW, .shard_bytes = 8000};
    assert_int_equal(stk_pack(fmt("%s/cifar", root), fmt("%s/stk_raw", root), &raw, NULL), 0);
    stk_pack_options z = {.jobs = 1, .mode = STK_PACK_RAW, .zstd_level = 3};
    assert_int_equal(stk_pack(fmt("%s/cifar", root), fmt("%s/stk_zstd", root), &z, NULL), 0);
    stk_pack_options enc = {.jobs = 1, .restart_interval = 4, .shard_bytes = 4000};
    assert_int_equal(stk_pack(fmt("imagefolder:%s/if", root), fmt("%s/stk_enc", root), &enc,
                              NULL),
                     0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(sample_buf);
    rm_rf(root);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Open: open, read every sample and label, close                           */
/* ------------------------------------------------------------------------ */

static int run_open(scenario *sc, uint64_t *digest)
{
    stk_dataset *ds = NULL;
    stk_dataset_info info;
    int rc = stk_dataset_open(sc->uri, NULL, &ds);
    if (rc < 0) {
        save_msg(sc, stk_errmsg());
        return rc;
    }
    stk_dataset_info_get(ds, &info);
    uint64_t h = mix(0xcbf29ce484222325ull, &info.count, sizeof info.count);
    h = mix(h, &info.height, 3 * sizeof info.height);
    h = mix(h, &info.num_classes, sizeof info.num_classes);
    for (uint64_t i = 0; i < info.count; i++) {
        int64_t label = -1, label2 = -1;
        int64_t n = stk_dataset_read(ds, i, sample_buf, SAMPLE_CAP, &label);
        if (n < 0) {
            save_msg(sc, stk_errmsg());
            rc = (int)n;
            break;
        }
        rc = stk_dataset_label(ds, i, &label2);
        if (rc < 0) {
            save_msg(sc, stk_errmsg());
            break;
        }
        h = mix(h, sample_buf, (size_t)n);
        h = mix(h, &label, sizeof label);
        h = mix(h, &label2, sizeof label2);
        /* The image field as stored (encoded bytes, or raw pixels); not for
         * every sample of the big MNIST, where the runs would grow as the
         * square of its 1400 samples. */
        if (i >= 8)
            continue;
        void *field = NULL;
        size_t size = 0;
        uint32_t shape[3] = {0, 0, 0};
        rc = stk_dataset_read_field(ds, i, NULL, &field, &size, shape);
        if (rc < 0) {
            save_msg(sc, stk_errmsg());
            break;
        }
        h = mix(h, field, size);
        h = mix(h, shape, sizeof shape);
        stk_free(field);
        /* The whole sample in a buffer of its own size, and its class name. */
        uint8_t *whole = NULL;
        int64_t m = stk_dataset_read_alloc(ds, i, &whole, shape, NULL);
        if (m < 0) {
            save_msg(sc, stk_errmsg());
            rc = (int)m;
            break;
        }
        assert_true(m == n && memcmp(whole, sample_buf, (size_t)n) == 0);
        stk_free(whole);
        const char *cls = label >= 0 && (uint64_t)label < info.num_classes
                              ? stk_dataset_class_name(ds, (uint32_t)label) : NULL;
        if (cls)
            h = mix(h, cls, strlen(cls));
    }
    stk_dataset_close(ds);
    *digest = h;
    return rc;
}

static uint8_t mem_pixels[5 * 4 * 3 * 3];
static const int64_t mem_labels[5] = {0, 3, 1, 1, 2};

static int run_memory(scenario *sc, uint64_t *digest)
{
    stk_dataset *ds = NULL;
    int rc = stk_dataset_from_memory(mem_pixels, mem_labels, 5, 4, 3, 3, 1, &ds);
    if (rc < 0) {
        save_msg(sc, stk_errmsg());
        return rc;
    }
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < 5 && rc == 0; i++) {
        int64_t label;
        int64_t n = stk_dataset_read(ds, i, sample_buf, SAMPLE_CAP, &label);
        if (n < 0) {
            save_msg(sc, stk_errmsg());
            rc = (int)n;
        } else {
            h = mix(h, sample_buf, (size_t)n);
            h = mix(h, &label, sizeof label);
        }
    }
    stk_dataset_close(ds);
    *digest = h;
    return rc;
}

static void test_open(void **state)
{
    (void)state;
    int bad = 0;
    tu_fill_random(mem_pixels, sizeof mem_pixels, 3);
    struct {
        const char *name, *uri;
    } cases[] = {
        {"open cifar10 dir", fmt("%s/cifar", root)},
        {"open cifar10 file", fmt("cifar10:%s/cifar/data_batch_2.bin", root)},
        {"open cifar10 9 files", fmt("cifar10:%s/cifar/data_batch_1.bin,%s/cifar/data_batch_2.bin,"
                                     "%s/cifar/data_batch_3.bin,%s/cifar/data_batch_4.bin,"
                                     "%s/cifar/data_batch_5.bin,%s/cifar/data_batch_1.bin,"
                                     "%s/cifar/data_batch_2.bin,%s/cifar/data_batch_3.bin,"
                                     "%s/cifar/data_batch_4.bin",
                                     root, root, root, root, root, root, root, root, root)},
        {"open idx plain", fmt("idx:%s/idx/train-images-idx3-ubyte,%s/idx/train-labels-idx1-ubyte",
                               root, root)},
        {"open idx detected", fmt("%s/idx/train-images-idx3-ubyte", root)},
        {"open mnist gz", fmt("mnist:%s/mnistgz", root)},
        {"open npy dir", fmt("npy:%s/npy", root)},
        {"open npy pair", fmt("npy:%s/npy/images.npy,%s/npy/labels.npy", root, root)},
        {"open npy detected", fmt("%s/npy", root)},
        {"open mnist gz 1.1 MB", fmt("mnist:%s/mnistbig?split=train", root)},
        {"open imagefolder", fmt("imagefolder:%s/if", root)},
        {"open imagefolder detected", fmt("%s/if", root)},
        {"open list", fmt("list:%s/list.txt", root)},
        {"open stk raw mmap", fmt("stk:%s/stk_raw?io=mmap", root)},
        {"open stk raw mmap small pages", fmt("stk:%s/stk_raw?io=mmap&hugepages=off", root)},
        {"open stk raw pread verify", fmt("stk:%s/stk_raw?io=pread&verify=always", root)},
        {"open stk zstd", fmt("stk:%s/stk_zstd", root)},
        {"open stk glob", fmt("stk:%s/stk_raw/shard-*.stk", root)},
        {"open stk glob detected", fmt("%s/stk_raw/shard-0000[0-4].stk", root)},
        /* one file opened alone: a set of one shard (one shard of a larger
         * set alone is refused as incomplete, docs/format.md) */
        {"open stk file", fmt("stk:%s/stk_zstd/shard-00000.stk", root)},
        {"open stk detected", fmt("%s/stk_zstd", root)},
        {"open stk file detected", fmt("%s/stk_zstd/shard-00000.stk", root)},
        {"open stk encoded mmap", fmt("stk:%s/stk_enc?io=mmap", root)},
        {"open stk encoded pread", fmt("stk:%s/stk_enc?io=pread&verify=first", root)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        scenario sc = {.name = cases[i].name, .uri = cases[i].uri, .run = run_open};
        bad += loop(&sc);
    }
    scenario mem = {.name = "open memory", .run = run_memory};
    bad += loop(&mem);
    assert_int_equal(bad, 0);
}

/* ------------------------------------------------------------------------ */
/* Pack                                                                     */
/* ------------------------------------------------------------------------ */

static void pack_prepare(scenario *sc) { rm_rf(sc->dest); }

static void count_skip(void *ctx, uint64_t index, const char *reason)
{
    scenario *sc = ctx;
    (void)index;
    if (reason && reason[0])
        sc->skips++;
}

static int run_pack(scenario *sc, uint64_t *digest)
{
    stk_pack_result r;
    memset(&r, 0, sizeof r);
    sc->skips = 0;
    sc->pack.on_skip = count_skip;
    sc->pack.ctx = sc;
    int rc = stk_pack(sc->uri, sc->dest, &sc->pack, &r);
    if (rc < 0) {
        save_msg(sc, stk_errmsg());
        return rc;
    }
    *digest = mix(0xcbf29ce484222325ull, &r, sizeof r);
    if (r.skipped > 0) {
        /* Only without strict, only when each input left out was reported
         * with its reason; the run then counts as a (reported) error. */
        if (sc->pack.strict || r.skipped != sc->skips) {
            snprintf(sc->msg, sizeof sc->msg, "%llu inputs left out, %llu reported%s",
                     (unsigned long long)r.skipped, (unsigned long long)sc->skips,
                     sc->pack.strict ? " under strict" : "");
            return 1;
        }
        snprintf(sc->msg, sizeof sc->msg, "%llu inputs left out, each reported",
                 (unsigned long long)r.skipped);
        return FI_SKIPPED;
    }
    return 0;
}

/* Success: the digest covers every file written. Failure: nothing is left
 * in the destination but, at most, the empty directory. */
static void pack_after(scenario *sc, int rc, uint64_t *digest)
{
    char *names[64];
    int n = list_dir(sc->dest, names, 64);
    for (int i = 0; i < n; i++) {
        if (rc < 0)
            snprintf(sc->left, sizeof sc->left, "the failed pack left %s in the destination",
                     names[i]);
        else {
            char path[1400];
            snprintf(path, sizeof path, "%s/%s", sc->dest, names[i]);
            *digest = mix(*digest, names[i], strlen(names[i]));
            FILE *f = fopen(path, "rb");
            assert_non_null(f);
            size_t k;
            while ((k = fread(sample_buf, 1, SAMPLE_CAP, f)) > 0)
                *digest = mix(*digest, sample_buf, k);
            fclose(f);
        }
        free(names[i]);
    }
}

static void test_pack(void **state)
{
    (void)state;
    int bad = 0;
    struct {
        const char *name, *src;
        stk_pack_options o;
    } cases[] = {
        {"pack imagefolder keep j1", fmt("imagefolder:%s/if", root),
         {.jobs = 1, .strict = 1, .restart_interval = 4, .shard_bytes = 4000}},
        {"pack imagefolder keep j2", fmt("imagefolder:%s/if", root),
         {.jobs = 2, .strict = 1, .restart_interval = 4, .shard_bytes = 4000}},
        {"pack imagefolder reencode j2", fmt("imagefolder:%s/if", root),
         {.jobs = 2, .strict = 1, .mode = STK_PACK_REENCODE, .max_side = 32, .quality = 80}},
        {"pack imagefolder raw j1", fmt("imagefolder:%s/if", root),
         {.jobs = 1, .strict = 1, .mode = STK_PACK_RAW, .zstd_level = 1}},
        {"pack cifar raw zstd j2", fmt("%s/cifar", root),
         {.jobs = 2, .strict = 1, .mode = STK_PACK_RAW, .zstd_level = 1, .shard_bytes = 8000}},
        {"pack mnist gz j1", fmt("mnist:%s/mnistgz", root), {.jobs = 1, .strict = 1}},
        /* More than one block of records, with one job and with two: the
         * output is the same for any jobs (before issue 9's fix of the
         * block claims it varied from run to run with two). */
        {"pack cifar 2.2 MB j1", fmt("cifar10:%s/cifarbig?split=test", root),
         {.jobs = 1, .strict = 1}},
        {"pack cifar 2.2 MB j2", fmt("cifar10:%s/cifarbig?split=test", root),
         {.jobs = 2, .strict = 1}},
        /* Not strict: an input that cannot be read is left out, and said so. */
        {"pack imagefolder lenient j2", fmt("imagefolder:%s/if", root),
         {.jobs = 2, .restart_interval = 4}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        scenario sc = {.name = cases[i].name,
                       .uri = cases[i].src,
                       .dest = fmt("%s/packed", root),
                       .pack = cases[i].o,
                       .run = run_pack,
                       .prepare = pack_prepare,
                       .after = pack_after};
        bad += loop(&sc);
    }
    rm_rf(fmt("%s/packed", root));
    assert_int_equal(bad, 0);
}

/* ------------------------------------------------------------------------ */
/* Verify (stk_verify reads every shard and record, and decodes)            */
/* ------------------------------------------------------------------------ */

static void count_damage(void *ctx, const char *shard, uint64_t record, const char *reason)
{
    scenario *sc = ctx;
    (void)shard, (void)record, (void)reason;
    sc->skips++;
}

static int run_verify(scenario *sc, uint64_t *digest)
{
    stk_verify_result r;
    memset(&r, 0, sizeof r);
    sc->skips = 0;
    stk_verify_options o = {.decode = 1, .on_damage = count_damage, .ctx = sc};
    int rc = stk_verify(sc->uri, &o, &r);
    if (rc < 0) {
        /* STK_EDATA means damage found, each case reported: an injected
         * failure may look like damage, but never unreported. */
        if (rc == STK_EDATA && sc->skips == 0)
            snprintf(sc->msg, sizeof sc->msg, "STK_EDATA without a damage report");
        else
            save_msg(sc, rc == STK_EDATA ? "damage reported" : stk_errmsg());
        return rc;
    }
    *digest = mix(0xcbf29ce484222325ull, &r, sizeof r);
    return sc->skips ? 1 : 0;
}

static void test_verify(void **state)
{
    (void)state;
    int bad = 0;
    const char *uris[] = {fmt("stk:%s/stk_enc", root), fmt("stk:%s/stk_zstd", root)};
    for (size_t i = 0; i < 2; i++) {
        scenario sc = {.name = i ? "verify stk zstd" : "verify stk encoded",
                       .uri = uris[i],
                       .run = run_verify};
        bad += loop(&sc);
    }
    assert_int_equal(bad, 0);
}

/* ------------------------------------------------------------------------ */
/* Loader epoch                                                             */
/* ------------------------------------------------------------------------ */

static int run_epoch(scenario *sc, uint64_t *digest)
{
    stk_loader *l = NULL;
    int rc = stk_loader_create(sc->ds, sc->spec, &sc->loader, &l);
    if (rc < 0) {
        save_msg(sc, stk_errmsg());
        return rc;
    }
    uint64_t h = 0xcbf29ce484222325ull, skipped = 0;
    for (;;) {
        stk_batch b;
        rc = stk_loader_next_timeout(l, &b, 30000);
        if (rc <= 0) {
            if (rc < 0) {
                save_msg(sc, stk_errmsg());
                if (!sc->msg[0])
                    save_msg(sc, stk_loader_errmsg(l));
            }
            break;
        }
        h = mix(h, b.data, b.size * b.sample_bytes);
        h = mix(h, b.labels, b.size * sizeof *b.labels);
        h = mix(h, b.indices, b.size * sizeof *b.indices);
        skipped += b.skipped;
        stk_loader_release(l, &b);
    }
    stk_loader_destroy(l);
    *digest = h;
    if (rc == 0 && skipped > 0) {
        /* Only under the skip policy, and counted in the batches. */
        snprintf(sc->msg, sizeof sc->msg, "%llu samples left out of their batches%s",
                 (unsigned long long)skipped,
                 sc->loader.on_error == STK_ON_ERROR_SKIP ? "" : " under the raise policy");
        return sc->loader.on_error == STK_ON_ERROR_SKIP ? FI_SKIPPED : 1;
    }
    return rc;
}

static void test_epoch(void **state)
{
    (void)state;
    int bad = 0;
    struct {
        const char *name, *uri, *spec;
        uint32_t batch;
        int skip;
    } cases[] = {
        {"epoch cifar10", fmt("%s/cifar", root),
         "pad 4 | random_crop 32 | flip 0.5 | normalize cifar10 | to f32 chw", 3, 0},
        {"epoch stk zstd", fmt("stk:%s/stk_zstd", root),
         "random_crop 28 | normalize cifar10 | to f16 hwc", 4, 0},
        {"epoch imagefolder jpeg", fmt("imagefolder:%s/if", root),
         "random_resized_crop 16 | flip 0.5 | normalize imagenet | to f32 chw", 2, 0},
        {"epoch stk encoded", fmt("stk:%s/stk_enc?io=mmap", root),
         "resize 20 | center_crop 16 | color_jitter 0.4 0.4 0.4 | to u8 hwc", 2, 0},
        /* on_error=skip: a sample that fails with STK_EDATA is left out of
         * its batch and counted there; any other failure stops the loader. */
        {"epoch stk raw pread skip", fmt("stk:%s/stk_raw?io=pread&verify=always", root),
         "random_crop 30 | flip 0.5 | to f32 chw", 4, 1},
        {"epoch imagefolder skip", fmt("imagefolder:%s/if", root),
         "resize 16 | center_crop 16 | rotate 10 | to f32 chw", 3, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        scenario sc = {.name = cases[i].name,
                       .spec = cases[i].spec,
                       .loader = {.batch_size = cases[i].batch, .threads = 3, .prefetch = 2,
                                  .seed = 7,
                                  .on_error = cases[i].skip ? STK_ON_ERROR_SKIP
                                                            : STK_ON_ERROR_RAISE},
                       .run = run_epoch};
        assert_int_equal(stk_dataset_open(cases[i].uri, NULL, &sc.ds), 0);
        bad += loop(&sc);
        stk_dataset_close(sc.ds);
    }
    assert_int_equal(bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open),
        cmocka_unit_test(test_pack),
        cmocka_unit_test(test_verify),
        cmocka_unit_test(test_epoch),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
