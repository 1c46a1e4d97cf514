/*
 * cifar.c — the CIFAR-10 and CIFAR-100 binary formats.
 *
 * Both are a bare sequence of fixed-size records with no header:
 *
 *   CIFAR-10   1 label byte (0..9)                     + 3072 pixel bytes
 *   CIFAR-100  1 coarse label (0..19) + 1 fine (0..99) + 3072 pixel bytes
 *
 * The pixels are planar: 1024 red bytes, then 1024 green, then 1024 blue,
 * each plane a row-major 32x32 image. The official archives split the
 * training set over data_batch_1..5.bin (CIFAR-10) or keep it in train.bin
 * (CIFAR-100); the test set is test_batch.bin / test.bin.
 *
 * How it works. Every file of the split is mapped read-only and the files
 * form one index space in the order given: file k's record r is sample
 * first[k] + r. Because a record has no header of its own, the whole of the
 * validation is done at open: every file must be a regular, non-empty file
 * whose size is a whole number of records, and every label byte (for
 * CIFAR-100 both of them) must be in range. The chosen label of every sample
 * is then copied into one table, so read() is pure arithmetic: find the file
 * by binary search over `first`, point the view at the record's pixels with
 * planar strides (row 32, column 1, channel 1024) and return the label from
 * the table. Nothing is copied and nothing is locked.
 *
 * Invariants after open: nfiles >= 1; files[0].first == 0; files[k].first +
 * files[k].records == files[k+1].first; the last one ends at ds->count; each
 * mapping is exactly records * record_size bytes; labels[i] < num_classes
 * for every i < count.
 *
 * The reader table (reader_table.c) holds two rows defined at the end of
 * this file, stk_reader_cifar10 and stk_reader_cifar100: a prefix each, and
 * a detect hook each that knows the archives' file names (a directory
 * holding data_batch_1.bin or test_batch.bin, or train.bin or test.bin, also
 * one level down in cifar-10-batches-bin/ or cifar-100-binary/; or one such
 * file).
 */
#include "core/error.h"
#include "format/dataset.h"
#include "format/reader_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STK_CIFAR_SIDE 32
#define STK_CIFAR_PLANE (STK_CIFAR_SIDE * STK_CIFAR_SIDE) /* 1024 */
#define STK_CIFAR_PIXELS (3 * STK_CIFAR_PLANE)           /* 3072 */
#define STK_CIFAR10_TRAIN_FILES 5

typedef struct stk_cifar_file {
    char *path;          /* owned; used in messages */
    stk_mapped_file map; /* owned mapping of the whole file */
    uint64_t first;      /* global index of this file's record 0 */
    uint64_t records;    /* map.size / record_size */
} stk_cifar_file;

typedef struct stk_cifar_impl {
    stk_cifar_file *files; /* owned, nfiles entries (in index order) */
    size_t nfiles;
    size_t record_size;    /* 3073 (CIFAR-10) or 3074 (CIFAR-100) */
    size_t pixel_offset;   /* label bytes before the pixels: 1 or 2 */
    uint8_t *labels;       /* owned, ds->count entries, validated at open */
} stk_cifar_impl;

static const char *const stk_cifar_splits[] = {"train", "test", NULL};
static const char *const stk_cifar_labels[] = {"fine", "coarse", NULL};

enum { STK_SPLIT_TRAIN = 0, STK_SPLIT_TEST = 1 };
enum { STK_LABEL_FINE = 0, STK_LABEL_COARSE = 1 };

/* ------------------------------------------------------------------------ */
/* read / close                                                             */
/* ------------------------------------------------------------------------ */

static int stk_cifar_read(const stk_dataset *ds, uint64_t index, stk_sample *out,
                          stk_scratch *scratch)
{
    const stk_cifar_impl *c = ds->impl;
    size_t lo = 0, hi = c->nfiles;
    const stk_cifar_file *f;
    (void)scratch;

    if (index >= ds->count)
        return stk_fail(STK_EINVAL, "%s: sample index %llu out of range (%llu samples)", ds->uri,
                        (unsigned long long)index, (unsigned long long)ds->count);
    /* Last file whose first index is <= index (files[0].first == 0). */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->files[mid].first <= index)
            lo = mid;
        else
            hi = mid;
    }
    f = &c->files[lo];
    out->image.pixels = f->map.data + (index - f->first) * c->record_size + c->pixel_offset;
    out->image.height = STK_CIFAR_SIDE;
    out->image.width = STK_CIFAR_SIDE;
    out->image.channels = 3;
    out->image.row_stride = STK_CIFAR_SIDE;
    out->image.col_stride = 1;
    out->image.chan_stride = STK_CIFAR_PLANE;
    out->label = c->labels[index];
    return 0;
}

/* vtable.read_check: the caller is done with sample `index`'s pixels; were
 * they still the file's (a file truncated while open reads as zeros)? */
static int stk_cifar_read_check(const stk_dataset *ds, uint64_t index)
{
    const stk_cifar_impl *c = ds->impl;
    size_t lo = 0, hi = c->nfiles;
    uint64_t valid;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->files[mid].first <= index)
            lo = mid;
        else
            hi = mid;
    }
    const stk_cifar_file *f = &c->files[lo];
    uint64_t r = index - f->first;
    if (stk_mapped_file_intact(&f->map, r * c->record_size, c->record_size, &valid))
        return 0;
    return stk_fail(STK_EDATA,
                    "%s: record %llu (sample %llu): the file was truncated while open (only its "
                    "first %llu of %zu bytes remain); the record's bytes were lost",
                    f->path, (unsigned long long)r, (unsigned long long)index,
                    (unsigned long long)valid, f->map.size);
}

static void stk_cifar_close(stk_dataset *ds)
{
    stk_cifar_impl *c = ds->impl;
    if (!c)
        return;
    for (size_t i = 0; i < c->nfiles; i++) {
        stk_unmap_file(&c->files[i].map);
        free(c->files[i].path);
    }
    free(c->files);
    free(c->labels);
    free(c);
    ds->impl = NULL;
}

static const stk_dataset_vtable stk_cifar10_vt = {.format = "cifar10", .read = stk_cifar_read,
                                                  .close = stk_cifar_close,
                                                  .read_check = stk_cifar_read_check};
static const stk_dataset_vtable stk_cifar100_vt = {.format = "cifar100", .read = stk_cifar_read,
                                                   .close = stk_cifar_close,
                                                   .read_check = stk_cifar_read_check};

/* ------------------------------------------------------------------------ */
/* Which files                                                              */
/* ------------------------------------------------------------------------ */

typedef struct stk_path_list {
    char **paths; /* owned, each malloc'd */
    size_t n, cap;
} stk_path_list;

static void stk_path_list_free(stk_path_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->paths[i]);
    free(l->paths);
    l->paths = NULL;
    l->n = l->cap = 0;
}

/* Append a malloc'd path (ownership moves to the list, even on failure). */
static int stk_path_list_push(stk_path_list *l, char *p)
{
    if (!p)
        return STK_ENOMEM; /* the allocator already called stk_fail */
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        char **np = realloc(l->paths, cap * sizeof *np);
        if (!np) {
            free(p);
            return stk_fail(STK_ENOMEM, "out of memory listing CIFAR files");
        }
        l->paths = np;
        l->cap = cap;
    }
    l->paths[l->n++] = p;
    return 0;
}

static char *stk_strndup_fail(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p) {
        stk_fail(STK_ENOMEM, "out of memory");
        return NULL;
    }
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

/* The files of `split` in directory `dir` (or in the archive's own
 * subdirectory, cifar-10-batches-bin / cifar-100-binary, when `dir` holds
 * that instead). Each must exist. */
static int stk_cifar_dir_files(const char *what, const char *dir, int cifar100, int split,
                               stk_path_list *list)
{
    const char *subdir_name = cifar100 ? "cifar-100-binary" : "cifar-10-batches-bin";
    const char *first_name = cifar100 ? (split == STK_SPLIT_TEST ? "test.bin" : "train.bin")
                                      : (split == STK_SPLIT_TEST ? "test_batch.bin"
                                                                 : "data_batch_1.bin");
    char *probe = NULL, *sub = NULL;
    const char *base = dir;
    int rc = 0;

    probe = stk_path_join(dir, first_name);
    if (!probe)
        return STK_ENOMEM;
    if (!stk_path_exists(probe)) {
        sub = stk_path_join(dir, subdir_name);
        if (!sub) {
            rc = STK_ENOMEM;
            goto out;
        }
        if (stk_path_is_dir(sub))
            base = sub;
    }

    if (!cifar100 && split == STK_SPLIT_TRAIN) {
        for (int k = 1; k <= STK_CIFAR10_TRAIN_FILES; k++) {
            char name[32];
            snprintf(name, sizeof name, "data_batch_%d.bin", k);
            rc = stk_path_list_push(list, stk_path_join(base, name));
            if (rc)
                goto out;
        }
    } else {
        rc = stk_path_list_push(list, stk_path_join(base, first_name));
        if (rc)
            goto out;
    }
    for (size_t i = 0; i < list->n; i++) {
        if (!stk_path_exists(list->paths[i])) {
            rc = stk_fail(STK_ENOENT,
                          "%s: %s: no such file (the %s split of a %s directory is %s)", what,
                          list->paths[i], split == STK_SPLIT_TEST ? "test" : "train",
                          cifar100 ? "CIFAR-100" : "CIFAR-10",
                          cifar100 ? (split == STK_SPLIT_TEST ? "test.bin" : "train.bin")
                                   : (split == STK_SPLIT_TEST
                                          ? "test_batch.bin"
                                          : "data_batch_1.bin .. data_batch_5.bin"));
            goto out;
        }
    }
out:
    free(probe);
    free(sub);
    return rc;
}

/* PATH as documented in stoker.h: a directory, one file, or files joined by
 * ','. `split` is -1 when the URI did not give one. */
static int stk_cifar_paths(const char *what, const char *uri, const char *path, int cifar100,
                           int split, stk_path_list *list)
{
    if (!*path)
        return stk_fail(STK_EINVAL, "%s: empty path in URI '%s'", what, uri);

    if (strchr(path, ',')) {
        const char *p = path;
        if (split >= 0)
            return stk_fail(STK_EINVAL,
                            "%s: split= only applies when PATH is a directory, not to the "
                            "file list in URI '%s'",
                            what, uri);
        for (;;) {
            const char *comma = strchr(p, ',');
            size_t len = comma ? (size_t)(comma - p) : strlen(p);
            int rc;
            if (len == 0)
                return stk_fail(STK_EINVAL, "%s: empty file name in the list '%s' (URI '%s')",
                                what, path, uri);
            rc = stk_path_list_push(list, stk_strndup_fail(p, len));
            if (rc)
                return rc;
            if (!comma)
                return 0;
            p = comma + 1;
        }
    }

    if (stk_path_is_dir(path))
        return stk_cifar_dir_files(what, path, cifar100, split < 0 ? STK_SPLIT_TRAIN : split,
                                   list);
    if (!stk_path_exists(path))
        return stk_fail(STK_ENOENT, "%s: %s: no such file or directory (expected a %s directory "
                                    "with %s, or %s file(s))",
                        what, path, cifar100 ? "CIFAR-100" : "CIFAR-10",
                        cifar100 ? "train.bin/test.bin" : "data_batch_1..5.bin/test_batch.bin",
                        cifar100 ? "CIFAR-100" : "CIFAR-10");
    if (split >= 0)
        return stk_fail(STK_EINVAL,
                        "%s: split= only applies when PATH is a directory, and %s is a file "
                        "(URI '%s')",
                        what, path, uri);
    return stk_path_list_push(list, stk_strndup_fail(path, strlen(path)));
}

/* ------------------------------------------------------------------------ */
/* Open                                                                     */
/* ------------------------------------------------------------------------ */

/* Check every label byte of file k, then copy the chosen one into the
 * table. */
static int stk_cifar_scan_labels(const stk_cifar_impl *c, const stk_cifar_file *f, int cifar100,
                                 int use_coarse, uint8_t *labels)
{
    for (uint64_t r = 0; r < f->records; r++) {
        const uint8_t *rec = f->map.data + r * c->record_size;
        uint64_t g = f->first + r;
        if (!cifar100) {
            if (rec[0] >= 10)
                return stk_fail(STK_EFORMAT,
                                "%s: record %llu (sample %llu): label %u out of range "
                                "(CIFAR-10 labels are 0..9)",
                                f->path, (unsigned long long)r, (unsigned long long)g, rec[0]);
            labels[g] = rec[0];
        } else {
            if (rec[0] >= 20)
                return stk_fail(STK_EFORMAT,
                                "%s: record %llu (sample %llu): coarse label %u out of range "
                                "(CIFAR-100 coarse labels are 0..19)",
                                f->path, (unsigned long long)r, (unsigned long long)g, rec[0]);
            if (rec[1] >= 100)
                return stk_fail(STK_EFORMAT,
                                "%s: record %llu (sample %llu): fine label %u out of range "
                                "(CIFAR-100 fine labels are 0..99)",
                                f->path, (unsigned long long)r, (unsigned long long)g, rec[1]);
            labels[g] = use_coarse ? rec[0] : rec[1];
        }
    }
    return 0;
}

static int stk_cifar_open(const char *uri, const char *path, const char *query, int cifar100,
                          const stk_dataset_options *opts_in, stk_dataset **out)
{
    const char *what = cifar100 ? "cifar100" : "cifar10";
    const char *name = cifar100 ? "CIFAR-100" : "CIFAR-10";
    stk_query_key keys[2] = {{"split", stk_cifar_splits, -1}, {"label", stk_cifar_labels, -1}};
    stk_dataset_options opts = stk_dataset_options_resolve(opts_in);
    stk_path_list list = {0};
    stk_dataset *ds = NULL;
    stk_cifar_impl *c = NULL;
    uint64_t total = 0;
    int rc;

    *out = NULL;
    rc = stk_query_parse(uri, what, query, keys, cifar100 ? 2 : 1);
    if (rc)
        return rc;
    rc = stk_cifar_paths(what, uri, path, cifar100, keys[0].value, &list);
    if (rc)
        goto fail;
    if (STK_CIFAR_PLANE > opts.max_pixels) {
        rc = stk_fail(STK_ELIMIT, "%s: %s samples have %d pixels, more than max_pixels %llu",
                      uri, name, STK_CIFAR_PLANE, (unsigned long long)opts.max_pixels);
        goto fail;
    }

    ds = stk_dataset_alloc(cifar100 ? &stk_cifar100_vt : &stk_cifar10_vt, uri);
    if (!ds) {
        rc = STK_ENOMEM;
        goto fail;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        rc = stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
        goto fail;
    }
    ds->impl = c;
    c->record_size = (size_t)STK_CIFAR_PIXELS + (cifar100 ? 2 : 1);
    c->pixel_offset = cifar100 ? 2 : 1;
    c->files = calloc(list.n, sizeof *c->files);
    if (!c->files) {
        rc = stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
        goto fail;
    }
    /* Paths move into the files (closed by stk_cifar_close from here on). */
    c->nfiles = list.n;
    for (size_t i = 0; i < list.n; i++) {
        c->files[i].path = list.paths[i];
        list.paths[i] = NULL;
    }
    list.n = 0;

    for (size_t i = 0; i < c->nfiles; i++) {
        stk_cifar_file *f = &c->files[i];
        rc = stk_map_file(f->path, opts.max_bytes, &f->map);
        if (rc)
            goto fail;
        if (f->map.size == 0) {
            rc = stk_fail(STK_EFORMAT, "%s: empty file (a %s file is a sequence of %zu-byte "
                                       "records)",
                          f->path, name, c->record_size);
            goto fail;
        }
        if (f->map.size % c->record_size != 0) {
            rc = stk_fail(STK_EFORMAT,
                          "%s: size %zu is not a multiple of the %zu-byte %s record (%zu whole "
                          "records + %zu bytes)",
                          f->path, f->map.size, c->record_size, name,
                          f->map.size / c->record_size, f->map.size % c->record_size);
            goto fail;
        }
        f->records = f->map.size / c->record_size;
        f->first = total;
        if (!stk_add_ok(total, f->records, &total) || total > opts.max_samples) {
            rc = stk_fail(STK_ELIMIT, "%s: more than max_samples %llu samples (through %s)",
                          uri, (unsigned long long)opts.max_samples, f->path);
            goto fail;
        }
    }

    c->labels = malloc(total);
    if (!c->labels) {
        rc = stk_fail(STK_ENOMEM, "out of memory for the %llu labels of %s",
                      (unsigned long long)total, uri);
        goto fail;
    }
    for (size_t i = 0; i < c->nfiles; i++) {
        rc = stk_cifar_scan_labels(c, &c->files[i], cifar100, keys[1].value == STK_LABEL_COARSE,
                                   c->labels);
        if (rc)
            goto fail;
    }

    ds->count = total;
    ds->height = STK_CIFAR_SIDE;
    ds->width = STK_CIFAR_SIDE;
    ds->channels = 3;
    ds->num_classes = !cifar100 ? 10 : (keys[1].value == STK_LABEL_COARSE ? 20 : 100);
    stk_path_list_free(&list); /* only the array is left: the paths moved */
    *out = ds;
    return 0;

fail:
    stk_path_list_free(&list);
    stk_dataset_close(ds);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The reader table's rows                                                  */
/* ------------------------------------------------------------------------ */

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

static int stk_is_cifar10_file_name(const char *base)
{
    return strcmp(base, "test_batch.bin") == 0 ||
           (strncmp(base, "data_batch_", 11) == 0 && base[11] >= '1' && base[11] <= '9' &&
            strcmp(base + 12, ".bin") == 0);
}

static int stk_detect_cifar10(const char *path)
{
    static const char *const names[] = {"data_batch_1.bin", "test_batch.bin",
                                        "cifar-10-batches-bin/data_batch_1.bin",
                                        "cifar-10-batches-bin/test_batch.bin"};
    if (stk_path_is_dir(path))
        return stk_dir_has_any(path, names, 4);
    return stk_path_is_file(path) && stk_is_cifar10_file_name(stk_path_basename(path));
}

static int stk_detect_cifar100(const char *path)
{
    static const char *const names[] = {"train.bin", "test.bin", "cifar-100-binary/train.bin",
                                        "cifar-100-binary/test.bin"};
    const char *base = stk_path_basename(path);
    if (stk_path_is_dir(path))
        return stk_dir_has_any(path, names, 4);
    return stk_path_is_file(path) && (!strcmp(base, "train.bin") || !strcmp(base, "test.bin"));
}

const stk_reader stk_reader_cifar10 = {
    "cifar10", "cifar10:PATH[?split=train|test]",
    "CIFAR-10 binary: a directory, one file, or files joined by ','",
    stk_open_cifar10, NULL, stk_detect_cifar10,
    "data_batch_1.bin or test_batch.bin (CIFAR-10)", "data_batch_N.bin, test_batch.bin"};

const stk_reader stk_reader_cifar100 = {
    "cifar100", "cifar100:PATH[?split=train|test][&label=fine|coarse]",
    "CIFAR-100 binary: a directory, one file, or files joined by ','",
    stk_open_cifar100, NULL, stk_detect_cifar100,
    "train.bin or test.bin (CIFAR-100), also in cifar-10-batches-bin/ or cifar-100-binary/",
    "train.bin, test.bin"};
