/*
 * dataset.h — what every dataset reader implements (internal).
 *
 * A reader turns an index into a sample: a view of its pixels plus a label.
 * Readers are opened once (validating every header, size and label up front,
 * so the hot path trusts its tables) and are then immutable: `read` is
 * called concurrently from every worker thread without locks. Per-thread
 * state lives in the caller's scratch buffer, never in the dataset.
 *
 * Ownership: a view returned by `read` points either into memory the dataset
 * owns (a mapped file, a decompressed array) or into `scratch`; it is valid
 * until the dataset is closed or the scratch is reused, whichever is first.
 */
#ifndef STK_FORMAT_DATASET_H
#define STK_FORMAT_DATASET_H

#include "codec/codec.h"
#include "core/image.h"
#include "core/util.h"
#include "format/reader.h"
#include "stoker/stoker.h"

typedef struct stk_sample {
    /* Decoded pixels; image.pixels is NULL when the sample is encoded. */
    stk_image_view image;
    /* Encoded image bytes (JPEG/PNG...) when image.pixels is NULL; lent like
     * the view. */
    const uint8_t *encoded;
    size_t encoded_size;
    int64_t label;
} stk_sample;

/* One field of one sample, lent like stk_sample's views: into memory the
 * dataset owns, or into the scratch the caller passed. Encoded images and
 * bytes and strings as stored; raw images as dense HWC pixels (shape =
 * h, w, c); int64 / float32 arrays as little-endian values, shape[0] = the
 * number of rows (for a field whose leading dimension varies per record,
 * stk_field_info.dims[0] == 0, each row holding the product of dims[1..]
 * values; for a fixed field, dims[0], or 1 for a scalar). */
typedef struct stk_field_view {
    const void *data;
    size_t size;       /* bytes */
    uint32_t shape[3]; /* raw_image: h, w, c; arrays: shape[0] = rows */
} stk_field_view;

/* How a caller is about to read a dataset (vtable.access_hint). */
typedef enum stk_access {
    STK_ACCESS_RANDOM = 0,     /* indices in a shuffled order (the default) */
    STK_ACCESS_SEQUENTIAL = 1, /* indices in increasing order: pack, a loader
                                  without shuffle */
    STK_ACCESS_STOP = 2,       /* the reader is going away (a loader's
                                  destroy): abandon transfers in flight, so
                                  reads blocked on a slow store return (with
                                  STK_EINTR) and so do later reads ... */
    STK_ACCESS_RESUME = 3,     /* ... until this one (the loader's workers
                                  have all returned) */
} stk_access;

typedef struct stk_dataset_vtable {
    const char *format; /* "cifar10", ... static */
    /* Fill *out for sample `index` (< count). Thread-safe. On a corrupt
     * sample return STK_EDATA via stk_fail naming the dataset, record and
     * reason; other negative codes are fatal. */
    int (*read)(const stk_dataset *ds, uint64_t index, stk_sample *out, stk_scratch *scratch);
    /* Free impl (not the stk_dataset itself). Must accept a partly built
     * impl; called only when impl is not NULL. */
    void (*close)(stk_dataset *ds);

    /* Optional: formats with a schema of their own (.stk). When NULL, the
     * generic fields "image" and "label" are served through `read`
     * (src/format/fields.c). */
    uint32_t (*field_count)(const stk_dataset *ds);
    int (*field_info)(const stk_dataset *ds, uint32_t i, stk_field_info *info);
    int (*read_field)(const stk_dataset *ds, uint64_t index, uint32_t field, void **data,
                      size_t *size, uint32_t shape[3]);
    int (*label)(const stk_dataset *ds, uint64_t index, int64_t *label);
    /* Optional, for datasets with fields beyond "image" and "label" (the
     * loader's hot path for `fields=`): field `field` (an index into
     * field_info) of sample `index`, lent in *out without allocating in the
     * steady state. `scratch` is the caller's; a caller reading several
     * fields of one sample passes a different scratch for each. Errors as
     * `read` (STK_EDATA naming the record and field). Thread-safe. When
     * NULL, stk_dataset_field_view falls back on read_field (a copy). */
    int (*field_view)(const stk_dataset *ds, uint64_t index, uint32_t field, stk_field_view *out,
                      stk_scratch *scratch);
    const char *(*metadata)(const stk_dataset *ds, const char *key);
    uint32_t (*shard_count)(const stk_dataset *ds);
    int (*shard_info)(const stk_dataset *ds, uint32_t i, stk_shard_info *info);
    /* Optional: what to call sample `index` in a message — its file path for
     * file-per-sample sources, "SHARD: record R (sample N)" for shards.
     * NULL: "URI: sample N". */
    void (*sample_name)(const stk_dataset *ds, uint64_t index, char *buf, size_t size);
    /* Optional, for readers whose views point into a mapping that can lose
     * pages under them (a file truncated while open: src/io/map_guard.c):
     * called once the caller has finished with the view `read` returned for
     * `index`; STK_EDATA via stk_fail (naming the file and record) when
     * those bytes were lost and the caller has used zeros in their place.
     * Every caller of `read` that uses the view calls it; stk_dataset_check
     * wraps it. Thread-safe. */
    int (*read_check)(const stk_dataset *ds, uint64_t index);
    /* Optional: a hint of the order the coming reads take, given by whoever
     * starts reading (a loader at creation: sequential when it does not
     * shuffle; pack). A reader may tune readahead with it (.stk:
     * posix_fadvise / madvise over the record bytes), and a streaming
     * source (a tar or TFRecord stream, an object store) may choose between
     * one sequential stream and ranged reads. Never changes what `read`
     * returns; the last hint wins when several readers share a dataset.
     * Thread-safe; may be called any number of times. */
    void (*access_hint)(const stk_dataset *ds, stk_access how);
    /* Optional: sample `index` will be read soon — start fetching its bytes
     * (a remote dataset: the read-ahead of src/io/remote.c). Never blocks
     * on I/O; a hint only. The loader calls it for the samples of the
     * batches it will fill next, in the sampler's order, when the dataset
     * says it wants it (`wants_prefetch`). Thread-safe. */
    void (*prefetch)(const stk_dataset *ds, uint64_t index);
} stk_dataset_vtable;

struct stk_dataset {
    const stk_dataset_vtable *vt;
    char *uri;             /* owned; as given to open, used in messages */
    uint64_t count;        /* samples */
    uint32_t height, width, channels; /* fixed sample shape (0 = varies) */
    uint32_t num_classes;  /* 0 = unknown */
    char **class_names;    /* num_classes names (label -> name), or NULL;
                              owned: freed by stk_dataset_close with each name */
    char **skipped;        /* nskipped messages, one per input the open left out
                              (an image folder's unreadable directory, a symlink
                              loop), or NULL; owned: freed by stk_dataset_close */
    uint64_t nskipped;
    uint32_t wants_prefetch; /* samples ahead the reader asks a loader to
                                hint through vtable.prefetch (0: none; a
                                remote dataset sets it) */
    void *impl;            /* owned by the reader */
};

/* *out becomes a dense HWC view of `px` in the dataset's fixed shape (the
 * array readers: memory, IDX, npy, HDF5, Zarr); no encoded bytes. */
static inline void stk_sample_set_hwc(const stk_dataset *ds, const uint8_t *px, stk_sample *out)
{
    out->image.pixels = px;
    out->image.height = ds->height;
    out->image.width = ds->width;
    out->image.channels = ds->channels;
    out->image.row_stride = (ptrdiff_t)ds->width * ds->channels;
    out->image.col_stride = ds->channels;
    out->image.chan_stride = 1;
    out->encoded = NULL;
    out->encoded_size = 0;
}

/* After using the view of sample `index`: 0, or the reader's STK_EDATA if
 * its bytes were lost meanwhile (vtable.read_check; 0 when absent). */
static inline int stk_dataset_check(const stk_dataset *ds, uint64_t index)
{
    return ds->vt->read_check ? ds->vt->read_check(ds, index) : 0;
}

/* Pass an access hint on to the reader (vtable.access_hint; a no-op when
 * absent). */
static inline void stk_dataset_access_hint(const stk_dataset *ds, stk_access how)
{
    if (ds->vt->access_hint)
        ds->vt->access_hint(ds, how);
}

/* vtable.prefetch, or nothing. */
static inline void stk_dataset_prefetch(const stk_dataset *ds, uint64_t index)
{
    if (ds->vt->prefetch)
        ds->vt->prefetch(ds, index);
}

/* Field `field` of sample `index` lent in *out (vtable.field_view; the
 * generic fields through `read`; other fields through read_field, copied
 * into `scratch`). The view is valid until `scratch` is reused or the
 * dataset closed. Callers that use a view of a mapped file call
 * stk_dataset_check afterwards, as with `read`. */
int stk_dataset_field_view(const stk_dataset *ds, uint64_t index, uint32_t field,
                           stk_field_view *out, stk_scratch *scratch);

/* A vtable read_field for readers that have field_view: a copy of the lent
 * view in a new buffer (raw images: *shape = h, w, c). */
int stk_read_field_by_view(const stk_dataset *ds, uint64_t index, uint32_t field, void **data,
                           size_t *size, uint32_t shape[3]);

/* The name of sample `index` for messages (see vtable.sample_name). */
void stk_dataset_sample_name(const stk_dataset *ds, uint64_t index, char *buf, size_t size);

/* The string field stk_pack writes with each record's source name (the
 * sample's file path, escaped as one line of a label map: docs/format.md);
 * stk_dataset_sample_path returns it decoded. */
#define STK_SOURCE_NAME_FIELD "source_name"

/* The metadata key stk_pack writes beside source_name for a relative
 * source: the absolute directory the pack ran in, escaped like one class
 * name. stk_dataset_sample_path resolves a relative source_name against
 * it; shards without it (older packs) give the name as stored. */
#define STK_SOURCE_ROOT_KEY "source_root"

/* Whether stk_dataset_sample_path gives names for this dataset (a reader
 * that names its samples, or a source_name field). */
bool stk_dataset_has_sample_names(const stk_dataset *ds);

/* Defaults for stk_dataset_options fields left zero. */
#define STK_DEFAULT_MAX_BYTES (16ull << 30)
#define STK_DEFAULT_MAX_SAMPLES (1ull << 40)
/* STK_DEFAULT_MAX_PIXELS comes from codec/codec.h: the codec, one layer
 * down, applies it too. */

/* Options with zeros replaced by defaults. */
stk_dataset_options stk_dataset_options_resolve(const stk_dataset_options *opts);

/* Allocate a dataset shell with vt and a copy of uri; NULL + stk_fail on OOM. */
stk_dataset *stk_dataset_alloc(const stk_dataset_vtable *vt, const char *uri);

/* The row of the reader table a reader defines, stk_reader: format/reader.h. */

/* True if some subdirectory of `dir` directly holds a file with an image
 * extension (imagefolder.c): the image folder's detection rule for a bare
 * directory, which the wds: reader's detect asks too (a directory of *.tar
 * that is an image folder is not a WebDataset). */
int stk_imagefolder_detect(const char *dir);

#endif
