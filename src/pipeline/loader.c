/*
 * loader.c — the executor: worker threads fill pooled batch buffers, the
 * consumer borrows them in order.
 *
 * Shape of the machine
 * --------------------
 * The loader owns a pool of batch buffers ("slots"). Each slot holds one
 * batch and moves through
 *
 *     FREE ──(a worker assigns it the next batch)──► FILLING
 *     FILLING ──(its last row is written)──────────► READY
 *     READY ──(stk_loader_next lends it)───────────► LENT
 *     LENT ──(stk_loader_release)──────────────────► FREE
 *
 * Batches are numbered by a sequence `seq` counted from the last reset; seq
 * maps to (epoch, position) from the reset's base, so filling runs straight
 * across epoch boundaries. Workers claim *chunks of rows* of the oldest
 * FILLING slot (so the batch the consumer needs next finishes first), and
 * start a new batch only while fewer than `prefetch` batches are FILLING or
 * READY. Each row is one sample: read from the dataset, run through the
 * compiled plan, written straight into the slot's buffer — one worker, one
 * write, no per-sample allocation (each worker owns its scratch).
 *
 * Determinism: a row's content depends only on (seed, epoch, dataset index):
 * the sampler is a pure function and the plan's random draws come from a
 * Philox stream keyed the same way. Which worker wrote a row, and when, never
 * matters; batches are delivered strictly in seq order.
 *
 * Views (opt.views = K > 1): a batch of B samples has K*B output rows;
 * sample row i of a slot is output rows i*K .. i*K + K-1, each a separate
 * run of the plan on the one sample read, with the draw counter's top byte
 * set to the view (view 0 is the plain draw). `rows`, `next_row` and the
 * chunks count samples; data, labels and indices are sized in output rows.
 *
 * Laziness: create compiles the plan and builds the sampler but starts no
 * thread and allocates no slot; stk_loader_start (called by the first
 * next(), or at create with STK_LOADER_EAGER) allocates the first slots and
 * starts the workers. set_epoch, state_set, state_get, length and stats work
 * on an unstarted loader (they only touch the cursors).
 *
 * Memory: the slots are the only large allocation; there are
 * prefetch + 1 at start, and more are added (up to max_batches) only when
 * the consumer keeps so many batches lent that no slot is free. So memory is
 * (prefetch + lent) x batch bytes + per-thread scratch, whatever the dataset
 * size.
 *
 * Locking: one mutex `mu` guards every slot's state fields and the cursors.
 * Two condition variables: `work_cv` (workers wait for something to fill)
 * and `ready_cv` (the consumer waits for its batch). Every wait sits in a
 * loop that, after waking, re-checks `stopping` and `failed` and then looks at
 * the slots afresh (a worker claims again, the consumer looks up its seq
 * again), and every state change that could unblock someone broadcasts the
 * matching variable, so stopping, resetting, failing or interrupting never
 * leaves a thread asleep.
 *
 * An epoch continued from a state taken under another world size or batch
 * size is partial: its list starts at a global slot S > 0 and it has fewer
 * batches (stk_loader_state_set, docs/sampler.md). A reset records it as its
 * base (base_start = S); seq_place counts that epoch's batches first, then
 * full epochs, and every slot carries the start slot its rows are read from.
 *
 * Resets (set_epoch, state_set) act on the slots themselves (there is no
 * generation counter): READY slots become FREE at once; a FILLING slot with
 * workers still writing into it is marked `cancelled` and goes FREE when its
 * last writer leaves. Lent slots are never touched: a lent batch stays valid
 * until released.
 */
#include "core/cpu.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/util.h"
#include "format/dataset.h"
#include "gpu/device.h"
#include "gpu/stage.h"
#include "ops/plan.h"
#include "pipeline/fields.h"
#include "pipeline/sampler.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#define XXH_INLINE_ALL
#include <xxhash.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* A lent batch's public `handle`: the slot's lend count (ticket) above the
 * slot index, so a stale copy of a batch (released twice, or kept after its
 * slot was lent again) never matches. */
#define HANDLE_SLOT_BITS 16
#define HANDLE_SLOT_MASK ((UINT64_C(1) << HANDLE_SLOT_BITS) - 1)
_Static_assert(MAX_SLOTS <= HANDLE_SLOT_MASK + 1, "slot index must fit the batch handle");

static uint64_t batch_handle(uint64_t ticket, uint32_t slot_index)
{
    return (ticket << HANDLE_SLOT_BITS) | slot_index;
}

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

struct stk_loader {
    /* Immutable after create. */
    stk_dataset *ds;            /* borrowed */
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

    pthread_mutex_t mu;
    pthread_cond_t work_cv;     /* workers: something to fill, or stop */
    pthread_cond_t ready_cv;    /* consumer: a batch is ready, or stop/fail */

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
     * Guarded by mu; active and prefetch also readable relaxed. */
    uint32_t threads_max;
    uint32_t active;
    uint32_t prefetch;          /* FILLING + READY batches allowed */
    uint32_t prefetch_cap;      /* auto prefetch's ceiling (memory, max_batches) */
    bool auto_threads, auto_prefetch;
    bool pool_capped;           /* memory_limit lowered max_batches */
    uint64_t decode_budget;     /* bytes one decode may need (0: no memory_limit);
                                   plan_knobs, immutable after create */
    pthread_cond_t park_cv;     /* parked workers: active grew, or stop */
    uint64_t batch_bytes;       /* one slot's buffers */

    /* Consumer-side timing (guarded by mu; written inside next()). */
    double created;             /* stk_now() at create: event times count from it */
    double last_exit;           /* when next() last lent a batch */
    bool have_last;             /* last_exit starts a step (not after an epoch's end) */
    double step_acc, wait_acc;  /* of the batch being asked for */

    /* Profile window (guarded by mu). events: a ring of the last EVENT_RING
     * batches of the window, owned. */
    stk_loader_event *events;
    uint64_t nevents;           /* recorded in the window (ring index = n % RING) */
    double win_start;           /* stk_now() at the window's start */
    uint64_t win_batches, win_samples;
    double win_wait, win_step, win_ready;
    uint64_t win_ticks[4];      /* read, decode, augment, collate at window start */
    uint64_t win_busy;          /* busy ticks at window start */

    /* Autotuner (guarded by mu; runs in the consumer's next()). */
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
/* Slots                                                                     */
/* ------------------------------------------------------------------------ */

static void slot_free_buffers(const stk_loader *l, slot *s)
{
    stk_slot_fields_free(l->lf, s->fields);
    if (l->gpipe)
        stk_gpu_batch_free(l->gpipe, &s->gb); /* data was gb.host or NULL */
    else
        stk_aligned_free(s->data);
    free(s->labels);
    free(s->indices);
    free(s->row_ok);
    if (s->row_msg)
        for (uint32_t r = 0; r < l->opt.batch_size; r++)
            free(s->row_msg[r]);
    free(s->row_msg);
    for (uint32_t i = 0; i < s->nfails; i++)
        free(s->fails[i].msg);
    free(s->fails);
    memset(s, 0, sizeof *s);
}

static int slot_alloc(stk_loader *l, slot *s)
{
    uint64_t bytes;
    uint32_t b = l->opt.batch_size * l->views; /* output rows (checked at create) */
    if (!stk_mul_ok(b, l->sample_bytes, &bytes) || bytes > SIZE_MAX)
        return stk_fail(STK_ELIMIT, "loader: a batch of %u samples of %zu bytes is too large", b,
                        l->sample_bytes);
    memset(s, 0, sizeof *s);
    if (l->gpipe) {
        int rc = stk_gpu_batch_init(l->gpipe, &s->gb);
        if (rc < 0) {
            memset(s, 0, sizeof *s);
            return rc;
        }
        /* COPY: rows are written into the pinned batch; else staged. */
        s->data = l->gmode == STK_GPU_COPY ? s->gb.host : NULL;
    } else {
        s->data = stk_aligned_alloc((size_t)bytes);
    }
    s->labels = calloc(b, sizeof *s->labels);
    s->indices = calloc(b, sizeof *s->indices);
    s->row_ok = calloc(l->opt.batch_size, 1);
    s->row_msg = calloc(l->opt.batch_size, sizeof *s->row_msg);
    if ((s->data || l->gpipe) && l->lf->extra) {
        int rc = stk_slot_fields_alloc(l->lf, b, &s->fields);
        if (rc < 0) {
            slot_free_buffers(l, s);
            return rc;
        }
    }
    if ((!s->data && !l->gpipe) || !s->labels || !s->indices || !s->row_ok || !s->row_msg) {
        slot_free_buffers(l, s);
        return stk_fail(STK_ENOMEM, "loader: out of memory allocating a %llu-byte batch buffer",
                        (unsigned long long)bytes);
    }
    s->state = SLOT_FREE;
    return 0;
}

/* Batches of `epoch` (the partial one or a full one). Caller holds mu. */
static uint64_t epoch_batches_locked(const stk_loader *l, uint64_t epoch)
{
    return l->base_start && epoch == l->base_epoch ? l->part_batches : l->per_epoch;
}

/* seq -> (epoch, position, start slot). Caller holds mu. */
static void seq_place(const stk_loader *l, uint64_t seq, uint64_t *epoch, uint64_t *pos,
                      uint64_t *start)
{
    uint64_t abs = l->base_pos + seq;
    *start = 0;
    if (l->base_start) {
        if (abs < l->part_batches) {
            *epoch = l->base_epoch;
            *pos = abs;
            *start = l->base_start;
            return;
        }
        abs -= l->part_batches;
        *epoch = l->base_epoch + 1 + abs / l->per_epoch;
        *pos = abs % l->per_epoch;
        return;
    }
    *epoch = l->base_epoch + abs / l->per_epoch;
    *pos = abs % l->per_epoch;
}

/* Drop all prefetched work and restart filling at (epoch, pos), the epoch's
 * list starting at global slot `start` (0: a full epoch). Caller holds mu. */
static void reset_locked(stk_loader *l, uint64_t epoch, uint64_t pos, uint64_t start)
{
    for (uint32_t i = 0; i < l->nslots; i++) {
        slot *s = &l->slots[i];
        if (s->state == SLOT_READY || (s->state == SLOT_FILLING && s->active == 0)) {
            s->state = SLOT_FREE;
        } else if (s->state == SLOT_FILLING && !s->cancelled) {
            s->cancelled = true;
            s->next_row = s->rows; /* nothing more to claim */
        }
    }
    l->pending = 0;
    l->base_epoch = epoch;
    l->base_pos = pos;
    l->base_start = start;
    l->part_rank = start ? stk_sampler_length_from(l->sampler, start) : 0;
    l->part_batches = (l->part_rank + l->opt.batch_size - 1) / l->opt.batch_size;
    l->fill_seq = l->deliver_seq = 0;
    l->ra_seq = 0;
    l->cons_epoch = epoch;
    l->cons_pos = pos;
    l->failed = false;
    l->error.code = 0;
    l->error.msg[0] = '\0';
    pthread_cond_broadcast(&l->work_cv);
    pthread_cond_broadcast(&l->ready_cv);
}

/* Record a fatal error and wake everyone. Caller holds mu; the message is
 * the calling thread's current one. */
static void fail_locked(stk_loader *l, int code)
{
    if (!l->failed) {
        l->failed = true;
        stk_errbuf_capture(&l->error, code);
    }
    pthread_cond_broadcast(&l->ready_cv);
    pthread_cond_broadcast(&l->work_cv);
}

/* ------------------------------------------------------------------------ */
/* Workers                                                                   */
/* ------------------------------------------------------------------------ */

/* Read-ahead (a remote dataset: vtable.prefetch): when batch `seq` starts
 * filling, the samples of the batches up to seq + ra_batches are hinted,
 * each batch once, in the sampler's order, so their bytes are on the way
 * before a worker asks. The places are taken under mu (ra_take), the hints
 * given without it (ra_give). */

/* Caller holds mu. How many batches to hint now, into out. */
static uint32_t ra_take(stk_loader *l, uint64_t seq, ra_batch *out)
{
    if (!l->ra_batches)
        return 0;
    uint64_t from = l->ra_seq > seq ? l->ra_seq : seq, to = seq + l->ra_batches + 1;
    uint32_t n = 0;
    for (uint64_t q = from; q < to && n < RA_MAX_BATCHES; q++, n++) {
        seq_place(l, q, &out[n].epoch, &out[n].pos, &out[n].start);
        uint64_t first = out[n].pos * l->opt.batch_size;
        uint64_t left = (out[n].start ? l->part_rank : l->per_rank) - first;
        out[n].rows = (uint32_t)(left < l->opt.batch_size ? left : l->opt.batch_size);
    }
    if (to > l->ra_seq)
        l->ra_seq = to;
    return n;
}

static void ra_give(stk_loader *l, const ra_batch *b, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        stk_epoch_key key;
        stk_sampler_epoch_key(l->sampler, b[i].epoch, &key);
        uint64_t first = b[i].pos * l->opt.batch_size;
        for (uint32_t row = 0; row < b[i].rows; row++) {
            stk_sampler_place place;
            stk_sampler_place_from(l->sampler, &key, b[i].start, first + row, &place);
            stk_dataset_prefetch(l->ds, place.index);
        }
    }
}

/* Find work: a chunk of the oldest FILLING slot, or a new batch in a FREE
 * slot. Caller holds mu. Returns the slot or NULL; a new batch's read-ahead
 * goes into ra (*nra batches). */
static slot *claim_locked(stk_loader *l, uint32_t *row0, uint32_t *row1, ra_batch *ra,
                          uint32_t *nra)
{
    *nra = 0;
    slot *best = NULL;
    for (uint32_t i = 0; i < l->nslots; i++) {
        slot *s = &l->slots[i];
        if (s->state == SLOT_FILLING && !s->cancelled && s->next_row < s->rows &&
            (!best || s->seq < best->seq))
            best = s;
    }
    if (!best && l->pending < l->prefetch) {
        for (uint32_t i = 0; i < l->nslots; i++) {
            slot *s = &l->slots[i];
            if (s->state != SLOT_FREE)
                continue;
            if (l->gpipe) /* a fresh staging arena (fill_rows waits for the old copy) */
                stk_gpu_batch_begin(l->gpipe, &s->gb);
            uint64_t epoch, pos, start;
            seq_place(l, l->fill_seq, &epoch, &pos, &start);
            uint64_t first = pos * l->opt.batch_size;
            uint64_t left = (start ? l->part_rank : l->per_rank) - first;
            s->state = SLOT_FILLING;
            s->seq = l->fill_seq++;
            s->epoch = epoch;
            s->position = pos;
            s->start = start;
            s->rows = (uint32_t)(left < l->opt.batch_size ? left : l->opt.batch_size);
            s->next_row = s->done_rows = s->skipped = 0;
            for (uint32_t f = 0; f < s->nfails; f++) /* (rare: a batch with failures) */
                free(s->fails[f].msg);
            s->nfails = 0;
            s->active = 0;
            s->cancelled = false;
            l->pending++;
            best = s;
            if (ra)
                *nra = ra_take(l, s->seq, ra);
            break;
        }
    }
    if (!best)
        return NULL;
    *row0 = best->next_row;
    *row1 = best->rows - best->next_row < l->chunk_rows ? best->rows : best->next_row + l->chunk_rows;
    best->next_row = *row1;
    best->active++;
    return best;
}

/* Move the rows kept under the skip policy to the front, in order. Called by
 * the worker that finished the slot (no other thread touches it then). */
static void compact_rows(stk_loader *l, worker *w, slot *s)
{
    uint64_t t0 = stk_ticks();
    uint32_t out = 0, k = l->views;
    for (uint32_t i = 0; i < s->rows; i++) {
        if (!s->row_ok[i])
            continue;
        if (out != i) {
            if (s->data) /* (staged GPU rows are placed at submit) */
                memmove(s->data + (size_t)out * k * l->sample_bytes,
                        s->data + (size_t)i * k * l->sample_bytes, (size_t)k * l->sample_bytes);
            memmove(s->labels + (size_t)out * k, s->labels + (size_t)i * k, k * sizeof *s->labels);
            memmove(s->indices + (size_t)out * k, s->indices + (size_t)i * k,
                    k * sizeof *s->indices);
            if (s->fields)
                for (uint32_t v = 0; v < k; v++)
                    stk_slot_fields_move(l->lf, s->fields, i * k + v, out * k + v);
        }
        out++;
    }
    atomic_fetch_add_explicit(&w->collate_ticks, stk_ticks() - t0, memory_order_relaxed);
}

/* Decoder nvjpeg: the GPU decodes the slot's JPEG rows, once all are
 * staged and before they are compacted (the worker that finished the
 * batch; no lock held, the slot kept active). A JPEG that turns out to be
 * corrupt only now (its header was sound; libjpeg-turbo rejects it too) is
 * treated as a row failing in a worker: under the skip policy it is left
 * out and counted, otherwise the error names the sample. */
static int gpu_decode_rows(stk_loader *l, worker *w, slot *s)
{
    uint32_t k = l->views, failed;
    uint64_t t0 = stk_ticks();
    int rc = stk_gpu_batch_decode(l->gpipe, &s->gb, s->rows * k,
                                  l->opt.on_error == STK_ON_ERROR_SKIP, &failed);
    atomic_fetch_add_explicit(&w->collate_ticks, stk_ticks() - t0, memory_order_relaxed);
    if (rc < 0) {
        if (failed != UINT32_MAX) {
            char name[1024];
            stk_dataset_sample_name(l->ds, s->indices[failed], name, sizeof name);
            stk_fail_prefix(rc, "%s", name);
        }
        return rc;
    }
    for (uint32_t r = 0; r < s->rows; r++) {
        int bad = 0;
        for (uint32_t v = 0; v < k; v++)
            bad |= stk_gpu_row_failed(&s->gb, r * k + v);
        if (!bad || !s->row_ok[r])
            continue;
        s->row_ok[r] = false;
        s->skipped++;
        for (uint32_t v = 0; v < k; v++) {
            s->labels[(size_t)r * k + v] = -1;
            stk_gpu_stage_skip(l->gpipe, &s->gb, r * k + v);
        }
    }
    return 0;
}

/* Read sample `index` and run the plan into row `row` of slot s (all its
 * views), the draws keyed by `place` (the row's own place: a substitute
 * under the replace policy is drawn with the failed row's stream). Writes
 * the row's labels (-1 on failure), indices and row_ok. No lock held.
 * *t_read: ticks when the read returned; *dec: decode ticks. Returns 0 or
 * the error (its message naming the sample). */
static int run_row(stk_loader *l, worker *w, slot *s, uint32_t row, uint64_t epoch,
                   uint64_t index, const stk_sampler_place *place, uint64_t *t_read,
                   uint64_t *dec)
{
    uint32_t k = l->views;
    stk_sample sample;
    int rc = l->ds->vt->read(l->ds, index, &sample, &w->scratch);
    *t_read = stk_ticks();
    if (rc == 0) {
        stk_plan_input in = {.image = sample.image.pixels ? &sample.image : NULL,
                             .encoded = sample.encoded,
                             .encoded_size = sample.encoded_size,
                             .decode_ticks = dec,
                             .decode_budget = l->decode_budget,
                             .decode_own_bytes = &w->own_peak};
        if (l->lf->extra) {
            if (!w->fields && !(w->fields = calloc(1, sizeof *w->fields)))
                rc = stk_fail(STK_ENOMEM, "loader: out of memory");
            stk_row_key rk = {l->aug_seed, place->draw_domain, epoch, place->draw};
            if (rc == 0)
                rc = stk_lfields_fill(l->lf, l->ds, l->plan, index, &in, &rk, k,
                                      s->data + (size_t)row * k * l->sample_bytes,
                                      l->sample_bytes, row, s->fields, w->fields,
                                      &w->plan_scratch);
        } else {
            /* View v's draws: the counter with v in its top byte (v = 0:
             * the plain draw; counters stay below 2^56, checked at create). */
            for (uint32_t v = 0; v < k && rc == 0; v++) {
                stk_rng rng;
                stk_rng_init(&rng, l->aug_seed, place->draw_domain, epoch,
                             place->draw | (uint64_t)v << 56);
                if (!s->data) /* a GPU pipeline stages the row (gpu/stage.c) */
                    rc = stk_gpu_stage_row(l->gpipe, &s->gb, row * k + v, &in, &rng,
                                           &w->plan_scratch);
                else
                    rc = stk_plan_run_input(l->plan, &in, &rng,
                                            s->data + ((size_t)row * k + v) * l->sample_bytes,
                                            &w->plan_scratch);
            }
        }
        /* A zero-copy view whose file shrank under it (mapped shards)
         * read zeros: fail the row with that reason, naming the record. */
        int lost = stk_dataset_check(l->ds, index);
        if (lost < 0) {
            rc = lost;
        } else if (rc < 0) {
            char name[1024];
            stk_dataset_sample_name(l->ds, index, name, sizeof name);
            stk_fail_prefix(rc, "%s", name);
        }
    }
    for (uint32_t v = 0; v < k; v++) {
        s->labels[(size_t)row * k + v] = rc == 0 ? sample.label : -1;
        s->indices[(size_t)row * k + v] = index;
    }
    s->row_ok[row] = rc == 0;
    return rc;
}

/* Process rows [row0, row1) of slot s. No lock held. Returns 0 or the fatal
 * error code (message in the thread-local buffer). A corrupt sample
 * (STK_EDATA) under the skip or replace policy leaves its row not ok, its
 * message in row_msg, and counts in *skipped. */
static int fill_rows(stk_loader *l, worker *w, slot *s, uint64_t epoch, uint64_t pos,
                     uint64_t start, uint32_t row0, uint32_t row1, uint32_t *skipped)
{
    stk_epoch_key key;
    stk_sampler_epoch_key(l->sampler, epoch, &key);
    uint64_t first = pos * l->opt.batch_size;
    uint64_t read_ticks = 0, decode_ticks = 0, augment_ticks = 0;
    uint64_t t = stk_ticks();
    int rc = 0;
    uint32_t k = l->views;
    /* The slot's previous batch: its copy must have read the pinned memory
     * these rows overwrite (normally long done: that batch was consumed).
     * Waited here, unlocked, never in claim_locked under mu. */
    if (l->gpipe && (rc = stk_gpu_batch_ready(l->gpipe, &s->gb)) < 0)
        return rc;
    for (uint32_t row = row0; row < row1; row++) {
        stk_sampler_place place;
        stk_sampler_place_from(l->sampler, &key, start, first + row, &place);
        if (s->row_msg[row]) { /* left from a batch cancelled before it finished */
            free(s->row_msg[row]);
            s->row_msg[row] = NULL;
        }
        uint64_t t_read, dec = 0;
        rc = run_row(l, w, s, row, epoch, place.index, &place, &t_read, &dec);
        read_ticks += t_read - t;
        t = stk_ticks();
        if (dec > t - t_read) /* (a migration between unsynchronised TSCs) */
            dec = t - t_read;
        decode_ticks += dec;
        augment_ticks += t - t_read - dec;
        if (rc < 0 && !s->data && l->gpipe)
            for (uint32_t v = 0; v < k; v++)
                stk_gpu_stage_skip(l->gpipe, &s->gb, row * k + v);
        if (rc == STK_EDATA && l->opt.on_error != STK_ON_ERROR_RAISE) {
            s->row_msg[row] = strdup(stk_errmsg()); /* (NULL: listed without a reason) */
            (*skipped)++;
            rc = 0;
            continue;
        }
        if (rc < 0)
            break;
    }
    atomic_fetch_add_explicit(&w->read_ticks, read_ticks, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->decode_ticks, decode_ticks, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->augment_ticks, augment_ticks, memory_order_relaxed);
    return rc;
}

/* Append a failure to the slot's list; takes msg. 0 or STK_ENOMEM. Called
 * by the worker that finishes the slot. */
static int fail_push(slot *s, uint64_t index, char *msg)
{
    if (s->nfails == s->fails_cap) {
        uint32_t cap = s->fails_cap ? s->fails_cap * 2 : 8;
        fail_rec *f = realloc(s->fails, cap * sizeof *f);
        if (!f) {
            free(msg);
            return stk_fail(STK_ENOMEM, "loader: out of memory listing the skipped samples");
        }
        s->fails = f;
        s->fails_cap = cap;
    }
    s->fails[s->nfails].index = index;
    s->fails[s->nfails].msg = msg;
    s->nfails++;
    return 0;
}

/* Substitutes tried for one failed row before the loader gives up. */
#define REPLACE_TRIES 16

/* The replace policy, by the worker that finishes the slot (no other thread
 * touches it then; no lock held): each failed row, in row order, gets the
 * sample at another place of its epoch's list for this rank, drawn from
 * the failed row's own stream (domain STK_RNG_DOMAIN_REPLACE, keyed by its
 * draw counter), run with the failed row's augmentation draws and read
 * with its own label and index. So the substitute depends only on (seed,
 * epoch, the failed place), never on threads or timing, and a resumed
 * loader redraws it. Places inside this batch and places already used as
 * substitutes in it are drawn again (while the list has others), so a
 * sample does not appear twice in one batch. A substitute that fails too
 * is listed and the next draw tried; REPLACE_TRIES failures in a row stop
 * the loader. Also lists the failures (skip and replace: collect_fails). */
static int replace_rows(stk_loader *l, worker *w, slot *s, uint64_t list_len)
{
    stk_epoch_key key;
    stk_sampler_epoch_key(l->sampler, s->epoch, &key);
    uint64_t first = s->position * l->opt.batch_size;
    uint64_t *used = NULL; /* substitute places taken in this batch */
    uint32_t nused = 0, replaced = 0;
    int rc = 0;
    uint64_t t0 = stk_ticks();
    for (uint32_t row = 0; row < s->rows && rc == 0; row++) {
        if (s->row_ok[row])
            continue;
        stk_sampler_place place;
        stk_sampler_place_from(l->sampler, &key, s->start, first + row, &place);
        if ((rc = fail_push(s, s->indices[(size_t)row * l->views], s->row_msg[row])) < 0)
            break;
        s->row_msg[row] = NULL;
        if (!used && !(used = malloc((size_t)s->rows * REPLACE_TRIES * sizeof *used))) {
            rc = stk_fail(STK_ENOMEM, "loader: out of memory");
            break;
        }
        stk_rng rng;
        stk_rng_init(&rng, l->aug_seed, STK_RNG_DOMAIN_REPLACE, s->epoch,
                     (uint64_t)place.draw_domain << 56 ^ place.draw);
        uint64_t avoid = s->rows + nused; /* places to avoid; a bound, not a set */
        int tries;
        for (tries = 0; tries < REPLACE_TRIES; tries++) {
            uint64_t p = 0;
            for (int draw = 0; draw < 64; draw++) {
                p = stk_rng_u64(&rng) % list_len;
                if (avoid >= list_len)
                    break; /* every place is in this batch: take any */
                bool taken = p >= first && p < first + s->rows;
                for (uint32_t u = 0; u < nused && !taken; u++)
                    taken = used[u] == p;
                if (!taken)
                    break;
            }
            used[nused++] = p;
            stk_sampler_place sub;
            stk_sampler_place_from(l->sampler, &key, s->start, p, &sub);
            uint64_t t_read, dec = 0;
            rc = run_row(l, w, s, row, s->epoch, sub.index, &place, &t_read, &dec);
            if (rc == 0) {
                replaced++;
                break;
            }
            if (rc != STK_EDATA)
                break;
            char *msg = strdup(stk_errmsg());
            if ((rc = fail_push(s, sub.index, msg)) < 0)
                break;
            rc = 0;
        }
        if (rc == 0 && tries == REPLACE_TRIES) {
            char name[1024];
            stk_dataset_sample_name(l->ds, s->fails[s->nfails - REPLACE_TRIES - 1].index, name,
                                    sizeof name);
            rc = stk_fail(STK_EDATA,
                          "%s and %d substitutes for it in a row are corrupt "
                          "(on_error=replace); the last: %s",
                          name, REPLACE_TRIES,
                          s->fails[s->nfails - 1].msg ? s->fails[s->nfails - 1].msg : "?");
        }
    }
    free(used);
    if (rc == 0)
        s->skipped = 0; /* every row holds a sample again */
    atomic_fetch_add_explicit(&w->samples, replaced, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->collate_ticks, stk_ticks() - t0, memory_order_relaxed);
    return rc;
}

/* The skip policy: the failed rows' messages into the slot's list, in row
 * order, before they are compacted away. By the worker that finishes the
 * slot. */
static int collect_fails(stk_loader *l, slot *s)
{
    for (uint32_t row = 0; row < s->rows; row++) {
        if (s->row_ok[row])
            continue;
        int rc = fail_push(s, s->indices[(size_t)row * l->views], s->row_msg[row]);
        s->row_msg[row] = NULL;
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    stk_loader *l = w->loader;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        if (l->stopping)
            break;
        if (w->index >= l->active) {
            /* Parked by the tuner (or set_threads): the scratch goes back
             * while asleep, so memory_limit counts only working threads. */
            if (w->scratch.cap || w->plan_scratch.cap || w->fields) {
                stk_scratch_free(&w->scratch);
                stk_scratch_free(&w->plan_scratch);
                if (w->fields)
                    stk_worker_fields_free(w->fields);
                atomic_store_explicit(&w->scratch_bytes, 0, memory_order_relaxed);
            }
            pthread_cond_wait(&l->park_cv, &l->mu);
            continue;
        }
        uint32_t row0 = 0, row1 = 0, nra = 0;
        slot *s = l->failed ? NULL : claim_locked(l, &row0, &row1, w->ra, &nra);
        if (!s) {
            double t0 = stk_now();
            pthread_cond_wait(&l->work_cv, &l->mu);
            double idle = stk_now() - t0;
            atomic_store_explicit(&w->idle_s, atomic_load_explicit(&w->idle_s, memory_order_relaxed) + idle,
                                  memory_order_relaxed);
            continue;
        }
        uint64_t epoch = s->epoch, pos = s->position, start = s->start;
        pthread_mutex_unlock(&l->mu);
        if (nra)
            ra_give(l, w->ra, nra);

        uint64_t busy0 = stk_ticks();
        uint32_t skipped = 0;
        w->own_peak = 0;
        int rc = fill_rows(l, w, s, epoch, pos, start, row0, row1, &skipped);
        atomic_fetch_add_explicit(&w->samples, row1 - row0 - skipped, memory_order_relaxed);
        atomic_fetch_add_explicit(&w->busy_ticks, stk_ticks() - busy0, memory_order_relaxed);
        atomic_store_explicit(&w->scratch_bytes,
                              w->scratch.cap + w->plan_scratch.cap + w->own_peak +
                                  (w->fields ? stk_worker_fields_bytes(w->fields) : 0),
                              memory_order_relaxed);

        pthread_mutex_lock(&l->mu);
        s->active--;
        s->done_rows += row1 - row0;
        s->skipped += skipped;
        if (s->cancelled) {
            if (s->active == 0) {
                s->cancelled = false;
                s->state = SLOT_FREE;
                pthread_cond_broadcast(&l->work_cv);
            }
            continue;
        }
        if (rc < 0) {
            fail_locked(l, rc);
            continue;
        }
        if (s->done_rows == s->rows && s->active == 0) {
            if (s->skipped || (s->fields && l->lf->nvar) || l->gpipe) {
                /* Compact and collate unlocked; staying "active" keeps a
                 * concurrent reset from freeing the slot under us. */
                s->active++;
                uint64_t list_len = s->start ? l->part_rank : l->per_rank;
                pthread_mutex_unlock(&l->mu);
                uint64_t c0 = stk_ticks();
                int crc = l->gpipe ? gpu_decode_rows(l, w, s) : 0;
                if (crc == 0 && s->skipped)
                    crc = l->opt.on_error == STK_ON_ERROR_REPLACE
                              ? replace_rows(l, w, s, list_len)
                              : collect_fails(l, s);
                if (crc == 0 && s->skipped)
                    compact_rows(l, w, s);
                if (crc == 0 && s->fields && l->lf->nvar) {
                    uint64_t t0 = stk_ticks();
                    crc = stk_slot_fields_collate(l->lf, s->fields,
                                                  (s->rows - s->skipped) * l->views);
                    atomic_fetch_add_explicit(&w->collate_ticks, stk_ticks() - t0,
                                              memory_order_relaxed);
                }
                if (crc == 0 && l->gpipe) { /* copy and kernels, queued on the slot's stream */
                    uint64_t t0 = stk_ticks();
                    stk_gpu_batch *gb = &s->gb;
                    crc = stk_gpu_batch_submit(l->gpipe, gb, s->rows * l->views,
                                               (s->rows - s->skipped) * l->views);
                    atomic_fetch_add_explicit(&l->gpu_head_rows, gb->fallbacks,
                                              memory_order_relaxed);
                    atomic_fetch_add_explicit(&l->gpu_decode_cpu_rows, gb->jpeg_cpu,
                                              memory_order_relaxed);
                    atomic_fetch_add_explicit(&w->collate_ticks, stk_ticks() - t0,
                                              memory_order_relaxed);
                }
                atomic_fetch_add_explicit(&w->busy_ticks, stk_ticks() - c0, memory_order_relaxed);
                pthread_mutex_lock(&l->mu);
                s->active--;
                if (crc < 0 && !s->cancelled) {
                    fail_locked(l, crc);
                    continue;
                }
                if (s->cancelled) { /* reset happened meanwhile */
                    s->cancelled = false;
                    s->state = SLOT_FREE;
                    pthread_cond_broadcast(&l->work_cv);
                    continue;
                }
            }
            s->state = SLOT_READY;
            pthread_cond_broadcast(&l->ready_cv);
        }
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Create / destroy                                                          */
/* ------------------------------------------------------------------------ */

static int resolve_options(const stk_loader_options *in, stk_loader_options *o)
{
    memset(o, 0, sizeof *o);
    if (in)
        *o = *in;
    int rc = 0;
    if (o->device && (rc = stk_reserved_check(o->device->reserved_,
                                              sizeof o->device->reserved_ /
                                                  sizeof o->device->reserved_[0],
                                              "stk_device_options")) < 0)
        return rc;
    if (o->device && o->device->reserved32_)
        return stk_fail(STK_EINVAL, "stk_device_options: reserved32_ is not zero (zero-initialise "
                        "the struct; a program built against a newer stoker.h needs a newer "
                        "libstoker)");
    if (o->device && (unsigned)o->device->decoder > STK_DECODER_NVJPEG)
        return stk_fail(STK_EINVAL, "stk_device_options: decoder %d is not one of "
                        "STK_DECODER_CPU, STK_DECODER_NVJPEG", (int)o->device->decoder);
    if (!o->batch_size)
        o->batch_size = DEFAULT_BATCH_SIZE;
    /* threads = 0 / prefetch = 0 stay 0 here: auto (stk_loader_create). */
    if (!o->world_size)
        o->world_size = 1;
    if (!o->max_batches)
        o->max_batches = (o->prefetch ? o->prefetch : AUTO_PREFETCH_MAX) + 4;
    if (o->threads > MAX_THREADS)
        return stk_fail(STK_EINVAL, "loader: %u threads is more than the limit of %u", o->threads,
                        MAX_THREADS);
    if (o->prefetch >= MAX_SLOTS)
        return stk_fail(STK_EINVAL, "loader: prefetch %u is more than the limit of %u", o->prefetch,
                        MAX_SLOTS - 1);
    if (o->max_batches < (o->prefetch ? o->prefetch : 1) + 1)
        return stk_fail(STK_EINVAL, "loader: max_batches %u must be at least prefetch + 1 = %u",
                        o->max_batches, (o->prefetch ? o->prefetch : 1) + 1);
    if (o->max_batches > MAX_SLOTS)
        o->max_batches = MAX_SLOTS;
    if (o->flags & ~(STK_LOADER_AUG_SEED | STK_LOADER_EAGER))
        return stk_fail(STK_EINVAL, "loader: unknown flags 0x%x", o->flags);
    if (!o->views)
        o->views = 1;
    if (o->views > STK_MAX_VIEWS)
        return stk_fail(STK_EINVAL, "loader: views %u is more than the limit of %u", o->views,
                        STK_MAX_VIEWS);
    if ((uint64_t)o->batch_size * o->views > UINT32_MAX)
        return stk_fail(STK_EINVAL, "loader: batch_size %u x views %u rows is too many",
                        o->batch_size, o->views);
    if (o->on_error != STK_ON_ERROR_RAISE && o->on_error != STK_ON_ERROR_SKIP &&
        o->on_error != STK_ON_ERROR_REPLACE)
        return stk_fail(STK_EINVAL, "loader: unknown error policy %d", (int)o->on_error);
    /* The order: no_shuffle is STK_SHUFFLE_NONE; block defaults filled in
     * (the sampler checks the rest, with the messages). */
    if (o->no_shuffle && o->shuffle == STK_SHUFFLE_GLOBAL)
        o->shuffle = STK_SHUFFLE_NONE;
    if (o->shuffle == STK_SHUFFLE_BLOCK && !o->no_shuffle) {
        if (!o->block_size)
            o->block_size = STK_DEFAULT_BLOCK_SIZE;
        if (!o->shuffle_window)
            o->shuffle_window = STK_DEFAULT_SHUFFLE_WINDOW;
    }
    return 0;
}

/* A digest of what, besides the spec, decides a row's content: the sampling
 * options, aug_seed and views; 0 when none is set (so older states still
 * match). `used` is the sampling in effect: with balance_classes, its
 * labels are the ones read from the dataset; the labels, given or read,
 * are hashed whole, so a state taken with other labels does not match. */
static uint64_t order_digest(const stk_loader_options *o, const stk_sampling *used)
{
    const stk_sampling *sp = o->sampling;
    bool any = (o->flags & STK_LOADER_AUG_SEED) || o->views > 1 ||
               (sp && (sp->indices || sp->weights || sp->labels || sp->num_samples ||
                       sp->balance_classes || sp->num_mix));
    if (!any)
        return 0;
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return 1; /* still "set"; a state then fails to match, never silently */
    XXH3_64bits_reset(st);
    uint64_t head[6] = {o->views, o->flags & STK_LOADER_AUG_SEED,
                        o->flags & STK_LOADER_AUG_SEED ? o->aug_seed : 0,
                        sp ? sp->num_samples : 0, sp ? sp->num_indices : 0,
                        sp ? sp->num_weights : 0};
    XXH3_64bits_update(st, head, sizeof head);
    if (sp && sp->indices)
        XXH3_64bits_update(st, sp->indices, sp->num_indices * sizeof *sp->indices);
    if (sp && sp->weights)
        XXH3_64bits_update(st, sp->weights, sp->num_weights * sizeof *sp->weights);
    if (sp && sp->mix_sizes && sp->num_mix) {
        XXH3_64bits_update(st, &sp->num_mix, sizeof sp->num_mix);
        XXH3_64bits_update(st, sp->mix_sizes, sp->num_mix * sizeof *sp->mix_sizes);
        if (sp->mix_weights)
            XXH3_64bits_update(st, sp->mix_weights, sp->num_mix * sizeof *sp->mix_weights);
    }
    if (used && used->labels) {
        uint64_t tag[3] = {0x4c41424cu, used->balance_classes != 0, used->num_labels};
        XXH3_64bits_update(st, tag, sizeof tag);
        XXH3_64bits_update(st, used->labels, used->num_labels * sizeof *used->labels);
    }
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h ? h : 1;
}

/* balance_classes: the labels of the population (indices, or the whole
 * dataset) read through the dataset, into a copy of the sampling options. */
static int balance_labels(stk_dataset *ds, const stk_sampling *sp, stk_sampling *copy,
                          int64_t **labels)
{
    *labels = NULL;
    *copy = *sp;
    if (sp->labels || sp->weights)
        return stk_fail(STK_EINVAL, "loader: balance_classes reads the labels from the dataset: "
                                    "give neither weights nor labels with it");
    uint64_t p = sp->indices ? sp->num_indices : ds->count;
    int64_t *lab = malloc((p ? p : 1) * sizeof *lab);
    if (!lab)
        return stk_fail(STK_ENOMEM, "loader: out of memory for %llu labels",
                        (unsigned long long)p);
    for (uint64_t i = 0; i < p; i++) {
        uint64_t index = sp->indices ? sp->indices[i] : i;
        if (index >= ds->count) {
            free(lab);
            return stk_fail(STK_EINVAL, "sampler: indices[%llu] = %llu is not below the dataset "
                                        "size %llu",
                            (unsigned long long)i, (unsigned long long)index,
                            (unsigned long long)ds->count);
        }
        int rc = stk_dataset_label(ds, index, &lab[i]);
        if (rc < 0) {
            free(lab);
            stk_fail_prefix(rc, "balance_classes: label of sample %llu",
                            (unsigned long long)index);
            return rc;
        }
    }
    copy->labels = lab;
    copy->num_labels = p;
    copy->balance_classes = 1;
    *labels = lab;
    return 0;
}

/* One slot's bytes: the rows, their labels and indices, the row flags. */
static uint64_t slot_bytes(const stk_loader *l)
{
    uint64_t rows = (uint64_t)l->opt.batch_size * l->views;
    return rows * l->sample_bytes + rows * (sizeof(int64_t) + sizeof(uint64_t)) +
           l->opt.batch_size;
}

/* The knobs' starting values and ceilings: fixed by the options, or the
 * autotuner's start (threads from the CPU this process may use, prefetch
 * AUTO_PREFETCH_START), all within max_batches and memory_limit. */
static int plan_knobs(stk_loader *l)
{
    stk_loader_options *o = &l->opt;
    l->auto_threads = o->threads == 0;
    l->auto_prefetch = o->prefetch == 0;
    if (l->auto_threads) {
        double cpus = stk_cpu_available();
        uint32_t c = (uint32_t)ceil(cpus);
        l->threads_max = 2 * c < 2 ? 2 : 2 * c > AUTO_THREADS_CAP ? AUTO_THREADS_CAP : 2 * c;
        long start = lround(cpus);
        l->active = start < 1 ? 1 : (uint32_t)start > l->threads_max ? l->threads_max : (uint32_t)start;
    } else {
        l->threads_max = l->active = o->threads;
    }
    if (l->auto_prefetch) {
        l->prefetch_cap = o->max_batches - 1 < AUTO_PREFETCH_MAX ? o->max_batches - 1
                                                                   : AUTO_PREFETCH_MAX;
        l->prefetch = l->prefetch_cap < AUTO_PREFETCH_START ? l->prefetch_cap : AUTO_PREFETCH_START;
    } else {
        l->prefetch = l->prefetch_cap = o->prefetch;
    }
    l->batch_bytes = slot_bytes(l);
    if (l->auto_prefetch && !o->memory_limit) {
        uint64_t fit = AUTO_POOL_BYTES / l->batch_bytes;
        if (fit < (uint64_t)AUTO_PREFETCH_START + 1)
            fit = AUTO_PREFETCH_START + 1;
        if (l->prefetch_cap > fit - 1)
            l->prefetch_cap = (uint32_t)(fit - 1);
    }
    if (o->memory_limit) {
        uint64_t fit = o->memory_limit / l->batch_bytes;
        if (fit < 2)
            return stk_fail(STK_EINVAL,
                            "loader: memory_limit of %llu bytes holds fewer than two batches of "
                            "%llu bytes",
                            (unsigned long long)o->memory_limit,
                            (unsigned long long)l->batch_bytes);
        if (!l->auto_prefetch && l->prefetch + 1 > fit)
            return stk_fail(STK_EINVAL,
                            "loader: prefetch %u needs %u batches of %llu bytes; memory_limit of "
                            "%llu bytes holds %llu",
                            l->prefetch, l->prefetch + 1, (unsigned long long)l->batch_bytes,
                            (unsigned long long)o->memory_limit, (unsigned long long)fit);
        if (o->max_batches > fit) {
            o->max_batches = (uint32_t)fit;
            l->pool_capped = true;
        }
        if (l->prefetch_cap > o->max_batches - 1)
            l->prefetch_cap = o->max_batches - 1;
        if (l->prefetch > l->prefetch_cap)
            l->prefetch = l->prefetch_cap;
        /* The decode budget: what the starting pool leaves, shared by the
         * threads option's count (BUDGET_AUTO_THREADS for auto), never by
         * the machine's cores, so the same options refuse the same images
         * everywhere (docs/engine.md, "Memory"). prefetch + 1 <= fit: the
         * rest is >= 0; 1 byte when nothing is left (every encoded image
         * refused, by name), as 0 would mean no budget. */
        uint64_t rest = o->memory_limit - (uint64_t)(l->prefetch + 1) * l->batch_bytes;
        uint64_t share = rest / (o->threads ? o->threads : BUDGET_AUTO_THREADS);
        l->decode_budget = share ? share : 1;
    }
    return 0;
}

/* The CUDA backend (docs/gpu.md): open opt.device, if any, and choose the
 * split of the work for this spec (gpu/stage.h). */
const char *stk_loader_device_info(const stk_loader *l)
{
    return l && l->gpipe ? l->device_info : "";
}

int stk_loader_device_timing(const stk_loader *l, stk_device_timing *timing)
{
    if (!timing)
        return stk_fail(STK_EINVAL, "stk_loader_device_timing: timing is NULL");
    memset(timing, 0, sizeof *timing);
    if (!l)
        return stk_fail(STK_EINVAL, "stk_loader_device_timing: loader is NULL");
    if (!l->gpipe)
        return stk_fail(STK_EUNSUPPORTED, "stk_loader_device_timing: the loader has no device");
    if (l->gmode == STK_GPU_COPY)
        return stk_fail(STK_EUNSUPPORTED, "stk_loader_device_timing: the GPU runs no kernels "
                        "for this loader (%s)", l->device_info);
    stk_gpu_pipe_timing(l->gpipe, timing);
    return 0;
}

static int open_device(stk_loader *l, const char *spec)
{
    const stk_device_options *d = l->opt.device;
    l->opt.device = NULL; /* the caller's; copied here */
    if (!d || !d->device || !d->device[0] || !strcmp(d->device, "cpu"))
        return 0;
    if (d->flags)
        return stk_fail(STK_EINVAL, "stk_device_options: flags 0x%x: no flags are defined",
                        d->flags);
    int rc = stk_gpu_open(d->device, &l->gpu);
    if (rc < 0)
        return rc;
    rc = stk_gpu_pipe_create(l->gpu, l->plan, spec, d->placement, d->decoder, l->lf->extra,
                             l->opt.batch_size * l->views, &l->gpipe);
    if (rc < 0)
        return rc;
    l->gmode = stk_gpu_pipe_mode(l->gpipe);
    /* A substitute is written where the failed row was, after the batch's
     * other rows: only where rows are host rows copied whole at submit. */
    if (l->opt.on_error == STK_ON_ERROR_REPLACE &&
        (l->gmode != STK_GPU_COPY || d->decoder == STK_DECODER_NVJPEG))
        return stk_fail(STK_EUNSUPPORTED, "loader: on_error=replace works with a device only "
                        "where the CPU makes the rows (%s); use on_error=skip",
                        stk_gpu_mode_name(l->gmode));
    snprintf(l->device_info, sizeof l->device_info, "%s: %s", stk_gpu_mode_name(l->gmode),
             stk_gpu_pipe_reason(l->gpipe));
    return 0;
}

int stk_loader_create(stk_dataset *ds, const char *spec, const stk_loader_options *opts,
                      stk_loader **out)
{
    int rc;
    if (!out)
        return stk_fail(STK_EINVAL, "stk_loader_create: out is NULL");
    *out = NULL;
    if (!ds)
        return stk_fail(STK_EINVAL, "stk_loader_create: dataset is NULL");

    stk_loader *l = calloc(1, sizeof *l);
    if (!l)
        return stk_fail(STK_ENOMEM, "loader: out of memory");
    l->ds = ds;
    l->spec_hash = XXH3_64bits(spec ? spec : "", spec ? strlen(spec) : 0);
    if ((rc = resolve_options(opts, &l->opt)) < 0)
        goto fail_early;

    l->views = l->opt.views;
    l->aug_seed = l->opt.flags & STK_LOADER_AUG_SEED ? l->opt.aug_seed : l->opt.seed;
    stk_sampling balanced;
    int64_t *labels = NULL;
    const stk_sampling *sampling = l->opt.sampling;
    if (sampling && sampling->balance_classes) {
        if ((rc = balance_labels(ds, sampling, &balanced, &labels)) < 0)
            goto fail_early;
        sampling = &balanced;
    }
    uint64_t digest = order_digest(&l->opt, sampling);
    l->spec_hash ^= digest;
    stk_sampler_options so = {
        .dataset_size = ds->count,
        .seed = l->opt.seed,
        .batch_size = l->opt.batch_size,
        .rank = l->opt.rank,
        .world_size = l->opt.world_size,
        .no_shuffle = l->opt.no_shuffle,
        .drop_last = l->opt.drop_last,
        .shuffle = l->opt.shuffle,
        .block_size = l->opt.block_size,
        .shuffle_window = l->opt.shuffle_window,
        .sampling = sampling,
    };
    rc = stk_sampler_create(&so, &l->sampler);
    free(labels);
    l->opt.sampling = NULL; /* the caller's; the sampler holds copies */
    if (rc < 0)
        goto fail_early;
    l->list_size = stk_sampler_list_size(l->sampler);
    if (l->views > 1 && (l->list_size >> 56 || ds->count >> 56)) {
        rc = stk_fail(STK_ELIMIT, "loader: views need fewer than 2^56 samples");
        goto fail_early;
    }
    /* Without shuffle each rank reads its indices in increasing order. */
    stk_dataset_access_hint(ds, l->opt.shuffle == STK_SHUFFLE_NONE ? STK_ACCESS_SEQUENTIAL
                                                                   : STK_ACCESS_RANDOM);
    l->per_rank = stk_sampler_length(l->sampler);
    if (ds->wants_prefetch) {
        uint64_t b = (ds->wants_prefetch + l->opt.batch_size - 1) / l->opt.batch_size;
        l->ra_batches = (uint32_t)(b < 2 ? 2 : b > RA_MAX_BATCHES - 1 ? RA_MAX_BATCHES - 1 : b);
    }
    l->per_epoch = (l->per_rank + l->opt.batch_size - 1) / l->opt.batch_size;

    /* Datasets of encoded or variously sized images compile a variable-input
     * plan (height = width = channels = 0). */
    l->lf = calloc(1, sizeof *l->lf);
    if (!l->lf) {
        rc = stk_fail(STK_ENOMEM, "loader: out of memory");
        goto fail_early;
    }
    if ((rc = stk_lfields_resolve(ds, l->opt.fields, l->lf)) < 0)
        goto fail_early;
    l->opt.fields = NULL; /* the caller's; resolved into lf */
    if ((rc = (l->lf->spatial ? stk_plan_compile_spatial : stk_plan_compile)(
             spec ? spec : "", ds->height, ds->width, ds->channels, &l->plan)) < 0) {
        stk_fail_prefix(rc, "%s", ds->uri);
        goto fail_early;
    }
    stk_plan_output(l->plan, l->sample_shape, &l->dtype, &l->layout, &l->sample_bytes);
    stk_lfields_set_mask_size(l->lf, l->layout == STK_CHW ? l->sample_shape[1] : l->sample_shape[0],
                              l->layout == STK_CHW ? l->sample_shape[2] : l->sample_shape[1]);
    if ((rc = plan_knobs(l)) < 0)
        goto fail_early;
    if ((rc = open_device(l, spec)) < 0)
        goto fail_early;

    /* Chunks: a few per thread per batch, so all threads share one batch
     * without locking per sample. */
    uint32_t parts = l->threads_max * 4;
    l->chunk_rows = (l->opt.batch_size + parts - 1) / parts;
    if (l->chunk_rows == 0)
        l->chunk_rows = 1;

    l->slots = calloc(l->opt.max_batches, sizeof *l->slots);
    l->workers = calloc(l->threads_max, sizeof *l->workers);
    l->events = calloc(EVENT_RING, sizeof *l->events);
    if (!l->slots || !l->workers || !l->events) {
        rc = stk_fail(STK_ENOMEM, "loader: out of memory");
        goto fail_early;
    }
    for (uint32_t i = 0; i < l->threads_max; i++) {
        l->workers[i].loader = l;
        l->workers[i].index = i;
    }
    stk_ticks_per_second(); /* calibrate before workers start timing */
    l->created = l->win_start = stk_now();
    l->tune_period = 0.5;
    for (int m = 0; m < 4; m++)
        l->block_len[m] = 4;
    const char *log = getenv("STOKER_LOG");
    l->log_debug = log && !strcmp(log, "debug");

    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->work_cv, NULL);
    pthread_cond_init(&l->park_cv, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* timed waits immune to clock jumps */
    pthread_cond_init(&l->ready_cv, &ca);
    pthread_condattr_destroy(&ca);
    if ((l->opt.flags & STK_LOADER_EAGER) && (rc = stk_loader_start(l)) < 0) {
        stk_loader_destroy(l);
        return rc;
    }
    *out = l;
    return 0;

fail_early:
    for (uint32_t i = 0; i < l->nslots; i++)
        slot_free_buffers(l, &l->slots[i]);
    stk_gpu_pipe_free(l->gpipe);
    stk_gpu_close(l->gpu);
    free(l->slots);
    free(l->workers);
    free(l->events);
    stk_plan_free(l->plan);
    free(l->lf);
    stk_sampler_destroy(l->sampler);
    free(l);
    return rc;
}

int stk_loader_start(stk_loader *l)
{
    if (!l)
        return stk_fail(STK_EINVAL, "stk_loader_start: loader is NULL");
    int rc = 0;
    pthread_mutex_lock(&l->mu);
    if (l->started)
        goto out;
    if (l->stopping) { /* being destroyed: start nothing it would not join */
        rc = stk_fail(STK_ESTOPPED, "loader: stopped");
        goto out;
    }
    while (l->nslots < l->prefetch + 1) {
        if ((rc = slot_alloc(l, &l->slots[l->nslots])) < 0)
            goto out; /* the slots made so far stay: a later start goes on */
        l->nslots++;
    }
    /* Workers block on mu until this call returns. */
    for (uint32_t i = 0; i < l->threads_max; i++) {
        worker *w = &l->workers[i];
        if (w->started)
            continue;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            rc = stk_fail(STK_ETHREAD, "loader: cannot create worker thread %u of %u", i + 1,
                          l->threads_max);
            goto out; /* the ones started keep running; a later start adds the rest */
        }
        w->started = true;
    }
    l->started = true;
out:
    pthread_mutex_unlock(&l->mu);
    return rc;
}

void stk_loader_destroy(stk_loader *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stopping = true;
    pthread_cond_broadcast(&l->work_cv);
    pthread_cond_broadcast(&l->ready_cv);
    pthread_cond_broadcast(&l->park_cv);
    bool started = l->started;
    pthread_mutex_unlock(&l->mu);
    /* Workers blocked on a remote store return at once (their reads fail
     * with STK_EINTR, which nobody sees now); the dataset reads again
     * afterwards (it is the caller's, and may serve another loader). */
    if (started && l->ds->wants_prefetch)
        stk_dataset_access_hint(l->ds, STK_ACCESS_STOP);
    for (uint32_t i = 0; i < l->threads_max; i++) {
        if (l->workers[i].started)
            pthread_join(l->workers[i].thread, NULL);
        stk_scratch_free(&l->workers[i].scratch);
        stk_scratch_free(&l->workers[i].plan_scratch);
        if (l->workers[i].fields) {
            stk_worker_fields_free(l->workers[i].fields);
            free(l->workers[i].fields);
        }
    }
    if (started && l->ds->wants_prefetch)
        stk_dataset_access_hint(l->ds, STK_ACCESS_RESUME);
    for (uint32_t i = 0; i < l->nslots; i++)
        slot_free_buffers(l, &l->slots[i]);
    stk_gpu_pipe_free(l->gpipe);
    stk_gpu_close(l->gpu);
    pthread_cond_destroy(&l->work_cv);
    pthread_cond_destroy(&l->ready_cv);
    pthread_cond_destroy(&l->park_cv);
    pthread_mutex_destroy(&l->mu);
    free(l->slots);
    free(l->workers);
    free(l->events);
    stk_plan_free(l->plan);
    free(l->lf);
    stk_sampler_destroy(l->sampler);
    free(l);
}

/* ------------------------------------------------------------------------ */
/* Consumer                                                                  */
/* ------------------------------------------------------------------------ */

/* Batch pool + the workers' scratch, now. Caller holds mu. */
static uint64_t memory_locked(const stk_loader *l)
{
    uint64_t m = (uint64_t)l->nslots * l->batch_bytes;
    for (uint32_t i = 0; i < l->threads_max; i++)
        m += atomic_load_explicit(&l->workers[i].scratch_bytes, memory_order_relaxed);
    return m;
}

/* Would `more` bytes still fit memory_limit? Caller holds mu. */
static bool memory_fits_locked(const stk_loader *l, uint64_t more)
{
    return !l->opt.memory_limit || memory_locked(l) + more <= l->opt.memory_limit;
}

static slot *find_seq_locked(stk_loader *l, uint64_t seq)
{
    for (uint32_t i = 0; i < l->nslots; i++) {
        slot *s = &l->slots[i];
        if ((s->state == SLOT_FILLING || s->state == SLOT_READY) && !s->cancelled && s->seq == seq)
            return s;
    }
    return NULL;
}

/* No slot holds the next batch and none is free: every buffer is lent (or
 * being cancelled). Grow the pool if allowed. Caller holds mu. Returns 1 if
 * the consumer should keep waiting, or a negative code. */
static int starved_locked(stk_loader *l)
{
    for (uint32_t i = 0; i < l->nslots; i++)
        if (l->slots[i].state == SLOT_FREE || l->slots[i].cancelled)
            return 1; /* a worker can (or soon will) start it */
    if (l->pending > 0)
        return 1;
    if (l->nslots < l->opt.max_batches && memory_fits_locked(l, l->batch_bytes)) {
        int rc = slot_alloc(l, &l->slots[l->nslots]);
        if (rc < 0)
            return rc;
        l->nslots++;
        pthread_cond_broadcast(&l->work_cv);
        return 1;
    }
    l->pool_exhausted++;
    if (l->nslots < l->opt.max_batches || l->pool_capped)
        return stk_fail(STK_EEXHAUSTED,
                        "loader: all %u batch buffers are lent out and memory_limit (%llu bytes) "
                        "holds no other; release a batch before asking for the next",
                        l->nslots, (unsigned long long)l->opt.memory_limit);
    return stk_fail(STK_EEXHAUSTED,
                    "loader: all %u batch buffers are lent out; release a batch before asking "
                    "for the next (or raise max_batches)",
                    l->nslots);
}


/* ------------------------------------------------------------------------ */
/* Profile and autotune                                                      */
/* ------------------------------------------------------------------------ */

/* Worker counters summed: read, decode, augment, collate ticks; busy ticks.
 * Relaxed loads: each is a running total written by its worker. */
static void worker_sums(const stk_loader *l, uint64_t ticks[4], uint64_t *busy)
{
    ticks[0] = ticks[1] = ticks[2] = ticks[3] = 0;
    uint64_t b = 0;
    for (uint32_t i = 0; i < l->threads_max; i++) {
        worker *w = &l->workers[i];
        ticks[0] += atomic_load_explicit(&w->read_ticks, memory_order_relaxed);
        ticks[1] += atomic_load_explicit(&w->decode_ticks, memory_order_relaxed);
        ticks[2] += atomic_load_explicit(&w->augment_ticks, memory_order_relaxed);
        ticks[3] += atomic_load_explicit(&w->collate_ticks, memory_order_relaxed);
        b += atomic_load_explicit(&w->busy_ticks, memory_order_relaxed);
    }
    if (busy)
        *busy = b;
}

/* CPU seconds the worker threads have used, from their thread CPU clocks
 * (read here, once a window, rather than by the workers on every chunk).
 * Caller holds mu (`started` is guarded by it). */
static double workers_cpu_locked(const stk_loader *l)
{
    double sum = 0;
    for (uint32_t i = 0; i < l->threads_max; i++) {
        clockid_t id;
        struct timespec ts;
        if (l->workers[i].started && pthread_getcpuclockid(l->workers[i].thread, &id) == 0 &&
            clock_gettime(id, &ts) == 0)
            sum += (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    }
    return sum;
}

/* Start a profile window now. Caller holds mu. */
static void window_reset_locked(stk_loader *l)
{
    l->nevents = 0;
    l->win_start = stk_now();
    l->win_batches = l->win_samples = 0;
    l->win_wait = l->win_step = l->win_ready = 0;
    worker_sums(l, l->win_ticks, &l->win_busy);
}

/* A decision of the tuner: kept in the ring, printed under STOKER_LOG=debug.
 * Caller holds mu. */
__attribute__((format(printf, 2, 3))) static void decide_locked(stk_loader *l, const char *fmt,
                                                                 ...)
{
    char *text = l->decision_text[l->decisions % DECISION_RING];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof l->decision_text[0], fmt, ap);
    va_end(ap);
    l->decisions++;
    if (l->log_debug)
        fprintf(stderr, "stoker: autotune: %s\n", text);
}

static void set_active_locked(stk_loader *l, uint32_t n)
{
    l->active = n;
    pthread_cond_broadcast(&l->park_cv); /* more may claim */
    pthread_cond_broadcast(&l->work_cv); /* fewer: the surplus parks */
}

/* Prefetch n, allocating the slots it needs (n + 1, within max_batches and
 * memory_limit). Returns 0, or a negative code with nothing changed. Caller
 * holds mu. */
static int set_prefetch_locked(stk_loader *l, uint32_t n)
{
    if (l->started)
        while (l->nslots < n + 1) {
            if (l->nslots >= l->opt.max_batches || !memory_fits_locked(l, l->batch_bytes))
                return stk_fail(STK_EINVAL,
                                "loader: prefetch %u needs %u batch buffers; max_batches (%u) or "
                                "memory_limit (%llu bytes) allows %u",
                                n, n + 1, l->opt.max_batches,
                                (unsigned long long)l->opt.memory_limit, l->nslots);
            int rc = slot_alloc(l, &l->slots[l->nslots]);
            if (rc < 0)
                return rc;
            l->nslots++;
        }
    l->prefetch = n;
    pthread_cond_broadcast(&l->work_cv);
    return 0;
}

static void tune_snapshot(const stk_loader *l, double now, tune_sample *t)
{
    uint64_t ticks[4];
    t->t = now;
    t->batches = l->batches_delivered;
    t->samples = l->samples_delivered;
    t->wait_s = l->wait_s;
    t->step_s = l->step_s;
    worker_sums(l, ticks, &t->busy_ticks);
    t->workers_cpu_s = workers_cpu_locked(l);
    t->process_cpu_s = stk_process_cpu_s();
}

/* Moves the tuner knows; index into block_until/block_len. */
static const char *const move_names[] = {"none", "one thread more", "one thread fewer",
                                         "prefetch one deeper"};

/*
 * The autotuner: one step per window of at least tune_period seconds and 8
 * batches, in the consumer's next() (no thread of its own). It measures the
 * window's delivered rate (samples/s), the consumer's data share, how busy
 * the active workers were, and the CPU the rest of the process used, then
 *  - judges the move it tried in the window before: an increase is kept if
 *    the rate rose by 4% (10% when the CPU is saturated: the training
 *    process keeps the CPU it uses unless taking it pays) or the data share
 *    halved at no loss of rate, a thread fewer if the rate held within 3%
 *    and the data share stayed under 3% (tried data-bound: if the rate did
 *    not drop); a move undone is not
 *    tried again for 4, 8, 16 ... 64 windows;
 *  - data-bound (share >= 3%): workers idle while the consumer waits asks
 *    for a deeper prefetch; busy workers time-sliced on a saturated CPU
 *    (under half a core each), for one thread fewer; else one thread more;
 *  - step-bound (share < 3%) for 3 windows in a row, with one worker fewer
 *    still loaded under 80%: one thread fewer, which leaves the training
 *    process the CPU it uses.
 * Nothing it does changes a batch: rows depend on (seed, epoch, index) only.
 * Caller holds mu.
 */
static void tune_locked(stk_loader *l, double now)
{
    if (!l->auto_threads && !l->auto_prefetch)
        return;
    tune_sample *prev = &l->tune_prev;
    if (prev->t == 0) {
        tune_snapshot(l, now, prev);
        return;
    }
    if (now - prev->t < l->tune_period || l->batches_delivered - prev->batches < 8)
        return;
    tune_sample cur;
    tune_snapshot(l, now, &cur);
    double dt = cur.t - prev->t;
    double wait = cur.wait_s - prev->wait_s, step = cur.step_s - prev->step_s;
    double share = wait + step > 0 ? wait / (wait + step) : 0;
    double rate = (double)(cur.samples - prev->samples) / dt;
    double tick = 1.0 / stk_ticks_per_second();
    double busy = (double)(cur.busy_ticks - prev->busy_ticks) * tick / ((double)l->active * dt);
    double workers_cores = (cur.workers_cpu_s - prev->workers_cpu_s) / dt;
    double others = (cur.process_cpu_s - prev->process_cpu_s) / dt - workers_cores;
    if (others < 0)
        others = 0;
    double cpus = stk_cpu_available();
    /* The CPU is saturated: workers and the rest of the process use 90% of
     * what there is (threads blocked on storage leave it unsaturated). */
    bool saturated = workers_cores + others >= 0.9 * cpus;
    *prev = cur;
    l->windows++;
    if (l->windows == 1)
        return; /* the first window fills the pipeline: not judged */

    if (l->move != MOVE_NONE) {
        tune_move m = l->move;
        bool keep;
        if (m == MOVE_THREAD_DOWN) /* (tried data-bound: the rate must not drop) */
            keep = l->move_share >= 0.03 ? rate >= l->move_rate
                                         : rate >= l->move_rate * 0.97 && share < 0.03;
        else if (m == MOVE_PREFETCH_UP)
            keep = rate >= l->move_rate * 1.02 || share <= l->move_share * 0.8;
        else /* an increase: the rate rose, or the wait halved at no loss */
            keep = rate >= l->move_rate * (saturated ? 1.10 : 1.04) ||
                   (share < 0.5 * l->move_share && rate >= l->move_rate);
        if (keep) {
            l->block_len[m] = 4;
            decide_locked(l, "kept %s: %.0f -> %.0f samples/s, data share %.1f%% -> %.1f%% "
                             "(threads %u, prefetch %u)",
                          move_names[m], l->move_rate, rate, l->move_share * 100, share * 100,
                          l->active, l->prefetch);
        } else {
            if (m == MOVE_THREAD_UP)
                set_active_locked(l, l->active - 1);
            else if (m == MOVE_THREAD_DOWN)
                set_active_locked(l, l->active + 1);
            else
                l->prefetch--; /* the extra slot stays in the pool for later */
            l->block_until[m] = l->windows + l->block_len[m];
            if (l->block_len[m] < 64)
                l->block_len[m] *= 2;
            decide_locked(l, "undid %s: %.0f -> %.0f samples/s, data share %.1f%% -> %.1f%% "
                             "(threads %u, prefetch %u)",
                          move_names[m], l->move_rate, rate, l->move_share * 100, share * 100,
                          l->active, l->prefetch);
        }
        l->move = MOVE_NONE;
        return;
    }

    tune_move m = MOVE_NONE;
    if (share >= 0.03) {
        l->quiet_windows = 0;
        uint64_t per_worker = 0;
        for (uint32_t i = 0; i < l->active; i++)
            per_worker += atomic_load_explicit(&l->workers[i].scratch_bytes, memory_order_relaxed);
        per_worker /= l->active;
        if (l->auto_prefetch && busy < 0.85 && l->prefetch < l->prefetch_cap &&
            l->windows >= l->block_until[MOVE_PREFETCH_UP] &&
            (l->nslots > l->prefetch + 1 || memory_fits_locked(l, l->batch_bytes)))
            m = MOVE_PREFETCH_UP;
        else if (l->auto_threads && l->active > 1 && saturated &&
                 workers_cores < 0.5 * l->active && /* time-sliced: under half a core each */
                 l->windows >= l->block_until[MOVE_THREAD_DOWN])
            m = MOVE_THREAD_DOWN; /* oversubscribed: does a thread fewer lose anything? */
        else if (l->auto_threads && l->active < l->threads_max &&
                 l->windows >= l->block_until[MOVE_THREAD_UP] &&
                 memory_fits_locked(l, per_worker))
            m = MOVE_THREAD_UP;
    } else {
        l->quiet_windows++;
        if (l->auto_threads && l->quiet_windows >= 3 && l->active > 1 &&
            busy * l->active < (l->active - 1) * 0.8 &&
            l->windows >= l->block_until[MOVE_THREAD_DOWN])
            m = MOVE_THREAD_DOWN;
    }
    if (m == MOVE_NONE)
        return;
    l->move = m;
    l->move_rate = rate;
    l->move_share = share;
    l->quiet_windows = 0;
    if (m == MOVE_THREAD_UP)
        set_active_locked(l, l->active + 1);
    else if (m == MOVE_THREAD_DOWN)
        set_active_locked(l, l->active - 1);
    else if (set_prefetch_locked(l, l->prefetch + 1) < 0) {
        l->move = MOVE_NONE; /* no room after all */
        return;
    }
    decide_locked(l, "trying %s: %.0f samples/s, data share %.1f%%, workers busy %.0f%%, "
                     "the rest of the process uses %.2f of %.2f cores (threads %u, prefetch %u)",
                  move_names[m], rate, share * 100, busy * 100, others, cpus, l->active,
                  l->prefetch);
}

/* The batch being lent: its record in the window, the consumer's totals and
 * a tuner step. `ready` is what was ready when the consumer asked. Caller
 * holds mu. */
static void record_lend_locked(stk_loader *l, uint32_t rows, uint32_t ready, double now)
{
    stk_loader_event *e = &l->events[l->nevents % EVENT_RING];
    e->t = now - l->created;
    e->wait_s = (float)l->wait_acc;
    e->step_s = (float)l->step_acc;
    e->ready = ready > UINT16_MAX ? UINT16_MAX : (uint16_t)ready;
    e->threads = l->active > UINT16_MAX ? UINT16_MAX : (uint16_t)l->active;
    e->prefetch = l->prefetch > UINT16_MAX ? UINT16_MAX : (uint16_t)l->prefetch;
    e->reserved16_ = 0;
    l->nevents++;
    l->win_batches++;
    l->win_samples += rows;
    l->win_wait += l->wait_acc;
    l->win_step += l->step_acc;
    l->win_ready += ready;
    l->step_s += l->step_acc;
    l->samples_delivered += rows;
    l->wait_acc = l->step_acc = 0;
    tune_locked(l, now);
}

static void lend_locked(stk_loader *l, slot *s, stk_batch *b)
{
    s->state = SLOT_LENT;
    s->ticket++;
    l->pending--;
    l->deliver_seq++;
    l->cons_pos++;
    l->batches_delivered++;
    l->skipped_delivered += s->nfails;
    pthread_cond_broadcast(&l->work_cv); /* prefetch budget freed */

    uint32_t n = (s->rows - s->skipped) * l->views;
    memset(b, 0, sizeof *b);
    b->data = s->data;
    b->labels = s->labels;
    b->indices = s->indices;
    b->size = n;
    b->ndim = 4;
    b->shape[0] = n;
    b->shape[1] = l->sample_shape[0];
    b->shape[2] = l->sample_shape[1];
    b->shape[3] = l->sample_shape[2];
    b->dtype = l->dtype;
    b->layout = l->layout;
    b->sample_bytes = l->sample_bytes;
    b->epoch = s->epoch;
    b->position = s->position;
    b->skipped = s->nfails;
    b->handle = batch_handle(s->ticket, (uint32_t)(s - l->slots));
    if (l->gpipe) {
        b->data = (void *)(uintptr_t)s->gb.d_out;
        b->device_type = stk_gpu_emulated(l->gpu) ? STK_DEVICE_HOST : STK_DEVICE_CUDA;
        b->device_id = stk_gpu_ordinal(l->gpu);
        b->stream = s->gb.stream;
        b->event = s->gb.event;
        s->gb.consumer_known = 0;
    }
}

/* What a lent batch of slot s has in `data`. */
static const void *slot_lent_data(const stk_loader *l, const slot *s)
{
    return l->gpipe ? (const void *)(uintptr_t)s->gb.d_out : (const void *)s->data;
}

int stk_loader_next(stk_loader *l, stk_batch *batch)
{
    return stk_loader_next_timeout(l, batch, -1);
}

int stk_loader_next_timeout(stk_loader *l, stk_batch *batch, int64_t timeout_ms)
{
    if (!l || !batch)
        return stk_fail(STK_EINVAL, "stk_loader_next: NULL argument");
    int rc;
    double t_in = stk_now(); /* the wait includes a lazy start */
    if ((rc = stk_loader_start(l)) < 0) /* lazy: the first call starts the workers */
        return rc;
    struct timespec deadline = {0};
    if (timeout_ms >= 0) {
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&l->mu);
    if (l->have_last) { /* the consumer's step since the last batch ends here */
        l->step_acc += t_in - l->last_exit;
        l->have_last = false;
    }
    uint32_t ready = 0;
    for (uint32_t i = 0; i < l->nslots; i++)
        ready += l->slots[i].state == SLOT_READY && !l->slots[i].cancelled;
    bool lent = false;
    for (;;) {
        if (l->interrupted) {
            l->interrupted = false;
            rc = stk_fail(STK_EINTR, "loader: interrupted");
            break;
        }
        if (l->stopping) {
            rc = stk_fail(STK_ESTOPPED, "loader: stopped");
            break;
        }
        if (l->failed) {
            stk_errmsg_set(l->error.msg);
            rc = l->error.code;
            break;
        }
        if (l->cons_pos == epoch_batches_locked(l, l->cons_epoch)) {
            /* End of epoch: say so once, then carry on with the next one
             * (whose batches may already be filling). */
            l->cons_epoch++;
            l->cons_pos = 0;
            rc = 0;
            break;
        }
        slot *s = find_seq_locked(l, l->deliver_seq);
        if (s && s->state == SLOT_READY) {
            lend_locked(l, s, batch);
            rc = 1;
            lent = true;
            break;
        }
        if (!s && (rc = starved_locked(l)) < 0)
            break;
        int wrc = 0;
        if (timeout_ms >= 0)
            wrc = pthread_cond_timedwait(&l->ready_cv, &l->mu, &deadline);
        else
            pthread_cond_wait(&l->ready_cv, &l->mu);
        if (wrc == ETIMEDOUT) {
            rc = stk_fail(STK_ETIMEDOUT, "loader: no batch within %lld ms", (long long)timeout_ms);
            break;
        }
    }
    /* The whole call is the consumer's wait: what a timer around next()
     * would see, lock and all. */
    double now = stk_now();
    l->wait_s += now - t_in;
    l->wait_acc += now - t_in;
    if (lent) {
        record_lend_locked(l, batch->size, ready, now);
        l->have_last = true;
    } else if (rc < 0) {
        l->have_last = true; /* a timeout or interrupt: the loop goes on from here */
    } /* the end of an epoch: the gap until the next call is not a step */
    if (l->have_last)
        l->last_exit = now;
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int stk_loader_release(stk_loader *l, stk_batch *b)
{
    if (!l || !b)
        return stk_fail(STK_EINVAL, "stk_loader_release: NULL argument");
    int rc = 0;
    pthread_mutex_lock(&l->mu);
    uint32_t index = (uint32_t)(b->handle & HANDLE_SLOT_MASK);
    slot *s = index < l->nslots ? &l->slots[index] : NULL;
    if (!s || s->state != SLOT_LENT || batch_handle(s->ticket, index) != b->handle ||
        slot_lent_data(l, s) != b->data) {
        rc = stk_fail(STK_ESTATE, "stk_loader_release: this batch is not lent (released twice?)");
    } else {
        /* The device buffer is rewritten only after the consumer's stream
         * passes this point (stk_gpu_batch_submit waits for it there). */
        if (l->gpipe && s->gb.consumer_known &&
            stk_gpu_event_record(l->gpu, s->gb.release_event, s->gb.consumer_stream) == 0)
            s->gb.release_pending = 1;
        s->state = SLOT_FREE;
        pthread_cond_broadcast(&l->work_cv);
        pthread_cond_broadcast(&l->ready_cv);
    }
    pthread_mutex_unlock(&l->mu);
    b->data = NULL;
    return rc;
}

int stk_loader_batch_wait(const stk_loader *l, const stk_batch *b, uint64_t stream)
{
    if (!l || !b)
        return stk_fail(STK_EINVAL, "stk_loader_batch_wait: NULL argument");
    stk_loader *ml = (stk_loader *)l; /* the lock and the slot's consumer stream */
    int rc = 0;
    pthread_mutex_lock(&ml->mu);
    uint32_t index = (uint32_t)(b->handle & HANDLE_SLOT_MASK);
    slot *s = index < ml->nslots ? &ml->slots[index] : NULL;
    if (!s || s->state != SLOT_LENT || batch_handle(s->ticket, index) != b->handle ||
        slot_lent_data(ml, s) != b->data) {
        rc = stk_fail(STK_EINVAL, "stk_loader_batch_wait: this batch is not lent by this loader");
    } else if (ml->gpipe) {
        rc = stk_gpu_stream_wait_event(ml->gpu, stream, s->gb.event);
        if (rc == 0) {
            s->gb.consumer_stream = stream;
            s->gb.consumer_known = 1;
        }
    }
    pthread_mutex_unlock(&ml->mu);
    return rc;
}

uint32_t stk_loader_field_count(const stk_loader *l)
{
    return l ? l->lf->n : 0;
}

int stk_loader_skipped(const stk_loader *l, const stk_batch *b, uint32_t i, uint64_t *index,
                       const char **reason)
{
    if (!l || !b)
        return stk_fail(STK_EINVAL, "stk_loader_skipped: NULL argument");
    stk_loader *ml = (stk_loader *)l; /* the lock only */
    pthread_mutex_lock(&ml->mu);
    uint32_t slot_index = (uint32_t)(b->handle & HANDLE_SLOT_MASK);
    const slot *s = slot_index < l->nslots ? &l->slots[slot_index] : NULL;
    if (!s || s->state != SLOT_LENT || batch_handle(s->ticket, slot_index) != b->handle ||
        slot_lent_data(l, s) != b->data)
        s = NULL;
    pthread_mutex_unlock(&ml->mu);
    if (!s)
        return stk_fail(STK_EINVAL, "stk_loader_skipped: this batch is not lent by this loader");
    /* The list is written before the slot is READY and stays until the
     * slot is claimed again, which a lent slot is not: no lock needed. */
    if (i >= s->nfails)
        return stk_fail(STK_EINVAL, "stk_loader_skipped: entry %u of %u", i, s->nfails);
    if (index)
        *index = s->fails[i].index;
    if (reason)
        *reason = s->fails[i].msg ? s->fails[i].msg : "the sample is corrupt";
    return 0;
}

int stk_loader_field(const stk_loader *l, const stk_batch *b, uint32_t i, stk_batch_field *out)
{
    if (!l || !out)
        return stk_fail(STK_EINVAL, "stk_loader_field: NULL argument");
    if (i >= l->lf->n)
        return stk_fail(STK_EINVAL, "stk_loader_field: field %u of %u", i, l->lf->n);
    const stk_lfield *f = &l->lf->f[i];
    const slot *s = NULL;
    if (b) {
        stk_loader *ml = (stk_loader *)l; /* the lock only */
        pthread_mutex_lock(&ml->mu);
        uint32_t index = (uint32_t)(b->handle & HANDLE_SLOT_MASK);
        s = index < l->nslots ? &l->slots[index] : NULL;
        if (!s || s->state != SLOT_LENT || batch_handle(s->ticket, index) != b->handle ||
            slot_lent_data(l, s) != b->data)
            s = NULL;
        pthread_mutex_unlock(&ml->mu);
        if (!s)
            return stk_fail(STK_EINVAL, "stk_loader_field: this batch is not lent by this loader");
    }
    uint32_t rows = b ? b->size : 0;
    if (f->role >= STK_ROLE_PATH) {
        stk_lfields_describe(l->lf, i, s ? s->fields : NULL, rows, out);
        return 0;
    }
    memset(out, 0, sizeof *out);
    out->name = f->name;
    out->role = (stk_field_role)f->role;
    out->shape[0] = rows;
    out->ndim = 1;
    if (f->role == STK_ROLE_IMAGE) {
        out->elem = (stk_elem_type)l->dtype;
        out->ndim = 4;
        for (int d = 0; d < 3; d++)
            out->shape[1 + d] = l->sample_shape[d];
        out->data = b ? b->data : NULL;
        out->bytes = (size_t)rows * l->sample_bytes;
    } else if (f->role == STK_ROLE_LABEL) {
        out->elem = STK_ELEM_I64;
        out->data = b ? (const void *)b->labels : NULL;
        out->bytes = (size_t)rows * sizeof(int64_t);
    } else {
        out->elem = STK_ELEM_U64;
        out->data = b ? (const void *)b->indices : NULL;
        out->bytes = (size_t)rows * sizeof(uint64_t);
    }
    return 0;
}

void stk_loader_interrupt(stk_loader *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->interrupted = true;
    pthread_cond_broadcast(&l->ready_cv);
    pthread_mutex_unlock(&l->mu);
}

int stk_loader_set_epoch(stk_loader *l, uint64_t epoch)
{
    if (!l)
        return stk_fail(STK_EINVAL, "stk_loader_set_epoch: loader is NULL");
    pthread_mutex_lock(&l->mu);
    if (l->cons_pos == epoch_batches_locked(l, l->cons_epoch) && l->cons_epoch + 1 == epoch &&
        !l->failed) {
        /* Finished the previous epoch without reading its end: the next
         * epoch's batches are exactly what is prefetched. */
        l->cons_epoch = epoch;
        l->cons_pos = 0;
    } else if (!(l->cons_epoch == epoch && l->cons_pos == 0 && !l->failed &&
                 !(l->base_start && l->base_epoch == epoch))) {
        /* (the start of a partial epoch is not the start of the epoch) */
        reset_locked(l, epoch, 0, 0);
    }
    l->interrupted = false;
    pthread_mutex_unlock(&l->mu);
    return 0;
}

uint64_t stk_loader_length(const stk_loader *l)
{
    stk_loader *ml = (stk_loader *)l; /* the mutex is not part of the value */
    pthread_mutex_lock(&ml->mu);
    uint64_t n = epoch_batches_locked(l, l->cons_epoch);
    pthread_mutex_unlock(&ml->mu);
    return n;
}

void stk_loader_sample_shape(const stk_loader *l, int64_t shape[3], stk_dtype *dtype,
                             stk_layout *layout, size_t *sample_bytes)
{
    if (shape)
        memcpy(shape, l->sample_shape, sizeof l->sample_shape);
    if (dtype)
        *dtype = l->dtype;
    if (layout)
        *layout = l->layout;
    if (sample_bytes)
        *sample_bytes = l->sample_bytes;
}

static int32_t state_flags(const stk_loader *l)
{
    return (l->opt.shuffle == STK_SHUFFLE_NONE ? 1 : 0) | (l->opt.drop_last ? 2 : 0) |
           (l->opt.shuffle == STK_SHUFFLE_BLOCK ? 4 : 0);
}

/* The settings of one side of a state mismatch that differ from the other
 * side's, in words: "seed 3, drop_last=True, shuffle=block (64 x 16)". */
static void state_words(char *out, size_t cap, uint64_t seed, uint64_t size, int32_t flags,
                        uint64_t bs, uint64_t win, uint64_t o_seed, uint64_t o_size,
                        int32_t o_flags, uint64_t o_bs, uint64_t o_win)
{
    size_t n = 0;
    out[0] = 0;
#define STATE_ADD(...)                                                                         \
    do {                                                                                       \
        if (n < cap)                                                                           \
            n += (size_t)snprintf(out + n, cap - n, "%s", n ? ", " : "");                      \
        if (n < cap)                                                                           \
            n += (size_t)snprintf(out + n, cap - n, __VA_ARGS__);                              \
    } while (0)
    if (seed != o_seed)
        STATE_ADD("seed %llu", (unsigned long long)seed);
    if (size != o_size)
        STATE_ADD("%llu samples", (unsigned long long)size);
    if ((flags & 2) != (o_flags & 2))
        STATE_ADD("drop_last=%s", flags & 2 ? "True" : "False");
    if ((flags & 5) != (o_flags & 5) || bs != o_bs || win != o_win) {
        if (flags & 4)
            STATE_ADD("shuffle=block (block_size %llu, shuffle_window %llu)",
                      (unsigned long long)bs, (unsigned long long)win);
        else
            STATE_ADD("shuffle=%s", flags & 1 ? "none" : "global");
    }
#undef STATE_ADD
}

void stk_loader_state_get(const stk_loader *l, stk_loader_state *st)
{
    stk_loader *ml = (stk_loader *)l; /* the mutex is not part of the value */
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&ml->mu);
    st->epoch = l->cons_epoch;
    st->position = l->cons_pos;
    st->start_slot = l->base_start && l->cons_epoch == l->base_epoch ? l->base_start : 0;
    pthread_mutex_unlock(&ml->mu);
    st->seed = l->opt.seed;
    st->dataset_size = l->ds->count;
    st->batch_size = l->opt.batch_size;
    st->rank = l->opt.rank;
    st->world_size = l->opt.world_size;
    st->flags = state_flags(l);
    st->spec_hash = l->spec_hash;
    if (l->opt.shuffle == STK_SHUFFLE_BLOCK) {
        st->block_size = l->opt.block_size;
        st->shuffle_window = l->opt.shuffle_window;
    }
}

int stk_loader_state_set(stk_loader *l, const stk_loader_state *st)
{
    if (!l || !st)
        return stk_fail(STK_EINVAL, "stk_loader_state_set: NULL argument");
    int rc = stk_reserved_check(st->reserved_, sizeof st->reserved_ / sizeof st->reserved_[0],
                                "stk_loader_state");
    if (rc < 0)
        return rc;
    if (st->spec_hash != l->spec_hash)
        return stk_fail(STK_EINVAL, "loader state was saved with another pipeline spec or "
                                    "sampling options (indices, weights, class balance, "
                                    "num_samples, aug_seed, views) (hash %016llx, this "
                                    "loader's is %016llx)",
                        (unsigned long long)st->spec_hash, (unsigned long long)l->spec_hash);
    uint64_t bs = l->opt.shuffle == STK_SHUFFLE_BLOCK ? l->opt.block_size : 0;
    uint64_t win = l->opt.shuffle == STK_SHUFFLE_BLOCK ? l->opt.shuffle_window : 0;
    if (st->seed != l->opt.seed || st->dataset_size != l->ds->count ||
        st->flags != state_flags(l) || st->block_size != bs || st->shuffle_window != win) {
        /* Name the settings that differ, in words (not "flags 0 / flags 2"). */
        char saved[256], mine[256];
        int32_t lf = state_flags(l);
        state_words(saved, sizeof saved, st->seed, st->dataset_size, st->flags,
                    st->block_size, st->shuffle_window, l->opt.seed, l->ds->count, lf, bs, win);
        state_words(mine, sizeof mine, l->opt.seed, l->ds->count, lf, bs, win, st->seed,
                    st->dataset_size, st->flags, st->block_size, st->shuffle_window);
        return stk_fail(STK_EINVAL,
                        "loader state does not match this loader: the state was saved with %s; "
                        "this loader has %s",
                        saved, mine);
    }
    if (st->world_size == 0 || st->batch_size == 0 || st->rank >= st->world_size)
        return stk_fail(STK_EINVAL, "loader state: rank %u, world size %u, batch size %u is not "
                                    "a layout",
                        st->rank, st->world_size, st->batch_size);
    /* The epoch's list: the dataset, or what the sampling options make of it
     * (the same for the state's job: the spec hash covers them). */
    if (st->start_slot >= l->list_size)
        return stk_fail(STK_EINVAL, "loader state: start slot %llu is not below the %s %llu",
                        (unsigned long long)st->start_slot,
                        l->list_size == st->dataset_size ? "dataset size" : "epoch's list size",
                        (unsigned long long)l->list_size);
    /* The epoch's batches in the state's own layout. */
    uint64_t span = stk_sampler_span(l->list_size, st->world_size, st->batch_size,
                                     l->opt.drop_last, st->start_slot);
    uint64_t batches = (span + st->batch_size - 1) / st->batch_size;
    if (st->position > batches)
        return stk_fail(STK_EINVAL, "loader state: position %llu is past the epoch's %llu batches",
                        (unsigned long long)st->position, (unsigned long long)batches);
    bool same_layout = st->world_size == l->opt.world_size && st->batch_size == l->opt.batch_size;
    pthread_mutex_lock(&l->mu);
    if (st->position == batches) {
        /* At the end, before next() reported it: fill from the next epoch
         * (full, in this loader's layout). */
        reset_locked(l, st->epoch + 1, 0, 0);
        l->cons_epoch = st->epoch;
        l->cons_pos = l->per_epoch;
    } else if (same_layout) {
        reset_locked(l, st->epoch, st->position, st->start_slot);
    } else {
        /* Another layout: its ranks, in lockstep, consumed the global slots
         * [0, S) of the epoch's list; continue from S in this layout. S < N
         * because position < batches. */
        uint64_t consumed = st->start_slot + st->position * st->batch_size * st->world_size;
        reset_locked(l, st->epoch, 0, consumed);
    }
    pthread_mutex_unlock(&l->mu);
    return 0;
}

void stk_loader_stats_get(const stk_loader *l, stk_loader_stats *st)
{
    stk_loader *ml = (stk_loader *)l;
    memset(st, 0, sizeof *st);
    double tick = 1.0 / stk_ticks_per_second();
    uint64_t ticks[4];
    worker_sums(l, ticks, NULL);
    for (uint32_t i = 0; i < l->threads_max; i++) {
        worker *w = &ml->workers[i];
        st->samples += atomic_load_explicit(&w->samples, memory_order_relaxed);
        st->idle_s += atomic_load_explicit(&w->idle_s, memory_order_relaxed);
    }
    st->read_s = (double)ticks[0] * tick;
    st->decode_s = (double)ticks[1] * tick;
    st->augment_s = (double)ticks[2] * tick;
    st->collate_s = (double)ticks[3] * tick;
    pthread_mutex_lock(&ml->mu);
    st->batches = l->batches_delivered;
    st->skipped = l->skipped_delivered;
    st->wait_s = l->wait_s;
    st->step_s = l->step_s + l->step_acc;
    st->batches_allocated = l->nslots;
    st->pool_exhausted = l->pool_exhausted;
    st->memory_bytes = memory_locked(l);
    st->gpu_head_rows = atomic_load_explicit(&l->gpu_head_rows, memory_order_relaxed);
    uint64_t cpu_rows = atomic_load_explicit(&l->gpu_decode_cpu_rows, memory_order_relaxed);
    st->gpu_decode_cpu_rows = cpu_rows > UINT32_MAX ? UINT32_MAX : (uint32_t)cpu_rows;
    st->threads = l->active;
    st->prefetch = l->prefetch;
    st->decisions = l->decisions;
    st->max_batches = l->opt.max_batches;
    pthread_mutex_unlock(&ml->mu);
    st->pool_bytes =
        (uint64_t)st->batches_allocated * l->opt.batch_size * l->views * l->sample_bytes;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The q-quantile (nearest rank) of n sorted values. */
static double quantile(const float *v, size_t n, double q)
{
    if (!n)
        return 0;
    size_t k = (size_t)ceil(q * (double)n);
    return v[k ? k - 1 : 0];
}

static const char *const stage_names[] = {"none", "read", "decode", "augment", "collate",
                                          "prefetch"};
static const char *const bound_names[] = {"unknown", "step", "data"};

const char *stk_stage_name(int stage)
{
    return stage >= 0 && stage <= STK_STAGE_PREFETCH ? stage_names[stage] : "none";
}

const char *stk_bound_name(int bound)
{
    return bound >= 0 && bound <= STK_BOUND_DATA ? bound_names[bound] : "unknown";
}

static const char *const stage_help[] = {
    "",
    "pack into .stk shards, or check storage with stoker doctor",
    /* (not "pack with --restart": these may be packed so already; the
     * doctor times what each rewrite would give on the files themselves) */
    ("more cores, or stoker doctor to time restart markers and smaller re-encodes on "
     "these files"),
    "more cores, cheaper ops or a smaller output dtype",
    "fewer damaged samples",
    "a deeper prefetch (or prefetch auto)",
};

void stk_loader_profile_get(const stk_loader *l, stk_loader_profile *p)
{
    stk_loader *ml = (stk_loader *)l;
    float *w = malloc(2 * EVENT_RING * sizeof *w);
    float *st = w ? w + EVENT_RING : NULL;
    memset(p, 0, sizeof *p);
    uint64_t ticks[4], busy;
    double threads_sum = 0;
    size_t n = 0;
    pthread_mutex_lock(&ml->mu);
    double now = stk_now();
    worker_sums(l, ticks, &busy);
    p->batches = l->win_batches;
    p->samples = l->win_samples;
    p->wait_s = l->win_wait;
    /* Steps taken but not yet paid by a batch: the one after the last batch
     * of an epoch, and the one in progress. */
    p->step_s = l->win_step + l->step_acc + (l->have_last ? now - l->last_exit : 0);
    p->queue_mean = l->win_batches ? l->win_ready / (double)l->win_batches : 0;
    n = l->nevents < EVENT_RING ? (size_t)l->nevents : EVENT_RING;
    for (size_t i = 0; i < n; i++) {
        const stk_loader_event *e = &l->events[(l->nevents - n + i) % EVENT_RING];
        if (w) {
            w[i] = e->wait_s;
            st[i] = e->step_s;
        }
        threads_sum += e->threads;
    }
    double span = now - l->win_start;
    p->read_s = (double)(ticks[0] - l->win_ticks[0]) / stk_ticks_per_second();
    p->decode_s = (double)(ticks[1] - l->win_ticks[1]) / stk_ticks_per_second();
    p->augment_s = (double)(ticks[2] - l->win_ticks[2]) / stk_ticks_per_second();
    p->collate_s = (double)(ticks[3] - l->win_ticks[3]) / stk_ticks_per_second();
    double busy_s = (double)(busy - l->win_busy) / stk_ticks_per_second();
    p->threads = l->active;
    p->prefetch = l->prefetch;
    bool tuned = l->auto_prefetch && l->prefetch < l->prefetch_cap;
    pthread_mutex_unlock(&ml->mu);

    double mean_threads = n ? threads_sum / (double)n : p->threads;
    p->busy = span > 0 && mean_threads > 0 ? busy_s / (mean_threads * span) : 0;
    if (p->busy > 1)
        p->busy = 1;
    p->wall_s = p->wait_s + p->step_s;
    p->data_share = p->wall_s > 0 ? p->wait_s / p->wall_s : 0;
    p->images_per_s = p->wall_s > 0 ? (double)p->samples / p->wall_s : 0;
    p->cpus = stk_cpu_available();
    if (w && n) {
        qsort(w, n, sizeof *w, cmp_float);
        qsort(st, n, sizeof *st, cmp_float);
        p->wait_p50_s = quantile(w, n, 0.5);
        p->wait_p90_s = quantile(w, n, 0.9);
        p->wait_p99_s = quantile(w, n, 0.99);
        p->wait_max_s = w[n - 1];
        p->step_p50_s = quantile(st, n, 0.5);
        p->step_p90_s = quantile(st, n, 0.9);
        p->step_p99_s = quantile(st, n, 0.99);
    }
    free(w);

    double stages[5] = {0, p->read_s, p->decode_s, p->augment_s, p->collate_s};
    double work = stages[1] + stages[2] + stages[3] + stages[4];
    int largest = STK_STAGE_NONE;
    for (int k = 1; k <= 4; k++)
        if (stages[k] > 0 && (largest == STK_STAGE_NONE || stages[k] > stages[largest]))
            largest = k;
    char split[128] = "";
    if (work > 0)
        snprintf(split, sizeof split, "read %.0f%%, decode %.0f%%, augment %.0f%%%s",
                 100 * stages[1] / work, 100 * stages[2] / work, 100 * stages[3] / work,
                 stages[4] > 0.005 * work ? ", collate >0.5%" : "");
    if (p->batches < 2) {
        p->bound = STK_BOUND_UNKNOWN;
        snprintf(p->verdict, sizeof p->verdict, "not enough batches measured yet (%llu)",
                 (unsigned long long)p->batches);
    } else if (p->data_share >= 0.05) {
        p->bound = STK_BOUND_DATA;
        p->stage = p->busy < 0.85 ? STK_STAGE_PREFETCH : largest;
        if (p->stage == STK_STAGE_PREFETCH)
            snprintf(p->verdict, sizeof p->verdict,
                     "data-bound: the loop waits %.0f%% of the time while %u worker%s idle "
                     "%.0f%% (prefetch %u); try %s",
                     100 * p->data_share, p->threads, p->threads == 1 ? " is" : "s are",
                     100 * (1 - p->busy), p->prefetch,
                     tuned ? "nothing: the autotuner deepens prefetch while this lasts"
                           : stage_help[STK_STAGE_PREFETCH]);
        else
            snprintf(p->verdict, sizeof p->verdict,
                     "data-bound: the loop waits %.0f%% of the time; %s limits (%s; %u "
                     "thread%s %.0f%% busy of %.1f cores); try %s",
                     100 * p->data_share, stage_names[p->stage], split, p->threads,
                     p->threads == 1 ? "" : "s", 100 * p->busy, p->cpus, stage_help[p->stage]);
    } else {
        p->bound = STK_BOUND_STEP;
        p->stage = largest;
        snprintf(p->verdict, sizeof p->verdict,
                 "step-bound: the loop waits %.1f%% of the time for data; %.1f batches were "
                 "ready on average, %u thread%s %.0f%% busy (%s)",
                 100 * p->data_share, p->queue_mean, p->threads, p->threads == 1 ? "" : "s",
                 100 * p->busy, work > 0 ? split : "no worker time");
    }
}

void stk_loader_profile_note(stk_loader *l, double asked_s, double handed_s)
{
    if (!l || !(handed_s > asked_s))
        return;
    pthread_mutex_lock(&l->mu);
    if (l->nevents && l->have_last && handed_s >= l->last_exit) {
        /* The binding's span = pre (before next(): counted in this batch's
         * step) + next()'s own wait + post (after: would be counted in the
         * next batch's step). Both move to the wait. */
        stk_loader_event *e = &l->events[(l->nevents - 1) % EVENT_RING];
        double post = handed_s - l->last_exit;
        double pre = (handed_s - asked_s) - e->wait_s - post;
        if (pre < 0)
            pre = 0;
        if (pre > e->step_s)
            pre = e->step_s;
        e->wait_s += (float)(pre + post);
        e->step_s -= (float)pre;
        l->win_wait += pre + post;
        l->wait_s += pre + post;
        l->win_step -= pre;
        l->step_s -= pre;
        l->last_exit = handed_s;
    }
    pthread_mutex_unlock(&l->mu);
}

void stk_loader_profile_reset(stk_loader *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    window_reset_locked(l);
    pthread_mutex_unlock(&l->mu);
}

size_t stk_loader_profile_events(const stk_loader *l, stk_loader_event *out, size_t cap)
{
    stk_loader *ml = (stk_loader *)l;
    if (!l || !out)
        return 0;
    pthread_mutex_lock(&ml->mu);
    size_t n = l->nevents < EVENT_RING ? (size_t)l->nevents : EVENT_RING;
    if (n > cap)
        n = cap;
    for (size_t i = 0; i < n; i++)
        out[i] = l->events[(l->nevents - n + i) % EVENT_RING];
    pthread_mutex_unlock(&ml->mu);
    return n;
}

int stk_loader_set_threads(stk_loader *l, uint32_t threads)
{
    if (!l)
        return stk_fail(STK_EINVAL, "stk_loader_set_threads: loader is NULL");
    if (threads < 1 || threads > l->threads_max)
        return stk_fail(STK_EINVAL, "loader: threads must be 1..%u for this loader (%s), not %u",
                        l->threads_max, l->auto_threads ? "the autotuner's cap" : "its threads",
                        threads);
    pthread_mutex_lock(&l->mu);
    l->auto_threads = false;
    if (l->move == MOVE_THREAD_UP || l->move == MOVE_THREAD_DOWN)
        l->move = MOVE_NONE;
    set_active_locked(l, threads);
    pthread_mutex_unlock(&l->mu);
    return 0;
}

int stk_loader_set_prefetch(stk_loader *l, uint32_t prefetch)
{
    if (!l)
        return stk_fail(STK_EINVAL, "stk_loader_set_prefetch: loader is NULL");
    if (prefetch < 1 || prefetch + 1 > l->opt.max_batches)
        return stk_fail(STK_EINVAL, "loader: prefetch must be 1..%u (max_batches %u - 1), not %u",
                        l->opt.max_batches - 1, l->opt.max_batches, prefetch);
    pthread_mutex_lock(&l->mu);
    int rc = set_prefetch_locked(l, prefetch);
    if (rc == 0) {
        l->auto_prefetch = false;
        if (l->move == MOVE_PREFETCH_UP)
            l->move = MOVE_NONE;
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int stk_loader_decision(const stk_loader *l, uint64_t n, char *buf, size_t size)
{
    stk_loader *ml = (stk_loader *)l;
    if (!l || (!buf && size))
        return stk_fail(STK_EINVAL, "stk_loader_decision: NULL argument");
    int rc;
    pthread_mutex_lock(&ml->mu);
    if (n >= l->decisions) {
        rc = 0;
    } else if (l->decisions - n > DECISION_RING) {
        rc = stk_fail(STK_ENOENT, "loader: decision %llu is older than the last %d kept",
                      (unsigned long long)n, DECISION_RING);
    } else {
        if (size)
            snprintf(buf, size, "%s", l->decision_text[n % DECISION_RING]);
        rc = 1;
    }
    pthread_mutex_unlock(&ml->mu);
    return rc;
}

const char *stk_loader_errmsg(const stk_loader *l)
{
    return l->error.msg; /* written under mu only while failing; see docs */
}
