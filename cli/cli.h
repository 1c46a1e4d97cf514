/*
 * cli.h — shared pieces of the `stoker` command-line tool.
 *
 * The tool is a client of the public API (stoker/stoker.h) only. Each
 * command lives in its own cmd_*.c with a `int cmd_NAME(int argc, char **argv)`
 * entry returning the process exit status:
 *   0 success, 1 a runtime failure (bad data, I/O, loader error),
 *   2 a usage error (unknown option, bad number, bad spec).
 * Reading the arguments (getopt with the tool's messages, numbers, sizes,
 * did-you-mean, the positional words) is cli/args.h's, shared by every
 * command; this header has the commands and the sampling options
 * (cli/sampling.c).
 */
#ifndef STK_CLI_H
#define STK_CLI_H

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

/* Peak resident set size of this process in MB. */
double cli_peak_rss_mb(void);

#endif
