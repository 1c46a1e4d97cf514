/*
 * dataset.c — the generic dataset interface: opening a dataset by URI (the
 * dispatcher over the reader table), the dataset object's shell (options,
 * alloc, close, info) and the public whole-sample reads.
 *
 * stk_dataset_open reads one table, reader_table.c's, through its lookup
 * (reader_table.h: stk_reader_at, stk_reader_find), and holds no reader's
 * code: a row per reader, {prefix, form, description, open, open_detected,
 * detect, detect texts} (stk_reader, reader.h), each defined in its
 * reader's own file. A URI "PREFIX:PATH[?QUERY]" whose prefix matches
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
 * Adding a reader touches its own file and one row of reader_table.c,
 * never this file (docs/datasets.md, "Adding a reader").
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
 * Datasets made by a call rather than a URI live in their own files: the
 * in-memory reader (memory.c), callbacks (callback.c), concatenation
 * (concat.c); the fields of any dataset are fields.c's.
 */
#include "format/dataset.h"

#include "codec/codec.h"
#include "core/error.h"
#include "core/util.h"
#include "format/reader_table.h"
#include "format/reader_util.h"
#include "io/remote.h"

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
/* URI dispatch over the reader table (reader_table.c)                      */
/* ------------------------------------------------------------------------ */

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

const char *stk_dataset_reader(uint32_t i, const char **form, const char **description)
{
    const stk_reader *r = stk_reader_at(i);
    if (!r)
        return NULL;
    if (form)
        *form = r->form;
    if (description)
        *description = r->description;
    return r->prefix;
}

/* "a, b, c" of the rows' `field` strings (or prefixes + ':'), into buf. */
enum { STK_LIST_PREFIXES, STK_LIST_DIRS, STK_LIST_FILES };
static const char *stk_reader_list_text(char *buf, size_t n, int which)
{
    size_t used = 0;
    buf[0] = '\0';
    const stk_reader *r;
    for (size_t i = 0; (r = stk_reader_at(i)) != NULL; i++) {
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
    const stk_reader *r;
    for (size_t i = 0; (r = stk_reader_at(i)) != NULL; i++) {
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

    /* "PREFIX:..." with PREFIX a row's prefix (no prefix holds a ':'). */
    const char *colon = strchr(uri, ':');
    const stk_reader *r = colon ? stk_reader_find(uri, (size_t)(colon - uri)) : NULL;
    if (r) {
        copy = stk_split_query(colon + 1, &query);
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
            r = stk_reader_find(by_suffix[k].reader, strlen(by_suffix[k].reader));
            if (!r)
                continue;
            copy = stk_split_query(uri, &query);
            if (!copy)
                return stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
            rc = r->open(uri, copy, query, opts, out);
            free(copy);
            return rc;
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
