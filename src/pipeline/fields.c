/*
 * fields.c — the fields a loader delivers besides the image: resolving the
 * `fields=` list against the dataset, filling a sample's fields into its
 * batch rows, and collating the variable ones (fields.h has the model,
 * docs/fields.md the user's view).
 *
 * The hot path reads each field through stk_dataset_field_view (lent, one
 * scratch per field, no allocation once the scratches have grown), decodes
 * masks with stk_image_decode_mask (class ids, never colours), and runs the
 * image through stk_plan_run_spatial when masks or boxes come along, so
 * they get the image's own draws. Every view of a sample (views = K) is
 * drawn from its own stream, exactly as the image alone would be: the
 * image's pixels are those of a loader without fields.
 */
#include "pipeline/fields.h"

#include "codec/codec.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------- */
/* Resolving the list                                                      */
/* ---------------------------------------------------------------------- */

static const char *const role_names[] = {"image", "label",   "index", "path",    "mask",
                                          "boxes", "per_box", "data",  "geometry"};

static int role_from_name(const char *s, size_t n)
{
    for (int r = 0; r < (int)(sizeof role_names / sizeof role_names[0]); r++)
        if (strlen(role_names[r]) == n && !strncmp(role_names[r], s, n))
            return r;
    return -1;
}

static int is_variable(const stk_field_info *info)
{
    return info->ndim >= 1 && info->dims[0] == 0;
}

/* The dataset's field names, for "no field named" messages. */
static void list_fields(const stk_dataset *ds, char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = 0;
    uint32_t n = stk_dataset_field_count(ds);
    for (uint32_t i = 0; i < n && at + 2 < size; i++) {
        stk_field_info info;
        if (stk_dataset_field_info(ds, i, &info) < 0)
            break;
        int w = snprintf(buf + at, size - at, "%s%s", i ? ", " : "", info.name);
        if (w < 0)
            break;
        at += (size_t)w < size - at ? (size_t)w : size - at - 1;
    }
}

static int find_ds_field(const stk_dataset *ds, const char *name, uint32_t *idx,
                         stk_field_info *info)
{
    uint32_t n = stk_dataset_field_count(ds);
    for (uint32_t i = 0; i < n; i++) {
        if (stk_dataset_field_info(ds, i, info) < 0)
            return STK_EINVAL;
        if (!strcmp(info->name, name)) {
            *idx = i;
            return 0;
        }
    }
    char known[512];
    list_fields(ds, known, sizeof known);
    return stk_fail(STK_EINVAL,
                    "fields: %s has no field '%s' (its fields: %s; the loader also gives "
                    "image, label, index, path)",
                    ds->uri, name, known);
}

static int infer_role(const char *name, const stk_field_info *info)
{
    if (info->type == STK_FIELD_IMAGE || info->type == STK_FIELD_RAW_IMAGE)
        return LF_MASK;
    if (info->type == STK_FIELD_FLOAT32 && info->ndim == 2 && info->dims[1] == 4 &&
        strstr(name, "box"))
        return LF_BOXES;
    /* box_*, and COCO's per-annotation names */
    if ((info->type == STK_FIELD_INT64 || info->type == STK_FIELD_FLOAT32) && is_variable(info) &&
        (!strncmp(name, "box_", 4) || !strcmp(name, "iscrowd") || !strcmp(name, "area")))
        return LF_PER_BOX;
    return LF_DATA;
}

static uint32_t values_per_row(const stk_field_info *info)
{
    uint32_t v = 1;
    for (uint32_t d = 1; d < info->ndim; d++)
        v *= info->dims[d];
    return v;
}

/* How field f is delivered, from its role and type. */
static int plan_delivery(const stk_dataset *ds, stk_lfield *f)
{
    const stk_field_info *in = &f->info;
    int arr = in->type == STK_FIELD_INT64 || in->type == STK_FIELD_FLOAT32;
    switch (f->role) {
    case LF_MASK:
        if (in->type != STK_FIELD_IMAGE && in->type != STK_FIELD_RAW_IMAGE)
            return stk_fail(STK_EINVAL, "fields: '%s' cannot be a mask: it is not an image field",
                            f->name);
        f->elem = STK_ELEM_U8;
        f->elem_size = 1;
        f->ndim = 2; /* the output size, once the plan is compiled */
        return 0;
    case LF_BOXES:
        if (in->type != STK_FIELD_FLOAT32 || in->ndim != 2 || in->dims[1] != 4)
            return stk_fail(STK_EINVAL,
                            "fields: '%s' cannot be boxes: boxes are a float32 field of shape "
                            "(N, 4) (XYXY pixels)",
                            f->name);
        f->variable = 1;
        f->elem = STK_ELEM_F32;
        f->elem_size = 4;
        f->row_values = 4;
        f->ndim = 1;
        f->shape[0] = 4;
        return 0;
    case LF_PER_BOX:
        if (!arr || !is_variable(in))
            return stk_fail(STK_EINVAL,
                            "fields: '%s' cannot be per_box: a per-box field is an int64 or "
                            "float32 field with one row per box (shape (0, ...))",
                            f->name);
        /* fall through */
    default:
        break;
    }
    /* data, per_box */
    if (arr) {
        f->elem = in->type == STK_FIELD_INT64 ? STK_ELEM_I64 : STK_ELEM_F32;
        f->elem_size = in->type == STK_FIELD_INT64 ? 8 : 4;
        if (is_variable(in)) {
            f->variable = 1;
            f->row_values = values_per_row(in);
            f->ndim = in->ndim - 1;
            for (uint32_t d = 1; d < in->ndim; d++)
                f->shape[d - 1] = in->dims[d];
        } else {
            f->ndim = in->ndim;
            size_t n = 1;
            for (uint32_t d = 0; d < in->ndim; d++) {
                f->shape[d] = in->dims[d];
                n *= in->dims[d];
            }
            f->row_bytes = n * f->elem_size;
        }
        return 0;
    }
    if (in->type == STK_FIELD_RAW_IMAGE) {
        if (in->ndim != 3)
            return stk_fail(STK_EINVAL,
                            "fields: '%s' is a raw image whose size varies in %s: give it the "
                            "role mask (resized with the image) or pack it with a fixed shape",
                            f->name, ds->uri);
        f->elem = STK_ELEM_U8;
        f->elem_size = 1;
        f->ndim = 3;
        for (int d = 0; d < 3; d++)
            f->shape[d] = in->dims[d];
        f->row_bytes = (size_t)in->dims[0] * in->dims[1] * in->dims[2];
        return 0;
    }
    /* encoded images, bytes, strings: variable bytes */
    f->variable = 1;
    f->elem = STK_ELEM_U8;
    f->elem_size = 1;
    f->row_values = 1;
    f->text = in->type == STK_FIELD_STRING;
    f->ndim = 0;
    return 0;
}

int stk_lfields_resolve(const stk_dataset *ds, const char *text, stk_lfields *lf)
{
    memset(lf, 0, sizeof *lf);
    lf->boxes = -1;
    if (!text || !*text)
        text = "image,label";
    int have_image = 0;
    const char *p = text;
    while (*p) {
        while (*p == ' ' || *p == '\t')
            p++;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        const char *t = e;
        while (t > p && (t[-1] == ' ' || t[-1] == '\t'))
            t--;
        if (t == p)
            return stk_fail(STK_EINVAL, "fields: empty name in '%s'", text);
        const char *colon = memchr(p, ':', (size_t)(t - p));
        size_t nlen = (size_t)((colon ? colon : t) - p);
        if (nlen >= sizeof lf->f[0].name)
            return stk_fail(STK_EINVAL, "fields: name '%.*s' is too long", (int)nlen, p);
        if (lf->n == STK_MAX_FIELDS)
            return stk_fail(STK_EINVAL, "fields: at most %d fields", STK_MAX_FIELDS);
        stk_lfield *f = &lf->f[lf->n];
        memset(f, 0, sizeof *f);
        memcpy(f->name, p, nlen);
        f->name[nlen] = 0;
        int role = -1;
        if (colon) {
            const char *r = colon + 1;
            role = role_from_name(r, (size_t)(t - r));
            if (role < LF_MASK || role == LF_GEOMETRY)
                return stk_fail(STK_EINVAL,
                                "fields: unknown role '%.*s' for '%s' (roles: mask, boxes, "
                                "per_box, data)",
                                (int)(t - r), r, f->name);
        }
        for (uint32_t i = 0; i < lf->n; i++)
            if (!strcmp(lf->f[i].name, f->name))
                return stk_fail(STK_EINVAL, "fields: '%s' is listed twice", f->name);
        int special = role < 0 ? role_from_name(f->name, nlen) : -1;
        if (special == LF_GEOMETRY) {
            f->role = LF_GEOMETRY;
            f->variable = 1;
            f->elem = STK_ELEM_F64;
            f->elem_size = 8;
            f->row_values = STK_GEO_VALUES;
            f->ndim = 1;
            f->shape[0] = STK_GEO_VALUES;
            lf->geometry = 1;
            lf->extra = 1;
        } else if (special >= LF_IMAGE && special <= LF_PATH) {
            f->role = special;
            if (special == LF_IMAGE)
                have_image = 1;
            else if (special == LF_PATH) {
                f->variable = 1;
                f->text = 1;
                f->elem = STK_ELEM_U8;
                f->elem_size = 1;
                f->row_values = 1;
            }
        } else {
            int rc = find_ds_field(ds, f->name, &f->ds_field, &f->info);
            if (rc < 0)
                return rc;
            f->info.name = NULL; /* the dataset's; not kept */
            f->role = role >= 0 ? role : infer_role(f->name, &f->info);
            if ((rc = plan_delivery(ds, f)) < 0)
                return rc;
            if (f->role == LF_MASK) {
                if (lf->nmasks == STK_MAX_MASKS)
                    return stk_fail(STK_EINVAL, "fields: at most %d masks", STK_MAX_MASKS);
                lf->nmasks++;
            }
            if (f->role == LF_BOXES) {
                if (lf->boxes >= 0)
                    return stk_fail(STK_EINVAL, "fields: two box fields ('%s' and '%s')",
                                    lf->f[lf->boxes].name, f->name);
                lf->boxes = (int)lf->n;
            }
            lf->extra = 1;
        }
        if (f->role == LF_INDEX || f->role == LF_PATH)
            lf->extra = 1;
        lf->n++;
        p = *e ? e + 1 : e;
    }
    if (!have_image)
        return stk_fail(STK_EINVAL, "fields: '%s' has no 'image' (every batch carries it)", text);
    for (uint32_t i = 0; i < lf->n; i++) {
        stk_lfield *f = &lf->f[i];
        if (f->role == LF_PER_BOX && lf->boxes < 0)
            return stk_fail(STK_EINVAL, "fields: '%s' is per_box but no boxes field is listed",
                            f->name);
        if (f->role >= LF_PATH)
            f->slot = f->variable ? lf->nvar++ : lf->ndense++;
    }
    lf->spatial = lf->nmasks > 0 || lf->boxes >= 0 || lf->geometry;
    if (lf->n > 2 || lf->f[0].role != LF_IMAGE || lf->f[1].role != LF_LABEL)
        lf->extra = 1;
    return 0;
}

void stk_lfields_set_mask_size(stk_lfields *lf, int64_t out_h, int64_t out_w)
{
    for (uint32_t i = 0; i < lf->n; i++)
        if (lf->f[i].role == LF_MASK) {
            lf->f[i].shape[0] = out_h;
            lf->f[i].shape[1] = out_w;
            lf->f[i].row_bytes = (size_t)out_h * (size_t)out_w;
        }
}

/* ---------------------------------------------------------------------- */
/* Slot buffers                                                            */
/* ---------------------------------------------------------------------- */

int stk_slot_fields_alloc(const stk_lfields *lf, uint32_t rows, stk_slot_fields **out)
{
    stk_slot_fields *sf = calloc(1, sizeof *sf);
    *out = NULL;
    if (!sf)
        return stk_fail(STK_ENOMEM, "loader: out of memory for batch fields");
    sf->rows = rows;
    for (uint32_t i = 0; i < lf->n; i++) {
        const stk_lfield *f = &lf->f[i];
        if (f->role < LF_PATH)
            continue;
        if (f->variable) {
            sf->var[f->slot] = calloc(rows, sizeof(stk_var_row));
            sf->offsets[f->slot] = calloc((size_t)rows + 1, sizeof(uint64_t));
            if (!sf->var[f->slot] || !sf->offsets[f->slot])
                goto oom;
        } else {
            uint64_t bytes;
            if (!stk_mul_ok(rows, f->row_bytes, &bytes) || bytes > SIZE_MAX / 2) {
                stk_slot_fields_free(lf, sf);
                return stk_fail(STK_ELIMIT, "loader: field '%s' of a batch is too large",
                                f->name);
            }
            sf->dense[f->slot] = stk_aligned_alloc(bytes ? (size_t)bytes : 1);
            if (!sf->dense[f->slot])
                goto oom;
        }
    }
    *out = sf;
    return 0;
oom:
    stk_slot_fields_free(lf, sf);
    return stk_fail(STK_ENOMEM, "loader: out of memory for batch fields");
}

void stk_slot_fields_free(const stk_lfields *lf, stk_slot_fields *sf)
{
    if (!sf)
        return;
    for (uint32_t j = 0; j < lf->ndense; j++)
        stk_aligned_free(sf->dense[j]);
    for (uint32_t j = 0; j < lf->nvar; j++) {
        if (sf->var[j])
            for (uint32_t r = 0; r < sf->rows; r++)
                free(sf->var[j][r].data);
        free(sf->var[j]);
        free(sf->values[j]);
        free(sf->offsets[j]);
    }
    free(sf);
}

void stk_slot_fields_move(const stk_lfields *lf, stk_slot_fields *sf, uint32_t from, uint32_t to)
{
    for (uint32_t i = 0; i < lf->n; i++) {
        const stk_lfield *f = &lf->f[i];
        if (f->role < LF_PATH)
            continue;
        if (f->variable) { /* swap, so each row keeps a buffer of its own */
            stk_var_row t = sf->var[f->slot][to];
            sf->var[f->slot][to] = sf->var[f->slot][from];
            sf->var[f->slot][from] = t;
        } else {
            memmove(sf->dense[f->slot] + (size_t)to * f->row_bytes,
                    sf->dense[f->slot] + (size_t)from * f->row_bytes, f->row_bytes);
        }
    }
}

int stk_slot_fields_collate(const stk_lfields *lf, stk_slot_fields *sf, uint32_t rows)
{
    sf->nrows = rows;
    for (uint32_t j = 0; j < lf->nvar; j++) {
        size_t total = 0;
        for (uint32_t r = 0; r < rows; r++)
            total += sf->var[j][r].size;
        if (total > sf->values_cap[j]) {
            size_t cap = total + total / 4 + 64;
            uint8_t *v = realloc(sf->values[j], cap);
            if (!v)
                return stk_fail(STK_ENOMEM, "loader: out of memory collating a batch field");
            sf->values[j] = v;
            sf->values_cap[j] = cap;
        }
        size_t at = 0;
        uint64_t n = 0;
        sf->offsets[j][0] = 0;
        for (uint32_t r = 0; r < rows; r++) {
            const stk_var_row *vr = &sf->var[j][r];
            if (vr->size)
                memcpy(sf->values[j] + at, vr->data, vr->size);
            at += vr->size;
            n += vr->nrows;
            sf->offsets[j][r + 1] = n;
        }
        sf->values_size[j] = at;
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Filling a sample                                                        */
/* ---------------------------------------------------------------------- */

static int var_put(stk_var_row *r, const void *p, size_t n, uint64_t nrows)
{
    if (n > r->cap) {
        size_t cap = n + n / 2 + 32;
        uint8_t *d = realloc(r->data, cap);
        if (!d)
            return stk_fail(STK_ENOMEM, "loader: out of memory for a field value");
        r->data = d;
        r->cap = cap;
    }
    if (n)
        memcpy(r->data, p, n);
    r->size = n;
    r->nrows = nrows;
    return 0;
}

void stk_worker_fields_free(stk_worker_fields *wf)
{
    for (int i = 0; i < STK_MAX_FIELDS; i++) {
        stk_scratch_free(&wf->view[i]);
        stk_scratch_free(&wf->mask[i]);
    }
    stk_scratch_free(&wf->work);
    stk_scratch_free(&wf->boxes);
    stk_scratch_free(&wf->geo);
}

size_t stk_worker_fields_bytes(const stk_worker_fields *wf)
{
    size_t n = wf->work.cap + wf->boxes.cap + wf->geo.cap;
    for (int i = 0; i < STK_MAX_FIELDS; i++)
        n += wf->view[i].cap + wf->mask[i].cap;
    return n;
}

static int path_put(const stk_dataset *ds, uint64_t index, stk_var_row *r)
{
    char *path = NULL;
    int rc = stk_dataset_sample_path(ds, index, &path);
    if (rc < 0)
        return rc;
    if (path) {
        rc = var_put(r, path, strlen(path), strlen(path));
        free(path);
        return rc;
    }
    char name[1024];
    stk_dataset_sample_name(ds, index, name, sizeof name);
    return var_put(r, name, strlen(name), strlen(name));
}

int stk_lfields_fill(const stk_lfields *lf, const stk_dataset *ds, const stk_plan *plan,
                     uint64_t index, const stk_plan_input *in, const stk_row_key *key, uint32_t k,
                     uint8_t *img_out, size_t sample_bytes, uint32_t row, stk_slot_fields *sf,
                     stk_worker_fields *wf, stk_scratch *plan_scratch)
{
    stk_field_view views[STK_MAX_FIELDS];
    stk_spatial sp;
    memset(&sp, 0, sizeof sp);
    sp.min_size = 1.0f;
    int rc;

    /* 1. Read the dataset's fields. */
    for (uint32_t i = 0; i < lf->n; i++) {
        const stk_lfield *f = &lf->f[i];
        if (f->role < LF_MASK || f->role == LF_GEOMETRY)
            continue;
        if ((rc = stk_dataset_field_view(ds, index, f->ds_field, &views[i], &wf->view[i])) < 0)
            return stk_fail_prefix(rc, "field '%s'", f->name);
        if (f->role == LF_MASK) {
            stk_image_view *mv = &sp.mask_in[sp.nmasks];
            if (f->info.type == STK_FIELD_IMAGE) {
                rc = stk_image_decode_mask(views[i].data, views[i].size, NULL, &wf->mask[i], mv);
                if (rc == STK_ELIMIT)
                    rc = STK_EDATA;
                if (rc < 0)
                    return stk_fail_prefix(rc, "mask '%s'", f->name);
            } else {
                const uint32_t *sh = views[i].shape;
                if (!sh[2] || (uint64_t)sh[0] * sh[1] * sh[2] != views[i].size)
                    return stk_fail(STK_EDATA, "mask '%s': %zu bytes for a %ux%ux%u raw image",
                                    f->name, views[i].size, sh[0], sh[1], sh[2]);
                mv->pixels = views[i].data;
                mv->height = sh[0];
                mv->width = sh[1];
                mv->channels = 1;
                mv->row_stride = (ptrdiff_t)sh[1] * sh[2];
                mv->col_stride = sh[2];
                mv->chan_stride = 1;
            }
            sp.nmasks++;
        }
    }

    /* 2. Boxes, copied out (a mapped record need not be 4-byte aligned),
     * room for the transformed ones and the keep flags. */
    uint32_t nboxes = 0;
    if (lf->boxes >= 0) {
        const stk_field_view *bv = &views[lf->boxes];
        if (bv->size % 16)
            return stk_fail(STK_EDATA, "boxes '%s': %zu bytes is not a whole number of boxes",
                            lf->f[lf->boxes].name, bv->size);
        if (bv->size / 16 > UINT32_MAX / 2)
            return stk_fail(STK_EDATA, "boxes '%s': too many boxes", lf->f[lf->boxes].name);
        nboxes = (uint32_t)(bv->size / 16);
        size_t need = 2 * (size_t)nboxes * 16 + nboxes + 64;
        if ((rc = stk_scratch_reserve(&wf->boxes, need)) < 0)
            return rc;
        float *bin = (float *)(void *)wf->boxes.data;
        if (nboxes)
            memcpy(bin, bv->data, (size_t)nboxes * 16);
        for (uint32_t b = 0; b < nboxes; b++) {
            const float *x = bin + 4 * (size_t)b;
            if (!(x[2] >= x[0] && x[3] >= x[1]))
                return stk_fail(STK_EDATA,
                                "boxes '%s': box %u (%g, %g, %g, %g) has a negative width or "
                                "height (boxes are XYXY)",
                                lf->f[lf->boxes].name, b, (double)x[0], (double)x[1],
                                (double)x[2], (double)x[3]);
        }
        sp.boxes_in = bin;
        sp.nboxes = nboxes;
        sp.boxes_out = bin + 4 * (size_t)nboxes;
        sp.keep = (uint8_t *)(bin + 8 * (size_t)nboxes);
    }
    for (uint32_t i = 0; i < lf->n; i++) {
        const stk_lfield *f = &lf->f[i];
        if (f->role == LF_PER_BOX) {
            size_t per = (size_t)f->row_values * f->elem_size;
            if (views[i].size != (size_t)nboxes * per)
                return stk_fail(STK_EDATA, "per-box field '%s' has %zu bytes for %u boxes",
                                f->name, views[i].size, nboxes);
        }
    }

    if (lf->geometry) {
        if ((rc = stk_scratch_reserve(&wf->geo, STK_GEO_MAX_STEPS * STK_GEO_VALUES *
                                                     sizeof(double))) < 0)
            return rc;
        sp.geo_out = (double *)(void *)wf->geo.data;
    }

    /* 3. Each view: the image (and masks, boxes), then the row's fields. */
    for (uint32_t v = 0; v < k; v++) {
        uint32_t r = row * k + v;
        stk_rng rng;
        stk_rng_init(&rng, key->aug_seed, key->domain, key->epoch, key->draw | (uint64_t)v << 56);
        uint8_t *img = img_out + (size_t)v * sample_bytes;
        if (lf->spatial) {
            uint32_t m = 0;
            for (uint32_t i = 0; i < lf->n; i++)
                if (lf->f[i].role == LF_MASK)
                    sp.mask_out[m++] = sf->dense[lf->f[i].slot] + (size_t)r * lf->f[i].row_bytes;
            rc = stk_plan_run_spatial(plan, in, &rng, img, plan_scratch, &sp, &wf->work);
        } else {
            rc = stk_plan_run_input(plan, in, &rng, img, plan_scratch);
        }
        if (rc < 0)
            return rc;
        for (uint32_t i = 0; i < lf->n; i++) {
            const stk_lfield *f = &lf->f[i];
            if (f->role < LF_PATH || f->role == LF_MASK)
                continue;
            if (f->role == LF_PATH) {
                if ((rc = path_put(ds, index, &sf->var[f->slot][r])) < 0)
                    return rc;
                continue;
            }
            if (f->role == LF_GEOMETRY) {
                if ((rc = var_put(&sf->var[f->slot][r], sp.geo_out,
                                  (size_t)sp.ngeo * STK_GEO_VALUES * sizeof(double), sp.ngeo)) < 0)
                    return rc;
                continue;
            }
            if (f->role == LF_BOXES) {
                if ((rc = var_put(&sf->var[f->slot][r], sp.boxes_out, (size_t)sp.nkept * 16,
                                  sp.nkept)) < 0)
                    return rc;
                continue;
            }
            if (f->role == LF_PER_BOX) {
                size_t per = (size_t)f->row_values * f->elem_size;
                stk_var_row *vr = &sf->var[f->slot][r];
                if ((rc = var_put(vr, views[i].data, (size_t)nboxes * per, nboxes)) < 0)
                    return rc;
                uint32_t kept = 0; /* compact in place to the kept boxes */
                for (uint32_t b = 0; b < nboxes; b++)
                    if (sp.keep[b]) {
                        if (kept != b)
                            memmove(vr->data + kept * per, vr->data + b * per, per);
                        kept++;
                    }
                vr->size = kept * per;
                vr->nrows = kept;
                continue;
            }
            /* data */
            if (!f->variable) {
                if (views[i].size != f->row_bytes)
                    return stk_fail(STK_EDATA, "field '%s' has %zu bytes, expected %zu",
                                    f->name, views[i].size, f->row_bytes);
                memcpy(sf->dense[f->slot] + (size_t)r * f->row_bytes, views[i].data,
                       f->row_bytes);
                continue;
            }
            size_t per = (size_t)f->row_values * f->elem_size;
            if (views[i].size % per)
                return stk_fail(STK_EDATA,
                                "field '%s' has %zu bytes, not a whole number of %zu-byte rows",
                                f->name, views[i].size, per);
            if ((rc = var_put(&sf->var[f->slot][r], views[i].data, views[i].size,
                              views[i].size / per)) < 0)
                return rc;
        }
    }
    return 0;
}

void stk_lfields_describe(const stk_lfields *lf, uint32_t i, const stk_slot_fields *sf,
                          uint32_t rows, stk_batch_field *out)
{
    const stk_lfield *f = &lf->f[i];
    memset(out, 0, sizeof *out);
    out->name = f->name;
    out->role = (stk_field_role)f->role;
    out->elem = (stk_elem_type)f->elem;
    out->text = f->text;
    if (f->variable) {
        out->ndim = 1 + f->ndim;
        for (uint32_t d = 0; d < f->ndim && d < 4; d++)
            out->shape[1 + d] = f->shape[d];
        out->shape[0] = -1; /* varies (no batch given) */
        if (sf) {
            out->data = sf->values[f->slot];
            out->bytes = sf->values_size[f->slot];
            out->offsets = sf->offsets[f->slot];
            out->shape[0] = (int64_t)sf->offsets[f->slot][rows];
        }
        return;
    }
    out->ndim = 1 + f->ndim;
    for (uint32_t d = 0; d < f->ndim && d < 4; d++)
        out->shape[1 + d] = f->shape[d];
    if (sf) {
        out->data = sf->dense[f->slot];
        out->bytes = (size_t)rows * f->row_bytes;
        out->shape[0] = rows;
    }
}
