/*
 * op_table.c — the op table: every op of the pipeline spec language, one
 * line each in STK_OPS below (op.h says what a row is and who reads it).
 *
 * The order is the order of the "known ops" list in the unknown-op message
 * and of the did-you-mean search (the first of equally close names wins).
 * To add an op NAME: write src/ops/op_NAME.c defining `const stk_op_desc
 * stk_op_NAME`, add `X(NAME)` here, its test, and its line in
 * docs/pipeline.md. The built-in ops are defined in ops_builtin.c. An op
 * with a schema and a torchvision name gets its Python class from
 * stk_op_describe below, with no Python edit.
 */
#include "ops/op.h"
#include "ops/op_user.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

#define STK_OPS(X)                                                                             \
    X(pad)                                                                                     \
    X(random_crop)                                                                             \
    X(center_crop)                                                                             \
    X(flip)                                                                                    \
    X(vflip)                                                                                   \
    X(normalize)                                                                               \
    X(to)                                                                                      \
    X(decode)                                                                                  \
    X(random_resized_crop)                                                                     \
    X(resize)                                                                                  \
    X(rotate)                                                                                  \
    X(color_jitter)                                                                            \
    X(posterize)                                                                               \
    X(solarize)                                                                                \
    X(invert)                                                                                  \
    X(grayscale)                                                                               \
    X(gaussian_blur)                                                                           \
    X(random_erasing)                                                                          \
    X(random_apply)                                                                            \
    X(affine)                                                                                  \
    X(random_bbox_crop)                                                                        \
    X(auto_augment)                                                                            \
    X(rand_augment)                                                                            \
    X(trivial_augment_wide)                                                                    \
    X(perspective)                                                                             \
    /* one line per op above; this comment ends the list */

#define STK_OP_DECLARE(name) extern const stk_op_desc stk_op_##name;
#define STK_OP_ROW(name) &stk_op_##name.syntax,

STK_OPS(STK_OP_DECLARE)

const stk_spec_opdef *const stk_op_table[] = {STK_OPS(STK_OP_ROW)};

_Static_assert(STK_OP_MAX_PARAMS >= STK_SPEC_MAX_PARAMS, "stk_op_info holds every param");

const int stk_op_count = (int)(sizeof stk_op_table / sizeof stk_op_table[0]);

/* The built-in rows, then `plugin PATH`, then the user-defined ops
 * registered so far (stoker/op.h, op_user.c) — after loading the plugins
 * the spec's own `plugin` stages name, so its later stages can use them. */
int stk_spec_parse(const char *text, stk_spec *out)
{
    int rc = stk_user_preload(text);
    if (rc < 0)
        return rc;
    /* On the stack unless many ops are registered. */
    const stk_spec_opdef *local[96], **rows = local;
    int cap = (int)(sizeof local / sizeof local[0]);
    if (stk_op_count + 1 + stk_user_rows(NULL, 0) > cap) {
        cap = stk_op_count + 1 + STK_USER_OPS_MAX;
        if (!(rows = malloc((size_t)cap * sizeof *rows)))
            return stk_fail(STK_ENOMEM, "pipeline spec: out of memory");
    }
    memcpy(rows, stk_op_table, (size_t)stk_op_count * sizeof *rows);
    rows[stk_op_count] = &stk_op_plugin.syntax;
    int n = stk_op_count + 1;
    n += stk_user_rows(rows + n, cap - n);
    rc = stk_spec_parse_ops(text, rows, n, out);
    if (rows != local)
        free(rows);
    return rc;
}

/* The table's rows, then `plugin PATH` (as the parser lists them; user ops,
 * registered at run time, are not described here). */
int stk_op_describe(int index, stk_op_info *info)
{
    if (info && index >= 0 && index <= stk_op_count) {
        const stk_spec_opdef *d = index < stk_op_count ? stk_op_table[index] : &stk_op_plugin.syntax;
        memset(info, 0, sizeof *info);
        info->name = d->name;
        info->aliases = d->aliases;
        info->usage = d->usage;
        info->torchvision = ((const stk_op_desc *)(const void *)d)->torchvision;
        if (d->parse || !d->params) {
            info->nparams = -1;
        } else {
            info->nparams = d->nparams < STK_OP_MAX_PARAMS ? d->nparams : STK_OP_MAX_PARAMS;
            for (int i = 0; i < info->nparams; i++) {
                const stk_spec_param *p = &d->params[i];
                info->params[i].name = p->name;
                info->params[i].whole = p->whole;
                info->params[i].required = p->required;
                info->params[i].lo = p->lo;
                info->params[i].hi = p->hi;
                info->params[i].def = p->def;
            }
        }
    }
    return stk_op_count + 1;
}
