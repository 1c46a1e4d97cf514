/*
 * stoker/dataset.h — datasets: opening a URI through the reader table,
 * in-memory and concatenated datasets, reading samples and fields, and
 * datasets whose samples the caller's callbacks make (docs/datasets.md).
 */
#ifndef STOKER_DATASET_H
#define STOKER_DATASET_H

#include "stoker/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Datasets                                                                  */
/* ------------------------------------------------------------------------ */

/*
 * Thread safety of datasets. stk_dataset_open and stk_dataset_from_memory
 * may run in any number of threads at once (the URI and its query are parsed
 * without shared state). An opened dataset is immutable: every function
 * below that takes a `const stk_dataset *` — info, read, fields, label,
 * metadata, class names, shards — may be called by any number of threads at
 * once on the same dataset, alongside the loaders reading it. Only
 * stk_dataset_close needs the dataset to itself: no call on it in flight and
 * every loader over it destroyed. Lent strings (uri, metadata, class and
 * field names, shard paths) live until close.
 */
typedef struct stk_dataset stk_dataset;

/* Safety limits applied while opening. Zero means the default. */
typedef struct stk_dataset_options {
    uint64_t max_bytes;   /* largest size accepted for each file on disk and
                             each decompressed array (default 16 GiB) */
    uint64_t max_samples; /* largest sample count accepted (default 2^40) */
    uint64_t max_pixels;  /* largest pixels per sample (default 2^28) */
    uint64_t reserved_[5]; /* must be zero (ABI: see the top of this file) */
} stk_dataset_options;

/*
 * Open a dataset by URI. The format is named by a prefix or detected:
 *
 *   cifar10:PATH[?split=train|test]     PATH a directory with data_batch_1..5.bin
 *                                       (train) / test_batch.bin (test), or
 *                                       one file, or files joined by ','
 *   cifar100:PATH[?split=..][&label=fine|coarse]
 *                                       PATH a directory with train.bin/test.bin,
 *                                       one file, or files joined by ','
 *   idx:IMAGES,LABELS                   IDX files (MNIST layout), plain or .gz
 *   mnist:DIR[?split=train|test]        DIR with train-images-idx3-ubyte[.gz] and
 *                                       train-labels-idx1-ubyte[.gz] (t10k-* for test)
 *   fashion-mnist:DIR[?split=...]       the same file names as mnist
 *   stk:PATH[?verify=off|first|always][&io=auto|mmap|pread][&hugepages=auto|on|off]
 *                                       .stk shards: a file, a directory of
 *                                       *.stk, or a glob (docs/format.md)
 *   npy:IMAGES,LABELS  or  npy:DIR      NumPy .npy arrays: uint8 images (N,H,W) or
 *                                       (N,H,W,C) and int64/int32/uint8 labels (N,);
 *                                       DIR holds images.npy and labels.npy;
 *   npy:FILE.npz[?images=NAME&labels=NAME]  the same arrays as members of an
 *                                       uncompressed np.savez archive
 *   zarr:DIR[?images=ARR&labels=ARR]    Zarr v2 group: uint8 images chunked along
 *                                       N (none/zstd/blosc/zlib), integer labels
 *   tfrecord:PATH[?image_key=K][&label_key=K][&index=DIR][&verify=off|first|always]
 *            [&cache=auto|off][&io=mmap|pread]
 *                                       TFRecord files of tf.train.Example: a file,
 *                                       a directory of *.tfrecord, or a glob
 *                                       (docs/datasets.md)
 *   wds:PATH[?image=jpg;png..][&label=cls;txt][&missing=error|skip]
 *                                       WebDataset tar shards (also webdataset:):
 *                                       a .tar, a directory of *.tar, a glob or
 *                                       shard-{000000..000099}.tar; a sample is
 *                                       the members sharing a key (KEY.jpg, KEY.cls)
 *   lmdb:DIR[?value=datum|encoded&color=bgr|rgb]
 *                                       LMDB environment: Caffe Datums (encoded,
 *                                       or raw CHW pixels, BGR read as RGB) or
 *                                       encoded images with KEY.cls labels
 *   recordio:PATH[?idx=FILE.idx|none]  MXNet RecordIO (IRHeader + encoded image):
 *                                       a .rec file, a directory of *.rec, or a glob
 *   hdf5:FILE[?images=/DS&labels=/DS]   HDF5: uint8 images (N,H,W[,C]) or vlen uint8
 *                                       encoded images, integer labels (N,); defaults
 *                                       /images and /labels; *.h5, *.hdf5 detected
 *   coco:IMAGES_DIR?annotations=FILE.json[&masks=none|semantic|instance]
 *        [&crowd=keep|drop][&empty=keep|drop][&missing=error|skip|lazy]
 *                                       COCO instances: fields image, label (-1),
 *                                       boxes (float32 XYXY), box_labels (category
 *                                       ids as labels 0..K-1), image_id, iscrowd,
 *                                       mask (uint8 h x w x 1)
 *   segfolder:DIR[?images=SUBDIR][&masks=SUBDIR][&mask_suffix=TEXT][&mask_ext=png]
 *        [&missing=error|skip]           image + mask files of one stem:
 *                                       DIR/images/STEM.jpg with DIR/masks/STEM.png,
 *                                       or DIR/STEM.jpg with DIR/STEM_mask.png
 *   imagefolder:DIR[?strict=0|1]        torchvision's ImageFolder layout
 *                                       DIR/CLASS/.../IMAGE (encoded images)
 *   list:FILE                           lines "PATH<TAB>LABEL", relative
 *                                       paths from FILE's directory
 *   PATH                                detected: a directory of one of the
 *                                       layouts above, or an IDX images file
 *                                       (its labels file found by name)
 *
 * These forms are the rows of the library's reader table; stk_dataset_reader
 * lists them at run time.
 *
 * A query is `?key=value&key=value`; an unknown key or value, a key given
 * twice or an item without '=' is STK_EINVAL naming it.
 *
 * `opts` may be NULL. On success *out owns a new dataset (close it with
 * stk_dataset_close). Fails with STK_ENOENT, STK_EIO, STK_EFORMAT, STK_ELIMIT,
 * STK_EUNSUPPORTED, STK_ENOMEM or STK_EINVAL; stk_errmsg() names the file and
 * the reason. Details: docs/datasets.md.
 */
STK_API int stk_dataset_open(const char *uri, const stk_dataset_options *opts,
                             stk_dataset **out);

/* The readers stk_dataset_open knows, from its reader table, for i = 0, 1,
 * ...: the i-th URI prefix ("cifar10", used as "cifar10:PATH"), and, where
 * not NULL, *form its URI form with query keys and *description one line.
 * NULL past the last. All static strings. Thread-safe. */
STK_API const char *stk_dataset_reader(uint32_t i, const char **form,
                                       const char **description);

/* An in-memory array of `count` images, each height x width x channels uint8
 * in HWC order, and `count` labels. With copy != 0 the arrays are copied;
 * with copy == 0 they are borrowed and must outlive the dataset. `labels`
 * may be NULL (all labels 0). num_classes is the largest label + 1 when all
 * labels are >= 0, else 0. STK_EINVAL for a zero count or dimension, NULL
 * pixels, or a total size that overflows. */
STK_API int stk_dataset_from_memory(const uint8_t *pixels, const int64_t *labels,
                                    uint64_t count, uint32_t height, uint32_t width,
                                    uint32_t channels, int copy, stk_dataset **out);

/* `count` opened datasets seen as one: the samples of parts[0], then those of
 * parts[1], ... (index i of part g is first_g + i). The parts are borrowed:
 * they must outlive it, and be closed after it. Labels, reads and sample
 * names are the parts' own; the sample shape is theirs when they all agree,
 * else 0 (any size); class names are kept when all parts have the same.
 * What a loader mixing datasets reads (stk_sampling.mix_sizes = the parts'
 * sizes). STK_EINVAL for no parts, a NULL part, or no samples at all. */
STK_API int stk_dataset_concat(stk_dataset *const *parts, uint32_t count, stk_dataset **out);

/* Destroys the dataset. NULL is a no-op. Every loader using it must have been
 * destroyed first, and no other call on it may be in flight. */
STK_API void stk_dataset_close(stk_dataset *ds);

typedef struct stk_dataset_info {
    const char *uri;      /* as given to open (lent: lives with the dataset) */
    const char *format;   /* the reader: "cifar10", "cifar100", "idx" (also for
                             mnist: and fashion-mnist:), "stk", "npy", "tfrecord",
                             mnist: and fashion-mnist:), "stk", "npy", "hdf5",
                             "imagefolder", "list", or "memory" for
                             stk_dataset_from_memory (static) */
    uint64_t count;       /* number of samples */
    uint32_t height, width, channels; /* sample shape; 0 where it varies */
    uint32_t num_classes; /* 0 when unknown */
    uint64_t reserved_[4]; /* zeroed by the library */
} stk_dataset_info;

/* Fill *info. Thread-safe. */
STK_API void stk_dataset_info_get(const stk_dataset *ds, stk_dataset_info *info);

/* Copy sample `index` as height x width x channels uint8 HWC into `pixels`
 * (`capacity` bytes) and its label into *label (may be NULL). Encoded
 * samples (JPEG/PNG) are decoded whole to RGB. Thread-safe. Returns the
 * number of bytes written, or a negative code (STK_EINVAL naming the size
 * needed when `capacity` is too small; STK_EDATA for an undecodable image). */
STK_API int64_t stk_dataset_read(const stk_dataset *ds, uint64_t index,
                                 uint8_t *pixels, size_t capacity, int64_t *label);

/* Sample `index` as stk_dataset_read gives it (encoded samples decoded
 * whole to RGB), for samples whose size varies (stk_dataset_info height,
 * width, channels 0): the pixels go to a new buffer, *pixels, that the
 * caller frees with stk_free(); shape gets (height, width, channels)
 * and *label the label (label may be NULL). Thread-safe. Returns the
 * number of bytes, or a negative code (*pixels NULL then): STK_EDATA for
 * an unreadable or undecodable sample, naming it. */
STK_API int64_t stk_dataset_read_alloc(const stk_dataset *ds, uint64_t index, uint8_t **pixels,
                                       uint32_t shape[3], int64_t *label);

/* Fields: what a record holds. Every dataset has at least an image field
 * ("image") and an int64 "label"; .stk shards have the fields of their
 * schema (docs/format.md), coco: and segfolder: theirs (docs/datasets.md). */
typedef enum stk_field_type {
    STK_FIELD_BYTES = 1,     /* opaque bytes */
    STK_FIELD_IMAGE = 2,     /* an encoded image file (JPEG, PNG) */
    STK_FIELD_RAW_IMAGE = 3, /* uint8 HWC pixels */
    STK_FIELD_INT64 = 4,     /* int64 array (labels; dims[0] == 0: rows vary) */
    STK_FIELD_FLOAT32 = 5,   /* float32 array (dims[0] == 0: rows vary, e.g. boxes) */
    STK_FIELD_STRING = 6,    /* UTF-8 text */
} stk_field_type;

typedef struct stk_field_info {
    const char *name;     /* lent: lives with the dataset */
    stk_field_type type;
    uint32_t ndim;        /* fixed shape, 0 = scalar (or varies, for images) */
    uint32_t dims[4];     /* int64/float32 with ndim >= 1 and dims[0] == 0: the
                             leading dimension varies per record (k rows of
                             dims[1..ndim) values: boxes are float32 {0, 4}) */
    int compressed;       /* raw images stored zstd-compressed */
    uint64_t reserved_[2]; /* zeroed by the library */
} stk_field_info;

/* Thread-safe, both. */
STK_API uint32_t stk_dataset_field_count(const stk_dataset *ds);
/* STK_EINVAL if i is out of range. */
STK_API int stk_dataset_field_info(const stk_dataset *ds, uint32_t i, stk_field_info *info);

/* The value of field `field` (a name; NULL means the image field) of sample
 * `index`, in a new buffer the caller frees with stk_free(): encoded bytes as
 * stored, raw images as HWC pixels (decompressed, with the shape in *shape if
 * not NULL), int64/float32 as little-endian arrays (a varying field's value
 * is a whole number of rows: STK_EDATA naming the shard, record and field
 * otherwise), strings without NUL.
 * Checksums are verified as the dataset's policy says. Thread-safe. */
STK_API int stk_dataset_read_field(const stk_dataset *ds, uint64_t index, const char *field,
                                   void **data, size_t *size, uint32_t shape[3]);

/* The label of sample `index`, read without touching the record where the
 * format allows (stk: from the index). Thread-safe. */
STK_API int stk_dataset_label(const stk_dataset *ds, uint64_t index, int64_t *label);

/* Metadata value for `key` (lent, NUL-terminated), or NULL; of a set of
 * shards, the first shard's. The keys of a packed dataset: class_names,
 * source, created_by, shard_set, shard (docs/format.md).
 * Thread-safe. */
STK_API const char *stk_dataset_metadata(const stk_dataset *ds, const char *key);

/* Name of class `label` (lent), or NULL when the dataset has no label map.
 * Thread-safe. */
STK_API const char *stk_dataset_class_name(const stk_dataset *ds, uint32_t label);

/* Inputs the open left out without failing, each with a message naming it
 * and the reason: an image folder's directories that cannot be opened or
 * read, and directories met a second time through a symlink (a loop back
 * to the root or an ancestor, or a second path to a listed directory); a
 * WebDataset sample without its image or label (missing=skip); a COCO
 * image without annotations (empty=drop) or without its file
 * (missing=skip); a segmentation image or mask without its partner
 * (missing=skip). `imagefolder:DIR?strict=1` fails on the first one instead, and stk_pack
 * reports them through on_skip (index UINT64_MAX) or, strict, fails. The
 * message is lent (lives with the dataset); NULL when i >= the count.
 * Thread-safe. */
STK_API uint64_t stk_dataset_skipped_count(const stk_dataset *ds);
STK_API const char *stk_dataset_skipped(const stk_dataset *ds, uint64_t i);

/* The source name of sample `index`: the path of its file for an image
 * folder or a list (ROOT/REL as opened), the "source_name" field of .stk
 * shards packed from such a source (docs/format.md), else the reader's name
 * for the sample (a tar member, an LMDB key, a TFRecord/RecordIO/HDF5
 * record, as messages name it). *path gets a new NUL-terminated string the caller
 * frees with stk_free(), or NULL (return 0) for formats whose samples have
 * no name of their own (CIFAR, IDX, NumPy arrays, memory). STK_EINVAL for
 * an index out of range; STK_EDATA naming the record for a source_name
 * value that cannot be read or holds a NUL. Thread-safe. */
STK_API int stk_dataset_sample_path(const stk_dataset *ds, uint64_t index, char **path);

/* Shards of a .stk dataset (0 for other formats). Thread-safe. */
typedef struct stk_shard_info {
    const char *path;     /* lent */
    uint64_t records;
    uint64_t first_index; /* global index of its record 0 */
    uint64_t file_bytes;
    uint64_t reserved_[2]; /* zeroed by the library */
} stk_shard_info;
STK_API uint32_t stk_dataset_shard_count(const stk_dataset *ds);
STK_API int stk_dataset_shard_info(const stk_dataset *ds, uint32_t i, stk_shard_info *info);

/* ------------------------------------------------------------------------ */
/* Callback datasets: samples made by the caller's code                      */
/* ------------------------------------------------------------------------ */

/*
 * A dataset whose samples come from functions the caller supplies, so that
 * a source only the caller's code can read (a Python object: the Python
 * module's stoker.ExternalSource is built on this; a database; a generator
 * of synthetic images) still gets the loader's threads, augmentation,
 * batching and prefetch. The samples are random access by index like any
 * dataset's: the loader's order, sharding, resume and per-sample random
 * draws (keyed by the index) are the same as for a file format.
 *
 * What `read` gives is borrowed only until the library has copied it: the
 * library copies the bytes or pixels into the calling thread's own buffer
 * and then, on the same thread and before it returns, calls
 * `release(user, token)` (when release is not NULL) with the token `read`
 * put in the sample. So the caller's storage need live only from read to
 * release, and it is never touched after release. The same holds for
 * read_field.
 *
 * Thread safety: read, read_field and release are called concurrently, from
 * every worker thread of every loader over the dataset and from any thread
 * calling stk_dataset_read & co. on it: they must be safe to call from
 * several threads at once (a caller that cannot be, e.g. Python code,
 * serialises inside them). close is called once, by stk_dataset_close,
 * after every other call has returned.
 */

/* One sample as `read` fills it (zeroed by the library before the call). */
typedef struct stk_callback_sample {
    /* Either an encoded image (JPEG, PNG... anything the decoders read):
     * data and size, with height = width = channels = 0. Or uint8 pixels:
     * height, width, channels (1..4) > 0, and the strides in bytes between
     * rows, columns and channels, all >= 0 (all three 0: dense HWC); size
     * is then the bytes data spans, at least (h-1)*row_stride +
     * (w-1)*col_stride + (c-1)*chan_stride + 1 (checked). A CHW array is
     * chan_stride = h*w, row_stride = w, col_stride = 1. */
    const void *data;
    size_t size;
    uint32_t height, width, channels;
    uint32_t reserved32_;  /* left zero */
    int64_t row_stride, col_stride, chan_stride;
    int64_t label;         /* the sample's label (-1: it has none) */
    void *token;           /* the caller's own, handed back to release */
    uint64_t reserved_[4]; /* left zero */
} stk_callback_sample;

/* One value of an extra field (stk_callback_options.fields) as read_field
 * fills it (zeroed by the library before the call). int64 / float32 values
 * little-endian, row-major; a fixed field's size must be exactly its
 * declared shape's; a field whose leading dimension varies (dims[0] == 0)
 * holds any whole number of rows. Bytes and strings (UTF-8, no NUL needed)
 * as they are; an encoded image as its file bytes; a raw image as dense HWC
 * uint8 pixels with shape = height, width, channels. */
typedef struct stk_callback_field {
    const void *data;
    size_t size;           /* bytes */
    uint32_t shape[3];     /* raw images: height, width, channels; else unused */
    uint32_t reserved32_;  /* left zero */
    void *token;           /* handed back to release */
    uint64_t reserved_[4]; /* left zero */
} stk_callback_field;

typedef struct stk_dataset_callbacks {
    /* Required. Fill *out with sample `index` (< count). Return 0, or a
     * negative STK_E* code with a message set by stk_callback_fail (the
     * library prefixes it with the dataset's name and the sample index):
     * STK_EDATA for a sample that cannot be made (a loader's
     * on_error=skip skips it), any other code stops the loader. */
    int (*read)(void *user, uint64_t index, stk_callback_sample *out);
    /* Required when extra fields are declared: the value of extra field
     * `field` (0 = the first of stk_callback_options.fields) of sample
     * `index`. Errors as read. */
    int (*read_field)(void *user, uint64_t index, uint32_t field, stk_callback_field *out);
    /* Optional: the library is done with what a successful read or
     * read_field gave (see above). Not called after a failed one. */
    void (*release)(void *user, void *token);
    /* Optional: called once by stk_dataset_close, last. Not called when
     * stk_dataset_from_callbacks fails (`user` stays the caller's). */
    void (*close)(void *user);
    uint64_t reserved_[4]; /* must be zero (ABI: see the top of this file) */
} stk_dataset_callbacks;

/* How the dataset looks from outside. Zero means the default for every
 * field; reserved words must be zero. */
typedef struct stk_callback_options {
    uint64_t count;        /* samples, > 0 */
    const char *name;      /* its URI in stk_dataset_info and in messages
                              (default "callback"); copied */
    /* All three > 0: every sample is uint8 pixels of exactly this shape
     * (checked per sample), and pipelines compile for it (no resize
     * needed). 0: samples of any size, encoded or pixels. */
    uint32_t height, width, channels;
    uint32_t num_classes;  /* 0 = unknown */
    const char *const *class_names; /* num_classes names, or NULL; copied */
    /* nfields extra fields, after "image" and "label" (field numbers 2,
     * 3, ...; stk_dataset_field_info describes them): their name (unique,
     * not "image" or "label"), type, ndim and dims as stk_field_info
     * says; compressed must be 0. Copied. */
    const stk_field_info *fields;
    uint32_t nfields;
    uint32_t reserved32_;  /* must be zero */
    uint64_t max_pixels;   /* largest height x width of a pixel sample
                              (0 = 2^28); larger ones are STK_EDATA */
    uint64_t reserved_[4]; /* must be zero (ABI: see the top of this file) */
} stk_callback_options;

/*
 * A new dataset over `cb` and `user` (borrowed: they must outlive it, and
 * `user` is passed to every callback). Its format is "callback"; its fields
 * "image" (raw_image of the fixed shape, or image: the sample's encoded
 * bytes as read gave them, or its pixels as dense HWC with the shape),
 * "label" (int64), then the declared extra fields. On success *out owns
 * the dataset (stk_dataset_close). STK_EINVAL for a NULL read, a zero
 * count, a bad field declaration or a non-zero reserved word; STK_ENOMEM.
 */
STK_API int stk_dataset_from_callbacks(const stk_dataset_callbacks *cb, void *user,
                                       const stk_callback_options *opts, stk_dataset **out);

/* For callbacks: make `message` the calling thread's error message (what
 * stk_errmsg() returns; copied, cut at 1023 bytes) and return `code`, so a
 * callback ends with `return stk_callback_fail(STK_EDATA, "...")`. */
STK_API int stk_callback_fail(int code, const char *message);

#ifdef __cplusplus
}
#endif

#endif /* STOKER_DATASET_H */
