/*
 * plan.h — a pipeline spec compiled for one input shape (internal).
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
 */
#ifndef STK_OPS_PLAN_H
#define STK_OPS_PLAN_H

#include "core/image.h"
#include "core/rng.h"
#include "core/util.h"
#include "stoker/stoker.h"

typedef struct stk_plan stk_plan;

/* Parse + compile. On error returns STK_ESPEC (syntax, unknown op, bad
 * argument — message shows the spec with a caret under the column and what
 * was expected) or STK_EINVAL/STK_ENOMEM, via stk_fail. */
int stk_plan_compile(const char *spec, uint32_t in_height, uint32_t in_width,
                     uint32_t in_channels, stk_plan **out);
void stk_plan_free(stk_plan *p);

/* Output per sample: shape in the output layout, dtype, layout, bytes. */
void stk_plan_output(const stk_plan *p, int64_t shape[3], stk_dtype *dtype,
                     stk_layout *layout, size_t *sample_bytes);

/* Run on one sample. `in` must have the compiled shape (else STK_EINVAL).
 * `rng` may be NULL only when the plan draws nothing. `out` needs no
 * alignment; the kernel may store a tail element twice with the same value. */
int stk_plan_run(const stk_plan *p, const stk_image_view *in, stk_rng *rng, void *out);

/*
 * What a worker hands the plan for one sample: decoded pixels, or the bytes
 * of an encoded image (JPEG/PNG) when the dataset stores those.
 */
typedef struct stk_plan_input {
    const stk_image_view *image; /* decoded pixels, or NULL */
    const uint8_t *encoded;      /* when image is NULL */
    size_t encoded_size;
} stk_plan_input;

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

#endif
