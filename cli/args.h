/*
 * args.h — the `stoker` tool's argument helpers (cli/args.c): what every
 * command does with its argv the same way, so that a flag is read, bounded
 * and refused with the same words whichever command takes it.
 *
 * A command's parse loop (cli/cmd_*.c):
 *
 *     cli_getopt_start();
 *     while ((c = cli_getopt(argc, argv, ":p:b:h", options)) != -1) {
 *         switch (c) {
 *         case 'b': if (!cli_parse_count(optarg, "--batch", &o.batch)) return EXIT_USAGE; break;
 *         ...
 *         case 'h': fputs(usage, stdout); return 0;
 *         default: return EXIT_USAGE; // cli_getopt said what was wrong
 *         }
 *     }
 *     if (!cli_positionals(argc, argv, optind, "pack", names, 2)) return EXIT_USAGE;
 *
 * Every helper that refuses something prints one usage error on stderr
 * ("stoker: " + message, cli_error) and returns false (or CLI_BAD_OPTION);
 * the caller only returns EXIT_USAGE (2). The messages, one form each:
 *   option '--batch' needs a value
 *   unknown option '--pipline'; did you mean '--pipeline'?   (or '... (see --help)')
 *   --batch: expected a non-negative integer, got '2x'
 *   --batch: 4294967296 is too large                          (over the field's type)
 *   --batch must be at least 1, got '0'                       (counts: 0 is never "default")
 *   --samples: 5000 is more than 4096                         (a count's upper bound)
 *   --shard-size: expected a size like 512M or 1G, got '0.1'
 *   --step-ms: expected a positive number of milliseconds, got 'abc'
 *   --shuffle: expected 'global', 'block' or 'none', got 'x'
 *   pack: missing DEST (see 'stoker pack --help')
 *   bench: unexpected argument 'y' (see 'stoker bench --help')
 *   doctor: --pipeline is required (see 'stoker doctor --help')
 * tests/python/test_cli.py, test_doctor_cli.py and tests/cli_smoke.cmake
 * pin them; docs/cli.md describes the rules.
 *
 * Only the public header under it (stk_shuffle); no state but getopt's
 * globals, which cli_getopt_start resets, so the Python module may run the
 * tool more than once in a process (cli/main.c).
 */
#ifndef STK_CLI_ARGS_H
#define STK_CLI_ARGS_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stoker/stoker.h>

/* "stoker: " + formatted message + newline on stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- options ------------------------------------------------------------ */

/* What cli_getopt returns for an option it refused (after saying why). */
#define CLI_BAD_OPTION '?'

/* Start parsing a command's options: getopt_long from argv[1], its own
 * messages off (the tool prints its own). */
void cli_getopt_start(void);
/* getopt_long(argc, argv, shortopts, options) with the tool's messages: the
 * option's value, -1 after the last option, or CLI_BAD_OPTION when the
 * option was refused: a missing value ("option '-b' needs a value", the
 * option as typed) or an unknown option (cli_unknown_option). `shortopts`
 * must start with ':' (getopt then tells a missing value from an unknown
 * option). */
int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *options);

/* For commands that parse by hand (words among options: verify, cache, the
 * tool's own --plugin): argv[*i] is `name` ("--dir") followed by a value,
 * `name=VALUE`, or `shortname` (NULL: none) followed by a value. Returns 1
 * with *value set and *i on the value's word, 0 when argv[*i] is not this
 * option, -1 after the usage error when the value is missing. */
int cli_option_value(int argc, char **argv, int *i, const char *name, const char *shortname,
                     const char **value);
/* The usage error of an option given without its value ("option '%s' needs
 * a value"); `option` as typed. */
void cli_needs_value(const char *option);

/* Did-you-mean: the Damerau-Levenshtein distance (optimal string alignment)
 * of a and b (SIZE_MAX past 64 bytes); the candidate nearest to `word` at
 * distance <= 2 and below its length, or NULL. Ties go to the first. */
size_t cli_distance(const char *a, const char *b);
const char *cli_suggest(const char *word, const char *const *candidates, size_t n);
/* The usage error of an unknown option `arg` ("--pipline", "--x=1", "-z"),
 * with "did you mean '--NAME'?" when one of `options` is near. */
void cli_unknown_option(const char *arg, const struct option *options);

/* The positional words argv[first..argc): exactly n, named by names[0..n)
 * ("SRC", "DEST"). Else the usage error "CMD: missing DEST (see 'stoker CMD
 * --help')" (every missing name, joined by "and") or "CMD: unexpected
 * argument 'X' (see ...)" (the first extra word), and false. `cmd` may be
 * two words ("cache trim"): the help named is the first's. */
bool cli_positionals(int argc, char **argv, int first, const char *cmd,
                     const char *const *names, int n);

/* A required option: false after the usage error "CMD: OPTION is required
 * (see 'stoker CMD --help')" when value is NULL. */
bool cli_required(const char *cmd, const char *option, const char *value);

/* ---- values ------------------------------------------------------------- */

/* Strict unsigned parse of the whole string (decimal digits only: no sign,
 * no space); the usage error names `what`. */
bool cli_parse_u64(const char *text, const char *what, uint64_t *out);
bool cli_parse_u32(const char *text, const char *what, uint32_t *out);
/* As cli_parse_u32 and cli_parse_u64, and 0 is refused too ("WHAT must be
 * at least 1"): for counts where the library would read 0 as "the default",
 * which on the command line would hide a mistake (--threads 0 running 2
 * threads). */
bool cli_parse_count(const char *text, const char *what, uint32_t *out);
bool cli_parse_count64(const char *text, const char *what, uint64_t *out);
/* A count in 1..max ("WHAT: V is more than MAX" above it). */
bool cli_parse_count_max(const char *text, const char *what, uint32_t max, uint32_t *out);
/* A count, or "auto" for 0 (the library chooses: --threads, --prefetch). */
bool cli_parse_count_or_auto(const char *text, const char *what, uint32_t *out);
/* A byte size: a decimal number (a fraction allowed: 1.5G) with an optional
 * binary suffix K, M, G or T (either case; "KB", "KiB" also), coming to at
 * least min_bytes and at most 1e18 (a fraction: to at least one byte,
 * rounded down). */
bool cli_parse_bytes(const char *text, const char *what, uint64_t min_bytes, uint64_t *out);
/* A positive finite decimal ("2000", "12.5"; no sign) of `unit`s
 * ("milliseconds"), at most max (INFINITY: no bound). */
bool cli_parse_positive(const char *text, const char *what, const char *unit, double max,
                        double *out);
/* One of names[0..n) (n <= 8), exactly; *out its position. The usage error
 * lists them: "WHAT: expected 'a', 'b' or 'c', got 'x'". */
bool cli_parse_choice(const char *text, const char *what, const char *const *names, int n,
                      int *out);

/* --shuffle MODE: "global", "block" or "none" (docs/sampler.md). */
bool cli_parse_shuffle(const char *text, stk_shuffle *out);
/* The order options shared by bench and order, checked together:
 * --block-size/--shuffle-window need --shuffle block, which --no-shuffle
 * contradicts. Prints the usage error and returns false. */
bool cli_check_order(int no_shuffle, stk_shuffle mode, uint64_t block_size, uint32_t window);

#endif
