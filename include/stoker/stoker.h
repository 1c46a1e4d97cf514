/*
 * stoker.h — the whole public API of libstoker.
 *
 * If a function or type does not appear in this file, it is not a published
 * API. Everything exported carries the `stk_` / `STK_` prefix.
 *
 * The objects, and how they relate:
 *
 *   stk_dataset   an opened source of samples (CIFAR binary, IDX, an in-memory
 *                 array...). Random access by index. Immutable once opened, so
 *                 it may be shared by any number of threads and loaders.
 *   stk_sampler   the epoch order: a seeded permutation of [0, N) sharded by
 *                 rank/world_size, evaluated at any position in O(1) memory.
 *   stk_loader    worker threads that read, augment and batch the samples of a
 *                 dataset through a pipeline spec into a bounded pool of batch
 *                 buffers, delivered in order and lent to the caller.
 *   stk_batch     a lent, read-only view of one finished batch.
 *
 * Errors. Functions that can fail return an int: >= 0 on success, one of the
 * negative STK_E* codes on failure. The codes are pinned: they never change
 * value. stk_strerror() names a code; stk_errmsg() gives the detailed message
 * of the last failure on the calling thread (file, record, reason), and a
 * loader also keeps the message of the failure that stopped it
 * (stk_loader_errmsg()).
 *
 * Ownership is stated on every function: "lent" memory stays owned by stoker
 * and is valid only for the stated time; do not free or modify it. Memory a
 * function gives to the caller is freed with stk_free().
 *
 * ABI (docs/abi.md). Within a major version the size and layout of every
 * public struct stay fixed: each ends in reserved space (`reserved_`), and a
 * new field is carved out of it. In structs the caller fills (options,
 * states) the reserved words must be zero (zero-initialise the struct: `=
 * {0}` or memset) and a non-zero word is refused with STK_EINVAL, so a
 * program built against a newer header fails clearly on an older library
 * instead of having a new option ignored; a new field's zero value always
 * means the old behaviour. In structs the library fills (info, results,
 * stats, batches) the reserved words are zeroed. Codes and enum values are
 * only appended.
 *
 * Thread safety. Every function may be called from any thread; a paragraph
 * before each object's functions says which calls may run at the same time
 * on the same object, and a function's own comment says so where it differs.
 * Calls on different objects never interfere: there is no global state
 * except the per-thread error message and, for mapped .stk shards, a
 * process-wide SIGBUS handler with a locked registry (docs/datasets.md).
 * No stoker function is async-signal-safe: none may be called from a signal
 * handler. stk_version_number, stk_version_string, stk_strerror and
 * stk_errmsg (which reads the calling thread's own message) are safe from
 * any number of threads at once.
 */
#ifndef STOKER_STOKER_H
#define STOKER_STOKER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(STK_STATIC_DEFINE)
#  define STK_API
#elif defined(STK_BUILDING_LIBRARY)
#  define STK_API __attribute__((visibility("default")))
#else
#  define STK_API
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                   */
/* ------------------------------------------------------------------------ */

#define STK_VERSION_MAJOR 0
#define STK_VERSION_MINOR 1
#define STK_VERSION_PATCH 0
/* MAJOR*10000 + MINOR*100 + PATCH, as zstd does. */
#define STK_VERSION_NUMBER \
    (STK_VERSION_MAJOR * 10000 + STK_VERSION_MINOR * 100 + STK_VERSION_PATCH)
#define STK_VERSION_STRING "0.1.0"

/* The version of the library actually linked (may differ from the header). */
STK_API unsigned stk_version_number(void);

STK_API const char *stk_version_string(void);

/* The CPU this process may use, in cores (fractional under a cgroup quota):
 * the smallest of the affinity mask, the cgroup v1/v2 CPU quota and the
 * STOKER_CPUS environment variable when set. What the autotuner and
 * `stoker doctor` plan with; read afresh on each call. Thread-safe. */
STK_API double stk_cpus_available(void);

/* ------------------------------------------------------------------------ */
/* Errors (pinned: never renumber, only append)                              */
/* ------------------------------------------------------------------------ */

enum stk_error {
    STK_OK = 0,
    STK_EINVAL = -1,       /* an argument or option is invalid */
    STK_ENOMEM = -2,       /* out of memory */
    STK_EIO = -3,          /* the operating system failed a read/open/mmap */
    STK_ENOENT = -4,       /* a file or directory does not exist */
    STK_EFORMAT = -5,      /* a data file is malformed (bad header, size...) */
    STK_ESPEC = -6,        /* the pipeline spec does not parse or compile */
    STK_ESTATE = -7,       /* the call is not valid in the object's state */
    STK_ESTOPPED = -8,     /* the loader was stopped while the call waited */
    STK_ELIMIT = -9,       /* input exceeds a configured safety limit */
    STK_EUNSUPPORTED = -10,/* a valid input stoker does not handle (yet) */
    STK_EDATA = -11,       /* one sample is corrupt (skippable by policy) */
    STK_ETHREAD = -12,     /* a thread could not be created */
    STK_EEXHAUSTED = -13,  /* every batch buffer is lent out; release one */
    STK_EINTR = -14,       /* interrupted by the caller (stk_loader_interrupt) */
    STK_ETIMEDOUT = -15,   /* a wait with a timeout expired */
    STK_ENETWORK = -16,    /* a remote store failed after its retries (URL, status, attempts) */
    STK_EACCESS = -17,     /* a remote store refused the credentials (401/403) */
};

/* Static name and one-line description of a code ("STK_EFORMAT: malformed
 * data file"). Never NULL; unknown codes give "unknown error". */
STK_API const char *stk_strerror(int code);

/* Detailed message of the last failing stoker call on the calling thread.
 * Lent: valid until the next stoker call on this thread. Never NULL (empty
 * when no call has failed). */
STK_API const char *stk_errmsg(void);

/* ------------------------------------------------------------------------ */
/* Remote datasets: http(s):// and s3:// (docs/remote.md)                    */
/* ------------------------------------------------------------------------ */

/* Any dataset URI may name objects in a store instead of local files
 * ("stk:https://host/train-{000..127}.stk", "stk:s3://bucket/prefix/"). Their
 * bytes go through a local cache; these settings are process-wide (the
 * environment's STOKER_CACHE_DIR / STOKER_CACHE_LIMIT until this is called).
 * cache_dir NULL keeps the directory; cache_limit UINT64_MAX keeps the limit
 * (0: no limit). Sources already open keep the cache they opened. */
STK_API int stk_remote_configure(const char *cache_dir, uint64_t cache_limit);

/* The cache directory in use (the configured one: stk_remote_configure,
 * else STOKER_CACHE_DIR, else $XDG_CACHE_HOME/stoker, ~/.cache/stoker) and
 * what it holds now, counted by a scan of the directory, so objects
 * cached by other processes count too. */
typedef struct stk_remote_cache_info {
    char dir[4096];          /* the directory */
    uint64_t limit;          /* the byte limit in force (0: none) */
    uint64_t objects;        /* objects cached (remote files: shards, tars, ...) */
    uint64_t bytes;          /* disk bytes their data takes (what the limit bounds) */
    uint64_t reserved_[4];   /* zeroed by the library */
} stk_remote_cache_info;

/* STK_EIO naming the directory when it cannot be created or read. */
STK_API int stk_remote_cache_info_get(stk_remote_cache_info *out);

/* Remove least-recently-used objects from the cache until their bytes are
 * at most keep_bytes (0: empty it). Objects open in this process stay; an
 * object another process is reading leaves the directory, and that process
 * keeps reading its unlinked files. What was removed in *removed_objects /
 * *removed_bytes (may be NULL), what is left in *left (may be NULL). */
STK_API int stk_remote_cache_trim(uint64_t keep_bytes, uint64_t *removed_objects,
                                  uint64_t *removed_bytes, stk_remote_cache_info *left);

/* Download every object that `uri` names into the cache ahead of training
 * (on a node before a job starts, say), with the read-ahead's parallel
 * range requests: a dataset URI with or without its reader prefix
 * ("stk:s3://bucket/train/", "https://host/train-{000..127}.stk"), brace
 * ranges and s3:// listings expanded as a reader expands them. Chunks
 * already cached are not fetched again. `progress` (may be NULL) is called
 * after each object with the count done, the total and the object's URL.
 * On return *objects and *bytes (may be NULL) hold the objects and their
 * bytes, *fetched (may be NULL) the bytes downloaded by this call. Errors
 * as a reader's: the URL, the status and the attempts after the retries. */
STK_API int stk_remote_prefetch(const char *uri,
                                void (*progress)(void *ctx, uint32_t done, uint32_t total,
                                                 const char *url),
                                void *ctx, uint64_t *objects, uint64_t *bytes, uint64_t *fetched);

/* Counters of the remote layer since the process started (or the last
 * reset), all datasets together. */
typedef struct stk_io_stats {
    uint64_t bytes_fetched;   /* object bytes downloaded into the cache */
    uint64_t bytes_received;  /* HTTP body bytes received, every attempt */
    uint64_t bytes_sent;      /* request bodies sent (uploads) */
    uint64_t requests;        /* HTTP requests completed */
    uint64_t retries;         /* attempts repeated after a fault */
    uint64_t failures;        /* requests that failed after their retries */
    uint64_t cache_hit_bytes; /* bytes read from the local cache */
    uint64_t cache_evicted_bytes; /* bytes the cache's LRU eviction removed */
    uint64_t reads;           /* reads of remote objects */
    uint64_t reads_waited;    /* reads that had to wait for the network */
    double wait_s;            /* seconds those reads waited (summed over threads) */
    uint64_t prefetch_bytes;  /* bytes the read-ahead asked for */
    uint64_t reserved_[8];    /* zeroed by the library */
} stk_io_stats;

STK_API void stk_io_stats_get(stk_io_stats *out);
STK_API void stk_io_stats_reset(void);

/* The JPEG sync index (docs/codec.md, "Sync windows"): crops of JPEGs
 * without restart markers decode from windows synthesised from a per-file
 * index of where MCUs start, made on a file's first crop and kept for the
 * process, within a memory budget (STOKER_JPEG_INDEX_MB; 0 turns it off). */
typedef struct stk_jpeg_index_stats {
    uint64_t files;    /* files with an index (walked at least in part) */
    uint64_t windows;  /* crops decoded from a synthesised window */
    uint64_t declined; /* files whose walk found the data unusable: decoded the ordinary way */
    uint64_t bytes;    /* memory the indexes hold */
    uint64_t budget;   /* the bound on it, bytes (0: sync windows off) */
    uint64_t reserved_[3]; /* zeroed by the library */
} stk_jpeg_index_stats;

STK_API void stk_jpeg_index_stats_get(stk_jpeg_index_stats *out);


/* Frees memory that a stoker function gave to the caller (its doc comment
 * says so: the buffers of stk_dataset_read_field and stk_dataset_read_alloc).
 * NULL is a no-op. Use it rather than free(): the library and the program
 * may not share one allocator (a statically linked library, a Python
 * extension, another C runtime). */
STK_API void stk_free(void *p);

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

/* ------------------------------------------------------------------------ */
/* Packing and verifying .stk shards                                         */
/* ------------------------------------------------------------------------ */

/* Thread safety: stk_pack and stk_verify keep no state between calls and may
 * run in several threads at once, on different destinations (two packs
 * into the same directory at once are not supported). Their callbacks run
 * on the calling thread, one at a time. */

typedef enum stk_pack_mode {
    STK_PACK_KEEP = 0,   /* encoded images byte for byte (validated by decoding);
                            raw sources (CIFAR, IDX) as raw pixels */
    STK_PACK_RAW = 1,    /* decode and store raw pixels (zstd if zstd_level > 0) */
    STK_PACK_REENCODE = 2, /* decode, shrink to max_side if larger (Pillow's bilinear,
                              aspect kept), store as a JPEG of `quality` */
} stk_pack_mode;

typedef struct stk_pack_options {
    uint64_t shard_bytes;  /* start a new shard past this size (default 1 GiB) */
    uint32_t jobs;         /* threads reading/validating (default 2) */
    stk_pack_mode mode;
    int zstd_level;        /* raw mode: 0 = uncompressed, 1..19 */
    int strict;            /* fail on the first unreadable input */
    int no_validate;       /* keep mode: do not decode to validate */
    /* Called (from the packing thread) for each input left out: `index` is
     * the sample's, or UINT64_MAX for an input that is not one sample (a
     * directory the open left out: stk_dataset_skipped). */
    void (*on_skip)(void *ctx, uint64_t index, const char *reason);
    /* Called after each block of records, with done <= total. */
    void (*on_progress)(void *ctx, uint64_t done, uint64_t total);
    void *ctx;
    uint32_t max_side;     /* reencode: longest side kept (0 = no shrinking) */
    int quality;           /* reencode: JPEG quality 1..100 (0 = 90) */
    /* keep / reencode: when > 0, rewrite each YCbCr or gray JPEG losslessly
     * (same coefficients, same pixels: checked by decoding both) with a
     * restart marker every <= restart_interval MCUs, so that a crop decodes
     * only the intervals it covers (docs/codec.md). 4 is a good value. The
     * stored bytes then differ from the source file's; other files are
     * kept as they are. */
    uint32_t restart_interval;
    /* Carved out of the reserved words: called where on_progress is (both
     * are called when both are set), with `bytes` the shard bytes written
     * so far, the open shard's included (the CLI's MB/s). */
    void (*on_progress_bytes)(void *ctx, uint64_t done, uint64_t total, uint64_t bytes);
    uint64_t reserved_[7]; /* must be zero (ABI: see the top of this file) */
} stk_pack_options;

typedef struct stk_pack_result {
    uint64_t records;      /* records written */
    uint64_t skipped;      /* inputs left out (listed through on_skip) */
    uint32_t shards;
    uint64_t bytes;        /* total shard bytes */
    uint64_t restarted;    /* JPEGs rewritten with restart markers */
    uint64_t reserved_[4]; /* zeroed by the library */
} stk_pack_result;

/* Pack dataset `src` (any URI stk_dataset_open accepts) into shards
 * DEST_DIR/shard-00000.stk, ... with fields "image", "label" and
 * "source_index" (the sample's index in `src`), "source_name" where `src`
 * names its samples, then every other field of `src` as it is (boxes,
 * masks, ids of a multi-field set), the class names and the shard-set keys
 * in the metadata (docs/format.md). The shards appear under
 * their names only once all are written; temporary files of an earlier,
 * interrupted pack into DEST_DIR are removed. The output is byte-identical
 * for any `jobs` (tests/test_pack_stall.c). Fails with the source's error,
 * STK_EIO, STK_EINVAL (DEST_DIR already holds shards), or (strict) the
 * first unreadable input's STK_EDATA. */
STK_API int stk_pack(const char *src, const char *dest_dir, const stk_pack_options *opts,
                     stk_pack_result *result);

typedef struct stk_verify_options {
    int decode;            /* also decode every image */
    /* Called for each damaged shard or record: record is UINT64_MAX for
     * damage to the shard's structure. */
    void (*on_damage)(void *ctx, const char *shard, uint64_t record, const char *reason);
    void *ctx;
    /* Called for what is not damage but should be known: a temporary file
     * of an interrupted pack beside the shards (ignored by open); a Zarr
     * array's missing chunk files, which read as its fill_value
     * ("warning: N of M chunk files of DIR/images are missing ..."). */
    void (*on_notice)(void *ctx, const char *path, const char *message);
    /* Carved out of the reserved words: called every 64 samples or records
     * and once at the end (then done == total), with done <= total. total
     * is the dataset's sample count, or for shards the records of the
     * shards that open (read from their headers before the check). */
    void (*on_progress)(void *ctx, uint64_t done, uint64_t total);
    uint64_t reserved_[3]; /* must be zero (ABI: see the top of this file) */
} stk_verify_options;

typedef struct stk_verify_result {
    uint32_t shards, bad_shards;
    uint64_t records, bad_records;
    uint64_t reserved_[4]; /* zeroed by the library */
} stk_verify_result;

/* Check every shard's structure and every record's checksum (and decode
 * with opts->decode); that the shards form one whole shard set (none
 * missing, extra, foreign or out of order); and, where records store
 * source_index (stk_pack), that it rises strictly from record to record.
 * Record damage names the shard, the record in it and the global sample
 * index. Any other dataset URI is opened and every sample read once through
 * its reader (and decoded with opts->decode); each damaged sample goes to
 * on_damage with the dataset URI, its index as the record and the reader's
 * message; shards stays 0. Returns 0 when all is well, STK_EDATA when damage was found (each
 * case reported through on_damage), or another code if the dataset cannot
 * be listed at all. */
STK_API int stk_verify(const char *uri, const stk_verify_options *opts, stk_verify_result *result);

/* ------------------------------------------------------------------------ */
/* Writing shards with any fields                                            */
/* ------------------------------------------------------------------------ */

/*
 * A shard writer turns records the program makes — from a database, a
 * Python generator, a simulator — into .stk shards DEST_DIR/shard-00000.stk,
 * ... (docs/format.md) with the fields the program declares. Each record is
 * checked against the schema as it is added (an error names the record
 * number, counted from 0, and the field), written to a temporary file, and
 * nothing appears under a shard name before stk_shard_writer_finish: the
 * shards are renamed into place together, as one shard set (the same
 * two-step commit as stk_pack), so a crash or an abort leaves no shard a
 * reader would trust.
 *
 * Thread safety: a writer is used by one thread at a time (it may move
 * between threads). Different writers, on different destinations, are
 * independent.
 */
typedef struct stk_shard_writer stk_shard_writer;

/*
 * One field of the schema. Shapes (ndim, dims):
 *   STK_FIELD_IMAGE, _BYTES, _STRING  ndim 0.
 *   STK_FIELD_RAW_IMAGE   ndim 0: each record has its own height, width and
 *                         channels (1 to 4); ndim 3: every record is dims[0]
 *                         x dims[1] x dims[2] (H, W, C).
 *   STK_FIELD_INT64, _FLOAT32  ndim 0: one value (a label); ndim 1 to 4
 *                         with every dims[i] > 0: that fixed shape; with
 *                         dims[0] == 0: the leading dimension varies per
 *                         record, the others are fixed (boxes: float32,
 *                         ndim 2, dims {0, 4}: k rows of 4 values).
 */
typedef struct stk_shard_field {
    const char *name;      /* 1 to 31 bytes, unique; copied by create */
    stk_field_type type;
    uint32_t ndim;
    uint32_t dims[4];
    int zstd_level;        /* raw_image: 1..19 stores each image as one zstd frame;
                              0 = uncompressed */
    uint64_t reserved_[2]; /* must be zero (ABI: see the top of this file) */
} stk_shard_field;

/*
 * One field's value in one record (stk_shard_writer_add takes one per field,
 * in field order). `data` is read during the call only.
 *   image         the encoded file's bytes (JPEG, PNG, WebP, BMP, TIFF or
 *                 GIF: any format docs/codec.md decodes), size bytes.
 *   raw_image     shape = {height, width, channels}, data = the dense HWC
 *                 uint8 pixels, size = height x width x channels.
 *   int64/float32 count values in host order (little-endian), size = count
 *                 x 8 (or x 4); either may be 0 and follows from the other.
 *                 A fixed field takes exactly product(dims) values (1 for a
 *                 scalar), a varying one a whole number of rows (0 rows is
 *                 a value: an image without boxes).
 *   bytes         any size bytes; string: well-formed UTF-8.
 */
typedef struct stk_field_value {
    const void *data;
    size_t size;           /* bytes at data */
    uint32_t shape[3];     /* raw_image: height, width, channels */
    uint32_t count;        /* int64/float32: values at data */
    uint64_t reserved_[1]; /* must be zero */
} stk_field_value;

typedef struct stk_shard_writer_options {
    uint64_t records_per_shard; /* start a new shard after this many records (0: no limit) */
    uint64_t shard_bytes;       /* start a new shard once one reaches this size (0: 1 GiB) */
    /* The label map (metadata class_names, escaped as docs/format.md says):
     * class_names[label] for label < num_classes; NULL for none. Copied. */
    const char *const *class_names;
    uint32_t num_classes;
    /* More metadata: nmetadata (key, value) pairs of NUL-terminated strings,
     * metadata[2i] = key, metadata[2i + 1] = value; copied. `source` and
     * `created_by` (default "stk_shard_writer VERSION") may be set; the
     * keys class_names, shard_set and shard are the writer's own. */
    uint32_t nmetadata;
    const char *const *metadata;
    uint64_t reserved_[6]; /* must be zero (ABI: see the top of this file) */
} stk_shard_writer_options;

/* Start writing shards into `dest_dir` (created if needed; it must hold no
 * *.stk file yet, nor a temporary of a pack or writer still running — in
 * this process or another; temporaries of one whose process is gone are
 * removed). opts may be NULL. STK_EINVAL for a bad
 * schema or option (naming the field), STK_EIO, STK_ENOMEM. */
STK_API int stk_shard_writer_create(const char *dest_dir, const stk_shard_field *fields,
                                    uint32_t nfields, const stk_shard_writer_options *opts,
                                    stk_shard_writer **out);
/* Add one record: values[i] is field i's value. A value that does not fit
 * the schema is STK_EINVAL naming the record and field, and the record is
 * not written (the writer stays usable). An I/O failure (STK_EIO,
 * STK_ENOMEM) leaves the writer failed: every later call is STK_ESTATE;
 * abort it. */
STK_API int stk_shard_writer_add(stk_shard_writer *w, const stk_field_value *values);
/* Records added so far. */
STK_API uint64_t stk_shard_writer_records(const stk_shard_writer *w);
/* Write the last shard's index and footer, then put every shard in place
 * under its name with the shard-set keys (docs/format.md). Always frees w;
 * on failure (STK_EINVAL when no record was added, STK_ESTATE after a
 * failed add, STK_EIO) nothing of it is left in dest_dir. result (records,
 * shards, bytes) may be NULL. */
STK_API int stk_shard_writer_finish(stk_shard_writer *w, stk_pack_result *result);
/* Remove everything the writer wrote and free it. NULL is a no-op. */
STK_API void stk_shard_writer_abort(stk_shard_writer *w);

/* ------------------------------------------------------------------------ */
/* Sampler: the epoch order                                                  */
/* ------------------------------------------------------------------------ */

/* Thread safety: a sampler is immutable after create; length and index may
 * be called by any number of threads at once. destroy needs it to itself. */
typedef struct stk_sampler stk_sampler;

/* How an epoch is ordered (docs/sampler.md). */
typedef enum stk_shuffle {
    STK_SHUFFLE_GLOBAL = 0, /* a uniform pseudo-random permutation of [0, N) (default) */
    STK_SHUFFLE_NONE = 1,   /* 0, 1, 2, ... (what no_shuffle asks for) */
    /* For storage slow at random access: the blocks of block_size consecutive
     * indices (the last may be short) in a random order, and the samples
     * permuted within each window of shuffle_window consecutive blocks of that
     * order, so a reader reads each block once per epoch, holding
     * shuffle_window blocks at a time. */
    STK_SHUFFLE_BLOCK = 2,
} stk_shuffle;

#define STK_DEFAULT_BLOCK_SIZE 64      /* records per block (STK_SHUFFLE_BLOCK) */
#define STK_DEFAULT_SHUFFLE_WINDOW 16  /* blocks per window (STK_SHUFFLE_BLOCK) */

/*
 * Which samples an epoch's list holds, beyond "every dataset sample once"
 * (docs/sampler.md, "Subsets, weights, class balance, num_samples"). Pointed
 * to by stk_sampler_options.sampling / stk_loader_options.sampling; NULL or
 * all zero is the whole dataset, once per epoch. Arrays are copied at create.
 *
 * The population is `indices` (a list of dataset indices, duplicates
 * allowed) or, without it, [0, N). The epoch's list has num_samples entries
 * (0: the population's size), sharded, padded and resumed like a dataset of
 * that size:
 *  - no weights: entry x is the epoch's permutation of the population at
 *    x mod P for the first pass (x < P); each further pass (num_samples > P)
 *    is another independent permutation. num_samples < P: a subset of the
 *    epoch's permutation, different each epoch.
 *  - weights (one per population entry, finite, >= 0, not all 0) or labels
 *    (one per population entry; weight = 1 / count of its class): entry x is
 *    an independent draw with replacement, a pure function of (seed, epoch,
 *    x), through a Walker/Vose alias table built once (8 bytes per entry).
 *    Needs STK_SHUFFLE_GLOBAL.
 */
typedef struct stk_sampling {
    const uint64_t *indices; /* num_indices dataset indices (each < N), or NULL */
    uint64_t num_indices;
    const double *weights;   /* num_weights = population size, or NULL */
    uint64_t num_weights;
    const int64_t *labels;   /* num_labels = population size: class-balanced, or NULL */
    uint64_t num_labels;
    uint64_t num_samples;    /* entries per epoch, 0 = the population size */
    /* Loader only: class-balanced weights from the dataset's labels
     * (stk_dataset_label of every population entry, read at create). */
    int32_t balance_classes;
    int32_t reserved32_;     /* must be zero */
    /* Mixing (docs/sampler.md, "Mixing datasets"): [0, N) is num_mix
     * consecutive sources of mix_sizes[g] samples (summing to N, e.g. the
     * parts of stk_dataset_concat), drawn in the proportions mix_weights
     * (NULL: proportional to the sizes). Each epoch holds exactly q_g entries
     * of source g (M * w_g / sum(w) rounded by largest remainder), in a
     * random interleave; source g's entries walk its own permutation (and
     * further passes of new ones when q_g exceeds its size). Excludes
     * indices, weights and labels; shuffle global or none. */
    const uint64_t *mix_sizes;
    const double *mix_weights;
    uint64_t num_mix;
    uint64_t reserved_[1];   /* must be zero (ABI: see the top of this file) */
} stk_sampling;

typedef struct stk_sampler_options {
    uint64_t dataset_size; /* N, > 0 */
    uint64_t seed;
    uint32_t batch_size;   /* 0 means 1 (only matters with drop_last) */
    uint32_t rank;         /* 0 <= rank < world_size */
    uint32_t world_size;   /* 0 means 1 */
    int no_shuffle;        /* nonzero: the order is 0, 1, 2, ... (as STK_SHUFFLE_NONE) */
    int drop_last;         /* see below */
    /* Carved out of the reserved words (zero keeps the old behaviour): */
    uint64_t block_size;   /* STK_SHUFFLE_BLOCK: records per block, 0 = 64 */
    /* The epoch's list starts at this global slot (0 normally): positions
     * count from it and the length is that of the rest of the epoch. Set when
     * an epoch checkpointed at another world size continues (see below). */
    uint64_t start_slot;
    stk_shuffle shuffle;     /* STK_SHUFFLE_GLOBAL (0) unless no_shuffle */
    uint32_t shuffle_window; /* STK_SHUFFLE_BLOCK: blocks per window, 0 = 16 */
    /* The last reserved word: subsets, weights, class balance, num_samples
     * (NULL = the whole dataset once per epoch). Further options of the
     * sampler are carved out of stk_sampling's own reserved words. With it,
     * dataset_size stays N (indices are checked against it) and the
     * sharding, padding, start_slot and length rules below apply to the
     * epoch's list of num_samples entries instead of N. */
    const stk_sampling *sampling;
} stk_sampler_options;

/*
 * Sharding (docs/sampler.md):
 *  - drop_last = 0: pad by wrap. The epoch permutation P of [0, N) is extended
 *    to ceil(N / W) * W positions by repeating P from its start; rank r takes
 *    positions r, r + W, r + 2W, ... Every rank sees ceil(N / W) samples; each
 *    sample is seen exactly once per epoch across ranks, except the
 *    ceil(N/W)*W - N padded ones, seen twice. The last batch may be short.
 *  - drop_last = 1: the permutation is cut to floor(N / W) * W positions,
 *    strided the same way, and each rank keeps only whole batches. No sample
 *    is seen twice; the cut-off ones (different each epoch) are not seen.
 *  - start_slot = S > 0: the epoch's list is the permutation from position S
 *    on (the first S were consumed before a checkpoint); rank r takes slots
 *    S + r, S + r + W, ... The same rules apply to the R = N - S slots left:
 *    ceil(R / W) samples per rank padded by wrapping to the permutation's
 *    start, or floor(floor(R / W) / B) * B with drop_last (possibly 0).
 *    S must be below N.
 */
STK_API int stk_sampler_create(const stk_sampler_options *opts, stk_sampler **out);
STK_API void stk_sampler_destroy(stk_sampler *s);
/* Samples this rank sees per epoch (a multiple of batch_size if drop_last). */
STK_API uint64_t stk_sampler_length(const stk_sampler *s);
/* Dataset index of position `pos` (< length) in epoch `epoch` for this rank.
 * O(1) memory, a few hundred nanoseconds at most; thread-safe. */
STK_API uint64_t stk_sampler_index(const stk_sampler *s, uint64_t epoch, uint64_t pos);

/* ------------------------------------------------------------------------ */
/* Loader                                                                    */
/* ------------------------------------------------------------------------ */

/*
 * Thread safety of loaders. A loader runs its own worker threads; the
 * caller's side is meant for one consumer thread. next and next_timeout:
 * one thread at a time. set_epoch and state_set: from the consumer, not
 * while a next() is in flight. release, interrupt, state_get, stats_get,
 * profile_get, profile_events, profile_reset, set_threads, set_prefetch,
 * decision, length and sample_shape: any thread, at any time, alongside the consumer
 * (none of them from a signal handler). errmsg: once a call has returned the
 * error that stopped the loader (the message is written then, once).
 * destroy: once, with no other call on the loader in flight.
 * Different loaders (over the same dataset or not) are independent.
 */
typedef struct stk_loader stk_loader;

/* STK_BF16: bfloat16 (the top 16 bits of a float32, rounded to nearest, ties
 * to even), as torch's .to(torch.bfloat16). */
typedef enum stk_dtype { STK_U8 = 0, STK_F16 = 1, STK_F32 = 2, STK_BF16 = 3 } stk_dtype;
typedef enum stk_layout { STK_HWC = 0, STK_CHW = 1 } stk_layout;
typedef enum stk_error_policy {
    STK_ON_ERROR_RAISE = 0, /* a corrupt sample stops the loader with its error */
    STK_ON_ERROR_SKIP = 1,  /* it is left out of its batch and counted */
    /* It is replaced by another sample of the epoch, so batches stay full:
     * the sample at a place of this rank's epoch list drawn from the failed
     * place's own stream (not one of the batch's places, nor another
     * substitute's, while the list has others), with its own label and
     * index and the failed row's augmentation draws. Deterministic (any
     * thread count) and redrawn alike after state_set; counted and listed
     * as skip is (stk_loader_skipped). 16 corrupt substitutes in a row stop
     * the loader with STK_EDATA. With a device, only where the CPU makes
     * the rows (COPY mode, decoder CPU); STK_EUNSUPPORTED otherwise. */
    STK_ON_ERROR_REPLACE = 2,
} stk_error_policy;

/* Zero means default for every field. */
typedef struct stk_loader_options {
    uint32_t batch_size;  /* default 256 */
    /* Worker threads; 0 = auto: the autotuner (docs/engine.md, "Autotune")
     * starts with the CPU this process may use (stk_cpus_available) and
     * moves the active count, while running, by the measured consumer wait,
     * worker load and delivered rate. A number fixes it. */
    uint32_t threads;
    /* Batches filled ahead of the consumer; 0 = auto: starts at 4 and grows
     * (to 16) while the consumer waits although workers are idle, within
     * memory_limit (without one, beyond 4 only while the pool stays within
     * 1 GiB). A number fixes it. */
    uint32_t prefetch;
    uint32_t max_batches; /* cap on batch buffers (prefetch + lent); default
                             prefetch + 4 (the auto prefetch's cap + 4), and
                             no more than memory_limit holds. When the
                             consumer holds that many, next() fails with
                             STK_EEXHAUSTED. */
    uint64_t seed;
    int no_shuffle;
    int drop_last;
    uint32_t rank, world_size;
    stk_error_policy on_error;
    /* Carved out of the reserved words: the epoch order (stk_sampler_options;
     * no_shuffle still means STK_SHUFFLE_NONE). */
    uint64_t block_size;     /* STK_SHUFFLE_BLOCK: records per block, 0 = 64 */
    stk_shuffle shuffle;     /* default STK_SHUFFLE_GLOBAL */
    uint32_t shuffle_window; /* STK_SHUFFLE_BLOCK: blocks per window, 0 = 16 */
    const stk_sampling *sampling; /* subsets, weights, class balance (NULL: none) */
    /* Seed of the augmentation draws when flags has STK_LOADER_AUG_SEED;
     * otherwise they use `seed` (the behaviour before aug_seed existed). */
    uint64_t aug_seed;
    /* Views per sample (0 or 1: one). K > 1: each sample's K views,
     * independently augmented, are K consecutive rows of its batch (a batch
     * of B samples has K*B rows, sample-major: row i*K + v is view v of
     * sample i, its label and index repeated). View 0 is what views = 1
     * gives. At most STK_MAX_VIEWS. */
    uint32_t views;
    uint32_t flags;          /* STK_LOADER_* below */
    /* Bytes the batch pool and the workers' scratch may use together (0: no
     * limit beyond max_batches). The pool is sized within it, the autotuner
     * adds a thread or a prefetched batch only if the result fits, and a
     * parked worker frees its scratch; create fails (STK_EINVAL) when not
     * even two batches fit. stk_loader_stats.memory_bytes is the sum.
     * Each decode is bounded too: an encoded image whose decode would need
     * more than (memory_limit - (prefetch + 1) batches) / threads (8 when
     * threads is auto) is a corrupt sample (STK_EDATA, naming the bytes;
     * docs/engine.md, "Decode budget"). */
    uint64_t memory_limit;
    /* The fields each batch delivers, comma-separated, in order (NULL or
     * "": "image,label"; docs/fields.md): "image" (the pipeline's output),
     * "label", "index", "path" (the sample's source name), "geometry" (the
     * geometric steps drawn for the row), and any field of
     * the dataset by name. A name may take a role after a colon:
     * NAME:mask (an image field cropped, flipped, resized and rotated with
     * the image, nearest), NAME:boxes (float32 XYXY boxes, moved with the
     * image and dropped when they leave it), NAME:per_box (one row per box,
     * dropped with its box), NAME:data (as stored). Without one, an image
     * field is a mask, a float32 {0,4} field whose name has "box" in it is
     * boxes, a variable field named box_* is per_box, anything else data.
     * Read with stk_loader_field_count / stk_loader_field. Borrowed: copied
     * at create. Carved out of the reserved words. */
    const char *fields;
    /* Where batches are delivered and where the augmentation runs (the
     * CUDA backend, docs/gpu.md): NULL means host memory, as before.
     * Borrowed: copied at create. Carved out of the reserved words. */
    const struct stk_device_options *device;
} stk_loader_options;

/*
 * The CUDA backend (docs/gpu.md). The library links no CUDA library: it
 * loads the driver (libcuda.so.1) with dlopen when a loader first asks for
 * a device, so one build runs with and without a GPU; a machine without a
 * driver, or a build made without nvcc, gets STK_EUNSUPPORTED from
 * stk_loader_create with a message saying which.
 *
 * Placement chooses what the CPU does and what the GPU does:
 *   STK_PLACE_GPU   the CPU reads and decodes (the JPEG region the crop
 *                   needs, DCT-scaled), the GPU does the rest: resample,
 *                   flips, point-op tables, colour jitter, normalize,
 *                   dtype and layout. create fails (STK_EINVAL, naming the
 *                   op) when the spec has an op the GPU backend lacks.
 *   STK_PLACE_CPU   the CPU runs the spec; when its last stage is uint8
 *                   (no colour jitter, rotation or erasing) uint8 HWC
 *                   crosses the bus and the GPU does normalize/dtype/layout
 *                   (4x fewer bytes than float32); otherwise the finished
 *                   batch is copied as is.
 *   STK_PLACE_AUTO  GPU when the spec allows it, else CPU.
 * The batch is the same in every placement (bit for bit in emulation;
 * within docs/gpu.md's stated tolerance on a device).
 */
typedef enum stk_placement {
    STK_PLACE_AUTO = 0,
    STK_PLACE_CPU = 1,
    STK_PLACE_GPU = 2,
} stk_placement;

/*
 * Who decodes JPEGs when the GPU runs the augmentation (placement gpu, or
 * auto with a spec the GPU takes):
 *   STK_DECODER_CPU     libjpeg-turbo in the workers: the region the crop
 *                       needs, DCT-scaled. The batch equals the host
 *                       loader's (the default).
 *   STK_DECODER_NVJPEG  nvJPEG on the GPU (libnvjpeg, loaded at run time):
 *                       the JPEG engine where the GPU has one (A100, H100,
 *                       H200), else GPU-assisted decoding; the same region
 *                       and DCT scale where the backend decodes scaled,
 *                       else the region at full size. The workers only
 *                       read, draw and copy the bytes. Pixels differ from
 *                       libjpeg-turbo's by decoder rounding (docs/gpu.md
 *                       states how much); an image nvJPEG does not take
 *                       (progressive on the engine, CMYK, gray, truncated,
 *                       a failed batch) is decoded on the CPU, counted in
 *                       stk_loader_stats.gpu_decode_cpu_rows. create fails
 *                       with STK_EUNSUPPORTED when nvJPEG cannot be loaded
 *                       or no backend passes its self-test, STK_EINVAL when
 *                       the augmentation does not run on the GPU.
 */
typedef enum stk_decoder {
    STK_DECODER_CPU = 0,
    STK_DECODER_NVJPEG = 1,
} stk_decoder;

typedef struct stk_device_options {
    /* "cuda:N" (N: the CUDA device ordinal; "cuda" is "cuda:0"); NULL, ""
     * or "cpu": host memory (the rest of this struct is then ignored). */
    const char *device;
    stk_placement placement;
    uint32_t flags;        /* must be zero */
    /* Carved out of the reserved words: */
    stk_decoder decoder;   /* STK_DECODER_CPU (0) or STK_DECODER_NVJPEG */
    uint32_t reserved32_;  /* must be zero */
    uint64_t reserved_[5]; /* must be zero (ABI: see the top of this file) */
} stk_device_options;

/* Where a lent batch's `data` lives (stk_batch.device_type); the values are
 * DLPack's DLDeviceType codes. */
#define STK_DEVICE_HOST 1 /* kDLCPU (0 in a batch from an older library reads as host too) */
#define STK_DEVICE_CUDA 2 /* kDLCUDA: data is a CUdeviceptr on device_id */

#define STK_LOADER_AUG_SEED 1u /* aug_seed is set (else the order's seed) */
#define STK_LOADER_EAGER 2u    /* start the workers and the pool at create */
#define STK_MAX_VIEWS 256

/*
 * Create a loader over `ds` (borrowed: it must outlive the loader) running
 * the pipeline `spec` (docs/pipeline.md), e.g.
 *   "pad 4 | random_crop 32 | flip 0.5 | normalize cifar10 | to f32 chw".
 * The loader starts at epoch 0, position 0. It is lazy: it starts no thread
 * and allocates no batch buffer until the first stk_loader_next (or
 * stk_loader_start, or flags STK_LOADER_EAGER at create). Fails with STK_ESPEC (stk_errmsg() points at the column and says what
 * was expected), STK_EINVAL, STK_ENOMEM or STK_ETHREAD.
 */
STK_API int stk_loader_create(stk_dataset *ds, const char *spec,
                              const stk_loader_options *opts, stk_loader **out);

/* Start the worker threads and allocate the batch pool now, so filling
 * begins before the first next() (warm-up). A no-op once started; next()
 * calls it. From the consumer thread. STK_ENOMEM or STK_ETHREAD on failure
 * (the loader stays unstarted; a later call tries again). */
STK_API int stk_loader_start(stk_loader *l);

/* Stops the workers (mid-epoch is fine: waits only for the sample each worker
 * is on) and frees everything, including buffers of batches still lent —
 * those become invalid. NULL is a no-op. */
STK_API void stk_loader_destroy(stk_loader *l);

typedef struct stk_batch {
    void *data;              /* size * sample_bytes bytes, lent */
    const int64_t *labels;   /* size labels, lent */
    const uint64_t *indices; /* size dataset indices, lent */
    uint32_t size;           /* rows in this batch (<= batch_size) */
    uint32_t ndim;           /* 4 */
    int64_t shape[4];        /* N,C,H,W (STK_CHW) or N,H,W,C (STK_HWC); N = size */
    stk_dtype dtype;
    stk_layout layout;
    size_t sample_bytes;
    uint64_t epoch;          /* which epoch this batch belongs to */
    uint64_t position;       /* its batch index within the epoch */
    uint32_t skipped;        /* samples of this batch that failed to read: left
                                out (skip policy) or replaced (replace policy,
                                failed substitutes included); stk_loader_skipped
                                lists them */
    /* Opaque token naming the lent buffer to stk_loader_release (which
     * buffer, and which lending of it, so a second release is caught). Copy
     * it with the struct; never compute or change it. */
    uint64_t handle;
    /* Where `data` lives (the labels and indices are always host memory):
     * 0 or STK_DEVICE_HOST, or STK_DEVICE_CUDA with the CUDA ordinal in
     * device_id. A CUDA batch is ready once `event` (a CUevent) has
     * completed: make the stream that reads it wait first
     * (stk_loader_batch_wait, or cuStreamWaitEvent), or read it on
     * `stream` (the CUstream its copy and kernels ran on). */
    int32_t device_type;
    int32_t device_id;
    uint64_t stream;
    uint64_t event;
    uint64_t reserved_[1]; /* zeroed by the library */
} stk_batch;

/* What a batch field is for (stk_batch_field.role; docs/fields.md). */
typedef enum stk_field_role {
    STK_ROLE_IMAGE = 0,   /* the pipeline's output: stk_batch.data */
    STK_ROLE_LABEL = 1,   /* int64 label per row: stk_batch.labels */
    STK_ROLE_INDEX = 2,   /* the dataset index per row (uint64) */
    STK_ROLE_PATH = 3,    /* the sample's source name (UTF-8, variable) */
    STK_ROLE_MASK = 4,    /* uint8 [rows, H, W]: moved with the image, nearest */
    STK_ROLE_BOXES = 5,   /* float32 XYXY boxes (variable): moved with the image */
    STK_ROLE_PER_BOX = 6, /* one value row per kept box (variable) */
    STK_ROLE_DATA = 7,    /* as stored: dense when fixed, else variable */
    STK_ROLE_GEOMETRY = 8, /* float64 rows of 11: the geometric steps drawn
                              (docs/fields.md, "The geometry field") */
} stk_field_role;

/* Element types of batch fields; the first four are stk_dtype's values. */
typedef enum stk_elem_type {
    STK_ELEM_U8 = 0,
    STK_ELEM_F16 = 1,
    STK_ELEM_F32 = 2,
    STK_ELEM_BF16 = 3,
    STK_ELEM_I64 = 4,
    STK_ELEM_U64 = 5,
    STK_ELEM_F64 = 6,
} stk_elem_type;

/*
 * One field of a lent batch. Dense fields: `data` holds shape[0] = rows
 * (the batch's size) rows of the per-row shape shape[1..ndim). Variable
 * fields (offsets != NULL): `data` holds the value rows of every batch row
 * back to back, shape = [total value rows, per-value-row shape...] (boxes:
 * [K, 4]); batch row i owns value rows offsets[i] .. offsets[i+1] (offsets
 * has size + 1 entries). Text fields (path, string fields) are variable
 * with byte values (ndim 1), one UTF-8 string per row, no NUL. Everything
 * is lent with the batch (valid until stk_loader_release).
 */
typedef struct stk_batch_field {
    const char *name;        /* lent: lives with the loader */
    stk_field_role role;
    stk_elem_type elem;
    int text;                /* values are UTF-8 strings */
    const void *data;
    size_t bytes;            /* of data */
    const uint64_t *offsets; /* variable fields, else NULL */
    uint32_t ndim;
    int64_t shape[5];
    uint64_t reserved_[2];   /* zeroed by the library */
} stk_batch_field;

/* Entry i (0 <= i < b->skipped) of lent batch b's samples that failed to
 * read under on_error skip or replace, in row order (under replace, a
 * row's failed substitutes follow it): *index gets the dataset index (its
 * name: stk_dataset_sample_path), *reason the message naming it and why,
 * lent with the batch (valid until stk_loader_release). Either pointer may
 * be NULL. STK_EINVAL for i out of range or a batch not lent by this
 * loader. Any thread, while the batch is lent. */
STK_API int stk_loader_skipped(const stk_loader *l, const stk_batch *b, uint32_t i,
                               uint64_t *index, const char **reason);

/* Fields each batch delivers (options.fields; 2 by default: image, label). */
STK_API uint32_t stk_loader_field_count(const stk_loader *l);

/* Field i of lent batch b (0 <= i < stk_loader_field_count). STK_EINVAL
 * for a bad index or a batch not lent by this loader. With b NULL: the
 * field's name, role, element type and per-row shape only (data NULL,
 * shape[0] = 0 for a dense field, -1 for a variable one). */
STK_API int stk_loader_field(const stk_loader *l, const stk_batch *b, uint32_t i,
                             stk_batch_field *out);

/*
 * Wait for the next batch in order and lend it in *batch.
 * Returns 1 with a batch; 0 at the end of the epoch (then the loader moves to
 * the next epoch, position 0, which it may already be filling); or a negative
 * code: the error that stopped the loader (with its message), STK_EEXHAUSTED
 * if every buffer is lent, STK_EINTR after stk_loader_interrupt().
 * The batch stays valid, and is never overwritten, until
 * stk_loader_release(). One consumer thread at a time.
 */
STK_API int stk_loader_next(stk_loader *l, stk_batch *batch);

/* stk_loader_next that gives up after `timeout_ms` milliseconds with
 * STK_ETIMEDOUT (the loader is unchanged; call again). timeout_ms < 0 waits
 * forever. Lets a binding poll for signals (Ctrl-C) while it waits. */
STK_API int stk_loader_next_timeout(stk_loader *l, stk_batch *batch, int64_t timeout_ms);

/* Make the CUDA stream `stream` (a CUstream; 0: the legacy default
 * stream) wait, on the device, for lent batch b: work queued on `stream`
 * after this call sees the whole batch. A no-op for a host batch. Returns
 * 0, STK_EINVAL (not a batch lent by this loader), or STK_EUNSUPPORTED
 * with the driver's message. Any thread. */
STK_API int stk_loader_batch_wait(const stk_loader *l, const stk_batch *b, uint64_t stream);

/* Give a lent batch back. May be called from any thread. Releasing the same
 * batch twice is detected and ignored (returns STK_ESTATE). */
STK_API int stk_loader_release(stk_loader *l, stk_batch *batch);

/* Make a next() that is waiting (or the next one to start) return STK_EINTR;
 * the loader stays usable. Callable from any thread, e.g. one that waits for
 * signals with sigwait(). NOT async-signal-safe: it takes the loader's lock,
 * so calling it from a signal handler can deadlock if the handler interrupted
 * a thread inside a loader call. From a handler, set a flag instead and let
 * the consumer poll it between stk_loader_next_timeout() calls (what the
 * Python binding does for Ctrl-C). */
STK_API void stk_loader_interrupt(stk_loader *l);

/* Move to the start of `epoch`. A no-op if the loader is already at position
 * 0 of that epoch (work already prefetched is kept); otherwise in-flight work
 * is dropped. Lent batches stay valid. */
STK_API int stk_loader_set_epoch(stk_loader *l, uint64_t epoch);

/* Batches per epoch for this rank: of the epoch the consumer is in. That is
 * the full epoch's count except in an epoch resumed from a state taken at
 * another world size or batch size (start_slot > 0), where it is the count of
 * what is left of it (possibly 0); the epochs after it are full again. */
STK_API uint64_t stk_loader_length(const stk_loader *l);

/* Output description: bytes per sample and the per-sample shape (3 dims in
 * the output layout). */
STK_API void stk_loader_sample_shape(const stk_loader *l, int64_t shape[3],
                                     stk_dtype *dtype, stk_layout *layout,
                                     size_t *sample_bytes);

/*
 * Resumable state: where the consumer is. A loader created with the same
 * dataset, spec and options, then given this state, delivers exactly the
 * batches the original would have delivered next.
 *
 * Resume on another world size (docs/sampler.md). Ranks run in lockstep, so
 * all W ranks' states hold the same (epoch, start_slot, position): together
 * they consumed the first S = start_slot + position * batch_size * W global
 * slots of the epoch's list. A loader with another world size W' (or another
 * batch size, or another rank) given any of those states continues the same
 * epoch from slot S: its ranks stride the rest of the epoch (start_slot = S,
 * position 0), so over the union of ranks no sample of the epoch is repeated
 * or skipped, apart from the pad/drop rule applied to the rest. The next
 * epoch starts at slot 0 in the new layout.
 */
typedef struct stk_loader_state {
    uint64_t seed;
    uint64_t epoch;
    uint64_t position;     /* next batch index within the epoch (from start_slot) */
    /* fingerprint, checked on restore */
    uint64_t dataset_size;
    uint32_t batch_size, rank, world_size;
    int32_t flags;         /* bit 0 no_shuffle, bit 1 drop_last, bit 2 block shuffle */
    uint64_t spec_hash;    /* XXH3-64 of the pipeline spec text (xor a digest of
                              sampling, aug_seed and views when they are set) */
    /* Carved out of the reserved words (zero is what older states hold). */
    uint64_t start_slot;     /* global slot this epoch's layout began at */
    uint64_t block_size;     /* block shuffle only (else 0): records per block */
    uint64_t shuffle_window; /* block shuffle only (else 0): blocks per window */
    uint64_t reserved_[1];   /* zeroed by state_get; must be zero for state_set */
} stk_loader_state;

STK_API void stk_loader_state_get(const stk_loader *l, stk_loader_state *state);
/* Restore a state. STK_EINVAL if it does not belong to this loader's job:
 * another seed, dataset size, pipeline spec, shuffle mode, block size,
 * window or drop_last; a position past its epoch, or start_slot not below
 * the dataset size. A different world size, rank or batch size is accepted:
 * the epoch continues from the slot the state's layout had reached (see
 * above). With the same world size and batch size the state is taken as is
 * (any rank: the position is the job's). */
STK_API int stk_loader_state_set(stk_loader *l, const stk_loader_state *state);

/* Per-stage time, summed over threads, since creation. */
typedef struct stk_loader_stats {
    uint64_t samples;        /* samples written into batches */
    uint64_t batches;        /* batches delivered to the consumer */
    uint64_t skipped;        /* samples left out (skip policy) of the batches
                                delivered: each counted once, like batches */
    double read_s;           /* workers: fetching samples from the dataset */
    double augment_s;        /* workers: pipeline + write into the batch, not
                                counting the decoder (decode_s) */
    double idle_s;           /* workers: waiting for a free buffer */
    double wait_s;           /* consumer: blocked in next() */
    uint32_t batches_allocated; /* buffers in the pool now */
    uint64_t pool_bytes;     /* bytes of batch buffers allocated */
    uint64_t pool_exhausted; /* next() calls that found every buffer lent */
    /* Carved out of the reserved words: */
    double decode_s;         /* workers: inside the image decoder */
    double collate_s;        /* workers: moving rows after skipped samples
                                (the write into the batch is fused into
                                augment_s: there is no separate copy) */
    double step_s;           /* consumer: between batches (its training step) */
    uint64_t memory_bytes;   /* batch pool + workers' scratch now */
    uint32_t threads;        /* workers active now (the autotuner moves it) */
    uint32_t prefetch;       /* prefetch depth now */
    uint64_t decisions;      /* autotuner decisions made (stk_loader_decision) */
    uint32_t max_batches;    /* the cap on batch buffers, as resolved (defaults,
                                memory_limit) */
    /* CUDA backend, decoder nvjpeg (docs/gpu.md): rows decoded on the CPU
     * instead (an image nvJPEG does not take, a batch it failed; carved out
     * of the reserved word; saturates at 2^32 - 1). */
    uint32_t gpu_decode_cpu_rows;
    /* CUDA backend, placement gpu (docs/gpu.md): rows whose decoded region
     * did not fit the slot's staging memory, resampled on the CPU instead
     * (the GPU did the rest). */
    uint64_t gpu_head_rows;
} stk_loader_stats;

STK_API void stk_loader_stats_get(const stk_loader *l, stk_loader_stats *stats);

/* With a CUDA device: what runs where, in words, e.g. "gpu: placement gpu:
 * the resample, tables, colour steps and output format run on the GPU;
 * JPEGs: nvJPEG hardware decoder (regions, DCT scaling)" — the mode chosen
 * (gpu, format or copy), why, and the JPEG decoder. "" without a device.
 * Valid while the loader lives. */
STK_API const char *stk_loader_device_info(const stk_loader *l);

/* With a CUDA device and the GPU running part of the spec (gpu or format,
 * not copy): the device time of the loader's GPU work, summed over the
 * batches timed so far (docs/gpu.md, "Kernels and their cost"). A batch
 * is timed by events on its slot's stream and counted once a later batch
 * has reused the slot, so the last few batches are not in the totals yet;
 * divide by `batches`, not by the batches delivered. */
typedef struct stk_device_timing {
    uint64_t batches;        /* batches whose kernels were timed */
    uint64_t launches;       /* their kernel launches */
    uint64_t fused_batches;  /* of them, run with the fused vertical pass +
                                output kernel (no row had a contrast step) */
    double kernel_s;         /* device seconds from each batch's first launch
                                to its last one's end */
    uint64_t decode_batches; /* decoder nvjpeg: batches whose decode was timed */
    double decode_s;         /* their stream time from before nvJPEG's first
                                operation to after its last (CPU parts of a
                                hybrid backend included) */
    uint64_t reserved_[4];   /* zeroed by the library */
} stk_device_timing;

/* 0 and the totals; STK_EUNSUPPORTED (message says why) without a device
 * or when the finished batch is copied (no GPU work to time). */
STK_API int stk_loader_device_timing(const stk_loader *l, stk_device_timing *timing);

/*
 * The data-stall profile (docs/engine.md, "Profile"): measured per delivered
 * batch, without changing the training loop. For each batch the loader
 * records how long the consumer waited for it inside next() and how long the
 * consumer was away since the previous batch (its step: everything the
 * training loop did between two next() calls; the gap after an epoch's end
 * is not a step). Over a window (since creation or the last
 * stk_loader_profile_reset; the percentiles over its last 4096 batches):
 */
typedef enum stk_bound {
    STK_BOUND_UNKNOWN = 0, /* fewer than 2 batches measured */
    STK_BOUND_STEP = 1,    /* the consumer rarely waits: the step limits */
    STK_BOUND_DATA = 2,    /* the consumer waits for data (share >= 5%) */
} stk_bound;

typedef enum stk_stage {
    STK_STAGE_NONE = 0,
    STK_STAGE_READ = 1,     /* fetching records from storage */
    STK_STAGE_DECODE = 2,   /* the image decoder */
    STK_STAGE_AUGMENT = 3,  /* the pipeline's pixel work and the batch write */
    STK_STAGE_COLLATE = 4,  /* moving rows (skip policy) */
    STK_STAGE_PREFETCH = 5, /* workers idle while the consumer waits: the
                               pipeline is too shallow or has too few threads */
} stk_stage;

typedef struct stk_loader_profile {
    uint64_t batches;        /* batches lent in the window */
    uint64_t samples;        /* their rows */
    double wall_s;           /* the loop's time: wait_s + step_s */
    double wait_s;           /* consumer blocked in next() */
    double step_s;           /* consumer between batches */
    double data_share;       /* wait_s / wall_s (0..1) */
    double wait_p50_s, wait_p90_s, wait_p99_s, wait_max_s; /* per batch */
    double step_p50_s, step_p90_s, step_p99_s;
    double read_s, decode_s, augment_s, collate_s; /* worker seconds */
    double busy;             /* worker time spent working / (active workers x
                                window time), 0..1 */
    double queue_mean;       /* batches ready when the consumer asked, mean */
    double images_per_s;     /* samples / wall_s */
    double cpus;             /* stk_cpus_available() */
    uint32_t threads;        /* active workers now */
    uint32_t prefetch;       /* prefetch depth now */
    int32_t bound;           /* stk_bound */
    int32_t stage;           /* stk_stage: what limits (data-bound), or the
                                largest stage (step-bound) */
    char verdict[256];       /* one line: "data-bound: ..." / "step-bound: ..." */
    uint64_t reserved_[8];   /* zeroed by the library */
} stk_loader_profile;

/* "unknown", "step", "data" / "none", "read", "decode", "augment",
 * "collate", "prefetch" (static strings; "unknown" / "none" out of range). */
STK_API const char *stk_bound_name(int bound);
STK_API const char *stk_stage_name(int stage);

/* One delivered batch (the profile's time series: queue depth over time). */
typedef struct stk_loader_event {
    double t;          /* seconds since the loader was created, when lent */
    float wait_s;      /* the consumer waited this long in next() */
    float step_s;      /* the consumer's step before asking for it */
    uint16_t ready;    /* batches ready when the consumer asked */
    uint16_t threads;  /* active workers then */
    uint16_t prefetch; /* prefetch depth then */
    uint16_t reserved16_;
} stk_loader_event;

/* Fill *p with the window's profile. Safe with a concurrent next(). */
STK_API void stk_loader_profile_get(const stk_loader *l, stk_loader_profile *p);

/* For bindings: the caller's own timing (CLOCK_MONOTONIC seconds) of the
 * call that handed over the batch next() lent last, from when its user
 * asked to when the user got it (conversion to a tensor included). The
 * batch's wait becomes that span, and the steps around it shrink by what
 * it adds, so the profile matches a timer around the binding's call. From
 * the consumer thread, after next() returned 1. */
STK_API void stk_loader_profile_note(stk_loader *l, double asked_s, double handed_s);

/* Start a new window (e.g. after each report). */
STK_API void stk_loader_profile_reset(stk_loader *l);

/* Copy the window's last `cap` batch records, oldest first, into out
 * (caller's memory); returns how many were copied (at most 4096 are kept). */
STK_API size_t stk_loader_profile_events(const stk_loader *l, stk_loader_event *out,
                                         size_t cap);

/*
 * Fix the active worker count (1 .. the loader's threads, or for an auto
 * loader 1 .. its thread cap) or the prefetch depth (1 .. max_batches - 1,
 * within memory_limit) while running; each turns that knob's autotuning
 * off. Batches stay bit-identical: a row's content never depends on which
 * thread made it. STK_EINVAL out of range, naming the range.
 */
STK_API int stk_loader_set_threads(stk_loader *l, uint32_t threads);
STK_API int stk_loader_set_prefetch(stk_loader *l, uint32_t prefetch);

/* The autotuner's decision number n (0-based, stk_loader_stats.decisions
 * made so far), e.g. "threads 2 -> 3: data share 31%, workers busy 97%",
 * into buf. Returns 1, 0 when n is not made yet, STK_ENOENT when it is
 * older than the last 64 kept. Decisions are also printed to stderr when
 * the environment has STOKER_LOG=debug. */
STK_API int stk_loader_decision(const stk_loader *l, uint64_t n, char *buf, size_t size);

/* The message of the error that stopped the loader, or "" (lent, lives with
 * the loader). */
STK_API const char *stk_loader_errmsg(const stk_loader *l);

/* ------------------------------------------------------------------------ */
/* Pipeline spec                                                             */
/* ------------------------------------------------------------------------ */

/* Check a spec against an input shape without creating a loader; height =
 * width = channels = 0 means images of any size (encoded datasets). On success
 * fills the output shape (3 dims in the output layout), dtype and layout.
 * On failure returns STK_ESPEC with stk_errmsg() pointing at the column,
 * STK_EINVAL for an oversized input shape, STK_ELIMIT for rows too
 * wide. Keeps no state: any number of threads at once. */
STK_API int stk_spec_check(const char *spec, uint32_t height, uint32_t width,
                           uint32_t channels, int64_t out_shape[3],
                           stk_dtype *dtype, stk_layout *layout);

/* Check the text of a spec alone: op names, arguments and their ranges, the
 * order rules, as stk_spec_check does before it looks at an input shape.
 * What depends on the input (a crop larger than the image, channel counts,
 * a fixed output size for images of any size) is not checked. Returns 0, or
 * STK_ESPEC (STK_EINVAL for NULL) with stk_errmsg() pointing at the column.
 * Keeps no state: any number of threads at once. */
STK_API int stk_spec_validate(const char *spec);

/* The ops of the spec language, as the op table describes them (the source
 * of the Python transform classes and of docs/pipeline.md's op list). */
#define STK_OP_MAX_PARAMS 4

/* One argument of an op whose arguments are a schema (stk_op_info). */
typedef struct stk_op_param {
    const char *name;   /* lent, static: the key (`name=value`) */
    int32_t whole;      /* 1: a whole number */
    int32_t required;   /* 1: no default */
    double lo, hi;      /* accepted range, inclusive (the parser checks it) */
    double def;         /* the value when absent (required == 0) */
    uint64_t reserved_[2]; /* zeroed by the library */
} stk_op_param;

typedef struct stk_op_info {
    const char *name;        /* lent, static: the op's name in a spec */
    const char *aliases;     /* other names, '|'-separated, or NULL */
    const char *usage;       /* its arguments as docs/pipeline.md writes them */
    const char *torchvision; /* the torchvision.transforms class it mirrors, or NULL */
    /* Number of params[] below, or -1 when the op parses its own arguments
     * (lists, ranges, words: the schema is not described here). */
    int32_t nparams;
    int32_t reserved32_;     /* zeroed by the library */
    stk_op_param params[STK_OP_MAX_PARAMS]; /* positional order = this order */
    uint64_t reserved_[4];   /* zeroed by the library */
} stk_op_info;

/* The number of ops in the table (with `plugin`; user-defined ops, registered
 * at run time, are not counted). When 0 <= index < that number and `info`
 * is not NULL, fills *info with op `index` (in the order of the "known ops"
 * list); otherwise leaves *info alone. Static data: any number of threads at
 * once. */
STK_API int stk_op_describe(int index, stk_op_info *info);

/* ------------------------------------------------------------------------ */
/* Preview                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * Run `spec` over `ds` and write one PNG to `png_path` showing what the
 * network would be fed: the first `count` samples (0 means 16) of epoch 0
 * shuffled with `seed`, in a grid of `columns` columns (0 means about
 * sqrt(count)), 2 pixels apart. Normalize is undone (x * std + mean, times
 * 255, clamped) so the colors are the augmented image's; CHW/HWC and
 * u8/f16/f32 outputs are all read, one channel is shown as gray. Corrupt
 * samples are skipped. Returns 0, or the spec's, the loader's or the file's
 * error (STK_ESPEC, STK_EIO...) with stk_errmsg(). Only reads `ds`, through
 * a loader of its own: may run alongside other users of the dataset.
 */
STK_API int stk_preview(stk_dataset *ds, const char *spec, uint32_t count, uint64_t seed,
                        uint32_t columns, const char *png_path);

/*
 * stk_preview with more to see (docs/cli.md, `stoker preview`):
 *  - scale: each augmented pixel drawn as a scale x scale block (nearest
 *    neighbour, so the pixels shown are the pixels fed). 0 = automatic:
 *    tiles whose shorter side is under 64 pixels are enlarged by the
 *    smallest whole factor that brings it to 64 or more (CIFAR's 32x32 by
 *    2, MNIST's 28x28 by 3), larger ones are drawn as they are. At most 64.
 *  - compare: each cell shows the original sample (decoded whole, fitted
 *    into the tile with its aspect kept: a whole-number enlargement by
 *    nearest neighbour, anything else Pillow's antialiased bilinear) on the
 *    left, the augmented one on the right, 2 pixels apart; cells are then 8
 *    pixels apart instead of 2.
 *  - labels: a caption under each cell, in a built-in 5x7 pixel font (ASCII;
 *    any other byte drawn as '?'), cut to the cell's width: "#INDEX NAME",
 *    the dataset index and the class name, or "#INDEX label L" when the
 *    dataset has no class names. The caption strip is 11 pixels high.
 * Callers fill the struct (zero means the default); reserved words must be 0.
 */
typedef struct stk_preview_options {
    uint32_t count;        /* samples shown (0 = 16) */
    uint32_t columns;      /* grid columns (0 = about sqrt(count)) */
    uint64_t seed;         /* shuffle and augmentation seed */
    int labels;            /* nonzero: a caption under each cell */
    int compare;           /* nonzero: the original beside each augmented sample */
    uint32_t scale;        /* tile magnification, 0 = automatic (above) */
    uint32_t reserved32_;  /* must be zero */
    uint64_t reserved_[4]; /* must be zero (ABI: see the top of this file) */
} stk_preview_options;
STK_API int stk_preview_write(stk_dataset *ds, const char *spec, const stk_preview_options *opts,
                              const char *png_path);

/* ------------------------------------------------------------------------ */
/* Doctor: where a pipeline's time goes, and what would help                  */
/* ------------------------------------------------------------------------ */

/*
 * stk_doctor_run measures, on a random sample of the dataset and in a few
 * seconds, what each stage of the input pipeline costs (docs/doctor.md):
 * the storage read rate (wall clock, with several concurrent readers, and
 * the reading thread's CPU time), the decode and augment time per sample on
 * one core (the compiled plan, run on the sampled bytes), and the consumer's
 * rate (step_ms per batch). From these it predicts the images/s to expect
 * with 1..N cores (N = stk_cpus_available()), names the stage that limits
 * it, and lists what would help most with the predicted gain, timed on the
 * sample where it can be (restart markers, re-encoding smaller, a smaller
 * output dtype) and estimated where it cannot (packing, more cores).
 *
 * Thread safety: stk_doctor_run keeps no state between calls; it runs its
 * own threads and opens the dataset itself. The report is plain data.
 */

/* A stage of the input pipeline (pinned: only appended). */
typedef enum stk_doctor_stage {
    STK_DOCTOR_NONE = 0,
    STK_DOCTOR_STORAGE = 1,  /* waiting for bytes: storage throughput or latency */
    STK_DOCTOR_READ = 2,     /* CPU spent reading: per-file opens, syscalls, checksums */
    STK_DOCTOR_DECODE = 3,   /* the image decoder (CPU) */
    STK_DOCTOR_AUGMENT = 4,  /* the pipeline's pixel work after decoding (CPU) */
    STK_DOCTOR_CONSUMER = 5, /* the training step: the loader is not the limit */
} stk_doctor_stage;

/* What a recommendation proposes (pinned: only appended). */
typedef enum stk_doctor_advice {
    STK_DOCTOR_ADVICE_NONE = 0,
    STK_DOCTOR_ADVICE_PACK = 1,     /* `stoker pack` the files into .stk shards */
    STK_DOCTOR_ADVICE_RESTART = 2,  /* `stoker pack --restart param` (crops decode less) */
    STK_DOCTOR_ADVICE_REENCODE = 3, /* `stoker pack --reencode --max-side param` */
    STK_DOCTOR_ADVICE_CORES = 4,    /* param cores instead of the ones available */
    STK_DOCTOR_ADVICE_DTYPE = 5,    /* `to f16` instead of `to f32` */
    STK_DOCTOR_ADVICE_THREADS = 6,  /* param loader threads: overlap read waits */
} stk_doctor_advice;

/* Options (zero means the default for every field; reserved words must be
 * zero). */
typedef struct stk_doctor_options {
    uint32_t samples;      /* records sampled, in random order (0 = 128; at most 4096) */
    uint32_t batch_size;   /* samples per training step, for step_ms (0 = 256) */
    double step_ms;        /* the consumer's time per batch in ms (0 = not limited) */
    double time_budget_s;  /* about how long to measure (0 = 5 s) */
    uint32_t readers;      /* concurrent readers for the storage rate
                              (0 = 8, or twice the cores when more; at most 256) */
    uint32_t max_cores;    /* predict for 1..max_cores (0 = stk_cpus_available(),
                              rounded up) */
    uint64_t seed;         /* choice of samples and augmentation draws */
    uint64_t reserved_[6]; /* must be zero (ABI: see the top of this file) */
} stk_doctor_options;

/* The images/s to expect with `cores` cores and `threads` loader threads. */
typedef struct stk_doctor_prediction {
    double cores;
    double images_per_s;
    uint32_t threads;      /* loader threads that hide the read waits (>= cores) */
    stk_doctor_stage bottleneck; /* the stage that sets images_per_s */
    uint64_t reserved_[2]; /* zeroed by the library */
} stk_doctor_prediction;

typedef struct stk_doctor_recommendation {
    stk_doctor_advice kind;
    uint32_t param;        /* restart interval, max side, cores or threads */
    double images_per_s;   /* predicted with it, on the cores available */
    double gain;           /* images_per_s over today's prediction (1.4 = +40%) */
    int measured;          /* 1: timed on the sample; 0: estimated (docs/doctor.md) */
    char text[188];        /* one line: what to do and why, NUL-terminated */
    uint64_t reserved_[2]; /* zeroed by the library */
} stk_doctor_recommendation;

#define STK_DOCTOR_MAX_PREDICTIONS 32
#define STK_DOCTOR_MAX_RECOMMENDATIONS 8

typedef struct stk_doctor_report {
    char format[32];          /* the reader's format name ("imagefolder", "stk"...) */
    uint64_t dataset_samples; /* samples in the dataset */
    uint32_t samples;         /* sampled records measured (corrupt ones excluded) */
    uint32_t skipped;         /* sampled records that failed to read or decode */
    uint32_t readers;         /* concurrent readers of the storage measurement */
    uint32_t batch_size;
    double cpus;              /* stk_cpus_available() */
    double open_s;            /* opening the dataset (an image folder: the walk) */
    double mean_bytes;        /* per record, as stored */
    uint32_t median_width, median_height; /* of the sampled images (0: unknown) */
    uint32_t out_width, out_height;       /* of the pipeline's output */
    /* Storage, one reader: wall and thread-CPU milliseconds per read. */
    double read_wall_ms, read_cpu_ms;
    /* Storage, `readers` at once: records/s and MB/s (wall clock). */
    double read_per_s, read_mb_per_s;
    /* What storage itself gives, the model's ceiling: readers / the mean
     * wait (wall minus CPU) per read, never below read_per_s; INFINITY
     * when the reads did not wait at all. */
    double storage_per_s;
    /* 1 when the concurrent readers fell well short of that ceiling (held
     * back by the CPU, not by storage). */
    int read_cpu_limited;
    stk_doctor_stage bottleneck;     /* at the cores available */
    /* CPU milliseconds per sample on one core. */
    double decode_ms, augment_ms;
    double per_core_per_s;    /* 1000 / (read_cpu_ms + decode_ms + augment_ms) */
    double consumer_per_s;    /* batch_size / step; 0 when not limited */
    double images_per_s;      /* predicted at the cores available */
    double elapsed_s;         /* the whole measurement */
    /* Thread CPU / wall time of the one-core CPU pass: below 1 when other
     * processes hold the cores (the predictions assume cores of one's own). */
    double cpu_share;
    uint32_t npredictions, nrecommendations;
    stk_doctor_prediction predictions[STK_DOCTOR_MAX_PREDICTIONS];
    /* Best first (highest gain). */
    stk_doctor_recommendation recommendations[STK_DOCTOR_MAX_RECOMMENDATIONS];
    char summary[256];        /* the bottleneck in one line, NUL-terminated */
    /* Carved out of the reserved words: the first sampled record that failed
     * to read or decode (its dataset index + 1; 0 when none was skipped).
     * `stoker cat DATASET INDEX` / `stoker verify` say why. */
    uint64_t first_skipped;
    uint64_t reserved_[7];    /* zeroed by the library */
} stk_doctor_report;

/* Measure `spec` (a pipeline spec or preset) over dataset `uri` and fill
 * *out. Returns 0, or the dataset's error (STK_ENOENT, STK_EFORMAT...),
 * STK_ESPEC for a spec that does not compile, STK_EINVAL for bad options,
 * STK_EDATA when no sampled record could be read and decoded, with
 * stk_errmsg(). */
STK_API int stk_doctor_run(const char *uri, const char *spec, const stk_doctor_options *opts,
                           stk_doctor_report *out);

/* The report as text for a person (json = 0: stage table, bottleneck,
 * predictions, recommendations) or as one JSON object (json = 1; fields in
 * docs/cli.md), with `uri` and `spec` named in it. *out is given to the
 * caller: free it with stk_free. Returns 0, STK_EINVAL or STK_ENOMEM. */
STK_API int stk_doctor_render(const stk_doctor_report *r, const char *uri, const char *spec,
                              int json, char **out);

/* "storage", "read", "decode", "augment", "consumer", "none": static. */
STK_API const char *stk_doctor_stage_name(stk_doctor_stage s);
/* "pack", "restart", "reencode", "cores", "dtype", "threads", "none". */
STK_API const char *stk_doctor_advice_name(stk_doctor_advice a);

#ifdef __cplusplus
}
#endif

#endif /* STOKER_STOKER_H */
