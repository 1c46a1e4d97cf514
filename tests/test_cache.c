/*
 * test_cache.c — the on-disk chunk cache (src/io/cache.c): fill and read
 * back (a short last chunk, reads across chunk edges, the on-disk layout
 * checked byte by byte against an independent CRC-32C and XXH3-128), a
 * reopen seeing the chunks, a changed size or chunk size resetting them;
 * claims raced by threads (exactly one MINE per chunk) and by forked
 * processes (exactly one download per chunk, counted through a pipe, the
 * others reading identical bytes); waits woken by a fill and by an
 * abandon, in this process and across processes, a timeout, and a claimer
 * killed with SIGKILL not blocking anyone; crash safety (a process killed
 * between fill's data write and its entry write, or just after the entry;
 * a chunk's bytes or its CRC corrupted on disk; a torn header; a missing
 * .data); LRU eviction that skips open objects; and the errors (a file
 * where the directory should be, a full disk through /dev/full, wrong
 * chunk lengths, unclaimed fills, reads past the end).
 *
 * No timing thresholds: the naps below only widen race windows.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/crc32c.h"
#include "io/cache.h"
#include "stoker/stoker.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

/* ------------------------------------------------------------------------- */
/* A crash point: linked with -Wl,--wrap=pwrite (CMakeLists.txt), every      */
/* pwrite of the process comes here; a child sets g_kill_after_len and dies  */
/* with SIGKILL right after the first pwrite of that many bytes.             */
/* ------------------------------------------------------------------------- */

ssize_t __real_pwrite(int fd, const void *buf, size_t n, off_t off);
ssize_t __wrap_pwrite(int fd, const void *buf, size_t n, off_t off);
static size_t g_kill_after_len;

ssize_t __wrap_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    ssize_t r = __real_pwrite(fd, buf, n, off);
    if (g_kill_after_len && n == g_kill_after_len)
        raise(SIGKILL);
    return r;
}

/* ------------------------------------------------------------------------- */
/* Helpers                                                                    */
/* ------------------------------------------------------------------------- */

/* The object's bytes: deterministic per (seed, offset). */
static uint8_t *object_bytes(uint64_t size, uint64_t seed)
{
    uint8_t *b = malloc(size ? size : 1);
    assert_non_null(b);
    tu_fill_random(b, size, seed);
    return b;
}

static size_t len_of(uint64_t size, uint32_t cs, uint64_t k)
{
    uint64_t left = size - k * cs;
    return (size_t)(left < cs ? left : cs);
}

/* Claim and fill chunk k from `bytes` (which must be absent). */
static void fill_chunk(stk_cache_object *o, const uint8_t *bytes, uint64_t k)
{
    uint64_t size = stk_cache_object_size(o);
    uint32_t cs = stk_cache_chunk_size(o);
    assert_int_equal(stk_cache_claim(o, k), STK_CACHE_MINE);
    assert_int_equal(stk_cache_fill(o, k, bytes + k * cs, len_of(size, cs, k)), 0);
}

static void fill_all(stk_cache_object *o, const uint8_t *bytes)
{
    for (uint64_t k = 0; k < stk_cache_chunk_count(o); k++)
        fill_chunk(o, bytes, k);
}

/* The files of `key` in cache directory `dir`, computed here from the
 * documented naming (XXH3-128, canonical, hex; HH/HASH.{map,data}). */
static void key_paths(const char *dir, const char *key, char map[512], char data[512])
{
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(key, strlen(key)));
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", c.digest[i]);
    snprintf(map, 512, "%s/objects/%.2s/%s.map", dir, hex, hex);
    snprintf(data, 512, "%s/objects/%.2s/%s.data", dir, hex, hex);
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static void patch_file(const char *path, uint64_t off, const void *bytes, size_t n)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(__real_pwrite(fd, bytes, n, (off_t)off), (ssize_t)n);
    close(fd);
}

static void read_at(const char *path, uint64_t off, void *buf, size_t n)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, buf, n, (off_t)off), (ssize_t)n);
    close(fd);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The .map's header size for a key: 40 + key length, rounded up to 64. */
static uint64_t header_size_of(const char *key)
{
    return (40 + strlen(key) + 63) / 64 * 64;
}

static void set_mtime(const char *path, time_t ago)
{
    struct timespec ts[2];
    clock_gettime(CLOCK_REALTIME, &ts[0]);
    ts[0].tv_sec -= ago;
    ts[1] = ts[0];
    assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------------- */
/* Round trip and layout                                                      */
/* ------------------------------------------------------------------------- */

static void test_round_trip(void **state)
{
    (void)state;
    const char *dir = tu_path("rt/nested/cache"); /* created with parents */
    const char *key = "https://example.test/data/train-000.stk#etag-1";
    const uint32_t cs = 4096;
    const uint64_t size = 3 * 4096 + 100; /* a short last chunk of 100 bytes */
    uint8_t *bytes = object_bytes(size, 11);
    stk_cache *c;
    stk_cache_object *o;
    stk_cache_stats st;
    stk_cache_stats_reset();

    assert_int_equal(stk_cache_open(dir, 0, &c), 0);
    assert_string_equal(stk_cache_dir(c), dir);
    assert_int_equal(stk_cache_object_open(c, key, size, cs, &o), 0);
    assert_int_equal(stk_cache_object_size(o), size);
    assert_int_equal(stk_cache_chunk_size(o), cs);
    assert_int_equal(stk_cache_chunk_count(o), 4);

    uint8_t buf[4 * 4096];
    for (uint64_t k = 0; k < 4; k++)
        assert_false(stk_cache_has(o, k));
    assert_false(stk_cache_has(o, 4)); /* out of range */
    assert_int_equal(stk_cache_read(o, buf, 10, 0), STK_ENOENT);

    /* Wrong lengths: refused, and the claim released each time. */
    assert_int_equal(stk_cache_claim(o, 3), STK_CACHE_MINE);
    assert_int_equal(stk_cache_fill(o, 3, bytes + 3 * cs, cs), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "chunk 3 is 100 bytes, not 4096"));
    assert_int_equal(stk_cache_claim(o, 3), STK_CACHE_MINE);
    assert_int_equal(stk_cache_fill(o, 3, bytes + 3 * cs, 99), STK_EINVAL);
    stk_cache_abandon(o, 3); /* already released: a no-op */
    assert_int_equal(stk_cache_claim(o, 0), STK_CACHE_MINE);
    assert_int_equal(stk_cache_fill(o, 0, bytes, cs - 1), STK_EINVAL);
    /* Not claimed, out of range. */
    assert_int_equal(stk_cache_fill(o, 1, bytes + cs, cs), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "without being claimed"));
    assert_int_equal(stk_cache_claim(o, 4), STK_EINVAL);
    assert_int_equal(stk_cache_wait(o, 4, 0), STK_EINVAL);
    assert_false(stk_cache_has(o, 0));

    /* Filled out of order; a claim of a claimed chunk is BUSY. */
    assert_int_equal(stk_cache_claim(o, 3), STK_CACHE_MINE);
    assert_int_equal(stk_cache_claim(o, 3), STK_CACHE_BUSY);
    assert_int_equal(stk_cache_fill(o, 3, bytes + 3 * cs, 100), 0);
    for (uint64_t k = 0; k < 3; k++)
        fill_chunk(o, bytes, k);
    for (uint64_t k = 0; k < 4; k++) {
        assert_true(stk_cache_has(o, k));
        assert_int_equal(stk_cache_claim(o, k), STK_CACHE_PRESENT);
        assert_int_equal(stk_cache_wait(o, k, -1), STK_CACHE_PRESENT);
    }
    /* Reads at every offset in steps across the chunk edges. */
    uint64_t hits = 0;
    for (uint64_t off = 0; off < size; off += 997) {
        size_t n = (size_t)(size - off < 5000 ? size - off : 5000);
        memset(buf, 0, sizeof buf);
        assert_int_equal(stk_cache_read(o, buf, n, off), 0);
        assert_memory_equal(buf, bytes + off, n);
        hits += n;
    }
    assert_int_equal(stk_cache_read(o, buf, (size_t)size, 0), 0);
    assert_memory_equal(buf, bytes, size);
    hits += size;
    assert_int_equal(stk_cache_read(o, buf, 0, size), 0);
    assert_int_equal(stk_cache_read(o, buf, 2, size - 1), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "past the end"));
    stk_cache_stats_get(&st);
    assert_int_equal(st.filled_bytes, size);
    assert_int_equal(st.hit_bytes, hits);
    assert_int_equal(st.bad_chunks, 0);

    /* The layout on disk (docs/remote.md, cache.c). */
    char map[512], data[512];
    key_paths(dir, key, map, data);
    size_t n;
    uint8_t *d = tu_read_file(data, &n);
    assert_non_null(d);
    assert_int_equal(n, size);
    assert_memory_equal(d, bytes, size);
    free(d);
    uint8_t *m = tu_read_file(map, &n);
    assert_non_null(m);
    uint64_t hs = header_size_of(key);
    assert_int_equal(n, hs + 8 * 4);
    assert_memory_equal(m, "STKCACHE", 8);
    assert_int_equal(le32(m + 8), 2);
    assert_int_equal(le32(m + 12), hs);
    assert_int_equal(le32(m + 16) | (uint64_t)le32(m + 20) << 32, size);
    assert_int_equal(le32(m + 24), cs);
    assert_int_equal(le32(m + 28), strlen(key));
    uint32_t hcrc = stk_crc32c_sw(0, m, 32);
    assert_int_equal(le32(m + 32), stk_crc32c_sw(hcrc, key, strlen(key)));
    assert_memory_equal(m + 40, key, strlen(key));
    for (uint64_t k = 0; k < 4; k++) {
        const uint8_t *e = m + hs + 8 * k;
        assert_int_equal(le32(e), stk_crc32c_sw(0, bytes + k * cs, len_of(size, cs, k)));
        assert_int_equal(e[4], 1);
        assert_int_equal(e[5] | e[6] | e[7], 0);
    }
    free(m);

    stk_cache_object_close(o);
    stk_cache_close(c);
    stk_cache_close(NULL);
    stk_cache_object_close(NULL);
    free(bytes);
}

/* A .map written by an older version (1: chunks it holds may have come from
 * a 206 for other bytes than asked, cached with a CRC of their own) is not
 * trusted: the object opens empty and its chunks are fetched again. */
static void test_old_version_is_discarded(void **state)
{
    (void)state;
    const char *dir = tu_path("oldversion");
    const char *key = "http://host/a.tar#\"e1\"#4096";
    const uint32_t cs = 1024;
    const uint64_t size = 4096;
    uint8_t *bytes = object_bytes(size, 5);
    stk_cache *c;
    stk_cache_object *o;
    assert_int_equal(stk_cache_open(dir, 0, &c), 0);
    assert_int_equal(stk_cache_object_open(c, key, size, cs, &o), 0);
    for (uint64_t k = 0; k < 4; k++)
        fill_chunk(o, bytes, k);
    stk_cache_object_close(o);
    stk_cache_close(c);

    char map[512], data[512];
    key_paths(dir, key, map, data);
    size_t n;
    uint8_t *m = tu_read_file(map, &n);
    assert_non_null(m);
    assert_int_equal(le32(m + 8), 2);
    /* the same file as version 1 wrote it: version 1, its header CRC valid */
    m[8] = 1;
    uint32_t hcrc = stk_crc32c_sw(stk_crc32c_sw(0, m, 32), key, strlen(key));
    memcpy(m + 32, &hcrc, 4); /* (little-endian host) */
    tu_write_file(map, m, n);
    free(m);

    assert_int_equal(stk_cache_open(dir, 0, &c), 0);
    assert_int_equal(stk_cache_object_open(c, key, size, cs, &o), 0);
    for (uint64_t k = 0; k < 4; k++)
        assert_false(stk_cache_has(o, k));
    uint8_t buf[16];
    assert_int_equal(stk_cache_read(o, buf, sizeof buf, 0), STK_ENOENT);
    stk_cache_object_close(o);
    stk_cache_close(c);
    free(bytes);
}

static void test_empty_object(void **state)
{
    (void)state;
    stk_cache *c;
    stk_cache_object *o;
    uint8_t b;
    assert_int_equal(stk_cache_open(tu_path("empty"), 0, &c), 0);
    assert_int_equal(stk_cache_object_open(c, "http://h/empty#0", 0, 4096, &o), 0);
    assert_int_equal(stk_cache_chunk_count(o), 0);
    assert_false(stk_cache_has(o, 0));
    assert_int_equal(stk_cache_read(o, &b, 0, 0), 0);
    assert_int_equal(stk_cache_read(o, &b, 1, 0), STK_EINVAL);
    stk_cache_object_close(o);
    stk_cache_close(c);
}

/* ------------------------------------------------------------------------- */
/* Reopen, sharing in one process, reset                                      */
/* ------------------------------------------------------------------------- */

static void test_reopen_and_reset(void **state)
{
    (void)state;
    const char *dir = tu_path("reopen");
    const char *key = "s3://bucket/prefix/shard-7.stk#\"abc\"";
    const uint32_t cs = 1024;
    const uint64_t size = 10 * 1024 + 1;
    uint8_t *bytes = object_bytes(size, 12);
    stk_cache *c, *c2;
    stk_cache_object *o, *o2;
    uint8_t buf[2048];

    assert_int_equal(stk_cache_open(dir, 0, &c), 0);
    assert_int_equal(stk_cache_open(dir, 0, &c2), 0);
    assert_ptr_equal(c, c2); /* refcounted */
    stk_cache_close(c2);
    assert_int_equal(stk_cache_object_open(c, key, size, cs, &o), 0);
    assert_int_equal(stk_cache_object_open(c, key, size, cs, &o2), 0);
    assert_ptr_equal(o, o2);
    stk_cache_object_close(o2);
    assert_int_equal(stk_cache_object_open(c, key, size + 1, cs, &o2), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "already open"));
    for (uint64_t k = 0; k < 11; k += 2) /* the even chunks, the last (1 byte) included */
        fill_chunk(o, bytes, k);
    stk_cache_object_close(o);
    stk_cache_close(c); /* the last reference: the next open is a new stk_cache */

    assert_int_equal(stk_cache_open(dir, 0, &c), 0);
    assert_int_equal(stk_cache_object_open(c, key, size, cs, &o), 0);
    for (uint64_t k = 0; k < 11; k++)
        assert_int_equal(stk_cache_has(o, k), k % 2 == 0);
    assert_int_equal(stk_cache_read(o, buf, 1, size - 1), 0);
    assert_int_equal(buf[0], bytes[size - 1]);
    assert_int_equal(stk_cache_read(o, buf, 1024, 4096), 0);
    assert_memory_equal(buf, bytes + 4096, 1024);
    assert_int_equal(stk_cache_read(o, buf, 2048, 4096), STK_ENOENT); /* chunk 5 absent */
    /* The cache outlives its last close while an object holds it. */
    stk_cache_close(c);
    assert_int_equal(stk_cache_read(o, buf, 1024, 0), 0);
    assert_memory_equal(buf, bytes, 1024);
    c = NULL;
    stk_cache_object_close(o);

    /* Another size: emptied and started afresh. */
    char map[512], data[512];
    key_paths(dir, key, map, data);
    assert_int_equal(stk_cache_open(dir, 0, &c), 0);
    assert_int_equal(stk_cache_object_open(c, key, size - 1, cs, &o), 0);
    assert_int_equal(stk_cache_chunk_count(o), 10);
    for (uint64_t k = 0; k < 10; k++)
        assert_false(stk_cache_has(o, k));
    fill_chunk(o, bytes, 0);
    struct stat sb;
    assert_int_equal(stat(data, &sb), 0);
    assert_int_equal(sb.st_size, size - 1);
    stk_cache_object_close(o);
    /* Another chunk size: the same. */
    assert_int_equal(stk_cache_object_open(c, key, size - 1, 2048, &o), 0);
    assert_int_equal(stk_cache_chunk_count(o), 5);
    for (uint64_t k = 0; k < 5; k++)
        assert_false(stk_cache_has(o, k));
    fill_chunk(o, bytes, 1);
    stk_cache_object_close(o);
    /* And back: nothing of the first object is left. */
    assert_int_equal(stk_cache_object_open(c, key, size, cs, &o), 0);
    for (uint64_t k = 0; k < 11; k++)
        assert_false(stk_cache_has(o, k));
    stk_cache_object_close(o);
    stk_cache_close(c);
    free(bytes);
}

/* ------------------------------------------------------------------------- */
/* Claims and waits between threads                                           */
/* ------------------------------------------------------------------------- */

#define RACE_THREADS 4
#define RACE_CHUNKS 64

typedef struct race {
    stk_cache_object *o;
    const uint8_t *bytes;
    pthread_barrier_t start;
    atomic_int mine[RACE_CHUNKS];
    atomic_int failures;
} race;

/* What each raced thread gets: the test's shared state and its number. */
typedef struct race_arg {
    void *shared;
    int id;
} race_arg;

/* RACE_THREADS threads of fn, each with its race_arg, released together by
 * `start` (each waits on it first); returns when all have finished. */
static void run_raced(void *(*fn)(void *), void *shared, pthread_barrier_t *start)
{
    pthread_t t[RACE_THREADS];
    race_arg args[RACE_THREADS];
    pthread_barrier_init(start, NULL, RACE_THREADS);
    for (int i = 0; i < RACE_THREADS; i++) {
        args[i] = (race_arg){shared, i};
        assert_int_equal(pthread_create(&t[i], NULL, fn, &args[i]), 0);
    }
    for (int i = 0; i < RACE_THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(start);
}

static void *race_thread(void *p)
{
    race_arg *a = p;
    race *r = a->shared;
    uint8_t buf[1024];
    pthread_barrier_wait(&r->start);
    for (int i = 0; i < RACE_CHUNKS; i++) {
        uint64_t k = (uint64_t)(a->id % 2 ? RACE_CHUNKS - 1 - i : i);
        for (;;) {
            int rc = stk_cache_claim(r->o, k);
            if (rc == STK_CACHE_MINE) {
                atomic_fetch_add(&r->mine[k], 1);
                if (stk_cache_fill(r->o, k, r->bytes + k * 1024, 1024) != 0)
                    atomic_fetch_add(&r->failures, 1);
                break;
            }
            if (rc == STK_CACHE_BUSY)
                rc = stk_cache_wait(r->o, k, -1);
            if (rc == STK_CACHE_ABSENT)
                continue; /* would mean a claimer gave up: counted by mine[] */
            if (rc != STK_CACHE_PRESENT || stk_cache_read(r->o, buf, 1024, k * 1024) != 0 ||
                memcmp(buf, r->bytes + k * 1024, 1024) != 0)
                atomic_fetch_add(&r->failures, 1);
            break;
        }
    }
    return NULL;
}

static void test_threads_claim(void **state)
{
    (void)state;
    static race r;
    stk_cache *c;
    uint8_t *bytes = object_bytes(RACE_CHUNKS * 1024, 13);
    assert_int_equal(stk_cache_open(tu_path("threads"), 0, &c), 0);
    for (int round = 0; round < 4; round++) {
        char key[64];
        snprintf(key, sizeof key, "http://h/race-%d", round);
        memset(&r, 0, sizeof r);
        r.bytes = bytes;
        assert_int_equal(stk_cache_object_open(c, key, RACE_CHUNKS * 1024, 1024, &r.o), 0);
        run_raced(race_thread, &r, &r.start);
        assert_int_equal(atomic_load(&r.failures), 0);
        for (int k = 0; k < RACE_CHUNKS; k++)
            assert_int_equal(atomic_load(&r.mine[k]), 1);
        stk_cache_object_close(r.o);
    }
    stk_cache_close(c);
    free(bytes);
}

typedef struct waiter {
    stk_cache_object *o;
    uint64_t chunk;
    int timeout_ms;
    atomic_int started;
    int result;
} waiter;

static void *wait_thread(void *p)
{
    waiter *w = p;
    atomic_store(&w->started, 1);
    w->result = stk_cache_wait(w->o, w->chunk, w->timeout_ms);
    return NULL;
}

/* Start a thread waiting for chunk k; returns once it has started. */
static void wait_start(waiter *w, pthread_t *t, stk_cache_object *o, uint64_t k, int timeout_ms)
{
    w->o = o;
    w->chunk = k;
    w->timeout_ms = timeout_ms;
    atomic_store(&w->started, 0);
    w->result = 99;
    assert_int_equal(pthread_create(t, NULL, wait_thread, w), 0);
    while (!atomic_load(&w->started))
        nap_ms(1);
    nap_ms(20); /* most likely inside the wait by now (not required) */
}

static void test_wait_threads(void **state)
{
    (void)state;
    stk_cache *c;
    stk_cache_object *o;
    uint8_t *bytes = object_bytes(4 * 512, 14);
    assert_int_equal(stk_cache_open(tu_path("wait"), 0, &c), 0);
    assert_int_equal(stk_cache_object_open(c, "http://h/wait", 4 * 512, 512, &o), 0);
    /* Not claimed, not present: ABSENT at once. */
    assert_int_equal(stk_cache_wait(o, 0, -1), STK_CACHE_ABSENT);
    assert_int_equal(stk_cache_wait(o, 0, 0), STK_CACHE_ABSENT);

    /* Woken by a fill. */
    waiter w;
    pthread_t t;
    assert_int_equal(stk_cache_claim(o, 0), STK_CACHE_MINE);
    wait_start(&w, &t, o, 0, -1);
    assert_int_equal(stk_cache_fill(o, 0, bytes, 512), 0);
    pthread_join(t, NULL);
    assert_int_equal(w.result, STK_CACHE_PRESENT);

    /* Woken by an abandon: absent, and claimable. */
    assert_int_equal(stk_cache_claim(o, 1), STK_CACHE_MINE);
    wait_start(&w, &t, o, 1, -1);
    stk_cache_abandon(o, 1);
    pthread_join(t, NULL);
    assert_int_equal(w.result, STK_CACHE_ABSENT);
    assert_false(stk_cache_has(o, 1));

    /* A timeout while another thread holds it; with a limit, woken too. */
    assert_int_equal(stk_cache_claim(o, 2), STK_CACHE_MINE);
    assert_int_equal(stk_cache_wait(o, 2, 10), STK_ETIMEDOUT);
    assert_non_null(strstr(stk_errmsg(), "chunk 2 still being downloaded after 10 ms"));
    wait_start(&w, &t, o, 2, 600000);
    assert_int_equal(stk_cache_fill(o, 2, bytes + 1024, 512), 0);
    pthread_join(t, NULL);
    assert_int_equal(w.result, STK_CACHE_PRESENT);

    /* A claim released by closing the object: gone with the descriptor. */
    assert_int_equal(stk_cache_claim(o, 3), STK_CACHE_MINE);
    stk_cache_object_close(o);
    assert_int_equal(stk_cache_object_open(c, "http://h/wait", 4 * 512, 512, &o), 0);
    assert_int_equal(stk_cache_claim(o, 3), STK_CACHE_MINE);
    stk_cache_object_close(o);
    stk_cache_close(c);
    free(bytes);
}

/* ------------------------------------------------------------------------- */
/* Between processes                                                          */
/* ------------------------------------------------------------------------- */

#define PROC_CHILDREN 6
#define PROC_CHUNKS 16
#define PROC_CS 8192

/* One child: every chunk in its own order; a byte per download into
 * count_fd. Exit status 0, or the step that failed. */
static int proc_child(const char *dir, int id, int go_fd, int count_fd, const uint8_t *bytes)
{
    char g;
    stk_cache *c;
    stk_cache_object *o;
    static uint8_t buf[PROC_CS];
    if (read(go_fd, &g, 1) != 0) /* the parent closes it: everyone starts together */
        return 2;
    if (stk_cache_open(dir, 0, &c) != 0 ||
        stk_cache_object_open(c, "https://h/proc.stk#1", PROC_CHUNKS * PROC_CS, PROC_CS, &o) != 0)
        return 3;
    for (int i = 0; i < PROC_CHUNKS; i++) {
        uint64_t k = (uint64_t)((i + id * 5) % PROC_CHUNKS);
        for (;;) {
            int rc = stk_cache_claim(o, k);
            if (rc == STK_CACHE_MINE) {
                uint8_t b = (uint8_t)k;
                if (write(count_fd, &b, 1) != 1)
                    return 4;
                nap_ms(2); /* the download: others get BUSY and wait */
                if (stk_cache_fill(o, k, bytes + k * PROC_CS, PROC_CS) != 0)
                    return 5;
                break;
            }
            if (rc == STK_CACHE_BUSY) /* half the children poll with a (long) limit */
                rc = stk_cache_wait(o, k, id % 2 ? 600000 : -1);
            if (rc == STK_CACHE_ABSENT)
                continue;
            if (rc != STK_CACHE_PRESENT)
                return 6;
            if (stk_cache_read(o, buf, PROC_CS, k * PROC_CS) != 0 ||
                memcmp(buf, bytes + k * PROC_CS, PROC_CS) != 0)
                return 7;
            break;
        }
    }
    stk_cache_object_close(o);
    stk_cache_close(c);
    return 0;
}

static void test_processes_share(void **state)
{
    (void)state;
    const char *dir = tu_path("procs");
    uint8_t *bytes = object_bytes(PROC_CHUNKS * PROC_CS, 15);
    int go[2], count[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(count), 0);
    pid_t pids[PROC_CHILDREN];
    for (int i = 0; i < PROC_CHILDREN; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            close(go[1]);
            close(count[0]);
            _exit(proc_child(dir, i, go[0], count[1], bytes));
        }
    }
    close(go[0]);
    close(count[1]);
    close(go[1]); /* go */
    for (int i = 0; i < PROC_CHILDREN; i++) {
        int st;
        assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    int downloads[PROC_CHUNKS] = {0};
    uint8_t b;
    while (read(count[0], &b, 1) == 1) {
        assert_true(b < PROC_CHUNKS);
        downloads[b]++;
    }
    close(count[0]);
    for (int k = 0; k < PROC_CHUNKS; k++)
        assert_int_equal(downloads[k], 1);

    stk_cache *c;
    stk_cache_object *o;
    uint8_t *all = malloc(PROC_CHUNKS * PROC_CS);
    assert_non_null(all);
    assert_int_equal(stk_cache_open(dir, 0, &c), 0);
    assert_int_equal(
        stk_cache_object_open(c, "https://h/proc.stk#1", PROC_CHUNKS * PROC_CS, PROC_CS, &o), 0);
    assert_int_equal(stk_cache_read(o, all, PROC_CHUNKS * PROC_CS, 0), 0);
    assert_memory_equal(all, bytes, PROC_CHUNKS * PROC_CS);
    stk_cache_object_close(o);
    stk_cache_close(c);
    free(all);
    free(bytes);
}

/* A child that claims chunk k, reports it, then fills it when the parent
 * writes to *go_fd (or, with go_fd NULL, waits to be killed). */
static pid_t claimer_child(const char *dir, const char *key, uint64_t size, uint32_t cs,
                           uint64_t k, const uint8_t *bytes, int *go_fd)
{
    int ready[2], go[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        stk_cache *c;
        stk_cache_object *o;
        char b = 1;
        close(ready[0]);
        close(go[1]);
        if (stk_cache_open(dir, 0, &c) != 0 || stk_cache_object_open(c, key, size, cs, &o) != 0 ||
            stk_cache_claim(o, k) != STK_CACHE_MINE)
            _exit(3);
        if (write(ready[1], &b, 1) != 1)
            _exit(4);
        if (!go_fd)
            for (;;)
                pause();
        if (read(go[0], &b, 1) != 1)
            _exit(5);
        _exit(stk_cache_fill(o, k, bytes + k * cs, len_of(size, cs, k)) == 0 ? 0 : 6);
    }
    close(ready[1]);
    close(go[0]);
    char b;
    assert_int_equal(read(ready[0], &b, 1), 1);
    close(ready[0]);
    if (go_fd)
        *go_fd = go[1];
    else
        close(go[1]);
    return pid;
}

/* A thread that says "go" on a pipe after a nap (the main thread is in a
 * wait by then, most likely: the result is the same either way). */
static void *go_later(void *p)
{
    int fd = *(int *)p;
    char b = 1;
    nap_ms(30);
    if (write(fd, &b, 1) != 1)
        abort();
    return NULL;
}

static void test_processes_wait(void **state)
{
    (void)state;
    const char *dir = tu_path("procwait");
    const char *key = "http://h/procwait";
    const uint64_t size = 3 * 4096;
    uint8_t *bytes = object_bytes(size, 16);
    uint8_t buf[4096];
    int st, go;
    pthread_t t;
    stk_cache *c;
    stk_cache_object *o;
    assert_int_equal(stk_cache_open(dir, 0, &c), 0);
    assert_int_equal(stk_cache_object_open(c, key, size, 4096, &o), 0);

    /* Another process fills: the wait (no limit) wakes when its lock goes. */
    pid_t pid = claimer_child(dir, key, size, 4096, 0, bytes, &go);
    assert_int_equal(stk_cache_claim(o, 0), STK_CACHE_BUSY);
    assert_int_equal(pthread_create(&t, NULL, go_later, &go), 0);
    assert_int_equal(stk_cache_wait(o, 0, -1), STK_CACHE_PRESENT);
    pthread_join(t, NULL);
    close(go);
    assert_int_equal(stk_cache_read(o, buf, 4096, 0), 0);
    assert_memory_equal(buf, bytes, 4096);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);

    /* The same with a time limit (the polling path). */
    pid = claimer_child(dir, key, size, 4096, 1, bytes, &go);
    assert_int_equal(stk_cache_wait(o, 1, 0), STK_ETIMEDOUT);
    assert_int_equal(pthread_create(&t, NULL, go_later, &go), 0);
    assert_int_equal(stk_cache_wait(o, 1, 600000), STK_CACHE_PRESENT);
    pthread_join(t, NULL);
    close(go);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);

    /* A claimer that never finishes: timeouts; killed, it blocks nobody. */
    pid = claimer_child(dir, key, size, 4096, 2, bytes, NULL);
    assert_int_equal(stk_cache_claim(o, 2), STK_CACHE_BUSY);
    assert_int_equal(stk_cache_wait(o, 2, 15), STK_ETIMEDOUT);
    assert_non_null(strstr(stk_errmsg(), "chunk 2 still being downloaded after 15 ms"));
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(stk_cache_wait(o, 2, -1), STK_CACHE_ABSENT);
    assert_false(stk_cache_has(o, 2));
    fill_chunk(o, bytes, 2);
    assert_int_equal(stk_cache_read(o, buf, 4096, 8192), 0);
    assert_memory_equal(buf, bytes + 8192, 4096);
    stk_cache_object_close(o);
    stk_cache_close(c);
    free(bytes);
}

/* ------------------------------------------------------------------------- */
/* Crash safety                                                               */
/* ------------------------------------------------------------------------- */

/* A child that fills chunk k and is killed right after the pwrite of
 * kill_len bytes. */
static void killed_filler(const char *dir, const char *key, uint64_t size, uint32_t cs,
                          uint64_t k, const uint8_t *bytes, size_t kill_len)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        stk_cache *c;
        stk_cache_object *o;
        if (stk_cache_open(dir, 0, &c) != 0 || stk_cache_object_open(c, key, size, cs, &o) != 0 ||
            stk_cache_claim(o, k) != STK_CACHE_MINE)
            _exit(3);
        g_kill_after_len = kill_len;
        stk_cache_fill(o, k, bytes + k * cs, len_of(size, cs, k));
        _exit(4); /* not reached */
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGKILL);
}

static void test_crash_mid_fill(void **state)
{
    (void)state;
    const char *dir = tu_path("crash");
    const char *key = "http://h/crash.stk";
    const uint32_t cs = 4096;
    const uint64_t size = 2 * 4096 + 300;
    uint8_t *bytes = object_bytes(size, 17);
    uint8_t buf[4096];
    char map[512], data[512];
    key_paths(dir, key, map, data);

    /* Killed after the data, before the entry: the bytes are in .data but
     * the chunk is absent, its claim gone with the process. */
    killed_filler(dir, key, size, cs, 0, bytes, cs);
    read_at(data, 0, buf, cs);
    assert_memory_equal(buf, bytes, cs);
    stk_cache *c;
    stk_cache_object *o;
    assert_int_equal(stk_cache_open(dir, 0, &c), 0);
    assert_int_equal(stk_cache_object_open(c, key, size, cs, &o), 0);
    assert_false(stk_cache_has(o, 0));
    assert_int_equal(stk_cache_read(o, buf, 10, 0), STK_ENOENT);
    assert_int_equal(stk_cache_wait(o, 0, -1), STK_CACHE_ABSENT);
    assert_int_equal(stk_cache_claim(o, 0), STK_CACHE_MINE);
    stk_cache_abandon(o, 0);

    /* Killed after the entry (8 bytes): complete, present and right. */
    killed_filler(dir, key, size, cs, 2, bytes, 8);
    assert_true(stk_cache_has(o, 2));
    assert_int_equal(stk_cache_read(o, buf, 300, 2 * cs), 0);
    assert_memory_equal(buf, bytes + 2 * cs, 300);

    /* The same simulated by hand on chunk 1: bytes without an entry. */
    patch_file(data, cs, bytes + cs, cs);
    assert_false(stk_cache_has(o, 1));
    stk_cache_object_close(o);
    stk_cache_close(c);
    free(bytes);
}

/* The first read of a chunk in a process checks its CRC on the bytes the
 * read brings in, plus the chunk's parts outside the read: damage anywhere
 * in a chunk the read touches is found, inside the read or outside it,
 * also when the read spans more chunks than are checked that way. */
static void test_read_checks_whole_chunks(void **state)
{
    (void)state;
    const char *dir = tu_path("readcheck");
    const char *key = "http://h/readcheck.stk";
    const uint32_t cs = 1024;
    const uint64_t size = 40 * 1024 + 300; /* a short last chunk */
    uint8_t *bytes = object_bytes(size, 31);
    uint8_t *buf = malloc(size);
    assert_non_null(buf);
    char map[512], data[512];
    stk_cache *c;
    stk_cache_object *o;
    stk_cache_stats st;
    key_paths(dir, key, map, data);

    assert_int_equal(stk_cache_open(dir, 0, &c), 0);
    assert_int_equal(stk_cache_object_open(c, key, size, cs, &o), 0);
    fill_all(o, bytes);
    stk_cache_object_close(o);
    /* Damage: chunk 2 before the read's start, chunk 5 inside the read,
     * chunk 7 after the read's end, chunk 39 (a span of 40 chunks). */
    const uint64_t at[4] = {2 * cs + 10, 5 * cs + 500, 7 * cs + 1000, 39 * cs + 3};
    for (int i = 0; i < 4; i++) {
        uint8_t x = bytes[at[i]] ^ 0x01;
        patch_file(data, at[i], &x, 1);
    }
    stk_cache_stats_reset();
    assert_int_equal(stk_cache_object_open(c, key, size, cs, &o), 0);
    /* Good chunks, read across their boundaries: the bytes, and checked. */
    assert_int_equal(stk_cache_read(o, buf, 1500, 300), 0);
    assert_memory_equal(buf, bytes + 300, 1500);
    assert_true(stk_cache_has(o, 0) && stk_cache_has(o, 1));
    /* Chunk 2 damaged before the read: found. */
    assert_int_equal(stk_cache_read(o, buf, 200, 2 * cs + 600), STK_ENOENT);
    /* Chunk 5 damaged inside a read of chunks 3-6: found; 3 and 4 stay
     * unchecked or good, never wrong. */
    assert_int_equal(stk_cache_read(o, buf, 3 * cs, 3 * cs + 100), STK_ENOENT);
    /* Chunk 7 damaged after the read's end. */
    assert_int_equal(stk_cache_read(o, buf, 100, 7 * cs), STK_ENOENT);
    /* A read of chunks 8-20: checked on its bytes, and good. */
    assert_int_equal(stk_cache_read(o, buf, 13 * cs, 8 * cs), 0);
    assert_memory_equal(buf, bytes + 8 * cs, 13 * cs);
    /* Chunks 8 to the end, more than a read checks on its own bytes: each
     * checked apart, chunk 39 found. */
    assert_int_equal(stk_cache_read(o, buf, size - 8 * cs, 8 * cs), STK_ENOENT);
    stk_cache_stats_get(&st);
    assert_int_equal(st.bad_chunks, 4);
    /* The bad ones fetched again (claim, fill): every read is good. */
    const uint64_t bad[4] = {2, 5, 7, 39};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(stk_cache_claim(o, bad[i]), STK_CACHE_MINE);
        assert_int_equal(stk_cache_fill(o, bad[i], bytes + bad[i] * cs, cs), 0);
    }
    assert_int_equal(stk_cache_read(o, buf, size, 0), 0);
    assert_memory_equal(buf, bytes, size);
    stk_cache_object_close(o);
    stk_cache_close(c);
    free(buf);
    free(bytes);
}

/* stk_cache_view: the bytes in place (no copy), the same checks as a read:
 * absent and damaged chunks are STK_ENOENT, a refetched chunk viewed again,
 * a view stays valid and unchanged while the object is open, even after
 * another opener evicts the files. */
static void test_view(void **state)
{
    (void)state;
    const char *dir = tu_path("view");
    const char *key = "http://h/view.stk";
    const uint32_t cs = 4096;
    const uint64_t size = 12 * 4096 + 777; /* a short last chunk */
    uint8_t *bytes = object_bytes(size, 41);
    char map[512], data[512];
    stk_cache *c;
    stk_cache_object *o;
    stk_cache_stats st;
    const uint8_t *p = NULL, *q = NULL;
    key_paths(dir, key, map, data);

    assert_int_equal(stk_cache_open(dir, 0, &c), 0);
    assert_int_equal(stk_cache_object_open(c, key, size, cs, &o), 0);
    /* Nothing present yet: no view; then chunks 0-2 filled. */
    assert_int_equal(stk_cache_view(o, 100, 10, &p), STK_ENOENT);
    for (uint64_t k = 0; k < 3; k++)
        fill_chunk(o, bytes, k);
    stk_cache_stats_reset();
    assert_int_equal(stk_cache_view(o, 100, 3 * cs - 200, &p), 0);
    assert_memory_equal(p, bytes + 100, 3 * cs - 200);
    assert_int_equal(stk_cache_view(o, 2 * cs, cs + 1, &q), STK_ENOENT); /* chunk 3 absent */
    assert_int_equal(stk_cache_view(o, 0, 0, &q), 0);                     /* empty: fine */
    assert_int_equal(stk_cache_view(o, size - 1, 2, &q), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "past the end"));
    for (uint64_t k = 3; k < stk_cache_chunk_count(o); k++)
        fill_chunk(o, bytes, k);
    assert_int_equal(stk_cache_view(o, 0, (size_t)size, &q), 0);
    assert_memory_equal(q, bytes, size);
    assert_ptr_equal(q + 100, p); /* one mapping of the object */
    stk_cache_stats_get(&st);
    assert_int_equal(st.hit_bytes, 3 * cs - 200 + size);
    stk_cache_object_close(o);

    /* Damage on disk (chunk 4's bytes, chunk 9's CRC): a fresh opener's first
     * view of them checks the mapped bytes and finds it. */
    uint8_t x = bytes[4 * cs + 9] ^ 0x10;
    patch_file(data, 4 * cs + 9, &x, 1);
    uint8_t crc_bad[4] = {9, 9, 9, 9};
    patch_file(map, header_size_of(key) + 8 * 9, crc_bad, 4);
    stk_cache_stats_reset();
    assert_int_equal(stk_cache_object_open(c, key, size, cs, &o), 0);
    assert_int_equal(stk_cache_view(o, 3 * cs, 2 * cs, &p), STK_ENOENT);
    assert_int_equal(stk_cache_view(o, 9 * cs + 5, 10, &p), STK_ENOENT);
    assert_int_equal(stk_cache_view(o, 5 * cs, 4 * cs, &p), 0); /* 5-8 good */
    assert_memory_equal(p, bytes + 5 * cs, 4 * cs);
    stk_cache_stats_get(&st);
    assert_int_equal(st.bad_chunks, 2);
    /* Fetched again: the views see the good bytes. */
    assert_int_equal(stk_cache_claim(o, 4), STK_CACHE_MINE);
    assert_int_equal(stk_cache_fill(o, 4, bytes + 4 * cs, cs), 0);
    assert_int_equal(stk_cache_claim(o, 9), STK_CACHE_MINE);
    assert_int_equal(stk_cache_fill(o, 9, bytes + 9 * cs, cs), 0);
    assert_int_equal(stk_cache_view(o, 0, (size_t)size, &p), 0);
    assert_memory_equal(p, bytes, size);

    /* The files unlinked under an open object (an eviction by another
     * process, a user's rm): the view keeps reading the old inode. */
    assert_int_equal(unlink(data), 0);
    assert_int_equal(unlink(map), 0);
    assert_memory_equal(p, bytes, size);
    assert_int_equal(stk_cache_view(o, cs, 10, &q), 0);
    assert_memory_equal(q, bytes + cs, 10);
    stk_cache_object_close(o);
    stk_cache_close(c);
    free(bytes);
}

static void test_corruption(void **state)
{
    (void)state;
    const char *dir = tu_path("corrupt");
    const char *key = "http://h/corrupt.stk";
    const uint32_t cs = 2048;
    const uint64_t size = 4 * 2048;
    uint8_t *bytes = object_bytes(size, 18);
    uint8_t buf[2048];
    char map[512], data[512];
    stk_cache *c;
    stk_cache_object *o;
    stk_cache_stats st;
    key_paths(dir, key, map, data);
    uint64_t hs = header_size_of(key);

    assert_int_equal(stk_cache_open(dir, 0, &c), 0);
    assert_int_equal(stk_cache_object_open(c, key, size, cs, &o), 0);
    fill_all(o, bytes);
    stk_cache_object_close(o);
    stk_cache_close(c);

    /* One byte of chunk 1's data flipped; chunk 3's CRC changed. */
    uint8_t x = bytes[cs + 77] ^ 0x40;
    patch_file(data, cs + 77, &x, 1);
    uint8_t crc_bad[4] = {1, 2, 3, 4};
    patch_file(map, hs + 8 * 3, crc_bad, 4);

    stk_cache_stats_reset();
    assert_int_equal(stk_cache_open(dir, 0, &c), 0);
    assert_int_equal(stk_cache_object_open(c, key, size, cs, &o), 0);
    assert_true(stk_cache_has(o, 0));
    assert_false(stk_cache_has(o, 1));
    assert_false(stk_cache_has(o, 1)); /* counted once */
    assert_true(stk_cache_has(o, 2));
    assert_int_equal(stk_cache_read(o, buf, 10, 3 * cs), STK_ENOENT);
    stk_cache_stats_get(&st);
    assert_int_equal(st.bad_chunks, 2);
    assert_int_equal(stk_cache_read(o, buf, cs, cs), STK_ENOENT);

    /* A claim of a bad chunk: MINE, and the entry cleared on disk first. */
    assert_int_equal(stk_cache_claim(o, 1), STK_CACHE_MINE);
    uint8_t e[8];
    read_at(map, hs + 8 * 1, e, 8);
    assert_int_equal(e[4], 0);
    assert_int_equal(stk_cache_fill(o, 1, bytes + cs, cs), 0);
    assert_int_equal(stk_cache_claim(o, 3), STK_CACHE_MINE);
    assert_int_equal(stk_cache_fill(o, 3, bytes + 3 * cs, cs), 0);
    assert_int_equal(stk_cache_read(o, buf, cs, cs), 0);
    assert_memory_equal(buf, bytes + cs, cs);
    stk_cache_stats_get(&st);
    assert_int_equal(st.bad_chunks, 2);
    stk_cache_object_close(o);

    /* A torn header: the object is reset, not trusted. */
    uint8_t junk[8] = {'S', 'T', 'K', 'C', 'A', 'C', 'H', 'X'};
    patch_file(map, 0, junk, 8);
    assert_int_equal(stk_cache_object_open(c, key, size, cs, &o), 0);
    for (uint64_t k = 0; k < 4; k++)
        assert_false(stk_cache_has(o, k));
    fill_all(o, bytes);
    stk_cache_object_close(o);

    /* .data gone (a crash between the two unlinks of a removal): reset. */
    assert_int_equal(unlink(data), 0);
    assert_int_equal(stk_cache_object_open(c, key, size, cs, &o), 0);
    for (uint64_t k = 0; k < 4; k++)
        assert_false(stk_cache_has(o, k));
    stk_cache_object_close(o);

    /* The key in the header differs (a hash collision): reset. */
    assert_int_equal(stk_cache_object_open(c, key, size, cs, &o), 0);
    fill_all(o, bytes);
    stk_cache_object_close(o);
    uint8_t other = (uint8_t)(key[5] ^ 1);
    patch_file(map, 40 + 5, &other, 1);
    assert_int_equal(stk_cache_object_open(c, key, size, cs, &o), 0);
    assert_false(stk_cache_has(o, 0));
    stk_cache_object_close(o);
    stk_cache_close(c);
    free(bytes);
}

/* ------------------------------------------------------------------------- */
/* Eviction                                                                   */
/* ------------------------------------------------------------------------- */

#define EV_SIZE (64 * 1024) /* each object: 16 chunks of 4 KiB */

static void ev_fill(stk_cache *c, const char *key, const uint8_t *bytes, stk_cache_object **keep)
{
    stk_cache_object *o;
    assert_int_equal(stk_cache_object_open(c, key, EV_SIZE, 4096, &o), 0);
    fill_all(o, bytes);
    if (keep)
        *keep = o;
    else
        stk_cache_object_close(o);
}

static void test_evict_lru(void **state)
{
    (void)state;
    const char *dir = tu_path("evict");
    uint8_t *bytes = object_bytes(EV_SIZE, 19);
    char amap[512], adata[512], bmap[512], bdata[512], cmap[512], cdata[512];
    key_paths(dir, "http://h/A", amap, adata);
    key_paths(dir, "http://h/B", bmap, bdata);
    key_paths(dir, "http://h/C", cmap, cdata);
    stk_cache *c;
    stk_cache_stats st;
    /* Room for two objects and a half: the third evicts one. */
    assert_int_equal(stk_cache_open(dir, 5 * EV_SIZE / 2, &c), 0);
    ev_fill(c, "http://h/A", bytes, NULL);
    ev_fill(c, "http://h/B", bytes, NULL);
    /* A used longest ago. */
    set_mtime(amap, 300);
    set_mtime(bmap, 200);
    stk_cache_stats_reset();
    stk_cache_object *oc;
    ev_fill(c, "http://h/C", bytes, &oc);
    assert_false(exists(amap));
    assert_false(exists(adata));
    assert_true(exists(bmap) && exists(bdata));
    assert_true(exists(cmap) && exists(cdata));
    stk_cache_stats_get(&st);
    assert_int_equal(st.evicted_objects, 1);
    assert_true(st.evicted_bytes >= EV_SIZE);
    stk_cache_object_close(oc);
    stk_cache_close(c);

    /* An open object is never evicted, however old. */
    const char *dir2 = tu_path("evict2");
    char dmap[512], ddata[512], emap[512], edata[512], fmap[512], fdata[512];
    key_paths(dir2, "http://h/D", dmap, ddata);
    key_paths(dir2, "http://h/E", emap, edata);
    key_paths(dir2, "http://h/F", fmap, fdata);
    assert_int_equal(stk_cache_open(dir2, 5 * EV_SIZE / 2, &c), 0);
    stk_cache_object *od, *oe;
    ev_fill(c, "http://h/D", bytes, &od); /* stays open */
    ev_fill(c, "http://h/F", bytes, NULL);
    set_mtime(dmap, 1000);
    set_mtime(fmap, 500);
    ev_fill(c, "http://h/E", bytes, &oe);
    assert_true(exists(dmap) && exists(ddata));
    assert_false(exists(fmap) || exists(fdata));
    assert_true(exists(emap) && exists(edata));
    uint8_t *buf = malloc(EV_SIZE);
    assert_non_null(buf);
    assert_int_equal(stk_cache_read(od, buf, EV_SIZE, 0), 0);
    assert_memory_equal(buf, bytes, EV_SIZE);

    /* Another process fills G and evicts D, the oldest, which it does not
     * have open: this process keeps reading D's unlinked files. */
    set_mtime(dmap, 1000); /* again: the read above may have touched it */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        stk_cache *cc;
        stk_cache_object *og;
        if (stk_cache_open(dir2, 5 * EV_SIZE / 2, &cc) != 0 ||
            stk_cache_object_open(cc, "http://h/G", EV_SIZE, 4096, &og) != 0)
            _exit(3);
        for (uint64_t k = 0; k < EV_SIZE / 4096; k++)
            if (stk_cache_claim(og, k) != STK_CACHE_MINE ||
                stk_cache_fill(og, k, bytes + k * 4096, 4096) != 0)
                _exit(4);
        _exit(0);
    }
    int wst;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    assert_true(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    assert_false(exists(dmap) || exists(ddata));
    assert_true(exists(emap) && exists(edata));
    memset(buf, 0, EV_SIZE);
    assert_int_equal(stk_cache_read(od, buf, EV_SIZE, 0), 0);
    assert_memory_equal(buf, bytes, EV_SIZE);
    stk_cache_object_close(od);
    stk_cache_object_close(oe);
    stk_cache_close(c);
    free(buf);
    free(bytes);
}

/* ------------------------------------------------------------------------- */
/* Errors                                                                     */
/* ------------------------------------------------------------------------- */

/* Threads taking their first views of one object at once: the mapping is
 * made once and published to all, each chunk's check state is set without
 * a race (ThreadSanitizer runs this), and every view holds the right bytes. */
typedef struct view_race {
    stk_cache_object *o;
    const uint8_t *bytes;
    uint64_t size;
    pthread_barrier_t start;
    _Atomic int failures;
    const uint8_t *base[RACE_THREADS];
} view_race;

static void *view_thread(void *p)
{
    race_arg *a = p;
    view_race *r = a->shared;
    pthread_barrier_wait(&r->start);
    /* each thread walks the object from a different place, in 3000-byte views */
    for (uint64_t i = 0; i < r->size / 3000; i++) {
        uint64_t off = ((i + (uint64_t)a->id * 7) % (r->size / 3000)) * 3000;
        const uint8_t *v;
        if (stk_cache_view(r->o, off, 3000, &v) != 0 || memcmp(v, r->bytes + off, 3000) != 0)
            atomic_fetch_add(&r->failures, 1);
        else if (off == 0)
            r->base[a->id] = v;
    }
    return NULL;
}

static void test_view_threads(void **state)
{
    (void)state;
    static view_race r;
    const char *key = "http://h/view-race";
    const uint64_t size = RACE_CHUNKS * 1024;
    uint8_t *bytes = object_bytes(size, 47);
    stk_cache *c;
    stk_cache_object *o;
    assert_int_equal(stk_cache_open(tu_path("viewrace"), 0, &c), 0);
    assert_int_equal(stk_cache_object_open(c, key, size, 1024, &o), 0);
    fill_all(o, bytes);
    stk_cache_object_close(o); /* reopened: every chunk unchecked, no mapping yet */
    memset(&r, 0, sizeof r);
    r.bytes = bytes;
    r.size = size;
    assert_int_equal(stk_cache_object_open(c, key, size, 1024, &r.o), 0);
    run_raced(view_thread, &r, &r.start);
    assert_int_equal(atomic_load(&r.failures), 0);
    for (int i = 1; i < RACE_THREADS; i++)
        assert_ptr_equal(r.base[i], r.base[0]); /* one mapping */
    stk_cache_object_close(r.o);
    stk_cache_close(c);
    free(bytes);
}

/* stk_cache_usage_scan and stk_cache_trim (`stoker cache info/trim/clear`):
 * counts from the directory, least recently used removed first, an object
 * open in this process kept even by a trim to 0. */
static void test_usage_and_trim(void **state)
{
    (void)state;
    const char *dir = tu_path("trim");
    uint8_t *bytes = object_bytes(EV_SIZE, 43);
    stk_cache *c;
    stk_cache_object *keep_open;
    uint64_t objects, nbytes, ro, rb, lo, lb;
    char map[512], data[512];
    assert_int_equal(stk_cache_open(dir, 0, &c), 0);
    assert_int_equal(stk_cache_usage_scan(c, &objects, &nbytes), 0);
    assert_int_equal(objects, 0);
    assert_int_equal(nbytes, 0);
    const char *keys[4] = {"http://h/t0", "http://h/t1", "http://h/t2", "http://h/t3"};
    for (int i = 0; i < 4; i++) {
        ev_fill(c, keys[i], bytes, i == 3 ? &keep_open : NULL);
        key_paths(dir, keys[i], map, data);
        set_mtime(map, 100 - i * 10); /* t0 the least recently used */
    }
    struct stat st;
    key_paths(dir, keys[0], map, data);
    assert_int_equal(stat(data, &st), 0);
    uint64_t one = (uint64_t)st.st_blocks * 512;
    assert_true(one >= EV_SIZE);
    assert_int_equal(stk_cache_usage_scan(c, &objects, &nbytes), 0);
    assert_int_equal(objects, 4);
    assert_int_equal(nbytes, 4 * one);
    /* Down to two objects' bytes: t0 and t1 go. */
    assert_int_equal(stk_cache_trim(c, 2 * one, &ro, &rb, &lo, &lb), 0);
    assert_int_equal(ro, 2);
    assert_int_equal(rb, 2 * one);
    assert_int_equal(lo, 2);
    assert_int_equal(lb, 2 * one);
    for (int i = 0; i < 4; i++) {
        key_paths(dir, keys[i], map, data);
        assert_int_equal(access(data, F_OK) == 0, i >= 2);
        assert_int_equal(access(map, F_OK) == 0, i >= 2);
    }
    /* Under the size already: nothing to do. */
    assert_int_equal(stk_cache_trim(c, 2 * one, &ro, &rb, NULL, NULL), 0);
    assert_int_equal(ro, 0);
    /* To 0: t2 goes, t3 (open here) stays and still reads. */
    assert_int_equal(stk_cache_trim(c, 0, &ro, &rb, &lo, &lb), 0);
    assert_int_equal(ro, 1);
    assert_int_equal(lo, 1);
    assert_int_equal(lb, one);
    uint8_t buf[64];
    assert_int_equal(stk_cache_read(keep_open, buf, sizeof buf, 100), 0);
    assert_memory_equal(buf, bytes + 100, sizeof buf);
    stk_cache_object_close(keep_open);
    assert_int_equal(stk_cache_trim(c, 0, &ro, NULL, &lo, &lb), 0);
    assert_int_equal(ro, 1);
    assert_int_equal(lo, 0);
    assert_int_equal(lb, 0);
    stk_cache_close(c);
    free(bytes);
}

static void test_errors(void **state)
{
    (void)state;
    stk_cache *c;
    stk_cache_object *o;
    /* A file where the directory should be (chmod would not stop root). */
    const char *file = tu_path("not-a-dir");
    tu_write_file(file, "x", 1);
    assert_int_equal(stk_cache_open(file, 0, &c), STK_EIO);
    assert_non_null(strstr(stk_errmsg(), "not-a-dir: cannot create the cache directory"));
    char sub[512];
    snprintf(sub, sizeof sub, "%s/cache", file);
    assert_int_equal(stk_cache_open(sub, 0, &c), STK_EIO);
    assert_non_null(strstr(stk_errmsg(), "cannot create the cache directory: Not a directory"));
    const char *objfile = tu_path("objfile");
    assert_int_equal(mkdir(objfile, 0777), 0);
    char objects[512];
    snprintf(objects, sizeof objects, "%s/objects", objfile);
    tu_write_file(objects, "x", 1);
    assert_int_equal(stk_cache_open(objfile, 0, &c), STK_EIO);
    assert_non_null(strstr(stk_errmsg(), "cannot create the cache directory"));
    assert_int_equal(stk_cache_open("", 0, &c), STK_EINVAL);

    /* Arguments. */
    const char *dir = tu_path("errors");
    assert_int_equal(stk_cache_open(dir, 0, &c), 0);
    assert_int_equal(stk_cache_object_open(c, "http://h/x", 100, 0, &o), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "chunk size 0"));
    assert_int_equal(stk_cache_object_open(c, "", 100, 10, &o), STK_EINVAL);
    char *long_key = malloc(20000);
    assert_non_null(long_key);
    memset(long_key, 'k', 19999);
    long_key[19999] = '\0';
    assert_int_equal(stk_cache_object_open(c, long_key, 100, 10, &o), STK_EINVAL);
    free(long_key);

    /* The object's HH directory is a file: its open fails naming the path. */
    char map[512], data[512], hh[512];
    key_paths(dir, "http://h/blocked", map, data);
    snprintf(hh, sizeof hh, "%s", map);
    *strrchr(hh, '/') = '\0';
    tu_write_file(hh, "x", 1);
    assert_int_equal(stk_cache_object_open(c, "http://h/blocked", 100, 10, &o), STK_EIO);
    assert_non_null(strstr(stk_errmsg(), ".map: cannot open"));

    /* A full disk: /dev/full answers every write with ENOSPC. */
    struct stat sb;
    if (stat("/dev/full", &sb) == 0 && S_ISCHR(sb.st_mode)) {
        const char *key = "http://h/full";
        uint8_t *bytes = object_bytes(8192, 20);
        key_paths(dir, key, map, data);
        assert_int_equal(stk_cache_object_open(c, key, 8192, 4096, &o), 0);
        stk_cache_object_close(o);
        assert_int_equal(unlink(data), 0);
        assert_int_equal(symlink("/dev/full", data), 0);
        assert_int_equal(stk_cache_object_open(c, key, 8192, 4096, &o), 0);
        assert_int_equal(stk_cache_claim(o, 1), STK_CACHE_MINE);
        assert_int_equal(stk_cache_fill(o, 1, bytes + 4096, 4096), STK_EIO);
        assert_non_null(strstr(stk_errmsg(), ".data: cannot write: No space left on device"));
        assert_non_null(strstr(stk_errmsg(), "lower byte limit"));
        assert_non_null(strstr(stk_errmsg(), "cache_dir"));
        assert_false(stk_cache_has(o, 1));
        assert_int_equal(stk_cache_claim(o, 1), STK_CACHE_MINE); /* released */
        stk_cache_abandon(o, 1);
        stk_cache_object_close(o);
        free(bytes);
    }
    stk_cache_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),       cmocka_unit_test(test_empty_object),
        cmocka_unit_test(test_reopen_and_reset), cmocka_unit_test(test_threads_claim),
        cmocka_unit_test(test_wait_threads),     cmocka_unit_test(test_processes_share),
        cmocka_unit_test(test_processes_wait),   cmocka_unit_test(test_crash_mid_fill),
        cmocka_unit_test(test_corruption),       cmocka_unit_test(test_read_checks_whole_chunks),       cmocka_unit_test(test_evict_lru),
        cmocka_unit_test(test_errors),           cmocka_unit_test(test_view),
        cmocka_unit_test(test_usage_and_trim),   cmocka_unit_test(test_view_threads),
        cmocka_unit_test(test_old_version_is_discarded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
