/*
 * s3.c — the S3 client pieces: configuration, addressing, signing for the
 * HTTP engine, ListObjectsV2, HEAD, PUT, multipart upload, error bodies
 * (the rules are in s3.h).
 *
 * Everything that does not touch the network is a pure function: the
 * configuration reads its variables through a getter (tests pass a table),
 * URLs are built from a config and a name, and the XML of S3's answers
 * (ListBucketResult, InitiateMultipartUploadResult, Error) is parsed from
 * bytes. The network functions are thin: build the URL, submit through the
 * engine (http.h) with stk_s3_sign as the per-attempt signer, parse.
 *
 * XML is parsed with expat. A response is hostile input like any file: a
 * DOCTYPE is refused outright (so no entity can be declared, let alone
 * expanded), an element's text is capped at 64 KiB, a page's size at
 * max_page_bytes (the engine stops reading past it), the number of keys at
 * max_keys, and a server that repeats a continuation token (a listing that
 * would never end) is an error. Entities and character references S3 uses
 * in keys (&amp; &lt; &#x0D; ...) are resolved by expat.
 *
 * Multipart upload keeps max_in_flight parts in the engine at once, each in
 * its own buffer, read from the file with pread and hashed (SHA-256, for
 * the signature) on the calling thread before it is submitted, so the I/O
 * thread only signs. Parts complete in any order; the caller waits for the
 * oldest, so at most max_in_flight buffers exist.
 */
#include "io/s3.h"

#include "core/error.h"
#include "core/util.h"
#include "io/sigv4.h"

#include <errno.h>
#include <expat.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define URL_CAP 8192
#define XML_TEXT_MAX (64u << 10)
#define DEFAULT_PART ((uint64_t)8 << 20)
#define DEFAULT_MAX_KEYS ((size_t)10 * 1000 * 1000)
#define DEFAULT_PAGE_BYTES ((size_t)16 << 20)
#define UPLOAD_ID_CAP 700

/* ---- configuration -------------------------------------------------------- */

static const char *env_get(void *ctx, const char *name)
{
    (void)ctx;
    return getenv(name);
}

static const char *nonempty(stk_s3_getenv_fn get, void *ctx, const char *name)
{
    const char *v = get(ctx, name);
    return v && *v ? v : NULL;
}

static int copy_var(char *dst, size_t cap, const char *value, const char *name)
{
    size_t n = strlen(value);
    if (n >= cap)
        return stk_fail(STK_ELIMIT, "%s is longer than %zu bytes", name, cap - 1);
    memcpy(dst, value, n + 1);
    return 0;
}

static bool printable_no_space(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || (unsigned char)*s >= 127)
            return false;
    return true;
}

/* Validate and normalise an endpoint URL into c->endpoint: scheme://host
 * (lower-cased)[:port][/base] without a trailing '/'. */
static int set_endpoint(stk_s3_config *c, const char *v, const char *var)
{
    size_t skip;
    if (!strncasecmp(v, "https://", 8))
        skip = 8;
    else if (!strncasecmp(v, "http://", 7))
        skip = 7;
    else
        return stk_fail(STK_EINVAL, "%s='%s': expected http://HOST[:PORT] or https://...", var, v);
    size_t n = strlen(v);
    while (n > skip && v[n - 1] == '/')
        n--;
    if (n >= sizeof c->endpoint)
        return stk_fail(STK_ELIMIT, "%s is longer than %zu bytes", var, sizeof c->endpoint - 1);
    size_t host_n = strcspn(v + skip, "/?#");
    if (host_n == 0)
        return stk_fail(STK_EINVAL, "%s='%s': no host", var, v);
    if (strpbrk(v + skip, "?#@ \t"))
        return stk_fail(STK_EINVAL, "%s='%s': an endpoint has no query, fragment, user or "
                                    "spaces", var, v);
    for (size_t i = 0; i < n; i++) {
        char ch = v[i];
        if (i < skip + host_n && ch >= 'A' && ch <= 'Z')
            ch = (char)(ch - 'A' + 'a');
        c->endpoint[i] = ch;
    }
    c->endpoint[n] = 0;
    return 0;
}

int stk_s3_config_load(stk_s3_config *c, stk_s3_getenv_fn get, void *ctx)
{
    memset(c, 0, sizeof *c);
    if (!get)
        get = env_get;
    const char *ak = nonempty(get, ctx, "AWS_ACCESS_KEY_ID");
    const char *sk = nonempty(get, ctx, "AWS_SECRET_ACCESS_KEY");
    const char *tok = nonempty(get, ctx, "AWS_SESSION_TOKEN");
    int rc;
    if (ak && !sk)
        return stk_fail(STK_EINVAL, "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not "
                                    "(set both, or neither for anonymous requests)");
    if (sk && !ak)
        return stk_fail(STK_EINVAL, "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not "
                                    "(set both, or neither for anonymous requests)");
    if (tok && !ak)
        return stk_fail(STK_EINVAL, "AWS_SESSION_TOKEN is set without AWS_ACCESS_KEY_ID and "
                                    "AWS_SECRET_ACCESS_KEY");
    if (ak) {
        if ((rc = copy_var(c->access_key, sizeof c->access_key, ak, "AWS_ACCESS_KEY_ID")) ||
            (rc = copy_var(c->secret_key, sizeof c->secret_key, sk, "AWS_SECRET_ACCESS_KEY")))
            goto fail;
        if (!printable_no_space(c->access_key) || strpbrk(c->access_key, "/,")) {
            rc = stk_fail(STK_EINVAL, "AWS_ACCESS_KEY_ID has a space, '/', ',' or a control "
                                      "character");
            goto fail;
        }
        if (tok) {
            if ((rc = copy_var(c->session_token, sizeof c->session_token, tok,
                               "AWS_SESSION_TOKEN")))
                goto fail;
            if (!printable_no_space(c->session_token)) {
                rc = stk_fail(STK_EINVAL, "AWS_SESSION_TOKEN has a space or a control character");
                goto fail;
            }
        }
    } else {
        c->anonymous = true;
    }
    const char *region_var = "AWS_REGION";
    const char *region = nonempty(get, ctx, region_var);
    if (!region) {
        region_var = "AWS_DEFAULT_REGION";
        region = nonempty(get, ctx, region_var);
    }
    if (!region)
        region = "us-east-1";
    if ((rc = copy_var(c->region, sizeof c->region, region, region_var)))
        goto fail;
    if (!printable_no_space(c->region) || strchr(c->region, '/')) {
        rc = stk_fail(STK_EINVAL, "%s='%s': a region has no spaces or '/'", region_var, region);
        goto fail;
    }
    const char *ep_var = "AWS_ENDPOINT_URL_S3";
    const char *ep = nonempty(get, ctx, ep_var);
    if (!ep) {
        ep_var = "AWS_ENDPOINT_URL";
        ep = nonempty(get, ctx, ep_var);
    }
    if (ep && (rc = set_endpoint(c, ep, ep_var)))
        goto fail;
    const char *addr = nonempty(get, ctx, "STOKER_S3_ADDRESSING");
    if (addr) {
        if (!strcmp(addr, "path"))
            c->addressing = STK_S3_ADDR_PATH;
        else if (!strcmp(addr, "virtual"))
            c->addressing = STK_S3_ADDR_VIRTUAL;
        else if (!strcmp(addr, "auto"))
            c->addressing = STK_S3_ADDR_AUTO;
        else {
            rc = stk_fail(STK_EINVAL, "STOKER_S3_ADDRESSING='%s': expected path, virtual or auto",
                          addr);
            goto fail;
        }
    }
    return 0;
fail:
    memset(c, 0, sizeof *c);
    return rc;
}

/* ---- names and URLs ------------------------------------------------------- */

static bool bucket_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '-' || ch == '_';
}

int stk_s3_parse_url(const char *url, stk_s3_location *loc)
{
    memset(loc, 0, sizeof *loc);
    if (!url || strncmp(url, "s3://", 5))
        return stk_fail(STK_EINVAL, "%s: not an s3://BUCKET/KEY URL", url ? url : "(null)");
    const char *b = url + 5;
    size_t bn = strcspn(b, "/");
    if (bn == 0)
        return stk_fail(STK_EINVAL, "%s: no bucket name after s3://", url);
    if (bn > STK_S3_MAX_BUCKET)
        return stk_fail(STK_ELIMIT, "%s: the bucket name is longer than %d characters", url,
                        STK_S3_MAX_BUCKET);
    for (size_t i = 0; i < bn; i++)
        if (!bucket_char(b[i]))
            return stk_fail(STK_EINVAL, "%s: the bucket name '%.*s' has a character that is not "
                                        "allowed (letters, digits, '.', '-', '_')", url, (int)bn, b);
    memcpy(loc->bucket, b, bn);
    const char *k = b[bn] == '/' ? b + bn + 1 : b + bn;
    size_t kn = strlen(k);
    if (kn > STK_S3_MAX_KEY) /* the URL shortened: the message must keep its reason */
        return stk_fail(STK_ELIMIT, "%.200s...: the key is %zu bytes, longer than %d bytes "
                                    "(S3's limit)", url, kn, STK_S3_MAX_KEY);
    memcpy(loc->key, k, kn + 1);
    return 0;
}

/* A bucket that can be a DNS label of a virtual host. */
static bool virtual_bucket(const char *b)
{
    size_t n = strlen(b);
    if (n < 3 || n > 63 || b[0] == '-' || b[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '-'))
            return false;
    return true;
}

int stk_s3_object_url(const stk_s3_config *c, const char *bucket, const char *key,
                      const char *query, char *out, size_t cap)
{
    stk_s3_addressing mode = c->addressing;
    if (mode == STK_S3_ADDR_AUTO) {
        mode = c->endpoint[0] ? STK_S3_ADDR_PATH : STK_S3_ADDR_VIRTUAL;
        if (mode == STK_S3_ADDR_VIRTUAL && !virtual_bucket(bucket))
            mode = STK_S3_ADDR_PATH;
    } else if (mode == STK_S3_ADDR_VIRTUAL && !virtual_bucket(bucket)) {
        return stk_fail(STK_EINVAL, "s3://%s: STOKER_S3_ADDRESSING=virtual, but the bucket name "
                                    "cannot be a host name (3-63 of a-z 0-9 -); use path",
                        bucket);
    }
    char *ekey = malloc(3 * strlen(key) + 1);
    if (!ekey)
        return stk_fail(STK_ENOMEM, "out of memory");
    int rc = stk_sigv4_uri_encode(key, strlen(key), true, ekey, 3 * strlen(key) + 1);
    if (rc < 0) {
        free(ekey);
        return rc;
    }
    char scheme_host[600], base[512];
    base[0] = 0;
    if (!c->endpoint[0]) {
        const char *suffix = strncmp(c->region, "cn-", 3) ? "amazonaws.com" : "amazonaws.com.cn";
        snprintf(scheme_host, sizeof scheme_host, "https://%s%ss3.%s.%s",
                 mode == STK_S3_ADDR_VIRTUAL ? bucket : "", mode == STK_S3_ADDR_VIRTUAL ? "." : "",
                 c->region, suffix);
    } else {
        const char *sep = strstr(c->endpoint, "://") + 3;
        size_t hn = strcspn(sep, "/");
        snprintf(base, sizeof base, "%s", sep + hn);
        snprintf(scheme_host, sizeof scheme_host, "%.*s%s%s%.*s", (int)(sep - c->endpoint),
                 c->endpoint, mode == STK_S3_ADDR_VIRTUAL ? bucket : "",
                 mode == STK_S3_ADDR_VIRTUAL ? "." : "", (int)hn, sep);
    }
    int n;
    const char *q = query && *query ? query : NULL;
    if (mode == STK_S3_ADDR_VIRTUAL)
        n = snprintf(out, cap, "%s%s/%s%s%s", scheme_host, base, ekey, q ? "?" : "", q ? q : "");
    else
        n = snprintf(out, cap, "%s%s/%s%s%s%s%s", scheme_host, base, bucket, key[0] ? "/" : "",
                     ekey, q ? "?" : "", q ? q : "");
    free(ekey);
    if (n < 0 || (size_t)n >= cap) {
        if (cap)
            out[0] = 0;
        return stk_fail(STK_ELIMIT, "s3://%s/%s: the request URL is longer than %zu bytes", bucket,
                        key, cap - 1);
    }
    return 0;
}

/* ---- signing -------------------------------------------------------------- */

static bool header_named(const char *line, const char *name)
{
    size_t n = strlen(name);
    return !strncasecmp(line, name, n) && (line[n] == ':' || line[n] == ' ' || line[n] == '\t');
}

int stk_s3_sign(void *ctx, const stk_http_sign_input *in, stk_http_headers *out)
{
    stk_s3_signer *s = ctx;
    const stk_s3_config *c = s->cfg;
    if (c->anonymous)
        return 0;
    /* Drop the lines the signature replaces (a caller's, or a previous
     * attempt's if the engine kept them). */
    uint32_t keep = 0;
    for (uint32_t i = 0; i < out->n; i++) {
        const char *l = out->line[i];
        if (header_named(l, "x-amz-date") || header_named(l, "x-amz-content-sha256") ||
            header_named(l, "x-amz-security-token") || header_named(l, "authorization"))
            free(out->line[i]);
        else
            out->line[keep++] = out->line[i];
    }
    out->n = keep;
    char hash[STK_SHA256_HEX_LEN + 1];
    const char *payload;
    if (s->payload_hash[0]) {
        payload = s->payload_hash;
    } else if (in->body || strcmp(in->method, "PUT") == 0 || strcmp(in->method, "POST") == 0) {
        stk_sha256_hex(in->body, in->body ? in->body_size : 0, hash);
        payload = hash;
    } else {
        payload = STK_SIGV4_UNSIGNED_PAYLOAD;
    }
    stk_sigv4_request q = {
        .method = in->method,
        .url = in->url,
        .headers = (const char *const *)out->line,
        .n_headers = out->n,
        .payload_hash = payload,
        .time = c->fixed_time ? c->fixed_time : (int64_t)time(NULL),
        .region = c->region,
        .service = "s3",
        .path_mode = STK_SIGV4_PATH_S3,
        .content_sha256_header = true,
    };
    stk_sigv4_credentials cred = {c->access_key, c->secret_key,
                                  c->session_token[0] ? c->session_token : NULL};
    stk_sigv4_signed sig;
    int rc = stk_sigv4_sign(&q, &cred, &sig);
    if (rc)
        return rc;
    if (out->n + sig.n_add > STK_HTTP_MAX_HEADERS) {
        stk_sigv4_signed_free(&sig);
        return stk_fail(STK_ELIMIT, "s3: too many request headers to sign (%u + %u > %d)",
                        out->n, sig.n_add, STK_HTTP_MAX_HEADERS);
    }
    for (uint32_t i = 0; i < sig.n_add; i++) {
        out->line[out->n++] = sig.add[i];
        sig.add[i] = NULL; /* moved */
    }
    stk_sigv4_signed_free(&sig);
    return 0;
}

/* ---- XML ------------------------------------------------------------------ */

#define XML_DEPTH 8

typedef struct xml_walk xml_walk;
struct xml_walk {
    XML_Parser p;
    int depth;                   /* open elements */
    char name[XML_DEPTH][64];    /* local names of the first XML_DEPTH levels */
    char *text;                  /* the current element's text (malloc'd) */
    size_t text_n, text_cap;
    int rc;                      /* first error (0: none) */
    char err[512];
    /* Called at each element's end with its path depth (1 = root), local
     * name, and text (NUL-terminated). Returns 0 or a code (message set with
     * stk_fail): parsing stops. */
    int (*on_end)(xml_walk *w, int depth, const char *name, const char *text, size_t n);
    /* Called at each element's start (may be NULL). */
    int (*on_start)(xml_walk *w, int depth, const char *name);
    void *user;
};

static const char *local_name(const char *name)
{
    const char *sep = strrchr(name, '\x01'); /* namespace separator */
    return sep ? sep + 1 : name;
}

static void xml_stop(xml_walk *w, int rc, const char *msg)
{
    if (!w->rc) {
        w->rc = rc;
        snprintf(w->err, sizeof w->err, "%s", msg);
    }
    XML_StopParser(w->p, XML_FALSE);
}

static void XMLCALL on_start(void *ud, const XML_Char *name, const XML_Char **attrs)
{
    (void)attrs;
    xml_walk *w = ud;
    if (w->rc)
        return;
    w->depth++;
    if (w->depth <= XML_DEPTH)
        snprintf(w->name[w->depth - 1], sizeof w->name[0], "%s", local_name(name));
    w->text_n = 0;
    if (w->text)
        w->text[0] = 0;
    if (w->on_start && w->depth <= XML_DEPTH) {
        int rc = w->on_start(w, w->depth, w->name[w->depth - 1]);
        if (rc)
            xml_stop(w, rc, stk_errmsg());
    }
}

static void XMLCALL on_end(void *ud, const XML_Char *name)
{
    (void)name;
    xml_walk *w = ud;
    if (w->rc)
        return;
    if (w->depth <= XML_DEPTH) {
        int rc = w->on_end(w, w->depth, w->name[w->depth - 1], w->text ? w->text : "", w->text_n);
        if (rc)
            xml_stop(w, rc, stk_errmsg());
    }
    w->depth--;
    w->text_n = 0;
    if (w->text)
        w->text[0] = 0;
}

static void XMLCALL on_text(void *ud, const XML_Char *s, int len)
{
    xml_walk *w = ud;
    if (w->rc || len <= 0)
        return;
    if (w->text_n + (size_t)len > XML_TEXT_MAX) {
        xml_stop(w, STK_ELIMIT, "an element's text is longer than 64 KiB");
        return;
    }
    if (w->text_n + (size_t)len + 1 > w->text_cap) {
        size_t cap = w->text_cap ? w->text_cap : 256;
        while (cap < w->text_n + (size_t)len + 1)
            cap *= 2;
        char *t = realloc(w->text, cap);
        if (!t) {
            xml_stop(w, STK_ENOMEM, "out of memory");
            return;
        }
        w->text = t;
        w->text_cap = cap;
    }
    memcpy(w->text + w->text_n, s, (size_t)len);
    w->text_n += (size_t)len;
    w->text[w->text_n] = 0;
}

static void XMLCALL on_doctype(void *ud, const XML_Char *name, const XML_Char *sysid,
                               const XML_Char *pubid, int has_internal)
{
    (void)name, (void)sysid, (void)pubid, (void)has_internal;
    xml_stop(ud, STK_EFORMAT, "a DOCTYPE (refused: S3 responses declare no entities)");
}

static void XMLCALL on_entity_decl(void *ud, const XML_Char *name, int is_param,
                                   const XML_Char *value, int value_len, const XML_Char *base,
                                   const XML_Char *sysid, const XML_Char *pubid,
                                   const XML_Char *notation)
{
    (void)name, (void)is_param, (void)value, (void)value_len, (void)base, (void)sysid;
    (void)pubid, (void)notation;
    xml_stop(ud, STK_EFORMAT, "an entity declaration (refused)");
}

/* Parse n bytes with w's callbacks. 0, or the callback's / expat's code with
 * the message "malformed XML at line L: REASON" or the callback's. The
 * message is set with stk_fail (callers prefix the URL). */
static int xml_run(xml_walk *w, const char *xml, size_t n)
{
    w->p = XML_ParserCreateNS(NULL, '\x01');
    if (!w->p)
        return stk_fail(STK_ENOMEM, "out of memory (XML parser)");
    XML_SetUserData(w->p, w);
    XML_SetElementHandler(w->p, on_start, on_end);
    XML_SetCharacterDataHandler(w->p, on_text);
    XML_SetStartDoctypeDeclHandler(w->p, on_doctype);
    XML_SetEntityDeclHandler(w->p, on_entity_decl);
    int rc = 0;
    if (n > INT32_MAX) {
        rc = stk_fail(STK_ELIMIT, "an XML document over 2 GiB");
    } else if (XML_Parse(w->p, xml ? xml : "", (int)n, XML_TRUE) == XML_STATUS_ERROR) {
        if (w->rc) {
            rc = w->rc;
            /* a callback's stk_fail message, or xml_stop's own */
            if (w->err[0])
                stk_fail(rc, "%s", w->err);
        } else {
            rc = stk_fail(STK_EFORMAT, "malformed XML at line %lu: %s",
                          (unsigned long)XML_GetCurrentLineNumber(w->p),
                          XML_ErrorString(XML_GetErrorCode(w->p)));
        }
    } else if (w->rc) {
        rc = stk_fail(w->rc, "%s", w->err);
    }
    XML_ParserFree(w->p);
    free(w->text);
    w->text = NULL;
    return rc;
}

/* -- Error documents -- */

typedef struct err_doc {
    bool is_error;
    char *code, *message;
    size_t code_cap, message_cap;
} err_doc;

static int err_start(xml_walk *w, int depth, const char *name)
{
    err_doc *d = w->user;
    if (depth == 1)
        d->is_error = !strcmp(name, "Error");
    return 0;
}

static int err_end(xml_walk *w, int depth, const char *name, const char *text, size_t n)
{
    err_doc *d = w->user;
    if (depth != 2 || !d->is_error)
        return 0;
    if (!strcmp(name, "Code") && d->code_cap)
        snprintf(d->code, d->code_cap, "%.*s", (int)n, text);
    else if (!strcmp(name, "Message") && d->message_cap)
        snprintf(d->message, d->message_cap, "%.*s", (int)n, text);
    return 0;
}

int stk_s3_parse_error(const char *xml, size_t n, char *code, size_t code_cap, char *message,
                       size_t message_cap)
{
    if (code_cap)
        code[0] = 0;
    if (message_cap)
        message[0] = 0;
    if (!xml || n == 0)
        return 0;
    err_doc d = {false, code, message, code_cap, message_cap};
    xml_walk w = {.on_start = err_start, .on_end = err_end, .user = &d};
    char saved[STK_ERRMSG_MAX];
    snprintf(saved, sizeof saved, "%s", stk_errmsg()); /* a parse failure is not news */
    int rc = xml_run(&w, xml, n);
    stk_errmsg_set(saved);
    if (rc || !d.is_error) {
        if (code_cap)
            code[0] = 0;
        if (message_cap)
            message[0] = 0;
        return 0;
    }
    return 1;
}

/* -- ListBucketResult -- */

typedef struct list_doc {
    stk_s3_listing *acc;
    stk_s3_list_page *page;
    size_t max_keys;
    char *key;        /* the current Contents' Key (malloc'd) */
    uint64_t size;
    bool have_size;
    char etag[72];
} list_doc;

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t cap2 = *cap ? *cap * 2 : 64;
    while (cap2 < need)
        cap2 *= 2;
    void *p = realloc(*arr, cap2 * elem);
    if (!p)
        return stk_fail(STK_ENOMEM, "out of memory (listing)");
    *arr = p;
    *cap = cap2;
    return 0;
}

static int list_start(xml_walk *w, int depth, const char *name)
{
    list_doc *d = w->user;
    if (depth == 1 && strcmp(name, "ListBucketResult"))
        return stk_fail(STK_EFORMAT, "not a ListBucketResult (the root element is <%s>)", name);
    if (depth == 2 && !strcmp(name, "Contents")) {
        free(d->key);
        d->key = NULL;
        d->have_size = false;
        d->size = 0;
        d->etag[0] = 0;
    }
    return 0;
}

static bool parse_u64(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9' || v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return true;
}

static int list_end(xml_walk *w, int depth, const char *name, const char *text, size_t n)
{
    list_doc *d = w->user;
    stk_s3_listing *acc = d->acc;
    if (depth == 2) {
        if (!strcmp(name, "IsTruncated")) {
            d->page->truncated = n == 4 && !strncmp(text, "true", 4);
        } else if (!strcmp(name, "NextContinuationToken")) {
            if (n >= sizeof d->page->next_token)
                return stk_fail(STK_ELIMIT, "a NextContinuationToken longer than %zu bytes",
                                sizeof d->page->next_token - 1);
            memcpy(d->page->next_token, text, n + 1);
        } else if (!strcmp(name, "Contents")) {
            if (!d->key)
                return stk_fail(STK_EFORMAT, "a Contents without a Key");
            if (!d->have_size)
                return stk_fail(STK_EFORMAT, "Contents '%s' without a Size", d->key);
            if (acc->n + acc->n_prefixes >= d->max_keys)
                return stk_fail(STK_ELIMIT, "more than %zu keys (the listing's limit)",
                                d->max_keys);
            int rc = grow((void **)&acc->objects, &acc->cap, acc->n + 1, sizeof *acc->objects);
            if (rc)
                return rc;
            stk_s3_object *o = &acc->objects[acc->n++];
            o->key = d->key;
            d->key = NULL;
            o->size = d->size;
            memcpy(o->etag, d->etag, sizeof o->etag);
            d->page->keys++;
        }
    } else if (depth == 3 && !strcmp(w->name[1], "Contents")) {
        if (!strcmp(name, "Key")) {
            if (n > STK_S3_MAX_KEY)
                return stk_fail(STK_ELIMIT, "a Key longer than %d bytes", STK_S3_MAX_KEY);
            if (strlen(text) != n)
                return stk_fail(STK_EFORMAT, "a Key with a NUL character");
            free(d->key);
            d->key = strdup(text);
            if (!d->key)
                return stk_fail(STK_ENOMEM, "out of memory (listing)");
        } else if (!strcmp(name, "Size")) {
            if (!parse_u64(text, n, &d->size))
                return stk_fail(STK_EFORMAT, "Size '%.40s' is not a number", text);
            d->have_size = true;
        } else if (!strcmp(name, "ETag")) {
            snprintf(d->etag, sizeof d->etag, "%s", text);
        }
    } else if (depth == 3 && !strcmp(w->name[1], "CommonPrefixes") && !strcmp(name, "Prefix")) {
        if (n > STK_S3_MAX_KEY)
            return stk_fail(STK_ELIMIT, "a Prefix longer than %d bytes", STK_S3_MAX_KEY);
        if (acc->n + acc->n_prefixes >= d->max_keys)
            return stk_fail(STK_ELIMIT, "more than %zu keys (the listing's limit)", d->max_keys);
        int rc = grow((void **)&acc->prefixes, &acc->cap_prefixes, acc->n_prefixes + 1,
                      sizeof *acc->prefixes);
        if (rc)
            return rc;
        char *p = strdup(text);
        if (!p)
            return stk_fail(STK_ENOMEM, "out of memory (listing)");
        acc->prefixes[acc->n_prefixes++] = p;
        d->page->prefixes++;
    }
    return 0;
}

int stk_s3_parse_list(const char *xml, size_t n, size_t max_keys, stk_s3_listing *acc,
                      stk_s3_list_page *page)
{
    memset(page, 0, sizeof *page);
    list_doc d = {.acc = acc, .page = page, .max_keys = max_keys ? max_keys : DEFAULT_MAX_KEYS};
    xml_walk w = {.on_start = list_start, .on_end = list_end, .user = &d};
    int rc = 0;
    if (!xml || n == 0)
        rc = stk_fail(STK_EFORMAT, "an empty response where a ListBucketResult was expected");
    else
        rc = xml_run(&w, xml, n);
    free(d.key);
    if (rc == 0 && page->truncated && !page->next_token[0])
        rc = stk_fail(STK_EFORMAT, "IsTruncated without a NextContinuationToken");
    return rc;
}

void stk_s3_listing_free(stk_s3_listing *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        free(l->objects[i].key);
    for (size_t i = 0; i < l->n_prefixes; i++)
        free(l->prefixes[i]);
    free(l->objects);
    free(l->prefixes);
    memset(l, 0, sizeof *l);
}

/* -- InitiateMultipartUploadResult / CompleteMultipartUploadResult -- */

typedef struct leaf_doc {
    const char *root, *leaf;
    bool root_ok, found;
    char *out;
    size_t cap;
    bool too_long;
} leaf_doc;

static int leaf_start(xml_walk *w, int depth, const char *name)
{
    leaf_doc *d = w->user;
    if (depth == 1)
        d->root_ok = !strcmp(name, d->root);
    return 0;
}

static int leaf_end(xml_walk *w, int depth, const char *name, const char *text, size_t n)
{
    leaf_doc *d = w->user;
    if (depth == 2 && d->root_ok && !strcmp(name, d->leaf)) {
        if (n >= d->cap) {
            d->too_long = true;
        } else {
            memcpy(d->out, text, n + 1);
            d->found = true;
        }
    }
    return 0;
}

/* The text of <root><leaf> (0), STK_EFORMAT (not there), STK_ELIMIT. */
static int parse_leaf(const char *xml, size_t n, const char *root, const char *leaf, char *out,
                      size_t cap)
{
    out[0] = 0;
    leaf_doc d = {root, leaf, false, false, out, cap, false};
    xml_walk w = {.on_start = leaf_start, .on_end = leaf_end, .user = &d};
    int rc = xml_run(&w, xml, n);
    if (rc)
        return rc;
    if (!d.root_ok)
        return stk_fail(STK_EFORMAT, "not a %s document", root);
    if (d.too_long)
        return stk_fail(STK_ELIMIT, "%s longer than %zu bytes", leaf, cap - 1);
    if (!d.found)
        return stk_fail(STK_EFORMAT, "a %s without %s", root, leaf);
    return 0;
}

int stk_s3_parse_upload_id(const char *xml, size_t n, char *out, size_t cap)
{
    return parse_leaf(xml, n, "InitiateMultipartUploadResult", "UploadId", out, cap);
}

/* The request bodies built here grow in a stk_textbuf (core/util.h). */
typedef stk_textbuf tbuf;
#define tb_put stk_textbuf_put
#define tb_str stk_textbuf_str


/* s with &, <, > as entities (an ETag is "quoted hex", but this is XML). */
static void tb_escaped(tbuf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '&')
            tb_str(b, "&amp;");
        else if (*s == '<')
            tb_str(b, "&lt;");
        else if (*s == '>')
            tb_str(b, "&gt;");
        else
            tb_put(b, s, 1);
    }
}

long stk_s3_complete_xml(const char *const *etags, uint32_t n, char **out)
{
    tbuf b = {0};
    tb_str(&b, "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
    for (uint32_t i = 0; i < n; i++) {
        char num[48];
        snprintf(num, sizeof num, "<Part><PartNumber>%u</PartNumber><ETag>", i + 1);
        tb_str(&b, num);
        tb_escaped(&b, etags[i]);
        tb_str(&b, "</ETag></Part>");
    }
    tb_str(&b, "</CompleteMultipartUpload>");
    *out = NULL;
    if (b.oom) {
        free(b.p);
        return stk_fail(STK_ENOMEM, "out of memory");
    }
    *out = b.p;
    return (long)b.n;
}

/* ---- errors ---------------------------------------------------------------- */

/* Replace each occurrence of secret in s (in place) with "[redacted]",
 * within cap. */
static void redact(char *s, size_t cap, const char *secret)
{
    size_t sn = secret ? strlen(secret) : 0;
    if (sn < 4) /* too short to be a credential; would redact ordinary words */
        return;
    static const char mark[] = "[redacted]";
    char *p;
    while ((p = strstr(s, secret))) {
        size_t tail = strlen(p + sn);
        size_t mn = sizeof mark - 1;
        if ((size_t)(p - s) + mn + tail + 1 > cap)
            tail = cap - 1 - (size_t)(p - s) - mn;
        memmove(p + mn, p + sn, tail);
        memcpy(p, mark, mn);
        p[mn + tail] = 0;
    }
}

int stk_s3_fail_response(const stk_s3_config *c, const char *what, const stk_http_response *r)
{
    char code[128], message[400];
    stk_s3_parse_error(r->body, r->body_size, code, sizeof code, message, sizeof message);
    if (c) {
        redact(message, sizeof message, c->secret_key);
        redact(message, sizeof message, c->session_token);
        redact(code, sizeof code, c->secret_key);
        redact(code, sizeof code, c->session_token);
    }
    /* Codes that refuse the credentials whatever the status (S3 answers
     * 400 for a bad or expired token and for a key of another region). */
    static const char *const access_codes[] = {
        "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken",
        "ExpiredToken", "TokenRefreshRequired", "AuthorizationHeaderMalformed",
        "AllAccessDisabled", "AccountProblem", "InvalidSecurity"};
    bool access = r->status == 401 || r->status == 403;
    for (size_t i = 0; i < sizeof access_codes / sizeof access_codes[0]; i++)
        access |= !strcmp(code, access_codes[i]);
    int rc;
    if (access)
        rc = STK_EACCESS;
    else if (r->status == 404 || !strcmp(code, "NoSuchBucket") || !strcmp(code, "NoSuchKey") ||
             !strcmp(code, "NoSuchUpload"))
        rc = STK_ENOENT;
    else if (r->rc < 0)
        rc = r->rc;
    else
        rc = STK_ENETWORK; /* a 200 whose body is an <Error> */
    if (r->status == 0) /* no HTTP answer: the engine's words (URL, reason, attempts) */
        return stk_fail(rc, "%s: %s", what, r->message[0] ? r->message : stk_strerror(rc));
    const char *hint = "";
    if (!code[0]) {
        if (r->status == 403 || r->status == 401)
            hint = ": access denied";
        else if (r->status == 404)
            hint = ": not found";
    }
    return stk_fail(rc, "%s: HTTP %ld%s%s%s%s%s (%s)", what, r->status, code[0] ? " " : "", code,
                    message[0] ? ": " : "", message, hint,
                    r->message[0] ? r->message : "the response was an error document");
}

/* ---- requests --------------------------------------------------------------- */

/* One request through the engine, signed for c. On failure the message is
 * set (naming `what`) and resp's body freed. On success the caller frees
 * resp->body. */
static int s3_perform_ct(const stk_s3_config *c, const char *what, const char *method,
                         const char *url, const void *body, size_t body_n, size_t max_body,
                         const char *content_type, stk_http_response *resp)
{
    stk_s3_signer signer = {.cfg = c};
    stk_http_headers h = {0};
    memset(resp, 0, sizeof *resp);
    /* A POST gets a Content-Type of its own: curl's default for one,
     * application/x-www-form-urlencoded, makes servers built on web
     * frameworks (moto on Werkzeug) parse and swallow the body as a form. */
    if (content_type && stk_http_headers_add(&h, "Content-Type: %s", content_type))
        return stk_fail_prefix(STK_ENOMEM, "%s", what);
    stk_http_request_desc d = {
        .method = method,
        .url = url,
        .headers = content_type ? &h : NULL,
        .body = body,
        .body_size = body_n,
        .sign = stk_s3_sign,
        .sign_ctx = &signer,
        .max_body = max_body,
    };
    int rc = stk_http_perform(&d, resp);
    stk_http_headers_free(&h);
    if (rc < 0) {
        rc = stk_s3_fail_response(c, what, resp);
        free(resp->body);
        resp->body = NULL;
    }
    return rc;
}

static int s3_perform(const stk_s3_config *c, const char *what, const char *method,
                      const char *url, const void *body, size_t body_n, size_t max_body,
                      stk_http_response *resp)
{
    return s3_perform_ct(c, what, method, url, body, body_n, max_body, NULL, resp);
}

static int encode_alloc(const char *s, char **out)
{
    size_t n = strlen(s);
    *out = malloc(3 * n + 1);
    if (!*out)
        return stk_fail(STK_ENOMEM, "out of memory");
    int rc = stk_sigv4_uri_encode(s, n, false, *out, 3 * n + 1);
    if (rc < 0) {
        free(*out);
        *out = NULL;
        return rc;
    }
    return 0;
}

int stk_s3_list(const stk_s3_config *c, const char *s3_url, const stk_s3_list_options *o,
                stk_s3_listing *out)
{
    memset(out, 0, sizeof *out);
    stk_s3_list_options def = {0};
    if (!o)
        o = &def;
    size_t max_keys = o->max_keys ? o->max_keys : DEFAULT_MAX_KEYS;
    size_t max_page = o->max_page_bytes ? o->max_page_bytes : DEFAULT_PAGE_BYTES;
    uint32_t page_size = o->page_size ? o->page_size : 1000;
    stk_s3_location loc;
    int rc = stk_s3_parse_url(s3_url, &loc);
    if (rc)
        return rc;
    char *eprefix = NULL, *edelim = NULL, *etoken = NULL;
    char *url = malloc(URL_CAP), *query = malloc(URL_CAP);
    stk_s3_list_page *page = malloc(sizeof *page);
    char *prev_token = calloc(1, sizeof page->next_token);
    if (!url || !query || !page || !prev_token) {
        rc = stk_fail(STK_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = encode_alloc(loc.key, &eprefix)) ||
        (o->delimiter && (rc = encode_alloc(o->delimiter, &edelim))))
        goto done;
    page->next_token[0] = 0;
    for (;;) {
        free(etoken);
        etoken = NULL;
        if (page->next_token[0] && (rc = encode_alloc(page->next_token, &etoken)))
            goto done;
        int qn = snprintf(query, URL_CAP, "list-type=2&max-keys=%u&prefix=%s%s%s%s%s", page_size,
                          eprefix, edelim ? "&delimiter=" : "", edelim ? edelim : "",
                          etoken ? "&continuation-token=" : "", etoken ? etoken : "");
        if (qn < 0 || qn >= URL_CAP) {
            rc = stk_fail(STK_ELIMIT, "%s: the ListObjectsV2 query is longer than %d bytes",
                          s3_url, URL_CAP - 1);
            goto done;
        }
        if ((rc = stk_s3_object_url(c, loc.bucket, "", query, url, URL_CAP)))
            goto done;
        stk_http_response resp;
        rc = s3_perform(c, s3_url, "GET", url, NULL, 0, max_page, &resp);
        if (rc) /* a page over max_page: the engine's "larger than N bytes" */
            goto done;
        out->pages++;
        snprintf(prev_token, sizeof page->next_token, "%s", page->next_token);
        rc = stk_s3_parse_list(resp.body, resp.body_size, max_keys, out, page);
        free(resp.body);
        if (rc) {
            stk_fail_prefix(rc, "%s: ListObjectsV2 page %u", s3_url, out->pages);
            goto done;
        }
        if (!page->truncated)
            break;
        if (!strcmp(page->next_token, prev_token)) {
            rc = stk_fail(STK_EFORMAT, "%s: ListObjectsV2 page %u repeats the previous "
                                       "continuation token (a listing that would not end)",
                          s3_url, out->pages);
            goto done;
        }
    }
done:
    if (rc)
        stk_s3_listing_free(out);
    free(eprefix);
    free(edelim);
    free(etoken);
    free(url);
    free(query);
    free(page);
    free(prev_token);
    return rc;
}

int stk_s3_head(const stk_s3_config *c, const char *s3_url, uint64_t *size, char *etag,
                size_t etag_cap)
{
    stk_s3_location loc;
    int rc = stk_s3_parse_url(s3_url, &loc);
    if (rc)
        return rc;
    char url[URL_CAP];
    if ((rc = stk_s3_object_url(c, loc.bucket, loc.key, NULL, url, sizeof url)))
        return rc;
    stk_http_response resp;
    if ((rc = s3_perform(c, s3_url, "HEAD", url, NULL, 0, 0, &resp)))
        return rc;
    free(resp.body);
    if (resp.content_length == UINT64_MAX)
        return stk_fail(STK_ENETWORK, "%s: HEAD gave no Content-Length", s3_url);
    if (size)
        *size = resp.content_length;
    if (etag && etag_cap)
        snprintf(etag, etag_cap, "%s", resp.etag);
    return 0;
}

int stk_s3_put(const stk_s3_config *c, const char *s3_url, const void *data, size_t n,
               char *etag, size_t etag_cap)
{
    stk_s3_location loc;
    int rc = stk_s3_parse_url(s3_url, &loc);
    if (rc)
        return rc;
    if (!loc.key[0])
        return stk_fail(STK_EINVAL, "%s: no key to write (s3://BUCKET/KEY)", s3_url);
    if (n > STK_S3_MAX_PART)
        return stk_fail(STK_ELIMIT, "%s: a single PUT takes at most 5 GiB (use a multipart "
                                    "upload)", s3_url);
    char url[URL_CAP];
    if ((rc = stk_s3_object_url(c, loc.bucket, loc.key, NULL, url, sizeof url)))
        return rc;
    stk_http_response resp;
    if ((rc = s3_perform(c, s3_url, "PUT", url, data ? data : "", n, 0, &resp)))
        return rc;
    free(resp.body);
    if (etag && etag_cap)
        snprintf(etag, etag_cap, "%s", resp.etag);
    return 0;
}

/* ---- multipart upload -------------------------------------------------------- */

typedef struct part_slot {
    uint8_t *buf;            /* part_size bytes, malloc'd */
    stk_http_request *req;   /* in flight, or NULL */
    stk_s3_signer signer;    /* the request's sign_ctx */
    uint32_t number;         /* 1-based */
    char url[URL_CAP];
} part_slot;

static int pread_full(int fd, uint8_t *buf, size_t n, uint64_t off, const char *path)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, buf + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return stk_fail(STK_EIO, "%s: read failed: %s", path, strerror(errno));
        if (k == 0)
            return stk_fail(STK_EIO, "%s: the file shrank while it was uploaded", path);
        got += (size_t)k;
    }
    return 0;
}

static int upload_single(const stk_s3_config *c, int fd, uint64_t size, const char *path,
                         const char *s3_url, stk_s3_upload_result *res)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return stk_fail(STK_ENOMEM, "%s: out of memory for %" PRIu64 " bytes", path, size);
    int rc = pread_full(fd, buf, size, 0, path);
    if (rc == 0)
        rc = stk_s3_put(c, s3_url, buf, size, res->etag, sizeof res->etag);
    free(buf);
    return rc;
}

/* AbortMultipartUpload, keeping the caller's message (the failure that
 * made us abort) whatever the abort does. */
static void abort_upload(const stk_s3_config *c, const char *s3_url, const stk_s3_location *loc,
                         const char *eid)
{
    stk_errbuf saved;
    stk_errbuf_capture(&saved, 0);
    char *query = malloc(URL_CAP), *url = malloc(URL_CAP);
    if (query && url) {
        snprintf(query, URL_CAP, "uploadId=%s", eid);
        if (stk_s3_object_url(c, loc->bucket, loc->key, query, url, URL_CAP) == 0) {
            stk_http_response resp;
            if (s3_perform(c, s3_url, "DELETE", url, NULL, 0, 0, &resp) == 0)
                free(resp.body);
        }
    }
    free(query);
    free(url);
    stk_errmsg_set(saved.msg);
}

static int upload_multipart(const stk_s3_config *c, int fd, uint64_t size, const char *path,
                            const char *s3_url, const stk_s3_location *loc, uint64_t part,
                            uint32_t in_flight, stk_s3_upload_result *res)
{
    uint64_t nparts64 = (size + part - 1) / part;
    if (nparts64 > STK_S3_MAX_PARTS) {
        /* grow the part (to whole MiB) so the file fits in 10,000 parts */
        part = (size + STK_S3_MAX_PARTS - 1) / STK_S3_MAX_PARTS;
        part = (part + (1u << 20) - 1) & ~(uint64_t)((1u << 20) - 1);
        if (part > STK_S3_MAX_PART)
            return stk_fail(STK_ELIMIT, "%s: %" PRIu64 " bytes exceed S3's largest object "
                                        "(10,000 parts of 5 GiB)", path, size);
        nparts64 = (size + part - 1) / part;
    }
    uint32_t nparts = (uint32_t)nparts64;
    if (in_flight > nparts)
        in_flight = nparts;
    /* An UploadId is some 100-200 characters on AWS; 700 leaves room and
     * keeps its encoded form (at most 3x) within the query buffers below. */
    char *url = malloc(URL_CAP), *upload_id = malloc(UPLOAD_ID_CAP), *eid = NULL;
    char (*etags)[128] = calloc(nparts, sizeof *etags);
    part_slot *slots = calloc(in_flight, sizeof *slots);
    int rc = 0;
    bool created = false;
    if (!url || !upload_id || !etags || !slots) {
        rc = stk_fail(STK_ENOMEM, "out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < in_flight; i++) {
        slots[i].buf = malloc(part);
        if (!slots[i].buf) {
            rc = stk_fail(STK_ENOMEM, "%s: out of memory for %u parts of %" PRIu64 " bytes", path,
                          in_flight, part);
            goto done;
        }
        slots[i].signer.cfg = c;
    }
    /* CreateMultipartUpload */
    if ((rc = stk_s3_object_url(c, loc->bucket, loc->key, "uploads", url, URL_CAP)))
        goto done;
    stk_http_response resp;
    if ((rc = s3_perform_ct(c, s3_url, "POST", url, NULL, 0, 0, "application/octet-stream",
                            &resp)))
        goto done;
    rc = stk_s3_parse_upload_id(resp.body, resp.body_size, upload_id, UPLOAD_ID_CAP);
    free(resp.body);
    if (rc) {
        stk_fail_prefix(rc, "%s: CreateMultipartUpload", s3_url);
        goto done;
    }
    created = true;
    if ((rc = encode_alloc(upload_id, &eid)))
        goto done;

    /* UploadPart: keep up to in_flight submitted; wait for the oldest. */
    uint32_t next = 1, done_parts = 0, oldest = 0;
    while (done_parts < nparts) {
        for (uint32_t i = 0; i < in_flight && next <= nparts; i++) {
            part_slot *s = &slots[(oldest + i) % in_flight];
            if (s->req)
                continue;
            uint64_t off = (uint64_t)(next - 1) * part;
            size_t len = (size_t)(size - off < part ? size - off : part);
            if ((rc = pread_full(fd, s->buf, len, off, path)))
                goto done;
            stk_sha256_hex(s->buf, len, s->signer.payload_hash);
            char query[3 * UPLOAD_ID_CAP + 64];
            snprintf(query, sizeof query, "partNumber=%u&uploadId=%s", next, eid);
            if ((rc = stk_s3_object_url(c, loc->bucket, loc->key, query, s->url, URL_CAP)))
                goto done;
            stk_http_request_desc d = {.method = "PUT", .url = s->url, .body = s->buf,
                                       .body_size = len, .sign = stk_s3_sign,
                                       .sign_ctx = &s->signer};
            if ((rc = stk_http_submit(&d, &s->req))) {
                s->req = NULL;
                stk_fail_prefix(rc, "%s: part %u", s3_url, next);
                goto done;
            }
            s->number = next++;
        }
        part_slot *s = &slots[oldest];
        rc = stk_http_wait(s->req);
        const stk_http_response *r = stk_http_result(s->req);
        if (rc == 0 && !r->etag[0])
            rc = stk_fail(STK_ENETWORK, "%s: part %u: the server sent no ETag", s3_url, s->number);
        if (rc) {
            if (r->rc < 0) {
                char what[STK_ERRMSG_MAX];
                snprintf(what, sizeof what, "%s (part %u of %u)", s3_url, s->number, nparts);
                rc = stk_s3_fail_response(c, what, r);
            }
            stk_http_request_free(s->req);
            s->req = NULL;
            goto done;
        }
        snprintf(etags[s->number - 1], sizeof etags[0], "%s", r->etag);
        stk_http_request_free(s->req);
        s->req = NULL;
        done_parts++;
        oldest = (oldest + 1) % in_flight;
    }

    /* CompleteMultipartUpload: the parts in order with their ETags. */
    const char **list = malloc(nparts * sizeof *list);
    if (!list) {
        rc = stk_fail(STK_ENOMEM, "out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < nparts; i++)
        list[i] = etags[i];
    char *xml = NULL;
    long xn = stk_s3_complete_xml(list, nparts, &xml);
    free(list);
    if (xn < 0) {
        rc = (int)xn;
        goto done;
    }
    char query[3 * UPLOAD_ID_CAP + 64];
    snprintf(query, sizeof query, "uploadId=%s", eid);
    if ((rc = stk_s3_object_url(c, loc->bucket, loc->key, query, url, URL_CAP))) {
        free(xml);
        goto done;
    }
    rc = s3_perform_ct(c, s3_url, "POST", url, xml, (size_t)xn, 0, "application/xml", &resp);
    free(xml);
    if (rc)
        goto done;
    /* S3 may answer 200 and then an <Error> (the completion failed late). */
    char code[128], msg[300];
    if (stk_s3_parse_error(resp.body, resp.body_size, code, sizeof code, msg, sizeof msg)) {
        resp.rc = STK_ENETWORK;
        rc = stk_s3_fail_response(c, s3_url, &resp);
        free(resp.body);
        goto done;
    }
    if (parse_leaf(resp.body ? resp.body : "", resp.body_size, "CompleteMultipartUploadResult",
                   "ETag", res->etag, sizeof res->etag) != 0)
        res->etag[0] = 0; /* the object exists; an ETag is a courtesy */
    stk_errmsg_clear();
    free(resp.body);
    created = false; /* completed: nothing to abort */
    res->parts = nparts;

done:
    if (slots) {
        for (uint32_t i = 0; i < in_flight; i++) {
            stk_http_request_free(slots[i].req); /* cancels one still in flight */
            free(slots[i].buf);
        }
    }
    if (rc && created)
        abort_upload(c, s3_url, loc, eid);
    free(slots);
    free(etags);
    free(eid);
    free(upload_id);
    free(url);
    return rc;
}

int stk_s3_upload_file(const stk_s3_config *c, const char *local_path, const char *s3_url,
                       const stk_s3_upload_options *o, stk_s3_upload_result *out)
{
    stk_s3_upload_result tmp;
    if (!out)
        out = &tmp;
    memset(out, 0, sizeof *out);
    stk_s3_upload_options def = {0};
    if (!o)
        o = &def;
    uint64_t part = o->part_size ? o->part_size : DEFAULT_PART;
    uint64_t threshold = o->multipart_threshold ? o->multipart_threshold : DEFAULT_PART;
    uint32_t in_flight = o->max_in_flight ? o->max_in_flight : 4;
    if (part < STK_S3_MIN_PART || part > STK_S3_MAX_PART)
        return stk_fail(STK_EINVAL, "%s: part size %" PRIu64 " is outside S3's 5 MiB..5 GiB",
                        s3_url, part);
    if (threshold > STK_S3_MAX_PART)
        return stk_fail(STK_EINVAL, "%s: a multipart threshold over 5 GiB (S3's largest PUT)",
                        s3_url);
    if (in_flight > 64)
        return stk_fail(STK_EINVAL, "%s: max_in_flight %u is over 64", s3_url, in_flight);
    stk_s3_location loc;
    int rc = stk_s3_parse_url(s3_url, &loc);
    if (rc)
        return rc;
    if (!loc.key[0] || loc.key[strlen(loc.key) - 1] == '/')
        return stk_fail(STK_EINVAL, "%s: not an object name (s3://BUCKET/KEY, the key not "
                                    "ending in '/')", s3_url);
    int fd = open(local_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return stk_fail(errno == ENOENT ? STK_ENOENT : STK_EIO, "%s: cannot open: %s", local_path,
                        strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return stk_fail(STK_EINVAL, "%s: not a regular file", local_path);
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < threshold)
        rc = upload_single(c, fd, size, local_path, s3_url, out);
    else
        rc = upload_multipart(c, fd, size, local_path, s3_url, &loc, part, in_flight, out);
    close(fd);
    if (rc == 0)
        out->size = size;
    return rc;
}
