/*
 * spec.h — the pipeline spec language (internal): the parsed form of a spec,
 * the generic walker that parses one, and the toolkit op parsers use.
 *
 * This layer knows the grammar (docs/pipeline.md), numbers, lists, ranges,
 * keys, presets, column-and-caret messages and the order rules between
 * stages, but no particular op: it walks a table of stk_spec_opdef rows
 * handed to it by the caller. The ops themselves — their names, aliases,
 * arguments and what they do — are described beside it in src/ops/
 * (ops/op.h, one row per op in ops/op_table.c), above this file; nothing
 * here includes another src/ops/ header, so the dependency runs one way:
 *
 *     ops/spec  <-  ops (descriptors, plan compilers)  <-  pipeline/loader
 *
 * (The language lives in src/ops/, not src/pipeline/, so that the
 * directories stack too: ops never include pipeline.)
 *
 * stk_spec_parse_ops turns the text of a spec into a flat list of ops with
 * every argument resolved to numbers and enums, and every check that does
 * not depend on the image shape already done: unknown ops, bad numbers,
 * unknown keys, `to` not last, normalize twice, pad after normalize, u8
 * output of normalized values. What does depend on the shape (a crop larger
 * than its input, a normalize or fill with the wrong channel count, reflect
 * padding wider than the image) is checked by stk_plan_compile, which
 * reports it through stk_spec_fail with the column each op remembers here.
 *
 * One spec stage may produce two ops: `random_crop 32 padding=4` is stored as
 * a pad op followed by a random_crop op, exactly as if the user had written
 * `pad 4 | random_crop 32`.
 *
 * Order rules checked here come from each row's `order` flags: `decode` only
 * first; `to` only last; normalize once; ops that work on pixel values
 * (pad, resize, random_resized_crop, rotate, color_jitter, the uint8 point
 * ops) before normalize; uint8 point ops (posterize, solarize) also before
 * the float stages (rotate, color_jitter).
 *
 * Columns are 1-based byte offsets into the spec text.
 */
#ifndef STK_PIPELINE_SPEC_H
#define STK_PIPELINE_SPEC_H

#include "stoker/stoker.h"

#include <stdint.h>

#define STK_SPEC_MAX_OPS 32   /* ops after expansion (random_crop padding= counts 2) */
#define STK_SPEC_MAX_LIST 64  /* values in one comma list (per-channel values) */
#define STK_SPEC_MAX_SIZE (1u << 24) /* largest pad or crop size accepted */
#define STK_SPEC_MAX_ARGS 16 /* arguments of one stage */

typedef enum stk_op_kind {
    STK_OP_PAD = 0,
    STK_OP_RANDOM_CROP,
    STK_OP_CENTER_CROP,
    STK_OP_HFLIP,
    STK_OP_VFLIP,
    STK_OP_NORMALIZE,
    STK_OP_TO,
    /* The image pipeline (docs/pipeline.md, "Images of any size"). */
    STK_OP_DECODE,              /* optional first stage; no arguments */
    STK_OP_RANDOM_RESIZED_CROP, /* u.rrc */
    STK_OP_RESIZE,              /* u.resize */
    STK_OP_ROTATE,              /* u.rotate */
    STK_OP_COLOR_JITTER,        /* u.jitter */
    /* A uint8 point op (a 256-entry lookup table per sample) described
     * wholly by its table row (ops/op.h: lut and draw hooks); its arguments
     * are u.num, in the order of the row's params. posterize, solarize. */
    STK_OP_LUT,
    /* A float-tensor op of the image pipeline's tail described wholly by
     * its table row (ops/op.h: the stk_float_hooks: draw, row or whole
     * image): grayscale (u.num), gaussian_blur (u.blur), perspective
     * (u.num). */
    STK_OP_FLOAT,
    STK_OP_RANDOM_ERASING, /* u.erase (op_random_erasing.c) */
    STK_OP_RANDOM_APPLY,   /* u.apply (op_random_apply.c) */
    /* An augmentation policy (auto_augment, rand_augment,
     * trivial_augment_wide: ops/augment.h) run on the whole uint8 image
     * after the head; arguments in u.num, the policy in the row. */
    STK_OP_POLICY,
    STK_OP_AFFINE, /* u.affine: RandomAffine on the float image (ops/op_affine.c) */
    STK_OP_BBOX_CROP, /* u.bbox: SSD's IoU crop over the sample's boxes (ops/op_bbox_crop.c) */
    /* A user-defined op (stoker/op.h, ops/op_user.c) on the whole uint8
     * image after the head; u.user holds where its arguments are. */
    STK_OP_USER,
} stk_op_kind;

typedef enum stk_pad_mode {
    STK_PAD_CONSTANT = 0, /* fill value */
    STK_PAD_EDGE,         /* repeat the edge pixel */
    STK_PAD_REFLECT,      /* mirror without repeating the edge: 2 1 | 0 1 2 */
    STK_PAD_SYMMETRIC,    /* mirror repeating the edge:         1 0 | 0 1 2 */
} stk_pad_mode;

#define STK_SPEC_MAX_PARAMS 4 /* arguments of an op described by a schema (u.num) */

struct stk_spec_opdef;

typedef struct stk_spec_op {
    stk_op_kind kind;
    const struct stk_spec_opdef *def; /* static: the table row that parsed it */
    int col;      /* column of the op name (of `padding=` for an implied pad) */
    int arg_col;  /* column of the size / main argument, for shape errors */
    union {
        struct {
            uint32_t left, top, right, bottom;
            stk_pad_mode mode;
            uint32_t nfill;                   /* 1 (broadcast) or per channel */
            uint8_t fill[STK_SPEC_MAX_LIST];  /* pixel values 0-255 */
            int fill_col;
        } pad;
        struct {
            uint32_t height, width;
        } crop; /* random_crop, center_crop */
        struct {
            double p; /* probability of flipping, in [0, 1] */
        } flip;   /* hflip, vflip */
        struct {
            uint32_t nmean, nstd; /* 1 (broadcast) or per channel */
            double mean[STK_SPEC_MAX_LIST], std[STK_SPEC_MAX_LIST];
            int mean_col, std_col;
        } normalize;
        struct {
            stk_dtype dtype;
            stk_layout layout;
        } to;
        struct {
            uint32_t height, width;
            double scale[2]; /* area fraction range, 0 < lo <= hi */
            double ratio[2]; /* aspect (w/h) range, 0 < lo <= hi */
            int bicubic;     /* interpolation=: 0 bilinear, 1 bicubic, 2 nearest */
        } rrc;
        struct {
            uint32_t height, width; /* `resize H,W` */
            int shorter;            /* `resize S`: the shorter side to S (height = width = S) */
            int bicubic;            /* interpolation=: 0 bilinear, 1 bicubic, 2 nearest */
        } resize;
        struct {
            double lo, hi;                   /* angle range in degrees, lo <= hi */
            uint32_t nfill;                  /* 1 (broadcast) or per channel */
            uint8_t fill[STK_SPEC_MAX_LIST]; /* pixel values 0-255 */
            int fill_col;
        } rotate;
        struct {
            double deg[2];    /* angle range, degrees */
            double tr[2];     /* translate fractions of width, height (0: none) */
            double scale[2];  /* scale range ({1, 1}: none) */
            double shear[4];  /* x range, y range, degrees */
            int nearest;      /* interpolation: 1 nearest (default), 0 bilinear */
            uint32_t nfill;
            uint8_t fill[STK_SPEC_MAX_LIST];
            int fill_col;
        } affine;
        struct {
            /* Factor ranges; an op is on when its flag is set (torchvision
             * drops a factor whose range is exactly {1}, or {0} for hue). */
            int has_b, has_c, has_s, has_h;
            double b[2], c[2], s[2], h[2];
        } jitter;
        struct {
            double v[STK_SPEC_MAX_PARAMS]; /* the row's params, in order */
        } num; /* ops parsed from their schema (stk_spec_opdef.params) */
        struct {
            uint32_t kx, ky;  /* odd kernel sizes, x (width) then y, as torchvision */
            double sigma[2];  /* sigma range, 0 < lo <= hi */
        } blur;
        struct {
            double p;
            double scale[2], ratio[2]; /* 0 < lo <= hi */
            uint32_t nvalue;           /* 1 (broadcast) or per channel */
            int random;                /* value=random: standard normal noise */
            double value[STK_SPEC_MAX_LIST];
            int value_col;
        } erase;
        struct {
            double p;
            uint32_t n; /* the next n ops form the group */
        } apply;
        struct {
            int nopt;                      /* minimum-IoU options; >= 1 means no crop */
            double opt[STK_SPEC_MAX_LIST];
            double scale[2], ratio[2];     /* 0 < lo <= hi */
            int trials;                    /* crops tried per drawn option */
        } bbox;
        struct {
            int nargs; /* the stage's arguments: bytes [a[k], b[k]) of the text */
            int a[STK_SPEC_MAX_ARGS], b[STK_SPEC_MAX_ARGS];
        } user; /* STK_OP_USER: parsed again by the op's hook at compile */
    } u;
} stk_spec_op;

typedef struct stk_spec {
    const char *text; /* borrowed: the text parsed */
    const char *preset; /* static: the preset name the text starts with, or NULL */
    int nops;
    stk_spec_op ops[STK_SPEC_MAX_OPS];
    /* The output format: from `to`, or the defaults (u8 hwc; f32 chw when
     * there is a normalize). */
    stk_dtype dtype;
    stk_layout layout;
    int has_normalize;
} stk_spec;


/* ---------------------------------------------------------------------- */
/* Op rows: what the parser needs to know about an op                      */
/* ---------------------------------------------------------------------- */

/* Order flags (stk_spec_opdef.order). */
enum {
    STK_ORD_FIRST = 1 << 0,  /* only as the first stage (decode) */
    STK_ORD_LAST = 1 << 1,   /* only as the last stage; sets the output (to) */
    STK_ORD_ONCE = 1 << 2,   /* at most once; later pixel ops are refused (normalize) */
    STK_ORD_PIXELS = 1 << 3, /* works on pixel values: before normalize */
    STK_ORD_FLOAT = 1 << 4,  /* turns pixels into floats (rotate, color_jitter) */
    STK_ORD_U8 = 1 << 5,     /* works on uint8 pixels: before any STK_ORD_FLOAT op */
};

/* One argument of an op described by a schema. Positional arguments fill
 * the params in order; `name=value` sets one by name. */
typedef struct stk_spec_param {
    const char *name;   /* key, and the name in messages */
    int whole;          /* 1: a whole number */
    double lo, hi;      /* accepted range, inclusive */
    int required;       /* else `def` when absent */
    double def;
} stk_spec_param;

typedef struct stk_spec_parser stk_spec_parser;
typedef struct stk_spec_stage stk_spec_stage;

/* A row of the op table, as the parser sees it (ops/op.h embeds it). */
typedef struct stk_spec_opdef {
    const char *name;         /* canonical name, lower case */
    const char *aliases;      /* other names, '|'-separated, or NULL */
    stk_op_kind kind;
    unsigned order;           /* STK_ORD_* */
    const char *order_why;    /* completes "X must come before normalize ..." */
    /* Parse one stage into ops (stk_spec_new_op), or NULL: the generic
     * walker over `params` (messages name the op and the param). */
    int (*parse)(stk_spec_parser *P, const stk_spec_stage *st,
                 const struct stk_spec_opdef *def);
    const stk_spec_param *params; /* with parse == NULL: at most STK_SPEC_MAX_PARAMS */
    int nparams;
    const char *usage;        /* the arguments as docs/pipeline.md writes them (messages) */
} stk_spec_opdef;

/* Parse `text` into *out (which borrows text) with the ops of `table`
 * (n rows; ops/op.h's stk_spec_parse passes the op table). Returns 0, or
 * STK_ESPEC / STK_EINVAL via stk_fail with the column-and-caret message.
 *
 * A spec may be a named preset (imagenet-train-few, imagenet-train-extensive,
 * imagenet-val), alone or followed by one `| to DTYPE [LAYOUT]` that replaces
 * the preset's own `to`. The ops of the preset are stored as if written out;
 * their columns point at the preset name. */
int stk_spec_parse_ops(const char *text, const stk_spec_opdef *const *table, int n,
                       stk_spec *out);

/* The text a preset stands for, or NULL when `name` is not a preset
 * (case-insensitive). */
const char *stk_spec_preset(const char *name);

/* Report an error at `column` (1-based) of `spec`: sets the message
 *   pipeline spec, column N: <formatted>
 *     <spec>
 *     <caret under column N>
 * and returns STK_ESPEC. */
int stk_spec_fail(const char *spec, int column, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---------------------------------------------------------------------- */
/* Toolkit for op parsers (spec.c)                                         */
/* ---------------------------------------------------------------------- */

#define STK_SPEC_TOK_SHOW 40 /* bytes of a token quoted in a message */

/* A token: bytes [a, b) of the text (may contain whitespace next to ',' or
 * '='); eq is the offset of its first '=', or -1. */
typedef struct stk_spec_tok {
    int a, b, eq;
} stk_spec_tok;

struct stk_spec_stage {
    stk_spec_tok name;
    int nargs;
    stk_spec_tok args[STK_SPEC_MAX_ARGS];
    int after_name; /* offset of the first non-space byte after the name */
    int end;        /* offset of the '|' ending the stage, or the length */
};

struct stk_spec_parser {
    const char *s; /* borrowed: the text */
    int len;
    stk_spec *spec; /* borrowed: the output */
    const stk_spec_opdef *const *table; /* borrowed: the ops known */
    int ntable;
};

/* printf arguments quoting bytes [a, b): "%.*s" */
#define STK_SPEC_TOKARG(P, a, b)                                                              \
    ((b) - (a) > STK_SPEC_TOK_SHOW ? STK_SPEC_TOK_SHOW : (b) - (a)), (P)->s + (a)

/* stk_spec_fail at byte offset `off` (0-based). */
int stk_spec_err(const stk_spec_parser *P, int off, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int stk_spec_skip_ws(const stk_spec_parser *P, int i, int b);
int stk_spec_trim_end(const stk_spec_parser *P, int a, int b);
/* [a, b) is `word`, case-insensitively. */
int stk_spec_tok_is(const stk_spec_parser *P, int a, int b, const char *word);

/* The number at [a, b). `ctx` completes "expected a number <ctx>". */
int stk_spec_number(const stk_spec_parser *P, int a, int b, double *out, const char *ctx);

typedef struct stk_spec_numlist {
    int n;
    double v[STK_SPEC_MAX_LIST];
    int a[STK_SPEC_MAX_LIST], b[STK_SPEC_MAX_LIST]; /* offsets of each item */
} stk_spec_numlist;

/* A comma list of numbers in [a, b). */
int stk_spec_list(const stk_spec_parser *P, int a, int b, stk_spec_numlist *L, const char *ctx);

/* A list of whole numbers in [lo, hi] whose length is one of `counts`
 * (a bit mask: bit k set allows k items; 0 allows any length). `out` must
 * hold the largest allowed length. */
int stk_spec_ints(const stk_spec_parser *P, int a, int b, unsigned counts, uint32_t lo,
                  uint32_t hi, uint32_t *out, int *n, const char *ctx, const char *count_msg);

/* One number, or a range `A:B` (also `A,B`), in [a, b); *n = 1 or 2. */
int stk_spec_range(const stk_spec_parser *P, int a, int b, double v[2], int *n, const char *ctx);

/* Refuse a value whose use in float32 arithmetic overflows: 1/(255 v),
 * 1/v and m/v must be finite floats for every `m` of means[0..nm). */
int stk_spec_finite_recip(const stk_spec_parser *P, int a, int b, double v, const double *means,
                          int nm, const char *what);

/* One argument of a stage, as stk_spec_next_arg hands it over, and the
 * walk's state (start from {0}). */
typedef struct stk_spec_arg {
    int next;              /* arguments handed over so far */
    unsigned seen;         /* bit k: key k was given */
    const stk_spec_tok *t; /* the whole argument */
    int key;               /* index into the op's key table; -1 for a positional argument */
    int ka, kb;            /* the key (keyed arguments only) */
    int va, vb;            /* the value: after '=', or the whole positional argument */
} stk_spec_arg;

/*
 * The arguments of stage st, one per call and in order: 1 with *a filled,
 * 0 after the last, < 0 on error. `keys` lists the op's keys (NULL-terminated;
 * aliases as "mode|padding_mode"), `known` is what an unknown key's message
 * lists (NULL: the op takes no key=value arguments). Unknown keys and a key
 * given twice are reported here; positional arguments are the op's to count.
 */
int stk_spec_next_arg(const stk_spec_parser *P, const stk_spec_stage *st,
                      const char *const *keys, const char *known, stk_spec_arg *a);
int stk_spec_unexpected(const stk_spec_parser *P, const stk_spec_stage *st,
                        const stk_spec_tok *t);
int stk_spec_twice(const stk_spec_parser *P, int ka, int kb);

/* Append an op of `def` at column col_off + 1 (zeroed, col and arg_col
 * set). NULL with *rc set when the spec has too many ops. */
stk_spec_op *stk_spec_new_op(stk_spec_parser *P, const stk_spec_opdef *def, int col_off,
                             int *rc);

#endif
