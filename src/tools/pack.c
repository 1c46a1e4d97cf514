/*
 * pack.c — stk_pack: any dataset stoker can open, into .stk shards.
 *
 * How it works: the source is processed in blocks of 64 x jobs samples.
 * Worker threads claim samples of the block and prepare each record's
 * payload in their own per-slot buffer — read the sample; in keep mode
 * validate an encoded image by decoding it fully (a truncated JPEG is only
 * detectable that way) and keep its bytes as they are (or, with
 * restart_interval, its lossless rewrite with restart markers, kept only if
 * it decodes to the same pixels: apply_restarts); in raw mode decode
 * and store pixels (prefix + pixels, or prefix + one zstd frame); in
 * reencode mode decode, shrink to max_side and store a new JPEG. The
 * calling thread then writes the block in order. Output is therefore
 * byte-identical whatever `jobs` is, memory stays at one block of payloads,
 * and the writer stays single-threaded.
 *
 * Invariant: item k of block b holds source sample start(b) + k. A worker
 * claims items with a compare-and-swap on a counter tagged with the block's
 * generation (claim()), so one that stalls after reading a block and wakes
 * when the next has begun claims nothing, rather than filling the new
 * block with the old block's samples (issue 9: tests/test_pack_stall.c
 * injects exactly that stall). Each record also stores the source index it
 * was read from (field source_index), which `stoker verify` checks, and,
 * when the source names its samples (an image folder's file paths, a
 * TFRecord's records, shards packed with names...), that name (field
 * source_name, escaped as one line of a label map: docs/format.md), so that
 * ds.path(i) on the shards names the input as it did on the source. A
 * relative name resolves only against the directory the pack ran in, so
 * for a source URI that is not absolute that directory goes into the
 * metadata as source_root, and stk_dataset_sample_path resolves relative
 * names against it: ds.path(i) opens from any working directory (issue 26).
 * An absolute source makes absolute names and no source_root: its shards
 * are the same bytes from any working directory.
 * Every other field of the source (a multi-field .stk set's boxes, masks,
 * ids; a reader's) is carried after these, read by the workers through
 * stk_dataset_field_view into the item (carried_fields, prepare_extra);
 * a source of only image and label packs to the same bytes as before.
 *
 * Bad inputs: a sample whose read or decode fails with STK_EDATA is left
 * out and reported through on_skip (with strict, it fails the pack) — never
 * silently dropped. So is each input the open of the source left out
 * (stk_dataset_skipped: an image folder's unreadable directory or symlink
 * loop), with index UINT64_MAX, before any record. Any other error stops
 * the pack; shards this call already wrote are removed again, so a failed
 * pack leaves no partial dataset.
 */
#include "codec/codec.h"
#include "codec/codec_write.h"
#include "ops/resample.h"
#include "core/error.h"
#include "core/util.h"
#include "format/class_names.h"
#include "format/dataset.h"
#include "format/stk/stk_format.h"
#include "format/stk/stk_writer.h"
#include "io/remote.h"
#include "tools/pack_upload.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#define BLOCK_PER_JOB 64
#define DEFAULT_SHARD_BYTES (1ull << 30)

typedef struct item {
    stk_scratch payload;   /* owned: record bytes for the image field */
    size_t size;
    int64_t label;
    int64_t source;        /* the source index this item was read from */
    bool restarted;        /* payload is a restart-marker rewrite of the source */
    char *name;            /* owned: the escaped source name (packer.named), or NULL */
    stk_scratch *extra;    /* owned: packer.nextra values of the carried fields */
    size_t *extra_size;    /* owned: their sizes */
    int rc;                /* 0 ok, < 0 failed */
    char *reason;          /* owned when rc < 0 */
} item;

typedef struct packer {
    stk_dataset *ds;       /* owned */
    const stk_pack_options *opt;
    bool raw_out;          /* the image field stores raw pixels */
    bool encoded_src;      /* the source yields encoded images */
    bool named;            /* the source names its samples: write source_name */
    int zstd_level;
    /* The source's fields beyond image, label and the names pack writes
     * itself (source_index, source_name), carried into every record after
     * those: extra_src[k] is the source's field index of extra[k]. */
    uint32_t nextra;
    uint32_t extra_src[STK_MAX_FIELDS];
    stk_field_def extra[STK_MAX_FIELDS];
    item *items;           /* block_cap, owned */
    uint32_t block_cap;

    pthread_mutex_t mu;
    pthread_cond_t start_cv, done_cv;
    /* Guarded by mu. */
    uint64_t block_start;
    uint32_t block_count, done;
    uint64_t generation;
    bool stopping;
    /* Lock-free: the claim counter of the current block, tagged with its
     * generation (low 32 bits of `generation` << 32 | next item index).
     * Set under mu when a block starts; a worker claims item k of the block
     * it read under mu only by a compare-and-swap that still finds that
     * block's tag, so a worker stalled between reading the block and
     * claiming can never take an item of the next block (see claim()). */
    _Atomic uint64_t claim;
} packer;

typedef struct pack_worker {
    packer *p;
    pthread_t thread;
    stk_scratch read_scratch, pixels; /* owned by the thread */
    stk_scratch dense, resized;       /* owned by the thread: reencode mode */
    stk_scratch rewritten, recheck;   /* owned by the thread: restart rewriting */
    ZSTD_CCtx *zstd;
    stk_scratch view;                 /* owned by the thread: a carried field's view */
} pack_worker;

static void set_reason(item *it, int rc)
{
    it->rc = rc;
    free(it->reason);
    it->reason = stk_strdup(stk_errmsg());
}

/* Prefix + pixels (HWC), or prefix + zstd frame, into payload (*size its
 * bytes): the image field's (store_raw) or a carried raw_image field's. */
static int store_raw_into(packer *p, pack_worker *w, stk_scratch *payload, size_t *size,
                          const stk_image_view *v)
{
    uint64_t n = (uint64_t)v->height * v->width * v->channels;
    size_t bound = p->zstd_level ? ZSTD_compressBound((size_t)n) : (size_t)n;
    int rc = stk_scratch_reserve(payload, STK_RAW_PREFIX + bound);
    if (rc < 0)
        return rc;
    uint8_t *out = payload->data;
    stk_wr32(out, v->height);
    stk_wr32(out + 4, v->width);
    stk_wr32(out + 8, v->channels);
    uint8_t *px = out + STK_RAW_PREFIX;
    if (p->zstd_level) {
        if ((rc = stk_scratch_reserve(&w->pixels, (size_t)n)) < 0)
            return rc;
        px = w->pixels.data;
    }
    stk_image_copy_hwc(v, px);
    if (!p->zstd_level) {
        *size = STK_RAW_PREFIX + (size_t)n;
        return 0;
    }
    size_t z = ZSTD_compressCCtx(w->zstd, out + STK_RAW_PREFIX, bound, px, (size_t)n, p->zstd_level);
    if (ZSTD_isError(z))
        return stk_fail(STK_EIO, "zstd: %s", ZSTD_getErrorName(z));
    *size = STK_RAW_PREFIX + z;
    return 0;
}

/* Prefix + pixels (HWC), or prefix + zstd frame, into it->payload. */
static int store_raw(packer *p, pack_worker *w, item *it, const stk_image_view *v)
{
    return store_raw_into(p, w, &it->payload, &it->size, v);
}

/* Reencode mode: shrink the decoded image `v` so its longest side is at most
 * max_side (Pillow's antialiased bilinear, aspect kept, sides rounded), and
 * encode it as a JPEG into it->payload. */
static int store_reencoded(packer *p, pack_worker *w, item *it, const stk_image_view *v)
{
    uint32_t h = v->height, wd = v->width, c = v->channels;
    int rc;
    /* Dense HWC first (raw sources may be planar). */
    if ((rc = stk_scratch_reserve(&w->dense, (size_t)h * wd * c)) < 0)
        return rc;
    stk_image_copy_hwc(v, w->dense.data);
    const uint8_t *px = w->dense.data;
    uint32_t long_side = h > wd ? h : wd, max_side = p->opt->max_side;
    if (c != 1 && c != 3)
        return stk_fail(STK_EUNSUPPORTED, "reencode: %u-channel images are not supported", c);
    if (max_side && long_side > max_side) {
        double f = (double)max_side / long_side;
        uint32_t oh = (uint32_t)(h * f + 0.5), ow = (uint32_t)(wd * f + 0.5);
        oh = oh ? oh : 1;
        ow = ow ? ow : 1;
        if ((rc = stk_scratch_reserve(&w->resized, (size_t)oh * ow * c)) < 0)
            return rc;
        if ((rc = stk_rs_resize_u8(px, h, wd, (ptrdiff_t)wd * c, (int)c, NULL, oh, ow,
                                   w->resized.data, NULL)) < 0)
            return rc;
        px = w->resized.data;
        h = oh;
        wd = ow;
    }
    return stk_jpeg_encode(px, wd, h, c, (size_t)wd * c, p->opt->quality ? p->opt->quality : 90,
                           &it->payload, &it->size);
}

/* Restart rewriting (opt->restart_interval): replace the JPEG in
 * it->payload by its lossless rewrite with restart markers when its decoded
 * pixels equal `expect` (the payload's own decode). The rewrite is lossless
 * by construction; the comparison makes sure of it. Files that cannot or
 * need not be rewritten keep their bytes. */
static int apply_restarts(packer *p, pack_worker *w, item *it, const stk_image_view *expect)
{
    size_t n;
    stk_image_view v;
    if (stk_image_sniff(it->payload.data, it->size) != STK_IMAGE_JPEG)
        return 0;
    int rc = stk_jpeg_add_restarts(it->payload.data, it->size, STK_DEFAULT_MAX_PIXELS,
                                   p->opt->restart_interval, &w->rewritten, &n);
    if (rc <= 0)
        return rc == STK_ENOMEM ? rc : 0; /* left as it is */
    if ((rc = stk_image_decode(w->rewritten.data, n, NULL, NULL, 1, &w->recheck, &v)) < 0)
        return rc == STK_ENOMEM ? rc : 0;
    if (v.width != expect->width || v.height != expect->height || v.channels != expect->channels)
        return 0;
    for (uint32_t y = 0; y < v.height; y++)
        if (memcmp(v.pixels + y * v.row_stride, expect->pixels + y * expect->row_stride,
                   (size_t)v.width * v.channels) != 0)
            return 0;
    if ((rc = stk_scratch_reserve(&it->payload, n)) < 0)
        return rc;
    memcpy(it->payload.data, w->rewritten.data, n);
    it->size = n;
    it->restarted = true;
    return 0;
}

static void prepare_item(packer *p, pack_worker *w, uint64_t index, item *it)
{
    stk_sample s;
    it->rc = 0;
    it->size = 0;
    it->source = (int64_t)index;
    it->restarted = false;
    int rc = p->ds->vt->read(p->ds, index, &s, &w->read_scratch);
    if (rc < 0) {
        set_reason(it, rc);
        return;
    }
    it->label = s.label;
    if (s.image.pixels) { /* raw source */
        if (!p->raw_out && p->opt->mode != STK_PACK_REENCODE) {
            /* The field was declared encoded because the source's shape
             * varies (an LMDB set of raw Datums of several sizes): raw
             * pixels there would be unreadable records. */
            char name[1024];
            stk_dataset_sample_name(p->ds, index, name, sizeof name);
            set_reason(it, stk_fail(STK_EUNSUPPORTED,
                                    "%s: raw pixels of a %ux%ux%u image in a source whose "
                                    "shape varies: pack it with --raw (raw images of any "
                                    "shape) or --reencode",
                                    name, s.image.height, s.image.width, s.image.channels));
            return;
        }
        rc = p->opt->mode == STK_PACK_REENCODE ? store_reencoded(p, w, it, &s.image)
                                               : store_raw(p, w, it, &s.image);
        if (rc < 0)
            set_reason(it, rc);
        return;
    }
    stk_image_view view;
    if (p->raw_out || !p->opt->no_validate || p->opt->mode == STK_PACK_REENCODE ||
        p->opt->restart_interval) {
        rc = stk_image_decode(s.encoded, s.encoded_size, NULL, NULL, 1, &w->pixels, &view);
        if (rc < 0) {
            char name[1024];
            stk_dataset_sample_name(p->ds, index, name, sizeof name);
            stk_fail_prefix(rc, "%s", name);
            set_reason(it, rc == STK_ELIMIT ? STK_EDATA : rc);
            return;
        }
    }
    if (p->opt->mode == STK_PACK_REENCODE) {
        if ((rc = store_reencoded(p, w, it, &view)) < 0) {
            set_reason(it, rc);
            return;
        }
        if (p->opt->restart_interval) {
            /* The new JPEG's own pixels are what the rewrite must keep. */
            if ((rc = stk_image_decode(it->payload.data, it->size, NULL, NULL, 1, &w->pixels,
                                       &view)) < 0 ||
                (rc = apply_restarts(p, w, it, &view)) < 0)
                set_reason(it, rc);
        }
        return;
    }
    if (p->raw_out) {
        /* view points into w->pixels; store_raw with zstd also uses
         * w->pixels, so copy through the payload first. */
        if (p->zstd_level) {
            uint64_t n = (uint64_t)view.height * view.width * view.channels;
            stk_scratch tmp = {0};
            if ((rc = stk_scratch_reserve(&tmp, (size_t)n)) < 0) {
                set_reason(it, rc);
                return;
            }
            memcpy(tmp.data, view.pixels, (size_t)n);
            view.pixels = tmp.data;
            rc = store_raw(p, w, it, &view);
            stk_scratch_free(&tmp);
        } else {
            rc = store_raw(p, w, it, &view);
        }
        if (rc < 0)
            set_reason(it, rc);
        return;
    }
    if ((rc = stk_scratch_reserve(&it->payload, s.encoded_size ? s.encoded_size : 1)) < 0) {
        set_reason(it, rc);
        return;
    }
    memcpy(it->payload.data, s.encoded, s.encoded_size);
    it->size = s.encoded_size;
    if (p->opt->restart_interval && (rc = apply_restarts(p, w, it, &view)) < 0)
        set_reason(it, rc);
}

/* Claim the next item of block `generation` (of `count` items): its index,
 * or -1 when that block has no unclaimed item left or is no longer the
 * current block. */
static int64_t claim(packer *p, uint64_t generation, uint32_t count)
{
    uint64_t tag = (generation & 0xffffffffu) << 32;
    uint64_t cur = atomic_load_explicit(&p->claim, memory_order_relaxed);
    for (;;) {
        if ((cur & ~(uint64_t)0xffffffffu) != tag || (uint32_t)cur >= count)
            return -1;
        if (atomic_compare_exchange_weak_explicit(&p->claim, &cur, cur + 1, memory_order_relaxed,
                                                  memory_order_relaxed))
            return (int64_t)(uint32_t)cur;
    }
}

/* prepare_item, then: were the source's bytes still there while they were
 * used (a mapped source shard truncated meanwhile reads zeros)? */
/* The carried fields of sample `index` into it->extra: each value as its
 * field view gives it (raw images with the format's shape prefix, zstd
 * compressed with the image at zstd_level). */
static int prepare_extra(packer *p, pack_worker *w, uint64_t index, item *it)
{
    for (uint32_t k = 0; k < p->nextra; k++) {
        stk_field_view v;
        int rc = stk_dataset_field_view(p->ds, index, p->extra_src[k], &v, &w->view);
        if (rc < 0)
            return rc;
        stk_scratch *out = &it->extra[k];
        if (p->extra[k].type == STK_FIELD_RAW_IMAGE) {
            /* The view is dense HWC (dataset.h). */
            stk_image_view img = {v.data, v.shape[0], v.shape[1], v.shape[2],
                                  (ptrdiff_t)v.shape[1] * v.shape[2], (ptrdiff_t)v.shape[2], 1};
            if ((rc = store_raw_into(p, w, out, &it->extra_size[k], &img)) < 0)
                return rc;
            continue;
        }
        if ((rc = stk_scratch_reserve(out, v.size ? v.size : 1)) < 0)
            return rc;
        if (v.size)
            memcpy(out->data, v.data, v.size);
        it->extra_size[k] = v.size;
    }
    return 0;
}

/* Whether the sample names of `src` can be relative paths: its path (after
 * a "scheme:" prefix of letters, as imagefolder:, list:, stk:) is not
 * absolute and it is not a URL (docs/format.md, source_root). */
static bool relative_source(const char *src)
{
    if (strstr(src, "://"))
        return false;
    const char *p = src;
    while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))
        p++;
    if (*p == ':' && p > src)
        src = p + 1;
    return src[0] != '/';
}

static void prepare(packer *p, pack_worker *w, uint64_t index, item *it)
{
    prepare_item(p, w, index, it);
    int rc0;
    if (it->rc == 0 && p->nextra && (rc0 = prepare_extra(p, w, index, it)) < 0)
        set_reason(it, rc0);
    int lost = stk_dataset_check(p->ds, index);
    if (lost < 0)
        set_reason(it, lost);
    free(it->name);
    it->name = NULL;
    if (it->rc == 0 && p->named) {
        /* The source name, escaped so that any file name is one line of
         * UTF-8 text (class_names.c). */
        char *path;
        int rc = stk_dataset_sample_path(p->ds, index, &path);
        if (rc == 0 && !(it->name = stk_class_names_encode(&path, 1)))
            rc = STK_ENOMEM;
        stk_free(path);
        if (rc < 0)
            set_reason(it, rc);
    }
}

static void *pack_worker_main(void *arg)
{
    pack_worker *w = arg;
    packer *p = w->p;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stopping && p->generation == seen)
            pthread_cond_wait(&p->start_cv, &p->mu);
        if (p->stopping)
            break;
        seen = p->generation;
        uint64_t start = p->block_start;
        uint32_t count = p->block_count;
        pthread_mutex_unlock(&p->mu);
        /* Claims made here belong to block `seen` or fail: the block
         * cannot end before its claimed items are done, so `start` is still
         * the block's start for every item this loop prepares. */
        uint32_t mine = 0;
        int64_t k;
        while ((k = claim(p, seen, count)) >= 0) {
            prepare(p, w, start + (uint64_t)k, &p->items[k]);
            mine++;
        }
        pthread_mutex_lock(&p->mu);
        p->done += mine; /* mine > 0 only while block `seen` is current */
        if (p->done == p->block_count)
            pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/*
 * The source's fields that pack carries as they are (into p->extra): every
 * field but the image (the first image or raw_image field, which pack
 * stores per its mode), "label", and the names pack writes itself
 * (source_index, source_name; and "image"). A .stk multi-field set, or a
 * reader with boxes, masks and ids (COCO), packs whole in one command.
 * Carried raw images are compressed like the image (zstd_level); a reencode
 * that shrinks the image would leave a carried image or mask at the old
 * size, so it is refused.
 */
static int carried_fields(packer *p, const stk_field_def *own)
{
    uint32_t n = stk_dataset_field_count(p->ds);
    int image = -1;
    stk_field_info info;
    for (uint32_t i = 0; i < n; i++) {
        int rc = stk_dataset_field_info(p->ds, i, &info);
        if (rc < 0)
            return rc;
        if (image < 0 && (info.type == STK_FIELD_IMAGE || info.type == STK_FIELD_RAW_IMAGE)) {
            image = (int)i;
            continue;
        }
        bool taken = false;
        for (uint32_t j = 0; j < 4; j++)
            taken |= !strcmp(info.name, own[j].name);
        if (taken)
            continue;
        if (p->nextra + 4 >= STK_MAX_FIELDS)
            return stk_fail(STK_EUNSUPPORTED, "%s: more than %d fields to pack", p->ds->uri,
                            STK_MAX_FIELDS - 4);
        stk_field_def *f = &p->extra[p->nextra];
        memset(f, 0, sizeof *f);
        size_t len = strlen(info.name);
        if (len == 0 || len >= sizeof f->name)
            return stk_fail(STK_EUNSUPPORTED, "%s: field name '%s' is longer than 31 bytes",
                            p->ds->uri, info.name);
        memcpy(f->name, info.name, len);
        f->type = (uint8_t)info.type;
        /* Arrays keep their shape (a varying one its dims[0] = 0), raw
         * images theirs when fixed (H, W, C); the rest have none. */
        bool array = info.type == STK_FIELD_INT64 || info.type == STK_FIELD_FLOAT32;
        bool shaped = array || (info.type == STK_FIELD_RAW_IMAGE && info.ndim == 3);
        if (shaped && info.ndim > 4)
            return stk_fail(STK_EUNSUPPORTED, "%s: field '%s' has %u dimensions (at most 4)",
                            p->ds->uri, info.name, info.ndim);
        if (shaped) {
            f->ndim = (uint8_t)info.ndim;
            memcpy(f->dims, info.dims, sizeof f->dims);
        }
        if (info.type == STK_FIELD_RAW_IMAGE)
            f->compression = p->zstd_level ? 1 : 0;
        uint8_t storage;
        uint32_t elem;
        uint64_t fixed;
        const char *why = "";
        if (stk_field_layout(f, &storage, &elem, &fixed, &why) < 0)
            return stk_fail(STK_EUNSUPPORTED, "%s: field '%s' cannot be packed: %s", p->ds->uri,
                            info.name, why);
        if ((info.type == STK_FIELD_IMAGE || info.type == STK_FIELD_RAW_IMAGE) &&
            p->opt->mode == STK_PACK_REENCODE && p->opt->max_side)
            return stk_fail(STK_EUNSUPPORTED, "%s: --reencode with max_side %u would shrink the "
                                              "image but not field '%s' (%s); pack without "
                                              "max_side, or --raw",
                            p->ds->uri, p->opt->max_side, info.name,
                            info.type == STK_FIELD_IMAGE ? "image" : "raw_image");
        p->extra_src[p->nextra++] = i;
    }
    return 0;
}

int stk_pack(const char *src, const char *dest, const stk_pack_options *opts,
             stk_pack_result *result)
{
    stk_pack_options defaults = {0};
    const stk_pack_options *o = opts ? opts : &defaults;
    stk_pack_result res = {0};
    int rc;
    if (!src || !dest)
        return stk_fail(STK_EINVAL, "stk_pack: NULL source or destination");
    if (stk_is_remote(dest)) /* s3://bucket/prefix/: pack_upload.c */
        return stk_pack_remote(src, dest, opts, result);
    if ((rc = stk_reserved_check(o->reserved_, sizeof o->reserved_ / sizeof o->reserved_[0], "stk_pack_options")) < 0)
        return rc;
    if (o->mode != STK_PACK_KEEP && o->mode != STK_PACK_RAW && o->mode != STK_PACK_REENCODE)
        return stk_fail(STK_EINVAL, "stk_pack: unknown mode %d", (int)o->mode);
    if (o->quality < 0 || o->quality > 100 ||
        ((o->quality || o->max_side) && o->mode != STK_PACK_REENCODE))
        return stk_fail(STK_EINVAL, "stk_pack: quality %d / max_side %u: quality must be 1..100, "
                                    "and both apply to the reencode mode only",
                        o->quality, o->max_side);
    if (o->zstd_level < 0 || o->zstd_level > 19 || (o->zstd_level && o->mode != STK_PACK_RAW))
        return stk_fail(STK_EINVAL, "stk_pack: zstd level %d: use 1..19, with raw mode only",
                        o->zstd_level);
    if (o->restart_interval > 65535 || (o->restart_interval && o->mode == STK_PACK_RAW))
        return stk_fail(STK_EINVAL, "stk_pack: restart interval %u: use 1..65535 MCUs, with the "
                                    "keep or reencode mode",
                        o->restart_interval);
    uint32_t jobs = o->jobs ? o->jobs : 2;
    if (jobs > 256)
        return stk_fail(STK_EINVAL, "stk_pack: %u jobs is more than 256", jobs);
    uint64_t shard_bytes = o->shard_bytes ? o->shard_bytes : DEFAULT_SHARD_BYTES;

    packer p = {.opt = o, .zstd_level = o->zstd_level};
    pack_worker *workers = NULL;
    stk_shard_file *w = NULL;
    char *names = NULL, **written = NULL; /* paths of shards this call made */
    char *root = NULL;                    /* the escaped source_root, or NULL */
    uint32_t nthreads = 0, nwritten = 0;
    /* Sealed shards waiting for their final header (stk_shard_set_commit). Owned;
     * nwritten - 1 of them while a shard is open (w), nwritten otherwise. */
    stk_shard_file **staged = NULL;
    bool sync_made = false;

    if ((rc = stk_dataset_open(src, NULL, &p.ds)) < 0)
        return rc;
    stk_dataset_access_hint(p.ds, STK_ACCESS_SEQUENTIAL); /* blocks are read in order */
    if ((rc = stk_shard_dest_ready(dest)) < 0)
        goto done;
    /* Inputs the open left out (an image folder's unreadable directories,
     * symlink loops) are skipped inputs too: listed, or fatal when strict. */
    for (uint64_t i = 0; i < stk_dataset_skipped_count(p.ds); i++) {
        const char *why = stk_dataset_skipped(p.ds, i);
        if (o->strict) {
            rc = stk_fail(STK_EDATA, "%s (strict)", why);
            goto done;
        }
        res.skipped++;
        if (o->on_skip)
            o->on_skip(o->ctx, UINT64_MAX, why);
    }
    p.encoded_src = !(p.ds->height && p.ds->width && p.ds->channels);
    p.raw_out = o->mode == STK_PACK_RAW || (!p.encoded_src && o->mode == STK_PACK_KEEP);

    /* source_index: the sample's index in the source, so that a record can
     * be traced to its input and `stoker verify` can check that record i
     * comes after record i - 1 in the source (no sample twice, none out of
     * order). */
    stk_field_def fields[STK_MAX_FIELDS] = {{.name = "image"},
                               {.name = "label", .type = STK_FIELD_INT64},
                               {.name = "source_index", .type = STK_FIELD_INT64},
                               {.name = STK_SOURCE_NAME_FIELD, .type = STK_FIELD_STRING}};
    /* source_name: the sample's name in the source (its file path), for
     * sources that name their samples (stk_dataset_sample_path). */
    p.named = stk_dataset_has_sample_names(p.ds);
    uint32_t nfields = p.named ? 4 : 3;
    fields[0].type = p.raw_out ? STK_FIELD_RAW_IMAGE : STK_FIELD_IMAGE;
    fields[0].compression = p.zstd_level ? 1 : 0;
    if (p.raw_out && !p.encoded_src) {
        fields[0].ndim = 3;
        fields[0].dims[0] = p.ds->height;
        fields[0].dims[1] = p.ds->width;
        fields[0].dims[2] = p.ds->channels;
    }
    if ((rc = carried_fields(&p, fields)) < 0)
        goto done;
    /* fields[0, nfields) as before, then the carried ones: a source with
     * only image and label packs to the same bytes as it always did. */
    memcpy(fields + nfields, p.extra, p.nextra * sizeof *fields);
    nfields += p.nextra;
    /* The label map, escaped so that any name survives (class_names.c). */
    if (p.ds->class_names && p.ds->num_classes &&
        !(names = stk_class_names_encode(p.ds->class_names, p.ds->num_classes))) {
        rc = stk_fail(STK_ENOMEM, "out of memory encoding the class names");
        goto done;
    }
    char created_by[64];
    snprintf(created_by, sizeof created_by, "stoker pack %s", stk_version_string());
    stk_kv meta[6];
    uint32_t nmeta = 0;
    meta[nmeta++] = (stk_kv){"source", src, strlen(src)};
    meta[nmeta++] = (stk_kv){"created_by", created_by, strlen(created_by)};
    if (names)
        meta[nmeta++] = (stk_kv){"class_names", names, strlen(names)};
    /* source_root: the working directory relative source names resolve
     * against, absolute (getcwd: no symlinks), escaped like one class
     * name. Left out where getcwd fails (a removed directory): the names
     * are then stored relative, as before. */
    char cwd[4096];
    if (p.named && relative_source(src) && getcwd(cwd, sizeof cwd)) {
        char *one = cwd;
        if (!(root = stk_class_names_encode(&one, 1))) {
            rc = stk_fail(STK_ENOMEM, "out of memory encoding the source root");
            goto done;
        }
        meta[nmeta++] = (stk_kv){STK_SOURCE_ROOT_KEY, root, strlen(root)};
    }
    /* The set keys come last, with values of their longest length: the
     * header written first reserves room for the final one (stk_shard_set_commit). */
    meta[nmeta++] = (stk_kv){"shard_set", STK_SET_ID_PLACEHOLDER, STK_SET_ID_HEX};
    meta[nmeta++] = (stk_kv){"shard", STK_SHARD_PLACEHOLDER, strlen(STK_SHARD_PLACEHOLDER)};

    p.block_cap = BLOCK_PER_JOB * jobs;
    p.items = calloc(p.block_cap, sizeof *p.items);
    workers = calloc(jobs, sizeof *workers);
    if (!p.items || !workers) {
        rc = stk_fail(STK_ENOMEM, "out of memory");
        goto done;
    }
    for (uint32_t i = 0; p.nextra && i < p.block_cap; i++)
        if (!(p.items[i].extra = calloc(p.nextra, sizeof *p.items[i].extra)) ||
            !(p.items[i].extra_size = calloc(p.nextra, sizeof *p.items[i].extra_size))) {
            rc = stk_fail(STK_ENOMEM, "out of memory");
            goto done;
        }
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.start_cv, NULL);
    pthread_cond_init(&p.done_cv, NULL);
    sync_made = true;
    for (uint32_t i = 0; i < jobs; i++) {
        workers[i].p = &p;
        if (p.zstd_level && !(workers[i].zstd = ZSTD_createCCtx())) {
            rc = stk_fail(STK_ENOMEM, "out of memory");
            goto done;
        }
        if (pthread_create(&workers[i].thread, NULL, pack_worker_main, &workers[i]) != 0) {
            rc = stk_fail(STK_ETHREAD, "stk_pack: cannot create thread %u", i + 1);
            goto done;
        }
        nthreads++;
    }

    char path[4096];
    for (uint64_t start = 0; start < p.ds->count; start += p.block_cap) {
        uint32_t count = (uint32_t)(p.ds->count - start < p.block_cap ? p.ds->count - start : p.block_cap);
        pthread_mutex_lock(&p.mu);
        p.block_start = start;
        p.block_count = count;
        p.done = 0;
        p.generation++;
        atomic_store(&p.claim, (p.generation & 0xffffffffu) << 32);
        pthread_cond_broadcast(&p.start_cv);
        while (p.done < count)
            pthread_cond_wait(&p.done_cv, &p.mu);
        pthread_mutex_unlock(&p.mu);

        for (uint32_t k = 0; k < count; k++) {
            item *it = &p.items[k];
            if (it->rc < 0) {
                if (it->rc != STK_EDATA || o->strict) {
                    stk_errmsg_set(it->reason ? it->reason : stk_strerror(it->rc));
                    rc = it->rc;
                    goto done;
                }
                res.skipped++;
                if (o->on_skip)
                    o->on_skip(o->ctx, start + k, it->reason ? it->reason : stk_strerror(it->rc));
                continue;
            }
            if (!w) {
                int len = snprintf(path, sizeof path, "%s/shard-%05u.stk", dest, res.shards);
                if (len < 0 || (size_t)len >= sizeof path) {
                    rc = stk_fail(STK_EINVAL, "%s: destination path too long", dest);
                    goto done;
                }
                char **grown = realloc(written, (nwritten + 1) * sizeof *written);
                if (grown)
                    written = grown;
                stk_shard_file **more = realloc(staged, (nwritten + 1) * sizeof *staged);
                if (more)
                    staged = more;
                if (!grown || !more) {
                    rc = stk_fail(STK_ENOMEM, "out of memory");
                    goto done;
                }
                if (!(written[nwritten] = stk_strdup(path))) {
                    rc = STK_ENOMEM;
                    goto done;
                }
                nwritten++;
                if ((rc = stk_shard_file_open(path, fields, nfields, meta, nmeta, &w)) < 0)
                    goto done;
            }
            stk_value_bytes values[STK_MAX_FIELDS] = {
                {it->payload.data, it->size}, {&it->label, 8}, {&it->source, 8},
                {it->name, it->name ? strlen(it->name) : 0}};
            for (uint32_t e = 0; e < p.nextra; e++)
                values[nfields - p.nextra + e] =
                    (stk_value_bytes){it->extra[e].data, it->extra_size[e]};
            if ((rc = stk_shard_file_add(w, values)) < 0)
                goto done;
            res.records++;
            res.restarted += it->restarted;
            if (stk_shard_file_bytes(w) >= shard_bytes) {
                if ((rc = stk_shard_file_seal(w)) < 0)
                    goto done;
                res.bytes += stk_shard_file_bytes(w);
                staged[res.shards++] = w;
                w = NULL;
            }
        }
        if (o->on_progress)
            o->on_progress(o->ctx, start + count, p.ds->count);
        if (o->on_progress_bytes)
            o->on_progress_bytes(o->ctx, start + count, p.ds->count,
                                 res.bytes + (w ? stk_shard_file_bytes(w) : 0));
    }
    if (w) {
        if ((rc = stk_shard_file_seal(w)) < 0)
            goto done;
        res.bytes += stk_shard_file_bytes(w);
        staged[res.shards++] = w;
        w = NULL;
    }
    if (res.records == 0) {
        rc = stk_fail(STK_EDATA, "%s: no sample could be read; nothing was packed", src);
        goto done;
    }
    rc = stk_shard_set_commit(staged, res.shards, meta, nmeta);

done:
    if (sync_made) {
        pthread_mutex_lock(&p.mu);
        p.stopping = true;
        pthread_cond_broadcast(&p.start_cv);
        pthread_mutex_unlock(&p.mu);
    }
    for (uint32_t i = 0; i < nthreads; i++)
        pthread_join(workers[i].thread, NULL);
    if (workers)
        for (uint32_t i = 0; i < jobs; i++) {
            stk_scratch_free(&workers[i].read_scratch);
            stk_scratch_free(&workers[i].pixels);
            stk_scratch_free(&workers[i].dense);
            stk_scratch_free(&workers[i].resized);
            stk_scratch_free(&workers[i].rewritten);
            stk_scratch_free(&workers[i].recheck);
            ZSTD_freeCCtx(workers[i].zstd);
            stk_scratch_free(&workers[i].view);
        }
    if (sync_made) {
        pthread_cond_destroy(&p.start_cv);
        pthread_cond_destroy(&p.done_cv);
        pthread_mutex_destroy(&p.mu);
    }
    stk_shard_file_abort(w);
    for (uint32_t i = 0; i < res.shards; i++)
        stk_shard_file_abort(staged[i]); /* NULL once committed */
    free(staged);
    /* Shards stay only if the whole pack succeeded. */
    for (uint32_t i = 0; i < nwritten; i++) {
        if (rc < 0)
            unlink(written[i]);
        free(written[i]);
    }
    free(written);
    if (p.items)
        for (uint32_t i = 0; i < p.block_cap; i++) {
            stk_scratch_free(&p.items[i].payload);
            for (uint32_t k = 0; p.items[i].extra && k < p.nextra; k++)
                stk_scratch_free(&p.items[i].extra[k]);
            free(p.items[i].extra);
            free(p.items[i].extra_size);
            free(p.items[i].reason);
            free(p.items[i].name);
        }
    free(p.items);
    free(workers);
    free(names);
    free(root);
    stk_dataset_close(p.ds);
    if (rc == 0 && result)
        *result = res;
    return rc;
}
