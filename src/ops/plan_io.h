/*
 * plan_io.h — what one run of a compiled plan takes and gives (internal):
 * the sample's input (stk_plan_input), the trace of what a run drew
 * (stk_plan_trace), and the fields that follow the image (stk_spatial and
 * the rows of the loader's "geometry" field).
 *
 * Types only, below every plan: the front door (plan.h), the image plan
 * (image_plan.h) and the ops that fill a trace (a float op's draw hook,
 * op.h) include this header, so none of them includes another's for its
 * types (docs/layers.md, "Include circles").
 */
#ifndef STK_OPS_PLAN_IO_H
#define STK_OPS_PLAN_IO_H

#include "core/image.h"
#include "stoker/stoker.h"

#include <stddef.h>
#include <stdint.h>

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

#endif
