/*
 * cmd_cache.c — `stoker cache`: the local cache of remote datasets
 * (docs/remote.md, "The local cache").
 *
 *   stoker cache info                  the directory, its limit, objects and bytes
 *   stoker cache fetch DATASET         download a remote dataset into it ahead of training
 *   stoker cache trim SIZE             remove least-recently-used objects down to SIZE
 *   stoker cache clear                 remove every object
 *
 * --dir DIR names the cache (else STOKER_CACHE_DIR, $XDG_CACHE_HOME/stoker,
 * ~/.cache/stoker, as the library chooses). Built on the public API only
 * (stk_remote_cache_info_get, stk_remote_cache_trim, stk_remote_prefetch).
 * Options may stand anywhere among the words, so they are read by hand
 * (cli_option_value, cli/args.h), the words gathered in argv[1..], and
 * counted per subcommand by cli_positionals.
 */
#include "args.h"
#include "cli.h"

#include <stoker/stoker.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char cache_usage[] =
    "usage: stoker cache info  [--dir DIR]\n"
    "       stoker cache fetch DATASET [--dir DIR] [-q]\n"
    "       stoker cache trim SIZE [--dir DIR]\n"
    "       stoker cache clear [--dir DIR]\n"
    "\n"
    "The local cache that remote datasets (http://, https://, s3://) are read through\n"
    "(docs/remote.md). One directory serves every process of the machine.\n"
    "\n"
    "  info            the directory, its byte limit, the objects it holds and their bytes\n"
    "  fetch DATASET   download every object of a remote dataset into the cache now, with\n"
    "                  parallel range requests, so that training starts warm (on each node\n"
    "                  before a job, say); chunks already cached are not fetched again.\n"
    "                  DATASET as for bench: stk:https://host/train-{000..127}.stk,\n"
    "                  stk:s3://bucket/train/, wds:s3://bucket/shards-{0..9}.tar, ...\n"
    "  trim SIZE       remove least-recently-used objects until at most SIZE bytes remain\n"
    "                  (suffix K, M, G or T: 500G)\n"
    "  clear           remove every object (trim 0)\n"
    "\n"
    "An object another process is reading leaves the directory, and that process keeps\n"
    "reading its files until it closes them.\n"
    "\n"
    "options:\n"
    "  --dir DIR       the cache directory (default: STOKER_CACHE_DIR, else\n"
    "                  $XDG_CACHE_HOME/stoker, else ~/.cache/stoker)\n"
    "  -q, --quiet     fetch: no progress lines\n";

static void print_info(const stk_remote_cache_info *info)
{
    printf("cache:    %s\n", info->dir);
    if (info->limit)
        printf("limit:    %.1f MB (%llu bytes)\n", (double)info->limit / 1e6,
               (unsigned long long)info->limit);
    else
        printf("limit:    none (STOKER_CACHE_LIMIT)\n");
    printf("objects:  %llu\n", (unsigned long long)info->objects);
    printf("bytes:    %.1f MB (%llu bytes on disk)\n", (double)info->bytes / 1e6,
           (unsigned long long)info->bytes);
}

static void fetch_progress(void *ctx, uint32_t done, uint32_t total, const char *url)
{
    double t0 = *(double *)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    fprintf(stderr, "fetch: %u/%u objects, %.1f s: %s\n", done, total,
            (double)ts.tv_sec + ts.tv_nsec * 1e-9 - t0, url);
}

int cmd_cache(int argc, char **argv)
{
    static const struct option options[] = {{"dir", required_argument, NULL, 'd'},
                                            {"quiet", no_argument, NULL, 'q'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
    const char *dir = NULL;
    bool quiet = false;
    /* The words, with options allowed anywhere among them, gathered in
     * argv[1..nwords]. */
    int nwords = 0;
    for (int i = 1; i < argc; i++) {
        int got = cli_option_value(argc, argv, &i, "--dir", "-d", &dir);
        if (got < 0)
            return EXIT_USAGE;
        if (got > 0)
            continue; /* --dir DIR, --dir=DIR, -d DIR */
        if (!strcmp(argv[i], "-q") || !strcmp(argv[i], "--quiet")) {
            quiet = true;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(cache_usage, stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            cli_unknown_option(argv[i], options);
            return EXIT_USAGE;
        } else {
            argv[1 + nwords++] = argv[i]; /* the words, in place */
        }
    }
    static const char *const subs[] = {"info", "fetch", "trim", "clear"};
    if (nwords == 0) {
        cli_error("cache: expected info, fetch, trim or clear (see 'stoker cache --help')");
        return EXIT_USAGE;
    }
    const char *sub = argv[1];
    int want = !strcmp(sub, "info") || !strcmp(sub, "clear") ? 1
             : !strcmp(sub, "fetch") || !strcmp(sub, "trim") ? 2
                                                              : 0;
    if (!want) {
        const char *s = cli_suggest(sub, subs, sizeof subs / sizeof *subs);
        if (s)
            cli_error("cache: unknown subcommand '%s'; did you mean '%s'?", sub, s);
        else
            cli_error("cache: unknown subcommand '%s': expected info, fetch, trim or clear", sub);
        return EXIT_USAGE;
    }
    char cmd[16];
    snprintf(cmd, sizeof cmd, "cache %s", sub);
    static const char *const fetch_names[] = {"DATASET"}, *const trim_names[] = {"SIZE"};
    if (!cli_positionals(1 + nwords, argv, 2, cmd, !strcmp(sub, "fetch") ? fetch_names : trim_names,
                         want - 1))
        return EXIT_USAGE;
    uint64_t keep = 0;
    if (!strcmp(sub, "trim") && !cli_parse_bytes(argv[2], "cache trim SIZE", 0, &keep))
        return EXIT_USAGE;
    if (dir && stk_remote_configure(dir, UINT64_MAX) < 0) {
        cli_error("%s", stk_errmsg());
        return EXIT_USAGE;
    }

    stk_remote_cache_info info;
    if (!strcmp(sub, "info")) {
        if (stk_remote_cache_info_get(&info) < 0) {
            cli_error("%s", stk_errmsg());
            return EXIT_RUNTIME;
        }
        print_info(&info);
        return 0;
    }
    if (!strcmp(sub, "fetch")) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double t0 = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
        uint64_t objects, bytes, fetched;
        if (stk_remote_prefetch(argv[2], quiet ? NULL : fetch_progress, &t0, &objects, &bytes,
                                &fetched) < 0) {
            cli_error("%s", stk_errmsg());
            return EXIT_RUNTIME;
        }
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double s = (double)ts.tv_sec + ts.tv_nsec * 1e-9 - t0;
        printf("fetched %.1f MB of %llu objects (%.1f MB) in %.1f s (%.1f MB/s); %.1f MB were "
               "cached already\n",
               (double)fetched / 1e6, (unsigned long long)objects, (double)bytes / 1e6, s,
               s > 0 ? (double)fetched / 1e6 / s : 0.0,
               (double)(bytes > fetched ? bytes - fetched : 0) / 1e6);
        return 0;
    }
    /* trim, clear */
    uint64_t ro, rb;
    if (stk_remote_cache_trim(keep, &ro, &rb, &info) < 0) {
        cli_error("%s", stk_errmsg());
        return EXIT_RUNTIME;
    }
    printf("removed %llu objects (%.1f MB); left %llu objects (%.1f MB) in %s\n",
           (unsigned long long)ro, (double)rb / 1e6, (unsigned long long)info.objects,
           (double)info.bytes / 1e6, info.dir);
    return 0;
}
