/*
 * sigv4.h — AWS Signature Version 4 (internal): SHA-256, HMAC-SHA256 and the
 * signing of one HTTP request, as pure functions of their inputs.
 *
 * A SigV4 signature is an HMAC chain over a canonical form of the request:
 *
 *   canonical request = METHOD \n CANONICAL-URI \n CANONICAL-QUERY \n
 *                       CANONICAL-HEADERS \n SIGNED-HEADERS \n PAYLOAD-HASH
 *   string to sign    = "AWS4-HMAC-SHA256" \n AMZ-DATE \n SCOPE \n
 *                       hex(sha256(canonical request))
 *   scope             = YYYYMMDD/REGION/SERVICE/aws4_request
 *   signing key       = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, YYYYMMDD),
 *                            REGION), SERVICE), "aws4_request")
 *   signature         = hex(HMAC(signing key, string to sign))
 *
 * and the request then carries `Authorization: AWS4-HMAC-SHA256
 * Credential=AKID/SCOPE, SignedHeaders=a;b;c, Signature=HEX` plus the
 * x-amz-date it was signed at (and x-amz-security-token for temporary
 * credentials, x-amz-content-sha256 for S3).
 *
 * Canonical forms (the rules of AWS's SigV4 documentation, in the order of
 * the fields above):
 *
 * - URI: the URL's path, every byte but the unreserved ones (A-Z a-z 0-9
 *   - . _ ~) and '/' percent-encoded with upper-case hex. Two modes.
 *   STK_SIGV4_PATH_S3 (S3): the path is taken as it goes on the wire,
 *   decoded once and encoded once, so a key is encoded exactly once and
 *   "a//b" or "a/./b" stay as they are (S3 keys may contain them).
 *   STK_SIGV4_PATH_NORMALIZE (every other service, and AWS's generic test
 *   suite): dot segments and empty segments are removed (RFC 3986 5.2.4,
 *   plus AWS's collapsing of "//"), then the path as given is encoded, so
 *   an already-encoded path is encoded a second time ("%20" -> "%2520"),
 *   as the generic signers of botocore and the SDKs do.
 * - Query: every name=value pair decoded once and encoded once (only the
 *   unreserved characters stay; '+' is a literal plus, %2B), a bare name
 *   gets an empty value ("uploads" -> "uploads="), pairs sorted by encoded
 *   name, then by encoded value.
 * - Headers: names lower-cased; values trimmed, runs of spaces and tabs
 *   collapsed to one space; a name given several times gets its values
 *   joined with ',' in the order given; sorted by name; `host` derived
 *   from the URL (lower-cased, the scheme's default port left out, as curl
 *   sends it) when not given. Every header given is signed except
 *   expect, user-agent, x-amzn-trace-id (proxies and clients change
 *   them; botocore leaves the same three out) and authorization.
 * - Payload: the lower-case hex SHA-256 of the body, or the literal
 *   UNSIGNED-PAYLOAD (S3 accepts it; stoker's GETs use it).
 *
 * Secrets: the secret key and the session token go into the HMAC and the
 * x-amz-security-token header only; nothing here formats them into a
 * message. Error messages name the URL (without its query) at most.
 *
 * Thread safety: every function is pure (no state), callable from any
 * thread.
 */
#ifndef STK_IO_SIGV4_H
#define STK_IO_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STK_SHA256_LEN 32
#define STK_SHA256_HEX_LEN 64 /* plus a NUL: 65 bytes */

/* The hash of the empty payload, hex. */
#define STK_SHA256_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define STK_SIGV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"

void stk_sha256(const void *data, size_t n, uint8_t out[STK_SHA256_LEN]);
/* Lower-case hex of sha256(data) into out (65 bytes, NUL-terminated). */
void stk_sha256_hex(const void *data, size_t n, char out[STK_SHA256_HEX_LEN + 1]);
void stk_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t n,
                     uint8_t out[STK_SHA256_LEN]);

typedef enum stk_sigv4_path_mode {
    STK_SIGV4_PATH_S3 = 0,        /* decode once, encode once, no normalisation */
    STK_SIGV4_PATH_NORMALIZE = 1, /* remove dot and empty segments, encode as given */
} stk_sigv4_path_mode;

typedef struct stk_sigv4_credentials {
    const char *access_key;    /* AWS_ACCESS_KEY_ID */
    const char *secret_key;    /* AWS_SECRET_ACCESS_KEY: never printed */
    const char *session_token; /* AWS_SESSION_TOKEN, or NULL/"": none; never printed */
} stk_sigv4_credentials;

typedef struct stk_sigv4_request {
    const char *method; /* "GET", ... (used as given: upper case expected) */
    /* http(s)://host[:port]/path[?query] as it is sent (a fragment is
     * ignored). In NORMALIZE mode the path may also be given raw, as AWS's
     * test suite writes it ("/example space/"). */
    const char *url;
    const char *const *headers; /* n_headers "Name: value" lines (lent) */
    size_t n_headers;
    /* Hex SHA-256 of the body, STK_SIGV4_UNSIGNED_PAYLOAD, or NULL for the
     * empty body's hash. */
    const char *payload_hash;
    int64_t time;             /* the signing time, Unix seconds (UTC) */
    const char *region;       /* "us-east-1" */
    const char *service;      /* "s3" */
    stk_sigv4_path_mode path_mode;
    /* Add (and sign) x-amz-content-sha256: PAYLOAD-HASH, as S3 requires. */
    bool content_sha256_header;
} stk_sigv4_request;

/* The headers a signed request adds, and the intermediate forms (for tests
 * and for debugging a SignatureDoesNotMatch). The secret key is in none of
 * them; the session token is in the canonical request and its own header
 * line, so neither may be logged when a token is in use.
 * Headers of the request named x-amz-date or authorization, and
 * x-amz-security-token (when a token is given) or x-amz-content-sha256
 * (when content_sha256_header is set), are not signed: the ones here
 * replace them, and the caller must send only these. */
#define STK_SIGV4_MAX_ADD 4
typedef struct stk_sigv4_signed {
    uint32_t n_add;
    char *add[STK_SIGV4_MAX_ADD];  /* "Name: value" lines, malloc'd, in this order:
                                      X-Amz-Date, X-Amz-Content-SHA256 (if asked),
                                      X-Amz-Security-Token (if any), Authorization */
    char *canonical_request;       /* malloc'd */
    char *string_to_sign;          /* malloc'd */
    char signed_headers[1024];     /* "host;x-amz-date" */
    char amz_date[17];             /* "20150830T123600Z" */
    char signature[STK_SHA256_HEX_LEN + 1];
} stk_sigv4_signed;

/* Sign a request. 0 and *out filled (free it with stk_sigv4_signed_free), or
 * STK_EINVAL (a URL that is not http(s)://host/..., a header line without
 * ':' or with a CR/LF, a missing argument, a time before 1970 or after 9999),
 * STK_ELIMIT (more than 64 headers or signed-header names over 1 KiB),
 * STK_ENOMEM; *out is then empty (free is still safe). */
int stk_sigv4_sign(const stk_sigv4_request *req, const stk_sigv4_credentials *cred,
                   stk_sigv4_signed *out);
void stk_sigv4_signed_free(stk_sigv4_signed *s);

/* AWS's URI encoding of n bytes: unreserved characters (A-Z a-z 0-9 - . _
 * ~) as they are, '/' as is when keep_slash, everything else %XX (upper
 * case). Into out (cap bytes, NUL-terminated): the length, or STK_ELIMIT
 * (nothing useful in out) when it does not fit. Pure. */
int stk_sigv4_uri_encode(const char *in, size_t n, bool keep_slash, char *out, size_t cap);
/* Percent-decoding of n bytes (a '%' not followed by two hex digits stays
 * a '%'; '+' stays '+'): into out (cap >= n + 1 always suffices), the
 * length. Pure. */
size_t stk_sigv4_uri_decode(const char *in, size_t n, char *out);

/* "YYYYMMDDTHHMMSSZ" of a Unix time (out: 17 bytes). STK_EINVAL outside
 * years 1970..9999. */
int stk_sigv4_amz_date(int64_t t, char out[17]);

#endif
