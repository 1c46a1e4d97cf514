/*
 * test_sample_path.c — stk_dataset_sample_path and the source_name field
 * stk_pack writes: the file path of an image folder's and a list's samples
 * (as written here); the same bytes back from shards packed from them, for
 * names with a newline, a backslash and a byte that is not UTF-8 (escaped
 * on disk as one line of a label map, checked in the shard's bytes);
 * names kept through a repack; no field and no name for a source without
 * names (memory, CIFAR); hand-written shards whose source_name holds a raw
 * line break or a NUL refused with STK_EDATA naming the record; an index
 * out of range and NULL arguments refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "codec/codec_write.h"
#include "core/error.h"
#include "format/dataset.h"
#include "format/stk/stk_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"

static void png(const char *path, int seed)
{
    uint8_t px[6 * 5 * 3];
    tu_fill_random(px, sizeof px, (uint64_t)seed);
    assert_int_equal(stk_png_write_rgb8(path, px, 5, 6, 5 * 3), 0);
}

static char *path_of(const stk_dataset *ds, uint64_t i)
{
    char *p = NULL;
    assert_int_equal(stk_dataset_sample_path(ds, i, &p), 0);
    assert_non_null(p);
    return p;
}

/* Files named with a LF, a backslash and the byte 0xff, in two classes. */
static const char *const NAMES[] = {"a/line\nbreak.png", "a/plain.png", "b/back\\slash.png",
                                    "b/\xff-latin1.png"};

static void make_folder(const char *root)
{
    char p[2048];
    mkdir(root, 0755);
    snprintf(p, sizeof p, "%s/a", root);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/b", root);
    mkdir(p, 0755);
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", root, NAMES[i]);
        png(p, i);
    }
}

static void test_folder_and_list_name_their_files(void **state)
{
    (void)state;
    char root[512], want[2048];
    snprintf(root, sizeof root, "%s", tu_path("tree"));
    make_folder(root);
    stk_dataset *ds;
    char uri[1100];
    snprintf(uri, sizeof uri, "imagefolder:%s", root);
    assert_int_equal(stk_dataset_open(uri, NULL, &ds), 0);
    assert_int_equal(ds->count, 4);
    /* sorted as ImageFolder sorts: "a/line\n..." < "a/plain", "b/back\\..." < "b/\xff..." */
    for (int i = 0; i < 4; i++) {
        char *p = path_of(ds, (uint64_t)i);
        snprintf(want, sizeof want, "%s/%s", root, NAMES[i]);
        assert_string_equal(p, want);
        stk_free(p);
    }
    char *p = (char *)1;
    assert_int_equal(stk_dataset_sample_path(ds, 4, &p), STK_EINVAL);
    assert_null(p);
    assert_non_null(strstr(stk_errmsg(), "sample 4 is out of range (4 samples)"));
    assert_int_equal(stk_dataset_sample_path(ds, 0, NULL), STK_EINVAL);
    assert_int_equal(stk_dataset_sample_path(NULL, 0, &p), STK_EINVAL);
    stk_dataset_close(ds);

    /* a list file: the paths as the list gives them */
    const char *list = tu_path("files.txt");
    FILE *f = fopen(list, "w");
    assert_non_null(f);
    fprintf(f, "%s/a/plain.png\t3\n%s/b/back\\slash.png\t1\n", root, root);
    fclose(f);
    snprintf(uri, sizeof uri, "list:%s", list);
    assert_int_equal(stk_dataset_open(uri, NULL, &ds), 0);
    p = path_of(ds, 1);
    snprintf(want, sizeof want, "%s/b/back\\slash.png", root);
    assert_string_equal(p, want);
    stk_free(p);
    stk_dataset_close(ds);
}

static void test_pack_keeps_names_escaped(void **state)
{
    (void)state;
    char root[512], want[2048];
    snprintf(root, sizeof root, "%s", tu_path("tree2"));
    make_folder(root);
    const char *out = tu_path("packed"), *again = tu_path("repacked");
    stk_pack_options po = {.jobs = 2};
    stk_pack_result res;
    assert_int_equal(stk_pack(root, out, &po, &res), 0);
    assert_int_equal(res.records, 4);

    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(out, NULL, &ds), 0);
    stk_field_info info;
    assert_int_equal(stk_dataset_field_count(ds), 4);
    assert_int_equal(stk_dataset_field_info(ds, 3, &info), 0);
    assert_string_equal(info.name, "source_name");
    assert_int_equal(info.type, STK_FIELD_STRING);
    for (int i = 0; i < 4; i++) {
        char *p = path_of(ds, (uint64_t)i);
        snprintf(want, sizeof want, "%s/%s", root, NAMES[i]);
        assert_string_equal(p, want);
        stk_free(p);
    }
    /* On disk: one escaped line each (docs/format.md, the label map). */
    void *raw;
    size_t n;
    assert_int_equal(stk_dataset_read_field(ds, 0, "source_name", &raw, &n, NULL), 0);
    snprintf(want, sizeof want, "%s/a/line\\nbreak.png", root);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(raw, want, n);
    free(raw);
    assert_int_equal(stk_dataset_read_field(ds, 3, "source_name", &raw, &n, NULL), 0);
    snprintf(want, sizeof want, "%s/b/\\xff-latin1.png", root);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(raw, want, n);
    free(raw);
    assert_int_equal(stk_dataset_read_field(ds, 2, "source_name", &raw, &n, NULL), 0);
    snprintf(want, sizeof want, "%s/b/back\\\\slash.png", root);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(raw, want, n);
    free(raw);
    stk_dataset_close(ds);

    /* A repack keeps the original names (not "SHARD: record R"). */
    assert_int_equal(stk_pack(out, again, &po, &res), 0);
    assert_int_equal(stk_dataset_open(again, NULL, &ds), 0);
    char *p = path_of(ds, 3);
    snprintf(want, sizeof want, "%s/%s", root, NAMES[3]);
    assert_string_equal(p, want);
    stk_free(p);
    stk_dataset_close(ds);
}

static void test_sources_without_names(void **state)
{
    (void)state;
    uint8_t px[2 * 4 * 4 * 1] = {0};
    int64_t labels[2] = {0, 1};
    stk_dataset *ds;
    assert_int_equal(stk_dataset_from_memory(px, labels, 2, 4, 4, 1, 1, &ds), 0);
    char *p = (char *)1;
    assert_int_equal(stk_dataset_sample_path(ds, 1, &p), 0);
    assert_null(p);
    stk_dataset_close(ds);

    /* CIFAR-10 (1 label byte + 3072 pixels a record): no source_name field,
     * and the shards name their records. */
    const char *dir = tu_path("cifar");
    mkdir(dir, 0755);
    uint8_t rec[3 * 3073];
    tu_fill_random(rec, sizeof rec, 9);
    for (int i = 0; i < 3; i++)
        rec[i * 3073] = (uint8_t)(i % 10);
    char file[1024];
    for (int b = 1; b <= 5; b++) {
        snprintf(file, sizeof file, "%s/data_batch_%d.bin", dir, b);
        tu_write_file(file, rec, sizeof rec);
    }
    char uri[1100];
    snprintf(uri, sizeof uri, "cifar10:%s", dir);
    assert_int_equal(stk_dataset_open(uri, NULL, &ds), 0);
    assert_int_equal(stk_dataset_sample_path(ds, 0, &p), 0);
    assert_null(p);
    stk_dataset_close(ds);
    const char *out = tu_path("cifar-packed");
    assert_int_equal(stk_pack(uri, out, NULL, NULL), 0);
    assert_int_equal(stk_dataset_open(out, NULL, &ds), 0);
    assert_int_equal(stk_dataset_field_count(ds), 3);
    p = path_of(ds, 4);
    char want[1200];
    snprintf(want, sizeof want, "%s/shard-00000.stk: record 4 (sample 4)", out);
    assert_string_equal(p, want);
    stk_free(p);
    stk_dataset_close(ds);
}

/* Shards written by hand whose source_name breaks the rule. */
static void test_bad_source_name_values(void **state)
{
    (void)state;
    const char *path = tu_path("hand.stk");
    stk_field_def fields[] = {
        {.name = "image", .type = STK_FIELD_RAW_IMAGE, .ndim = 3, .dims = {1, 1, 1}},
        {.name = "label", .type = STK_FIELD_INT64},
        {.name = "source_name", .type = STK_FIELD_STRING},
    };
    const char *values[] = {"ok/a\\x09b.png", "raw\nbreak", "nul\0inside", ""};
    size_t sizes[] = {13, 9, 10, 0};
    stk_shard_file *w;
    assert_int_equal(stk_shard_file_open(path, fields, 3, NULL, 0, &w), 0);
    for (int i = 0; i < 4; i++) {
        uint8_t payload[13] = {0};
        payload[0] = payload[4] = payload[8] = 1; /* 1 x 1 x 1, little-endian */
        int64_t label = 0;
        stk_value_bytes v[3] = {{payload, sizeof payload}, {&label, 8}, {values[i], sizes[i]}};
        assert_int_equal(stk_shard_file_add(w, v), 0);
    }
    assert_int_equal(stk_shard_file_finish(w), 0);
    stk_dataset *ds;
    assert_int_equal(stk_dataset_open(path, NULL, &ds), 0);
    char *p = path_of(ds, 0);
    assert_string_equal(p, "ok/a\tb.png"); /* the escape decoded */
    stk_free(p);
    char want[1200];
    for (int i = 1; i <= 2; i++) {
        p = (char *)1;
        assert_int_equal(stk_dataset_sample_path(ds, (uint64_t)i, &p), STK_EDATA);
        assert_null(p);
        snprintf(want, sizeof want,
                 "%s: record %d (sample %d): the source_name field holds a NUL or a line break "
                 "(it must be one escaped name, docs/format.md)",
                 path, i, i);
        assert_string_equal(stk_errmsg(), want);
    }
    p = path_of(ds, 3);
    assert_string_equal(p, "");
    stk_free(p);
    stk_dataset_close(ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_folder_and_list_name_their_files),
        cmocka_unit_test(test_pack_keeps_names_escaped),
        cmocka_unit_test(test_sources_without_names),
        cmocka_unit_test(test_bad_source_name_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
