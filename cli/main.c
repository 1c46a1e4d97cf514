/*
 * main.c — `stoker`: dispatch to a command, shared helpers.
 *
 * stk_cli_main is the whole tool; main() only calls it. The Python package
 * compiles the cli/ sources into its extension module with STK_CLI_NO_MAIN defined
 * (setup.py, and CMake's stoker_python target), where _stoker.cli_main(argv)
 * calls stk_cli_main: the `stoker` console script and `python -m stoker` of
 * an installed wheel run this same code. It keeps no state between calls but
 * getopt's, which it resets on entry: a process may call it more than once.
 */
#include "cli.h"

#include <stoker/stoker.h>

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static const char usage[] =
    "usage: stoker COMMAND [ARGS...]\n"
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
    "                                  a PNG grid of augmented samples (--count, --seed, --columns)\n"
    "  demo                            Fashion-MNIST (Debian's dataset-fashion-mnist) through a\n"
    "                                  realistic pipeline, printing throughput\n"
    "  version                         print the library version\n"
    "  help [COMMAND]                  this text, or a command's options\n"
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
            cli_error("no command '%s' (try 'stoker help')", argv[2]);
            return EXIT_USAGE;
        }
        print_usage(stdout);
        return 0;
    }
    cli_error("unknown command '%s' (try 'stoker help')", cmd);
    return EXIT_USAGE;
}

#ifndef STK_CLI_NO_MAIN
int main(int argc, char **argv)
{
    return stk_cli_main(argc, argv);
}
#endif
