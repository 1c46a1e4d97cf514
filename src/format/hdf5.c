/*
 * hdf5.c — images and labels stored in an HDF5 file (h5py's usual layout).
 *
 * URI: "hdf5:FILE[?images=/DATASET&labels=/DATASET]" (defaults /images and
 * /labels); a bare path ending in .h5, .hdf5 or .he5 is detected.
 *
 * Images are either
 *   - a fixed uint8 array of shape (N, H, W) or (N, H, W, C), C = 1..4:
 *     raw pixels, served as image views; or
 *   - a 1-D array of N variable-length uint8 sequences
 *     (h5py.vlen_dtype(np.uint8)) holding encoded images (JPEG, PNG...):
 *     served as encoded bytes, exactly as stored.
 * Labels are a 1-D integer dataset of N values (int8..int64, uint8..uint32);
 * floating-point labels are refused, as every reader of stoker refuses them.
 *
 * Why not just call libhdf5 for every sample. The libhdf5 Debian ships (and
 * h5py bundles) is built without thread safety, and a thread-safe build
 * takes one global lock around every API call: HDF5 reads do not scale
 * with threads, which is the complaint about HDF5 loaders. So libhdf5 is
 * used only at open, under this file's mutex, for what it is needed for —
 * the metadata: datatype, rank and shape, layout (H5Pget_layout), filters,
 * the file's address and length sizes and user block, and the file offset
 * of a contiguous dataset's data (H5Dget_offset) — and to read the labels
 * (N integers, converted to int64 once). Then, when the images dataset is
 * contiguous and unfiltered (h5py's default without chunks=/compression=):
 *
 *   - fixed uint8: the file is mapped and sample i is the view at
 *     offset + i * H*W*C. No copy, no lock.
 *   - vlen uint8: the dataset's raw elements (length, global heap
 *     collection address, object index) are read from the mapping and every
 *     referenced global heap collection is parsed once, validated, into a
 *     table of (offset, size) per record (hdf5_heap.c). Sample i is a view
 *     of those bytes in the mapping. No copy, no lock.
 *
 * Anything else (chunked, compressed, compact, external storage, storage
 * never written) is read through libhdf5: H5Dread of the one sample's
 * hyperslab (or the one vlen element) into the caller's scratch, under the
 * same process-wide mutex, because libhdf5 is not thread-safe. This path
 * costs what h5py's costs: the lock serialises every read (threads do not
 * help), and a compressed chunk is inflated whole for each sample that
 * misses libhdf5's 1 MiB chunk cache. docs/datasets.md says so.
 *
 * What open validates, before the first sample is served: the file is
 * HDF5 (its signature at byte 0 or a power of two from 512, checked here
 * before libhdf5 sees it); the datasets exist; the types, ranks and shapes
 * are the ones above; images and labels agree on N; the data of a
 * contiguous dataset lies inside the file (a truncated file fails the open
 * with the byte counts); each vlen record's heap reference is resolved.
 * A vlen record whose reference is damaged (no collection there, a bad
 * signature, no object with its index, a size past the collection, a
 * length that disagrees with the object) does not fail the open: its
 * reason is kept in the table and reading that record is STK_EDATA naming
 * the file, dataset, record and byte offsets, so on_error=skip skips
 * exactly the damaged records. libhdf5's own error stack is silenced
 * (H5Eset_auto2, restored after each call) and its innermost message put in
 * ours.
 *
 * Locking: `h5_mutex` guards every libhdf5 call of the library (libhdf5
 * keeps global state: its error stack, its open-object tables). The
 * mapping, the tables and the labels are immutable after open; read() of
 * the mapped kinds takes no lock. fork() takes h5_mutex first (a
 * pthread_atfork handler), so a child never inherits it locked nor
 * libhdf5 half-way through a call: a dataset opened before fork() reads in
 * the child, as docs/python.md promises.
 *
 * libhdf5 opens the file by name itself (by its own I/O, not src/io):
 * metadata only, and the fallback reads. Every byte of a sample on the
 * mapped paths comes through src/io (docs/layers.md).
 */
#include "core/error.h"
#include "format/dataset.h"
#include "format/hdf5_heap.h"
#include "format/reader_util.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef STK_HAVE_HDF5
#include <hdf5.h>
#endif

#define H5_SIGNATURE "\211HDF\r\n\032\n"
#define H5_MAX_NAME 1024

enum h5_kind {
    H5K_FIXED_MAPPED, /* contiguous uint8 (N,H,W[,C]): views into the mapping */
    H5K_VLEN_MAPPED,  /* contiguous vlen uint8: table of views into the mapping */
    H5K_FIXED_LIB,    /* anything else: H5Dread of a hyperslab, under h5_mutex */
    H5K_VLEN_LIB,
};

typedef struct stk_h5_impl {
    char *path;             /* owned: the file, for messages */
    char images_name[H5_MAX_NAME]; /* dataset paths, for messages */
    char labels_name[H5_MAX_NAME];
    enum h5_kind kind;
    stk_mapped_file map;    /* owned: the whole file, mapped (mapped kinds) */
    uint64_t data_off;      /* absolute offset of the dataset's raw data */
    size_t sample_bytes;    /* fixed kinds: H*W*C */
    unsigned elem_size;     /* vlen: bytes of one raw element */
    stk_h5_entry *entries;  /* owned: vlen mapped, one per record */
    int64_t *labels;        /* owned: count entries */
    uint64_t max_record;    /* largest vlen record served */
#ifdef STK_HAVE_HDF5
    /* Library kinds only; used and closed under h5_mutex. */
    hid_t file, dset, fspace, mspace, memtype;
#endif
} stk_h5_impl;

/* --- the URI's query ------------------------------------------------------ */

/* images=/a&labels=/b: free-form values (dataset paths), so not
 * stk_query_parse, whose values are from a fixed list; the same wording. */
static int h5_parse_query(const char *uri, const char *query, char *images, char *labels)
{
    int seen[2] = {0, 0};
    const char *p = query;
    snprintf(images, H5_MAX_NAME, "/images");
    snprintf(labels, H5_MAX_NAME, "/labels");
    while (p && *p) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq)
            return stk_fail(STK_EINVAL, "hdf5: query item '%.*s' has no '=value' (URI '%s')",
                            (int)len, p, uri);
        size_t klen = (size_t)(eq - p), vlen = len - klen - 1;
        int k = klen == 6 && !memcmp(p, "images", 6) ? 0
                : klen == 6 && !memcmp(p, "labels", 6) ? 1 : -1;
        if (k < 0)
            return stk_fail(STK_EINVAL, "hdf5: unknown query key '%.*s' in URI '%s' (known "
                                        "keys: images, labels)", (int)klen, p, uri);
        if (seen[k]++)
            return stk_fail(STK_EINVAL, "hdf5: query key '%.*s' given twice in URI '%s'",
                            (int)klen, p, uri);
        if (vlen == 0 || vlen + 2 > H5_MAX_NAME)
            return stk_fail(STK_EINVAL, "hdf5: query key '%.*s' needs a dataset path (1 to %d "
                                        "characters) in URI '%s'", (int)klen, p,
                            H5_MAX_NAME - 2, uri);
        /* a relative name is relative to the root group */
        snprintf(k ? labels : images, H5_MAX_NAME, "%s%.*s", eq[1] == '/' ? "" : "/",
                 (int)vlen, eq + 1);
        p = amp ? amp + 1 : NULL;
    }
    return 0;
}

/* --- read ----------------------------------------------------------------- */

static int h5_vlen_damage(const stk_dataset *ds, uint64_t index)
{
    const stk_h5_impl *m = ds->impl;
    const stk_h5_entry *e = &m->entries[index];
    uint64_t elem = m->data_off + index * m->elem_size;
    if (e->err == STK_H5_EMPTY)
        return stk_fail(STK_EDATA, "%s: dataset %s, record %llu (element at byte %llu): %s",
                        m->path, m->images_name, (unsigned long long)index,
                        (unsigned long long)elem, stk_h5_heap_reason(e->err));
    return stk_fail(STK_EDATA,
                    "%s: dataset %s, record %llu (element at byte %llu, global heap collection "
                    "at byte %llu, object %u): %s",
                    m->path, m->images_name, (unsigned long long)index, (unsigned long long)elem,
                    (unsigned long long)e->off, e->size, stk_h5_heap_reason(e->err));
}

#ifdef STK_HAVE_HDF5
static int h5_lib_read(const stk_dataset *ds, uint64_t index, stk_sample *out,
                       stk_scratch *scratch);
#endif

static int stk_h5_read(const stk_dataset *ds, uint64_t index, stk_sample *out,
                       stk_scratch *scratch)
{
    const stk_h5_impl *m = ds->impl;
    out->label = m->labels[index];
    switch (m->kind) {
    case H5K_FIXED_MAPPED:
        stk_sample_set_hwc(ds, m->map.data + m->data_off + index * m->sample_bytes, out);
        return 0;
    case H5K_VLEN_MAPPED: {
        const stk_h5_entry *e = &m->entries[index];
        if (e->err)
            return h5_vlen_damage(ds, index);
        memset(&out->image, 0, sizeof out->image);
        out->encoded = m->map.data + e->off;
        out->encoded_size = e->size;
        return 0;
    }
    default:
#ifdef STK_HAVE_HDF5
        return h5_lib_read(ds, index, out, scratch);
#else
        (void)scratch;
        return stk_fail(STK_EUNSUPPORTED, "%s: built without libhdf5", m->path);
#endif
    }
}

/* vtable.read_check: were the bytes of the view still the file's? */
static int stk_h5_read_check(const stk_dataset *ds, uint64_t index)
{
    const stk_h5_impl *m = ds->impl;
    uint64_t off, len, valid;
    if (m->kind == H5K_FIXED_MAPPED) {
        off = m->data_off + index * m->sample_bytes;
        len = m->sample_bytes;
    } else if (m->kind == H5K_VLEN_MAPPED && !m->entries[index].err) {
        off = m->entries[index].off;
        len = m->entries[index].size;
    } else {
        return 0;
    }
    if (stk_mapped_file_intact(&m->map, off, len, &valid))
        return 0;
    return stk_fail(STK_EDATA,
                    "%s: dataset %s, record %llu (bytes %llu..%llu): the file was truncated "
                    "while open (only its first %llu of %zu bytes remain); the record's bytes "
                    "were lost",
                    m->path, m->images_name, (unsigned long long)index, (unsigned long long)off,
                    (unsigned long long)(off + len), (unsigned long long)valid, m->map.size);
}

static void stk_h5_sample_name(const stk_dataset *ds, uint64_t index, char *buf, size_t size)
{
    const stk_h5_impl *m = ds->impl;
    if (m->kind == H5K_FIXED_MAPPED)
        snprintf(buf, size, "%s: dataset %s, record %llu (byte %llu)", m->path, m->images_name,
                 (unsigned long long)index,
                 (unsigned long long)(m->data_off + index * m->sample_bytes));
    else if (m->kind == H5K_VLEN_MAPPED)
        snprintf(buf, size, "%s: dataset %s, record %llu (element at byte %llu)", m->path,
                 m->images_name, (unsigned long long)index,
                 (unsigned long long)(m->data_off + index * m->elem_size));
    else
        snprintf(buf, size, "%s: dataset %s, record %llu", m->path, m->images_name,
                 (unsigned long long)index);
}

static void stk_h5_access_hint(const stk_dataset *ds, stk_access how)
{
    const stk_h5_impl *m = ds->impl;
    if (m->map.data)
        stk_mapping_advise(m->map.data, 0, m->map.size,
                           how == STK_ACCESS_SEQUENTIAL ? STK_ADVISE_SEQUENTIAL
                                                        : stk_random_map_advice(m->map.size));
}

/* --- libhdf5 -------------------------------------------------------------- */

#ifdef STK_HAVE_HDF5

/* Guards every libhdf5 call (see the essay), and the error-printing
 * setting each holder saves and restores. */
static pthread_mutex_t h5_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t h5_fork_once = PTHREAD_ONCE_INIT;
static H5E_auto2_t h5_saved_func;
static void *h5_saved_data;

/* fork(): the child has only the forking thread, so a mutex another thread
 * held at that moment would stay locked in the child forever (the first
 * ds[i] of a chunked dataset in the child hung). Taking h5_mutex before the
 * fork also means no thread is inside libhdf5 then, so the child's copy of
 * libhdf5's global state (error stack, open-object tables, chunk cache) is
 * consistent, not half-updated. Nothing else is locked while h5_mutex is
 * held (it is a leaf), so the prepare handler cannot deadlock with
 * another module's. */
static void h5_fork_prepare(void) { pthread_mutex_lock(&h5_mutex); }
static void h5_fork_parent(void) { pthread_mutex_unlock(&h5_mutex); }
static void h5_fork_child(void) { pthread_mutex_init(&h5_mutex, NULL); }
static void h5_fork_register(void) { pthread_atfork(h5_fork_prepare, h5_fork_parent, h5_fork_child); }

static void h5_lock(void)
{
    pthread_once(&h5_fork_once, h5_fork_register);
    pthread_mutex_lock(&h5_mutex);
    H5Eget_auto2(H5E_DEFAULT, &h5_saved_func, &h5_saved_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static void h5_unlock(void)
{
    H5Eclear2(H5E_DEFAULT);
    H5Eset_auto2(H5E_DEFAULT, h5_saved_func, h5_saved_data);
    pthread_mutex_unlock(&h5_mutex);
}

typedef struct h5_walk {
    char text[256];
} h5_walk;

static herr_t h5_walk_cb(unsigned n, const H5E_error2_t *err, void *data)
{
    h5_walk *w = data;
    /* walking downward, the last entry is the innermost: the most precise */
    if (err->desc && err->desc[0])
        snprintf(w->text, sizeof w->text, "%s", err->desc);
    return 0;
}

/* libhdf5's innermost error message, or "unknown error"; caller holds the
 * lock. */
static const char *h5_reason(h5_walk *w)
{
    snprintf(w->text, sizeof w->text, "unknown error");
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, h5_walk_cb, w);
    return w->text;
}

/* "uint8", "float32", "variable-length int16", "string"... for messages. */
static void h5_type_name(hid_t t, char *buf, size_t size)
{
    H5T_class_t c = H5Tget_class(t);
    size_t bytes = H5Tget_size(t);
    switch (c) {
    case H5T_INTEGER:
        snprintf(buf, size, "%sint%zu", H5Tget_sign(t) == H5T_SGN_NONE ? "u" : "", bytes * 8);
        return;
    case H5T_FLOAT: snprintf(buf, size, "float%zu", bytes * 8); return;
    case H5T_VLEN: {
        char inner[64];
        hid_t s = H5Tget_super(t);
        if (s >= 0) {
            h5_type_name(s, inner, sizeof inner);
            H5Tclose(s);
        } else {
            snprintf(inner, sizeof inner, "?");
        }
        snprintf(buf, size, "variable-length %s", inner);
        return;
    }
    case H5T_STRING: snprintf(buf, size, "string"); return;
    case H5T_COMPOUND: snprintf(buf, size, "compound"); return;
    case H5T_OPAQUE: snprintf(buf, size, "opaque"); return;
    case H5T_ENUM: snprintf(buf, size, "enum"); return;
    case H5T_ARRAY: snprintf(buf, size, "array"); return;
    case H5T_REFERENCE: snprintf(buf, size, "reference"); return;
    case H5T_BITFIELD: snprintf(buf, size, "bitfield"); return;
    default: snprintf(buf, size, "an unknown type"); return;
    }
}

static int h5_is_u8(hid_t t)
{
    return H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == 1;
}

/* Read sample `index` through libhdf5 into scratch (the library kinds). */
static int h5_lib_read(const stk_dataset *ds, uint64_t index, stk_sample *out,
                       stk_scratch *scratch)
{
    const stk_h5_impl *m = ds->impl;
    hsize_t start[4] = {index, 0, 0, 0};
    hsize_t count[4] = {1, ds->height, ds->width, ds->channels};
    int rc = 0;
    h5_walk w;
    h5_lock();
    if (H5Sselect_hyperslab(m->fspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0) {
        rc = stk_fail(STK_EDATA, "%s: dataset %s, record %llu: HDF5 cannot select it: %s",
                      m->path, m->images_name, (unsigned long long)index, h5_reason(&w));
        goto out;
    }
    if (m->kind == H5K_FIXED_LIB) {
        if ((rc = stk_scratch_reserve(scratch, m->sample_bytes)) < 0)
            goto out;
        if (H5Dread(m->dset, H5T_NATIVE_UINT8, m->mspace, m->fspace, H5P_DEFAULT,
                    scratch->data) < 0) {
            rc = stk_fail(STK_EDATA, "%s: dataset %s, record %llu: HDF5 cannot read it: %s",
                          m->path, m->images_name, (unsigned long long)index, h5_reason(&w));
            goto out;
        }
        stk_sample_set_hwc(ds, scratch->data, out);
    } else {
        hvl_t v = {0, NULL};
        if (H5Dread(m->dset, m->memtype, m->mspace, m->fspace, H5P_DEFAULT, &v) < 0) {
            rc = stk_fail(STK_EDATA, "%s: dataset %s, record %llu: HDF5 cannot read it: %s",
                          m->path, m->images_name, (unsigned long long)index, h5_reason(&w));
            goto out;
        }
        if (v.len == 0)
            rc = stk_fail(STK_EDATA, "%s: dataset %s, record %llu: %s", m->path, m->images_name,
                          (unsigned long long)index, stk_h5_heap_reason(STK_H5_EMPTY));
        else if (v.len > m->max_record)
            rc = stk_fail(STK_EDATA, "%s: dataset %s, record %llu: %zu bytes (at most %llu)",
                          m->path, m->images_name, (unsigned long long)index, v.len,
                          (unsigned long long)m->max_record);
        else if ((rc = stk_scratch_reserve(scratch, v.len)) == 0) {
            memcpy(scratch->data, v.p, v.len);
            memset(&out->image, 0, sizeof out->image);
            out->encoded = scratch->data;
            out->encoded_size = v.len;
        }
#if H5_VERSION_GE(1, 12, 0)
        H5Treclaim(m->memtype, m->mspace, H5P_DEFAULT, &v);
#else
        H5Dvlen_reclaim(m->memtype, m->mspace, H5P_DEFAULT, &v);
#endif
    }
out:
    h5_unlock();
    return rc;
}

static void h5_close_ids(stk_h5_impl *m)
{
    if (m->memtype > 0)
        H5Tclose(m->memtype);
    if (m->mspace > 0)
        H5Sclose(m->mspace);
    if (m->fspace > 0)
        H5Sclose(m->fspace);
    if (m->dset > 0)
        H5Dclose(m->dset);
    if (m->file > 0)
        H5Fclose(m->file);
    m->memtype = m->mspace = m->fspace = m->dset = m->file = H5I_INVALID_HID;
}

/* The labels dataset: 1-D integers, n of them, into m->labels. Holds the
 * lock. */
static int h5_read_labels(stk_dataset *ds, stk_h5_impl *m, uint64_t n)
{
    hid_t d = H5I_INVALID_HID, t = H5I_INVALID_HID, s = H5I_INVALID_HID;
    char tname[96];
    h5_walk w;
    hsize_t dims[1];
    int rc = 0;
    if ((d = H5Dopen2(m->file, m->labels_name, H5P_DEFAULT)) < 0) {
        rc = stk_fail(STK_EFORMAT, "%s: no labels dataset %s (%s); name it with "
                                   "?labels=/PATH", m->path, m->labels_name, h5_reason(&w));
        goto out;
    }
    t = H5Dget_type(d);
    s = H5Dget_space(d);
    if (t < 0 || s < 0) {
        rc = stk_fail(STK_EFORMAT, "%s: labels dataset %s: %s", m->path, m->labels_name,
                      h5_reason(&w));
        goto out;
    }
    h5_type_name(t, tname, sizeof tname);
    if (H5Tget_class(t) == H5T_FLOAT) {
        rc = stk_fail(STK_EUNSUPPORTED, "%s: labels dataset %s holds %s values: float labels are "
                                        "refused (integer class indices expected)",
                      m->path, m->labels_name, tname);
        goto out;
    }
    if (H5Tget_class(t) != H5T_INTEGER || H5Tget_size(t) > 8 ||
        (H5Tget_sign(t) == H5T_SGN_NONE && H5Tget_size(t) > 4)) {
        rc = stk_fail(STK_EUNSUPPORTED, "%s: labels dataset %s has type %s (int8..int64 or "
                                        "uint8..uint32 expected)", m->path, m->labels_name, tname);
        goto out;
    }
    if (H5Sget_simple_extent_ndims(s) != 1) {
        rc = stk_fail(STK_EFORMAT, "%s: labels dataset %s has rank %d (1 expected: one label "
                                   "per image)", m->path, m->labels_name,
                      H5Sget_simple_extent_ndims(s));
        goto out;
    }
    H5Sget_simple_extent_dims(s, dims, NULL);
    if (dims[0] != n) {
        rc = stk_fail(STK_EFORMAT, "%s: labels dataset %s holds %llu labels but images dataset "
                                   "%s holds %llu images", m->path, m->labels_name,
                      (unsigned long long)dims[0], m->images_name, (unsigned long long)n);
        goto out;
    }
    if (n > SIZE_MAX / sizeof *m->labels ||
        !(m->labels = malloc((size_t)n * sizeof *m->labels))) {
        rc = stk_fail(STK_ENOMEM, "out of memory for %llu labels of %s", (unsigned long long)n,
                      m->path);
        goto out;
    }
    if (H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, m->labels) < 0) {
        rc = stk_fail(STK_EFORMAT, "%s: labels dataset %s cannot be read: %s", m->path,
                      m->labels_name, h5_reason(&w));
        goto out;
    }
    ds->num_classes = stk_num_classes(m->labels, n);
out:
    if (s >= 0)
        H5Sclose(s);
    if (t >= 0)
        H5Tclose(t);
    if (d >= 0)
        H5Dclose(d);
    return rc;
}

/* Everything libhdf5 tells us, under the lock: fills ds and m. The mapped
 * kinds close every libhdf5 object before returning. */
static int h5_open_metadata(stk_dataset *ds, stk_h5_impl *m, const stk_dataset_options *o,
                            stk_h5_geometry *geo)
{
    hid_t t = H5I_INVALID_HID, fcpl = H5I_INVALID_HID, dcpl = H5I_INVALID_HID;
    hsize_t dims[H5S_MAX_RANK];
    char tname[96];
    h5_walk w;
    int rc = 0, rank;
    size_t sa = 0, sl = 0;
    hsize_t ub = 0;
    uint64_t n;

    if ((m->file = H5Fopen(m->path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0) {
        rc = stk_fail(STK_EFORMAT, "%s: libhdf5 cannot open the file: %s", m->path,
                      h5_reason(&w));
        goto out;
    }
    fcpl = H5Fget_create_plist(m->file);
    if (fcpl < 0 || H5Pget_sizes(fcpl, &sa, &sl) < 0 || H5Pget_userblock(fcpl, &ub) < 0) {
        rc = stk_fail(STK_EFORMAT, "%s: cannot read the file's superblock: %s", m->path,
                      h5_reason(&w));
        goto out;
    }
    geo->sizeof_addr = (unsigned)sa;
    geo->sizeof_lengths = (unsigned)sl;
    geo->base = ub;

    if ((m->dset = H5Dopen2(m->file, m->images_name, H5P_DEFAULT)) < 0) {
        rc = stk_fail(STK_EFORMAT, "%s: no images dataset %s (%s); name it with "
                                   "?images=/PATH", m->path, m->images_name, h5_reason(&w));
        goto out;
    }
    t = H5Dget_type(m->dset);
    m->fspace = H5Dget_space(m->dset);
    dcpl = H5Dget_create_plist(m->dset);
    if (t < 0 || m->fspace < 0 || dcpl < 0) {
        rc = stk_fail(STK_EFORMAT, "%s: images dataset %s: %s", m->path, m->images_name,
                      h5_reason(&w));
        goto out;
    }
    h5_type_name(t, tname, sizeof tname);
    rank = H5Sget_simple_extent_ndims(m->fspace);
    if (rank < 0 || rank > H5S_MAX_RANK)
        rank = 0;
    memset(dims, 0, sizeof dims);
    if (rank > 0)
        H5Sget_simple_extent_dims(m->fspace, dims, NULL);
    int vlen = 0;
    if (H5Tget_class(t) == H5T_VLEN) {
        hid_t super = H5Tget_super(t);
        int ok = super >= 0 && h5_is_u8(super);
        if (super >= 0)
            H5Tclose(super);
        if (!ok) {
            rc = stk_fail(STK_EUNSUPPORTED,
                          "%s: images dataset %s has type %s (uint8 pixels (N,H,W[,C]) or "
                          "variable-length uint8 encoded images expected)",
                          m->path, m->images_name, tname);
            goto out;
        }
        if (rank != 1) {
            rc = stk_fail(STK_EFORMAT, "%s: images dataset %s of variable-length uint8 has rank "
                                       "%d (1 expected: one encoded image per element)",
                          m->path, m->images_name, rank);
            goto out;
        }
        vlen = 1;
    } else if (h5_is_u8(t) && H5Tget_sign(t) == H5T_SGN_NONE) {
        if (rank != 3 && rank != 4) {
            rc = stk_fail(STK_EFORMAT, "%s: images dataset %s of uint8 has rank %d (N,H,W or "
                                       "N,H,W,C expected)", m->path, m->images_name, rank);
            goto out;
        }
    } else {
        rc = stk_fail(STK_EUNSUPPORTED,
                      "%s: images dataset %s has type %s (uint8 pixels (N,H,W[,C]) or "
                      "variable-length uint8 encoded images expected)",
                      m->path, m->images_name, tname);
        goto out;
    }
    n = dims[0];
    if (!n) {
        rc = stk_fail(STK_EFORMAT, "%s: images dataset %s holds no images", m->path,
                      m->images_name);
        goto out;
    }
    if (n > o->max_samples) {
        rc = stk_fail(STK_ELIMIT, "%s: images dataset %s holds %llu images (max_samples %llu)",
                      m->path, m->images_name, (unsigned long long)n,
                      (unsigned long long)o->max_samples);
        goto out;
    }
    if (!vlen) {
        uint64_t c = rank == 4 ? dims[3] : 1, px;
        if (!dims[1] || !dims[2] || c < 1 || c > 4) {
            rc = stk_fail(STK_EFORMAT, "%s: images dataset %s has shape (%llu, %llu, %llu, %llu): "
                                       "every dimension must be nonzero and C 1 to 4",
                          m->path, m->images_name, (unsigned long long)n,
                          (unsigned long long)dims[1], (unsigned long long)dims[2],
                          (unsigned long long)c);
            goto out;
        }
        if (!stk_mul_ok(dims[1], dims[2], &px) || px > o->max_pixels ||
            dims[1] > UINT32_MAX || dims[2] > UINT32_MAX) {
            rc = stk_fail(STK_ELIMIT, "%s: images dataset %s: images of %llux%llu pass the "
                                      "max_pixels limit of %llu", m->path, m->images_name,
                          (unsigned long long)dims[1], (unsigned long long)dims[2],
                          (unsigned long long)o->max_pixels);
            goto out;
        }
        ds->height = (uint32_t)dims[1];
        ds->width = (uint32_t)dims[2];
        ds->channels = (uint32_t)c;
        m->sample_bytes = (size_t)(px * c);
    }
    ds->count = n;

    /* Where the data is: contiguous, unfiltered, allocated, in this file. */
    H5D_layout_t layout = H5Pget_layout(dcpl);
    int nfilters = H5Pget_nfilters(dcpl);
    int nexternal = H5Pget_external_count(dcpl);
    haddr_t addr = layout == H5D_CONTIGUOUS ? H5Dget_offset(m->dset) : HADDR_UNDEF;
    if (layout == H5D_CONTIGUOUS && nfilters == 0 && nexternal == 0 && addr != HADDR_UNDEF) {
        uint64_t bytes, end;
        m->elem_size = stk_h5_vlen_element_size(geo);
        if (!stk_mul_ok(n, vlen ? m->elem_size : m->sample_bytes, &bytes) ||
            !stk_add_ok(addr, bytes, &end) || end > m->map.size) {
            rc = stk_fail(STK_EFORMAT,
                          "%s: truncated: images dataset %s needs bytes %llu..%llu of the file "
                          "(%llu %s), the file has %zu",
                          m->path, m->images_name, (unsigned long long)addr,
                          (unsigned long long)(addr + bytes), (unsigned long long)n,
                          vlen ? "elements" : "images", m->map.size);
            goto out;
        }
        if (H5Dget_storage_size(m->dset) != bytes) {
            rc = stk_fail(STK_EFORMAT, "%s: images dataset %s stores %llu bytes where %llu "
                                       "were expected", m->path, m->images_name,
                          (unsigned long long)H5Dget_storage_size(m->dset),
                          (unsigned long long)bytes);
            goto out;
        }
        m->kind = vlen ? H5K_VLEN_MAPPED : H5K_FIXED_MAPPED;
        m->data_off = addr;
    } else {
        hsize_t one = 1;
        m->kind = vlen ? H5K_VLEN_LIB : H5K_FIXED_LIB;
        if (vlen) {
            m->mspace = H5Screate_simple(1, &one, NULL);
            m->memtype = H5Tvlen_create(H5T_NATIVE_UINT8);
        } else {
            /* the selection's own shape (1, H, W[, C]): a flat memory space
             * makes libhdf5 map the selection element by element (10x
             * slower, measured) */
            hsize_t shape[4] = {1, dims[1], dims[2], rank == 4 ? dims[3] : 1};
            m->mspace = H5Screate_simple(rank, shape, NULL);
        }
        if (m->mspace < 0 || (vlen && m->memtype < 0)) {
            rc = stk_fail(STK_ENOMEM, "%s: libhdf5 cannot create its read buffers: %s", m->path,
                          h5_reason(&w));
            goto out;
        }
    }
    rc = h5_read_labels(ds, m, n);
out:
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (fcpl >= 0)
        H5Pclose(fcpl);
    if (t >= 0)
        H5Tclose(t);
    if (rc < 0 || m->kind == H5K_FIXED_MAPPED || m->kind == H5K_VLEN_MAPPED)
        h5_close_ids(m);
    return rc;
}

#endif /* STK_HAVE_HDF5 */

/* --- open / close ---------------------------------------------------------- */

static void stk_h5_close(stk_dataset *ds)
{
    stk_h5_impl *m = ds->impl;
#ifdef STK_HAVE_HDF5
    h5_lock();
    h5_close_ids(m);
    h5_unlock();
#endif
    stk_unmap_file(&m->map);
    free(m->entries);
    free(m->labels);
    free(m->path);
    free(m);
    ds->impl = NULL;
}

/* vtable.label: the table read at open, no record read (class balancing
 * asks for every label). */
static int stk_h5_label(const stk_dataset *ds, uint64_t index, int64_t *label)
{
    *label = ((const stk_h5_impl *)ds->impl)->labels[index];
    return 0;
}

static const stk_dataset_vtable stk_h5_vt = {
    .format = "hdf5",
    .read = stk_h5_read,
    .label = stk_h5_label,
    .close = stk_h5_close,
    .sample_name = stk_h5_sample_name,
    .read_check = stk_h5_read_check,
    .access_hint = stk_h5_access_hint,
};

/* The HDF5 signature at byte 0, 512, 1024, 2048, ... (where the superblock
 * may sit after a user block). */
static int h5_has_signature(const stk_mapped_file *f)
{
    for (uint64_t at = 0; at + 8 <= f->size; at = at ? at * 2 : 512)
        if (!memcmp(f->data + at, H5_SIGNATURE, 8))
            return 1;
    return 0;
}

static int stk_h5_open(const char *uri, const char *path, const char *query,
                       const stk_dataset_options *opts, stk_dataset **out)
{
    stk_dataset_options o = stk_dataset_options_resolve(opts);
    stk_source *src = NULL;
    stk_dataset *ds;
    stk_h5_impl *m;
    int rc;

    if (!(ds = stk_dataset_alloc(&stk_h5_vt, uri)))
        return STK_ENOMEM;
    if (!(m = calloc(1, sizeof *m)) || !(m->path = stk_strdup(path))) {
        free(m);
        rc = stk_fail(STK_ENOMEM, "out of memory opening %s", uri);
        goto fail;
    }
#ifdef STK_HAVE_HDF5
    m->file = m->dset = m->fspace = m->mspace = m->memtype = H5I_INVALID_HID;
#endif
    ds->impl = m;
    if ((rc = h5_parse_query(uri, query, m->images_name, m->labels_name)) < 0)
        goto fail;

    /* The whole file, mapped shared (as .stk shards are): the views of the
     * mapped kinds point into it. */
    if ((rc = stk_source_open_file(path, o.max_bytes, &src)) < 0)
        goto fail;
    if ((rc = stk_source_map(src, STK_MAP_SHARED, &m->map.data, &m->map.guard)) < 0)
        goto fail;
    m->map.size = (size_t)src->size;
    stk_source_close(src);
    src = NULL;
    if (!h5_has_signature(&m->map)) {
        rc = stk_fail(STK_EFORMAT, "%s: not an HDF5 file (%s)", path,
                      m->map.size ? "no HDF5 signature \\211HDF\\r\\n\\032\\n at byte 0 or at "
                                    "any power of two from 512"
                                  : "empty file");
        goto fail;
    }
    m->max_record = o.max_bytes < UINT32_MAX ? o.max_bytes : UINT32_MAX;

#ifdef STK_HAVE_HDF5
    stk_h5_geometry geo;
    h5_lock();
    rc = h5_open_metadata(ds, m, &o, &geo);
    h5_unlock();
    if (rc < 0)
        goto fail;
    if (m->kind == H5K_VLEN_MAPPED) {
        if (ds->count > SIZE_MAX / sizeof *m->entries ||
            !(m->entries = malloc((size_t)ds->count * sizeof *m->entries))) {
            rc = stk_fail(STK_ENOMEM, "out of memory for %llu records of %s",
                          (unsigned long long)ds->count, path);
            goto fail;
        }
        rc = stk_h5_heap_index(m->map.data, m->map.size, &geo, m->map.data + m->data_off,
                               ds->count, m->max_record, m->entries);
        if (rc < 0)
            goto fail;
    }
    if ((m->kind == H5K_FIXED_MAPPED || m->kind == H5K_VLEN_MAPPED) &&
        !stk_mapped_file_intact(&m->map, 0, m->map.size, NULL)) {
        rc = stk_fail(STK_EIO, "%s: the file was truncated while it was being opened", path);
        goto fail;
    }
    if (m->kind == H5K_FIXED_LIB || m->kind == H5K_VLEN_LIB)
        stk_unmap_file(&m->map); /* libhdf5 reads those: the mapping is not used */
    else
        stk_mapping_advise(m->map.data, 0, m->map.size, stk_random_map_advice(m->map.size));
    *out = ds;
    return 0;
#else
    rc = stk_fail(STK_EUNSUPPORTED, "%s: this build of stoker has no libhdf5 (install "
                                    "libhdf5-dev and rebuild to read HDF5 files)", path);
#endif
fail:
    stk_source_close(src);
    stk_dataset_close(ds);
    return rc;
}

/* A regular file named *.h5, *.hdf5 or *.he5 (any case). */
static int stk_h5_detect(const char *path)
{
    const char *dot = strrchr(path, '.');
    char ext[8];
    size_t i = 0;
    if (!dot || strlen(dot) >= sizeof ext)
        return 0;
    for (; dot[i]; i++)
        ext[i] = (char)tolower((unsigned char)dot[i]);
    ext[i] = '\0';
    if (strcmp(ext, ".h5") && strcmp(ext, ".hdf5") && strcmp(ext, ".he5"))
        return 0;
    return stk_path_is_file(path);
}

const stk_reader stk_reader_hdf5 = {
    "hdf5", "hdf5:FILE[?images=/DATASET&labels=/DATASET]",
    "HDF5 (h5py): uint8 images (N,H,W[,C]) or variable-length uint8 encoded images, int labels "
    "(N,)",
    stk_h5_open, NULL, stk_h5_detect, NULL, "*.h5, *.hdf5 or *.he5 (HDF5)"};
