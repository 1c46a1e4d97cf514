/*
 * pack_upload.h — stk_pack into an object store (internal; pack_upload.c).
 */
#ifndef STK_TOOLS_PACK_UPLOAD_H
#define STK_TOOLS_PACK_UPLOAD_H

#include "stoker/stoker.h"

/* stk_pack with an s3:// destination: pack into a local staging folder,
 * then upload every shard (multipart for large ones) under the prefix. */
int stk_pack_remote(const char *src, const char *dest, const stk_pack_options *opts,
                    stk_pack_result *result);

#endif
