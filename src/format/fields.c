/*
 * fields.c — the public field/metadata/shard accessors of a dataset.
 *
 * Formats with a schema (.stk) answer through their vtable hooks. Every
 * other dataset has the same two generic fields, served through its plain
 * `read`: "image" (raw_image with the dataset's fixed shape, or an encoded
 * image for file-per-sample sources) and "label" (int64 scalar).
 */
#include "codec/codec.h"
#include "core/error.h"
#include "core/image.h"
#include "format/class_names.h"
#include "format/dataset.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GENERIC_IMAGE = 0, GENERIC_LABEL = 1, GENERIC_FIELDS = 2 };

uint32_t stk_dataset_field_count(const stk_dataset *ds)
{
    if (!ds)
        return 0;
    return ds->vt->field_count ? ds->vt->field_count(ds) : GENERIC_FIELDS;
}

int stk_dataset_field_info(const stk_dataset *ds, uint32_t i, stk_field_info *info)
{
    if (!ds || !info)
        return stk_fail(STK_EINVAL, "stk_dataset_field_info: NULL argument");
    if (ds->vt->field_info)
        return ds->vt->field_info(ds, i, info);
    memset(info, 0, sizeof *info);
    if (i == GENERIC_IMAGE) {
        info->name = "image";
        bool fixed = ds->height && ds->width && ds->channels;
        info->type = fixed ? STK_FIELD_RAW_IMAGE : STK_FIELD_IMAGE;
        if (fixed) {
            info->ndim = 3;
            info->dims[0] = ds->height;
            info->dims[1] = ds->width;
            info->dims[2] = ds->channels;
        }
        return 0;
    }
    if (i == GENERIC_LABEL) {
        info->name = "label";
        info->type = STK_FIELD_INT64;
        return 0;
    }
    return stk_fail(STK_EINVAL, "%s: no field %u (%u fields)", ds->uri, i, GENERIC_FIELDS);
}

static int find_field(const stk_dataset *ds, const char *name, uint32_t *out)
{
    uint32_t n = stk_dataset_field_count(ds);
    stk_field_info info;
    for (uint32_t i = 0; i < n; i++) {
        if (stk_dataset_field_info(ds, i, &info) < 0)
            return STK_EINVAL;
        if (name ? !strcmp(info.name, name)
                 : (info.type == STK_FIELD_IMAGE || info.type == STK_FIELD_RAW_IMAGE)) {
            *out = i;
            return 0;
        }
    }
    return stk_fail(STK_EINVAL, "%s: no field named '%s'", ds->uri, name ? name : "(image)");
}

int stk_dataset_read_field(const stk_dataset *ds, uint64_t index, const char *field, void **data,
                           size_t *size, uint32_t shape[3])
{
    if (!ds || !data || !size)
        return stk_fail(STK_EINVAL, "stk_dataset_read_field: NULL argument");
    *data = NULL;
    *size = 0;
    if (index >= ds->count)
        return stk_fail(STK_EINVAL, "%s: sample %llu is out of range (%llu samples)", ds->uri,
                        (unsigned long long)index, (unsigned long long)ds->count);
    uint32_t f = 0;
    int rc = find_field(ds, field, &f);
    if (rc < 0)
        return rc;
    if (ds->vt->read_field)
        return ds->vt->read_field(ds, index, f, data, size, shape);

    stk_scratch scratch = {0};
    stk_sample s;
    if ((rc = ds->vt->read(ds, index, &s, &scratch)) < 0)
        goto done;
    const void *src;
    size_t n;
    if (f == GENERIC_LABEL) {
        src = &s.label;
        n = sizeof s.label;
    } else if (!s.image.pixels) {
        src = s.encoded;
        n = s.encoded_size;
    } else {
        const stk_image_view *v = &s.image;
        n = (size_t)v->height * v->width * v->channels;
        uint8_t *px = malloc(n ? n : 1);
        if (!px) {
            rc = stk_fail(STK_ENOMEM, "out of memory");
            goto done;
        }
        stk_image_copy_hwc(v, px);
        if (shape) {
            shape[0] = v->height;
            shape[1] = v->width;
            shape[2] = v->channels;
        }
        *data = px;
        *size = n;
        goto done;
    }
    if ((rc = stk_memdup(src, n, data)) == 0)
        *size = n;
done:
    /* A mapped file cut while we copied: the copy holds zeros (dataset.h,
     * read_check). */
    if (rc == 0 && (rc = stk_dataset_check(ds, index)) < 0) {
        free(*data);
        *data = NULL;
        *size = 0;
    }
    stk_scratch_free(&scratch);
    return rc;
}

/* The rows of an array field's value of `size` bytes (field_view's
 * shape[0]): the values over the product of the row's dims. */
static uint32_t array_rows(const stk_field_info *info, size_t size)
{
    size_t elem = 8;
    if (info->type == STK_FIELD_FLOAT32)
        elem = 4;
    size_t per_row = 1;
    for (uint32_t d = 1; d < info->ndim; d++)
        per_row *= info->dims[d] ? info->dims[d] : 1;
    size_t values = size / elem;
    if (info->ndim == 0)
        return 1;
    return (uint32_t)(values / (per_row ? per_row : 1));
}

int stk_dataset_field_view(const stk_dataset *ds, uint64_t index, uint32_t field,
                           stk_field_view *out, stk_scratch *scratch)
{
    memset(out, 0, sizeof *out);
    if (ds->vt->field_view)
        return ds->vt->field_view(ds, index, field, out, scratch);
    stk_field_info info;
    int rc = stk_dataset_field_info(ds, field, &info);
    if (rc < 0)
        return rc;
    void *data = NULL;
    size_t size = 0;
    uint32_t shape[3] = {0, 0, 0};
    rc = stk_dataset_read_field(ds, index, info.name, &data, &size, shape);
    if (rc < 0)
        return rc;
    if ((rc = stk_scratch_reserve(scratch, size ? size : 1)) == 0) {
        memcpy(scratch->data, data, size);
        out->data = scratch->data;
        out->size = size;
        if (info.type == STK_FIELD_RAW_IMAGE) {
            memcpy(out->shape, shape, sizeof out->shape);
        } else if (info.type == STK_FIELD_INT64 || info.type == STK_FIELD_FLOAT32) {
            out->shape[0] = array_rows(&info, size);
        }
    }
    free(data);
    return rc;
}

int stk_read_field_by_view(const stk_dataset *ds, uint64_t index, uint32_t field, void **data,
                           size_t *size, uint32_t shape[3])
{
    stk_scratch scratch = {0};
    stk_field_view v;
    int rc = ds->vt->field_view(ds, index, field, &v, &scratch);
    if (rc == 0 && (rc = stk_memdup(v.data, v.size, data)) == 0) {
        *size = v.size;
        stk_field_info info;
        if (shape && stk_dataset_field_info(ds, field, &info) == 0 &&
            info.type == STK_FIELD_RAW_IMAGE)
            memcpy(shape, v.shape, sizeof v.shape);
    }
    stk_scratch_free(&scratch);
    return rc;
}

int stk_dataset_label(const stk_dataset *ds, uint64_t index, int64_t *label)
{
    if (!ds || !label)
        return stk_fail(STK_EINVAL, "stk_dataset_label: NULL argument");
    if (index >= ds->count)
        return stk_fail(STK_EINVAL, "%s: sample %llu is out of range (%llu samples)", ds->uri,
                        (unsigned long long)index, (unsigned long long)ds->count);
    if (ds->vt->label)
        return ds->vt->label(ds, index, label);
    stk_scratch scratch = {0};
    stk_sample s;
    int rc = ds->vt->read(ds, index, &s, &scratch);
    if (rc == 0)
        *label = s.label;
    stk_scratch_free(&scratch);
    return rc;
}

const char *stk_dataset_metadata(const stk_dataset *ds, const char *key)
{
    if (!ds || !key || !ds->vt->metadata)
        return NULL;
    return ds->vt->metadata(ds, key);
}

const char *stk_dataset_class_name(const stk_dataset *ds, uint32_t label)
{
    if (!ds || !ds->class_names || label >= ds->num_classes)
        return NULL;
    return ds->class_names[label];
}

uint64_t stk_dataset_skipped_count(const stk_dataset *ds)
{
    return ds ? ds->nskipped : 0;
}

const char *stk_dataset_skipped(const stk_dataset *ds, uint64_t i)
{
    return ds && i < ds->nskipped ? ds->skipped[i] : NULL;
}

void stk_dataset_sample_name(const stk_dataset *ds, uint64_t index, char *buf, size_t size)
{
    if (ds->vt->sample_name)
        ds->vt->sample_name(ds, index, buf, size);
    else
        snprintf(buf, size, "%s: sample %llu", ds->uri, (unsigned long long)index);
}

uint32_t stk_dataset_shard_count(const stk_dataset *ds)
{
    return ds && ds->vt->shard_count ? ds->vt->shard_count(ds) : 0;
}

int stk_dataset_shard_info(const stk_dataset *ds, uint32_t i, stk_shard_info *info)
{
    if (!ds || !info || !ds->vt->shard_info)
        return stk_fail(STK_EINVAL, "%s: not a .stk dataset (it has no shards)",
                        ds ? ds->uri : "(null)");
    return ds->vt->shard_info(ds, i, info);
}

/* The index of the string field "source_name" (written by stk_pack), or -1;
 * silent (no stk_fail) when there is none. */
static int source_name_field(const stk_dataset *ds)
{
    uint32_t n = stk_dataset_field_count(ds);
    stk_field_info info;
    for (uint32_t i = 0; i < n; i++)
        if (stk_dataset_field_info(ds, i, &info) == 0 && info.type == STK_FIELD_STRING &&
            !strcmp(info.name, STK_SOURCE_NAME_FIELD))
            return (int)i;
    return -1;
}

bool stk_dataset_has_sample_names(const stk_dataset *ds)
{
    return ds->vt->sample_name || source_name_field(ds) >= 0;
}

/* A relative source name (not starting with '/', not a URL) joined to
 * the shards' source_root, the directory stk_pack ran in (docs/format.md),
 * so that the path opens from any working directory. Without source_root
 * (shards of an older pack, or of an absolute source) the name stays as
 * stored. *path is replaced by a new string. */
static int resolve_source_name(const stk_dataset *ds, char **path)
{
    const char *value = stk_dataset_metadata(ds, STK_SOURCE_ROOT_KEY);
    if (!value || (*path)[0] == '/' || strstr(*path, "://"))
        return 0;
    char **roots = NULL;
    uint32_t n = 0;
    int rc = stk_class_names_decode(value, &roots, &n);
    if (rc < 0) {
        stk_free(*path);
        *path = NULL;
        return rc;
    }
    /* One absolute directory; anything else is not a root this reader
     * understands, and the name stays as stored. */
    bool use = n == 1 && roots[0][0] == '/';
    char *joined = NULL;
    if (use) {
        size_t a = strlen(roots[0]), b = strlen(*path);
        bool slash = roots[0][a - 1] == '/';
        if ((joined = malloc(a + b + 2)))
            snprintf(joined, a + b + 2, "%s%s%s", roots[0], slash ? "" : "/", *path);
    }
    for (uint32_t i = 0; i < n; i++)
        free(roots[i]);
    free(roots);
    if (!use)
        return 0;
    stk_free(*path);
    *path = joined;
    return joined ? 0 : stk_fail(STK_ENOMEM, "out of memory");
}

int stk_dataset_sample_path(const stk_dataset *ds, uint64_t index, char **path)
{
    if (!ds || !path)
        return stk_fail(STK_EINVAL, "stk_dataset_sample_path: NULL argument");
    *path = NULL;
    if (index >= ds->count)
        return stk_fail(STK_EINVAL, "%s: sample %llu is out of range (%llu samples)", ds->uri,
                        (unsigned long long)index, (unsigned long long)ds->count);
    if (source_name_field(ds) >= 0) {
        /* Escaped as one line of a label map (docs/format.md), so that any
         * file name survives as UTF-8 text. */
        void *data;
        size_t size;
        int rc = stk_dataset_read_field(ds, index, STK_SOURCE_NAME_FIELD, &data, &size, NULL);
        if (rc < 0)
            return rc;
        char *text = malloc(size + 1);
        if (!text) {
            free(data);
            return stk_fail(STK_ENOMEM, "out of memory");
        }
        memcpy(text, data, size);
        text[size] = '\0';
        free(data);
        char name[512];
        char **names = NULL;
        uint32_t count = 0;
        if (memchr(text, '\0', size) || memchr(text, '\n', size)) {
            stk_dataset_sample_name(ds, index, name, sizeof name);
            free(text);
            return stk_fail(STK_EDATA, "%s: the %s field holds a NUL or a line break (it must "
                                       "be one escaped name, docs/format.md)",
                            name, STK_SOURCE_NAME_FIELD);
        }
        rc = stk_class_names_decode(text, &names, &count);
        free(text);
        if (rc < 0)
            return rc;
        for (uint32_t i = 1; i < count; i++)
            free(names[i]);
        *path = count ? names[0] : stk_strdup("");
        free(names);
        if (!*path)
            return stk_fail(STK_ENOMEM, "out of memory");
        /* "\\x00" is not an escape (docs/format.md): a decoded name is
         * never cut short by a NUL. */
        return resolve_source_name(ds, path);
    }
    if (!ds->vt->sample_name)
        return 0;
    char buf[8192];
    ds->vt->sample_name(ds, index, buf, sizeof buf);
    if (!(*path = stk_strdup(buf)))
        return stk_fail(STK_ENOMEM, "out of memory");
    return 0;
}
