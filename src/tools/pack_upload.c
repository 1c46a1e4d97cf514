/*
 * pack_upload.c — `stoker pack SRC s3://bucket/prefix/`: shards into an object store.
 *
 * A shard is only complete when its footer is written last (docs/format.md),
 * and an S3 object cannot be appended to, so the shards are packed as usual
 * into a local staging folder (under $TMPDIR, or STOKER_PACK_STAGING), each
 * then uploaded to PREFIX/shard-NNNNN.stk (one PUT, or a multipart upload
 * for shards of 8 MiB and more: io/s3.c, stk_s3_upload_file, which aborts a
 * failed upload so no parts are left behind), and removed. The uploads run
 * after the whole pack succeeded, so a pack that fails uploads nothing; an
 * upload that fails stops at that shard with the s3:// URL in the message
 * (shards uploaded before it stay: re-running the pack overwrites them, and
 * a loader refuses the incomplete set, since every shard knows its set).
 * The staging folder needs room for the whole packed set.
 *
 * http(s):// destinations are refused: HTTP has no standard upload.
 */
#include "tools/pack_upload.h"

#include "core/error.h"
#include "core/util.h"
#include "io/remote.h"
#include "io/s3.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int stk_pack_remote(const char *src, const char *dest, const stk_pack_options *opts,
                    stk_pack_result *result)
{
    if (strncmp(dest, "s3://", 5) != 0)
        return stk_fail(STK_EUNSUPPORTED,
                        "%s: stoker packs into a folder or s3://bucket/prefix/ (an http(s) "
                        "server has no standard upload)", dest);
    stk_s3_config cfg;
    stk_s3_location loc;
    int rc = stk_s3_config_from_env(&cfg);
    if (rc == 0)
        rc = stk_s3_parse_url(dest, &loc);
    if (rc < 0)
        return rc;
    const char *base = getenv("STOKER_PACK_STAGING");
    if (!base || !*base)
        base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    char staging[4096];
    snprintf(staging, sizeof staging, "%s/stoker-pack-XXXXXX", base);
    if (!mkdtemp(staging))
        return stk_fail(STK_EIO, "%s: cannot create a staging folder for the shards", staging);
    rc = stk_pack(src, staging, opts, result);
    char **names = NULL;
    size_t n = 0, cap = 0;
    DIR *d = opendir(staging);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            size_t c = cap ? cap * 2 : 64;
            char **g = realloc(names, c * sizeof *g);
            if (!g) {
                rc = rc < 0 ? rc : stk_fail(STK_ENOMEM, "out of memory");
                break;
            }
            names = g;
            cap = c;
        }
        if (!(names[n] = stk_strdup(e->d_name))) {
            rc = rc < 0 ? rc : STK_ENOMEM;
            break;
        }
        n++;
    }
    if (d)
        closedir(d);
    if (n)
        qsort(names, n, sizeof *names, cmp_name);
    /* Upload the shards (only after a whole, successful pack), then clean up. */
    size_t klen = strlen(loc.key);
    bool slash = klen == 0 || loc.key[klen - 1] == '/';
    for (size_t i = 0; i < n; i++) {
        char local[4096 + 256], url[4096];
        snprintf(local, sizeof local, "%s/%s", staging, names[i]);
        if (rc == 0 && strstr(names[i], ".stk") && !strstr(names[i], ".tmp-")) {
            snprintf(url, sizeof url, "s3://%s/%s%s%s", loc.bucket, loc.key, slash ? "" : "/",
                     names[i]);
            rc = stk_s3_upload_file(&cfg, local, url, NULL, NULL);
        }
        unlink(local);
        free(names[i]);
    }
    free(names);
    rmdir(staging);
    return rc;
}
