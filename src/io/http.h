/*
 * http.h — the HTTP client engine (internal), on libcurl's multi interface.
 *
 * One engine per process: a single I/O thread drives every transfer with
 * curl_multi_poll, so hundreds of range GETs can be in flight without a
 * thread each; connections are reused (HTTP/1.1 keep-alive, and HTTP/2
 * multiplexing where the server offers it over TLS, or `h2c` when
 * STOKER_HTTP2=prior-knowledge), TLS peers are verified unless
 * STOKER_HTTP_INSECURE=1. The engine starts on the first request and stops
 * when the process exits (or stk_http_shutdown, for tests).
 *
 * A request is described once (stk_http_request_desc) and may be attempted
 * several times: connection failures, resets, timeouts, HTTP 429 and 5xx and
 * bodies shorter than announced are retried with exponential backoff and
 * full jitter (policy.backoff_ms doubling up to backoff_max_ms; a 429/503's
 * Retry-After is honoured up to backoff_max_ms) until max_attempts or
 * deadline_ms, after which the request fails with STK_ENETWORK and a message
 * naming the method, the URL (without its query string's secrets: the
 * engine never prints headers), the last HTTP status or transport error and
 * the number of attempts. A 206 for other bytes than the Range asked is
 * retried like a truncated body (the transfer is at fault, not the
 * object). 401/403 fail at once with STK_EACCESS, 404 with
 * STK_ENOENT, other 4xx with STK_ENETWORK; the response body (an S3 XML
 * error) is kept for the caller to word its own message. Every retry is
 * logged to stderr (one line, "stoker: retrying GET URL (attempt 2 of 8):
 * REASON") unless STOKER_HTTP_QUIET=1.
 *
 * Signing: a request may carry a sign callback, called on the I/O thread
 * before every attempt (a SigV4 signature includes the time), which adds
 * headers (Authorization, x-amz-date, ...). Secrets live in the callback's
 * context, never in the engine's messages.
 *
 * Completion: stk_http_wait blocks the calling thread until the request is
 * done; or the desc's `done` callback runs on the I/O thread (it must not
 * block: hand the result on and return). Cancellation (stk_http_cancel,
 * and stk_http_cancel_all for shutdown) completes a request with STK_EINTR
 * promptly: the transfer is removed from the multi handle, the I/O thread is
 * woken with curl_multi_wakeup.
 *
 * Thread safety: every function may be called from any thread. A request
 * belongs to the thread that submitted it until stk_http_request_free.
 */
#ifndef STK_IO_HTTP_H
#define STK_IO_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Retry and timeout policy. stk_http_policy_default fills the defaults,
 * overridden by the environment (STOKER_HTTP_CONNECT_TIMEOUT_MS,
 * STOKER_HTTP_LOW_SPEED_TIME_S, STOKER_HTTP_MAX_ATTEMPTS,
 * STOKER_HTTP_BACKOFF_MS, STOKER_HTTP_BACKOFF_MAX_MS,
 * STOKER_HTTP_DEADLINE_MS, STOKER_HTTP_MAX_CONNECTIONS); a remote URI's
 * query may override them again (remote.c). */
typedef struct stk_http_policy {
    uint32_t connect_timeout_ms; /* 10000: TCP + TLS handshake */
    uint32_t low_speed_time_s;   /* 20: abort a transfer below low_speed_bytes/s this long */
    uint32_t low_speed_bytes;    /* 1024 */
    uint32_t max_attempts;       /* 8 (1 = no retries) */
    uint32_t backoff_ms;         /* 100: the first retry's delay (full jitter: uniform in [0, d]) */
    uint32_t backoff_max_ms;     /* 5000: the delay cap */
    uint32_t deadline_ms;        /* 120000: a request's whole life, retries included (0: none) */
    uint32_t max_connections;    /* 64: connections per host (CURLMOPT_MAX_HOST_CONNECTIONS) */
} stk_http_policy;
void stk_http_policy_default(stk_http_policy *p);

/* Extra request headers, "Name: value" lines, owned by the struct. */
#define STK_HTTP_MAX_HEADERS 16
typedef struct stk_http_headers {
    uint32_t n;
    char *line[STK_HTTP_MAX_HEADERS];
} stk_http_headers;
/* Append a line (printf-style). STK_ENOMEM, STK_ELIMIT (full). */
int stk_http_headers_add(stk_http_headers *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void stk_http_headers_free(stk_http_headers *h);

/* What a signer sees of one attempt. */
typedef struct stk_http_sign_input {
    const char *method;
    const char *url;
    const stk_http_headers *headers; /* the desc's, before signing */
    const void *body;                /* PUT/POST payload, or NULL */
    size_t body_size;
    uint64_t range_off, range_len;   /* a GET's Range (range_len 0: none) */
} stk_http_sign_input;
/* Add the signature's headers to *out (which starts as a copy of the desc's
 * headers plus the Range header, if any). 0, or a negative code with a
 * message (the request then fails with it, without retrying). */
typedef int (*stk_http_sign_fn)(void *ctx, const stk_http_sign_input *in, stk_http_headers *out);

typedef struct stk_http_request stk_http_request;

typedef struct stk_http_request_desc {
    const char *method;  /* "GET", "HEAD", "PUT", "POST", "DELETE" (copied) */
    const char *url;     /* copied */
    /* GET of bytes [range_off, range_off + range_len): range_len 0 = the
     * whole body. A 206 must say (Content-Range, Content-Length) that it
     * carries exactly those bytes and then carry range_len bytes: one for
     * other bytes or of another length (a broken proxy or CDN) is retried
     * and its bytes are never handed on; fewer bytes than announced is a
     * truncated body, retried. A 200 is taken only when it is the whole
     * object and that is exactly the range (range_off 0, Content-Length
     * range_len); any other 2xx is refused (a server without Range support:
     * STK_ENETWORK saying so). */
    uint64_t range_off, range_len;
    /* The identity the object had at open (ranged GETs only; 0 / NULL / "":
     * not compared): an answer whose total size (a 206's or 416's
     * Content-Range total, a 200's Content-Length) or validator (the ETag
     * when the answer has one, else Last-Modified) differs ends the request
     * at once with STK_EFORMAT, "the object changed while being read", what
     * differs in response.changed; nothing of its body is handed on. */
    uint64_t expect_total;
    const char *expect_etag;          /* copied */
    const char *expect_last_modified; /* copied */
    const stk_http_headers *headers;  /* extra headers (copied), or NULL */
    const void *body;    /* PUT/POST payload (lent until completion), or NULL */
    size_t body_size;
    stk_http_sign_fn sign; /* or NULL */
    void *sign_ctx;        /* lent until completion */
    /* Response body: into dest (dest_cap bytes; a ranged GET needs
     * dest_cap >= range_len) when dest is not NULL, else collected into a
     * buffer of the response (stk_http_response.body) of at most max_body
     * bytes (more: STK_ELIMIT). */
    void *dest;
    size_t dest_cap;
    size_t max_body;     /* 0: 16 MiB */
    const stk_http_policy *policy; /* copied; NULL: the defaults */
    /* Called once on the I/O thread when the request completes (success,
     * failure or cancel); must not block or call stk_http_wait. NULL: none. */
    void (*done)(void *ctx, stk_http_request *r);
    void *done_ctx;
} stk_http_request_desc;

typedef struct stk_http_response {
    int rc;                  /* 0, or the failure's code */
    long status;             /* the last HTTP status (0: none received) */
    uint32_t attempts;       /* attempts made */
    uint64_t bytes;          /* body bytes received (the final attempt) */
    uint64_t content_length; /* Content-Length of the final response (UINT64_MAX: none) */
    uint64_t total_size;     /* a 206's Content-Range total, else content_length */
    char etag[128];          /* ETag header, quotes kept ("" when none) */
    char last_modified[64];
    char *body;              /* collected body (dest NULL), NUL-terminated;
                                owned by the request */
    size_t body_size;
    char message[512];       /* the failure's message (rc < 0) */
    char changed[256];       /* what differed from desc.expect_* ("" unless the
                                request failed with STK_EFORMAT for it) */
} stk_http_response;

/* Start a request. 0 and *out, or STK_ENOMEM / STK_EINVAL / STK_ETHREAD (the
 * engine could not start). */
int stk_http_submit(const stk_http_request_desc *d, stk_http_request **out);
/* Wait for completion; returns response->rc and, when it is negative, sets
 * the calling thread's message (stk_fail) from response->message. */
int stk_http_wait(stk_http_request *r);
/* Wait at most timeout_ms: STK_ETIMEDOUT (still running, no message), or
 * as stk_http_wait. */
int stk_http_wait_timeout(stk_http_request *r, int timeout_ms);
bool stk_http_done(const stk_http_request *r);
/* The response (valid after completion, until free). */
const stk_http_response *stk_http_result(const stk_http_request *r);
/* Ask a running request to stop: it completes with STK_EINTR soon. */
void stk_http_cancel(stk_http_request *r);
/* Cancel if still running, wait, free. NULL is a no-op. */
void stk_http_request_free(stk_http_request *r);
/* Let the engine free r once it completes (after its `done` callback), or
 * now if it has: for fire-and-forget requests whose `done` consumes the
 * result. r must not be used by the caller afterwards. */
void stk_http_request_detach(stk_http_request *r);

/* Submit, wait, and copy the response into *out (its body moved: free it
 * with free()). Returns out->rc (message set on failure). */
int stk_http_perform(const stk_http_request_desc *d, stk_http_response *out);

/* Process-wide counters. */
typedef struct stk_http_stats {
    uint64_t requests;       /* requests completed */
    uint64_t attempts;       /* attempts started (requests + retries) */
    uint64_t retries;
    uint64_t failures;       /* requests that completed with an error */
    uint64_t bytes_received; /* response body bytes, every attempt */
    uint64_t bytes_sent;     /* request body bytes */
    uint32_t in_flight;      /* transfers running now */
} stk_http_stats;
void stk_http_stats_get(stk_http_stats *out);
void stk_http_stats_reset(void);

/* Stop the engine: cancel every request, join the I/O thread. Later
 * submits start it again. For tests and at exit. */
void stk_http_shutdown(void);

/* Percent-encode `in` for a URL path (keep_slash: '/' stays) or a query
 * value (RFC 3986 unreserved characters stay), into out (cap bytes).
 * STK_ELIMIT when it does not fit. */
int stk_url_encode(const char *in, bool keep_slash, char *out, size_t cap);

#endif
