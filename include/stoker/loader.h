/*
 * stoker/loader.h — the epoch order (stk_sampler) and the threaded loader
 * (stk_loader): options, batches and their fields, resume state,
 * statistics, the data-stall profile and the GPU placement
 * (docs/sampler.md, docs/engine.md, docs/gpu.md).
 */
#ifndef STOKER_LOADER_H
#define STOKER_LOADER_H

#include "stoker/base.h"
#include "stoker/dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

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
 * stk_loader_set, set_string and set_pointer: from the consumer, before the
 * loader starts, with no other call on it in flight; get, get_string,
 * get_pointer, stat_get and stats_sized: any thread (get not racing a set).
 * destroy: once, with no other call on the loader in flight.
 * Different loaders (over the same dataset or not) are independent.
 */
typedef struct stk_loader stk_loader;

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

/*
 * Loader parameters (docs/engine.md, "Loader parameters"; the pattern of
 * zstd's ZSTD_CCtx_setParameter and libjpeg-turbo's tj3Set). Every option
 * of stk_loader_options is a parameter, and new options are parameters
 * only: stk_loader_options stays as it is, the version-1 shorthand, and
 * gains no field. Create a loader with the struct (or NULL), then set:
 *
 *   stk_loader_create(ds, spec, NULL, &l);
 *   stk_loader_set(l, STK_LOADER_BATCH_SIZE, 64);
 *   stk_loader_set_string(l, STK_LOADER_FIELDS, "image,label,index");
 *
 * A set is valid after create and before the loader starts (stk_loader_start,
 * the first next, or STK_LOADER_EAGER); afterwards STK_ESTATE. It
 * re-derives everything create derived from the options (sampler, plan,
 * pool, knobs, device) at once: on failure (STK_EINVAL out of bounds,
 * naming the parameter and its bounds; a value another option contradicts,
 * with create's message; STK_ENOMEM ...) the loader keeps its previous
 * configuration. A loader configured by set gives the batches one created
 * with the same values in the struct gives, bit for bit. Set parameters
 * before stk_loader_state_set (a set after it is STK_ESTATE); the epoch of
 * stk_loader_set_epoch is kept. From the consumer thread, with no other call
 * on the loader in flight.
 *
 * Values: STK_PARAM_UINT parameters take the value's 64 bits as a uint64_t
 * (a seed above INT64_MAX passes as (int64_t)seed), and so do their bounds;
 * STK_PARAM_BOOL 0 or 1; STK_PARAM_ENUM the enum's value. STRING and POINTER
 * parameters take stk_loader_set_string / stk_loader_set_pointer (the value
 * is copied: the caller's memory is not kept); the wrong form is STK_EINVAL.
 * The keys are pinned: they never change value, and new ones are appended.
 */
typedef enum stk_loader_param {
    STK_LOADER_BATCH_SIZE = 1,      /* uint: samples per batch, default 256 */
    STK_LOADER_THREADS = 2,         /* uint: worker threads, 0 = auto (autotuned) */
    STK_LOADER_PREFETCH = 3,        /* uint: batches filled ahead, 0 = auto */
    STK_LOADER_MAX_BATCHES = 4,     /* uint: cap on batch buffers, 0 = prefetch + 4 */
    STK_LOADER_SEED = 5,            /* uint: the epoch order's seed */
    STK_LOADER_SHUFFLE = 6,         /* bool: shuffle (0 = no_shuffle), default 1 */
    STK_LOADER_DROP_LAST = 7,       /* bool */
    STK_LOADER_RANK = 8,            /* uint */
    STK_LOADER_WORLD_SIZE = 9,      /* uint, default 1 */
    STK_LOADER_ON_ERROR = 10,       /* enum stk_error_policy */
    STK_LOADER_SHUFFLE_MODE = 11,   /* enum stk_shuffle (options.shuffle) */
    STK_LOADER_BLOCK = 12,          /* bool: shuffle mode block (1) or global (0) */
    STK_LOADER_BLOCK_SIZE = 13,     /* uint: block shuffle's records per block, 0 = 64 */
    STK_LOADER_SHUFFLE_WINDOW = 14, /* uint: block shuffle's blocks per window, 0 = 16 */
    STK_LOADER_AUGMENT_SEED = 15,   /* uint: seed of the draws (sets flag STK_LOADER_AUG_SEED) */
    STK_LOADER_VIEWS = 16,          /* uint: views per sample, default 1 */
    STK_LOADER_EAGER_START = 17,    /* bool: 1 starts the loader (flag STK_LOADER_EAGER) */
    STK_LOADER_MEMORY_LIMIT = 18,   /* uint: bytes of pool + scratch, 0 = none */
    STK_LOADER_FIELDS = 19,         /* string: the fields delivered, NULL = image,label */
    STK_LOADER_SAMPLING = 20,       /* pointer: const stk_sampling *, copied */
    STK_LOADER_DEVICE_OPTIONS = 21, /* pointer: const stk_device_options *, copied */
    STK_LOADER_DEVICE = 22,         /* string: "cuda:N", NULL/""/"cpu" = host */
    STK_LOADER_PLACEMENT = 23,      /* enum stk_placement */
    STK_LOADER_DECODER = 24,        /* enum stk_decoder */
    /* The bytes one decode may need in a worker (docs/engine.md, "Decode
     * budget"): an encoded image whose decode needs more is a corrupt sample
     * (STK_EDATA, naming the bytes: skipped or replaced by on_error). 0 = the
     * share of memory_limit (none without it). Not in stk_loader_options. */
    STK_LOADER_DECODE_BUDGET = 25,
} stk_loader_param;

/* Types of parameters (pinned). No parameter is a float yet: the first one
 * brings stk_loader_set_double. */
typedef enum stk_param_type {
    STK_PARAM_INT = 1,     /* int64_t */
    STK_PARAM_UINT = 2,    /* uint64_t, passed as int64_t */
    STK_PARAM_FLOAT = 3,   /* double (none yet) */
    STK_PARAM_BOOL = 4,    /* 0 or 1 */
    STK_PARAM_ENUM = 5,    /* min .. max, named by stk_loader_param_info.values */
    STK_PARAM_STRING = 6,  /* const char *, copied */
    STK_PARAM_POINTER = 7, /* const struct *, copied */
} stk_param_type;

typedef struct stk_param_bounds {
    int64_t min, max;      /* inclusive; STK_PARAM_UINT: as uint64_t; 0 for
                              STRING and POINTER */
    int64_t def;           /* the default (a loader made with NULL options) */
    stk_param_type type;
    uint32_t reserved32_;  /* zeroed by the library */
} stk_param_bounds;

/* One parameter, as stk_loader_param_describe lists them: enough for a
 * binding to build its keyword arguments from the table. */
typedef struct stk_loader_param_info {
    stk_loader_param key;
    stk_param_type type;
    const char *name;      /* static: the keyword, as the Python binding
                              spells it ("batch_size", "threads", ...) */
    const char *doc;       /* static: one line */
    const char *values;    /* static, STK_PARAM_ENUM: the names of min .. max,
                              comma-separated ("raise,skip,replace"); else NULL */
    int64_t min, max, def; /* as in stk_param_bounds */
    uint64_t reserved_[4]; /* zeroed by the library */
} stk_loader_param_info;

/* Set a UINT, INT, BOOL or ENUM parameter. 0 or a negative STK_E* code. */
STK_API int stk_loader_set(stk_loader *l, stk_loader_param p, int64_t value);
/* Set a STRING parameter (NULL: its default). The string is copied. */
STK_API int stk_loader_set_string(stk_loader *l, stk_loader_param p, const char *value);
/* Set a POINTER parameter (NULL: its default). What it points to, and the
 * arrays and strings that points to, are copied. */
STK_API int stk_loader_set_pointer(stk_loader *l, stk_loader_param p, const void *value);
/* The value in effect (as set, or given in stk_loader_options; any time,
 * from any thread that does not race a set). */
STK_API int stk_loader_get(const stk_loader *l, stk_loader_param p, int64_t *out);
/* A STRING parameter (NULL when unset). Lent: valid until the next set or
 * the loader's destroy. */
STK_API int stk_loader_get_string(const stk_loader *l, stk_loader_param p, const char **out);
/* A POINTER parameter: the loader's copy (NULL when unset). Lent, as
 * get_string; read only. */
STK_API int stk_loader_get_pointer(const stk_loader *l, stk_loader_param p, const void **out);
/* A parameter's bounds, default and type. STK_EINVAL for an unknown key. */
STK_API int stk_loader_param_bounds(stk_loader_param p, stk_param_bounds *out);
/* The index-th parameter of the table (0-based): 0, or STK_ENOENT past the
 * last. Static data; any thread. */
STK_API int stk_loader_param_describe(int index, stk_loader_param_info *info);

/*
 * Statistics by key. stk_loader_stats stays as it is (version 1); new
 * statistics are keys here and fields of stk_loader_statistics, a struct
 * that grows at its end and carries its own size, never reserved words.
 * The keys are pinned.
 */
typedef enum stk_loader_stat {
    STK_LOADER_STAT_SAMPLES = 1,
    STK_LOADER_STAT_BATCHES = 2,
    STK_LOADER_STAT_SKIPPED = 3,
    STK_LOADER_STAT_READ_S = 4,
    STK_LOADER_STAT_DECODE_S = 5,
    STK_LOADER_STAT_AUGMENT_S = 6,
    STK_LOADER_STAT_COLLATE_S = 7,
    STK_LOADER_STAT_IDLE_S = 8,
    STK_LOADER_STAT_WAIT_S = 9,
    STK_LOADER_STAT_STEP_S = 10,
    STK_LOADER_STAT_BATCHES_ALLOCATED = 11,
    STK_LOADER_STAT_POOL_BYTES = 12,
    STK_LOADER_STAT_POOL_EXHAUSTED = 13,
    STK_LOADER_STAT_MEMORY_BYTES = 14,
    STK_LOADER_STAT_THREADS = 15,
    STK_LOADER_STAT_PREFETCH = 16,
    STK_LOADER_STAT_DECISIONS = 17,
    STK_LOADER_STAT_MAX_BATCHES = 18,
    STK_LOADER_STAT_GPU_DECODE_CPU_ROWS = 19,
    STK_LOADER_STAT_GPU_HEAD_ROWS = 20,
    STK_LOADER_STAT_DECODE_BUDGET = 21, /* bytes one decode may need (0: no bound) */
} stk_loader_stat;

/* Every statistic, as one struct sized by its `size` (perf_event_attr's
 * rule): the caller sets size = sizeof(stk_loader_statistics) as it knows
 * it; the library fills that many bytes (at most its own size) and sets
 * size to the bytes it filled. So a program built against an older header
 * gets the fields it knows, and one built against a newer header sees by
 * size which fields an older library filled. Fields are only appended. */
typedef struct stk_loader_statistics {
    uint64_t size;
    uint64_t samples, batches, skipped;
    double read_s, decode_s, augment_s, collate_s, idle_s, wait_s, step_s;
    uint64_t batches_allocated, pool_bytes, pool_exhausted, memory_bytes;
    uint64_t threads, prefetch, decisions, max_batches;
    uint64_t gpu_decode_cpu_rows, gpu_head_rows;
    uint64_t decode_budget;
} stk_loader_statistics;

/* One statistic (its meaning: stk_loader_stats, or the key's comment);
 * counts are exact as doubles below 2^53. STK_EINVAL for an unknown key. */
STK_API int stk_loader_stat_get(const stk_loader *l, stk_loader_stat key, double *out);
/* Fill stats (see stk_loader_statistics): STK_EINVAL when size is under 8
 * or does not match stats->size. Any thread, at any time. */
STK_API int stk_loader_stats_sized(const stk_loader *l, void *stats, size_t size);

typedef struct stk_loader_stat_info {
    stk_loader_stat key;
    uint32_t seconds;      /* 1: a time in seconds; 0: a count or bytes */
    const char *name;      /* static: "samples", "read_s", ... (the field's name) */
    const char *doc;       /* static: one line */
    uint64_t reserved_[2]; /* zeroed by the library */
} stk_loader_stat_info;

/* The index-th statistic (0-based): 0, or STK_ENOENT past the last. */
STK_API int stk_loader_stat_describe(int index, stk_loader_stat_info *info);

#ifdef __cplusplus
}
#endif

#endif /* STOKER_LOADER_H */
