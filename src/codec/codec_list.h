/*
 * codec_list.h — the list of codecs, one row each: the one line a new codec
 * adds (internal).
 *
 * STK_CODECS(X) calls X(ID, name) once per codec, in the order of its
 * pinned format id: codec.h makes the ids from it (STK_IMAGE_<ID> = its
 * position, counting from 1: the value of a format never changes, so a
 * new codec goes last), and codec_table.c the table of rows (the
 * `stk_codec_<name>` each codec's file defines at its end). This header
 * includes nothing and is included by those two only, so the list is the
 * single place a codec is named; the codecs include neither.
 *
 * To add a codec NAME: write src/codec/NAME.c (its hooks static, its row
 * `const stk_codec_desc stk_codec_NAME` at the end, `.format =
 * STK_IMAGE_<ID>`) and append `X(ID, NAME)` below. docs/codec.md,
 * "Adding a codec".
 */
#ifndef STK_CODEC_CODEC_LIST_H
#define STK_CODEC_CODEC_LIST_H

#define STK_CODECS(X)                                                                          \
    X(JPEG, jpeg) /* 1: libjpeg-turbo */                                                       \
    X(PNG, png)   /* 2: libspng */                                                             \
    X(WEBP, webp) /* 3: libwebp */                                                             \
    X(BMP, bmp)   /* 4: bmp.c's own parser */                                                  \
    X(TIFF, tiff) /* 5: libtiff, first page */                                                 \
    X(GIF, gif)   /* 6: giflib, first frame */                                                 \
    /* one line per codec above, appended: this comment ends the list */

#endif /* STK_CODEC_CODEC_LIST_H */
