/*
 * op.h — the op table: one descriptor per pipeline op (internal).
 *
 * Every op of the spec language is one stk_op_desc, and the table in
 * op_table.c lists them all, one line each. The table is the single source
 * for:
 *
 *   - the parser (ops/spec.c walks it): the name and aliases, the
 *     argument schema or parse hook, the order flags (decode first, to last,
 *     pixel ops before normalize, uint8 ops before the float stages);
 *   - the "known ops" list and the did-you-mean suggestion of an unknown op
 *     (both generated from the names), which the Python tests read to check
 *     that python/stoker/transforms.py and docs/pipeline.md cover every op;
 *   - the public description stk_op_describe (op_table.c): name, aliases,
 *     usage, torchvision class and the argument schema, from which
 *     python/stoker/transforms.py generates the class of every op that has
 *     a schema and a torchvision name (no Python edit for a new such op);
 *   - the plan compilers (plan.c, image_plan.c): `kind` says how the op is
 *     compiled. The built-in kinds (pad, crops, flips, resize,
 *     random_resized_crop, rotate, affine, color_jitter, normalize, to,
 *     decode) are fused by the compilers themselves; STK_OP_LUT and
 *     STK_OP_FLOAT ops are compiled and run from their hooks alone, so
 *     adding one is one new file and one table line.
 *
 * The hooks of a STK_OP_LUT op, both pure functions of their arguments:
 *
 *   draw(arg, rng)   whether the op applies to this sample, from the
 *                    sample's Philox stream (the same calls in the same
 *                    order on every backend: a GPU backend reuses it);
 *   lut(arg, t)      the op as a 256-entry table on uint8 pixel values,
 *                    applied to every channel.
 *
 * Point ops commute with crops and flips but not with resampling or
 * padding, so the image plan applies the composed table of the ops before
 * the resize to the decoded source pixels, and of the ops after it to each
 * resampled uint8 row (docs/pipeline.md, "uint8 point ops").
 *
 * The hooks of a STK_OP_FLOAT op (stk_float_hooks), which works on the
 * planar float image of the pipeline's tail (values in [0, 1] after
 * ToTensor, p[c][x] channel c of pixel x, nc 1 or 3; ops/color.h):
 *
 *   compile(text, op, h, w, nc, state)   once per plan, with the size of
 *                    the image the op sees (the plan's output size): checks
 *                    what needs it, fills `state` (STK_FOP_STATE doubles);
 *   draw(state, rng, param, tr)   per sample, from its Philox stream, in
 *                    spec order (the same calls on every backend): 1 and
 *                    the sample's parameters in `param` (STK_FOP_PARAMS
 *                    doubles, which the trace reports) when the op applies
 *                    to this sample, 0 when it does not;
 *   row(state, param, ck, p, w, nc)   a row-wise op (whole_image 0): one
 *                    row in place, while it is in L1 between other row ops;
 *   begin(state, param, w, h, nc, tmp, ctx)  and
 *   image_row(ctx, ck, src, nc, y, p)   an op that reads other rows
 *                    (whole_image 1): set up once per sample into `ctx`
 *                    (STK_FOP_CTX bytes; `tmp` is w floats of the
 *                    caller's), then output row y from the whole planar
 *                    image `src` (nc planes of h x w floats).
 *
 * image_run.c calls them without knowing the op: a whole-image op ends a
 * segment of the float tail (the rows before it are parked in a float
 * image, image_plan.c's essay), a row op joins the segment it is in. An
 * op that moves pixels (`geometric`) is refused with masks or boxes (they
 * would not follow) and before a flip (flips are folded into the resample,
 * i.e. moved before it, which only a mirror-symmetric op allows).
 */
#ifndef STK_OPS_OP_H
#define STK_OPS_OP_H

#include "core/rng.h"
#include "ops/color.h"
#include "ops/spec.h"

#include <stdint.h>

struct stk_plan_trace; /* ops/plan_io.h */

#define STK_FOP_STATE 16  /* doubles of a float op's compiled state */
#define STK_FOP_PARAMS 8  /* doubles a float op draws per sample */
#define STK_FOP_CTX 4096  /* bytes of a whole-image op's per-sample set-up */

/* A per-sample set-up buffer, aligned for any of the ops' structs. */
typedef union stk_fop_ctx {
    double d[STK_FOP_CTX / sizeof(double)];
    void *p;
} stk_fop_ctx;

typedef struct stk_float_hooks {
    int whole_image; /* 1: begin + image_row (reads other rows); 0: row */
    int geometric;   /* moves pixels: not with masks/boxes, no flip after it */
    /* The GPU colour kernel that runs the op ("gray", src/gpu/stage.c), or
     * NULL: the op keeps a spec on the CPU. */
    const char *gpu_kernel;
    int (*compile)(const char *text, const stk_spec_op *op, uint32_t h, uint32_t w, int nc,
                   double *state);
    int (*draw)(const double *state, stk_rng *rng, double *param, struct stk_plan_trace *tr);
    void (*row)(const double *state, const double *param, const stk_color_kernels *ck,
                float *const *p, int32_t w, int nc);
    void (*begin)(const double *state, const double *param, int32_t w, int32_t h, int nc,
                  float *tmp, stk_fop_ctx *ctx);
    void (*image_row)(const stk_fop_ctx *ctx, const stk_color_kernels *ck, const float *src,
                      int nc, int32_t y, float *const *p);
} stk_float_hooks;

typedef struct stk_op_desc {
    stk_spec_opdef syntax; /* first member: the parser's view of the row */
    /* The torchvision.transforms class the op mirrors (e.g.
     * "RandomPosterize"), or NULL. For an op described by a schema
     * (syntax.params) the Python class of that name is generated from the
     * row (stk_op_describe -> python/stoker/transforms.py): its constructor
     * takes the params in order, positional or by name, with their
     * defaults, and leaves every check to this parser. */
    const char *torchvision;
    /* STK_OP_LUT only. arg = the op's u.num.v (its params, in order). */
    int (*draw)(const double *arg, stk_rng *rng);
    void (*lut)(const double *arg, uint8_t table[256]);
    /* STK_OP_POLICY only: STK_AUG_POLICY_* (ops/augment.h). */
    int aug_policy;
    /* STK_OP_FLOAT only: the op's hooks (above). */
    const stk_float_hooks *fl;
} stk_op_desc;

/* The table (op_table.c), in the order the "known ops" list shows: each
 * entry is the `syntax` member of its op's stk_op_desc. */
extern const stk_spec_opdef *const stk_op_table[];
extern const int stk_op_count;

/* The row that parsed `op`. */
static inline const stk_op_desc *stk_op_desc_of(const stk_spec_op *op)
{
    return (const stk_op_desc *)(const void *)op->def;
}

/* stk_spec_parse_ops over the op table. */
int stk_spec_parse(const char *text, stk_spec *out);

#endif
