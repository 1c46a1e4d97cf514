/*
 * codec_table.c — the codec table: every image format stoker decodes, one
 * line each in STK_CODECS (codec_list.h), and the lookups over it.
 *
 * The list of codecs is STK_CODECS in codec_list.h (one line each, which
 * also gives each its pinned format id in codec.h). A row is a `const
 * stk_codec_desc stk_codec_NAME` (codec_internal.h says
 * what it holds: format id, name, sniff, probe, decode, mask decode, near
 * miss, scales), defined at the end of the codec's own file, beside the
 * code it points at. This file only lists the rows; the dispatcher
 * (codec_dispatch.c) reaches every codec through the queries here
 * (codec_table.h) and names none. The codecs include neither this file's
 * header nor the dispatcher's, so nothing points back up.
 *
 * The order is the order of the names in messages ("not a JPEG, PNG, WebP,
 * BMP, TIFF or GIF image") and the order in which sniffs are tried; the
 * magics are disjoint, so it changes no decision.
 *
 * To add a codec NAME: write src/codec/NAME.c, its hooks static and its
 * row `const stk_codec_desc stk_codec_NAME` at the end; append `X(ID, NAME)`
 * to codec_list.h, which gives it its id too. (A codec on a library also
 * needs the library found in CMakeLists.txt; the sources are globbed.)
 *
 * Also here: the formats known by sight only, so that a sample of one is
 * refused with its name instead of as unknown bytes (docs/codec.md).
 *
 * Thread safety: everything is constant; every query may run on any thread.
 */
#include "codec/codec_table.h"
#include "codec/codec_list.h"

#include <stdio.h>
#include <string.h>

#define STK_CODEC_DECLARE(id, name) extern const stk_codec_desc stk_codec_##name;
#define STK_CODEC_ROW(id, name) &stk_codec_##name,

STK_CODECS(STK_CODEC_DECLARE)

static const stk_codec_desc *const stk_codec_table[] = {STK_CODECS(STK_CODEC_ROW)};

enum { STK_CODEC_COUNT = (int)(sizeof stk_codec_table / sizeof stk_codec_table[0]) };

const stk_codec_desc *stk_codec_sniff(const uint8_t *data, size_t size)
{
    if (!data)
        return NULL;
    for (int i = 0; i < STK_CODEC_COUNT; i++)
        if (stk_codec_table[i]->sniff(data, size))
            return stk_codec_table[i];
    return NULL;
}

const stk_codec_desc *stk_codec_of(stk_image_format f)
{
    for (int i = 0; i < STK_CODEC_COUNT; i++)
        if (stk_codec_table[i]->format == f)
            return stk_codec_table[i];
    return NULL;
}

int stk_codec_near_miss(const uint8_t *data, size_t size)
{
    for (int i = 0; i < STK_CODEC_COUNT; i++) {
        int rc = stk_codec_table[i]->near_miss ? stk_codec_table[i]->near_miss(data, size) : 0;
        if (rc)
            return rc;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The public lookups (codec.h)                                             */
/* ------------------------------------------------------------------------ */

stk_image_format stk_image_sniff(const uint8_t *data, size_t size)
{
    const stk_codec_desc *c = stk_codec_sniff(data, size);
    return c ? c->format : STK_IMAGE_UNKNOWN;
}

const char *stk_image_format_name(stk_image_format f)
{
    const stk_codec_desc *c = stk_codec_of(f);
    return c ? c->name : "unknown";
}

unsigned stk_image_format_scales(stk_image_format f)
{
    const stk_codec_desc *c = stk_codec_of(f);
    return c ? c->scales : 0;
}

const char *stk_image_format_names(char *buf, size_t cap, const char *last)
{
    size_t at = 0;
    if (cap == 0)
        return buf;
    buf[0] = '\0';
    for (int i = 0; i < STK_CODEC_COUNT; i++) {
        const char *name = stk_codec_table[i]->name;
        int n;
        if (i == 0)
            n = snprintf(buf + at, cap - at, "%s", name);
        else if (i + 1 < STK_CODEC_COUNT)
            n = snprintf(buf + at, cap - at, ", %s", name);
        else
            n = snprintf(buf + at, cap - at, " %s %s", last, name);
        if (n < 0 || (size_t)n >= cap - at)
            break; /* cut: snprintf has terminated it */
        at += (size_t)n;
    }
    return buf;
}

/* ------------------------------------------------------------------------ */
/* Formats known by sight only                                              */
/* ------------------------------------------------------------------------ */

static int stk_sniff_bigtiff(const uint8_t *d, size_t n)
{
    return n >= 4 && (memcmp(d, "II+\0", 4) == 0 || memcmp(d, "MM\0+", 4) == 0);
}

static int stk_sniff_pnm(const uint8_t *d, size_t n)
{
    return n >= 2 && d[0] == 'P' && d[1] >= '1' && d[1] <= '7';
}

static const struct {
    const char *name;
    int (*sniff)(const uint8_t *data, size_t size);
} stk_codec_refused[] = {
    {"BigTIFF", stk_sniff_bigtiff},
    {"PNM", stk_sniff_pnm},
};

const char *stk_codec_unsupported(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i < sizeof stk_codec_refused / sizeof stk_codec_refused[0]; i++)
        if (stk_codec_refused[i].sniff(data, size))
            return stk_codec_refused[i].name;
    return NULL;
}
