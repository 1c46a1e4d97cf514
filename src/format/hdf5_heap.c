/*
 * hdf5_heap.c — variable-length uint8 elements and the HDF5 global heap,
 * parsed without libhdf5 (the hot-path half of the hdf5: reader, hdf5.c).
 *
 * A dataset of variable-length sequences (h5py.vlen_dtype(np.uint8)) does
 * not hold its bytes: each raw element of the dataset (HDF5 file format
 * specification, "Variable-length" datatype; "Global Heap") is
 *
 *   length        uint32 LE     items in the sequence (bytes, for uint8)
 *   collection    sizeof_addr   address of a global heap collection,
 *                               relative to the file's base address
 *   object index  uint32 LE     which object of that collection
 *
 * and a global heap collection is
 *
 *   "GCOL" version(1) reserved(3) collection size (sizeof_lengths, the
 *   whole collection, header included), then objects:
 *     heap object index uint16 (0: the free space, which ends the list),
 *     reference count uint16, reserved uint32, object size
 *     (sizeof_lengths), the object's bytes padded to a multiple of 8.
 *
 * How it works. The (collection, index, record) triples of the elements are
 * sorted by collection and index, so each collection is parsed exactly once
 * however many records point into it: its header is checked (inside the
 * file, signature, version, a size that fits the header and the file), its
 * object list walked with every size checked against the collection's end,
 * the objects sorted by index and merged with the records that point at
 * it. A record whose element's length differs from its object's size is
 * refused (HDF5 writes the object at exactly length bytes). Cost: one sort
 * of n triples and one pass over each collection's object headers.
 *
 * Damage never fails the call: each record that cannot be served keeps the
 * reason (and the collection it pointed at) in its entry, and the reader
 * reports it as that record's STK_EDATA when it is read, so on_error=skip
 * skips exactly the damaged records.
 */
#include "format/hdf5_heap.h"

#include "core/error.h"
#include "core/util.h"

#include <stdlib.h>
#include <string.h>

#define GCOL_HEADER_FIXED 8u /* "GCOL", version, 3 reserved */

/* Little-endian unsigned of `n` (2, 4 or 8) bytes. */
static uint64_t h5_rd(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = n; i-- > 0;)
        v = v << 8 | p[i];
    return v;
}

typedef struct h5_ref {
    uint64_t addr;   /* collection address, relative to the base */
    uint32_t index;  /* heap object index */
    uint32_t length; /* the element's length */
    uint64_t record;
} h5_ref;

typedef struct h5_obj {
    uint64_t off;  /* absolute file offset of the object's bytes */
    uint64_t size;
    uint32_t index;
} h5_obj;

static int cmp_ref(const void *a, const void *b)
{
    const h5_ref *x = a, *y = b;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    if (x->index != y->index)
        return x->index < y->index ? -1 : 1;
    return x->record < y->record ? -1 : x->record > y->record;
}

static int cmp_obj(const void *a, const void *b)
{
    const h5_obj *x = a, *y = b;
    return x->index < y->index ? -1 : x->index > y->index;
}

const char *stk_h5_heap_reason(uint32_t err)
{
    switch (err) {
    case STK_H5_OK: return "no error";
    case STK_H5_EMPTY: return "the element is an empty array (length 0)";
    case STK_H5_COLL_EOF:
        return "its global heap collection lies past the end of the file (truncated?)";
    case STK_H5_COLL_SIG: return "no global heap collection there (no \"GCOL\" signature)";
    case STK_H5_COLL_VER: return "the global heap collection has a version other than 1";
    case STK_H5_COLL_SIZE:
        return "the global heap collection's size is too small or runs past the end of the "
               "file (truncated?)";
    case STK_H5_NOT_FOUND: return "the global heap collection holds no object with its index";
    case STK_H5_OBJ_SIZE:
        return "the global heap collection is corrupt: an object's size runs past the "
               "collection's end before its object was found";
    case STK_H5_LENGTH:
        return "the element's length disagrees with the size of its global heap object";
    case STK_H5_TOO_BIG: return "its global heap object is larger than the record limit";
    default: return "unknown damage";
    }
}

/* Parse the collection at relative address `addr` into *objs (grown as
 * needed). Returns an STK_H5_* code for the whole collection (0 when its
 * header is good); *corrupt is set when the object walk stopped at a bad
 * object (the objects before it are listed). STK_ENOMEM (< 0) via stk_fail. */
static int h5_parse_collection(const uint8_t *file, uint64_t file_size, const stk_h5_geometry *g,
                               uint64_t addr, h5_obj **objs, size_t *nobj, size_t *cap,
                               int *corrupt)
{
    const unsigned L = g->sizeof_lengths;
    const uint64_t header = GCOL_HEADER_FIXED + L;
    uint64_t at, end, csize;
    *nobj = 0;
    *corrupt = 0;
    if (!stk_add_ok(g->base, addr, &at) || !stk_add_ok(at, header, &end) || end > file_size)
        return STK_H5_COLL_EOF;
    const uint8_t *c = file + at;
    if (memcmp(c, "GCOL", 4) != 0)
        return STK_H5_COLL_SIG;
    if (c[4] != 1)
        return STK_H5_COLL_VER;
    csize = h5_rd(c + 8, L);
    if (csize < header || csize > file_size - at)
        return STK_H5_COLL_SIZE;
    uint64_t pos = header;
    /* Each object needs an 8 + L byte header; the free-space object (index
     * 0) ends the list, and so does a tail too short for another header. */
    while (csize - pos >= 8u + L) {
        const uint8_t *o = c + pos;
        uint32_t index = (uint32_t)h5_rd(o, 2);
        if (index == 0)
            break;
        uint64_t size = h5_rd(o + 8, L);
        uint64_t data = pos + 8 + L;
        if (size > csize - data) {
            *corrupt = 1;
            break;
        }
        if (*nobj == *cap) {
            size_t ncap = *cap ? *cap * 2 : 64;
            h5_obj *p = realloc(*objs, ncap * sizeof *p);
            if (!p)
                return stk_fail(STK_ENOMEM, "out of memory parsing an HDF5 global heap");
            *objs = p;
            *cap = ncap;
        }
        (*objs)[(*nobj)++] = (h5_obj){at + data, size, index};
        uint64_t padded = (size + 7) & ~(uint64_t)7; /* size <= csize < 2^64 - 7 */
        if (padded >= csize - data)
            break; /* the object ends the collection */
        pos = data + padded;
    }
    if (*nobj > 1)
        qsort(*objs, *nobj, sizeof **objs, cmp_obj);
    return 0;
}

int stk_h5_heap_index(const uint8_t *file, uint64_t file_size, const stk_h5_geometry *g,
                      const uint8_t *elems, uint64_t n, uint64_t max_record,
                      stk_h5_entry *entries)
{
    const unsigned A = g->sizeof_addr, L = g->sizeof_lengths;
    const unsigned esize = 8u + A;
    h5_ref *refs = NULL;
    h5_obj *objs = NULL;
    size_t nobj = 0, cap = 0, nref = 0;
    int rc = 0;

    if ((A != 2 && A != 4 && A != 8) || (L != 2 && L != 4 && L != 8))
        return stk_fail(STK_EINVAL, "HDF5 global heap: sizes of addresses %u and lengths %u "
                                    "(2, 4 or 8 expected)", A, L);
    if (n > SIZE_MAX / sizeof *refs)
        return stk_fail(STK_ENOMEM, "out of memory for %llu HDF5 heap references",
                        (unsigned long long)n);
    if (n && !(refs = malloc((size_t)n * sizeof *refs)))
        return stk_fail(STK_ENOMEM, "out of memory for %llu HDF5 heap references",
                        (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *e = elems + i * esize;
        uint32_t length = (uint32_t)h5_rd(e, 4);
        uint64_t addr = h5_rd(e + 4, A);
        uint32_t index = (uint32_t)h5_rd(e + 4 + A, 4);
        entries[i] = (stk_h5_entry){0, 0, STK_H5_OK};
        if (length == 0) {
            entries[i] = (stk_h5_entry){0, 0, STK_H5_EMPTY};
            continue;
        }
        refs[nref++] = (h5_ref){addr, index, length, i};
    }
    if (nref > 1)
        qsort(refs, nref, sizeof *refs, cmp_ref);

    for (size_t r = 0; r < nref;) {
        uint64_t addr = refs[r].addr, abs_addr;
        size_t group_end = r;
        while (group_end < nref && refs[group_end].addr == addr)
            group_end++;
        int corrupt = 0;
        int cerr = h5_parse_collection(file, file_size, g, addr, &objs, &nobj, &cap, &corrupt);
        if (cerr < 0) {
            rc = cerr;
            goto out;
        }
        if (!stk_add_ok(g->base, addr, &abs_addr))
            abs_addr = UINT64_MAX;
        size_t o = 0;
        for (; r < group_end; r++) {
            const h5_ref *ref = &refs[r];
            stk_h5_entry *en = &entries[ref->record];
            uint32_t err = (uint32_t)cerr;
            if (!err) {
                while (o < nobj && objs[o].index < ref->index)
                    o++;
                if (o == nobj || objs[o].index != ref->index)
                    err = corrupt ? STK_H5_OBJ_SIZE : STK_H5_NOT_FOUND;
                else if (objs[o].size != ref->length)
                    err = STK_H5_LENGTH;
                else if (objs[o].size > max_record || objs[o].size > UINT32_MAX)
                    err = STK_H5_TOO_BIG;
            }
            if (err)
                *en = (stk_h5_entry){abs_addr, ref->index, err};
            else
                *en = (stk_h5_entry){objs[o].off, (uint32_t)objs[o].size, STK_H5_OK};
        }
    }
out:
    free(refs);
    free(objs);
    return rc;
}
