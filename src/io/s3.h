/*
 * s3.h — the S3 client pieces (internal): configuration from the
 * environment, s3:// URLs and their HTTP addresses, request signing for the
 * HTTP engine (http.h), ListObjectsV2, HEAD, PUT and multipart upload, and
 * S3's XML error bodies turned into stoker's codes and messages.
 *
 * Configuration (stk_s3_config_from_env), the variables the AWS CLI and the
 * SDKs read:
 *   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY  both or neither: neither means
 *       anonymous requests (no Authorization; public buckets); one without
 *       the other is STK_EINVAL naming the missing variable
 *   AWS_SESSION_TOKEN     temporary credentials (x-amz-security-token)
 *   AWS_REGION, then AWS_DEFAULT_REGION, else us-east-1
 *   AWS_ENDPOINT_URL_S3, then AWS_ENDPOINT_URL: an S3-compatible server
 *       (MinIO, Ceph, moto, R2...): http(s)://host[:port][/base]
 *   STOKER_S3_ADDRESSING=path|virtual  overrides the addressing style
 *
 * Addressing (stk_s3_object_url):
 *   AWS (no endpoint), virtual-hosted by default:
 *       https://BUCKET.s3.REGION.amazonaws.com/KEY
 *     path style:  https://s3.REGION.amazonaws.com/BUCKET/KEY
 *   an endpoint, path style by default:  ENDPOINT/BUCKET/KEY
 *     virtual-hosted:  SCHEME://BUCKET.HOST[:PORT][/base]/KEY
 * A bucket that is not a DNS label (upper case, '_', '.', fewer than 3 or
 * more than 63 characters) cannot be a host name (and a dotted one breaks
 * TLS wildcard certificates), so without STOKER_S3_ADDRESSING such a
 * bucket is addressed path style even on AWS; with
 * STOKER_S3_ADDRESSING=virtual it is STK_EINVAL. Keys are percent-encoded
 * once per byte (every byte but A-Z a-z 0-9 - . _ ~ and '/').
 *
 * s3:// URLs (stk_s3_parse_url): s3://BUCKET/KEY. Everything after the
 * bucket's '/' is the key, verbatim (no percent-decoding: '?', '#', '%'
 * and spaces are key characters, as for the AWS CLI); the key may be empty
 * (the bucket's root, a listing prefix) and is at most 1024 bytes (S3's
 * limit). A bucket is 1..255 of A-Z a-z 0-9 . - _ (AWS's own names are
 * stricter; S3-compatible servers are not).
 *
 * Errors: a failed request's XML body (<Error><Code>..</Code><Message>..)
 * becomes "s3://b/k: HTTP 403 SignatureDoesNotMatch: The request signature
 * ...": 401/403 and the codes that refuse credentials whatever the status
 * (InvalidToken, ExpiredToken, AuthorizationHeaderMalformed: a key of
 * another region, ...) are STK_EACCESS, 404, NoSuchBucket, NoSuchKey and
 * NoSuchUpload are STK_ENOENT, a transport failure or another status after
 * the engine's retries STK_ENETWORK (the engine's wording: URL, status or
 * curl's reason, attempts, appended in parentheses).
 *
 * Secrets: the secret key and the session token live in the config and are
 * read only by the signer. No message of this module formats them, and a
 * server's error text that happens to contain either is redacted before it
 * becomes a message.
 *
 * Thread safety: a config is immutable after loading and may be shared by
 * any number of threads and requests; every function here may be called
 * from any thread. A stk_s3_signer belongs to one request (it is the
 * request's sign_ctx).
 */
#ifndef STK_IO_S3_H
#define STK_IO_S3_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/http.h"

#define STK_S3_MAX_KEY 1024
#define STK_S3_MAX_BUCKET 255
#define STK_S3_MAX_TOKEN 8192
#define STK_S3_MIN_PART ((uint64_t)5 << 20)    /* S3: every part but the last */
#define STK_S3_MAX_PART ((uint64_t)5 << 30)
#define STK_S3_MAX_PARTS 10000

typedef enum stk_s3_addressing {
    STK_S3_ADDR_AUTO = 0,    /* virtual on AWS, path with an endpoint */
    STK_S3_ADDR_VIRTUAL = 1,
    STK_S3_ADDR_PATH = 2,
} stk_s3_addressing;

typedef struct stk_s3_config {
    char access_key[256];                  /* "" with anonymous */
    char secret_key[256];                  /* never printed */
    char session_token[STK_S3_MAX_TOKEN];  /* "" when none; never printed */
    char region[64];
    /* "" for AWS; else scheme://host[:port][/base] without a trailing '/' */
    char endpoint[512];
    stk_s3_addressing addressing;          /* STOKER_S3_ADDRESSING, or AUTO */
    bool anonymous;                        /* no credentials: unsigned requests */
    /* Tests: sign at this Unix time instead of the clock's (0: the clock). */
    int64_t fixed_time;
} stk_s3_config;

/* A variable's value or NULL (getenv's contract). */
typedef const char *(*stk_s3_getenv_fn)(void *ctx, const char *name);

/* Load the configuration from `get` (NULL: the process environment). 0, or
 * STK_EINVAL naming the variable at fault (half a key pair, an endpoint that
 * is not http(s)://host..., a bad STOKER_S3_ADDRESSING, a region with a
 * space or '/'), STK_ELIMIT (a value longer than its field). */
int stk_s3_config_load(stk_s3_config *c, stk_s3_getenv_fn get, void *ctx);
static inline int stk_s3_config_from_env(stk_s3_config *c)
{
    return stk_s3_config_load(c, NULL, NULL);
}

typedef struct stk_s3_location {
    char bucket[STK_S3_MAX_BUCKET + 1];
    char key[STK_S3_MAX_KEY + 1];
} stk_s3_location;

/* Parse "s3://bucket/key" (see above). 0, STK_EINVAL (not s3://, no bucket,
 * a character a bucket name cannot have), STK_ELIMIT (a bucket over 255 or
 * a key over 1024 bytes); the message names the URL. */
int stk_s3_parse_url(const char *url, stk_s3_location *loc);

/* The HTTP URL of bucket/key under c's addressing, with `query` (already
 * encoded, without '?'; NULL or "" for none) appended. The key may be ""
 * (the bucket itself: ".../BUCKET" path style, ".../" virtual). 0,
 * STK_EINVAL (a bucket that virtual addressing cannot name), STK_ELIMIT (it
 * does not fit in cap). */
int stk_s3_object_url(const stk_s3_config *c, const char *bucket, const char *key,
                      const char *query, char *out, size_t cap);

/* The sign_ctx of one request (lent to the engine until it completes). */
typedef struct stk_s3_signer {
    const stk_s3_config *cfg;
    /* The body's hex SHA-256 when the caller computed it (a multipart part:
     * hashed once on the caller's thread, not on the I/O thread at every
     * attempt); "" to let the signer hash the body, or use UNSIGNED-PAYLOAD
     * for a request without one. */
    char payload_hash[65];
} stk_s3_signer;

/* A stk_http_sign_fn: with a config that has credentials, replaces any
 * X-Amz-Date, X-Amz-Content-SHA256, X-Amz-Security-Token and Authorization
 * lines of *out with a fresh SigV4 signature (S3 path rules, the time of the
 * attempt); anonymous: adds nothing. */
int stk_s3_sign(void *signer, const stk_http_sign_input *in, stk_http_headers *out);

/* S3's XML error document: <Error><Code>C</Code><Message>M</Message>...
 * Pure. 1 and code/message filled (truncated to their caps) when xml is one,
 * 0 when it is not (empty, another document, malformed XML). */
int stk_s3_parse_error(const char *xml, size_t n, char *code, size_t code_cap, char *message,
                       size_t message_cap);

/* Set the thread's message for a request on `what` (an s3:// URL) that
 * ended with response r (r->rc < 0, or a 200 whose body is an <Error>):
 * returns the code (see above). Secrets of c (may be NULL) are redacted
 * from the server's words. */
int stk_s3_fail_response(const stk_s3_config *c, const char *what, const stk_http_response *r);

/* ---- ListObjectsV2 ------------------------------------------------------ */

typedef struct stk_s3_object {
    char *key;       /* malloc'd, decoded (entities resolved) */
    uint64_t size;
    char etag[72];   /* as S3 gives it, quotes kept ("" when absent) */
} stk_s3_object;

typedef struct stk_s3_listing {
    stk_s3_object *objects; /* malloc'd array, in the order S3 returned them */
    size_t n, cap;
    char **prefixes;        /* CommonPrefixes (with a delimiter), malloc'd */
    size_t n_prefixes, cap_prefixes;
    uint32_t pages;         /* ListObjectsV2 requests made */
} stk_s3_listing;
void stk_s3_listing_free(stk_s3_listing *l);

typedef struct stk_s3_list_options {
    const char *delimiter;  /* NULL: none (a flat listing); "/": one level */
    size_t max_keys;        /* keys + prefixes in all (0: 10,000,000); more: STK_ELIMIT */
    size_t max_page_bytes;  /* one response's size (0: 16 MiB); more: STK_ELIMIT */
    uint32_t page_size;     /* max-keys of each request (0: 1000, S3's maximum) */
} stk_s3_list_options;

/* One page's bookkeeping. */
typedef struct stk_s3_list_page {
    bool truncated;                /* IsTruncated */
    char next_token[4096];         /* NextContinuationToken ("" when none) */
    uint32_t keys, prefixes;       /* what this page added */
} stk_s3_list_page;

/* Parse one ListBucketResult page (pure): append its Contents and
 * CommonPrefixes to *acc, its token to *page. 0, STK_EFORMAT "malformed XML
 * at line L: REASON" / "not a ListBucketResult" / "a Contents without a
 * Key" / "Size 'x' is not a number" / "IsTruncated without a
 * NextContinuationToken" / a DOCTYPE (refused: no entity declarations),
 * STK_ELIMIT (acc would exceed max_keys entries, a token over 4 KiB, a key
 * over 1024 bytes), STK_ENOMEM. *acc keeps what earlier pages added. */
int stk_s3_parse_list(const char *xml, size_t n, size_t max_keys, stk_s3_listing *acc,
                      stk_s3_list_page *page);

/* List every object under s3://bucket/prefix (the URL's key is the prefix),
 * following continuation tokens. 0 and *out (free with
 * stk_s3_listing_free; emptied on failure), or the code of the failed
 * request or page, the message naming the s3:// URL. */
int stk_s3_list(const stk_s3_config *c, const char *s3_url, const stk_s3_list_options *o,
                stk_s3_listing *out);

/* ---- objects ------------------------------------------------------------- */

/* HEAD: the object's size and ETag (etag may be NULL). */
int stk_s3_head(const stk_s3_config *c, const char *s3_url, uint64_t *size, char *etag,
                size_t etag_cap);

/* PUT n bytes (one request; S3 takes up to 5 GiB so). etag may be NULL. */
int stk_s3_put(const stk_s3_config *c, const char *s3_url, const void *data, size_t n,
               char *etag, size_t etag_cap);

typedef struct stk_s3_upload_options {
    uint64_t part_size;           /* 0: 8 MiB; 5 MiB..5 GiB, grown when the file
                                     would need more than 10,000 parts */
    uint64_t multipart_threshold; /* files this large or larger go multipart (0: 8 MiB) */
    uint32_t max_in_flight;       /* parts uploading at once (0: 4; memory is
                                     max_in_flight x part_size) */
} stk_s3_upload_options;

typedef struct stk_s3_upload_result {
    uint64_t size;      /* bytes uploaded */
    uint32_t parts;     /* 0: a single PUT */
    char etag[128];     /* the object's ETag (a multipart one ends in "-N") */
} stk_s3_upload_result;

/* Upload a local file to s3://bucket/key: one PUT below the threshold, else
 * CreateMultipartUpload, UploadPart (part_size each, max_in_flight at once
 * through the engine, each signed with its own payload hash),
 * CompleteMultipartUpload with the parts' ETags; on any failure the upload
 * is aborted (AbortMultipartUpload) so no parts are left billed. o and out
 * may be NULL. Errors name the file or the s3:// URL (and the part). */
int stk_s3_upload_file(const stk_s3_config *c, const char *local_path, const char *s3_url,
                       const stk_s3_upload_options *o, stk_s3_upload_result *out);

/* The XML body of CompleteMultipartUpload for n parts numbered 1..n with
 * these ETags (pure; malloc'd into *out, its length returned; < 0 on
 * STK_ENOMEM). */
long stk_s3_complete_xml(const char *const *etags, uint32_t n, char **out);
/* The UploadId of an InitiateMultipartUploadResult (pure). 0, STK_EFORMAT,
 * STK_ELIMIT (longer than cap - 1). */
int stk_s3_parse_upload_id(const char *xml, size_t n, char *out, size_t cap);

#endif
