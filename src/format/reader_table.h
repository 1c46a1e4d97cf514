/*
 * reader_table.h — the lookup of the reader table (internal).
 *
 * The one consumer is the dispatcher, dataset.c (stk_dataset_open and
 * stk_dataset_reader). It sees the table only through these two calls and
 * knows no reader by name; the table (reader_table.c) knows the readers
 * (it names them itself). No reader includes this header.
 */
#ifndef STK_FORMAT_READER_TABLE_H
#define STK_FORMAT_READER_TABLE_H

#include "format/reader.h"

#include <stddef.h>

/* Row i of the table (i = 0, 1, ...), in table order, which is the order
 * detection asks the rows in; NULL past the last. Static, thread-safe. */
const stk_reader *stk_reader_at(size_t i);

/* The row whose prefix is exactly prefix[0, len), or NULL. */
const stk_reader *stk_reader_find(const char *prefix, size_t len);

#endif
