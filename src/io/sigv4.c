/*
 * sigv4.c — AWS Signature Version 4 (see sigv4.h for the rules).
 *
 * One function, stk_sigv4_sign, turns (method, URL, headers, payload hash,
 * time, credentials, region, service) into the headers to add. It builds
 * the canonical request in a growable buffer, hashes it into the string to
 * sign, derives the signing key with four HMACs and signs. Nothing is kept
 * between calls: the cost is a few microseconds next to a network round
 * trip, and a pure function is what the tests (AWS's vectors, botocore on
 * random requests) can pin with a fixed time.
 *
 * Hashing is OpenSSL's libcrypto (EVP_Digest, HMAC): the same code every
 * TLS connection of curl already runs.
 */
#include "io/sigv4.h"

#include "core/error.h"
#include "core/util.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_HEADERS 64

void stk_sha256(const void *data, size_t n, uint8_t out[STK_SHA256_LEN])
{
    unsigned len = 0;
    EVP_Digest(data ? data : "", n, out, &len, EVP_sha256(), NULL);
}

static void hex32(const uint8_t in[STK_SHA256_LEN], char out[STK_SHA256_HEX_LEN + 1])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < STK_SHA256_LEN; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[STK_SHA256_HEX_LEN] = 0;
}

void stk_sha256_hex(const void *data, size_t n, char out[STK_SHA256_HEX_LEN + 1])
{
    uint8_t d[STK_SHA256_LEN];
    stk_sha256(data, n, d);
    hex32(d, out);
}

void stk_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t n,
                     uint8_t out[STK_SHA256_LEN])
{
    unsigned len = 0;
    HMAC(EVP_sha256(), key, (int)key_len, msg ? msg : (const void *)"", n, out, &len);
}

/* ---- a growable string -------------------------------------------------- */

typedef stk_textbuf sbuf; /* core/util.h */
#define sb_put stk_textbuf_put

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_chr(sbuf *b, char c) { sb_put(b, &c, 1); }

static bool unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '.' || c == '_' || c == '~';
}

static void sb_encode(sbuf *b, const char *s, size_t n, bool keep_slash)
{
    static const char hexd[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (unreserved(c) || (keep_slash && c == '/')) {
            sb_chr(b, (char)c);
        } else {
            char e[3] = {'%', hexd[c >> 4], hexd[c & 15]};
            sb_put(b, e, 3);
        }
    }
}

int stk_sigv4_uri_encode(const char *in, size_t n, bool keep_slash, char *out, size_t cap)
{
    sbuf b = {0};
    sb_encode(&b, in, n, keep_slash);
    if (b.oom) {
        free(b.p);
        return stk_fail(STK_ENOMEM, "URI encoding: out of memory");
    }
    if (b.n + 1 > cap) {
        free(b.p);
        if (cap)
            out[0] = 0;
        return stk_fail(STK_ELIMIT, "URI encoding: %zu bytes do not fit in %zu", b.n, cap);
    }
    memcpy(out, b.p ? b.p : "", b.n + 1);
    free(b.p);
    return (int)b.n;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

size_t stk_sigv4_uri_decode(const char *in, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (in[i] == '%' && i + 2 < n && hexval(in[i + 1]) >= 0 && hexval(in[i + 2]) >= 0) {
            out[o++] = (char)(hexval(in[i + 1]) * 16 + hexval(in[i + 2]));
            i += 2;
        } else {
            out[o++] = in[i];
        }
    }
    out[o] = 0;
    return o;
}

/* Append the decoded-then-encoded form of n bytes. */
static void sb_recode(sbuf *b, const char *s, size_t n, bool keep_slash)
{
    char stackbuf[512];
    char *tmp = n < sizeof stackbuf ? stackbuf : malloc(n + 1);
    if (!tmp) {
        b->oom = true;
        return;
    }
    size_t m = stk_sigv4_uri_decode(s, n, tmp);
    sb_encode(b, tmp, m, keep_slash);
    if (tmp != stackbuf)
        free(tmp);
}

int stk_sigv4_amz_date(int64_t t, char out[17])
{
    /* 1970-01-01 .. 9999-12-31T23:59:59Z */
    if (t < 0 || t > 253402300799LL) {
        out[0] = 0;
        return stk_fail(STK_EINVAL, "SigV4: signing time %lld is outside the years 1970..9999",
                        (long long)t);
    }
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
    return 0;
}

/* ---- the URL ------------------------------------------------------------- */

typedef struct url_parts {
    const char *host;  /* without brackets removed: "[::1]" stays */
    size_t host_n;
    long port;         /* -1: none given */
    bool https;
    const char *path;  /* "" when the URL has none */
    size_t path_n;
    const char *query; /* NULL: no '?' */
    size_t query_n;
} url_parts;

static int url_split(const char *url, url_parts *u)
{
    memset(u, 0, sizeof *u);
    u->port = -1;
    const char *p;
    if (!strncmp(url, "https://", 8)) {
        u->https = true;
        p = url + 8;
    } else if (!strncmp(url, "http://", 7)) {
        p = url + 7;
    } else {
        return stk_fail(STK_EINVAL, "SigV4: the URL must start with http:// or https://");
    }
    size_t auth_n = strcspn(p, "/?#");
    const char *at = memchr(p, '@', auth_n); /* userinfo: not part of Host */
    if (at) {
        auth_n -= (size_t)(at + 1 - p);
        p = at + 1;
    }
    const char *host_end = p + auth_n;
    const char *colon = NULL;
    if (p[0] == '[') {
        const char *rb = memchr(p, ']', auth_n);
        if (!rb)
            return stk_fail(STK_EINVAL, "SigV4: unterminated IPv6 address in the URL");
        if (rb + 1 < host_end) {
            if (rb[1] != ':')
                return stk_fail(STK_EINVAL, "SigV4: malformed host in the URL");
            colon = rb + 1;
        }
    } else {
        colon = memchr(p, ':', auth_n);
    }
    u->host = p;
    u->host_n = colon ? (size_t)(colon - p) : auth_n;
    if (u->host_n == 0)
        return stk_fail(STK_EINVAL, "SigV4: the URL has no host");
    if (colon) {
        long port = 0;
        const char *q = colon + 1;
        if (q == host_end)
            return stk_fail(STK_EINVAL, "SigV4: empty port in the URL");
        for (; q < host_end; q++) {
            if (*q < '0' || *q > '9' || port > 65535)
                return stk_fail(STK_EINVAL, "SigV4: malformed port in the URL");
            port = port * 10 + (*q - '0');
        }
        if (port > 65535)
            return stk_fail(STK_EINVAL, "SigV4: malformed port in the URL");
        u->port = port;
    }
    p = host_end;
    u->path = p;
    u->path_n = strcspn(p, "?#");
    p += u->path_n;
    if (*p == '?') {
        u->query = p + 1;
        u->query_n = strcspn(p + 1, "#");
    }
    return 0;
}

/* RFC 3986 5.2.4 remove_dot_segments, plus AWS's removal of empty
 * segments, as botocore's normalize_url_path does it: split on '/', drop
 * "" and ".", ".." pops; keep a leading '/' and a trailing one when any
 * segment is left. */
static void sb_normalized_path(sbuf *b, const char *path, size_t n)
{
    if (n == 0) {
        sb_chr(b, '/');
        return;
    }
    /* The kept segments, as (offset, length) pairs. */
    size_t cap = n / 2 + 2, count = 0;
    size_t *seg = malloc(cap * 2 * sizeof *seg);
    if (!seg) {
        b->oom = true;
        return;
    }
    size_t i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && path[j] != '/')
            j++;
        size_t len = j - i;
        if (len == 0 || (len == 1 && path[i] == '.')) {
            /* dropped */
        } else if (len == 2 && path[i] == '.' && path[i + 1] == '.') {
            if (count)
                count--;
        } else {
            seg[2 * count] = i;
            seg[2 * count + 1] = len;
            count++;
        }
        i = j + 1;
    }
    sbuf raw = {0};
    if (path[0] == '/')
        sb_chr(&raw, '/');
    for (size_t k = 0; k < count; k++) {
        if (k)
            sb_chr(&raw, '/');
        sb_put(&raw, path + seg[2 * k], seg[2 * k + 1]);
    }
    if (path[n - 1] == '/' && count)
        sb_chr(&raw, '/');
    free(seg);
    if (raw.oom) {
        b->oom = true;
    } else if (raw.n == 0) {
        /* "a/.." style relative path reduced to nothing */
    } else {
        sb_encode(b, raw.p, raw.n, true);
    }
    free(raw.p);
}

/* ---- query ----------------------------------------------------------------- */

typedef struct qpair {
    char *name, *value; /* encoded; malloc'd */
} qpair;

static int qpair_cmp(const void *a, const void *b)
{
    const qpair *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->value, y->value);
}

static char *recode_dup(const char *s, size_t n)
{
    sbuf b = {0};
    sb_recode(&b, s, n, false);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p ? b.p : calloc(1, 1);
}

static int sb_canonical_query(sbuf *b, const char *q, size_t n)
{
    if (!q || n == 0)
        return 0;
    size_t count = 1;
    for (size_t i = 0; i < n; i++)
        count += q[i] == '&';
    qpair *pairs = calloc(count, sizeof *pairs);
    if (!pairs)
        return stk_fail(STK_ENOMEM, "SigV4: out of memory");
    size_t np = 0;
    int rc = 0;
    for (size_t i = 0; i <= n;) {
        size_t j = i;
        while (j < n && q[j] != '&')
            j++;
        if (j > i) {
            const char *eq = memchr(q + i, '=', j - i);
            size_t name_n = eq ? (size_t)(eq - (q + i)) : j - i;
            pairs[np].name = recode_dup(q + i, name_n);
            pairs[np].value = eq ? recode_dup(eq + 1, (size_t)(q + j - eq - 1)) : calloc(1, 1);
            np++;
            if (!pairs[np - 1].name || !pairs[np - 1].value) {
                rc = stk_fail(STK_ENOMEM, "SigV4: out of memory");
                goto done;
            }
        }
        i = j + 1;
    }
    qsort(pairs, np, sizeof *pairs, qpair_cmp);
    for (size_t k = 0; k < np; k++) {
        if (k)
            sb_chr(b, '&');
        sb_str(b, pairs[k].name);
        sb_chr(b, '=');
        sb_str(b, pairs[k].value);
    }
done:
    for (size_t k = 0; k < np; k++) {
        free(pairs[k].name);
        free(pairs[k].value);
    }
    free(pairs);
    return rc;
}

/* ---- headers --------------------------------------------------------------- */

typedef struct hdr {
    char name[128];   /* lower-case */
    const char *value; /* trimmed start (lent) */
    size_t value_n;   /* trimmed length (inner runs collapsed when written) */
    size_t order;
} hdr;

static int hdr_cmp(const void *a, const void *b)
{
    const hdr *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

static bool is_ws(char c) { return c == ' ' || c == '\t'; }

/* The value with runs of spaces/tabs as one space (already trimmed). */
static void sb_trimall(sbuf *b, const char *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (is_ws(v[i])) {
            while (i + 1 < n && is_ws(v[i + 1]))
                i++;
            sb_chr(b, ' ');
        } else {
            sb_chr(b, v[i]);
        }
    }
}

static int hdr_set(hdr *h, const char *name, size_t name_n, const char *value, size_t order)
{
    if (name_n == 0 || name_n >= sizeof h->name)
        return stk_fail(STK_EINVAL, "SigV4: a header name is empty or longer than %zu bytes",
                        sizeof h->name - 1);
    for (size_t i = 0; i < name_n; i++) {
        char c = name[i];
        if ((unsigned char)c <= ' ' || c == ':' || (unsigned char)c >= 127)
            return stk_fail(STK_EINVAL, "SigV4: a header name has a space or control character");
        h->name[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    h->name[name_n] = 0;
    size_t n = strlen(value);
    while (n && is_ws(*value)) {
        value++;
        n--;
    }
    while (n && is_ws(value[n - 1]))
        n--;
    h->value = value;
    h->value_n = n;
    h->order = order;
    return 0;
}

static bool excluded(const char *name, const stk_sigv4_request *req, bool token)
{
    static const char *const never[] = {"expect", "user-agent", "x-amzn-trace-id",
                                        "authorization", "x-amz-date"};
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (!strcmp(name, never[i]))
            return true;
    if (token && !strcmp(name, "x-amz-security-token"))
        return true;
    if (req->content_sha256_header && !strcmp(name, "x-amz-content-sha256"))
        return true;
    return false;
}

static bool clean_value(const char *s)
{
    for (; *s; s++)
        if (*s == '\r' || *s == '\n' || *s == 0x7f || ((unsigned char)*s < ' ' && *s != '\t'))
            return false;
    return true;
}

/* ---- signing --------------------------------------------------------------- */

void stk_sigv4_signed_free(stk_sigv4_signed *s)
{
    if (!s)
        return;
    for (uint32_t i = 0; i < s->n_add && i < STK_SIGV4_MAX_ADD; i++)
        free(s->add[i]);
    free(s->canonical_request);
    free(s->string_to_sign);
    memset(s, 0, sizeof *s);
}

static char *line_dup(const char *name, const char *value)
{
    size_t a = strlen(name), b = strlen(value);
    char *p = malloc(a + b + 3);
    if (p) {
        memcpy(p, name, a);
        memcpy(p + a, ": ", 2);
        memcpy(p + a + 2, value, b + 1);
    }
    return p;
}

static bool scope_part_ok(const char *s)
{
    if (!s || !*s)
        return false;
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || *s == '/' || (unsigned char)*s >= 127)
            return false;
    return true;
}

int stk_sigv4_sign(const stk_sigv4_request *req, const stk_sigv4_credentials *cred,
                   stk_sigv4_signed *out)
{
    memset(out, 0, sizeof *out);
    if (!req || !cred || !req->method || !*req->method || !req->url)
        return stk_fail(STK_EINVAL, "SigV4: missing method or URL");
    if (!scope_part_ok(req->region) || !scope_part_ok(req->service))
        return stk_fail(STK_EINVAL, "SigV4: the region and the service must be non-empty, "
                                    "without spaces or '/'");
    if (!scope_part_ok(cred->access_key) || strchr(cred->access_key, ','))
        return stk_fail(STK_EINVAL, "SigV4: the access key id is empty or has a space, ',' "
                                    "or '/'");
    if (!cred->secret_key)
        return stk_fail(STK_EINVAL, "SigV4: no secret access key");
    bool token = cred->session_token && cred->session_token[0];
    if (token && !clean_value(cred->session_token))
        return stk_fail(STK_EINVAL, "SigV4: the session token has a control character");
    const char *payload = req->payload_hash ? req->payload_hash : STK_SHA256_EMPTY;
    if (!clean_value(payload) || !*payload)
        return stk_fail(STK_EINVAL, "SigV4: malformed payload hash");
    if (req->n_headers > MAX_HEADERS)
        return stk_fail(STK_ELIMIT, "SigV4: more than %d headers", MAX_HEADERS);
    url_parts u;
    int rc = url_split(req->url, &u);
    if (rc)
        return rc;
    rc = stk_sigv4_amz_date(req->time, out->amz_date);
    if (rc)
        return rc;

    /* The headers to sign: the request's, less the excluded, plus ours. */
    hdr h[MAX_HEADERS + 4];
    size_t nh = 0;
    bool have_host = false;
    for (size_t i = 0; i < req->n_headers; i++) {
        const char *line = req->headers[i];
        const char *colon = line ? strchr(line, ':') : NULL;
        if (!colon)
            return stk_fail(STK_EINVAL, "SigV4: header line %zu has no ':'", i);
        if (!clean_value(colon + 1))
            return stk_fail(STK_EINVAL, "SigV4: header line %zu has a control character", i);
        size_t name_n = (size_t)(colon - line);
        while (name_n && is_ws(line[name_n - 1]))
            name_n--;
        rc = hdr_set(&h[nh], line, name_n, colon + 1, i);
        if (rc)
            return rc;
        if (excluded(h[nh].name, req, token))
            continue;
        if (!strcmp(h[nh].name, "host"))
            have_host = true;
        nh++;
    }
    char host[600];
    if (!have_host) {
        if (u.host_n + 8 > sizeof host)
            return stk_fail(STK_ELIMIT, "SigV4: the URL's host is longer than %zu bytes",
                            sizeof host - 8);
        for (size_t i = 0; i < u.host_n; i++) {
            char c = u.host[i];
            host[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
        }
        size_t n = u.host_n;
        long def = u.https ? 443 : 80;
        if (u.port >= 0 && u.port != def)
            n += (size_t)snprintf(host + n, sizeof host - n, ":%ld", u.port);
        host[n] = 0;
        hdr_set(&h[nh++], "host", 4, host, req->n_headers);
    }
    hdr_set(&h[nh++], "x-amz-date", 10, out->amz_date, req->n_headers + 1);
    if (req->content_sha256_header)
        hdr_set(&h[nh++], "x-amz-content-sha256", 20, payload, req->n_headers + 2);
    if (token)
        hdr_set(&h[nh++], "x-amz-security-token", 20, cred->session_token, req->n_headers + 3);
    qsort(h, nh, sizeof *h, hdr_cmp);

    sbuf cr = {0}, sh = {0}, sts = {0};
    sb_str(&cr, req->method);
    sb_chr(&cr, '\n');
    if (req->path_mode == STK_SIGV4_PATH_NORMALIZE)
        sb_normalized_path(&cr, u.path, u.path_n);
    else if (u.path_n == 0)
        sb_chr(&cr, '/');
    else
        sb_recode(&cr, u.path, u.path_n, true);
    sb_chr(&cr, '\n');
    rc = sb_canonical_query(&cr, u.query, u.query_n);
    if (rc)
        goto fail;
    sb_chr(&cr, '\n');
    for (size_t i = 0; i < nh; i++) {
        bool first = i == 0 || strcmp(h[i].name, h[i - 1].name);
        if (first) {
            if (i)
                sb_chr(&cr, '\n');
            sb_str(&cr, h[i].name);
            sb_chr(&cr, ':');
            if (i)
                sb_chr(&sh, ';');
            sb_str(&sh, h[i].name);
        } else {
            sb_chr(&cr, ',');
        }
        sb_trimall(&cr, h[i].value, h[i].value_n);
    }
    sb_str(&cr, "\n\n");
    sb_put(&cr, sh.p ? sh.p : "", sh.n);
    sb_chr(&cr, '\n');
    sb_str(&cr, payload);
    if (cr.oom || sh.oom) {
        rc = stk_fail(STK_ENOMEM, "SigV4: out of memory");
        goto fail;
    }
    if (sh.n + 1 > sizeof out->signed_headers) {
        rc = stk_fail(STK_ELIMIT, "SigV4: the signed header names exceed %zu bytes",
                      sizeof out->signed_headers - 1);
        goto fail;
    }
    memcpy(out->signed_headers, sh.p, sh.n + 1);

    char ymd[9], scope[256];
    memcpy(ymd, out->amz_date, 8);
    ymd[8] = 0;
    if ((size_t)snprintf(scope, sizeof scope, "%s/%s/%s/aws4_request", ymd, req->region,
                         req->service) >= sizeof scope) {
        rc = stk_fail(STK_ELIMIT, "SigV4: the region and service names are too long");
        goto fail;
    }
    char cr_hash[STK_SHA256_HEX_LEN + 1];
    stk_sha256_hex(cr.p, cr.n, cr_hash);
    sb_str(&sts, "AWS4-HMAC-SHA256\n");
    sb_str(&sts, out->amz_date);
    sb_chr(&sts, '\n');
    sb_str(&sts, scope);
    sb_chr(&sts, '\n');
    sb_str(&sts, cr_hash);
    if (sts.oom) {
        rc = stk_fail(STK_ENOMEM, "SigV4: out of memory");
        goto fail;
    }

    /* The signing key: "AWS4" + secret, then date, region, service, "aws4_request". */
    size_t sk = strlen(cred->secret_key);
    uint8_t *k0 = malloc(sk + 4);
    if (!k0) {
        rc = stk_fail(STK_ENOMEM, "SigV4: out of memory");
        goto fail;
    }
    memcpy(k0, "AWS4", 4);
    memcpy(k0 + 4, cred->secret_key, sk);
    uint8_t k[STK_SHA256_LEN], sig[STK_SHA256_LEN];
    stk_hmac_sha256(k0, sk + 4, ymd, 8, k);
    memset(k0, 0, sk + 4);
    free(k0);
    stk_hmac_sha256(k, sizeof k, req->region, strlen(req->region), k);
    stk_hmac_sha256(k, sizeof k, req->service, strlen(req->service), k);
    stk_hmac_sha256(k, sizeof k, "aws4_request", 12, k);
    stk_hmac_sha256(k, sizeof k, sts.p, sts.n, sig);
    memset(k, 0, sizeof k);
    hex32(sig, out->signature);

    sbuf auth = {0};
    sb_str(&auth, "AWS4-HMAC-SHA256 Credential=");
    sb_str(&auth, cred->access_key);
    sb_chr(&auth, '/');
    sb_str(&auth, scope);
    sb_str(&auth, ", SignedHeaders=");
    sb_str(&auth, out->signed_headers);
    sb_str(&auth, ", Signature=");
    sb_str(&auth, out->signature);
    if (auth.oom) {
        free(auth.p);
        rc = stk_fail(STK_ENOMEM, "SigV4: out of memory");
        goto fail;
    }
    out->add[out->n_add++] = line_dup("X-Amz-Date", out->amz_date);
    if (req->content_sha256_header)
        out->add[out->n_add++] = line_dup("X-Amz-Content-SHA256", payload);
    if (token)
        out->add[out->n_add++] = line_dup("X-Amz-Security-Token", cred->session_token);
    out->add[out->n_add++] = line_dup("Authorization", auth.p);
    free(auth.p);
    for (uint32_t i = 0; i < out->n_add; i++)
        if (!out->add[i]) {
            rc = stk_fail(STK_ENOMEM, "SigV4: out of memory");
            goto fail;
        }
    out->canonical_request = cr.p;
    out->string_to_sign = sts.p;
    free(sh.p);
    return 0;

fail:
    free(cr.p);
    free(sh.p);
    free(sts.p);
    stk_sigv4_signed_free(out);
    return rc;
}
