/*
 * fuzz_coco.c — libFuzzer target for the COCO reader (src/format/coco.c):
 * the annotation JSON (through libjansson), its checks, the conversion of
 * polygons and RLE (lists and compressed strings) at open, and the mask
 * painting at read time, through the public API.
 *
 * The input is the annotation file (a memory file opened as
 * /proc/self/fd/N); the images directory is a temporary one holding
 * a.png (8 x 6) and b.png (5 x 4), so that file names and sizes can match.
 * Each input is opened four ways — masks=semantic, masks=instance with
 * crowd=drop and empty=drop, masks=none with missing=skip, and
 * masks=semantic with missing=lazy — and every field of every sample (up
 * to a budget) is read, every byte touched. Oracles: a failed open leaves
 * no dataset and a message; boxes and box_labels have one row per box;
 * each box is ordered (x0 <= x1, y0 <= y1, all finite, >= 0); each label is
 * below the class count; a semantic mask's pixels are at most the class
 * count, an instance mask's at most the box count; a failed read is
 * STK_EDATA naming the image id.
 */
#include <stoker/stoker.h>

#define FUZZ_NAME "fuzz_coco"
#include "fuzz_util.h"

#include "codec/codec_write.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define READ_BUDGET 16

static int g_fd = -1;
static char g_mem[64];
static char g_dir[512];
static volatile uint64_t g_sink;

static void touch(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += b[i];
    g_sink += s;
}

static void cleanup(void)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/a.png", g_dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/b.png", g_dir);
    unlink(p);
    rmdir(g_dir);
}

static void setup(void)
{
    static uint8_t px[8 * 6 * 3];
    char p[1024];
    g_fd = fuzz_memfd("fuzz_coco");
    snprintf(g_mem, sizeof g_mem, "/proc/self/fd/%d", g_fd);
    fuzz_tempdir(g_dir, sizeof g_dir, "fuzz_coco");
    atexit(cleanup);
    memset(px, 90, sizeof px);
    snprintf(p, sizeof p, "%s/a.png", g_dir);
    check(stk_png_write_rgb8(p, px, 8, 6, 24) == 0, "write a.png");
    snprintf(p, sizeof p, "%s/b.png", g_dir);
    check(stk_png_write_rgb8(p, px, 5, 4, 15) == 0, "write b.png");
}

static void *field(const stk_dataset *ds, uint64_t i, const char *name, size_t *n,
                   uint32_t shape[3], int *rc)
{
    void *d = NULL;
    *rc = stk_dataset_read_field(ds, i, name, &d, n, shape);
    if (*rc == 0)
        touch(d, *n);
    else
        check(d == NULL, "a failed read left a buffer");
    return d;
}

static void read_all(const char *uri, int semantic, int instance)
{
    stk_dataset_options o;
    memset(&o, 0, sizeof o);
    o.max_bytes = 16u << 20;
    o.max_samples = 1u << 12;
    o.max_pixels = 1u << 16;
    stk_dataset *ds = NULL;
    if (stk_dataset_open(uri, &o, &ds) != 0) {
        check(ds == NULL, "failed open left a dataset");
        check(stk_errmsg()[0] != '\0', "failed open without a message");
        return;
    }
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    check(info.count > 0 && info.num_classes > 0, "an opened set has images and classes");
    for (uint32_t c = 0; c < info.num_classes; c++)
        check(stk_dataset_class_name(ds, c) != NULL, "every class has a name");
    for (uint64_t i = 0; i < info.count && i < READ_BUDGET; i++) {
        size_t nb = 0, nl = 0, n = 0;
        uint32_t shape[3] = {0};
        int rc, rl;
        float *boxes = field(ds, i, "boxes", &nb, NULL, &rc);
        int64_t *labels = field(ds, i, "box_labels", &nl, NULL, &rl);
        check(rc == 0 && rl == 0, "boxes and box_labels read");
        size_t k = nl / 8;
        check(nb == k * 16 && nl == k * 8, "one box per label");
        for (size_t j = 0; j < k; j++) {
            const float *b = boxes + 4 * j;
            check(isfinite(b[0]) && isfinite(b[3]) && b[0] >= 0 && b[1] >= 0 &&
                      b[0] <= b[2] && b[1] <= b[3],
                  "boxes are ordered and clipped");
            check(labels[j] >= 0 && labels[j] < info.num_classes, "labels are in range");
        }
        stk_free(boxes);
        stk_free(labels);
        int64_t label = 0;
        check(stk_dataset_label(ds, i, &label) == 0 && label == -1, "label is -1");
        void *img = field(ds, i, "image", &n, NULL, &rc);
        if (rc != 0)
            check(rc == STK_EDATA && strstr(stk_errmsg(), "(image id ") != NULL,
                  "a bad image is STK_EDATA naming its id");
        stk_free(img);
        void *id = field(ds, i, "image_id", &n, NULL, &rc);
        check(rc == 0 && n == 8, "image_id reads");
        stk_free(id);
        if (!semantic && !instance)
            continue;
        uint8_t *mask = field(ds, i, "mask", &n, shape, &rc);
        if (rc != 0) {
            check(instance && rc == STK_EDATA && k > 255, "only >255 instances fail");
            continue;
        }
        check(n == (size_t)shape[0] * shape[1] && shape[2] == 1, "mask shape");
        for (size_t p = 0; p < n; p++)
            check(mask[p] <= (semantic ? info.num_classes : k), "mask values in range");
        stk_free(mask);
    }
    stk_dataset_close(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct {
        const char *query;
        int semantic, instance;
    } ways[] = {
        {"&masks=semantic", 1, 0},
        {"&masks=instance&crowd=drop&empty=drop", 0, 1},
        {"&missing=skip", 0, 0},
        {"&masks=semantic&missing=lazy", 1, 0},
    };
    if (g_fd < 0)
        setup();
    fuzz_write_fd(g_fd, data, size);
    char uri[1024];
    for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++) {
        snprintf(uri, sizeof uri, "coco:%s?annotations=%s%s", g_dir, g_mem, ways[w].query);
        read_all(uri, ways[w].semantic, ways[w].instance);
    }
    return 0;
}
