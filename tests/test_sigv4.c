/*
 * test_sigv4.c — AWS Signature Version 4 (src/io/sigv4.c) against published
 * references: SHA-256 (FIPS 180-2 examples) and HMAC-SHA256 (RFC 4231
 * test cases 1 and 2); AWS's SigV4 test suite (tests/data/sigv4/suite: the
 * canonical request, the string to sign and the Authorization header of
 * every case, generic path rules); the S3 documentation's worked examples
 * (tests/data/sigv4/s3: GET object with a Range, PUT object with a '$' in
 * the key, GET ?lifecycle, GET ?max-keys=2&prefix=J; S3 path rules); then
 * the canonical forms one rule at a time (S3 vs normalised paths, query
 * decoding and sorting, Host from the URL, UNSIGNED-PAYLOAD, session
 * tokens), the refusals (a URL that is not http(s), header injection,
 * too many headers, bad times) and that no secret reaches any output but
 * the header that must carry it. tests/python/test_sigv4_botocore.py
 * compares the same signer with botocore's on random requests.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "io/sigv4.h"
#include "stoker/stoker.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define SUITE_TIME 1440938160LL /* 2015-08-30T12:36:00Z */
#define S3DOC_TIME 1369353600LL /* 2013-05-24T00:00:00Z */

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    p[n] = 0;
    fclose(f);
    return p;
}

static void hex_of(const uint8_t *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

static void test_sha256_hmac(void **state)
{
    (void)state;
    char hex[65];
    stk_sha256_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    stk_sha256_hex("", 0, hex);
    assert_string_equal(hex, STK_SHA256_EMPTY);
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    stk_sha256_hex(m, strlen(m), hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* RFC 4231 test case 1 and 2 */
    uint8_t key[20], mac[32];
    memset(key, 0x0b, sizeof key);
    stk_hmac_sha256(key, sizeof key, "Hi There", 8, mac);
    hex_of(mac, 32, hex);
    assert_string_equal(hex, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    stk_hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, mac);
    hex_of(mac, 32, hex);
    assert_string_equal(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

/* A parsed NAME.req: method, target, "Name:value" lines, body. */
typedef struct req_file {
    char *text;
    char method[16];
    char url[1024];
    const char *headers[32];
    size_t n_headers;
    const char *body;
    size_t body_n;
} req_file;

static void parse_req(char *text, const char *host, req_file *r)
{
    memset(r, 0, sizeof *r);
    r->text = text;
    char *body = strstr(text, "\n\n");
    if (body) {
        *body = 0;
        r->body = body + 2;
        r->body_n = strlen(body + 2);
    } else {
        r->body = "";
    }
    char *line = text, *nl = strchr(line, '\n');
    if (nl)
        *nl = 0;
    /* METHOD TARGET HTTP/1.1, the target possibly with spaces */
    char *sp = strchr(line, ' '), *last = strrchr(line, ' ');
    assert_non_null(sp);
    assert_true(last > sp);
    *sp = 0;
    *last = 0;
    snprintf(r->method, sizeof r->method, "%s", line);
    snprintf(r->url, sizeof r->url, "https://%s%s", host, sp + 1);
    while (nl) {
        line = nl + 1;
        nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        assert_true(r->n_headers < 32);
        r->headers[r->n_headers++] = line;
    }
}

typedef struct suite_ctx {
    const char *dir, *host, *access, *secret, *region, *service;
    int64_t time;
    stk_sigv4_path_mode mode;
    bool content_sha256;
} suite_ctx;

static int run_dir(const suite_ctx *c)
{
    DIR *d = opendir(c->dir);
    assert_non_null(d);
    struct dirent *e;
    int cases = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char base[1024], path[1100];
        snprintf(base, sizeof base, "%s/%s/%s", c->dir, e->d_name, e->d_name);
        snprintf(path, sizeof path, "%s.req", base);
        char *text = slurp(path);
        if (!text)
            continue;
        req_file r;
        parse_req(text, c->host, &r);
        snprintf(path, sizeof path, "%s.token", base);
        char *token = slurp(path);
        char payload[65];
        stk_sha256_hex(r.body, r.body_n, payload);
        stk_sigv4_request q = {
            .method = r.method, .url = r.url, .headers = r.headers, .n_headers = r.n_headers,
            .payload_hash = payload, .time = c->time, .region = c->region,
            .service = c->service, .path_mode = c->mode,
            .content_sha256_header = c->content_sha256,
        };
        stk_sigv4_credentials cred = {c->access, c->secret, token};
        stk_sigv4_signed s;
        int rc = stk_sigv4_sign(&q, &cred, &s);
        if (rc)
            fprintf(stderr, "%s: %s\n", e->d_name, stk_errmsg());
        assert_int_equal(rc, 0);
        const char *names[] = {"creq", "sts", "authz"};
        for (int k = 0; k < 3; k++) {
            snprintf(path, sizeof path, "%s.%s", base, names[k]);
            char *want = slurp(path);
            if (!want)
                continue; /* the S3 examples without a published creq/sts */
            const char *got = k == 0   ? s.canonical_request
                              : k == 1 ? s.string_to_sign
                                       : s.add[s.n_add - 1] + strlen("Authorization: ");
            if (strcmp(got, want))
                fprintf(stderr, "%s.%s:\n got: %s\nwant: %s\n", e->d_name, names[k], got, want);
            assert_string_equal(got, want);
            free(want);
        }
        assert_int_equal(strncmp(s.add[s.n_add - 1], "Authorization: ", 15), 0);
        assert_int_equal(strncmp(s.add[0], "X-Amz-Date: ", 12), 0);
        stk_sigv4_signed_free(&s);
        free(token);
        free(text);
        cases++;
    }
    closedir(d);
    return cases;
}

static void test_aws_suite(void **state)
{
    (void)state;
    suite_ctx c = {STK_TEST_DATA "/sigv4/suite", "example.amazonaws.com", "AKIDEXAMPLE",
                   "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "us-east-1", "service",
                   SUITE_TIME, STK_SIGV4_PATH_NORMALIZE, false};
    assert_int_equal(run_dir(&c), 28);
}

static void test_s3_documentation(void **state)
{
    (void)state;
    suite_ctx c = {STK_TEST_DATA "/sigv4/s3", "examplebucket.s3.amazonaws.com",
                   "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                   "us-east-1", "s3", S3DOC_TIME, STK_SIGV4_PATH_S3, true};
    assert_int_equal(run_dir(&c), 4);
}

/* Sign url with no headers; return the canonical request (caller frees). */
static char *creq_of(const char *method, const char *url, stk_sigv4_path_mode mode,
                     const char *const *headers, size_t n)
{
    stk_sigv4_request q = {.method = method, .url = url, .headers = headers, .n_headers = n,
                           .time = SUITE_TIME, .region = "r", .service = "s", .path_mode = mode};
    stk_sigv4_credentials cred = {"AK", "SK", NULL};
    stk_sigv4_signed s;
    int rc = stk_sigv4_sign(&q, &cred, &s);
    if (rc)
        fprintf(stderr, "%s: %s\n", url, stk_errmsg());
    assert_int_equal(rc, 0);
    char *cr = s.canonical_request;
    s.canonical_request = NULL;
    stk_sigv4_signed_free(&s);
    return cr;
}

/* The second line (canonical URI) or third (query) of a canonical request. */
static void expect_line(const char *url, stk_sigv4_path_mode mode, int line, const char *want)
{
    char *cr = creq_of("GET", url, mode, NULL, 0);
    char *p = cr;
    for (int i = 0; i < line; i++)
        p = strchr(p, '\n') + 1;
    size_t n = strcspn(p, "\n");
    if (strlen(want) != n || memcmp(p, want, n))
        fprintf(stderr, "%s: line %d is '%.*s', want '%s'\n", url, line, (int)n, p, want);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(p, want, n);
    free(cr);
}

static void test_paths(void **state)
{
    (void)state;
    /* S3: as on the wire, decoded and encoded once; dots and "//" kept */
    expect_line("https://b.s3.amazonaws.com/a%20b//c/./d/../e", STK_SIGV4_PATH_S3, 1,
                "/a%20b//c/./d/../e");
    expect_line("https://b.s3.amazonaws.com/a b", STK_SIGV4_PATH_S3, 1, "/a%20b");
    expect_line("https://b.s3.amazonaws.com/%7e%2a!'()*", STK_SIGV4_PATH_S3, 1,
                "/~%2A%21%27%28%29%2A");
    expect_line("https://b.s3.amazonaws.com/k%2Fwith%2fslash", STK_SIGV4_PATH_S3, 1,
                "/k/with/slash");
    expect_line("https://b.s3.amazonaws.com/caf%C3%A9+1%", STK_SIGV4_PATH_S3, 1,
                "/caf%C3%A9%2B1%25");
    expect_line("https://b.s3.amazonaws.com", STK_SIGV4_PATH_S3, 1, "/");
    expect_line("https://b.s3.amazonaws.com?list-type=2", STK_SIGV4_PATH_S3, 1, "/");
    /* generic services: normalised, then encoded as given (a second time) */
    expect_line("https://h/a%20b", STK_SIGV4_PATH_NORMALIZE, 1, "/a%2520b");
    expect_line("https://h/a/./b/../../c//", STK_SIGV4_PATH_NORMALIZE, 1, "/c/");
    expect_line("https://h", STK_SIGV4_PATH_NORMALIZE, 1, "/");
    expect_line("https://h/..", STK_SIGV4_PATH_NORMALIZE, 1, "/");
}

static void test_query(void **state)
{
    (void)state;
    expect_line("https://h/?b=2&a=1&a=0&c", STK_SIGV4_PATH_S3, 2, "a=0&a=1&b=2&c=");
    /* sorted by name, then value: "a" before "a-b" although "a=" > "a-" */
    expect_line("https://h/?a-b=1&a=2", STK_SIGV4_PATH_S3, 2, "a=2&a-b=1");
    /* decoded once and encoded once; '+' is a plus */
    expect_line("https://h/?prefix=a%2fb+c%20d&x=%E1%88%b4", STK_SIGV4_PATH_S3, 2,
                "prefix=a%2Fb%2Bc%20d&x=%E1%88%B4");
    expect_line("https://h/?uploads", STK_SIGV4_PATH_S3, 2, "uploads=");
    expect_line("https://h/?list-type=2&continuation-token=1%2F%2Bab%3D%3D&prefix=",
                STK_SIGV4_PATH_S3, 2, "continuation-token=1%2F%2Bab%3D%3D&list-type=2&prefix=");
    expect_line("https://h/?&&a=1&", STK_SIGV4_PATH_S3, 2, "a=1");
    expect_line("https://h/#frag?x=1", STK_SIGV4_PATH_S3, 2, "");
    expect_line("https://h/p?x=1#frag", STK_SIGV4_PATH_S3, 2, "x=1");
}

static void test_host(void **state)
{
    (void)state;
    expect_line("http://Example.COM:80/", STK_SIGV4_PATH_S3, 3, "host:example.com");
    expect_line("https://h:443/", STK_SIGV4_PATH_S3, 3, "host:h");
    expect_line("https://h:80/", STK_SIGV4_PATH_S3, 3, "host:h:80");
    expect_line("http://127.0.0.1:9000/b/k", STK_SIGV4_PATH_S3, 3, "host:127.0.0.1:9000");
    expect_line("http://[::1]:9000/b/k", STK_SIGV4_PATH_S3, 3, "host:[::1]:9000");
    expect_line("https://user:pw@h/b", STK_SIGV4_PATH_S3, 3, "host:h");
    /* a Host given is used as given */
    const char *hh[] = {"HOST:  other:1  "};
    char *cr = creq_of("GET", "https://h/", STK_SIGV4_PATH_S3, hh, 1);
    assert_non_null(strstr(cr, "\nhost:other:1\n"));
    free(cr);
}

static void test_headers(void **state)
{
    (void)state;
    /* trimmed, runs of blanks collapsed, names lower-cased, duplicates
     * joined in order, the blacklisted and our own left out */
    const char *hh[] = {"X-B:  two\t\tspaces  inside ", "x-a:1", "X-A: 0", "User-Agent: curl",
                        "Expect: 100-continue", "Authorization: old", "X-Amz-Date: 19990101T000000Z",
                        "Range: bytes=0-9", "Empty:"};
    char *cr = creq_of("GET", "https://h/", STK_SIGV4_PATH_S3, hh, 9);
    const char *want = "GET\n/\n\nempty:\nhost:h\nrange:bytes=0-9\nx-a:1,0\nx-amz-date:20150830T123600Z\n"
                       "x-b:two spaces inside\n\nempty;host;range;x-a;x-amz-date;x-b\n" STK_SHA256_EMPTY;
    assert_string_equal(cr, want);
    free(cr);
}

static void test_s3_headers_and_token(void **state)
{
    (void)state;
    const char *hh[] = {"x-amz-content-sha256: stale", "X-Amz-Security-Token: stale"};
    stk_sigv4_request q = {.method = "GET", .url = "https://b.s3.us-west-2.amazonaws.com/k",
                           .headers = hh, .n_headers = 2,
                           .payload_hash = STK_SIGV4_UNSIGNED_PAYLOAD, .time = S3DOC_TIME,
                           .region = "us-west-2", .service = "s3",
                           .path_mode = STK_SIGV4_PATH_S3, .content_sha256_header = true};
    const char *secret = "SECRET/very+secret";
    const char *token = "TOKEN+session/token==";
    stk_sigv4_credentials cred = {"AKIA", secret, token};
    stk_sigv4_signed s;
    assert_int_equal(stk_sigv4_sign(&q, &cred, &s), 0);
    assert_int_equal(s.n_add, 4);
    assert_string_equal(s.add[0], "X-Amz-Date: 20130524T000000Z");
    assert_string_equal(s.add[1], "X-Amz-Content-SHA256: UNSIGNED-PAYLOAD");
    assert_string_equal(s.add[2], "X-Amz-Security-Token: TOKEN+session/token==");
    assert_int_equal(strncmp(s.add[3], "Authorization: AWS4-HMAC-SHA256 Credential=AKIA/20130524/"
                             "us-west-2/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;"
                             "x-amz-date;x-amz-security-token, Signature=", 136), 0);
    assert_string_equal(s.signed_headers, "host;x-amz-content-sha256;x-amz-date;x-amz-security-token");
    assert_non_null(strstr(s.canonical_request, "\nUNSIGNED-PAYLOAD"));
    assert_null(strstr(s.canonical_request, "stale"));
    /* The secret is in no output at all; the token only where it must be. */
    for (uint32_t i = 0; i < s.n_add; i++)
        assert_null(strstr(s.add[i], "SECRET"));
    assert_null(strstr(s.canonical_request, "SECRET"));
    assert_null(strstr(s.string_to_sign, "SECRET"));
    assert_null(strstr(s.add[3], "TOKEN"));
    assert_null(strstr(s.string_to_sign, "TOKEN"));
    /* Another time signs differently; the same inputs the same. */
    char sig[65];
    memcpy(sig, s.signature, sizeof sig);
    stk_sigv4_signed_free(&s);
    assert_int_equal(stk_sigv4_sign(&q, &cred, &s), 0);
    assert_string_equal(s.signature, sig);
    stk_sigv4_signed_free(&s);
    q.time++;
    assert_int_equal(stk_sigv4_sign(&q, &cred, &s), 0);
    assert_string_not_equal(s.signature, sig);
    stk_sigv4_signed_free(&s);
    /* No token: no header, no signed name */
    cred.session_token = "";
    assert_int_equal(stk_sigv4_sign(&q, &cred, &s), 0);
    assert_int_equal(s.n_add, 3);
    /* the stale token header of the request is then an ordinary header */
    assert_string_equal(s.signed_headers, "host;x-amz-content-sha256;x-amz-date;x-amz-security-token");
    stk_sigv4_signed_free(&s);
}

static void expect_refused(const stk_sigv4_request *q, const stk_sigv4_credentials *c, int code,
                           const char *msg)
{
    stk_sigv4_signed s;
    int rc = stk_sigv4_sign(q, c, &s);
    if (rc != code || !strstr(stk_errmsg(), msg))
        fprintf(stderr, "got %d '%s', want %d '%s'\n", rc, stk_errmsg(), code, msg);
    assert_int_equal(rc, code);
    assert_non_null(strstr(stk_errmsg(), msg));
    assert_int_equal(s.n_add, 0);
    assert_null(s.canonical_request);
    stk_sigv4_signed_free(&s);
    /* never the secret in a message */
    if (c && c->secret_key)
        assert_null(strstr(stk_errmsg(), c->secret_key));
}

static void test_refusals(void **state)
{
    (void)state;
    stk_sigv4_credentials c = {"AK", "TOPSECRET", NULL};
    stk_sigv4_request q = {.method = "GET", .url = "ftp://h/", .time = SUITE_TIME,
                           .region = "r", .service = "s"};
    expect_refused(&q, &c, STK_EINVAL, "http:// or https://");
    q.url = "https:///k";
    expect_refused(&q, &c, STK_EINVAL, "no host");
    q.url = "https://h:99999/k";
    expect_refused(&q, &c, STK_EINVAL, "port");
    q.url = "https://h:/k";
    expect_refused(&q, &c, STK_EINVAL, "port");
    q.url = "https://[::1/k";
    expect_refused(&q, &c, STK_EINVAL, "IPv6");
    q.url = "https://h/";
    const char *bad1[] = {"NoColon"};
    q.headers = bad1;
    q.n_headers = 1;
    expect_refused(&q, &c, STK_EINVAL, "no ':'");
    const char *bad2[] = {"X-Inject: a\r\nAuthorization: b"};
    q.headers = bad2;
    expect_refused(&q, &c, STK_EINVAL, "control character");
    const char *bad3[] = {"Bad Name: v"};
    q.headers = bad3;
    expect_refused(&q, &c, STK_EINVAL, "header name");
    const char *many[65];
    for (int i = 0; i < 65; i++)
        many[i] = "x-h: v";
    q.headers = many;
    q.n_headers = 65;
    expect_refused(&q, &c, STK_ELIMIT, "more than 64 headers");
    q.headers = NULL;
    q.n_headers = 0;
    q.time = -1;
    expect_refused(&q, &c, STK_EINVAL, "1970..9999");
    q.time = SUITE_TIME;
    q.region = "us east";
    expect_refused(&q, &c, STK_EINVAL, "region");
    q.region = "r";
    stk_sigv4_credentials c2 = {"AK/x", "TOPSECRET", NULL};
    expect_refused(&q, &c2, STK_EINVAL, "access key id");
    stk_sigv4_credentials c3 = {"AK", "TOPSECRET", "tok\nen"};
    expect_refused(&q, &c3, STK_EINVAL, "session token");
    stk_sigv4_credentials c4 = {"AK", NULL, NULL};
    expect_refused(&q, &c4, STK_EINVAL, "secret");
    q.payload_hash = "x\ny";
    expect_refused(&q, &c, STK_EINVAL, "payload hash");
}

static void test_encode_decode_date(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(stk_sigv4_uri_encode("a b/c~d%\xc3\xa9", 10, true, out, sizeof out), 18);
    assert_string_equal(out, "a%20b/c~d%25%C3%A9");
    assert_int_equal(stk_sigv4_uri_encode("a/b", 3, false, out, sizeof out), 5);
    assert_string_equal(out, "a%2Fb");
    assert_int_equal(stk_sigv4_uri_encode("-._~AZaz09", 10, false, out, sizeof out), 10);
    assert_string_equal(out, "-._~AZaz09");
    assert_int_equal(stk_sigv4_uri_encode("   ", 3, false, out, 9), STK_ELIMIT);
    assert_int_equal(stk_sigv4_uri_encode("   ", 3, false, out, 10), 9);
    char d[32];
    assert_int_equal(stk_sigv4_uri_decode("%4a%4A%zz%4+", 12, d), 8);
    assert_string_equal(d, "JJ%zz%4+");
    char t[17];
    assert_int_equal(stk_sigv4_amz_date(0, t), 0);
    assert_string_equal(t, "19700101T000000Z");
    assert_int_equal(stk_sigv4_amz_date(951782400, t), 0);
    assert_string_equal(t, "20000229T000000Z");
    assert_int_equal(stk_sigv4_amz_date(253402300799LL, t), 0);
    assert_string_equal(t, "99991231T235959Z");
    assert_int_equal(stk_sigv4_amz_date(253402300800LL, t), STK_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_hmac),
        cmocka_unit_test(test_aws_suite),
        cmocka_unit_test(test_s3_documentation),
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_query),
        cmocka_unit_test(test_host),
        cmocka_unit_test(test_headers),
        cmocka_unit_test(test_s3_headers_and_token),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_encode_decode_date),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
