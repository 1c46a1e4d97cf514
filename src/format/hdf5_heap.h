/*
 * hdf5_heap.h — the part of the hdf5: reader that parses HDF5 bytes itself
 * (internal): the raw elements of a variable-length uint8 dataset and the
 * global heap collections they point into. hdf5.c calls it at open; the
 * fuzzer (fuzz/fuzz_hdf5.c) calls it on mutated bytes. It depends on
 * nothing of libhdf5, so both build without it.
 */
#ifndef STK_FORMAT_HDF5_HEAP_H
#define STK_FORMAT_HDF5_HEAP_H

#include <stddef.h>
#include <stdint.h>

/* Why a record cannot be served (stk_h5_entry.err); 0: it can. */
enum {
    STK_H5_OK = 0,
    STK_H5_EMPTY,      /* the element's length is 0 (an empty array) */
    STK_H5_COLL_EOF,   /* the collection's address lies past the end of the file */
    STK_H5_COLL_SIG,   /* no "GCOL" signature at the address */
    STK_H5_COLL_VER,   /* a collection version other than 1 */
    STK_H5_COLL_SIZE,  /* the collection's size is too small or runs past the file */
    STK_H5_NOT_FOUND,  /* no object with that index in the collection */
    STK_H5_OBJ_SIZE,   /* the object list is corrupt: an object runs past the collection */
    STK_H5_LENGTH,     /* the element's length disagrees with the object's size */
    STK_H5_TOO_BIG,    /* the object is larger than the record limit */
};

/* One record of a vlen dataset after open. err == 0: the record's bytes are
 * [off, off + size) of the file. err != 0: off is the absolute byte offset
 * of the global heap collection the record points at and size the heap
 * object index (for the message, stk_h5_heap_reason). */
typedef struct stk_h5_entry {
    uint64_t off;
    uint32_t size;
    uint32_t err;
} stk_h5_entry;

/* Geometry of the file, from its superblock (libhdf5 reports it). */
typedef struct stk_h5_geometry {
    unsigned sizeof_addr;    /* 2, 4 or 8 */
    unsigned sizeof_lengths; /* 2, 4 or 8 */
    uint64_t base;           /* base address: heap addresses are relative to it */
} stk_h5_geometry;

/* Size in bytes of one raw vlen element: length (4), heap collection
 * address (sizeof_addr), object index (4). */
static inline unsigned stk_h5_vlen_element_size(const stk_h5_geometry *g)
{
    return 8u + g->sizeof_addr;
}

/* Build entries[0..n) from the n raw elements at `elems` (n *
 * stk_h5_vlen_element_size bytes, inside or outside `file`), resolving
 * every heap ID against the collections in file[0..file_size). Each
 * collection is parsed once, every offset and size checked against the
 * collection and the file; a record that cannot be served gets its reason
 * in err (never a failure of the whole call). max_record: the largest
 * object served (bigger: STK_H5_TOO_BIG). Returns 0, or STK_ENOMEM /
 * STK_EINVAL (a bad geometry) via stk_fail. */
int stk_h5_heap_index(const uint8_t *file, uint64_t file_size, const stk_h5_geometry *g,
                      const uint8_t *elems, uint64_t n, uint64_t max_record,
                      stk_h5_entry *entries);

/* The reason text of err ("the global heap collection ... has no GCOL
 * signature"), static. */
const char *stk_h5_heap_reason(uint32_t err);

#endif
