/*
 * args.c — the `stoker` tool's argument helpers (declared and listed in
 * cli/args.h): getopt with the tool's messages, did-you-mean for unknown
 * options, the positional words, and the parsers of numbers, counts, byte
 * sizes, times and named choices that every command shares.
 *
 * Why one file: each command used to parse its flags with its own copy of
 * the same code, and the copies drifted (three byte-size parsers accepting
 * different suffixes, two bound messages, four ways to say a DATASET was
 * missing, "needs a value" / "needs a path" / "needs a directory"). Here a
 * flag's value is checked once, with one message per kind of mistake, and
 * a new command gets them by calling the helpers.
 *
 * Conventions: a refused value is a usage error (the caller returns
 * EXIT_USAGE, 2) named by the option as the user wrote it; numbers are
 * whole decimals unless the option takes a fraction (sizes, times); 0 is
 * refused where the library would read it as "the default" (counts). The
 * did-you-mean distance is the optimal string alignment distance
 * (insertions, deletions, substitutions and swaps of two neighbours, each
 * costing 1); a candidate is offered at distance 2 at most and below the
 * typed word's length (so "x" is not "corrected" to "raw").
 *
 * No state but getopt's globals (optind, opterr, optopt), which
 * cli_getopt_start resets for each command; cli/main.c resets glibc's
 * position inside a cluster of short options once per run of the tool.
 */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_error(const char *fmt, ...)
{
    va_list ap;
    fputs("stoker: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ------------------------------------------------------------------------ */
/* Options                                                                    */
/* ------------------------------------------------------------------------ */

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

void cli_needs_value(const char *option)
{
    cli_error("option '%s' needs a value", option);
}

void cli_getopt_start(void)
{
    optind = 1;
    opterr = 0;
    optopt = 0;
}

int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *options)
{
    int c = getopt_long(argc, argv, shortopts, options, NULL);
    if (c == ':') {
        cli_needs_value(argv[optind - 1]);
        return CLI_BAD_OPTION;
    }
    if (c == '?') {
        /* "-x" for an unknown short option (it may sit in a cluster: -zq),
         * else the word getopt refused */
        char shortopt[3] = {'-', (char)optopt, '\0'};
        cli_unknown_option(optopt && optopt != '?' ? shortopt : argv[optind - 1], options);
        return CLI_BAD_OPTION;
    }
    return c;
}

int cli_option_value(int argc, char **argv, int *i, const char *name, const char *shortname,
                     const char **value)
{
    const char *arg = argv[*i];
    size_t len = strlen(name);
    if (!strncmp(arg, name, len) && arg[len] == '=') {
        *value = arg + len + 1;
        return 1;
    }
    if (strcmp(arg, name) != 0 && (!shortname || strcmp(arg, shortname) != 0))
        return 0;
    if (*i + 1 >= argc) {
        cli_needs_value(arg);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

bool cli_positionals(int argc, char **argv, int first, const char *cmd,
                     const char *const *names, int n)
{
    int have = argc > first ? argc - first : 0;
    int help = (int)strcspn(cmd, " "); /* "cache trim": 'stoker cache --help' */
    if (have > n) {
        cli_error("%s: unexpected argument '%s' (see 'stoker %.*s --help')", cmd,
                  argv[first + n], help, cmd);
        return false;
    }
    if (have < n) {
        char list[256] = "";
        size_t len = 0;
        for (int k = have; k < n && len < sizeof list; k++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
                                    k > have ? " and " : "", names[k]);
        cli_error("%s: missing %s (see 'stoker %.*s --help')", cmd, list, help, cmd);
        return false;
    }
    return true;
}

bool cli_required(const char *cmd, const char *option, const char *value)
{
    if (value)
        return true;
    cli_error("%s: %s is required (see 'stoker %.*s --help')", cmd, option,
              (int)strcspn(cmd, " "), cmd);
    return false;
}

/* ------------------------------------------------------------------------ */
/* Values                                                                     */
/* ------------------------------------------------------------------------ */

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

bool cli_parse_count64(const char *text, const char *what, uint64_t *out)
{
    uint64_t v;
    if (!cli_parse_u64(text, what, &v))
        return false;
    if (v == 0) {
        cli_error("%s must be at least 1, got '%s'", what, text);
        return false;
    }
    *out = v;
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

bool cli_parse_count_max(const char *text, const char *what, uint32_t max, uint32_t *out)
{
    uint32_t v;
    if (!cli_parse_count(text, what, &v))
        return false;
    if (v > max) {
        cli_error("%s: %u is more than %u", what, v, max);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_count_or_auto(const char *text, const char *what, uint32_t *out)
{
    if (!strcmp(text, "auto")) {
        *out = 0;
        return true;
    }
    return cli_parse_count(text, what, out);
}

bool cli_parse_bytes(const char *text, const char *what, uint64_t min_bytes, uint64_t *out)
{
    /* the number: digits, or digits with a fraction (strtod, but no sign,
     * space, exponent-less hex, inf or nan: it starts with a digit or '.') */
    const char *s = text;
    size_t digits = strspn(s, "0123456789");
    bool whole = s[digits] != '.' && s[digits] != 'e' && s[digits] != 'E';
    char *end = (char *)s;
    unsigned long long iv = 0;
    double dv = 0;
    bool ok = (s[0] >= '0' && s[0] <= '9') || s[0] == '.';
    if (ok && !(s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))) {
        errno = 0;
        if (whole)
            iv = strtoull(s, &end, 10);
        else
            dv = strtod(s, &end);
        ok = end != s && !errno;
    } else {
        ok = false;
    }
    uint64_t mul = 1;
    if (ok && *end) {
        switch (*end) {
        case 'k': case 'K': mul = 1ull << 10; break;
        case 'm': case 'M': mul = 1ull << 20; break;
        case 'g': case 'G': mul = 1ull << 30; break;
        case 't': case 'T': mul = 1ull << 40; break;
        default: ok = false; break;
        }
        end++;
        if (ok && (!strcmp(end, "B") || !strcmp(end, "iB")))
            end += strlen(end);
        ok = ok && !*end;
    }
    uint64_t v = 0;
    if (ok && whole) {
        ok = iv <= UINT64_MAX / mul && iv * mul <= 1000000000000000000ull;
        v = (uint64_t)iv * mul;
    } else if (ok) {
        /* NaN and inf fail here; so does a fraction under one byte (0.1 is
         * refused, not rounded to 0, which means "nothing" or "default") */
        double b = dv * (double)mul;
        ok = b >= 1 && b <= 1e18;
        v = ok ? (uint64_t)b : 0;
    }
    if (!ok || v < min_bytes) {
        cli_error("%s: expected a size like 512M or 1G, got '%s'", what, text);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_positive(const char *text, const char *what, const char *unit, double max,
                        double *out)
{
    char *end = NULL;
    errno = 0;
    double v = text && *text && *text != '-' && *text != '+' && *text != ' ' ? strtod(text, &end)
                                                                             : NAN;
    if (isnan(v) || errno || *end || !isfinite(v) || v <= 0 || v > max) {
        if (isfinite(max))
            cli_error("%s: expected a positive number of %s up to %.15g, got '%s'", what, unit,
                      max, text ? text : "");
        else
            cli_error("%s: expected a positive number of %s, got '%s'", what, unit,
                      text ? text : "");
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_choice(const char *text, const char *what, const char *const *names, int n,
                      int *out)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(text, names[i])) {
            *out = i;
            return true;
        }
    char list[256] = "";
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s'%s'",
                                i == 0 ? "" : i + 1 == n ? " or " : ", ", names[i]);
    cli_error("%s: expected %s, got '%s'", what, list, text);
    return false;
}

bool cli_parse_shuffle(const char *text, stk_shuffle *out)
{
    static const char *const names[] = {"global", "block", "none"};
    static const stk_shuffle modes[] = {STK_SHUFFLE_GLOBAL, STK_SHUFFLE_BLOCK, STK_SHUFFLE_NONE};
    int i;
    if (!cli_parse_choice(text, "--shuffle", names, 3, &i))
        return false;
    *out = modes[i];
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
