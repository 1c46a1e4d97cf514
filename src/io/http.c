/*
 * http.c — the HTTP client engine: one I/O thread, libcurl's multi interface.
 *
 * Why one thread. A remote dataset is read as many small range requests
 * (a record, a chunk of a shard) that spend most of their life waiting for
 * the network. A thread per request would need hundreds of threads to keep a
 * 20 ms, 1 Gbit/s link full; libcurl's multi interface runs them all from
 * one thread with poll, reuses connections (keep-alive, HTTP/2 streams) and
 * resolves names once. Callers (the loader's workers, the read-ahead) submit
 * requests and wait on their own condition variable; nothing they do blocks
 * the I/O thread, and the I/O thread never runs caller code except the
 * short `sign` and `done` callbacks.
 *
 * The engine (one per process, `eng`):
 *
 *   submit ──► incoming list ──► (I/O thread) attempt: easy handle, sign,
 *                                 curl_multi_add_handle
 *                                        │ CURLMSG_DONE
 *                                        ▼
 *                                 classify: done (ok / error) or retry at
 *                                 now + backoff (the retry list, polled
 *                                 with a timeout)
 *
 * Locking: `eng.mu` guards the lists, every request's `state`, `cancel`
 * and completion fields, and the started/stopping flags; the I/O thread
 * drops it around curl calls (curl_multi_* are only ever called by the I/O
 * thread, except curl_multi_wakeup, which is thread-safe). A request's
 * transfer buffers (dest, body) are touched only by the I/O thread while
 * the request runs. Each request has its own condition variable, signalled
 * once, at completion.
 *
 * Classification of an attempt (attempt_finished):
 *   - transport errors that a retry can fix (connect refused or timed out,
 *     reset, a body shorter than its Content-Length, a stalled transfer,
 *     HTTP/2 stream errors) and HTTP 408, 429 and 5xx: retried while
 *     attempts and the deadline allow;
 *   - a 2xx whose body does not match what was asked (a 206 with fewer
 *     bytes than the range: truncated, retried; a 206 whose Content-Range
 *     or Content-Length names other bytes than the Range asked: a broken
 *     proxy or CDN, retried, its body never handed on, since bytes placed
 *     by the request and not by the answer would be cached under the wrong
 *     offset with a CRC of their own; a 200 to a ranged request that is
 *     not the whole object: the server ignores Range, refused);
 *   - a ranged answer (2xx, or a 416) from another object than the request
 *     expects (desc.expect_*: total size, ETag, else Last-Modified): the
 *     object changed, STK_EFORMAT at once (range_check);
 *   - 401/403: STK_EACCESS, 404: STK_ENOENT, other 4xx and unfixable
 *     transport errors (bad URL, TLS verification): STK_ENETWORK, at once.
 * Backoff is "full jitter": the n-th retry waits uniform(0, min(cap,
 * base * 2^(n-1))) ms, at least a Retry-After the server sent (capped), so
 * many clients retrying after one outage do not return in lockstep.
 *
 * Fork: a child of fork() has no I/O thread; pthread_atfork resets the
 * engine in the child so its first request starts a fresh one (the parent's
 * requests are the parent's; the child's copy of the multi handle is
 * abandoned, never cleaned up, since its sockets are shared with the
 * parent).
 */
#include "io/http.h"

#include "core/error.h"
#include "core/util.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Policy, headers, URL encoding                                             */
/* ------------------------------------------------------------------------ */

static uint32_t env_u32(const char *name, uint32_t def)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || x > UINT32_MAX)
        return def;
    return (uint32_t)x;
}

void stk_http_policy_default(stk_http_policy *p)
{
    p->connect_timeout_ms = env_u32("STOKER_HTTP_CONNECT_TIMEOUT_MS", 10000);
    p->low_speed_time_s = env_u32("STOKER_HTTP_LOW_SPEED_TIME_S", 20);
    p->low_speed_bytes = 1024;
    p->max_attempts = env_u32("STOKER_HTTP_MAX_ATTEMPTS", 8);
    p->backoff_ms = env_u32("STOKER_HTTP_BACKOFF_MS", 100);
    p->backoff_max_ms = env_u32("STOKER_HTTP_BACKOFF_MAX_MS", 5000);
    p->deadline_ms = env_u32("STOKER_HTTP_DEADLINE_MS", 120000);
    p->max_connections = env_u32("STOKER_HTTP_MAX_CONNECTIONS", 64);
    if (p->max_attempts == 0)
        p->max_attempts = 1;
}

int stk_http_headers_add(stk_http_headers *h, const char *fmt, ...)
{
    if (h->n >= STK_HTTP_MAX_HEADERS)
        return stk_fail(STK_ELIMIT, "http: more than %d request headers", STK_HTTP_MAX_HEADERS);
    va_list ap;
    va_start(ap, fmt);
    char *line = NULL;
    int n = vasprintf(&line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return stk_fail(STK_ENOMEM, "out of memory");
    h->line[h->n++] = line;
    return 0;
}

void stk_http_headers_free(stk_http_headers *h)
{
    for (uint32_t i = 0; i < h->n; i++)
        free(h->line[i]);
    h->n = 0;
}

int stk_url_encode(const char *in, bool keep_slash, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        unsigned char c = *p;
        bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/');
        if (keep) {
            if (o + 1 >= cap)
                return stk_fail(STK_ELIMIT, "url: encoded text longer than %zu bytes", cap);
            out[o++] = (char)c;
        } else {
            if (o + 3 >= cap)
                return stk_fail(STK_ELIMIT, "url: encoded text longer than %zu bytes", cap);
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    if (o >= cap)
        return stk_fail(STK_ELIMIT, "url: encoded text longer than %zu bytes", cap);
    out[o] = 0;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Requests and the engine                                                   */
/* ------------------------------------------------------------------------ */

enum { REQ_QUEUED, REQ_RUNNING, REQ_BACKOFF, REQ_DONE };

#define ERROR_BODY_MAX 65536 /* what is kept of a non-2xx response's body */

struct stk_http_request {
    /* The description (copies, owned; body, dest, sign_ctx, done_ctx lent). */
    char *method;
    char *url;
    char *url_shown; /* the URL without its query (messages, logs) */
    uint64_t range_off, range_len;
    char *expect_etag, *expect_last_modified; /* or NULL */
    uint64_t expect_total;
    stk_http_headers headers;
    const void *body;
    size_t body_size;
    stk_http_sign_fn sign;
    void *sign_ctx;
    uint8_t *dest;
    size_t dest_cap;
    size_t max_body;
    stk_http_policy policy;
    void (*done)(void *ctx, stk_http_request *r);
    void *done_ctx;

    /* Transfer state: the I/O thread's while the request runs. */
    CURL *easy;
    struct curl_slist *slist;
    char errbuf[CURL_ERROR_SIZE];
    size_t upload_pos;
    uint64_t received;      /* body bytes of this attempt (2xx) */
    char *collect;          /* body collected (dest NULL), or a non-2xx body */
    size_t collect_size, collect_cap;
    bool collect_error;     /* collect holds an error body */
    bool overflow;          /* the body did not fit: not retried */
    bool ignores_range;     /* a 200 to a ranged GET */
    bool wrong_range;       /* a 206 for other bytes than asked (checked on its first byte) */
    bool range_checked;     /* the 2xx of a ranged GET was looked at (on_body) */
    bool changed;           /* the answer's identity is not the expected one */
    long status;            /* the attempt's status line */
    uint64_t content_length;
    uint64_t total_size;
    uint64_t cr_first, cr_last; /* a Content-Range's bytes (cr_last UINT64_MAX: none) */
    uint32_t retry_after_ms;
    char etag[128];
    char last_modified[64];
    double started;         /* first attempt (stk_now) */
    double retry_at;        /* REQ_BACKOFF: when */

    /* Guarded by eng.mu. */
    int state;
    bool cancel;
    bool detached;          /* freed by the engine at completion */
    pthread_cond_t cv;
    stk_http_request *next; /* incoming / backoff / running list link */
    stk_http_response resp; /* filled at completion */
};

static struct {
    pthread_mutex_t mu;
    bool started;     /* the I/O thread runs */
    bool stopping;    /* shutdown asked */
    pthread_t thread;
    CURLM *multi;
    stk_http_request *incoming; /* submitted, not yet attempted (FIFO via tail) */
    stk_http_request *incoming_tail;
    stk_http_request *backoff;  /* waiting to retry */
    stk_http_request *running;  /* attempts in curl */
    uint32_t cancels;           /* cancel requests not yet looked at */
    uint64_t rng;               /* jitter (splitmix64 state; I/O thread) */
} eng = {.mu = PTHREAD_MUTEX_INITIALIZER};

static struct {
    _Atomic uint64_t requests, attempts, retries, failures, bytes_received, bytes_sent;
    _Atomic uint32_t in_flight;
} stats;

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void child_after_fork(void)
{
    pthread_mutex_init(&eng.mu, NULL);
    eng.started = eng.stopping = false;
    eng.multi = NULL; /* the parent's: abandoned */
    eng.incoming = eng.incoming_tail = eng.backoff = eng.running = NULL;
    eng.cancels = 0;
    atomic_store(&stats.in_flight, 0);
}

static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
    pthread_atfork(NULL, NULL, child_after_fork);
}

static void list_remove(stk_http_request **head, stk_http_request *r)
{
    for (stk_http_request **p = head; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            r->next = NULL;
            return;
        }
}

static uint64_t next_random(void)
{
    uint64_t z = (eng.rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ------------------------------------------------------------------------ */
/* libcurl callbacks (I/O thread)                                            */
/* ------------------------------------------------------------------------ */

static bool status_ok(long status) { return status >= 200 && status < 300; }

/* Append to the collect buffer, up to `limit` bytes in all. */
static bool collect_append(stk_http_request *r, const char *p, size_t n, size_t limit)
{
    if (r->collect_size + n > limit)
        return false;
    if (r->collect_size + n + 1 > r->collect_cap) {
        size_t cap = r->collect_cap ? r->collect_cap : 4096;
        while (cap < r->collect_size + n + 1)
            cap *= 2;
        char *b = realloc(r->collect, cap);
        if (!b)
            return false;
        r->collect = b;
        r->collect_cap = cap;
    }
    memcpy(r->collect + r->collect_size, p, n);
    r->collect_size += n;
    r->collect[r->collect_size] = 0;
    return true;
}

/* Is the answer to a ranged GET from the object the request expects
 * (desc.expect_*)? The total size (a 206's or 416's Content-Range total, a
 * 200's Content-Length) and the validator (the ETag when both sides have
 * one, else Last-Modified) are compared; a side without one compares
 * nothing. False with what differs in r->resp.changed. */
static bool identity_matches(stk_http_request *r)
{
    char *why = r->resp.changed;
    size_t cap = sizeof r->resp.changed;
    uint64_t total = r->status == 206 || r->status == 416 ? r->total_size : r->content_length;
    if (r->expect_total && total != UINT64_MAX && total != r->expect_total) {
        snprintf(why, cap, "the server announced %" PRIu64 " bytes at open, the object now has %" PRIu64,
                 r->expect_total, total);
        return false;
    }
    if (r->expect_etag && r->etag[0]) {
        if (strcmp(r->etag, r->expect_etag) != 0) {
            snprintf(why, cap, "ETag %s, was %s at open", r->etag, r->expect_etag);
            return false;
        }
        return true;
    }
    if (r->expect_last_modified && r->last_modified[0] &&
        strcmp(r->last_modified, r->expect_last_modified) != 0) {
        snprintf(why, cap, "Last-Modified %s, was %s at open", r->last_modified,
                 r->expect_last_modified);
        return false;
    }
    return true;
}

/* Does a 206 carry exactly the bytes asked for, by its own account? (The
 * body's length is counted as it comes: fewer bytes than announced is a
 * truncated transfer.) */
static bool range_matches(const stk_http_request *r)
{
    return r->cr_first == r->range_off && r->cr_last == r->range_off + r->range_len - 1 &&
           (r->content_length == UINT64_MAX || r->content_length == r->range_len);
}

/* The 2xx answer of a ranged GET, once, before its first byte is kept: 0
 * (take it), or -1 with the flag that says why not: `changed` (another
 * object: the request ends), `wrong_range` (a 206 for other bytes, or of
 * another length, than asked: a broken proxy or CDN; retried, and its bytes
 * are never handed on), `ignores_range` (any other 2xx, unless it is the
 * whole object and that is exactly the range asked: refused). */
static int range_check(stk_http_request *r)
{
    r->range_checked = true;
    if (!identity_matches(r)) {
        r->changed = true;
        return -1;
    }
    if (r->status == 206) {
        if (!range_matches(r)) {
            r->wrong_range = true;
            return -1;
        }
        return 0;
    }
    if (!(r->range_off == 0 && r->content_length == r->range_len)) {
        r->ignores_range = true;
        return -1;
    }
    return 0;
}

/* What was wrong with a 206 that range_check refused, for the retry line and
 * the final message: the transfer is blamed, not the object. */
static void wrong_range_reason(const stk_http_request *r, char *reason, size_t cap)
{
    char asked[64], cl[48] = "";
    snprintf(asked, sizeof asked, "bytes %" PRIu64 "-%" PRIu64, r->range_off,
             r->range_off + r->range_len - 1);
    if (r->content_length != UINT64_MAX && r->content_length != r->range_len)
        snprintf(cl, sizeof cl, ", a %" PRIu64 "-byte body", r->content_length);
    if (r->cr_last == UINT64_MAX)
        snprintf(reason, cap, "HTTP 206 without a Content-Range of one range%s for %s asked",
                 cl, asked);
    else
        snprintf(reason, cap,
                 "HTTP 206 for other bytes than asked: Content-Range bytes %" PRIu64 "-%" PRIu64
                 "%s for %s (a broken proxy or cache on the way?)",
                 r->cr_first, r->cr_last, cl, asked);
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ctx)
{
    stk_http_request *r = ctx;
    size_t n = size * nmemb;
    atomic_fetch_add_explicit(&stats.bytes_received, n, memory_order_relaxed);
    if (!status_ok(r->status)) {
        r->collect_error = true;
        if (r->collect_size < ERROR_BODY_MAX)
            collect_append(r, p, n < ERROR_BODY_MAX - r->collect_size ? n : ERROR_BODY_MAX - r->collect_size,
                           ERROR_BODY_MAX);
        return n;
    }
    /* A ranged GET's answer is looked at before any of its bytes is kept:
     * (returning 0 aborts the transfer: CURLE_WRITE_ERROR) */
    if (r->range_len && !r->range_checked && range_check(r) != 0)
        return 0;
    if (r->dest) {
        if (r->received + n > r->dest_cap) {
            r->overflow = true;
            return 0;
        }
        memcpy(r->dest + r->received, p, n);
    } else if (!collect_append(r, p, n, r->max_body)) {
        r->overflow = true;
        return 0;
    }
    r->received += n;
    return n;
}

/* Header value after "Name:", trimmed, into out. */
static bool header_value(const char *line, size_t n, const char *name, char *out, size_t cap)
{
    size_t k = strlen(name);
    if (n <= k || strncasecmp(line, name, k) != 0 || line[k] != ':')
        return false;
    const char *v = line + k + 1, *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
    size_t len = (size_t)(end - v) < cap - 1 ? (size_t)(end - v) : cap - 1;
    memcpy(out, v, len);
    out[len] = 0;
    return true;
}

/* "bytes FIRST-LAST/TOTAL" (TOTAL may be "*"), or "bytes *" "/TOTAL" (a 416):
 * what is missing or does not parse stays UINT64_MAX. The range is what the
 * server says it sent; it is compared with the one asked for (range_check),
 * never trusted to place the bytes. */
static void parse_content_range(const char *v, uint64_t *first, uint64_t *last, uint64_t *total)
{
    *first = *last = *total = UINT64_MAX;
    if (strncasecmp(v, "bytes", 5) != 0)
        return;
    v += 5;
    while (*v == ' ' || *v == '=')
        v++;
    char *end;
    if (*v >= '0' && *v <= '9') {
        uint64_t a = strtoull(v, &end, 10);
        if (*end != '-' || end[1] < '0' || end[1] > '9')
            return;
        uint64_t b = strtoull(end + 1, &end, 10);
        if (b < a)
            return;
        *first = a;
        *last = b;
        v = end;
    } else if (*v == '*') {
        v++;
    } else {
        return;
    }
    if (*v == '/' && v[1] >= '0' && v[1] <= '9') {
        uint64_t t = strtoull(v + 1, &end, 10);
        if (*end == 0)
            *total = t;
    }
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ctx)
{
    stk_http_request *r = ctx;
    size_t n = size * nmemb;
    char v[256];
    if (n >= 5 && memcmp(p, "HTTP/", 5) == 0) {
        /* A new response (after a 100 Continue or a redirect): forget the last one's. */
        const char *sp = memchr(p, ' ', n);
        r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        r->content_length = r->total_size = UINT64_MAX;
        r->cr_first = r->cr_last = UINT64_MAX;
        r->retry_after_ms = 0;
        r->etag[0] = r->last_modified[0] = 0;
    } else if (header_value(p, n, "Content-Length", v, sizeof v)) {
        r->content_length = strtoull(v, NULL, 10);
    } else if (header_value(p, n, "Content-Range", v, sizeof v)) {
        parse_content_range(v, &r->cr_first, &r->cr_last, &r->total_size);
    } else if (header_value(p, n, "ETag", r->etag, sizeof r->etag)) {
    } else if (header_value(p, n, "Last-Modified", r->last_modified, sizeof r->last_modified)) {
    } else if (header_value(p, n, "Retry-After", v, sizeof v)) {
        char *end;
        unsigned long s = strtoul(v, &end, 10);
        if (end != v && s < 3600)
            r->retry_after_ms = (uint32_t)s * 1000;
    }
    return n;
}

static size_t on_upload(char *p, size_t size, size_t nmemb, void *ctx)
{
    stk_http_request *r = ctx;
    size_t n = size * nmemb, left = r->body_size - r->upload_pos;
    if (n > left)
        n = left;
    memcpy(p, (const uint8_t *)r->body + r->upload_pos, n);
    r->upload_pos += n;
    atomic_fetch_add_explicit(&stats.bytes_sent, n, memory_order_relaxed);
    return n;
}

static int on_seek(void *ctx, curl_off_t offset, int origin)
{
    stk_http_request *r = ctx;
    if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > r->body_size)
        return CURL_SEEKFUNC_CANTSEEK;
    r->upload_pos = (size_t)offset;
    return CURL_SEEKFUNC_OK;
}

/* ------------------------------------------------------------------------ */
/* Attempts (I/O thread, eng.mu not held)                                    */
/* ------------------------------------------------------------------------ */

static void attempt_reset(stk_http_request *r)
{
    if (r->easy) {
        curl_easy_cleanup(r->easy);
        r->easy = NULL;
    }
    curl_slist_free_all(r->slist);
    r->slist = NULL;
    r->errbuf[0] = 0;
    r->upload_pos = 0;
    r->received = 0;
    r->collect_size = 0;
    r->collect_error = r->overflow = r->ignores_range = false;
    r->wrong_range = r->range_checked = r->changed = false;
    r->resp.changed[0] = 0;
    r->status = 0;
    r->content_length = r->total_size = UINT64_MAX;
    r->cr_first = r->cr_last = UINT64_MAX;
    r->retry_after_ms = 0;
}

/* Set up the next attempt's easy handle. 0, or a code (message in
 * r->resp.message) that ends the request. */
static int attempt_prepare(stk_http_request *r)
{
    attempt_reset(r);
    stk_http_headers h = {0};
    int rc = 0;
    for (uint32_t i = 0; i < r->headers.n && rc == 0; i++)
        rc = stk_http_headers_add(&h, "%s", r->headers.line[i]);
    if (rc == 0 && r->range_len)
        rc = stk_http_headers_add(&h, "Range: bytes=%" PRIu64 "-%" PRIu64, r->range_off,
                                  r->range_off + r->range_len - 1);
    if (rc == 0 && r->sign) {
        stk_http_sign_input in = {r->method, r->url, &h, r->body, r->body_size, r->range_off,
                                  r->range_len};
        rc = r->sign(r->sign_ctx, &in, &h);
    }
    if (rc == 0 && r->body)
        rc = stk_http_headers_add(&h, "Expect:"); /* no 100-continue round trip */
    for (uint32_t i = 0; i < h.n && rc == 0; i++) {
        struct curl_slist *s = curl_slist_append(r->slist, h.line[i]);
        if (!s)
            rc = stk_fail(STK_ENOMEM, "out of memory");
        else
            r->slist = s;
    }
    stk_http_headers_free(&h);
    if (rc == 0 && !(r->easy = curl_easy_init()))
        rc = stk_fail(STK_ENOMEM, "http: cannot create a transfer");
    if (rc < 0) {
        snprintf(r->resp.message, sizeof r->resp.message, "%s", stk_errmsg());
        return rc;
    }
    CURL *e = r->easy;
    curl_easy_setopt(e, CURLOPT_URL, r->url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->slist);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)r->policy.connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, (long)r->policy.low_speed_bytes);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)r->policy.low_speed_time_s);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L * 1024);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    /* The path as given: a signed S3 key may hold "." or ".." segments. */
    curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
    const char *h2 = getenv("STOKER_HTTP2");
    /* Prefer an HTTP/2 stream to a new connection, where HTTP/2 is possible:
     * over TLS (ALPN) or with prior knowledge. Not on plain http://, which
     * stays HTTP/1.1: there curl would hold every other transfer to the host
     * until the first one's response (to learn whether its connection
     * multiplexes), so one stalled request would stall them all. */
    bool h2_prior = h2 && strcmp(h2, "prior-knowledge") == 0;
    if (h2_prior || strncmp(r->url, "https://", 8) == 0)
        curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
    if (h2_prior)
        curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
    else if (h2 && strcmp(h2, "off") == 0)
        curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    else
        curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    /* A CA bundle of the user's (a private store's CA): the variables curl's
     * own tool and OpenSSL read, which the library does not. */
    const char *ca = getenv("STOKER_CA_FILE");
    if (!ca || !*ca)
        ca = getenv("CURL_CA_BUNDLE");
    if (!ca || !*ca)
        ca = getenv("SSL_CERT_FILE");
    if (ca && *ca)
        curl_easy_setopt(e, CURLOPT_CAINFO, ca);
    const char *insecure = getenv("STOKER_HTTP_INSECURE");
    if (insecure && strcmp(insecure, "1") == 0) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (r->policy.deadline_ms) {
        double left_ms = r->policy.deadline_ms - (stk_now() - r->started) * 1000.0;
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(left_ms > 1 ? left_ms : 1));
    }
    bool put = strcmp(r->method, "PUT") == 0, post = strcmp(r->method, "POST") == 0;
    if (put || post) {
        /* The body goes out through on_upload, rewound by on_seek when
         * libcurl re-sends it on a fresh connection. */
        curl_easy_setopt(e, CURLOPT_READFUNCTION, on_upload);
        curl_easy_setopt(e, CURLOPT_READDATA, r);
        curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(e, CURLOPT_SEEKDATA, r);
    }
    if (strcmp(r->method, "HEAD") == 0) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (put) {
        curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_size);
    } else if (post) {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_size);
    } else if (strcmp(r->method, "GET") != 0) {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r->method);
    }
    return 0;
}

/* The S3-style error code in an XML error body ("<Code>X</Code>"), or "". */
static void error_code_of(const stk_http_request *r, char *out, size_t cap)
{
    out[0] = 0;
    if (!r->collect_error || !r->collect)
        return;
    const char *a = strstr(r->collect, "<Code>");
    const char *b = a ? strstr(a, "</Code>") : NULL;
    if (!a || !b)
        return;
    a += 6;
    size_t n = (size_t)(b - a) < cap - 1 ? (size_t)(b - a) : cap - 1;
    memcpy(out, a, n);
    out[n] = 0;
}

/* A ranged GET's answer that range_check refused: 1 retry (reason set), or
 * < 0 (message set). */
static int range_refused(stk_http_request *r, char *reason, size_t reason_cap)
{
    if (r->changed) {
        snprintf(r->resp.message, sizeof r->resp.message,
                 "%s %s: the object changed while being read (%s)", r->method, r->url_shown,
                 r->resp.changed);
        return STK_EFORMAT;
    }
    if (r->wrong_range) {
        wrong_range_reason(r, reason, reason_cap);
        return 1;
    }
    snprintf(r->resp.message, sizeof r->resp.message,
             "%s %s: the server ignores Range requests (HTTP %ld for bytes %" PRIu64 "-%" PRIu64
             ")", r->method, r->url_shown, r->status, r->range_off,
             r->range_off + r->range_len - 1);
    return STK_ENETWORK;
}

/* What became of an attempt: 0 done, 1 retry, < 0 failed (message set in
 * r->resp.message). */
static int attempt_finished(stk_http_request *r, CURLcode res, char *reason, size_t reason_cap)
{
    char code[96];
    error_code_of(r, code, sizeof code);
    reason[0] = 0;
    if (res == CURLE_OK) {
        long st = r->status;
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &st);
        r->status = st;
        if (status_ok(st)) {
            /* (an empty body never reached on_body's check) */
            if (r->range_len && !r->range_checked && range_check(r) != 0)
                return range_refused(r, reason, reason_cap);
            if (r->range_len && r->received != r->range_len) {
                snprintf(reason, reason_cap, "truncated body: %" PRIu64 " of %" PRIu64 " bytes",
                         r->received, r->range_len);
                return 1;
            }
            if (strcmp(r->method, "HEAD") != 0 && r->content_length != UINT64_MAX &&
                r->received != r->content_length) {
                snprintf(reason, reason_cap, "truncated body: %" PRIu64 " of %" PRIu64 " bytes",
                         r->received, r->content_length);
                return 1;
            }
            return 0;
        }
        if (st == 416 && r->range_len && !identity_matches(r)) {
            /* a range past the end of an object that shrank */
            r->changed = true;
            return range_refused(r, reason, reason_cap);
        }
        if (st == 416 && r->range_len && r->expect_total &&
            r->range_off + r->range_len <= r->expect_total) {
            /* a range inside the object as it is: the answer, or the request on
             * its way (a proxy that rewrote it), is wrong */
            snprintf(reason, reason_cap,
                     "HTTP 416 for bytes %" PRIu64 "-%" PRIu64 " of a %" PRIu64 "-byte object",
                     r->range_off, r->range_off + r->range_len - 1, r->expect_total);
            return 1;
        }
        if (st == 408 || st == 429 || st >= 500) {
            snprintf(reason, reason_cap, "HTTP %ld%s%s", st, code[0] ? " " : "", code);
            return 1;
        }
        snprintf(r->resp.message, sizeof r->resp.message, "%s %s: HTTP %ld%s%s", r->method,
                 r->url_shown, st, code[0] ? " " : "", code);
        if (st == 401 || st == 403)
            return STK_EACCESS;
        if (st == 404)
            return STK_ENOENT;
        return STK_ENETWORK;
    }
    if (r->changed || r->wrong_range || r->ignores_range)
        return range_refused(r, reason, reason_cap);
    if (r->overflow && r->range_len) {
        snprintf(reason, reason_cap, "HTTP %ld with more than the %" PRIu64 " bytes asked", r->status,
                 r->range_len);
        return 1;
    }
    if (r->overflow) {
        snprintf(r->resp.message, sizeof r->resp.message,
                 "%s %s: the response is larger than %zu bytes", r->method, r->url_shown,
                 r->dest ? r->dest_cap : r->max_body);
        return r->dest ? STK_ENETWORK : STK_ELIMIT;
    }
    const char *why = r->errbuf[0] ? r->errbuf : curl_easy_strerror(res);
    switch (res) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_COULDNT_RESOLVE_PROXY:
        snprintf(reason, reason_cap, "%s", why);
        return 1;
    default:
        snprintf(r->resp.message, sizeof r->resp.message, "%s %s: %s", r->method, r->url_shown,
                 why);
        return STK_ENETWORK;
    }
}

/* ------------------------------------------------------------------------ */
/* The I/O thread                                                            */
/* ------------------------------------------------------------------------ */

static void request_destroy(stk_http_request *r);

/* Complete r (eng.mu held): fill the response, call done, signal (and free
 * a detached request). */
static void complete_locked(stk_http_request *r, int rc)
{
    stk_http_response *o = &r->resp;
    o->rc = rc;
    o->status = r->status;
    o->bytes = r->received;
    o->content_length = r->content_length;
    o->total_size = r->total_size != UINT64_MAX ? r->total_size : r->content_length;
    snprintf(o->etag, sizeof o->etag, "%s", r->etag);
    snprintf(o->last_modified, sizeof o->last_modified, "%s", r->last_modified);
    o->body = r->collect;
    o->body_size = r->collect_size;
    if (rc == 0)
        o->message[0] = 0;
    atomic_fetch_add_explicit(&stats.requests, 1, memory_order_relaxed);
    if (rc < 0)
        atomic_fetch_add_explicit(&stats.failures, 1, memory_order_relaxed);
    void (*done)(void *, stk_http_request *) = r->done;
    void *ctx = r->done_ctx;
    if (done) {
        /* With the lock dropped; r is not DONE yet, so nobody frees it
         * under the callback. */
        pthread_mutex_unlock(&eng.mu);
        done(ctx, r);
        pthread_mutex_lock(&eng.mu);
    }
    r->state = REQ_DONE;
    pthread_cond_broadcast(&r->cv);
    if (r->detached)
        request_destroy(r);
}

static bool quiet(void)
{
    const char *q = getenv("STOKER_HTTP_QUIET");
    return q && strcmp(q, "1") == 0;
}

/* Start attempt for r (eng.mu held, dropped around curl). */
static void start_attempt_locked(stk_http_request *r)
{
    r->state = REQ_RUNNING;
    r->resp.attempts++;
    pthread_mutex_unlock(&eng.mu);
    int rc = attempt_prepare(r);
    atomic_fetch_add_explicit(&stats.attempts, 1, memory_order_relaxed);
    if (rc == 0 && curl_multi_add_handle(eng.multi, r->easy) != CURLM_OK) {
        snprintf(r->resp.message, sizeof r->resp.message, "%s %s: cannot start the transfer",
                 r->method, r->url_shown);
        rc = STK_ENETWORK;
    }
    pthread_mutex_lock(&eng.mu);
    if (rc < 0) {
        complete_locked(r, rc);
        return;
    }
    atomic_fetch_add_explicit(&stats.in_flight, 1, memory_order_relaxed);
    r->next = eng.running;
    eng.running = r;
}

/* An attempt's transfer ended with `res` (eng.mu held). */
static void on_done_locked(stk_http_request *r, CURLcode res)
{
    list_remove(&eng.running, r);
    atomic_fetch_sub_explicit(&stats.in_flight, 1, memory_order_relaxed);
    pthread_mutex_unlock(&eng.mu);
    curl_multi_remove_handle(eng.multi, r->easy);
    char reason[CURL_ERROR_SIZE + 128];
    int v = attempt_finished(r, res, reason, sizeof reason);
    pthread_mutex_lock(&eng.mu);
    if (r->cancel) {
        snprintf(r->resp.message, sizeof r->resp.message, "%s %s: cancelled", r->method,
                 r->url_shown);
        complete_locked(r, STK_EINTR);
        return;
    }
    if (v != 1) {
        complete_locked(r, v);
        return;
    }
    /* Retry? */
    double now = stk_now();
    uint32_t n = r->resp.attempts;
    uint64_t cap = r->policy.backoff_ms;
    for (uint32_t i = 1; i < n && cap < r->policy.backoff_max_ms; i++)
        cap *= 2;
    if (cap > r->policy.backoff_max_ms)
        cap = r->policy.backoff_max_ms;
    double delay_ms = cap ? (double)(next_random() % (cap + 1)) : 0;
    if (r->retry_after_ms)
        delay_ms = delay_ms > r->retry_after_ms ? delay_ms
                   : (r->retry_after_ms < r->policy.backoff_max_ms ? r->retry_after_ms
                                                                   : r->policy.backoff_max_ms);
    /* (an attempt with less than MIN_ATTEMPT_MS left would only time out, and
     * its "timed out after 1 ms" would hide the reason that counts) */
    enum { MIN_ATTEMPT_MS = 100 };
    bool past_deadline = r->policy.deadline_ms &&
                         (now + delay_ms / 1000.0 - r->started) * 1000.0 + MIN_ATTEMPT_MS >=
                             r->policy.deadline_ms;
    if (n >= r->policy.max_attempts || past_deadline) {
        char dl[64] = "";
        if (past_deadline && n < r->policy.max_attempts)
            snprintf(dl, sizeof dl, ", deadline of %u ms reached", r->policy.deadline_ms);
        snprintf(r->resp.message, sizeof r->resp.message, "%s %s: %s (%u attempt%s%s)", r->method,
                 r->url_shown, reason, n, n == 1 ? "" : "s", dl);
        complete_locked(r, STK_ENETWORK);
        return;
    }
    if (!quiet())
        fprintf(stderr, "stoker: retrying %s %s (attempt %u of %u in %.0f ms): %s\n", r->method,
                r->url_shown, n + 1, r->policy.max_attempts, delay_ms, reason);
    atomic_fetch_add_explicit(&stats.retries, 1, memory_order_relaxed);
    r->state = REQ_BACKOFF;
    r->retry_at = now + delay_ms / 1000.0;
    r->next = eng.backoff;
    eng.backoff = r;
}

/* Cancel what was asked to stop (eng.mu held). */
static void sweep_cancels_locked(void)
{
    eng.cancels = 0;
    for (stk_http_request **p = &eng.backoff; *p;) {
        stk_http_request *r = *p;
        if (r->cancel) {
            *p = r->next;
            r->next = NULL;
            snprintf(r->resp.message, sizeof r->resp.message, "%s %s: cancelled", r->method,
                     r->url_shown);
            complete_locked(r, STK_EINTR);
            p = &eng.backoff; /* the lock was dropped: start over */
        } else {
            p = &r->next;
        }
    }
    for (stk_http_request **p = &eng.running; *p;) {
        stk_http_request *r = *p;
        if (r->cancel) {
            *p = r->next;
            r->next = NULL;
            atomic_fetch_sub_explicit(&stats.in_flight, 1, memory_order_relaxed);
            pthread_mutex_unlock(&eng.mu);
            curl_multi_remove_handle(eng.multi, r->easy);
            pthread_mutex_lock(&eng.mu);
            snprintf(r->resp.message, sizeof r->resp.message, "%s %s: cancelled", r->method,
                     r->url_shown);
            complete_locked(r, STK_EINTR);
            p = &eng.running;
        } else {
            p = &r->next;
        }
    }
}

static void *io_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&eng.mu);
    for (;;) {
        if (eng.cancels)
            sweep_cancels_locked();
        /* New requests, then retries that are due. */
        while (eng.incoming) {
            stk_http_request *r = eng.incoming;
            eng.incoming = r->next;
            if (!eng.incoming)
                eng.incoming_tail = NULL;
            r->next = NULL;
            if (r->cancel) {
                snprintf(r->resp.message, sizeof r->resp.message, "%s %s: cancelled", r->method,
                         r->url_shown);
                complete_locked(r, STK_EINTR);
                continue;
            }
            start_attempt_locked(r);
        }
        double now = stk_now(), next_retry = 0;
        for (stk_http_request **p = &eng.backoff; *p;) {
            stk_http_request *r = *p;
            if (r->retry_at <= now) {
                *p = r->next;
                r->next = NULL;
                start_attempt_locked(r);
                p = &eng.backoff;
            } else {
                if (!next_retry || r->retry_at < next_retry)
                    next_retry = r->retry_at;
                p = &r->next;
            }
        }
        if (eng.stopping && !eng.running && !eng.backoff && !eng.incoming)
            break;
        pthread_mutex_unlock(&eng.mu);

        int still;
        curl_multi_perform(eng.multi, &still);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(eng.multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            stk_http_request *r = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
            CURLcode res = m->data.result;
            pthread_mutex_lock(&eng.mu);
            on_done_locked(r, res);
            pthread_mutex_unlock(&eng.mu);
        }
        /* (requests the loop above put into backoff are due too: without
         * them a lone retry would wait for the 1 s poll, not its delay) */
        pthread_mutex_lock(&eng.mu);
        for (stk_http_request *r = eng.backoff; r; r = r->next)
            if (!next_retry || r->retry_at < next_retry)
                next_retry = r->retry_at;
        pthread_mutex_unlock(&eng.mu);
        int timeout = 1000;
        if (next_retry) {
            double ms = (next_retry - stk_now()) * 1000.0;
            timeout = ms < 0 ? 0 : ms < timeout ? (int)ms + 1 : timeout;
        }
        curl_multi_poll(eng.multi, NULL, 0, timeout, NULL);
        pthread_mutex_lock(&eng.mu);
    }
    pthread_mutex_unlock(&eng.mu);
    return NULL;
}

/* Start the engine (eng.mu held). */
static int start_locked(void)
{
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK)
        return stk_fail(STK_ENETWORK, "http: libcurl failed to initialise: %s",
                        curl_easy_strerror(global_rc));
    if (!eng.multi && !(eng.multi = curl_multi_init()))
        return stk_fail(STK_ENOMEM, "http: cannot create the transfer engine");
    stk_http_policy p;
    stk_http_policy_default(&p);
    curl_multi_setopt(eng.multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)p.max_connections);
    curl_multi_setopt(eng.multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
    eng.rng = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&p;
    eng.stopping = false;
    int e = pthread_create(&eng.thread, NULL, io_main, NULL);
    if (e)
        return stk_fail(STK_ETHREAD, "http: cannot start the I/O thread: %s", strerror(e));
    eng.started = true;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Public functions                                                          */
/* ------------------------------------------------------------------------ */

static void request_destroy(stk_http_request *r)
{
    attempt_reset(r);
    free(r->collect);
    stk_http_headers_free(&r->headers);
    free(r->method);
    free(r->url);
    free(r->url_shown);
    free(r->expect_etag);
    free(r->expect_last_modified);
    pthread_cond_destroy(&r->cv);
    free(r);
}

int stk_http_submit(const stk_http_request_desc *d, stk_http_request **out)
{
    *out = NULL;
    if (!d->method || !d->url)
        return stk_fail(STK_EINVAL, "http: a request needs a method and a URL");
    if (d->range_len && d->dest && d->dest_cap < d->range_len)
        return stk_fail(STK_EINVAL, "http: a %" PRIu64 "-byte range into a %zu-byte buffer",
                        d->range_len, d->dest_cap);
    stk_http_request *r = calloc(1, sizeof *r);
    if (!r)
        return stk_fail(STK_ENOMEM, "out of memory");
    pthread_cond_init(&r->cv, NULL);
    r->method = strdup(d->method);
    r->url = strdup(d->url);
    r->url_shown = r->url ? strndup(r->url, strcspn(r->url, "?")) : NULL;
    if (!r->method || !r->url || !r->url_shown) {
        request_destroy(r);
        return stk_fail(STK_ENOMEM, "out of memory");
    }
    r->range_off = d->range_off;
    r->range_len = d->range_len;
    r->expect_total = d->range_len ? d->expect_total : 0;
    if (d->range_len && d->expect_etag && *d->expect_etag &&
        !(r->expect_etag = strdup(d->expect_etag))) {
        request_destroy(r);
        return stk_fail(STK_ENOMEM, "out of memory");
    }
    if (d->range_len && d->expect_last_modified && *d->expect_last_modified &&
        !(r->expect_last_modified = strdup(d->expect_last_modified))) {
        request_destroy(r);
        return stk_fail(STK_ENOMEM, "out of memory");
    }
    if (d->headers)
        for (uint32_t i = 0; i < d->headers->n; i++)
            if (stk_http_headers_add(&r->headers, "%s", d->headers->line[i]) < 0) {
                request_destroy(r);
                return STK_ENOMEM;
            }
    r->body = d->body;
    r->body_size = d->body ? d->body_size : 0;
    r->sign = d->sign;
    r->sign_ctx = d->sign_ctx;
    r->dest = d->dest;
    r->dest_cap = d->dest_cap;
    r->max_body = d->max_body ? d->max_body : (size_t)16 << 20;
    if (d->policy)
        r->policy = *d->policy;
    else
        stk_http_policy_default(&r->policy);
    if (r->policy.max_attempts == 0)
        r->policy.max_attempts = 1;
    r->done = d->done;
    r->done_ctx = d->done_ctx;
    r->started = stk_now();
    r->state = REQ_QUEUED;
    r->content_length = r->total_size = UINT64_MAX;

    pthread_mutex_lock(&eng.mu);
    int rc = eng.started ? 0 : start_locked();
    if (rc < 0) {
        pthread_mutex_unlock(&eng.mu);
        request_destroy(r);
        return rc;
    }
    if (eng.incoming_tail)
        eng.incoming_tail->next = r;
    else
        eng.incoming = r;
    eng.incoming_tail = r;
    CURLM *multi = eng.multi;
    pthread_mutex_unlock(&eng.mu);
    curl_multi_wakeup(multi);
    *out = r;
    return 0;
}

static int finish_wait(stk_http_request *r)
{
    int rc = r->resp.rc;
    if (rc < 0)
        stk_fail(rc, "%s", r->resp.message);
    return rc;
}

int stk_http_wait(stk_http_request *r)
{
    pthread_mutex_lock(&eng.mu);
    while (r->state != REQ_DONE)
        pthread_cond_wait(&r->cv, &eng.mu);
    pthread_mutex_unlock(&eng.mu);
    return finish_wait(r);
}

int stk_http_wait_timeout(stk_http_request *r, int timeout_ms)
{
    if (timeout_ms < 0)
        return stk_http_wait(r);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&eng.mu);
    while (r->state != REQ_DONE)
        if (pthread_cond_timedwait(&r->cv, &eng.mu, &ts) == ETIMEDOUT)
            break;
    bool done = r->state == REQ_DONE;
    pthread_mutex_unlock(&eng.mu);
    return done ? finish_wait(r) : STK_ETIMEDOUT;
}

bool stk_http_done(const stk_http_request *r)
{
    pthread_mutex_lock(&eng.mu);
    bool done = r->state == REQ_DONE;
    pthread_mutex_unlock(&eng.mu);
    return done;
}

const stk_http_response *stk_http_result(const stk_http_request *r) { return &r->resp; }

void stk_http_cancel(stk_http_request *r)
{
    pthread_mutex_lock(&eng.mu);
    CURLM *multi = NULL;
    if (r->state != REQ_DONE && !r->cancel) {
        r->cancel = true;
        eng.cancels++;
        multi = eng.multi;
    }
    pthread_mutex_unlock(&eng.mu);
    if (multi)
        curl_multi_wakeup(multi);
}

void stk_http_request_free(stk_http_request *r)
{
    if (!r)
        return;
    stk_http_cancel(r);
    pthread_mutex_lock(&eng.mu);
    while (r->state != REQ_DONE)
        pthread_cond_wait(&r->cv, &eng.mu);
    pthread_mutex_unlock(&eng.mu);
    request_destroy(r);
}

void stk_http_request_detach(stk_http_request *r)
{
    pthread_mutex_lock(&eng.mu);
    bool done = r->state == REQ_DONE;
    r->detached = !done;
    pthread_mutex_unlock(&eng.mu);
    if (done)
        request_destroy(r);
}

int stk_http_perform(const stk_http_request_desc *d, stk_http_response *out)
{
    memset(out, 0, sizeof *out);
    stk_http_request *r;
    int rc = stk_http_submit(d, &r);
    if (rc < 0) {
        out->rc = rc;
        snprintf(out->message, sizeof out->message, "%s", stk_errmsg());
        return rc;
    }
    rc = stk_http_wait(r);
    *out = r->resp;
    r->collect = NULL; /* moved to out->body */
    r->collect_size = r->collect_cap = 0;
    stk_http_request_free(r);
    return rc;
}

void stk_http_stats_get(stk_http_stats *out)
{
    out->requests = atomic_load(&stats.requests);
    out->attempts = atomic_load(&stats.attempts);
    out->retries = atomic_load(&stats.retries);
    out->failures = atomic_load(&stats.failures);
    out->bytes_received = atomic_load(&stats.bytes_received);
    out->bytes_sent = atomic_load(&stats.bytes_sent);
    out->in_flight = atomic_load(&stats.in_flight);
}

void stk_http_stats_reset(void)
{
    atomic_store(&stats.requests, 0);
    atomic_store(&stats.attempts, 0);
    atomic_store(&stats.retries, 0);
    atomic_store(&stats.failures, 0);
    atomic_store(&stats.bytes_received, 0);
    atomic_store(&stats.bytes_sent, 0);
}

void stk_http_shutdown(void)
{
    pthread_mutex_lock(&eng.mu);
    if (!eng.started) {
        pthread_mutex_unlock(&eng.mu);
        return;
    }
    for (stk_http_request *r = eng.incoming; r; r = r->next)
        r->cancel = true;
    for (stk_http_request *r = eng.backoff; r; r = r->next)
        r->cancel = true;
    for (stk_http_request *r = eng.running; r; r = r->next)
        r->cancel = true;
    eng.cancels++;
    eng.stopping = true;
    CURLM *multi = eng.multi;
    pthread_t t = eng.thread;
    pthread_mutex_unlock(&eng.mu);
    curl_multi_wakeup(multi);
    pthread_join(t, NULL);
    pthread_mutex_lock(&eng.mu);
    curl_multi_cleanup(eng.multi);
    eng.multi = NULL;
    eng.started = false;
    eng.stopping = false;
    pthread_mutex_unlock(&eng.mu);
}
