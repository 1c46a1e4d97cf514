/*
 * spec.c — the pipeline spec language: lexer, numbers and lists, the
 * argument walker, error messages, presets, and the generic walker that
 * parses a spec over a table of op rows (stk_spec_opdef).
 *
 * The grammar (docs/pipeline.md has the whole reference):
 *
 *   spec     := ws | stage ( '|' stage )*
 *   stage    := ws name ( ws+ argument )* ws
 *   argument := value | key '=' value
 *   value    := item ( ',' item )*
 *   item     := number | word
 *
 * Whitespace is free around '|', ',' and '=': the lexer joins "0.5, 0.5"
 * and "fill = 3" into one argument. Words (op names, keys, presets, dtypes,
 * modes) match case-insensitively. Numbers use the C syntax of decimal
 * floating constants ([+-] digits [. digits] [e [+-] digits]); they are
 * converted by strtod_l in the "C" locale, so a host program that set
 * LC_NUMERIC to a comma-decimal locale still parses "0.5" as one half.
 *
 * The lexer works on byte offsets into the original text and never copies
 * it, so every error can point at the offending byte: stk_spec_fail prints
 * the spec (whitespace shown as spaces, a 100-byte window around the column
 * when it is long) and a caret under the column.
 *
 * No op is named in this file. Each stage's name is looked up in the table
 * the caller passes (names and aliases); the row's parse hook, or the
 * generic schema walker (parse_schema) for rows that only list their
 * params, turns the stage into ops; the row's order flags drive
 * check_order; the names of every row make the "known ops" list and the
 * did-you-mean suggestion of an unknown op. The op table itself lives with
 * the ops (src/ops/op_table.c), above this layer.
 *
 * The parser checks everything that does not depend on the image shape;
 * stk_plan_compile checks the rest with the columns stored in each op.
 */
#include "ops/spec.h"

#include "core/error.h"

#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------------- */
/* Error messages                                                          */
/* ---------------------------------------------------------------------- */

#define SHOW_MAX 100 /* bytes of spec shown around the column */

int stk_spec_fail(const char *spec, int column, const char *fmt, ...)
{
    char what[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    /* A quoted token may hold whitespace the lexer joined ("1,\n2"): show
     * it as spaces, like the spec line, so the message keeps its three lines. */
    for (char *c = what; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = ' ';

    size_t len = strlen(spec);
    if (column < 1)
        column = 1;
    if ((size_t)column > len + 1)
        column = (int)(len + 1);
    size_t at = (size_t)column - 1, start = 0, end = len;
    if (len > SHOW_MAX) {
        start = at > SHOW_MAX / 2 ? at - SHOW_MAX / 2 : 0;
        end = start + SHOW_MAX < len ? start + SHOW_MAX : len;
    }
    char line[SHOW_MAX + 8], under[SHOW_MAX + 8];
    size_t n = 0;
    if (start > 0) {
        memcpy(line, "...", 3);
        n = 3;
    }
    size_t caret = n + (at - start);
    for (size_t i = start; i < end; i++) {
        unsigned char ch = (unsigned char)spec[i];
        line[n++] = (ch < 0x20 || ch == 0x7f) ? ' ' : (char)ch;
    }
    if (end < len) {
        memcpy(line + n, "...", 3);
        n += 3;
    }
    line[n] = '\0';
    memset(under, ' ', caret);
    under[caret] = '\0';
    return stk_fail(STK_ESPEC, "pipeline spec, column %d: %s\n  %s\n  %s^", column, what, line,
                    under);
}

/* ---------------------------------------------------------------------- */
/* Lexer                                                                   */
/* ---------------------------------------------------------------------- */

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

int stk_spec_err(const stk_spec_parser *P, int off, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return stk_spec_fail(P->s, off + 1, "%s", msg);
}

int stk_spec_skip_ws(const stk_spec_parser *P, int i, int b)
{
    while (i < b && is_ws(P->s[i]))
        i++;
    return i;
}

int stk_spec_trim_end(const stk_spec_parser *P, int a, int b)
{
    while (b > a && is_ws(P->s[b - 1]))
        b--;
    return b;
}

/* Read the stage starting at offset i. */
static int lex_stage(const stk_spec_parser *P, int i, stk_spec_stage *st)
{
    const char *s = P->s;
    int have_name = 0;
    st->nargs = 0;
    st->name.a = st->name.b = i;
    st->name.eq = -1;
    st->after_name = i;
    st->end = i;
    for (;;) {
        i = stk_spec_skip_ws(P, i, P->len);
        if (!have_name)
            st->name.a = st->name.b = i;
        else if (st->nargs == 0)
            st->after_name = i;
        if (i >= P->len || s[i] == '|')
            break;
        stk_spec_tok t = {i, i, -1};
        for (;;) {
            while (i < P->len && !is_ws(s[i]) && s[i] != '|') {
                if (s[i] == '=' && t.eq < 0)
                    t.eq = i;
                i++;
            }
            /* Join across whitespace next to ',' or '=' ("0.5, 0.5",
             * "fill = 3"), but never onto the op name. */
            int j = stk_spec_skip_ws(P, i, P->len);
            int join = have_name && j > i && j < P->len && s[j] != '|' &&
                       (s[i - 1] == ',' || s[i - 1] == '=' || s[j] == ',' || s[j] == '=');
            if (!join)
                break;
            i = j;
        }
        t.b = i;
        if (!have_name) {
            st->name = t;
            have_name = 1;
        } else {
            if (st->nargs == STK_SPEC_MAX_ARGS)
                return stk_spec_err(P, t.a, "too many arguments to '%.*s' (at most %d)",
                                    STK_SPEC_TOKARG(P, st->name.a, st->name.b), STK_SPEC_MAX_ARGS);
            st->args[st->nargs++] = t;
        }
    }
    st->end = i;
    if (!have_name)
        return 0;
    return 1;
}

int stk_spec_tok_is(const stk_spec_parser *P, int a, int b, const char *word)
{
    size_t n = strlen(word);
    return (size_t)(b - a) == n && strncasecmp(P->s + a, word, n) == 0;
}

/* ---------------------------------------------------------------------- */
/* Numbers and lists                                                       */
/* ---------------------------------------------------------------------- */

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void c_locale_init(void) { c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0); }

/* Is [a, b) a decimal floating constant? */
static int number_syntax(const char *s, int a, int b)
{
    int i = a, digits = 0;
    if (i < b && (s[i] == '+' || s[i] == '-'))
        i++;
    while (i < b && s[i] >= '0' && s[i] <= '9')
        i++, digits++;
    if (i < b && s[i] == '.') {
        i++;
        while (i < b && s[i] >= '0' && s[i] <= '9')
            i++, digits++;
    }
    if (!digits)
        return 0;
    if (i < b && (s[i] == 'e' || s[i] == 'E')) {
        int ed = 0;
        i++;
        if (i < b && (s[i] == '+' || s[i] == '-'))
            i++;
        while (i < b && s[i] >= '0' && s[i] <= '9')
            i++, ed++;
        if (!ed)
            return 0;
    }
    return i == b;
}

/* Parse the number at [a, b). `ctx` completes "expected a number <ctx>". */
int stk_spec_number(const stk_spec_parser *P, int a, int b, double *out, const char *ctx)
{
    char buf[64];
    if (!number_syntax(P->s, a, b))
        return stk_spec_err(P, a, "expected a number %s, got '%.*s'", ctx,
                            STK_SPEC_TOKARG(P, a, b));
    if (b - a >= (int)sizeof buf)
        return stk_spec_err(P, a, "number too long %s: '%.*s'", ctx, STK_SPEC_TOKARG(P, a, b));
    memcpy(buf, P->s + a, (size_t)(b - a));
    buf[b - a] = '\0';
    pthread_once(&c_locale_once, c_locale_init);
    double v = c_locale ? strtod_l(buf, NULL, c_locale) : strtod(buf, NULL);
    if (!isfinite(v))
        return stk_spec_err(P, a, "number out of range %s: '%.*s'", ctx, STK_SPEC_TOKARG(P, a, b));
    *out = v;
    return 0;
}

/* Parse a comma list of numbers in [a, b). */
int stk_spec_list(const stk_spec_parser *P, int a, int b, stk_spec_numlist *L, const char *ctx)
{
    int i = a;
    L->n = 0;
    for (;;) {
        i = stk_spec_skip_ws(P, i, b);
        int e = i;
        while (i < b && P->s[i] != ',' && !is_ws(P->s[i]))
            i++;
        if (e == i) {
            if (L->n)
                return stk_spec_err(P, e, "expected a number after ',' %s", ctx);
            return stk_spec_err(P, e, "expected a number %s", ctx);
        }
        if (L->n == STK_SPEC_MAX_LIST)
            return stk_spec_err(P, e, "too many values %s (at most %d)", ctx, STK_SPEC_MAX_LIST);
        int rc = stk_spec_number(P, e, i, &L->v[L->n], ctx);
        if (rc < 0)
            return rc;
        L->a[L->n] = e;
        L->b[L->n] = i;
        L->n++;
        i = stk_spec_skip_ws(P, i, b);
        if (i >= b)
            return 0;
        /* The lexer only joins across whitespace next to ',' or '=', so
         * anything else here is part of an item. */
        if (P->s[i] != ',')
            return stk_spec_err(P, i, "expected ',' %s, got '%.*s'", ctx, STK_SPEC_TOKARG(P, i, b));
        i++;
    }
}

/* A list of whole numbers in [lo, hi] whose length is one of `counts`
 * (a bit mask: bit k set allows k items; 0 allows any length). `out` must
 * hold the largest allowed length. */
int stk_spec_ints(const stk_spec_parser *P, int a, int b, unsigned counts, uint32_t lo, uint32_t hi,
                  uint32_t *out, int *n, const char *ctx, const char *count_msg)
{
    stk_spec_numlist L;
    int rc = stk_spec_list(P, a, b, &L, ctx);
    if (rc < 0)
        return rc;
    for (int k = 0; k < L.n; k++) {
        double v = L.v[k];
        if (v != floor(v) || v < (double)lo || v > (double)hi)
            return stk_spec_err(P, L.a[k], "expected a whole number from %u to %u %s, got '%.*s'",
                                lo, hi, ctx, STK_SPEC_TOKARG(P, L.a[k], L.b[k]));
    }
    if (counts && (L.n >= 32 || !(counts & (1u << L.n))))
        return stk_spec_err(P, a, "%s, got %d value%s", count_msg, L.n, L.n == 1 ? "" : "s");
    for (int k = 0; k < L.n; k++) /* out has room for the largest allowed count */
        out[k] = (uint32_t)L.v[k];
    *n = L.n;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Stage helpers                                                           */
/* ---------------------------------------------------------------------- */

/* Split an argument into key and value ranges. Returns 0 for a positional
 * argument. */
static int split_key(const stk_spec_parser *P, const stk_spec_tok *t, int *ka, int *kb, int *va,
                     int *vb)
{
    if (t->eq < 0)
        return 0;
    *ka = t->a;
    *kb = stk_spec_trim_end(P, t->a, t->eq);
    *va = stk_spec_skip_ws(P, t->eq + 1, t->b);
    *vb = t->b;
    if (*ka == *kb)
        return stk_spec_err(P, t->a, "expected a key before '='");
    if (*va == *vb)
        return stk_spec_err(P, t->eq + 1, "expected a value after '%.*s='",
                            STK_SPEC_TOKARG(P, *ka, *kb));
    return 1;
}

int stk_spec_unexpected(const stk_spec_parser *P, const stk_spec_stage *st, const stk_spec_tok *t)
{
    return stk_spec_err(P, t->a, "unexpected argument '%.*s' to '%.*s'",
                        STK_SPEC_TOKARG(P, t->a, t->b), STK_SPEC_TOKARG(P, st->name.a, st->name.b));
}

static int unknown_key(const stk_spec_parser *P, const stk_spec_stage *st, int ka, int kb,
                       const char *known)
{
    if (!known)
        return stk_spec_err(P, ka, "'%.*s' takes no key=value arguments, got '%.*s='",
                            STK_SPEC_TOKARG(P, st->name.a, st->name.b), STK_SPEC_TOKARG(P, ka, kb));
    return stk_spec_err(P, ka, "unknown key '%.*s' for '%.*s' (known: %s)",
                        STK_SPEC_TOKARG(P, ka, kb), STK_SPEC_TOKARG(P, st->name.a, st->name.b),
                        known);
}

int stk_spec_twice(const stk_spec_parser *P, int ka, int kb)
{
    return stk_spec_err(P, ka, "'%.*s' is given twice", STK_SPEC_TOKARG(P, ka, kb));
}

/* Does [a, b) name `names`, one name or aliases separated by '|'? */
static int tok_is_any(const stk_spec_parser *P, int a, int b, const char *names)
{
    for (const char *n = names; *n;) {
        size_t len = strcspn(n, "|");
        if ((size_t)(b - a) == len && strncasecmp(P->s + a, n, len) == 0)
            return 1;
        n += len + (n[len] == '|');
    }
    return 0;
}

/*
 * The arguments of stk_spec_stage st, one per call and in order: 1 with *a filled,
 * 0 after the last, < 0 on error. `keys` lists the op's keys (NULL-terminated; aliases as
 * "mode|padding_mode"), `known` is what an unknown key's message lists
 * (NULL: the op takes no key=value arguments). Unknown keys and a key given
 * stk_spec_twice are reported here; positional arguments are the op's to count.
 */
int stk_spec_next_arg(const stk_spec_parser *P, const stk_spec_stage *st, const char *const *keys,
                      const char *known, stk_spec_arg *a)
{
    if (a->next >= st->nargs)
        return 0;
    a->t = &st->args[a->next++];
    a->key = -1;
    int keyed = split_key(P, a->t, &a->ka, &a->kb, &a->va, &a->vb);
    if (keyed < 0)
        return keyed;
    if (!keyed) {
        a->va = a->t->a;
        a->vb = a->t->b;
        return 1;
    }
    for (int k = 0; keys && keys[k] && a->key < 0; k++)
        if (tok_is_any(P, a->ka, a->kb, keys[k]))
            a->key = k;
    if (a->key < 0)
        return unknown_key(P, st, a->ka, a->kb, known);
    if (a->seen & (1u << a->key))
        return stk_spec_twice(P, a->ka, a->kb);
    a->seen |= 1u << a->key;
    return 1;
}

stk_spec_op *stk_spec_new_op(stk_spec_parser *P, const stk_spec_opdef *def, int col_off, int *rc)
{
    stk_spec *sp = P->spec;
    if (sp->nops == STK_SPEC_MAX_OPS) {
        *rc = stk_spec_err(P, col_off, "too many stages (at most %d)", STK_SPEC_MAX_OPS);
        return NULL;
    }
    stk_spec_op *op = &sp->ops[sp->nops++];
    memset(op, 0, sizeof *op);
    op->kind = def->kind;
    op->def = def;
    op->col = col_off + 1;
    op->arg_col = col_off + 1;
    return op;
}

/* ---------------------------------------------------------------------- */
/* The image pipeline ops                                                  */
/* ---------------------------------------------------------------------- */

/* One number, or a range `A:B` (also `A,B`), in [a, b). Returns the count
 * (1 or 2) through *n. */
int stk_spec_range(const stk_spec_parser *P, int a, int b, double v[2], int *n, const char *ctx)
{
    int cut = -1;
    for (int i = a; i < b; i++) {
        if (P->s[i] == ':' || P->s[i] == ',') {
            if (cut >= 0)
                return stk_spec_err(P, i, "expected one number or a range A:B %s, got '%.*s'", ctx,
                                    STK_SPEC_TOKARG(P, a, b));
            cut = i;
        }
    }
    int rc;
    if (cut < 0) {
        *n = 1;
        return stk_spec_number(P, a, b, &v[0], ctx);
    }
    int e1 = stk_spec_trim_end(P, a, cut), s2 = stk_spec_skip_ws(P, cut + 1, b);
    if (e1 == a)
        return stk_spec_err(P, a, "expected a number before '%c' %s", P->s[cut], ctx);
    if (s2 == b)
        return stk_spec_err(P, cut + 1, "expected a number after '%c' %s", P->s[cut], ctx);
    if ((rc = stk_spec_number(P, a, e1, &v[0], ctx)) < 0)
        return rc;
    if ((rc = stk_spec_number(P, s2, b, &v[1], ctx)) < 0)
        return rc;
    if (v[0] > v[1])
        return stk_spec_err(P, a, "the range %s must be low:high, got '%.*s'", ctx,
                            STK_SPEC_TOKARG(P, a, b));
    *n = 2;
    return 0;
}

/* An output size `S` or `H,W`: *n = 1 or 2. */

int stk_spec_finite_recip(const stk_spec_parser *P, int a, int b, double v, const double *means,
                          int nm, const char *what)
{
    /* The compilers fold the value into float32 constants: 1/(255 v) (the
     * uint8 scale), 1/v and -m/v (the float scale and bias). */
    float s8 = (float)(1.0 / (255.0 * v)), s = (float)(1.0 / v);
    if (!isfinite(s8) || !isfinite(s))
        return stk_spec_err(P, a,
                            "%s '%.*s' is too small: dividing by it overflows float32 "
                            "(the output would be inf)",
                            what, STK_SPEC_TOKARG(P, a, b));
    for (int k = 0; k < nm; k++)
        if (!isfinite((float)(-means[k] / v)))
            return stk_spec_err(P, a,
                                "mean %g divided by %s '%.*s' overflows float32 (the output "
                                "would be inf)",
                                means[k], what, STK_SPEC_TOKARG(P, a, b));
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Ops described by a schema                                               */
/* ---------------------------------------------------------------------- */

/*
 * The generic parser for rows with params and no parse hook:
 *
 *   name V1 V2 ...            positional, in the order of the params
 *   name k1=V1 ...            by name (a param given twice is an error)
 *
 * Each value is one number within [lo, hi] (a whole number when `whole`);
 * absent optional params take their default. Messages name the op and the
 * param: "expected a number for bits after 'posterize', got 'x'",
 * "posterize bits must be a whole number from 1 to 8, got '9'".
 */
static int parse_schema(stk_spec_parser *P, const stk_spec_stage *st, const stk_spec_opdef *def)
{
    const char *keys[STK_SPEC_MAX_PARAMS + 1];
    char known[128];
    size_t kn = 0;
    int np = def->nparams < STK_SPEC_MAX_PARAMS ? def->nparams : STK_SPEC_MAX_PARAMS;
    known[0] = '\0';
    for (int k = 0; k < np; k++) {
        keys[k] = def->params[k].name;
        kn += (size_t)snprintf(known + kn, sizeof known - kn, "%s%s", k ? ", " : "",
                               def->params[k].name);
        if (kn >= sizeof known)
            kn = sizeof known - 1;
    }
    keys[np] = NULL;
    int rc = 0, npos = 0;
    unsigned given = 0;
    stk_spec_op *op = stk_spec_new_op(P, def, st->name.a, &rc);
    if (!op)
        return rc;
    for (int k = 0; k < np; k++)
        op->u.num.v[k] = def->params[k].def;
    stk_spec_arg a = {0};
    while ((rc = stk_spec_next_arg(P, st, keys, np ? known : NULL, &a)) > 0) {
        int which = a.key;
        if (which < 0) {
            if (npos == np)
                return stk_spec_unexpected(P, st, a.t);
            which = npos++;
        }
        if (given & (1u << which))
            return a.key >= 0
                       ? stk_spec_twice(P, a.ka, a.kb)
                       : stk_spec_err(P, a.t->a, "'%s' is given twice", def->params[which].name);
        given |= 1u << which;
        const stk_spec_param *pm = &def->params[which];
        char ctx[96];
        snprintf(ctx, sizeof ctx, "for %s after '%s'", pm->name, def->name);
        double v;
        if ((rc = stk_spec_number(P, a.va, a.vb, &v, ctx)) < 0)
            return rc;
        if ((pm->whole && v != floor(v)) || !(v >= pm->lo && v <= pm->hi))
            return stk_spec_err(P, a.va, "%s %s must be %s from %g to %g, got '%.*s'", def->name,
                                pm->name, pm->whole ? "a whole number" : "a number", pm->lo, pm->hi,
                                STK_SPEC_TOKARG(P, a.va, a.vb));
        op->u.num.v[which] = v;
        if (which == 0)
            op->arg_col = a.va + 1;
    }
    if (rc < 0)
        return rc;
    for (int k = 0; k < np; k++)
        if (def->params[k].required && !(given & (1u << k)))
            return stk_spec_err(P, st->after_name, "expected %s after '%s' (%s %s)",
                                def->params[k].name, def->name, def->name,
                                def->usage ? def->usage : "");
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Named pipelines                                                         */
/* ---------------------------------------------------------------------- */

static const struct spec_preset {
    const char *name;
    const char *text;
} spec_presets[] = {
    {"imagenet-train-few", "random_resized_crop 224 | flip 0.5 | normalize imagenet | to f32 chw"},
    {"imagenet-train-extensive", "random_resized_crop 224 | flip 0.5 | color_jitter 0.4 0.4 0.4 | "
                                 "normalize imagenet | to f32 chw"},
    {"imagenet-val", "resize 256 | center_crop 224 | normalize imagenet | to f32 chw"},
};
#define PRESET_LIST "imagenet-train-few, imagenet-train-extensive, imagenet-val"
#define NPRESETS ((int)(sizeof spec_presets / sizeof spec_presets[0]))

/* Preset names compare case-insensitively, with '_' the same as '-'. */
static int preset_name_is(const char *s, size_t n, const char *name)
{
    if (strlen(name) != n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c == '_')
            c = '-';
        if (c != name[i])
            return 0;
    }
    return 1;
}

static int preset_index(const stk_spec_parser *P, int a, int b)
{
    for (int k = 0; k < NPRESETS; k++)
        if (preset_name_is(P->s + a, (size_t)(b - a), spec_presets[k].name))
            return k;
    return -1;
}

const char *stk_spec_preset(const char *name)
{
    if (!name)
        return NULL;
    for (int k = 0; k < NPRESETS; k++)
        if (preset_name_is(name, strlen(name), spec_presets[k].name))
            return spec_presets[k].text;
    return NULL;
}

/* ---------------------------------------------------------------------- */
/* Op names                                                                */
/* ---------------------------------------------------------------------- */

/* Does [a, b) name the row (its name or an alias)? */
static int names_row(const stk_spec_parser *P, int a, int b, const stk_spec_opdef *def)
{
    return stk_spec_tok_is(P, a, b, def->name) ||
           (def->aliases && tok_is_any(P, a, b, def->aliases));
}

/* "pad, random_crop, ..., flip, hflip, ... (presets: ...)": every name and
 * alias of the table in order, then the presets. */
static void known_ops(const stk_spec_parser *P, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < P->ntable && n < cap; i++) {
        const stk_spec_opdef *d = P->table[i];
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", d->name);
        for (const char *al = d->aliases; al && *al && n < cap;) {
            size_t len = strcspn(al, "|");
            n += (size_t)snprintf(buf + n, cap - n, ", %.*s", (int)len, al);
            al += len + (al[len] == '|');
        }
    }
    if (n < cap)
        snprintf(buf + n, cap - n, " (presets: " PRESET_LIST ")");
}

/* Levenshtein distance of [a, b) to word, capped at 9. */
static int edit_distance(const stk_spec_parser *P, int a, int b, const char *word)
{
    int n = b - a, m = (int)strlen(word);
    if (n > 24 || m > 24)
        return 9;
    int d[25][25];
    for (int i = 0; i <= n; i++)
        d[i][0] = i;
    for (int j = 0; j <= m; j++)
        d[0][j] = j;
    for (int i = 1; i <= n; i++) {
        for (int j = 1; j <= m; j++) {
            char x = P->s[a + i - 1];
            if (x >= 'A' && x <= 'Z')
                x = (char)(x - 'A' + 'a');
            int cost = x != word[j - 1];
            int best = d[i - 1][j - 1] + cost;
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m] < 9 ? d[n][m] : 9;
}

/* Keep `word` as the guess when it is closer than *best. */
static void consider(const stk_spec_parser *P, int a, int b, const char *word, size_t len,
                     int *best, const char **guess, size_t *glen)
{
    char w[32];
    if (len >= sizeof w)
        return;
    memcpy(w, word, len);
    w[len] = '\0';
    int d = edit_distance(P, a, b, w);
    if (d < *best) {
        *best = d;
        *guess = word;
        *glen = len;
    }
}

static int unknown_op(const stk_spec_parser *P, const stk_spec_stage *st)
{
    int a = st->name.a, b = st->name.b, best = 3;
    const char *guess = NULL;
    size_t glen = 0;
    for (int i = 0; i < P->ntable; i++) {
        const stk_spec_opdef *d = P->table[i];
        consider(P, a, b, d->name, strlen(d->name), &best, &guess, &glen);
        for (const char *al = d->aliases; al && *al;) {
            size_t len = strcspn(al, "|");
            consider(P, a, b, al, len, &best, &guess, &glen);
            al += len + (al[len] == '|');
        }
    }
    for (int k = 0; k < NPRESETS; k++)
        consider(P, a, b, spec_presets[k].name, strlen(spec_presets[k].name), &best, &guess, &glen);
    char known[1024];
    known_ops(P, known, sizeof known);
    if (guess)
        return stk_spec_err(P, a, "unknown op '%.*s' (did you mean '%.*s'?); known ops: %s",
                            STK_SPEC_TOKARG(P, a, b), (int)glen, guess, known);
    return stk_spec_err(P, a, "unknown op '%.*s'; known ops: %s", STK_SPEC_TOKARG(P, a, b), known);
}

static int parse_stage(stk_spec_parser *P, const stk_spec_stage *st)
{
    int a = st->name.a, b = st->name.b;
    for (int i = 0; i < P->ntable; i++) {
        const stk_spec_opdef *d = P->table[i];
        if (names_row(P, a, b, d))
            return d->parse ? d->parse(P, st, d) : parse_schema(P, st, d);
    }
    if (preset_index(P, a, b) >= 0)
        return stk_spec_err(P, a,
                            "the preset '%.*s' must be the first stage (optionally followed by "
                            "'| to DTYPE [LAYOUT]')",
                            STK_SPEC_TOKARG(P, a, b));
    return unknown_op(P, st);
}

/* ---------------------------------------------------------------------- */
/* Spec                                                                    */
/* ---------------------------------------------------------------------- */

/* Order rules that span stages, checked after each stage's ops are added. */
typedef struct order_state {
    int to_at, norm_at;
    int float_at;   /* first op that made pixels float (rotate, color_jitter), or -1 */
    int preset_ops; /* ops that came from a preset (the first ones) */
} order_state;

static int check_order(const char *text, stk_spec *out, int first, order_state *os)
{
    for (int k = first; k < out->nops; k++) {
        stk_spec_op *op = &out->ops[k];
        const stk_spec_opdef *d = op->def;
        unsigned o = d->order;
        if (o & STK_ORD_ONCE) {
            if (os->norm_at >= 0)
                return stk_spec_fail(text, op->col, "%s is given twice; give it once", d->name);
            os->norm_at = k;
        }
        if ((o & STK_ORD_PIXELS) && os->norm_at >= 0)
            return stk_spec_fail(text, op->col, "%s must come before normalize %s", d->name,
                                 d->order_why ? d->order_why : "(it works on pixel values)");
        if ((o & STK_ORD_U8) && os->float_at >= 0)
            return stk_spec_fail(text, op->col,
                                 "%s must come before %s (it works on uint8 pixels, and %s "
                                 "makes them float)",
                                 d->name, out->ops[os->float_at].def->name,
                                 out->ops[os->float_at].def->name);
        if ((o & STK_ORD_FLOAT) && os->float_at < 0)
            os->float_at = k;
        if (o & STK_ORD_LAST)
            os->to_at = k;
        if ((o & STK_ORD_FIRST) && k != 0)
            return stk_spec_fail(text, op->col, "%s must be the first stage", d->name);
    }
    return 0;
}

/* Does [a, b) name the op that ends a spec (`to`)? */
static int names_last(const stk_spec_parser *P, int a, int b)
{
    for (int i = 0; i < P->ntable; i++)
        if ((P->table[i]->order & STK_ORD_LAST) && names_row(P, a, b, P->table[i]))
            return 1;
    return 0;
}

/* Parse the stages of P->s from offset i to the end into P->spec. With
 * `preset_at` >= 0, P->s is the user's text whose first stage (ending at
 * offset i) was preset `preset_at`: only a `to` may follow, replacing the
 * preset's own. */
static int parse_stages(stk_spec_parser *P, int i, order_state *os, int preset_at)
{
    stk_spec *out = P->spec;
    i = stk_spec_skip_ws(P, i, P->len);
    if (i >= P->len)
        return 0;
    for (;;) {
        stk_spec_stage st;
        int rc = lex_stage(P, i, &st);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            if (st.end < P->len)
                return stk_spec_err(P, st.end, "expected an op before '|'");
            return stk_spec_err(P, st.end, "expected an op after '|'");
        }
        if (preset_at >= 0) {
            if (!names_last(P, st.name.a, st.name.b))
                return stk_spec_err(
                    P, st.name.a,
                    "only '| to DTYPE [LAYOUT]' may follow the preset '%s'; to change "
                    "more, write its stages out: %s",
                    spec_presets[preset_at].name, spec_presets[preset_at].text);
            /* Drop the preset's own `to` (its last op). */
            if (os->to_at >= 0 && os->to_at < os->preset_ops && os->to_at == out->nops - 1) {
                out->nops--;
                os->to_at = -1;
                os->preset_ops = out->nops; /* a later `to` is the user's own */
            }
        }
        if (os->to_at >= 0)
            return stk_spec_err(P, st.name.a,
                                "'%.*s' comes after 'to', but 'to' must be the last stage",
                                STK_SPEC_TOKARG(P, st.name.a, st.name.b));
        int first = out->nops;
        if ((rc = parse_stage(P, &st)) < 0)
            return rc;
        if ((rc = check_order(P->s, out, first, os)) < 0)
            return rc;
        if (st.end >= P->len)
            return 0;
        i = st.end + 1; /* past '|' */
    }
}

int stk_spec_parse_ops(const char *text, const stk_spec_opdef *const *table, int n, stk_spec *out)
{
    if (!text || !out || !table)
        return stk_fail(STK_EINVAL, "pipeline spec is NULL");
    size_t tl = strlen(text);
    if (tl > 65536)
        return stk_fail(STK_ESPEC, "pipeline spec is too long (%zu bytes, at most 65536)", tl);
    memset(out, 0, sizeof *out);
    out->text = text;
    stk_spec_parser P = {text, (int)tl, out, table, n};
    order_state os = {-1, -1, -1, 0};
    int rc, preset_at = -1, start = stk_spec_skip_ws(&P, 0, P.len);

    /* A preset as the first stage: its stages, then the rest of the text. */
    if (start < P.len) {
        stk_spec_stage st;
        rc = lex_stage(&P, start, &st);
        if (rc < 0)
            return rc;
        if (rc > 0 && (preset_at = preset_index(&P, st.name.a, st.name.b)) >= 0) {
            if (st.nargs)
                return stk_spec_err(&P, st.args[0].a, "the preset '%s' takes no arguments",
                                    spec_presets[preset_at].name);
            const char *pt = spec_presets[preset_at].text;
            stk_spec_parser Q = {pt, (int)strlen(pt), out, table, n};
            if ((rc = parse_stages(&Q, 0, &os, -1)) < 0) /* cannot fail: tested */
                return rc;
            for (int k = 0; k < out->nops; k++) {
                stk_spec_op *op = &out->ops[k];
                op->col = op->arg_col = st.name.a + 1;
                if (op->kind == STK_OP_NORMALIZE)
                    op->u.normalize.mean_col = op->u.normalize.std_col = op->col;
            }
            out->preset = spec_presets[preset_at].name;
            os.preset_ops = out->nops;
            start = st.end < P.len ? st.end + 1 : P.len;
            if (st.end < P.len && stk_spec_skip_ws(&P, start, P.len) >= P.len)
                return stk_spec_err(&P, P.len, "expected an op after '|'");
        }
    }
    if ((rc = parse_stages(&P, start, &os, preset_at)) < 0)
        return rc;

    out->has_normalize = os.norm_at >= 0;
    if (os.to_at >= 0) {
        const stk_spec_op *to = &out->ops[os.to_at];
        if (to->u.to.dtype == STK_U8 && os.norm_at >= 0)
            return stk_spec_fail(text, to->arg_col,
                                 "u8 output cannot hold normalized values; use f16 or f32");
        out->dtype = to->u.to.dtype;
        out->layout = to->u.to.layout;
    } else if (os.norm_at >= 0) {
        out->dtype = STK_F32;
        out->layout = STK_CHW;
    } else {
        out->dtype = STK_U8;
        out->layout = STK_HWC;
    }
    return 0;
}
