/*
 * loader_profile.c — where the time goes: the statistics since creation
 * (stk_loader_stats_get) and the data-stall profile of a window
 * (stk_loader_profile_get: the consumer's wait against its step, quantiles
 * over the window's batches, each stage's share of the workers' time, and
 * a verdict naming the stage that limits and what to try).
 *
 * The workers count their own time per stage in relaxed atomics (one cache
 * line each, loader_internal.h); the consumer's next() records one event
 * per batch lent into a ring of the last EVENT_RING, under mu
 * (stk_ld_record_lend_locked, which also runs the tuner's step). Readers
 * take mu for the consumer's side and load the workers' counters relaxed.
 */
#include "pipeline/loader_internal.h"

#include "core/cpu.h"
#include "core/error.h"
#include "core/util.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Profile and autotune                                                      */
/* ------------------------------------------------------------------------ */

/* Worker counters summed: read, decode, augment, collate ticks; busy ticks.
 * Relaxed loads: each is a running total written by its worker. */
void stk_ld_worker_sums(const stk_loader *l, uint64_t ticks[4], uint64_t *busy)
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

/* Start a profile window now. Caller holds mu. */
static void window_reset_locked(stk_loader *l)
{
    l->nevents = 0;
    l->win_start = stk_now();
    l->win_batches = l->win_samples = 0;
    l->win_wait = l->win_step = l->win_ready = 0;
    stk_ld_worker_sums(l, l->win_ticks, &l->win_busy);
}

/* The batch being lent: its record in the window, the consumer's totals and
 * a tuner step. `ready` is what was ready when the consumer asked. Caller
 * holds mu. */
void stk_ld_record_lend_locked(stk_loader *l, uint32_t rows, uint32_t ready, double now)
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
    stk_ld_tune_locked(l, now);
}

void stk_loader_stats_get(const stk_loader *l, stk_loader_stats *st)
{
    stk_loader *ml = (stk_loader *)l;
    memset(st, 0, sizeof *st);
    double tick = 1.0 / stk_ticks_per_second();
    uint64_t ticks[4];
    stk_ld_worker_sums(l, ticks, NULL);
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
    st->memory_bytes = stk_ld_memory_locked(l);
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

/* ------------------------------------------------------------------------ */
/* Statistics by key                                                         */
/* ------------------------------------------------------------------------ */

static void statistics_fill(const stk_loader *l, stk_loader_statistics *x)
{
    stk_loader_stats st;
    stk_loader_stats_get(l, &st);
    memset(x, 0, sizeof *x);
    x->size = sizeof *x;
    x->samples = st.samples;
    x->batches = st.batches;
    x->skipped = st.skipped;
    x->read_s = st.read_s;
    x->decode_s = st.decode_s;
    x->augment_s = st.augment_s;
    x->collate_s = st.collate_s;
    x->idle_s = st.idle_s;
    x->wait_s = st.wait_s;
    x->step_s = st.step_s;
    x->batches_allocated = st.batches_allocated;
    x->pool_bytes = st.pool_bytes;
    x->pool_exhausted = st.pool_exhausted;
    x->memory_bytes = st.memory_bytes;
    x->threads = st.threads;
    x->prefetch = st.prefetch;
    x->decisions = st.decisions;
    x->max_batches = st.max_batches;
    x->gpu_decode_cpu_rows = st.gpu_decode_cpu_rows;
    x->gpu_head_rows = st.gpu_head_rows;
    x->decode_budget = l->decode_budget; /* immutable once started */
}

/* One row per statistic: a new statistic is a key (stoker/loader.h), a
 * field appended to stk_loader_statistics, a line in statistics_fill and a
 * row here; never a field of stk_loader_stats. */
static const struct stat_row {
    stk_loader_stat key;
    const char *name;
    size_t offset;
    bool seconds;
    const char *doc;
} stat_rows[] = {
#define STAT(k, f, sec, doc) {k, #f, offsetof(stk_loader_statistics, f), sec, doc}
    STAT(STK_LOADER_STAT_SAMPLES, samples, false, "samples written into batches"),
    STAT(STK_LOADER_STAT_BATCHES, batches, false, "batches delivered to the consumer"),
    STAT(STK_LOADER_STAT_SKIPPED, skipped, false, "samples left out or replaced (on_error) "
                                                  "of the batches delivered"),
    STAT(STK_LOADER_STAT_READ_S, read_s, true, "workers: fetching samples from the dataset"),
    STAT(STK_LOADER_STAT_DECODE_S, decode_s, true, "workers: inside the image decoder"),
    STAT(STK_LOADER_STAT_AUGMENT_S, augment_s, true, "workers: the pipeline and the write "
                                                     "into the batch, decoder excluded"),
    STAT(STK_LOADER_STAT_COLLATE_S, collate_s, true, "workers: moving rows after skipped "
                                                     "samples, collating, device submits"),
    STAT(STK_LOADER_STAT_IDLE_S, idle_s, true, "workers: waiting for a free buffer"),
    STAT(STK_LOADER_STAT_WAIT_S, wait_s, true, "consumer: blocked in next()"),
    STAT(STK_LOADER_STAT_STEP_S, step_s, true, "consumer: between batches (its step)"),
    STAT(STK_LOADER_STAT_BATCHES_ALLOCATED, batches_allocated, false, "batch buffers in the "
                                                                      "pool now"),
    STAT(STK_LOADER_STAT_POOL_BYTES, pool_bytes, false, "bytes of batch buffers allocated"),
    STAT(STK_LOADER_STAT_POOL_EXHAUSTED, pool_exhausted, false, "next() calls that found "
                                                                "every buffer lent"),
    STAT(STK_LOADER_STAT_MEMORY_BYTES, memory_bytes, false, "batch pool + workers' scratch now"),
    STAT(STK_LOADER_STAT_THREADS, threads, false, "workers active now"),
    STAT(STK_LOADER_STAT_PREFETCH, prefetch, false, "prefetch depth now"),
    STAT(STK_LOADER_STAT_DECISIONS, decisions, false, "autotuner decisions made"),
    STAT(STK_LOADER_STAT_MAX_BATCHES, max_batches, false, "the cap on batch buffers, resolved"),
    STAT(STK_LOADER_STAT_GPU_DECODE_CPU_ROWS, gpu_decode_cpu_rows, false,
         "decoder nvjpeg: rows decoded on the CPU instead"),
    STAT(STK_LOADER_STAT_GPU_HEAD_ROWS, gpu_head_rows, false,
         "placement gpu: rows resampled on the CPU (region over the staging)"),
    STAT(STK_LOADER_STAT_DECODE_BUDGET, decode_budget, false,
         "bytes one decode may need in a worker (0: no bound)"),
#undef STAT
};

#define NSTATS (sizeof stat_rows / sizeof stat_rows[0])

int stk_loader_stat_get(const stk_loader *l, stk_loader_stat key, double *out)
{
    if (!l || !out)
        return stk_fail(STK_EINVAL, "stk_loader_stat_get: NULL argument");
    for (size_t i = 0; i < NSTATS; i++) {
        if (stat_rows[i].key != key)
            continue;
        stk_loader_statistics x;
        statistics_fill(l, &x);
        const char *f = (const char *)&x + stat_rows[i].offset;
        if (stat_rows[i].seconds) {
            memcpy(out, f, sizeof *out);
        } else {
            uint64_t u;
            memcpy(&u, f, sizeof u);
            *out = (double)u;
        }
        return 0;
    }
    return stk_fail(STK_EINVAL, "stk_loader_stat_get: unknown loader statistic %d", (int)key);
}

int stk_loader_stats_sized(const stk_loader *l, void *stats, size_t size)
{
    if (!l || !stats)
        return stk_fail(STK_EINVAL, "stk_loader_stats_sized: NULL argument");
    uint64_t given;
    if (size < sizeof given)
        return stk_fail(STK_EINVAL, "stk_loader_stats_sized: size %zu is under 8", size);
    memcpy(&given, stats, sizeof given);
    if (given != size)
        return stk_fail(STK_EINVAL, "stk_loader_stats_sized: stats->size is %llu, not the size "
                                    "passed (%zu): set it to sizeof(stk_loader_statistics)",
                        (unsigned long long)given, size);
    stk_loader_statistics x;
    statistics_fill(l, &x);
    size_t n = size < sizeof x ? size : sizeof x;
    x.size = n;
    memcpy(stats, &x, n);
    return 0;
}

int stk_loader_stat_describe(int index, stk_loader_stat_info *info)
{
    if (!info)
        return stk_fail(STK_EINVAL, "stk_loader_stat_describe: info is NULL");
    memset(info, 0, sizeof *info);
    if (index < 0 || (size_t)index >= NSTATS)
        return stk_fail(STK_ENOENT, "stk_loader_stat_describe: no statistic %d (there are %d)",
                        index, (int)NSTATS);
    info->key = stat_rows[index].key;
    info->seconds = stat_rows[index].seconds;
    info->name = stat_rows[index].name;
    info->doc = stat_rows[index].doc;
    return 0;
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
    stk_ld_worker_sums(l, ticks, &busy);
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

