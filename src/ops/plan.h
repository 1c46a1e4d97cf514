/*
 * plan.h — a pipeline spec compiled for one input shape, or for images of
 * any size (internal).
 *
 * stk_plan_compile parses the spec text (docs/pipeline.md) and resolves it
 * against the dataset's fixed sample shape into a plan: the output shape,
 * dtype and layout, and the fused kernel's constants (per-channel scale and
 * bias folding ToTensor's 1/255 and Normalize's mean/std, the geometry of
 * pad/crop/flip). A plan is immutable and shared by all worker threads.
 *
 * stk_plan_run draws the sample's random parameters from `rng` (in op order,
 * so results are a pure function of the stream) and writes the finished
 * sample straight into `out` (its row of the batch buffer): geometry, value
 * transform, dtype conversion and layout happen in one pass over the output.
 *
 * Compiled with in_height = in_width = in_channels = 0, or with image ops
 * (resize, random_resized_crop, rotate, color_jitter, posterize, solarize:
 * every op but pad, crops, flips, normalize, to, decode), the plan is an image
 * pipeline (image_plan.h): it takes encoded or any-size input through
 * stk_plan_run_input and the worker's scratch.
 *
 * This is the front door of three layers, each of which uses only the ones
 * after it: plan.c (parse, choose, dispatch) -> image_plan.c (the image
 * pipeline, whose prefix of pads is a fixed plan) -> fixed_plan.c (the
 * fused fixed-shape kernel). The types of a run (input, trace, fields) are
 * plan_io.h's, under all three.
 */
#ifndef STK_OPS_PLAN_H
#define STK_OPS_PLAN_H

#include "core/image.h"
#include "core/rng.h"
#include "core/util.h"
#include "ops/plan_io.h"
#include "stoker/stoker.h"

typedef struct stk_plan stk_plan;

/* Parse + compile. in_* all 0: images of any size. On error returns
 * STK_ESPEC (syntax, unknown op, bad argument — message shows the spec with
 * a caret under the column and what was expected) or STK_EINVAL/STK_ENOMEM,
 * via stk_fail. */
int stk_plan_compile(const char *spec, uint32_t in_height, uint32_t in_width,
                     uint32_t in_channels, stk_plan **out);
void stk_plan_free(stk_plan *p);

/* Output per sample: shape in the output layout, dtype, layout, bytes. */
void stk_plan_output(const stk_plan *p, int64_t shape[3], stk_dtype *dtype,
                     stk_layout *layout, size_t *sample_bytes);

/* Run on one sample. `in` must have the compiled shape (else STK_EINVAL).
 * `rng` may be NULL only when the plan draws nothing. `out` needs no
 * alignment; the kernel may store a tail element twice with the same value.
 * A plan with image stages (resize, rotate, color_jitter...) allocates a
 * scratch per call here; the loader uses stk_plan_run_input instead. */
int stk_plan_run(const stk_plan *p, const stk_image_view *in, stk_rng *rng, void *out);

/*
 * Run on one sample of any kind. A plan compiled for a fixed input shape
 * (in_* > 0) takes images of that shape (stk_plan_run). A plan compiled for
 * variable-size input (in_height = in_width = in_channels = 0: datasets of
 * encoded images, or raw images of varying shape) decodes encoded input
 * itself — only the region and DCT scale its geometry needs — and resizes to
 * its fixed output. `scratch` is the calling thread's own buffer for decoded
 * pixels and intermediates; `in` must not point into it.
 * Errors: STK_EDATA for an undecodable image (message from the codec),
 * STK_EINVAL for input the plan cannot take.
 */
int stk_plan_run_input(const stk_plan *p, const stk_plan_input *in, stk_rng *rng, void *out,
                       stk_scratch *scratch);

/* Compile for a pipeline whose samples carry masks or boxes: always the
 * image pipeline, ops before the last pad only pads, no augmentation
 * policy. Otherwise as stk_plan_compile (the image's pixels equal it). */
int stk_plan_compile_spatial(const char *spec, uint32_t in_height, uint32_t in_width,
                             uint32_t in_channels, stk_plan **out);

/* stk_plan_run_input plus the spatial fields. `work` is a second scratch
 * of the caller's for the masks. STK_EDATA when a mask's size is not the
 * image's. */
int stk_plan_run_spatial(const stk_plan *p, const stk_plan_input *in, stk_rng *rng, void *out,
                         stk_scratch *scratch, stk_spatial *sp, stk_scratch *work);

/* STK_EINVAL for a fixed-shape plan without image stages. */
int stk_plan_trace_input(const stk_plan *p, const stk_plan_input *in, stk_rng *rng,
                         stk_plan_trace *trace);

/* The image plan of a compiled plan, or NULL for a fixed-shape one (the
 * GPU image pipeline, src/gpu/stage.c, reads it through image_plan.h). */
typedef struct stk_imgplan stk_imgplan;
const stk_imgplan *stk_plan_image(const stk_plan *p);

#endif
