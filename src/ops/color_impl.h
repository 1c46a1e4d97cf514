/*
 * color_impl.h — the row functions of color.h, included twice by color.c:
 * once plain (CSFX c, CATTR empty, CFMA 0) and once for AVX2 (CSFX avx2,
 * CATTR target("avx2,f16c,fma"), CFMA 1), so the compiler vectorises the
 * same loops for each.
 * Expressions are written operation by operation in torchvision's order;
 * -ffp-contract=off (every compiler, CMakeLists.txt and setup.py) stops
 * a*b+c from becoming a fused multiply-add, so
 * both builds round identically.
 */
#define CN_(n, s) n##_##s
#define CN2(n, s) CN_(n, s)
#define CN(n) CN2(n, CSFX)

static inline float CN(clamp01)(float v) { return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v; }

/* ToTensor: v / 255.0f, the float division torch's div(255) does, without
 * dividing. With FMA: q = v * r (r = 1/255 rounded), e = v - q * 255
 * (exact, fused), q + e * r (fused) — the correctly rounded quotient for
 * every v in 0..255 (checked exhaustively in tests/test_image_ops.c).
 * Without: v * (1.0 / 255) in double, rounded to float — within 2^-52 of
 * v/255, which (a repeating binary fraction) is never that close to a float
 * rounding boundary, so also the correctly rounded quotient. */
#if CFMA
#define CN_UNIT(v) fmaf(fmaf(-((float)(v) * (1.0f / 255.0f)), 255.0f, (float)(v)), (1.0f / 255.0f), \
                        (float)(v) * (1.0f / 255.0f))
#else
#define CN_UNIT(v) ((float)((double)(v) * (1.0 / 255.0)))
#endif
CATTR static void CN(u8_to_float)(const uint8_t *row, int32_t n, int nc, float *const *p)
{
    if (nc == 3) {
        float *r = p[0], *g = p[1], *b = p[2];
        for (int32_t i = 0; i < n; i++) {
            r[i] = CN_UNIT(row[3 * i]);
            g[i] = CN_UNIT(row[3 * i + 1]);
            b[i] = CN_UNIT(row[3 * i + 2]);
        }
    } else {
        float *x = p[0];
        for (int32_t i = 0; i < n; i++)
            x[i] = CN_UNIT(row[i]);
    }
}
#undef CN_UNIT

CATTR static void CN(brightness)(float *const *p, int32_t n, int nc, float f)
{
    for (int c = 0; c < nc; c++) {
        float *x = p[c];
        for (int32_t i = 0; i < n; i++)
            x[i] = CN(clamp01)(f * x[i]);
    }
}

CATTR static void CN(contrast)(float *const *p, int32_t n, int nc, float f, float b)
{
    for (int c = 0; c < nc; c++) {
        float *x = p[c];
        for (int32_t i = 0; i < n; i++)
            x[i] = CN(clamp01)(f * x[i] + b);
    }
}

CATTR static void CN(saturation)(float *const *p, int32_t n, int nc, float f, float g1)
{
    if (nc != 3)
        return;
    float *r = p[0], *g = p[1], *b = p[2];
    for (int32_t i = 0; i < n; i++) {
        float gray = (0.2989f * r[i] + 0.587f * g[i]) + 0.114f * b[i];
        float k = g1 * gray;
        r[i] = CN(clamp01)(f * r[i] + k);
        g[i] = CN(clamp01)(f * g[i] + k);
        b[i] = CN(clamp01)(f * b[i] + k);
    }
}

CATTR static void CN(hue)(float *const *p, int32_t n, int nc, float f)
{
    if (nc != 3)
        return;
    float *R = p[0], *G = p[1], *B = p[2];
    for (int32_t i = 0; i < n; i++) {
        float r = R[i], g = G[i], b = B[i];
        /* _rgb2hsv */
        float mx = r > g ? r : g;
        mx = mx > b ? mx : b;
        float mn = r < g ? r : g;
        mn = mn < b ? mn : b;
        int eq = mx == mn;
        float cr = mx - mn;
        float s = cr / (eq ? 1.0f : mx);
        float crd = eq ? 1.0f : cr;
        float rc = (mx - r) / crd, gc = (mx - g) / crd, bc = (mx - b) / crd;
        float hr = (mx == r) ? (bc - gc) : 0.0f;
        float hg = (mx == g && mx != r) ? ((2.0f + rc) - bc) : 0.0f;
        float hb = (mx != g && mx != r) ? ((4.0f + gc) - rc) : 0.0f;
        float h = (hr + hg) + hb;
        h = h / 6.0f + 1.0f;
        h = h - floorf(h); /* fmod(h, 1) for h >= 0, exactly */
        /* adjust_hue: (h + f) % 1.0 with torch's remainder (result >= 0) */
        h = h + f;
        h = h - floorf(h);
        /* _hsv2rgb */
        float h6 = h * 6.0f;
        float fi = floorf(h6);
        float fr = h6 - fi;
        int ii = (int)fi;
        ii = ii >= 6 ? ii - 6 : ii;
        float v = mx;
        float pp = CN(clamp01)(v * (1.0f - s));
        float q = CN(clamp01)(v * (1.0f - s * fr));
        float t = CN(clamp01)(v * (1.0f - s * (1.0f - fr)));
        float ro = ii == 0 ? v : ii == 1 ? q : ii == 2 ? pp : ii == 3 ? pp : ii == 4 ? t : v;
        float go = ii == 0 ? t : ii == 1 ? v : ii == 2 ? v : ii == 3 ? q : ii == 4 ? pp : pp;
        float bo = ii == 0 ? pp : ii == 1 ? pp : ii == 2 ? t : ii == 3 ? v : ii == 4 ? v : q;
        R[i] = ro;
        G[i] = go;
        B[i] = bo;
    }
}

CATTR static double CN(gray_sum)(float *const *p, int32_t n, int nc)
{
    /* Eight float partial sums over blocks of 64 values, the blocks added in
     * double: within a few ulps of torch's cascade sum, and vectorisable. */
    double total = 0.0;
    int32_t i = 0;
    const float *r = p[0], *g = nc == 3 ? p[1] : p[0], *b = nc == 3 ? p[2] : p[0];
    for (; i + 64 <= n; i += 64) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (nc == 3) {
            for (int32_t j = 0; j < 64; j += 8)
                for (int l = 0; l < 8; l++)
                    acc[l] += (0.2989f * r[i + j + l] + 0.587f * g[i + j + l]) +
                              0.114f * b[i + j + l];
        } else {
            for (int32_t j = 0; j < 64; j += 8)
                for (int l = 0; l < 8; l++)
                    acc[l] += r[i + j + l];
        }
        total += (double)(((acc[0] + acc[1]) + (acc[2] + acc[3])) +
                          ((acc[4] + acc[5]) + (acc[6] + acc[7])));
    }
    for (; i < n; i++)
        total += nc == 3 ? (double)((0.2989f * r[i] + 0.587f * g[i]) + 0.114f * b[i])
                         : (double)r[i];
    return total;
}

CATTR static void CN(float_to_out)(const stk_outfmt *o, float *const *p, int32_t y, void *out)
{
    int nc = o->nc;
    int32_t w = o->width;
    size_t plane = (size_t)o->width * (size_t)o->height;
    for (int c = 0; c < nc; c++) {
        const float *x = p[c];
        float sc = o->fscale[c], bi = o->fbias[c];
        if (o->layout == STK_CHW || nc == 1) {
            size_t at = (size_t)c * plane + (size_t)y * w;
            if (o->dtype == STK_F32) {
                float *d = (float *)out + at;
                for (int32_t i = 0; i < w; i++)
                    d[i] = x[i] * sc + bi;
            } else if (o->dtype == STK_F16) {
                uint16_t *d = (uint16_t *)out + at;
                for (int32_t i = 0; i < w; i++)
                    d[i] = stk_f32_to_f16(x[i] * sc + bi);
            } else if (o->dtype == STK_BF16) {
                uint16_t *d = (uint16_t *)out + at;
                for (int32_t i = 0; i < w; i++)
                    d[i] = stk_f32_to_bf16(x[i] * sc + bi);
            } else {
                uint8_t *d = (uint8_t *)out + at;
                for (int32_t i = 0; i < w; i++)
                    d[i] = (uint8_t)lrintf(CN(clamp01)(x[i]) * 255.0f);
            }
        } else {
            size_t at = (size_t)y * w * nc + c;
            if (o->dtype == STK_F32) {
                float *d = (float *)out + at;
                for (int32_t i = 0; i < w; i++)
                    d[(size_t)i * nc] = x[i] * sc + bi;
            } else if (o->dtype == STK_F16) {
                uint16_t *d = (uint16_t *)out + at;
                for (int32_t i = 0; i < w; i++)
                    d[(size_t)i * nc] = stk_f32_to_f16(x[i] * sc + bi);
            } else if (o->dtype == STK_BF16) {
                uint16_t *d = (uint16_t *)out + at;
                for (int32_t i = 0; i < w; i++)
                    d[(size_t)i * nc] = stk_f32_to_bf16(x[i] * sc + bi);
            } else {
                uint8_t *d = (uint8_t *)out + at;
                for (int32_t i = 0; i < w; i++)
                    d[(size_t)i * nc] = (uint8_t)lrintf(CN(clamp01)(x[i]) * 255.0f);
            }
        }
    }
}

/* The generic u8 -> output row (any layout, dtype, channels). */
CATTR static void CN(u8_to_out_generic)(const stk_outfmt *o, const uint8_t *row, int32_t y,
                                        void *out)
{
    int nc = o->nc;
    int32_t w = o->width;
    size_t plane = (size_t)o->width * (size_t)o->height;
    if (o->layout == STK_HWC || nc == 1) {
        size_t n = (size_t)w * nc, at = (size_t)y * n;
        if (o->dtype == STK_U8) {
            memcpy((uint8_t *)out + at, row, n);
        } else if (o->dtype == STK_F32) {
            float *d = (float *)out + at;
            for (size_t i = 0; i < n; i++)
                d[i] = (float)row[i] * o->scale[i % nc] + o->bias[i % nc];
        } else if (o->dtype == STK_BF16) {
            uint16_t *d = (uint16_t *)out + at;
            for (size_t i = 0; i < n; i++)
                d[i] = stk_f32_to_bf16((float)row[i] * o->scale[i % nc] + o->bias[i % nc]);
        } else {
            uint16_t *d = (uint16_t *)out + at;
            for (size_t i = 0; i < n; i++)
                d[i] = stk_f32_to_f16((float)row[i] * o->scale[i % nc] + o->bias[i % nc]);
        }
        return;
    }
    for (int c = 0; c < nc; c++) {
        size_t at = (size_t)c * plane + (size_t)y * w;
        float sc = o->scale[c], bi = o->bias[c];
        const uint8_t *s = row + c;
        if (o->dtype == STK_U8) {
            uint8_t *d = (uint8_t *)out + at;
            for (int32_t i = 0; i < w; i++)
                d[i] = s[(size_t)i * nc];
        } else if (o->dtype == STK_F32) {
            float *d = (float *)out + at;
            for (int32_t i = 0; i < w; i++)
                d[i] = (float)s[(size_t)i * nc] * sc + bi;
        } else if (o->dtype == STK_BF16) {
            uint16_t *d = (uint16_t *)out + at;
            for (int32_t i = 0; i < w; i++)
                d[i] = stk_f32_to_bf16((float)s[(size_t)i * nc] * sc + bi);
        } else {
            uint16_t *d = (uint16_t *)out + at;
            for (int32_t i = 0; i < w; i++)
                d[i] = stk_f32_to_f16((float)s[(size_t)i * nc] * sc + bi);
        }
    }
}

/*
 * Rotation (torchvision F.rotate on a float tensor, bilinear): output pixel
 * (j, y) samples the input at the normalised grid point
 *   gx = x * m0 + y' * m1, gy = x * m2 + y' * m3,  x = j - w/2 + 0.5, y' = y - h/2 + 0.5
 * unnormalised as ix = ((gx + 1) * w - 1) / 2 (align_corners=False), with
 * zero padding; a constant-one channel sampled the same way gives the mask
 * and the result is out * mask + (1 - mask) * fill, as torchvision's
 * _apply_grid_transform does.
 */
CATTR static void CN(rotate_row)(const stk_rotation *R, const float *src, int nc, int32_t y,
                                 float *const *p)
{
    int32_t w = R->w, h = R->h;
    size_t plane = (size_t)w * (size_t)h;
    float fy = ((float)y - (float)h * 0.5f) + 0.5f;
    float fw = (float)w, fh = (float)h;
    for (int32_t j = 0; j < w; j++) {
        float fx = ((float)j - (float)w * 0.5f) + 0.5f;
        float gx = (fx * R->m[0] + fy * R->m[1]) + R->t[0];
        float gy = (fx * R->m[2] + fy * R->m[3]) + R->t[1];
        if (R->nearest) { /* grid_sample nearest: (g + 1) * size/2 - 0.5, half to even */
            float nx = nearbyintf((gx + 1.0f) * (fw / 2.0f) - 0.5f);
            float ny = nearbyintf((gy + 1.0f) * (fh / 2.0f) - 0.5f);
            int in = nx >= 0.0f && nx < fw && ny >= 0.0f && ny < fh;
            size_t at = in ? (size_t)(int32_t)ny * w + (size_t)(int32_t)nx : 0;
            for (int c = 0; c < nc; c++)
                p[c][j] = in ? src[(size_t)c * plane + at] : R->fill[c];
            continue;
        }
        stk_grid_tap t = stk_grid_tap_at(gx, gy, fw, fh);
        for (int c = 0; c < nc; c++) {
            float v = stk_grid_blend(src + (size_t)c * plane, (size_t)w, &t);
            p[c][j] = v * t.mask + (1.0f - t.mask) * R->fill[c];
        }
    }
}

CATTR static void CN(grayscale)(float *const *p, int32_t n, int nc)
{
    if (nc != 3)
        return;
    float *r = p[0], *g = p[1], *b = p[2];
    for (int32_t i = 0; i < n; i++) {
        float l = (0.2989f * r[i] + 0.587f * g[i]) + 0.114f * b[i];
        r[i] = l;
        g[i] = l;
        b[i] = l;
    }
}

/* torch's "reflect" index: -1 -> 1, n -> n - 2 (|pad| < n, checked at compile). */
static inline int32_t CN(reflect)(int32_t i, int32_t n)
{
    if (i < 0)
        return -i;
    if (i >= n)
        return 2 * (n - 1) - i;
    return i;
}

CATTR static void CN(blur_row)(const stk_blur *B, const float *src, int nc, int32_t y,
                               float *const *p)
{
    int32_t w = B->w, h = B->h;
    int rx = B->kx / 2, ry = B->ky / 2;
    size_t plane = (size_t)w * (size_t)h;
    float *t = B->tmp;
    for (int c = 0; c < nc; c++) {
        const float *s = src + (size_t)c * plane;
        for (int32_t x = 0; x < w; x++)
            t[x] = 0.0f;
        for (int i = 0; i < B->ky; i++) {
            const float *r = s + (size_t)CN(reflect)(y + i - ry, h) * (size_t)w;
            float k = B->wy[i];
            for (int32_t x = 0; x < w; x++)
                t[x] += k * r[x];
        }
        /* Horizontal: each output sums its taps j = 0..kx-1 in order from
         * 0.0f; the interior runs tap by tap over all x (vectorisable, the
         * same sums in the same order), the edges reflect. */
        float *d = p[c];
        int32_t x0 = rx < w ? rx : w, x1 = w - rx > x0 ? w - rx : x0;
        for (int32_t x = 0; x < w; x++) {
            if (x == x0 && x1 > x0) {
                for (int32_t xi = x0; xi < x1; xi++)
                    d[xi] = 0.0f;
                for (int j = 0; j < B->kx; j++) {
                    float k = B->wx[j];
                    int32_t s0 = j - rx;
                    for (int32_t xi = x0; xi < x1; xi++)
                        d[xi] += k * t[xi + s0];
                }
                x = x1 - 1;
                continue;
            }
            float acc = 0.0f;
            for (int j = 0; j < B->kx; j++)
                acc += B->wx[j] * t[CN(reflect)(x + j - rx, w)];
            d[x] = acc;
        }
    }
}

#undef CN
#undef CN2
#undef CN_
