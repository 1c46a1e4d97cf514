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
 *     random_resized_crop, rotate, color_jitter, normalize, to, decode) are
 *     fused by the compilers themselves; STK_OP_LUT ops are compiled from
 *     their hooks alone, so adding one is one new file and one table line.
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
 */
#ifndef STK_OPS_OP_H
#define STK_OPS_OP_H

#include "core/rng.h"
#include "ops/spec.h"

#include <stdint.h>

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
