/*
 * image_plan_impl.h — what the three parts of the image pipeline share
 * (internal to src/ops/image_*.c): the compiled plan, and the draws of one
 * sample.
 *
 *   image_plan.c   compile: a parsed spec into a stk_imgplan (prefix, head,
 *                  tail, output format);
 *   image_draws.c  the random draws of one sample, a pure function of the
 *                  plan, the size of the image entering the head and the
 *                  sample's Philox stream: no pixels, no allocation, so a
 *                  GPU backend can run it unchanged and hand the result to
 *                  its own kernels;
 *   image_run.c    the pixel work: decode or copy the region the draws
 *                  need, resample, point-op tables, float tail, store.
 */
#ifndef STK_OPS_IMAGE_PLAN_IMPL_H
#define STK_OPS_IMAGE_PLAN_IMPL_H

#include "ops/augment.h"
#include "ops/color.h"
#include "ops/fixed_plan.h"
#include "ops/image_plan.h"
#include "ops/op.h"
#include "ops/op_user.h"
#include "ops/resample.h"

#define MAX_SIDE ((1 << 30) - 1)
#define MAX_ROT 8 /* rotations remembered per sample (more are refused at compile) */
#define MAX_ERASE 8 /* random_erasing stages (more are refused at compile) */
#define MAX_USER 8  /* user-defined ops per spec (more are refused at compile) */
#define MAX_FOP 16  /* float-op (STK_OP_FLOAT) stages per spec (more are refused at compile) */

enum { G_HFLIP, G_VFLIP, G_RCROP, G_CCROP, G_RRC, G_RESIZE, G_LUT, G_BBOX_CROP };
enum { T_HFLIP, T_VFLIP, T_ROTATE, T_JITTER, T_LUT, T_FLOAT, T_APPLY, T_POLICY, T_AFFINE,
       T_USER };
#define MAX_AUG 32 /* policy steps per sample (more are refused at compile) */
/* Steps of the float tail: color_jitter's four colour steps and the
 * rotations are fused by image_run.c; S_FOP runs a STK_OP_FLOAT op through
 * its row's hooks (op.h). */
enum { S_BRIGHT, S_CONTRAST, S_SAT, S_HUE, S_ROT, S_FOP };

typedef struct stk_geo_op {
    int kind;
    double p;              /* flips */
    uint32_t h, w;         /* crop size; rrc/resize output (resize S: h = w = S) */
    int shorter;           /* resize S */
    double scale[2], ratio[2];
    float logr[2];         /* rrc: log(ratio) in float32, as torch */
    const stk_op_desc *lut; /* G_LUT: the op's row (draw and lut hooks) */
    double arg[STK_SPEC_MAX_PARAMS]; /* G_LUT: its arguments */
    /* G_BBOX_CROP (op_bbox_crop.c): the IoU options, crop scale and
     * aspect-ratio ranges, trials per option */
    int nopt;
    double opt[STK_SPEC_MAX_LIST];
    double bscale[2], bratio[2];
    int trials;
} stk_geo_op;

typedef struct stk_tail_op {
    int kind;
    double p;              /* flips */
    double lo, hi;         /* rotate, affine: degrees */
    float fill[3];         /* rotate, affine: in [0, 1] */
    double tr[2], scale[2], shear[4]; /* affine (spec.h's u.affine) */
    int nearest;           /* affine */
    int has[4];            /* jitter: b, c, s, h on */
    double rlo[4], rhi[4];
    const stk_op_desc *lut; /* T_LUT: the op's row; T_FLOAT: the op's row (its fl hooks) */
    double arg[STK_SPEC_MAX_PARAMS];
    double state[STK_FOP_STATE]; /* T_FLOAT: the compile hook's state */
    int spec_at;           /* T_FLOAT: the op's index in the spec (compiled last) */
    uint32_t n;            /* T_APPLY: the next n tail ops are the group (p: its probability) */
    stk_aug_policy pol;     /* T_POLICY */
    int user;              /* T_USER: index into the plan's user[] */
    uint32_t ih, iw;       /* T_POLICY, T_USER: the size of the uint8 image entering it */
} stk_tail_op;

/* random_erasing (op_random_erasing.c), run on the finished output. */
typedef struct stk_erase_op {
    double p, scale[2];
    float logr[2];  /* log(ratio) in float32, as torch */
    float value[3]; /* per channel, in output units */
    int random;     /* value=random: standard normal noise instead */
} stk_erase_op;

/* A pad of the prefix, remembered for the fields that follow the image
 * (ops/spatial.c): the prefix plan itself pads only the image. */
typedef struct stk_pad_step {
    uint32_t left, top, right, bottom;
    int mode; /* stk_pad_mode */
} stk_pad_step;

struct stk_imgplan {
    uint32_t in_h, in_w, in_c; /* 0: any size */
    /* Compiled for masks and boxes (stk_plan_compile_spatial): the prefix
     * holds pads only (listed here), and no augmentation policy runs. */
    int spatial;
    int npads;
    stk_pad_step pads[STK_SPEC_MAX_OPS];
    int nc;                    /* channels through the pipeline and out */
    stk_fixplan *prefix;       /* owned, or NULL: the ops up to the last pad, uint8 HWC */
    uint32_t pre_h, pre_w;
    int ngeo, ntail;
    stk_geo_op geo[STK_SPEC_MAX_OPS];
    stk_tail_op tail[STK_SPEC_MAX_OPS];
    int float_path;            /* a rotate or color_jitter */
    int nerase;
    stk_erase_op erase[MAX_ERASE];
    int filter;                /* the resize's STK_RS_BILINEAR or STK_RS_BICUBIC */
    int has_policy;            /* an augmentation policy (T_POLICY) */
    /* User-defined ops (T_USER, stoker/op.h): their states, owned. They
     * may change the image's size and channels, so the head's output
     * (head_h x head_w x nc) and the plan's output (out_h x out_w x
     * fmt.nc) can differ; u8_bytes is the largest uint8 image between
     * the head and the float tail (the policy/user-op buffers). */
    int nuser;
    stk_user_inst user[MAX_USER];
    uint32_t head_h, head_w;
    size_t u8_bytes;
    uint32_t out_h, out_w;
    stk_outfmt fmt;
    size_t sample_bytes;
    const stk_rs_kernels *rk;    /* chosen at compile, like the fixed-shape kernel */
    const stk_color_kernels *ck;
};

/* One axis of the head, in source pixels. Before a resize the current view
 * is [a, b); after it, the resized grid is [0, n) over the domain [a, b)
 * and the view is [g0, g1) of the grid. `flip`: the view runs backwards
 * relative to the source. */
typedef struct stk_axis_geo {
    int64_t a, b;
    int flip, resized;
    double scale;
    int64_t g0, g1;
} stk_axis_geo;

/* One geometric step as it ran, in spec order, for the fields that follow
 * the image (ops/spatial.c replays them on masks and boxes, in torchvision's
 * order: the image's fused head and its moved flips give the same pixels).
 * Coordinates are those of the image as it was when the step ran. */
enum { GS_HFLIP, GS_VFLIP, GS_CROP, GS_RESIZE, GS_ROTATE, GS_AFFINE, GS_BBOX_CROP };
typedef struct stk_geo_step {
    int kind;
    int64_t top, left, h, w; /* GS_CROP, GS_BBOX_CROP: the rectangle kept;
                                GS_RESIZE: h, w the new size */
    double a[6];             /* GS_ROTATE: a[0] the angle as drawn; GS_AFFINE:
                                angle, tx, ty, scale, shear x, shear y */
} stk_geo_step;
#define MAX_GEO_STEPS (2 * STK_SPEC_MAX_OPS)

typedef struct stk_draw_step {
    int kind;   /* S_* */
    float f, g; /* factor; (float)(1 - factor) */
    int rot;    /* S_ROT: index into rots; S_FOP: index into fparam */
    int tail;   /* S_FOP: index of its op in the plan's tail */
} stk_draw_step;

/* Everything drawn for one sample. */
typedef struct stk_draws {
    int64_t src_w, src_h; /* the image entering the head */
    int ngs;
    stk_geo_step gs[MAX_GEO_STEPS];
    stk_axis_geo ax, ay;
    int hflip, vflip;
    int rrc_attempt;
    int nsteps;
    stk_draw_step steps[4 * STK_SPEC_MAX_OPS];
    int nrot;
    double angle[MAX_ROT];
    /* The parameters each applied STK_OP_FLOAT op drew (S_FOP steps). */
    int nfop;
    double fparam[MAX_FOP][STK_FOP_PARAMS];
    /* Rotations that are affine maps (T_AFFINE): the drawn angle, tx, ty,
     * scale, shear x, shear y, and whether a later flip was moved before
     * it (the matrix is then conjugated by that mirror). */
    int affine[MAX_ROT];
    double aff[MAX_ROT][6];
    int aff_mx[MAX_ROT], aff_my[MAX_ROT];
    /* uint8 point ops that apply to this sample, composed into one table
     * each: [0] before the resize (applied to the source pixels), [1] after
     * it (applied to each resampled row). */
    int has_lut[2];
    uint8_t lut[2][256];
    /* A center_crop larger than the view (torchvision pads with zeros):
     * some axis' domain [a, b) leaves the source, whose pixels there read
     * as pad_val (0, or what the table [0] ops after the pad made of it). */
    int padded;
    uint8_t pad_val;
    /* random_erasing rectangles to write over the output: [k] = top, left,
     * h, w and the index of its op in the plan's erase list. */
    int nerase;
    int32_t erase[MAX_ERASE][5];
    /* Augmentation-policy steps, in order, run on the whole uint8 image
     * after the resample and the point-op tables. */
    int naug;
    stk_aug_step aug[MAX_AUG];
    /* User ops (one per T_USER, all run): each runs after the first
     * user_at[k] policy steps, with its drawn params. */
    int nuser;
    int user_at[MAX_USER];
    double uparam[MAX_USER][STK_OP_MAX_DRAWS];
} stk_draws;

/* Draw everything for one sample whose head input is W x H (image_draws.c):
 * the geometry of both axes, mirrorings, rotations, colour-jitter steps and
 * point-op tables. The stream is consumed in spec order (docs/pipeline.md,
 * "Random numbers"). `tr` (may be NULL) gets the first colour jitter.
 * STK_EDATA when a crop does not fit this image. */
int stk_imgplan_draw(const stk_imgplan *ip, stk_rng *rng, int64_t W, int64_t H,
                     const float *boxes, uint32_t nboxes, stk_draws *d, stk_plan_trace *tr);

/* The CPU half of the GPU image pipeline (src/gpu/stage.c): what a run
 * does before its resample. Filled by stk_imgplan_prepare. */
typedef struct stk_img_prepared {
    stk_image_view view;     /* the region the windows touch (rows x cols x
                                nc, in the scratch), the point-op table of
                                the ops before the resize applied */
    size_t ws_off;           /* scratch bytes in use (the view's and slack) */
    stk_rs_params xp, yp;    /* both axes, in decoded pixels */
    int32_t xf, yf;          /* the region's first index on each axis, relative
                                to the axis' domain: stk_rs_build's base */
    int need_h, need_v;      /* the passes to run (else the region is the
                                head, rows mirrored when vflip) */
} stk_img_prepared;

/* Steps 1-6 of a run (image_run.c): size, draw (into *dr), choose the DCT
 * scale, decode or copy the region, apply the first point-op table. */
int stk_imgplan_prepare(const stk_imgplan *ip, const stk_plan_input *in, stk_rng *rng,
                        stk_scratch *scratch, stk_draws *dr, stk_img_prepared *pr);

/* A JPEG region left for a GPU decoder (gpu/nvjpeg.c): what to decode and
 * how (stk_image_decode's region and scale; cols x rows once decoded). */
typedef struct stk_img_jpeg {
    stk_image_info info;
    stk_rect region;
    unsigned d;
    uint32_t cols, rows;
} stk_img_jpeg;

/* Steps 1-5 of a run without the decode, for a JPEG the GPU decodes: size,
 * draw (into *dr), choose the DCT scale (at most 1/dmax), and plan both
 * axes (*pr, but no pixels: view.pixels is NULL). Returns 1 with the region
 * in *jr; 0 when the input is not a JPEG that can be left to the GPU (not
 * encoded, another format, or point ops before the resize, which run on the
 * source pixels): the caller then restores the rng and runs
 * stk_imgplan_prepare; < 0 on error. */
int stk_imgplan_prepare_jpeg(const stk_imgplan *ip, const stk_plan_input *in, stk_rng *rng,
                             stk_scratch *scratch, unsigned dmax, stk_draws *dr,
                             stk_img_prepared *pr, stk_img_jpeg *jr);

/* random_bbox_crop's draw (op_bbox_crop.c): torchvision.transforms.v2's
 * RandomIoUCrop on a W x H view with `nboxes` XYXY boxes. Fills the kept
 * rectangle, or the whole view when the drawn option is "no crop". */
void stk_bbox_crop_draw(const stk_geo_op *g, stk_rng *rng, int64_t W, int64_t H,
                        const float *boxes, uint32_t nboxes, int64_t *top, int64_t *left,
                        int64_t *h, int64_t *w);

/* stk_imgplan_run, also handing back the draws (for ops/spatial.c). */
int stk_imgplan_run_draws(const stk_imgplan *ip, const stk_plan_input *in, stk_rng *rng,
                          void *out, stk_scratch *scratch, stk_draws *dr);

/* torchvision CenterCrop offset: int(round(d / 2.0)), halves to even. */
int64_t stk_center_offset(int64_t d);

/* torchvision's Resize(S) size: the shorter side to S, the longer
 * int(S * long / short). Returns 0, or -1 when a side exceeds MAX_SIDE. */
int stk_resize_shorter(int64_t h, int64_t w, int64_t s, int64_t *nh, int64_t *nw);

#endif
