/*
 * spec.h — the parsed form of a pipeline spec (internal).
 *
 * stk_spec_parse turns the text of a spec (docs/pipeline.md) into a flat list
 * of ops with every argument resolved to numbers and enums, and every check
 * that does not depend on the image shape already done: unknown ops, bad
 * numbers, unknown keys, `to` not last, normalize twice, pad after normalize,
 * u8 output of normalized values. What does depend on the shape (a crop
 * larger than its input, a normalize or fill with the wrong channel count,
 * reflect padding wider than the image) is checked by stk_plan_compile, which
 * reports it through stk_spec_fail with the column each op remembers here.
 *
 * One spec stage may produce two ops: `random_crop 32 padding=4` is stored as
 * a pad op followed by a random_crop op, exactly as if the user had written
 * `pad 4 | random_crop 32`.
 *
 * Order rules checked here: `decode` only first; `to` only last; resize,
 * random_resized_crop, rotate and color_jitter before normalize (they work
 * on pixel values, normalize is folded into the output store).
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
} stk_op_kind;

typedef enum stk_pad_mode {
    STK_PAD_CONSTANT = 0, /* fill value */
    STK_PAD_EDGE,         /* repeat the edge pixel */
    STK_PAD_REFLECT,      /* mirror without repeating the edge: 2 1 | 0 1 2 */
    STK_PAD_SYMMETRIC,    /* mirror repeating the edge:         1 0 | 0 1 2 */
} stk_pad_mode;

typedef struct stk_spec_op {
    stk_op_kind kind;
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
        } rrc;
        struct {
            uint32_t height, width; /* `resize H,W` */
            int shorter;            /* `resize S`: the shorter side to S (height = width = S) */
        } resize;
        struct {
            double lo, hi;                   /* angle range in degrees, lo <= hi */
            uint32_t nfill;                  /* 1 (broadcast) or per channel */
            uint8_t fill[STK_SPEC_MAX_LIST]; /* pixel values 0-255 */
            int fill_col;
        } rotate;
        struct {
            /* Factor ranges; an op is on when its flag is set (torchvision
             * drops a factor whose range is exactly {1}, or {0} for hue). */
            int has_b, has_c, has_s, has_h;
            double b[2], c[2], s[2], h[2];
        } jitter;
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

/* Parse `text` into *out (which borrows text). Returns 0, or STK_ESPEC /
 * STK_EINVAL via stk_fail with the column-and-caret message.
 *
 * A spec may be a named preset (imagenet-train-few, imagenet-train-extensive,
 * imagenet-val), alone or followed by one `| to DTYPE [LAYOUT]` that replaces
 * the preset's own `to`. The ops of the preset are stored as if written out;
 * their columns point at the preset name. */
int stk_spec_parse(const char *text, stk_spec *out);

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

#endif
