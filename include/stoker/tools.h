/*
 * stoker/tools.h — the tools above the loader: packing and verifying .stk
 * shards, writing shards with any fields, the preview grid and the
 * doctor (docs/format.md, docs/cli.md, docs/doctor.md).
 */
#ifndef STOKER_TOOLS_H
#define STOKER_TOOLS_H

#include "stoker/base.h"
#include "stoker/dataset.h"
#include "stoker/loader.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#endif /* STOKER_TOOLS_H */
