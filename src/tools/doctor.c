/*
 * doctor.c — stk_doctor_run: where an input pipeline's time goes, and what
 * would help (`stoker doctor`, docs/doctor.md).
 *
 * An engineer whose GPU stalls wants three answers in a few seconds: which
 * stage limits the images/s, how many images/s to expect with the cores
 * there are, and which change buys the most. This tool measures each stage
 * on its own, on a random sample of the dataset, and combines the rates in
 * a small model instead of running the loader at every setting.
 *
 * How it works, in order:
 *  1. Open the dataset (timed: an image folder's walk), compile the spec
 *     as the loader does, draw `samples` distinct indices at random.
 *  2. Storage, one reader: the first quarter of the sample is read through
 *     the reader (vt->read, as the loader's fill_rows does) and copied out;
 *     each read's wall time and the thread's CPU time
 *     (CLOCK_THREAD_CPUTIME_ID) are summed. Wall far above CPU means the
 *     thread waited for storage. The copy is part of the read: a mapped
 *     shard's pages are only faulted in when touched.
 *  3. Storage, `readers` at once: the rest of the sample, read by that many
 *     threads, gives records/s and MB/s on the wall clock (I/O overlaps
 *     across threads, CPU work does not). When the readers' CPU time fills
 *     the cores, the readers were CPU-bound and the rate is only a lower
 *     bound of storage's (read_cpu_limited): storage then sets no ceiling
 *     beyond the read CPU already counted per core.
 *  4. CPU per sample, one thread: the plan runs on the sampled bytes (in
 *     memory, so storage is out of the picture) for a few passes with fresh
 *     draws; the thread's CPU time is split into decode and augment by the
 *     plan's own decoder ticks (stk_plan_input.decode_ticks), so preemption
 *     on a busy machine does not count.
 *  5. Alternatives, timed on a subset of at most 16 samples against the
 *     same subset as it is (min of interleaved repetitions): the JPEGs
 *     rewritten with restart markers (pack --restart 4), re-encoded at a
 *     smaller size (pack --reencode --max-side S, when the photos are much
 *     larger than the output), the spec with `to f16` for `to f32`.
 *
 * The model (docs/doctor.md): with n cores and enough loader threads to
 * hide the read waits,
 *   images/s(n) = min(n * per_core, storage, consumer)
 * per_core = 1 / (read CPU + decode + augment), storage = the concurrent
 * readers' rate (none when they were CPU-bound), consumer = batch / step.
 * The bottleneck is the term that sets the minimum (a CPU term is named by
 * its largest part), and the threads a loader needs are
 * images/s * (read wall + decode + augment). A recommendation changes one
 * term (measured where it could be timed) and reports the ratio.
 *
 * Invariants: the dataset is only read, never written; every sample's bytes
 * are owned copies (rec.data), so later passes never touch storage; every
 * failure is reported through stk_fail and cleaned up through one path.
 *
 * This file measures and fills the report; printing it (stk_doctor_render,
 * text and JSON, and the stage and advice names) is doctor_render.c's,
 * which reads only the report.
 */
#include "codec/codec.h"
#include "codec/codec_write.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/util.h"
#include "format/dataset.h"
#include "ops/plan.h"
#include "ops/resample.h"
#include "ops/spec.h"
#include "stoker/stoker.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DOC_DEFAULT_SAMPLES 128
#define DOC_MAX_SAMPLES 4096
#define DOC_DEFAULT_BATCH 256
#define DOC_DEFAULT_BUDGET_S 5.0
#define DOC_DEFAULT_READERS 8
#define DOC_MAX_READERS 256
#define DOC_MAX_CORES 1024
#define DOC_MAX_BYTES (512ull << 20) /* sampled bytes kept in memory */
#define DOC_SUBSET 16                /* samples an alternative is timed on */
#define DOC_MIN_GAIN 1.05            /* recommendations below +5% are left out */
#define DOC_RESTART_INTERVAL 4

/* One sampled record. */
typedef struct rec {
    uint64_t index;
    uint8_t *data;        /* owned (malloc): encoded bytes, or dense HWC pixels */
    size_t size;
    int encoded;          /* data holds an encoded image */
    uint32_t h, w, c;     /* raw: the pixels' shape; encoded: from the header (0 unknown) */
    int rc;               /* 0, or why the record was dropped */
    bool read;            /* the storage passes reached it */
} rec;

/* The whole run's state; freed by doctor_free. */
typedef struct doctor {
    stk_doctor_options o;  /* resolved */
    stk_dataset *ds;       /* owned */
    stk_plan *plan;        /* owned */
    rec *recs;             /* owned: o.samples records */
    uint32_t nrecs;
    size_t sample_bytes;   /* of the plan's output */
    _Atomic uint64_t kept_bytes; /* bytes held in recs (the DOC_MAX_BYTES cap) */
    double deadline;       /* stk_now() after which passes stop early */
    double t0;
} doctor;

static int resolve_options(const stk_doctor_options *in, stk_doctor_options *o)
{
    int rc;
    stk_doctor_options z = {0};
    *o = in ? *in : z;
    if ((rc = stk_reserved_check(o->reserved_, sizeof o->reserved_ / sizeof o->reserved_[0],
                                 "stk_doctor_options")) < 0)
        return rc;
    if (o->samples > DOC_MAX_SAMPLES)
        return stk_fail(STK_EINVAL, "stk_doctor: samples %u is over %u", o->samples,
                        DOC_MAX_SAMPLES);
    if (!isfinite(o->step_ms) || o->step_ms < 0)
        return stk_fail(STK_EINVAL, "stk_doctor: step_ms must be a finite number >= 0");
    if (!isfinite(o->time_budget_s) || o->time_budget_s < 0)
        return stk_fail(STK_EINVAL, "stk_doctor: time_budget_s must be a finite number >= 0");
    if (o->readers > DOC_MAX_READERS)
        return stk_fail(STK_EINVAL, "stk_doctor: readers %u is over %u", o->readers,
                        DOC_MAX_READERS);
    if (o->max_cores > DOC_MAX_CORES)
        return stk_fail(STK_EINVAL, "stk_doctor: max_cores %u is over %u", o->max_cores,
                        DOC_MAX_CORES);
    if (!o->samples)
        o->samples = DOC_DEFAULT_SAMPLES;
    if (!o->batch_size)
        o->batch_size = DOC_DEFAULT_BATCH;
    if (o->time_budget_s == 0)
        o->time_budget_s = DOC_DEFAULT_BUDGET_S;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Storage                                                                    */
/* ------------------------------------------------------------------------ */

/* Read record r through the reader and keep an owned copy of its bytes.
 * *wall and *cpu get the read's wall and thread-CPU seconds (copy
 * included). STK_EDATA marks the record dropped; other codes are fatal. */
static int read_one(doctor *d, rec *r, stk_scratch *scratch, double *wall, double *cpu)
{
    double w0 = stk_now(), c0 = stk_thread_cpu_s();
    stk_sample s;
    int rc = d->ds->vt->read(d->ds, r->index, &s, scratch);
    if (rc == 0) {
        size_t n;
        const uint8_t *src = NULL;
        if (s.image.pixels) {
            n = (size_t)s.image.height * s.image.width * s.image.channels;
            r->h = s.image.height;
            r->w = s.image.width;
            r->c = s.image.channels;
        } else {
            n = s.encoded_size;
            src = s.encoded;
        }
        uint64_t kept = atomic_fetch_add(&d->kept_bytes, (uint64_t)n);
        if (kept > DOC_MAX_BYTES) {
            rc = 1; /* over the memory cap: left out of the sample, not an error */
        } else if (!(r->data = malloc(n ? n : 1))) {
            rc = stk_fail(STK_ENOMEM, "stk_doctor: out of memory");
        } else {
            r->size = n;
            if (s.image.pixels) {
                stk_image_copy_hwc(&s.image, r->data);
            } else {
                memcpy(r->data, src, n);
                r->encoded = 1;
            }
        }
        int lost = stk_dataset_check(d->ds, r->index);
        if (lost < 0 && rc == 0)
            rc = lost;
    }
    *wall = stk_now() - w0;
    *cpu = stk_thread_cpu_s() - c0;
    r->read = rc <= 0;
    r->rc = rc < 0 ? rc : rc > 0 ? STK_ELIMIT : 0;
    if (rc == STK_EDATA || rc > 0)
        return 0;
    return rc;
}

typedef struct reader_ctx {
    doctor *d;
    uint32_t first, end;       /* records [first, end) are theirs to claim */
    _Atomic uint32_t next;
    _Atomic int failed;
    double deadline;
    pthread_mutex_t mu;        /* guards the sums below and err */
    double cpu;                /* thread CPU summed over readers */
    double wait;               /* wall minus CPU of the good reads, summed */
    uint64_t bytes, count;
    int err;                   /* first fatal code */
    char errmsg[512];          /* its message */
} reader_ctx;

static void *reader_main(void *arg)
{
    reader_ctx *x = arg;
    stk_scratch scratch = {0};
    double cpu = 0, wait = 0;
    uint64_t bytes = 0, count = 0;
    int err = 0;
    for (;;) {
        if (atomic_load(&x->failed) || stk_now() > x->deadline)
            break;
        uint32_t i = atomic_fetch_add(&x->next, 1);
        if (i >= x->end)
            break;
        rec *r = &x->d->recs[i];
        double w, c;
        err = read_one(x->d, r, &scratch, &w, &c);
        cpu += c;
        if (err < 0) {
            atomic_store(&x->failed, 1);
            break;
        }
        if (r->rc == 0) {
            bytes += r->size;
            count++;
            wait += w > c ? w - c : 0;
        }
    }
    pthread_mutex_lock(&x->mu);
    x->cpu += cpu;
    x->wait += wait;
    x->bytes += bytes;
    x->count += count;
    if (err < 0 && !x->err) {
        x->err = err;
        snprintf(x->errmsg, sizeof x->errmsg, "%s", stk_errmsg());
    }
    pthread_mutex_unlock(&x->mu);
    stk_scratch_free(&scratch);
    return NULL;
}

/* Steps 2 and 3 of the essay. */
static int measure_storage(doctor *d, stk_doctor_report *r, double cores)
{
    double budget = d->o.time_budget_s;
    uint32_t n1 = d->nrecs / 4;
    if (n1 < 1)
        n1 = 1;
    if (n1 > d->nrecs)
        n1 = d->nrecs;
    /* One reader. */
    stk_scratch scratch = {0};
    double wall = 0, cpu = 0, t_end = stk_now() + 0.2 * budget;
    uint32_t done = 0;
    int rc = 0;
    for (uint32_t i = 0; i < n1; i++) {
        if (done >= 4 && stk_now() > t_end)
            break;
        double w, c;
        if ((rc = read_one(d, &d->recs[i], &scratch, &w, &c)) < 0)
            break;
        if (d->recs[i].rc == 0) {
            wall += w;
            cpu += c;
            done++;
        }
    }
    stk_scratch_free(&scratch);
    if (rc < 0)
        return rc;
    if (done) {
        r->read_wall_ms = wall / done * 1e3;
        r->read_cpu_ms = cpu / done * 1e3;
    }

    /* `readers` at once, over the rest. */
    uint32_t nr = d->o.readers;
    if (!nr) {
        double twice = 2 * ceil(cores);
        nr = twice > DOC_DEFAULT_READERS ? (uint32_t)twice : DOC_DEFAULT_READERS;
        if (nr > DOC_MAX_READERS)
            nr = DOC_MAX_READERS;
    }
    r->readers = nr;
    if (n1 >= d->nrecs)
        return 0;
    reader_ctx x = {.d = d, .first = n1, .end = d->nrecs, .deadline = stk_now() + 0.3 * budget};
    atomic_init(&x.next, n1);
    atomic_init(&x.failed, 0);
    pthread_mutex_init(&x.mu, NULL);
    pthread_t th[DOC_MAX_READERS];
    uint32_t started = 0;
    double w0 = stk_now();
    for (; started < nr; started++)
        if (pthread_create(&th[started], NULL, reader_main, &x) != 0)
            break;
    if (started == 0) {
        pthread_mutex_destroy(&x.mu);
        return stk_fail(STK_ETHREAD, "stk_doctor: cannot start reader threads");
    }
    for (uint32_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    double elapsed = stk_now() - w0;
    pthread_mutex_destroy(&x.mu);
    if (x.err) {
        stk_errmsg_set(x.errmsg);
        return x.err;
    }
    if (x.count && elapsed > 0) {
        r->read_per_s = (double)x.count / elapsed;
        r->read_mb_per_s = (double)x.bytes / elapsed / 1e6;
        /* What storage itself gives: `started` reads in flight, each
         * waiting (wall minus CPU) this long on average. Never below what
         * was measured. When the readers fell well short of it, something
         * else (the CPU, shared with other processes) held them back. */
        double usable = cores < started ? cores : started;
        r->read_cpu_limited = x.cpu / (elapsed * usable) > 0.5;
        /* Readers that kept the cores busy also waited for each other's
         * CPU: their wait is not storage's, so the one reader's is used. */
        double wait_s = r->read_cpu_limited ? (r->read_wall_ms - r->read_cpu_ms) / 1e3
                                            : x.wait / (double)x.count;
        double ceiling = wait_s > 20e-6 ? (double)started / wait_s : INFINITY;
        r->storage_per_s = ceiling > r->read_per_s ? ceiling : r->read_per_s;
    } else if (done) {
        double wait_ms = r->read_wall_ms - r->read_cpu_ms; /* no second pass: extrapolated */
        r->read_per_s = 1e3 / r->read_wall_ms * nr;
        r->storage_per_s = wait_ms > 0.02 ? nr * 1e3 / wait_ms : INFINITY;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* CPU per sample                                                             */
/* ------------------------------------------------------------------------ */

/* One input of a timed pass: a record's bytes, or an alternative's. */
typedef struct input {
    const uint8_t *data;
    size_t size;
    int encoded;
    uint32_t h, w, c;
    uint64_t index;        /* the rng stream's index */
    rec *owner;            /* rc set on a decode failure, or NULL */
} input;

typedef struct timing {
    double cpu_s;          /* thread CPU of the runs */
    double wall_s;         /* their wall time */
    double decode_share;   /* decoder ticks / all ticks */
    uint64_t runs;
} timing;

/* Run `plan` over inputs[0..n) `passes` times (epoch = pass, fresh draws).
 * Inputs that fail to decode (STK_EDATA) are marked dropped and skipped.
 * `until` > 0: stop after the first pass once that much CPU is spent. */
static int time_plan(const doctor *d, const stk_plan *plan, input *in, uint32_t n,
                     uint32_t passes, double until, uint8_t *out, stk_scratch *scratch,
                     timing *t)
{
    uint64_t dec = 0, all = 0;
    memset(t, 0, sizeof *t);
    double c0 = stk_thread_cpu_s(), w0 = stk_now();
    for (uint32_t p = 0; p < passes; p++) {
        for (uint32_t i = 0; i < n; i++) {
            input *x = &in[i];
            if (!x->data || (x->owner && x->owner->rc))
                continue;
            stk_image_view v;
            if (!x->encoded) {
                v.pixels = x->data;
                v.height = x->h;
                v.width = x->w;
                v.channels = x->c;
                v.row_stride = (ptrdiff_t)x->w * x->c;
                v.col_stride = x->c;
                v.chan_stride = 1;
            }
            uint64_t ticks = 0;
            stk_plan_input pi = {.image = x->encoded ? NULL : &v,
                                 .encoded = x->encoded ? x->data : NULL,
                                 .encoded_size = x->encoded ? x->size : 0,
                                 .decode_ticks = &ticks};
            stk_rng rng;
            stk_rng_init(&rng, d->o.seed, STK_RNG_DOMAIN_SAMPLE, p, x->index);
            uint64_t k0 = stk_ticks();
            int rc = stk_plan_run_input(plan, &pi, &rng, out, scratch);
            all += stk_ticks() - k0;
            dec += ticks;
            if (rc == STK_EDATA || rc == STK_ELIMIT) {
                if (x->owner)
                    x->owner->rc = rc;
                continue;
            }
            if (rc < 0)
                return rc;
            t->runs++;
            /* Large photos: a pass over the whole sample may outlast the
             * budget; a few runs are enough to know the rate. */
            if (until > 0 && t->runs >= 8 && t->runs % 4 == 0 && stk_thread_cpu_s() - c0 >= until)
                goto out;
        }
        if (until > 0 && stk_thread_cpu_s() - c0 >= until)
            break;
    }
out:
    t->cpu_s = stk_thread_cpu_s() - c0;
    t->wall_s = stk_now() - w0;
    t->decode_share = all ? (double)dec / (double)all : 0;
    if (t->decode_share > 1)
        t->decode_share = 1;
    return 0;
}

/* CPU seconds per run of `plan` over `in`, the smaller of `reps` timed
 * repetitions (interleaving callers compare like with like). */
static int cpu_per_run(const doctor *d, const stk_plan *plan, input *in, uint32_t n,
                       uint8_t *out, stk_scratch *scratch, double *best)
{
    timing t;
    int rc = time_plan(d, plan, in, n, 1, 0, out, scratch, &t);
    if (rc < 0)
        return rc;
    double v = t.runs ? t.cpu_s / (double)t.runs : 0;
    if (v > 0 && (*best == 0 || v < *best))
        *best = v;
    return 0;
}

/* Time plan a on ina and plan b on inb (n inputs each) alternately: *ta and
 * *tb get CPU seconds per run (0 when nothing ran). */
static int compare_plans(doctor *d, const stk_plan *a, input *ina, const stk_plan *b,
                         input *inb, uint32_t n, double *ta, double *tb)
{
    int rc = 0;
    stk_scratch scratch = {0};
    size_t ob = d->sample_bytes;
    size_t b_bytes;
    int64_t shp[3];
    stk_dtype dt;
    stk_layout lay;
    stk_plan_output(b, shp, &dt, &lay, &b_bytes);
    if (b_bytes > ob)
        ob = b_bytes;
    uint8_t *out = stk_aligned_alloc(ob ? ob : 1);
    *ta = *tb = 0;
    if (!out)
        return stk_fail(STK_ENOMEM, "stk_doctor: out of memory");
    double until = stk_now() + 0.15 * d->o.time_budget_s;
    for (int rep = 0; rep < 5; rep++) {
        if ((rc = cpu_per_run(d, a, ina, n, out, &scratch, ta)) < 0 ||
            (rc = cpu_per_run(d, b, inb, n, out, &scratch, tb)) < 0)
            break;
        if (stk_now() > until)
            break;
    }
    stk_aligned_free(out);
    stk_scratch_free(&scratch);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The model                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct model {
    double cpu_ms;      /* read CPU + decode + augment per sample */
    double wait_ms;     /* read wall + decode + augment: a thread's time per sample */
    double storage;     /* records/s storage gives; INFINITY when not a limit */
    double consumer;    /* INFINITY when not limited */
    double read_ms, decode_ms, augment_ms;
} model;

/* The model with decode + augment CPU per sample scaled by `ratio` (what a
 * rewrite of the bytes measured on the sample gives). */
static model cpu_scaled(const model *m, const stk_doctor_report *r, double ratio)
{
    model x = *m;
    double dec_aug = (r->decode_ms + r->augment_ms) * ratio;
    x.cpu_ms = r->read_cpu_ms + dec_aug;
    x.wait_ms = m->wait_ms - (r->decode_ms + r->augment_ms) + dec_aug;
    x.decode_ms = r->decode_ms * ratio;
    return x;
}

static double predict(const model *m, double n, stk_doctor_stage *why, uint32_t *threads)
{
    double cpu = m->cpu_ms > 0 ? n * 1e3 / m->cpu_ms : INFINITY;
    double v = cpu;
    stk_doctor_stage s;
    if (m->consumer <= cpu && m->consumer <= m->storage) {
        v = m->consumer;
        s = STK_DOCTOR_CONSUMER;
    } else if (m->storage <= cpu) {
        v = m->storage;
        s = STK_DOCTOR_STORAGE;
    } else if (m->decode_ms >= m->augment_ms && m->decode_ms >= m->read_ms) {
        s = STK_DOCTOR_DECODE;
    } else if (m->augment_ms >= m->read_ms) {
        s = STK_DOCTOR_AUGMENT;
    } else {
        s = STK_DOCTOR_READ;
    }
    if (why)
        *why = s;
    if (threads) {
        double t = ceil(v * m->wait_ms / 1e3 - 1e-9);
        double lo = ceil(n);
        if (t < lo)
            t = lo;
        if (t > DOC_MAX_CORES)
            t = DOC_MAX_CORES;
        *threads = (uint32_t)t;
    }
    return v;
}

static void add_rec(stk_doctor_report *r, stk_doctor_advice kind, uint32_t param, double rate,
                    double base, int measured, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

static void add_rec(stk_doctor_report *r, stk_doctor_advice kind, uint32_t param, double rate,
                    double base, int measured, const char *fmt, ...)
{
    if (!(base > 0) || !isfinite(rate) || rate / base < DOC_MIN_GAIN ||
        r->nrecommendations >= STK_DOCTOR_MAX_RECOMMENDATIONS)
        return;
    stk_doctor_recommendation *x = &r->recommendations[r->nrecommendations++];
    memset(x, 0, sizeof *x);
    x->kind = kind;
    x->param = param;
    x->images_per_s = rate;
    x->gain = rate / base;
    x->measured = measured;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->text, sizeof x->text, fmt, ap);
    va_end(ap);
}

/* Rate v of model mm with at most `threads` loader threads (INFINITY: as
 * many as it needs): each thread holds a sample for its wait_ms. */
static double at_threads(const model *mm, double v, double threads)
{
    if (isfinite(threads) && mm->wait_ms > 0 && threads * 1e3 / mm->wait_ms < v)
        return threads * 1e3 / mm->wait_ms;
    return v;
}

static int cmp_rec(const void *a, const void *b)
{
    double ga = ((const stk_doctor_recommendation *)a)->gain;
    double gb = ((const stk_doctor_recommendation *)b)->gain;
    return ga < gb ? 1 : ga > gb ? -1 : 0;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The spec with its output dtype f16 instead of f32: the last `to` stage
 * replaced (a preset followed by `| to` replaces the preset's own), or one
 * appended. NULL when it cannot be built. Malloc'd. */
static char *spec_with_f16(const char *spec, stk_layout layout)
{
    const char *lay = layout == STK_CHW ? "chw" : "hwc";
    size_t n = strlen(spec);
    char *s = malloc(n + 32);
    if (!s)
        return NULL;
    const char *bar = strrchr(spec, '|');
    const char *last = bar ? bar + 1 : spec;
    while (*last == ' ' || *last == '\t')
        last++;
    if (bar && strncmp(last, "to", 2) == 0 && (last[2] == ' ' || last[2] == '\t'))
        snprintf(s, n + 32, "%.*s| to f16 %s", (int)(bar - spec), spec, lay);
    else
        snprintf(s, n + 32, "%s | to f16 %s", spec, lay);
    return s;
}

/* ------------------------------------------------------------------------ */
/* The run                                                                    */
/* ------------------------------------------------------------------------ */

static void doctor_free(doctor *d)
{
    if (d->recs)
        for (uint32_t i = 0; i < d->nrecs; i++)
            free(d->recs[i].data);
    free(d->recs);
    stk_plan_free(d->plan);
    stk_dataset_close(d->ds);
}

/* Draw nrecs distinct indices below count (all of them, shuffled, when the
 * dataset is that small). */
static void choose_indices(doctor *d, uint64_t count)
{
    stk_rng rng;
    stk_rng_init(&rng, d->o.seed, STK_RNG_DOMAIN_SAMPLER, 0xd0c7, 0);
    for (uint32_t i = 0; i < d->nrecs; i++) {
        uint64_t v;
        bool dup;
        do {
            v = count <= UINT32_MAX ? stk_rng_below(&rng, (uint32_t)count)
                                    : stk_rng_u64(&rng) % count;
            dup = false;
            for (uint32_t j = 0; j < i && !dup; j++)
                dup = d->recs[j].index == v;
        } while (dup);
        d->recs[i].index = v;
    }
}

/* Subset of at most DOC_SUBSET good encoded records, as inputs. */
static uint32_t pick_subset(doctor *d, input *in, bool encoded_only)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < d->nrecs && n < DOC_SUBSET; i++) {
        rec *x = &d->recs[i];
        if (x->rc || !x->data || (encoded_only && !x->encoded))
            continue;
        in[n++] = (input){.data = x->data, .size = x->size, .encoded = x->encoded,
                          .h = x->h, .w = x->w, .c = x->c, .index = x->index, .owner = x};
    }
    return n;
}

static void free_alt(input *alt, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        free((void *)alt[i].data);
}

/* Whether a JPEG already has restart intervals (a DRI segment with a
 * nonzero interval before its first scan): packed with --restart, or a
 * camera's. Walks the marker segments only; bounds-checked. */
static bool jpeg_has_restarts(const uint8_t *p, size_t n)
{
    size_t i = 2;
    while (i + 4 <= n) {
        if (p[i] != 0xFF)
            return false;
        uint8_t m = p[i + 1];
        if (m == 0xFF) { /* fill byte */
            i++;
            continue;
        }
        if (m == 0xDA || m == 0xD9) /* SOS, EOI: no DRI before the scan */
            return false;
        size_t len = (size_t)p[i + 2] << 8 | p[i + 3];
        if (len < 2)
            return false;
        if (m == 0xDD && len >= 4 && i + 6 <= n)
            return (p[i + 4] << 8 | p[i + 5]) != 0;
        i += 2 + len;
    }
    return false;
}

/* Restart markers: rewrite the subset's JPEGs (stoker pack --restart) and
 * time the plan on both. *ratio = new CPU / old (0: not measured). JPEGs
 * that already have restart intervals are left out, so shards packed with
 * --restart are not told to pack with --restart. */
static int measure_restart(doctor *d, double *ratio, uint32_t *rewritten)
{
    input in[DOC_SUBSET], alt[DOC_SUBSET];
    uint32_t n = pick_subset(d, in, true);
    stk_scratch sc = {0};
    int rc = 0;
    *ratio = 0;
    *rewritten = 0;
    memset(alt, 0, sizeof alt);
    for (uint32_t i = 0; i < n; i++) {
        alt[i] = in[i];
        alt[i].data = NULL;
        alt[i].owner = NULL;
        size_t m;
        if (stk_image_sniff(in[i].data, in[i].size) != STK_IMAGE_JPEG ||
            jpeg_has_restarts(in[i].data, in[i].size))
            continue;
        int k = stk_jpeg_add_restarts(in[i].data, in[i].size, STK_DEFAULT_MAX_PIXELS,
                                      DOC_RESTART_INTERVAL, &sc, &m);
        if (k == STK_ENOMEM) {
            rc = k;
            goto done;
        }
        if (k != 1)
            continue;
        uint8_t *p = malloc(m);
        if (!p) {
            rc = stk_fail(STK_ENOMEM, "stk_doctor: out of memory");
            goto done;
        }
        memcpy(p, sc.data, m);
        alt[i].data = p;
        alt[i].size = m;
        (*rewritten)++;
    }
    stk_errmsg_clear();
    if (*rewritten) {
        /* Compare like with like: only the inputs that were rewritten. */
        input a[DOC_SUBSET], b[DOC_SUBSET];
        uint32_t k = 0;
        for (uint32_t i = 0; i < n; i++)
            if (alt[i].data) {
                a[k] = in[i];
                b[k++] = alt[i];
            }
        double ta, tb;
        if ((rc = compare_plans(d, d->plan, a, d->plan, b, k, &ta, &tb)) < 0)
            goto done;
        if (ta > 0 && tb > 0)
            *ratio = tb / ta;
    }
done:
    free_alt(alt, n);
    stk_scratch_free(&sc);
    return rc;
}

/* Re-encoded smaller (stoker pack --reencode --max-side S, quality 90):
 * time the plan on both. *ratio = new CPU / old, *bytes_ratio new / old. */
static int measure_reencode(doctor *d, uint32_t max_side, double *ratio, double *bytes_ratio)
{
    input in[DOC_SUBSET], alt[DOC_SUBSET];
    uint32_t n = pick_subset(d, in, true);
    stk_scratch px = {0}, small = {0}, enc = {0};
    int rc = 0;
    uint64_t old_bytes = 0, new_bytes = 0;
    uint32_t k = 0;
    *ratio = *bytes_ratio = 0;
    memset(alt, 0, sizeof alt);
    input a[DOC_SUBSET];
    for (uint32_t i = 0; i < n; i++) {
        stk_image_view v;
        if (stk_image_decode(in[i].data, in[i].size, NULL, NULL, 1, &px, &v) < 0)
            continue;
        uint32_t h = v.height, w = v.width, ls = h > w ? h : w;
        if (ls <= max_side || (v.channels != 3 && v.channels != 1))
            continue;
        double f = (double)max_side / ls;
        uint32_t oh = (uint32_t)(h * f + 0.5), ow = (uint32_t)(w * f + 0.5);
        oh = oh ? oh : 1;
        ow = ow ? ow : 1;
        if ((rc = stk_scratch_reserve(&small, (size_t)oh * ow * v.channels)) < 0)
            goto done;
        if ((rc = stk_rs_resize_u8(v.pixels, h, w, v.row_stride, (int)v.channels, NULL, oh, ow,
                                   small.data, NULL)) < 0)
            goto done;
        size_t m;
        if ((rc = stk_jpeg_encode(small.data, ow, oh, v.channels, (size_t)ow * v.channels, 90,
                                  &enc, &m)) < 0)
            goto done;
        uint8_t *p = malloc(m);
        if (!p) {
            rc = stk_fail(STK_ENOMEM, "stk_doctor: out of memory");
            goto done;
        }
        memcpy(p, enc.data, m);
        a[k] = in[i];
        alt[k] = in[i];
        alt[k].owner = NULL;
        alt[k].data = p;
        alt[k].size = m;
        alt[k].h = oh;
        alt[k].w = ow;
        old_bytes += in[i].size;
        new_bytes += m;
        k++;
    }
    stk_errmsg_clear();
    if (k) {
        double ta, tb;
        if ((rc = compare_plans(d, d->plan, a, d->plan, alt, k, &ta, &tb)) < 0)
            goto done;
        if (ta > 0 && tb > 0)
            *ratio = tb / ta;
        *bytes_ratio = old_bytes ? (double)new_bytes / (double)old_bytes : 0;
    }
done:
    free_alt(alt, k);
    stk_scratch_free(&px);
    stk_scratch_free(&small);
    stk_scratch_free(&enc);
    return rc;
}

/* `to f16` for `to f32`: *ratio = new CPU / old (0: not measured). */
static int measure_dtype(doctor *d, const char *spec, stk_layout layout, double *ratio)
{
    *ratio = 0;
    char *alt_spec = spec_with_f16(spec, layout);
    if (!alt_spec)
        return stk_fail(STK_ENOMEM, "stk_doctor: out of memory");
    stk_plan *p = NULL;
    int rc = stk_plan_compile(alt_spec, d->ds->height, d->ds->width, d->ds->channels, &p);
    free(alt_spec);
    if (rc < 0) { /* a spec this cannot be said of: no recommendation */
        stk_errmsg_clear();
        return 0;
    }
    input in[DOC_SUBSET];
    uint32_t n = pick_subset(d, in, false);
    double ta = 0, tb = 0;
    rc = n ? compare_plans(d, d->plan, in, p, in, n, &ta, &tb) : 0;
    if (rc == 0 && ta > 0 && tb > 0)
        *ratio = tb / ta;
    stk_plan_free(p);
    return rc;
}

int stk_doctor_run(const char *uri, const char *spec, const stk_doctor_options *opts,
                   stk_doctor_report *out)
{
    doctor d;
    memset(&d, 0, sizeof d);
    int rc;
    uint8_t *outbuf = NULL;
    input *ins = NULL;
    stk_scratch scratch = {0};
    if (!uri || !spec || !out)
        return stk_fail(STK_EINVAL, "stk_doctor_run: uri, spec and out are required");
    memset(out, 0, sizeof *out);
    stk_doctor_report *r = out;
    if ((rc = resolve_options(opts, &d.o)) < 0)
        return rc;
    d.t0 = stk_now();
    d.deadline = d.t0 + d.o.time_budget_s;
    double cores = d.o.max_cores ? d.o.max_cores : stk_cpus_available();
    if (!(cores > 0))
        cores = 1;
    r->cpus = stk_cpus_available();
    r->batch_size = d.o.batch_size;

    /* 1. Open, compile, choose. */
    if ((rc = stk_dataset_open(uri, NULL, &d.ds)) < 0)
        goto fail;
    r->open_s = stk_now() - d.t0;
    snprintf(r->format, sizeof r->format, "%s", d.ds->vt->format);
    r->dataset_samples = d.ds->count;
    if ((rc = stk_plan_compile(spec, d.ds->height, d.ds->width, d.ds->channels, &d.plan)) < 0) {
        stk_fail_prefix(rc, "%s", uri);
        goto fail;
    }
    int64_t shape[3];
    stk_dtype dtype;
    stk_layout layout;
    stk_plan_output(d.plan, shape, &dtype, &layout, &d.sample_bytes);
    r->out_height = (uint32_t)(layout == STK_CHW ? shape[1] : shape[0]);
    r->out_width = (uint32_t)(layout == STK_CHW ? shape[2] : shape[1]);
    if (d.ds->count == 0) {
        rc = stk_fail(STK_EDATA, "%s: the dataset has no samples", uri);
        goto fail;
    }
    d.nrecs = d.ds->count < d.o.samples ? (uint32_t)d.ds->count : d.o.samples;
    if (!(d.recs = calloc(d.nrecs, sizeof *d.recs))) {
        rc = stk_fail(STK_ENOMEM, "stk_doctor: out of memory");
        goto fail;
    }
    choose_indices(&d, d.ds->count);
    stk_dataset_access_hint(d.ds, STK_ACCESS_RANDOM);

    /* 2-3. Storage. */
    if ((rc = measure_storage(&d, r, cores)) < 0)
        goto fail;
    uint64_t total_bytes = 0;
    uint32_t good = 0;
    uint32_t *sides_w = calloc(d.nrecs, sizeof *sides_w), *sides_h = calloc(d.nrecs, sizeof *sides_h);
    uint32_t nsides = 0;
    for (uint32_t i = 0; i < d.nrecs; i++) {
        rec *x = &d.recs[i];
        if (!x->read || x->rc)
            continue;
        if (x->encoded) {
            stk_image_info info;
            if (stk_image_probe(x->data, x->size, NULL, &info) == 0) {
                x->w = info.width;
                x->h = info.height;
            }
        }
        if (sides_w && sides_h && x->w && x->h) {
            sides_w[nsides] = x->w;
            sides_h[nsides++] = x->h;
        }
    }
    if (nsides) {
        qsort(sides_w, nsides, sizeof *sides_w, cmp_u32);
        qsort(sides_h, nsides, sizeof *sides_h, cmp_u32);
        r->median_width = sides_w[nsides / 2];
        r->median_height = sides_h[nsides / 2];
    }
    free(sides_w);
    free(sides_h);
    stk_errmsg_clear();

    /* 4. CPU per sample. */
    if (!(ins = calloc(d.nrecs, sizeof *ins)) ||
        !(outbuf = stk_aligned_alloc(d.sample_bytes ? d.sample_bytes : 1))) {
        rc = stk_fail(STK_ENOMEM, "stk_doctor: out of memory");
        goto fail;
    }
    for (uint32_t i = 0; i < d.nrecs; i++) {
        rec *x = &d.recs[i];
        if (x->read && !x->rc)
            ins[i] = (input){.data = x->data, .size = x->size, .encoded = x->encoded,
                             .h = x->h, .w = x->w, .c = x->c, .index = x->index, .owner = x};
    }
    timing t;
    double cpu_budget = 0.2 * d.o.time_budget_s;
    if ((rc = time_plan(&d, d.plan, ins, d.nrecs, 20, cpu_budget, outbuf, &scratch, &t)) < 0) {
        stk_fail_prefix(rc, "%s", uri);
        goto fail;
    }
    stk_errmsg_clear();
    for (uint32_t i = 0; i < d.nrecs; i++) {
        rec *x = &d.recs[i];
        if (!x->read || x->rc == STK_ELIMIT)
            continue; /* not reached, or left out for memory: not the data's fault */
        if (x->rc) {
            if (!r->skipped++)
                r->first_skipped = x->index + 1;
        } else {
            good++;
            total_bytes += x->size;
        }
    }
    r->samples = good;
    if (!good || !t.runs) {
        rc = stk_fail(STK_EDATA, "%s: none of the %u sampled records could be read and decoded",
                      uri, d.nrecs);
        goto fail;
    }
    r->mean_bytes = (double)total_bytes / good;
    r->cpu_share = t.wall_s > 0 ? t.cpu_s / t.wall_s : 0;
    double per_run_ms = t.cpu_s / (double)t.runs * 1e3;
    r->decode_ms = per_run_ms * t.decode_share;
    r->augment_ms = per_run_ms - r->decode_ms;
    double cpu_ms = r->read_cpu_ms + r->decode_ms + r->augment_ms;
    r->per_core_per_s = cpu_ms > 0 ? 1e3 / cpu_ms : 0;
    r->consumer_per_s = d.o.step_ms > 0 ? d.o.batch_size * 1e3 / d.o.step_ms : 0;

    model m = {.cpu_ms = cpu_ms,
               .wait_ms = (r->read_wall_ms > r->read_cpu_ms ? r->read_wall_ms : r->read_cpu_ms) +
                          r->decode_ms + r->augment_ms,
               .storage = r->storage_per_s > 0 ? r->storage_per_s : INFINITY,
               .consumer = r->consumer_per_s > 0 ? r->consumer_per_s : INFINITY,
               .read_ms = r->read_cpu_ms, .decode_ms = r->decode_ms, .augment_ms = r->augment_ms};

    /* Predictions: 1..N cores (N fractional under a quota: its own row);
     * past 16 rows, powers of two and N. */
    double ncores = ceil(cores - 1e-9);
    for (double c = 1; c <= ncores && r->npredictions < STK_DOCTOR_MAX_PREDICTIONS;
         c = ncores <= 16 ? c + 1 : c * 2) {
        double cc = c > cores ? cores : c;
        stk_doctor_prediction *p = &r->predictions[r->npredictions++];
        p->cores = cc;
        p->images_per_s = predict(&m, cc, &p->bottleneck, &p->threads);
    }
    if (r->predictions[r->npredictions - 1].cores < cores &&
        r->npredictions < STK_DOCTOR_MAX_PREDICTIONS) {
        stk_doctor_prediction *p = &r->predictions[r->npredictions++];
        p->cores = cores;
        p->images_per_s = predict(&m, cores, &p->bottleneck, &p->threads);
    }
    uint32_t threads_needed;
    double base = predict(&m, cores, &r->bottleneck, &threads_needed);
    r->images_per_s = base;

    /* 5. Recommendations. */
    bool cpu_bound = r->bottleneck == STK_DOCTOR_DECODE || r->bottleneck == STK_DOCTOR_AUGMENT ||
                     r->bottleneck == STK_DOCTOR_READ;
    /* Threads: a loader with one thread per core leaves the cores idle
     * while reads wait. */
    /* So "now" (r->images_per_s, what every gain is relative to) is what a
     * loader with one thread per core gives, and each recommendation's rate
     * is predicted at that thread count too (tcap) — not the rate with
     * enough threads, which would make the threads advice read "+33%
     * 1222/s" with 1222/s given as the current rate. */
    uint32_t nthreads = (uint32_t)ncores;
    double tcap = INFINITY;
    double with_n = m.wait_ms > 0 ? nthreads * 1e3 / m.wait_ms : INFINITY;
    if (threads_needed > nthreads && with_n * DOC_MIN_GAIN <= base) { /* (else within noise) */
        tcap = nthreads;
        add_rec(r, STK_DOCTOR_ADVICE_THREADS, threads_needed, base, with_n, 0,
                "run %u loader threads on %.3g cores: each read waits %.1f ms for storage "
                "(%.2f ms of it CPU); %u threads give %.0f/s",
                threads_needed, cores, r->read_wall_ms, r->read_cpu_ms, nthreads, with_n);
        base = with_n;
        r->images_per_s = base;
    }
    bool files = strcmp(r->format, "imagefolder") == 0 || strcmp(r->format, "list") == 0;
    bool jpeg_src = false, large = false;
    for (uint32_t i = 0; i < d.nrecs && !jpeg_src; i++)
        jpeg_src = !d.recs[i].rc && d.recs[i].encoded &&
                   stk_image_sniff(d.recs[i].data, d.recs[i].size) == STK_IMAGE_JPEG;
    uint32_t out_side = r->out_width > r->out_height ? r->out_width : r->out_height;
    uint32_t max_side = (2 * out_side + 31) / 32 * 32;
    uint32_t src_side = r->median_width > r->median_height ? r->median_width : r->median_height;
    large = jpeg_src && out_side && src_side >= 3 * out_side;
    if (files) {
        /* Estimated: a record of a mapped shard costs about a copy of its
         * bytes (4 GB/s) instead of an open, a read and a close. Only that
         * CPU is counted: shuffled reads from shards still wait for
         * storage per record (docs/doctor.md). */
        model pm = m;
        double packed_ms = r->mean_bytes / 4e9 * 1e3;
        if (packed_ms < r->read_cpu_ms) {
            pm.read_ms = packed_ms;
            pm.cpu_ms = m.cpu_ms - r->read_cpu_ms + packed_ms;
            pm.wait_ms = m.wait_ms - r->read_cpu_ms + packed_ms;
            double v = at_threads(&pm, predict(&pm, cores, NULL, NULL), tcap);
            add_rec(r, STK_DOCTOR_ADVICE_PACK, 0, v, base, 0,
                    "stoker pack the %s into .stk shards: a mapped record instead of an open, "
                    "read and close per sample (%.2f ms CPU each)",
                    r->format, r->read_cpu_ms);
        }
    }
    if (jpeg_src && (cpu_bound || r->bottleneck == STK_DOCTOR_CONSUMER)) {
        double ratio;
        uint32_t nrw;
        if ((rc = measure_restart(&d, &ratio, &nrw)) < 0)
            goto fail;
        if (ratio > 0) {
            model rm = cpu_scaled(&m, r, ratio);
            double v = at_threads(&rm, predict(&rm, cores, NULL, NULL), tcap);
            add_rec(r, STK_DOCTOR_ADVICE_RESTART, DOC_RESTART_INTERVAL, v, base, 1,
                    "stoker pack --restart %u: crops decode only the restart intervals they "
                    "cover; CPU per sample x%.2f (timed on %u rewritten JPEGs)",
                    DOC_RESTART_INTERVAL, ratio, nrw);
        }
    }
    if (large && (cpu_bound || r->bottleneck == STK_DOCTOR_STORAGE)) {
        double ratio, bratio;
        if ((rc = measure_reencode(&d, max_side, &ratio, &bratio)) < 0)
            goto fail;
        if (ratio > 0) {
            model em = cpu_scaled(&m, r, ratio);
            double v = at_threads(&em, predict(&em, cores, NULL, NULL), tcap);
            add_rec(r, STK_DOCTOR_ADVICE_REENCODE, max_side, v, base, 1,
                    "stoker pack --reencode --max-side %u: the photos (median %ux%u) are much "
                    "larger than the %ux%u output; CPU per sample x%.2f, bytes x%.2f (timed)",
                    max_side, r->median_width, r->median_height, r->out_width, r->out_height,
                    ratio, bratio);
        }
    }
    if (dtype == STK_F32 && (cpu_bound || r->bottleneck == STK_DOCTOR_CONSUMER)) {
        double ratio;
        if ((rc = measure_dtype(&d, spec, layout, &ratio)) < 0)
            goto fail;
        if (ratio > 0) {
            model fm = m;
            double aug = r->augment_ms + (r->decode_ms + r->augment_ms) * (ratio - 1);
            if (aug < 0)
                aug = 0;
            fm.augment_ms = aug;
            fm.cpu_ms = r->read_cpu_ms + r->decode_ms + aug;
            fm.wait_ms = m.wait_ms - r->augment_ms + aug;
            double v = at_threads(&fm, predict(&fm, cores, NULL, NULL), tcap);
            add_rec(r, STK_DOCTOR_ADVICE_DTYPE, 16, v, base, 1,
                    "output f16 instead of f32 ('to f16'): half the bytes to write and copy; "
                    "CPU per sample x%.2f (timed)",
                    ratio);
        }
    }
    if (cpu_bound) {
        double target = m.storage < m.consumer ? m.storage : m.consumer;
        double want = isfinite(target) ? ceil(target / r->per_core_per_s - 1e-9) : 2 * ncores;
        if (want > DOC_MAX_CORES)
            want = DOC_MAX_CORES;
        if (want > cores)
            add_rec(r, STK_DOCTOR_ADVICE_CORES, (uint32_t)want,
                    at_threads(&m, predict(&m, want, NULL, NULL), isfinite(tcap) ? want : tcap),
                    base, 0, "%.0f cores instead of %.3g: the CPU work scales with cores%s", want,
                    cores, isfinite(target) ? " until the next limit" : "");
    }
    qsort(r->recommendations, r->nrecommendations, sizeof r->recommendations[0], cmp_rec);

    /* The one line. */
    switch (r->bottleneck) {
    case STK_DOCTOR_CONSUMER: {
        double need = ceil(m.consumer / r->per_core_per_s - 1e-9);
        snprintf(r->summary, sizeof r->summary,
                 "consumer-bound: the training step (%.0f ms per batch of %u) takes %.0f "
                 "images/s; the loader could give %.0f/s on %.3g cores (%.0f %s enough)",
                 d.o.step_ms, d.o.batch_size, m.consumer,
                 predict(&(model){.cpu_ms = m.cpu_ms, .wait_ms = m.wait_ms, .storage = m.storage,
                                  .consumer = INFINITY, .read_ms = m.read_ms,
                                  .decode_ms = m.decode_ms, .augment_ms = m.augment_ms},
                         cores, NULL, NULL),
                 cores, need < 1 ? 1 : need, need <= 1 ? "core is" : "cores are");
        break;
    }
    case STK_DOCTOR_STORAGE:
        snprintf(r->summary, sizeof r->summary,
                 "storage-bound: storage gives %.0f records/s with %u readers (%.1f MB/s "
                 "measured); a read waits %.1f ms, %.2f ms of it CPU; the CPU could do %.0f/s",
                 r->storage_per_s, r->readers, r->read_mb_per_s, r->read_wall_ms,
                 r->read_cpu_ms, cores * r->per_core_per_s);
        break;
    default:
        snprintf(r->summary, sizeof r->summary,
                 "%s-bound: %s takes %.2f of the %.2f CPU ms per sample; %.0f images/s per "
                 "core, %.0f/s on %.3g cores",
                 stk_doctor_stage_name(r->bottleneck), stk_doctor_stage_name(r->bottleneck),
                 r->bottleneck == STK_DOCTOR_DECODE    ? r->decode_ms
                 : r->bottleneck == STK_DOCTOR_AUGMENT ? r->augment_ms
                                                       : r->read_cpu_ms,
                 cpu_ms, r->per_core_per_s, base, cores);
        break;
    }
    r->elapsed_s = stk_now() - d.t0;
    rc = 0;
    goto done;
fail:
    memset(out, 0, sizeof *out);
done:
    free(ins);
    stk_aligned_free(outbuf);
    stk_scratch_free(&scratch);
    doctor_free(&d);
    return rc;
}
