/*
 * concat.c — several opened datasets seen as one (stk_dataset_concat): the
 * samples of part 0, then those of part 1, and so on. It is what a loader
 * mixing several datasets reads (stk_sampling.mix_sizes are the parts'
 * sizes, docs/sampler.md "Mixing datasets"), and any tool can read it like
 * a dataset of its own.
 *
 * The parts are borrowed: they must outlive the concatenation (the Python
 * binding keeps references). Index i goes to the part whose range holds it
 * (a binary search over the parts' first indices, immutable after create),
 * so read, label, read_check and sample_name are the parts' own, called
 * concurrently exactly as the parts allow. The sample shape is the parts'
 * when they all agree, else 0 (variable: the loader compiles a plan for
 * images of any size). Class names are kept when every part has the same
 * list, else left unknown.
 */
#include "core/error.h"
#include "core/util.h"
#include "format/dataset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct concat_impl {
    uint32_t n;
    stk_dataset **parts; /* borrowed datasets, n of them */
    uint64_t *first;     /* n + 1 first indices: first[n] = count */
} concat_impl;

static uint32_t part_of(const concat_impl *c, uint64_t index)
{
    uint32_t lo = 0, hi = c->n - 1; /* last part with first <= index */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        if (c->first[mid] <= index)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static int concat_read(const stk_dataset *ds, uint64_t index, stk_sample *out,
                       stk_scratch *scratch)
{
    const concat_impl *c = ds->impl;
    uint32_t p = part_of(c, index);
    return c->parts[p]->vt->read(c->parts[p], index - c->first[p], out, scratch);
}

static int concat_label(const stk_dataset *ds, uint64_t index, int64_t *label)
{
    const concat_impl *c = ds->impl;
    uint32_t p = part_of(c, index);
    return stk_dataset_label(c->parts[p], index - c->first[p], label);
}

static int concat_read_check(const stk_dataset *ds, uint64_t index)
{
    const concat_impl *c = ds->impl;
    uint32_t p = part_of(c, index);
    return stk_dataset_check(c->parts[p], index - c->first[p]);
}

static void concat_sample_name(const stk_dataset *ds, uint64_t index, char *buf, size_t size)
{
    const concat_impl *c = ds->impl;
    uint32_t p = part_of(c, index);
    stk_dataset_sample_name(c->parts[p], index - c->first[p], buf, size);
}

static void concat_access_hint(const stk_dataset *ds, stk_access how)
{
    const concat_impl *c = ds->impl;
    for (uint32_t i = 0; i < c->n; i++)
        stk_dataset_access_hint(c->parts[i], how);
}

static void concat_close(stk_dataset *ds)
{
    concat_impl *c = ds->impl;
    free(c->parts);
    free(c->first);
    free(c);
}

static const stk_dataset_vtable concat_vt = {
    .format = "concat",
    .read = concat_read,
    .close = concat_close,
    .label = concat_label,
    .sample_name = concat_sample_name,
    .read_check = concat_read_check,
    .access_hint = concat_access_hint,
};

static bool same_classes(stk_dataset *const *parts, uint32_t n)
{
    for (uint32_t i = 1; i < n; i++) {
        if (parts[i]->num_classes != parts[0]->num_classes ||
            !parts[i]->class_names != !parts[0]->class_names)
            return false;
        if (!parts[0]->class_names)
            continue;
        for (uint32_t k = 0; k < parts[0]->num_classes; k++)
            if (strcmp(parts[i]->class_names[k], parts[0]->class_names[k]) != 0)
                return false;
    }
    return true;
}

int stk_dataset_concat(stk_dataset *const *parts, uint32_t count, stk_dataset **out)
{
    if (!out)
        return stk_fail(STK_EINVAL, "stk_dataset_concat: out is NULL");
    *out = NULL;
    if (!parts || count == 0)
        return stk_fail(STK_EINVAL, "stk_dataset_concat: no datasets");
    uint64_t total = 0;
    size_t uri_len = 16;
    for (uint32_t i = 0; i < count; i++) {
        if (!parts[i])
            return stk_fail(STK_EINVAL, "stk_dataset_concat: dataset %u is NULL", i);
        if (parts[i]->count > UINT64_MAX - total)
            return stk_fail(STK_ELIMIT, "stk_dataset_concat: too many samples");
        total += parts[i]->count;
        uri_len += strlen(parts[i]->uri) + 3;
    }
    if (total == 0)
        return stk_fail(STK_EINVAL, "stk_dataset_concat: every dataset is empty");
    char *uri = malloc(uri_len);
    if (!uri)
        return stk_fail(STK_ENOMEM, "stk_dataset_concat: out of memory");
    size_t at = (size_t)snprintf(uri, uri_len, "concat(");
    for (uint32_t i = 0; i < count; i++)
        at += (size_t)snprintf(uri + at, uri_len - at, "%s%s", i ? ", " : "", parts[i]->uri);
    snprintf(uri + at, uri_len - at, ")");
    stk_dataset *ds = stk_dataset_alloc(&concat_vt, uri);
    free(uri);
    if (!ds)
        return STK_ENOMEM;
    concat_impl *c = calloc(1, sizeof *c);
    if (c) {
        c->parts = malloc(count * sizeof *c->parts);
        c->first = malloc((count + 1) * sizeof *c->first);
    }
    if (!c || !c->parts || !c->first) {
        if (c) {
            free(c->parts);
            free(c->first);
            free(c);
        }
        stk_dataset_close(ds);
        return stk_fail(STK_ENOMEM, "stk_dataset_concat: out of memory");
    }
    ds->impl = c;
    c->n = count;
    uint64_t first = 0;
    bool same_shape = true;
    for (uint32_t i = 0; i < count; i++) {
        c->parts[i] = parts[i];
        c->first[i] = first;
        first += parts[i]->count;
        same_shape &= parts[i]->height == parts[0]->height &&
                      parts[i]->width == parts[0]->width &&
                      parts[i]->channels == parts[0]->channels;
    }
    c->first[count] = first;
    ds->count = total;
    if (same_shape) {
        ds->height = parts[0]->height;
        ds->width = parts[0]->width;
        ds->channels = parts[0]->channels;
    }
    if (same_classes(parts, count) && parts[0]->class_names) {
        ds->class_names = calloc(parts[0]->num_classes, sizeof *ds->class_names);
        if (!ds->class_names) {
            stk_dataset_close(ds);
            return stk_fail(STK_ENOMEM, "stk_dataset_concat: out of memory");
        }
        ds->num_classes = parts[0]->num_classes;
        for (uint32_t k = 0; k < ds->num_classes; k++) {
            ds->class_names[k] = stk_strdup(parts[0]->class_names[k]);
            if (!ds->class_names[k]) {
                stk_dataset_close(ds);
                return STK_ENOMEM;
            }
        }
    } else if (same_classes(parts, count)) {
        ds->num_classes = parts[0]->num_classes;
    }
    *out = ds;
    return 0;
}
