/*
 * loader_autotune.c — the autotuner (docs/engine.md, "Autotune") and the
 * knobs a caller sets by hand.
 *
 * With threads = 0 or prefetch = 0 the loader moves the active worker
 * count and the prefetch depth while it runs. The tuner has no thread of
 * its own: stk_ld_tune_locked is one step, run by the consumer's next()
 * under mu each time a batch is lent (loader_profile.c records the batch
 * and calls it); it acts once a window of at least tune_period seconds and
 * 8 batches has passed. Its decisions are kept as texts in a ring
 * (stk_loader_decision) and printed under STOKER_LOG=debug.
 *
 * Nothing here changes a batch: a row's content depends only on (seed,
 * epoch, index), never on how many workers fill it or how far ahead.
 *
 * Locking: every function here runs under mu except the public setters,
 * which take it; the worker counters are read relaxed.
 */
#include "pipeline/loader_internal.h"

#include "core/cpu.h"
#include "core/error.h"
#include "core/util.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

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
            if (l->nslots >= l->opt.max_batches || !stk_ld_memory_fits_locked(l, l->batch_bytes))
                return stk_fail(STK_EINVAL,
                                "loader: prefetch %u needs %u batch buffers; max_batches (%u) or "
                                "memory_limit (%llu bytes) allows %u",
                                n, n + 1, l->opt.max_batches,
                                (unsigned long long)l->opt.memory_limit, l->nslots);
            int rc = stk_ld_slot_alloc(l, &l->slots[l->nslots]);
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
    stk_ld_worker_sums(l, ticks, &t->busy_ticks);
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
void stk_ld_tune_locked(stk_loader *l, double now)
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
            (l->nslots > l->prefetch + 1 || stk_ld_memory_fits_locked(l, l->batch_bytes)))
            m = MOVE_PREFETCH_UP;
        else if (l->auto_threads && l->active > 1 && saturated &&
                 workers_cores < 0.5 * l->active && /* time-sliced: under half a core each */
                 l->windows >= l->block_until[MOVE_THREAD_DOWN])
            m = MOVE_THREAD_DOWN; /* oversubscribed: does a thread fewer lose anything? */
        else if (l->auto_threads && l->active < l->threads_max &&
                 l->windows >= l->block_until[MOVE_THREAD_UP] &&
                 stk_ld_memory_fits_locked(l, per_worker))
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

