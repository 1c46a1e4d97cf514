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
 */
#ifndef STK_OPS_PLAN_H
#define STK_OPS_PLAN_H

#include "core/image.h"
#include "core/rng.h"
#include "core/util.h"
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
 * What a worker hands the plan for one sample: decoded pixels, or the bytes
 * of an encoded image (JPEG/PNG) when the dataset stores those.
 */
typedef struct stk_plan_input {
    const stk_image_view *image; /* decoded pixels, or NULL */
    const uint8_t *encoded;      /* when image is NULL */
    size_t encoded_size;
    /* Optional (NULL: not measured): stk_ticks() spent inside the image
     * decoder are added here, so the loader's profile and `stoker doctor`
     * can tell decoding from the pixel work that follows it. */
    uint64_t *decode_ticks;
    /* Optional: the sample's boxes (XYXY, source pixels), which
     * random_bbox_crop's draw reads (NULL, 0: none). */
    const float *boxes;
    uint32_t nboxes;
    /* Optional (0: none): the decode budget of an encoded image, in bytes
     * (stk_codec_limits.max_bytes; the loader's share of memory_limit per
     * worker thread, docs/engine.md). An image whose decode, or the
     * pipeline's own buffers for it, would need more is refused with
     * STK_EDATA, naming the bytes and the budget. */
    uint64_t decode_budget;
    /* Optional (NULL: not measured): raised to the largest memory the
     * decoder allocated for itself (beyond `scratch`) in one decode. */
    uint64_t *decode_own_bytes;
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

/*
 * What one run of an image plan decided (tests and tools: the random
 * parameters, the DCT scale, the region decoded). stk_plan_trace_input
 * probes the sample and draws exactly what stk_plan_run_input would draw
 * from the same stream, without decoding or writing anything.
 */
#define STK_TRACE_FOPS 4
typedef struct stk_plan_trace {
    uint32_t src_width, src_height; /* the image entering the geometry */
    int resized;          /* a resize or random_resized_crop ran */
    int rrc_attempt;      /* 1..10 the attempt accepted, 0 the central fallback,
                             -1 no random_resized_crop */
    int64_t box[4];       /* x, y, w, h: the source rectangle resampled (the
                             crop of random_resized_crop; the whole view for a
                             resize, whose crops are in off[]) */
    double scale[2];      /* source pixels per output pixel, x and y */
    int32_t off[2];       /* x, y offset of the output in the resized grid */
    unsigned scale_denom; /* JPEG DCT scale 1, 2, 4 or 8 (1 for PNG and raw) */
    uint32_t region[4];   /* x, y, w, h at full resolution: what was decoded */
    int hflip, vflip;     /* the output is mirrored */
    int nrot;
    double angle[4];      /* the first rotations in degrees, signs as applied */
    int njitter;
    int perm[4];          /* first color_jitter: order of 0 brightness,
                             1 contrast, 2 saturation, 3 hue */
    double factor[4];     /* its factors; NaN for an op that is off */
    int ngray;            /* grayscale steps applied */
    int nblur;            /* gaussian_blur steps applied */
    double sigma;         /* the first one's sigma (0 when none) */
    int applied;          /* bit k: the k-th random_apply (k < 31) ran its group */
    int nerase;           /* rectangles erased */
    int32_t erase[4];     /* the first: top, left, h, w */
    int rot_affine[4];    /* rotation r is an affine stage; its drawn angle, tx, ty,
                             scale, shear x, shear y (before any flip is moved) */
    double affine[4][6];
    int naug;             /* augmentation-policy steps drawn (ops/augment.h) */
    int aug_prim[32];     /* STK_AUG_*: the primitive */
    int aug_bin[32];      /* its magnitude bin, -1 for none */
    int aug_neg[32];      /* its magnitude was negated */
    double aug_mag[32];   /* the magnitude torchvision's _apply_op receives */
    /* The first STK_TRACE_FOPS float ops (ops/op.h, STK_OP_FLOAT) that
     * applied: their names and the parameters their draw hooks drew (each
     * op's file says what they are). */
    int nfloat;
    const char *float_name[STK_TRACE_FOPS];
    double float_param[STK_TRACE_FOPS][8];
} stk_plan_trace;

/*
 * Fields that follow the image (ops/spatial.c): masks resampled with
 * nearest neighbour and boxes transformed, by the same geometric draws as
 * the image, in torchvision.transforms.v2's semantics (docs/fields.md).
 */
#define STK_MAX_MASKS 4
typedef struct stk_spatial {
    uint32_t nmasks;
    /* In: single-channel uint8 masks of the source image's size. Out:
     * out_h x out_w bytes each (stk_plan_output's H and W). */
    stk_image_view mask_in[STK_MAX_MASKS];
    uint8_t *mask_out[STK_MAX_MASKS];
    /* In: nboxes XYXY boxes in source pixels (also what random_bbox_crop
     * reads: the input's boxes are taken from here). Out: the kept boxes,
     * in order, in boxes_out (room for nboxes), keep[i] = whether box i was
     * kept, nkept their count. A box is kept when it survives
     * random_bbox_crop and its clipped width and height are >= min_size. */
    const float *boxes_in;
    uint32_t nboxes;
    float *boxes_out;
    uint8_t *keep;
    uint32_t nkept;
    float min_size;
    /* Optional (NULL: not wanted): the geometric steps as they ran, one row
     * of STK_GEO_VALUES doubles each (kind, top, left, h, w, a[6]; kinds
     * STK_GEO_*), at most STK_GEO_MAX_STEPS rows; ngeo gets their count. */
    double *geo_out;
    uint32_t ngeo;
} stk_spatial;

/* The rows of stk_spatial.geo_out (the loader's "geometry" field). */
#define STK_GEO_VALUES 11
#define STK_GEO_MAX_STEPS (2 * 32 + 32)
enum {
    STK_GEO_HFLIP = 0,  /* mirror left-right */
    STK_GEO_VFLIP = 1,  /* mirror top-bottom */
    STK_GEO_CROP = 2,   /* keep top, left, h, w */
    STK_GEO_RESIZE = 3, /* to h, w */
    STK_GEO_ROTATE = 4, /* a[0] degrees, as torchvision's F.rotate(angle) */
    STK_GEO_AFFINE = 5, /* a[0..5]: F.affine(angle, (tx, ty), scale, (shx, shy)) */
    STK_GEO_BBOX_CROP = 6, /* random_bbox_crop's crop: top, left, h, w */
    STK_GEO_PAD = 7,    /* top, left, h = bottom, w = right; a[0] the stk_pad_mode */
};

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

#endif
