/*
 * loader_internal.h — the loader's private header: the struct every
 * src/pipeline/loader*.c file works on, and the functions they call across
 * files. Nothing outside src/pipeline/loader*.c includes it.
 *
 * The loader is six files, one concern each (the essay of loader.c
 * describes the machine as a whole):
 *
 *   loader.c           the core: the pool of batch slots, the worker threads
 *                      and how they claim and fill rows, the consumer's
 *                      next / release and the lent batch's fields
 *   loader_create.c    options resolved, the sampler, fields, plan, knobs
 *                      and device built from them; create, destroy
 *   loader_autotune.c  the autotuner (docs/engine.md, "Autotune") and the
 *                      knobs a caller moves by hand (set_threads, set_prefetch)
 *   loader_profile.c   the data-stall profile (the window of batch records,
 *                      the verdict), the statistics
 *   loader_state.c     the resume state (state_get / state_set, the mismatch
 *                      messages), set_epoch
 *   loader_params.c    the parameter table: stk_loader_set / get, bounds,
 *                      describe (a set configures the loader afresh through
 *                      stk_ld_reconfigure, loader_create.c)
 *
 * Ownership and locking are written next to each field below. In short:
 * the fields in the first group are written only by create and are read
 * without the lock afterwards; everything from `started` on is guarded by
 * `mu` unless its comment says it is a worker's own or a relaxed atomic.
 * Functions named *_locked are called with `mu` held.
 *
 * The cross-file functions carry the prefix stk_ld_ (hidden, like every
 * symbol of the library that stoker.h does not declare).
 */
#ifndef STK_PIPELINE_LOADER_INTERNAL_H
#define STK_PIPELINE_LOADER_INTERNAL_H

#include "core/error.h"
#include "core/util.h"
#include "format/dataset.h"
#include "gpu/device.h"
#include "gpu/stage.h"
#include "ops/plan.h"
#include "pipeline/fields.h"
#include "pipeline/sampler.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define DEFAULT_BATCH_SIZE 256
#define AUTO_PREFETCH_START 4  /* prefetch = 0: where the tuner starts... */
#define AUTO_PREFETCH_MAX 16   /* ...and how deep it may go, */
#define AUTO_POOL_BYTES (UINT64_C(1) << 30) /* ...past 4, within 1 GiB without memory_limit */
#define AUTO_THREADS_CAP 64    /* threads = 0: at most this many workers */
#define BUDGET_AUTO_THREADS 8  /* threads = 0: the decode budget is a share of 8 */
#define MAX_THREADS 1024
#define MAX_SLOTS 4096
#define EVENT_RING 4096        /* batch records kept for the profile */
#define DECISION_RING 64       /* autotuner decisions kept (texts) */

typedef enum slot_state { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_LENT } slot_state;

/* A sample of a batch that failed to read (skip and replace policies): what
 * stk_loader_skipped lends. */
typedef struct fail_rec {
    uint64_t index; /* its dataset index */
    char *msg;      /* why (naming it), from malloc */
} fail_rec;

typedef struct slot {
    /* Buffers: allocated once with the slot, owned by the loader, written
     * only by the worker that claimed the row (FILLING) and read by the
     * consumer (LENT). */
    uint8_t *data;      /* batch_size * sample_bytes, STK_ALIGN-aligned */
    int64_t *labels;    /* batch_size */
    uint64_t *indices;  /* batch_size dataset indices */
    uint8_t *row_ok;    /* batch_size: 0 = skipped under the skip policy */
    char **row_msg;     /* batch_size: a failed row's message (skip, replace),
                           from malloc, written by the row's worker; moved
                           into `fails` by the worker that finishes the slot */
    stk_slot_fields *fields; /* the other fields' buffers (NULL: image, label) */
    /* With a device (gpu/stage.h): the pinned staging, the device buffers,
     * the slot's stream and events. COPY mode: data is gb.host. Its
     * consumer_* and release_pending fields are guarded by loader->mu. */
    stk_gpu_batch gb;

    /* Everything below is guarded by loader->mu. */
    slot_state state;
    uint64_t seq;       /* batch sequence held (FILLING/READY/LENT) */
    uint64_t epoch, position;
    uint64_t start;     /* global slot its epoch's list starts at (0 unless partial) */
    uint32_t rows;      /* rows of this batch */
    uint32_t next_row;  /* first unclaimed row (FILLING) */
    uint32_t done_rows; /* rows finished */
    uint32_t active;    /* workers writing into it right now */
    uint32_t skipped;   /* rows skipped (skip policy), or failed rows awaiting
                           their substitute (replace policy) */
    /* The samples that failed to read, in row order (a row's failed
     * substitutes after it): built by the worker that finishes the slot,
     * read by stk_loader_skipped while LENT, emptied when the slot is
     * claimed again. */
    fail_rec *fails;
    uint32_t nfails, fails_cap;
    bool cancelled;     /* reset while active > 0: free when active hits 0 */
    uint64_t ticket;    /* bumped on every lend; guards double release */
} slot;

/* Per-worker counters, written only by their worker (relaxed atomics so
 * stats readers on other threads are race-free), one cache line each. */
/* A batch whose samples the read-ahead hints (ra_take, ra_give). */
typedef struct ra_batch {
    uint64_t epoch, pos, start;
    uint32_t rows;
} ra_batch;
#define RA_MAX_BATCHES 64

typedef struct worker {
    _Alignas(STK_ALIGN) stk_loader *loader;
    uint32_t index;      /* 0-based; claims work only while index < loader->active */
    pthread_t thread;
    bool started;
    stk_scratch scratch; /* owned by the worker thread: dataset reads */
    stk_scratch plan_scratch; /* owned by the worker thread: decoding, resizing */
    ra_batch ra[RA_MAX_BATCHES]; /* owned by the worker thread: its read-ahead */
    stk_worker_fields *fields; /* owned by the worker thread (NULL: image, label) */
    _Atomic uint64_t read_ticks, decode_ticks, augment_ticks, collate_ticks, samples;
    _Atomic uint64_t busy_ticks;    /* claiming to finishing a chunk */
    _Atomic uint64_t scratch_bytes; /* both scratches' capacity, after each chunk,
                                       plus own_peak */
    uint64_t own_peak; /* owned by the worker thread: the most a decoder of
                          its last chunk allocated for itself */
    _Atomic double idle_s;
} worker;

/* The autotuner's view of one window (tune_locked). */
typedef struct tune_sample {
    double t;               /* stk_now() at its end */
    uint64_t batches, samples;
    double wait_s, step_s;
    uint64_t busy_ticks;
    double workers_cpu_s, process_cpu_s;
} tune_sample;

/* A move the tuner is trying: kept if the next window's rate says so. */
typedef enum tune_move { MOVE_NONE, MOVE_THREAD_UP, MOVE_THREAD_DOWN, MOVE_PREFETCH_UP } tune_move;

/*
 * The loader's configuration: its options as given (stk_loader_options at
 * create, then stk_loader_set; loader_params.c), with the caller's
 * borrowed strings and arrays copied, so it can be configured again
 * (stk_ld_reconfigure) before it starts. Owned by the loader; written by
 * create and by stk_loader_set (before start, from the consumer thread
 * only), read by configure. Holds no pointer into itself (it moves whole
 * when stk_loader_set swaps in a new configuration).
 */
typedef struct stk_loader_config {
    /* The options as given; o.sampling, o.fields and o.device are NULL here
     * (their copies are below and configure points a resolved copy at
     * them). batch_size, world_size and views hold their default (256, 1,
     * 1) instead of 0. */
    stk_loader_options o;
    char *spec;                /* the pipeline spec, from malloc */
    char *fields;              /* o.fields, from malloc (NULL: image,label) */
    bool has_sampling;
    stk_sampling sampling;     /* its arrays from malloc (each non-NULL
                                  as given, even when empty) */
    bool has_device;           /* o.device was given (or a device parameter set) */
    stk_device_options device; /* device.device is device_name */
    char *device_name;         /* from malloc (NULL: host memory) */
    /* Parameters with no field in stk_loader_options (loader_params.c): */
    uint64_t decode_budget;    /* STK_LOADER_DECODE_BUDGET (0: derived) */
} stk_loader_config;

struct stk_loader {
    /* The locks come first: stk_ld_reconfigure replaces everything after
     * them (offsetof(stk_loader, ds) on) with a loader configured afresh. */
    pthread_mutex_t mu;
    pthread_cond_t work_cv;     /* workers: something to fill, or stop */
    pthread_cond_t ready_cv;    /* consumer: a batch is ready, or stop/fail */
    pthread_cond_t park_cv;     /* parked workers: active grew, or stop */

    /* Immutable after create (written by loader_create.c, read unlocked;
     * replaced whole by stk_loader_set before start). */
    stk_dataset *ds;            /* borrowed */
    stk_loader_config cfg;      /* owned: the options as set */
    stk_plan *plan;             /* owned */
    stk_lfields *lf;            /* owned: the fields delivered (fields.h) */
    stk_sampler *sampler;       /* owned */
    stk_loader_options opt;     /* resolved */
    int64_t sample_shape[3];
    stk_dtype dtype;
    stk_layout layout;
    size_t sample_bytes;
    uint64_t per_epoch;         /* batches per epoch */
    uint64_t per_rank;          /* samples per rank per epoch */
    uint32_t chunk_rows;        /* rows claimed at a time */
    uint64_t spec_hash;         /* of the spec text, part of the resume state */
    uint32_t views;             /* output rows per sample (>= 1) */
    uint64_t aug_seed;          /* seed of the augmentation draws */
    uint64_t list_size;         /* entries in an epoch's list (the sampler's M) */
    worker *workers;            /* threads_max, owned */
    /* The CUDA backend (NULL without a device): the device and the
     * pipeline split (gpu/stage.h), owned. */
    stk_gpu *gpu;
    stk_gpu_pipe *gpipe;
    stk_gpu_mode gmode;
    char device_info[1300]; /* stk_loader_device_info (set at create) */
    _Atomic uint64_t gpu_head_rows; /* rows staged as heads (region too large) */
    _Atomic uint64_t gpu_decode_cpu_rows; /* decoder nvjpeg: rows decoded on the CPU */

    /* Guarded by mu. */
    bool started;               /* workers running, first slots allocated */
    slot *slots;                /* max_batches entries; first nslots in use */
    uint32_t nslots;
    uint32_t pending;           /* slots FILLING or READY (not cancelled) */
    uint64_t base_epoch, base_pos; /* what seq 0 is since the last reset */
    uint64_t base_start;        /* > 0: base_epoch is partial, its list starts here */
    uint64_t part_rank;         /* samples per rank of that partial epoch */
    uint64_t part_batches;      /* its batches (may be 0) */
    uint64_t fill_seq;          /* next seq to assign */
    uint64_t deliver_seq;       /* next seq to lend */
    uint64_t ra_seq;            /* read-ahead: batches below it were hinted */
    uint32_t ra_batches;        /* read-ahead depth in batches (0: the dataset
                                   wants no hints; set at create) */
    uint64_t cons_epoch, cons_pos; /* the consumer's place (state) */
    bool stopping;
    bool failed;
    bool interrupted;
    stk_errbuf error;           /* why it failed */
    uint64_t batches_delivered, pool_exhausted, samples_delivered;
    uint64_t skipped_delivered; /* sum of batch.skipped over the batches lent:
                                   each skipped sample counted once, however
                                   often dropped work (set_epoch, state_set,
                                   read-ahead) read it */
    double wait_s;
    double step_s;

    /* Knobs. threads_max workers exist (opt.threads when fixed); the first
     * `active` claim work, the others wait on park_cv with no scratch.
     * Guarded by mu; active and prefetch also readable relaxed. Set by
     * create (plan_knobs), moved by loader_autotune.c. */
    uint32_t threads_max;
    uint32_t active;
    uint32_t prefetch;          /* FILLING + READY batches allowed */
    uint32_t prefetch_cap;      /* auto prefetch's ceiling (memory, max_batches) */
    bool auto_threads, auto_prefetch;
    bool pool_capped;           /* memory_limit lowered max_batches */
    uint64_t decode_budget;     /* bytes one decode may need (0: no bound): the
                                   cfg's decode_budget, else memory_limit's
                                   share; plan_knobs, immutable after create */
    uint64_t batch_bytes;       /* one slot's buffers */

    /* Consumer-side timing (guarded by mu; written inside next(), read by
     * loader_profile.c). */
    double created;             /* stk_now() at create: event times count from it */
    double last_exit;           /* when next() last lent a batch */
    bool have_last;             /* last_exit starts a step (not after an epoch's end) */
    double step_acc, wait_acc;  /* of the batch being asked for */

    /* Profile window (loader_profile.c; guarded by mu). events: a ring of
     * the last EVENT_RING batches of the window, owned. */
    stk_loader_event *events;
    uint64_t nevents;           /* recorded in the window (ring index = n % RING) */
    double win_start;           /* stk_now() at the window's start */
    uint64_t win_batches, win_samples;
    double win_wait, win_step, win_ready;
    uint64_t win_ticks[4];      /* read, decode, augment, collate at window start */
    uint64_t win_busy;          /* busy ticks at window start */

    /* Autotuner (loader_autotune.c; guarded by mu; runs in the consumer's
     * next()). */
    tune_sample tune_prev;      /* end of the last window */
    double tune_period;         /* seconds per window */
    tune_move move;             /* being tried, or MOVE_NONE */
    double move_rate, move_share; /* the window before the move */
    uint64_t block_until[4];    /* per move: not before this window */
    uint64_t block_len[4];      /* per move: the next block's length */
    uint64_t windows;           /* windows measured */
    int quiet_windows;          /* consecutive step-bound windows */
    bool log_debug;             /* STOKER_LOG=debug */
    uint64_t decisions;
    char decision_text[DECISION_RING][160];
};

/* ------------------------------------------------------------------------ */
/* Across the loader's files                                                 */
/* ------------------------------------------------------------------------ */

/* loader.c: slots and cursors. */
int stk_ld_slot_alloc(stk_loader *l, slot *s);
void stk_ld_slot_free_buffers(const stk_loader *l, slot *s);
/* Batches of `epoch` (the partial one or a full one). Caller holds mu. */
uint64_t stk_ld_epoch_batches_locked(const stk_loader *l, uint64_t epoch);
/* Drop all prefetched work and restart filling at (epoch, pos), the
 * epoch's list starting at global slot `start` (0: a full epoch). Caller
 * holds mu. */
void stk_ld_reset_locked(stk_loader *l, uint64_t epoch, uint64_t pos, uint64_t start);
/* Batch pool + the workers' scratch, now; whether `more` bytes still fit
 * memory_limit. Caller holds mu. */
uint64_t stk_ld_memory_locked(const stk_loader *l);
bool stk_ld_memory_fits_locked(const stk_loader *l, uint64_t more);

/* loader_create.c: the configuration and what is derived from it. */
/* cfg := the v1 options (NULL: all defaults) and the spec, copied. */
int stk_ld_config_from_options(stk_loader_config *cfg, const char *spec,
                               const stk_loader_options *opts);
/* dst := a deep copy of src. On failure dst is empty. */
int stk_ld_config_copy(stk_loader_config *dst, const stk_loader_config *src);
void stk_ld_config_free(stk_loader_config *cfg);
/* Configure the unstarted loader l from cfg (taken: freed on failure too),
 * all or nothing: on failure l keeps its previous configuration, cursors
 * and all. The epoch set by set_epoch is kept; the position returns to its
 * start. Caller: the consumer thread, no other call on l in flight. */
int stk_ld_reconfigure(stk_loader *l, stk_loader_config *cfg);

/* loader_profile.c */
/* Worker counters summed: read, decode, augment, collate ticks; busy ticks
 * (busy may be NULL). Relaxed loads, no lock needed. */
void stk_ld_worker_sums(const stk_loader *l, uint64_t ticks[4], uint64_t *busy);
/* The batch being lent: its record in the profile window, the consumer's
 * totals and a tuner step (stk_ld_tune_locked). Caller holds mu. */
void stk_ld_record_lend_locked(stk_loader *l, uint32_t rows, uint32_t ready, double now);

/* loader_autotune.c: one step of the autotuner, from the consumer's next().
 * Caller holds mu. */
void stk_ld_tune_locked(stk_loader *l, double now);

#endif /* STK_PIPELINE_LOADER_INTERNAL_H */
