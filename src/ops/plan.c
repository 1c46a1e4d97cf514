/*
 * plan.c — the front door of a compiled pipeline spec (plan.h): parse the
 * spec, choose the plan that runs it, dispatch every run to it.
 *
 * Two kinds of plan share this front door. Specs of pad / crop / flip /
 * normalize / to on raw images of one fixed shape compile into a fixed
 * plan (fixed_plan.c: the fused kernel). Everything else — input of any
 * size (in_height = in_width = in_channels = 0: encoded images, raw images
 * of varying shape) and specs with resize, random_resized_crop, rotate,
 * color_jitter, a uint8 point op or a float op (the STK_OP_LUT and
 * STK_OP_FLOAT rows of the op table) — compiles into an image plan
 * (image_plan.c), which then does all the work and may itself use a fixed
 * plan as its prefix (the ops up to its last pad). This file keeps only
 * the output description and the input shape, and dispatches.
 *
 * The path reads one way: plan.c -> image_plan.c -> fixed_plan.c, and
 * plan.c -> fixed_plan.c; none includes a header of one before it (the
 * types of a run are plan_io.h's, under all three).
 *
 * Invariants: a plan is immutable after compile and shared by every worker;
 * a run touches only its stack, the caller's scratch and `out`.
 */
#include "ops/plan.h"

#include "core/error.h"
#include "core/util.h"
#include "ops/fixed_plan.h"
#include "ops/image_plan.h"
#include "ops/op.h"

#include <stdlib.h>
#include <string.h>

#define MAX_AXIS STK_PLAN_MAX_AXIS
#define MAX_CHANNELS STK_PLAN_MAX_CHANNELS

struct stk_plan {
    uint32_t in_h, in_w, channels; /* the compiled input shape (0: any) */
    uint32_t out_h, out_w;         /* image plans: the output description */
    stk_dtype dtype;
    stk_layout layout;
    size_t sample_bytes;
    stk_fixplan *fixed;  /* owned: a fixed-shape plan, which does all the work, or */
    stk_imgplan *img;    /* owned: an image pipeline (image_plan.c) */
};

static int compile_any(const char *text, uint32_t in_height, uint32_t in_width,
                       uint32_t in_channels, int spatial, stk_plan **out);

int stk_plan_compile(const char *text, uint32_t in_height, uint32_t in_width,
                     uint32_t in_channels, stk_plan **out)
{
    return compile_any(text, in_height, in_width, in_channels, 0, out);
}

int stk_plan_compile_spatial(const char *text, uint32_t in_height, uint32_t in_width,
                             uint32_t in_channels, stk_plan **out)
{
    return compile_any(text, in_height, in_width, in_channels, 1, out);
}

static int compile_any(const char *text, uint32_t in_height, uint32_t in_width,
                       uint32_t in_channels, int spatial, stk_plan **out)
{
    int rc;
    stk_spec *spec = NULL;
    stk_plan *p = NULL;

    if (!out)
        return stk_fail(STK_EINVAL, "stk_plan_compile: out is NULL");
    *out = NULL;
    if (!text)
        return stk_fail(STK_EINVAL, "pipeline spec is NULL");
    int variable = in_height == 0 && in_width == 0 && in_channels == 0;
    if (!variable && (in_height == 0 || in_width == 0 || in_channels == 0 ||
                      in_height > MAX_AXIS || in_width > MAX_AXIS || in_channels > MAX_CHANNELS))
        return stk_fail(STK_EINVAL,
                        "pipeline spec: input shape %ux%ux%u (HxWxC) is not supported "
                        "(sides 1..%d, channels 1..%d; all 0 for images of any size)",
                        in_height, in_width, in_channels, MAX_AXIS, MAX_CHANNELS);
    spec = malloc(sizeof *spec);
    if (!spec)
        return stk_fail(STK_ENOMEM, "pipeline spec: out of memory");
    if ((rc = stk_spec_parse(text, spec)) < 0)
        goto done;
    if (!spatial && !stk_imgplan_needed(spec, in_height, in_width, in_channels)) {
        p = calloc(1, sizeof *p);
        if (!p) {
            rc = stk_fail(STK_ENOMEM, "pipeline spec: out of memory");
            goto done;
        }
        rc = stk_fixplan_compile(text, spec, spec->nops, 0, in_height, in_width, in_channels,
                                 &p->fixed);
        if (rc < 0) {
            free(p);
            goto done;
        }
        p->in_h = in_height;
        p->in_w = in_width;
        p->channels = in_channels;
        *out = p;
        goto done;
    }
    p = calloc(1, sizeof *p);
    if (!p) {
        rc = stk_fail(STK_ENOMEM, "pipeline spec: out of memory");
        goto done;
    }
    rc = stk_imgplan_compile(text, spec, in_height, in_width, in_channels, spatial, &p->img,
                             &p->out_h,
                             &p->out_w, &p->channels, &p->sample_bytes);
    if (rc < 0) {
        free(p);
        goto done;
    }
    p->in_h = in_height;
    p->in_w = in_width;
    p->dtype = spec->dtype;
    p->layout = spec->layout;
    *out = p;
done:
    free(spec);
    return rc;
}

void stk_plan_free(stk_plan *p)
{
    if (!p)
        return;
    stk_imgplan_free(p->img);
    stk_fixplan_free(p->fixed);
    free(p);
}

void stk_plan_output(const stk_plan *p, int64_t shape[3], stk_dtype *dtype, stk_layout *layout,
                     size_t *sample_bytes)
{
    if (p->fixed) {
        stk_fixplan_output(p->fixed, shape, dtype, layout, sample_bytes);
        return;
    }
    stk_output_describe(p->channels, p->out_h, p->out_w, p->dtype, p->layout, p->sample_bytes,
                        shape, dtype, layout, sample_bytes);
}

int stk_plan_run(const stk_plan *p, const stk_image_view *in, stk_rng *rng, void *out)
{
    if (!p || !in || !out || !in->pixels)
        return stk_fail(STK_EINVAL, "stk_plan_run: NULL argument");
    if (p->img) {
        stk_scratch sc = {NULL, 0};
        stk_plan_input pin = {.image = in, .encoded = NULL, .encoded_size = 0};
        int rc = stk_imgplan_run(p->img, &pin, rng, out, &sc, NULL, 1);
        stk_scratch_free(&sc);
        return rc;
    }
    return stk_fixplan_run(p->fixed, in, rng, out);
}

const stk_imgplan *stk_plan_image(const stk_plan *p) { return p ? p->img : NULL; }

int stk_plan_run_input(const stk_plan *p, const stk_plan_input *in, stk_rng *rng, void *out,
                       stk_scratch *scratch)
{
    if (!p || !in)
        return stk_fail(STK_EINVAL, "stk_plan_run_input: NULL argument");
    if (p->img)
        return stk_imgplan_run(p->img, in, rng, out, scratch, NULL, 1);
    if (in->image)
        return stk_plan_run(p, in->image, rng, out);
    return stk_fail(STK_EINVAL, "this pipeline was compiled for raw %ux%ux%u images, not encoded "
                                "ones",
                    p->in_h, p->in_w, p->channels);
}

int stk_plan_run_spatial(const stk_plan *p, const stk_plan_input *in, stk_rng *rng, void *out,
                         stk_scratch *scratch, stk_spatial *sp, stk_scratch *work)
{
    if (!p || !in || !sp || !work)
        return stk_fail(STK_EINVAL, "stk_plan_run_spatial: NULL argument");
    if (!p->img)
        return stk_fail(STK_EINVAL,
                        "stk_plan_run_spatial: the plan was not compiled for masks and boxes");
    return stk_imgplan_run_spatial(p->img, in, rng, out, scratch, sp, work);
}

int stk_plan_trace_input(const stk_plan *p, const stk_plan_input *in, stk_rng *rng,
                         stk_plan_trace *trace)
{
    if (!p || !in || !trace)
        return stk_fail(STK_EINVAL, "stk_plan_trace_input: NULL argument");
    if (!p->img)
        return stk_fail(STK_EINVAL, "stk_plan_trace_input: not an image pipeline");
    stk_scratch sc = {NULL, 0};
    int rc = stk_imgplan_run(p->img, in, rng, NULL, &sc, trace, 0);
    stk_scratch_free(&sc);
    return rc;
}

int stk_spec_check(const char *spec, uint32_t height, uint32_t width, uint32_t channels,
                   int64_t out_shape[3], stk_dtype *dtype, stk_layout *layout)
{
    stk_plan *p = NULL;
    int rc = stk_plan_compile(spec, height, width, channels, &p);
    if (rc < 0)
        return rc;
    stk_plan_output(p, out_shape, dtype, layout, NULL);
    stk_plan_free(p);
    return 0;
}

int stk_spec_validate(const char *spec)
{
    if (!spec)
        return stk_fail(STK_EINVAL, "stk_spec_validate: NULL spec");
    stk_spec *parsed = malloc(sizeof *parsed);
    if (!parsed)
        return stk_fail(STK_ENOMEM, "stk_spec_validate: out of memory");
    int rc = stk_spec_parse(spec, parsed);
    free(parsed);
    return rc < 0 ? rc : 0;
}
