/*
 * remote_open.c — what naming and opening many remote objects costs: a
 * brace pattern expanded and checked (one HEAD per object, in parallel,
 * each identity kept), then every object opened (its identity looked up,
 * its cache object opened) and closed.
 *
 *   remote_open URL-PATTERN
 *
 * e.g. with N small files served by nginx (tests/net/servers.py --nginx DIR
 * -- build/remote_open "$STOKER_TEST_HTTP_URL/f-{00000..19999}.bin"). The
 * cache is STOKER_CACHE_DIR. Prints the object count and the seconds of each
 * phase. It measured the identity table's change from a list (n^2/2 string
 * compares: a 41,000-shard listing paid for it) to a hash table.
 */
#include "core/error.h"
#include "io/remote.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: remote_open URL-PATTERN\n");
        return 2;
    }
    char **urls;
    uint32_t n;
    double t0 = now();
    if (stk_remote_list(argv[1], NULL, &urls, &n) < 0) {
        fprintf(stderr, "remote_open: %s\n", stk_errmsg());
        return 1;
    }
    double t1 = now();
    for (uint32_t i = 0; i < n; i++) {
        stk_source *s;
        if (stk_remote_open(urls[i], UINT64_MAX, &s) < 0) {
            fprintf(stderr, "remote_open: %s\n", stk_errmsg());
            return 1;
        }
        stk_source_close(s);
    }
    double t2 = now();
    printf("{\"objects\": %u, \"list_s\": %.3f, \"open_s\": %.3f}\n", n, t1 - t0, t2 - t1);
    stk_remote_list_free(urls, n);
    return 0;
}
