/*
 * augment.c — AutoAugment (ImageNet, CIFAR10 and SVHN policies), RandAugment and
 * TrivialAugmentWide, and the fourteen uint8 primitives they are made of,
 * computed as torchvision 0.14 computes them on a uint8 tensor
 * (torchvision/transforms/autoaugment.py, functional_tensor.py).
 *
 * Draws (stk_aug_draw): a pure function of the policy, the image size and
 * the sample's Philox stream, with a fixed number of draws per policy so
 * that the stream position after the op never depends on what was drawn:
 *
 *   trivial_augment_wide  op = below(14), bin = below(bins), sign = below(2)
 *   rand_augment          num_ops times: op = below(14), sign = below(2)
 *   auto_augment          sub-policy = below(25), two uniforms u1, u2, two
 *                         signs; step i applies when u_i <= its probability
 *
 * The op index runs over torchvision's augmentation space in its order
 * (Identity, ShearX, ShearY, TranslateX, TranslateY, Rotate, Brightness,
 * Color, Contrast, Sharpness, Posterize, Solarize, AutoContrast, Equalize);
 * a signed op's magnitude is negated when its sign is 1 (RandAugment,
 * TrivialAugmentWide) or 0 (AutoAugment), as torchvision does. Magnitudes
 * are torch.linspace's float32 values (see linspace below), turned into
 * doubles as .item() does.
 *
 * Primitives (stk_aug_apply), on a uint8 HWC image of 1 or 3 channels. The
 * blends of adjust_brightness / saturation / contrast / sharpness are
 * torchvision's _blend: (f * a + (1 - f) * b) in float32, clamped to
 * [0, 255] and truncated to uint8; f = (float)(1 + magnitude), (1 - f)
 * computed in double and rounded to float, as torch does with a Python
 * scalar. The grayscale of Color and Contrast is
 * trunc(0.2989 r + 0.587 g + 0.114 b) in float32; Contrast blends with the
 * mean of that grayscale (a float32 division of the exact sum); Sharpness
 * with the image blurred by the 3x3 kernel [1 1 1; 1 5 1; 1 1 1] / 13,
 * rounded (computed exactly in integers: the exact value is never within
 * 1/26 of a half, so float rounding of torch's conv2d cannot change it),
 * border pixels kept. AutoContrast and Equalize are per channel, Equalize
 * by torchvision's histogram lookup table (integer arithmetic, exact);
 * AutoContrast's scale 255 / (max - min) is torch's reciprocal times 255.
 * Posterize, Solarize (x >= threshold in float32) and Invert are tables.
 *
 * The geometric primitives (ShearX/Y, TranslateX/Y, Rotate) are
 * torchvision's F.affine / F.rotate on a tensor with nearest interpolation:
 * the inverse affine matrix of _get_inverse_affine_matrix in double (the
 * same libm calls as Python's math module), cast to a float32 theta,
 * divided by (w/2, h/2); output pixel (x, y) samples the grid point
 * theta * (x - w/2 + 0.5, y - h/2 + 0.5, 1), unnormalised as
 * (g + 1) * size/2 - 0.5 (grid_sample, align_corners=False) and rounded
 * half to even; points outside the image take the fill. Float roundings of
 * torch's matrix product can move a sampling point that falls within about
 * 1e-5 of a half, so a rare pixel may differ from torchvision's (the tests
 * state the fraction).
 */
#include "ops/augment.h"

#include <math.h>
#include <string.h>

static const char *const names[STK_AUG_NPRIM] = {
    "Identity",   "ShearX",   "ShearY",    "TranslateX", "TranslateY",
    "Rotate",     "Brightness", "Color",   "Contrast",   "Sharpness",
    "Posterize",  "Solarize", "AutoContrast", "Equalize", "Invert",
};

const char *stk_aug_name(int prim)
{
    return prim >= 0 && prim < STK_AUG_NPRIM ? names[prim] : "?";
}

/* ---------------------------------------------------------------------- */
/* Magnitudes                                                              */
/* ---------------------------------------------------------------------- */

/* torch.linspace(start, end, n)[i] in float32 (n >= 2), value for value as
 * torch's CPU kernel computes it (checked against torch 1.13 for every bin
 * count the policies use, tests/python/test_augment_torchvision.py): step =
 * (end - start) / (n - 1); an index i gives start + step * i below n / 2
 * and end - step * (n - 1 - i) from it, each one fused multiply-add (the
 * kernel is compiled with contraction); the first n rounded down to 16 run
 * as 8-lane vectors whose lane l is base + l * step (a multiply, then an
 * add), base being the value at the vector's first index. fmaf is
 * correctly rounded everywhere, so this is the same on every machine. */
static double linspace(double start, double end, int n, int i)
{
    float s = (float)start, e = (float)end;
    float step = (e - s) / (float)(n - 1);
    int half = n / 2, vec_end = n / 16 * 16;
    int i0 = i < vec_end ? i - i % 8 : i;
    float base = i0 < half ? fmaf(step, (float)i0, s) : fmaf(-step, (float)(n - i0 - 1), e);
    float v = i0 == i ? base : base + (float)(i - i0) * step;
    return (double)v;
}

/* 8 - round(i / ((n - 1) / div)) as torch computes it (float32 division,
 * round half to even). */
static double posterize_bits(int n, int i, double div)
{
    float q = (float)i / (float)((double)(n - 1) / div);
    return (double)(8 - (int)nearbyintf(q));
}

static int is_signed(int prim)
{
    return prim >= STK_AUG_SHEAR_X && prim <= STK_AUG_SHARPNESS;
}

/* The magnitude of `prim` at bin `b` of an n-bin space. `wide`: the
 * TrivialAugmentWide space; else RandAugment's (and AutoAugment's). */
static double magnitude(int prim, int wide, int n, int b, int32_t w, int32_t h)
{
    switch (prim) {
    case STK_AUG_SHEAR_X:
    case STK_AUG_SHEAR_Y:
        return linspace(0.0, wide ? 0.99 : 0.3, n, b);
    case STK_AUG_TRANSLATE_X:
        return linspace(0.0, wide ? 32.0 : 150.0 / 331.0 * w, n, b);
    case STK_AUG_TRANSLATE_Y:
        return linspace(0.0, wide ? 32.0 : 150.0 / 331.0 * h, n, b);
    case STK_AUG_ROTATE:
        return linspace(0.0, wide ? 135.0 : 30.0, n, b);
    case STK_AUG_BRIGHTNESS:
    case STK_AUG_COLOR:
    case STK_AUG_CONTRAST:
    case STK_AUG_SHARPNESS:
        return linspace(0.0, wide ? 0.99 : 0.9, n, b);
    case STK_AUG_POSTERIZE:
        return posterize_bits(n, b, wide ? 6.0 : 4.0);
    case STK_AUG_SOLARIZE:
        return linspace(255.0, 0.0, n, b);
    default:
        return 0.0;
    }
}

static int has_bins(int prim)
{
    return prim >= STK_AUG_SHEAR_X && prim <= STK_AUG_SOLARIZE;
}

/* ---------------------------------------------------------------------- */
/* Draws                                                                   */
/* ---------------------------------------------------------------------- */

/* torchvision's AutoAugmentPolicy.IMAGENET, CIFAR10 and SVHN (copied from
 * torchvision 0.14's AutoAugment._get_policies): (op, probability, bin)
 * pairs; bin -1 for ops without a magnitude. */
struct aa_op {
    int8_t op;
    float p;
    int8_t bin;
};
static const struct aa_op imagenet[25][2] = {
    {{STK_AUG_POSTERIZE, 0.4f, 8}, {STK_AUG_ROTATE, 0.6f, 9}},
    {{STK_AUG_SOLARIZE, 0.6f, 5}, {STK_AUG_AUTOCONTRAST, 0.6f, -1}},
    {{STK_AUG_EQUALIZE, 0.8f, -1}, {STK_AUG_EQUALIZE, 0.6f, -1}},
    {{STK_AUG_POSTERIZE, 0.6f, 7}, {STK_AUG_POSTERIZE, 0.6f, 6}},
    {{STK_AUG_EQUALIZE, 0.4f, -1}, {STK_AUG_SOLARIZE, 0.2f, 4}},
    {{STK_AUG_EQUALIZE, 0.4f, -1}, {STK_AUG_ROTATE, 0.8f, 8}},
    {{STK_AUG_SOLARIZE, 0.6f, 3}, {STK_AUG_EQUALIZE, 0.6f, -1}},
    {{STK_AUG_POSTERIZE, 0.8f, 5}, {STK_AUG_EQUALIZE, 1.0f, -1}},
    {{STK_AUG_ROTATE, 0.2f, 3}, {STK_AUG_SOLARIZE, 0.6f, 8}},
    {{STK_AUG_EQUALIZE, 0.6f, -1}, {STK_AUG_POSTERIZE, 0.4f, 6}},
    {{STK_AUG_ROTATE, 0.8f, 8}, {STK_AUG_COLOR, 0.4f, 0}},
    {{STK_AUG_ROTATE, 0.4f, 9}, {STK_AUG_EQUALIZE, 0.6f, -1}},
    {{STK_AUG_EQUALIZE, 0.0f, -1}, {STK_AUG_EQUALIZE, 0.8f, -1}},
    {{STK_AUG_INVERT, 0.6f, -1}, {STK_AUG_EQUALIZE, 1.0f, -1}},
    {{STK_AUG_COLOR, 0.6f, 4}, {STK_AUG_CONTRAST, 1.0f, 8}},
    {{STK_AUG_ROTATE, 0.8f, 8}, {STK_AUG_COLOR, 1.0f, 2}},
    {{STK_AUG_COLOR, 0.8f, 8}, {STK_AUG_SOLARIZE, 0.8f, 7}},
    {{STK_AUG_SHARPNESS, 0.4f, 7}, {STK_AUG_INVERT, 0.6f, -1}},
    {{STK_AUG_SHEAR_X, 0.6f, 5}, {STK_AUG_EQUALIZE, 1.0f, -1}},
    {{STK_AUG_COLOR, 0.4f, 0}, {STK_AUG_EQUALIZE, 0.6f, -1}},
    {{STK_AUG_EQUALIZE, 0.4f, -1}, {STK_AUG_SOLARIZE, 0.2f, 4}},
    {{STK_AUG_SOLARIZE, 0.6f, 5}, {STK_AUG_AUTOCONTRAST, 0.6f, -1}},
    {{STK_AUG_INVERT, 0.6f, -1}, {STK_AUG_EQUALIZE, 1.0f, -1}},
    {{STK_AUG_COLOR, 0.6f, 4}, {STK_AUG_CONTRAST, 1.0f, 8}},
    {{STK_AUG_EQUALIZE, 0.8f, -1}, {STK_AUG_EQUALIZE, 0.6f, -1}},
};
static const struct aa_op cifar10[25][2] = {
    {{STK_AUG_INVERT, 0.1f, -1}, {STK_AUG_CONTRAST, 0.2f, 6}},
    {{STK_AUG_ROTATE, 0.7f, 2}, {STK_AUG_TRANSLATE_X, 0.3f, 9}},
    {{STK_AUG_SHARPNESS, 0.8f, 1}, {STK_AUG_SHARPNESS, 0.9f, 3}},
    {{STK_AUG_SHEAR_Y, 0.5f, 8}, {STK_AUG_TRANSLATE_Y, 0.7f, 9}},
    {{STK_AUG_AUTOCONTRAST, 0.5f, -1}, {STK_AUG_EQUALIZE, 0.9f, -1}},
    {{STK_AUG_SHEAR_Y, 0.2f, 7}, {STK_AUG_POSTERIZE, 0.3f, 7}},
    {{STK_AUG_COLOR, 0.4f, 3}, {STK_AUG_BRIGHTNESS, 0.6f, 7}},
    {{STK_AUG_SHARPNESS, 0.3f, 9}, {STK_AUG_BRIGHTNESS, 0.7f, 9}},
    {{STK_AUG_EQUALIZE, 0.6f, -1}, {STK_AUG_EQUALIZE, 0.5f, -1}},
    {{STK_AUG_CONTRAST, 0.6f, 7}, {STK_AUG_SHARPNESS, 0.6f, 5}},
    {{STK_AUG_COLOR, 0.7f, 7}, {STK_AUG_TRANSLATE_X, 0.5f, 8}},
    {{STK_AUG_EQUALIZE, 0.3f, -1}, {STK_AUG_AUTOCONTRAST, 0.4f, -1}},
    {{STK_AUG_TRANSLATE_Y, 0.4f, 3}, {STK_AUG_SHARPNESS, 0.2f, 6}},
    {{STK_AUG_BRIGHTNESS, 0.9f, 6}, {STK_AUG_COLOR, 0.2f, 8}},
    {{STK_AUG_SOLARIZE, 0.5f, 2}, {STK_AUG_INVERT, 0.0f, -1}},
    {{STK_AUG_EQUALIZE, 0.2f, -1}, {STK_AUG_AUTOCONTRAST, 0.6f, -1}},
    {{STK_AUG_EQUALIZE, 0.2f, -1}, {STK_AUG_EQUALIZE, 0.6f, -1}},
    {{STK_AUG_COLOR, 0.9f, 9}, {STK_AUG_EQUALIZE, 0.6f, -1}},
    {{STK_AUG_AUTOCONTRAST, 0.8f, -1}, {STK_AUG_SOLARIZE, 0.2f, 8}},
    {{STK_AUG_BRIGHTNESS, 0.1f, 3}, {STK_AUG_COLOR, 0.7f, 0}},
    {{STK_AUG_SOLARIZE, 0.4f, 5}, {STK_AUG_AUTOCONTRAST, 0.9f, -1}},
    {{STK_AUG_TRANSLATE_Y, 0.9f, 9}, {STK_AUG_TRANSLATE_Y, 0.7f, 9}},
    {{STK_AUG_AUTOCONTRAST, 0.9f, -1}, {STK_AUG_SOLARIZE, 0.8f, 3}},
    {{STK_AUG_EQUALIZE, 0.8f, -1}, {STK_AUG_INVERT, 0.1f, -1}},
    {{STK_AUG_TRANSLATE_Y, 0.7f, 9}, {STK_AUG_AUTOCONTRAST, 0.9f, -1}},
};
static const struct aa_op svhn[25][2] = {
    {{STK_AUG_SHEAR_X, 0.9f, 4}, {STK_AUG_INVERT, 0.2f, -1}},
    {{STK_AUG_SHEAR_Y, 0.9f, 8}, {STK_AUG_INVERT, 0.7f, -1}},
    {{STK_AUG_EQUALIZE, 0.6f, -1}, {STK_AUG_SOLARIZE, 0.6f, 6}},
    {{STK_AUG_INVERT, 0.9f, -1}, {STK_AUG_EQUALIZE, 0.6f, -1}},
    {{STK_AUG_EQUALIZE, 0.6f, -1}, {STK_AUG_ROTATE, 0.9f, 3}},
    {{STK_AUG_SHEAR_X, 0.9f, 4}, {STK_AUG_AUTOCONTRAST, 0.8f, -1}},
    {{STK_AUG_SHEAR_Y, 0.9f, 8}, {STK_AUG_INVERT, 0.4f, -1}},
    {{STK_AUG_SHEAR_Y, 0.9f, 5}, {STK_AUG_SOLARIZE, 0.2f, 6}},
    {{STK_AUG_INVERT, 0.9f, -1}, {STK_AUG_AUTOCONTRAST, 0.8f, -1}},
    {{STK_AUG_EQUALIZE, 0.6f, -1}, {STK_AUG_ROTATE, 0.9f, 3}},
    {{STK_AUG_SHEAR_X, 0.9f, 4}, {STK_AUG_SOLARIZE, 0.3f, 3}},
    {{STK_AUG_SHEAR_Y, 0.8f, 8}, {STK_AUG_INVERT, 0.7f, -1}},
    {{STK_AUG_EQUALIZE, 0.9f, -1}, {STK_AUG_TRANSLATE_Y, 0.6f, 6}},
    {{STK_AUG_INVERT, 0.9f, -1}, {STK_AUG_EQUALIZE, 0.6f, -1}},
    {{STK_AUG_CONTRAST, 0.3f, 3}, {STK_AUG_ROTATE, 0.8f, 4}},
    {{STK_AUG_INVERT, 0.8f, -1}, {STK_AUG_TRANSLATE_Y, 0.0f, 2}},
    {{STK_AUG_SHEAR_Y, 0.7f, 6}, {STK_AUG_SOLARIZE, 0.4f, 8}},
    {{STK_AUG_INVERT, 0.6f, -1}, {STK_AUG_ROTATE, 0.8f, 4}},
    {{STK_AUG_SHEAR_Y, 0.3f, 7}, {STK_AUG_TRANSLATE_X, 0.9f, 3}},
    {{STK_AUG_SHEAR_X, 0.1f, 6}, {STK_AUG_INVERT, 0.6f, -1}},
    {{STK_AUG_SOLARIZE, 0.7f, 2}, {STK_AUG_TRANSLATE_Y, 0.6f, 7}},
    {{STK_AUG_SHEAR_Y, 0.8f, 4}, {STK_AUG_INVERT, 0.8f, -1}},
    {{STK_AUG_SHEAR_X, 0.7f, 9}, {STK_AUG_TRANSLATE_Y, 0.8f, 3}},
    {{STK_AUG_SHEAR_Y, 0.8f, 5}, {STK_AUG_AUTOCONTRAST, 0.7f, -1}},
    {{STK_AUG_SHEAR_X, 0.7f, 2}, {STK_AUG_INVERT, 0.1f, -1}},
};

static void set_step(stk_aug_step *s, const stk_aug_policy *p, int prim, int bin, int neg,
                     double mag)
{
    s->prim = (int16_t)prim;
    s->bin = (int16_t)bin;
    s->neg = (int8_t)neg;
    s->mag = neg ? -mag : mag;
    memcpy(s->fill, p->fill, 3);
}

int stk_aug_draw(const stk_aug_policy *p, stk_rng *rng, int32_t w, int32_t h, stk_aug_step *steps)
{
    int n = 0;
    if (p->kind == STK_AUG_POLICY_TRIVIAL) {
        int prim = (int)stk_rng_below(rng, 14);
        int bin = (int)stk_rng_below(rng, (uint32_t)p->bins);
        int sign = (int)stk_rng_below(rng, 2);
        if (!has_bins(prim))
            bin = -1;
        double mag = bin >= 0 ? magnitude(prim, 1, p->bins, bin, w, h) : 0.0;
        set_step(&steps[n++], p, prim, bin, is_signed(prim) && sign, mag);
    } else if (p->kind == STK_AUG_POLICY_RAND) {
        for (int k = 0; k < p->num_ops && k < STK_AUG_MAX_OPS; k++) {
            int prim = (int)stk_rng_below(rng, 14);
            int sign = (int)stk_rng_below(rng, 2);
            int bin = has_bins(prim) ? p->magnitude : -1;
            double mag = bin >= 0 ? magnitude(prim, 0, p->bins, bin, w, h) : 0.0;
            set_step(&steps[n++], p, prim, bin, is_signed(prim) && sign, mag);
        }
    } else {
        const struct aa_op(*table)[2] = p->auto_policy == 1   ? cifar10
                                        : p->auto_policy == 2 ? svhn
                                                              : imagenet;
        int id = (int)stk_rng_below(rng, 25);
        double u[2];
        int sign[2];
        u[0] = stk_rng_uniform(rng);
        u[1] = stk_rng_uniform(rng);
        sign[0] = (int)stk_rng_below(rng, 2);
        sign[1] = (int)stk_rng_below(rng, 2);
        for (int i = 0; i < 2; i++) {
            int prim = table[id][i].op, bin = table[id][i].bin;
            if (!(u[i] <= (double)table[id][i].p))
                continue;
            double mag = bin >= 0 ? magnitude(prim, 0, 10, bin, w, h) : 0.0;
            set_step(&steps[n++], p, prim, bin, is_signed(prim) && sign[i] == 0, mag);
        }
    }
    return n;
}

/* ---------------------------------------------------------------------- */
/* Primitives                                                              */
/* ---------------------------------------------------------------------- */

/* _blend of two uint8 values: trunc(clamp(f * a + g * b, 0, 255)). */
static inline uint8_t blend(float f, float a, float g, float b)
{
    float v = f * a + g * b;
    v = v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
    return (uint8_t)v;
}

static inline uint8_t gray_of(const uint8_t *px)
{
    float v = (0.2989f * (float)px[0] + 0.587f * (float)px[1]) + 0.114f * (float)px[2];
    return (uint8_t)v;
}

static void apply_table(uint8_t *img, size_t n, const uint8_t t[256])
{
    for (size_t i = 0; i < n; i++)
        img[i] = t[img[i]];
}

/* Per-channel tables (nc of them) on an interleaved image. */
static void apply_tables(uint8_t *img, size_t npix, int nc, uint8_t t[3][256])
{
    if (nc != 3) {
        apply_table(img, npix, t[0]);
        return;
    }
    for (size_t i = 0; i < npix; i++) {
        img[3 * i] = t[0][img[3 * i]];
        img[3 * i + 1] = t[1][img[3 * i + 1]];
        img[3 * i + 2] = t[2][img[3 * i + 2]];
    }
}

/* torchvision's _get_inverse_affine_matrix. */
void stk_aug_inverse_affine(double cx, double cy, double angle, double tx, double ty,
                            double scale, double shx, double shy, double m[6])
{
    const double deg = 3.141592653589793 / 180.0;
    double rot = angle * deg, sx = shx * deg, sy = shy * deg;
    double a = cos(rot - sy) / cos(sy);
    double b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
    double c = sin(rot - sy) / cos(sy);
    double d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
    m[0] = d / scale;
    m[1] = -b / scale;
    m[2] = 0.0 / scale;
    m[3] = -c / scale;
    m[4] = a / scale;
    m[5] = 0.0 / scale;
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
    m[2] += cx;
    m[5] += cy;
}

/* nearbyintf (round half to even) without a libm call: adding and
 * subtracting 1.5 * 2^23 rounds a float below 2^22 in magnitude to an
 * integer in the current (nearest-even) mode, exactly; larger values (far
 * outside any image) and NaN keep nearbyintf. */
static inline float round_even(float v)
{
    if (fabsf(v) < 4194304.0f) /* no -ffast-math: the compiler keeps both roundings */
        return (v + 12582912.0f) - 12582912.0f;
    return nearbyintf(v);
}

/* F_t.affine(img, m, "nearest", fill) into dst. */
static void affine_nearest(const double m[6], const uint8_t *src, uint8_t *dst, int32_t w,
                           int32_t h, int nc, const uint8_t *fill);

void stk_aug_affine_nearest(const double m[6], const uint8_t *src, uint8_t *dst, int32_t w,
                            int32_t h, int nc, const uint8_t *fill)
{
    affine_nearest(m, src, dst, w, h, nc, fill);
}

static void affine_nearest(const double m[6], const uint8_t *src, uint8_t *dst, int32_t w,
                           int32_t h, int nc, const uint8_t *fill)
{
    float hw = (float)(0.5 * w), hh = (float)(0.5 * h);
    float r0 = (float)m[0] / hw, r1 = (float)m[1] / hw, r2 = (float)m[2] / hw;
    float r3 = (float)m[3] / hh, r4 = (float)m[4] / hh, r5 = (float)m[5] / hh;
    float sw = (float)w / 2.0f, sh = (float)h / 2.0f, fw = (float)w, fh = (float)h;
    for (int32_t y = 0; y < h; y++) {
        float fy = ((float)y - (float)h * 0.5f) + 0.5f;
        uint8_t *d = dst + (size_t)y * (size_t)w * (size_t)nc;
        for (int32_t x = 0; x < w; x++) {
            float fx = ((float)x - (float)w * 0.5f) + 0.5f;
            float gx = (fx * r0 + fy * r1) + r2;
            float gy = (fx * r3 + fy * r4) + r5;
            float ix = round_even((gx + 1.0f) * sw - 0.5f);
            float iy = round_even((gy + 1.0f) * sh - 0.5f);
            const uint8_t *s = fill;
            if (ix >= 0.0f && ix < fw && iy >= 0.0f && iy < fh)
                s = src + ((size_t)(int32_t)iy * (size_t)w + (size_t)(int32_t)ix) * (size_t)nc;
            if (nc == 3) {
                d[3 * (size_t)x] = s[0];
                d[3 * (size_t)x + 1] = s[1];
                d[3 * (size_t)x + 2] = s[2];
            } else {
                d[x] = s[0];
            }
        }
    }
}

static void sharpness(float f, float g, const uint8_t *src, uint8_t *dst, int32_t w, int32_t h,
                      int nc)
{
    size_t row = (size_t)w * (size_t)nc;
    for (int32_t y = 0; y < h; y++) {
        const uint8_t *s = src + (size_t)y * row;
        uint8_t *d = dst + (size_t)y * row;
        if (y == 0 || y == h - 1) { /* border rows: blended with themselves */
            for (size_t i = 0; i < row; i++)
                d[i] = blend(f, (float)s[i], g, (float)s[i]);
            continue;
        }
        const uint8_t *u = s - row, *l = s + row;
        for (int c = 0; c < nc; c++) {
            d[c] = blend(f, (float)s[c], g, (float)s[c]);
            d[row - nc + c] = blend(f, (float)s[row - nc + c], g, (float)s[row - nc + c]);
        }
        for (size_t i = (size_t)nc; i < row - (size_t)nc; i++) {
            int sum = u[i - nc] + u[i] + u[i + nc] + s[i - nc] + 5 * s[i] + s[i + nc] +
                      l[i - nc] + l[i] + l[i + nc];
            int b = (2 * sum + 13) / 26; /* round(sum / 13); never a tie */
            d[i] = blend(f, (float)s[i], g, (float)b);
        }
    }
}

static void equalize_tables(const uint8_t *img, size_t npix, int nc, uint8_t t[3][256])
{
    int64_t hists[3][256];
    memset(hists, 0, sizeof hists);
    if (nc == 3)
        for (size_t i = 0; i < npix; i++) {
            hists[0][img[3 * i]]++;
            hists[1][img[3 * i + 1]]++;
            hists[2][img[3 * i + 2]]++;
        }
    else
        for (size_t i = 0; i < npix; i++)
            hists[0][img[i]]++;
    for (int c = 0; c < nc; c++) {
        const int64_t *hist = hists[c];
        int last = 255;
        while (last > 0 && hist[last] == 0)
            last--;
        int64_t total = 0;
        for (int v = 0; v < last; v++) /* the nonzero bins but the last */
            total += hist[v];
        int64_t step = total / 255;
        if (step == 0) {
            for (int v = 0; v < 256; v++)
                t[c][v] = (uint8_t)v;
            continue;
        }
        int64_t cum = 0;
        t[c][0] = 0;
        for (int v = 1; v < 256; v++) {
            cum += hist[v - 1];
            int64_t q = (cum + step / 2) / step;
            t[c][v] = (uint8_t)(q > 255 ? 255 : q);
        }
    }
}

uint8_t *stk_aug_apply(int prim, double mag, const uint8_t fill[3], uint8_t *img, uint8_t *tmp,
                       int32_t w, int32_t h, int nc)
{
    size_t npix = (size_t)w * (size_t)h, n = npix * (size_t)nc;
    uint8_t t[3][256];
    float f = (float)(1.0 + mag), g = (float)(1.0 - (1.0 + mag));
    double m[6];
    switch (prim) {
    case STK_AUG_SHEAR_X:
    case STK_AUG_SHEAR_Y: {
        double deg = atan(mag) * (180.0 / 3.141592653589793);
        stk_aug_inverse_affine(-0.5 * w, -0.5 * h, 0.0, 0.0, 0.0, 1.0,
                       prim == STK_AUG_SHEAR_X ? deg : 0.0, prim == STK_AUG_SHEAR_Y ? deg : 0.0,
                       m);
        affine_nearest(m, img, tmp, w, h, nc, fill);
        return tmp;
    }
    case STK_AUG_TRANSLATE_X:
    case STK_AUG_TRANSLATE_Y: {
        double tr = trunc(mag);
        stk_aug_inverse_affine(0.0, 0.0, 0.0, prim == STK_AUG_TRANSLATE_X ? tr : 0.0,
                       prim == STK_AUG_TRANSLATE_Y ? tr : 0.0, 1.0, 0.0, 0.0, m);
        affine_nearest(m, img, tmp, w, h, nc, fill);
        return tmp;
    }
    case STK_AUG_ROTATE:
        stk_aug_inverse_affine(0.0, 0.0, -mag, 0.0, 0.0, 1.0, 0.0, 0.0, m);
        affine_nearest(m, img, tmp, w, h, nc, fill);
        return tmp;
    case STK_AUG_BRIGHTNESS:
        for (int v = 0; v < 256; v++)
            t[0][v] = blend(f, (float)v, g, 0.0f);
        apply_table(img, n, t[0]);
        return img;
    case STK_AUG_COLOR:
        if (nc == 3)
            for (size_t i = 0; i < npix; i++) {
                uint8_t *px = img + 3 * i;
                float gr = (float)gray_of(px);
                px[0] = blend(f, (float)px[0], g, gr);
                px[1] = blend(f, (float)px[1], g, gr);
                px[2] = blend(f, (float)px[2], g, gr);
            }
        return img;
    case STK_AUG_CONTRAST: {
        int64_t sum = 0;
        for (size_t i = 0; i < npix; i++)
            sum += nc == 3 ? gray_of(img + 3 * i) : img[i];
        float mean = (float)sum / (float)npix;
        float gm = g * mean;
        for (int v = 0; v < 256; v++) {
            float x = f * (float)v + gm;
            x = x < 0.0f ? 0.0f : x > 255.0f ? 255.0f : x;
            t[0][v] = (uint8_t)x;
        }
        apply_table(img, n, t[0]);
        return img;
    }
    case STK_AUG_SHARPNESS:
        if (w <= 2 || h <= 2)
            return img;
        sharpness(f, g, img, tmp, w, h, nc);
        return tmp;
    case STK_AUG_POSTERIZE: {
        int bits = (int)mag;
        unsigned mask = (0xffu << (8 - bits)) & 0xffu;
        for (int v = 0; v < 256; v++)
            t[0][v] = (uint8_t)(v & mask);
        apply_table(img, n, t[0]);
        return img;
    }
    case STK_AUG_SOLARIZE: {
        float thr = (float)mag;
        for (int v = 0; v < 256; v++)
            t[0][v] = (float)v >= thr ? (uint8_t)(255 - v) : (uint8_t)v;
        apply_table(img, n, t[0]);
        return img;
    }
    case STK_AUG_AUTOCONTRAST:
    {
        int lo3[3] = {255, 255, 255}, hi3[3] = {0, 0, 0};
        uint8_t lo8[3] = {255, 255, 255}, hi8[3] = {0, 0, 0};
        for (size_t i = 0; i < npix * (size_t)nc; i += (size_t)nc)
            for (int c = 0; c < 3; c++) { /* nc 1 reads c = 0 only, below */
                uint8_t v = img[i + (size_t)(c < nc ? c : 0)];
                lo8[c] = v < lo8[c] ? v : lo8[c];
                hi8[c] = v > hi8[c] ? v : hi8[c];
            }
        for (int c = 0; c < 3; c++) {
            lo3[c] = lo8[c];
            hi3[c] = hi8[c];
        }
        for (int c = 0; c < nc; c++) {
            int lo = lo3[c], hi = hi3[c];
            /* bound / t is t.reciprocal() * bound in torch */
            float mn = (float)lo, sc = (1.0f / (float)(hi - lo)) * 255.0f;
            if (hi == lo) {
                mn = 0.0f;
                sc = 1.0f;
            }
            for (int v = 0; v < 256; v++) {
                float x = ((float)v - mn) * sc;
                x = x < 0.0f ? 0.0f : x > 255.0f ? 255.0f : x;
                t[c][v] = (uint8_t)x;
            }
        }
        apply_tables(img, npix, nc, t);
        return img;
    }
    case STK_AUG_EQUALIZE:
        equalize_tables(img, npix, nc, t);
        apply_tables(img, npix, nc, t);
        return img;
    case STK_AUG_INVERT:
        for (int v = 0; v < 256; v++)
            t[0][v] = (uint8_t)(255 - v);
        apply_table(img, n, t[0]);
        return img;
    default:
        return img;
    }
}
