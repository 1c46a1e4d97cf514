/*
 * sigv4_tool.c — signs request descriptions with stoker's SigV4 signer, for
 * tests/python/test_sigv4_botocore.py (built with the tests, not installed).
 *
 * Reads one JSON object per line on stdin:
 *   {"method": "GET", "url": "https://b.s3.amazonaws.com/k?x=1",
 *    "headers": ["Name: value", ...], "payload_hash": "hex" | "UNSIGNED-PAYLOAD" | null,
 *    "time": 1440938160, "access_key": "...", "secret_key": "...",
 *    "session_token": "..." | null, "region": "us-east-1", "service": "s3",
 *    "mode": "s3" | "normalize", "content_sha256": true}
 * and writes one per line on stdout:
 *   {"rc": 0, "add": ["X-Amz-Date: ...", ..., "Authorization: ..."],
 *    "creq": "...", "sts": "..."}   or   {"rc": -1, "error": "message"}
 */
#include "io/sigv4.h"
#include "stoker/stoker.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *str_or_null(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int main(void)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        json_error_t jerr;
        json_t *in = json_loadb(line, (size_t)n, 0, &jerr);
        if (!in) {
            fprintf(stderr, "sigv4_tool: bad JSON: %s\n", jerr.text);
            return 2;
        }
        json_t *hs = json_object_get(in, "headers");
        size_t nh = json_is_array(hs) ? json_array_size(hs) : 0;
        const char **headers = calloc(nh + 1, sizeof *headers);
        for (size_t i = 0; i < nh; i++)
            headers[i] = json_string_value(json_array_get(hs, i));
        const char *mode = str_or_null(in, "mode");
        stk_sigv4_request q = {
            .method = str_or_null(in, "method"),
            .url = str_or_null(in, "url"),
            .headers = headers,
            .n_headers = nh,
            .payload_hash = str_or_null(in, "payload_hash"),
            .time = json_integer_value(json_object_get(in, "time")),
            .region = str_or_null(in, "region"),
            .service = str_or_null(in, "service"),
            .path_mode = mode && !strcmp(mode, "normalize") ? STK_SIGV4_PATH_NORMALIZE
                                                            : STK_SIGV4_PATH_S3,
            .content_sha256_header = json_is_true(json_object_get(in, "content_sha256")),
        };
        stk_sigv4_credentials cred = {str_or_null(in, "access_key"),
                                      str_or_null(in, "secret_key"),
                                      str_or_null(in, "session_token")};
        stk_sigv4_signed s;
        int rc = stk_sigv4_sign(&q, &cred, &s);
        json_t *out = json_object();
        json_object_set_new(out, "rc", json_integer(rc));
        if (rc) {
            json_object_set_new(out, "error", json_string(stk_errmsg()));
        } else {
            json_t *add = json_array();
            for (uint32_t i = 0; i < s.n_add; i++)
                json_array_append_new(add, json_string(s.add[i]));
            json_object_set_new(out, "add", add);
            json_object_set_new(out, "creq", json_string(s.canonical_request));
            json_object_set_new(out, "sts", json_string(s.string_to_sign));
        }
        char *text = json_dumps(out, JSON_COMPACT);
        printf("%s\n", text);
        fflush(stdout);
        free(text);
        json_decref(out);
        stk_sigv4_signed_free(&s);
        free(headers);
        json_decref(in);
    }
    free(line);
    return 0;
}
