/*
 * preview.c — stk_preview: a picture of what a pipeline feeds the network.
 *
 * It runs the spec through an ordinary loader (so the samples are exactly
 * the ones training would see for that seed: epoch 0, shuffled, corrupt
 * samples skipped), takes the first `count` of them, turns each back into
 * RGB bytes, and writes them as one PNG grid, cells 2 pixels apart on a dark
 * gray background.
 *
 * Turning a sample back into pixels undoes what `normalize` and `to` did:
 * float values x become x * std[c] + mean[c] (when the spec normalizes),
 * times 255, rounded and clamped to 0..255; f16 is widened first; CHW and
 * HWC are both read; one channel is shown as gray, and with more than three
 * the first three are shown. The mean and std come from parsing the same
 * spec, so presets and explicit values both work.
 */
#include "codec/codec_write.h"
#include "core/error.h"
#include "core/util.h"
#include "ops/half.h"
#include "ops/op.h"
#include "stoker/stoker.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PREVIEW_GAP 2
#define PREVIEW_BG 40
#define PREVIEW_MAX_COUNT 4096

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
    int rc = 0;
    stk_spec *spec = NULL;
    stk_loader *l = NULL;
    uint8_t *img = NULL;
    stk_batch batch;
    int have_batch = 0;

    if (!ds || !png_path)
        return stk_fail(STK_EINVAL, "stk_preview: %s is NULL", !ds ? "dataset" : "png_path");
    if (!spec_text)
        spec_text = "";
    if (count == 0)
        count = 16;
    if (count > PREVIEW_MAX_COUNT)
        return stk_fail(STK_EINVAL, "stk_preview: count %u is more than %d", count,
                        PREVIEW_MAX_COUNT);

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
    lo.seed = seed;
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
    uint32_t cols = columns ? columns : (uint32_t)ceil(sqrt((double)count));
    if (cols > count)
        cols = count;
    uint32_t rows = (count + cols - 1) / cols;
    uint64_t gw = (uint64_t)cols * w + (uint64_t)(cols - 1) * PREVIEW_GAP;
    uint64_t gh = (uint64_t)rows * h + (uint64_t)(rows - 1) * PREVIEW_GAP;
    if (gw > (1u << 24) || gh > (1u << 24) || gw * gh > (1ull << 30)) {
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
        for (uint32_t k = 0; k < batch.size && done_n < count; k++, done_n++) {
            const uint8_t *s = (const uint8_t *)batch.data + (size_t)k * batch.sample_bytes;
            uint64_t ox = (uint64_t)(done_n % cols) * (w + PREVIEW_GAP);
            uint64_t oy = (uint64_t)(done_n / cols) * (h + PREVIEW_GAP);
            for (int64_t y = 0; y < h; y++) {
                uint8_t *d = img + ((oy + (uint64_t)y) * gw + ox) * 3;
                for (int64_t x = 0; x < w; x++) {
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
                        d[x * 3 + c] = (uint8_t)lrintf(v);
                    }
                }
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
