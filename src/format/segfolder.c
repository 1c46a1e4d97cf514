/*
 * segfolder.c — segmentation sets as plain files: each image beside a mask
 * file of the same stem.
 *
 * URI: "segfolder:DIR[?images=SUBDIR][&masks=SUBDIR][&mask_suffix=TEXT]
 * [&mask_ext=EXT][&missing=error|skip]". Two layouts:
 *
 *   DIR/images/STEM.jpg  with  DIR/masks/STEM.png     (the default:
 *       images=images, masks=masks, mask_suffix empty, mask_ext=png;
 *       ADE20K, Oxford pets, most Kaggle sets; also VOC as
 *       images=JPEGImages&masks=SegmentationClass&missing=skip)
 *   DIR/STEM.jpg  with  DIR/STEM_mask.png             (one directory:
 *       images=.&masks=.&mask_suffix=_mask, chosen by itself when DIR has
 *       no images/ and masks/ subdirectories but holds *_mask.png files;
 *       the LGG MRI and similar Kaggle sets)
 *
 * and any mix of the keys (Carvana: images=train&masks=train_masks&
 * mask_suffix=_mask&mask_ext=gif). SUBDIR is a path relative to DIR ("."
 * for DIR itself). An image is a regular file of the images directory
 * (not recursive, names starting with '.' left out) whose name ends, in any
 * case, in one of torchvision's IMG_EXTENSIONS (.jpg .jpeg .png .ppm .bmp
 * .pgm .tif .tiff .webp); its STEM is the name less that extension. Its
 * mask is the file STEM + mask_suffix + "." + mask_ext of the masks
 * directory (the extension matched in any case). When both are one
 * directory, the files that are masks by that rule are not images.
 *
 * Samples are the pairs, sorted by STEM (strcmp). Every file is accounted
 * for at open: an image without its mask and a mask without its image are
 * each an error (STK_EFORMAT naming the file and what is missing), or with
 * missing=skip are left out and recorded in ds->skipped
 * (stk_dataset_skipped); two images of one stem (a.jpg and a.png) are
 * always an error. Nothing is read at open but the directory listings.
 *
 * Fields: "image" (the encoded image file, read whole), "label" (int64 -1:
 * a segmentation sample has no single class) and "mask" (the encoded mask
 * file as stored: PNG, or what mask_ext names). Reading the mask also
 * reads the image's header: a mask whose size is not its image's is
 * STK_EDATA naming both files, as are a file that vanished or cannot be
 * read, an empty one or one over max_bytes (the loader's on_error policy
 * applies to them).
 *
 * Note for decoding: a mask PNG holds class ids as grey levels or palette
 * indices; a loader decodes a mask field to those ids, while the image
 * decoding (stk_dataset_read, verify --decode) gives RGB, a palette mask's
 * colours.
 *
 * Memory: the relative paths of both files of every sample in one arena
 * (about 2 x 30 bytes per sample) and two offsets. Thread safety: immutable
 * after open; the reads run on any number of threads.
 */
#include "codec/codec.h"
#include "core/error.h"
#include "core/util.h"
#include "format/dataset.h"
#include "format/reader_util.h"
#include "io/source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* An image header is read from this many bytes at the file's start first
 * (the whole file when that is not enough: a JPEG's EXIF block can be
 * long). */
#define SEG_HEAD 65536u

enum { SEG_MISSING_ERROR, SEG_MISSING_SKIP };
enum { SF_IMAGE, SF_LABEL, SF_MASK, SF_FIELDS };

/* torchvision.datasets.folder.IMG_EXTENSIONS */
static const char *const seg_img_exts[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                           ".pgm", ".tif",  ".tiff", ".webp"};

typedef struct seg_impl {
    int root_fd;       /* owned: DIR; files are opened relative to it */
    char *root;        /* owned: DIR as given, for names */
    char *arena;       /* owned: relative paths, NUL-terminated, back to back */
    uint64_t *image;   /* owned: ds->count offsets into arena */
    uint64_t *mask;    /* owned: ds->count offsets into arena */
    char *images_dir, *masks_dir; /* owned: metadata, DIR/SUBDIR */
    uint64_t max_bytes, max_pixels;
} seg_impl;

static const int64_t seg_minus_one = -1;

/* ------------------------------------------------------------------------ */
/* Reading                                                                  */
/* ------------------------------------------------------------------------ */

/* "DIR/REL" into buf (cut short to fit: names in messages). */
static void seg_path(const seg_impl *m, const char *rel, char *buf, size_t size)
{
    size_t n = strlen(m->root), used = 0;
    const char *parts[3] = {m->root, n && m->root[n - 1] == '/' ? "" : "/", rel};
    for (int i = 0; i < 3 && size; i++)
        for (const char *p = parts[i]; *p && used + 1 < size; p++)
            buf[used++] = *p;
    if (size)
        buf[used] = '\0';
}

static void seg_sample_name(const stk_dataset *ds, uint64_t index, char *buf, size_t size)
{
    const seg_impl *m = ds->impl;
    seg_path(m, m->arena + m->image[index], buf, size);
}

/* "DIR/REL" before the message just set; returns code. */
static int seg_fail(const seg_impl *m, const char *rel, int code)
{
    char name[2048];
    seg_path(m, rel, name, sizeof name);
    return stk_fail_prefix(code, "%s", name);
}

/* Open `rel` (its size checked); the source is closed by the caller. */
static int seg_open(const seg_impl *m, const char *rel, stk_file_source *fs)
{
    int rc = stk_file_source_open_at(fs, m->root_fd, rel, NULL);
    if (rc < 0)
        return seg_fail(m, rel, rc == STK_ENOMEM ? rc : STK_EDATA);
    if (fs->base.size == 0)
        return seg_fail(m, rel, stk_fail(STK_EDATA, "empty file"));
    if (fs->base.size > m->max_bytes || fs->base.size > SIZE_MAX / 2)
        return seg_fail(m, rel,
                        stk_fail(STK_EDATA, "%llu bytes exceeds the max_bytes limit of %llu",
                                 (unsigned long long)fs->base.size,
                                 (unsigned long long)m->max_bytes));
    return 0;
}

/* The first n bytes of the open file `rel` into buf. */
static int seg_read(const seg_impl *m, const char *rel, const stk_source *src, uint8_t *buf,
                    size_t n)
{
    size_t done = 0;
    while (done < n) {
        int64_t got = stk_source_read_part(src, buf + done, n - done, done);
        if (got <= 0)
            return seg_fail(m, rel,
                            got < 0 ? STK_EDATA
                                    : stk_fail(STK_EDATA,
                                               "file shrank to %zu bytes while being read",
                                               done));
        done += (size_t)got;
    }
    return 0;
}

/* File `rel`, whole, into scratch. */
static int seg_read_whole(const seg_impl *m, const char *rel, stk_scratch *scratch,
                          size_t *size)
{
    stk_file_source fs;
    int rc = seg_open(m, rel, &fs);
    if (rc == 0 && (rc = stk_scratch_reserve(scratch, (size_t)fs.base.size)) == 0)
        rc = seg_read(m, rel, &fs.base, scratch->data, (size_t)fs.base.size);
    if (rc == 0)
        *size = (size_t)fs.base.size;
    stk_source_close(&fs.base);
    return rc;
}

static int seg_read_sample(const stk_dataset *ds, uint64_t index, stk_sample *out,
                           stk_scratch *scratch)
{
    const seg_impl *m = ds->impl;
    size_t size = 0;
    int rc = seg_read_whole(m, m->arena + m->image[index], scratch, &size);
    if (rc < 0)
        return rc;
    memset(&out->image, 0, sizeof out->image);
    out->encoded = scratch->data;
    out->encoded_size = size;
    out->label = -1;
    return 0;
}

static int seg_label(const stk_dataset *ds, uint64_t index, int64_t *label)
{
    (void)ds;
    (void)index;
    *label = -1;
    return 0;
}

/* The mask of sample `index`, whole, into scratch, its size checked against
 * its image's header (read after it in the same scratch). */
static int seg_read_mask(const stk_dataset *ds, uint64_t index, stk_scratch *scratch,
                         stk_field_view *out)
{
    const seg_impl *m = ds->impl;
    const char *mrel = m->arena + m->mask[index], *irel = m->arena + m->image[index];
    stk_file_source mf, imf;
    size_t msize = 0, head = 0;
    stk_codec_limits lim = {.max_pixels = m->max_pixels};
    stk_image_info mi, ii;
    bool iopen = false; /* imf to be closed */
    int rc = seg_open(m, mrel, &mf);
    if (rc == 0) {
        rc = seg_open(m, irel, &imf);
        iopen = true;
    }
    if (rc == 0) {
        msize = (size_t)mf.base.size;
        head = imf.base.size < SEG_HEAD ? (size_t)imf.base.size : SEG_HEAD;
        if ((rc = stk_scratch_reserve(scratch, msize + head)) == 0 &&
            (rc = seg_read(m, mrel, &mf.base, scratch->data, msize)) == 0)
            rc = seg_read(m, irel, &imf.base, scratch->data + msize, head);
    }
    if (rc == 0 && (rc = stk_image_probe(scratch->data, msize, &lim, &mi)) < 0)
        rc = seg_fail(m, mrel, rc == STK_ENOMEM ? rc : STK_EDATA);
    if (rc == 0 && stk_image_probe(scratch->data + msize, head, &lim, &ii) < 0) {
        /* the header may lie past the first bytes: read the whole image */
        if (head < imf.base.size) {
            head = (size_t)imf.base.size;
            stk_scratch whole = {0};
            if ((rc = stk_scratch_reserve(&whole, head)) == 0 &&
                (rc = seg_read(m, irel, &imf.base, whole.data, head)) == 0 &&
                (rc = stk_image_probe(whole.data, head, &lim, &ii)) < 0)
                rc = seg_fail(m, irel, rc == STK_ENOMEM ? rc : STK_EDATA);
            stk_scratch_free(&whole);
        } else {
            rc = seg_fail(m, irel, STK_EDATA);
        }
    }
    stk_source_close(&mf.base);
    if (iopen)
        stk_source_close(&imf.base);
    if (rc < 0)
        return rc;
    if (mi.width != ii.width || mi.height != ii.height) {
        char a[2048], b[2048];
        seg_path(m, mrel, a, sizeof a);
        seg_path(m, irel, b, sizeof b);
        return stk_fail(STK_EDATA, "%s: the mask is %ux%u (WxH) but its image %s is %ux%u", a,
                        mi.width, mi.height, b, ii.width, ii.height);
    }
    out->data = scratch->data;
    out->size = msize;
    return 0;
}

static int seg_field_view(const stk_dataset *ds, uint64_t index, uint32_t field,
                          stk_field_view *out, stk_scratch *scratch)
{
    const seg_impl *m = ds->impl;
    memset(out, 0, sizeof *out);
    if (field >= SF_FIELDS || index >= ds->count)
        return stk_fail(STK_EINVAL, "%s: no field %u or sample %llu (%u fields, %llu samples)",
                        ds->uri, field, (unsigned long long)index, SF_FIELDS,
                        (unsigned long long)ds->count);
    if (field == SF_LABEL) {
        out->data = &seg_minus_one;
        out->size = sizeof seg_minus_one;
        out->shape[0] = 1;
        return 0;
    }
    if (field == SF_MASK)
        return seg_read_mask(ds, index, scratch, out);
    size_t size = 0;
    int rc = seg_read_whole(m, m->arena + m->image[index], scratch, &size);
    if (rc == 0) {
        out->data = scratch->data;
        out->size = size;
    }
    return rc;
}

static uint32_t seg_field_count(const stk_dataset *ds)
{
    (void)ds;
    return SF_FIELDS;
}

static int seg_field_info(const stk_dataset *ds, uint32_t i, stk_field_info *info)
{
    static const char *const names[] = {"image", "label", "mask"};
    if (i >= SF_FIELDS)
        return stk_fail(STK_EINVAL, "%s: no field %u (%u fields)", ds->uri, i, SF_FIELDS);
    memset(info, 0, sizeof *info);
    info->name = names[i];
    info->type = i == SF_LABEL ? STK_FIELD_INT64 : STK_FIELD_IMAGE;
    return 0;
}

static const char *seg_metadata(const stk_dataset *ds, const char *key)
{
    const seg_impl *m = ds->impl;
    if (!strcmp(key, "images_dir"))
        return m->images_dir;
    if (!strcmp(key, "masks_dir"))
        return m->masks_dir;
    return NULL;
}

static void seg_close(stk_dataset *ds)
{
    seg_impl *m = ds->impl;
    if (m->root_fd >= 0)
        close(m->root_fd);
    free(m->root);
    free(m->arena);
    free(m->image);
    free(m->mask);
    free(m->images_dir);
    free(m->masks_dir);
    free(m);
    ds->impl = NULL;
}

static const stk_dataset_vtable seg_vt = {
    .format = "segfolder",
    .read = seg_read_sample,
    .close = seg_close,
    .field_count = seg_field_count,
    .field_info = seg_field_info,
    .read_field = stk_read_field_by_view,
    .label = seg_label,
    .field_view = seg_field_view,
    .metadata = seg_metadata,
    .sample_name = seg_sample_name,
};

/* ------------------------------------------------------------------------ */
/* Open: listing and pairing                                                */
/* ------------------------------------------------------------------------ */

/* One listed file: its name, and the length of its stem. */
typedef struct seg_entry {
    char *name; /* owned */
    size_t stem;
} seg_entry;

typedef struct seg_list {
    seg_entry *e;
    size_t n, cap;
} seg_list;

static void seg_list_free(seg_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->e[i].name);
    free(l->e);
    memset(l, 0, sizeof *l);
}

/* The length of the image extension `name` ends in, or 0. */
static size_t seg_img_ext(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof seg_img_exts / sizeof seg_img_exts[0]; i++) {
        size_t k = strlen(seg_img_exts[i]);
        if (n > k && strcasecmp(name + n - k, seg_img_exts[i]) == 0)
            return k;
    }
    return 0;
}

/* The length of "SUFFIX.EXT" when `name` ends in it (the suffix exact, the
 * extension in any case) with a stem before it, or 0. */
static size_t seg_mask_tail(const char *name, const char *suffix, const char *ext)
{
    size_t n = strlen(name), s = strlen(suffix), e = strlen(ext);
    size_t t = s + 1 + e;
    if (n <= t)
        return 0;
    const char *p = name + n - t;
    if (memcmp(p, suffix, s) != 0 || p[s] != '.' || strcasecmp(p + s + 1, ext) != 0)
        return 0;
    return t;
}

static int seg_cmp_entry(const void *a, const void *b)
{
    const seg_entry *x = a, *y = b;
    size_t n = x->stem < y->stem ? x->stem : y->stem;
    int c = memcmp(x->name, y->name, n);
    if (c)
        return c;
    if (x->stem != y->stem)
        return x->stem < y->stem ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The images (want_masks false) or the masks of directory `sub` of the
 * root, sorted by stem. */
static int seg_list_dir(const seg_impl *m, const char *sub, bool want_masks, const char *suffix,
                        const char *ext, bool same_dir, seg_list *out)
{
    char ebuf[128], path[4096];
    int fd = openat(m->root_fd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    seg_path(m, sub, path, sizeof path);
    if (fd < 0) {
        int e = errno;
        return stk_fail(e == ENOENT ? STK_ENOENT : e == ENOTDIR ? STK_EINVAL : STK_EIO,
                        "segfolder: %s directory %s: %s", want_masks ? "masks" : "images", path,
                        strerror_r(e, ebuf, sizeof ebuf));
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return stk_fail(STK_EIO, "segfolder: %s: %s", path, strerror_r(e, ebuf, sizeof ebuf));
    }
    int rc = 0;
    struct dirent *de;
    while ((errno = 0, de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        if (name[0] == '.')
            continue;
        size_t tail = seg_mask_tail(name, suffix, ext);
        if (!want_masks) {
            if (same_dir && tail)
                continue; /* a mask */
            tail = seg_img_ext(name);
        }
        if (!tail)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), name, &st, 0) != 0 || !S_ISREG(st.st_mode))
            continue; /* a directory, or a broken link: not a sample file */
        if (out->n == out->cap) {
            size_t cap = out->cap ? out->cap * 2 : 256;
            seg_entry *g = realloc(out->e, cap * sizeof *g);
            if (!g) {
                rc = stk_fail(STK_ENOMEM, "segfolder: out of memory listing %s", path);
                break;
            }
            out->e = g;
            out->cap = cap;
        }
        if (!(out->e[out->n].name = stk_strdup(name))) {
            rc = STK_ENOMEM;
            break;
        }
        out->e[out->n++].stem = strlen(name) - tail;
    }
    if (rc == 0 && errno != 0)
        rc = stk_fail(STK_EIO, "segfolder: cannot read directory %s: %s", path,
                      strerror_r(errno, ebuf, sizeof ebuf));
    closedir(d);
    if (rc == 0 && out->n)
        qsort(out->e, out->n, sizeof *out->e, seg_cmp_entry);
    return rc;
}

/* Append "SUB/NAME" to the arena; its offset in *off. */
static int seg_arena_add(char **arena, size_t *len, size_t *cap, const char *sub,
                         const char *name, uint64_t *off)
{
    bool dot = !strcmp(sub, ".");
    size_t sl = dot ? 0 : strlen(sub), nl = strlen(name);
    size_t need = sl + (dot ? 0 : 1) + nl + 1;
    if (*len + need > *cap) {
        size_t c = *cap ? *cap : 65536;
        while (c < *len + need)
            c *= 2;
        char *g = realloc(*arena, c);
        if (!g)
            return stk_fail(STK_ENOMEM, "segfolder: out of memory for file names");
        *arena = g;
        *cap = c;
    }
    *off = *len;
    if (!dot) {
        memcpy(*arena + *len, sub, sl);
        (*arena)[*len + sl] = '/';
    }
    memcpy(*arena + *len + sl + (dot ? 0 : 1), name, nl + 1);
    *len += need;
    return 0;
}

static int seg_skip(stk_dataset *ds, const char *msg)
{
    char **s = realloc(ds->skipped, (size_t)(ds->nskipped + 1) * sizeof *s);
    if (!s)
        return stk_fail(STK_ENOMEM, "out of memory");
    ds->skipped = s;
    if (!(s[ds->nskipped] = stk_strdup(msg)))
        return STK_ENOMEM;
    ds->nskipped++;
    return 0;
}

/* An unpaired file: an error, or with missing=skip a skipped entry. */
static int seg_unpaired(stk_dataset *ds, int missing, const char *fmt, const char *a,
                        const char *b)
{
    char msg[8192];
    snprintf(msg, sizeof msg, fmt, a, b);
    if (missing == SEG_MISSING_SKIP)
        return seg_skip(ds, msg);
    return stk_fail(STK_EFORMAT, "segfolder: %s (missing=skip leaves such files out)", msg);
}

/* Pair the sorted lists into the samples. */
static int seg_pair(stk_dataset *ds, seg_impl *m, const seg_list *im, const seg_list *mk,
                    const char *isub, const char *msub, const char *suffix, const char *ext,
                    int missing, uint64_t max_samples)
{
    size_t i = 0, j = 0, len = 0, cap = 0, n = 0;
    char a[4096], b[4096];
    int rc;
    for (size_t k = 1; k < im->n; k++)
        if (im->e[k].stem == im->e[k - 1].stem &&
            !memcmp(im->e[k].name, im->e[k - 1].name, im->e[k].stem)) {
            snprintf(a, sizeof a, "%s/%s", isub, im->e[k - 1].name);
            seg_path(m, a, b, sizeof b);
            return stk_fail(STK_EFORMAT,
                            "segfolder: %s and %s share the stem '%.*s': which one goes with "
                            "its mask?",
                            b, im->e[k].name, (int)im->e[k].stem, im->e[k].name);
        }
    for (size_t k = 1; k < mk->n; k++)
        if (mk->e[k].stem == mk->e[k - 1].stem &&
            !memcmp(mk->e[k].name, mk->e[k - 1].name, mk->e[k].stem)) {
            snprintf(a, sizeof a, "%s/%s", msub, mk->e[k - 1].name);
            seg_path(m, a, b, sizeof b);
            return stk_fail(STK_EFORMAT, "segfolder: masks %s and %s are one stem", b,
                            mk->e[k].name);
        }
    size_t most = im->n < mk->n ? im->n : mk->n;
    if (!(m->image = malloc((most ? most : 1) * sizeof *m->image)) ||
        !(m->mask = malloc((most ? most : 1) * sizeof *m->mask)))
        return stk_fail(STK_ENOMEM, "segfolder: out of memory");
    while (i < im->n || j < mk->n) {
        int c = i == im->n ? 1 : j == mk->n ? -1 : seg_cmp_entry(&im->e[i], &mk->e[j]);
        if (i < im->n && j < mk->n && im->e[i].stem == mk->e[j].stem &&
            !memcmp(im->e[i].name, mk->e[j].name, im->e[i].stem))
            c = 0;
        if (c < 0) { /* an image without its mask */
            snprintf(a, sizeof a, "%s/%s", isub, im->e[i].name);
            seg_path(m, a, b, sizeof b);
            snprintf(a, sizeof a, "%s/%.*s%s.%s", msub, (int)im->e[i].stem, im->e[i].name,
                     suffix, ext);
            char want[4096];
            seg_path(m, a, want, sizeof want);
            if ((rc = seg_unpaired(ds, missing, "%s has no mask %s", b, want)) < 0)
                return rc;
            i++;
            continue;
        }
        if (c > 0) { /* a mask without its image */
            snprintf(a, sizeof a, "%s/%s", msub, mk->e[j].name);
            seg_path(m, a, b, sizeof b);
            snprintf(a, sizeof a, "%s/%.*s", isub, (int)mk->e[j].stem, mk->e[j].name);
            char want[4096];
            seg_path(m, a, want, sizeof want);
            if ((rc = seg_unpaired(ds, missing, "%s has no image %s.*", b, want)) < 0)
                return rc;
            j++;
            continue;
        }
        if (n >= max_samples)
            return stk_fail(STK_ELIMIT, "segfolder: %s: more than max_samples = %llu samples",
                            m->root, (unsigned long long)max_samples);
        if ((rc = seg_arena_add(&m->arena, &len, &cap, isub, im->e[i].name, &m->image[n])) < 0 ||
            (rc = seg_arena_add(&m->arena, &len, &cap, msub, mk->e[j].name, &m->mask[n])) < 0)
            return rc;
        n++;
        i++;
        j++;
    }
    ds->count = n;
    return 0;
}

/* A relative SUBDIR: not empty, not absolute, no ".." part. */
static bool seg_sub_ok(const char *s)
{
    if (!*s || *s == '/')
        return false;
    for (const char *p = s; *p;) {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return false;
        p += len + (e ? 1 : 0);
    }
    return true;
}

/* Whether directory fd directly holds a regular file whose name ends in
 * "_mask." + ext (the one-directory layout). */
static bool seg_has_flat_masks(int fd, const char *ext)
{
    int dup_fd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dup_fd < 0)
        return false;
    DIR *d = fdopendir(dup_fd);
    if (!d) {
        close(dup_fd);
        return false;
    }
    bool hit = false;
    struct dirent *de;
    while (!hit && (de = readdir(d)) != NULL)
        hit = de->d_name[0] != '.' && seg_mask_tail(de->d_name, "_mask", ext) > 0;
    closedir(d);
    return hit;
}

static bool seg_is_subdir(int fd, const char *name)
{
    struct stat st;
    return fstatat(fd, name, &st, 0) == 0 && S_ISDIR(st.st_mode);
}

static int seg_open_uri(const char *uri, const char *path, const char *query,
                        const stk_dataset_options *opts, stk_dataset **out)
{
    static const char *const keys[] = {"images", "masks", "mask_suffix", "mask_ext", "missing"};
    enum { Q_IMAGES, Q_MASKS, Q_SUFFIX, Q_EXT, Q_MISSING, Q_N };
    stk_dataset_options o = stk_dataset_options_resolve(opts);
    char *qv[Q_N] = {NULL};
    seg_list im = {0}, mk = {0};
    stk_dataset *ds = NULL;
    seg_impl *m;
    char ebuf[128];
    int missing = SEG_MISSING_ERROR;
    int rc = stk_query_names(uri, "segfolder", query, keys, qv, Q_N);
    if (rc < 0)
        goto out;
    if (qv[Q_MISSING]) {
        if (!strcmp(qv[Q_MISSING], "skip"))
            missing = SEG_MISSING_SKIP;
        else if (strcmp(qv[Q_MISSING], "error") != 0) {
            rc = stk_fail(STK_EINVAL,
                          "segfolder: unknown value '%.100s' for query key 'missing' in URI "
                          "'%s' (expected error or skip)",
                          qv[Q_MISSING], uri);
            goto out;
        }
    }
    for (int k = Q_IMAGES; k <= Q_MASKS; k++)
        if (qv[k] && !seg_sub_ok(qv[k])) {
            rc = stk_fail(STK_EINVAL,
                          "segfolder: %s=%s in URI '%s' must be a directory relative to DIR "
                          "(\".\" for DIR itself), without \"..\"",
                          keys[k], qv[k], uri);
            goto out;
        }
    if (qv[Q_EXT] && (strchr(qv[Q_EXT], '/') || qv[Q_EXT][0] == '.')) {
        rc = stk_fail(STK_EINVAL, "segfolder: mask_ext=%s in URI '%s': an extension without "
                                  "the dot (png, gif...)",
                      qv[Q_EXT], uri);
        goto out;
    }
    if (qv[Q_SUFFIX] && strchr(qv[Q_SUFFIX], '/')) {
        rc = stk_fail(STK_EINVAL, "segfolder: mask_suffix=%s in URI '%s' holds a '/'",
                      qv[Q_SUFFIX], uri);
        goto out;
    }
    if (!*path) {
        rc = stk_fail(STK_EINVAL, "segfolder: empty directory in URI '%s'", uri);
        goto out;
    }
    if (!(ds = stk_dataset_alloc(&seg_vt, uri))) {
        rc = STK_ENOMEM;
        goto out;
    }
    if (!(m = calloc(1, sizeof *m))) {
        rc = stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
        goto out;
    }
    ds->impl = m;
    m->max_bytes = o.max_bytes;
    m->max_pixels = o.max_pixels;
    if (!(m->root = stk_strdup(path))) {
        rc = STK_ENOMEM;
        goto out;
    }
    m->root_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (m->root_fd < 0) {
        int e = errno;
        rc = stk_fail(e == ENOENT ? STK_ENOENT : e == ENOTDIR ? STK_EINVAL : STK_EIO,
                      "segfolder: %s: %s", path, strerror_r(e, ebuf, sizeof ebuf));
        goto out;
    }
    /* The layout: the keys given, else images/ + masks/, else flat. */
    const char *ext = qv[Q_EXT] ? qv[Q_EXT] : "png";
    const char *isub = qv[Q_IMAGES], *msub = qv[Q_MASKS], *suffix = qv[Q_SUFFIX];
    if (!isub && !msub && !suffix && !seg_is_subdir(m->root_fd, "images") &&
        !seg_is_subdir(m->root_fd, "masks")) {
        if (!seg_has_flat_masks(m->root_fd, ext)) {
            rc = stk_fail(STK_ENOENT,
                          "segfolder: %s has neither images/ and masks/ subdirectories nor "
                          "*_mask.%s files beside the images (name the layout: "
                          "?images=SUBDIR&masks=SUBDIR&mask_suffix=TEXT&mask_ext=EXT)",
                          path, ext);
            goto out;
        }
        isub = msub = ".";
        suffix = "_mask";
    }
    if (!isub)
        isub = "images";
    if (!msub)
        msub = "masks";
    if (!suffix)
        suffix = "";
    bool same = false;
    {
        struct stat a, b;
        same = fstatat(m->root_fd, isub, &a, 0) == 0 && fstatat(m->root_fd, msub, &b, 0) == 0 &&
               a.st_dev == b.st_dev && a.st_ino == b.st_ino;
    }
    if (same && !*suffix) {
        bool clash = false;
        for (size_t i = 0; i < sizeof seg_img_exts / sizeof seg_img_exts[0]; i++)
            clash |= !strcasecmp(seg_img_exts[i] + 1, ext);
        if (clash) {
            rc = stk_fail(STK_EINVAL,
                          "segfolder: images and masks are both in %s/%s with mask_ext=%s and "
                          "no mask_suffix: an image cannot be told from a mask (e.g. "
                          "mask_suffix=_mask)",
                          path, isub, ext);
            goto out;
        }
    }
    if ((rc = seg_list_dir(m, isub, false, suffix, ext, same, &im)) < 0 ||
        (rc = seg_list_dir(m, msub, true, suffix, ext, same, &mk)) < 0)
        goto out;
    char p[4096];
    seg_path(m, isub, p, sizeof p);
    if (!(m->images_dir = stk_strdup(p)))
        goto oom;
    seg_path(m, msub, p, sizeof p);
    if (!(m->masks_dir = stk_strdup(p)))
        goto oom;
    if ((rc = seg_pair(ds, m, &im, &mk, isub, msub, suffix, ext, missing, o.max_samples)) < 0)
        goto out;
    if (ds->count == 0) {
        rc = stk_fail(STK_EFORMAT,
                      "segfolder: %s: no image with its mask (%zu images in %s, %zu masks "
                      "*%s.%s in %s)",
                      path, im.n, m->images_dir, mk.n, suffix, ext, m->masks_dir);
        goto out;
    }
    *out = ds;
    ds = NULL;
    goto out;
oom:
    rc = stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
out:
    seg_list_free(&im);
    seg_list_free(&mk);
    stk_dataset_close(ds);
    for (int k = 0; k < Q_N; k++)
        free(qv[k]);
    return rc;
}

/* A directory with images/ and masks/ subdirectories, or one directly
 * holding *_mask.png files. */
static int seg_detect(const char *path)
{
    char *a, *b;
    int hit;
    if (!stk_path_is_dir(path))
        return 0;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        hit = seg_has_flat_masks(fd, "png");
        close(fd);
        if (hit)
            return 1;
    }
    if (!(a = stk_path_join(path, "images")))
        return STK_ENOMEM;
    if (!(b = stk_path_join(path, "masks"))) {
        free(a);
        return STK_ENOMEM;
    }
    hit = stk_path_is_dir(a) && stk_path_is_dir(b);
    free(a);
    free(b);
    return hit;
}

const stk_reader stk_reader_segfolder = {
    "segfolder",
    "segfolder:DIR[?images=images][&masks=masks][&mask_suffix=TEXT][&mask_ext=png]"
    "[&missing=error|skip]",
    "segmentation: DIR/images/STEM.jpg with DIR/masks/STEM.png (or DIR/STEM_mask.png beside "
    "the images)",
    seg_open_uri,
    NULL,
    seg_detect,
    "images/ and masks/ subdirectories, or *_mask.png files (segmentation)",
    NULL};
