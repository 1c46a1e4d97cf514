/*
 * fixed_plan.h — the fixed-shape plan (internal): pad / crop / flip /
 * normalize / to on raw images of one known shape (CIFAR, MNIST, in-memory
 * arrays), compiled into one fused kernel pass (fixed_plan.c's essay).
 *
 * The bottom of the plan layers: plan.c uses it for a whole spec of such
 * ops, image_plan.c for the prefix of an image pipeline (its ops up to the
 * last pad, written as uint8 HWC); it knows neither of them. Immutable
 * after compile and shared by every worker; a run touches only its stack
 * and `out`.
 */
#ifndef STK_OPS_FIXED_PLAN_H
#define STK_OPS_FIXED_PLAN_H

#include "core/image.h"
#include "core/rng.h"
#include "ops/spec.h"
#include "stoker/stoker.h"

#include <stddef.h>
#include <stdint.h>

#define STK_PLAN_MAX_AXIS ((1 << 30) - 1) /* largest image side at any stage */
#define STK_PLAN_MAX_CHANNELS 1024

typedef struct stk_fixplan stk_fixplan;

/* Compile ops [0, nops) of a parsed spec (`text` for messages) for
 * in_h x in_w x in_c input. With force_u8 the output is uint8 HWC whatever
 * the spec says (an image pipeline's prefix). Errors via stk_spec_fail /
 * stk_fail. */
int stk_fixplan_compile(const char *text, const stk_spec *spec, int nops, int force_u8,
                        uint32_t in_h, uint32_t in_w, uint32_t in_c, stk_fixplan **out);
void stk_fixplan_free(stk_fixplan *p);

/* Output per sample: shape in the output layout, dtype, layout, bytes
 * (any may be NULL). */
/* A plan's output as the public API describes it: the sample's shape in
 * `l`'s order, and each non-NULL out parameter filled (used by this plan
 * and by plan.c for image plans). */
void stk_output_describe(uint32_t channels, uint32_t out_h, uint32_t out_w, stk_dtype d,
                         stk_layout l, size_t bytes, int64_t shape[3], stk_dtype *dtype,
                         stk_layout *layout, size_t *sample_bytes);
void stk_fixplan_output(const stk_fixplan *p, int64_t shape[3], stk_dtype *dtype,
                        stk_layout *layout, size_t *sample_bytes);

/* Run on one sample of the compiled shape (else STK_EINVAL); `rng` may be
 * NULL only when the plan draws nothing. */
int stk_fixplan_run(const stk_fixplan *p, const stk_image_view *in, stk_rng *rng, void *out);

#endif
