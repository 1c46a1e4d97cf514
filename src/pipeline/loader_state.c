/*
 * loader_state.c — where a loader is in its job, and resuming it: the
 * resume state (stk_loader_state_get / state_set, docs/sampler.md) and
 * set_epoch.
 *
 * A state is the consumer's place (epoch, position, the start slot of a
 * partial epoch) and a fingerprint of the job (seed, dataset size, layout,
 * shuffle, a hash of the spec and of what else decides a row's content).
 * state_set checks the fingerprint, naming in words each setting that
 * differs (the table `mismatch_rows`), and moves the cursors
 * (stk_ld_reset_locked): the same layout continues where the state was;
 * another world size or batch size continues the epoch from the global
 * slot the state's ranks had reached, as a partial epoch.
 *
 * Locking: the cursors are guarded by mu; the fingerprint's fields are
 * immutable after create.
 */
#include "pipeline/loader_internal.h"

#include "core/error.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

int stk_loader_set_epoch(stk_loader *l, uint64_t epoch)
{
    if (!l)
        return stk_fail(STK_EINVAL, "stk_loader_set_epoch: loader is NULL");
    pthread_mutex_lock(&l->mu);
    if (l->cons_pos == stk_ld_epoch_batches_locked(l, l->cons_epoch) && l->cons_epoch + 1 == epoch &&
        !l->failed) {
        /* Finished the previous epoch without reading its end: the next
         * epoch's batches are exactly what is prefetched. */
        l->cons_epoch = epoch;
        l->cons_pos = 0;
    } else if (!(l->cons_epoch == epoch && l->cons_pos == 0 && !l->failed &&
                 !(l->base_start && l->base_epoch == epoch))) {
        /* (the start of a partial epoch is not the start of the epoch) */
        stk_ld_reset_locked(l, epoch, 0, 0);
    }
    l->interrupted = false;
    pthread_mutex_unlock(&l->mu);
    return 0;
}


static int32_t state_flags(const stk_loader *l)
{
    return (l->opt.shuffle == STK_SHUFFLE_NONE ? 1 : 0) | (l->opt.drop_last ? 2 : 0) |
           (l->opt.shuffle == STK_SHUFFLE_BLOCK ? 4 : 0);
}

/* What a state and a loader must agree on beyond the spec hash: the job's
 * fingerprint, as the state holds it. */
typedef struct job_print {
    uint64_t seed, size;      /* the order's seed, the dataset's size */
    int32_t flags;            /* stk_loader_state.flags */
    uint64_t block_size, window; /* block shuffle only (else 0) */
} job_print;

static bool seed_differs(const job_print *a, const job_print *b) { return a->seed != b->seed; }
static bool size_differs(const job_print *a, const job_print *b) { return a->size != b->size; }
static bool drop_differs(const job_print *a, const job_print *b)
{
    return (a->flags & 2) != (b->flags & 2);
}
static bool order_differs(const job_print *a, const job_print *b)
{
    return (a->flags & 5) != (b->flags & 5) || a->block_size != b->block_size ||
           a->window != b->window;
}

static int seed_say(char *out, size_t cap, const job_print *p)
{
    return snprintf(out, cap, "seed %llu", (unsigned long long)p->seed);
}
static int size_say(char *out, size_t cap, const job_print *p)
{
    return snprintf(out, cap, "%llu samples", (unsigned long long)p->size);
}
static int drop_say(char *out, size_t cap, const job_print *p)
{
    return snprintf(out, cap, "drop_last=%s", p->flags & 2 ? "True" : "False");
}
static int order_say(char *out, size_t cap, const job_print *p)
{
    if (p->flags & 4)
        return snprintf(out, cap, "shuffle=block (block_size %llu, shuffle_window %llu)",
                        (unsigned long long)p->block_size, (unsigned long long)p->window);
    return snprintf(out, cap, "shuffle=%s", p->flags & 1 ? "none" : "global");
}

/* One setting a state mismatch names: whether the two sides differ in it,
 * and how one side says it in words (not "flags 0 / flags 2"). In the order
 * the message lists them. */
static const struct mismatch_row {
    bool (*differs)(const job_print *a, const job_print *b);
    int (*say)(char *out, size_t cap, const job_print *p);
} mismatch_rows[] = {
    {seed_differs, seed_say},
    {size_differs, size_say},
    {drop_differs, drop_say},
    {order_differs, order_say},
};

/* The settings of side p that differ from side o's, in words, joined by
 * ", ": "seed 3, drop_last=True, shuffle=block (...)". */
static void state_words(char *out, size_t cap, const job_print *p, const job_print *o)
{
    size_t n = 0;
    out[0] = 0;
    for (size_t i = 0; i < sizeof mismatch_rows / sizeof mismatch_rows[0]; i++) {
        if (!mismatch_rows[i].differs(p, o))
            continue;
        if (n < cap)
            n += (size_t)snprintf(out + n, cap - n, "%s", n ? ", " : "");
        if (n < cap)
            n += (size_t)mismatch_rows[i].say(out + n, cap - n, p);
    }
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
    job_print saved_job = {st->seed, st->dataset_size, st->flags, st->block_size,
                           st->shuffle_window};
    job_print mine_job = {l->opt.seed, l->ds->count, state_flags(l),
                          l->opt.shuffle == STK_SHUFFLE_BLOCK ? l->opt.block_size : 0,
                          l->opt.shuffle == STK_SHUFFLE_BLOCK ? l->opt.shuffle_window : 0};
    if (saved_job.seed != mine_job.seed || saved_job.size != mine_job.size ||
        saved_job.flags != mine_job.flags || saved_job.block_size != mine_job.block_size ||
        saved_job.window != mine_job.window) {
        char saved[256], mine[256];
        state_words(saved, sizeof saved, &saved_job, &mine_job);
        state_words(mine, sizeof mine, &mine_job, &saved_job);
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
        stk_ld_reset_locked(l, st->epoch + 1, 0, 0);
        l->cons_epoch = st->epoch;
        l->cons_pos = l->per_epoch;
    } else if (same_layout) {
        stk_ld_reset_locked(l, st->epoch, st->position, st->start_slot);
    } else {
        /* Another layout: its ranks, in lockstep, consumed the global slots
         * [0, S) of the epoch's list; continue from S in this layout. S < N
         * because position < batches. */
        uint64_t consumed = st->start_slot + st->position * st->batch_size * st->world_size;
        stk_ld_reset_locked(l, st->epoch, 0, consumed);
    }
    pthread_mutex_unlock(&l->mu);
    return 0;
}

