/*
 * decode_dump.c — decode one image file with stoker's codec (src/codec/) and
 * write the pixels as a binary PPM (P6) to stdout, or time the decode.
 *
 *   decode_dump FILE [--region X,Y,W,H] [--scale D] [--probe]
 *   decode_dump FILE [--region X,Y,W,H] [--scale D] --time N
 *
 * The codec is internal to the library (not exported), so the Python tests
 * (tests/python/test_codec_pil.py) drive it through this program to compare
 * it with PIL: the PPM header carries the output width and height. --probe
 * prints "FORMAT WIDTH HEIGHT COMPONENTS PROGRESSIVE CMYK" instead. --time
 * decodes N times (after one warm-up decode, reusing one scratch buffer, as
 * a loader thread does) and prints milliseconds per decode to stdout.
 *
 * On a decode failure it prints "decode_dump: CODE: MESSAGE" to stderr and
 * exits 2 (1 for usage and I/O errors), so tests can match the message.
 */
#include "codec/codec.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: decode_dump FILE [--region X,Y,W,H] [--scale D] "
                    "[--probe | --time N]\n");
    return 1;
}

static uint8_t *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    size_t cap = 0, len = 0;
    if (!f) {
        perror(path);
        return NULL;
    }
    for (;;) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 65536;
            uint8_t *p = realloc(buf, ncap);
            if (!p) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = p;
            cap = ncap;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    fclose(f);
    *n = len;
    return buf;
}

int main(int argc, char **argv)
{
    stk_rect region, *rp = NULL;
    unsigned scale = 1;
    long repeat = 0;
    int probe = 0, rc, status = 1;
    stk_scratch scratch = {0};
    stk_image_view v;
    uint8_t *data;
    size_t size = 0;

    if (argc < 2)
        return usage();
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--region") == 0 && i + 1 < argc) {
            if (sscanf(argv[++i], "%u,%u,%u,%u", &region.x, &region.y, &region.width,
                       &region.height) != 4)
                return usage();
            rp = &region;
        } else if (strcmp(argv[i], "--scale") == 0 && i + 1 < argc) {
            scale = (unsigned)strtoul(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--time") == 0 && i + 1 < argc) {
            repeat = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--probe") == 0) {
            probe = 1;
        } else {
            return usage();
        }
    }
    data = read_file(argv[1], &size);
    if (!data && size)
        return 1;

    if (probe) {
        stk_image_info info;
        rc = stk_image_probe(data, size, NULL, &info);
        if (rc) {
            fprintf(stderr, "decode_dump: %s: %s\n", stk_strerror(rc), stk_errmsg());
            status = 2;
            goto out;
        }
        printf("%s %u %u %u %d %d\n", stk_image_format_name(info.format), info.width,
               info.height, info.components, info.progressive, info.cmyk);
        status = 0;
        goto out;
    }

    rc = stk_image_decode(data, size, NULL, rp, scale, &scratch, &v);
    if (rc) {
        fprintf(stderr, "decode_dump: %s: %s\n", stk_strerror(rc), stk_errmsg());
        status = 2;
        goto out;
    }
    if (repeat > 0) {
        double t0 = stk_now();
        for (long i = 0; i < repeat; i++) {
            rc = stk_image_decode(data, size, NULL, rp, scale, &scratch, &v);
            if (rc) {
                fprintf(stderr, "decode_dump: %s: %s\n", stk_strerror(rc), stk_errmsg());
                status = 2;
                goto out;
            }
        }
        printf("%.4f ms per decode (%ux%u output, %ld decodes)\n",
               (stk_now() - t0) * 1e3 / (double)repeat, v.width, v.height, repeat);
        status = 0;
        goto out;
    }

    printf("P6\n%u %u\n255\n", v.width, v.height);
    for (uint32_t y = 0; y < v.height; y++) {
        const uint8_t *row = v.pixels + (ptrdiff_t)y * v.row_stride;
        if (v.col_stride == 3 && v.chan_stride == 1) {
            fwrite(row, 1, (size_t)v.width * 3, stdout);
        } else {
            for (uint32_t x = 0; x < v.width; x++)
                for (uint32_t c = 0; c < 3; c++)
                    putchar(row[(ptrdiff_t)x * v.col_stride + (ptrdiff_t)c * v.chan_stride]);
        }
    }
    status = fflush(stdout) == 0 ? 0 : 1;

out:
    stk_scratch_free(&scratch);
    free(data);
    return status;
}
