/*
 * cache.c — the local cache of remote objects (the interface and the design
 * are in cache.h; this essay is about how the code keeps them).
 *
 * Files. An object's key is hashed with XXH3-128; its canonical big-endian
 * form in 32 lower-case hex digits names the files
 * DIR/objects/HH/HASH.{data,map}, HH being the first two digits. The .map
 * file is
 *
 *   0   "STKCACHE"          magic
 *   8   u32 version (2; a .map of version 1 is another object's, removed
 *                           and created afresh: version 1 took a 206 for other
 *                           bytes than asked as the chunk's, with a CRC of its
 *                           own, and nothing else would ever refetch it)
 *   12  u32 header_size     where the entries start: 40 + key_len rounded
 *                           up to 64
 *   16  u64 size            the object's size in bytes
 *   24  u32 chunk_size
 *   28  u32 key_len
 *   32  u32 header CRC      CRC-32C of bytes [0, 32) and of the key
 *   36  u32 0
 *   40  the key             key_len bytes, then zeros up to header_size
 *   header_size + 8 k       entry k: u32 CRC-32C of chunk k's bytes, u8
 *                           present (1), 3 zero bytes
 *
 * all little-endian. The .data file is the object itself, sparse: chunk k
 * at offset k * chunk_size.
 *
 * Locks. Every lock on a cache file is an open-file-description lock
 * (fcntl F_OFD_SETLK*): it belongs to the descriptor, conflicts with any
 * other descriptor's lock (in this process or another), and goes away when
 * the descriptor is closed or its process dies, so a killed process never
 * leaves a lock behind.
 *
 *   bytes [0, 8) of .map      the header lock: held (write) by whoever
 *                             creates, checks, resets or evicts the
 *                             object's files, so its two files never change
 *                             name under an opener
 *   entry k's 8 bytes         the claim of chunk k: held (write) by the one
 *                             process downloading it; others test it with
 *                             a read lock on a descriptor of their own
 *   DIR/lock (flock)          one evicting process at a time
 *
 * The files are only ever removed under the header lock, .data first and
 * then .map, and an opener takes the header lock and then checks that the
 * descriptor it locked is still the file at the path (same inode) before it
 * trusts it: otherwise it starts again. Only a pair of files the opener
 * has just created (both) is initialised: .data sized, .map sized, its
 * header written last, so a torn initialisation fails the header check.
 * Anything else that does not match (a torn header, another key, size or
 * chunk size, a .map without its .data after a crash between the two
 * unlinks, an empty .map beside an old .data) is removed and created
 * afresh, never truncated in place: a process that has the old files open
 * keeps reading what it checked.
 *
 * In one process, a stk_cache_object has one descriptor on .map, shared by
 * its threads, and the kernel does not make one descriptor's locks conflict
 * with themselves; so threads claim chunks through `claimed` (under the
 * object's mutex, which also orders the fcntl calls on that descriptor),
 * and a thread waiting for a chunk another thread claimed waits on the
 * object's condition variable. Waiting for another process opens a second
 * descriptor of the same file (/proc/self/fd) and asks for a read lock on
 * the entry: granted when the claimer's write lock goes.
 *
 * Chunk states in this process (`state`, atomic bytes, so stk_cache_has is
 * one load once a chunk is known): UNKNOWN (look at the entry on disk each
 * time: another process may fill it at any moment), PRESENT (entry present
 * and the bytes' CRC checked once: trusted from then on), BAD (the entry
 * says present but the bytes do not match its CRC: absent until a claim
 * re-checks it under the lock, clears the entry and lets it be fetched
 * again). The check of a chunk rides on the first read that touches it
 * (read_checking: the CRC is taken over the bytes the read brings in plus
 * the chunk's parts outside it), so a chunk's first read in a process
 * reads its bytes once, not once to check and once to deliver. A chunk
 * once PRESENT stays so for this process: nobody rewrites
 * a present, good chunk (a claim of one answers PRESENT), and a reset or
 * an eviction by another process unlinks the files, whose inodes this
 * process keeps reading through its descriptors.
 *
 * Eviction. Each cache keeps an estimate of the .data bytes (the last scan
 * plus this process's fills since); a fill that takes it over the limit, or
 * the first fill five seconds after the last scan, rescans the directory
 * under DIR/lock and evicts least-recently-used objects (the .map's mtime)
 * down to 90% of the limit, so a cache at its limit does not rescan on
 * every fill. Objects open in this process are skipped (checked under the
 * cache mutex, which every open in this process holds, so none opens
 * between the check and the unlink); an object whose header lock another
 * process holds (opening it) is skipped too. When nothing can be evicted
 * the next attempt waits a second.
 */
#include "io/cache.h"
#include "io/map_guard.h"
#include "io/source.h"

#include "core/crc32c.h"
#include "core/error.h"
#include "core/util.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAP_MAGIC "STKCACHE"
#define MAP_VERSION 2u
#define MAP_FIXED_HEADER 40u
#define ENTRY_SIZE 8u
#define KEY_MAX 16384u         /* longest key accepted (bytes) */
#define VERIFY_PIECE (1u << 20) /* CRC check reads a chunk this much at a time */
#define TOUCH_MS 1000          /* .map mtime touched at most this often per object */
#define RESCAN_MS 5000         /* a fill rescans the directory at least this often */
#define OPEN_ATTEMPTS 100      /* the files changed under an open this many times: give up */

enum { ST_UNKNOWN = 0, ST_PRESENT = 1, ST_BAD = 2 };

struct stk_cache_object {
    stk_cache *cache;          /* holds a reference; immutable */
    char *key;                 /* malloc'd; immutable */
    size_t key_len;
    uint8_t hash[16];          /* XXH3-128 of the key, canonical; immutable */
    char *map_path, *data_path; /* malloc'd; immutable (messages, waits) */
    int map_fd, data_fd;       /* O_RDWR; closed (releasing every claim) at the last close */
    /* .data mapped read-only and shared, whole, for stk_cache_view: NULL
     * until the first view, then set once under mu (published with a
     * release store) and unmapped at the last close. Registered with the
     * SIGBUS guard (data_guard), so a .data cut short by hand reads as
     * zeros, which fail the chunk's CRC, instead of killing the process. */
    _Atomic(const uint8_t *) data_map;
    struct stk_map_guard *data_guard; /* set with data_map */
    uint64_t size, nchunks;    /* immutable */
    uint32_t chunk_size;       /* immutable */
    uint32_t header_size;      /* entry k at header_size + 8 k; immutable */
    _Atomic uint8_t *state;    /* per chunk ST_*; malloc'd; lock-free */
    uint8_t *claimed;          /* per chunk: claimed in this process; under mu */
    pthread_mutex_t mu;        /* claimed[], and the claim locks' fcntl calls on map_fd */
    pthread_cond_t cv;         /* broadcast when a claim is released (CLOCK_MONOTONIC) */
    _Atomic int64_t touched_ms; /* last mtime touch (monotonic ms) */
    int refs;                  /* under cache->mu */
    stk_cache_object *next;    /* hash chain of cache->table; under cache->mu */
};

struct stk_cache {
    char *dir, *objects, *lock_path; /* malloc'd; immutable */
    dev_t dev;                 /* the directory's identity, with the pid: the registry key */
    ino_t ino;
    pid_t pid;                 /* the process that opened it (a fork child opens its own) */
    _Atomic uint64_t limit;    /* bytes of .data (0: none); the smallest nonzero asked */
    int refs;                  /* under g_mu: opens plus open objects */
    stk_cache *next;           /* g_caches list; under g_mu */
    pthread_mutex_t mu;        /* the table of open objects; held across an object's open */
    stk_cache_object **table;  /* chained hash table by hash; under mu */
    size_t table_cap, table_count;
    pthread_mutex_t evict_mu;  /* one eviction pass at a time in this process (trylock) */
    _Atomic uint64_t est_bytes; /* .data bytes: last scan + this process's fills since */
    _Atomic int64_t scanned_ms; /* monotonic ms of the last scan (INT64_MIN: never) */
    _Atomic int64_t retry_ms;  /* no pass before this (a pass that could not reach the limit) */
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static stk_cache *g_caches; /* under g_mu */

/* fork(): g_mu held by another thread at that moment would stay locked in
 * the child (where closing an inherited dataset closes its cache). g_mu is
 * a leaf (taken under cfg.mu and c->mu, never the other way), so taking it
 * before the fork cannot deadlock. */
static void g_fork_prepare(void) { pthread_mutex_lock(&g_mu); }
static void g_fork_parent(void) { pthread_mutex_unlock(&g_mu); }
static void g_fork_child(void) { pthread_mutex_init(&g_mu, NULL); }
__attribute__((constructor)) static void g_fork_register(void)
{
    pthread_atfork(g_fork_prepare, g_fork_parent, g_fork_child);
}

static _Atomic uint64_t g_hit_bytes, g_filled_bytes, g_evicted_bytes, g_evicted_objects,
    g_bad_chunks;

/* ------------------------------------------------------------------------- */
/* Small helpers                                                              */
/* ------------------------------------------------------------------------- */

static const char *errtext(int e, char *buf, size_t n)
{
    return strerror_r(e, buf, n); /* GNU strerror_r (_GNU_SOURCE) */
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* All n bytes at off: 0, or -1 with errno set. */
static int pwrite_all(int fd, const void *buf, size_t n, uint64_t off)
{
    const uint8_t *p = buf;
    size_t done = 0;
    while (done < n) {
        ssize_t k = pwrite(fd, p + done, n - done, (off_t)(off + done));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0) {
            errno = EIO;
            return -1;
        }
        done += (size_t)k;
    }
    return 0;
}

/* An open-file-description lock of `type` (F_RDLCK, F_WRLCK, F_UNLCK) on
 * [start, start + len): 0, or -1 with errno (EAGAIN/EACCES: held by another
 * descriptor, when !wait). */
static int ofd_lock(int fd, short type, uint64_t start, uint64_t len, bool wait)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl); /* l_pid must be 0 for OFD locks */
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = (off_t)start;
    fl.l_len = (off_t)len;
    for (;;) {
        if (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) == 0)
            return 0;
        if (errno != EINTR)
            return -1;
    }
}

static bool lock_busy(int e)
{
    return e == EAGAIN || e == EACCES;
}

/* mkdir -p: 0, or -1 with errno (ENOTDIR when something other than a
 * directory is in the way). */
static int mkdir_p(const char *path)
{
    size_t n = strlen(path);
    char *p = malloc(n + 1);
    if (!p) {
        errno = ENOMEM;
        return -1;
    }
    memcpy(p, path, n + 1);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            free(p);
            return -1;
        }
        *s = '/';
    }
    int rc = mkdir(p, 0777);
    free(p);
    if (rc == 0)
        return 0;
    if (errno != EEXIST)
        return -1;
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

static char *path_join(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    char *p = malloc(na + nb + 2);
    if (!p) {
        stk_fail(STK_ENOMEM, "out of memory");
        return NULL;
    }
    memcpy(p, a, na);
    p[na] = '/';
    memcpy(p + na + 1, b, nb + 1);
    return p;
}

static void hash_hex(const uint8_t hash[16], char hex[33])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        hex[2 * i] = digits[hash[i] >> 4];
        hex[2 * i + 1] = digits[hash[i] & 15];
    }
    hex[32] = '\0';
}

static int hex_value(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    return -1;
}

/* 32 lower-case hex digits into 16 bytes; false if not. */
static bool hex_parse(const char *hex, uint8_t hash[16])
{
    for (int i = 0; i < 16; i++) {
        int hi = hex_value(hex[2 * i]), lo = hi < 0 ? -1 : hex_value(hex[2 * i + 1]);
        if (lo < 0)
            return false;
        hash[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

static size_t hash_bucket(const uint8_t hash[16], size_t cap)
{
    uint64_t h;
    memcpy(&h, hash, sizeof h);
    return (size_t)(h & (cap - 1));
}

/* ------------------------------------------------------------------------- */
/* Counters                                                                   */
/* ------------------------------------------------------------------------- */

void stk_cache_stats_get(stk_cache_stats *out)
{
    out->hit_bytes = atomic_load_explicit(&g_hit_bytes, memory_order_relaxed);
    out->filled_bytes = atomic_load_explicit(&g_filled_bytes, memory_order_relaxed);
    out->evicted_bytes = atomic_load_explicit(&g_evicted_bytes, memory_order_relaxed);
    out->evicted_objects = atomic_load_explicit(&g_evicted_objects, memory_order_relaxed);
    out->bad_chunks = atomic_load_explicit(&g_bad_chunks, memory_order_relaxed);
}

void stk_cache_stats_reset(void)
{
    atomic_store(&g_hit_bytes, 0);
    atomic_store(&g_filled_bytes, 0);
    atomic_store(&g_evicted_bytes, 0);
    atomic_store(&g_evicted_objects, 0);
    atomic_store(&g_bad_chunks, 0);
}

/* ------------------------------------------------------------------------- */
/* The cache (directory) and its registry                                     */
/* ------------------------------------------------------------------------- */

static void cache_free(stk_cache *c)
{
    if (!c)
        return;
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->evict_mu);
    free(c->table);
    free(c->dir);
    free(c->objects);
    free(c->lock_path);
    free(c);
}

int stk_cache_open(const char *dir, uint64_t limit_bytes, stk_cache **out)
{
    char ebuf[128];
    struct stat st;
    stk_cache *c = NULL;
    char *objects = NULL;
    *out = NULL;
    if (!dir || !*dir)
        return stk_fail(STK_EINVAL, "cache: no directory given");
    if (mkdir_p(dir) != 0)
        return stk_fail(errno == ENOMEM ? STK_ENOMEM : STK_EIO,
                        "%s: cannot create the cache directory: %s", dir,
                        errtext(errno, ebuf, sizeof ebuf));
    if (!(objects = path_join(dir, "objects")))
        return STK_ENOMEM;
    if (mkdir(objects, 0777) != 0 && errno != EEXIST) {
        int e = errno;
        free(objects);
        return stk_fail(STK_EIO, "%s: cannot create the cache directory: %s", dir,
                        errtext(e, ebuf, sizeof ebuf));
    }
    if (stat(objects, &st) != 0 || !S_ISDIR(st.st_mode)) {
        int e = errno;
        if (stat(objects, &st) == 0)
            e = ENOTDIR;
        stk_fail(STK_EIO, "%s: cannot create the cache directory: %s: %s", dir, objects,
                 errtext(e, ebuf, sizeof ebuf));
        free(objects);
        return STK_EIO;
    }
    if (stat(dir, &st) != 0) {
        free(objects);
        return stk_fail(STK_EIO, "%s: cannot stat the cache directory: %s", dir,
                        errtext(errno, ebuf, sizeof ebuf));
    }
    pid_t pid = getpid();

    pthread_mutex_lock(&g_mu);
    for (stk_cache *p = g_caches; p; p = p->next) {
        if (p->dev == st.st_dev && p->ino == st.st_ino && p->pid == pid) {
            p->refs++;
            uint64_t old = atomic_load(&p->limit);
            if (limit_bytes && (!old || limit_bytes < old))
                atomic_store(&p->limit, limit_bytes);
            pthread_mutex_unlock(&g_mu);
            free(objects);
            *out = p;
            return 0;
        }
    }
    if (!(c = calloc(1, sizeof *c))) {
        pthread_mutex_unlock(&g_mu);
        free(objects);
        return stk_fail(STK_ENOMEM, "%s: out of memory opening the cache", dir);
    }
    c->objects = objects;
    c->dev = st.st_dev;
    c->ino = st.st_ino;
    c->pid = pid;
    atomic_init(&c->limit, limit_bytes);
    atomic_init(&c->est_bytes, 0);
    atomic_init(&c->scanned_ms, INT64_MIN); /* never: the first fill scans */
    atomic_init(&c->retry_ms, INT64_MIN);
    c->refs = 1;
    c->table_cap = 64;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->evict_mu, NULL);
    if (!(c->dir = stk_strdup(dir)) || !(c->lock_path = path_join(dir, "lock")) ||
        !(c->table = calloc(c->table_cap, sizeof *c->table))) {
        pthread_mutex_unlock(&g_mu);
        cache_free(c);
        return stk_fail(STK_ENOMEM, "%s: out of memory opening the cache", dir);
    }
    c->next = g_caches;
    g_caches = c;
    pthread_mutex_unlock(&g_mu);
    *out = c;
    return 0;
}

void stk_cache_close(stk_cache *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&g_mu);
    bool last = --c->refs == 0;
    if (last) {
        for (stk_cache **pp = &g_caches; *pp; pp = &(*pp)->next) {
            if (*pp == c) {
                *pp = c->next;
                break;
            }
        }
    }
    pthread_mutex_unlock(&g_mu);
    if (last)
        cache_free(c);
}

const char *stk_cache_dir(const stk_cache *c)
{
    return c->dir;
}

static void cache_ref(stk_cache *c)
{
    pthread_mutex_lock(&g_mu);
    c->refs++;
    pthread_mutex_unlock(&g_mu);
}

/* The open object with this hash (and key, when given), or NULL. Under c->mu. */
static stk_cache_object *table_find(stk_cache *c, const uint8_t hash[16], const char *key,
                                    size_t key_len)
{
    for (stk_cache_object *o = c->table[hash_bucket(hash, c->table_cap)]; o; o = o->next)
        if (!memcmp(o->hash, hash, 16) &&
            (!key || (o->key_len == key_len && !memcmp(o->key, key, key_len))))
            return o;
    return NULL;
}

/* Under c->mu. Growing may fail (ENOMEM): the table then stays as it is,
 * just longer chains. */
static void table_insert(stk_cache *c, stk_cache_object *o)
{
    if (c->table_count + 1 > c->table_cap) {
        size_t cap = c->table_cap * 2;
        stk_cache_object **t = calloc(cap, sizeof *t);
        if (t) {
            for (size_t i = 0; i < c->table_cap; i++) {
                for (stk_cache_object *p = c->table[i], *nx; p; p = nx) {
                    nx = p->next;
                    size_t b = hash_bucket(p->hash, cap);
                    p->next = t[b];
                    t[b] = p;
                }
            }
            free(c->table);
            c->table = t;
            c->table_cap = cap;
        }
    }
    size_t b = hash_bucket(o->hash, c->table_cap);
    o->next = c->table[b];
    c->table[b] = o;
    c->table_count++;
}

static void table_remove(stk_cache *c, stk_cache_object *o)
{
    for (stk_cache_object **pp = &c->table[hash_bucket(o->hash, c->table_cap)]; *pp;
         pp = &(*pp)->next) {
        if (*pp == o) {
            *pp = o->next;
            c->table_count--;
            return;
        }
    }
}

/* ------------------------------------------------------------------------- */
/* Opening an object: its two files, checked, reset or initialised            */
/* ------------------------------------------------------------------------- */

enum { HDR_MATCH, HDR_EMPTY, HDR_OTHER };

/* The header bytes this object's .map must start with (header_size bytes). */
static void header_build(const stk_cache_object *o, uint8_t *h)
{
    memset(h, 0, o->header_size);
    memcpy(h, MAP_MAGIC, 8);
    put_le32(h + 8, MAP_VERSION);
    put_le32(h + 12, o->header_size);
    put_le64(h + 16, o->size);
    put_le32(h + 24, o->chunk_size);
    put_le32(h + 28, (uint32_t)o->key_len);
    memcpy(h + MAP_FIXED_HEADER, o->key, o->key_len);
    uint32_t crc = stk_crc32c(0, h, 32);
    put_le32(h + 32, stk_crc32c(crc, o->key, o->key_len));
}

/* Compare the .map behind fd (st_size bytes) with this object. Since the
 * header holds the key, size and chunk size and a CRC over them, a byte
 * comparison with the header this object would write is the whole check.
 * HDR_* or STK_EIO. */
static int header_check(const stk_cache_object *o, int fd, uint64_t st_size)
{
    char ebuf[128];
    if (st_size == 0)
        return HDR_EMPTY;
    if (st_size < o->header_size + ENTRY_SIZE * o->nchunks)
        return HDR_OTHER;
    uint8_t *want = malloc(o->header_size), *got = malloc(o->header_size);
    int rc = HDR_OTHER;
    if (!want || !got) {
        rc = stk_fail(STK_ENOMEM, "%s: out of memory", o->map_path);
        goto out;
    }
    header_build(o, want);
    ssize_t k = stk_pread_upto(fd, got, o->header_size, 0);
    if (k < 0) {
        rc = stk_fail(STK_EIO, "%s: read failed: %s", o->map_path,
                      errtext(errno, ebuf, sizeof ebuf));
        goto out;
    }
    if ((size_t)k == o->header_size && !memcmp(want, got, o->header_size))
        rc = HDR_MATCH;
out:
    free(want);
    free(got);
    return rc;
}

static int write_fail(const char *path, int e)
{
    char ebuf[128];
    if (e == ENOSPC || e == EDQUOT)
        return stk_fail(STK_EIO,
                        "%s: cannot write: %s (the cache's file system is full: give the "
                        "cache a lower byte limit, or another cache_dir / STOKER_CACHE_DIR)",
                        path, errtext(e, ebuf, sizeof ebuf));
    return stk_fail(STK_EIO, "%s: cannot write: %s", path, errtext(e, ebuf, sizeof ebuf));
}

/* Two new files: .data sized (sparse), entries all absent, header last. */
static int object_init(stk_cache_object *o)
{
    uint8_t *h = malloc(o->header_size);
    if (!h)
        return stk_fail(STK_ENOMEM, "%s: out of memory", o->map_path);
    header_build(o, h);
    int rc = 0;
    if (ftruncate(o->data_fd, (off_t)o->size) != 0)
        rc = write_fail(o->data_path, errno);
    else if (ftruncate(o->map_fd, (off_t)(o->header_size + ENTRY_SIZE * o->nchunks)) != 0 ||
             pwrite_all(o->map_fd, h, o->header_size, 0) != 0)
        rc = write_fail(o->map_path, errno);
    free(h);
    return rc;
}

/* Open (creating, checking, resetting) the object's files into o->map_fd
 * and o->data_fd. Under cache->mu. */
static int object_files_open(stk_cache_object *o, const char *hh_dir)
{
    char ebuf[128];
    bool made_dir = false;
    int rc;
    for (int attempt = 0;; attempt++) {
        struct stat a, b;
        if (attempt == OPEN_ATTEMPTS)
            return stk_fail(STK_EIO, "%s: cannot open: the file keeps being replaced",
                            o->map_path);
        o->map_fd = open(o->map_path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (o->map_fd < 0 && errno == ENOENT && !made_dir) {
            made_dir = true;
            if (mkdir(hh_dir, 0777) != 0 && errno != EEXIST)
                return stk_fail(STK_EIO, "%s: cannot create: %s", hh_dir,
                                errtext(errno, ebuf, sizeof ebuf));
            attempt--;
            continue;
        }
        if (o->map_fd < 0)
            return stk_fail(STK_EIO, "%s: cannot open: %s", o->map_path,
                            errtext(errno, ebuf, sizeof ebuf));
        if (ofd_lock(o->map_fd, F_WRLCK, 0, 8, true) != 0) {
            rc = stk_fail(STK_EIO, "%s: cannot lock: %s", o->map_path,
                          errtext(errno, ebuf, sizeof ebuf));
            goto fail;
        }
        if (fstat(o->map_fd, &a) != 0) {
            rc = stk_fail(STK_EIO, "%s: cannot stat: %s", o->map_path,
                          errtext(errno, ebuf, sizeof ebuf));
            goto fail;
        }
        if (stat(o->map_path, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
            close(o->map_fd); /* removed or replaced before we had the lock: again */
            o->map_fd = -1;
            continue;
        }
        bool data_new = false;
        o->data_fd = open(o->data_path, O_RDWR | O_CLOEXEC);
        if (o->data_fd < 0 && errno == ENOENT) {
            data_new = true;
            o->data_fd = open(o->data_path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        }
        if (o->data_fd < 0) {
            rc = stk_fail(STK_EIO, "%s: cannot open: %s", o->data_path,
                          errtext(errno, ebuf, sizeof ebuf));
            goto fail;
        }
        int h = header_check(o, o->map_fd, (uint64_t)a.st_size);
        if (h < 0) {
            rc = h;
            goto fail;
        }
        if (h == HDR_EMPTY && data_new) {
            if ((rc = object_init(o)) < 0)
                goto fail;
        } else if (h != HDR_MATCH || data_new) {
            /* Another key with this hash, another size or chunk size, a torn
             * header, a creation that died before its header, or one file of
             * the pair missing: remove both (whoever has them open keeps its
             * inodes: nothing it trusted is truncated) and start again with
             * two new files. */
            if (unlink(o->data_path) != 0 && errno != ENOENT) {
                rc = stk_fail(STK_EIO, "%s: cannot remove: %s", o->data_path,
                              errtext(errno, ebuf, sizeof ebuf));
                goto fail;
            }
            if (unlink(o->map_path) != 0 && errno != ENOENT) {
                rc = stk_fail(STK_EIO, "%s: cannot remove: %s", o->map_path,
                              errtext(errno, ebuf, sizeof ebuf));
                goto fail;
            }
            close(o->data_fd);
            close(o->map_fd);
            o->data_fd = o->map_fd = -1;
            continue;
        }
        (void)ofd_lock(o->map_fd, F_UNLCK, 0, 8, false);
        return 0;
    fail:
        if (o->data_fd >= 0)
            close(o->data_fd);
        if (o->map_fd >= 0)
            close(o->map_fd);
        o->data_fd = o->map_fd = -1;
        return rc;
    }
}

static void object_free(stk_cache_object *o)
{
    if (!o)
        return;
    const uint8_t *m = atomic_load_explicit(&o->data_map, memory_order_acquire);
    if (m) {
        stk_map_guard_remove(o->data_guard);
        munmap((void *)m, (size_t)o->size);
    }
    if (o->data_fd >= 0)
        close(o->data_fd);
    if (o->map_fd >= 0)
        close(o->map_fd); /* releases every claim lock still held */
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    free((void *)o->state);
    free(o->claimed);
    free(o->key);
    free(o->map_path);
    free(o->data_path);
    free(o);
}

static void touch(stk_cache_object *o)
{
    int64_t now = mono_ms(), last = atomic_load_explicit(&o->touched_ms, memory_order_relaxed);
    if (now - last < TOUCH_MS)
        return;
    if (!atomic_compare_exchange_strong(&o->touched_ms, &last, now))
        return; /* another thread touches it */
    (void)futimens(o->map_fd, NULL);
}

int stk_cache_object_open(stk_cache *c, const char *key, uint64_t size, uint32_t chunk_size,
                          stk_cache_object **out)
{
    *out = NULL;
    size_t key_len = key ? strlen(key) : 0;
    if (!key || !key_len)
        return stk_fail(STK_EINVAL, "%s: cache object with an empty key", c->dir);
    if (chunk_size == 0)
        return stk_fail(STK_EINVAL, "%s: cache object with chunk size 0", key);
    if (key_len > KEY_MAX)
        return stk_fail(STK_EINVAL, "cache key of %zu bytes (at most %u): %.64s...", key_len,
                        KEY_MAX, key);
    uint64_t nchunks = size / chunk_size + (size % chunk_size != 0), map_len;
    uint32_t header_size = (uint32_t)((MAP_FIXED_HEADER + key_len + 63) / 64 * 64);
    if (size > (uint64_t)INT64_MAX || !stk_mul_ok(nchunks, ENTRY_SIZE, &map_len) ||
        !stk_add_ok(map_len, header_size, &map_len) || map_len > (uint64_t)INT64_MAX ||
        nchunks > SIZE_MAX)
        return stk_fail(STK_EINVAL, "%s: object of %llu bytes is too large to cache", key,
                        (unsigned long long)size);
    uint8_t hash[16];
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits(key, key_len));
    memcpy(hash, canon.digest, 16);

    pthread_mutex_lock(&c->mu);
    stk_cache_object *o = table_find(c, hash, key, key_len);
    if (o) {
        int rc = 0;
        if (o->size != size || o->chunk_size != chunk_size)
            rc = stk_fail(STK_EINVAL,
                          "%s: already open in the cache with %llu bytes in chunks of %u "
                          "(now %llu bytes in chunks of %u)",
                          key, (unsigned long long)o->size, o->chunk_size,
                          (unsigned long long)size, chunk_size);
        else {
            o->refs++;
            *out = o;
        }
        pthread_mutex_unlock(&c->mu);
        if (!rc)
            touch(o);
        return rc;
    }

    int rc = STK_ENOMEM;
    char hex[33], hh[3], name[40], *hh_dir = NULL;
    if (!(o = calloc(1, sizeof *o))) {
        pthread_mutex_unlock(&c->mu);
        return stk_fail(STK_ENOMEM, "%s: out of memory", key);
    }
    o->map_fd = o->data_fd = -1;
    pthread_mutex_init(&o->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&o->cv, &ca);
    pthread_condattr_destroy(&ca);
    memcpy(o->hash, hash, 16);
    o->key_len = key_len;
    o->size = size;
    o->chunk_size = chunk_size;
    o->nchunks = nchunks;
    o->header_size = header_size;
    o->refs = 1;
    atomic_init(&o->touched_ms, INT64_MIN / 2);
    hash_hex(hash, hex);
    memcpy(hh, hex, 2);
    hh[2] = '\0';
    if (!(o->key = stk_strdup(key)) || !(hh_dir = path_join(c->objects, hh)))
        goto fail;
    snprintf(name, sizeof name, "%s.map", hex);
    if (!(o->map_path = path_join(hh_dir, name)))
        goto fail;
    snprintf(name, sizeof name, "%s.data", hex);
    if (!(o->data_path = path_join(hh_dir, name)))
        goto fail;
    o->state = calloc(nchunks ? nchunks : 1, sizeof *o->state);
    o->claimed = calloc(nchunks ? nchunks : 1, 1);
    if (!o->state || !o->claimed) {
        rc = stk_fail(STK_ENOMEM, "%s: out of memory for %llu chunks", key,
                      (unsigned long long)nchunks);
        goto fail;
    }
    if ((rc = object_files_open(o, hh_dir)) < 0)
        goto fail;
    free(hh_dir);
    o->cache = c;
    cache_ref(c);
    table_insert(c, o);
    pthread_mutex_unlock(&c->mu);
    touch(o);
    *out = o;
    return 0;
fail:
    pthread_mutex_unlock(&c->mu);
    free(hh_dir);
    object_free(o);
    return rc;
}

void stk_cache_object_close(stk_cache_object *o)
{
    if (!o)
        return;
    stk_cache *c = o->cache;
    pthread_mutex_lock(&c->mu);
    bool last = --o->refs == 0;
    if (last)
        table_remove(c, o);
    pthread_mutex_unlock(&c->mu);
    if (!last)
        return;
    object_free(o);
    stk_cache_close(c);
}

int stk_cache_object_derived_path(const stk_cache_object *o, const char *suffix, char **out)
{
    char ebuf[128], hex[33];
    *out = NULL;
    char *dir = path_join(o->cache->dir, "derived");
    if (!dir)
        return STK_ENOMEM;
    int rc = 0;
    hash_hex(o->hash, hex);
    if (mkdir_p(dir) != 0)
        rc = stk_fail(STK_EIO, "%s: cannot create: %s", dir, errtext(errno, ebuf, sizeof ebuf));
    else if (asprintf(out, "%s/%s%s", dir, hex, suffix) < 0) {
        *out = NULL;
        rc = stk_fail(STK_ENOMEM, "out of memory");
    }
    free(dir);
    return rc;
}

uint64_t stk_cache_object_size(const stk_cache_object *o)
{
    return o->size;
}
uint32_t stk_cache_chunk_size(const stk_cache_object *o)
{
    return o->chunk_size;
}
uint64_t stk_cache_chunk_count(const stk_cache_object *o)
{
    return o->nchunks;
}

/* ------------------------------------------------------------------------- */
/* Chunks: entries, checks, claims                                            */
/* ------------------------------------------------------------------------- */

typedef struct entry {
    uint32_t crc;
    bool present;
} entry;

static uint64_t entry_off(const stk_cache_object *o, uint64_t k)
{
    return o->header_size + ENTRY_SIZE * k;
}

static size_t chunk_len(const stk_cache_object *o, uint64_t k)
{
    uint64_t start = k * o->chunk_size, left = o->size - start;
    return (size_t)(left < o->chunk_size ? left : o->chunk_size);
}

/* Entry k from disk: 0 (a short read is an absent entry) or STK_EIO. */
static int entry_read(const stk_cache_object *o, uint64_t k, entry *e)
{
    char ebuf[128];
    uint8_t b[ENTRY_SIZE];
    ssize_t n = stk_pread_upto(o->map_fd, b, sizeof b, entry_off(o, k));
    if (n < 0)
        return stk_fail(STK_EIO, "%s: read failed: %s", o->map_path,
                        errtext(errno, ebuf, sizeof ebuf));
    e->present = n == (ssize_t)sizeof b && b[4] == 1;
    e->crc = e->present ? get_le32(b) : 0;
    return 0;
}

static int entry_write(const stk_cache_object *o, uint64_t k, const entry *e)
{
    uint8_t b[ENTRY_SIZE] = {0};
    if (e->present) {
        put_le32(b, e->crc);
        b[4] = 1;
    }
    if (pwrite_all(o->map_fd, b, sizeof b, entry_off(o, k)) != 0)
        return write_fail(o->map_path, errno);
    return 0;
}

/* CRC-32C of .data's bytes [from, from + len), continuing `crc`, read a
 * piece at a time: 1 (in *out), 0 when the file is shorter, STK_EIO or
 * STK_ENOMEM. */
static int crc_range(const stk_cache_object *o, uint64_t from, size_t len, uint32_t crc,
                     uint32_t *out)
{
    char ebuf[128];
    size_t piece = len < VERIFY_PIECE ? len : VERIFY_PIECE;
    uint8_t *buf = malloc(piece ? piece : 1);
    if (!buf)
        return stk_fail(STK_ENOMEM, "%s: out of memory checking bytes at %llu", o->data_path,
                        (unsigned long long)from);
    int rc = 1;
    for (size_t done = 0; done < len;) {
        size_t n = len - done < piece ? len - done : piece;
        ssize_t r = stk_pread_upto(o->data_fd, buf, n, from + done);
        if (r < 0) {
            rc = stk_fail(STK_EIO, "%s: read failed: %s", o->data_path,
                          errtext(errno, ebuf, sizeof ebuf));
            break;
        }
        if ((size_t)r < n) { /* the file is shorter than the entry says */
            rc = 0;
            break;
        }
        crc = stk_crc32c(crc, buf, n);
        done += n;
    }
    free(buf);
    *out = crc;
    return rc;
}

/* Do chunk k's bytes in .data have CRC `crc`? 1 yes, 0 no, STK_EIO/ENOMEM. */
static int chunk_verify(const stk_cache_object *o, uint64_t k, uint32_t crc)
{
    uint32_t got;
    int rc = crc_range(o, k * o->chunk_size, chunk_len(o, k), 0, &got);
    return rc == 1 ? got == crc : rc;
}

/* Chunk k found bad (entry present, bytes not matching): counted once. */
static void mark_bad(stk_cache_object *o, uint64_t k)
{
    uint8_t want = ST_UNKNOWN;
    if (atomic_compare_exchange_strong(&o->state[k], &want, ST_BAD))
        atomic_fetch_add_explicit(&g_bad_chunks, 1, memory_order_relaxed);
}

/* Is chunk k present? 1 (and PRESENT from now on), 0, or a negative code. */
static int check_present(stk_cache_object *o, uint64_t k)
{
    uint8_t s = atomic_load_explicit(&o->state[k], memory_order_acquire);
    if (s == ST_PRESENT)
        return 1;
    if (s == ST_BAD)
        return 0;
    entry e, again;
    int rc;
    for (int tries = 0; tries < 2; tries++) {
        if ((rc = entry_read(o, k, &e)) < 0)
            return rc;
        if (!e.present)
            return 0;
        if ((rc = chunk_verify(o, k, e.crc)) < 0)
            return rc;
        if (rc == 1) {
            atomic_store_explicit(&o->state[k], ST_PRESENT, memory_order_release);
            return 1;
        }
        /* A mismatch: unless the entry changed while we read (a torn
         * read of it), the chunk is bad. */
        if ((rc = entry_read(o, k, &again)) < 0)
            return rc;
        if (again.present == e.present && again.crc == e.crc)
            break;
    }
    mark_bad(o, k);
    return 0;
}

bool stk_cache_has(stk_cache_object *o, uint64_t chunk)
{
    return chunk < o->nchunks && check_present(o, chunk) == 1;
}

/* Give up this process's claim of chunk k (if it has one) and wake the
 * waiters. */
static void claim_release(stk_cache_object *o, uint64_t k)
{
    pthread_mutex_lock(&o->mu);
    if (o->claimed[k]) {
        (void)ofd_lock(o->map_fd, F_UNLCK, entry_off(o, k), ENTRY_SIZE, false);
        o->claimed[k] = 0;
        pthread_cond_broadcast(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
}

int stk_cache_claim(stk_cache_object *o, uint64_t chunk)
{
    char ebuf[128];
    int rc;
    if (chunk >= o->nchunks)
        return stk_fail(STK_EINVAL, "%s: chunk %llu of %llu", o->key, (unsigned long long)chunk,
                        (unsigned long long)o->nchunks);
    if ((rc = check_present(o, chunk)) != 0)
        return rc < 0 ? rc : STK_CACHE_PRESENT;
    pthread_mutex_lock(&o->mu);
    if (o->claimed[chunk]) {
        pthread_mutex_unlock(&o->mu);
        return STK_CACHE_BUSY;
    }
    if (ofd_lock(o->map_fd, F_WRLCK, entry_off(o, chunk), ENTRY_SIZE, false) != 0) {
        int e = errno;
        pthread_mutex_unlock(&o->mu);
        if (lock_busy(e))
            return STK_CACHE_BUSY;
        return stk_fail(STK_EIO, "%s: cannot lock: %s", o->map_path, errtext(e, ebuf, sizeof ebuf));
    }
    o->claimed[chunk] = 1;
    pthread_mutex_unlock(&o->mu);

    /* Ours. It may have been filled since we looked, or be a bad chunk. */
    entry e;
    if ((rc = entry_read(o, chunk, &e)) < 0)
        goto fail;
    if (e.present) {
        if ((rc = chunk_verify(o, chunk, e.crc)) < 0)
            goto fail;
        if (rc == 1) {
            atomic_store_explicit(&o->state[chunk], ST_PRESENT, memory_order_release);
            claim_release(o, chunk);
            return STK_CACHE_PRESENT;
        }
        /* Bad: cleared on disk, so that a crash before the new fill
         * leaves it absent rather than present with the wrong bytes. */
        mark_bad(o, chunk);
        entry none = {0, false};
        if ((rc = entry_write(o, chunk, &none)) < 0)
            goto fail;
        atomic_store_explicit(&o->state[chunk], ST_UNKNOWN, memory_order_release);
    }
    return STK_CACHE_MINE;
fail:
    claim_release(o, chunk);
    return rc;
}

void stk_cache_abandon(stk_cache_object *o, uint64_t chunk)
{
    if (chunk < o->nchunks)
        claim_release(o, chunk);
}

/* ------------------------------------------------------------------------- */
/* Eviction                                                                   */
/* ------------------------------------------------------------------------- */

typedef struct evict_item {
    char hex[33];
    struct timespec mtime; /* of .map (0 when missing: an orphan goes first) */
    uint64_t bytes;        /* allocated bytes of .data */
} evict_item;

static int item_cmp(const void *pa, const void *pb)
{
    const evict_item *a = pa, *b = pb;
    if (a->mtime.tv_sec != b->mtime.tv_sec)
        return a->mtime.tv_sec < b->mtime.tv_sec ? -1 : 1;
    if (a->mtime.tv_nsec != b->mtime.tv_nsec)
        return a->mtime.tv_nsec < b->mtime.tv_nsec ? -1 : 1;
    return strcmp(a->hex, b->hex);
}

/* Every .data file under DIR/objects: its bytes and its .map's mtime.
 * Unreadable entries are left out (eviction is best effort). */
static int scan(const stk_cache *c, evict_item **items_out, size_t *n_out, uint64_t *total_out)
{
    evict_item *items = NULL;
    size_t n = 0, cap = 0;
    uint64_t total = 0;
    DIR *top = opendir(c->objects);
    if (!top)
        return -1;
    struct dirent *d;
    while ((d = readdir(top))) {
        if (strlen(d->d_name) != 2 || hex_value(d->d_name[0]) < 0 ||
            hex_value(d->d_name[1]) < 0)
            continue;
        int sfd = openat(dirfd(top), d->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (sfd < 0)
            continue;
        DIR *sub = fdopendir(sfd);
        if (!sub) {
            close(sfd);
            continue;
        }
        struct dirent *f;
        while ((f = readdir(sub))) {
            uint8_t h[16];
            size_t len = strlen(f->d_name);
            if (len != 37 || strcmp(f->d_name + 32, ".data") != 0 || !hex_parse(f->d_name, h))
                continue;
            struct stat st, mt;
            if (fstatat(sfd, f->d_name, &st, 0) != 0)
                continue;
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 256;
                evict_item *t = realloc(items, ncap * sizeof *t);
                if (!t)
                    break;
                items = t;
                cap = ncap;
            }
            evict_item *it = &items[n++];
            memcpy(it->hex, f->d_name, 32);
            it->hex[32] = '\0';
            it->bytes = (uint64_t)st.st_blocks * 512;
            char mname[40];
            snprintf(mname, sizeof mname, "%s.map", it->hex);
            if (fstatat(sfd, mname, &mt, 0) == 0)
                it->mtime = mt.st_mtim;
            else
                it->mtime = (struct timespec){0, 0};
            total += it->bytes;
        }
        closedir(sub);
    }
    closedir(top);
    if (n)
        qsort(items, n, sizeof *items, item_cmp);
    *items_out = items;
    *n_out = n;
    *total_out = total;
    return 0;
}

/* Remove one object's files unless another descriptor holds its header
 * lock: true when removed, with the bytes freed in *freed. Under c->mu,
 * and the caller has checked the object is not open in this process. */
static bool evict_one(const stk_cache *c, const evict_item *it, uint64_t *freed_out)
{
    bool removed = false;
    char map[64], data[64], *mp, *dp;
    snprintf(map, sizeof map, "%.2s/%s.map", it->hex, it->hex);
    snprintf(data, sizeof data, "%.2s/%s.data", it->hex, it->hex);
    if (!(mp = path_join(c->objects, map)) || !(dp = path_join(c->objects, data))) {
        free(mp);
        return 0;
    }
    uint64_t freed = 0;
    struct stat a, b, ds;
    /* O_CREAT: an orphaned .data (its .map gone in a crash) is removed
     * under the lock of a fresh .map like any other object. */
    int fd = open(mp, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        goto out;
    if (ofd_lock(fd, F_WRLCK, 0, 8, false) != 0 || fstat(fd, &a) != 0 || stat(mp, &b) != 0 ||
        a.st_dev != b.st_dev || a.st_ino != b.st_ino)
        goto out;
    if (stat(dp, &ds) == 0)
        freed = (uint64_t)ds.st_blocks * 512;
    if (unlink(dp) != 0 && errno != ENOENT) {
        freed = 0;
        goto out;
    }
    (void)unlink(mp);
    removed = true;
    atomic_fetch_add_explicit(&g_evicted_bytes, freed, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_evicted_objects, 1, memory_order_relaxed);
out:
    if (fd >= 0)
        close(fd);
    free(mp);
    free(dp);
    *freed_out = freed;
    return removed;
}

/* Under DIR/lock (flock: one evicting process at a time): scan, and when
 * the objects' bytes exceed `trigger`, remove least-recently-used objects
 * (those open in this process, or being opened by another, are skipped)
 * until at most `target` remain. *left: the bytes left; *objects_left,
 * *removed_objects, *removed_bytes (each may be NULL). STK_EIO when the
 * directory cannot be locked or read. */
static int evict_down(stk_cache *c, uint64_t trigger, uint64_t target, uint64_t *left,
                      uint64_t *objects_left, uint64_t *removed_objects, uint64_t *removed_bytes)
{
    char ebuf[128];
    uint64_t total = 0, nrem = 0, brem = 0;
    evict_item *items = NULL;
    size_t n = 0;
    int lfd = open(c->lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (lfd < 0)
        return stk_fail(STK_EIO, "%s: cannot open: %s", c->lock_path,
                        errtext(errno, ebuf, sizeof ebuf));
    while (flock(lfd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            int e = errno;
            close(lfd);
            return stk_fail(STK_EIO, "%s: cannot lock: %s", c->lock_path,
                            errtext(e, ebuf, sizeof ebuf));
        }
    }
    if (scan(c, &items, &n, &total) != 0) {
        int e = errno;
        close(lfd);
        return stk_fail(STK_EIO, "%s: cannot read: %s", c->objects, errtext(e, ebuf, sizeof ebuf));
    }
    /* Over the trigger: oldest first, down to the target. */
    bool over = total > trigger;
    for (size_t i = 0; over && i < n && total > target; i++) {
        uint8_t h[16];
        if (!hex_parse(items[i].hex, h))
            continue;
        uint64_t freed = 0;
        pthread_mutex_lock(&c->mu);
        bool gone = !table_find(c, h, NULL, 0) && evict_one(c, &items[i], &freed);
        pthread_mutex_unlock(&c->mu);
        if (gone) {
            nrem++;
            brem += freed;
        }
        total -= freed < total ? freed : total;
    }
    free(items);
    close(lfd); /* drops the flock */
    if (left)
        *left = total;
    if (objects_left)
        *objects_left = n - nrem;
    if (removed_objects)
        *removed_objects = nrem;
    if (removed_bytes)
        *removed_bytes = brem;
    return 0;
}

/* One pass: scan, and evict down to 90% of the limit when over it. */
static void evict_pass(stk_cache *c)
{
    uint64_t limit = atomic_load(&c->limit), total = 0;
    char keep[STK_ERRMSG_MAX];
    snprintf(keep, sizeof keep, "%s", stk_errmsg());
    if (evict_down(c, limit ? limit : UINT64_MAX, limit - limit / 10, &total, NULL, NULL, NULL) < 0) {
        stk_errmsg_set(keep); /* best effort: the fill that called it succeeded */
        return;
    }
    int64_t now = mono_ms();
    atomic_store(&c->est_bytes, total);
    atomic_store(&c->scanned_ms, now);
    atomic_store(&c->retry_ms, limit && total > limit ? now + 1000 : INT64_MIN);
}

int stk_cache_usage_scan(stk_cache *c, uint64_t *objects, uint64_t *bytes)
{
    return evict_down(c, UINT64_MAX, UINT64_MAX, bytes, objects, NULL, NULL);
}

int stk_cache_trim(stk_cache *c, uint64_t keep_bytes, uint64_t *removed_objects,
                   uint64_t *removed_bytes, uint64_t *left_objects, uint64_t *left_bytes)
{
    return evict_down(c, keep_bytes, keep_bytes, left_bytes, left_objects, removed_objects,
                      removed_bytes);
}

/* After a fill of n bytes: evict when the estimate is over the limit, or
 * rescan when the last scan is old (other processes fill too). */
static void maybe_evict(stk_cache *c, uint64_t n)
{
    uint64_t limit = atomic_load_explicit(&c->limit, memory_order_relaxed);
    if (!limit)
        return;
    uint64_t est = atomic_fetch_add(&c->est_bytes, n) + n;
    int64_t now = mono_ms(), scanned = atomic_load(&c->scanned_ms);
    if (est <= limit && scanned != INT64_MIN && now - scanned < RESCAN_MS)
        return;
    if (now < atomic_load(&c->retry_ms))
        return;
    if (pthread_mutex_trylock(&c->evict_mu) != 0)
        return; /* another thread of this process is at it */
    evict_pass(c);
    pthread_mutex_unlock(&c->evict_mu);
}

/* ------------------------------------------------------------------------- */
/* Fill, read, wait                                                           */
/* ------------------------------------------------------------------------- */

int stk_cache_fill(stk_cache_object *o, uint64_t chunk, const void *data, size_t n)
{
    int rc;
    if (chunk >= o->nchunks)
        return stk_fail(STK_EINVAL, "%s: chunk %llu of %llu", o->key, (unsigned long long)chunk,
                        (unsigned long long)o->nchunks);
    pthread_mutex_lock(&o->mu);
    bool mine = o->claimed[chunk];
    pthread_mutex_unlock(&o->mu);
    if (!mine)
        return stk_fail(STK_EINVAL, "%s: chunk %llu filled without being claimed", o->key,
                        (unsigned long long)chunk);
    size_t want = chunk_len(o, chunk);
    if (n != want) {
        rc = stk_fail(STK_EINVAL, "%s: chunk %llu is %zu bytes, not %zu", o->key,
                      (unsigned long long)chunk, want, n);
        goto out;
    }
    if (pwrite_all(o->data_fd, data, n, chunk * o->chunk_size) != 0) {
        rc = write_fail(o->data_path, errno);
        goto out;
    }
    entry e = {stk_crc32c(0, data, n), true};
    if ((rc = entry_write(o, chunk, &e)) < 0)
        goto out;
    atomic_store_explicit(&o->state[chunk], ST_PRESENT, memory_order_release);
    atomic_fetch_add_explicit(&g_filled_bytes, n, memory_order_relaxed);
    rc = 0;
out:
    claim_release(o, chunk);
    if (rc == 0) {
        touch(o);
        maybe_evict(o->cache, n);
    }
    return rc;
}

/* All n bytes of .data at off: 0 or STK_EIO (the file's name and why). */
static int data_read(const stk_cache_object *o, void *buf, size_t n, uint64_t off)
{
    char ebuf[128];
    ssize_t got = stk_pread_upto(o->data_fd, buf, n, off);
    if (got < 0)
        return stk_fail(STK_EIO, "%s: read failed: %s", o->data_path,
                        errtext(errno, ebuf, sizeof ebuf));
    if ((size_t)got < n)
        return stk_fail(STK_EIO, "%s: read failed: unexpected end of file", o->data_path);
    return 0;
}

/* The first half of a chunk's first look in this process (a read's or a
 * view's): 1 when it is PRESENT already (nothing to check), 0 with its
 * entry in *e when its bytes are to be checked against e->crc, STK_ENOENT
 * when it is not there (BAD, or its entry absent), or STK_EIO. */
static int first_look(stk_cache_object *o, uint64_t k, entry *e)
{
    uint8_t st = atomic_load_explicit(&o->state[k], memory_order_acquire);
    if (st == ST_PRESENT)
        return 1;
    if (st == ST_BAD)
        return STK_ENOENT;
    int rc = entry_read(o, k, e);
    if (rc < 0)
        return rc;
    return e->present ? 0 : STK_ENOENT;
}

/* The second half: the bytes the caller checked matched the entry's CRC
 * (PRESENT from now on: 0), or did not, and then the chunk is decided from
 * disk, since a torn read of the entry or a fill that finished in between
 * is not damage: 0 (present after all: bytes the caller copied before are
 * to be read again), STK_ENOENT (absent or bad), STK_EIO. */
static int settle(stk_cache_object *o, uint64_t k, bool matched)
{
    if (matched) {
        atomic_store_explicit(&o->state[k], ST_PRESENT, memory_order_release);
        return 0;
    }
    int rc = check_present(o, k);
    return rc < 0 ? rc : rc == 0 ? STK_ENOENT : 0;
}

/* Chunks a read checks on its own bytes at most (more: checked apart). */
#define READ_CHECK_MAX 16

/* stk_cache_read of chunks [k0, k1] when some are not yet checked in this
 * process: the check rides on the read (verify on read). The entries of
 * the unchecked chunks are read first (absent: STK_ENOENT), then the bytes
 * into `buf`, and each unchecked chunk's CRC is taken over the part of it
 * in `buf` plus the parts outside the read (the first chunk's head, the
 * last one's tail) read from .data. So a chunk's first read in a process
 * costs one read of its bytes, not two (the separate check, then the
 * read). A chunk that does not match is re-checked from disk as
 * check_present does (a torn read of its entry, or a fill that finished
 * in between, is not damage); then the bytes are read again. */
static int read_checking(stk_cache_object *o, uint8_t *buf, size_t n, uint64_t off, uint64_t k0,
                         uint64_t k1)
{
    char ebuf[128];
    uint64_t end = off + n, cs = o->chunk_size;
    entry e[READ_CHECK_MAX];
    bool check[READ_CHECK_MAX];
    int rc;
    for (uint64_t k = k0; k <= k1; k++) {
        if ((rc = first_look(o, k, &e[k - k0])) < 0)
            return rc;
        check[k - k0] = rc == 0;
    }
    ssize_t got = stk_pread_upto(o->data_fd, buf, n, off);
    if (got < 0)
        return stk_fail(STK_EIO, "%s: read failed: %s", o->data_path,
                        errtext(errno, ebuf, sizeof ebuf));
    bool again = (size_t)got < n;
    for (uint64_t k = k0; k <= k1; k++) {
        if (!check[k - k0])
            continue;
        uint64_t c0 = k * cs, c1 = c0 + chunk_len(o, k);
        uint64_t m0 = c0 > off ? c0 : off, m1 = c1 < end ? c1 : end; /* the part in buf */
        uint32_t crc = 0;
        rc = 1;
        if (c0 < m0)
            rc = crc_range(o, c0, (size_t)(m0 - c0), crc, &crc);
        if (rc == 1 && !again)
            crc = stk_crc32c(crc, buf + (m0 - off), (size_t)(m1 - m0));
        if (rc == 1 && m1 < c1)
            rc = crc_range(o, m1, (size_t)(c1 - m1), crc, &crc);
        if (rc < 0)
            return rc;
        bool matched = rc == 1 && !again && crc == e[k - k0].crc;
        if ((rc = settle(o, k, matched)) < 0)
            return rc;
        again = again || !matched; /* present after all: buf's bytes are read again */
    }
    return again ? data_read(o, buf, n, off) : 0;
}

int stk_cache_read(stk_cache_object *o, void *buf, size_t n, uint64_t off)
{
    uint64_t end;
    if (!stk_add_ok(off, n, &end) || end > o->size)
        return stk_fail(STK_EINVAL, "%s: read of %zu bytes at %llu past the end (%llu bytes)",
                        o->key, n, (unsigned long long)off, (unsigned long long)o->size);
    if (n == 0)
        return 0;
    uint64_t k0 = off / o->chunk_size, k1 = (end - 1) / o->chunk_size;
    bool checked = true;
    for (uint64_t k = k0; k <= k1 && checked; k++)
        checked = atomic_load_explicit(&o->state[k], memory_order_acquire) == ST_PRESENT;
    int rc;
    if (!checked && k1 - k0 < READ_CHECK_MAX) {
        if ((rc = read_checking(o, buf, n, off, k0, k1)) < 0)
            return rc;
    } else {
        for (uint64_t k = k0; k <= k1 && !checked; k++) {
            if ((rc = check_present(o, k)) < 0)
                return rc;
            if (rc == 0)
                return STK_ENOENT;
        }
        if ((rc = data_read(o, buf, n, off)) < 0)
            return rc;
    }
    atomic_fetch_add_explicit(&g_hit_bytes, n, memory_order_relaxed);
    touch(o);
    return 0;
}

/* .data mapped (once per object): 0 with *base, or STK_EIO / STK_ENOMEM. */
static int data_map_get(stk_cache_object *o, const uint8_t **base)
{
    char ebuf[128];
    const uint8_t *m = atomic_load_explicit(&o->data_map, memory_order_acquire);
    if (m) {
        *base = m;
        return 0;
    }
    int rc = 0;
    pthread_mutex_lock(&o->mu);
    m = atomic_load_explicit(&o->data_map, memory_order_relaxed);
    if (!m) {
        void *p = mmap(NULL, (size_t)o->size, PROT_READ, MAP_SHARED, o->data_fd, 0);
        if (p == MAP_FAILED) {
            rc = stk_fail(STK_EIO, "%s: mmap failed: %s", o->data_path,
                          errtext(errno, ebuf, sizeof ebuf));
        } else if ((rc = stk_map_guard_add(p, (size_t)o->size, o->data_fd, &o->data_guard)) < 0) {
            munmap(p, (size_t)o->size);
        } else {
            m = p;
            atomic_store_explicit(&o->data_map, m, memory_order_release);
        }
    }
    pthread_mutex_unlock(&o->mu);
    *base = m;
    return rc;
}

int stk_cache_view(stk_cache_object *o, uint64_t off, size_t n, const uint8_t **p)
{
    static const uint8_t nothing[1];
    uint64_t end;
    if (!stk_add_ok(off, n, &end) || end > o->size)
        return stk_fail(STK_EINVAL, "%s: view of %zu bytes at %llu past the end (%llu bytes)",
                        o->key, n, (unsigned long long)off, (unsigned long long)o->size);
    if (n == 0) {
        *p = nothing;
        return 0;
    }
    const uint8_t *base;
    int rc = data_map_get(o, &base);
    if (rc < 0)
        return rc;
    uint64_t k0 = off / o->chunk_size, k1 = (end - 1) / o->chunk_size;
    for (uint64_t k = k0; k <= k1; k++) {
        entry e;
        if ((rc = first_look(o, k, &e)) < 0)
            return rc;
        if (rc == 1)
            continue;
        /* The chunk's first look in this process: its CRC over the mapped
         * bytes (no copy), which also maps their pages for the reader. */
        uint64_t c0 = k * o->chunk_size;
        size_t len = chunk_len(o, k);
        bool matched = stk_crc32c(0, base + c0, len) == e.crc &&
                       stk_map_guard_intact(o->data_guard, c0, len);
        if ((rc = settle(o, k, matched)) < 0)
            return rc;
    }
    atomic_fetch_add_explicit(&g_hit_bytes, n, memory_order_relaxed);
    touch(o);
    *p = base + off;
    return 0;
}

/* Block until no other descriptor holds chunk k's claim lock, or until
 * deadline (monotonic ms; < 0: none). 0, STK_ETIMEDOUT, STK_EIO. */
static int wait_other(stk_cache_object *o, uint64_t k, int64_t deadline)
{
    char ebuf[128], self[64];
    /* A descriptor of our own on the same inode (even if unlinked since):
     * its read lock conflicts with any claim, ours included. */
    snprintf(self, sizeof self, "/proc/self/fd/%d", o->map_fd);
    int fd = open(self, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        fd = open(o->map_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return stk_fail(STK_EIO, "%s: cannot open: %s", o->map_path,
                        errtext(errno, ebuf, sizeof ebuf));
    int rc = 0;
    if (deadline < 0) {
        if (ofd_lock(fd, F_RDLCK, entry_off(o, k), ENTRY_SIZE, true) != 0)
            rc = stk_fail(STK_EIO, "%s: cannot lock: %s", o->map_path,
                          errtext(errno, ebuf, sizeof ebuf));
    } else {
        int64_t step = 1;
        while (ofd_lock(fd, F_RDLCK, entry_off(o, k), ENTRY_SIZE, false) != 0) {
            if (!lock_busy(errno)) {
                rc = stk_fail(STK_EIO, "%s: cannot lock: %s", o->map_path,
                              errtext(errno, ebuf, sizeof ebuf));
                break;
            }
            int64_t now = mono_ms();
            if (now >= deadline) {
                rc = STK_ETIMEDOUT;
                break;
            }
            int64_t nap = step < deadline - now ? step : deadline - now;
            struct timespec ts = {(time_t)(nap / 1000), (long)(nap % 1000) * 1000000};
            nanosleep(&ts, NULL);
            step = step * 2 > 20 ? 20 : step * 2;
        }
    }
    close(fd); /* drops the read lock */
    return rc;
}

int stk_cache_wait(stk_cache_object *o, uint64_t chunk, int timeout_ms)
{
    int rc;
    if (chunk >= o->nchunks)
        return stk_fail(STK_EINVAL, "%s: chunk %llu of %llu", o->key, (unsigned long long)chunk,
                        (unsigned long long)o->nchunks);
    int64_t deadline = timeout_ms < 0 ? -1 : mono_ms() + timeout_ms;
    struct timespec abs = {0, 0};
    if (deadline >= 0) {
        clock_gettime(CLOCK_MONOTONIC, &abs);
        abs.tv_sec += timeout_ms / 1000;
        abs.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
        if (abs.tv_nsec >= 1000000000) {
            abs.tv_sec++;
            abs.tv_nsec -= 1000000000;
        }
    }
    for (;;) {
        if ((rc = check_present(o, chunk)) != 0)
            return rc < 0 ? rc : STK_CACHE_PRESENT;
        /* A thread of this process has it: its fill or abandon wakes us. */
        pthread_mutex_lock(&o->mu);
        while (o->claimed[chunk]) {
            int w = deadline < 0 ? pthread_cond_wait(&o->cv, &o->mu)
                                 : pthread_cond_timedwait(&o->cv, &o->mu, &abs);
            if (w == ETIMEDOUT && o->claimed[chunk]) {
                pthread_mutex_unlock(&o->mu);
                goto timeout;
            }
        }
        pthread_mutex_unlock(&o->mu);
        if ((rc = check_present(o, chunk)) != 0)
            return rc < 0 ? rc : STK_CACHE_PRESENT;
        /* Another process may have it: its lock goes when it is done. */
        if ((rc = wait_other(o, chunk, deadline)) == STK_ETIMEDOUT)
            goto timeout;
        if (rc < 0)
            return rc;
        if ((rc = check_present(o, chunk)) != 0)
            return rc < 0 ? rc : STK_CACHE_PRESENT;
        pthread_mutex_lock(&o->mu);
        bool again = o->claimed[chunk]; /* a thread here claimed it meanwhile */
        pthread_mutex_unlock(&o->mu);
        if (!again)
            return STK_CACHE_ABSENT;
    }
timeout:
    return stk_fail(STK_ETIMEDOUT, "%s: chunk %llu still being downloaded after %d ms", o->key,
                    (unsigned long long)chunk, timeout_ms);
}
