/*
 * protowire.h — reading the protocol buffers wire format (internal).
 *
 * Two readers hold protobuf messages: TFRecord files carry tf.train.Example
 * messages, and Caffe's LMDB sets carry Datum messages. Neither needs a
 * schema compiler: both messages are a handful of fields, and the wire
 * format is small enough to read directly
 * (https://protobuf.dev/programming-guides/encoding/):
 *
 *   message  := field*
 *   field    := tag value
 *   tag      := varint, (field_number << 3) | wire_type
 *   value    := varint                       wire type 0 (int32/64, bool, enum)
 *             | 8 bytes little-endian        wire type 1 (fixed64, double)
 *             | varint length, that many bytes  wire type 2 (bytes, string,
 *                                              sub-message, packed repeated)
 *             | 4 bytes little-endian        wire type 5 (fixed32, float)
 *
 * Wire types 3 and 4 (groups) were deprecated before either message was
 * written and are refused, as are field number 0, a varint longer than 10
 * bytes, and any value running past the end of its message: every length is
 * checked against the bytes that remain before it is used, so a cursor
 * never reads outside [p, end).
 *
 * A reader walks a message with stk_pb_next and keeps the fields it knows,
 * skipping the others (protobuf's rule for unknown fields). On malformed
 * input stk_pb_next returns STK_EDATA without calling stk_fail, and sets
 * *why to a static reason ("a length runs past the end of the message") and
 * field->offset to the byte where the bad field starts: the caller words
 * the message, naming its file and record.
 *
 * Thread safety: no state outside the cursor.
 */
#ifndef STK_FORMAT_PROTOWIRE_H
#define STK_FORMAT_PROTOWIRE_H

#include <stddef.h>
#include <stdint.h>

enum {
    STK_PB_VARINT = 0,
    STK_PB_FIXED64 = 1,
    STK_PB_BYTES = 2,
    STK_PB_FIXED32 = 5,
};

/* A cursor over one message: [p, end); `start` is where the message began
 * (for offsets in messages). */
typedef struct stk_pb {
    const uint8_t *start, *p, *end;
} stk_pb;

typedef struct stk_pb_field {
    uint32_t number;      /* field number, >= 1 */
    uint32_t wire;        /* STK_PB_* */
    uint64_t value;       /* varint, fixed64 or fixed32 value (0 for bytes) */
    const uint8_t *data;  /* STK_PB_BYTES: the bytes, lent from the message */
    size_t size;          /* STK_PB_BYTES: their length */
    size_t offset;        /* where the field's tag starts, from start */
} stk_pb_field;

static inline stk_pb stk_pb_init(const uint8_t *data, size_t size)
{
    stk_pb c = {data, data, data + size};
    return c;
}

/* The next field: 1 with *f filled, 0 at the end of the message, STK_EDATA
 * on malformed input with *why set (no stk_fail). */
int stk_pb_next(stk_pb *c, stk_pb_field *f, const char **why);

/* One varint at *p (< end), advancing *p: 0, or STK_EDATA (truncated, or
 * longer than 10 bytes) with *why set. For packed repeated fields. */
int stk_pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v, const char **why);

#endif
