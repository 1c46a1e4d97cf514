/*
 * reader_util.h — helpers shared by the dataset readers (internal).
 *
 * Two small things every reader needs and should do the same way (mapping
 * a data file, stk_map_file, now lives in the I/O layer, src/io/source.h,
 * and is included from here for the readers that use it):
 *
 *  - Parsing the `?key=value&key=value` query of a URI against a table of
 *    known keys and their allowed values. Unknown keys, unknown values,
 *    repeated keys and items without '=' are all STK_EINVAL with a message
 *    that names the offending text and lists what would have been accepted.
 *
 *  - Joining and testing paths, with allocation failures reported through
 *    stk_fail like everything else.
 */
#ifndef STK_FORMAT_READER_UTIL_H
#define STK_FORMAT_READER_UTIL_H

#include "io/source.h" /* stk_map_file, stk_mapped_file: moved to the I/O layer */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One key a URI query may carry. */
typedef struct stk_query_key {
    const char *name;          /* "split" (static) */
    const char *const *values; /* allowed values, NULL-terminated (static) */
    int value;                 /* out: index into values, -1 when absent */
} stk_query_key;

/* Parse `query` (the text after '?', may be NULL or empty) of `uri` against
 * keys[0..nkeys). `what` names the URI form in messages ("cifar10:").
 * Returns 0 or STK_EINVAL via stk_fail. */
int stk_query_parse(const char *uri, const char *what, const char *query,
                    stk_query_key *keys, size_t nkeys);

/* Parse `query` (may be NULL or empty) of `uri` whose keys take free-form
 * values (array or member names): keys[0..n) are the known keys; values[i]
 * gets a malloc'd copy of key i's value, or stays NULL when absent (the
 * caller frees them, on failure too). Unknown keys, repeated keys, empty
 * values and items without '=' are STK_EINVAL naming `what` and the URI. */
int stk_query_names(const char *uri, const char *what, const char *query,
                    const char *const *keys, char **values, size_t n);

/* "dir/name" in a new malloc'd string; NULL + STK_ENOMEM via stk_fail. */
char *stk_path_join(const char *dir, const char *name);
/* stat() follows links: true for an existing regular file / directory. */
bool stk_path_is_file(const char *path);
bool stk_path_is_dir(const char *path);
bool stk_path_exists(const char *path);
/* The part of `path` after its last '/' (a pointer into it). */
const char *stk_path_basename(const char *path);
/* 1 when dir/names[i] exists for some i < n, 0 when none does, STK_ENOMEM
 * (via stk_fail). The readers' detect hooks use it. */
int stk_dir_has_any(const char *dir, const char *const *names, size_t n);

/* True when p holds a glob character (* ? [). */
bool stk_path_has_glob(const char *p);
/* True when name ends in one of `suffixes` (NULL-terminated) and is longer
 * than it. */
bool stk_path_has_suffix(const char *name, const char *const *suffixes);

/* num_classes of a label table: the largest label + 1 when every label is
 * >= 0 (and that fits in 32 bits), else 0 (unknown). */
uint32_t stk_num_classes(const int64_t *labels, uint64_t n);

/* How stk_file_list names what it looks for, in its messages (static). */
typedef struct stk_file_list_words {
    const char *file;        /* "shard file": "no shard file matches this pattern" */
    const char *files;       /* "*.stk shard files": "no *.stk shard files in this directory" */
    const char *file_or_dir; /* "shard file or directory": "no such shard file or directory" */
} stk_file_list_words;

/* The files of a multi-file dataset named by `path`: a glob pattern (when
 * it holds * ? or [ and is not itself an existing path: every match), a
 * directory (its entries whose names end in one of `suffixes`,
 * NULL-terminated; not recursive), or one file (any name). Sorted by
 * strcmp, in a new NULL-terminated array of malloc'd strings (free with
 * stk_file_list_free). STK_ENOENT when nothing matches or the path does not
 * exist, STK_EIO when listing fails, STK_ENOMEM; messages name `path`. */
int stk_file_list(const char *path, const char *const *suffixes, const stk_file_list_words *words,
                  char ***out, uint32_t *count);
void stk_file_list_free(char **list, uint32_t n);

#endif
