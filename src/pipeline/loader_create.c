/*
 * loader_create.c — a loader made from its options: the options resolved
 * (defaults, limits), the sampler built (with the labels balance_classes
 * reads), the fields resolved, the plan compiled, the knobs' starting
 * values (threads, prefetch, the pool within memory_limit and the decode
 * budget), the device opened; and destroy, which stops the workers and
 * frees it all.
 *
 * Two steps: the options are copied into the loader's configuration
 * (stk_loader_config: the caller's strings and arrays copied, so it can be
 * used again), and `configure` derives everything from the configuration.
 * stk_loader_set (loader_params.c) changes a copy of the configuration and
 * calls stk_ld_reconfigure, which configures a fresh loader from it and,
 * only if that succeeds, moves it into the caller's handle (everything
 * after the locks), so a failed set leaves the loader as it was.
 *
 * create starts nothing (see loader.c, "Laziness"): it allocates the
 * arrays of slots and workers but no slot's buffers and no thread, unless
 * STK_LOADER_EAGER asks stk_loader_start to run at once. Everything it
 * writes is immutable afterwards except the knobs (active, prefetch), which
 * loader_autotune.c moves under mu.
 */
#include "pipeline/loader_internal.h"

#include "core/cpu.h"
#include "core/error.h"
#include "core/util.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#define XXH_INLINE_ALL
#include <xxhash.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    if (l->cfg.decode_budget) /* STK_LOADER_DECODE_BUDGET, set: it rules */
        l->decode_budget = l->cfg.decode_budget;
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
    l->opt.device = NULL; /* the configuration's; copied here */
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

/* ------------------------------------------------------------------------ */
/* The configuration                                                         */
/* ------------------------------------------------------------------------ */

/* A copy of n elements of `size` bytes from malloc; non-NULL for a non-NULL
 * src even when n is 0 (a given empty array stays given). */
static int dup_array(const void *src, uint64_t n, size_t size, const void **out)
{
    *out = NULL;
    if (!src)
        return 0;
    uint64_t bytes;
    if (!stk_mul_ok(n, size, &bytes) || bytes > SIZE_MAX - 1)
        return stk_fail(STK_ELIMIT, "loader: an array of %llu entries is too large",
                        (unsigned long long)n);
    void *p = malloc(bytes ? (size_t)bytes : 1);
    if (!p)
        return stk_fail(STK_ENOMEM, "loader: out of memory copying the sampling options");
    if (bytes)
        memcpy(p, src, (size_t)bytes);
    *out = p;
    return 0;
}

static int dup_string(const char *src, char **out)
{
    *out = NULL;
    if (src && !(*out = strdup(src)))
        return stk_fail(STK_ENOMEM, "loader: out of memory");
    return 0;
}

void stk_ld_config_free(stk_loader_config *cfg)
{
    free(cfg->spec);
    free(cfg->fields);
    free(cfg->device_name);
    free((void *)cfg->sampling.indices);
    free((void *)cfg->sampling.weights);
    free((void *)cfg->sampling.labels);
    free((void *)cfg->sampling.mix_sizes);
    free((void *)cfg->sampling.mix_weights);
    memset(cfg, 0, sizeof *cfg);
}

/* The borrowed parts of a configuration (given by the caller, or another
 * configuration's) copied into cfg, whose plain fields are already set. */
static int config_own(stk_loader_config *cfg, const char *spec, const char *fields,
                      const stk_sampling *sp, const stk_device_options *dev)
{
    int rc;
    cfg->spec = NULL;
    cfg->fields = NULL;
    cfg->device_name = NULL;
    cfg->has_sampling = sp != NULL;
    memset(&cfg->sampling, 0, sizeof cfg->sampling);
    if (sp) {
        cfg->sampling = *sp; /* counts, flags, reserved words as given */
        cfg->sampling.indices = NULL;
        cfg->sampling.weights = NULL;
        cfg->sampling.labels = NULL;
        cfg->sampling.mix_sizes = NULL;
        cfg->sampling.mix_weights = NULL;
    }
    memset(&cfg->device, 0, sizeof cfg->device);
    cfg->has_device = dev != NULL;
    if (dev)
        cfg->device = *dev;
    cfg->device.device = NULL;
    if ((rc = dup_string(spec ? spec : "", &cfg->spec)) < 0 ||
        (rc = dup_string(fields, &cfg->fields)) < 0 ||
        (rc = dup_string(dev ? dev->device : NULL, &cfg->device_name)) < 0)
        goto fail;
    cfg->device.device = cfg->device_name;
    if (sp) {
        stk_sampling *c = &cfg->sampling;
        const void *a;
        if ((rc = dup_array(sp->indices, sp->num_indices, sizeof *sp->indices, &a)) < 0)
            goto fail;
        c->indices = a;
        if ((rc = dup_array(sp->weights, sp->num_weights, sizeof *sp->weights, &a)) < 0)
            goto fail;
        c->weights = a;
        if ((rc = dup_array(sp->labels, sp->num_labels, sizeof *sp->labels, &a)) < 0)
            goto fail;
        c->labels = a;
        if ((rc = dup_array(sp->mix_sizes, sp->num_mix, sizeof *sp->mix_sizes, &a)) < 0)
            goto fail;
        c->mix_sizes = a;
        if ((rc = dup_array(sp->mix_weights, sp->num_mix, sizeof *sp->mix_weights, &a)) < 0)
            goto fail;
        c->mix_weights = a;
    }
    return 0;
fail:
    stk_ld_config_free(cfg);
    return rc;
}

int stk_ld_config_from_options(stk_loader_config *cfg, const char *spec,
                               const stk_loader_options *opts)
{
    memset(cfg, 0, sizeof *cfg);
    if (opts)
        cfg->o = *opts;
    cfg->o.sampling = NULL;
    cfg->o.fields = NULL;
    cfg->o.device = NULL;
    /* The defaults resolve_options gives a 0 (the same values: so the
     * parameters read back what is in effect). */
    if (!cfg->o.batch_size)
        cfg->o.batch_size = DEFAULT_BATCH_SIZE;
    if (!cfg->o.world_size)
        cfg->o.world_size = 1;
    if (!cfg->o.views)
        cfg->o.views = 1;
    return config_own(cfg, spec, opts ? opts->fields : NULL, opts ? opts->sampling : NULL,
                      opts ? opts->device : NULL);
}

int stk_ld_config_copy(stk_loader_config *dst, const stk_loader_config *src)
{
    *dst = *src;
    return config_own(dst, src->spec, src->fields, src->has_sampling ? &src->sampling : NULL,
                      src->has_device ? &src->device : NULL);
}

/* The options create resolves, as stk_loader_options: cfg's, with its
 * copies of the borrowed parts. */
static void config_options(const stk_loader_config *cfg, stk_loader_options *o)
{
    *o = cfg->o;
    o->fields = cfg->fields;
    o->sampling = cfg->has_sampling ? &cfg->sampling : NULL;
    o->device = cfg->has_device ? &cfg->device : NULL;
}

/* ------------------------------------------------------------------------ */
/* Configure, create, destroy                                                */
/* ------------------------------------------------------------------------ */

/* What configure derived (and allocated) from the configuration, freed:
 * everything but the configuration itself, the locks and the cursors. */
static void free_derived(stk_loader *l)
{
    for (uint32_t i = 0; i < l->nslots; i++)
        stk_ld_slot_free_buffers(l, &l->slots[i]);
    l->nslots = 0;
    stk_gpu_pipe_free(l->gpipe);
    stk_gpu_close(l->gpu);
    free(l->slots);
    free(l->workers);
    free(l->events);
    stk_plan_free(l->plan);
    free(l->lf);
    stk_sampler_destroy(l->sampler);
    l->gpipe = NULL;
    l->gpu = NULL;
    l->slots = NULL;
    l->workers = NULL;
    l->events = NULL;
    l->plan = NULL;
    l->lf = NULL;
    l->sampler = NULL;
}

/* Build everything an unstarted loader derives from l->cfg over l->ds: the
 * resolved options, sampler, fields, plan, knobs, device, and the arrays of
 * slots, workers and events (no slot's buffers, no thread). On failure what
 * was built is left for free_derived. */
static int configure(stk_loader *l)
{
    int rc;
    stk_dataset *ds = l->ds;
    const char *spec = l->cfg.spec;
    stk_loader_options given;
    config_options(&l->cfg, &given);
    l->spec_hash = XXH3_64bits(spec, strlen(spec));
    if ((rc = resolve_options(&given, &l->opt)) < 0)
        return rc;

    l->views = l->opt.views;
    l->aug_seed = l->opt.flags & STK_LOADER_AUG_SEED ? l->opt.aug_seed : l->opt.seed;
    stk_sampling balanced;
    int64_t *labels = NULL;
    const stk_sampling *sampling = l->opt.sampling;
    if (sampling && sampling->balance_classes) {
        if ((rc = balance_labels(ds, sampling, &balanced, &labels)) < 0)
            return rc;
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
    l->opt.sampling = NULL; /* the configuration's; the sampler holds copies */
    if (rc < 0)
        return rc;
    l->list_size = stk_sampler_list_size(l->sampler);
    if (l->views > 1 && (l->list_size >> 56 || ds->count >> 56))
        return stk_fail(STK_ELIMIT, "loader: views need fewer than 2^56 samples");
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
    if (!l->lf)
        return stk_fail(STK_ENOMEM, "loader: out of memory");
    if ((rc = stk_lfields_resolve(ds, l->opt.fields, l->lf)) < 0)
        return rc;
    l->opt.fields = NULL; /* the configuration's; resolved into lf */
    if ((rc = (l->lf->spatial ? stk_plan_compile_spatial : stk_plan_compile)(
             spec, ds->height, ds->width, ds->channels, &l->plan)) < 0) {
        stk_fail_prefix(rc, "%s", ds->uri);
        return rc;
    }
    stk_plan_output(l->plan, l->sample_shape, &l->dtype, &l->layout, &l->sample_bytes);
    stk_lfields_set_mask_size(l->lf, l->layout == STK_CHW ? l->sample_shape[1] : l->sample_shape[0],
                              l->layout == STK_CHW ? l->sample_shape[2] : l->sample_shape[1]);
    if ((rc = plan_knobs(l)) < 0)
        return rc;
    if ((rc = open_device(l, spec)) < 0)
        return rc;

    /* Chunks: a few per thread per batch, so all threads share one batch
     * without locking per sample. */
    uint32_t parts = l->threads_max * 4;
    l->chunk_rows = (l->opt.batch_size + parts - 1) / parts;
    if (l->chunk_rows == 0)
        l->chunk_rows = 1;

    l->slots = calloc(l->opt.max_batches, sizeof *l->slots);
    l->workers = calloc(l->threads_max, sizeof *l->workers);
    l->events = calloc(EVENT_RING, sizeof *l->events);
    if (!l->slots || !l->workers || !l->events)
        return stk_fail(STK_ENOMEM, "loader: out of memory");
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
    if ((rc = stk_ld_config_from_options(&l->cfg, spec, opts)) < 0) {
        free(l);
        return rc;
    }
    if ((rc = configure(l)) < 0) {
        free_derived(l);
        stk_ld_config_free(&l->cfg);
        free(l);
        return rc;
    }
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
}

int stk_ld_reconfigure(stk_loader *l, stk_loader_config *cfg)
{
    stk_loader *t = calloc(1, sizeof *t);
    if (!t) {
        stk_ld_config_free(cfg);
        return stk_fail(STK_ENOMEM, "loader: out of memory");
    }
    t->ds = l->ds;
    t->cfg = *cfg; /* taken */
    memset(cfg, 0, sizeof *cfg);
    int rc = configure(t);
    if (rc < 0) {
        free_derived(t);
        stk_ld_config_free(&t->cfg);
        free(t);
        /* configure may have given the dataset its access hint: l's again */
        stk_dataset_access_hint(l->ds, l->opt.shuffle == STK_SHUFFLE_NONE
                                           ? STK_ACCESS_SEQUENTIAL
                                           : STK_ACCESS_RANDOM);
        return rc;
    }
    /* Unstarted: no thread, no slot buffer, nothing delivered. Everything
     * after the locks is t's; the epoch set_epoch chose stays. */
    uint64_t epoch = l->cons_epoch;
    free_derived(l);
    stk_ld_config_free(&l->cfg);
    size_t keep = offsetof(stk_loader, ds);
    memcpy((char *)l + keep, (char *)t + keep, sizeof *l - keep);
    free(t);
    for (uint32_t i = 0; i < l->threads_max; i++)
        l->workers[i].loader = l;
    pthread_mutex_lock(&l->mu);
    stk_ld_reset_locked(l, epoch, 0, 0);
    pthread_mutex_unlock(&l->mu);
    return 0;
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
    free_derived(l);
    stk_ld_config_free(&l->cfg);
    pthread_cond_destroy(&l->work_cv);
    pthread_cond_destroy(&l->ready_cv);
    pthread_cond_destroy(&l->park_cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

