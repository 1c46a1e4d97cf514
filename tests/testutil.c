/*
 * testutil.c — temp files and deterministic data for the C tests.
 */
#include "testutil.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <jpeglib.h>
#include <math.h>

const char *tu_tmpdir(void)
{
    static char dir[512];
    if (dir[0])
        return dir;
    const char *base = getenv("STK_TEST_TMP");
    if (!base || !*base)
        base = "/tmp";
    mkdir(base, 0700);
    snprintf(dir, sizeof dir, "%s/stk-test-XXXXXX", base);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        abort();
    }
    return dir;
}

const char *tu_path(const char *name)
{
    static char bufs[8][600];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", tu_tmpdir(), name);
    return b;
}

uint8_t *tu_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n ? *n : 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

void tu_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n)
        assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

void tu_write_gz(const char *path, const void *data, size_t n)
{
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    if (n)
        assert_int_equal(gzwrite(f, data, (unsigned)n), (int)n);
    assert_int_equal(gzclose(f), Z_OK);
}

void tu_fill_random(void *buf, size_t n, uint64_t seed)
{
    uint8_t *p = buf;
    uint64_t x = seed;
    for (size_t i = 0; i < n; i++) {
        x += 0x9E3779B97F4A7C15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        p[i] = (uint8_t)(z ^ (z >> 31));
    }
}

void tu_put(tu_buf *b, const void *p, size_t n)
{
    assert_true(b->n + n <= sizeof b->d);
    memcpy(b->d + b->n, p, n);
    b->n += n;
}

void tu_put_varint(tu_buf *b, uint64_t v)
{
    do {
        uint8_t c = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            c |= 0x80;
        tu_put(b, &c, 1);
    } while (v);
}

void tu_put_le(tu_buf *b, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) {
        uint8_t c = (uint8_t)(v >> (8 * i));
        tu_put(b, &c, 1);
    }
}

void tu_pb_varint(tu_buf *b, uint32_t field, int64_t v)
{
    tu_put_varint(b, (uint64_t)field << 3 | 0);
    tu_put_varint(b, (uint64_t)v);
}

void tu_pb_bytes(tu_buf *b, uint32_t field, const void *p, size_t n)
{
    tu_put_varint(b, (uint64_t)field << 3 | 2);
    tu_put_varint(b, n);
    tu_put(b, p, n);
}

void tu_run_free(tu_run *r)
{
    free(r->data);
    free(r->labels);
    free(r->indices);
    memset(r, 0, sizeof *r);
}

int tu_drain(stk_loader *l, tu_run *r, uint64_t max_batches)
{
    int rc = 0;
    stk_batch b;
    while ((max_batches == 0 || r->batches < max_batches) && (rc = stk_loader_next(l, &b)) == 1) {
        size_t bytes = (size_t)b.size * b.sample_bytes;
        assert_int_equal(b.shape[0], b.size);
        r->data = realloc(r->data, (size_t)r->rows * b.sample_bytes + bytes);
        r->labels = realloc(r->labels, (r->rows + b.size) * sizeof *r->labels);
        r->indices = realloc(r->indices, (r->rows + b.size) * sizeof *r->indices);
        assert_non_null(r->data);
        assert_non_null(r->labels);
        assert_non_null(r->indices);
        memcpy(r->data + r->rows * b.sample_bytes, b.data, bytes);
        memcpy(r->labels + r->rows, b.labels, b.size * sizeof *r->labels);
        memcpy(r->indices + r->rows, b.indices, b.size * sizeof *r->indices);
        if (r->batches < sizeof r->sizes / sizeof r->sizes[0])
            r->sizes[r->batches] = b.size;
        r->batches++;
        r->skipped += b.skipped;
        r->rows += b.size;
        assert_int_equal(stk_loader_release(l, &b), 0);
    }
    return max_batches && r->batches == max_batches ? 1 : rc;
}

/* A smooth, colourful test image (JPEG-friendly), h x w x 3. */
uint8_t *tu_smooth_image(int h, int w, int seed)
{
    uint8_t *p = malloc((size_t)h * w * 3);
    assert_non_null(p);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double fx = (double)x / w, fy = (double)y / h;
            p[((size_t)y * w + x) * 3 + 0] = (uint8_t)(127.5 + 120 * sin(6.0 * fx + seed));
            p[((size_t)y * w + x) * 3 + 1] = (uint8_t)(127.5 + 120 * cos(5.0 * fy + 2 * fx));
            p[((size_t)y * w + x) * 3 + 2] = (uint8_t)((x * 7 + y * 3 + seed * 11) & 255);
        }
    return p;
}

/* JPEG of an h x w RGB image (4:4:4, quality q) in a malloc'd buffer. */
uint8_t *tu_encode_jpeg(const uint8_t *rgb, int h, int w, int q, size_t *size)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    unsigned char *buf = NULL;
    unsigned long len = 0;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &buf, &len);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, q, TRUE);
    for (int i = 0; i < 3; i++)
        c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(rgb + (size_t)c.next_scanline * w * 3);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    uint8_t *out = malloc(len);
    assert_non_null(out);
    memcpy(out, buf, len);
    free(buf);
    *size = len;
    return out;
}
