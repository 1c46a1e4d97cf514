/*
 * codec_table.h — the codec table's queries (codec_table.c) for the
 * dispatcher (codec_dispatch.c): which codec's magic bytes the input starts with,
 * the row of a format id, and the explanations for bytes no codec takes.
 *
 * Only the dispatcher includes this header; the codecs never do (each one
 * defines its row with the type in codec_internal.h). The public lookups
 * built on the same table — stk_image_sniff, stk_image_format_name,
 * stk_image_format_scales, stk_image_format_names — are declared in codec.h.
 */
#ifndef STK_CODEC_CODEC_TABLE_H
#define STK_CODEC_CODEC_TABLE_H

#include "codec/codec_internal.h"

/* The row whose magic bytes `data` starts with; NULL for none (or NULL
 * data). The rows are static: the pointer stays valid forever. */
const stk_codec_desc *stk_codec_sniff(const uint8_t *data, size_t size);

/* The row of format `f`; NULL for STK_IMAGE_UNKNOWN or an id no row has. */
const stk_codec_desc *stk_codec_of(stk_image_format f);

/* For bytes no row's sniff took (`data` non-NULL, `size` >= 1): the first
 * row's near_miss error, in table order; 0 when none speaks up. */
int stk_codec_near_miss(const uint8_t *data, size_t size);

/* The name of a format known by sight only to say why it is refused
 * ("BigTIFF", "PNM"), or NULL. */
const char *stk_codec_unsupported(const uint8_t *data, size_t size);

#endif
