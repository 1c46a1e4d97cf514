/*
 * class_names.h — the `class_names` metadata value of .stk shards (the
 * label map), encoded so that any class name survives (internal).
 * The encoding is specified in docs/format.md ("The label map").
 */
#ifndef STK_FORMAT_CLASS_NAMES_H
#define STK_FORMAT_CLASS_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The value for names[0..n): a new malloc'd NUL-terminated UTF-8 string
 * without control characters, or NULL (STK_ENOMEM set via stk_fail). */
char *stk_class_names_encode(char *const *names, uint32_t n);

/* Split and unescape `value` into *names: a malloc'd array of *n malloc'd
 * NUL-terminated names (label i = names[i]). 0, or STK_ENOMEM / STK_ELIMIT
 * via stk_fail (nothing to free then). */
int stk_class_names_decode(const char *value, char ***names, uint32_t *n);

/* Is data[0, n) well-formed UTF-8 (Unicode table 3-7: no overlong forms,
 * surrogates or code points past U+10FFFF)? */
bool stk_utf8_valid(const void *data, size_t n);

#endif
