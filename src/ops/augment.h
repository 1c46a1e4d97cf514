/*
 * augment.h — the augmentation policies (AutoAugment ImageNet, RandAugment,
 * TrivialAugmentWide) and the per-image uint8 primitives they apply, as
 * torchvision 0.14 implements them on uint8 tensors (internal; augment.c
 * has the essay, docs/pipeline.md the user's view).
 *
 * A policy op is drawn per sample (stk_aug_draw: a pure function of the
 * policy's arguments, the image size and the sample's Philox stream) into a
 * list of steps (primitive, magnitude), which stk_aug_apply then runs on the
 * whole uint8 HWC image, in order.
 */
#ifndef STK_OPS_AUGMENT_H
#define STK_OPS_AUGMENT_H

#include "core/rng.h"

#include <stdint.h>

/* The primitives, in the order of torchvision's augmentation spaces
 * (RandAugment's and TrivialAugmentWide's op index is this value), then
 * Invert (AutoAugment only). */
enum {
    STK_AUG_IDENTITY = 0,
    STK_AUG_SHEAR_X,
    STK_AUG_SHEAR_Y,
    STK_AUG_TRANSLATE_X,
    STK_AUG_TRANSLATE_Y,
    STK_AUG_ROTATE,
    STK_AUG_BRIGHTNESS,
    STK_AUG_COLOR,
    STK_AUG_CONTRAST,
    STK_AUG_SHARPNESS,
    STK_AUG_POSTERIZE,
    STK_AUG_SOLARIZE,
    STK_AUG_AUTOCONTRAST,
    STK_AUG_EQUALIZE,
    STK_AUG_INVERT,
    STK_AUG_NPRIM
};

enum { STK_AUG_POLICY_AUTO = 1, STK_AUG_POLICY_RAND, STK_AUG_POLICY_TRIVIAL };

#define STK_AUG_MAX_OPS 16 /* rand_augment num_ops */

/* A policy as compiled from its spec stage. */
typedef struct stk_aug_policy {
    int kind;      /* STK_AUG_POLICY_* */
    int num_ops;   /* rand_augment */
    int magnitude; /* rand_augment: the bin index */
    int bins;      /* rand_augment, trivial_augment_wide */
    uint8_t fill[3];
    int auto_policy; /* auto_augment: 0 imagenet, 1 cifar10, 2 svhn */
} stk_aug_policy;

/* One drawn step. */
typedef struct stk_aug_step {
    int16_t prim; /* STK_AUG_* */
    int16_t bin;  /* magnitude bin drawn (-1: the primitive has none) */
    int8_t neg;   /* the magnitude was negated */
    double mag;   /* the magnitude torchvision's _apply_op receives */
    uint8_t fill[3];
} stk_aug_step;

/* torchvision's _get_inverse_affine_matrix(center, angle, translate, scale,
 * shear) in double, as Python computes it (degrees in, six values out). */
void stk_aug_inverse_affine(double cx, double cy, double angle, double tx, double ty,
                            double scale, double shx, double shy, double m[6]);

/* torchvision's F.affine(tensor, ...) with nearest interpolation: dst
 * (w x h x nc, dense) from src through the inverse matrix m, the points
 * outside taking fill[0..nc). */
void stk_aug_affine_nearest(const double m[6], const uint8_t *src, uint8_t *dst, int32_t w,
                            int32_t h, int nc, const uint8_t *fill);

/* The names torchvision's _apply_op uses ("ShearX", ...). */
const char *stk_aug_name(int prim);

/* Draw the steps of one sample for an image of w x h pixels; returns how
 * many (at most STK_AUG_MAX_OPS) were written to steps. */
int stk_aug_draw(const stk_aug_policy *p, stk_rng *rng, int32_t w, int32_t h,
                 stk_aug_step *steps);

/* Apply one primitive with magnitude mag to the w x h x nc (1 or 3) uint8
 * HWC image at img, using tmp (same size) as scratch. Returns the buffer
 * holding the result (img or tmp). */
uint8_t *stk_aug_apply(int prim, double mag, const uint8_t fill[3], uint8_t *img, uint8_t *tmp,
                       int32_t w, int32_t h, int nc);

#endif
