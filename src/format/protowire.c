/*
 * protowire.c — the protocol buffers wire format, read with every length
 * checked (see protowire.h for the grammar and the rules).
 */
#include "format/protowire.h"

#include "core/error.h"

#include <string.h>

int stk_pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v, const char **why)
{
    const uint8_t *q = *p;
    uint64_t x = 0;
    for (unsigned shift = 0; shift < 70; shift += 7) {
        if (q >= end) {
            *why = "a varint runs past the end of the message";
            return STK_EDATA;
        }
        uint8_t b = *q++;
        if (shift == 63 && b > 1) {
            *why = "a varint overflows 64 bits";
            return STK_EDATA;
        }
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *p = q;
            *v = x;
            return 0;
        }
    }
    *why = "a varint is longer than 10 bytes";
    return STK_EDATA;
}

static uint64_t load_le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int stk_pb_next(stk_pb *c, stk_pb_field *f, const char **why)
{
    uint64_t tag, len;
    memset(f, 0, sizeof *f);
    if (c->p >= c->end)
        return 0;
    f->offset = (size_t)(c->p - c->start);
    if (stk_pb_varint(&c->p, c->end, &tag, why) < 0)
        return STK_EDATA;
    if ((tag >> 3) == 0 || (tag >> 3) > 0x1fffffff) {
        *why = "a field number is 0 or too large";
        return STK_EDATA;
    }
    f->number = (uint32_t)(tag >> 3);
    f->wire = (uint32_t)(tag & 7);
    switch (f->wire) {
    case STK_PB_VARINT:
        return stk_pb_varint(&c->p, c->end, &f->value, why) < 0 ? STK_EDATA : 1;
    case STK_PB_FIXED64:
    case STK_PB_FIXED32: {
        unsigned n = f->wire == STK_PB_FIXED64 ? 8 : 4;
        if ((size_t)(c->end - c->p) < n) {
            *why = "a fixed-size value runs past the end of the message";
            return STK_EDATA;
        }
        f->value = load_le(c->p, n);
        c->p += n;
        return 1;
    }
    case STK_PB_BYTES:
        if (stk_pb_varint(&c->p, c->end, &len, why) < 0)
            return STK_EDATA;
        if (len > (uint64_t)(c->end - c->p)) {
            *why = "a length runs past the end of the message";
            return STK_EDATA;
        }
        f->data = c->p;
        f->size = (size_t)len;
        c->p += len;
        return 1;
    case 3:
    case 4:
        *why = "a group (wire type 3/4), which these messages never hold";
        return STK_EDATA;
    default:
        *why = "an unknown wire type (6 or 7)";
        return STK_EDATA;
    }
}
