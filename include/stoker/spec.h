/*
 * stoker/spec.h — the pipeline spec language: checking a spec and
 * describing the op table (docs/pipeline.md). User-defined ops, the
 * plugin ABI, are in stoker/op.h.
 */
#ifndef STOKER_SPEC_H
#define STOKER_SPEC_H

#include "stoker/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Pipeline spec                                                             */
/* ------------------------------------------------------------------------ */

/* Check a spec against an input shape without creating a loader; height =
 * width = channels = 0 means images of any size (encoded datasets). On success
 * fills the output shape (3 dims in the output layout), dtype and layout.
 * On failure returns STK_ESPEC with stk_errmsg() pointing at the column,
 * STK_EINVAL for an oversized input shape, STK_ELIMIT for rows too
 * wide. Keeps no state: any number of threads at once. */
STK_API int stk_spec_check(const char *spec, uint32_t height, uint32_t width,
                           uint32_t channels, int64_t out_shape[3],
                           stk_dtype *dtype, stk_layout *layout);

/* Check the text of a spec alone: op names, arguments and their ranges, the
 * order rules, as stk_spec_check does before it looks at an input shape.
 * What depends on the input (a crop larger than the image, channel counts,
 * a fixed output size for images of any size) is not checked. Returns 0, or
 * STK_ESPEC (STK_EINVAL for NULL) with stk_errmsg() pointing at the column.
 * Keeps no state: any number of threads at once. */
STK_API int stk_spec_validate(const char *spec);

/* The ops of the spec language, as the op table describes them (the source
 * of the Python transform classes and of docs/pipeline.md's op list). */
#define STK_OP_MAX_PARAMS 4

/* One argument of an op whose arguments are a schema (stk_op_info). */
typedef struct stk_op_param {
    const char *name;   /* lent, static: the key (`name=value`) */
    int32_t whole;      /* 1: a whole number */
    int32_t required;   /* 1: no default */
    double lo, hi;      /* accepted range, inclusive (the parser checks it) */
    double def;         /* the value when absent (required == 0) */
    uint64_t reserved_[2]; /* zeroed by the library */
} stk_op_param;

typedef struct stk_op_info {
    const char *name;        /* lent, static: the op's name in a spec */
    const char *aliases;     /* other names, '|'-separated, or NULL */
    const char *usage;       /* its arguments as docs/pipeline.md writes them */
    const char *torchvision; /* the torchvision.transforms class it mirrors, or NULL */
    /* Number of params[] below, or -1 when the op parses its own arguments
     * (lists, ranges, words: the schema is not described here). */
    int32_t nparams;
    int32_t reserved32_;     /* zeroed by the library */
    stk_op_param params[STK_OP_MAX_PARAMS]; /* positional order = this order */
    uint64_t reserved_[4];   /* zeroed by the library */
} stk_op_info;

/* The number of ops in the table (with `plugin`; user-defined ops, registered
 * at run time, are not counted). When 0 <= index < that number and `info`
 * is not NULL, fills *info with op `index` (in the order of the "known ops"
 * list); otherwise leaves *info alone. Static data: any number of threads at
 * once. */
STK_API int stk_op_describe(int index, stk_op_info *info);

#ifdef __cplusplus
}
#endif

#endif /* STOKER_SPEC_H */
