/*
 * test_io.c — the I/O layer (src/io/): the local-file source (sizes, exact
 * preads at every offset against the bytes written, reading past the end,
 * the refusals of open: missing, directory, FIFO without hanging, over the
 * limit; opened relative to a directory, read_part, shared and private
 * guarded mappings), whole-file mappings, and the SIGBUS guard on a mapping whose file
 * is truncated (zero pages from the cut on, the valid mark at the cut, a
 * cut inside the last page seen by refresh, a SIGBUS outside any guarded
 * region still reaching the handler installed before), and the CIFAR, IDX
 * and npy readers over a file cut while open (STK_EDATA naming the file
 * and sample, no SIGBUS; samples before the cut still exact).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "io/map_guard.h"
#include "io/source.h"
#include "stoker/stoker.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

static void test_file_source(void **state)
{
    (void)state;
    static uint8_t bytes[10000];
    tu_fill_random(bytes, sizeof bytes, 3);
    const char *path = tu_path("source.bin");
    tu_write_file(path, bytes, sizeof bytes);
    stk_source *s;
    assert_int_equal(stk_source_open_file(path, 1 << 20, &s), 0);
    assert_int_equal(s->size, sizeof bytes);
    assert_string_equal(s->ops->kind, "file");
    uint8_t buf[300];
    for (uint64_t off = 0; off + sizeof buf <= sizeof bytes; off += 97) {
        assert_int_equal(stk_source_pread(s, buf, sizeof buf, off), 0);
        assert_memory_equal(buf, bytes + off, sizeof buf);
    }
    assert_int_equal(stk_source_pread(s, buf, 10, sizeof bytes - 5), STK_EFORMAT);
    assert_non_null(strstr(stk_errmsg(), "source.bin: unexpected end of file"));
    stk_source_advise(s, NULL, 0, sizeof bytes, STK_ADVISE_SEQUENTIAL);
    const uint8_t *map;
    stk_map_guard *guard;
    assert_int_equal(stk_source_map(s, 0, &map, &guard), 0);
    assert_non_null(guard); /* registered with the SIGBUS guard by map itself */
    stk_source_advise(s, map, 5000, 100, STK_ADVISE_WILLNEED);
    assert_memory_equal(map, bytes, sizeof bytes);
    stk_source_unmap(map, sizeof bytes, guard);
    stk_source_close(s);
    stk_source_close(NULL);

    stk_mapped_file m;
    assert_int_equal(stk_map_file(path, 1 << 20, &m), 0);
    assert_int_equal(m.size, sizeof bytes);
    assert_memory_equal(m.data, bytes, sizeof bytes);
    stk_unmap_file(&m);
    assert_null(m.data);
}

/* The permissions of the mapping holding `p` in /proc/self/maps ("r--s"
 * for a shared read-only mapping, "r--p" for a private one). */
static void mapping_perms(const void *p, char perms[5])
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    assert_non_null(f);
    perms[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char pm[5];
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, pm) == 3 && (uintptr_t)p >= lo &&
            (uintptr_t)p < hi) {
            memcpy(perms, pm, 5);
            break;
        }
    }
    fclose(f);
}

/* stk_source_open_file_at: relative to a directory descriptor, the reason
 * alone in its messages (the caller names the file), read_part's counts at
 * the end, the shared and private mappings map makes (read-only either
 * way, guarded), advice on a mapping after its source is closed. */
static void test_file_source_at(void **state)
{
    (void)state;
    static uint8_t bytes[3 * 4096 + 100];
    tu_fill_random(bytes, sizeof bytes, 5);
    tu_write_file(tu_path("at.bin"), bytes, sizeof bytes);
    int dirfd = open(tu_tmpdir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(dirfd >= 0);

    /* In the caller's storage (the image folder's per-sample open): the
     * same reads and messages, a lent name, and close frees nothing (ASan
     * would see a free of a stack object); closing twice is harmless. */
    {
        stk_file_source fs;
        static const char lent[] = "lent/name";
        assert_int_equal(stk_file_source_open_at(&fs, dirfd, "at.bin", lent), 0);
        assert_ptr_equal(fs.base.name, lent);
        assert_int_equal(fs.base.size, sizeof bytes);
        uint8_t b2[64];
        assert_int_equal(stk_source_read_part(&fs.base, b2, sizeof b2, 7), sizeof b2);
        assert_memory_equal(b2, bytes + 7, sizeof b2);
        assert_int_equal(stk_source_pread(&fs.base, b2, 40, sizeof bytes - 30), STK_EFORMAT);
        assert_string_equal(stk_errmsg(), "lent/name: unexpected end of file");
        stk_source_close(&fs.base);
        assert_int_equal(fs.fd, -1);
        stk_source_close(&fs.base);
        assert_int_equal(stk_file_source_open_at(&fs, dirfd, "no-such.bin", NULL), STK_ENOENT);
        assert_non_null(strstr(stk_errmsg(), "cannot open: "));
        assert_int_equal(fs.fd, -1);
        stk_source_close(&fs.base);
    }

    stk_source *s;
    assert_int_equal(stk_source_open_file_at(dirfd, "at.bin", "the/name", &s), 0);
    assert_int_equal(s->size, sizeof bytes);
    assert_string_equal(s->name, "the/name");
    uint8_t buf[200];
    assert_int_equal(stk_source_read_part(s, buf, sizeof buf, 1000), sizeof buf);
    assert_memory_equal(buf, bytes + 1000, sizeof buf);
    assert_int_equal(stk_source_read_part(s, buf, sizeof buf, sizeof bytes - 30), 30);
    assert_memory_equal(buf, bytes + sizeof bytes - 30, 30);
    assert_int_equal(stk_source_read_part(s, buf, sizeof buf, sizeof bytes), 0);
    assert_int_equal(stk_source_pread(s, buf, 40, sizeof bytes - 30), STK_EFORMAT);
    assert_string_equal(stk_errmsg(), "the/name: unexpected end of file");
    stk_source_advise(s, NULL, 0, sizeof bytes, STK_ADVISE_NORMAL);

    const uint8_t *shared, *priv;
    stk_map_guard *gs, *gp;
    char perms[5];
    assert_int_equal(stk_source_map(s, STK_MAP_SHARED, &shared, &gs), 0);
    assert_int_equal(stk_source_map(s, 0, &priv, &gp), 0);
    stk_source_close(s); /* the mappings keep the file */
    assert_non_null(gs);
    assert_non_null(gp);
    assert_memory_equal(shared, bytes, sizeof bytes);
    assert_memory_equal(priv, bytes, sizeof bytes);
    mapping_perms(shared, perms);
    assert_string_equal(perms, "r--s");
    mapping_perms(priv, perms);
    assert_string_equal(perms, "r--p");
    stk_mapping_advise(shared, 4096 + 10, 5000, STK_ADVISE_WILLNEED); /* unaligned: rounded */
    stk_mapping_advise(shared, 0, sizeof bytes, STK_ADVISE_NORMAL);
    assert_true(stk_map_guard_intact(gs, 0, sizeof bytes));
    assert_memory_equal(shared, bytes, sizeof bytes);
    stk_source_unmap(shared, sizeof bytes, gs);
    stk_source_unmap(priv, sizeof bytes, gp);
    stk_source_unmap(NULL, 0, NULL);

    /* An absolute path ignores the directory (and its name is the default). */
    assert_int_equal(stk_source_open_file_at(-1, tu_path("at.bin"), NULL, &s), 0);
    assert_string_equal(s->name, tu_path("at.bin"));
    stk_source_close(s);

    /* Refusals: the reason alone, with the code to act on. */
    s = (stk_source *)1;
    assert_int_equal(stk_source_open_file_at(dirfd, "missing.bin", NULL, &s), STK_ENOENT);
    assert_null(s);
    assert_string_equal(stk_errmsg(), "cannot open: No such file or directory");
    assert_int_equal(stk_source_open_file_at(dirfd, "at.bin/x", NULL, &s), STK_EIO);
    assert_string_equal(stk_errmsg(), "cannot open: Not a directory");
    assert_int_equal(mkdir(tu_path("at.dir"), 0700), 0);
    assert_int_equal(stk_source_open_file_at(dirfd, "at.dir", NULL, &s), STK_EINVAL);
    assert_string_equal(stk_errmsg(), "not a regular file");
    assert_int_equal(mkfifo(tu_path("at.fifo"), 0600), 0);
    assert_int_equal(stk_source_open_file_at(dirfd, "at.fifo", NULL, &s), STK_EINVAL); /* no hang */
    assert_string_equal(stk_errmsg(), "not a regular file");
    close(dirfd);
}

static void test_file_source_refusals(void **state)
{
    (void)state;
    stk_source *s = (stk_source *)1;
    const char *missing = tu_path("no-such-file");
    assert_int_equal(stk_source_open_file(missing, 100, &s), STK_ENOENT);
    assert_null(s);
    assert_non_null(strstr(stk_errmsg(), "no-such-file: no such file"));
    assert_int_equal(stk_source_open_file(tu_tmpdir(), 100, &s), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "is a directory"));
    const char *fifo = tu_path("fifo");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(stk_source_open_file(fifo, 100, &s), STK_EINVAL); /* no hang */
    assert_non_null(strstr(stk_errmsg(), "fifo: not a regular file"));
    const char *big = tu_path("big.bin");
    tu_write_file(big, "0123456789", 10);
    assert_int_equal(stk_source_open_file(big, 9, &s), STK_ELIMIT);
    assert_non_null(strstr(stk_errmsg(), "big.bin: size 10 bytes exceeds the max_bytes limit of 9"));
    stk_mapped_file m;
    tu_write_file(big, "", 0);
    assert_int_equal(stk_map_file(big, 9, &m), 0);
    assert_null(m.data);
    assert_int_equal(m.size, 0);
}

/* A mapping registered with the guard, its file cut at 2.5 pages: with the
 * file's descriptor the mark is the exact new size, without it the first
 * lost page. */
static void run_guard_truncation(int with_fd)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t size = (size_t)page * 8;
    uint8_t *bytes = malloc(size);
    memset(bytes, 0xab, size);
    const char *path = tu_path(with_fd ? "guarded-fd.bin" : "guarded.bin");
    tu_write_file(path, bytes, size);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    const uint8_t *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(map != MAP_FAILED);
    stk_map_guard *g;
    assert_int_equal(stk_map_guard_add(map, size, with_fd ? fd : -1, &g), 0);
    close(fd); /* the guard keeps its own duplicate */
    assert_non_null(g);
    assert_int_equal(stk_map_guard_valid(g), size);
    assert_true(stk_map_guard_intact(g, 0, size));
    assert_int_equal(map[size - 1], 0xab);

    uint64_t cut = (uint64_t)page * 2 + (uint64_t)page / 2;
    assert_int_equal(truncate(path, (off_t)cut), 0);
    assert_int_equal(map[page * 5 + 3], 0); /* lost: a zero page, no SIGBUS */
    assert_int_equal(stk_map_guard_valid(g), with_fd ? cut : (uint64_t)page * 5);
    assert_int_equal(map[page * 7], 0);
    assert_int_equal(map[page * 3], 0); /* lost too */
    assert_int_equal(stk_map_guard_valid(g), with_fd ? cut : (uint64_t)page * 3);
    assert_int_equal(map[page * 2 + 10], 0xab);        /* before the cut: real */
    assert_int_equal(map[page * 2 + page / 2 + 1], 0); /* past EOF in its page: no fault */
    uint64_t v = stk_map_guard_valid(g);
    assert_true(stk_map_guard_intact(g, 0, v));
    assert_false(stk_map_guard_intact(g, v - 1, 2));
    assert_false(stk_map_guard_intact(g, (uint64_t)page * 9, 0));
    assert_int_equal(stk_map_guard_refresh(g), with_fd ? cut : (uint64_t)page * 3);
    stk_map_guard_remove(g);
    munmap((void *)map, size);
    free(bytes);
}

static void test_map_guard_truncation(void **state)
{
    (void)state;
    run_guard_truncation(0);
    run_guard_truncation(1);
}

/* A cut inside the last page faults nowhere: refresh (fstat) sees it. */
static void test_map_guard_cut_in_last_page(void **state)
{
    (void)state;
    long page = sysconf(_SC_PAGESIZE);
    size_t size = (size_t)page * 3;
    uint8_t *bytes = malloc(size);
    memset(bytes, 0x5a, size);
    const char *path = tu_path("guarded-tail.bin");
    tu_write_file(path, bytes, size);
    int fd = open(path, O_RDONLY);
    const uint8_t *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(map != MAP_FAILED);
    stk_map_guard *g;
    assert_int_equal(stk_map_guard_add(map, size, fd, &g), 0);
    close(fd);
    assert_non_null(g);
    assert_int_equal(truncate(path, (off_t)(size - 100)), 0);
    assert_int_equal(map[size - 1], 0); /* zero-filled tail, no SIGBUS */
    assert_int_equal(stk_map_guard_valid(g), size); /* the handler never ran */
    assert_int_equal(stk_map_guard_refresh(g), size - 100);
    assert_false(stk_map_guard_intact(g, size - 8, 8));
    assert_true(stk_map_guard_intact(g, 0, size - 100));
    stk_map_guard_remove(g);
    munmap((void *)map, size);
    free(bytes);
}

/* The array readers over stk_map_file (CIFAR, IDX, npy) share the guard:
 * a file cut while open fails the samples it took, naming file and sample,
 * and the ones before the cut still read exactly. */
static void expect_cut(const char *uri, const char *path, size_t cut, uint64_t ok_index,
                       uint64_t straddle, uint64_t lost, size_t sample_bytes,
                       const char *what)
{
    stk_dataset *ds;
    if (stk_dataset_open(uri, NULL, &ds) != 0)
        fail_msg("%s: %s", uri, stk_errmsg());
    uint8_t *px = malloc(sample_bytes), *px0 = malloc(sample_bytes);
    int64_t label;
    assert_int_equal(stk_dataset_read(ds, ok_index, px0, sample_bytes, &label),
                     (int64_t)sample_bytes);
    assert_int_equal(truncate(path, (off_t)cut), 0);
    assert_int_equal(stk_dataset_read(ds, ok_index, px, sample_bytes, &label),
                     (int64_t)sample_bytes);
    assert_memory_equal(px, px0, sample_bytes);
    uint64_t bad[2] = {straddle, lost};
    for (int k = 0; k < 2; k++) {
        char want[200];
        assert_int_equal(stk_dataset_read(ds, bad[k], px, sample_bytes, &label), STK_EDATA);
        snprintf(want, sizeof want, what, (unsigned long long)bad[k], (unsigned long long)bad[k]);
        if (!strstr(stk_errmsg(), want) || !strstr(stk_errmsg(), path) ||
            !strstr(stk_errmsg(), "truncated while open"))
            fail_msg("'%s' lacks '%s'", stk_errmsg(), want);
    }
    free(px);
    free(px0);
    stk_dataset_close(ds);
}

static void test_array_readers_truncated(void **state)
{
    (void)state;
    char uri[1200];
    /* CIFAR-10: 100 records of 3073 bytes; cut inside record 48. */
    static uint8_t c10[100 * 3073];
    tu_fill_random(c10, sizeof c10, 11);
    for (int i = 0; i < 100; i++)
        c10[i * 3073] = (uint8_t)(i % 10);
    const char *cpath = tu_path("data_batch_1.bin");
    tu_write_file(cpath, c10, sizeof c10);
    snprintf(uri, sizeof uri, "cifar10:%s", cpath);
    expect_cut(uri, cpath, 48 * 3073 + 1500, 10, 48, 90, 3072,
               "record %llu (sample %llu): the file was truncated while open");

    /* IDX plain: 60 images of 28x28; cut inside image 30. */
    static uint8_t idx[16 + 60 * 784];
    uint8_t lab[8 + 60] = {0, 0, 8, 1, 0, 0, 0, 60};
    memcpy(idx, (uint8_t[]){0, 0, 8, 3, 0, 0, 0, 60, 0, 0, 0, 28, 0, 0, 0, 28}, 16);
    tu_fill_random(idx + 16, 60 * 784, 12);
    const char *ipath = tu_path("cut-images-idx3-ubyte"), *lpath = tu_path("cut-labels-idx1-ubyte");
    tu_write_file(ipath, idx, sizeof idx);
    tu_write_file(lpath, lab, sizeof lab);
    snprintf(uri, sizeof uri, "idx:%s,%s", ipath, lpath);
    expect_cut(uri, ipath, 16 + 30 * 784 + 400, 3, 30, 55, 784,
               "sample %llu: the images file was truncated while open");

    /* npy: 40 images of 10x10x3 uint8 after a 128-byte header. */
    static uint8_t npy[128 + 40 * 300];
    static const char dict[] = "{'descr': '|u1', 'fortran_order': False, 'shape': (40, 10, 10, 3), }";
    memcpy(npy, "\x93NUMPY\x01\x00\x76\x00", 10);
    memset(npy + 10, ' ', 118);
    memcpy(npy + 10, dict, sizeof dict - 1);
    npy[127] = '\n';
    tu_fill_random(npy + 128, 40 * 300, 13);
    int64_t labels[40] = {0};
    uint8_t lnpy[128 + sizeof labels];
    static const char ldict[] = "{'descr': '<i8', 'fortran_order': False, 'shape': (40,), }";
    memcpy(lnpy, "\x93NUMPY\x01\x00\x76\x00", 10);
    memset(lnpy + 10, ' ', 118);
    memcpy(lnpy + 10, ldict, sizeof ldict - 1);
    lnpy[127] = '\n';
    memcpy(lnpy + 128, labels, sizeof labels);
    const char *npath = tu_path("cut-images.npy"), *nlpath = tu_path("cut-labels.npy");
    tu_write_file(npath, npy, sizeof npy);
    tu_write_file(nlpath, lnpy, sizeof lnpy);
    snprintf(uri, sizeof uri, "npy:%s,%s", npath, nlpath);
    expect_cut(uri, npath, 128 + 20 * 300 + 7, 2, 20, 39, 300,
               "sample %llu: the images file was truncated while open");
}

/* A SIGBUS the guard does not own goes to the handler installed before it. */
static volatile sig_atomic_t chained;
static void user_handler(int sig)
{
    (void)sig;
    chained++;
}

static void test_map_guard_chains(void **state)
{
    (void)state;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = user_handler;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGBUS, &sa, &old), 0);
    /* Registering installs the guard over the user's handler, chained. */
    static uint8_t page_buf[1];
    stk_map_guard *g;
    assert_int_equal(stk_map_guard_add(page_buf, 1, -1, &g), 0);
    assert_non_null(g);
    struct sigaction now;
    assert_int_equal(sigaction(SIGBUS, NULL, &now), 0);
    assert_true(now.sa_flags & SA_SIGINFO);
    raise(SIGBUS); /* sent, not a fault in a region */
    assert_int_equal(chained, 1);
    stk_map_guard_remove(g);
    sigaction(SIGBUS, &old, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_source),
        cmocka_unit_test(test_file_source_refusals),
        cmocka_unit_test(test_file_source_at),
        cmocka_unit_test(test_map_guard_truncation),
        cmocka_unit_test(test_map_guard_cut_in_last_page),
        cmocka_unit_test(test_array_readers_truncated),
        cmocka_unit_test(test_map_guard_chains),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
