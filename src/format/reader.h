/*
 * reader.h — a row of the reader table, stk_reader: how stk_dataset_open
 * finds a reader (internal).
 *
 * Each reader defines its row, `const stk_reader stk_reader_NAME`, at the
 * end of its own file; reader_table.c lists them; the dispatcher, dataset.c,
 * reads them through reader_table.h. The type sits in this header of its
 * own, below all three and using only the public types, so that the table
 * and the dispatcher share it without including each other's headers
 * (docs/layers.md, "Include circles"). dataset.h includes it for the
 * readers.
 */
#ifndef STK_FORMAT_READER_H
#define STK_FORMAT_READER_H

#include "stoker/stoker.h"

/*
 * A URI "PREFIX:PATH[?QUERY]" goes to `open` with PATH and QUERY split
 * (query NULL without '?'); a bare path goes to the first row, in table
 * order, whose `detect` says yes, then to `open_detected` (or `open`).
 * `form` and `description` feed stk_dataset_reader (the CLI's help); the
 * detect texts feed the "looked for ..." messages. All static.
 */
typedef struct stk_reader {
    const char *prefix;      /* "cifar10": matched as "cifar10:" */
    const char *form;        /* "cifar10:PATH[?split=train|test]": with its query keys */
    const char *description; /* one line */
    int (*open)(const char *uri, const char *path, const char *query,
                const stk_dataset_options *opts, stk_dataset **out);
    /* Optional: a detected bare path opens differently from PREFIX:PATH. */
    int (*open_detected)(const char *uri, const char *path, const char *query,
                         const stk_dataset_options *opts, stk_dataset **out);
    /* Optional: 1 when bare `path` (file, directory or pattern; it may not
     * exist) is this format, 0 when not, or a negative code via stk_fail. */
    int (*detect)(const char *path);
    const char *detect_dir_text;  /* what detect looks for in a directory, or NULL */
    const char *detect_file_text; /* the file names it recognises, or NULL */
} stk_reader;

#endif
