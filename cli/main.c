/*
 * main.c — `stoker`: dispatch to a command, shared helpers.
 *
 * A mistyped command or option is answered with the closest known one when
 * it is near enough: the Damerau-Levenshtein distance (optimal string
 * alignment: insertions, deletions, substitutions and swaps of two
 * neighbours, each costing 1) is at most 2 and smaller than the typed
 * word's length (so "x" is not "corrected" to "raw"). Ties go to the first
 * candidate in the table's order.
 *
 * stk_cli_main is the whole tool; main() only calls it. The Python package
 * compiles the cli/ sources into its extension module with STK_CLI_NO_MAIN defined
 * (setup.py, and CMake's stoker_python target), where _stoker.cli_main(argv)
 * calls stk_cli_main: the `stoker` console script and `python -m stoker` of
 * an installed wheel run this same code. It keeps no state between calls but
 * getopt's, which it resets on entry: a process may call it more than once.
 */
#include "cli.h"

#include <stoker/op.h>
#include <stoker/stoker.h>

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static const char usage[] =
    "usage: stoker [--plugin LIB.so]... COMMAND [ARGS...]\n"
    "\n"
    "Keeps GPUs fed: reads, augments, shuffles and batches training data with native threads.\n"
    "\n"
    "commands:\n"
    "  bench DATASET --pipeline SPEC   measure a pipeline: samples/s, MB/s, per-stage times,\n"
    "                                  peak RSS; --digest hashes every batch\n"
    "  order DATASET-or-SIZE           print the sample indices one rank sees in an epoch\n"
    "  pack SRC DEST                   pack a dataset into .stk shards (docs/format.md)\n"
    "  inspect DATASET                 schema, counts, sizes, label histogram, metadata\n"
    "  verify DATASET [--decode]       check shard structure and record checksums\n"
    "  cat DATASET INDEX [--field F]   write one record's field to stdout\n"
    "  preview DATASET --pipeline SPEC -o FILE.png\n"
    "                                  a PNG grid of augmented samples (--count, --seed, --columns,\n"
    "                                  --labels, --compare original beside augmented, --scale)\n"
    "  doctor DATASET --pipeline SPEC  find the bottleneck (storage, decode, augment or the\n"
    "                                  training step: --step-ms), the images/s to expect with\n"
    "                                  1..N cores, and what would help most\n"
    "  cache info|fetch|trim|clear     the local cache of remote datasets: its use, downloading\n"
    "                                  a dataset ahead of training, removing old objects\n"
    "  demo                            Fashion-MNIST (Debian's dataset-fashion-mnist) through a\n"
    "                                  realistic pipeline, printing throughput\n"
    "  version                         print the library version\n"
    "  help [COMMAND]                  this text, or a command's options\n"
    "\n"
    "--plugin LIB.so loads a plugin of user-defined ops (docs/ops.md) before the command;\n"
    "a pipeline may also load one itself: 'plugin LIB.so | resize 64,64 | brightness 1.5'.\n"
    "\n"
    "DATASET is a URI of one of the forms below (the library's reader table), or a path\n"
    "whose format is detected. See docs/datasets.md.\n";

/* The usage text, then one line per reader of stk_dataset_reader(). */
static void print_usage(FILE *f)
{
    const char *form, *desc;
    fputs(usage, f);
    for (uint32_t i = 0; stk_dataset_reader(i, &form, &desc); i++)
        fprintf(f, "  %s\n      %s\n", form, desc);
    fputs("Exit status: 0 success, 1 runtime failure (data, I/O), 2 usage error.\n", f);
}

static const char *const commands[] = {"bench",   "order", "pack", "inspect", "verify",
                                       "cat",     "preview", "doctor", "cache", "demo", "version", "help"};

size_t cli_distance(const char *a, const char *b)
{
    enum { MAXLEN = 64 };
    size_t n = strlen(a), m = strlen(b);
    if (n > MAXLEN || m > MAXLEN)
        return SIZE_MAX;
    size_t d[MAXLEN + 1][MAXLEN + 1];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            size_t cost = a[i - 1] != b[j - 1];
            size_t v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v)
                v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v)
                v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[n][m];
}

const char *cli_suggest(const char *word, const char *const *candidates, size_t n)
{
    const char *best = NULL;
    size_t best_d = 3, len = strlen(word);
    for (size_t i = 0; i < n; i++) {
        size_t dist = cli_distance(word, candidates[i]);
        if (dist < best_d && dist < len) {
            best = candidates[i];
            best_d = dist;
        }
    }
    return best;
}

void cli_unknown_option(const char *arg, const struct option *options)
{
    /* "--name=value" and "-x" are compared by their name alone */
    char name[65];
    const char *p = arg;
    while (*p == '-')
        p++;
    size_t len = strcspn(p, "=");
    const char *names[64];
    size_t n = 0;
    if (len < sizeof name && options) {
        memcpy(name, p, len);
        name[len] = '\0';
        for (; options[n].name && n < 64; n++)
            names[n] = options[n].name;
        const char *hit = cli_suggest(name, names, n);
        if (hit) {
            cli_error("unknown option '%s'; did you mean '--%s'?", arg, hit);
            return;
        }
    }
    cli_error("unknown option '%s' (see --help)", arg);
}

const char *cli_bad_option(char **argv)
{
    static char shortopt[3];
    if (optopt && optopt != '?') { /* an unknown short option (it may sit in a cluster) */
        shortopt[0] = '-';
        shortopt[1] = (char)optopt;
        shortopt[2] = '\0';
        return shortopt;
    }
    return argv[optind - 1];
}

static void unknown_command(const char *what, const char *cmd)
{
    static const char *const flags[] = {"version", "help"}; /* "--verison" */
    const char *hit = cmd[0] == '-' && cmd[1] == '-'
                          ? cli_suggest(cmd + 2, flags, sizeof flags / sizeof *flags)
                          : cli_suggest(cmd, commands, sizeof commands / sizeof *commands);
    if (hit)
        cli_error("%s '%s'; did you mean '%s%s'?", what, cmd, cmd[0] == '-' ? "--" : "", hit);
    else
        cli_error("%s '%s' (try 'stoker help')", what, cmd);
}

void cli_error(const char *fmt, ...)
{
    va_list ap;
    fputs("stoker: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

bool cli_parse_u64(const char *text, const char *what, uint64_t *out)
{
    char *end;
    if (!text || !*text || *text == '-' || *text == '+') {
        cli_error("%s: expected a non-negative integer, got '%s'", what, text ? text : "");
        return false;
    }
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || *end) {
        cli_error("%s: expected a non-negative integer, got '%s'", what, text);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_u32(const char *text, const char *what, uint32_t *out)
{
    uint64_t v;
    if (!cli_parse_u64(text, what, &v))
        return false;
    if (v > UINT32_MAX) {
        cli_error("%s: %s is too large", what, text);
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

bool cli_parse_shuffle(const char *text, stk_shuffle *out)
{
    if (strcmp(text, "global") == 0)
        *out = STK_SHUFFLE_GLOBAL;
    else if (strcmp(text, "block") == 0)
        *out = STK_SHUFFLE_BLOCK;
    else if (strcmp(text, "none") == 0)
        *out = STK_SHUFFLE_NONE;
    else {
        cli_error("--shuffle: expected 'global', 'block' or 'none', got '%s'", text);
        return false;
    }
    return true;
}

bool cli_check_order(int no_shuffle, stk_shuffle mode, uint64_t block_size, uint32_t window)
{
    if (no_shuffle && mode == STK_SHUFFLE_BLOCK) {
        cli_error("--no-shuffle contradicts --shuffle block");
        return false;
    }
    if ((block_size || window) && mode != STK_SHUFFLE_BLOCK) {
        cli_error("--block-size and --shuffle-window need --shuffle block");
        return false;
    }
    return true;
}

bool cli_parse_count(const char *text, const char *what, uint32_t *out)
{
    uint32_t v;
    if (!cli_parse_u32(text, what, &v))
        return false;
    if (v == 0) {
        cli_error("%s must be at least 1, got '%s'", what, text);
        return false;
    }
    *out = v;
    return true;
}

double cli_peak_rss_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* KiB on Linux */
}

int stk_cli_main(int argc, char **argv)
{
    /* The commands set optind = 1, which does not clear getopt's position
     * inside a cluster of short options ("-zq" left at 'q' by a usage error):
     * on a second call that would point into the previous argv. optind = 0
     * makes glibc re-initialise on the next call, made here on an argv with
     * no options. */
    char *no_options[] = {"stoker", NULL};
    optind = 0;
    (void)getopt(1, no_options, "");
    /* --plugin PATH (repeatable, before the command): load a plugin of
     * user-defined ops (stoker/op.h) for the command's pipeline. */
    while (argc >= 2 && (!strcmp(argv[1], "--plugin") || !strncmp(argv[1], "--plugin=", 9))) {
        const char *path = argv[1][8] == '=' ? argv[1] + 9 : argc >= 3 ? argv[2] : NULL;
        int used = argv[1][8] == '=' ? 1 : 2;
        if (!path || !*path) {
            cli_error("--plugin needs a path (stoker --plugin LIB.so COMMAND ...)");
            return EXIT_USAGE;
        }
        if (stk_plugin_load(path) < 0) {
            cli_error("%s", stk_errmsg());
            return EXIT_FAILURE;
        }
        argv[used] = argv[0];
        argv += used;
        argc -= used;
    }
    if (argc < 2) {
        print_usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "bench"))
        return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "order"))
        return cmd_order(argc - 1, argv + 1);
    if (!strcmp(cmd, "demo"))
        return cmd_demo(argc - 1, argv + 1);
    if (!strcmp(cmd, "pack"))
        return cmd_pack(argc - 1, argv + 1);
    if (!strcmp(cmd, "inspect"))
        return cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(cmd, "verify"))
        return cmd_verify(argc - 1, argv + 1);
    if (!strcmp(cmd, "cat"))
        return cmd_cat(argc - 1, argv + 1);
    if (!strcmp(cmd, "preview"))
        return cmd_preview(argc - 1, argv + 1);
    if (!strcmp(cmd, "doctor"))
        return cmd_doctor(argc - 1, argv + 1);
    if (!strcmp(cmd, "cache"))
        return cmd_cache(argc - 1, argv + 1);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
        printf("stoker %s\n", stk_version_string());
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        if (argc > 2) {
            char *sub[] = {argv[2], "--help", NULL};
            if (!strcmp(argv[2], "bench"))
                return cmd_bench(2, sub);
            if (!strcmp(argv[2], "order"))
                return cmd_order(2, sub);
            if (!strcmp(argv[2], "demo"))
                return cmd_demo(2, sub);
            if (!strcmp(argv[2], "pack"))
                return cmd_pack(2, sub);
            if (!strcmp(argv[2], "inspect"))
                return cmd_inspect(2, sub);
            if (!strcmp(argv[2], "verify"))
                return cmd_verify(2, sub);
            if (!strcmp(argv[2], "cat"))
                return cmd_cat(2, sub);
            if (!strcmp(argv[2], "preview"))
                return cmd_preview(2, sub);
            if (!strcmp(argv[2], "doctor"))
                return cmd_doctor(2, sub);
            if (!strcmp(argv[2], "cache"))
                return cmd_cache(2, sub);
            unknown_command("no command", argv[2]);
            return EXIT_USAGE;
        }
        print_usage(stdout);
        return 0;
    }
    unknown_command("unknown command", cmd);
    return EXIT_USAGE;
}

#ifndef STK_CLI_NO_MAIN
int main(int argc, char **argv)
{
    return stk_cli_main(argc, argv);
}
#endif
