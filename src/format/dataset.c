/*
 * dataset.c — opening a dataset by URI, the public dataset calls, and the
 * in-memory reader.
 *
 * stk_dataset_open reads one table, stk_readers (below): a row per reader,
 * {prefix, form, description, open, open_detected, detect, detect texts}
 * (stk_reader, dataset.h). A URI "PREFIX:PATH[?QUERY]" whose prefix matches
 * a row exactly is split into PATH and QUERY and handed to the row's open,
 * which validates everything. Text with no known prefix is a path: the rows
 * with a detect hook are asked in table order, first yes wins:
 *
 *   *.stk file, directory holding *.stk, or a *.stk glob     -> stk
 *   a directory holding data_batch_1.bin or test_batch.bin   -> cifar10
 *     (or a cifar-10-batches-bin subdirectory), or such a file
 *   a directory holding train.bin or test.bin                -> cifar100
 *     (or a cifar-100-binary subdirectory), or such a file
 *   a file named *images-idx3-ubyte[.gz] (or *images.idx3-ubyte) -> idx, its
 *     labels file named by replacing images-idx3 with labels-idx1
 *   a directory holding train- or t10k-images-idx3-ubyte[.gz] -> mnist layout
 *   a directory holding images.npy and labels.npy            -> npy
 *   a *.tar file, a *.tar pattern, or a directory holding *.tar that
 *     is not an image folder                                 -> wds
 *   (last) a directory with a subdirectory that directly holds a file
 *     named *.jpg, *.png... (torchvision's IMG_EXTENSIONS)  -> imagefolder
 *
 * The same table gives the prefix list and the "looked for ..." lists of
 * the messages, and stk_dataset_reader (the CLI's help). Those lists are
 * only given for something that exists but is not recognised (a directory,
 * a file, a pattern matching files); a path that is not there is "PATH: no
 * such file or directory" and a pattern matching nothing "PATTERN: no file
 * matches this pattern", since listing every layout would bury the typo.
 * Readers written before the table keep their entry points (dataset.h) and
 * get their rows and small adapters here; a new reader defines its row in
 * its own file and adds one X to STK_SELF_DESCRIBED_READERS
 * (docs/datasets.md, "Adding a reader").
 *
 * A name like "foo:bar" that is not an existing path and whose "foo" looks
 * like a scheme is an unknown prefix (STK_EINVAL) rather than a missing file,
 * so a typo such as "cifar:..." gets the list of prefixes. A bare path may
 * carry a query too ("DIR?split=test"); it is only split off when the whole
 * text is not itself an existing path.
 *
 * The public calls check their arguments (a NULL, an index out of range, a
 * buffer too small are STK_EINVAL with a message) and then trust the reader:
 * stk_dataset_read asks the reader for a view and copies it through its
 * strides into the caller's HWC buffer.
 *
 * The memory reader serves an HWC uint8 array, borrowed or copied. It keeps
 * both pointers; owned_* are set only when it copied (and are what it frees).
 */
#include "format/dataset.h"

#include "codec/codec.h"
#include "core/error.h"
#include "core/util.h"
#include "io/remote.h"
#include "format/reader_util.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------------ */
/* Shell, options, public accessors                                         */
/* ------------------------------------------------------------------------ */

stk_dataset_options stk_dataset_options_resolve(const stk_dataset_options *opts)
{
    stk_dataset_options o = {0};
    if (opts)
        o = *opts;
    if (!o.max_bytes)
        o.max_bytes = STK_DEFAULT_MAX_BYTES;
    if (!o.max_samples)
        o.max_samples = STK_DEFAULT_MAX_SAMPLES;
    if (!o.max_pixels)
        o.max_pixels = STK_DEFAULT_MAX_PIXELS;
    return o;
}

stk_dataset *stk_dataset_alloc(const stk_dataset_vtable *vt, const char *uri)
{
    stk_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) {
        stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
        return NULL;
    }
    ds->vt = vt;
    ds->uri = stk_strdup(uri);
    if (!ds->uri) {
        free(ds);
        return NULL;
    }
    return ds;
}

void stk_dataset_close(stk_dataset *ds)
{
    if (!ds)
        return;
    if (ds->impl && ds->vt && ds->vt->close)
        ds->vt->close(ds);
    if (ds->class_names) {
        for (uint32_t i = 0; i < ds->num_classes; i++)
            free(ds->class_names[i]);
        free(ds->class_names);
    }
    for (uint64_t i = 0; i < ds->nskipped; i++)
        free(ds->skipped[i]);
    free(ds->skipped);
    free(ds->uri);
    free(ds);
}

void stk_dataset_info_get(const stk_dataset *ds, stk_dataset_info *info)
{
    if (!info)
        return;
    memset(info, 0, sizeof *info);
    if (!ds)
        return;
    info->uri = ds->uri;
    info->format = ds->vt->format;
    info->count = ds->count;
    info->height = ds->height;
    info->width = ds->width;
    info->channels = ds->channels;
    info->num_classes = ds->num_classes;
}

/* The two public whole-sample reads: sample `index` read (encoded samples
 * decoded whole, to RGB) and copied out in HWC order, into `pixels` of
 * `capacity` bytes (stk_dataset_read) or, with `alloc`, into a new buffer
 * *alloc of the sample's size (stk_dataset_read_alloc). `what` names the
 * caller in argument errors. The copy is checked against the reader's
 * read_check afterwards, so bytes lost to a truncated mapping are an error,
 * never zeros. */
static int64_t read_whole(const char *what, const stk_dataset *ds, uint64_t index,
                          uint8_t *pixels, size_t capacity, uint8_t **alloc, uint32_t shape[3],
                          int64_t *label)
{
    stk_scratch scratch = {0}, decoded = {0};
    stk_sample s;
    const stk_image_view *v = &s.image;
    uint64_t bytes = 0;
    int rc;

    if (alloc)
        *alloc = NULL;
    if (!ds || (alloc ? !shape : !pixels))
        return stk_fail(STK_EINVAL, "%s: NULL argument", what);
    if (index >= ds->count)
        return stk_fail(STK_EINVAL, "%s: sample index %llu out of range (%llu samples)", ds->uri,
                        (unsigned long long)index, (unsigned long long)ds->count);
    memset(&s, 0, sizeof s);
    rc = ds->vt->read(ds, index, &s, &scratch);
    if (rc)
        goto out;
    if (!s.image.pixels) { /* encoded: decode it whole, to RGB */
        rc = stk_image_decode(s.encoded, s.encoded_size, NULL, NULL, 1, &decoded, &s.image);
        if (rc < 0 && stk_dataset_check(ds, index) < 0) { /* decoded lost bytes */
            rc = STK_EDATA;
            goto out;
        }
        if (rc < 0) {
            char name[1024];
            stk_dataset_sample_name(ds, index, name, sizeof name);
            stk_fail_prefix(rc, "%s", name);
            goto out;
        }
    }
    if (!stk_mul_ok(v->height, v->width, &bytes) || !stk_mul_ok(bytes, v->channels, &bytes) ||
        bytes > INT64_MAX || bytes > SIZE_MAX) {
        rc = stk_fail(STK_EFORMAT, "%s: sample %llu: shape %ux%ux%u is too large", ds->uri,
                      (unsigned long long)index, v->height, v->width, v->channels);
        goto out;
    }
    if (alloc) {
        if (!(pixels = malloc(bytes ? (size_t)bytes : 1))) {
            rc = stk_fail(STK_ENOMEM, "%s: sample %llu: out of memory for %llu bytes", ds->uri,
                          (unsigned long long)index, (unsigned long long)bytes);
            goto out;
        }
    } else if (bytes > capacity) {
        rc = stk_fail(STK_EINVAL,
                      "%s: sample %llu needs %llu bytes (%ux%ux%u) but the buffer holds %zu",
                      ds->uri, (unsigned long long)index, (unsigned long long)bytes, v->height,
                      v->width, v->channels, capacity);
        goto out;
    }

    stk_image_copy_hwc(v, pixels);
    if ((rc = stk_dataset_check(ds, index)) < 0) {
        if (alloc)
            free(pixels);
        goto out;
    }
    if (alloc)
        *alloc = pixels;
    if (shape) {
        shape[0] = v->height;
        shape[1] = v->width;
        shape[2] = v->channels;
    }
    if (label)
        *label = s.label;

out:
    stk_scratch_free(&scratch);
    stk_scratch_free(&decoded);
    return rc ? rc : (int64_t)bytes;
}

int64_t stk_dataset_read(const stk_dataset *ds, uint64_t index, uint8_t *pixels,
                         size_t capacity, int64_t *label)
{
    return read_whole("stk_dataset_read", ds, index, pixels, capacity, NULL, NULL, label);
}

int64_t stk_dataset_read_alloc(const stk_dataset *ds, uint64_t index, uint8_t **pixels,
                               uint32_t shape[3], int64_t *label)
{
    if (!pixels)
        return stk_fail(STK_EINVAL, "stk_dataset_read_alloc: NULL argument");
    return read_whole("stk_dataset_read_alloc", ds, index, NULL, 0, pixels, shape, label);
}

/* ------------------------------------------------------------------------ */
/* In-memory reader                                                         */
/* ------------------------------------------------------------------------ */

typedef struct stk_memory_impl {
    const uint8_t *pixels;  /* count * sample_bytes; borrowed or owned_pixels */
    const int64_t *labels;  /* count labels, or NULL (all 0); borrowed or owned */
    uint8_t *owned_pixels;  /* owned (malloc) when copied, else NULL */
    int64_t *owned_labels;  /* owned (malloc) when copied, else NULL */
    size_t sample_bytes;
} stk_memory_impl;

static int stk_memory_read(const stk_dataset *ds, uint64_t index, stk_sample *out,
                           stk_scratch *scratch)
{
    const stk_memory_impl *m = ds->impl;
    (void)scratch;
    if (index >= ds->count)
        return stk_fail(STK_EINVAL, "%s: sample index %llu out of range (%llu samples)", ds->uri,
                        (unsigned long long)index, (unsigned long long)ds->count);
    stk_sample_set_hwc(ds, m->pixels + index * m->sample_bytes, out);
    out->label = m->labels ? m->labels[index] : 0;
    return 0;
}

static void stk_memory_close(stk_dataset *ds)
{
    stk_memory_impl *m = ds->impl;
    if (!m)
        return;
    free(m->owned_pixels);
    free(m->owned_labels);
    free(m);
    ds->impl = NULL;
}

static const stk_dataset_vtable stk_memory_vt = {.format = "memory", .read = stk_memory_read, .close = stk_memory_close};

int stk_dataset_from_memory(const uint8_t *pixels, const int64_t *labels, uint64_t count,
                            uint32_t height, uint32_t width, uint32_t channels, int copy,
                            stk_dataset **out)
{
    stk_dataset *ds = NULL;
    stk_memory_impl *m = NULL;
    uint64_t sample, total, lbytes;
    int64_t maxl = -1;
    int rc;

    if (!out)
        return stk_fail(STK_EINVAL, "stk_dataset_from_memory: out is NULL");
    *out = NULL;
    if (!pixels)
        return stk_fail(STK_EINVAL, "stk_dataset_from_memory: pixels is NULL");
    if (count == 0 || height == 0 || width == 0 || channels == 0)
        return stk_fail(STK_EINVAL,
                        "stk_dataset_from_memory: count %llu and shape %ux%ux%u must all be "
                        "nonzero",
                        (unsigned long long)count, height, width, channels);
    if (!stk_mul_ok(height, width, &sample) || !stk_mul_ok(sample, channels, &sample) ||
        !stk_mul_ok(sample, count, &total) || total > SIZE_MAX ||
        !stk_mul_ok(count, sizeof(int64_t), &lbytes) || lbytes > SIZE_MAX)
        return stk_fail(STK_EINVAL,
                        "stk_dataset_from_memory: %llu samples of %ux%ux%u overflow the "
                        "address space",
                        (unsigned long long)count, height, width, channels);

    ds = stk_dataset_alloc(&stk_memory_vt, "memory");
    if (!ds)
        return STK_ENOMEM;
    m = calloc(1, sizeof *m);
    if (!m) {
        rc = stk_fail(STK_ENOMEM, "out of memory creating a memory dataset");
        goto fail;
    }
    ds->impl = m;
    m->sample_bytes = (size_t)sample;
    m->pixels = pixels;
    m->labels = labels;
    if (copy) {
        m->owned_pixels = malloc((size_t)total);
        if (!m->owned_pixels) {
            rc = stk_fail(STK_ENOMEM, "out of memory copying %llu bytes of pixels",
                          (unsigned long long)total);
            goto fail;
        }
        memcpy(m->owned_pixels, pixels, (size_t)total);
        m->pixels = m->owned_pixels;
        if (labels) {
            m->owned_labels = malloc((size_t)lbytes);
            if (!m->owned_labels) {
                rc = stk_fail(STK_ENOMEM, "out of memory copying %llu labels",
                              (unsigned long long)count);
                goto fail;
            }
            memcpy(m->owned_labels, labels, (size_t)lbytes);
            m->labels = m->owned_labels;
        }
    }

    /* num_classes: max + 1 when every label is a plausible class index. */
    if (m->labels) {
        for (uint64_t i = 0; i < count; i++) {
            if (m->labels[i] < 0) {
                maxl = -1;
                break;
            }
            if (m->labels[i] > maxl)
                maxl = m->labels[i];
        }
    }
    ds->count = count;
    ds->height = height;
    ds->width = width;
    ds->channels = channels;
    ds->num_classes = maxl >= 0 && maxl < (int64_t)UINT32_MAX ? (uint32_t)(maxl + 1) : 0;
    *out = ds;
    return 0;

fail:
    stk_dataset_close(ds);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* URI dispatch: the reader table                                           */
/* ------------------------------------------------------------------------ */

static const char *const stk_split_values[] = {"train", "test", NULL};

/* Split "PATH?QUERY" into a malloc'd copy with the '?' replaced by NUL;
 * *query points into the copy (NULL without '?'). */
static char *stk_split_query(const char *rest, char **query)
{
    char *copy = stk_strdup(rest);
    char *q;
    *query = NULL;
    if (!copy)
        return NULL;
    q = strchr(copy, '?');
    if (q) {
        *q = '\0';
        *query = q + 1;
    }
    return copy;
}

/* First of dir/name and dir/name.gz that exists; malloc'd, or NULL with
 * *rc = 0 when neither exists (or *rc = STK_ENOMEM). */
static char *stk_find_plain_or_gz(const char *dir, const char *name, int *rc)
{
    char gzname[64];
    char *p;
    *rc = 0;
    p = stk_path_join(dir, name);
    if (!p) {
        *rc = STK_ENOMEM;
        return NULL;
    }
    if (stk_path_exists(p))
        return p;
    free(p);
    strcpy(gzname, name);
    strcat(gzname, ".gz");
    p = stk_path_join(dir, gzname);
    if (!p) {
        *rc = STK_ENOMEM;
        return NULL;
    }
    if (stk_path_exists(p))
        return p;
    free(p);
    return NULL;
}

/* A directory in the MNIST layout (train-* / t10k-* IDX files). */
static int stk_open_mnist_dir(const char *uri, const char *what, const char *dir,
                              const char *query, const stk_dataset_options *opts,
                              stk_dataset **out)
{
    stk_query_key key = {"split", stk_split_values, -1};
    const char *pre;
    char iname[48], lname[48];
    char *ipath = NULL, *lpath = NULL;
    int rc;

    rc = stk_query_parse(uri, what, query, &key, 1);
    if (rc)
        return rc;
    if (!*dir)
        return stk_fail(STK_EINVAL, "%s: empty directory in URI '%s'", what, uri);
    if (!stk_path_is_dir(dir))
        return stk_fail(stk_path_exists(dir) ? STK_EINVAL : STK_ENOENT,
                        "%s: %s: %s (expected a directory with train-images-idx3-ubyte[.gz] "
                        "and the other MNIST-layout files)",
                        what, dir, stk_path_exists(dir) ? "not a directory" : "no such directory");
    pre = key.value == 1 ? "t10k" : "train";
    strcpy(iname, pre);
    strcat(iname, "-images-idx3-ubyte");
    strcpy(lname, pre);
    strcat(lname, "-labels-idx1-ubyte");
    ipath = stk_find_plain_or_gz(dir, iname, &rc);
    if (rc)
        goto out;
    if (!ipath) {
        rc = stk_fail(STK_ENOENT, "%s: %s: no %s or %s.gz in this directory", what, dir, iname,
                      iname);
        goto out;
    }
    lpath = stk_find_plain_or_gz(dir, lname, &rc);
    if (rc)
        goto out;
    if (!lpath) {
        rc = stk_fail(STK_ENOENT, "%s: %s: no %s or %s.gz in this directory", what, dir, lname,
                      lname);
        goto out;
    }
    rc = stk_idx_open(uri, ipath, lpath, opts, out);
out:
    free(ipath);
    free(lpath);
    return rc;
}

/* "idx:IMAGES,LABELS" — exactly one comma; no query keys exist. */
static int stk_open_idx_pair(const char *uri, const char *path, const char *query,
                             const stk_dataset_options *opts, stk_dataset **out)
{
    char *copy = stk_strdup(path);
    char *comma;
    int rc;

    if (!copy)
        return STK_ENOMEM;
    rc = stk_query_parse(uri, "idx", query, NULL, 0);
    if (rc)
        goto out;
    comma = strchr(copy, ',');
    if (!comma || strchr(comma + 1, ',')) {
        rc = stk_fail(STK_EINVAL,
                      "idx: URI '%s' must name exactly two files, IMAGES,LABELS, joined by one "
                      "','",
                      uri);
        goto out;
    }
    *comma = '\0';
    rc = stk_idx_open(uri, copy, comma + 1, opts, out);
out:
    free(copy);
    return rc;
}

static const char *stk_basename(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Labels file of an IDX images file: the last "images-idx3" (or
 * "images.idx3") in the basename becomes "labels-idx1" ("labels.idx1"); if
 * that does not exist, the same name with ".gz" added or removed. Returns 1
 * and a malloc'd *labels when the name matches the pattern, 0 when it does
 * not, or a negative code. */
static int stk_idx_labels_for(const char *images, char **labels)
{
    static const char *const pats[][2] = {{"images-idx3", "labels-idx1"},
                                          {"images.idx3", "labels.idx1"}};
    const char *base = stk_basename(images);
    *labels = NULL;
    for (size_t k = 0; k < 2; k++) {
        const char *hit = NULL, *s = base;
        size_t n = strlen(images), plen = strlen(pats[k][0]);
        char *cand;
        while ((s = strstr(s, pats[k][0])) != NULL)
            hit = s++;
        if (!hit || strncmp(hit + plen, "-ubyte", 6) != 0)
            continue;
        /* room for the name + ".gz" */
        cand = malloc(n + 4);
        if (!cand)
            return stk_fail(STK_ENOMEM, "out of memory");
        memcpy(cand, images, n + 1);
        memcpy(cand + (hit - images), pats[k][1], plen); /* same length */
        if (!stk_path_exists(cand)) {
            if (n > 3 && strcmp(cand + n - 3, ".gz") == 0)
                cand[n - 3] = '\0';
            else
                strcat(cand, ".gz");
            if (!stk_path_exists(cand)) {
                /* report the plain replacement */
                memcpy(cand, images, n + 1);
                memcpy(cand + (hit - images), pats[k][1], plen);
                stk_fail(STK_ENOENT,
                         "%s: detected an IDX images file, but its labels file %s (or with "
                         ".gz added/removed) does not exist",
                         images, cand);
                free(cand);
                return STK_ENOENT;
            }
        }
        *labels = cand;
        return 1;
    }
    return 0;
}

static int stk_is_cifar10_file_name(const char *base)
{
    return strcmp(base, "test_batch.bin") == 0 ||
           (strncmp(base, "data_batch_", 11) == 0 && base[11] >= '1' && base[11] <= '9' &&
            strcmp(base + 12, ".bin") == 0);
}

static int stk_dir_has(const char *dir, const char *name)
{
    char *p = stk_path_join(dir, name);
    int r;
    if (!p)
        return STK_ENOMEM;
    r = stk_path_exists(p);
    free(p);
    return r;
}

static int stk_dir_has_any(const char *dir, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int r = stk_dir_has(dir, names[i]);
        if (r)
            return r; /* 1, or STK_ENOMEM */
    }
    return 0;
}

/* The built-in readers whose files predate the table: their rows, with the
 * small adapters from (uri, path, query) to their entry points. */

static int stk_open_cifar10(const char *uri, const char *path, const char *query,
                            const stk_dataset_options *opts, stk_dataset **out)
{
    return stk_cifar_open(uri, path, query, 0, opts, out);
}

static int stk_open_cifar100(const char *uri, const char *path, const char *query,
                             const stk_dataset_options *opts, stk_dataset **out)
{
    return stk_cifar_open(uri, path, query, 1, opts, out);
}

static int stk_detect_cifar10(const char *path)
{
    static const char *const names[] = {"data_batch_1.bin", "test_batch.bin",
                                        "cifar-10-batches-bin/data_batch_1.bin",
                                        "cifar-10-batches-bin/test_batch.bin"};
    if (stk_path_is_dir(path))
        return stk_dir_has_any(path, names, 4);
    return stk_path_is_file(path) && stk_is_cifar10_file_name(stk_basename(path));
}

static int stk_detect_cifar100(const char *path)
{
    static const char *const names[] = {"train.bin", "test.bin", "cifar-100-binary/train.bin",
                                        "cifar-100-binary/test.bin"};
    const char *base = stk_basename(path);
    if (stk_path_is_dir(path))
        return stk_dir_has_any(path, names, 4);
    return stk_path_is_file(path) && (!strcmp(base, "train.bin") || !strcmp(base, "test.bin"));
}

static int stk_open_mnist(const char *uri, const char *path, const char *query,
                          const stk_dataset_options *opts, stk_dataset **out)
{
    return stk_open_mnist_dir(uri, "mnist", path, query, opts, out);
}

static int stk_open_fashion_mnist(const char *uri, const char *path, const char *query,
                                  const stk_dataset_options *opts, stk_dataset **out)
{
    return stk_open_mnist_dir(uri, "fashion-mnist", path, query, opts, out);
}

static int stk_detect_mnist(const char *path)
{
    static const char *const names[] = {"train-images-idx3-ubyte", "train-images-idx3-ubyte.gz",
                                        "t10k-images-idx3-ubyte", "t10k-images-idx3-ubyte.gz"};
    return stk_path_is_dir(path) ? stk_dir_has_any(path, names, 4) : 0;
}

static int stk_detect_imagefolder(const char *path)
{
    return stk_path_is_dir(path) && stk_imagefolder_detect(path);
}

/* An IDX images file named like MNIST's: its labels file found by name. */
static int stk_detect_idx(const char *path)
{
    char *labels = NULL;
    int r;
    if (!stk_path_is_file(path))
        return 0;
    r = stk_idx_labels_for(path, &labels);
    free(labels);
    return r; /* 1, 0, or the error naming the missing labels file */
}

static int stk_open_idx_detected(const char *uri, const char *path, const char *query,
                                 const stk_dataset_options *opts, stk_dataset **out)
{
    char *labels = NULL;
    int r = stk_idx_labels_for(path, &labels);
    if (r <= 0)
        return r < 0 ? r : stk_fail(STK_EINVAL, "%s: not an IDX images file name", path);
    r = stk_query_parse(uri, "idx", query, NULL, 0);
    if (r == 0)
        r = stk_idx_open(uri, path, labels, opts, out);
    free(labels);
    return r;
}

static const stk_reader stk_reader_cifar10 = {
    "cifar10", "cifar10:PATH[?split=train|test]",
    "CIFAR-10 binary: a directory, one file, or files joined by ','",
    stk_open_cifar10, NULL, stk_detect_cifar10,
    "data_batch_1.bin or test_batch.bin (CIFAR-10)", "data_batch_N.bin, test_batch.bin"};
static const stk_reader stk_reader_cifar100 = {
    "cifar100", "cifar100:PATH[?split=train|test][&label=fine|coarse]",
    "CIFAR-100 binary: a directory, one file, or files joined by ','",
    stk_open_cifar100, NULL, stk_detect_cifar100,
    "train.bin or test.bin (CIFAR-100), also in cifar-10-batches-bin/ or cifar-100-binary/",
    "train.bin, test.bin"};
static const stk_reader stk_reader_idx = {
    "idx", "idx:IMAGES,LABELS", "two IDX files (MNIST layout), plain or .gz; no query keys",
    stk_open_idx_pair, stk_open_idx_detected, stk_detect_idx, NULL,
    "*images-idx3-ubyte[.gz]"};
static const stk_reader stk_reader_mnist = {
    "mnist", "mnist:DIR[?split=train|test]",
    "DIR with train-/t10k-{images-idx3,labels-idx1}-ubyte[.gz]", stk_open_mnist, NULL,
    stk_detect_mnist,
    "train-images-idx3-ubyte[.gz] or t10k-images-idx3-ubyte[.gz] (MNIST layout)", NULL};
static const stk_reader stk_reader_fashion_mnist = {
    "fashion-mnist", "fashion-mnist:DIR[?split=train|test]", "the same file names as mnist:",
    stk_open_fashion_mnist, NULL, NULL, NULL, NULL};
static const stk_reader stk_reader_stk = {
    "stk", "stk:PATH[?verify=off|first|always][&io=auto|mmap|pread][&hugepages=auto|on|off]",
    ".stk shards: a file, a directory of *.stk, or a glob (docs/format.md)", stk_shards_open,
    NULL, stk_shards_detect, "*.stk shards", "*.stk"};
static const stk_reader stk_reader_imagefolder = {
    "imagefolder", "imagefolder:DIR",
    "torchvision's ImageFolder layout DIR/CLASS/.../IMAGE (encoded images)",
    stk_imagefolder_open, NULL, stk_detect_imagefolder,
    "subdirectories holding images (ImageFolder: DIR/CLASS/IMAGE)", NULL};
static const stk_reader stk_reader_list = {
    "list", "list:FILE", "lines \"PATH<TAB>LABEL\", paths relative to FILE's directory",
    stk_filelist_open, NULL, NULL, NULL, NULL};

/* Readers that describe themselves in their own file (one X per reader). */
#define STK_SELF_DESCRIBED_READERS(X) X(npy) X(zarr) X(tfrecord) X(wds) X(webdataset) X(lmdb) X(recordio) X(hdf5) X(coco) X(segfolder)
#define STK_DECLARE_READER(name) extern const stk_reader stk_reader_##name;
STK_SELF_DESCRIBED_READERS(STK_DECLARE_READER)
#define STK_READER_ROW(name) &stk_reader_##name,

/*
 * THE table: a prefix is matched exactly ("PREFIX:"); detection of a bare
 * path tries the rows with a detect hook in this order (first match wins),
 * so the specific layouts come before the catch-all image folder. Adding a
 * reader: one file defining `const stk_reader stk_reader_NAME` and one X in
 * STK_SELF_DESCRIBED_READERS (placed there, detection runs after stk,
 * CIFAR and MNIST and before the image folder).
 */
static const stk_reader *const stk_readers[] = {
    &stk_reader_stk,
    &stk_reader_cifar10,
    &stk_reader_cifar100,
    &stk_reader_idx,
    &stk_reader_mnist,
    &stk_reader_fashion_mnist,
    STK_SELF_DESCRIBED_READERS(STK_READER_ROW)
    &stk_reader_imagefolder,
    &stk_reader_list,
};
#define STK_NREADERS (sizeof stk_readers / sizeof stk_readers[0])

const char *stk_dataset_reader(uint32_t i, const char **form, const char **description)
{
    if (i >= STK_NREADERS)
        return NULL;
    if (form)
        *form = stk_readers[i]->form;
    if (description)
        *description = stk_readers[i]->description;
    return stk_readers[i]->prefix;
}

/* "a, b, c" of the rows' `field` strings (or prefixes + ':'), into buf. */
enum { STK_LIST_PREFIXES, STK_LIST_DIRS, STK_LIST_FILES };
static const char *stk_reader_list_text(char *buf, size_t n, int which)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < STK_NREADERS; i++) {
        const stk_reader *r = stk_readers[i];
        const char *t = which == STK_LIST_PREFIXES ? r->prefix
                        : which == STK_LIST_DIRS   ? r->detect_dir_text
                                                   : r->detect_file_text;
        if (!t)
            continue;
        int w = snprintf(buf + used, n - used, "%s%s%s", used ? ", " : "", t,
                         which == STK_LIST_PREFIXES ? ":" : "");
        if (w < 0 || (size_t)w >= n - used)
            break;
        used += (size_t)w;
    }
    return buf;
}

/* A path with no prefix: the first row whose detect says yes. */
static int stk_open_detect(const char *uri, const char *path, const char *query,
                           const stk_dataset_options *opts, stk_dataset **out)
{
    char dirs[1536], files[768], prefixes[512];
    for (size_t i = 0; i < STK_NREADERS; i++) {
        const stk_reader *r = stk_readers[i];
        int hit = r->detect ? r->detect(path) : 0;
        if (hit < 0)
            return hit;
        if (hit)
            return (r->open_detected ? r->open_detected : r->open)(uri, path, query, opts, out);
    }
    stk_reader_list_text(dirs, sizeof dirs, STK_LIST_DIRS);
    stk_reader_list_text(files, sizeof files, STK_LIST_FILES);
    if (stk_path_is_dir(path))
        return stk_fail(STK_ENOENT, "%s: no dataset detected in this directory (looked for %s)",
                        path, dirs);
    if (stk_path_exists(path))
        return stk_fail(STK_EINVAL,
                        "%s: cannot detect the dataset format from this file name (looked for "
                        "%s); name the format with a prefix: %s",
                        path, files,
                        stk_reader_list_text(prefixes, sizeof prefixes, STK_LIST_PREFIXES));
    /* Nothing there: say so, without the list of layouts (the path, not the
     * format, is what is wrong). A pattern that no reader took is expanded
     * here, so that "no file matches" is told apart from "matches files of
     * no known format". */
    if (strpbrk(path, "*?[")) {
        glob_t g;
        int grc = glob(path, 0, NULL, &g);
        size_t n = grc == 0 ? g.gl_pathc : 0;
        globfree(&g); /* glob leaves g for globfree on failure too */
        if (grc == GLOB_NOMATCH || (grc == 0 && n == 0))
            return stk_fail(STK_ENOENT, "%s: no file matches this pattern", path);
        if (grc != 0)
            return stk_fail(STK_EIO, "%s: cannot expand the pattern", path);
        return stk_fail(STK_EINVAL,
                        "%s: cannot detect the dataset format of the %zu file%s this pattern "
                        "matches (looked for %s); name the format with a prefix: %s",
                        path, n, n == 1 ? "" : "s", files,
                        stk_reader_list_text(prefixes, sizeof prefixes, STK_LIST_PREFIXES));
    }
    struct stat st;
    int err = stat(path, &st) == 0 ? 0 : errno;
    if (err == ENOENT || err == ENOTDIR || err == 0)
        return stk_fail(STK_ENOENT, "%s: no such file or directory", path);
    return stk_fail(STK_EIO, "%s: %s", path, strerror(err));
}

/* "abc:" at the start, with a scheme-like name before the colon. */
static int stk_looks_like_scheme(const char *uri, size_t *len)
{
    size_t i = 0;
    while ((uri[i] >= 'a' && uri[i] <= 'z') || (uri[i] >= 'A' && uri[i] <= 'Z') ||
           (uri[i] >= '0' && uri[i] <= '9') || uri[i] == '-' || uri[i] == '_' || uri[i] == '+' ||
           uri[i] == '.')
        i++;
    *len = i;
    return i >= 2 && uri[i] == ':';
}

int stk_dataset_open(const char *uri, const stk_dataset_options *opts, stk_dataset **out)
{
    size_t slen;
    char *copy, *query;
    int rc;

    if (!out)
        return stk_fail(STK_EINVAL, "stk_dataset_open: out is NULL");
    *out = NULL;
    if (!uri || !*uri)
        return stk_fail(STK_EINVAL, "stk_dataset_open: empty URI");
    if (opts && (rc = stk_reserved_check(opts->reserved_, sizeof opts->reserved_ / sizeof opts->reserved_[0], "stk_dataset_options")) < 0)
        return rc;

    for (size_t i = 0; i < STK_NREADERS; i++) {
        const stk_reader *r = stk_readers[i];
        size_t plen = strlen(r->prefix);
        if (strncmp(uri, r->prefix, plen) != 0 || uri[plen] != ':')
            continue;
        copy = stk_split_query(uri + plen + 1, &query);
        if (!copy)
            return stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
        rc = r->open(uri, copy, query, opts, out);
        free(copy);
        return rc;
    }

    /* A URL of an object store without a format prefix: the format from the
     * name's suffix (".stk", or an s3:// prefix ending in '/': .stk shards). */
    if (stk_is_remote(uri)) {
        size_t q = strcspn(uri, "?");
        static const struct { const char *suffix, *reader; } by_suffix[] = {
            {".stk", "stk"}, {"/", "stk"}, {".tar", "wds"}, {".tfrecord", "tfrecord"},
            {".rec", "recordio"}};
        for (size_t k = 0; k < sizeof by_suffix / sizeof by_suffix[0]; k++) {
            size_t n = strlen(by_suffix[k].suffix);
            if (q < n || strncmp(uri + q - n, by_suffix[k].suffix, n) != 0)
                continue;
            for (size_t i = 0; i < STK_NREADERS; i++) {
                if (strcmp(stk_readers[i]->prefix, by_suffix[k].reader) != 0)
                    continue;
                copy = stk_split_query(uri, &query);
                if (!copy)
                    return stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
                rc = stk_readers[i]->open(uri, copy, query, opts, out);
                free(copy);
                return rc;
            }
        }
        return stk_fail(STK_EINVAL,
                        "%s: cannot tell the format of this remote dataset from its name: "
                        "write it with a prefix (stk:, wds:, tfrecord:, recordio:)", uri);
    }
    /* No known prefix: a path, unless it is neither a path nor free of a
     * scheme-like prefix. */
    if (stk_path_exists(uri))
        return stk_open_detect(uri, uri, NULL, opts, out);
    if (stk_looks_like_scheme(uri, &slen)) {
        char prefixes[512];
        return stk_fail(STK_EINVAL,
                        "unknown dataset URI prefix '%.*s:' in '%s' (known prefixes: %s; or a "
                        "path to detect)",
                        (int)(slen > 64 ? 64 : slen), uri, uri,
                        stk_reader_list_text(prefixes, sizeof prefixes, STK_LIST_PREFIXES));
    }
    copy = stk_split_query(uri, &query);
    if (!copy)
        return stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
    rc = stk_open_detect(uri, copy, query, opts, out);
    free(copy);
    return rc;
}
