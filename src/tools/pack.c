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
 * ds.path(i) on the shards names the input as it did on the source.
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
#include "format/stk_format.h"
#include "format/stk_writer.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#define BLOCK_PER_JOB 64
#define DEFAULT_SHARD_BYTES (1ull << 30)

typedef struct item {
    stk_scratch payload;   /* owned: record bytes for the image field */
    size_t size;
    int64_t label;
    int64_t source;        /* the source index this item was read from */
    bool restarted;        /* payload is a restart-marker rewrite of the source */
    char *name;            /* owned: the escaped source name (packer.named), or NULL */
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
} pack_worker;

static void set_reason(item *it, int rc)
{
    it->rc = rc;
    free(it->reason);
    it->reason = stk_strdup(stk_errmsg());
}

/* Prefix + pixels (HWC), or prefix + zstd frame, into it->payload. */
static int store_raw(packer *p, pack_worker *w, item *it, const stk_image_view *v)
{
    uint64_t n = (uint64_t)v->height * v->width * v->channels;
    size_t bound = p->zstd_level ? ZSTD_compressBound((size_t)n) : (size_t)n;
    int rc = stk_scratch_reserve(&it->payload, STK_RAW_PREFIX + bound);
    if (rc < 0)
        return rc;
    uint8_t *out = it->payload.data;
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
        it->size = STK_RAW_PREFIX + (size_t)n;
        return 0;
    }
    size_t z = ZSTD_compressCCtx(w->zstd, out + STK_RAW_PREFIX, bound, px, (size_t)n, p->zstd_level);
    if (ZSTD_isError(z))
        return stk_fail(STK_EIO, "zstd: %s", ZSTD_getErrorName(z));
    it->size = STK_RAW_PREFIX + z;
    return 0;
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
static void prepare(packer *p, pack_worker *w, uint64_t index, item *it)
{
    prepare_item(p, w, index, it);
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

/* mkdir -p */
static int make_dirs(const char *dest)
{
    char path[4096];
    size_t n = strlen(dest);
    if (n >= sizeof path)
        return stk_fail(STK_EINVAL, "%s: destination path too long", dest);
    memcpy(path, dest, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char keep = path[i];
        path[i] = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return stk_fail(errno == ENOENT ? STK_ENOENT : STK_EIO, "%s: cannot create: %s", path,
                            strerror(errno));
        path[i] = keep;
    }
    return 0;
}

static int dest_ready(const char *dest)
{
    int mrc = make_dirs(dest);
    if (mrc < 0)
        return mrc;
    DIR *d = opendir(dest);
    if (!d)
        return stk_fail(STK_EIO, "%s: cannot open the destination directory: %s", dest,
                        strerror(errno));
    struct dirent *e;
    int rc = 0;
    /* NULL with errno set is a read error, not the end of the directory. */
    for (errno = 0; (e = readdir(d)); errno = 0) {
        size_t n = strlen(e->d_name);
        if (n > 4 && !strcmp(e->d_name + n - 4, ".stk")) {
            rc = stk_fail(STK_EINVAL, "%s: already holds shards (%s); remove them or choose "
                                      "another destination", dest, e->d_name);
            break;
        }
        /* A temporary NAME.stk.tmp-<pid>-<random> of a pack that was killed
         * (its process is gone) is removed; one of a live process means
         * another pack is writing here. */
        const char *t = strstr(e->d_name, ".stk.tmp-");
        if (!t)
            continue;
        long pid = strtol(t + 9, NULL, 10);
        if (pid > 0 && pid != (long)getpid() && (kill((pid_t)pid, 0) == 0 || errno == EPERM)) {
            rc = stk_fail(STK_EINVAL, "%s: %s is being written by another process (pid %ld); "
                                      "wait for it or choose another destination",
                          dest, e->d_name, pid);
            break;
        }
        char tmp[4096];
        if (snprintf(tmp, sizeof tmp, "%s/%s", dest, e->d_name) < (int)sizeof tmp &&
            unlink(tmp) != 0 && errno != ENOENT) {
            rc = stk_fail(STK_EIO, "%s: cannot remove the stale temporary file: %s", tmp,
                          strerror(errno));
            break;
        }
    }
    if (!e && errno != 0)
        rc = stk_fail(STK_EIO, "%s: cannot list the destination directory: %s", dest,
                      strerror(errno));
    closedir(d);
    return rc;
}

/*
 * The shard-set keys (docs/format.md, "Shard sets"). Every shard of a pack
 * carries `shard_set`, the set's identity — 32 hex digits of XXH3-128 over
 * the footers of all its shards, in order (so a set's identity follows
 * from its content, and the same input packs to the same bytes whatever
 * `jobs` is) — and `shard` = "i/n", its place among the n shards, from 0.
 * Both are known only once the last shard is sealed: every shard is
 * written under its temporary name with placeholders of the longest
 * values, and is renamed into place only here, after its header has been
 * rewritten with the final values. A pack killed at any point therefore
 * leaves temporaries only, or a set whose shards say how many there must
 * be: a reader can always tell it is incomplete.
 */
#define SET_ID_HEX 32
#define SET_ID_PLACEHOLDER "00000000000000000000000000000000"
#define SHARD_PLACEHOLDER "4294967295/4294967295"

/* Commit the n sealed shards with their final set keys (the last two
 * entries of meta). staged[i] is set to NULL as it is committed. */
static int commit_set(stk_shard_writer **staged, uint32_t n, stk_kv *meta, uint32_t nmeta)
{
    XXH3_state_t *h = XXH3_createState();
    if (!h)
        return stk_fail(STK_ENOMEM, "out of memory");
    XXH3_128bits_reset(h);
    for (uint32_t i = 0; i < n; i++)
        XXH3_128bits_update(h, stk_shard_writer_footer(staged[i]), STK_FOOTER_SIZE);
    XXH128_hash_t d = XXH3_128bits_digest(h);
    XXH3_freeState(h);
    char id[SET_ID_HEX + 1], place[sizeof SHARD_PLACEHOLDER];
    snprintf(id, sizeof id, "%016llx%016llx", (unsigned long long)d.high64,
             (unsigned long long)d.low64);
    meta[nmeta - 2] = (stk_kv){"shard_set", id, SET_ID_HEX};
    for (uint32_t i = 0; i < n; i++) {
        snprintf(place, sizeof place, "%u/%u", i, n);
        meta[nmeta - 1] = (stk_kv){"shard", place, strlen(place)};
        stk_shard_writer *w = staged[i];
        staged[i] = NULL;
        int rc = stk_shard_writer_commit(w, meta, nmeta);
        if (rc < 0)
            return rc;
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
    stk_shard_writer *w = NULL;
    char *names = NULL, **written = NULL; /* paths of shards this call made */
    uint32_t nthreads = 0, nwritten = 0;
    /* Sealed shards waiting for their final header (commit_set). Owned;
     * nwritten - 1 of them while a shard is open (w), nwritten otherwise. */
    stk_shard_writer **staged = NULL;
    bool sync_made = false;

    if ((rc = stk_dataset_open(src, NULL, &p.ds)) < 0)
        return rc;
    stk_dataset_access_hint(p.ds, STK_ACCESS_SEQUENTIAL); /* blocks are read in order */
    if ((rc = dest_ready(dest)) < 0)
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
    stk_field_def fields[4] = {{.name = "image"},
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
    /* The label map, escaped so that any name survives (class_names.c). */
    if (p.ds->class_names && p.ds->num_classes &&
        !(names = stk_class_names_encode(p.ds->class_names, p.ds->num_classes))) {
        rc = stk_fail(STK_ENOMEM, "out of memory encoding the class names");
        goto done;
    }
    char created_by[64];
    snprintf(created_by, sizeof created_by, "stoker pack %s", stk_version_string());
    stk_kv meta[5];
    uint32_t nmeta = 0;
    meta[nmeta++] = (stk_kv){"source", src, strlen(src)};
    meta[nmeta++] = (stk_kv){"created_by", created_by, strlen(created_by)};
    if (names)
        meta[nmeta++] = (stk_kv){"class_names", names, strlen(names)};
    /* The set keys come last, with values of their longest length: the
     * header written first reserves room for the final one (commit_set). */
    meta[nmeta++] = (stk_kv){"shard_set", SET_ID_PLACEHOLDER, SET_ID_HEX};
    meta[nmeta++] = (stk_kv){"shard", SHARD_PLACEHOLDER, strlen(SHARD_PLACEHOLDER)};

    p.block_cap = BLOCK_PER_JOB * jobs;
    p.items = calloc(p.block_cap, sizeof *p.items);
    workers = calloc(jobs, sizeof *workers);
    if (!p.items || !workers) {
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
                stk_shard_writer **more = realloc(staged, (nwritten + 1) * sizeof *staged);
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
                if ((rc = stk_shard_writer_open(path, fields, nfields, meta, nmeta, &w)) < 0)
                    goto done;
            }
            stk_field_value values[4] = {
                {it->payload.data, it->size}, {&it->label, 8}, {&it->source, 8},
                {it->name, it->name ? strlen(it->name) : 0}};
            if ((rc = stk_shard_writer_add(w, values)) < 0)
                goto done;
            res.records++;
            res.restarted += it->restarted;
            if (stk_shard_writer_bytes(w) >= shard_bytes) {
                if ((rc = stk_shard_writer_seal(w)) < 0)
                    goto done;
                res.bytes += stk_shard_writer_bytes(w);
                staged[res.shards++] = w;
                w = NULL;
            }
        }
        if (o->on_progress)
            o->on_progress(o->ctx, start + count, p.ds->count);
        if (o->on_progress_bytes)
            o->on_progress_bytes(o->ctx, start + count, p.ds->count,
                                 res.bytes + (w ? stk_shard_writer_bytes(w) : 0));
    }
    if (w) {
        if ((rc = stk_shard_writer_seal(w)) < 0)
            goto done;
        res.bytes += stk_shard_writer_bytes(w);
        staged[res.shards++] = w;
        w = NULL;
    }
    if (res.records == 0) {
        rc = stk_fail(STK_EDATA, "%s: no sample could be read; nothing was packed", src);
        goto done;
    }
    rc = commit_set(staged, res.shards, meta, nmeta);

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
        }
    if (sync_made) {
        pthread_cond_destroy(&p.start_cv);
        pthread_cond_destroy(&p.done_cv);
        pthread_mutex_destroy(&p.mu);
    }
    stk_shard_writer_abort(w);
    for (uint32_t i = 0; i < res.shards; i++)
        stk_shard_writer_abort(staged[i]); /* NULL once committed */
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
            free(p.items[i].reason);
            free(p.items[i].name);
        }
    free(p.items);
    free(workers);
    free(names);
    stk_dataset_close(p.ds);
    if (rc == 0 && result)
        *result = res;
    return rc;
}
