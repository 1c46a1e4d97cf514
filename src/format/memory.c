/*
 * memory.c — the in-memory reader: stk_dataset_from_memory, a dataset over
 * an HWC uint8 array the caller already holds (the Python binding's
 * from_numpy, the tests' fixtures).
 *
 * It has no URI and no row in the reader table (reader_table.c): it is
 * created by its own public call, never by stk_dataset_open. Every sample
 * has the one shape given, height x width x channels, and sample i is the
 * sample_bytes bytes at pixels + i * sample_bytes; read() is pointer
 * arithmetic and a view into that array (stk_sample_set_hwc).
 *
 * Ownership. With copy == 0 the array and the labels are borrowed: the
 * caller keeps them alive and unchanged until stk_dataset_close. With
 * copy != 0 they are copied at creation into owned_pixels / owned_labels,
 * which are what close frees; `pixels` and `labels` point at whichever is
 * in use. Labels may be NULL (every label 0). num_classes is the largest
 * label + 1 when every label is >= 0, else 0 (unknown).
 *
 * Thread safety: read-only after creation; read() may be called from any
 * number of threads at once.
 */
#include "core/error.h"
#include "core/util.h"
#include "format/dataset.h"

#include <stdlib.h>
#include <string.h>

typedef struct stk_memory_impl {
    const uint8_t *pixels;  /* count * sample_bytes; borrowed or owned_pixels */
    const int64_t *labels;  /* count labels, or NULL (all 0); borrowed or owned */
    uint8_t *owned_pixels;  /* owned (malloc) when copied, else NULL */
    int64_t *owned_labels;  /* owned (malloc) when copied, else NULL */
    size_t sample_bytes;
} stk_memory_impl;

static int stk_memory_read(const stk_dataset *ds, uint64_t index, stk_sample *out,
                           stk_scratch *scratch)
{
    const stk_memory_impl *m = ds->impl;
    (void)scratch;
    if (index >= ds->count)
        return stk_fail(STK_EINVAL, "%s: sample index %llu out of range (%llu samples)", ds->uri,
                        (unsigned long long)index, (unsigned long long)ds->count);
    stk_sample_set_hwc(ds, m->pixels + index * m->sample_bytes, out);
    out->label = m->labels ? m->labels[index] : 0;
    return 0;
}

static void stk_memory_close(stk_dataset *ds)
{
    stk_memory_impl *m = ds->impl;
    if (!m)
        return;
    free(m->owned_pixels);
    free(m->owned_labels);
    free(m);
    ds->impl = NULL;
}

static const stk_dataset_vtable stk_memory_vt = {.format = "memory", .read = stk_memory_read, .close = stk_memory_close};

int stk_dataset_from_memory(const uint8_t *pixels, const int64_t *labels, uint64_t count,
                            uint32_t height, uint32_t width, uint32_t channels, int copy,
                            stk_dataset **out)
{
    stk_dataset *ds = NULL;
    stk_memory_impl *m = NULL;
    uint64_t sample, total, lbytes;
    int64_t maxl = -1;
    int rc;

    if (!out)
        return stk_fail(STK_EINVAL, "stk_dataset_from_memory: out is NULL");
    *out = NULL;
    if (!pixels)
        return stk_fail(STK_EINVAL, "stk_dataset_from_memory: pixels is NULL");
    if (count == 0 || height == 0 || width == 0 || channels == 0)
        return stk_fail(STK_EINVAL,
                        "stk_dataset_from_memory: count %llu and shape %ux%ux%u must all be "
                        "nonzero",
                        (unsigned long long)count, height, width, channels);
    if (!stk_mul_ok(height, width, &sample) || !stk_mul_ok(sample, channels, &sample) ||
        !stk_mul_ok(sample, count, &total) || total > SIZE_MAX ||
        !stk_mul_ok(count, sizeof(int64_t), &lbytes) || lbytes > SIZE_MAX)
        return stk_fail(STK_EINVAL,
                        "stk_dataset_from_memory: %llu samples of %ux%ux%u overflow the "
                        "address space",
                        (unsigned long long)count, height, width, channels);

    ds = stk_dataset_alloc(&stk_memory_vt, "memory");
    if (!ds)
        return STK_ENOMEM;
    m = calloc(1, sizeof *m);
    if (!m) {
        rc = stk_fail(STK_ENOMEM, "out of memory creating a memory dataset");
        goto fail;
    }
    ds->impl = m;
    m->sample_bytes = (size_t)sample;
    m->pixels = pixels;
    m->labels = labels;
    if (copy) {
        m->owned_pixels = malloc((size_t)total);
        if (!m->owned_pixels) {
            rc = stk_fail(STK_ENOMEM, "out of memory copying %llu bytes of pixels",
                          (unsigned long long)total);
            goto fail;
        }
        memcpy(m->owned_pixels, pixels, (size_t)total);
        m->pixels = m->owned_pixels;
        if (labels) {
            m->owned_labels = malloc((size_t)lbytes);
            if (!m->owned_labels) {
                rc = stk_fail(STK_ENOMEM, "out of memory copying %llu labels",
                              (unsigned long long)count);
                goto fail;
            }
            memcpy(m->owned_labels, labels, (size_t)lbytes);
            m->labels = m->owned_labels;
        }
    }

    /* num_classes: max + 1 when every label is a plausible class index. */
    if (m->labels) {
        for (uint64_t i = 0; i < count; i++) {
            if (m->labels[i] < 0) {
                maxl = -1;
                break;
            }
            if (m->labels[i] > maxl)
                maxl = m->labels[i];
        }
    }
    ds->count = count;
    ds->height = height;
    ds->width = width;
    ds->channels = channels;
    ds->num_classes = maxl >= 0 && maxl < (int64_t)UINT32_MAX ? (uint32_t)(maxl + 1) : 0;
    *out = ds;
    return 0;

fail:
    stk_dataset_close(ds);
    return rc;
}
