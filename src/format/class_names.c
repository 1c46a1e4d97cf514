/*
 * class_names.c — encoding of the label map stored in a shard's metadata
 * under the key `class_names` (docs/format.md, "The label map").
 *
 * Class names come from directory names, and a directory name is any
 * sequence of bytes but '/' and NUL: it may hold a newline (which would
 * split one name into two and shift every later label) or bytes that are
 * not UTF-8 (which the metadata promises to be). So each name is written
 * with an escape: '\' as "\\", LF as "\n", every other control byte
 * (0x00-0x1F, 0x7F) and every byte that is not part of a well-formed UTF-8
 * sequence as "\xHH" (two lowercase hex digits); all else (printable ASCII
 * and well-formed UTF-8) as is. Names are joined by LF. The value is
 * therefore valid UTF-8, one name a line, and decoding gives back every
 * byte. A reader is lenient in one way: a backslash followed by anything
 * else (or by "x00") is kept as is, so shards written before the escape
 * existed still read the same unless a name held one of these sequences.
 *
 * Invariant: decode(encode(names)) == names for any names without NUL.
 */
#include "format/class_names.h"

#include "core/error.h"

#include <stdlib.h>
#include <string.h>

/* Length of the well-formed UTF-8 sequence at s[0..n) (Unicode table 3-7:
 * no overlong forms, no surrogates, nothing past U+10FFFF), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0], lo = 0x80, hi = 0xBF;
    size_t len;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

bool stk_utf8_valid(const void *data, size_t n)
{
    const unsigned char *s = data;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(s + i, n - i);
        if (!k)
            return false;
        i += k;
    }
    return true;
}

/* Encode one name into out (when not NULL); returns its encoded length. */
static size_t encode_name(const unsigned char *s, char *out)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = strlen((const char *)s), o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = s[i] >= 0x20 && s[i] != 0x7F ? utf8_seq(s + i, n - i) : 0;
        if (s[i] == '\\' || s[i] == '\n') {
            if (out) {
                out[o] = '\\';
                out[o + 1] = s[i] == '\n' ? 'n' : '\\';
            }
            o += 2;
            i++;
        } else if (k == 0) {
            if (out) {
                out[o] = '\\';
                out[o + 1] = 'x';
                out[o + 2] = hex[s[i] >> 4];
                out[o + 3] = hex[s[i] & 15];
            }
            o += 4;
            i++;
        } else {
            if (out)
                memcpy(out + o, s + i, k);
            o += k;
            i += k;
        }
    }
    return o;
}

char *stk_class_names_encode(char *const *names, uint32_t n)
{
    size_t total = 1;
    char *v, *at;
    for (uint32_t i = 0; i < n; i++) {
        size_t k = encode_name((const unsigned char *)names[i], NULL) + 1;
        if (k > SIZE_MAX - total) {
            stk_fail(STK_ENOMEM, "class names too long");
            return NULL;
        }
        total += k;
    }
    if (!(v = malloc(total))) {
        stk_fail(STK_ENOMEM, "out of memory encoding %u class names", n);
        return NULL;
    }
    at = v;
    for (uint32_t i = 0; i < n; i++) {
        at += encode_name((const unsigned char *)names[i], at);
        if (i + 1 < n)
            *at++ = '\n';
    }
    *at = '\0';
    return v;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Unescape line[0..len) into a new string. */
static char *decode_name(const char *line, size_t len)
{
    char *out = malloc(len + 1); /* decoding never grows */
    size_t o = 0;
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        if (line[i] == '\\' && i + 1 < len) {
            if (line[i + 1] == '\\' || line[i + 1] == 'n') {
                out[o++] = line[i + 1] == 'n' ? '\n' : '\\';
                i++;
                continue;
            }
            if (line[i + 1] == 'x' && i + 3 < len) {
                int h = hexval(line[i + 2]), l = hexval(line[i + 3]);
                if (h >= 0 && l >= 0 && (h | l)) {
                    out[o++] = (char)(h * 16 + l);
                    i += 3;
                    continue;
                }
            }
        }
        out[o++] = line[i];
    }
    out[o] = '\0';
    return out;
}

int stk_class_names_decode(const char *value, char ***names, uint32_t *n)
{
    uint64_t k = 1;
    const char *start = value;
    char **v;

    *names = NULL;
    *n = 0;
    for (const char *c = value; *c; c++)
        k += *c == '\n';
    if (k > UINT32_MAX)
        return stk_fail(STK_ELIMIT, "class_names: more than 2^32-1 names");
    if (!(v = calloc((size_t)k, sizeof *v)))
        return stk_fail(STK_ENOMEM, "out of memory reading %llu class names",
                        (unsigned long long)k);
    for (uint64_t i = 0; i < k; i++) {
        const char *end = strchr(start, '\n');
        size_t len = end ? (size_t)(end - start) : strlen(start);
        if (!(v[i] = decode_name(start, len))) {
            for (uint64_t j = 0; j < i; j++)
                free(v[j]);
            free(v);
            return stk_fail(STK_ENOMEM, "out of memory reading %llu class names",
                            (unsigned long long)k);
        }
        start = end ? end + 1 : start + len;
    }
    *names = v;
    *n = (uint32_t)k;
    return 0;
}
