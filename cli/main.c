/*
 * main.c — `stoker`: the global --plugin option, dispatch to a command, the
 * usage text and `help COMMAND`.
 *
 * A mistyped command is answered with the closest known one when it is near
 * enough (cli_suggest, cli/args.c: at most 2 edits and fewer than the typed
 * word's length; ties go to the first command in the table's order). The
 * commands read their own options through cli/args.h, as --plugin does here.
 *
 * stk_cli_main is the whole tool; main() only calls it. The Python package
 * compiles the cli/ sources into its extension module with STK_CLI_NO_MAIN defined
 * (setup.py, and CMake's stoker_python target), where _stoker.cli_main(argv)
 * calls stk_cli_main: the `stoker` console script and `python -m stoker` of
 * an installed wheel run this same code. It keeps no state between calls but
 * getopt's, which it resets on entry: a process may call it more than once.
 */
#include "args.h"
#include "cli.h"

#include <stoker/op.h>
#include <stoker/stoker.h>

#include <getopt.h>
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
    for (;;) {
        int used = 1; /* after the call: the word holding the path */
        const char *path = NULL;
        int got = argc >= 2 ? cli_option_value(argc, argv, &used, "--plugin", NULL, &path) : 0;
        if (got == 0)
            break;
        if (got < 0 || !*path) { /* "--plugin" last, "--plugin=" or "--plugin ''" */
            if (got > 0)
                cli_needs_value("--plugin");
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
