/*
 * remote.c — remote objects as byte sources: chunks, the cache, read-ahead.
 *
 * A remote source (remote_source) is an object of known size and identity
 * (its ETag, or its size and Last-Modified) read in aligned chunks of
 * cfg.chunk_size bytes. Every byte a reader gets has been through the cache
 * (cache.h): a read claims the chunks it covers, fetches those it claimed
 * (runs of consecutive chunks as one range GET), waits for those another
 * thread or process is fetching, and then reads the cache: a copy
 * (pread), or in place (view: a pointer into the cache's mapping of the
 * object, which the .stk reader and the record table of TFRecord, tar and
 * RecordIO take). So a chunk is downloaded once per machine however many
 * threads, workers and ranks want it, and a warm epoch never touches the
 * network.
 *
 * Read-ahead. STK_ADVISE_WILLNEED on a range claims its missing chunks and
 * fetches them in the background: each fetch is a detached request whose
 * `done` callback (on the HTTP engine's I/O thread) writes the chunks into
 * the cache, or abandons them on failure so that a reader claims and
 * fetches them itself — and reports the error, naming the URL, if it
 * persists. Background fetches hold at most cfg.readahead bytes in flight
 * (process-wide); hints past that wait in a FIFO (`ra.queue`) that each
 * completion drains. A hint is only a hint: a failure costs nothing but
 * the time it took.
 *
 * Lifetime. A source is reference-counted: its owner holds one reference,
 * each background fetch another. Closing it cancels its transfers (as
 * STK_ADVISE_CANCEL does) and drops the owner's reference; the last fetch
 * to finish frees it. STK_ADVISE_CANCEL makes every later read fail with
 * STK_EINTR and wakes waiting ones (they poll the flag between bounded
 * waits), so a loader can stop promptly even when a server stalls.
 *
 * Object identity (`info`): a listing (S3 ListObjectsV2) or a batch of
 * HEADs (brace patterns) learns each object's size and ETag once; open
 * takes them from this process-wide table instead of asking again. The
 * cache key is "URL#ETAG#SIZE" (or "URL#LAST-MODIFIED#SIZE"), so an object
 * replaced on the server is a new cache entry, never a mix of old and new
 * chunks. Every range answer is compared with that identity by the engine
 * (desc.expect_*: the Content-Range total, the ETag, else Last-Modified):
 * one from another version fails the read with STK_EFORMAT ("the object
 * changed while being read", naming the URL), its bytes never cached. The
 * readers pass that code on as it is (a remote source's size is fixed:
 * source.h, `fixed`), so the loader stops, rather than skipping the rest
 * of the object as damaged records.
 *
 * The cache as a whole (stk_remote_cache_info_get, stk_remote_cache_trim,
 * stk_remote_prefetch: `stoker cache`) works on the configured cache;
 * prefetch hints every object of a dataset to the read-ahead, then waits
 * for each a piece at a time. stk_remote_derived_path names a local file
 * a reader derives from an object (the TFRecord offset cache) by the
 * object's cache key.
 *
 * Locking: cfg.mu guards the settings and the cache handle; info.mu the
 * identity table; ra.mu the read-ahead queue and budget; each source's
 * `mu` its list of transfers in flight. No lock is held while waiting for
 * the network or the cache.
 */
#include "io/remote.h"

#include "core/error.h"
#include "core/util.h"
#include "io/cache.h"
#include "io/http.h"
#include "io/s3.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Settings                                                                  */
/* ------------------------------------------------------------------------ */

#define DEFAULT_CHUNK ((uint32_t)64 << 10)
#define DEFAULT_READAHEAD ((uint64_t)64 << 20)
#define MAX_RUN_BYTES ((uint64_t)16 << 20) /* one request fetches at most this */
#define WAIT_SLICE_MS 100                  /* waits poll the cancel flag this often */

static struct {
    pthread_mutex_t mu;
    bool loaded;
    char dir[4096];
    uint64_t limit;
    uint32_t chunk;
    uint64_t readahead;
    stk_cache *cache; /* opened on first use */
} cfg = {.mu = PTHREAD_MUTEX_INITIALIZER};

static struct {
    _Atomic uint64_t bytes_fetched, reads, reads_waited, wait_ns, prefetch_bytes;
} rstats;

/* "123", "64M", "1.5G" → bytes; false when it does not parse. */
static bool parse_bytes(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return false;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mul = 1024.0; end++; break;
    case 'M': mul = 1048576.0; end++; break;
    case 'G': mul = 1073741824.0; end++; break;
    case 'T': mul = 1099511627776.0; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B')
        end++;
    if (*end == 'B')
        end++;
    if (*end || v * mul > 1.8e19)
        return false;
    *out = (uint64_t)(v * mul);
    return true;
}

/* Load the settings from the environment once (cfg.mu held). */
static void settings_load_locked(void)
{
    if (cfg.loaded)
        return;
    cfg.loaded = true;
    const char *d = getenv("STOKER_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"),
               *h = getenv("HOME");
    if (d && *d)
        snprintf(cfg.dir, sizeof cfg.dir, "%s", d);
    else if (x && *x)
        snprintf(cfg.dir, sizeof cfg.dir, "%s/stoker", x);
    else if (h && *h)
        snprintf(cfg.dir, sizeof cfg.dir, "%s/.cache/stoker", h);
    else
        snprintf(cfg.dir, sizeof cfg.dir, "/tmp/stoker-cache-%u", (unsigned)getuid());
    const char *l = getenv("STOKER_CACHE_LIMIT");
    if (!(l && *l && parse_bytes(l, &cfg.limit)))
        cfg.limit = 0;
    uint64_t v;
    const char *c = getenv("STOKER_CHUNK_SIZE");
    cfg.chunk = c && *c && parse_bytes(c, &v) && v >= 4096 && v <= ((uint64_t)1 << 30)
                    ? (uint32_t)v : DEFAULT_CHUNK;
    const char *r = getenv("STOKER_READAHEAD");
    cfg.readahead = r && *r && parse_bytes(r, &v) ? v : DEFAULT_READAHEAD;
}

STK_API int stk_remote_configure(const char *cache_dir, uint64_t cache_limit)
{
    pthread_mutex_lock(&cfg.mu);
    settings_load_locked();
    if (cache_dir && strlen(cache_dir) >= sizeof cfg.dir) {
        pthread_mutex_unlock(&cfg.mu);
        return stk_fail(STK_EINVAL, "cache_dir: longer than %zu bytes", sizeof cfg.dir - 1);
    }
    if (cache_dir && *cache_dir && strcmp(cache_dir, cfg.dir) != 0) {
        snprintf(cfg.dir, sizeof cfg.dir, "%s", cache_dir);
        /* Sources already open keep the cache they opened (refcounted). */
        stk_cache_close(cfg.cache);
        cfg.cache = NULL;
    }
    if (cache_limit != UINT64_MAX && cache_limit != cfg.limit) {
        cfg.limit = cache_limit;
        stk_cache_close(cfg.cache);
        cfg.cache = NULL;
    }
    pthread_mutex_unlock(&cfg.mu);
    return 0;
}

/* The cache (a new reference) and the chunk size. */
static int settings_cache(stk_cache **cache, uint32_t *chunk)
{
    pthread_mutex_lock(&cfg.mu);
    settings_load_locked();
    int rc = 0;
    if (!cfg.cache)
        rc = stk_cache_open(cfg.dir, cfg.limit, &cfg.cache);
    if (rc == 0) /* one more reference for the caller */
        rc = stk_cache_open(cfg.dir, cfg.limit, cache);
    *chunk = cfg.chunk;
    pthread_mutex_unlock(&cfg.mu);
    return rc;
}

static uint64_t settings_readahead(void)
{
    pthread_mutex_lock(&cfg.mu);
    settings_load_locked();
    uint64_t r = cfg.readahead;
    pthread_mutex_unlock(&cfg.mu);
    return r;
}

/* ------------------------------------------------------------------------ */
/* URLs                                                                      */
/* ------------------------------------------------------------------------ */

bool stk_is_remote(const char *path)
{
    return path && (strncmp(path, "http://", 7) == 0 || strncmp(path, "https://", 8) == 0 ||
                    strncmp(path, "s3://", 5) == 0);
}

static bool is_s3(const char *url) { return strncmp(url, "s3://", 5) == 0; }

/* How to reach `url`: the HTTP URL of the object and its signer. */
typedef struct target {
    char *http_url;        /* owned */
    stk_http_sign_fn sign; /* NULL: unsigned */
    void *sign_ctx;        /* process-wide (the S3 configuration) */
} target;

/* The S3 configuration, from the environment once (AWS_*: s3.h). */
static struct {
    pthread_once_t once;
    stk_s3_config cfg;
    int rc;
    char msg[STK_ERRMSG_MAX];
} s3 = {.once = PTHREAD_ONCE_INIT};

static void s3_load(void)
{
    s3.rc = stk_s3_config_from_env(&s3.cfg);
    if (s3.rc < 0)
        snprintf(s3.msg, sizeof s3.msg, "%s", stk_errmsg());
}

static int s3_config(const stk_s3_config **out)
{
    pthread_once(&s3.once, s3_load);
    if (s3.rc < 0)
        return stk_fail(s3.rc, "%s", s3.msg);
    *out = &s3.cfg;
    return 0;
}

static int target_of(const char *url, target *t)
{
    memset(t, 0, sizeof *t);
    if (!is_s3(url))
        return (t->http_url = stk_strdup(url)) ? 0 : STK_ENOMEM;
    const stk_s3_config *c;
    stk_s3_location loc;
    char http[8192];
    int rc = s3_config(&c);
    if (rc == 0)
        rc = stk_s3_parse_url(url, &loc);
    if (rc == 0)
        rc = stk_s3_object_url(c, loc.bucket, loc.key, NULL, http, sizeof http);
    if (rc < 0)
        return rc;
    stk_s3_signer *signer = calloc(1, sizeof *signer);
    if (!signer || !(t->http_url = stk_strdup(http))) {
        free(signer);
        return stk_fail(STK_ENOMEM, "out of memory");
    }
    signer->cfg = c; /* payload_hash "": GETs and HEADs are UNSIGNED-PAYLOAD */
    t->sign = stk_s3_sign;
    t->sign_ctx = signer;
    return 0;
}

static void target_free(target *t)
{
    free(t->http_url);
    free(t->sign_ctx);
    t->http_url = NULL;
    t->sign_ctx = NULL;
}

/* ------------------------------------------------------------------------ */
/* Object identity table                                                     */
/* ------------------------------------------------------------------------ */

typedef struct info {
    char *url;
    uint64_t hash;       /* XXH3-64 of url */
    uint64_t size;
    char etag[128];
    char lastmod[64];    /* Last-Modified from a HEAD ("" none, or from a listing) */
    struct info *next;   /* the bucket's chain */
} info;

/* Object identities learned from listings and HEADs, by URL: a hash table
 * (a listing of 41,000 shards, LAION-400M's, must not cost n^2 string
 * compares), chained, doubled when it holds more entries than buckets. */
static struct {
    pthread_mutex_t mu;
    info **buckets;      /* cap entries (a power of two), or NULL */
    size_t cap, count;
} infos = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The entry for url (infos.mu held), or NULL. */
static info *info_find_locked(const char *url, uint64_t h)
{
    if (!infos.cap)
        return NULL;
    info *e = infos.buckets[h & (infos.cap - 1)];
    while (e && !(e->hash == h && strcmp(e->url, url) == 0))
        e = e->next;
    return e;
}

/* Double the buckets (infos.mu held); on failure the table stays as it is. */
static void info_grow_locked(void)
{
    size_t ncap = infos.cap ? infos.cap * 2 : 256;
    info **nb = calloc(ncap, sizeof *nb);
    if (!nb)
        return;
    for (size_t i = 0; i < infos.cap; i++)
        for (info *e = infos.buckets[i], *next; e; e = next) {
            next = e->next;
            e->next = nb[e->hash & (ncap - 1)];
            nb[e->hash & (ncap - 1)] = e;
        }
    free(infos.buckets);
    infos.buckets = nb;
    infos.cap = ncap;
}

static void info_put(const char *url, uint64_t size, const char *etag, const char *lastmod)
{
    uint64_t h = XXH3_64bits(url, strlen(url));
    pthread_mutex_lock(&infos.mu);
    info *e = info_find_locked(url, h);
    if (!e) {
        if (infos.count >= infos.cap)
            info_grow_locked();
        if (infos.cap && (e = calloc(1, sizeof *e))) {
            if ((e->url = stk_strdup(url))) {
                e->hash = h;
                e->next = infos.buckets[h & (infos.cap - 1)];
                infos.buckets[h & (infos.cap - 1)] = e;
                infos.count++;
            } else {
                free(e);
                e = NULL;
            }
        }
    }
    if (e) { /* (out of memory: the open asks the server again) */
        e->size = size;
        snprintf(e->etag, sizeof e->etag, "%s", etag ? etag : "");
        snprintf(e->lastmod, sizeof e->lastmod, "%s", lastmod ? lastmod : "");
    }
    pthread_mutex_unlock(&infos.mu);
}

/* (lastmod may be NULL) */
static bool info_get(const char *url, uint64_t *size, char *etag, size_t cap, char *lastmod,
                     size_t lcap)
{
    uint64_t h = XXH3_64bits(url, strlen(url));
    pthread_mutex_lock(&infos.mu);
    info *e = info_find_locked(url, h);
    if (e) {
        *size = e->size;
        snprintf(etag, cap, "%s", e->etag);
        if (lastmod)
            snprintf(lastmod, lcap, "%s", e->lastmod);
    }
    pthread_mutex_unlock(&infos.mu);
    return e != NULL;
}

/* ------------------------------------------------------------------------ */
/* The source                                                                */
/* ------------------------------------------------------------------------ */

typedef struct fetch fetch;

typedef struct remote_source {
    stk_source base;     /* base.name: the URL as given (s3://...) */
    target tg;
    char etag[128];      /* the identity it was opened with ("" none) ... */
    char lastmod[64];    /* ... and its Last-Modified ("" none): every range
                            answer is compared with them and the size */
    stk_cache *cache;    /* a reference */
    stk_cache_object *obj;
    uint32_t chunk;
    _Atomic int refs;    /* owner + background fetches and queued hints */
    _Atomic bool cancelled;
    pthread_mutex_t mu;  /* guards `fetches`; `idle` waits under it */
    pthread_cond_t idle; /* broadcast when refs drops to the owner's alone */
    fetch *fetches;      /* transfers in flight */
} remote_source;

/* One range GET of chunks [c0, c1) of a source. */
struct fetch {
    remote_source *src;
    uint64_t c0, c1;
    uint8_t *buf;
    size_t len;
    stk_http_request *req;
    bool background;     /* read-ahead: the done callback finishes it */
    fetch *prev, *next;  /* src->fetches (src->mu) */
};

static void source_unref(remote_source *s);

static uint64_t chunk_start(const remote_source *s, uint64_t c) { return c * s->chunk; }
static uint64_t chunk_len(const remote_source *s, uint64_t c)
{
    uint64_t a = c * s->chunk, b = a + s->chunk;
    return (b > s->base.size ? s->base.size : b) - a;
}

/* (s->mu held) */
static void fetch_link_locked(remote_source *s, fetch *f)
{
    f->next = s->fetches;
    if (s->fetches)
        s->fetches->prev = f;
    s->fetches = f;
}

static void fetch_unlink_locked(remote_source *s, fetch *f)
{
    if (f->prev)
        f->prev->next = f->next;
    else
        s->fetches = f->next;
    if (f->next)
        f->next->prev = f->prev;
    f->prev = f->next = NULL;
}

static void fetch_unlink(remote_source *s, fetch *f)
{
    pthread_mutex_lock(&s->mu);
    fetch_unlink_locked(s, f);
    pthread_mutex_unlock(&s->mu);
}

/* The fetch's request completed with rc: put its chunks in the cache, or
 * give them back. Returns rc, or the fill's error, or STK_EFORMAT when the
 * object changed (the engine compared the answer with the identity the
 * source was opened with: desc.expect_*, http.h).
 *
 * A chunk's bytes are counted in bytes_fetched before the fill makes the
 * chunk visible: a reader waiting for it (stk_remote_prefetch, on another
 * thread than a background fetch's) and then reading the counter must find
 * them counted, or `stoker cache fetch` reports bytes it downloaded as
 * "cached already". */
static int fetch_finish(fetch *f, int rc, const stk_http_response *res)
{
    remote_source *s = f->src;
    if (rc == STK_EFORMAT && res->changed[0])
        rc = stk_fail(STK_EFORMAT,
                      "%s: the object changed while being read (%s); open the dataset again "
                      "to read its new version",
                      s->base.name, res->changed);
    uint64_t at = 0;
    for (uint64_t c = f->c0; c < f->c1; c++) {
        uint64_t n = chunk_len(s, c);
        if (rc == 0) {
            atomic_fetch_add(&rstats.bytes_fetched, n);
            if ((rc = stk_cache_fill(s->obj, c, f->buf + at, n)) < 0)
                atomic_fetch_sub(&rstats.bytes_fetched, n);
        } else {
            stk_cache_abandon(s->obj, c);
        }
        at += n;
    }
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Read-ahead: budget and queue                                              */
/* ------------------------------------------------------------------------ */

typedef struct hint {
    remote_source *src; /* a reference */
    uint64_t off, len;
    struct hint *next;
} hint;

static struct {
    pthread_mutex_t mu;
    uint64_t in_flight; /* bytes of background fetches */
    hint *head, *tail;  /* waiting for budget */
    uint64_t queued;
} ra = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* fork(): a lock another thread held at that moment would stay locked in
 * the child, which has only the forking thread. infos.mu and ra.mu are
 * leaves: taken before the fork, so their tables are whole in the child.
 * cfg.mu is held across a cache open (which takes the cache's g_mu, also
 * taken before a fork), so taking it here could deadlock against that
 * order: it is only made anew in the child (settings are written once,
 * at first use). */
static void remote_fork_prepare(void)
{
    pthread_mutex_lock(&infos.mu);
    pthread_mutex_lock(&ra.mu);
}
static void remote_fork_parent(void)
{
    pthread_mutex_unlock(&ra.mu);
    pthread_mutex_unlock(&infos.mu);
}
static void remote_fork_child(void)
{
    pthread_mutex_init(&ra.mu, NULL);
    pthread_mutex_init(&infos.mu, NULL);
    pthread_mutex_init(&cfg.mu, NULL);
}
__attribute__((constructor)) static void remote_fork_register(void)
{
    pthread_atfork(remote_fork_prepare, remote_fork_parent, remote_fork_child);
}

static void prefetch_range(remote_source *s, uint64_t off, uint64_t len);

static void ra_release(uint64_t bytes)
{
    pthread_mutex_lock(&ra.mu);
    ra.in_flight -= bytes;
    pthread_mutex_unlock(&ra.mu);
    /* Drain waiting hints while there is budget. */
    uint64_t budget = settings_readahead();
    for (;;) {
        pthread_mutex_lock(&ra.mu);
        hint *h = ra.in_flight < budget ? ra.head : NULL;
        if (h) {
            ra.head = h->next;
            if (!ra.head)
                ra.tail = NULL;
            ra.queued--;
        }
        pthread_mutex_unlock(&ra.mu);
        if (!h)
            return;
        if (!atomic_load(&h->src->cancelled))
            prefetch_range(h->src, h->off, h->len);
        source_unref(h->src);
        free(h);
    }
}

/* A background fetch finished (on the I/O thread). */
static void background_done(void *ctx, stk_http_request *r)
{
    fetch *f = ctx;
    remote_source *s = f->src;
    const stk_http_response *res = stk_http_result(r);
    char keep[STK_ERRMSG_MAX];
    snprintf(keep, sizeof keep, "%s", stk_errmsg());
    (void)fetch_finish(f, res->rc, res);
    stk_errmsg_set(keep); /* a hint's failure is not this thread's error */
    fetch_unlink(s, f);
    uint64_t len = f->len;
    free(f->buf);
    free(f);
    ra_release(len);
    source_unref(s);
}

/* Submit a fetch of chunks [c0, c1) (all claimed by the caller). */
static int fetch_submit(remote_source *s, uint64_t c0, uint64_t c1, bool background, fetch **out)
{
    fetch *f = calloc(1, sizeof *f);
    uint64_t off = chunk_start(s, c0), len = chunk_start(s, c1 - 1) + chunk_len(s, c1 - 1) - off;
    if (f)
        f->buf = malloc(len);
    if (!f || !f->buf) {
        free(f);
        for (uint64_t c = c0; c < c1; c++)
            stk_cache_abandon(s->obj, c);
        return stk_fail(STK_ENOMEM, "%s: out of memory for a %" PRIu64 "-byte read", s->base.name,
                        len);
    }
    f->src = s;
    f->c0 = c0;
    f->c1 = c1;
    f->len = len;
    f->background = background;
    stk_http_request_desc d = {.method = "GET", .url = s->tg.http_url, .range_off = off,
                               .range_len = len, .expect_total = s->base.size,
                               .expect_etag = s->etag, .expect_last_modified = s->lastmod,
                               .dest = f->buf, .dest_cap = len,
                               .sign = s->tg.sign, .sign_ctx = s->tg.sign_ctx};
    if (background) {
        atomic_fetch_add(&s->refs, 1);
        d.done = background_done;
        d.done_ctx = f;
    }
    /* s->mu is held from the link until a background request is detached.
     * Its `done` (background_done, on the I/O thread) may run before
     * stk_http_submit has even returned, and frees f; but it unlinks f
     * under s->mu first, so f and f->req stay valid here until the unlock.
     * And cancel_transfers, which reads f->req under s->mu, never sees it
     * half-written. */
    pthread_mutex_lock(&s->mu);
    fetch_link_locked(s, f);
    int rc = stk_http_submit(&d, &f->req);
    if (rc < 0) {
        fetch_unlink_locked(s, f);
        pthread_mutex_unlock(&s->mu);
        for (uint64_t c = c0; c < c1; c++)
            stk_cache_abandon(s->obj, c);
        free(f->buf);
        free(f);
        if (background)
            source_unref(s); /* never the last: the caller holds one */
        return rc;
    }
    if (atomic_load(&s->cancelled))
        stk_http_cancel(f->req);
    if (background) {
        stk_http_request_detach(f->req);
        f = NULL; /* background_done owns it now */
    }
    pthread_mutex_unlock(&s->mu);
    *out = f;
    return 0;
}

/* Claim and fetch in the background the chunks of [off, off + len). */
static void prefetch_range(remote_source *s, uint64_t off, uint64_t len)
{
    if (len == 0 || off >= s->base.size)
        return;
    if (len > s->base.size - off)
        len = s->base.size - off;
    uint64_t c = off / s->chunk, end = (off + len - 1) / s->chunk + 1;
    uint64_t budget = settings_readahead();
    while (c < end) {
        if (stk_cache_has(s->obj, c) || stk_cache_claim(s->obj, c) != STK_CACHE_MINE) {
            c++;
            continue;
        }
        uint64_t c1 = c + 1;
        while (c1 < end && (c1 - c + 1) * s->chunk <= MAX_RUN_BYTES && !stk_cache_has(s->obj, c1) &&
               stk_cache_claim(s->obj, c1) == STK_CACHE_MINE)
            c1++;
        uint64_t bytes = chunk_start(s, c1 - 1) + chunk_len(s, c1 - 1) - chunk_start(s, c);
        pthread_mutex_lock(&ra.mu);
        bool room = ra.in_flight < budget;
        if (room)
            ra.in_flight += bytes;
        pthread_mutex_unlock(&ra.mu);
        if (!room) {
            /* Give the claims back and queue the rest of the hint. */
            for (uint64_t k = c; k < c1; k++)
                stk_cache_abandon(s->obj, k);
            hint *h = malloc(sizeof *h);
            if (!h)
                return;
            atomic_fetch_add(&s->refs, 1);
            *h = (hint){s, chunk_start(s, c), chunk_start(s, end - 1) + chunk_len(s, end - 1) -
                                                  chunk_start(s, c), NULL};
            pthread_mutex_lock(&ra.mu);
            if (ra.tail)
                ra.tail->next = h;
            else
                ra.head = h;
            ra.tail = h;
            ra.queued++;
            pthread_mutex_unlock(&ra.mu);
            return;
        }
        fetch *f;
        char keep[STK_ERRMSG_MAX];
        snprintf(keep, sizeof keep, "%s", stk_errmsg());
        if (fetch_submit(s, c, c1, true, &f) < 0) {
            stk_errmsg_set(keep);
            pthread_mutex_lock(&ra.mu);
            ra.in_flight -= bytes;
            pthread_mutex_unlock(&ra.mu);
            return;
        }
        atomic_fetch_add_explicit(&rstats.prefetch_bytes, bytes, memory_order_relaxed);
        c = c1;
    }
}

/* ------------------------------------------------------------------------ */
/* Reads                                                                     */
/* ------------------------------------------------------------------------ */

static int cancelled_error(const remote_source *s)
{
    return stk_fail(STK_EINTR, "%s: cancelled (the reader was stopped)", s->base.name);
}

/* Make chunks [c0, c1) present: claim, fetch what is ours, wait for the
 * rest. 0 or the error (message set). */
static int ensure_chunks(remote_source *s, uint64_t c0, uint64_t c1)
{
    enum { MAX_FETCHES = 64 };
    for (int round = 0; round < 16; round++) {
        fetch *mine[MAX_FETCHES];
        uint32_t nmine = 0;
        bool busy = false, missing = false;
        int rc = 0;
        uint64_t c = c0;
        while (c < c1 && rc == 0) {
            if (atomic_load(&s->cancelled)) {
                rc = cancelled_error(s);
                break;
            }
            int st = stk_cache_claim(s->obj, c);
            if (st < 0) {
                rc = st;
                break;
            }
            if (st == STK_CACHE_BUSY)
                busy = true;
            if (st != STK_CACHE_MINE) {
                c++;
                continue;
            }
            uint64_t e = c + 1;
            while (e < c1 && (e - c + 1) * s->chunk <= MAX_RUN_BYTES && nmine + 1 < MAX_FETCHES &&
                   stk_cache_claim(s->obj, e) == STK_CACHE_MINE)
                e++;
            /* (a chunk at e that was not ours is looked at again next round) */
            if (nmine == MAX_FETCHES) {
                for (uint64_t k = c; k < e; k++)
                    stk_cache_abandon(s->obj, k);
                missing = true;
                break;
            }
            rc = fetch_submit(s, c, e, false, &mine[nmine]);
            if (rc == 0)
                nmine++;
            if (e < c1 && !stk_cache_has(s->obj, e))
                missing = true;
            c = e;
        }
        /* Finish our fetches (all of them, even after an error). */
        for (uint32_t i = 0; i < nmine; i++) {
            fetch *f = mine[i];
            int frc = stk_http_wait(f->req);
            frc = fetch_finish(f, frc, stk_http_result(f->req));
            fetch_unlink(s, f);
            stk_http_request_free(f->req);
            free(f->buf);
            free(f);
            if (frc < 0 && rc == 0)
                rc = frc;
            if (frc == STK_EINTR && atomic_load(&s->cancelled))
                rc = cancelled_error(s);
        }
        if (rc < 0)
            return rc;
        /* Wait for the chunks others are fetching. */
        if (busy)
            for (uint64_t k = c0; k < c1; k++) {
                for (;;) {
                    if (atomic_load(&s->cancelled))
                        return cancelled_error(s);
                    int w = stk_cache_wait(s->obj, k, WAIT_SLICE_MS);
                    if (w == STK_ETIMEDOUT)
                        continue;
                    if (w < 0)
                        return w;
                    if (w == STK_CACHE_ABSENT)
                        missing = true;
                    break;
                }
            }
        if (!missing && !busy)
            return 0;
        bool all = true;
        for (uint64_t k = c0; k < c1 && all; k++)
            all = stk_cache_has(s->obj, k);
        if (all)
            return 0;
    }
    return stk_fail(STK_ENETWORK, "%s: the chunks of a read kept disappearing from the cache",
                    s->base.name);
}

/* Bytes [off, off + n) through the cache: copied into buf, or (buf NULL)
 * lent in place in *view (stk_cache_view). Fetches what is missing. */
static int remote_get(const stk_source *src, void *buf, const uint8_t **view, size_t n,
                      uint64_t off)
{
    remote_source *s = (remote_source *)src;
    atomic_fetch_add_explicit(&rstats.reads, 1, memory_order_relaxed);
    if (atomic_load(&s->cancelled))
        return cancelled_error(s);
    if (n == 0)
        return buf ? 0 : stk_cache_view(s->obj, off, 0, view);
    uint64_t c0 = off / s->chunk, c1 = (off + n - 1) / s->chunk + 1;
    for (int tries = 0; tries < 4; tries++) {
        int rc = buf ? stk_cache_read(s->obj, buf, n, off) : stk_cache_view(s->obj, off, n, view);
        if (rc != STK_ENOENT)
            return rc;
        atomic_fetch_add_explicit(&rstats.reads_waited, 1, memory_order_relaxed);
        double t0 = stk_now();
        rc = ensure_chunks(s, c0, c1);
        atomic_fetch_add_explicit(&rstats.wait_ns, (uint64_t)((stk_now() - t0) * 1e9),
                                  memory_order_relaxed);
        if (rc < 0)
            return rc;
    }
    return stk_fail(STK_ENETWORK, "%s: bytes %" PRIu64 "..%" PRIu64 " could not be kept in the cache",
                    s->base.name, off, off + n);
}

static int remote_read_at(const stk_source *src, void *buf, size_t n, uint64_t off)
{
    return remote_get(src, buf, NULL, n, off);
}

static int remote_view(const stk_source *src, uint64_t offset, size_t n, const uint8_t **p)
{
    if (offset > src->size || n > src->size - offset)
        return stk_fail(STK_EFORMAT, "%s: unexpected end of file", src->name);
    return remote_get(src, NULL, p, n, offset);
}

static int remote_pread(const stk_source *src, void *buf, size_t n, uint64_t offset)
{
    if (offset > src->size || n > src->size - offset)
        return stk_fail(STK_EFORMAT, "%s: unexpected end of file", src->name);
    return remote_read_at(src, buf, n, offset);
}

static int64_t remote_read_part(const stk_source *src, void *buf, size_t n, uint64_t offset)
{
    if (offset >= src->size)
        return 0;
    if (n > src->size - offset)
        n = (size_t)(src->size - offset);
    int rc = remote_read_at(src, buf, n, offset);
    return rc < 0 ? rc : (int64_t)n;
}

static int remote_map(stk_source *src, unsigned flags, const uint8_t **data,
                      struct stk_map_guard **guard)
{
    (void)flags;
    *data = NULL;
    *guard = NULL;
    return stk_fail(STK_EUNSUPPORTED, "%s: a remote object cannot be mapped (read it with pread)",
                    src->name);
}

static void cancel_transfers(remote_source *s)
{
    atomic_store(&s->cancelled, true);
    pthread_mutex_lock(&s->mu);
    for (fetch *f = s->fetches; f; f = f->next)
        if (f->req)
            stk_http_cancel(f->req);
    pthread_mutex_unlock(&s->mu);
}

static void remote_advise(const stk_source *src, const uint8_t *data, uint64_t offset,
                          uint64_t len, stk_advice advice)
{
    (void)data;
    remote_source *s = (remote_source *)src;
    if (advice == STK_ADVISE_CANCEL)
        cancel_transfers(s);
    else if (advice == STK_ADVISE_RESUME)
        atomic_store(&s->cancelled, false);
    else if (advice == STK_ADVISE_WILLNEED && !atomic_load(&s->cancelled))
        prefetch_range(s, offset, len);
}

/* Drop one reference. The decrement and the broadcast are made under mu:
 * a wait_idle that saw refs > 1 is waiting by then, and the thread that
 * drops the last reference cannot destroy mu while another one that
 * dropped the one before it is still inside it (the owner's close racing a
 * background fetch's end; ThreadSanitizer saw mu destroyed there). */
static void source_unref(remote_source *s)
{
    pthread_mutex_lock(&s->mu);
    int was = atomic_fetch_sub(&s->refs, 1);
    if (was == 2)
        pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->mu);
    if (was != 1)
        return;
    stk_cache_object_close(s->obj);
    stk_cache_close(s->cache);
    target_free(&s->tg);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->idle);
    free(s->base.name);
    free(s);
}

/* Wait until the owner's is the only reference: s's hints still queued are
 * dropped (a queue that nothing drains, STOKER_READAHEAD=0, would hold them
 * for ever), then every background fetch of s has finished, its `done`
 * included (which holds the cache object open until its last line). Only
 * where that is bounded: every chunk those fetches claimed has been waited
 * for. */
static void wait_idle(remote_source *s)
{
    hint *mine = NULL;
    pthread_mutex_lock(&ra.mu);
    ra.tail = NULL;
    for (hint **p = &ra.head; *p;) {
        hint *h = *p;
        if (h->src == s) {
            *p = h->next;
            h->next = mine;
            mine = h;
            ra.queued--;
        } else {
            ra.tail = h;
            p = &h->next;
        }
    }
    pthread_mutex_unlock(&ra.mu);
    while (mine) {
        hint *h = mine;
        mine = h->next;
        source_unref(h->src);
        free(h);
    }
    pthread_mutex_lock(&s->mu);
    while (atomic_load(&s->refs) > 1)
        pthread_cond_wait(&s->idle, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

static void remote_close(stk_source *src)
{
    remote_source *s = (remote_source *)src;
    cancel_transfers(s);
    source_unref(s);
}

static const stk_source_ops remote_ops = {
    .kind = "remote",
    .fixed = 1,
    .pread = remote_pread,
    .read_part = remote_read_part,
    .map = remote_map,
    .advise = remote_advise,
    .close = remote_close,
    .view = remote_view,
};

/* ------------------------------------------------------------------------ */
/* Open                                                                      */
/* ------------------------------------------------------------------------ */

/* Size and ETag of url by HEAD. */
static int head_object(const char *url, const target *t, uint64_t *size, char *etag, size_t cap,
                       char *lastmod, size_t lcap)
{
    if (is_s3(url)) {
        const stk_s3_config *c;
        int rc = s3_config(&c);
        lastmod[0] = 0;
        (void)lcap;
        return rc < 0 ? rc : stk_s3_head(c, url, size, etag, cap);
    }
    stk_http_request_desc d = {.method = "HEAD", .url = t->http_url, .sign = t->sign,
                               .sign_ctx = t->sign_ctx};
    stk_http_response r;
    int rc = stk_http_perform(&d, &r);
    free(r.body);
    if (rc == STK_ENOENT)
        return stk_fail(STK_ENOENT, "%s: no such object (HTTP 404)", url);
    if (rc < 0)
        return rc;
    if (r.content_length == UINT64_MAX)
        return stk_fail(STK_ENETWORK, "%s: the server gave no Content-Length for HEAD", url);
    *size = r.content_length;
    snprintf(etag, cap, "%s", r.etag);
    snprintf(lastmod, lcap, "%s", r.last_modified);
    return 0;
}

int stk_remote_open(const char *url, uint64_t max_bytes, stk_source **out)
{
    *out = NULL;
    remote_source *s = calloc(1, sizeof *s);
    if (!s)
        return stk_fail(STK_ENOMEM, "out of memory");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->idle, NULL);
    atomic_init(&s->refs, 1);
    s->base.ops = &remote_ops;
    int rc = 0;
    if (!(s->base.name = stk_strdup(url)))
        rc = STK_ENOMEM;
    if (rc == 0)
        rc = target_of(url, &s->tg);
    uint64_t size = 0;
    if (rc == 0 && !info_get(url, &size, s->etag, sizeof s->etag, s->lastmod, sizeof s->lastmod)) {
        rc = head_object(url, &s->tg, &size, s->etag, sizeof s->etag, s->lastmod,
                         sizeof s->lastmod);
        if (rc == 0)
            info_put(url, size, s->etag, s->lastmod);
    }
    if (rc == 0 && size > max_bytes)
        rc = stk_fail(STK_ELIMIT, "%s: %" PRIu64 " bytes, more than the limit of %" PRIu64, url,
                      size, max_bytes);
    s->base.size = size;
    if (rc == 0)
        rc = settings_cache(&s->cache, &s->chunk);
    if (rc == 0) {
        char *key = NULL;
        size_t q = strcspn(url, "?");
        if (asprintf(&key, "%.*s#%s#%" PRIu64, (int)q, url, s->etag[0] ? s->etag : s->lastmod,
                     size) < 0)
            rc = stk_fail(STK_ENOMEM, "out of memory");
        else
            rc = stk_cache_object_open(s->cache, key, size, s->chunk, &s->obj);
        free(key);
    }
    if (rc < 0) {
        source_unref(s);
        return rc;
    }
    *out = &s->base;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Fetching the ends of many objects at once                                 */
/* ------------------------------------------------------------------------ */

void stk_remote_fetch_ends(char *const *urls, uint32_t n, uint64_t head_bytes, uint64_t tail_bytes)
{
    char keep[STK_ERRMSG_MAX];
    snprintf(keep, sizeof keep, "%s", stk_errmsg());
    stk_source **srcs = calloc(n ? n : 1, sizeof *srcs);
    if (!srcs)
        return;
    for (uint32_t i = 0; i < n; i++)
        if (stk_remote_open(urls[i], UINT64_MAX, &srcs[i]) < 0)
            srcs[i] = NULL;
    /* Hints go out in parallel; then each end is waited for whole. Whole,
     * not one byte at each end: another process may hold some of an end's
     * chunks (a job's ranks open the same shards at once), so this
     * process's hint of an end can be several fetches, and the one that
     * holds neither end byte would still be in flight at the close below.
     * The close cancels it (remote_close): its chunks, often already
     * received, go back to absent, and whoever reads them next downloads
     * them a second time (the 1-in-40 duplicate of the 8-process test).
     * ensure_chunks waits for every chunk of the range, this process's
     * background fetches included, and fetches itself what a failed hint
     * gave back; so nothing of these sources is in flight at the close. */
    for (uint32_t i = 0; i < n; i++) {
        if (!srcs[i])
            continue;
        uint64_t size = srcs[i]->size;
        prefetch_range((remote_source *)srcs[i], 0, head_bytes < size ? head_bytes : size);
        uint64_t t = tail_bytes < size ? tail_bytes : size;
        prefetch_range((remote_source *)srcs[i], size - t, t);
    }
    for (uint32_t i = 0; i < n; i++) {
        if (!srcs[i])
            continue;
        remote_source *s = (remote_source *)srcs[i];
        uint64_t size = s->base.size, h = head_bytes < size ? head_bytes : size,
                 t = tail_bytes < size ? tail_bytes : size;
        if (size > 0 && ensure_chunks(s, 0, (h ? h - 1 : 0) / s->chunk + 1) == 0)
            (void)ensure_chunks(s, (size - t) / s->chunk, (size - 1) / s->chunk + 1);
        stk_source_close(srcs[i]);
    }
    free(srcs);
    stk_errmsg_set(keep);
}

/* ------------------------------------------------------------------------ */
/* Listing                                                                   */
/* ------------------------------------------------------------------------ */

typedef stk_strlist strlist; /* core/util.h */
#define strlist_push stk_strlist_push
#define strlist_free stk_strlist_free

#define MAX_EXPANSION 1000000

/* Expand the first {...} of `p` (recursively the rest) into out. */
static int expand_braces(const char *pattern, const char *p, strlist *out)
{
    const char *open = strchr(p, '{');
    if (!open)
        return strlist_push(out, stk_strdup(p));
    const char *close = strchr(open, '}');
    if (!close)
        return stk_fail(STK_EINVAL, "%s: a '{' without its '}'", pattern);
    size_t pre = (size_t)(open - p);
    const char *body = open + 1;
    size_t blen = (size_t)(close - body);
    char item[64];
    /* {A..B}: a numeric range, zero-padded when A is. */
    const char *dots = strstr(body, "..");
    if (dots && dots < close) {
        char *e1, *e2;
        unsigned long long a = strtoull(body, &e1, 10), b = strtoull(dots + 2, &e2, 10);
        if (e1 != dots || e2 != close || body == dots || dots + 2 == close)
            return stk_fail(STK_EINVAL, "%s: {%.*s} is not a range of numbers {A..B}", pattern,
                            (int)blen, body);
        if (b < a || b - a >= MAX_EXPANSION)
            return stk_fail(STK_EINVAL, "%s: {%.*s}: the range must rise and hold at most %d values",
                            pattern, (int)blen, body, MAX_EXPANSION);
        int width = body[0] == '0' ? (int)(dots - body) : 0;
        for (unsigned long long v = a; v <= b; v++) {
            snprintf(item, sizeof item, "%0*llu", width, v);
            char *next = NULL;
            if (asprintf(&next, "%.*s%s%s", (int)pre, p, item, close + 1) < 0)
                return stk_fail(STK_ENOMEM, "out of memory");
            int rc = expand_braces(pattern, next, out);
            free(next);
            if (rc < 0)
                return rc;
            if (out->n > MAX_EXPANSION)
                return stk_fail(STK_ELIMIT, "%s: more than %d names", pattern, MAX_EXPANSION);
        }
        return 0;
    }
    /* {a,b,c}: alternatives. */
    const char *a = body;
    for (;;) {
        const char *comma = memchr(a, ',', (size_t)(close - a));
        const char *end = comma ? comma : close;
        char *next = NULL;
        if (asprintf(&next, "%.*s%.*s%s", (int)pre, p, (int)(end - a), a, close + 1) < 0)
            return stk_fail(STK_ENOMEM, "out of memory");
        int rc = expand_braces(pattern, next, out);
        free(next);
        if (rc < 0)
            return rc;
        if (!comma)
            return 0;
        a = comma + 1;
    }
}

static bool has_suffix(const char *name, const char *const *suffixes)
{
    if (!suffixes)
        return true;
    size_t q = strcspn(name, "?"), n = q;
    for (; *suffixes; suffixes++) {
        size_t k = strlen(*suffixes);
        if (n > k && strncmp(name + n - k, *suffixes, k) == 0)
            return true;
    }
    return false;
}

/* HEAD every URL of l in parallel; the first failure (in list order). */
static int head_all(const strlist *l)
{
    stk_http_request **req = calloc(l->n ? l->n : 1, sizeof *req);
    target *tg = calloc(l->n ? l->n : 1, sizeof *tg);
    int rc = req && tg ? 0 : stk_fail(STK_ENOMEM, "out of memory");
    char first[STK_ERRMSG_MAX] = "";
    uint32_t started = 0;
    for (uint32_t i = 0; i < l->n && rc == 0; i++) {
        uint64_t size;
        char etag[128];
        if (info_get(l->v[i], &size, etag, sizeof etag, NULL, 0))
            continue;
        if ((rc = target_of(l->v[i], &tg[i])) < 0)
            break;
        stk_http_request_desc d = {.method = "HEAD", .url = tg[i].http_url, .sign = tg[i].sign,
                                   .sign_ctx = tg[i].sign_ctx};
        rc = stk_http_submit(&d, &req[i]);
        started = i + 1;
    }
    if (rc < 0)
        snprintf(first, sizeof first, "%s", stk_errmsg());
    for (uint32_t i = 0; i < started; i++) {
        if (!req[i])
            continue;
        int r = stk_http_wait(req[i]);
        const stk_http_response *res = stk_http_result(req[i]);
        if (r == STK_ENOENT)
            r = stk_fail(STK_ENOENT, "%s: no such object (HTTP 404)", l->v[i]);
        else if (r == 0 && res->content_length == UINT64_MAX)
            r = stk_fail(STK_ENETWORK, "%s: the server gave no Content-Length for HEAD", l->v[i]);
        if (r == 0) {
            info_put(l->v[i], res->content_length, res->etag, res->last_modified);
        } else if (rc == 0) {
            rc = r;
            snprintf(first, sizeof first, "%s", stk_errmsg());
        }
        stk_http_request_free(req[i]);
    }
    if (first[0]) /* (each failed wait set the message: the first one's is the one) */
        stk_errmsg_set(first);
    if (tg)
        for (uint32_t i = 0; i < l->n; i++)
            target_free(&tg[i]);
    free(req);
    free(tg);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int stk_remote_list(const char *pattern, const char *const *suffixes, char ***out, uint32_t *count)
{
    *out = NULL;
    *count = 0;
    strlist all = {0}, kept = {0};
    int rc = 0;
    if (is_s3(pattern)) {
        const stk_s3_config *c;
        stk_s3_location loc;
        stk_s3_listing l = {0};
        rc = s3_config(&c);
        if (rc == 0)
            rc = stk_s3_parse_url(pattern, &loc);
        size_t klen = strlen(loc.key);
        if (rc == 0 && klen && loc.key[klen - 1] != '/' && !strchr(pattern, '{')) {
            /* One object (or a prefix written without its '/': list it). */
            uint64_t size;
            char etag[128];
            if (stk_s3_head(c, pattern, &size, etag, sizeof etag) == 0) {
                info_put(pattern, size, etag, NULL);
                rc = strlist_push(&all, stk_strdup(pattern));
                goto listed;
            }
            stk_errmsg_clear();
        }
        if (rc == 0 && strchr(pattern, '{')) {
            rc = expand_braces(pattern, pattern, &all);
            goto listed;
        }
        if (rc == 0)
            rc = stk_s3_list(c, pattern, NULL, &l);
        for (size_t i = 0; rc == 0 && i < l.n; i++) {
            char *u = NULL;
            if (asprintf(&u, "s3://%s/%s", loc.bucket, l.objects[i].key) < 0) {
                rc = stk_fail(STK_ENOMEM, "out of memory");
                break;
            }
            /* every listed object's identity is kept, the ones left out too:
             * a reader may look for a companion (stk_remote_known) */
            info_put(u, l.objects[i].size, l.objects[i].etag, NULL);
            if (!has_suffix(u, suffixes)) {
                free(u);
                continue;
            }
            rc = strlist_push(&all, u);
        }
        stk_s3_listing_free(&l);
        if (rc == 0 && all.n == 0)
            rc = stk_fail(STK_ENOENT, "%s: no object under this prefix has a suffix this reader "
                                      "reads", pattern);
    listed:;
    } else if (pattern[strcspn(pattern, "?")] == 0 && pattern[strlen(pattern) - 1] == '/') {
        rc = stk_fail(STK_EINVAL,
                      "%s: an http(s) directory cannot be listed: name the objects with a brace "
                      "range (train-{000..127}.stk) or alternatives ({a,b}.stk), or use s3://",
                      pattern);
    } else {
        rc = expand_braces(pattern, pattern, &all);
    }
    for (uint32_t i = 0; i < all.n && rc == 0; i++)
        if (all.n == 1 || has_suffix(all.v[i], suffixes)) {
            rc = strlist_push(&kept, all.v[i]);
            all.v[i] = NULL;
        }
    strlist_free(&all);
    if (rc == 0 && kept.n == 0)
        rc = stk_fail(STK_ENOENT, "%s: no object of this pattern has a suffix this reader reads",
                      pattern);
    if (rc == 0 && strchr(pattern, '{'))
        rc = head_all(&kept);
    if (rc < 0) {
        strlist_free(&kept);
        return rc;
    }
    qsort(kept.v, kept.n, sizeof *kept.v, cmp_str);
    *out = kept.v;
    *count = (uint32_t)kept.n;
    return 0;
}

void stk_remote_list_free(char **list, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

bool stk_remote_known(const char *url)
{
    uint64_t size;
    char etag[128];
    return info_get(url, &size, etag, sizeof etag, NULL, 0);
}

/* ------------------------------------------------------------------------ */
/* Files derived from a remote object                                        */
/* ------------------------------------------------------------------------ */

int stk_remote_derived_path(const stk_source *src, const char *suffix, char **out)
{
    *out = NULL;
    if (src->ops != &remote_ops)
        return stk_fail(STK_EINVAL, "%s: not a remote object", src->name);
    return stk_cache_object_derived_path(((const remote_source *)src)->obj, suffix, out);
}

/* ------------------------------------------------------------------------ */
/* The cache as a whole: usage, trimming, downloading ahead                 */
/* ------------------------------------------------------------------------ */

STK_API int stk_remote_cache_info_get(stk_remote_cache_info *out)
{
    memset(out, 0, sizeof *out);
    stk_cache *c;
    uint32_t chunk;
    int rc = settings_cache(&c, &chunk);
    if (rc < 0)
        return rc;
    snprintf(out->dir, sizeof out->dir, "%s", stk_cache_dir(c));
    pthread_mutex_lock(&cfg.mu);
    out->limit = cfg.limit;
    pthread_mutex_unlock(&cfg.mu);
    rc = stk_cache_usage_scan(c, &out->objects, &out->bytes);
    stk_cache_close(c);
    return rc;
}

STK_API int stk_remote_cache_trim(uint64_t keep_bytes, uint64_t *removed_objects,
                                  uint64_t *removed_bytes, stk_remote_cache_info *left)
{
    stk_remote_cache_info now;
    memset(&now, 0, sizeof now);
    stk_cache *c;
    uint32_t chunk;
    int rc = settings_cache(&c, &chunk);
    if (rc < 0)
        return rc;
    snprintf(now.dir, sizeof now.dir, "%s", stk_cache_dir(c));
    pthread_mutex_lock(&cfg.mu);
    now.limit = cfg.limit;
    pthread_mutex_unlock(&cfg.mu);
    uint64_t ro = 0, rb = 0;
    rc = stk_cache_trim(c, keep_bytes, &ro, &rb, &now.objects, &now.bytes);
    stk_cache_close(c);
    if (removed_objects)
        *removed_objects = ro;
    if (removed_bytes)
        *removed_bytes = rb;
    if (left)
        *left = now;
    return rc;
}

/* The URL part of a dataset URI: "stk:https://..." -> "https://...". */
static const char *uri_url(const char *uri)
{
    if (stk_is_remote(uri))
        return uri;
    const char *colon = strchr(uri, ':');
    return colon && stk_is_remote(colon + 1) ? colon + 1 : NULL;
}

#define PREFETCH_PIECE ((uint64_t)16 << 20) /* bytes waited for at a time */

STK_API int stk_remote_prefetch(const char *uri,
                                void (*progress)(void *ctx, uint32_t done, uint32_t total,
                                                 const char *url),
                                void *ctx, uint64_t *objects, uint64_t *bytes, uint64_t *fetched)
{
    if (objects)
        *objects = 0;
    if (bytes)
        *bytes = 0;
    if (fetched)
        *fetched = 0;
    const char *url = uri ? uri_url(uri) : NULL;
    if (!url)
        return stk_fail(STK_EINVAL, "%s: not a remote dataset (http://, https:// or s3://, with or "
                                    "without a reader prefix such as stk:)", uri ? uri : "(null)");
    /* "?..." is the readers' options (?verify=off), as when the dataset opens */
    char *objects_url = strndup(url, strcspn(url, "?"));
    if (!objects_url)
        return stk_fail(STK_ENOMEM, "out of memory");
    char **urls;
    uint32_t n;
    int rc = stk_remote_list(objects_url, NULL, &urls, &n);
    free(objects_url);
    if (rc < 0)
        return rc;
    stk_source **src = calloc(n ? n : 1, sizeof *src);
    if (!src) {
        stk_remote_list_free(urls, n);
        return stk_fail(STK_ENOMEM, "out of memory");
    }
    uint64_t fetched0 = atomic_load(&rstats.bytes_fetched), total = 0;
    for (uint32_t i = 0; i < n && rc == 0; i++)
        if ((rc = stk_remote_open(urls[i], UINT64_MAX, &src[i])) == 0)
            total += src[i]->size;
    /* Every object hinted at once: the read-ahead keeps its budget of
     * bytes in flight, in this order; then each object is waited for a
     * piece at a time (a piece nobody fetched yet is fetched by the wait). */
    for (uint32_t i = 0; i < n && rc == 0; i++)
        stk_source_advise(src[i], NULL, 0, src[i]->size, STK_ADVISE_WILLNEED);
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        for (uint64_t off = 0; off < src[i]->size && rc == 0; off += PREFETCH_PIECE) {
            uint64_t len = src[i]->size - off < PREFETCH_PIECE ? src[i]->size - off : PREFETCH_PIECE;
            const uint8_t *p;
            rc = stk_source_view(src[i], off, (size_t)len, &p);
        }
        if (rc == 0 && progress)
            progress(ctx, i + 1, n, urls[i]);
    }
    /* Every chunk is in: the background fetches are in their last lines.
     * Waiting for them makes the figures and the cache whole when this
     * returns: their bytes counted, their objects closed (a trim that
     * follows, `stoker.cache_trim`, skips objects still open). Without it
     * both raced the caller. */
    for (uint32_t i = 0; i < n && rc == 0; i++)
        wait_idle((remote_source *)src[i]);
    for (uint32_t i = 0; i < n; i++)
        stk_source_close(src[i]);
    free(src);
    stk_remote_list_free(urls, n);
    if (rc < 0)
        return rc;
    if (objects)
        *objects = n;
    if (bytes)
        *bytes = total;
    if (fetched)
        *fetched = atomic_load(&rstats.bytes_fetched) - fetched0;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Counters                                                                  */
/* ------------------------------------------------------------------------ */

STK_API void stk_io_stats_get(stk_io_stats *out)
{
    memset(out, 0, sizeof *out);
    stk_http_stats h;
    stk_http_stats_get(&h);
    stk_cache_stats c;
    stk_cache_stats_get(&c);
    out->bytes_fetched = atomic_load(&rstats.bytes_fetched);
    out->bytes_received = h.bytes_received;
    out->bytes_sent = h.bytes_sent;
    out->requests = h.requests;
    out->retries = h.retries;
    out->failures = h.failures;
    out->cache_hit_bytes = c.hit_bytes;
    out->cache_evicted_bytes = c.evicted_bytes;
    out->reads = atomic_load(&rstats.reads);
    out->reads_waited = atomic_load(&rstats.reads_waited);
    out->wait_s = (double)atomic_load(&rstats.wait_ns) * 1e-9;
    out->prefetch_bytes = atomic_load(&rstats.prefetch_bytes);
}

STK_API void stk_io_stats_reset(void)
{
    stk_http_stats_reset();
    stk_cache_stats_reset();
    atomic_store(&rstats.bytes_fetched, 0);
    atomic_store(&rstats.reads, 0);
    atomic_store(&rstats.reads_waited, 0);
    atomic_store(&rstats.wait_ns, 0);
    atomic_store(&rstats.prefetch_bytes, 0);
}
