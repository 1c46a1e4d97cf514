/*
 * imagefolder.c — datasets of one image file per sample: a directory in
 * torchvision's ImageFolder layout ("imagefolder:DIR") and a list file of
 * "path<TAB>label" lines ("list:FILE").
 *
 * Both produce ENCODED samples: read() opens the sample's file as a byte
 * source (src/io/source.h, stk_file_source_open_at: kept on the stack, so
 * no allocation per sample), reads it whole into
 * the caller's scratch and returns them as stk_sample.encoded
 * (image.pixels stays NULL); decoding is the codec's business
 * (src/codec/codec.h), done by the caller. Nothing is decoded or even
 * opened at open time beyond the directory walk (or the list file), so
 * opening ImageNet costs one readdir per directory and no stat per image;
 * a file that has vanished, cannot be read, is not a regular file, is
 * empty, or is larger than max_bytes is found at read time and is
 * STK_EDATA naming its path and the reason, so the loader's skip policy
 * applies to it like to any corrupt sample.
 *
 * ImageFolder semantics are torchvision's (datasets/folder.py), so that a
 * model trained through stoker sees the same label for the same file and
 * the same sample at the same index:
 *
 *   - classes are the names of the entries of DIR that are directories
 *     (symlinks followed; hidden ones included, as os.scandir gives them),
 *     sorted by code point (strcmp on UTF-8 bytes); label = position;
 *   - the samples of a class are found by os.walk(DIR/CLASS,
 *     followlinks=True) sorted: directories in order of their full path
 *     string, and within a directory its non-directory entries sorted by
 *     name. (This is not a sort of the full file paths: "c/x.jpg" comes
 *     before "c/a/y.jpg", because directory "c" sorts before "c/a".)
 *   - a file is kept if its name ends, case-insensitively, in .jpg .jpeg
 *     .png .ppm .bmp .pgm .tif .tiff or .webp (torchvision's
 *     IMG_EXTENSIONS), whatever it is (a broken symlink is kept and fails
 *     at read time, as it would in torchvision);
 *   - a class with no such file is an error (STK_EFORMAT), listing the
 *     classes, as torchvision's "Found no valid file for the classes ...".
 *   Departures, so that nothing is lost or listed twice in silence: every
 *   directory is known by (st_dev, st_ino), the root and the classes
 *   registered first; a directory met again (a symlink back to the root or
 *   an ancestor, where os.walk would loop until the path is too long, or a
 *   second path to a listed directory) is left out, and so is one that
 *   cannot be opened or read (os.walk skips it silently). Each is recorded
 *   in ds->skipped with the reason (stk_dataset_skipped), or with
 *   "?strict=1" fails the open with STK_EDATA. Subdirectories are walked
 *   in name order, so which path to a directory wins is fixed.
 *
 * List files: one sample per line, "PATH<TAB>LABEL". A relative PATH is
 * resolved against the directory of the list file, an absolute one is used
 * as is. Blank lines (also lines of only spaces/tabs) and lines whose first
 * character is '#' are skipped; a '\r' before the '\n' is dropped. LABEL is
 * a non-negative decimal integer that fits int64. Anything else (no tab,
 * an empty path, a second tab, a sign, spaces in the label, a NUL byte) is
 * STK_EFORMAT "FILE:LINE: reason". num_classes is the largest label + 1.
 *
 * Memory. The listing is the only O(N) memory: every path relative to the
 * root (DIR, or the list file's directory) is stored back to back in one
 * string arena, with an offset and a label per sample: 16 bytes plus the
 * relative path and its NUL (ImageNet train: ~1.28 M * ~50 bytes = 64 MB).
 * The root stays open as a directory descriptor and read() opens the file
 * relative to it (stk_file_source_open_at, an openat in src/io), so no
 * path is built on the hot path except for error messages. The bytes come
 * through src/io; what this file does with the file system itself is walk
 * directories (openat of a directory, fdopendir, readdir, fstatat).
 *
 * Invariants after open: count >= 1; offsets[i] < arena_len and the arena
 * holds a NUL-terminated path there; labels[i] >= 0 (imagefolder:
 * labels[i] < num_classes); root_fd is an open directory.
 *
 * The reader table (reader_table.c) holds the two rows defined at the end
 * of this file: stk_reader_imagefolder (detected last, the catch-all of a
 * bare directory: stk_imagefolder_detect, which wds.c asks too) and
 * stk_reader_list (by prefix only).
 */
#include "core/error.h"
#include "format/dataset.h"
#include "format/reader_util.h"
#include "io/source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* torchvision.datasets.folder.IMG_EXTENSIONS */
static const char *const stk_img_exts[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                           ".pgm", ".tif",  ".tiff", ".webp"};
#define STK_IMG_EXT_LIST ".jpg, .jpeg, .png, .ppm, .bmp, .pgm, .tif, .tiff, .webp"

typedef struct stk_files_impl {
    int root_fd;        /* owned: the directory relative paths start from */
    char *root;         /* owned: its path as given, for messages */
    char *arena;        /* owned: NUL-terminated paths back to back */
    size_t arena_len, arena_cap;
    uint64_t *offsets;  /* owned: count offsets into arena */
    int64_t *labels;    /* owned: count labels */
    size_t cap;         /* capacity of offsets and labels while listing */
    uint64_t max_bytes; /* largest file read() accepts */
} stk_files_impl;

/* ------------------------------------------------------------------------ */
/* read / close                                                             */
/* ------------------------------------------------------------------------ */

/* Put "ROOT/REL: " (or "REL: " for an absolute REL) before the message just
 * set, and return `code`. */
static int stk_read_fail(const stk_files_impl *f, const char *rel, int code)
{
    size_t n = strlen(f->root);
    int abs = rel[0] == '/';
    return stk_fail_prefix(code, "%s%s%s", abs ? "" : f->root,
                           abs || (n && f->root[n - 1] == '/') ? "" : "/", rel);
}

static int stk_files_read(const stk_dataset *ds, uint64_t index, stk_sample *out,
                          stk_scratch *scratch)
{
    const stk_files_impl *f = ds->impl;
    const char *rel;
    stk_file_source fs; /* on the stack: no allocation per sample */
    stk_source *src = &fs.base;
    size_t done = 0;
    int rc = 0;

    if (index >= ds->count)
        return stk_fail(STK_EINVAL, "%s: sample index %llu out of range (%llu samples)", ds->uri,
                        (unsigned long long)index, (unsigned long long)ds->count);
    rel = f->arena + f->offsets[index];
    /* Opened without blocking (a FIFO named like an image must not hang a
     * worker), regular files only; the source words the reason ("cannot
     * open: ...", "cannot stat: ...", "not a regular file"), we name the
     * file and make it STK_EDATA. */
    if ((rc = stk_file_source_open_at(&fs, f->root_fd, rel, NULL)) < 0)
        return stk_read_fail(f, rel, rc == STK_ENOMEM ? rc : STK_EDATA);
    if (src->size == 0)
        rc = stk_fail(STK_EDATA, "empty file");
    else if (src->size > f->max_bytes || src->size > SIZE_MAX)
        rc = stk_fail(STK_EDATA, "%lld bytes exceeds the max_bytes limit of %llu",
                      (long long)src->size, (unsigned long long)f->max_bytes);
    if (rc)
        goto fail;
    rc = stk_scratch_reserve(scratch, (size_t)src->size);
    if (rc)
        goto fail;
    while (done < (size_t)src->size) {
        int64_t n = stk_source_read_part(src, scratch->data + done, (size_t)src->size - done,
                                         done);
        if (n <= 0) {
            rc = n < 0 ? STK_EDATA /* "read error: REASON" */
                       : stk_fail(STK_EDATA, "file shrank to %zu bytes while being read", done);
            goto fail;
        }
        done += (size_t)n;
    }
    stk_source_close(src);
    memset(&out->image, 0, sizeof out->image);
    out->encoded = scratch->data;
    out->encoded_size = done;
    out->label = f->labels[index];
    return 0;

fail:
    stk_source_close(src);
    return stk_read_fail(f, rel, rc);
}

static void stk_files_close(stk_dataset *ds)
{
    stk_files_impl *f = ds->impl;
    if (!f)
        return;
    if (f->root_fd >= 0)
        close(f->root_fd);
    free(f->root);
    free(f->arena);
    free(f->offsets);
    free(f->labels);
    free(f);
    ds->impl = NULL;
}

/* A sample is named by its file: "ROOT/REL" (or REL when absolute). */
static void stk_files_sample_name(const stk_dataset *ds, uint64_t index, char *buf, size_t size)
{
    const stk_files_impl *f = ds->impl;
    const char *rel = f->arena + f->offsets[index];
    if (rel[0] == '/')
        snprintf(buf, size, "%s", rel);
    else
        snprintf(buf, size, "%s/%s", f->root, rel);
}

/* The label from the listing: no file is opened, so `stoker inspect` of an
 * image folder (its label histogram) costs the directory walk alone. The
 * file's own checks (it exists, is a regular file, not empty, within
 * max_bytes) stay where they were, at read time: a loader still skips or
 * names a bad file when it reads it. */
static int stk_files_label(const stk_dataset *ds, uint64_t index, int64_t *label)
{
    const stk_files_impl *f = ds->impl;
    *label = f->labels[index];
    return 0;
}

static const stk_dataset_vtable stk_imagefolder_vt = {.format = "imagefolder",
                                                      .read = stk_files_read,
                                                      .label = stk_files_label,
                                                      .close = stk_files_close,
                                                      .sample_name = stk_files_sample_name};
static const stk_dataset_vtable stk_list_vt = {.format = "list",
                                               .read = stk_files_read,
                                               .label = stk_files_label,
                                               .close = stk_files_close,
                                               .sample_name = stk_files_sample_name};

/* ------------------------------------------------------------------------ */
/* Building the listing                                                     */
/* ------------------------------------------------------------------------ */

/* Append sample `ds->count`: path a, or a + "/" + b when b is not NULL. */
static int stk_files_add(stk_dataset *ds, stk_files_impl *f, const char *a, size_t alen,
                         const char *b, int64_t label, uint64_t max_samples, const char *where)
{
    size_t blen = b ? strlen(b) + 1 : 0; /* with the '/' */
    size_t need = alen + blen + 1;

    if (ds->count >= max_samples)
        return stk_fail(STK_ELIMIT, "%s: more than max_samples = %llu samples", where,
                        (unsigned long long)max_samples);
    if (ds->count == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 1024;
        uint64_t *o;
        int64_t *l;
        if (cap > SIZE_MAX / sizeof(uint64_t))
            return stk_fail(STK_ENOMEM, "%s: too many samples", where);
        o = realloc(f->offsets, cap * sizeof *o);
        if (!o)
            goto oom;
        f->offsets = o;
        l = realloc(f->labels, cap * sizeof *l);
        if (!l)
            goto oom;
        f->labels = l;
        f->cap = cap;
    }
    if (f->arena_len + need > f->arena_cap) {
        size_t cap = f->arena_cap ? f->arena_cap : 65536;
        char *p;
        while (cap < f->arena_len + need) {
            if (cap > SIZE_MAX / 2)
                return stk_fail(STK_ENOMEM, "%s: too many paths", where);
            cap *= 2;
        }
        p = realloc(f->arena, cap);
        if (!p)
            goto oom;
        f->arena = p;
        f->arena_cap = cap;
    }
    memcpy(f->arena + f->arena_len, a, alen);
    if (b) {
        f->arena[f->arena_len + alen] = '/';
        memcpy(f->arena + f->arena_len + alen + 1, b, blen - 1);
    }
    f->arena[f->arena_len + alen + blen] = '\0';
    f->offsets[ds->count] = f->arena_len;
    f->labels[ds->count] = label;
    f->arena_len += need;
    ds->count++;
    return 0;
oom:
    return stk_fail(STK_ENOMEM, "%s: out of memory listing %llu samples", where,
                    (unsigned long long)ds->count);
}

/* Shrink the listing's arrays to their final size (best effort). */
static void stk_files_trim(stk_dataset *ds, stk_files_impl *f)
{
    char *a = realloc(f->arena, f->arena_len ? f->arena_len : 1);
    uint64_t *o = realloc(f->offsets, ds->count * sizeof *o);
    int64_t *l = realloc(f->labels, ds->count * sizeof *l);
    if (a) {
        f->arena = a;
        f->arena_cap = f->arena_len;
    }
    if (o)
        f->offsets = o;
    if (l)
        f->labels = l;
}

static int stk_open_root(stk_files_impl *f, const char *dir)
{
    char ebuf[128];
    f->root = stk_strdup(dir);
    if (!f->root)
        return STK_ENOMEM;
    f->root_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (f->root_fd < 0)
        return stk_fail(errno == ENOENT ? STK_ENOENT : STK_EIO, "%s: cannot open directory: %s",
                        dir, strerror_r(errno, ebuf, sizeof ebuf));
    return 0;
}

static stk_files_impl *stk_files_new(stk_dataset *ds, const stk_dataset_options *opts)
{
    stk_files_impl *f = calloc(1, sizeof *f);
    if (!f) {
        stk_fail(STK_ENOMEM, "out of memory opening %s", ds->uri);
        return NULL;
    }
    f->root_fd = -1;
    f->max_bytes = opts->max_bytes;
    ds->impl = f;
    return f;
}

/* ------------------------------------------------------------------------ */
/* ImageFolder                                                              */
/* ------------------------------------------------------------------------ */

static int stk_has_img_ext(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof stk_img_exts / sizeof stk_img_exts[0]; i++) {
        size_t k = strlen(stk_img_exts[i]);
        if (n >= k && strcasecmp(name + n - k, stk_img_exts[i]) == 0)
            return 1;
    }
    return 0;
}

/* A growable array of malloc'd strings. */
typedef struct stk_strvec {
    char **v; /* owned, each owned */
    size_t n, cap;
} stk_strvec;

static void stk_strvec_free(stk_strvec *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* Append a copy of p[0..len). */
static int stk_strvec_push(stk_strvec *s, const char *p, size_t len)
{
    char *c;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        char **v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return stk_fail(STK_ENOMEM, "out of memory listing a directory");
        s->v = v;
        s->cap = cap;
    }
    c = malloc(len + 1);
    if (!c)
        return stk_fail(STK_ENOMEM, "out of memory listing a directory");
    memcpy(c, p, len);
    c[len] = '\0';
    s->v[s->n++] = c;
    return 0;
}

static int stk_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* One directory of a class: its path relative to the root and the sorted
 * names of its image files. */
typedef struct stk_dir_rec {
    char *rel;         /* owned */
    stk_strvec files;  /* owned */
} stk_dir_rec;

typedef struct stk_dir_list {
    stk_dir_rec *v; /* owned */
    size_t n, cap;
} stk_dir_list;

static void stk_dir_list_free(stk_dir_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].rel);
        stk_strvec_free(&l->v[i].files);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int stk_cmp_dir(const void *a, const void *b)
{
    return strcmp(((const stk_dir_rec *)a)->rel, ((const stk_dir_rec *)b)->rel);
}

/* The directories met so far, by (st_dev, st_ino): an open-addressing hash
 * set seeded with the root and every class directory before the walk, so
 * a directory reached a second time — a symlink back to the root or to an
 * ancestor (a cycle), or a second path to a directory already listed — is
 * recognised and left out (and reported) instead of listed again. */
typedef struct stk_seen_dir {
    dev_t dev;
    ino_t ino;
    char *rel; /* owned: the path it was first met by ("." = the root); NULL = free slot */
} stk_seen_dir;

typedef struct stk_walker {
    int root_fd;
    const char *root;     /* DIR as given, for messages (lent) */
    int strict;           /* fail instead of skipping */
    stk_seen_dir *seen;   /* owned: cap slots */
    size_t nseen, cap;
    stk_strvec *skipped;  /* lent: messages for what was left out */
    stk_dir_list *out;    /* lent: the directories of the class being walked */
} stk_walker;

static size_t stk_seen_slot(const stk_walker *w, dev_t dev, ino_t ino)
{
    uint64_t h = ((uint64_t)dev * 0x9E3779B97F4A7C15ull) ^ (uint64_t)ino;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    size_t i = (size_t)h & (w->cap - 1);
    while (w->seen[i].rel && !(w->seen[i].dev == dev && w->seen[i].ino == ino))
        i = (i + 1) & (w->cap - 1);
    return i;
}

/* The path the directory (dev, ino) was first met by, or NULL. */
static const char *stk_seen_find(const stk_walker *w, dev_t dev, ino_t ino)
{
    return w->cap ? w->seen[stk_seen_slot(w, dev, ino)].rel : NULL;
}

static int stk_seen_add(stk_walker *w, dev_t dev, ino_t ino, const char *rel)
{
    if (2 * (w->nseen + 1) > w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        stk_seen_dir *old = w->seen;
        size_t oldcap = w->cap;
        if (cap > SIZE_MAX / sizeof *old)
            return stk_fail(STK_ENOMEM, "too many directories");
        w->seen = calloc(cap, sizeof *old);
        if (!w->seen) {
            w->seen = old;
            return stk_fail(STK_ENOMEM, "out of memory listing %s", rel);
        }
        w->cap = cap;
        for (size_t i = 0; i < oldcap; i++)
            if (old[i].rel)
                w->seen[stk_seen_slot(w, old[i].dev, old[i].ino)] = old[i];
        free(old);
    }
    size_t i = stk_seen_slot(w, dev, ino);
    if (w->seen[i].rel)
        return 0;
    if (!(w->seen[i].rel = stk_strdup(rel)))
        return STK_ENOMEM;
    w->seen[i].dev = dev;
    w->seen[i].ino = ino;
    w->nseen++;
    return 0;
}

static void stk_walker_free(stk_walker *w)
{
    for (size_t i = 0; i < w->cap; i++)
        free(w->seen[i].rel);
    free(w->seen);
    w->seen = NULL;
    w->cap = w->nseen = 0;
}

/* Leave directory `rel` out: record "ROOT/REL: reason (...)" in the
 * skipped list, or, strict, fail with it as STK_EDATA. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int stk_walk_skip(stk_walker *w, const char *rel, const char *why, ...)
{
    char reason[512], msg[PATH_MAX + 640];
    size_t n = strlen(w->root);
    va_list ap;
    va_start(ap, why);
    vsnprintf(reason, sizeof reason, why, ap);
    va_end(ap);
    snprintf(msg, sizeof msg, "imagefolder: %s%s%s: %s", w->root,
             n && w->root[n - 1] == '/' ? "" : "/", rel, reason);
    if (w->strict) /* the caller prefixes "imagefolder: ROOT: " */
        return stk_fail(STK_EDATA, "%s: %s (strict=1)", rel, reason);
    return stk_strvec_push(w->skipped, msg, strlen(msg));
}

/* Is the entry a directory (following symlinks), as os.scandir's
 * is_dir() says? A dangling or looping link is not; -1 (errno set) when
 * the entry cannot be examined at all, which must not pass for "a file". */
static int stk_entry_is_dir(DIR *d, const struct dirent *e)
{
    struct stat st;
    if (e->d_type == DT_DIR)
        return 1;
    if (e->d_type != DT_LNK && e->d_type != DT_UNKNOWN)
        return 0;
    if (fstatat(dirfd(d), e->d_name, &st, 0) != 0)
        return errno == ENOENT || errno == ENOTDIR || errno == ELOOP ? 0 : -1;
    return S_ISDIR(st.st_mode);
}

/* os.walk(rel, followlinks=True), collecting one stk_dir_rec per
 * directory into w->out, subdirectories visited in name order (so which of
 * two paths to one directory is listed does not depend on readdir order).
 * `top` is the class directory itself. A directory that cannot be opened
 * for lack of permission, or that vanished (os.walk's default onerror), or
 * that was met before (stk_seen_dir), is left out with its whole subtree
 * and reported through stk_walk_skip; any other failure to open, stat or
 * read a directory (an I/O error, out of descriptors or memory) is an
 * error, since skipping it would lose its files in silence. */
static int stk_walk(stk_walker *w, const char *rel, int top)
{
    stk_strvec subdirs = {0};
    stk_dir_rec rec = {0};
    struct dirent *e;
    struct stat st;
    const char *first;
    char ebuf[128];
    DIR *d = NULL;
    int fd, rc = 0;

    fd = openat(w->root_fd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == EACCES || errno == EPERM || errno == ENOENT || errno == ENOTDIR ||
            errno == ELOOP)
            return stk_walk_skip(w, rel, "cannot open directory: %s; its images are left out",
                                 strerror_r(errno, ebuf, sizeof ebuf));
        return stk_fail(STK_EIO, "%s: cannot open directory: %s", rel,
                        strerror_r(errno, ebuf, sizeof ebuf));
    }
    if (fstat(fd, &st) != 0) {
        rc = stk_fail(STK_EIO, "%s: cannot stat directory: %s", rel,
                      strerror_r(errno, ebuf, sizeof ebuf));
        close(fd);
        return rc;
    }
    first = stk_seen_find(w, st.st_dev, st.st_ino);
    if (first && !(top && strcmp(first, rel) == 0)) {
        close(fd);
        if (strcmp(first, ".") == 0)
            return stk_walk_skip(w, rel, "is the dataset root again (a symlink loop); not "
                                         "followed");
        return stk_walk_skip(w, rel, "is the same directory as %s (a symlink loop or a second "
                                     "path to it); its images are listed once, under %s",
                             first, first);
    }
    if (!first && (rc = stk_seen_add(w, st.st_dev, st.st_ino, rel)) != 0) {
        close(fd);
        return rc;
    }
    d = fdopendir(fd);
    if (!d) {
        close(fd);
        return stk_fail(STK_EIO, "%s: cannot read directory: %s", rel,
                        strerror_r(errno, ebuf, sizeof ebuf));
    }
    rec.rel = stk_strdup(rel);
    if (!rec.rel) {
        rc = STK_ENOMEM;
        goto out;
    }
    for (;;) {
        const char *name;
        errno = 0;
        if (!(e = readdir(d))) {
            if (errno) /* a read error must not pass for the end of the listing */
                rc = stk_fail(STK_EIO, "%s: error reading directory: %s", rel,
                              strerror_r(errno, ebuf, sizeof ebuf));
            break;
        }
        name = e->d_name;
        if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')))
            continue;
        int is_dir = stk_entry_is_dir(d, e);
        if (is_dir < 0)
            rc = stk_fail(STK_EIO, "%s/%s: cannot stat: %s", rel, name,
                          strerror_r(errno, ebuf, sizeof ebuf));
        else if (is_dir)
            rc = stk_strvec_push(&subdirs, name, strlen(name));
        else if (stk_has_img_ext(name))
            rc = stk_strvec_push(&rec.files, name, strlen(name));
        if (rc)
            goto out;
    }
    if (rc)
        goto out;
    closedir(d);
    d = NULL;

    if (rec.files.n > 1)
        qsort(rec.files.v, rec.files.n, sizeof *rec.files.v, stk_cmp_str);
    if (subdirs.n > 1)
        qsort(subdirs.v, subdirs.n, sizeof *subdirs.v, stk_cmp_str);
    if (w->out->n == w->out->cap) {
        size_t cap = w->out->cap ? w->out->cap * 2 : 16;
        stk_dir_rec *v = realloc(w->out->v, cap * sizeof *v);
        if (!v) {
            rc = stk_fail(STK_ENOMEM, "out of memory listing %s", rel);
            goto out;
        }
        w->out->v = v;
        w->out->cap = cap;
    }
    w->out->v[w->out->n++] = rec;
    memset(&rec, 0, sizeof rec);

    for (size_t i = 0; i < subdirs.n; i++) {
        size_t rl = strlen(rel), nl = strlen(subdirs.v[i]);
        char *child;
        if (rl + 1 + nl >= PATH_MAX) {
            /* os.walk fails on it too (ENAMETOOLONG) and moves on */
            rc = stk_walk_skip(w, rel, "subdirectory %s: path longer than PATH_MAX; its "
                                       "images are left out",
                               subdirs.v[i]);
            if (rc)
                goto out;
            continue;
        }
        child = malloc(rl + 1 + nl + 1);
        if (!child) {
            rc = stk_fail(STK_ENOMEM, "out of memory listing %s", rel);
            goto out;
        }
        memcpy(child, rel, rl);
        child[rl] = '/';
        memcpy(child + rl + 1, subdirs.v[i], nl + 1);
        rc = stk_walk(w, child, 0);
        free(child);
        if (rc)
            goto out;
    }

out:
    if (d)
        closedir(d);
    free(rec.rel);
    stk_strvec_free(&rec.files);
    stk_strvec_free(&subdirs);
    return rc;
}

/* The class directories of the root: entries that are directories. */
static int stk_list_classes(stk_files_impl *f, stk_strvec *classes)
{
    char ebuf[128];
    struct dirent *e;
    int fd = openat(f->root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    int rc = 0;

    if (!d) {
        if (fd >= 0)
            close(fd);
        return stk_fail(STK_EIO, "%s: cannot read directory: %s", f->root,
                        strerror_r(errno, ebuf, sizeof ebuf));
    }
    for (;;) {
        const char *name;
        errno = 0;
        if (!(e = readdir(d))) {
            if (errno)
                rc = stk_fail(STK_EIO, "%s: error reading directory: %s", f->root,
                              strerror_r(errno, ebuf, sizeof ebuf));
            break;
        }
        name = e->d_name;
        if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')))
            continue;
        int is_dir = stk_entry_is_dir(d, e);
        if (is_dir < 0)
            rc = stk_fail(STK_EIO, "%s/%s: cannot stat: %s", f->root, name,
                          strerror_r(errno, ebuf, sizeof ebuf));
        else if (is_dir)
            rc = stk_strvec_push(classes, name, strlen(name));
        if (rc)
            break;
    }
    closedir(d);
    if (!rc && classes->n > 1)
        qsort(classes->v, classes->n, sizeof *classes->v, stk_cmp_str);
    return rc;
}

static int stk_imagefolder_open(const char *uri, const char *dir, const char *query,
                                const stk_dataset_options *opts, stk_dataset **out)
{
    static const char *const strict_values[] = {"0", "1", NULL};
    stk_query_key keys[] = {{"strict", strict_values, -1}};
    stk_dataset_options o = stk_dataset_options_resolve(opts);
    stk_strvec classes = {0}, skipped = {0};
    stk_dir_list dirs = {0};
    stk_walker w = {0};
    stk_dataset *ds = NULL;
    stk_files_impl *f;
    struct stat st;
    char empty[512];
    size_t nempty = 0, used = 0, why = SIZE_MAX; /* why: a skip that emptied a class */
    int rc;

    *out = NULL;
    rc = stk_query_parse(uri, "imagefolder", query, keys, 1);
    if (rc)
        return rc;
    if (!*dir)
        return stk_fail(STK_EINVAL, "imagefolder: empty directory in URI '%s'", uri);
    if (!stk_path_is_dir(dir))
        return stk_fail(stk_path_exists(dir) ? STK_EINVAL : STK_ENOENT,
                        "imagefolder: %s: %s (expected a directory DIR/CLASS/IMAGE)", dir,
                        stk_path_exists(dir) ? "not a directory" : "no such directory");

    ds = stk_dataset_alloc(&stk_imagefolder_vt, uri);
    if (!ds)
        return STK_ENOMEM;
    if (!(f = stk_files_new(ds, &o))) {
        rc = STK_ENOMEM;
        goto fail;
    }
    if ((rc = stk_open_root(f, dir)) || (rc = stk_list_classes(f, &classes)))
        goto fail;
    if (classes.n == 0) {
        rc = stk_fail(STK_EFORMAT,
                      "imagefolder: %s: no class directories in this directory (expected "
                      "DIR/CLASS/IMAGE, as torchvision's ImageFolder)",
                      dir);
        goto fail;
    }
    if (classes.n > UINT32_MAX) {
        rc = stk_fail(STK_ELIMIT, "imagefolder: %s: too many classes", dir);
        goto fail;
    }

    /* Seed the set of directories met with the root and the classes, so
     * that a link from inside one class to the root or to another class
     * is a repeat, whichever class is walked first. */
    w.root_fd = f->root_fd;
    w.root = dir;
    w.strict = keys[0].value == 1;
    w.skipped = &skipped;
    w.out = &dirs;
    if (fstat(f->root_fd, &st) != 0) {
        char ebuf[128];
        rc = stk_fail(STK_EIO, "cannot stat the directory: %s",
                      strerror_r(errno, ebuf, sizeof ebuf));
        goto walk_fail;
    }
    if ((rc = stk_seen_add(&w, st.st_dev, st.st_ino, ".")))
        goto walk_fail;
    for (size_t c = 0; c < classes.n; c++)
        if (fstatat(f->root_fd, classes.v[c], &st, 0) == 0 &&
            (rc = stk_seen_add(&w, st.st_dev, st.st_ino, classes.v[c])))
            goto walk_fail;

    empty[0] = '\0';
    for (size_t c = 0; c < classes.n; c++) {
        uint64_t before = ds->count;
        size_t skipped_before = skipped.n;
        rc = stk_walk(&w, classes.v[c], 1);
        if (rc)
            goto walk_fail;
        if (dirs.n > 1)
            qsort(dirs.v, dirs.n, sizeof *dirs.v, stk_cmp_dir);
        for (size_t i = 0; i < dirs.n; i++) {
            size_t rl = strlen(dirs.v[i].rel);
            for (size_t k = 0; k < dirs.v[i].files.n; k++) {
                rc = stk_files_add(ds, f, dirs.v[i].rel, rl, dirs.v[i].files.v[k], (int64_t)c,
                                   o.max_samples, dir);
                if (rc)
                    goto fail;
            }
        }
        stk_dir_list_free(&dirs);
        if (ds->count == before) {
            int n = snprintf(empty + used, sizeof empty - used, "%s%s", nempty ? ", " : "",
                             classes.v[c]);
            if (n > 0 && (size_t)n < sizeof empty - used)
                used += (size_t)n;
            nempty++;
            if (why == SIZE_MAX && skipped.n > skipped_before)
                why = skipped_before;
        }
    }
    if (nempty) {
        rc = stk_fail(STK_EFORMAT,
                      "imagefolder: %s: found no valid file for the class%s %s%s (supported "
                      "extensions: " STK_IMG_EXT_LIST ")%s%s",
                      dir, nempty > 1 ? "es" : "", empty, used + 1 >= sizeof empty ? "..." : "",
                      why != SIZE_MAX ? "; " : "", why != SIZE_MAX ? skipped.v[why] : "");
        goto fail;
    }

    ds->class_names = calloc(classes.n, sizeof *ds->class_names);
    if (!ds->class_names) {
        rc = stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
        goto fail;
    }
    /* The names move from the vector to the dataset, and so do the
     * messages for what was left out. */
    for (size_t c = 0; c < classes.n; c++) {
        ds->class_names[c] = classes.v[c];
        classes.v[c] = NULL;
    }
    ds->num_classes = (uint32_t)classes.n;
    ds->skipped = skipped.v;
    ds->nskipped = skipped.n;
    memset(&skipped, 0, sizeof skipped);
    stk_files_trim(ds, f);
    stk_strvec_free(&classes);
    stk_walker_free(&w);
    *out = ds;
    return 0;

walk_fail:
    stk_fail_prefix(rc, "imagefolder: %s", dir);
fail:
    stk_walker_free(&w);
    stk_dir_list_free(&dirs);
    stk_strvec_free(&classes);
    stk_strvec_free(&skipped);
    stk_dataset_close(ds);
    return rc;
}

/* Does some subdirectory of `dir` directly hold a file named like an
 * image? (The detection rule for a bare directory path; see dataset.c.) */
int stk_imagefolder_detect(const char *dir)
{
    struct dirent *e;
    DIR *d = opendir(dir);
    int found = 0;

    if (!d)
        return 0;
    while (!found && (e = readdir(d)) != NULL) {
        const char *name = e->d_name;
        struct dirent *ce;
        DIR *cd;
        int fd;
        if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')))
            continue;
        if (stk_entry_is_dir(d, e) <= 0)
            continue;
        fd = openat(dirfd(d), name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        cd = fd >= 0 ? fdopendir(fd) : NULL;
        if (!cd) {
            if (fd >= 0)
                close(fd);
            continue;
        }
        while (!found && (ce = readdir(cd)) != NULL)
            found = ce->d_type != DT_DIR && stk_has_img_ext(ce->d_name);
        closedir(cd);
    }
    closedir(d);
    return found;
}

/* ------------------------------------------------------------------------ */
/* List files                                                               */
/* ------------------------------------------------------------------------ */

/* Parse "PATH<TAB>LABEL" (line without its '\n'/'\r'). 0, or STK_EFORMAT
 * naming path:lineno. */
static int stk_list_line(stk_dataset *ds, stk_files_impl *f, const char *line, size_t len,
                         const char *path, uint64_t lineno, uint64_t max_samples)
{
    const char *tab = memchr(line, '\t', len);
    const char *lab;
    size_t llen;
    uint64_t v = 0;

    if (memchr(line, '\0', len))
        return stk_fail(STK_EFORMAT, "%s:%llu: NUL byte in the line", path,
                        (unsigned long long)lineno);
    if (!tab)
        return stk_fail(STK_EFORMAT, "%s:%llu: no tab (expected PATH<TAB>LABEL)", path,
                        (unsigned long long)lineno);
    if (tab == line)
        return stk_fail(STK_EFORMAT, "%s:%llu: empty path (expected PATH<TAB>LABEL)", path,
                        (unsigned long long)lineno);
    lab = tab + 1;
    llen = len - (size_t)(lab - line);
    if (memchr(lab, '\t', llen))
        return stk_fail(STK_EFORMAT, "%s:%llu: more than one tab (expected PATH<TAB>LABEL)",
                        path, (unsigned long long)lineno);
    if (llen == 0)
        return stk_fail(STK_EFORMAT, "%s:%llu: missing label after the tab", path,
                        (unsigned long long)lineno);
    for (size_t i = 0; i < llen; i++) {
        if (lab[i] < '0' || lab[i] > '9')
            return stk_fail(STK_EFORMAT,
                            "%s:%llu: label '%.*s' is not a non-negative decimal integer", path,
                            (unsigned long long)lineno, (int)(llen > 40 ? 40 : llen), lab);
        if (v > ((uint64_t)INT64_MAX - (uint64_t)(lab[i] - '0')) / 10)
            return stk_fail(STK_EFORMAT, "%s:%llu: label '%.*s' is too large", path,
                            (unsigned long long)lineno, (int)(llen > 40 ? 40 : llen), lab);
        v = v * 10 + (uint64_t)(lab[i] - '0');
    }
    return stk_files_add(ds, f, line, (size_t)(tab - line), NULL, (int64_t)v, max_samples, path);
}

static int stk_filelist_open(const char *uri, const char *path, const char *query,
                             const stk_dataset_options *opts, stk_dataset **out)
{
    stk_dataset_options o = stk_dataset_options_resolve(opts);
    stk_mapped_file m = {0};
    stk_dataset *ds = NULL;
    stk_files_impl *f;
    const char *p, *end, *slash;
    char *dir = NULL;
    uint64_t lineno = 0;
    int64_t maxl = -1;
    int rc;

    *out = NULL;
    rc = stk_query_parse(uri, "list", query, NULL, 0);
    if (rc)
        return rc;
    if (!*path)
        return stk_fail(STK_EINVAL, "list: empty file name in URI '%s'", uri);
    rc = stk_map_file(path, o.max_bytes, &m);
    if (rc)
        return rc;

    ds = stk_dataset_alloc(&stk_list_vt, uri);
    if (!ds) {
        rc = STK_ENOMEM;
        goto fail;
    }
    if (!(f = stk_files_new(ds, &o))) {
        rc = STK_ENOMEM;
        goto fail;
    }
    /* Relative paths start from the list file's directory. */
    slash = strrchr(path, '/');
    if (!slash) {
        dir = stk_strdup(".");
    } else {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        dir = malloc(n + 1);
        if (dir) {
            memcpy(dir, path, n);
            dir[n] = '\0';
        } else {
            stk_fail(STK_ENOMEM, "out of memory opening %s", path);
        }
    }
    if (!dir) {
        rc = STK_ENOMEM;
        goto fail;
    }
    if ((rc = stk_open_root(f, dir)))
        goto fail;

    p = (const char *)m.data;
    end = p + m.size;
    while (p && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        size_t len;
        int blank = 1;
        lineno++;
        if (le > p && le[-1] == '\r')
            le--;
        len = (size_t)(le - p);
        for (size_t i = 0; i < len && blank; i++)
            blank = p[i] == ' ' || p[i] == '\t';
        if (!blank && p[0] != '#') {
            rc = stk_list_line(ds, f, p, len, path, lineno, o.max_samples);
            if (rc)
                goto fail;
            if (f->labels[ds->count - 1] > maxl)
                maxl = f->labels[ds->count - 1];
        }
        p = nl ? nl + 1 : end;
    }
    if (ds->count == 0) {
        rc = stk_fail(STK_EFORMAT, "%s: no samples (the list has only blank or comment lines)",
                      path);
        goto fail;
    }
    ds->num_classes = maxl < (int64_t)UINT32_MAX ? (uint32_t)(maxl + 1) : 0;
    stk_files_trim(ds, f);
    stk_unmap_file(&m);
    free(dir);
    *out = ds;
    return 0;

fail:
    stk_unmap_file(&m);
    free(dir);
    stk_dataset_close(ds);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The reader table's rows                                                  */
/* ------------------------------------------------------------------------ */

static int stk_detect_imagefolder(const char *path)
{
    return stk_path_is_dir(path) && stk_imagefolder_detect(path);
}

const stk_reader stk_reader_imagefolder = {
    "imagefolder", "imagefolder:DIR",
    "torchvision's ImageFolder layout DIR/CLASS/.../IMAGE (encoded images)",
    stk_imagefolder_open, NULL, stk_detect_imagefolder,
    "subdirectories holding images (ImageFolder: DIR/CLASS/IMAGE)", NULL};

const stk_reader stk_reader_list = {
    "list", "list:FILE", "lines \"PATH<TAB>LABEL\", paths relative to FILE's directory",
    stk_filelist_open, NULL, NULL, NULL, NULL};
