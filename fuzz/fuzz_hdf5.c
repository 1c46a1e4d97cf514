/*
 * fuzz_hdf5.c — libFuzzer target for the bytes the hdf5: reader parses
 * itself (src/format/hdf5_heap.c): the raw elements of a variable-length
 * uint8 dataset and the global heap collections they point into.
 *
 * libhdf5, which the reader uses at open for the metadata, is not fuzzed
 * here: it is a system library with a history of crashes on hostile files
 * (CVE-2018-17237 ... CVE-2021-45830 and more against 1.10), which no
 * harness of ours can make safe; docs/datasets.md says that opening an
 * untrusted HDF5 file trusts libhdf5. What stoker does with the bytes
 * afterwards, on the hot path, is all in stk_h5_heap_index, fuzzed here.
 *
 * Input: a 24-byte header, then a file image.
 *
 *   0  u8   sizeof_addr    (2, 4 or 8 by value % 3)
 *   1  u8   sizeof_lengths (2, 4 or 8 by value % 3)
 *   2  u16  unused
 *   4  u32  n              elements (at most 4096)
 *   8  u64  base address   (as in a file with a user block)
 *  16  u64  offset of the n raw elements in the file image
 *
 * (fuzz/make_hdf5_corpus.py writes seeds from files h5py writes, with the
 * values libhdf5 reports.) Elements that do not fit the image are cut to
 * those that do, as the reader refuses the file at open otherwise. Every
 * entry the parser marks good is checked to lie inside the image and
 * every byte of it touched; every bad one must carry a known reason.
 */
#include "format/hdf5_heap.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_hdf5"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ELEMS 4096u
static volatile uint64_t g_sink;

static uint64_t rd_le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = n; i-- > 0;)
        v = v << 8 | p[i];
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const unsigned sizes[3] = {2, 4, 8};
    if (size < 24)
        return 0;
    stk_h5_geometry g = {sizes[data[0] % 3], sizes[data[1] % 3], rd_le(data + 8, 8)};
    uint64_t n = rd_le(data + 4, 4), off = rd_le(data + 16, 8);
    const uint8_t *file = data + 24;
    uint64_t fsize = size - 24;
    unsigned es = stk_h5_vlen_element_size(&g);
    if (n > MAX_ELEMS)
        n = MAX_ELEMS;
    if (off > fsize)
        return 0;
    if (n > (fsize - off) / es)
        n = (fsize - off) / es;
    stk_h5_entry *e = malloc((n ? n : 1) * sizeof *e);
    check(e != NULL, "malloc");
    int rc = stk_h5_heap_index(file, fsize, &g, file + off, n, 1u << 20, e);
    check(rc == 0, "stk_h5_heap_index failed on a valid geometry");
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (e[i].err) {
            check(e[i].err <= STK_H5_TOO_BIG, "unknown reason");
            check(strcmp(stk_h5_heap_reason(e[i].err), "unknown damage") != 0, "reason text");
            continue;
        }
        check(e[i].size > 0 && e[i].size <= (1u << 20), "record size");
        check(e[i].off <= fsize && e[i].size <= fsize - e[i].off, "record inside the file");
        for (uint32_t k = 0; k < e[i].size; k++)
            sum += file[e[i].off + k];
    }
    g_sink = sum;
    free(e);
    return 0;
}
