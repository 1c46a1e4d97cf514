/*
 * image_plan.h — the image pipeline: specs with resize, random_resized_crop,
 * rotate, color_jitter or a uint8 point op (posterize, solarize), and every
 * spec run on images whose size varies (encoded JPEG/PNG, raw images of any
 * shape) (internal; plan.c dispatches here, docs/pipeline.md describes the
 * semantics). It sits between the front door and the fixed plan: plan.c ->
 * image_plan.c -> fixed_plan.c (its prefix of pads); it includes the types
 * of a run (plan_io.h), never plan.h.
 *
 * A compiled image plan is immutable and shared by all workers, like any
 * stk_plan. Running it on one sample touches only the caller's scratch, the
 * stack and the output row.
 */
#ifndef STK_OPS_IMAGE_PLAN_H
#define STK_OPS_IMAGE_PLAN_H

#include "codec/codec.h"
#include "core/util.h"
#include "ops/op.h"
#include "ops/plan_io.h"
#include "ops/spec.h"

typedef struct stk_imgplan stk_imgplan;

/* Whether a parsed spec needs the image pipeline for this input shape
 * (always for variable input, in_* = 0). */
int stk_imgplan_needed(const stk_spec *spec, uint32_t in_h, uint32_t in_w, uint32_t in_c);

/* Compile `spec` (parsed from `text`) for input in_h x in_w x in_c (all 0:
 * any size); `spatial`: for samples with masks or boxes (plan.h,
 * stk_plan_compile_spatial). Fills the output shape. Errors via stk_spec_fail / stk_fail. */
int stk_imgplan_compile(const char *text, const stk_spec *spec, uint32_t in_h, uint32_t in_w,
                        uint32_t in_c, int spatial, stk_imgplan **out, uint32_t *out_h,
                        uint32_t *out_w, uint32_t *out_c, size_t *sample_bytes);
void stk_imgplan_free(stk_imgplan *ip);

/* Run on one sample (plan.h's stk_plan_run_input contract). `trace` may be
 * NULL; with decode_pixels = 0 the sample is only probed and its geometry
 * drawn (trace filled, nothing decoded or written). */
int stk_imgplan_run(const stk_imgplan *ip, const stk_plan_input *in, stk_rng *rng, void *out,
                    stk_scratch *scratch, stk_plan_trace *trace, int decode_pixels);

/* plan.h's stk_plan_run_spatial on an image plan (spatial.c); STK_EINVAL
 * unless it was compiled with `spatial`. */
int stk_imgplan_run_spatial(const stk_imgplan *ip, const stk_plan_input *in, stk_rng *rng,
                            void *out, stk_scratch *scratch, stk_spatial *sp, stk_scratch *work);

#endif
