/*
 * test_http.c — the HTTP engine (src/io/http.c) against a scripted server.
 *
 * The server is a thread of this test on a loopback port: it serves one
 * 200 KB object (bytes from tu_fill_random), honours Range, and answers
 * each request by the next step of a script the test sets — a good
 * response, a status with an S3-style XML error, a connection reset, a
 * body cut short, a stall. The tests check what the engine makes of each:
 * retried faults end in the right bytes with the attempts counted, errors
 * carry the right code and a message naming the URL, the status and the
 * attempts, a server that is down fails within its attempts, a stalled
 * transfer is cancelled promptly, a signer's headers reach the server.
 * (The real servers — nginx, an S3 API, the fault proxy — are exercised by
 * tests/python/test_remote*.py.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/util.h"
#include "io/http.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define OBJ_SIZE 200000

enum step {
    OK, S503, S500_RETRY_AFTER, S404, S403, S400, RESET, TRUNCATE, STALL, IGNORE_RANGE,
    /* A lying range server (a broken proxy or CDN), each a 206: */
    SHIFT,      /* the bytes 1000 further on, their Content-Range saying so (right length) */
    LIE,        /* the right bytes, a Content-Range naming bytes 1000 further on */
    SHORT,      /* the first half of the range, with a Content-Range and length saying so */
    LONG,       /* 500 bytes more than the range, with a Content-Range and length saying so */
    NO_RANGE,   /* a 206 without Content-Range */
    /* Another version of the object: */
    NEW_ETAG,   /* ETag "new" (the object is "abc") */
    SHRUNK,     /* a Content-Range total 100 bytes short (the object shrank) */
    PAST_END,   /* a 416 with Content-Range bytes *" "/100 (the object is now 100 bytes) */
    NO_ETAG_NEW,/* no ETag; Last-Modified a day later than the object's */
    EMPTY_200,  /* a 200 with an empty body to a ranged GET */
};
#define LAST_MODIFIED "Tue, 02 Jan 2024 10:00:00 GMT"
#define LAST_MODIFIED_NEW "Wed, 03 Jan 2024 10:00:00 GMT"

static struct server {
    int listen_fd;
    int port;
    pthread_t thread;
    uint8_t obj[OBJ_SIZE];
    pthread_mutex_t mu;
    enum step script[32];
    int nscript, next;     /* guarded by mu */
    int requests;          /* requests seen */
    char last_sig[128];    /* the X-Test-Sig header of the last request */
    atomic_bool stop;
} srv;

static void script(int n, ...)
{
    va_list ap;
    va_start(ap, n);
    pthread_mutex_lock(&srv.mu);
    for (int i = 0; i < n; i++)
        srv.script[i] = va_arg(ap, enum step);
    srv.nscript = n;
    srv.next = 0;
    srv.requests = 0;
    srv.last_sig[0] = 0;
    pthread_mutex_unlock(&srv.mu);
    va_end(ap);
}

static int server_requests(void)
{
    pthread_mutex_lock(&srv.mu);
    int n = srv.requests;
    pthread_mutex_unlock(&srv.mu);
    return n;
}

static void send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
        if (k <= 0)
            return;
        c += k;
        n -= (size_t)k;
    }
}

static void reset_close(int fd)
{
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}

/* Serve one connection's requests. */
static void *conn_main(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[8192];
    size_t have = 0;
    for (;;) {
        char *end;
        while (!(end = memmem(buf, have, "\r\n\r\n", 4))) {
            ssize_t k = recv(fd, buf + have, sizeof buf - have - 1, 0);
            if (k <= 0 || atomic_load(&srv.stop)) {
                close(fd);
                return NULL;
            }
            have += (size_t)k;
        }
        buf[have] = 0;
        size_t head = (size_t)(end + 4 - buf);
        bool head_only = strncmp(buf, "HEAD ", 5) == 0;
        uint64_t a = 0, b = OBJ_SIZE - 1;
        bool ranged = false;
        char *rg = strcasestr(buf, "\r\nRange: bytes=");
        if (rg && rg < end) {
            ranged = true;
            sscanf(rg + 15, "%llu-%llu", (unsigned long long *)&a, (unsigned long long *)&b);
        }
        char *sig = strcasestr(buf, "\r\nX-Test-Sig: ");
        size_t body_len = 0;
        char *cl = strcasestr(buf, "\r\nContent-Length: ");
        if (cl && cl < end)
            body_len = strtoull(cl + 18, NULL, 10);
        /* Drop the request (and its body) from the buffer. */
        size_t consumed = head + body_len;
        while (have < consumed) {
            ssize_t k = recv(fd, buf + have, sizeof buf - have - 1 > consumed - have ? consumed - have : sizeof buf - have - 1, 0);
            if (k <= 0) {
                close(fd);
                return NULL;
            }
            have += (size_t)k;
        }
        pthread_mutex_lock(&srv.mu);
        enum step st = srv.next < srv.nscript ? srv.script[srv.next++] : OK;
        srv.requests++;
        if (sig && sig < end)
            sscanf(sig + 14, "%127[^\r]", srv.last_sig);
        pthread_mutex_unlock(&srv.mu);
        memmove(buf, buf + consumed, have - consumed);
        have -= consumed;

        char hdr[512];
        if (st == RESET) {
            reset_close(fd);
            return NULL;
        }
        if (st == STALL) {
            while (!atomic_load(&srv.stop))
                usleep(1000);
            close(fd);
            return NULL;
        }
        if (st == S503 || st == S500_RETRY_AFTER || st == S404 || st == S403 || st == S400) {
            int code = st == S503 ? 503 : st == S500_RETRY_AFTER ? 500 : st == S404 ? 404 : st == S403 ? 403 : 400;
            const char *xml = st == S403 ? "<Error><Code>SignatureDoesNotMatch</Code></Error>"
                                         : "<Error><Code>SlowDown</Code></Error>";
            int n = snprintf(hdr, sizeof hdr,
                             "HTTP/1.1 %d X\r\nContent-Length: %zu\r\n%s\r\n", code, strlen(xml),
                             st == S500_RETRY_AFTER ? "Retry-After: 0\r\n" : "");
            send_all(fd, hdr, (size_t)n);
            if (!head_only)
                send_all(fd, xml, strlen(xml));
            continue;
        }
        if (b >= OBJ_SIZE)
            b = OBJ_SIZE - 1;
        if (st == IGNORE_RANGE)
            ranged = false, a = 0, b = OBJ_SIZE - 1;
        if (st == PAST_END) {
            int n = snprintf(hdr, sizeof hdr, "HTTP/1.1 416 Range Not Satisfiable\r\n"
                             "Content-Range: bytes */100\r\nContent-Length: 0\r\n\r\n");
            send_all(fd, hdr, (size_t)n);
            continue;
        }
        /* what is sent: bytes [a, b]; what the Content-Range says: [ca, cb]/total */
        uint64_t ca = a, cb = b, total = OBJ_SIZE;
        if (ranged && st == SHIFT)
            a += 1000, b += 1000, ca = a, cb = b;
        if (ranged && st == LIE)
            ca += 1000, cb += 1000;
        if (ranged && st == SHORT)
            b = a + (b - a) / 2, cb = b;
        if (ranged && st == LONG)
            b += 500, cb = b;
        if (ranged && st == SHRUNK)
            total -= 100;
        uint64_t len = b - a + 1;
        const char *id = st == NEW_ETAG ? "ETag: \"new\"\r\n"
                         : st == NO_ETAG_NEW ? "Last-Modified: " LAST_MODIFIED_NEW "\r\n"
                                             : "ETag: \"abc\"\r\nLast-Modified: " LAST_MODIFIED "\r\n";
        char cr[128] = "";
        if (st != NO_RANGE)
            snprintf(cr, sizeof cr, "Content-Range: bytes %llu-%llu/%llu\r\n",
                     (unsigned long long)ca, (unsigned long long)cb, (unsigned long long)total);
        if (st == EMPTY_200)
            ranged = false, len = 0;
        int n = ranged ? snprintf(hdr, sizeof hdr,
                                  "HTTP/1.1 206 Partial\r\nContent-Length: %llu\r\n%s%s\r\n",
                                  (unsigned long long)len, cr, id)
                       : snprintf(hdr, sizeof hdr,
                                  "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\n%s\r\n",
                                  (unsigned long long)len, id);
        send_all(fd, hdr, (size_t)n);
        if (head_only)
            continue;
        if (st == TRUNCATE) {
            send_all(fd, srv.obj + a, len / 2);
            close(fd);
            return NULL;
        }
        send_all(fd, srv.obj + a, len);
    }
}

static void *server_main(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(srv.listen_fd, NULL, NULL);
        if (fd < 0 || atomic_load(&srv.stop)) {
            if (fd >= 0)
                close(fd);
            return NULL;
        }
        pthread_t t;
        pthread_create(&t, NULL, conn_main, (void *)(intptr_t)fd);
        pthread_detach(t);
    }
}

static int setup(void **state)
{
    (void)state;
    setenv("STOKER_HTTP_QUIET", "1", 1);
    setenv("STOKER_HTTP_BACKOFF_MS", "1", 1);
    setenv("STOKER_HTTP_BACKOFF_MAX_MS", "5", 1);
    tu_fill_random(srv.obj, OBJ_SIZE, 7);
    pthread_mutex_init(&srv.mu, NULL);
    srv.listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1;
    setsockopt(srv.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(srv.listen_fd, (struct sockaddr *)&sa, sizeof sa) || listen(srv.listen_fd, 64))
        return -1;
    socklen_t sl = sizeof sa;
    getsockname(srv.listen_fd, (struct sockaddr *)&sa, &sl);
    srv.port = ntohs(sa.sin_port);
    return pthread_create(&srv.thread, NULL, server_main, NULL) ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    stk_http_shutdown();
    atomic_store(&srv.stop, true);
    shutdown(srv.listen_fd, SHUT_RDWR);
    close(srv.listen_fd);
    pthread_join(srv.thread, NULL);
    usleep(20000); /* connection threads see stop */
    return 0;
}

static char url_buf[256];
static const char *url(const char *path)
{
    snprintf(url_buf, sizeof url_buf, "http://127.0.0.1:%d%s", srv.port, path);
    return url_buf;
}

/* GET [off, off + len) into a buffer and check the bytes. */
static int get_range(uint64_t off, uint64_t len, stk_http_response *out)
{
    uint8_t *buf = malloc(len);
    stk_http_request_desc d = {.method = "GET", .url = url("/obj?secret=x"), .range_off = off,
                               .range_len = len, .dest = buf, .dest_cap = len};
    int rc = stk_http_perform(&d, out);
    if (rc == 0)
        assert_memory_equal(buf, srv.obj + off, len);
    free(buf);
    free(out->body);
    out->body = NULL;
    return rc;
}

static void test_range_ok(void **state)
{
    (void)state;
    script(0);
    stk_http_response r;
    assert_int_equal(get_range(1000, 5000, &r), 0);
    assert_int_equal(r.status, 206);
    assert_int_equal(r.attempts, 1);
    assert_int_equal(r.total_size, OBJ_SIZE);
    assert_string_equal(r.etag, "\"abc\"");
    /* The whole object, collected into the response's body. */
    stk_http_request_desc d = {.method = "GET", .url = url("/obj")};
    assert_int_equal(stk_http_perform(&d, &r), 0);
    assert_int_equal(r.body_size, OBJ_SIZE);
    assert_memory_equal(r.body, srv.obj, OBJ_SIZE);
    free(r.body);
    /* HEAD: the size without the body. */
    stk_http_request_desc h = {.method = "HEAD", .url = url("/obj")};
    assert_int_equal(stk_http_perform(&h, &r), 0);
    assert_int_equal(r.content_length, OBJ_SIZE);
    assert_int_equal(r.body_size, 0);
    free(r.body);
}

static void test_many_in_flight(void **state)
{
    (void)state;
    script(0);
    enum { N = 64 };
    stk_http_request *req[N];
    uint8_t *bufs[N];
    stk_http_stats s0, s1;
    stk_http_stats_get(&s0);
    for (int i = 0; i < N; i++) {
        bufs[i] = malloc(3000);
        stk_http_request_desc d = {.method = "GET", .url = url("/obj"), .range_off = (uint64_t)i * 3000,
                                   .range_len = 3000, .dest = bufs[i], .dest_cap = 3000};
        assert_int_equal(stk_http_submit(&d, &req[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(stk_http_wait(req[i]), 0);
        assert_memory_equal(bufs[i], srv.obj + (size_t)i * 3000, 3000);
        stk_http_request_free(req[i]);
        free(bufs[i]);
    }
    stk_http_stats_get(&s1);
    assert_int_equal(s1.requests - s0.requests, N);
    assert_true(s1.bytes_received - s0.bytes_received >= (uint64_t)N * 3000);
}

static void test_retries_then_ok(void **state)
{
    (void)state;
    stk_http_response r;
    script(4, S503, RESET, TRUNCATE, S500_RETRY_AFTER);
    stk_http_stats s0, s1;
    stk_http_stats_get(&s0);
    assert_int_equal(get_range(10, 100000, &r), 0);
    /* Every fault was met (5 requests reached the server). libcurl itself
     * re-sends a request whose reused connection was reset before any
     * answer, so that fault may not count as an attempt of ours. */
    assert_int_equal(server_requests(), 5);
    assert_in_range(r.attempts, 4, 5);
    stk_http_stats_get(&s1);
    assert_int_equal(s1.retries - s0.retries, r.attempts - 1);
    /* A server that ignores Range for a part: refused, not retried. */
    script(1, IGNORE_RANGE);
    assert_int_equal(get_range(10, 100, &r), STK_ENETWORK);
    assert_non_null(strstr(stk_errmsg(), "ignores Range"));
    assert_int_equal(r.attempts, 1);
}

/* A 206 for other bytes than asked (a broken proxy or CDN in between) is
 * never handed on: each kind is retried, and the request ends with the
 * right bytes; one that persists fails blaming the transfer, naming the
 * bytes asked and answered. */
static void test_wrong_range_is_retried(void **state)
{
    (void)state;
    stk_http_response r;
    script(5, SHIFT, LIE, SHORT, LONG, NO_RANGE);
    assert_int_equal(get_range(5000, 20000, &r), 0); /* (checks the bytes) */
    assert_int_equal(r.status, 206);
    assert_int_equal(server_requests(), 6);
    assert_int_equal(r.attempts, 6);

    stk_http_policy p;
    stk_http_policy_default(&p);
    p.max_attempts = 3;
    uint8_t buf[100];
    memset(buf, 0xEE, sizeof buf);
    stk_http_request_desc d = {.method = "GET", .url = url("/obj"), .range_off = 10,
                               .range_len = 100, .dest = buf, .dest_cap = 100, .policy = &p};
    script(3, SHIFT, SHIFT, SHIFT);
    assert_int_equal(stk_http_perform(&d, &r), STK_ENETWORK);
    const char *m = stk_errmsg();
    assert_non_null(strstr(m, url("/obj")));
    assert_non_null(strstr(m, "HTTP 206 for other bytes than asked: Content-Range bytes 1010-1109 "
                              "for bytes 10-109"));
    assert_non_null(strstr(m, "(3 attempts)"));
    assert_null(strstr(m, "changed"));
    free(r.body);
    script(3, SHORT, SHORT, SHORT);
    assert_int_equal(stk_http_perform(&d, &r), STK_ENETWORK);
    assert_non_null(strstr(stk_errmsg(), "Content-Range bytes 10-59, a 50-byte body for bytes 10-109"));
    free(r.body);
    script(3, NO_RANGE, NO_RANGE, NO_RANGE);
    assert_int_equal(stk_http_perform(&d, &r), STK_ENETWORK);
    assert_non_null(strstr(stk_errmsg(), "HTTP 206 without a Content-Range"));
    free(r.body);
    /* none of the wrong bytes reached the buffer */
    for (size_t i = 0; i < sizeof buf; i++)
        assert_int_equal(buf[i], 0xEE);
}

/* A 200 to a ranged GET is the whole object: taken only when that is
 * exactly the range asked (an empty one is not). */
static void test_200_to_a_range(void **state)
{
    (void)state;
    stk_http_response r;
    script(1, IGNORE_RANGE);
    assert_int_equal(get_range(0, OBJ_SIZE, &r), 0);
    assert_int_equal(r.status, 200);
    script(1, IGNORE_RANGE);
    assert_int_equal(get_range(0, 1000, &r), STK_ENETWORK);
    assert_non_null(strstr(stk_errmsg(), "ignores Range requests (HTTP 200 for bytes 0-999)"));
    script(1, EMPTY_200);
    assert_int_equal(get_range(0, 1000, &r), STK_ENETWORK);
    assert_non_null(strstr(stk_errmsg(), "ignores Range"));
}

/* An answer from another version of the object than the request expects
 * (desc.expect_*) ends it at once, STK_EFORMAT, naming what differs. */
static void test_changed_object_is_not_retried(void **state)
{
    (void)state;
    uint8_t buf[100];
    stk_http_request_desc d = {.method = "GET", .url = url("/obj?sig=x"), .range_off = 1000,
                               .range_len = 100, .dest = buf, .dest_cap = 100,
                               .expect_total = OBJ_SIZE, .expect_etag = "\"abc\"",
                               .expect_last_modified = LAST_MODIFIED};
    stk_http_response r;
    script(0);
    assert_int_equal(stk_http_perform(&d, &r), 0);
    assert_memory_equal(buf, srv.obj + 1000, 100);
    assert_string_equal(r.changed, "");
    free(r.body);

    script(1, NEW_ETAG);
    assert_int_equal(stk_http_perform(&d, &r), STK_EFORMAT);
    assert_int_equal(r.attempts, 1);
    assert_string_equal(r.changed, "ETag \"new\", was \"abc\" at open");
    assert_non_null(strstr(stk_errmsg(), url("/obj")));
    assert_non_null(strstr(stk_errmsg(), "the object changed while being read"));
    free(r.body);

    script(1, SHRUNK);
    assert_int_equal(stk_http_perform(&d, &r), STK_EFORMAT);
    assert_string_equal(r.changed, "the server announced 200000 bytes at open, the object now "
                                   "has 199900");
    free(r.body);

    script(1, PAST_END);
    assert_int_equal(stk_http_perform(&d, &r), STK_EFORMAT);
    assert_string_equal(r.changed, "the server announced 200000 bytes at open, the object now "
                                   "has 100");
    free(r.body);

    /* no ETag: Last-Modified is the validator */
    script(1, NO_ETAG_NEW);
    assert_int_equal(stk_http_perform(&d, &r), STK_EFORMAT);
    assert_string_equal(r.changed, "Last-Modified " LAST_MODIFIED_NEW ", was " LAST_MODIFIED
                                   " at open");
    free(r.body);
    d.expect_etag = NULL; /* (opened without an ETag: an answer's own ETag is not compared) */
    assert_int_equal(stk_http_perform(&d, &r), 0); /* (the script ran out: OK) */
    free(r.body);
    script(1, NO_ETAG_NEW);
    d.expect_last_modified = LAST_MODIFIED_NEW;
    assert_int_equal(stk_http_perform(&d, &r), 0);
    free(r.body);
    /* a changed object answering for other bytes: the change, not a retry */
    script(1, SHIFT);
    d.expect_total = OBJ_SIZE + 1;
    d.expect_last_modified = NULL;
    assert_int_equal(stk_http_perform(&d, &r), STK_EFORMAT);
    assert_int_equal(r.attempts, 1);
    free(r.body);
}

static void test_gives_up_naming_url_status_attempts(void **state)
{
    (void)state;
    stk_http_response r;
    stk_http_policy p;
    stk_http_policy_default(&p);
    p.max_attempts = 3;
    script(5, S503, S503, S503, S503, S503);
    uint8_t buf[100];
    stk_http_request_desc d = {.method = "GET", .url = url("/obj?X-Amz-Signature=hidden"),
                               .range_off = 0, .range_len = 100, .dest = buf, .dest_cap = 100,
                               .policy = &p};
    assert_int_equal(stk_http_perform(&d, &r), STK_ENETWORK);
    const char *m = stk_errmsg();
    assert_non_null(strstr(m, url("/obj")));
    assert_non_null(strstr(m, "HTTP 503 SlowDown"));
    assert_non_null(strstr(m, "3 attempts"));
    assert_null(strstr(m, "hidden")); /* the query (a presigned URL's secrets) is never shown */
    assert_int_equal(r.attempts, 3);
    free(r.body);
}

static void test_status_codes(void **state)
{
    (void)state;
    stk_http_response r;
    script(1, S404);
    assert_int_equal(get_range(0, 10, &r), STK_ENOENT);
    assert_int_equal(r.attempts, 1);
    script(1, S403);
    assert_int_equal(get_range(0, 10, &r), STK_EACCESS);
    assert_non_null(strstr(stk_errmsg(), "HTTP 403 SignatureDoesNotMatch"));
    script(1, S400);
    assert_int_equal(get_range(0, 10, &r), STK_ENETWORK);
    assert_non_null(strstr(stk_errmsg(), "HTTP 400"));
}

static void test_server_down(void **state)
{
    (void)state;
    /* A port nobody listens on: connection refused every time. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(fd, (struct sockaddr *)&sa, sizeof sa);
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    close(fd);
    char u[128];
    snprintf(u, sizeof u, "http://127.0.0.1:%d/x", ntohs(sa.sin_port));
    stk_http_policy p;
    stk_http_policy_default(&p);
    p.max_attempts = 4;
    uint8_t buf[10];
    stk_http_request_desc d = {.method = "GET", .url = u, .range_len = 10, .dest = buf,
                               .dest_cap = 10, .policy = &p};
    stk_http_response r;
    assert_int_equal(stk_http_perform(&d, &r), STK_ENETWORK);
    assert_non_null(strstr(stk_errmsg(), u));
    assert_non_null(strstr(stk_errmsg(), "4 attempts"));
    free(r.body);
    /* The deadline ends retries before max_attempts. */
    p.max_attempts = 1000;
    p.backoff_ms = 50;
    p.backoff_max_ms = 50;
    p.deadline_ms = 200;
    assert_int_equal(stk_http_perform(&d, &r), STK_ENETWORK);
    assert_non_null(strstr(stk_errmsg(), "deadline of 200 ms reached"));
    assert_true(r.attempts < 1000);
    free(r.body);
}

static void test_cancel_stalled(void **state)
{
    (void)state;
    script(1, STALL);
    uint8_t buf[100];
    stk_http_request_desc d = {.method = "GET", .url = url("/obj"), .range_len = 100,
                               .dest = buf, .dest_cap = 100};
    stk_http_request *r;
    assert_int_equal(stk_http_submit(&d, &r), 0);
    assert_int_equal(stk_http_wait_timeout(r, 50), STK_ETIMEDOUT);
    assert_false(stk_http_done(r));
    stk_http_cancel(r);
    assert_int_equal(stk_http_wait(r), STK_EINTR);
    assert_non_null(strstr(stk_errmsg(), "cancelled"));
    stk_http_request_free(r);
}

/* A stalled transfer holds up no other: on plain http:// (HTTP/1.1, no
 * multiplexing) requests submitted together each get a connection, instead
 * of waiting for the first one's answer to learn whether its connection
 * multiplexes (curl's PIPEWAIT would make them wait). */
static void test_stall_holds_up_no_other(void **state)
{
    (void)state;
    stk_http_shutdown(); /* a fresh engine: no idle connection to reuse */
    script(1, STALL);    /* the first request to arrive stalls */
    stk_http_policy p;
    stk_http_policy_default(&p);
    p.low_speed_time_s = 600; /* the stall lasts */
    p.max_attempts = 1;
    enum { N = 4 };
    uint8_t buf[N][100];
    stk_http_request *r[N];
    for (int i = 0; i < N; i++) {
        stk_http_request_desc d = {.method = "GET", .url = url("/obj"), .range_off = i * 1000u,
                                   .range_len = 100, .dest = buf[i], .dest_cap = 100,
                                   .policy = &p};
        assert_int_equal(stk_http_submit(&d, &r[i]), 0);
    }
    /* The other N - 1 complete (the limit is a guard against a hang, not a
     * timing test: they take milliseconds). */
    int done = 0;
    for (double t0 = stk_now(); done < N - 1 && stk_now() - t0 < 30; usleep(1000)) {
        done = 0;
        for (int i = 0; i < N; i++)
            done += stk_http_done(r[i]);
    }
    assert_int_equal(done, N - 1);
    for (int i = 0; i < N; i++) {
        if (!stk_http_done(r[i]))
            continue;
        assert_int_equal(stk_http_wait(r[i]), 0);
        assert_memory_equal(buf[i], srv.obj + i * 1000u, 100);
    }
    for (int i = 0; i < N; i++)
        stk_http_request_free(r[i]); /* (cancels the stalled one) */
}

static int test_signer(void *ctx, const stk_http_sign_input *in, stk_http_headers *out)
{
    int *calls = ctx;
    (*calls)++;
    return stk_http_headers_add(out, "X-Test-Sig: %s-%llu-%d", in->method,
                                (unsigned long long)in->range_len, *calls);
}

static void test_sign_each_attempt_and_put(void **state)
{
    (void)state;
    int calls = 0;
    script(1, S503);
    uint8_t buf[64];
    stk_http_request_desc d = {.method = "GET", .url = url("/obj"), .range_len = 64, .dest = buf,
                               .dest_cap = 64, .sign = test_signer, .sign_ctx = &calls};
    stk_http_response r;
    assert_int_equal(stk_http_perform(&d, &r), 0);
    assert_int_equal(calls, 2);
    pthread_mutex_lock(&srv.mu);
    assert_string_equal(srv.last_sig, "GET-64-2");
    pthread_mutex_unlock(&srv.mu);
    free(r.body);
    /* A PUT's body goes out (and is re-sent on a retry). */
    script(1, RESET);
    calls = 0;
    stk_http_request_desc p = {.method = "PUT", .url = url("/up"), .body = srv.obj,
                               .body_size = 5000, .sign = test_signer, .sign_ctx = &calls};
    assert_int_equal(stk_http_perform(&p, &r), 0);
    assert_int_equal(server_requests(), 2); /* (libcurl may have re-sent it itself) */
    assert_in_range(calls, 1, 2);
    free(r.body);
}

static void test_url_encode(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(stk_url_encode("a b/c~d_e.f-g+h&é", true, out, sizeof out), 0);
    assert_string_equal(out, "a%20b/c~d_e.f-g%2Bh%26%C3%A9");
    assert_int_equal(stk_url_encode("a/b", false, out, sizeof out), 0);
    assert_string_equal(out, "a%2Fb");
    assert_int_equal(stk_url_encode("abcdef", true, out, 4), STK_ELIMIT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_range_ok),
        cmocka_unit_test(test_many_in_flight),
        cmocka_unit_test(test_retries_then_ok),
        cmocka_unit_test(test_wrong_range_is_retried),
        cmocka_unit_test(test_200_to_a_range),
        cmocka_unit_test(test_changed_object_is_not_retried),
        cmocka_unit_test(test_gives_up_naming_url_status_attempts),
        cmocka_unit_test(test_status_codes),
        cmocka_unit_test(test_server_down),
        cmocka_unit_test(test_cancel_stalled),
        cmocka_unit_test(test_stall_holds_up_no_other),
        cmocka_unit_test(test_sign_each_attempt_and_put),
        cmocka_unit_test(test_url_encode),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
