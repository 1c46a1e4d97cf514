/*
 * loader_params.c — the loader's parameters: one table, one row per
 * parameter (key, name, type, default, bounds, a line of doc, where the
 * value lives in the configuration), and the generic functions that read
 * it: stk_loader_set / set_string / set_pointer / get / get_string /
 * get_pointer, stk_loader_param_bounds and stk_loader_param_describe.
 *
 * Why a table. stk_loader_options is frozen (its reserved words are all
 * carved out), and the next features (video clips, Arrow input, Ray
 * workers) bring options of their own. As zstd (ZSTD_CCtx_setParameter,
 * ZSTD_cParam_getBounds) and libjpeg-turbo (tj3Set, TJPARAM_*) do, a new
 * option is a new key and a row here, never a struct field; the bindings
 * build their keyword arguments from stk_loader_param_describe, so a row
 * reaches Python with no other change. Adding a parameter: a key in
 * stoker/loader.h, a row below (a plain field of stk_loader_config needs
 * only its offset; anything else a store/load pair), the code that uses
 * the value, a test, a doc line.
 *
 * How a set works. The value is checked against the row (its form and
 * bounds, with a message naming the parameter and the bounds), stored into
 * a copy of the loader's configuration, and the loader configured afresh
 * from it (stk_ld_reconfigure, loader_create.c), all or nothing: a value
 * that another option contradicts fails with create's own message and the
 * loader keeps its configuration. Only before the loader starts: the
 * configuration decides the pool, the workers and the plan they run.
 *
 * Locking: set runs on the consumer thread with no other call in flight
 * (stoker/loader.h); `started` and the cursors are read under mu. get
 * reads the configuration, which only a set changes.
 */
#include "pipeline/loader_internal.h"

#include "core/error.h"

#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A value in any of the parameters' forms. */
typedef struct param_value {
    uint64_t u;     /* UINT, INT (two's complement), BOOL, ENUM */
    const char *s;  /* STRING */
    const void *p;  /* POINTER */
} param_value;

typedef struct param_row param_row;
struct param_row {
    stk_loader_param key;
    const char *name;       /* as the Python binding's keyword */
    stk_param_type type;
    uint64_t def, min, max; /* UINT: as uint64_t; INT: as int64_t's bits */
    const char *doc;
    const char *values;     /* ENUM: the names of min .. max */
    /* A plain field of stk_loader_config: its offset and width (4 or 8
     * bytes, unsigned). Else store/load. */
    size_t offset;
    unsigned width;
    int (*store)(stk_loader_config *c, const param_row *r, const param_value *v);
    void (*load)(const stk_loader_config *c, const param_row *r, param_value *v);
};

/* ------------------------------------------------------------------------ */
/* Accessors of the parameters that are not a plain field                    */
/* ------------------------------------------------------------------------ */

static int shuffle_store(stk_loader_config *c, const param_row *r, const param_value *v)
{
    c->o.no_shuffle = !v->u;
    return 0;
}
static void shuffle_load(const stk_loader_config *c, const param_row *r, param_value *v)
{
    v->u = !c->o.no_shuffle;
}

static int block_store(stk_loader_config *c, const param_row *r, const param_value *v)
{
    if (v->u)
        c->o.shuffle = STK_SHUFFLE_BLOCK;
    else if (c->o.shuffle == STK_SHUFFLE_BLOCK)
        c->o.shuffle = STK_SHUFFLE_GLOBAL;
    return 0;
}
static void block_load(const stk_loader_config *c, const param_row *r, param_value *v)
{
    v->u = c->o.shuffle == STK_SHUFFLE_BLOCK;
}

static int aug_seed_store(stk_loader_config *c, const param_row *r, const param_value *v)
{
    c->o.aug_seed = v->u;
    c->o.flags |= STK_LOADER_AUG_SEED;
    return 0;
}
static void aug_seed_load(const stk_loader_config *c, const param_row *r, param_value *v)
{
    v->u = c->o.aug_seed;
}

static int eager_store(stk_loader_config *c, const param_row *r, const param_value *v)
{
    c->o.flags = v->u ? c->o.flags | STK_LOADER_EAGER : c->o.flags & ~STK_LOADER_EAGER;
    return 0;
}
static void eager_load(const stk_loader_config *c, const param_row *r, param_value *v)
{
    v->u = (c->o.flags & STK_LOADER_EAGER) != 0;
}

static int fields_store(stk_loader_config *c, const param_row *r, const param_value *v)
{
    char *copy = NULL;
    if (v->s && !(copy = strdup(v->s)))
        return stk_fail(STK_ENOMEM, "loader: out of memory");
    free(c->fields);
    c->fields = copy;
    return 0;
}
static void fields_load(const stk_loader_config *c, const param_row *r, param_value *v)
{
    v->s = c->fields;
}

static int device_store(stk_loader_config *c, const param_row *r, const param_value *v)
{
    char *copy = NULL;
    if (v->s && !(copy = strdup(v->s)))
        return stk_fail(STK_ENOMEM, "loader: out of memory");
    free(c->device_name);
    c->device_name = copy;
    c->device.device = copy;
    c->has_device = true;
    return 0;
}
static void device_load(const stk_loader_config *c, const param_row *r, param_value *v)
{
    v->s = c->device_name;
}

/* placement and decoder: fields of the device options (which then count
 * as given, as a caller's stk_device_options would). */
static int device_field_store(stk_loader_config *c, const param_row *r, const param_value *v)
{
    uint32_t x = (uint32_t)v->u;
    memcpy((char *)c + r->offset, &x, sizeof x);
    c->has_device = true;
    return 0;
}

/* The pointer parameters: a configuration with the new struct, copied
 * (stk_ld_config_copy copies what it points to), replaces c's. */
static int replace_config(stk_loader_config *c, stk_loader_config *tmp)
{
    stk_loader_config copy;
    int rc = stk_ld_config_copy(&copy, tmp);
    if (rc < 0)
        return rc;
    stk_ld_config_free(c);
    *c = copy;
    return 0;
}

static int sampling_store(stk_loader_config *c, const param_row *r, const param_value *v)
{
    stk_loader_config tmp = *c; /* shallow: the copy is made from it */
    tmp.has_sampling = v->p != NULL;
    if (v->p)
        tmp.sampling = *(const stk_sampling *)v->p;
    return replace_config(c, &tmp);
}
static void sampling_load(const stk_loader_config *c, const param_row *r, param_value *v)
{
    v->p = c->has_sampling ? &c->sampling : NULL;
}

static int device_options_store(stk_loader_config *c, const param_row *r, const param_value *v)
{
    stk_loader_config tmp = *c;
    const stk_device_options *d = v->p;
    tmp.has_device = d != NULL;
    memset(&tmp.device, 0, sizeof tmp.device);
    tmp.device_name = NULL;
    if (d) {
        tmp.device = *d;
        tmp.device_name = (char *)d->device; /* copied by replace_config */
    }
    return replace_config(c, &tmp);
}
static void device_options_load(const stk_loader_config *c, const param_row *r, param_value *v)
{
    v->p = c->has_device ? &c->device : NULL;
}

/* ------------------------------------------------------------------------ */
/* The table                                                                 */
/* ------------------------------------------------------------------------ */

#define U32MAX UINT64_C(0xffffffff)
#define U64MAX UINT64_MAX
#define OPT(f) offsetof(stk_loader_config, o.f), sizeof(((stk_loader_options *)0)->f)
#define CFG(f) offsetof(stk_loader_config, f), sizeof(((stk_loader_config *)0)->f)
#define FNS(x) 0, 0, x##_store, x##_load

/* The rows in an order a binding can set them in, one by one, from a
 * default loader: what a value is checked against comes before it
 * (world_size before rank, block before block_size, batch_size before
 * drop_last), and eager, which starts the loader, last. Keys are pinned;
 * this order is not (a row may be inserted anywhere). */
static const param_row params[] = {
    {STK_LOADER_BATCH_SIZE, "batch_size", STK_PARAM_UINT, 256, 1, U32MAX,
     "samples per batch", NULL, OPT(batch_size), NULL, NULL},
    {STK_LOADER_THREADS, "threads", STK_PARAM_UINT, 0, 0, 1024,
     "worker threads; 0 = auto (the autotuner moves the count)", NULL, OPT(threads), NULL, NULL},
    {STK_LOADER_PREFETCH, "prefetch", STK_PARAM_UINT, 0, 0, 4095,
     "batches filled ahead of the consumer; 0 = auto (4, grown to 16)", NULL, OPT(prefetch),
     NULL, NULL},
    {STK_LOADER_MAX_BATCHES, "max_batches", STK_PARAM_UINT, 0, 0, U32MAX,
     "cap on batch buffers (prefetched + lent, at most 4096); 0 = prefetch + 4", NULL,
     OPT(max_batches), NULL, NULL},
    {STK_LOADER_SEED, "seed", STK_PARAM_UINT, 0, 0, U64MAX, "seed of the epoch order (and of "
     "the augmentation unless aug_seed is set)", NULL, OPT(seed), NULL, NULL},
    {STK_LOADER_SHUFFLE, "shuffle", STK_PARAM_BOOL, 1, 0, 1,
     "shuffle the epoch order (0: 0, 1, 2, ...)", NULL, FNS(shuffle)},
    {STK_LOADER_DROP_LAST, "drop_last", STK_PARAM_BOOL, 0, 0, 1,
     "drop the short last batch (and the samples a rank would pad with)", NULL,
     OPT(drop_last), NULL, NULL},
    {STK_LOADER_WORLD_SIZE, "world_size", STK_PARAM_UINT, 1, 1, U32MAX,
     "ranks sharing each epoch", NULL, OPT(world_size), NULL, NULL},
    {STK_LOADER_RANK, "rank", STK_PARAM_UINT, 0, 0, U32MAX, "this process's rank, below "
     "world_size", NULL, OPT(rank), NULL, NULL},
    {STK_LOADER_ON_ERROR, "on_error", STK_PARAM_ENUM, 0, 0, 2,
     "a corrupt sample stops the loader, is skipped, or is replaced", "raise,skip,replace",
     OPT(on_error), NULL, NULL},
    {STK_LOADER_SHUFFLE_MODE, "shuffle_mode", STK_PARAM_ENUM, 0, 0, 2,
     "how an epoch is ordered (stk_shuffle)", "global,none,block", OPT(shuffle), NULL, NULL},
    {STK_LOADER_BLOCK, "block", STK_PARAM_BOOL, 0, 0, 1,
     "block shuffle (shuffle_mode block) instead of global", NULL, FNS(block)},
    {STK_LOADER_BLOCK_SIZE, "block_size", STK_PARAM_UINT, 0, 0, U64MAX,
     "block shuffle: records per block; 0 = 64", NULL, OPT(block_size), NULL, NULL},
    {STK_LOADER_SHUFFLE_WINDOW, "shuffle_window", STK_PARAM_UINT, 0, 0, U32MAX,
     "block shuffle: blocks per window; 0 = 16", NULL, OPT(shuffle_window), NULL, NULL},
    {STK_LOADER_AUGMENT_SEED, "aug_seed", STK_PARAM_UINT, 0, 0, U64MAX,
     "seed of the augmentation draws (unset: seed)", NULL, FNS(aug_seed)},
    {STK_LOADER_VIEWS, "views", STK_PARAM_UINT, 1, 1, 256,
     "views per sample, each augmented independently, consecutive rows", NULL, OPT(views),
     NULL, NULL},
    {STK_LOADER_MEMORY_LIMIT, "memory_limit", STK_PARAM_UINT, 0, 0, U64MAX,
     "bytes the batch pool and the workers' scratch may use; 0 = no limit", NULL,
     OPT(memory_limit), NULL, NULL},
    {STK_LOADER_DECODE_BUDGET, "decode_budget", STK_PARAM_UINT, 0, 0, U64MAX,
     "bytes one decode may need in a worker; 0 = memory_limit's share (none without it)", NULL,
     CFG(decode_budget), NULL, NULL},
    {STK_LOADER_FIELDS, "fields", STK_PARAM_STRING, 0, 0, 0,
     "the fields each batch delivers, comma-separated (unset: image,label)", NULL,
     FNS(fields)},
    {STK_LOADER_SAMPLING, "sampling", STK_PARAM_POINTER, 0, 0, 0,
     "subsets, weights, class balance, mixing (const stk_sampling *)", NULL, FNS(sampling)},
    {STK_LOADER_DEVICE_OPTIONS, "device_options", STK_PARAM_POINTER, 0, 0, 0,
     "device, placement and decoder together (const stk_device_options *)", NULL,
     FNS(device_options)},
    {STK_LOADER_DEVICE, "device", STK_PARAM_STRING, 0, 0, 0,
     "where batches are delivered: cuda:N (unset, \"\" or cpu: host memory)", NULL,
     FNS(device)},
    {STK_LOADER_PLACEMENT, "placement", STK_PARAM_ENUM, 0, 0, 2,
     "with a device: who augments (auto, cpu, gpu)", "auto,cpu,gpu",
     CFG(device.placement), device_field_store, NULL},
    {STK_LOADER_DECODER, "decoder", STK_PARAM_ENUM, 0, 0, 1,
     "with a device: who decodes JPEGs (cpu, nvjpeg)", "cpu,nvjpeg", CFG(device.decoder),
     device_field_store, NULL},
    {STK_LOADER_EAGER_START, "eager", STK_PARAM_BOOL, 0, 0, 1,
     "start the workers and the pool now, not at the first next", NULL, FNS(eager)},
};

#define NPARAMS (sizeof params / sizeof params[0])

static const param_row *find(stk_loader_param p)
{
    for (size_t i = 0; i < NPARAMS; i++)
        if (params[i].key == p)
            return &params[i];
    return NULL;
}

static bool is_number(stk_param_type t)
{
    return t == STK_PARAM_UINT || t == STK_PARAM_INT || t == STK_PARAM_BOOL ||
           t == STK_PARAM_ENUM;
}

static const char *form_name(stk_param_type t)
{
    return t == STK_PARAM_STRING ? "a string parameter (stk_loader_set_string)"
           : t == STK_PARAM_POINTER ? "a pointer parameter (stk_loader_set_pointer)"
                                     : "a number parameter (stk_loader_set)";
}

/* The row of p, used in the form `form`, else NULL with the error set. */
static const param_row *row_for(const char *fn, stk_loader_param p, stk_param_type form)
{
    const param_row *r = find(p);
    if (!r) {
        stk_fail(STK_EINVAL, "%s: unknown loader parameter %d", fn, (int)p);
        return NULL;
    }
    bool ok = form == STK_PARAM_UINT ? is_number(r->type) : r->type == form;
    if (!ok) {
        stk_fail(STK_EINVAL, "%s: %s is %s", fn, r->name, form_name(r->type));
        return NULL;
    }
    return r;
}

static void load(const stk_loader_config *c, const param_row *r, param_value *v)
{
    memset(v, 0, sizeof *v);
    if (r->load) {
        r->load(c, r, v);
    } else if (r->width == 4) {
        uint32_t x;
        memcpy(&x, (const char *)c + r->offset, sizeof x);
        v->u = x;
    } else {
        memcpy(&v->u, (const char *)c + r->offset, sizeof v->u);
    }
}

/* Store v into a copy of l's configuration and configure l from it. */
static int apply(const char *fn, stk_loader *l, const param_row *r, const param_value *v)
{
    pthread_mutex_lock(&l->mu);
    bool started = l->started;
    bool placed = l->base_pos || l->base_start || l->cons_pos;
    pthread_mutex_unlock(&l->mu);
    if (started)
        return stk_fail(STK_ESTATE, "%s: %s cannot change once the loader has started (set "
                                    "parameters before stk_loader_start or the first next)",
                        fn, r->name);
    if (placed)
        return stk_fail(STK_ESTATE, "%s: %s cannot change after stk_loader_state_set moved "
                                    "the loader (set parameters first)",
                        fn, r->name);
    stk_loader_config c;
    int rc = stk_ld_config_copy(&c, &l->cfg);
    if (rc < 0)
        return rc;
    if (r->store) {
        rc = r->store(&c, r, v);
    } else if (r->width == 4) {
        uint32_t x = (uint32_t)v->u;
        memcpy((char *)&c + r->offset, &x, sizeof x);
    } else {
        memcpy((char *)&c + r->offset, &v->u, sizeof v->u);
    }
    if (rc < 0) {
        stk_ld_config_free(&c);
        return rc;
    }
    if ((rc = stk_ld_reconfigure(l, &c)) < 0) {
        stk_fail_prefix(rc, "%s(%s)", fn, r->name);
        return rc;
    }
    if (l->cfg.o.flags & STK_LOADER_EAGER)
        return stk_loader_start(l);
    return 0;
}

int stk_loader_set(stk_loader *l, stk_loader_param p, int64_t value)
{
    if (!l)
        return stk_fail(STK_EINVAL, "stk_loader_set: loader is NULL");
    const param_row *r = row_for("stk_loader_set", p, STK_PARAM_UINT);
    if (!r)
        return STK_EINVAL;
    uint64_t u = (uint64_t)value;
    bool in = r->type == STK_PARAM_INT ? value >= (int64_t)r->min && value <= (int64_t)r->max
                                       : u >= r->min && u <= r->max;
    if (!in) {
        if (r->type == STK_PARAM_INT)
            return stk_fail(STK_EINVAL, "stk_loader_set: %s %" PRId64 " is out of bounds [%" PRId64
                                        ", %" PRId64 "]",
                            r->name, value, (int64_t)r->min, (int64_t)r->max);
        return stk_fail(STK_EINVAL, "stk_loader_set: %s %" PRIu64 " is out of bounds [%" PRIu64
                                    ", %" PRIu64 "]",
                        r->name, u, r->min, r->max);
    }
    param_value v = {.u = u};
    return apply("stk_loader_set", l, r, &v);
}

int stk_loader_set_string(stk_loader *l, stk_loader_param p, const char *value)
{
    if (!l)
        return stk_fail(STK_EINVAL, "stk_loader_set_string: loader is NULL");
    const param_row *r = row_for("stk_loader_set_string", p, STK_PARAM_STRING);
    if (!r)
        return STK_EINVAL;
    param_value v = {.s = value};
    return apply("stk_loader_set_string", l, r, &v);
}

int stk_loader_set_pointer(stk_loader *l, stk_loader_param p, const void *value)
{
    if (!l)
        return stk_fail(STK_EINVAL, "stk_loader_set_pointer: loader is NULL");
    const param_row *r = row_for("stk_loader_set_pointer", p, STK_PARAM_POINTER);
    if (!r)
        return STK_EINVAL;
    param_value v = {.p = value};
    return apply("stk_loader_set_pointer", l, r, &v);
}

int stk_loader_get(const stk_loader *l, stk_loader_param p, int64_t *out)
{
    if (!l || !out)
        return stk_fail(STK_EINVAL, "stk_loader_get: NULL argument");
    const param_row *r = row_for("stk_loader_get", p, STK_PARAM_UINT);
    if (!r)
        return STK_EINVAL;
    param_value v;
    load(&l->cfg, r, &v);
    *out = (int64_t)v.u;
    return 0;
}

int stk_loader_get_string(const stk_loader *l, stk_loader_param p, const char **out)
{
    if (!l || !out)
        return stk_fail(STK_EINVAL, "stk_loader_get_string: NULL argument");
    const param_row *r = row_for("stk_loader_get_string", p, STK_PARAM_STRING);
    if (!r)
        return STK_EINVAL;
    param_value v;
    load(&l->cfg, r, &v);
    *out = v.s;
    return 0;
}

int stk_loader_get_pointer(const stk_loader *l, stk_loader_param p, const void **out)
{
    if (!l || !out)
        return stk_fail(STK_EINVAL, "stk_loader_get_pointer: NULL argument");
    const param_row *r = row_for("stk_loader_get_pointer", p, STK_PARAM_POINTER);
    if (!r)
        return STK_EINVAL;
    param_value v;
    load(&l->cfg, r, &v);
    *out = v.p;
    return 0;
}

int stk_loader_param_bounds(stk_loader_param p, stk_param_bounds *out)
{
    if (!out)
        return stk_fail(STK_EINVAL, "stk_loader_param_bounds: out is NULL");
    memset(out, 0, sizeof *out);
    const param_row *r = find(p);
    if (!r)
        return stk_fail(STK_EINVAL, "stk_loader_param_bounds: unknown loader parameter %d",
                        (int)p);
    out->min = (int64_t)r->min;
    out->max = (int64_t)r->max;
    out->def = (int64_t)r->def;
    out->type = r->type;
    return 0;
}

int stk_loader_param_describe(int index, stk_loader_param_info *info)
{
    if (!info)
        return stk_fail(STK_EINVAL, "stk_loader_param_describe: info is NULL");
    memset(info, 0, sizeof *info);
    if (index < 0 || (size_t)index >= NPARAMS)
        return stk_fail(STK_ENOENT, "stk_loader_param_describe: no parameter %d (there are %d)",
                        index, (int)NPARAMS);
    const param_row *r = &params[index];
    info->key = r->key;
    info->type = r->type;
    info->name = r->name;
    info->doc = r->doc;
    info->values = r->values;
    info->min = (int64_t)r->min;
    info->max = (int64_t)r->max;
    info->def = (int64_t)r->def;
    return 0;
}
