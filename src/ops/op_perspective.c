/*
 * op_perspective.c — `perspective [DISTORTION_SCALE] [P] [fill=V]`:
 * torchvision's RandomPerspective(distortion_scale=0.5, p=0.5,
 * interpolation=BILINEAR, fill=0) on the float image, as F.perspective on a
 * tensor computes it (the third geometric float stage after rotate and
 * affine, and the first written wholly as a STK_OP_FLOAT row: op.h's hooks,
 * no line elsewhere but its table row).
 *
 * Draw, per sample (RandomPerspective.forward and get_params): one
 * stk_rng_uniform(), always, the op applying when u < P; then, only when it
 * applies, the eight corner coordinates in torchvision's order, each one
 * stk_rng_range (torch.randint(lo, hi) is [lo, hi), ours [lo, hi - 1]),
 * with dw = int(DISTORTION_SCALE * (W // 2)), dh likewise with H:
 *
 *     top-left     x in [0, dw],          y in [0, dh]
 *     top-right    x in [W - dw - 1, W-1], y in [0, dh]
 *     bottom-right x in [W - dw - 1, W-1], y in [H - dh - 1, H-1]
 *     bottom-left  x in [0, dw],          y in [H - dh - 1, H-1]
 *
 * param[0..7] are those endpoints (x, y per corner, the trace reports
 * them); the startpoints are the image's corners (0, 0), (W-1, 0),
 * (W-1, H-1), (0, H-1).
 *
 * Run (a whole-image op: it reads any pixel, so it starts a pass over the
 * parked float image, like rotate): the eight coefficients of the map from
 * output to input pixels, (x, y) -> ((a x + b y + c) / (g x + h y + 1),
 * (d x + e y + f) / (g x + h y + 1)), solve the 8x8 system of
 * _get_perspective_coeffs (endpoints -> startpoints). torchvision solves it
 * in float32 with torch.linalg.lstsq (LAPACK's sgels, a QR); we solve it in
 * double by Gaussian elimination with partial pivoting, so the coefficients
 * agree to float32 rounding, not bit for bit (LAPACK's operation order is
 * not reproducible here). From them on it is _perspective_grid and
 * _apply_grid_transform in float32, operation by operation: theta1 rows
 * (a, b, c), (d, e, f) divided by (W/2, H/2), the grid point of pixel
 * (j, y) at (j + 0.5, y + 0.5), gx = (x r0 + y r1 + r2) / (x g + y h + 1)
 * - 1 (the same for gy), then grid_sample's bilinear tap with zero padding
 * and the constant-one mask channel: out = v * mask + (1 - mask) * fill,
 * exactly as ops/color_impl.h's rotate_row does for F.rotate. torch builds
 * the grid with a batched matrix product that may sum in another order, so
 * the result is within float rounding of torchvision's (a few 1e-7 in 0-1
 * units where the coefficients agree; tests/python/test_op_perspective.py
 * states the bound).
 *
 * PIL input: torchvision's RandomPerspective on a PIL image resamples in
 * uint8 with Pillow's Image.transform(PERSPECTIVE, BILINEAR), rounding each
 * pixel to an integer; this op, like rotate and affine, works on the float
 * image and matches the tensor path, which differs from the PIL one by
 * that rounding (up to 1/255 where a pixel is interpolated).
 *
 * Position: a float stage (after the crops and resize, before normalize).
 * It moves pixels, so a flip after it is refused (flips are folded into
 * the resample, before it), and so are mask and box fields (op.h,
 * `geometric`). Bilinear only, as RandomPerspective's default.
 */
#include "ops/grid_tap.h"
#include "ops/op.h"

#include <math.h>
#include <string.h>

static const stk_spec_param params[] = {
    {"distortion_scale", 0, 0, 1, 0, 0.5},
    {"p", 0, 0, 1, 0, 0.5},
    {"fill", 1, 0, 255, 0, 0},
};

/* state: distortion_scale, p, fill (the schema's values), W, H. */
static int compile(const char *text, const stk_spec_op *o, uint32_t h, uint32_t w, int nc,
                   double *state)
{
    (void)text;
    (void)o;
    (void)nc;
    state[3] = w;
    state[4] = h;
    return 0;
}

static int draw(const double *state, stk_rng *rng, double *param, struct stk_plan_trace *tr)
{
    (void)tr;
    if (!(stk_rng_uniform(rng) < state[1]))
        return 0;
    int64_t W = (int64_t)state[3], H = (int64_t)state[4];
    int64_t dw = (int64_t)(state[0] * (double)(W / 2)), dh = (int64_t)(state[0] * (double)(H / 2));
    /* torchvision's order: top-left, top-right, bottom-right, bottom-left */
    param[0] = (double)stk_rng_range(rng, 0, dw);
    param[1] = (double)stk_rng_range(rng, 0, dh);
    param[2] = (double)stk_rng_range(rng, W - dw - 1, W - 1);
    param[3] = (double)stk_rng_range(rng, 0, dh);
    param[4] = (double)stk_rng_range(rng, W - dw - 1, W - 1);
    param[5] = (double)stk_rng_range(rng, H - dh - 1, H - 1);
    param[6] = (double)stk_rng_range(rng, 0, dw);
    param[7] = (double)stk_rng_range(rng, H - dh - 1, H - 1);
    return 1;
}

/* _get_perspective_coeffs: A c = b with, for each corner i (endpoint p1,
 * startpoint p2), the rows [p1x, p1y, 1, 0, 0, 0, -p2x p1x, -p2x p1y] = p2x
 * and [0, 0, 0, p1x, p1y, 1, -p2y p1x, -p2y p1y] = p2y. Gaussian
 * elimination with partial pivoting in double; a singular system (not
 * reachable from get_params' corners, which stay in their quadrants)
 * leaves the identity. */
static void solve_coeffs(const double *end, int64_t W, int64_t H, double c[8])
{
    const double start[8] = {0, 0, (double)(W - 1), 0, (double)(W - 1), (double)(H - 1),
                             0, (double)(H - 1)};
    double a[8][9];
    for (int i = 0; i < 4; i++) {
        double x = end[2 * i], y = end[2 * i + 1], sx = start[2 * i], sy = start[2 * i + 1];
        double r0[9] = {x, y, 1, 0, 0, 0, -sx * x, -sx * y, sx};
        double r1[9] = {0, 0, 0, x, y, 1, -sy * x, -sy * y, sy};
        memcpy(a[2 * i], r0, sizeof r0);
        memcpy(a[2 * i + 1], r1, sizeof r1);
    }
    for (int col = 0; col < 8; col++) {
        int piv = col;
        for (int r = col + 1; r < 8; r++)
            if (fabs(a[r][col]) > fabs(a[piv][col]))
                piv = r;
        if (a[piv][col] == 0.0) {
            const double id[8] = {1, 0, 0, 0, 1, 0, 0, 0};
            memcpy(c, id, sizeof id);
            return;
        }
        if (piv != col)
            for (int k = 0; k < 9; k++) {
                double t = a[col][k];
                a[col][k] = a[piv][k];
                a[piv][k] = t;
            }
        for (int r = col + 1; r < 8; r++) {
            double f = a[r][col] / a[col][col];
            for (int k = col; k < 9; k++)
                a[r][k] -= f * a[col][k];
        }
    }
    for (int r = 7; r >= 0; r--) {
        double s = a[r][8];
        for (int k = r + 1; k < 8; k++)
            s -= a[r][k] * c[k];
        c[r] = s / a[r][r];
    }
}

typedef struct persp_ctx {
    int32_t w, h;
    float r[6]; /* theta1^T / (W/2, H/2): gx numerator x r[0] + y r[1] + r[2], gy r[3..5] */
    float g, hh; /* theta2: x g + y hh + 1 */
    float fill;
} persp_ctx;

_Static_assert(sizeof(persp_ctx) <= sizeof(stk_fop_ctx), "the set-up fits the context");

static void begin(const double *state, const double *param, int32_t w, int32_t h, int nc,
                  float *tmp, stk_fop_ctx *ctx)
{
    (void)nc;
    (void)tmp;
    persp_ctx *pc = (persp_ctx *)(void *)ctx;
    double c[8];
    solve_coeffs(param, w, h, c);
    float hw = (float)(0.5 * w), hh = (float)(0.5 * h);
    pc->w = w;
    pc->h = h;
    pc->r[0] = (float)c[0] / hw;
    pc->r[1] = (float)c[1] / hw;
    pc->r[2] = (float)c[2] / hw;
    pc->r[3] = (float)c[3] / hh;
    pc->r[4] = (float)c[4] / hh;
    pc->r[5] = (float)c[5] / hh;
    pc->g = (float)c[6];
    pc->hh = (float)c[7];
    pc->fill = (float)state[2] / 255.0f;
}

static void image_row(const stk_fop_ctx *ctx, const stk_color_kernels *ck, const float *src,
                      int nc, int32_t y, float *const *p)
{
    (void)ck;
    const persp_ctx *pc = (const persp_ctx *)(const void *)ctx;
    int32_t w = pc->w, h = pc->h;
    size_t plane = (size_t)w * (size_t)h;
    float fw = (float)w, fh = (float)h, fy = (float)y + 0.5f;
    for (int32_t j = 0; j < w; j++) {
        float fx = (float)j + 0.5f;
        float den = (fx * pc->g + fy * pc->hh) + 1.0f;
        float gx = ((fx * pc->r[0] + fy * pc->r[1]) + pc->r[2]) / den - 1.0f;
        float gy = ((fx * pc->r[3] + fy * pc->r[4]) + pc->r[5]) / den - 1.0f;
        /* grid_sample, bilinear, zeros, align_corners=False (rotate_row's tap) */
        stk_grid_tap t = stk_grid_tap_at(gx, gy, fw, fh);
        for (int c = 0; c < nc; c++) {
            float v = stk_grid_blend(src + (size_t)c * plane, (size_t)w, &t);
            p[c][j] = v * t.mask + (1.0f - t.mask) * pc->fill;
        }
    }
}

static const stk_float_hooks hooks = {
    .whole_image = 1,
    .geometric = 1,
    .compile = compile,
    .draw = draw,
    .begin = begin,
    .image_row = image_row,
};

const stk_op_desc stk_op_perspective = {
    .syntax = {"perspective", NULL, STK_OP_FLOAT, STK_ORD_PIXELS | STK_ORD_FLOAT,
               "(it works on pixel values)", NULL, params, 3,
               "[DISTORTION_SCALE] [P] [fill=V]"},
    .torchvision = "RandomPerspective",
    .fl = &hooks,
};
