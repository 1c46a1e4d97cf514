/*
 * test_callback_dataset.c — stk_dataset_from_callbacks (src/format/callback.c).
 *
 * The references are other datasets over the same bytes: a callback
 * dataset handing out pixels (dense HWC, or a CHW array through strides)
 * gives the batches of stk_dataset_from_memory over those pixels, and one
 * handing out JPEG bytes gives the batches of an image folder holding the
 * same files, for 1 and 4 threads. Every read's storage is a fresh
 * allocation freed by release, so ASan sees any use after release and any
 * read never released; counters check read == release and one close. Runs
 * under ASan/UBSan and TSan (4 worker threads call read concurrently).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "codec/codec_write.h"
#include "core/util.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"

#define N 50
#define H 12
#define W 10
#define C 3
#define SPEC "random_crop 10,8 | flip 0.5 | to u8 hwc"

typedef struct source {
    const uint8_t *pixels;   /* N x H x W x C, HWC */
    const int64_t *labels;
    int chw;                 /* hand out CHW copies through strides */
    uint8_t *jpeg[N];        /* encoded mode when jpeg[0] != NULL */
    size_t jpeg_size[N];
    int64_t fail_index;      /* read fails for this index (-1: none) */
    int fail_code;
    int no_message;          /* fail without a message */
    atomic_long reads, releases, closes, field_reads;
} source;

static int src_read(void *user, uint64_t index, stk_callback_sample *out)
{
    source *s = user;
    if ((int64_t)index == s->fail_index) {
        if (s->no_message)
            return s->fail_code;
        return stk_callback_fail(s->fail_code, "the source broke here");
    }
    atomic_fetch_add(&s->reads, 1);
    out->label = s->labels[index];
    if (s->jpeg[0]) {
        uint8_t *copy = malloc(s->jpeg_size[index]);
        memcpy(copy, s->jpeg[index], s->jpeg_size[index]);
        out->data = copy;
        out->size = s->jpeg_size[index];
        out->token = copy;
        return 0;
    }
    const uint8_t *px = s->pixels + index * H * W * C;
    uint8_t *copy = malloc(H * W * C);
    out->height = H;
    out->width = W;
    out->channels = C;
    out->size = H * W * C;
    out->data = copy;
    out->token = copy;
    if (s->chw) {
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                for (int c = 0; c < C; c++)
                    copy[c * H * W + y * W + x] = px[(y * W + x) * C + c];
        out->chan_stride = H * W;
        out->row_stride = W;
        out->col_stride = 1;
    } else {
        memcpy(copy, px, H * W * C);
    }
    return 0;
}

static void src_release(void *user, void *token)
{
    source *s = user;
    atomic_fetch_add(&s->releases, 1);
    free(token);
}

static void src_close(void *user)
{
    source *s = user;
    atomic_fetch_add(&s->closes, 1);
}

/* Extra fields: "boxes" float32 (k, 4) with k = index % 3, "id" int64
 * scalar = 1000 + index, "name" string "sample-INDEX". */
static int src_read_field(void *user, uint64_t index, uint32_t field, stk_callback_field *out)
{
    source *s = user;
    atomic_fetch_add(&s->field_reads, 1);
    if (field == 0) {
        uint32_t k = (uint32_t)(index % 3);
        if (index == 44)
            k = 1; /* and 5 values: not whole rows */
        float *v = malloc((k * 4 + 1) * sizeof *v);
        for (uint32_t i = 0; i < k * 4 + 1; i++)
            v[i] = (float)index + (float)i / 4;
        out->data = v;
        out->size = (k * 4 + (index == 44)) * sizeof *v;
        out->token = v;
    } else if (field == 1) {
        int64_t *v = malloc(sizeof *v);
        *v = 1000 + (int64_t)index;
        out->data = v;
        out->size = sizeof *v;
        out->token = v;
    } else {
        char *t = malloc(32);
        snprintf(t, 32, "sample-%llu", (unsigned long long)index);
        out->data = t;
        out->size = strlen(t);
        out->token = t;
    }
    atomic_fetch_add(&s->reads, 1);
    return 0;
}

static const stk_dataset_callbacks CALLBACKS = {
    .read = src_read, .read_field = src_read_field, .release = src_release, .close = src_close};

static uint8_t pixels[N * H * W * C];
static int64_t labels[N];

static void source_init(source *s)
{
    memset(s, 0, sizeof *s);
    tu_fill_random(pixels, sizeof pixels, 11);
    for (int i = 0; i < N; i++)
        labels[i] = i % 7;
    s->pixels = pixels;
    s->labels = labels;
    s->fail_index = -1;
}

static stk_dataset *open_source(source *s, int fixed)
{
    stk_callback_options o = {.count = N, .name = "test-source"};
    if (fixed) {
        o.height = H;
        o.width = W;
        o.channels = C;
    }
    stk_dataset *ds = NULL;
    int rc = stk_dataset_from_callbacks(&CALLBACKS, s, &o, &ds);
    if (rc < 0)
        print_error("%s\n", stk_errmsg());
    assert_int_equal(rc, 0);
    return ds;
}

static tu_run run_loader(stk_dataset *ds, const char *spec, uint32_t threads, int skip)
{
    stk_loader_options o = {.batch_size = 8, .threads = threads, .seed = 5, .prefetch = 3};
    o.on_error = skip ? STK_ON_ERROR_SKIP : STK_ON_ERROR_RAISE;
    stk_loader *l = NULL;
    assert_int_equal(stk_loader_create(ds, spec, &o, &l), 0);
    tu_run r;
    memset(&r, 0, sizeof r);
    int rc = tu_drain(l, &r, 0);
    if (rc < 0)
        print_error("%s\n", stk_loader_errmsg(l));
    assert_int_equal(rc, 0);
    stk_loader_destroy(l);
    return r;
}

static void assert_same_run(const tu_run *a, const tu_run *b, size_t row_bytes)
{
    assert_int_equal(a->rows, b->rows);
    assert_memory_equal(a->data, b->data, a->rows * row_bytes);
    assert_memory_equal(a->labels, b->labels, a->rows * sizeof *a->labels);
    assert_memory_equal(a->indices, b->indices, a->rows * sizeof *a->indices);
}

/* Pixels (dense HWC, then CHW through strides; a fixed shape, then any
 * size): the memory dataset's batches, for 1 and 4 threads. */
static void test_pixels_match_memory_dataset(void **state)
{
    (void)state;
    source s;
    source_init(&s);
    stk_dataset *ref = NULL;
    assert_int_equal(stk_dataset_from_memory(pixels, labels, N, H, W, C, 0, &ref), 0);
    tu_run want = run_loader(ref, SPEC, 4, 0);
    size_t row = (size_t)10 * 8 * C;
    for (int chw = 0; chw < 2; chw++) {
        for (int fixed = 0; fixed < 2; fixed++) {
            s.chw = chw;
            stk_dataset *ds = open_source(&s, fixed);
            stk_dataset_info info;
            stk_dataset_info_get(ds, &info);
            assert_string_equal(info.format, "callback");
            assert_string_equal(info.uri, "test-source");
            assert_int_equal(info.height, fixed ? H : 0);
            for (uint32_t threads = 1; threads <= 4; threads += 3) {
                tu_run got = run_loader(ds, SPEC, threads, 0);
                assert_same_run(&got, &want, row);
                tu_run_free(&got);
            }
            stk_dataset_close(ds);
            assert_int_equal(atomic_load(&s.reads), atomic_load(&s.releases));
            assert_int_equal(atomic_load(&s.closes), 1);
            atomic_store(&s.closes, 0);
        }
    }
    /* stk_dataset_read copies the sample as the memory dataset does */
    s.chw = 1;
    stk_dataset *ds = open_source(&s, 0);
    uint8_t *px = NULL;
    uint32_t shape[3];
    int64_t label;
    assert_int_equal(stk_dataset_read_alloc(ds, 17, &px, shape, &label), H * W * C);
    assert_memory_equal(px, pixels + 17 * H * W * C, H * W * C);
    assert_int_equal(shape[0], H);
    assert_int_equal(shape[2], C);
    assert_int_equal(label, labels[17]);
    stk_free(px);
    assert_int_equal(stk_dataset_label(ds, 23, &label), 0);
    assert_int_equal(label, labels[23]);
    stk_dataset_close(ds);
    tu_run_free(&want);
    stk_dataset_close(ref);
}

/* JPEG bytes: the batches of an image folder holding the same files. */
static void test_encoded_match_imagefolder(void **state)
{
    (void)state;
    source s;
    source_init(&s);
    char dir[512], cls[600];
    snprintf(dir, sizeof dir, "%s", tu_path("folder"));
    snprintf(cls, sizeof cls, "%s/only", dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(mkdir(cls, 0755), 0);
    for (int i = 0; i < N; i++) {
        stk_scratch out = {0};
        size_t n = 0;
        /* a varying size: the pixel rows of two samples side by side, cut */
        uint32_t w = W + (uint32_t)(i % 4);
        uint8_t img[H * (W + 3) * C];
        for (uint32_t k = 0; k < sizeof img; k++)
            img[k] = pixels[(i * H * W * C + k * 7) % sizeof pixels];
        assert_int_equal(stk_jpeg_encode(img, w, H, C, (size_t)w * C, 90, &out, &n), 0);
        s.jpeg[i] = malloc(n);
        memcpy(s.jpeg[i], out.data, n);
        s.jpeg_size[i] = n;
        char path[700];
        snprintf(path, sizeof path, "%s/%03d.jpg", cls, i);
        tu_write_file(path, out.data, n);
        stk_scratch_free(&out);
        labels[i] = 0; /* one class */
    }
    stk_dataset *ref = NULL;
    assert_int_equal(stk_dataset_open(dir, NULL, &ref), 0);
    const char *spec = "random_resized_crop 8 | flip 0.5 | to u8 chw";
    tu_run want = run_loader(ref, spec, 4, 0);
    stk_dataset *ds = open_source(&s, 0);
    for (uint32_t threads = 1; threads <= 4; threads += 3) {
        tu_run got = run_loader(ds, spec, threads, 0);
        assert_same_run(&got, &want, 8 * 8 * 3);
        tu_run_free(&got);
    }
    /* the image field is the bytes as given */
    void *data = NULL;
    size_t size = 0;
    assert_int_equal(stk_dataset_read_field(ds, 9, "image", &data, &size, NULL), 0);
    assert_int_equal(size, s.jpeg_size[9]);
    assert_memory_equal(data, s.jpeg[9], size);
    stk_free(data);
    stk_field_info fi;
    assert_int_equal(stk_dataset_field_info(ds, 0, &fi), 0);
    assert_int_equal(fi.type, STK_FIELD_IMAGE);
    /* an encoded sample where a fixed shape is declared is refused */
    stk_dataset *fixed = open_source(&s, 1);
    uint8_t buf[H * W * C];
    assert_int_equal(stk_dataset_read(fixed, 3, buf, sizeof buf, NULL), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "test-source: sample 3 is encoded bytes"));
    stk_dataset_close(fixed);
    stk_dataset_close(ds);
    assert_int_equal(atomic_load(&s.reads), atomic_load(&s.releases));
    stk_dataset_close(ref);
    tu_run_free(&want);
    for (int i = 0; i < N; i++)
        free(s.jpeg[i]);
}

/* A callback error names the sample; STK_EDATA is skipped under the skip
 * policy, anything else stops the loader either way. */
static void test_errors_name_the_sample(void **state)
{
    (void)state;
    source s;
    source_init(&s);
    stk_dataset *ds = open_source(&s, 1);
    s.fail_index = 7;
    s.fail_code = STK_EDATA;

    stk_loader_options o = {.batch_size = 8, .threads = 4, .seed = 5};
    stk_loader *l = NULL;
    assert_int_equal(stk_loader_create(ds, SPEC, &o, &l), 0);
    tu_run r;
    memset(&r, 0, sizeof r);
    assert_int_equal(tu_drain(l, &r, 0), STK_EDATA);
    assert_non_null(strstr(stk_loader_errmsg(l), "test-source: sample 7: the source broke here"));
    stk_loader_destroy(l);
    tu_run_free(&r);

    tu_run skipped = run_loader(ds, SPEC, 4, 1);
    assert_int_equal(skipped.rows, N - 1);
    assert_int_equal(skipped.skipped, 1);
    for (uint64_t i = 0; i < skipped.rows; i++)
        assert_int_not_equal(skipped.indices[i], 7);
    tu_run_free(&skipped);

    s.fail_code = STK_EIO;
    s.no_message = 1;
    o.on_error = STK_ON_ERROR_SKIP;
    assert_int_equal(stk_loader_create(ds, SPEC, &o, &l), 0);
    memset(&r, 0, sizeof r);
    assert_int_equal(tu_drain(l, &r, 0), STK_EIO);
    assert_non_null(strstr(stk_loader_errmsg(l), "test-source: sample 7: the read callback "
                                                 "failed (STK_EIO"));
    stk_loader_destroy(l);
    tu_run_free(&r);

    s.fail_code = 3; /* not a code */
    uint8_t buf[H * W * C];
    assert_int_equal(stk_dataset_read(ds, 7, buf, sizeof buf, NULL), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "returned 3"));
    stk_dataset_close(ds);
    assert_int_equal(atomic_load(&s.reads), atomic_load(&s.releases));
}

/* Bad values from read: each STK_EDATA naming the sample, released. */
static int bad_read(void *user, uint64_t index, stk_callback_sample *out)
{
    static uint8_t px[64];
    (void)user;
    out->data = px;
    out->size = sizeof px;
    out->height = 4;
    out->width = 4;
    out->channels = 3;
    switch (index) {
    case 0: out->size = 47; break;                       /* 48 bytes needed */
    case 1: out->row_stride = 30; out->col_stride = 3; out->chan_stride = 1; break; /* 91 */
    case 2: out->channels = 5; break;
    case 3: out->width = 0; break;
    case 4: out->row_stride = -12; out->col_stride = 3; out->chan_stride = 1; break;
    case 5: out->height = out->width = out->channels = 0; out->size = 0; break; /* no bytes */
    case 6: out->height = 5000; out->width = 5000; out->size = SIZE_MAX; break; /* > max_pixels */
    default: out->height = 2; break;                     /* 2x4x3: not the declared 4x4x3 */
    }
    return 0;
}

static atomic_long bad_releases;
static void bad_release(void *user, void *token)
{
    (void)user;
    (void)token;
    atomic_fetch_add(&bad_releases, 1);
}

static void test_bad_values_are_edata(void **state)
{
    (void)state;
    static const stk_dataset_callbacks cb = {.read = bad_read, .release = bad_release};
    const char *want[] = {"do not fit in the 47 bytes", "do not fit in the 64 bytes",
                          "channels at most 4", "4x0x3", "negative strides", "no bytes",
                          "exceed the limit of 1000000", "is 2x4x3 pixels, but this dataset declares 4x4x3"};
    for (int fixed = 0; fixed < 2; fixed++) {
        stk_callback_options o = {.count = 8, .name = "bad", .max_pixels = 1000000};
        if (fixed) {
            o.height = 4;
            o.width = 4;
            o.channels = 3;
        }
        stk_dataset *ds = NULL;
        assert_int_equal(stk_dataset_from_callbacks(&cb, NULL, &o, &ds), 0);
        for (int i = fixed ? 7 : 0; i < (fixed ? 8 : 7); i++) {
            uint8_t *px = NULL;
            uint32_t shape[3];
            assert_int_equal(stk_dataset_read_alloc(ds, (uint64_t)i, &px, shape, NULL),
                             STK_EDATA);
            char prefix[32];
            snprintf(prefix, sizeof prefix, "bad: sample %d", i);
            if (!strstr(stk_errmsg(), prefix) || !strstr(stk_errmsg(), want[i]))
                fail_msg("sample %d: %s", i, stk_errmsg());
        }
        stk_dataset_close(ds);
    }
    assert_int_equal(atomic_load(&bad_releases), 8);
}

/* Extra fields: described, read whole (stk_dataset_read_field) and checked
 * against their declarations. */
static void test_extra_fields(void **state)
{
    (void)state;
    source s;
    source_init(&s);
    stk_field_info decl[3] = {
        {.name = "boxes", .type = STK_FIELD_FLOAT32, .ndim = 2, .dims = {0, 4}},
        {.name = "id", .type = STK_FIELD_INT64},
        {.name = "name", .type = STK_FIELD_STRING},
    };
    stk_callback_options o = {.count = N, .name = "fields", .fields = decl, .nfields = 3,
                              .height = H, .width = W, .channels = C};
    stk_dataset *ds = NULL;
    assert_int_equal(stk_dataset_from_callbacks(&CALLBACKS, &s, &o, &ds), 0);
    assert_int_equal(stk_dataset_field_count(ds), 5);
    stk_field_info fi;
    const char *names[] = {"image", "label", "boxes", "id", "name"};
    stk_field_type types[] = {STK_FIELD_RAW_IMAGE, STK_FIELD_INT64, STK_FIELD_FLOAT32,
                              STK_FIELD_INT64, STK_FIELD_STRING};
    for (uint32_t i = 0; i < 5; i++) {
        memset(&fi, 0xff, sizeof fi);
        assert_int_equal(stk_dataset_field_info(ds, i, &fi), 0);
        assert_string_equal(fi.name, names[i]);
        assert_int_equal(fi.type, types[i]);
        assert_int_equal(fi.reserved_[0] | fi.reserved_[1], 0);
    }
    assert_int_equal(stk_dataset_field_info(ds, 2, &fi), 0);
    assert_int_equal(fi.ndim, 2);
    assert_int_equal(fi.dims[0], 0);
    assert_int_equal(fi.dims[1], 4);
    assert_int_equal(stk_dataset_field_info(ds, 5, &fi), STK_EINVAL);

    for (uint64_t i = 0; i < 10; i++) {
        void *data = NULL;
        size_t size = 0;
        assert_int_equal(stk_dataset_read_field(ds, i, "boxes", &data, &size, NULL), 0);
        assert_int_equal(size, (i % 3) * 4 * sizeof(float));
        for (size_t k = 0; k < size / sizeof(float); k++)
            assert_true(((float *)data)[k] == (float)i + (float)k / 4);
        stk_free(data);
        assert_int_equal(stk_dataset_read_field(ds, i, "id", &data, &size, NULL), 0);
        assert_int_equal(size, 8);
        assert_int_equal(*(int64_t *)data, 1000 + (int64_t)i);
        stk_free(data);
        assert_int_equal(stk_dataset_read_field(ds, i, "name", &data, &size, NULL), 0);
        char want[32];
        snprintf(want, sizeof want, "sample-%llu", (unsigned long long)i);
        assert_int_equal(size, strlen(want));
        assert_memory_equal(data, want, size);
        stk_free(data);
        assert_int_equal(stk_dataset_read_field(ds, i, "label", &data, &size, NULL), 0);
        assert_int_equal(*(int64_t *)data, labels[i]);
        stk_free(data);
        uint32_t shape[3] = {0, 0, 0};
        assert_int_equal(stk_dataset_read_field(ds, i, NULL, &data, &size, shape), 0);
        assert_int_equal(size, H * W * C);
        assert_int_equal(shape[0], H);
        assert_memory_equal(data, pixels + i * H * W * C, size);
        stk_free(data);
    }
    /* 5 floats are not whole rows of 4 */
    void *data = NULL;
    size_t size = 0;
    assert_int_equal(stk_dataset_read_field(ds, 44, "boxes", &data, &size, NULL), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "fields: sample 44: field 'boxes' holds rows of 16"));
    assert_null(data);
    stk_dataset_close(ds);
    assert_int_equal(atomic_load(&s.reads), atomic_load(&s.releases));

    /* a fixed shape that the value does not have */
    decl[0].dims[0] = 2; /* (2, 4): sample 1 has one box */
    assert_int_equal(stk_dataset_from_callbacks(&CALLBACKS, &s, &o, &ds), 0);
    assert_int_equal(stk_dataset_read_field(ds, 2, "boxes", &data, &size, NULL), 0);
    stk_free(data);
    assert_int_equal(stk_dataset_read_field(ds, 1, "boxes", &data, &size, NULL), STK_EDATA);
    assert_non_null(strstr(stk_errmsg(), "field 'boxes' is 32 bytes of float32"));
    stk_dataset_close(ds);
}

/* Arguments: NULL read, zero count, reserved words, bad declarations; a
 * failed create does not call close. */
static void test_bad_arguments(void **state)
{
    (void)state;
    source s;
    source_init(&s);
    stk_dataset *ds = NULL;
    stk_callback_options o = {.count = N};
    stk_dataset_callbacks cb = CALLBACKS;
    cb.read = NULL;
    assert_int_equal(stk_dataset_from_callbacks(&cb, &s, &o, &ds), STK_EINVAL);
    assert_null(ds);
    cb = CALLBACKS;
    cb.reserved_[3] = 1;
    assert_int_equal(stk_dataset_from_callbacks(&cb, &s, &o, &ds), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "stk_dataset_callbacks: reserved_[3] is not zero"));
    cb.reserved_[3] = 0;
    o.reserved_[0] = 9;
    assert_int_equal(stk_dataset_from_callbacks(&cb, &s, &o, &ds), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "stk_callback_options: reserved_[0]"));
    o.reserved_[0] = 0;
    o.count = 0;
    assert_int_equal(stk_dataset_from_callbacks(&cb, &s, &o, &ds), STK_EINVAL);
    o.count = N;
    o.height = 4; /* width and channels 0 */
    assert_int_equal(stk_dataset_from_callbacks(&cb, &s, &o, &ds), STK_EINVAL);
    o.height = 0;
    stk_field_info decl[2] = {{.name = "label", .type = STK_FIELD_INT64},
                              {.name = "x", .type = STK_FIELD_FLOAT32, .ndim = 2, .dims = {3, 0}}};
    o.fields = decl;
    o.nfields = 1;
    assert_int_equal(stk_dataset_from_callbacks(&cb, &s, &o, &ds), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "'image' and 'label' are the dataset's own fields"));
    o.fields = decl + 1;
    assert_int_equal(stk_dataset_from_callbacks(&cb, &s, &o, &ds), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "only the leading dimension may vary"));
    decl[1].dims[1] = 2;
    cb.read_field = NULL;
    assert_int_equal(stk_dataset_from_callbacks(&cb, &s, &o, &ds), STK_EINVAL);
    assert_non_null(strstr(stk_errmsg(), "without read_field"));
    assert_null(ds);
    assert_int_equal(atomic_load(&s.closes), 0);

    /* class names are copied */
    char a[] = "cat", b[] = "dog";
    const char *classes[] = {a, b};
    stk_callback_options oc = {.count = N, .num_classes = 2, .class_names = classes};
    assert_int_equal(stk_dataset_from_callbacks(&CALLBACKS, &s, &oc, &ds), 0);
    a[0] = 'x';
    assert_string_equal(stk_dataset_class_name(ds, 0), "cat");
    assert_string_equal(stk_dataset_class_name(ds, 1), "dog");
    stk_dataset_info info;
    stk_dataset_info_get(ds, &info);
    assert_string_equal(info.uri, "callback");
    assert_int_equal(info.num_classes, 2);
    stk_dataset_close(ds);
    assert_int_equal(atomic_load(&s.closes), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pixels_match_memory_dataset),
        cmocka_unit_test(test_encoded_match_imagefolder),
        cmocka_unit_test(test_errors_name_the_sample),
        cmocka_unit_test(test_bad_values_are_edata),
        cmocka_unit_test(test_extra_fields),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
