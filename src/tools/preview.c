/*
 * preview.c — stk_preview: a picture of what a pipeline feeds the network.
 *
 * It runs the spec through an ordinary loader (so the samples are exactly
 * the ones training would see for that seed: epoch 0, shuffled, corrupt
 * samples skipped), takes the first `count` of them, turns each back into
 * RGB bytes, and writes them as one PNG grid of cells on a dark gray
 * background.
 *
 * Turning a sample back into pixels undoes what `normalize` and `to` did:
 * float values x become x * std[c] + mean[c] (when the spec normalizes),
 * times 255, rounded and clamped to 0..255; f16 is widened first; CHW and
 * HWC are both read; one channel is shown as gray, and with more than three
 * the first three are shown. The mean and std come from parsing the same
 * spec, so presets and explicit values both work.
 *
 * Layout (stk_preview_write, stoker.h). A tile is the sample's H x W times
 * `scale` (each pixel a scale x scale block: small images such as CIFAR's
 * are enlarged so that they can be seen, without inventing pixels). A cell
 * is one tile, or with `compare` the original (fitted into a tile of the
 * same size, centred) then 2 pixels then the augmented tile; with `labels`
 * an 11-pixel caption strip below. Cells are 2 pixels apart (8 with
 * compare, so that pairs stand apart), row-major, `columns` per row:
 *   cell (r, c) at x = c * (cell_w + gap), y = r * (tile_h + caption + gap)
 * The caption is drawn in white (255) with the 5x7 font below, 6 pixels
 * per character, starting 2 pixels below the tile at the cell's left edge.
 */
#include "codec/codec_write.h"
#include "core/error.h"
#include "core/util.h"
#include "ops/half.h"
#include "ops/op.h"
#include "ops/resample.h"
#include "stoker/stoker.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREVIEW_GAP 2
#define PREVIEW_COMPARE_GAP 8 /* between cells when they hold pairs */
#define PREVIEW_BG 40
#define PREVIEW_MAX_COUNT 4096
#define PREVIEW_MIN_SIDE 64   /* automatic scale: tiles enlarged up to this */
#define PREVIEW_MAX_SCALE 64
#define FONT_W 5
#define FONT_H 7
#define FONT_ADVANCE 6
#define CAPTION_H (FONT_H + 4)

/* The classic 5x7 LCD font, ASCII 32..126: five column bytes per glyph,
 * bit 0 the top row. */
static const uint8_t font5x7[95][5] = {
    {0x00, 0x00, 0x00, 0x00, 0x00}, {0x00, 0x00, 0x5F, 0x00, 0x00}, {0x00, 0x07, 0x00, 0x07, 0x00},
    {0x14, 0x7F, 0x14, 0x7F, 0x14}, {0x24, 0x2A, 0x7F, 0x2A, 0x12}, {0x23, 0x13, 0x08, 0x64, 0x62},
    {0x36, 0x49, 0x55, 0x22, 0x50}, {0x00, 0x05, 0x03, 0x00, 0x00}, {0x00, 0x1C, 0x22, 0x41, 0x00},
    {0x00, 0x41, 0x22, 0x1C, 0x00}, {0x08, 0x2A, 0x1C, 0x2A, 0x08}, {0x08, 0x08, 0x3E, 0x08, 0x08},
    {0x00, 0x50, 0x30, 0x00, 0x00}, {0x08, 0x08, 0x08, 0x08, 0x08}, {0x00, 0x60, 0x60, 0x00, 0x00},
    {0x20, 0x10, 0x08, 0x04, 0x02}, {0x3E, 0x51, 0x49, 0x45, 0x3E}, {0x00, 0x42, 0x7F, 0x40, 0x00},
    {0x42, 0x61, 0x51, 0x49, 0x46}, {0x21, 0x41, 0x45, 0x4B, 0x31}, {0x18, 0x14, 0x12, 0x7F, 0x10},
    {0x27, 0x45, 0x45, 0x45, 0x39}, {0x3C, 0x4A, 0x49, 0x49, 0x30}, {0x01, 0x71, 0x09, 0x05, 0x03},
    {0x36, 0x49, 0x49, 0x49, 0x36}, {0x06, 0x49, 0x49, 0x29, 0x1E}, {0x00, 0x36, 0x36, 0x00, 0x00},
    {0x00, 0x56, 0x36, 0x00, 0x00}, {0x08, 0x14, 0x22, 0x41, 0x00}, {0x14, 0x14, 0x14, 0x14, 0x14},
    {0x00, 0x41, 0x22, 0x14, 0x08}, {0x02, 0x01, 0x51, 0x09, 0x06}, {0x32, 0x49, 0x79, 0x41, 0x3E},
    {0x7E, 0x11, 0x11, 0x11, 0x7E}, {0x7F, 0x49, 0x49, 0x49, 0x36}, {0x3E, 0x41, 0x41, 0x41, 0x22},
    {0x7F, 0x41, 0x41, 0x22, 0x1C}, {0x7F, 0x49, 0x49, 0x49, 0x41}, {0x7F, 0x09, 0x09, 0x01, 0x01},
    {0x3E, 0x41, 0x41, 0x51, 0x32}, {0x7F, 0x08, 0x08, 0x08, 0x7F}, {0x00, 0x41, 0x7F, 0x41, 0x00},
    {0x20, 0x40, 0x41, 0x3F, 0x01}, {0x7F, 0x08, 0x14, 0x22, 0x41}, {0x7F, 0x40, 0x40, 0x40, 0x40},
    {0x7F, 0x02, 0x04, 0x02, 0x7F}, {0x7F, 0x04, 0x08, 0x10, 0x7F}, {0x3E, 0x41, 0x41, 0x41, 0x3E},
    {0x7F, 0x09, 0x09, 0x09, 0x06}, {0x3E, 0x41, 0x51, 0x21, 0x5E}, {0x7F, 0x09, 0x19, 0x29, 0x46},
    {0x46, 0x49, 0x49, 0x49, 0x31}, {0x01, 0x01, 0x7F, 0x01, 0x01}, {0x3F, 0x40, 0x40, 0x40, 0x3F},
    {0x1F, 0x20, 0x40, 0x20, 0x1F}, {0x7F, 0x20, 0x18, 0x20, 0x7F}, {0x63, 0x14, 0x08, 0x14, 0x63},
    {0x03, 0x04, 0x78, 0x04, 0x03}, {0x61, 0x51, 0x49, 0x45, 0x43}, {0x00, 0x00, 0x7F, 0x41, 0x41},
    {0x02, 0x04, 0x08, 0x10, 0x20}, {0x41, 0x41, 0x7F, 0x00, 0x00}, {0x04, 0x02, 0x01, 0x02, 0x04},
    {0x40, 0x40, 0x40, 0x40, 0x40}, {0x00, 0x01, 0x02, 0x04, 0x00}, {0x20, 0x54, 0x54, 0x54, 0x78},
    {0x7F, 0x48, 0x44, 0x44, 0x38}, {0x38, 0x44, 0x44, 0x44, 0x20}, {0x38, 0x44, 0x44, 0x48, 0x7F},
    {0x38, 0x54, 0x54, 0x54, 0x18}, {0x08, 0x7E, 0x09, 0x01, 0x02}, {0x08, 0x14, 0x54, 0x54, 0x3C},
    {0x7F, 0x08, 0x04, 0x04, 0x78}, {0x00, 0x44, 0x7D, 0x40, 0x00}, {0x20, 0x40, 0x44, 0x3D, 0x00},
    {0x00, 0x7F, 0x10, 0x28, 0x44}, {0x00, 0x41, 0x7F, 0x40, 0x00}, {0x7C, 0x04, 0x18, 0x04, 0x78},
    {0x7C, 0x08, 0x04, 0x04, 0x78}, {0x38, 0x44, 0x44, 0x44, 0x38}, {0x7C, 0x14, 0x14, 0x14, 0x08},
    {0x08, 0x14, 0x14, 0x18, 0x7C}, {0x7C, 0x08, 0x04, 0x04, 0x08}, {0x48, 0x54, 0x54, 0x54, 0x20},
    {0x04, 0x3F, 0x44, 0x40, 0x20}, {0x3C, 0x40, 0x40, 0x20, 0x7C}, {0x1C, 0x20, 0x40, 0x20, 0x1C},
    {0x3C, 0x40, 0x30, 0x40, 0x3C}, {0x44, 0x28, 0x10, 0x28, 0x44}, {0x0C, 0x50, 0x50, 0x50, 0x3C},
    {0x44, 0x64, 0x54, 0x4C, 0x44}, {0x00, 0x08, 0x36, 0x41, 0x00}, {0x00, 0x00, 0x7F, 0x00, 0x00},
    {0x00, 0x41, 0x36, 0x08, 0x00}, {0x10, 0x08, 0x08, 0x10, 0x08},
};

/* `text` in white at (x0, y0) of the gw-wide RGB image, as many characters
 * as fit in maxw pixels (bytes outside printable ASCII drawn as '?'). */
static void draw_text(uint8_t *img, uint64_t gw, uint64_t x0, uint64_t y0, uint64_t maxw,
                      const char *text)
{
    uint64_t fit = (maxw + 1) / FONT_ADVANCE;
    for (uint64_t i = 0; text[i] && i < fit; i++) {
        unsigned char ch = (unsigned char)text[i];
        const uint8_t *g = font5x7[(ch < 32 || ch > 126 ? '?' : ch) - 32];
        for (int cx = 0; cx < FONT_W; cx++)
            for (int ry = 0; ry < FONT_H; ry++)
                if (g[cx] >> ry & 1) {
                    uint8_t *d = img + ((y0 + (uint64_t)ry) * gw + x0 + i * FONT_ADVANCE +
                                        (uint64_t)cx) * 3;
                    d[0] = d[1] = d[2] = 255;
                }
    }
}

/* Sample `index` decoded whole, fitted into the tw x th box at (ox, oy)
 * with its aspect kept and centred: a whole-number enlargement by nearest
 * neighbour, any other size by Pillow's antialiased bilinear. */
static int draw_original(const stk_dataset *ds, uint64_t index, uint8_t *img, uint64_t gw,
                         uint64_t ox, uint64_t oy, uint64_t tw, uint64_t th)
{
    uint8_t *px = NULL, *rgb = NULL, *fit = NULL;
    uint32_t shape[3];
    int64_t n = stk_dataset_read_alloc(ds, index, &px, shape, NULL);
    if (n < 0)
        return (int)n;
    int rc = 0;
    uint64_t oh = shape[0], ow = shape[1], oc = shape[2];
    if (!oh || !ow || !oc) {
        rc = stk_fail(STK_EDATA, "stk_preview: sample %llu has no pixels", (unsigned long long)index);
        goto done;
    }
    rgb = malloc((size_t)(oh * ow * 3));
    if (!rgb) {
        rc = stk_fail(STK_ENOMEM, "stk_preview: out of memory");
        goto done;
    }
    for (uint64_t i = 0; i < oh * ow; i++)
        for (int c = 0; c < 3; c++)
            rgb[i * 3 + (uint64_t)c] = px[i * oc + (oc >= 3 ? (uint64_t)c : 0)];
    /* width-limited when tw / ow <= th / oh */
    bool by_width = tw * oh <= th * ow;
    uint64_t dw = by_width ? tw : (ow * th + oh / 2) / oh;
    uint64_t dh = by_width ? (oh * tw + ow / 2) / ow : th;
    dw = dw ? dw : 1;
    dh = dh ? dh : 1;
    bool whole = by_width ? tw % ow == 0 && dh == oh * (tw / ow)
                          : th % oh == 0 && dw == ow * (th / oh);
    const uint8_t *src = rgb;
    uint64_t k = 1;
    if (whole) {
        k = by_width ? tw / ow : th / oh;
    } else {
        fit = malloc((size_t)(dw * dh * 3 + 64));
        if (!fit) {
            rc = stk_fail(STK_ENOMEM, "stk_preview: out of memory");
            goto done;
        }
        if ((rc = stk_rs_resize_u8(rgb, (uint32_t)oh, (uint32_t)ow, (ptrdiff_t)(ow * 3), 3, NULL,
                                   (uint32_t)dh, (uint32_t)dw, fit, NULL)) < 0)
            goto done;
        src = fit;
    }
    uint64_t x0 = ox + (tw - dw) / 2, y0 = oy + (th - dh) / 2, sw = whole ? ow : dw;
    for (uint64_t y = 0; y < dh; y++)
        for (uint64_t x = 0; x < dw; x++)
            memcpy(img + ((y0 + y) * gw + x0 + x) * 3, src + ((y / k) * sw + x / k) * 3, 3);
done:
    stk_free(px);
    free(rgb);
    free(fit);
    return rc;
}

/* Channel c of pixel (y, x) of one sample, as a float in the output dtype's
 * units. */
static float sample_value(const stk_batch *b, const uint8_t *s, int64_t y, int64_t x, int64_t c,
                          int64_t h, int64_t w, int64_t nc)
{
    size_t at = b->layout == STK_CHW ? (size_t)((c * h + y) * w + x)
                                     : (size_t)((y * w + x) * nc + c);
    switch (b->dtype) {
    case STK_U8: return (float)s[at];
    case STK_F16: return stk_f16_to_f32(((const uint16_t *)s)[at]);
    case STK_F32: return ((const float *)s)[at];
    case STK_BF16: return stk_bf16_to_f32(((const uint16_t *)s)[at]);
    }
    return 0.0f;
}

int stk_preview(stk_dataset *ds, const char *spec_text, uint32_t count, uint64_t seed,
                uint32_t columns, const char *png_path)
{
    stk_preview_options o;
    memset(&o, 0, sizeof o);
    o.count = count;
    o.seed = seed;
    o.columns = columns;
    o.scale = 1; /* the original call draws samples at their size */
    return stk_preview_write(ds, spec_text, &o, png_path);
}

int stk_preview_write(stk_dataset *ds, const char *spec_text, const stk_preview_options *opts,
                      const char *png_path)
{
    int rc = 0;
    stk_spec *spec = NULL;
    stk_loader *l = NULL;
    uint8_t *img = NULL;
    stk_batch batch;
    int have_batch = 0;
    stk_preview_options o;

    if (!ds || !png_path || !opts)
        return stk_fail(STK_EINVAL, "stk_preview: %s is NULL",
                        !ds ? "dataset" : !png_path ? "png_path" : "opts");
    o = *opts;
    if ((rc = stk_reserved_check(o.reserved_, sizeof o.reserved_ / sizeof o.reserved_[0],
                                 "stk_preview_options")) < 0)
        return rc;
    if (o.reserved32_)
        return stk_fail(STK_EINVAL, "stk_preview_options: reserved32_ is not zero");
    if (!spec_text)
        spec_text = "";
    uint32_t count = o.count ? o.count : 16;
    if (count > PREVIEW_MAX_COUNT)
        return stk_fail(STK_EINVAL, "stk_preview: count %u is more than %d", count,
                        PREVIEW_MAX_COUNT);
    if (o.scale > PREVIEW_MAX_SCALE)
        return stk_fail(STK_EINVAL, "stk_preview: scale %u is more than %d", o.scale,
                        PREVIEW_MAX_SCALE);

    /* mean/std of the spec's normalize, to undo it */
    spec = malloc(sizeof *spec);
    if (!spec)
        return stk_fail(STK_ENOMEM, "stk_preview: out of memory");
    if ((rc = stk_spec_parse(spec_text, spec)) < 0)
        goto done;
    const stk_spec_op *norm = NULL;
    for (int i = 0; i < spec->nops; i++)
        if (spec->ops[i].kind == STK_OP_NORMALIZE)
            norm = &spec->ops[i];

    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    if (info.count == 0) {
        rc = stk_fail(STK_EINVAL, "stk_preview: the dataset is empty");
        goto done;
    }
    if (count > info.count)
        count = (uint32_t)info.count;
    stk_loader_options lo;
    memset(&lo, 0, sizeof lo);
    lo.batch_size = count;
    lo.threads = 2;
    lo.prefetch = 1;
    lo.seed = o.seed;
    lo.on_error = STK_ON_ERROR_SKIP;
    if ((rc = stk_loader_create(ds, spec_text, &lo, &l)) < 0)
        goto done;

    int64_t shape[3];
    stk_dtype dt;
    stk_layout lay;
    size_t sample_bytes;
    stk_loader_sample_shape(l, shape, &dt, &lay, &sample_bytes);
    int64_t h = lay == STK_CHW ? shape[1] : shape[0];
    int64_t w = lay == STK_CHW ? shape[2] : shape[1];
    int64_t nc = lay == STK_CHW ? shape[0] : shape[2];
    uint64_t k = o.scale;
    if (!k) {
        int64_t side = h < w ? h : w;
        k = side >= PREVIEW_MIN_SIDE || side <= 0 ? 1
                                                 : (uint64_t)((PREVIEW_MIN_SIDE + side - 1) / side);
    }
    uint64_t tw = (uint64_t)w * k, th = (uint64_t)h * k;
    uint64_t cw = o.compare ? 2 * tw + PREVIEW_GAP : tw;
    uint64_t ch = th + (o.labels ? CAPTION_H : 0);
    uint64_t gap = o.compare ? PREVIEW_COMPARE_GAP : PREVIEW_GAP;
    uint32_t cols = o.columns ? o.columns : (uint32_t)ceil(sqrt((double)count));
    if (cols > count)
        cols = count;
    uint32_t rows = (count + cols - 1) / cols;
    uint64_t gw = (uint64_t)cols * cw + (uint64_t)(cols - 1) * gap;
    uint64_t gh = (uint64_t)rows * ch + (uint64_t)(rows - 1) * gap;
    if (tw > (1u << 24) || th > (1u << 24) || gw > (1u << 24) || gh > (1u << 24) ||
        gw * gh > (1ull << 30)) {
        rc = stk_fail(STK_ELIMIT, "stk_preview: a %llux%llu grid is too large",
                      (unsigned long long)gh, (unsigned long long)gw);
        goto done;
    }
    img = malloc((size_t)(gw * gh * 3));
    if (!img) {
        rc = stk_fail(STK_ENOMEM, "stk_preview: out of memory");
        goto done;
    }
    memset(img, PREVIEW_BG, (size_t)(gw * gh * 3));

    uint32_t done_n = 0;
    while (done_n < count) {
        rc = stk_loader_next(l, &batch);
        if (rc < 0)
            goto done;
        if (rc == 0)
            break; /* end of the epoch: fewer good samples than asked */
        have_batch = 1;
        for (uint32_t b = 0; b < batch.size && done_n < count; b++, done_n++) {
            const uint8_t *s = (const uint8_t *)batch.data + (size_t)b * batch.sample_bytes;
            uint64_t ox = (uint64_t)(done_n % cols) * (cw + gap);
            uint64_t oy = (uint64_t)(done_n / cols) * (ch + gap);
            if (o.compare) {
                if ((rc = draw_original(ds, batch.indices[b], img, gw, ox, oy, tw, th)) < 0)
                    goto done;
                ox += tw + PREVIEW_GAP;
            }
            for (int64_t y = 0; y < h; y++) {
                for (int64_t x = 0; x < w; x++) {
                    uint8_t px[3];
                    for (int c = 0; c < 3; c++) {
                        int64_t sc = nc >= 3 ? c : 0;
                        float v = sample_value(&batch, s, y, x, sc, h, w, nc);
                        if (dt != STK_U8) {
                            if (norm) {
                                uint32_t nm = norm->u.normalize.nmean, ns = norm->u.normalize.nstd;
                                double m = norm->u.normalize.mean[nm == 1 ? 0 : sc];
                                double sd = norm->u.normalize.std[ns == 1 ? 0 : sc];
                                v = (float)((double)v * sd + m);
                            }
                            v *= 255.0f;
                        }
                        v = v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
                        px[c] = (uint8_t)lrintf(v);
                    }
                    /* a k x k block per pixel */
                    for (uint64_t dy = 0; dy < k; dy++) {
                        uint8_t *d = img + ((oy + (uint64_t)y * k + dy) * gw + ox + (uint64_t)x * k) * 3;
                        for (uint64_t dx = 0; dx < k; dx++)
                            memcpy(d + dx * 3, px, 3);
                    }
                }
            }
            if (o.labels) {
                char text[160];
                uint64_t cx = (uint64_t)(done_n % cols) * (cw + gap);
                const char *name = stk_dataset_class_name(ds, batch.labels[b] >= 0 &&
                                                                      batch.labels[b] <= UINT32_MAX
                                                                  ? (uint32_t)batch.labels[b]
                                                                  : UINT32_MAX);
                if (name)
                    snprintf(text, sizeof text, "#%llu %s", (unsigned long long)batch.indices[b],
                             name);
                else
                    snprintf(text, sizeof text, "#%llu label %lld",
                             (unsigned long long)batch.indices[b], (long long)batch.labels[b]);
                draw_text(img, gw, cx, oy + th + 2, cw, text);
            }
        }
        stk_loader_release(l, &batch);
        have_batch = 0;
    }
    if (done_n == 0) {
        rc = stk_fail(STK_EDATA, "stk_preview: no sample of %s could be read",
                      info.uri ? info.uri : "the dataset");
        goto done;
    }
    rc = stk_png_write_rgb8(png_path, img, (uint32_t)gw, (uint32_t)gh, (size_t)gw * 3);

done:
    if (have_batch)
        stk_loader_release(l, &batch);
    stk_loader_destroy(l);
    free(img);
    free(spec);
    return rc;
}
