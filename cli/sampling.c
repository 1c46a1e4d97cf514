/*
 * sampling.c — the sampling options shared by `stoker order` and `stoker
 * bench` (docs/sampler.md): --indices FILE and --weights FILE read a list of
 * numbers separated by white space (one per line is usual; '#' starts a
 * comment to the end of the line), --num-samples N, --balance-classes;
 * --mix-sizes A,B,... and --mix-weights X,Y,... (mixing sources, inline).
 * The arrays are owned by the stk_sampling they fill (cli_sampling_free).
 */
#include "args.h"
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Read the numbers of `path`; integers into *u (uint64) or reals into *d. */
static bool read_numbers(const char *path, const char *what, bool integers, uint64_t **u,
                         double **d, uint64_t *count)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        cli_error("%s %s: %s", what, path, strerror(errno));
        return false;
    }
    uint64_t n = 0, cap = 0, line = 1;
    void *arr = NULL;
    size_t elem = integers ? sizeof(uint64_t) : sizeof(double);
    char tok[128];
    int c;
    bool ok = true;
    for (;;) {
        c = fgetc(f);
        if (c == EOF)
            break;
        if (c == '\n') {
            line++;
            continue;
        }
        if (c == '#') {
            while ((c = fgetc(f)) != EOF && c != '\n')
                ;
            line++;
            if (c == EOF)
                break;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r' || c == ',')
            continue;
        size_t len = 0;
        while (c != EOF && c != ' ' && c != '\t' && c != '\r' && c != '\n' && c != ',' &&
               c != '#') {
            if (len + 1 < sizeof tok)
                tok[len] = (char)c;
            len++;
            c = fgetc(f);
        }
        if (c != EOF)
            ungetc(c, f);
        if (len + 1 > sizeof tok) {
            cli_error("%s %s line %llu: a token of %zu characters is not a number", what, path,
                      (unsigned long long)line, len);
            ok = false;
            break;
        }
        tok[len] = '\0';
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            void *grown = realloc(arr, cap * elem);
            if (!grown) {
                cli_error("%s %s: out of memory", what, path);
                ok = false;
                break;
            }
            arr = grown;
        }
        char *end;
        errno = 0;
        if (integers) {
            unsigned long long v = strtoull(tok, &end, 10);
            if (tok[0] == '-' || tok[0] == '+' || errno || *end) {
                cli_error("%s %s line %llu: '%s' is not a non-negative integer", what, path,
                          (unsigned long long)line, tok);
                ok = false;
                break;
            }
            ((uint64_t *)arr)[n++] = v;
        } else {
            double v = strtod(tok, &end);
            if (errno || *end || !isfinite(v) || v < 0) {
                cli_error("%s %s line %llu: '%s' is not a finite non-negative number", what,
                          path, (unsigned long long)line, tok);
                ok = false;
                break;
            }
            ((double *)arr)[n++] = v;
        }
    }
    if (ok && ferror(f)) {
        cli_error("%s %s: read error", what, path);
        ok = false;
    }
    fclose(f);
    if (ok && n == 0) {
        cli_error("%s %s: no numbers in the file", what, path);
        ok = false;
    }
    if (!ok) {
        free(arr);
        return false;
    }
    if (integers)
        *u = arr;
    else
        *d = arr;
    *count = n;
    return true;
}

bool cli_read_indices(const char *path, stk_sampling *sg)
{
    uint64_t *u = NULL;
    free((void *)sg->indices);
    sg->indices = NULL;
    if (!read_numbers(path, "--indices", true, &u, NULL, &sg->num_indices))
        return false;
    sg->indices = u;
    return true;
}

bool cli_read_weights(const char *path, stk_sampling *sg)
{
    double *d = NULL;
    free((void *)sg->weights);
    sg->weights = NULL;
    if (!read_numbers(path, "--weights", false, NULL, &d, &sg->num_weights))
        return false;
    sg->weights = d;
    return true;
}

bool cli_sampling_set(const stk_sampling *sg)
{
    return sg->indices || sg->weights || sg->labels || sg->num_samples || sg->balance_classes ||
           sg->mix_sizes || sg->mix_weights;
}

void cli_sampling_free(stk_sampling *sg)
{
    free((void *)sg->indices);
    free((void *)sg->weights);
    free((void *)sg->labels);
    free((void *)sg->mix_sizes);
    free((void *)sg->mix_weights);
    memset(sg, 0, sizeof *sg);
}

/* A comma-separated list given inline: integers into *u or reals into *d. */
static bool parse_list(const char *text, const char *what, bool integers, uint64_t **u,
                       double **d, uint64_t *count)
{
    uint64_t n = 1;
    for (const char *c = text; *c; c++)
        n += *c == ',';
    void *arr = malloc(n * (integers ? sizeof(uint64_t) : sizeof(double)));
    if (!arr) {
        cli_error("%s: out of memory", what);
        return false;
    }
    const char *at = text;
    for (uint64_t i = 0; i < n; i++) {
        char *end;
        errno = 0;
        bool ok;
        if (integers) {
            unsigned long long v = strtoull(at, &end, 10);
            ok = *at >= '0' && *at <= '9' && !errno;
            ((uint64_t *)arr)[i] = v;
        } else {
            double v = strtod(at, &end);
            ok = end != at && !errno && isfinite(v) && v >= 0;
            ((double *)arr)[i] = v;
        }
        if (!ok || (*end != ',' && *end != '\0')) {
            cli_error("%s: item %llu of '%s' is not a %s", what, (unsigned long long)i + 1, text,
                      integers ? "non-negative integer" : "finite non-negative number");
            free(arr);
            return false;
        }
        at = end + 1;
    }
    if (integers)
        *u = arr;
    else
        *d = arr;
    *count = n;
    return true;
}

bool cli_parse_mix_sizes(const char *text, stk_sampling *sg)
{
    uint64_t *u = NULL;
    free((void *)sg->mix_sizes);
    sg->mix_sizes = NULL;
    if (!parse_list(text, "--mix-sizes", true, &u, NULL, &sg->num_mix))
        return false;
    sg->mix_sizes = u;
    return true;
}

bool cli_parse_mix_weights(const char *text, stk_sampling *sg, uint64_t *count)
{
    double *d = NULL;
    free((void *)sg->mix_weights);
    sg->mix_weights = NULL;
    if (!parse_list(text, "--mix-weights", false, NULL, &d, count))
        return false;
    sg->mix_weights = d;
    return true;
}
