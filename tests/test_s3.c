/*
 * test_s3.c — the S3 client's pure parts (src/io/s3.c): the configuration
 * for each combination of AWS_* variables (a table, not the process
 * environment), s3:// URL parsing and its refusals, the HTTP address of an
 * object under each addressing rule, the signer glue (the S3
 * documentation's GET-object example signed through stk_s3_sign, stale
 * headers replaced, anonymous requests left alone), ListObjectsV2 pages
 * (keys with entities and character references, pages accumulated across
 * continuation tokens, CommonPrefixes, a namespace prefix; malformed XML,
 * a DOCTYPE, a wrong root, missing or bad fields, a truncated page without
 * a token, the key and size limits), S3 error bodies and their codes, the
 * CompleteMultipartUpload body and the UploadId. The requests themselves
 * run against a real S3 API (moto) in tests/python/test_s3_moto.py.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "io/s3.h"
#include "io/sigv4.h"
#include "stoker/stoker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* ---- an environment as a table ------------------------------------------ */

static const char *table_get(void *ctx, const char *name)
{
    const char *const *kv = ctx;
    for (; kv[0]; kv += 2)
        if (!strcmp(kv[0], name))
            return kv[1];
    return NULL;
}

static stk_s3_config cfg; /* 9 KB: static */

static int load(const char *const *kv) { return stk_s3_config_load(&cfg, table_get, (void *)kv); }

static void expect_load_fails(const char *const *kv, int code, const char *msg)
{
    int rc = load(kv);
    if (rc != code || !strstr(stk_errmsg(), msg))
        fprintf(stderr, "got %d '%s', want %d '%s'\n", rc, stk_errmsg(), code, msg);
    assert_int_equal(rc, code);
    assert_non_null(strstr(stk_errmsg(), msg));
    assert_null(strstr(stk_errmsg(), "s3cr3t")); /* never the secret */
}

static void test_config(void **state)
{
    (void)state;
    const char *none[] = {NULL};
    assert_int_equal(load(none), 0);
    assert_true(cfg.anonymous);
    assert_string_equal(cfg.region, "us-east-1");
    assert_string_equal(cfg.endpoint, "");
    assert_int_equal(cfg.addressing, STK_S3_ADDR_AUTO);

    const char *full[] = {"AWS_ACCESS_KEY_ID", "AKIA1", "AWS_SECRET_ACCESS_KEY", "s3cr3t",
                          "AWS_SESSION_TOKEN", "tok/+=", "AWS_REGION", "eu-west-1",
                          "AWS_DEFAULT_REGION", "ap-south-1", NULL};
    assert_int_equal(load(full), 0);
    assert_false(cfg.anonymous);
    assert_string_equal(cfg.access_key, "AKIA1");
    assert_string_equal(cfg.secret_key, "s3cr3t");
    assert_string_equal(cfg.session_token, "tok/+=");
    assert_string_equal(cfg.region, "eu-west-1");

    const char *dflt[] = {"AWS_DEFAULT_REGION", "ap-south-1", "AWS_REGION", "", NULL};
    assert_int_equal(load(dflt), 0);
    assert_string_equal(cfg.region, "ap-south-1");

    /* the service-specific endpoint wins; scheme and host lower-cased, '/' trimmed */
    const char *ep[] = {"AWS_ENDPOINT_URL", "http://generic:1", "AWS_ENDPOINT_URL_S3",
                        "HTTP://MinIO.Local:9000/Base/", NULL};
    assert_int_equal(load(ep), 0);
    assert_string_equal(cfg.endpoint, "http://minio.local:9000/Base");
    const char *ep2[] = {"AWS_ENDPOINT_URL", "https://r2.example.com", NULL};
    assert_int_equal(load(ep2), 0);
    assert_string_equal(cfg.endpoint, "https://r2.example.com");

    const char *addr[] = {"STOKER_S3_ADDRESSING", "virtual", NULL};
    assert_int_equal(load(addr), 0);
    assert_int_equal(cfg.addressing, STK_S3_ADDR_VIRTUAL);
    const char *addr2[] = {"STOKER_S3_ADDRESSING", "path", NULL};
    assert_int_equal(load(addr2), 0);
    assert_int_equal(cfg.addressing, STK_S3_ADDR_PATH);

    const char *half1[] = {"AWS_ACCESS_KEY_ID", "AKIA1", NULL};
    expect_load_fails(half1, STK_EINVAL, "AWS_SECRET_ACCESS_KEY is not");
    const char *half2[] = {"AWS_SECRET_ACCESS_KEY", "s3cr3t", NULL};
    expect_load_fails(half2, STK_EINVAL, "AWS_ACCESS_KEY_ID is not");
    const char *tok[] = {"AWS_SESSION_TOKEN", "t", NULL};
    expect_load_fails(tok, STK_EINVAL, "AWS_SESSION_TOKEN is set without");
    const char *badep[] = {"AWS_ENDPOINT_URL", "minio:9000", NULL};
    expect_load_fails(badep, STK_EINVAL, "AWS_ENDPOINT_URL='minio:9000'");
    const char *badep2[] = {"AWS_ENDPOINT_URL_S3", "http:///x", NULL};
    expect_load_fails(badep2, STK_EINVAL, "no host");
    const char *badep3[] = {"AWS_ENDPOINT_URL", "http://h/?x=1", NULL};
    expect_load_fails(badep3, STK_EINVAL, "no query");
    const char *badaddr[] = {"STOKER_S3_ADDRESSING", "dns", NULL};
    expect_load_fails(badaddr, STK_EINVAL, "STOKER_S3_ADDRESSING='dns'");
    const char *badregion[] = {"AWS_REGION", "us east", NULL};
    expect_load_fails(badregion, STK_EINVAL, "AWS_REGION='us east'");
    const char *badkey[] = {"AWS_ACCESS_KEY_ID", "AK IA", "AWS_SECRET_ACCESS_KEY", "s3cr3t", NULL};
    expect_load_fails(badkey, STK_EINVAL, "AWS_ACCESS_KEY_ID has a space");
    static char longsecret[300];
    memset(longsecret, 's', sizeof longsecret - 1);
    const char *toolong[] = {"AWS_ACCESS_KEY_ID", "AK", "AWS_SECRET_ACCESS_KEY", longsecret, NULL};
    expect_load_fails(toolong, STK_ELIMIT, "AWS_SECRET_ACCESS_KEY is longer than 255 bytes");
    assert_null(strstr(stk_errmsg(), "sssss"));
}

static void test_parse_url(void **state)
{
    (void)state;
    stk_s3_location loc;
    assert_int_equal(stk_s3_parse_url("s3://bucket/a/b c?x#y%20", &loc), 0);
    assert_string_equal(loc.bucket, "bucket");
    assert_string_equal(loc.key, "a/b c?x#y%20");
    assert_int_equal(stk_s3_parse_url("s3://My_Bucket.v2", &loc), 0);
    assert_string_equal(loc.bucket, "My_Bucket.v2");
    assert_string_equal(loc.key, "");
    assert_int_equal(stk_s3_parse_url("s3://b/", &loc), 0);
    assert_string_equal(loc.key, "");
    assert_int_equal(stk_s3_parse_url("https://b/k", &loc), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "https://b/k: not an s3://BUCKET/KEY URL"));
    assert_int_equal(stk_s3_parse_url("s3:///k", &loc), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "s3:///k: no bucket name"));
    assert_int_equal(stk_s3_parse_url("s3://b@d/k", &loc), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "bucket name 'b@d'"));
    char url[1200] = "s3://b/";
    memset(url + 7, 'k', 1025);
    assert_int_equal(stk_s3_parse_url(url, &loc), STK_ELIMIT);
    assert_non_null(strstr(stk_errmsg(), "longer than 1024 bytes"));
    url[7 + 1024] = 0;
    assert_int_equal(stk_s3_parse_url(url, &loc), 0);
    assert_int_equal(strlen(loc.key), 1024);
}

static void expect_url(const char *const *env, const char *bucket, const char *key,
                       const char *query, const char *want)
{
    assert_int_equal(load(env), 0);
    char out[512];
    int rc = stk_s3_object_url(&cfg, bucket, key, query, out, sizeof out);
    if (rc)
        fprintf(stderr, "%s\n", stk_errmsg());
    assert_int_equal(rc, 0);
    assert_string_equal(out, want);
}

static void test_addressing(void **state)
{
    (void)state;
    const char *aws[] = {"AWS_REGION", "eu-west-1", NULL};
    expect_url(aws, "bkt", "a/b c+é.bin", NULL,
               "https://bkt.s3.eu-west-1.amazonaws.com/a/b%20c%2B%C3%A9.bin");
    expect_url(aws, "bkt", "", "list-type=2&prefix=x",
               "https://bkt.s3.eu-west-1.amazonaws.com/?list-type=2&prefix=x");
    /* not a DNS label: path style even on AWS */
    expect_url(aws, "My_Bucket", "k", NULL, "https://s3.eu-west-1.amazonaws.com/My_Bucket/k");
    expect_url(aws, "dotted.bucket", "k", NULL,
               "https://s3.eu-west-1.amazonaws.com/dotted.bucket/k");
    expect_url(aws, "ab", "k", NULL, "https://s3.eu-west-1.amazonaws.com/ab/k");
    const char *cn[] = {"AWS_REGION", "cn-north-1", NULL};
    expect_url(cn, "bkt", "k", NULL, "https://bkt.s3.cn-north-1.amazonaws.com.cn/k");
    const char *awspath[] = {"STOKER_S3_ADDRESSING", "path", NULL};
    expect_url(awspath, "bkt", "k/~x", NULL, "https://s3.us-east-1.amazonaws.com/bkt/k/~x");
    expect_url(awspath, "bkt", "", "list-type=2",
               "https://s3.us-east-1.amazonaws.com/bkt?list-type=2");
    /* an endpoint: path style by default */
    const char *ep[] = {"AWS_ENDPOINT_URL", "http://127.0.0.1:9000", NULL};
    expect_url(ep, "bkt", "dir/f!.stk", NULL, "http://127.0.0.1:9000/bkt/dir/f%21.stk");
    expect_url(ep, "bkt", "", "uploads", "http://127.0.0.1:9000/bkt?uploads");
    const char *epbase[] = {"AWS_ENDPOINT_URL_S3", "https://gw.example.com/s3/", NULL};
    expect_url(epbase, "bkt", "k", NULL, "https://gw.example.com/s3/bkt/k");
    /* an endpoint with virtual hosting */
    const char *epv[] = {"AWS_ENDPOINT_URL", "http://minio.local:9000",
                         "STOKER_S3_ADDRESSING", "virtual", NULL};
    expect_url(epv, "bkt", "k", "a=1", "http://bkt.minio.local:9000/k?a=1");
    const char *epvb[] = {"AWS_ENDPOINT_URL", "https://gw.example.com/base",
                          "STOKER_S3_ADDRESSING", "virtual", NULL};
    expect_url(epvb, "bkt", "", NULL, "https://bkt.gw.example.com/base/");
    /* virtual asked for a bucket that cannot be a host name */
    assert_int_equal(load(epv), 0);
    char out[256];
    assert_int_equal(stk_s3_object_url(&cfg, "Bad_Bucket", "k", NULL, out, sizeof out),
                     STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "s3://Bad_Bucket: STOKER_S3_ADDRESSING=virtual"));
    /* too long for the buffer */
    assert_int_equal(stk_s3_object_url(&cfg, "bkt", "a-long-key", NULL, out, 20), STK_ELIMIT);
}

/* ---- signing --------------------------------------------------------------- */

static void test_sign_glue(void **state)
{
    (void)state;
    /* The S3 documentation's GET object example, through the engine's hook:
     * out holds what the engine passes (the desc's headers + Range), plus
     * stale signature lines that must be replaced. */
    const char *env[] = {"AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE", "AWS_SECRET_ACCESS_KEY",
                         "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", NULL};
    assert_int_equal(load(env), 0);
    cfg.fixed_time = 1369353600; /* 2013-05-24T00:00:00Z */
    stk_s3_signer signer = {.cfg = &cfg};
    snprintf(signer.payload_hash, sizeof signer.payload_hash, "%s", STK_SHA256_EMPTY);
    stk_http_headers out = {0};
    assert_int_equal(stk_http_headers_add(&out, "Authorization: stale"), 0);
    assert_int_equal(stk_http_headers_add(&out, "Range: bytes=0-9"), 0);
    assert_int_equal(stk_http_headers_add(&out, "x-amz-date: 19990101T000000Z"), 0);
    stk_http_sign_input in = {"GET", "https://examplebucket.s3.amazonaws.com/test.txt", &out,
                              NULL, 0, 0, 10};
    assert_int_equal(stk_s3_sign(&signer, &in, &out), 0);
    assert_int_equal(out.n, 4);
    assert_string_equal(out.line[0], "Range: bytes=0-9");
    assert_string_equal(out.line[1], "X-Amz-Date: 20130524T000000Z");
    assert_string_equal(out.line[2], "X-Amz-Content-SHA256: " STK_SHA256_EMPTY);
    assert_string_equal(out.line[3],
                        "Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/"
                        "us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;"
                        "x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd9"
                        "1039c6036bdb41");
    /* a second attempt (the engine starts from a fresh copy; here from the
     * signed lines themselves): still one signature */
    assert_int_equal(stk_s3_sign(&signer, &in, &out), 0);
    assert_int_equal(out.n, 4);
    stk_http_headers_free(&out);

    /* GET without a precomputed hash: UNSIGNED-PAYLOAD; PUT: the body's hash */
    signer.payload_hash[0] = 0;
    in.range_len = 0;
    assert_int_equal(stk_s3_sign(&signer, &in, &out), 0);
    assert_string_equal(out.line[1], "X-Amz-Content-SHA256: UNSIGNED-PAYLOAD");
    stk_http_headers_free(&out);
    stk_http_sign_input put = {"PUT", "https://examplebucket.s3.amazonaws.com/k", &out, "abc", 3,
                               0, 0};
    assert_int_equal(stk_s3_sign(&signer, &put, &out), 0);
    assert_string_equal(out.line[1], "X-Amz-Content-SHA256: "
                                     "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    stk_http_headers_free(&out);

    /* a session token goes into its header; the secret nowhere */
    const char *envt[] = {"AWS_ACCESS_KEY_ID", "AK", "AWS_SECRET_ACCESS_KEY", "s3cr3t",
                          "AWS_SESSION_TOKEN", "T0KEN", NULL};
    assert_int_equal(load(envt), 0);
    assert_int_equal(stk_s3_sign(&signer, &in, &out), 0);
    assert_int_equal(out.n, 4);
    assert_string_equal(out.line[2], "X-Amz-Security-Token: T0KEN");
    for (uint32_t i = 0; i < out.n; i++)
        assert_null(strstr(out.line[i], "s3cr3t"));
    stk_http_headers_free(&out);

    /* anonymous: nothing added, nothing removed */
    const char *anon[] = {NULL};
    assert_int_equal(load(anon), 0);
    assert_int_equal(stk_http_headers_add(&out, "Range: bytes=0-9"), 0);
    assert_int_equal(stk_s3_sign(&signer, &in, &out), 0);
    assert_int_equal(out.n, 1);
    stk_http_headers_free(&out);

    /* too many headers to add the signature's four */
    assert_int_equal(load(envt), 0);
    for (int i = 0; i < STK_HTTP_MAX_HEADERS - 2; i++)
        assert_int_equal(stk_http_headers_add(&out, "X-H%d: v", i), 0);
    assert_int_equal(stk_s3_sign(&signer, &in, &out), STK_ELIMIT);
    stk_http_headers_free(&out);
}

/* ---- ListObjectsV2 ---------------------------------------------------------- */

#define NS "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\""

static const char page1[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<ListBucketResult " NS "><Name>bkt</Name><Prefix>p/</Prefix><KeyCount>3</KeyCount>"
    "<MaxKeys>3</MaxKeys><IsTruncated>true</IsTruncated>"
    "<Contents><Key>p/a&amp;b &lt;1&gt; &quot;q&quot; &apos;s&apos;.jpg</Key>"
    "<LastModified>2024-01-01T00:00:00.000Z</LastModified>"
    "<ETag>&quot;0123abcd&quot;</ETag><Size>12345678901</Size>"
    "<StorageClass>STANDARD</StorageClass></Contents>"
    "<Contents><Key>p/caf\xc3\xa9&#x0D;&#233;&#x1F600;</Key><Size>0</Size>"
    "<ETag>\"e\"</ETag></Contents>\n"
    "  <Contents>\n    <Size>7</Size>\n    <Key>p/size-first</Key>\n  </Contents>\n"
    "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
    "</ListBucketResult>";

static const char page2[] =
    "<ListBucketResult " NS "><IsTruncated>false</IsTruncated>"
    "<Contents><Key>p/z</Key><Size>1</Size></Contents>"
    "<CommonPrefixes><Prefix>p/dir/</Prefix></CommonPrefixes>"
    "<CommonPrefixes><Prefix>p/dir2/</Prefix></CommonPrefixes>"
    "</ListBucketResult>";

static void test_list_pages(void **state)
{
    (void)state;
    stk_s3_listing acc = {0};
    stk_s3_list_page page;
    assert_int_equal(stk_s3_parse_list(page1, strlen(page1), 0, &acc, &page), 0);
    assert_true(page.truncated);
    assert_string_equal(page.next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
    assert_int_equal(page.keys, 3);
    assert_int_equal(acc.n, 3);
    assert_string_equal(acc.objects[0].key, "p/a&b <1> \"q\" 's'.jpg");
    assert_true(acc.objects[0].size == 12345678901ULL);
    assert_string_equal(acc.objects[0].etag, "\"0123abcd\"");
    assert_string_equal(acc.objects[1].key, "p/caf\xc3\xa9\r\xc3\xa9\xf0\x9f\x98\x80");
    assert_int_equal(acc.objects[1].size, 0);
    assert_string_equal(acc.objects[1].etag, "\"e\"");
    assert_string_equal(acc.objects[2].key, "p/size-first");
    assert_int_equal(acc.objects[2].size, 7);
    assert_string_equal(acc.objects[2].etag, "");
    /* the next page accumulates */
    assert_int_equal(stk_s3_parse_list(page2, strlen(page2), 0, &acc, &page), 0);
    assert_false(page.truncated);
    assert_string_equal(page.next_token, "");
    assert_int_equal(page.keys, 1);
    assert_int_equal(page.prefixes, 2);
    assert_int_equal(acc.n, 4);
    assert_string_equal(acc.objects[3].key, "p/z");
    assert_int_equal(acc.n_prefixes, 2);
    assert_string_equal(acc.prefixes[0], "p/dir/");
    assert_string_equal(acc.prefixes[1], "p/dir2/");
    /* the limit counts keys and prefixes of every page */
    stk_s3_listing small = {0};
    assert_int_equal(stk_s3_parse_list(page1, strlen(page1), 4, &small, &page), 0);
    assert_int_equal(stk_s3_parse_list(page2, strlen(page2), 4, &small, &page), STK_ELIMIT);
    assert_non_null(strstr(stk_errmsg(), "more than 4 keys"));
    stk_s3_listing_free(&small);
    stk_s3_listing_free(&acc);
    stk_s3_listing_free(&acc); /* emptied: safe twice */
    /* an empty bucket: no Contents at all */
    const char *empty = "<ListBucketResult><IsTruncated>false</IsTruncated><KeyCount>0</KeyCount>"
                        "</ListBucketResult>";
    assert_int_equal(stk_s3_parse_list(empty, strlen(empty), 0, &acc, &page), 0);
    assert_int_equal(acc.n, 0);
    /* a namespace prefix instead of a default namespace */
    const char *prefixed = "<s3:ListBucketResult xmlns:s3=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                           "<s3:Contents><s3:Key>k</s3:Key><s3:Size>3</s3:Size></s3:Contents>"
                           "</s3:ListBucketResult>";
    assert_int_equal(stk_s3_parse_list(prefixed, strlen(prefixed), 0, &acc, &page), 0);
    assert_int_equal(acc.n, 1);
    assert_string_equal(acc.objects[0].key, "k");
    stk_s3_listing_free(&acc);
}

static void expect_list_fails(const char *xml, int code, const char *msg)
{
    stk_s3_listing acc = {0};
    stk_s3_list_page page;
    int rc = stk_s3_parse_list(xml, xml ? strlen(xml) : 0, 0, &acc, &page);
    if (rc != code || !strstr(stk_errmsg(), msg))
        fprintf(stderr, "got %d '%s', want %d '%s'\n", rc, stk_errmsg(), code, msg);
    assert_int_equal(rc, code);
    assert_non_null(strstr(stk_errmsg(), msg));
    stk_s3_listing_free(&acc);
}

static void test_list_refusals(void **state)
{
    (void)state;
    expect_list_fails("<ListBucketResult><Contents><Key>k</Key>", STK_EFORMAT,
                      "malformed XML at line 1");
    expect_list_fails("<ListBucketResult><Contents><Key>a &bogus; b</Key></Contents>"
                      "</ListBucketResult>", STK_EFORMAT, "malformed XML");
    expect_list_fails("not xml at all", STK_EFORMAT, "malformed XML");
    expect_list_fails("", STK_EFORMAT, "an empty response");
    expect_list_fails("<Error><Code>AccessDenied</Code></Error>", STK_EFORMAT,
                      "not a ListBucketResult (the root element is <Error>)");
    expect_list_fails("<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",
                      STK_EFORMAT, "a Contents without a Key");
    expect_list_fails("<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>",
                      STK_EFORMAT, "Contents 'k' without a Size");
    expect_list_fails("<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents>"
                      "</ListBucketResult>", STK_EFORMAT, "Size '-1' is not a number");
    expect_list_fails("<ListBucketResult><Contents><Key>k</Key><Size>99999999999999999999</Size>"
                      "</Contents></ListBucketResult>", STK_EFORMAT, "is not a number");
    expect_list_fails("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
                      STK_EFORMAT, "IsTruncated without a NextContinuationToken");
    /* entity declarations are refused before any expansion */
    expect_list_fails("<?xml version=\"1.0\"?><!DOCTYPE lolz [<!ENTITY lol \"lol\">"
                      "<!ENTITY lol2 \"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;\">]>"
                      "<ListBucketResult><Contents><Key>&lol2;</Key><Size>1</Size></Contents>"
                      "</ListBucketResult>", STK_EFORMAT, "DOCTYPE");
    expect_list_fails("<!DOCTYPE x SYSTEM \"file:///etc/passwd\"><ListBucketResult/>",
                      STK_EFORMAT, "DOCTYPE");
    /* a key over S3's 1024 bytes, a text over 64 KiB */
    static char big[80000];
    int n = snprintf(big, sizeof big, "<ListBucketResult><Contents><Key>");
    memset(big + n, 'k', 1025);
    snprintf(big + n + 1025, sizeof big - n - 1025, "</Key><Size>1</Size></Contents>"
                                                    "</ListBucketResult>");
    expect_list_fails(big, STK_ELIMIT, "a Key longer than 1024 bytes");
    memset(big + n, 'k', 70000);
    snprintf(big + n + 70000, sizeof big - n - 70000, "</Key></Contents></ListBucketResult>");
    expect_list_fails(big, STK_ELIMIT, "longer than 64 KiB");
    n = snprintf(big, sizeof big, "<ListBucketResult><NextContinuationToken>");
    memset(big + n, 't', 5000);
    snprintf(big + n + 5000, sizeof big - n - 5000, "</NextContinuationToken></ListBucketResult>");
    expect_list_fails(big, STK_ELIMIT, "NextContinuationToken longer than 4095 bytes");
}

/* ---- errors, multipart bodies ------------------------------------------------ */

static void test_error_bodies(void **state)
{
    (void)state;
    char code[64], msg[256];
    const char *e = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>"
                    "<Message>The specified key does not exist.</Message><Key>a&amp;b</Key>"
                    "<RequestId>X</RequestId></Error>";
    assert_int_equal(stk_s3_parse_error(e, strlen(e), code, sizeof code, msg, sizeof msg), 1);
    assert_string_equal(code, "NoSuchKey");
    assert_string_equal(msg, "The specified key does not exist.");
    assert_int_equal(stk_s3_parse_error("<ListBucketResult/>", 19, code, sizeof code, msg,
                                        sizeof msg), 0);
    assert_string_equal(code, "");
    assert_int_equal(stk_s3_parse_error("<Error><Code>x", 14, code, sizeof code, msg, sizeof msg),
                     0);
    assert_int_equal(stk_s3_parse_error(NULL, 0, code, sizeof code, msg, sizeof msg), 0);

    /* responses into codes and messages */
    const char *env[] = {"AWS_ACCESS_KEY_ID", "AK", "AWS_SECRET_ACCESS_KEY", "s3cr3tKEY",
                         "AWS_SESSION_TOKEN", "sessionTOKEN", NULL};
    assert_int_equal(load(env), 0);
    stk_http_response r = {0};
    char body[512];
    snprintf(body, sizeof body, "<Error><Code>SignatureDoesNotMatch</Code><Message>sig for "
                                "s3cr3tKEY and sessionTOKEN</Message><StringToSign>x</StringToSign>"
                                "</Error>");
    r.rc = STK_EACCESS;
    r.status = 403;
    r.body = body;
    r.body_size = strlen(body);
    snprintf(r.message, sizeof r.message, "GET http://h/b/k: HTTP 403 SignatureDoesNotMatch");
    assert_int_equal(stk_s3_fail_response(&cfg, "s3://b/k", &r), STK_EACCESS);
    assert_string_equal(stk_errmsg(), "s3://b/k: HTTP 403 SignatureDoesNotMatch: sig for "
                                      "[redacted] and [redacted] (GET http://h/b/k: HTTP 403 "
                                      "SignatureDoesNotMatch)");
    snprintf(body, sizeof body, "<Error><Code>NoSuchBucket</Code><Message>m</Message></Error>");
    r.rc = STK_ENOENT;
    r.status = 404;
    r.body_size = strlen(body);
    assert_int_equal(stk_s3_fail_response(&cfg, "s3://b/k", &r), STK_ENOENT);
    assert_non_null(strstr(stk_errmsg(), "s3://b/k: HTTP 404 NoSuchBucket: m ("));
    /* 400 with a code that refuses the credentials */
    snprintf(body, sizeof body, "<Error><Code>ExpiredToken</Code><Message>The provided token has "
                                "expired.</Message></Error>");
    r.rc = STK_ENETWORK;
    r.status = 400;
    r.body_size = strlen(body);
    assert_int_equal(stk_s3_fail_response(&cfg, "s3://b/k", &r), STK_EACCESS);
    assert_non_null(strstr(stk_errmsg(), "s3://b/k: HTTP 400 ExpiredToken: The provided token"));
    /* HEAD: no body */
    r.body = NULL;
    r.body_size = 0;
    r.status = 403;
    r.rc = STK_EACCESS;
    assert_int_equal(stk_s3_fail_response(&cfg, "s3://b/k", &r), STK_EACCESS);
    assert_non_null(strstr(stk_errmsg(), "s3://b/k: HTTP 403: access denied ("));
    r.status = 404;
    assert_int_equal(stk_s3_fail_response(&cfg, "s3://b/k", &r), STK_ENOENT);
    assert_non_null(strstr(stk_errmsg(), "HTTP 404: not found"));
    r.status = 503;
    r.rc = STK_ENETWORK;
    snprintf(r.message, sizeof r.message, "GET http://h/b/k: HTTP 503 SlowDown (8 attempts)");
    assert_int_equal(stk_s3_fail_response(&cfg, "s3://b/k", &r), STK_ENETWORK);
    assert_non_null(strstr(stk_errmsg(), "(8 attempts)"));
    /* a 200 carrying an <Error> (a CompleteMultipartUpload that failed late) */
    snprintf(body, sizeof body, "<Error><Code>InternalError</Code><Message>late</Message></Error>");
    r.body = body;
    r.body_size = strlen(body);
    r.status = 200;
    r.rc = 0;
    r.message[0] = 0;
    assert_int_equal(stk_s3_fail_response(&cfg, "s3://b/k", &r), STK_ENETWORK);
    assert_non_null(strstr(stk_errmsg(), "s3://b/k: HTTP 200 InternalError: late"));
    /* no HTTP answer at all: the engine's words */
    r.body = NULL;
    r.body_size = 0;
    r.status = 0;
    r.rc = STK_ENETWORK;
    snprintf(r.message, sizeof r.message, "GET http://h/b/k: Couldn't connect (8 attempts)");
    assert_int_equal(stk_s3_fail_response(&cfg, "s3://b/k", &r), STK_ENETWORK);
    assert_string_equal(stk_errmsg(), "s3://b/k: GET http://h/b/k: Couldn't connect (8 attempts)");
}

static void test_multipart_bodies(void **state)
{
    (void)state;
    const char *etags[] = {"\"a1\"", "\"b<&>2\""};
    char *xml;
    long n = stk_s3_complete_xml(etags, 2, &xml);
    const char *want = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                       "<Part><PartNumber>1</PartNumber><ETag>\"a1\"</ETag></Part>"
                       "<Part><PartNumber>2</PartNumber><ETag>\"b&lt;&amp;&gt;2\"</ETag></Part>"
                       "</CompleteMultipartUpload>";
    assert_int_equal(n, (long)strlen(want));
    assert_string_equal(xml, want);
    /* and it is XML that an independent parser reads back (the error
     * parser's walker, on the same bytes) */
    char code[8], msg[8];
    assert_int_equal(stk_s3_parse_error(xml, (size_t)n, code, sizeof code, msg, sizeof msg), 0);
    free(xml);
    char id[64];
    const char *init = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><InitiateMultipartUploadResult " NS
                       "><Bucket>b</Bucket><Key>k</Key><UploadId>VXBsb2FkIElE+/=</UploadId>"
                       "</InitiateMultipartUploadResult>";
    assert_int_equal(stk_s3_parse_upload_id(init, strlen(init), id, sizeof id), 0);
    assert_string_equal(id, "VXBsb2FkIElE+/=");
    assert_int_equal(stk_s3_parse_upload_id(init, strlen(init), id, 8), STK_ELIMIT);
    const char *noid = "<InitiateMultipartUploadResult><Bucket>b</Bucket>"
                       "</InitiateMultipartUploadResult>";
    assert_int_equal(stk_s3_parse_upload_id(noid, strlen(noid), id, sizeof id), STK_EFORMAT);
    assert_non_null(strstr(stk_errmsg(), "without UploadId"));
    assert_int_equal(stk_s3_parse_upload_id("<Error/>", 8, id, sizeof id), STK_EFORMAT);
}

static void test_upload_refusals(void **state)
{
    (void)state;
    const char *anon[] = {NULL};
    assert_int_equal(load(anon), 0);
    stk_s3_upload_options o = {.part_size = 1 << 20};
    assert_int_equal(stk_s3_upload_file(&cfg, "/nonexistent", "s3://b/k", &o, NULL), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "outside S3's 5 MiB..5 GiB"));
    assert_int_equal(stk_s3_upload_file(&cfg, "/nonexistent", "s3://b/dir/", NULL, NULL),
                     STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "not an object name"));
    assert_int_equal(stk_s3_upload_file(&cfg, "/nonexistent/f", "s3://b/k", NULL, NULL),
                     STK_ENOENT);
    assert_non_null(strstr(stk_errmsg(), "/nonexistent/f: cannot open"));
    assert_int_equal(stk_s3_upload_file(&cfg, tu_tmpdir(), "s3://b/k", NULL, NULL), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "not a regular file"));
    assert_int_equal(stk_s3_put(&cfg, "s3://b", "x", 1, NULL, 0), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "no key to write"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_parse_url),
        cmocka_unit_test(test_addressing),
        cmocka_unit_test(test_sign_glue),
        cmocka_unit_test(test_list_pages),
        cmocka_unit_test(test_list_refusals),
        cmocka_unit_test(test_error_bodies),
        cmocka_unit_test(test_multipart_bodies),
        cmocka_unit_test(test_upload_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
