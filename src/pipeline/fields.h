/*
 * fields.h — the fields a loader delivers besides the image (internal; the
 * loader's `fields=` option, docs/fields.md).
 *
 * A loader resolves its field list once at create (stk_lfields_resolve):
 * each requested name becomes an output field with a role —
 *
 *   image     the pipeline's output (the batch's data), always present;
 *   label     the int64 label (the batch's labels);
 *   index     the dataset index (the batch's indices);
 *   path      the sample's source name (a string);
 *   mask      an image field moved with the image's geometry, nearest;
 *   boxes     float32 XYXY boxes {0,4} moved with the image's geometry;
 *   per_box   a variable field with one row per box, filtered with them;
 *   data      any other field, delivered as stored;
 *   geometry  the geometric steps drawn for the row (float64 rows of 11).
 *
 * Fixed-size outputs (masks, fixed arrays, fixed raw images) are dense
 * arrays in the slot, one row per output row; variable ones (boxes, per-box
 * and variable arrays, strings, bytes, paths, encoded images) are written
 * by the worker that fills the row into that row's own growable buffer and
 * concatenated, with offsets, by the worker that completes the batch
 * (stk_slot_fields_collate). Ownership follows the slot's: the filling
 * worker writes its rows, the completing worker collates, the consumer
 * reads while the batch is lent.
 */
#ifndef STK_PIPELINE_FIELDS_H
#define STK_PIPELINE_FIELDS_H

#include "core/rng.h"
#include "core/util.h"
#include "format/dataset.h"
#include "ops/plan.h"
#include "stoker/stoker.h"

#define STK_MAX_FIELDS 16

typedef enum stk_lfield_role {
    LF_IMAGE = STK_ROLE_IMAGE,
    LF_LABEL = STK_ROLE_LABEL,
    LF_INDEX = STK_ROLE_INDEX,
    LF_PATH = STK_ROLE_PATH,
    LF_MASK = STK_ROLE_MASK,
    LF_BOXES = STK_ROLE_BOXES,
    LF_PER_BOX = STK_ROLE_PER_BOX,
    LF_DATA = STK_ROLE_DATA,
    LF_GEOMETRY = STK_ROLE_GEOMETRY,
} stk_lfield_role;

typedef struct stk_lfield {
    char name[64];
    int role;               /* stk_lfield_role */
    uint32_t ds_field;      /* the dataset's field (mask, boxes, per_box, data) */
    stk_field_info info;    /* its description */
    int variable;           /* delivered as values + offsets */
    uint32_t elem;          /* stk_elem_type of the values */
    int text;               /* values are UTF-8 strings */
    uint32_t elem_size;     /* bytes per value */
    uint32_t row_values;    /* variable arrays: values per value row (boxes: 4) */
    size_t row_bytes;       /* dense: bytes per output row */
    uint32_t ndim;          /* dense: per-row shape; variable: value-row shape */
    int64_t shape[4];
    uint32_t slot;          /* index into the slot's dense or variable buffers */
} stk_lfield;

typedef struct stk_lfields {
    uint32_t n;             /* output fields, image and label included */
    stk_lfield f[STK_MAX_FIELDS];
    uint32_t ndense, nvar;  /* buffers per slot */
    int spatial;            /* masks or boxes: the plan runs stk_plan_run_spatial */
    int boxes;              /* index of the boxes field in f, or -1 */
    uint32_t nmasks;
    int geometry;           /* the geometry field is asked for */
    int extra;              /* some field beyond image and label */
} stk_lfields;

/* Resolve `text` (NULL or "": "image,label") against the dataset. The
 * output size of masks is out_h x out_w. STK_EINVAL naming the field and
 * the reason. */
int stk_lfields_resolve(const stk_dataset *ds, const char *text, stk_lfields *lf);
/* Masks are the plan's output size: fill their shapes once it is known. */
void stk_lfields_set_mask_size(stk_lfields *lf, int64_t out_h, int64_t out_w);

typedef struct stk_var_row {
    uint8_t *data; /* malloc'd, grown by the filling worker */
    size_t size, cap;
    uint64_t nrows; /* value rows (bytes for text/bytes) */
} stk_var_row;

typedef struct stk_slot_fields {
    uint32_t rows;                   /* output rows of capacity */
    uint8_t *dense[STK_MAX_FIELDS];  /* rows * row_bytes each */
    stk_var_row *var[STK_MAX_FIELDS]; /* rows each */
    uint8_t *values[STK_MAX_FIELDS]; /* collated */
    size_t values_size[STK_MAX_FIELDS], values_cap[STK_MAX_FIELDS];
    uint64_t *offsets[STK_MAX_FIELDS]; /* rows + 1 */
    uint32_t nrows;                  /* rows collated */
} stk_slot_fields;

int stk_slot_fields_alloc(const stk_lfields *lf, uint32_t rows, stk_slot_fields **out);
void stk_slot_fields_free(const stk_lfields *lf, stk_slot_fields *sf);
/* Move row `from` to row `to` (the skip policy's compaction). */
void stk_slot_fields_move(const stk_lfields *lf, stk_slot_fields *sf, uint32_t from, uint32_t to);
/* Concatenate the first `rows` rows' variable values. */
int stk_slot_fields_collate(const stk_lfields *lf, stk_slot_fields *sf, uint32_t rows);

/* A worker's buffers for fields. */
typedef struct stk_worker_fields {
    stk_scratch view[STK_MAX_FIELDS];
    stk_scratch mask[STK_MAX_FIELDS]; /* decoded masks */
    stk_scratch work;                 /* mask replay planes */
    stk_scratch boxes;                /* transformed boxes and keep flags */
    stk_scratch geo;                  /* the geometry field's rows */
} stk_worker_fields;

void stk_worker_fields_free(stk_worker_fields *wf);
size_t stk_worker_fields_bytes(const stk_worker_fields *wf);

/* How the views of a row draw (the loader's key for the sample). */
typedef struct stk_row_key {
    uint64_t aug_seed, domain, epoch, draw;
} stk_row_key;

/*
 * Fill output rows row*k .. row*k+k-1 of one sample: the image through the
 * plan (into img_out, k rows of sample_bytes), and every other field.
 * STK_EDATA (named by the caller) for a bad field value.
 */
int stk_lfields_fill(const stk_lfields *lf, const stk_dataset *ds, const stk_plan *plan,
                     uint64_t index, const stk_plan_input *in, const stk_row_key *key, uint32_t k,
                     uint8_t *img_out, size_t sample_bytes, uint32_t row, stk_slot_fields *sf,
                     stk_worker_fields *wf, stk_scratch *plan_scratch);

/* The public description of field i of a lent batch. */
void stk_lfields_describe(const stk_lfields *lf, uint32_t i, const stk_slot_fields *sf,
                          uint32_t rows, stk_batch_field *out);

#endif
