/*
 * loader.c — the executor: worker threads fill pooled batch buffers, the
 * consumer borrows them in order.
 *
 * This file is the core: the slots, the workers and the consumer's side.
 * The rest of the loader is in loader_create.c (options, create, destroy),
 * loader_autotune.c, loader_profile.c (profile, statistics) and
 * loader_state.c (resume state), loader_params.c (the parameter table:
 * stk_loader_set / get); the struct and the functions they share are in
 * loader_internal.h.
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
#include "pipeline/loader_internal.h"

#include "core/error.h"
#include "core/rng.h"
#include "core/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* ------------------------------------------------------------------------ */
/* Slots                                                                     */
/* ------------------------------------------------------------------------ */

void stk_ld_slot_free_buffers(const stk_loader *l, slot *s)
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

int stk_ld_slot_alloc(stk_loader *l, slot *s)
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
            stk_ld_slot_free_buffers(l, s);
            return rc;
        }
    }
    if ((!s->data && !l->gpipe) || !s->labels || !s->indices || !s->row_ok || !s->row_msg) {
        stk_ld_slot_free_buffers(l, s);
        return stk_fail(STK_ENOMEM, "loader: out of memory allocating a %llu-byte batch buffer",
                        (unsigned long long)bytes);
    }
    s->state = SLOT_FREE;
    return 0;
}

/* Batches of `epoch` (the partial one or a full one). Caller holds mu. */
uint64_t stk_ld_epoch_batches_locked(const stk_loader *l, uint64_t epoch)
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
void stk_ld_reset_locked(stk_loader *l, uint64_t epoch, uint64_t pos, uint64_t start)
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

/* A worker leaves a cancelled slot (a reset while rows were being written
 * into it): the last one out frees it. Caller holds mu. */
static void cancelled_leave_locked(stk_loader *l, slot *s)
{
    if (s->active == 0) {
        s->cancelled = false;
        s->state = SLOT_FREE;
        pthread_cond_broadcast(&l->work_cv);
    }
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
            cancelled_leave_locked(l, s);
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
                    cancelled_leave_locked(l, s);
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
        if ((rc = stk_ld_slot_alloc(l, &l->slots[l->nslots])) < 0)
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

/* ------------------------------------------------------------------------ */
/* Consumer                                                                  */
/* ------------------------------------------------------------------------ */

/* Batch pool + the workers' scratch, now. Caller holds mu. */
uint64_t stk_ld_memory_locked(const stk_loader *l)
{
    uint64_t m = (uint64_t)l->nslots * l->batch_bytes;
    for (uint32_t i = 0; i < l->threads_max; i++)
        m += atomic_load_explicit(&l->workers[i].scratch_bytes, memory_order_relaxed);
    return m;
}

/* Would `more` bytes still fit memory_limit? Caller holds mu. */
bool stk_ld_memory_fits_locked(const stk_loader *l, uint64_t more)
{
    return !l->opt.memory_limit || stk_ld_memory_locked(l) + more <= l->opt.memory_limit;
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
    if (l->nslots < l->opt.max_batches && stk_ld_memory_fits_locked(l, l->batch_bytes)) {
        int rc = stk_ld_slot_alloc(l, &l->slots[l->nslots]);
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

/* The slot of batch b if this loader lent it and it is still lent (its
 * handle's ticket and its data match: a stale copy or a batch released
 * twice does not), else NULL. Caller holds mu. */
static slot *lent_slot_locked(const stk_loader *l, const stk_batch *b)
{
    uint32_t index = (uint32_t)(b->handle & HANDLE_SLOT_MASK);
    slot *s = index < l->nslots ? &l->slots[index] : NULL;
    if (!s || s->state != SLOT_LENT || batch_handle(s->ticket, index) != b->handle ||
        slot_lent_data(l, s) != b->data)
        return NULL;
    return s;
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
        if (l->cons_pos == stk_ld_epoch_batches_locked(l, l->cons_epoch)) {
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
        stk_ld_record_lend_locked(l, batch->size, ready, now);
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
    slot *s = lent_slot_locked(l, b);
    if (!s) {
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
    slot *s = lent_slot_locked(ml, b);
    if (!s) {
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
    const slot *s = lent_slot_locked(l, b);
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
        s = lent_slot_locked(l, b);
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

uint64_t stk_loader_length(const stk_loader *l)
{
    stk_loader *ml = (stk_loader *)l; /* the mutex is not part of the value */
    pthread_mutex_lock(&ml->mu);
    uint64_t n = stk_ld_epoch_batches_locked(l, l->cons_epoch);
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
const char *stk_loader_errmsg(const stk_loader *l)
{
    return l->error.msg; /* written under mu only while failing; see docs */
}
