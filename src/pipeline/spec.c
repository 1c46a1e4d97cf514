/*
 * spec.c — the pipeline spec language: lexer, parser, error messages, and
 * the public stk_spec_check.
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
 * The parser checks everything that does not depend on the image shape;
 * stk_plan_compile checks the rest with the columns stored in each op.
 */
#include "pipeline/spec.h"

#include "core/error.h"
#include "ops/plan.h"

#include <float.h>
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

#define MAX_ARGS 16
#define TOK_SHOW 40 /* bytes of a token quoted in a message */

/* A token: bytes [a, b) of the text (may contain whitespace next to ',' or
 * '='); eq is the offset of its first '=', or -1. */
typedef struct tok {
    int a, b, eq;
} tok;

typedef struct stage {
    tok name;
    int nargs;
    tok args[MAX_ARGS];
    int after_name; /* offset of the first non-space byte after the name */
    int end;        /* offset of the '|' ending the stage, or the length */
} stage;

typedef struct parser {
    const char *s;
    int len;
    stk_spec *spec;
} parser;

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static int perr(const parser *P, int off, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int perr(const parser *P, int off, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return stk_spec_fail(P->s, off + 1, "%s", msg);
}

/* printf arguments quoting bytes [a, b): "%.*s" */
#define TOKARG(P, a, b) ((b) - (a) > TOK_SHOW ? TOK_SHOW : (b) - (a)), (P)->s + (a)

static int skip_ws(const parser *P, int i, int b)
{
    while (i < b && is_ws(P->s[i]))
        i++;
    return i;
}

static int trim_end(const parser *P, int a, int b)
{
    while (b > a && is_ws(P->s[b - 1]))
        b--;
    return b;
}

/* Read the stage starting at offset i. */
static int lex_stage(const parser *P, int i, stage *st)
{
    const char *s = P->s;
    int have_name = 0;
    st->nargs = 0;
    st->name.a = st->name.b = i;
    st->name.eq = -1;
    st->after_name = i;
    st->end = i;
    for (;;) {
        i = skip_ws(P, i, P->len);
        if (!have_name)
            st->name.a = st->name.b = i;
        else if (st->nargs == 0)
            st->after_name = i;
        if (i >= P->len || s[i] == '|')
            break;
        tok t = {i, i, -1};
        for (;;) {
            while (i < P->len && !is_ws(s[i]) && s[i] != '|') {
                if (s[i] == '=' && t.eq < 0)
                    t.eq = i;
                i++;
            }
            /* Join across whitespace next to ',' or '=' ("0.5, 0.5",
             * "fill = 3"), but never onto the op name. */
            int j = skip_ws(P, i, P->len);
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
            if (st->nargs == MAX_ARGS)
                return perr(P, t.a, "too many arguments to '%.*s' (at most %d)",
                            TOKARG(P, st->name.a, st->name.b), MAX_ARGS);
            st->args[st->nargs++] = t;
        }
    }
    st->end = i;
    if (!have_name)
        return 0;
    return 1;
}

static int tok_is(const parser *P, int a, int b, const char *word)
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
static int parse_number(const parser *P, int a, int b, double *out, const char *ctx)
{
    char buf[64];
    if (!number_syntax(P->s, a, b))
        return perr(P, a, "expected a number %s, got '%.*s'", ctx, TOKARG(P, a, b));
    if (b - a >= (int)sizeof buf)
        return perr(P, a, "number too long %s: '%.*s'", ctx, TOKARG(P, a, b));
    memcpy(buf, P->s + a, (size_t)(b - a));
    buf[b - a] = '\0';
    pthread_once(&c_locale_once, c_locale_init);
    double v = c_locale ? strtod_l(buf, NULL, c_locale) : strtod(buf, NULL);
    if (!isfinite(v))
        return perr(P, a, "number out of range %s: '%.*s'", ctx, TOKARG(P, a, b));
    *out = v;
    return 0;
}

typedef struct numlist {
    int n;
    double v[STK_SPEC_MAX_LIST];
    int a[STK_SPEC_MAX_LIST], b[STK_SPEC_MAX_LIST]; /* offsets of each item */
} numlist;

/* Parse a comma list of numbers in [a, b). */
static int parse_list(const parser *P, int a, int b, numlist *L, const char *ctx)
{
    int i = a;
    L->n = 0;
    for (;;) {
        i = skip_ws(P, i, b);
        int e = i;
        while (i < b && P->s[i] != ',' && !is_ws(P->s[i]))
            i++;
        if (e == i) {
            if (L->n)
                return perr(P, e, "expected a number after ',' %s", ctx);
            return perr(P, e, "expected a number %s", ctx);
        }
        if (L->n == STK_SPEC_MAX_LIST)
            return perr(P, e, "too many values %s (at most %d)", ctx, STK_SPEC_MAX_LIST);
        int rc = parse_number(P, e, i, &L->v[L->n], ctx);
        if (rc < 0)
            return rc;
        L->a[L->n] = e;
        L->b[L->n] = i;
        L->n++;
        i = skip_ws(P, i, b);
        if (i >= b)
            return 0;
        /* The lexer only joins across whitespace next to ',' or '=', so
         * anything else here is part of an item. */
        if (P->s[i] != ',')
            return perr(P, i, "expected ',' %s, got '%.*s'", ctx, TOKARG(P, i, b));
        i++;
    }
}

/* A list of whole numbers in [lo, hi] whose length is one of `counts`
 * (a bit mask: bit k set allows k items; 0 allows any length). `out` must
 * hold the largest allowed length. */
static int parse_ints(const parser *P, int a, int b, unsigned counts, uint32_t lo, uint32_t hi,
                      uint32_t *out, int *n, const char *ctx, const char *count_msg)
{
    numlist L;
    int rc = parse_list(P, a, b, &L, ctx);
    if (rc < 0)
        return rc;
    for (int k = 0; k < L.n; k++) {
        double v = L.v[k];
        if (v != floor(v) || v < (double)lo || v > (double)hi)
            return perr(P, L.a[k], "expected a whole number from %u to %u %s, got '%.*s'", lo, hi,
                        ctx, TOKARG(P, L.a[k], L.b[k]));
    }
    if (counts && (L.n >= 32 || !(counts & (1u << L.n))))
        return perr(P, a, "%s, got %d value%s", count_msg, L.n, L.n == 1 ? "" : "s");
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
static int split_key(const parser *P, const tok *t, int *ka, int *kb, int *va, int *vb)
{
    if (t->eq < 0)
        return 0;
    *ka = t->a;
    *kb = trim_end(P, t->a, t->eq);
    *va = skip_ws(P, t->eq + 1, t->b);
    *vb = t->b;
    if (*ka == *kb)
        return perr(P, t->a, "expected a key before '='");
    if (*va == *vb)
        return perr(P, t->eq + 1, "expected a value after '%.*s='", TOKARG(P, *ka, *kb));
    return 1;
}

static int unexpected(const parser *P, const stage *st, const tok *t)
{
    return perr(P, t->a, "unexpected argument '%.*s' to '%.*s'", TOKARG(P, t->a, t->b),
                TOKARG(P, st->name.a, st->name.b));
}

static int unknown_key(const parser *P, const stage *st, int ka, int kb, const char *known)
{
    if (!known)
        return perr(P, ka, "'%.*s' takes no key=value arguments, got '%.*s='",
                    TOKARG(P, st->name.a, st->name.b), TOKARG(P, ka, kb));
    return perr(P, ka, "unknown key '%.*s' for '%.*s' (known: %s)", TOKARG(P, ka, kb),
                TOKARG(P, st->name.a, st->name.b), known);
}

static int twice(const parser *P, int ka, int kb)
{
    return perr(P, ka, "'%.*s' is given twice", TOKARG(P, ka, kb));
}

/* One argument of a stage, as next_arg hands it over, and the walk's state
 * (start from {0}). */
typedef struct stage_arg {
    int next;       /* arguments handed over so far */
    unsigned seen;  /* bit k: key k was given */
    const tok *t; /* the whole argument */
    int key;      /* index into the op's key table; -1 for a positional argument */
    int ka, kb;   /* the key (keyed arguments only) */
    int va, vb;   /* the value: after '=', or the whole positional argument */
} stage_arg;

/* Does [a, b) name `names`, one name or aliases separated by '|'? */
static int tok_is_any(const parser *P, int a, int b, const char *names)
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
 * The arguments of stage st, one per call and in order: 1 with *a filled,
 * 0 after the last, < 0 on error. `keys` lists the op's keys (NULL-terminated; aliases as
 * "mode|padding_mode"), `known` is what an unknown key's message lists
 * (NULL: the op takes no key=value arguments). Unknown keys and a key given
 * twice are reported here; positional arguments are the op's to count.
 */
static int next_arg(const parser *P, const stage *st, const char *const *keys, const char *known,
                    stage_arg *a)
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
        return twice(P, a->ka, a->kb);
    a->seen |= 1u << a->key;
    return 1;
}

static stk_spec_op *new_op(parser *P, stk_op_kind kind, int col_off, int *rc)
{
    stk_spec *sp = P->spec;
    if (sp->nops == STK_SPEC_MAX_OPS) {
        *rc = perr(P, col_off, "too many stages (at most %d)", STK_SPEC_MAX_OPS);
        return NULL;
    }
    stk_spec_op *op = &sp->ops[sp->nops++];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->col = col_off + 1;
    op->arg_col = col_off + 1;
    return op;
}

#define PAD_COUNT_MSG "padding takes 1 (all sides), 2 (left/right,top/bottom) or 4 " \
                      "(left,top,right,bottom) sizes"

static int parse_pad_sizes(const parser *P, int a, int b, stk_spec_op *op, const char *ctx)
{
    uint32_t v[4];
    int n, rc = parse_ints(P, a, b, (1u << 1) | (1u << 2) | (1u << 4), 0, STK_SPEC_MAX_SIZE, v,
                           &n, ctx, PAD_COUNT_MSG);
    if (rc < 0)
        return rc;
    if (n == 1) {
        op->u.pad.left = op->u.pad.top = op->u.pad.right = op->u.pad.bottom = v[0];
    } else if (n == 2) {
        op->u.pad.left = op->u.pad.right = v[0];
        op->u.pad.top = op->u.pad.bottom = v[1];
    } else {
        op->u.pad.left = v[0];
        op->u.pad.top = v[1];
        op->u.pad.right = v[2];
        op->u.pad.bottom = v[3];
    }
    op->arg_col = a + 1;
    return 0;
}

static int parse_fill(const parser *P, int a, int b, stk_spec_op *op)
{
    uint32_t v[STK_SPEC_MAX_LIST];
    int n, rc = parse_ints(P, a, b, 0, 0, 255, v, &n, "in fill=", "fill takes 1 value or 1 per channel");
    if (rc < 0)
        return rc;
    op->u.pad.nfill = (uint32_t)n;
    for (int k = 0; k < n; k++)
        op->u.pad.fill[k] = (uint8_t)v[k];
    op->u.pad.fill_col = a + 1;
    return 0;
}

static int parse_mode(const parser *P, int a, int b, stk_pad_mode *mode)
{
    static const struct {
        const char *name;
        stk_pad_mode mode;
    } modes[] = {{"constant", STK_PAD_CONSTANT},
                 {"edge", STK_PAD_EDGE},
                 {"reflect", STK_PAD_REFLECT},
                 {"symmetric", STK_PAD_SYMMETRIC}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        if (tok_is(P, a, b, modes[i].name)) {
            *mode = modes[i].mode;
            return 0;
        }
    }
    return perr(P, a, "unknown padding mode '%.*s' (known: constant, edge, reflect, symmetric)",
                TOKARG(P, a, b));
}

/* The column to blame for a missing argument: just after the op name. */
static int missing_at(const stage *st) { return st->after_name; }

/* ---------------------------------------------------------------------- */
/* Ops                                                                     */
/* ---------------------------------------------------------------------- */

static int parse_pad(parser *P, const stage *st)
{
    static const char *const keys[] = {"fill", "mode|padding_mode", NULL};
    int rc = 0, have_size = 0;
    stage_arg a = {0};
    stk_spec_op *op = new_op(P, STK_OP_PAD, st->name.a, &rc);
    if (!op)
        return rc;
    op->u.pad.mode = STK_PAD_CONSTANT;
    op->u.pad.nfill = 1;
    op->u.pad.fill_col = op->col;
    while ((rc = next_arg(P, st, keys, "fill, mode", &a)) > 0) {
        if (a.key < 0 && have_size++)
            return unexpected(P, st, a.t);
        rc = a.key < 0    ? parse_pad_sizes(P, a.va, a.vb, op, "after 'pad'")
             : a.key == 0 ? parse_fill(P, a.va, a.vb, op)
                          : parse_mode(P, a.va, a.vb, &op->u.pad.mode);
        if (rc < 0)
            return rc;
    }
    if (rc < 0)
        return rc;
    if (!have_size)
        return perr(P, missing_at(st),
                    "expected padding sizes after 'pad' (N, LR,TB or L,T,R,B)");
    return 0;
}

/* `H` or `H,W` (square when one value). */
static int parse_crop_size(const parser *P, const tok *t, stk_spec_op *op, const char *ctx)
{
    uint32_t v[2];
    int n, rc = parse_ints(P, t->a, t->b, (1u << 1) | (1u << 2), 1, STK_SPEC_MAX_SIZE, v, &n, ctx,
                           "a crop size is H or H,W");
    if (rc < 0)
        return rc;
    op->u.crop.height = v[0];
    op->u.crop.width = n == 2 ? v[1] : v[0];
    op->arg_col = t->a + 1;
    return 0;
}

static int parse_crop(parser *P, const stage *st, int random)
{
    const char *name = random ? "random_crop" : "center_crop";
    char ctx[64];
    snprintf(ctx, sizeof ctx, "after '%s'", name);
    /* random_crop's keys; center_crop takes none. */
    static const char *const keys[] = {"padding", "fill", "mode|padding_mode", NULL};
    enum { PADDING, FILL, MODE };
    int rc = 0;
    stage_arg a = {0}, size = {0}, got[3];
    while ((rc = next_arg(P, st, random ? keys : NULL, random ? "padding, fill, mode" : NULL, &a)) > 0) {
        if (a.key >= 0)
            got[a.key] = a;
        else if (size.t)
            return unexpected(P, st, a.t);
        else
            size = a;
    }
    if (rc < 0)
        return rc;
    if (!size.t)
        return perr(P, missing_at(st), "expected a crop size after '%s' (H or H,W)", name);
    for (int k = FILL; k <= MODE; k++)
        if ((a.seen & (1u << k)) && !(a.seen & (1u << PADDING)))
            return perr(P, got[k].ka, "'%.*s=' needs padding=", TOKARG(P, got[k].ka, got[k].kb));

    if (a.seen & (1u << PADDING)) { /* random_crop ... padding=N  ==  pad N | random_crop ... */
        stk_spec_op *pad = new_op(P, STK_OP_PAD, got[PADDING].ka, &rc);
        if (!pad)
            return rc;
        pad->u.pad.mode = STK_PAD_CONSTANT;
        pad->u.pad.nfill = 1;
        pad->u.pad.fill_col = pad->col;
        if ((rc = parse_pad_sizes(P, got[PADDING].va, got[PADDING].vb, pad, "in padding=")) < 0)
            return rc;
        if ((a.seen & (1u << FILL)) && (rc = parse_fill(P, got[FILL].va, got[FILL].vb, pad)) < 0)
            return rc;
        if ((a.seen & (1u << MODE)) &&
            (rc = parse_mode(P, got[MODE].va, got[MODE].vb, &pad->u.pad.mode)) < 0)
            return rc;
    }
    stk_spec_op *op =
        new_op(P, random ? STK_OP_RANDOM_CROP : STK_OP_CENTER_CROP, st->name.a, &rc);
    if (!op)
        return rc;
    return parse_crop_size(P, size.t, op, ctx);
}

static int parse_flip(parser *P, const stage *st, stk_op_kind kind)
{
    static const char *const keys[] = {"p", NULL};
    int rc = 0, have_p = 0;
    stage_arg a = {0};
    stk_spec_op *op = new_op(P, kind, st->name.a, &rc);
    if (!op)
        return rc;
    op->u.flip.p = 0.5;
    while ((rc = next_arg(P, st, keys, "p", &a)) > 0) {
        int va = a.va, vb = a.vb;
        if (have_p++) /* P, or p=P */
            return a.key >= 0 ? twice(P, a.ka, a.kb) : unexpected(P, st, a.t);
        char ctx[64];
        snprintf(ctx, sizeof ctx, "after '%.*s'", TOKARG(P, st->name.a, st->name.b));
        double p;
        if ((rc = parse_number(P, va, vb, &p, ctx)) < 0)
            return rc;
        if (!(p >= 0.0 && p <= 1.0))
            return perr(P, va, "flip probability must be from 0 to 1, got '%.*s'",
                        TOKARG(P, va, vb));
        op->u.flip.p = p;
        op->arg_col = va + 1;
    }
    return rc;
}

static const struct preset {
    const char *name;
    int n;
    double mean[3], std[3];
} presets[] = {
    {"cifar10", 3, {0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616}},
    {"imagenet", 3, {0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}},
    {"mnist", 1, {0.1307}, {0.3081}},
    {"fashion-mnist", 1, {0.2860}, {0.3530}},
    {"fashion_mnist", 1, {0.2860}, {0.3530}},
};
#define PRESET_NAMES "cifar10, imagenet, mnist, fashion-mnist"

static int set_values(const parser *P, const numlist *L, double *dst, uint32_t *n, int is_std)
{
    for (int k = 0; k < L->n; k++) {
        if (is_std && !(L->v[k] > 0.0))
            return perr(P, L->a[k], "std must be > 0, got '%.*s'", TOKARG(P, L->a[k], L->b[k]));
        dst[k] = L->v[k];
    }
    *n = (uint32_t)L->n;
    return 0;
}

/* normalize computes (x - mean) / std in float for x in [0, 1]: refuse a
 * mean and std whose results do not fit a float (std=1e-45 would give inf),
 * checking the largest magnitude, (1 + |mean|) / std, per channel. `at` is
 * the std's offset, for the message. */
static int check_normalize_range(const parser *P, const stk_spec_op *op, int at)
{
    uint32_t nm = op->u.normalize.nmean, ns = op->u.normalize.nstd, n = nm > ns ? nm : ns;
    for (uint32_t c = 0; c < n; c++) {
        double m = op->u.normalize.mean[nm == 1 ? 0 : c < nm ? c : nm - 1];
        double s = op->u.normalize.std[ns == 1 ? 0 : c < ns ? c : ns - 1];
        if (!((1.0 + fabs(m)) / s <= FLT_MAX))
            return perr(P, at,
                        "normalize mean %g, std %g give values beyond the float range "
                        "((1 + |mean|) / std must be at most %g)",
                        m, s, (double)FLT_MAX);
    }
    return 0;
}

static int parse_normalize(parser *P, const stage *st)
{
    static const char *const keys[] = {"mean", "std", NULL};
    int rc = 0, npos = 0;
    stage_arg a = {0}, pos[2], kv[2]; /* kv: mean=, std= */
    stk_spec_op *op = new_op(P, STK_OP_NORMALIZE, st->name.a, &rc);
    if (!op)
        return rc;
    while ((rc = next_arg(P, st, keys, "mean, std", &a)) > 0) {
        if (a.key >= 0)
            kv[a.key] = a;
        else if (npos == 2)
            return unexpected(P, st, a.t);
        else
            pos[npos++] = a;
    }
    if (rc < 0)
        return rc;
    int mean_at = a.seen & 1u, std_at = a.seen & 2u;
    numlist L;
    if (npos && (mean_at || std_at))
        return perr(P, kv[mean_at ? 0 : 1].t->a,
                    "give normalize either MEAN STD or mean= std=, not both");
    if (npos >= 1) {
        const tok *t = pos[0].t;
        char c0 = P->s[t->a];
        if ((c0 >= 'a' && c0 <= 'z') || (c0 >= 'A' && c0 <= 'Z')) { /* a preset */
            if (npos == 2)
                return unexpected(P, st, pos[1].t);
            for (size_t k = 0; k < sizeof presets / sizeof presets[0]; k++) {
                if (tok_is(P, t->a, t->b, presets[k].name)) {
                    op->u.normalize.nmean = op->u.normalize.nstd = (uint32_t)presets[k].n;
                    memcpy(op->u.normalize.mean, presets[k].mean, sizeof presets[k].mean);
                    memcpy(op->u.normalize.std, presets[k].std, sizeof presets[k].std);
                    op->u.normalize.mean_col = op->u.normalize.std_col = t->a + 1;
                    op->arg_col = t->a + 1;
                    return 0;
                }
            }
            return perr(P, t->a, "unknown normalize preset '%.*s' (known: " PRESET_NAMES ")",
                        TOKARG(P, t->a, t->b));
        }
        if ((rc = parse_list(P, t->a, t->b, &L, "in the normalize mean")) < 0)
            return rc;
        set_values(P, &L, op->u.normalize.mean, &op->u.normalize.nmean, 0);
        op->u.normalize.mean_col = op->arg_col = t->a + 1;
        if (npos < 2)
            return perr(P, st->end, "expected the std values after the normalize mean");
        t = pos[1].t;
        if ((rc = parse_list(P, t->a, t->b, &L, "in the normalize std")) < 0)
            return rc;
        if ((rc = set_values(P, &L, op->u.normalize.std, &op->u.normalize.nstd, 1)) < 0)
            return rc;
        op->u.normalize.std_col = t->a + 1;
        return check_normalize_range(P, op, t->a);
    }
    if (!mean_at && !std_at)
        return perr(P, missing_at(st),
                    "expected a preset (" PRESET_NAMES ") or MEAN STD after 'normalize'");
    if (!mean_at || !std_at)
        return perr(P, kv[mean_at ? 0 : 1].t->a, "normalize needs both mean= and std=");
    if ((rc = parse_list(P, kv[0].va, kv[0].vb, &L, "in mean=")) < 0)
        return rc;
    set_values(P, &L, op->u.normalize.mean, &op->u.normalize.nmean, 0);
    op->u.normalize.mean_col = op->arg_col = kv[0].va + 1;
    if ((rc = parse_list(P, kv[1].va, kv[1].vb, &L, "in std=")) < 0)
        return rc;
    if ((rc = set_values(P, &L, op->u.normalize.std, &op->u.normalize.nstd, 1)) < 0)
        return rc;
    op->u.normalize.std_col = kv[1].va + 1;
    return check_normalize_range(P, op, kv[1].va);
}

static int parse_to(parser *P, const stage *st)
{
    static const struct {
        const char *name;
        stk_dtype dtype;
    } dtypes[] = {{"u8", STK_U8},        {"uint8", STK_U8},     {"f16", STK_F16},
                  {"float16", STK_F16},  {"half", STK_F16},     {"f32", STK_F32},
                  {"float32", STK_F32},  {"float", STK_F32}};
    int rc = 0;
    stk_spec_op *op = new_op(P, STK_OP_TO, st->name.a, &rc);
    if (!op)
        return rc;
    if (st->nargs == 0)
        return perr(P, missing_at(st), "expected a dtype after 'to' (u8, f16 or f32)");
    stage_arg a = {0};
    while ((rc = next_arg(P, st, NULL, NULL, &a)) > 0)
        if (a.next > 2) /* DTYPE [LAYOUT] */
            return unexpected(P, st, a.t);
    if (rc < 0)
        return rc;
    const tok *t = &st->args[0];
    size_t k;
    for (k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++)
        if (tok_is(P, t->a, t->b, dtypes[k].name))
            break;
    if (k == sizeof dtypes / sizeof dtypes[0])
        return perr(P, t->a, "unknown dtype '%.*s' (known: u8, f16, f32)", TOKARG(P, t->a, t->b));
    op->u.to.dtype = dtypes[k].dtype;
    op->arg_col = t->a + 1;
    op->u.to.layout = op->u.to.dtype == STK_U8 ? STK_HWC : STK_CHW;
    if (st->nargs == 2) {
        t = &st->args[1];
        if (tok_is(P, t->a, t->b, "hwc"))
            op->u.to.layout = STK_HWC;
        else if (tok_is(P, t->a, t->b, "chw"))
            op->u.to.layout = STK_CHW;
        else
            return perr(P, t->a, "unknown layout '%.*s' (known: hwc, chw)", TOKARG(P, t->a, t->b));
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* The image pipeline ops                                                  */
/* ---------------------------------------------------------------------- */

/* One number, or a range `A:B` (also `A,B`), in [a, b). Returns the count
 * (1 or 2) through *n. */
static int parse_range(const parser *P, int a, int b, double v[2], int *n, const char *ctx)
{
    int cut = -1;
    for (int i = a; i < b; i++) {
        if (P->s[i] == ':' || P->s[i] == ',') {
            if (cut >= 0)
                return perr(P, i, "expected one number or a range A:B %s, got '%.*s'", ctx,
                            TOKARG(P, a, b));
            cut = i;
        }
    }
    int rc;
    if (cut < 0) {
        *n = 1;
        return parse_number(P, a, b, &v[0], ctx);
    }
    int e1 = trim_end(P, a, cut), s2 = skip_ws(P, cut + 1, b);
    if (e1 == a)
        return perr(P, a, "expected a number before '%c' %s", P->s[cut], ctx);
    if (s2 == b)
        return perr(P, cut + 1, "expected a number after '%c' %s", P->s[cut], ctx);
    if ((rc = parse_number(P, a, e1, &v[0], ctx)) < 0)
        return rc;
    if ((rc = parse_number(P, s2, b, &v[1], ctx)) < 0)
        return rc;
    if (v[0] > v[1])
        return perr(P, a, "the range %s must be low:high, got '%.*s'", ctx, TOKARG(P, a, b));
    *n = 2;
    return 0;
}

/* An output size `S` or `H,W`: *n = 1 or 2. */
static int parse_out_size(const parser *P, const tok *t, uint32_t v[2], int *n, const char *ctx,
                          const char *what)
{
    return parse_ints(P, t->a, t->b, (1u << 1) | (1u << 2), 1, STK_SPEC_MAX_SIZE, v, n, ctx,
                      what);
}

static int parse_decode(parser *P, const stage *st)
{
    int rc = 0;
    stk_spec_op *op = new_op(P, STK_OP_DECODE, st->name.a, &rc);
    if (!op)
        return rc;
    if (st->nargs) {
        const tok *t = &st->args[0];
        if (t->eq >= 0)
            return perr(P, t->a, "'decode' takes no arguments, got '%.*s'", TOKARG(P, t->a, t->b));
        return unexpected(P, st, t);
    }
    return 0;
}

static int parse_rrc(parser *P, const stage *st)
{
    static const char ctx[] = "after 'random_resized_crop'";
    static const char *const keys[] = {"scale", "ratio", NULL};
    int rc = 0, have_size = 0;
    stage_arg a = {0};
    stk_spec_op *op = new_op(P, STK_OP_RANDOM_RESIZED_CROP, st->name.a, &rc);
    if (!op)
        return rc;
    op->u.rrc.scale[0] = 0.08;
    op->u.rrc.scale[1] = 1.0;
    op->u.rrc.ratio[0] = 3.0 / 4.0;
    op->u.rrc.ratio[1] = 4.0 / 3.0;
    while ((rc = next_arg(P, st, keys, "scale, ratio", &a)) > 0) {
        int va = a.va, vb = a.vb;
        if (a.key < 0) {
            if (have_size++)
                return unexpected(P, st, a.t);
            uint32_t v[2];
            int n;
            if ((rc = parse_out_size(P, a.t, v, &n, ctx, "an output size is S or H,W")) < 0)
                return rc;
            op->u.rrc.height = v[0];
            op->u.rrc.width = n == 2 ? v[1] : v[0];
            op->arg_col = a.t->a + 1;
        } else {
            int is_scale = a.key == 0;
            double v[2];
            int n;
            if ((rc = parse_range(P, va, vb, v, &n, is_scale ? "in scale=" : "in ratio=")) < 0)
                return rc;
            if (n != 2)
                return perr(P, va, "%s= takes a range low:high, e.g. %s, got '%.*s'",
                            is_scale ? "scale" : "ratio", is_scale ? "0.08:1" : "0.75:1.3333",
                            TOKARG(P, va, vb));
            if (!(v[0] > 0.0))
                return perr(P, va, "%s= must be > 0, got '%.*s'", is_scale ? "scale" : "ratio",
                            TOKARG(P, va, vb));
            memcpy(is_scale ? op->u.rrc.scale : op->u.rrc.ratio, v, sizeof v);
        }
    }
    if (rc < 0)
        return rc;
    if (!have_size)
        return perr(P, missing_at(st),
                    "expected an output size after 'random_resized_crop' (S or H,W)");
    return 0;
}

static int parse_resize(parser *P, const stage *st)
{
    int rc = 0, have = 0;
    stage_arg a = {0};
    stk_spec_op *op = new_op(P, STK_OP_RESIZE, st->name.a, &rc);
    if (!op)
        return rc;
    while ((rc = next_arg(P, st, NULL, NULL, &a)) > 0) {
        const tok *t = a.t;
        if (have++)
            return unexpected(P, st, t);
        uint32_t v[2];
        int n;
        if ((rc = parse_out_size(P, t, v, &n, "after 'resize'",
                                 "resize takes S (the shorter side) or H,W")) < 0)
            return rc;
        op->u.resize.height = v[0];
        op->u.resize.width = n == 2 ? v[1] : v[0];
        op->u.resize.shorter = n == 1;
        op->arg_col = t->a + 1;
    }
    if (rc < 0)
        return rc;
    if (!have)
        return perr(P, missing_at(st),
                    "expected a size after 'resize' (S for the shorter side, or H,W)");
    return 0;
}

static int parse_rotate(parser *P, const stage *st)
{
    static const char *const keys[] = {"degrees", "fill", NULL};
    int rc = 0, have_deg = 0;
    stage_arg a = {0};
    stk_spec_op *op = new_op(P, STK_OP_ROTATE, st->name.a, &rc);
    if (!op)
        return rc;
    op->u.rotate.nfill = 1;
    op->u.rotate.fill_col = op->col;
    while ((rc = next_arg(P, st, keys, "degrees, fill", &a)) > 0) {
        int va = a.va, vb = a.vb;
        if (a.key <= 0) { /* DEGREES, or degrees=DEGREES */
            if (have_deg++)
                return a.key == 0 ? twice(P, a.ka, a.kb) : unexpected(P, st, a.t);
            double v[2];
            int n;
            if ((rc = parse_range(P, va, vb, v, &n, "after 'rotate'")) < 0)
                return rc;
            if (n == 1) {
                if (v[0] < 0.0)
                    return perr(P, va,
                                "rotate DEGREES must be >= 0 (the angle is drawn from "
                                "-DEGREES:DEGREES), got '%.*s'",
                                TOKARG(P, va, vb));
                v[1] = v[0];
                v[0] = -v[0];
            }
            if (v[0] < -36000.0 || v[1] > 36000.0)
                return perr(P, va, "rotate angles must be within -36000:36000 degrees");
            op->u.rotate.lo = v[0];
            op->u.rotate.hi = v[1];
            op->arg_col = va + 1;
        } else { /* fill= */
            uint32_t f[STK_SPEC_MAX_LIST];
            int n;
            if ((rc = parse_ints(P, va, vb, 0, 0, 255, f, &n, "in fill=",
                                 "fill takes 1 value or 1 per channel")) < 0)
                return rc;
            op->u.rotate.nfill = (uint32_t)n;
            for (int k = 0; k < n; k++)
                op->u.rotate.fill[k] = (uint8_t)f[k];
            op->u.rotate.fill_col = va + 1;
        }
    }
    if (rc < 0)
        return rc;
    if (!have_deg)
        return perr(P, missing_at(st), "expected DEGREES after 'rotate' (D for -D:D, or A:B)");
    return 0;
}

static int parse_color_jitter(parser *P, const stage *st)
{
    static const char *const keys[5] = {"brightness", "contrast", "saturation", "hue", NULL};
    int rc = 0, npos = 0, seen[4] = {0, 0, 0, 0};
    stk_spec_op *op = new_op(P, STK_OP_COLOR_JITTER, st->name.a, &rc);
    if (!op)
        return rc;
    int *has[4] = {&op->u.jitter.has_b, &op->u.jitter.has_c, &op->u.jitter.has_s,
                   &op->u.jitter.has_h};
    double *rng[4] = {op->u.jitter.b, op->u.jitter.c, op->u.jitter.s, op->u.jitter.h};
    for (int k = 0; k < 3; k++)
        rng[k][0] = rng[k][1] = 1.0;
    stage_arg a = {0};
    while ((rc = next_arg(P, st, keys, "brightness, contrast, saturation, hue", &a)) > 0) {
        int va = a.va, vb = a.vb, which = a.key;
        if (which < 0) { /* positional: B C S [H] in order */
            if (npos == 4)
                return unexpected(P, st, a.t);
            which = npos++;
            if (seen[which])
                return perr(P, a.t->a, "'%s' is given twice", keys[which]);
        } else if (seen[which]) {
            return twice(P, a.ka, a.kb);
        }
        seen[which] = 1;
        char ctx[64];
        snprintf(ctx, sizeof ctx, "for %s", keys[which]);
        double v[2];
        int n;
        if ((rc = parse_range(P, va, vb, v, &n, ctx)) < 0)
            return rc;
        if (which < 3) {
            if (n == 1) {
                if (v[0] < 0.0)
                    return perr(P, va, "%s must be >= 0, got '%.*s'", keys[which],
                                TOKARG(P, va, vb));
                double x = v[0];
                v[0] = 1.0 - x > 0.0 ? 1.0 - x : 0.0;
                v[1] = 1.0 + x;
            } else if (v[0] < 0.0) {
                return perr(P, va, "a %s range must be >= 0, got '%.*s'", keys[which],
                            TOKARG(P, va, vb));
            }
            *has[which] = !(v[0] == 1.0 && v[1] == 1.0);
        } else {
            if (n == 1) {
                if (v[0] < 0.0 || v[0] > 0.5)
                    return perr(P, va, "hue must be from 0 to 0.5, got '%.*s'", TOKARG(P, va, vb));
                v[1] = v[0];
                v[0] = -v[0];
            } else if (v[0] < -0.5 || v[1] > 0.5) {
                return perr(P, va, "a hue range must lie within -0.5:0.5, got '%.*s'",
                            TOKARG(P, va, vb));
            }
            *has[which] = !(v[0] == 0.0 && v[1] == 0.0);
        }
        rng[which][0] = v[0];
        rng[which][1] = v[1];
        if (a.next == 1)
            op->arg_col = va + 1;
    }
    if (rc < 0)
        return rc;
    if (!st->nargs)
        return perr(P, missing_at(st),
                    "expected factors after 'color_jitter' (BRIGHTNESS CONTRAST SATURATION [HUE])");
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

static int preset_index(const parser *P, int a, int b)
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

static const char *const op_names[] = {
    "pad",    "random_crop", "center_crop",         "flip",   "hflip",  "vflip",
    "normalize", "to",       "decode", "random_resized_crop", "resize", "rotate",
    "color_jitter", "imagenet-train-few", "imagenet-train-extensive", "imagenet-val"};
#define OP_NAMES "pad, random_crop, center_crop, flip, hflip, vflip, normalize, to, decode, " \
                 "random_resized_crop, resize, rotate, color_jitter (presets: " PRESET_LIST ")"

/* Levenshtein distance of [a, b) to word, capped at 9. */
static int edit_distance(const parser *P, int a, int b, const char *word)
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

static int unknown_op(const parser *P, const stage *st)
{
    int a = st->name.a, b = st->name.b, best = 3;
    const char *guess = NULL;
    for (size_t i = 0; i < sizeof op_names / sizeof op_names[0]; i++) {
        int d = edit_distance(P, a, b, op_names[i]);
        if (d < best) {
            best = d;
            guess = op_names[i];
        }
    }
    if (guess)
        return perr(P, a, "unknown op '%.*s' (did you mean '%s'?); known ops: " OP_NAMES,
                    TOKARG(P, a, b), guess);
    return perr(P, a, "unknown op '%.*s'; known ops: " OP_NAMES, TOKARG(P, a, b));
}

static int parse_stage(parser *P, const stage *st)
{
    int a = st->name.a, b = st->name.b;
    if (tok_is(P, a, b, "pad"))
        return parse_pad(P, st);
    if (tok_is(P, a, b, "random_crop"))
        return parse_crop(P, st, 1);
    if (tok_is(P, a, b, "center_crop"))
        return parse_crop(P, st, 0);
    if (tok_is(P, a, b, "flip") || tok_is(P, a, b, "hflip"))
        return parse_flip(P, st, STK_OP_HFLIP);
    if (tok_is(P, a, b, "vflip"))
        return parse_flip(P, st, STK_OP_VFLIP);
    if (tok_is(P, a, b, "normalize"))
        return parse_normalize(P, st);
    if (tok_is(P, a, b, "to"))
        return parse_to(P, st);
    if (tok_is(P, a, b, "decode"))
        return parse_decode(P, st);
    if (tok_is(P, a, b, "random_resized_crop"))
        return parse_rrc(P, st);
    if (tok_is(P, a, b, "resize"))
        return parse_resize(P, st);
    if (tok_is(P, a, b, "rotate"))
        return parse_rotate(P, st);
    if (tok_is(P, a, b, "color_jitter"))
        return parse_color_jitter(P, st);
    if (preset_index(P, a, b) >= 0)
        return perr(P, a, "the preset '%.*s' must be the first stage (optionally followed by "
                          "'| to DTYPE [LAYOUT]')", TOKARG(P, a, b));
    return unknown_op(P, st);
}

/* ---------------------------------------------------------------------- */
/* Spec                                                                    */
/* ---------------------------------------------------------------------- */

/* Order rules that span stages, checked after each stage's ops are added. */
typedef struct order_state {
    int to_at, norm_at;
    int preset_ops; /* ops that came from a preset (the first ones) */
} order_state;

static int check_order(const char *text, stk_spec *out, int first, order_state *os)
{
    for (int k = first; k < out->nops; k++) {
        stk_spec_op *op = &out->ops[k];
        switch (op->kind) {
        case STK_OP_NORMALIZE:
            if (os->norm_at >= 0)
                return stk_spec_fail(text, op->col, "normalize is given twice; give it once");
            os->norm_at = k;
            break;
        case STK_OP_PAD:
            if (os->norm_at >= 0)
                return stk_spec_fail(text, op->col,
                                     "pad must come before normalize (fill values are "
                                     "pixel values 0-255)");
            break;
        case STK_OP_TO:
            os->to_at = k;
            break;
        case STK_OP_DECODE:
            if (k != 0)
                return stk_spec_fail(text, op->col, "decode must be the first stage");
            break;
        case STK_OP_RANDOM_RESIZED_CROP:
        case STK_OP_RESIZE:
        case STK_OP_ROTATE:
        case STK_OP_COLOR_JITTER:
            if (os->norm_at >= 0)
                return stk_spec_fail(
                    text, op->col, "%s must come before normalize (it works on pixel values)",
                    op->kind == STK_OP_RANDOM_RESIZED_CROP ? "random_resized_crop"
                    : op->kind == STK_OP_RESIZE            ? "resize"
                    : op->kind == STK_OP_ROTATE            ? "rotate"
                                                           : "color_jitter");
            break;
        default:
            break;
        }
    }
    return 0;
}

/* Parse the stages of P->s from offset i to the end into P->spec. With
 * `preset_at` >= 0, P->s is the user's text whose first stage (ending at
 * offset i) was preset `preset_at`: only a `to` may follow, replacing the
 * preset's own. */
static int parse_stages(parser *P, int i, order_state *os, int preset_at)
{
    stk_spec *out = P->spec;
    i = skip_ws(P, i, P->len);
    if (i >= P->len)
        return 0;
    for (;;) {
        stage st;
        int rc = lex_stage(P, i, &st);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            if (st.end < P->len)
                return perr(P, st.end, "expected an op before '|'");
            return perr(P, st.end, "expected an op after '|'");
        }
        if (preset_at >= 0) {
            if (!tok_is(P, st.name.a, st.name.b, "to"))
                return perr(P, st.name.a,
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
            return perr(P, st.name.a, "'%.*s' comes after 'to', but 'to' must be the last stage",
                        TOKARG(P, st.name.a, st.name.b));
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

int stk_spec_parse(const char *text, stk_spec *out)
{
    if (!text || !out)
        return stk_fail(STK_EINVAL, "pipeline spec is NULL");
    size_t tl = strlen(text);
    if (tl > 65536)
        return stk_fail(STK_ESPEC, "pipeline spec is too long (%zu bytes, at most 65536)", tl);
    memset(out, 0, sizeof *out);
    out->text = text;
    parser P = {text, (int)tl, out};
    order_state os = {-1, -1, 0};
    int rc, preset_at = -1, start = skip_ws(&P, 0, P.len);

    /* A preset as the first stage: its stages, then the rest of the text. */
    if (start < P.len) {
        stage st;
        rc = lex_stage(&P, start, &st);
        if (rc < 0)
            return rc;
        if (rc > 0 && (preset_at = preset_index(&P, st.name.a, st.name.b)) >= 0) {
            if (st.nargs)
                return perr(&P, st.args[0].a, "the preset '%s' takes no arguments",
                            spec_presets[preset_at].name);
            const char *pt = spec_presets[preset_at].text;
            parser Q = {pt, (int)strlen(pt), out};
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
            if (st.end < P.len && skip_ws(&P, start, P.len) >= P.len)
                return perr(&P, P.len, "expected an op after '|'");
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

int stk_spec_check(const char *spec, uint32_t height, uint32_t width, uint32_t channels,
                   int64_t out_shape[3], stk_dtype *dtype, stk_layout *layout)
{
    stk_plan *p = NULL;
    int rc = stk_plan_compile(spec, height, width, channels, &p);
    if (rc < 0)
        return rc;
    stk_plan_output(p, out_shape, dtype, layout, NULL);
    stk_plan_free(p);
    return 0;
}
