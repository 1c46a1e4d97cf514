/*
 * coco.c — COCO detection/segmentation sets: one JSON annotation file
 * ("instances_train2017.json") beside a directory of image files.
 *
 * URI: "coco:IMAGES_DIR?annotations=FILE.json[&masks=none|semantic|instance]
 * [&crowd=keep|drop][&empty=keep|drop][&missing=error|skip|lazy]".
 *
 * A sample is one entry of "images", in increasing image id order (as
 * sorted(coco.getImgIds()) gives them), with the fields
 *
 *   image       the encoded file IMAGES_DIR/file_name, read whole
 *   label       int64 -1: a detection sample has no single class
 *   boxes       float32 {k, 4}: the annotations' "bbox" [x, y, w, h] as
 *               XYXY absolute pixels [x, y, x + w, y + h], each coordinate
 *               clipped to [0, width] / [0, height] of the image (computed
 *               in double, then rounded to float32 once)
 *   box_labels  int64 {k}: the category of each box as a contiguous label:
 *               the categories sorted by id are labels 0..K-1, and their
 *               names are the dataset's class names (stk_dataset_class_name)
 *   image_id    int64: the image's "id"
 *   iscrowd     int64 {k}: 0 or 1 per box (only with crowd=keep, the
 *               default)
 *   mask        raw_image h x w x 1 uint8 (only with masks=semantic or
 *               masks=instance): the annotations' segmentations painted in
 *               file order, later over earlier, 0 the background; semantic:
 *               label + 1 (at most 255 categories), instance: the
 *               annotation's row in boxes + 1 (at most 255 annotations in
 *               one image; more is STK_EDATA naming the image when read)
 *
 * The k rows are the image's annotations in file order (what
 * coco.loadAnns(coco.getAnnIds(imgIds=id)) lists), less the crowd ones
 * with crowd=drop. empty=drop leaves out images with no row (each one is
 * recorded in ds->skipped, stk_dataset_skipped); empty=keep (the default)
 * keeps them with k = 0.
 *
 * What the open checks, each failure naming the annotation file and the
 * image or annotation id: the JSON itself (jansson's message with line and
 * column: STK_EFORMAT); "images", "annotations" and "categories" are
 * arrays of objects; images have an integer id (no two alike), a relative
 * file_name without "..", and integer height and width >= 1 whose product
 * is within max_pixels; categories have an integer id (no two alike) and
 * a string name; annotations have an integer id, an image_id that names
 * an image, a category_id that names a category, a bbox of four finite
 * numbers with w, h >= 0 (negative sizes: STK_EFORMAT), iscrowd 0 or 1
 * when present; with masks, a segmentation (below). A box partly or wholly
 * outside the image is clipped to it, not refused: COCO's own files hold
 * boxes that overshoot by a fraction of a pixel. Degenerate (zero-area)
 * boxes are kept; what to drop is the pipeline's rule.
 *
 * Image files: missing=error (the default) stats every file at open and
 * fails naming the first one that is not a regular file, with how many
 * are missing; missing=skip leaves those images out, each recorded in
 * ds->skipped; missing=lazy checks nothing at open (for a slow file
 * system), and a missing file is STK_EDATA naming it when read (the
 * loader's on_error policy applies). Reading the image also reads its
 * header, and a file whose size is not the height x width the annotation
 * file gives is STK_EDATA naming both, since boxes and masks would not fit
 * it.
 *
 * Size and memory. The annotation file is mapped and parsed whole by
 * jansson into a tree, which is then copied into the compact tables below
 * and freed. The parse is the peak, about 7.5 bytes of memory per byte of
 * JSON and 15-20 MB/s (a 54 MB COCO-like file of 98 000 polygons: 418 MB,
 * 3.6 s; pycocotools' COCO() on it: 359 MB, 3.4 s); the tables kept are
 * ~0.35x the JSON with masks (8 bytes per polygon vertex) and ~0.07x
 * without (32 bytes per annotation, 48 per image, the file names). The
 * file's size is limited by max_bytes of stk_dataset_options when set,
 * else by 2 GiB (COCO train2017's instances file is 448 MB); over the
 * limit the open fails with STK_ELIMIT saying how to raise it.
 *
 * Masks. A segmentation is a list of polygons [x0, y0, x1, y1, ...], an
 * uncompressed RLE {"size": [h, w], "counts": [n0, n1, ...]} or a
 * compressed one {"size": [h, w], "counts": "string"}. The masks equal
 * pycocotools' annToMask (frPyObjects + merge + decode) exactly, bit for
 * bit, because they follow its definitions, rewritten here from its
 * documented behaviour:
 *
 *  - A polygon is rasterised as cocoapi's maskApi.c rleFrPoly defines it
 *    (the vertices scaled by 5 and rounded at open, the walk, the boundary
 *    points and the odd runs painted at read): coco_mask.c, whose essay
 *    gives the rule.
 *  - The parts of one annotation are merged by union. A part of fewer
 *    than 3 points paints nothing (rleFrPoly walks such a part there and
 *    back, so every boundary point comes twice; detectron2 drops them),
 *    where pycocotools' annToMask raises an exception when the first part
 *    is one (frPyObjects takes a first part of 4 numbers for a box list and
 *    fails on it). A part with an odd count of numbers or a vertex more
 *    than a million pixels from the origin is refused, and so is one whose
 *    outline is longer than 4 x the image's pixels + 2^20 steps of the
 *    walk (bounding the work of a hostile file); an empty segmentation
 *    list paints nothing.
 *  - RLE counts alternate runs of 0 and 1 in column-major order, starting
 *    with 0; the compressed string is cocoapi's: each count in 5-bit
 *    groups, least significant first, one character per group (48 + the
 *    group, + 32 when more groups follow; the last group's bit 4 is the
 *    sign), counts after the second stored as the difference from the one
 *    two before. "size" must be the image's [height, width] and the counts
 *    must add up to height x width.
 *
 * Everything is checked and converted at open (polygons to the scaled
 * integer vertices, compressed RLE to counts), so a read only paints.
 * With masks=none segmentations are not read at all.
 *
 * Thread safety: immutable after open; read, label and the field calls
 * run on any number of threads (per-call state in the caller's scratch).
 */
#include "codec/codec.h"
#include "core/error.h"
#include "core/util.h"
#include "format/coco_mask.h"
#include "format/dataset.h"
#include "format/reader_util.h"
#include "io/source.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define COCO_DEFAULT_MAX_JSON (2ull << 30)
#define COCO_MAX_FIELDS 7
#define COCO_MAX_COORD 1000000 /* pixels: a polygon vertex's |x| and |y| */
/* The most work one read may spend painting an image's mask, in steps of
 * the walk, vertices, boundary points and pixels painted, summed over all
 * of its annotations' parts (coco_polygon, coco_segmentation): 32 x the
 * image's pixels + 2^24. A bound per polygon alone let a 270 KB file of
 * 10,000 small polygons each covering the image cost 58 s per read, every
 * epoch; COCO's own images need well under 1 x their pixels. */
#define COCO_PAINT_LIMIT(pixels) (32 * (pixels) + (1ull << 24))

enum { MASKS_NONE, MASKS_SEMANTIC, MASKS_INSTANCE };
enum { CROWD_KEEP, CROWD_DROP };
enum { EMPTY_KEEP, EMPTY_DROP };
enum { MISSING_ERROR, MISSING_SKIP, MISSING_LAZY };
enum { F_IMAGE, F_LABEL, F_BOXES, F_BOX_LABELS, F_IMAGE_ID, F_ISCROWD, F_MASK };
enum { SEG_POLY = 0, SEG_RLE = 1 };

/* One sample. */
typedef struct coco_image {
    int64_t id;
    uint64_t name;      /* offset of its file_name in names */
    uint32_t height, width;
    uint64_t first;     /* its first row in the per-annotation tables */
    uint32_t count;     /* its rows (annotations kept) */
    uint64_t max_points; /* masks: the most boundary points of one of its polygons */
    uint64_t paint_work; /* masks, open only: a bound on one read's painting (COCO_PAINT_LIMIT) */
} coco_image;

/* One annotation's segmentation: parts[first .. first + nparts). */
typedef struct coco_seg {
    uint64_t first;
    uint32_t nparts;
    uint32_t kind; /* SEG_POLY or SEG_RLE */
} coco_seg;

/* A polygon (n vertices at verts[2 * off ...], scaled) or an RLE (n counts
 * at counts[off ...]). */
typedef struct coco_part {
    uint64_t off;
    uint64_t n;
} coco_part;

typedef struct coco_impl {
    int root_fd;          /* owned: IMAGES_DIR, image files are opened relative to it */
    char *root;           /* owned: IMAGES_DIR as given, for names */
    char *ann_path;       /* owned: the annotation file, for messages and metadata */
    char *names;          /* owned: file names, NUL-terminated, back to back */
    coco_image *images;   /* owned: ds->count samples */
    float *boxes;         /* owned: 4 per row, XYXY */
    int64_t *box_labels;  /* owned: 1 per row */
    int64_t *iscrowd;     /* owned: 1 per row */
    coco_seg *segs;       /* owned (masks): 1 per row */
    coco_part *parts;     /* owned (masks) */
    int32_t *verts;       /* owned (masks): x, y pairs scaled by 5 */
    uint32_t *counts;     /* owned (masks): RLE counts */
    char *category_ids;   /* owned: metadata "category_ids", "1,2,3,..." by label */
    int masks, crowd;
    uint64_t max_bytes;   /* largest image file read */
    uint64_t max_pixels;
    uint32_t nfields;
    uint8_t field_kind[COCO_MAX_FIELDS]; /* F_* of field i */
} coco_impl;

static const int64_t coco_minus_one = -1;

/* ------------------------------------------------------------------------ */
/* Growable arrays (open time only)                                         */
/* ------------------------------------------------------------------------ */

typedef struct coco_vec {
    void *data;
    uint64_t n, cap;
} coco_vec;

/* Room for `more` elements of `size` bytes at the end of v. */
static int coco_vec_grow(coco_vec *v, uint64_t more, size_t size)
{
    uint64_t need, bytes;
    if (!stk_add_ok(v->n, more, &need))
        return stk_fail(STK_ENOMEM, "coco: too many elements");
    if (need <= v->cap)
        return 0;
    uint64_t cap = v->cap ? v->cap : 64;
    while (cap < need)
        cap *= 2;
    if (!stk_mul_ok(cap, size, &bytes) || bytes > SIZE_MAX)
        return stk_fail(STK_ENOMEM, "coco: out of memory for %llu elements",
                        (unsigned long long)cap);
    void *p = realloc(v->data, (size_t)bytes);
    if (!p)
        return stk_fail(STK_ENOMEM, "coco: out of memory for %llu bytes",
                        (unsigned long long)bytes);
    v->data = p;
    v->cap = cap;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Reading                                                                  */
/* ------------------------------------------------------------------------ */

static void coco_name(const coco_impl *m, const coco_image *im, char *buf, size_t size)
{
    const char *rel = m->names + im->name;
    size_t n = strlen(m->root);
    snprintf(buf, size, "%s%s%s", m->root, n && m->root[n - 1] == '/' ? "" : "/", rel);
}

static void coco_sample_name(const stk_dataset *ds, uint64_t index, char *buf, size_t size)
{
    const coco_impl *m = ds->impl;
    coco_name(m, &m->images[index], buf, size);
}

/* "IMAGES_DIR/FILE (image id N)" before the message just set; returns code. */
static int coco_read_fail(const coco_impl *m, const coco_image *im, int code)
{
    char name[1024];
    coco_name(m, im, name, sizeof name);
    return stk_fail_prefix(code, "%s (image id %lld)", name, (long long)im->id);
}

/* The image file of sample `index`, whole, into scratch, its header checked
 * against the annotation file's size. */
static int coco_read_image(const stk_dataset *ds, uint64_t index, stk_scratch *scratch,
                           const uint8_t **data, size_t *size)
{
    const coco_impl *m = ds->impl;
    const coco_image *im = &m->images[index];
    stk_file_source fs; /* on the stack: no allocation per sample */
    stk_source *src = &fs.base;
    size_t done = 0;
    int rc = stk_file_source_open_at(&fs, m->root_fd, m->names + im->name, NULL);
    if (rc < 0) {
        stk_source_close(src);
        return coco_read_fail(m, im, rc == STK_ENOMEM ? rc : STK_EDATA);
    }
    if (src->size == 0)
        rc = stk_fail(STK_EDATA, "empty file");
    else if (src->size > m->max_bytes || src->size > SIZE_MAX)
        rc = stk_fail(STK_EDATA, "%llu bytes exceeds the max_bytes limit of %llu",
                      (unsigned long long)src->size, (unsigned long long)m->max_bytes);
    if (rc == 0)
        rc = stk_scratch_reserve(scratch, (size_t)src->size);
    while (rc == 0 && done < (size_t)src->size) {
        int64_t n = stk_source_read_part(src, scratch->data + done, (size_t)src->size - done,
                                         done);
        if (n <= 0)
            rc = n < 0 ? STK_EDATA
                       : stk_fail(STK_EDATA, "file shrank to %zu bytes while being read", done);
        else
            done += (size_t)n;
    }
    stk_source_close(src);
    if (rc < 0)
        return coco_read_fail(m, im, rc);
    stk_codec_limits lim = {.max_pixels = m->max_pixels};
    stk_image_info info;
    if ((rc = stk_image_probe(scratch->data, done, &lim, &info)) < 0)
        return coco_read_fail(m, im, rc == STK_ENOMEM ? rc : STK_EDATA);
    if (info.width != im->width || info.height != im->height)
        return coco_read_fail(m, im,
                              stk_fail(STK_EDATA,
                                       "the image is %ux%u (WxH) but %s gives %ux%u: its boxes "
                                       "and masks would not fit it",
                                       info.width, info.height, m->ann_path, im->width,
                                       im->height));
    *data = scratch->data;
    *size = done;
    return 0;
}

static int coco_read(const stk_dataset *ds, uint64_t index, stk_sample *out, stk_scratch *scratch)
{
    const uint8_t *data;
    size_t size;
    int rc = coco_read_image(ds, index, scratch, &data, &size);
    if (rc < 0)
        return rc;
    memset(&out->image, 0, sizeof out->image);
    out->encoded = data;
    out->encoded_size = size;
    out->label = -1;
    return 0;
}

static int coco_label(const stk_dataset *ds, uint64_t index, int64_t *label)
{
    (void)ds;
    (void)index;
    *label = -1;
    return 0;
}

/* The mask of sample `index` painted into scratch. */
static int coco_paint_mask(const stk_dataset *ds, uint64_t index, stk_scratch *scratch,
                           stk_field_view *out)
{
    const coco_impl *m = ds->impl;
    const coco_image *im = &m->images[index];
    uint64_t pixels = (uint64_t)im->height * im->width; /* <= max_pixels, checked at open */
    uint64_t at = (pixels + 7) / 8 * 8, bytes;
    if (m->masks == MASKS_INSTANCE && im->count > 255)
        return coco_read_fail(m, im,
                              stk_fail(STK_EDATA,
                                       "%u annotations, but an instance mask holds at most 255 "
                                       "(uint8; masks=semantic or crowd=drop may do)",
                                       im->count));
    if (!stk_mul_ok(im->max_points, sizeof(uint32_t), &bytes) ||
        !stk_add_ok(bytes, at, &bytes) || bytes > SIZE_MAX)
        return coco_read_fail(m, im, stk_fail(STK_ENOMEM, "mask too large"));
    int rc = stk_scratch_reserve(scratch, bytes ? (size_t)bytes : 1);
    if (rc < 0)
        return rc;
    uint8_t *mask = scratch->data;
    uint32_t *pos = (uint32_t *)(scratch->data + at);
    memset(mask, 0, (size_t)pixels);
    for (uint32_t r = 0; r < im->count; r++) {
        uint64_t row = im->first + r;
        const coco_seg *sg = &m->segs[row];
        uint8_t val = (uint8_t)(m->masks == MASKS_SEMANTIC ? m->box_labels[row] + 1 : r + 1);
        for (uint32_t p = 0; p < sg->nparts; p++) {
            const coco_part *pt = &m->parts[sg->first + p];
            if (sg->kind == SEG_RLE) {
                stk_coco_mask_rle(mask, im->height, im->width, m->counts + pt->off, pt->n, val);
                continue;
            }
            uint64_t n = stk_coco_mask_poly(mask, im->height, im->width, m->verts + 2 * pt->off,
                                            pt->n, pos, im->max_points, val);
            if (n > im->max_points)
                return coco_read_fail(m, im,
                                      stk_fail(STK_EDATA, "internal error: polygon bound "
                                                          "exceeded (%llu > %llu points)",
                                               (unsigned long long)n,
                                               (unsigned long long)im->max_points));
        }
    }
    out->data = mask;
    out->size = (size_t)pixels;
    out->shape[0] = im->height;
    out->shape[1] = im->width;
    out->shape[2] = 1;
    return 0;
}

static int coco_field_view(const stk_dataset *ds, uint64_t index, uint32_t field,
                           stk_field_view *out, stk_scratch *scratch)
{
    const coco_impl *m = ds->impl;
    memset(out, 0, sizeof *out);
    if (field >= m->nfields || index >= ds->count)
        return stk_fail(STK_EINVAL, "%s: no field %u or sample %llu (%u fields, %llu samples)",
                        ds->uri, field, (unsigned long long)index, m->nfields,
                        (unsigned long long)ds->count);
    const coco_image *im = &m->images[index];
    switch (m->field_kind[field]) {
    case F_IMAGE: {
        const uint8_t *data;
        size_t size;
        int rc = coco_read_image(ds, index, scratch, &data, &size);
        if (rc < 0)
            return rc;
        out->data = data;
        out->size = size;
        return 0;
    }
    case F_LABEL:
        out->data = &coco_minus_one;
        out->size = sizeof coco_minus_one;
        out->shape[0] = 1;
        return 0;
    case F_IMAGE_ID:
        out->data = &im->id;
        out->size = sizeof im->id;
        out->shape[0] = 1;
        return 0;
    case F_BOXES:
        out->data = m->boxes + 4 * im->first;
        out->size = (size_t)im->count * 4 * sizeof(float);
        out->shape[0] = im->count;
        return 0;
    case F_BOX_LABELS:
        out->data = m->box_labels + im->first;
        out->size = (size_t)im->count * sizeof(int64_t);
        out->shape[0] = im->count;
        return 0;
    case F_ISCROWD:
        out->data = m->iscrowd + im->first;
        out->size = (size_t)im->count * sizeof(int64_t);
        out->shape[0] = im->count;
        return 0;
    default:
        return coco_paint_mask(ds, index, scratch, out);
    }
}

static uint32_t coco_field_count(const stk_dataset *ds)
{
    return ((const coco_impl *)ds->impl)->nfields;
}

static int coco_field_info(const stk_dataset *ds, uint32_t i, stk_field_info *info)
{
    const coco_impl *m = ds->impl;
    if (i >= m->nfields)
        return stk_fail(STK_EINVAL, "%s: no field %u (%u fields)", ds->uri, i, m->nfields);
    memset(info, 0, sizeof *info);
    switch (m->field_kind[i]) {
    case F_IMAGE: info->name = "image"; info->type = STK_FIELD_IMAGE; break;
    case F_LABEL: info->name = "label"; info->type = STK_FIELD_INT64; break;
    case F_IMAGE_ID: info->name = "image_id"; info->type = STK_FIELD_INT64; break;
    case F_BOXES:
        info->name = "boxes";
        info->type = STK_FIELD_FLOAT32;
        info->ndim = 2;
        info->dims[0] = 0; /* varies per record */
        info->dims[1] = 4;
        break;
    case F_BOX_LABELS:
    case F_ISCROWD:
        info->name = m->field_kind[i] == F_BOX_LABELS ? "box_labels" : "iscrowd";
        info->type = STK_FIELD_INT64;
        info->ndim = 1;
        info->dims[0] = 0;
        break;
    default: info->name = "mask"; info->type = STK_FIELD_RAW_IMAGE; break;
    }
    return 0;
}

static const char *coco_metadata(const stk_dataset *ds, const char *key)
{
    const coco_impl *m = ds->impl;
    if (!strcmp(key, "annotations"))
        return m->ann_path;
    if (!strcmp(key, "images_dir"))
        return m->root;
    if (!strcmp(key, "category_ids"))
        return m->category_ids;
    return NULL;
}

static void coco_close(stk_dataset *ds)
{
    coco_impl *m = ds->impl;
    if (m->root_fd >= 0)
        close(m->root_fd);
    free(m->root);
    free(m->ann_path);
    free(m->names);
    free(m->images);
    free(m->boxes);
    free(m->box_labels);
    free(m->iscrowd);
    free(m->segs);
    free(m->parts);
    free(m->verts);
    free(m->counts);
    free(m->category_ids);
    free(m);
    ds->impl = NULL;
}

static const stk_dataset_vtable coco_vt = {
    .format = "coco",
    .read = coco_read,
    .close = coco_close,
    .field_count = coco_field_count,
    .field_info = coco_field_info,
    .read_field = stk_read_field_by_view,
    .label = coco_label,
    .field_view = coco_field_view,
    .metadata = coco_metadata,
    .sample_name = coco_sample_name,
};

/* ------------------------------------------------------------------------ */
/* Open: the annotation file                                                */
/* ------------------------------------------------------------------------ */

/* Open-time state: the tree and what is being built from it. */
typedef struct coco_build {
    const char *path;      /* the annotation file */
    stk_dataset *ds;
    coco_impl *m;
    /* categories, sorted by id: label = position */
    int64_t *cat_ids;
    uint32_t ncat;
    /* images sorted by id; each with its index in the JSON array */
    coco_image *images;
    uint64_t nimages;
    coco_vec names;        /* char */
    coco_vec parts, verts, counts; /* masks */
} coco_build;

static const char *coco_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    default: return "null";
    }
}

/* Member `key` of object o as an integer; `what` names o in the message. */
static int coco_get_int(const coco_build *b, const json_t *o, const char *key, const char *what,
                        long long what_id, int64_t *out)
{
    const json_t *v = json_object_get(o, key);
    if (!v)
        return stk_fail(STK_EFORMAT, "%s: %s %lld has no \"%s\"", b->path, what, what_id, key);
    if (!json_is_integer(v))
        return stk_fail(STK_EFORMAT, "%s: %s %lld: \"%s\" is %s, an integer expected", b->path,
                        what, what_id, key, coco_type_name(v));
    *out = (int64_t)json_integer_value(v);
    return 0;
}

/* The "id" of element i of array `arr` ("images"...): an integer. */
static int coco_get_id(const coco_build *b, const json_t *o, const char *arr, size_t i,
                       int64_t *id)
{
    const json_t *v;
    if (!json_is_object(o))
        return stk_fail(STK_EFORMAT, "%s: \"%s\"[%zu] is %s, an object expected", b->path, arr, i,
                        coco_type_name(o));
    v = json_object_get(o, "id");
    if (!v)
        return stk_fail(STK_EFORMAT, "%s: \"%s\"[%zu] has no \"id\"", b->path, arr, i);
    if (!json_is_integer(v))
        return stk_fail(STK_EFORMAT, "%s: \"%s\"[%zu]: \"id\" is %s, an integer expected",
                        b->path, arr, i, coco_type_name(v));
    *id = (int64_t)json_integer_value(v);
    return 0;
}

static int coco_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int coco_cmp_image(const void *a, const void *b)
{
    return coco_cmp_i64(&((const coco_image *)a)->id, &((const coco_image *)b)->id);
}

/* Index of `id` in the sorted ids[0..n), or -1. */
static int64_t coco_find(const void *base, uint64_t n, size_t stride, int64_t id)
{
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int64_t v = *(const int64_t *)((const char *)base + mid * stride);
        if (v == id)
            return (int64_t)mid;
        if (v < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* Array member `key` of the root. */
static int coco_root_array(const coco_build *b, const json_t *root, const char *key,
                           const json_t **out)
{
    const json_t *v = json_object_get(root, key);
    if (!v)
        return stk_fail(STK_EFORMAT, "%s: no \"%s\" array (not a COCO instances file?)", b->path,
                        key);
    if (!json_is_array(v))
        return stk_fail(STK_EFORMAT, "%s: \"%s\" is %s, an array expected", b->path, key,
                        coco_type_name(v));
    *out = v;
    return 0;
}

typedef struct coco_cat {
    int64_t id;
    const char *name; /* lent by the tree */
    size_t pos;       /* in the JSON array */
} coco_cat;

/* By id, then by position (so a repeated id names the first one first). */
static int coco_cmp_cat(const void *a, const void *b)
{
    const coco_cat *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int coco_categories(coco_build *b, const json_t *cats)
{
    stk_dataset *ds = b->ds;
    size_t n = json_array_size(cats);
    coco_cat *c = NULL;
    int rc = 0;
    if (n == 0)
        return stk_fail(STK_EFORMAT, "%s: \"categories\" is empty", b->path);
    if (n > UINT32_MAX / 2)
        return stk_fail(STK_ELIMIT, "%s: %zu categories", b->path, n);
    if (!(c = calloc(n, sizeof *c)) || !(b->cat_ids = calloc(n, sizeof *b->cat_ids)) ||
        !(ds->class_names = calloc(n, sizeof *ds->class_names))) {
        free(c);
        return stk_fail(STK_ENOMEM, "out of memory for %zu categories", n);
    }
    ds->num_classes = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        const json_t *o = json_array_get(cats, i), *name;
        if ((rc = coco_get_id(b, o, "categories", i, &c[i].id)) < 0)
            goto out;
        name = json_object_get(o, "name");
        if (!json_is_string(name)) {
            rc = stk_fail(STK_EFORMAT, "%s: category %lld: \"name\" is %s, a string expected",
                          b->path, (long long)c[i].id, name ? coco_type_name(name) : "missing");
            goto out;
        }
        c[i].name = json_string_value(name);
        c[i].pos = i;
    }
    qsort(c, n, sizeof *c, coco_cmp_cat);
    size_t text = 1;
    for (size_t i = 0; i < n; i++) {
        if (i && c[i].id == c[i - 1].id) {
            rc = stk_fail(STK_EFORMAT, "%s: category id %lld is given twice (\"%s\" and \"%s\")",
                          b->path, (long long)c[i].id, c[i - 1].name, c[i].name);
            goto out;
        }
        b->cat_ids[i] = c[i].id;
        if (!(ds->class_names[i] = stk_strdup(c[i].name))) {
            rc = STK_ENOMEM;
            goto out;
        }
        text += 21;
    }
    b->ncat = (uint32_t)n;
    if (!(b->m->category_ids = malloc(text))) {
        rc = stk_fail(STK_ENOMEM, "out of memory");
        goto out;
    }
    size_t used = 0;
    for (size_t i = 0; i < n; i++)
        used += (size_t)snprintf(b->m->category_ids + used, text - used, "%s%lld", i ? "," : "",
                                 (long long)c[i].id);
    if (b->m->masks == MASKS_SEMANTIC && n > 255)
        rc = stk_fail(STK_EINVAL,
                      "%s: %zu categories, but a semantic mask holds labels 1..255 (uint8): use "
                      "masks=instance or masks=none",
                      b->path, n);
out:
    free(c);
    return rc;
}

/* A file_name the images directory may hold: relative, no ".." part. */
static bool coco_name_ok(const char *s)
{
    if (!*s || *s == '/')
        return false;
    for (const char *p = s; *p;) {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return false;
        p += len + (e ? 1 : 0);
    }
    return true;
}

static int coco_images(coco_build *b, const json_t *imgs, const stk_dataset_options *o)
{
    size_t n = json_array_size(imgs);
    int rc;
    if (n > o->max_samples)
        return stk_fail(STK_ELIMIT, "%s: %zu images, more than max_samples = %llu", b->path, n,
                        (unsigned long long)o->max_samples);
    if (!(b->images = calloc(n ? n : 1, sizeof *b->images)))
        return stk_fail(STK_ENOMEM, "out of memory for %zu images", n);
    b->nimages = n;
    for (size_t i = 0; i < n; i++) {
        const json_t *im = json_array_get(imgs, i), *fn;
        coco_image *c = &b->images[i];
        int64_t h, w;
        if ((rc = coco_get_id(b, im, "images", i, &c->id)) < 0)
            return rc;
        if ((rc = coco_get_int(b, im, "height", "image id", (long long)c->id, &h)) < 0 ||
            (rc = coco_get_int(b, im, "width", "image id", (long long)c->id, &w)) < 0)
            return rc;
        if (h < 1 || w < 1 || h > UINT32_MAX || w > UINT32_MAX ||
            (uint64_t)h * (uint64_t)w > o->max_pixels)
            return stk_fail(h < 1 || w < 1 ? STK_EFORMAT : STK_ELIMIT,
                            "%s: image id %lld: height %lld x width %lld is %s", b->path,
                            (long long)c->id, (long long)h, (long long)w,
                            h < 1 || w < 1 ? "not a size (both must be >= 1)"
                                           : "more pixels than max_pixels allows");
        c->height = (uint32_t)h;
        c->width = (uint32_t)w;
        fn = json_object_get(im, "file_name");
        if (!json_is_string(fn))
            return stk_fail(STK_EFORMAT, "%s: image id %lld: \"file_name\" is %s, a string "
                                         "expected",
                            b->path, (long long)c->id, fn ? coco_type_name(fn) : "missing");
        const char *s = json_string_value(fn);
        size_t len = strlen(s);
        if (len != json_string_length(fn) || !coco_name_ok(s))
            return stk_fail(STK_EFORMAT,
                            "%s: image id %lld: file_name \"%s\" is not a relative path inside "
                            "the images directory (empty, absolute, with \"..\" or a NUL)",
                            b->path, (long long)c->id, s);
        if ((rc = coco_vec_grow(&b->names, len + 1, 1)) < 0)
            return rc;
        c->name = b->names.n;
        memcpy((char *)b->names.data + b->names.n, s, len + 1);
        b->names.n += len + 1;
    }
    qsort(b->images, n, sizeof *b->images, coco_cmp_image);
    for (size_t i = 1; i < n; i++)
        if (b->images[i].id == b->images[i - 1].id)
            return stk_fail(STK_EFORMAT, "%s: image id %lld is given twice (\"%s\" and \"%s\")",
                            b->path, (long long)b->images[i].id,
                            (char *)b->names.data + b->images[i - 1].name,
                            (char *)b->names.data + b->images[i].name);
    return 0;
}

/* A number of an array as a double. */
static bool coco_number(const json_t *v, double *out)
{
    if (!json_is_number(v))
        return false;
    *out = json_number_value(v);
    return isfinite(*out);
}

/* One polygon part [x0, y0, x1, y1, ...] into verts (scaled). */
static int coco_polygon(coco_build *b, const json_t *part, coco_image *im, long long ann_id,
                        coco_part *out, uint64_t *max_points)
{
    int64_t x0 = INT64_MAX, x1 = INT64_MIN, y0 = INT64_MAX, y1 = INT64_MIN;
    uint64_t nv = json_array_size(part) / 2;
    int rc;
    if ((rc = coco_vec_grow(&b->verts, 2 * nv, sizeof(int32_t))) < 0)
        return rc;
    int32_t *v = (int32_t *)b->verts.data + b->verts.n;
    for (uint64_t i = 0; i < nv; i++) {
        double x, y;
        if (!coco_number(json_array_get(part, 2 * i), &x) ||
            !coco_number(json_array_get(part, 2 * i + 1), &y)) {
            return stk_fail(STK_EFORMAT, "%s: annotation %lld: polygon value %llu is not a "
                                         "finite number",
                            b->path, ann_id, (unsigned long long)(2 * i));
        }
        /* scaled by 5 they fit int32; the walk's length is bounded below */
        if (fabs(x) > COCO_MAX_COORD || fabs(y) > COCO_MAX_COORD)
            return stk_fail(STK_EFORMAT,
                            "%s: annotation %lld: polygon vertex (%g, %g) lies more than %d "
                            "pixels from the origin",
                            b->path, ann_id, x, y, COCO_MAX_COORD);
        /* pycocotools: (int)(scale * v + .5), truncating */
        v[2 * i] = (int32_t)(5.0 * x + 0.5);
        v[2 * i + 1] = (int32_t)(5.0 * y + 0.5);
        x0 = v[2 * i] < x0 ? v[2 * i] : x0;
        x1 = v[2 * i] > x1 ? v[2 * i] : x1;
        y0 = v[2 * i + 1] < y0 ? v[2 * i + 1] : y0;
        y1 = v[2 * i + 1] > y1 ? v[2 * i + 1] : y1;
    }
    uint64_t points, steps, pixels = (uint64_t)im->height * im->width;
    stk_coco_poly_bound(v, nv, &points, &steps);
    if (steps > 4 * pixels + (1u << 20))
        return stk_fail(STK_EFORMAT,
                        "%s: annotation %lld: a polygon of %llu vertices whose outline is %llu "
                        "steps long, more than 4 x the %ux%u image's pixels: not an outline",
                        b->path, ann_id, (unsigned long long)nv, (unsigned long long)steps,
                        im->width, im->height);
    if (points > *max_points)
        *max_points = points;
    /* A read walks the steps, sorts the points and paints between them:
     * within the columns and rows of the polygon's box (+1 for rounding),
     * clipped to the image. */
    uint64_t cols = (uint64_t)(x1 - x0) / 5 + 2, rows = (uint64_t)(y1 - y0) / 5 + 2;
    cols = cols < im->width ? cols : im->width;
    rows = rows < im->height ? rows : im->height;
    im->paint_work += steps + nv + points + cols * rows;
    out->off = b->verts.n / 2;
    out->n = nv;
    b->verts.n += 2 * nv;
    return 0;
}

/* Decode a compressed RLE string into counts. */
static int coco_rle_string(coco_build *b, const char *s, size_t len, long long ann_id,
                           coco_part *out)
{
    int rc;
    if ((rc = coco_vec_grow(&b->counts, len, sizeof(uint32_t))) < 0) /* one count >= 1 char */
        return rc;
    uint32_t *c = (uint32_t *)b->counts.data + b->counts.n;
    uint64_t m = 0;
    size_t p = 0;
    while (p < len) {
        int64_t x = 0;
        int k = 0;
        bool more = true;
        while (more) {
            if (p >= len || k >= 7)
                return stk_fail(STK_EFORMAT,
                                "%s: annotation %lld: the RLE string %s at character %zu",
                                b->path, ann_id, p >= len ? "ends inside a count" :
                                "has a count of more than 7 characters", p);
            int ch = (unsigned char)s[p] - 48;
            if (ch < 0 || ch > 63)
                return stk_fail(STK_EFORMAT,
                                "%s: annotation %lld: the RLE string holds '%c' at character "
                                "%zu (only '0'..'o' are used)",
                                b->path, ann_id, s[p], p);
            x |= (int64_t)(ch & 0x1f) << (5 * k);
            more = (ch & 0x20) != 0;
            p++;
            k++;
            if (!more && (ch & 0x10))
                x |= (int64_t)((uint64_t)-1 << (5 * k)); /* negative */
        }
        if (m > 2)
            x += c[m - 2];
        if (x < 0 || x > UINT32_MAX)
            return stk_fail(STK_EFORMAT, "%s: annotation %lld: RLE count %llu is %lld", b->path,
                            ann_id, (unsigned long long)m, (long long)x);
        c[m++] = (uint32_t)x;
    }
    out->off = b->counts.n;
    out->n = m;
    b->counts.n += m;
    return 0;
}

/* A segmentation dict {"size": [h, w], "counts": ...} into counts. */
static int coco_rle(coco_build *b, const json_t *seg, const coco_image *im, long long ann_id,
                    coco_part *out)
{
    const json_t *size = json_object_get(seg, "size"), *cnt = json_object_get(seg, "counts");
    int rc;
    if (!json_is_array(size) || json_array_size(size) != 2 ||
        !json_is_integer(json_array_get(size, 0)) || !json_is_integer(json_array_get(size, 1)) ||
        !cnt)
        return stk_fail(STK_EFORMAT,
                        "%s: annotation %lld: an RLE segmentation needs \"size\": [h, w] and "
                        "\"counts\"",
                        b->path, ann_id);
    json_int_t h = json_integer_value(json_array_get(size, 0));
    json_int_t w = json_integer_value(json_array_get(size, 1));
    if (h != im->height || w != im->width)
        return stk_fail(STK_EFORMAT,
                        "%s: annotation %lld: RLE size [%lld, %lld] is not image id %lld's "
                        "[height, width] [%u, %u]",
                        b->path, ann_id, (long long)h, (long long)w, (long long)im->id,
                        im->height, im->width);
    if (json_is_string(cnt)) {
        if ((rc = coco_rle_string(b, json_string_value(cnt), json_string_length(cnt), ann_id,
                                  out)) < 0)
            return rc;
    } else if (json_is_array(cnt)) {
        size_t n = json_array_size(cnt);
        if ((rc = coco_vec_grow(&b->counts, n, sizeof(uint32_t))) < 0)
            return rc;
        uint32_t *c = (uint32_t *)b->counts.data + b->counts.n;
        for (size_t i = 0; i < n; i++) {
            const json_t *v = json_array_get(cnt, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > UINT32_MAX)
                return stk_fail(STK_EFORMAT,
                                "%s: annotation %lld: RLE count %zu is not an integer in "
                                "0..2^32-1",
                                b->path, ann_id, i);
            c[i] = (uint32_t)json_integer_value(v);
        }
        out->off = b->counts.n;
        out->n = n;
        b->counts.n += n;
    } else {
        return stk_fail(STK_EFORMAT,
                        "%s: annotation %lld: RLE \"counts\" is %s, a string or an array "
                        "expected",
                        b->path, ann_id, coco_type_name(cnt));
    }
    uint64_t sum = 0;
    for (uint64_t i = 0; i < out->n; i++)
        sum += ((uint32_t *)b->counts.data)[out->off + i];
    if (sum != (uint64_t)im->height * im->width)
        return stk_fail(STK_EFORMAT,
                        "%s: annotation %lld: the RLE counts add up to %llu pixels, not the "
                        "%u x %u = %llu of image id %lld",
                        b->path, ann_id, (unsigned long long)sum, im->height, im->width,
                        (unsigned long long)im->height * im->width, (long long)im->id);
    return 0;
}

/* STK_ELIMIT when painting image im's mask would cost more than
 * COCO_PAINT_LIMIT: the bound is on one read, over all of the image's
 * annotations (a bound per polygon alone let a read take minutes). */
static int coco_paint_check(const coco_build *b, const coco_image *im, long long ann_id)
{
    uint64_t pixels = (uint64_t)im->height * im->width;
    if (im->paint_work <= COCO_PAINT_LIMIT(pixels))
        return 0;
    return stk_fail(STK_ELIMIT,
                    "%s: image id %lld: painting its mask would take %llu steps (its polygons' "
                    "outlines, vertices and boxes, its RLE runs), more than the %llu allowed for "
                    "a %ux%u image (32 x its pixels + 2^24), reached at annotation %lld: too "
                    "many or too large segmentations for one image (masks=none reads the boxes)",
                    b->path, (long long)im->id, (unsigned long long)im->paint_work,
                    (unsigned long long)COCO_PAINT_LIMIT(pixels), im->width, im->height, ann_id);
}

/* The segmentation of annotation `a` (row `row`) into segs[row]. */
static int coco_segmentation(coco_build *b, const json_t *a, coco_image *im, long long ann_id,
                             uint64_t row)
{
    const json_t *seg = json_object_get(a, "segmentation");
    coco_seg *sg = &b->m->segs[row];
    int rc;
    if (!seg)
        return stk_fail(STK_EFORMAT, "%s: annotation %lld has no \"segmentation\" (needed by "
                                     "masks=)",
                        b->path, ann_id);
    sg->first = b->parts.n;
    if (json_is_object(seg)) {
        if ((rc = coco_vec_grow(&b->parts, 1, sizeof(coco_part))) < 0)
            return rc;
        const coco_part *pt = (coco_part *)b->parts.data + b->parts.n;
        if ((rc = coco_rle(b, seg, im, ann_id, (coco_part *)pt)) < 0)
            return rc;
        b->parts.n++;
        sg->nparts = 1;
        sg->kind = SEG_RLE;
        /* a read walks the counts and paints the runs of 1 */
        const uint32_t *c = (const uint32_t *)b->counts.data + pt->off;
        im->paint_work += pt->n;
        for (uint64_t i = 1; i < pt->n; i += 2)
            im->paint_work += c[i];
        return coco_paint_check(b, im, ann_id);
    }
    if (!json_is_array(seg))
        return stk_fail(STK_EFORMAT,
                        "%s: annotation %lld: \"segmentation\" is %s, polygons or an RLE "
                        "expected",
                        b->path, ann_id, coco_type_name(seg));
    size_t n = json_array_size(seg);
    sg->kind = SEG_POLY;
    if (n > UINT32_MAX)
        return stk_fail(STK_ELIMIT, "%s: annotation %lld: %zu polygons", b->path, ann_id, n);
    sg->nparts = (uint32_t)n;
    if (n == 0)
        return 0; /* nothing painted */
    for (size_t i = 0; i < n; i++) {
        const json_t *part = json_array_get(seg, i);
        size_t len = json_array_size(part);
        if (!json_is_array(part) || len % 2 != 0)
            return stk_fail(STK_EFORMAT,
                            "%s: annotation %lld: polygon %zu is %s; polygons are [x0, y0, x1, "
                            "y1, ...]",
                            b->path, ann_id, i,
                            json_is_array(part) ? "an odd count of numbers" : coco_type_name(part));
        if (len < 6) { /* fewer than 3 points: paints nothing */
            sg->nparts--;
            continue;
        }
        if ((rc = coco_vec_grow(&b->parts, 1, sizeof(coco_part))) < 0)
            return rc;
        if ((rc = coco_polygon(b, part, im, ann_id, (coco_part *)b->parts.data + b->parts.n,
                               &im->max_points)) < 0)
            return rc;
        b->parts.n++;
        if ((rc = coco_paint_check(b, im, ann_id)) < 0)
            return rc; /* at once: the next parts are not converted for nothing */
    }
    return 0;
}

/* "iscrowd" of annotation a: 0 or 1 (absent: 0). */
static int coco_iscrowd(const coco_build *b, const json_t *a, long long ann_id, int *crowd)
{
    const json_t *v = json_object_get(a, "iscrowd");
    *crowd = 0;
    if (!v || json_is_false(v))
        return 0;
    if (json_is_true(v) ||
        (json_is_integer(v) && (json_integer_value(v) == 0 || json_integer_value(v) == 1))) {
        *crowd = json_is_true(v) || json_integer_value(v) == 1;
        return 0;
    }
    return stk_fail(STK_EFORMAT, "%s: annotation %lld: \"iscrowd\" is %s, 0 or 1 expected",
                    b->path, ann_id, json_is_integer(v) ? "another integer" : coco_type_name(v));
}

static double coco_clip(double v, double hi) { return v < 0 ? 0 : v > hi ? hi : v; }

/* Row `row` of annotation `a` (of image im): box, label, crowd flag, and
 * with masks the segmentation. */
static int coco_row(coco_build *b, const json_t *a, coco_image *im, long long ann_id, int crowd,
                    uint64_t row)
{
    coco_impl *m = b->m;
    const json_t *bb = json_object_get(a, "bbox");
    double x, y, w, h;
    int64_t cid;
    int rc;
    if (!json_is_array(bb) || json_array_size(bb) != 4 ||
        !coco_number(json_array_get(bb, 0), &x) || !coco_number(json_array_get(bb, 1), &y) ||
        !coco_number(json_array_get(bb, 2), &w) || !coco_number(json_array_get(bb, 3), &h))
        return stk_fail(STK_EFORMAT,
                        "%s: annotation %lld (image id %lld): \"bbox\" is %s, [x, y, width, "
                        "height] of four finite numbers expected",
                        b->path, ann_id, (long long)im->id,
                        !bb ? "missing" : json_is_array(bb) ? "another array" : coco_type_name(bb));
    if (w < 0 || h < 0)
        return stk_fail(STK_EFORMAT,
                        "%s: annotation %lld (image id %lld): bbox [%g, %g, %g, %g] has a "
                        "negative %s",
                        b->path, ann_id, (long long)im->id, x, y, w, h,
                        w < 0 ? "width" : "height");
    /* XYXY, clipped to the image (computed in double, rounded once) */
    m->boxes[4 * row + 0] = (float)coco_clip(x, im->width);
    m->boxes[4 * row + 1] = (float)coco_clip(y, im->height);
    m->boxes[4 * row + 2] = (float)coco_clip(x + w, im->width);
    m->boxes[4 * row + 3] = (float)coco_clip(y + h, im->height);
    if ((rc = coco_get_int(b, a, "category_id", "annotation", ann_id, &cid)) < 0)
        return rc;
    int64_t label = coco_find(b->cat_ids, b->ncat, sizeof *b->cat_ids, cid);
    if (label < 0)
        return stk_fail(STK_EFORMAT,
                        "%s: annotation %lld (image id %lld): category_id %lld is not in "
                        "\"categories\"",
                        b->path, ann_id, (long long)im->id, (long long)cid);
    m->box_labels[row] = label;
    m->iscrowd[row] = crowd;
    if (m->masks != MASKS_NONE)
        return coco_segmentation(b, a, im, ann_id, row);
    return 0;
}

static int coco_annotations(coco_build *b, const json_t *anns)
{
    coco_impl *m = b->m;
    size_t n = json_array_size(anns);
    int64_t *where = NULL; /* per annotation: its image (index into b->images), -1 dropped */
    uint64_t rows = 0;
    int rc = 0;
    if (!(where = malloc((n ? n : 1) * sizeof *where)))
        return stk_fail(STK_ENOMEM, "out of memory for %zu annotations", n);
    /* 1: the image of each annotation and how many rows each image gets */
    for (size_t i = 0; i < n; i++) {
        const json_t *a = json_array_get(anns, i);
        int64_t id, iid;
        int crowd;
        if ((rc = coco_get_id(b, a, "annotations", i, &id)) < 0 ||
            (rc = coco_get_int(b, a, "image_id", "annotation", (long long)id, &iid)) < 0 ||
            (rc = coco_iscrowd(b, a, (long long)id, &crowd)) < 0)
            goto out;
        where[i] = coco_find(b->images, b->nimages, sizeof *b->images, iid);
        if (where[i] < 0) {
            rc = stk_fail(STK_EFORMAT,
                          "%s: annotation %lld: image_id %lld is not in \"images\"", b->path,
                          (long long)id, (long long)iid);
            goto out;
        }
        if (crowd && m->crowd == CROWD_DROP) {
            where[i] = -1;
            continue;
        }
        if (b->images[where[i]].count == UINT32_MAX) {
            rc = stk_fail(STK_ELIMIT, "%s: image id %lld: too many annotations", b->path,
                          (long long)iid);
            goto out;
        }
        b->images[where[i]].count++;
        rows++;
    }
    /* 2: the rows, image by image, each image's in file order */
    for (uint64_t i = 0; i < b->nimages; i++) {
        coco_image *im = &b->images[i];
        im->first = i ? b->images[i - 1].first + b->images[i - 1].count : 0;
    }
    for (uint64_t i = 0; i < b->nimages; i++)
        b->images[i].count = 0;
    uint64_t r = rows ? rows : 1;
    if (r > SIZE_MAX / (4 * sizeof(float)) || !(m->boxes = malloc((size_t)r * 4 * sizeof(float))) ||
        !(m->box_labels = malloc((size_t)r * sizeof(int64_t))) ||
        !(m->iscrowd = malloc((size_t)r * sizeof(int64_t))) ||
        (m->masks != MASKS_NONE && !(m->segs = calloc((size_t)r, sizeof(coco_seg))))) {
        rc = stk_fail(STK_ENOMEM, "out of memory for %llu annotations", (unsigned long long)rows);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (where[i] < 0)
            continue;
        const json_t *a = json_array_get(anns, i);
        coco_image *im = &b->images[where[i]];
        long long id = (long long)json_integer_value(json_object_get(a, "id"));
        int crowd;
        coco_iscrowd(b, a, id, &crowd); /* checked in 1 */
        if ((rc = coco_row(b, a, im, id, crowd, im->first + im->count)) < 0)
            goto out;
        im->count++;
    }
out:
    free(where);
    return rc;
}

/* Record `msg` in ds->skipped. */
static int coco_skip(stk_dataset *ds, const char *msg)
{
    char **s = realloc(ds->skipped, (size_t)(ds->nskipped + 1) * sizeof *s);
    if (!s)
        return stk_fail(STK_ENOMEM, "out of memory");
    ds->skipped = s;
    if (!(s[ds->nskipped] = stk_strdup(msg)))
        return STK_ENOMEM;
    ds->nskipped++;
    return 0;
}

/* empty= and missing=: the images kept, moved to the front of b->images;
 * returns how many (or a negative code). */
static int64_t coco_keep_images(coco_build *b, int empty, int missing)
{
    stk_dataset *ds = b->ds;
    coco_impl *m = b->m;
    uint64_t kept = 0, nmissing = 0, first_missing = 0;
    char name[2600], msg[2600], ebuf[128];
    int first_errno = 0;
    for (uint64_t i = 0; i < b->nimages; i++) {
        coco_image *im = &b->images[i];
        const char *rel = (const char *)b->names.data + im->name;
        if (empty == EMPTY_DROP && im->count == 0) {
            snprintf(msg, sizeof msg, "%s/%s (image id %lld): no annotations%s (empty=drop)",
                     m->root, rel, (long long)im->id,
                     m->crowd == CROWD_DROP ? " but crowd ones" : "");
            int rc = coco_skip(ds, msg);
            if (rc < 0)
                return rc;
            continue;
        }
        if (missing != MISSING_LAZY) {
            struct stat st;
            int err = fstatat(m->root_fd, rel, &st, 0) == 0 ? (S_ISREG(st.st_mode) ? 0 : -1)
                                                            : errno;
            if (err) {
                snprintf(msg, sizeof msg, "%s/%s (image id %lld): %s", m->root, rel,
                         (long long)im->id,
                         err < 0 ? "not a regular file"
                                 : err == ENOENT ? "no such file"
                                                 : strerror_r(err, ebuf, sizeof ebuf));
                if (missing == MISSING_SKIP) {
                    int rc = coco_skip(ds, msg);
                    if (rc < 0)
                        return rc;
                    continue;
                }
                if (nmissing++ == 0) {
                    first_missing = i;
                    first_errno = err;
                    snprintf(name, sizeof name, "%s", msg);
                }
                continue;
            }
        }
        b->images[kept++] = *im;
    }
    if (nmissing) {
        (void)first_missing;
        return stk_fail(first_errno == ENOENT ? STK_ENOENT : STK_EIO,
                        "coco: %s; %llu of the %llu image files %s listed are missing or "
                        "unreadable (missing=skip leaves them out, missing=lazy checks each "
                        "when read)",
                        name, (unsigned long long)nmissing, (unsigned long long)b->nimages,
                        b->path);
    }
    return (int64_t)kept;
}

/* ------------------------------------------------------------------------ */
/* Open                                                                     */
/* ------------------------------------------------------------------------ */

/* Value `v` of key `key` among `values` (NULL-terminated): its index, or
 * STK_EINVAL naming the URI. NULL v: def. */
static int coco_choice(const char *uri, const char *key, const char *v,
                       const char *const *values, int def)
{
    if (!v)
        return def;
    for (int i = 0; values[i]; i++)
        if (!strcmp(v, values[i]))
            return i;
    char allowed[128] = "";
    size_t used = 0;
    for (int i = 0; values[i]; i++)
        used += (size_t)snprintf(allowed + used, sizeof allowed - used, "%s%s",
                                 i == 0 ? "" : values[i + 1] ? ", " : " or ", values[i]);
    return stk_fail(STK_EINVAL,
                    "coco: unknown value '%.100s' for query key '%s' in URI '%s' (expected %s)",
                    v, key, uri, allowed);
}

static int coco_open(const char *uri, const char *path, const char *query,
                     const stk_dataset_options *opts, stk_dataset **out)
{
    static const char *const keys[] = {"annotations", "masks", "crowd", "empty", "missing"};
    static const char *const masks_v[] = {"none", "semantic", "instance", NULL};
    static const char *const crowd_v[] = {"keep", "drop", NULL};
    static const char *const empty_v[] = {"keep", "drop", NULL};
    static const char *const missing_v[] = {"error", "skip", "lazy", NULL};
    stk_dataset_options o = stk_dataset_options_resolve(opts);
    char *qv[5] = {NULL};
    coco_build b = {0};
    stk_mapped_file map = {0};
    json_t *root = NULL;
    stk_dataset *ds = NULL;
    coco_impl *m;
    int masks, crowd, empty, missing;
    char ebuf[128];
    int rc = stk_query_names(uri, "coco", query, keys, qv, 5);
    if (rc < 0)
        goto out;
    if ((rc = masks = coco_choice(uri, "masks", qv[1], masks_v, MASKS_NONE)) < 0 ||
        (rc = crowd = coco_choice(uri, "crowd", qv[2], crowd_v, CROWD_KEEP)) < 0 ||
        (rc = empty = coco_choice(uri, "empty", qv[3], empty_v, EMPTY_KEEP)) < 0 ||
        (rc = missing = coco_choice(uri, "missing", qv[4], missing_v, MISSING_ERROR)) < 0)
        goto out;
    if (!qv[0]) {
        rc = stk_fail(STK_EINVAL,
                      "coco: URI '%s' names no annotation file: "
                      "coco:IMAGES_DIR?annotations=FILE.json",
                      uri);
        goto out;
    }
    if (!*path) {
        rc = stk_fail(STK_EINVAL, "coco: empty images directory in URI '%s'", uri);
        goto out;
    }
    if (!(ds = stk_dataset_alloc(&coco_vt, uri))) {
        rc = STK_ENOMEM;
        goto out;
    }
    if (!(m = calloc(1, sizeof *m))) {
        rc = stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
        goto out;
    }
    ds->impl = m;
    m->root_fd = -1;
    m->masks = masks;
    m->crowd = crowd;
    m->max_bytes = o.max_bytes;
    m->max_pixels = o.max_pixels;
    m->ann_path = qv[0];
    qv[0] = NULL;
    if (!(m->root = stk_strdup(path))) {
        rc = STK_ENOMEM;
        goto out;
    }
    m->root_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (m->root_fd < 0) {
        int e = errno;
        rc = stk_fail(e == ENOENT ? STK_ENOENT : e == ENOTDIR ? STK_EINVAL : STK_EIO,
                      "coco: images directory %s: %s", path, strerror_r(e, ebuf, sizeof ebuf));
        goto out;
    }
    b.path = m->ann_path;
    b.ds = ds;
    b.m = m;

    /* The annotation file: its size against the limit, then parsed whole. */
    uint64_t limit = opts && opts->max_bytes ? opts->max_bytes : COCO_DEFAULT_MAX_JSON;
    struct stat st;
    if (stat(b.path, &st) != 0) {
        int e = errno;
        rc = stk_fail(e == ENOENT ? STK_ENOENT : STK_EIO, "coco: annotation file %s: %s", b.path,
                      strerror_r(e, ebuf, sizeof ebuf));
        goto out;
    }
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > limit) {
        rc = stk_fail(STK_ELIMIT,
                      "coco: annotation file %s is %llu bytes, more than the limit of %llu "
                      "(parsing takes about 8 bytes of memory per byte of JSON); raise it with "
                      "max_bytes of stk_dataset_options (Python: stoker.open(uri, "
                      "max_bytes=N))",
                      b.path, (unsigned long long)st.st_size, (unsigned long long)limit);
        goto out;
    }
    if ((rc = stk_map_file(b.path, limit, &map)) < 0)
        goto out;
    json_error_t jerr;
    root = json_loadb(map.data ? (const char *)map.data : "", map.size, 0, &jerr);
    int lost = stk_mapped_file_intact(&map, 0, map.size, NULL) ? 0 : 1;
    stk_unmap_file(&map);
    if (lost) {
        rc = stk_fail(STK_EIO, "coco: annotation file %s was truncated while it was read",
                      b.path);
        goto out;
    }
    if (!root) {
        rc = stk_fail(STK_EFORMAT, "coco: %s: line %d, column %d: %s (not valid JSON)", b.path,
                      jerr.line, jerr.column, jerr.text);
        goto out;
    }
    if (!json_is_object(root)) {
        rc = stk_fail(STK_EFORMAT, "coco: %s: the top level is %s, an object expected", b.path,
                      coco_type_name(root));
        goto out;
    }
    const json_t *cats, *imgs, *anns;
    if ((rc = coco_root_array(&b, root, "categories", &cats)) < 0 ||
        (rc = coco_root_array(&b, root, "images", &imgs)) < 0 ||
        (rc = coco_root_array(&b, root, "annotations", &anns)) < 0 ||
        (rc = coco_categories(&b, cats)) < 0 || (rc = coco_images(&b, imgs, &o)) < 0 ||
        (rc = coco_annotations(&b, anns)) < 0)
        goto out;
    json_decref(root);
    root = NULL;

    int64_t kept = coco_keep_images(&b, empty, missing);
    if (kept < 0) {
        rc = (int)kept;
        goto out;
    }
    if (kept == 0) {
        rc = stk_fail(STK_EFORMAT, "coco: %s: no images%s", b.path,
                      b.nimages ? " left (see the skipped list: empty=, missing=)" : "");
        goto out;
    }
    m->images = b.images;
    b.images = NULL;
    ds->count = (uint64_t)kept;
    m->names = b.names.data;
    b.names.data = NULL;
    m->parts = b.parts.data;
    m->verts = b.verts.data;
    m->counts = b.counts.data;
    b.parts.data = b.verts.data = b.counts.data = NULL;
    /* fields */
    static const uint8_t base[] = {F_IMAGE, F_LABEL, F_BOXES, F_BOX_LABELS, F_IMAGE_ID};
    memcpy(m->field_kind, base, sizeof base);
    m->nfields = sizeof base;
    if (crowd == CROWD_KEEP)
        m->field_kind[m->nfields++] = F_ISCROWD;
    if (masks != MASKS_NONE)
        m->field_kind[m->nfields++] = F_MASK;
    *out = ds;
    ds = NULL;
out:
    if (root)
        json_decref(root);
    stk_unmap_file(&map);
    free(b.cat_ids);
    free(b.images);
    free(b.names.data);
    free(b.parts.data);
    free(b.verts.data);
    free(b.counts.data);
    stk_dataset_close(ds);
    for (int i = 0; i < 5; i++)
        free(qv[i]);
    return rc;
}

const stk_reader stk_reader_coco = {
    "coco",
    "coco:IMAGES_DIR?annotations=FILE.json[&masks=none|semantic|instance][&crowd=keep|drop]"
    "[&empty=keep|drop][&missing=error|skip|lazy]",
    "COCO instances: a JSON annotation file and its images directory (boxes, labels, masks)",
    coco_open,
    NULL,
    NULL,
    NULL,
    NULL};
