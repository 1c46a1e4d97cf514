/*
 * op_user.h — user-defined ops inside the library (internal): the registry
 * of stoker/op.h's ops as rows of the spec parser, the `plugin PATH` stage,
 * and what the image plan calls to compile, draw and run one (op_user.c).
 *
 * A registered op is a stk_user_entry, allocated once and never freed; its
 * first member is a stk_op_desc whose syntax row the parser walks after the
 * built-in rows (op_table.c's stk_spec_parse), so names, the unknown-op
 * list and the did-you-mean suggestion include user ops. The parser stores
 * the byte ranges of the stage's arguments (u.user); the image plan hands
 * them back to the op's parse hook when it compiles, and keeps the state in
 * a stk_user_inst, released with the plan.
 */
#ifndef STK_OPS_OP_USER_H
#define STK_OPS_OP_USER_H

#include "core/rng.h"
#include "ops/op.h"
#include "stoker/op.h"

#define STK_USER_OPS_MAX 1024 /* registrations per process */

/* The rows of the registered ops (at most cap), for the parser; returns the
 * count (rows NULL: only the count). The rows stay valid for the life of
 * the process. */
int stk_user_rows(const stk_spec_opdef **rows, int cap);

/* The `plugin PATH` row (op_user.c), listed with the built-in ops. */
extern const stk_op_desc stk_op_plugin;

/* Load the libraries named by the `plugin PATH` stages of `text` before it
 * is parsed, so that its later stages can name their ops. Errors are spec
 * errors at the path's column. */
int stk_user_preload(const char *text);

/* One user op of a compiled plan: its registration, its state from parse,
 * and the shapes (h, w, c) it takes and gives. */
typedef struct stk_user_inst {
    const struct stk_user_entry *e; /* static: the registration */
    void *state;                    /* owned: from the op's parse, freed by stk_user_release */
    uint32_t in[3], out[3];
} stk_user_inst;

/* Parse op `o`'s arguments (from `text`) into a state and compute its output
 * shape for an input of in[3]. Spec errors name the op at its column. */
int stk_user_compile(const char *text, const stk_spec_op *o, const uint32_t in[3],
                     stk_user_inst *u);
void stk_user_release(stk_user_inst *u);

/* This sample's random parameters (zeroed, then the op's draw hook). */
void stk_user_draw(const stk_user_inst *u, stk_rng *rng, double params[STK_OP_MAX_DRAWS]);

/* Run on the contiguous HWC image `in` (u->in) into `out` (u->out). Errors
 * through stk_fail naming the op: STK_EDATA, or the op's fatal code. */
int stk_user_run(const stk_user_inst *u, const double *params, const uint8_t *in, uint8_t *out);

#endif
