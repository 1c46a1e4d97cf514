/*
 * cli.h — shared pieces of the `stoker` command-line tool.
 *
 * The tool is a client of the public API (stoker/stoker.h) only. Each
 * command lives in its own cmd_*.c with a `int cmd_NAME(int argc, char **argv)`
 * entry returning the process exit status:
 *   0 success, 1 a runtime failure (bad data, I/O, loader error),
 *   2 a usage error (unknown option, bad number, bad spec).
 */
#ifndef STK_CLI_H
#define STK_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stoker/stoker.h>

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2

/* The tool: argv[0] is the program name, argv[1] the command. Returns the
 * exit status. main() (cli/main.c) calls it, and so does the Python
 * extension's _stoker.cli_main, which compiles the cli/ sources with STK_CLI_NO_MAIN. */
int stk_cli_main(int argc, char **argv);

int cmd_bench(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_order(int argc, char **argv);
int cmd_pack(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_cat(int argc, char **argv);
int cmd_preview(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_cache(int argc, char **argv);

/* Strict unsigned parse of the whole string; prints a usage error naming
 * `what` and returns false on failure. */
bool cli_parse_u64(const char *text, const char *what, uint64_t *out);
bool cli_parse_u32(const char *text, const char *what, uint32_t *out);
/* As cli_parse_u32, and 0 is refused too ("WHAT must be at least 1"): for
 * counts where the library would read 0 as "the default", which on the
 * command line would hide a mistake (--threads 0 running 2 threads). */
bool cli_parse_count(const char *text, const char *what, uint32_t *out);
/* --shuffle MODE: "global", "block" or "none" (docs/sampler.md). */
bool cli_parse_shuffle(const char *text, stk_shuffle *out);
/* The order options shared by bench and order, checked together:
 * --block-size/--shuffle-window need --shuffle block, which --no-shuffle
 * contradicts. Prints the usage error and returns false. */
bool cli_check_order(int no_shuffle, stk_shuffle mode, uint64_t block_size, uint32_t window);

/* --indices FILE / --weights FILE (cli/sampling.c): white-space separated
 * numbers, '#' comments; the arrays are owned by *sg (cli_sampling_free).
 * Print the usage error (file, line, token) and return false on failure. */
bool cli_read_indices(const char *path, stk_sampling *sg);
bool cli_read_weights(const char *path, stk_sampling *sg);
/* --mix-sizes A,B,... / --mix-weights X,Y,... (inline lists); the weights'
 * count goes to *count, checked against num_mix by the caller. */
bool cli_parse_mix_sizes(const char *text, stk_sampling *sg);
bool cli_parse_mix_weights(const char *text, stk_sampling *sg, uint64_t *count);
bool cli_sampling_set(const stk_sampling *sg);
void cli_sampling_free(stk_sampling *sg);

/* "stoker: " + formatted message on stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Did-you-mean (main.c): the Damerau-Levenshtein distance (optimal string
 * alignment) of a and b (SIZE_MAX past 64 bytes); the candidate nearest to
 * `word` at distance <= 2 and below its length, or NULL. */
size_t cli_distance(const char *a, const char *b);
const char *cli_suggest(const char *word, const char *const *candidates, size_t n);
/* The usage error of an unknown option `arg` ("--pipline", "--x=1", "-z"),
 * with "did you mean '--NAME'?" when one of `options` is near. */
void cli_unknown_option(const char *arg, const struct option *options);
/* The option getopt_long just refused ('?'): "-x" for an unknown short
 * option, else argv[optind - 1]. */
const char *cli_bad_option(char **argv);

/* Peak resident set size of this process in MB. */
double cli_peak_rss_mb(void);

#endif
