/*
 * s3_tool.c — the S3 client (src/io/s3.c) from the command line, for
 * tests/python/test_s3_moto.py (built with the tests, not installed). The
 * configuration comes from the environment (stk_s3_config_from_env).
 *
 *   stk_s3_tool list s3://BUCKET/PREFIX [DELIMITER [MAX_KEYS [PAGE_SIZE]]]
 *   stk_s3_tool head s3://BUCKET/KEY
 *   stk_s3_tool put s3://BUCKET/KEY FILE
 *   stk_s3_tool upload FILE s3://BUCKET/KEY [PART_SIZE [THRESHOLD [IN_FLIGHT]]]
 *   stk_s3_tool url BUCKET KEY [QUERY]
 *
 * Prints one JSON object on stdout: the result, or {"rc": CODE, "code":
 * "STK_E...", "error": MESSAGE} (exit status 1).
 */
#include "io/http.h"
#include "io/s3.h"
#include "stoker/stoker.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int emit(json_t *o)
{
    char *text = json_dumps(o, JSON_COMPACT);
    printf("%s\n", text);
    free(text);
    json_decref(o);
    return 0;
}

static int fail(int rc)
{
    json_t *o = json_object();
    json_object_set_new(o, "rc", json_integer(rc));
    json_object_set_new(o, "code", json_string(stk_strerror(rc)));
    json_object_set_new(o, "error", json_string(stk_errmsg()));
    emit(o);
    return 1;
}

static unsigned long long arg_u64(int argc, char **argv, int i)
{
    return i < argc ? strtoull(argv[i], NULL, 0) : 0;
}

static int run(int argc, char **argv, const stk_s3_config *c)
{
    const char *cmd = argv[1];
    int rc;
    if (!strcmp(cmd, "list") && argc >= 3) {
        stk_s3_list_options o = {.delimiter = argc > 3 && argv[3][0] ? argv[3] : NULL,
                                 .max_keys = arg_u64(argc, argv, 4),
                                 .page_size = (uint32_t)arg_u64(argc, argv, 5)};
        stk_s3_listing l;
        if ((rc = stk_s3_list(c, argv[2], &o, &l)))
            return fail(rc);
        json_t *objs = json_array(), *pre = json_array();
        for (size_t i = 0; i < l.n; i++)
            json_array_append_new(objs, json_pack("[s, I, s]", l.objects[i].key,
                                                  (json_int_t)l.objects[i].size,
                                                  l.objects[i].etag));
        for (size_t i = 0; i < l.n_prefixes; i++)
            json_array_append_new(pre, json_string(l.prefixes[i]));
        json_t *o2 = json_pack("{s:i, s:o, s:o, s:i}", "rc", 0, "objects", objs, "prefixes", pre,
                               "pages", (int)l.pages);
        stk_s3_listing_free(&l);
        return emit(o2);
    }
    if (!strcmp(cmd, "head") && argc == 3) {
        uint64_t size;
        char etag[128];
        if ((rc = stk_s3_head(c, argv[2], &size, etag, sizeof etag)))
            return fail(rc);
        return emit(json_pack("{s:i, s:I, s:s}", "rc", 0, "size", (json_int_t)size, "etag", etag));
    }
    if (!strcmp(cmd, "put") && argc == 4) {
        FILE *f = fopen(argv[3], "rb");
        if (!f) {
            perror(argv[3]);
            return 2;
        }
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        char *buf = malloc((size_t)n + 1);
        if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
            fclose(f);
            return 2;
        }
        fclose(f);
        char etag[128];
        rc = stk_s3_put(c, argv[2], buf, (size_t)n, etag, sizeof etag);
        free(buf);
        if (rc)
            return fail(rc);
        return emit(json_pack("{s:i, s:s}", "rc", 0, "etag", etag));
    }
    if (!strcmp(cmd, "upload") && argc >= 4) {
        stk_s3_upload_options o = {.part_size = arg_u64(argc, argv, 4),
                                   .multipart_threshold = arg_u64(argc, argv, 5),
                                   .max_in_flight = (uint32_t)arg_u64(argc, argv, 6)};
        stk_s3_upload_result r;
        if ((rc = stk_s3_upload_file(c, argv[2], argv[3], &o, &r)))
            return fail(rc);
        return emit(json_pack("{s:i, s:I, s:i, s:s}", "rc", 0, "size", (json_int_t)r.size,
                              "parts", (int)r.parts, "etag", r.etag));
    }
    if (!strcmp(cmd, "url") && argc >= 4) {
        char url[8192];
        if ((rc = stk_s3_object_url(c, argv[2], argv[3], argc > 4 ? argv[4] : NULL, url,
                                    sizeof url)))
            return fail(rc);
        return emit(json_pack("{s:i, s:s}", "rc", 0, "url", url));
    }
    fprintf(stderr, "usage: see tests/s3_tool.c\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: see tests/s3_tool.c\n");
        return 2;
    }
    static stk_s3_config c; /* 9 KB: not on the stack */
    int rc = stk_s3_config_from_env(&c);
    if (rc)
        return fail(rc);
    int status = run(argc, argv, &c);
    stk_http_shutdown();
    return status;
}
