/*
 * reader_table.c — THE reader table: every reader stk_dataset_open knows,
 * one row each, and the two calls that look it up (reader_table.h).
 *
 * A reader is one file that defines its row, a `const stk_reader
 * stk_reader_NAME` (reader.h: prefix, URI form, description, open, detect
 * and the texts of the "looked for ..." messages), at its end. This file
 * holds nothing but the list of those names, STK_READERS, expanded twice:
 * once into their declarations, once into the table. So adding a reader is
 * its file plus one row here (docs/datasets.md, "Adding a reader").
 *
 * The dispatcher, dataset.c, matches a URI's "PREFIX:" exactly against the
 * rows' prefixes, and for a bare path asks the rows that have a detect
 * hook in this order, first yes wins. So the order matters for detection:
 * the specific layouts (.stk, CIFAR, IDX and MNIST) first, then the formats
 * known by their files, the catch-all image folder last. A row without a
 * detect hook (fashion-mnist, list) is found by its prefix only; where it
 * sits only decides where it appears in the prefix lists of the messages
 * and in stk_dataset_reader (the CLI's help).
 *
 * No include circle (scripts/check_circles.py): dataset.c includes
 * reader_table.h (the lookup) and knows no reader by name; this file
 * declares the readers' rows itself; a reader includes dataset.h (the
 * interface it implements) and neither of these; the row's type is in
 * reader.h, below the table and the dispatcher both. The in-memory and
 * callback readers have no row: they are made by their own public calls
 * (memory.c, callback.c), not opened by URI.
 */
#include "format/reader_table.h"

#include <string.h>

/* One row per reader, in detection order: X(NAME) for stk_reader_NAME. */
#define STK_READERS(X)                                                                           \
    X(stk)           /* stk_dataset.c: *.stk shards */                                           \
    X(cifar10)       /* cifar.c */                                                               \
    X(cifar100)      /* cifar.c */                                                               \
    X(idx)           /* idx.c */                                                                 \
    X(mnist)         /* idx.c: the MNIST directory layout */                                     \
    X(fashion_mnist) /* idx.c: prefix only */                                                    \
    X(npy)           /* npy.c */                                                                 \
    X(zarr)          /* zarr.c */                                                                \
    X(tfrecord)      /* tfrecord.c */                                                            \
    X(wds)           /* wds.c */                                                                 \
    X(webdataset)    /* wds.c: the same reader under a second prefix */                         \
    X(lmdb)          /* lmdb.c */                                                                \
    X(recordio)      /* recordio.c */                                                            \
    X(hdf5)          /* hdf5.c */                                                                \
    X(coco)          /* coco.c */                                                                \
    X(segfolder)     /* segfolder.c */                                                           \
    X(imagefolder)   /* imagefolder.c: the catch-all of a bare directory, last to detect */     \
    X(list)          /* imagefolder.c: prefix only */

#define STK_READER_DECLARE(name) extern const stk_reader stk_reader_##name;
#define STK_READER_ROW(name) &stk_reader_##name,

STK_READERS(STK_READER_DECLARE)

static const stk_reader *const stk_readers[] = {STK_READERS(STK_READER_ROW)};

#define STK_NREADERS (sizeof stk_readers / sizeof stk_readers[0])

const stk_reader *stk_reader_at(size_t i)
{
    return i < STK_NREADERS ? stk_readers[i] : NULL;
}

const stk_reader *stk_reader_find(const char *prefix, size_t len)
{
    for (size_t i = 0; i < STK_NREADERS; i++)
        if (strncmp(stk_readers[i]->prefix, prefix, len) == 0 && stk_readers[i]->prefix[len] == '\0')
            return stk_readers[i];
    return NULL;
}
