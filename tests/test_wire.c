/*
 * test_wire.c — the pieces the record readers share: CRC-32C (core/crc32c.c)
 * against its published check value and TFRecord's masked values, the
 * protobuf wire reader (format/protowire.c) on hand-encoded messages and on
 * every kind of malformed one, and the record table (format/recordset.c).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/crc32c.h"
#include "core/util.h"
#include "format/protowire.h"
#include "format/recordset.h"
#include "stoker/stoker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static void test_crc32c_check_value(void **state)
{
    (void)state;
    /* The CRC-32C check value (RFC 3720 B.4; the CRC catalogue's CRC-32/ISCSI). */
    assert_int_equal(stk_crc32c(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(stk_crc32c_sw(0, "123456789", 9), 0xe3069283u);
    /* RFC 3720 B.4: 32 bytes of zeros, of 0xff, and 0..31. */
    uint8_t b[32];
    memset(b, 0, sizeof b);
    assert_int_equal(stk_crc32c(0, b, 32), 0x8a9136aau);
    memset(b, 0xff, sizeof b);
    assert_int_equal(stk_crc32c(0, b, 32), 0x62a8ab43u);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)i;
    assert_int_equal(stk_crc32c(0, b, 32), 0x46dd794eu);
    /* Continuing a CRC equals computing it in one go. */
    assert_int_equal(stk_crc32c(stk_crc32c(0, b, 13), b + 13, 19), 0x46dd794eu);
}

static void test_crc32c_paths_agree(void **state)
{
    (void)state;
    /* Past 3 x 8192 bytes: the hardware path's interleaved long and short
     * parts and their joins, at every alignment of the tail. */
    static uint8_t buf[3 * 8192 * 2 + 3 * 256 * 3 + 41];
    tu_fill_random(buf, sizeof buf, 7);
    for (size_t n = 0; n <= sizeof buf; n += n < 40 ? 1 : n < 5000 ? 97 : 1531)
        for (size_t off = 0; off < 8; off += 3)
            if (off + n <= sizeof buf)
                assert_int_equal(stk_crc32c(0, buf + off, n), stk_crc32c_sw(0, buf + off, n));
    /* The exact boundaries of the parts, and a continued CRC across them. */
    static const size_t edges[] = {767, 768, 769, 24575, 24576, 24577, 24576 + 768, sizeof buf};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        assert_int_equal(stk_crc32c(0, buf, edges[i]), stk_crc32c_sw(0, buf, edges[i]));
        if (edges[i] > 1000)
            assert_int_equal(stk_crc32c(stk_crc32c(0, buf, 1000), buf + 1000, edges[i] - 1000),
                             stk_crc32c_sw(0, buf, edges[i]));
    }
}

static void test_crc32c_masked(void **state)
{
    (void)state;
    /* TFRecord's header CRC is the masked CRC-32C of the 8-byte
     * little-endian length: rotate right by 15, add 0xa282ead8
     * (tensorflow/core/lib/hash/crc32c.h). */
    uint8_t zero8[8] = {0};
    uint32_t c = stk_crc32c_sw(0, zero8, 8);
    uint32_t expect = ((c >> 15) | (c << 17)) + 0xa282ead8u;
    assert_int_equal(stk_crc32c_mask(c), expect);
    assert_int_equal(stk_crc32c_mask(0), 0xa282ead8u);
    assert_int_equal(stk_crc32c_mask(0x8000u), 0xa282ead9u); /* bit 15 rotates to bit 0 */
}

/* field 1 varint 150, field 2 bytes "testing", field 3 fixed32, field 4
 * fixed64 (the protobuf encoding guide's examples, extended). */
static const uint8_t k_msg[] = {0x08, 0x96, 0x01, 0x12, 0x07, 't', 'e', 's', 't', 'i', 'n',
                                'g',  0x1d, 0x78, 0x56, 0x34, 0x12, 0x21, 1,   2,   3,   4,
                                5,    6,    7,    8};

static void test_protowire_fields(void **state)
{
    (void)state;
    stk_pb c = stk_pb_init(k_msg, sizeof k_msg);
    stk_pb_field f;
    const char *why = NULL;
    assert_int_equal(stk_pb_next(&c, &f, &why), 1);
    assert_int_equal(f.number, 1);
    assert_int_equal(f.wire, STK_PB_VARINT);
    assert_int_equal(f.value, 150);
    assert_int_equal(stk_pb_next(&c, &f, &why), 1);
    assert_int_equal(f.number, 2);
    assert_int_equal(f.wire, STK_PB_BYTES);
    assert_int_equal(f.size, 7);
    assert_memory_equal(f.data, "testing", 7);
    assert_int_equal(f.offset, 3);
    assert_int_equal(stk_pb_next(&c, &f, &why), 1);
    assert_int_equal(f.wire, STK_PB_FIXED32);
    assert_int_equal(f.value, 0x12345678u);
    assert_int_equal(stk_pb_next(&c, &f, &why), 1);
    assert_int_equal(f.wire, STK_PB_FIXED64);
    assert_int_equal(f.value, 0x0807060504030201ull);
    assert_int_equal(stk_pb_next(&c, &f, &why), 0);

    /* The largest varint: 2^64 - 1 in 10 bytes. */
    const uint8_t big[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    c = stk_pb_init(big, sizeof big);
    assert_int_equal(stk_pb_next(&c, &f, &why), 1);
    assert_true(f.value == UINT64_MAX);
}

static void expect_bad(const uint8_t *m, size_t n, const char *reason_part)
{
    stk_pb c = stk_pb_init(m, n);
    stk_pb_field f;
    const char *why = NULL;
    int rc;
    while ((rc = stk_pb_next(&c, &f, &why)) == 1)
        ;
    assert_int_equal(rc, STK_EDATA);
    assert_non_null(why);
    if (!strstr(why, reason_part))
        fail_msg("reason '%s' lacks '%s'", why, reason_part);
}

static void test_protowire_malformed(void **state)
{
    (void)state;
    const uint8_t len_past_end[] = {0x12, 0x08, 'a', 'b'};
    expect_bad(len_past_end, sizeof len_past_end, "runs past the end");
    const uint8_t varint_cut[] = {0x08, 0x96};
    expect_bad(varint_cut, sizeof varint_cut, "varint runs past");
    const uint8_t varint_long[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                   0xff, 0xff, 0xff, 0x02};
    expect_bad(varint_long, sizeof varint_long, "overflows 64 bits");
    const uint8_t group[] = {0x0b, 0x0c};
    expect_bad(group, sizeof group, "group");
    const uint8_t wire7[] = {0x0f};
    expect_bad(wire7, sizeof wire7, "unknown wire type");
    const uint8_t field0[] = {0x00, 0x01};
    expect_bad(field0, sizeof field0, "field number is 0");
    const uint8_t fixed_cut[] = {0x1d, 0x01, 0x02};
    expect_bad(fixed_cut, sizeof fixed_cut, "fixed-size value");
    /* A length prefix near 2^64 must not wrap the bounds check. */
    const uint8_t huge_len[] = {0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    expect_bad(huge_len, sizeof huge_len, "runs past the end");
}

static void test_recordset(void **state)
{
    (void)state;
    const char *p = tu_path("wire_records.bin");
    tu_write_file(p, "headerAAAAbbCCCCCC", 18);
    stk_recordset rs = {0};
    assert_int_equal(stk_recordset_add_file(&rs, p, 1 << 20, 0), 0);
    assert_int_equal(stk_recordset_push(&rs, 6, 4, 100), 0);
    assert_int_equal(stk_recordset_push(&rs, 10, 2, 100), 0);
    assert_int_equal(stk_recordset_push(&rs, 12, 6, 100), 0);
    /* Past the end of the file: refused, naming the file and record. */
    assert_int_equal(stk_recordset_push(&rs, 12, 7, 100), STK_EFORMAT);
    assert_non_null(strstr(stk_errmsg(), "wire_records.bin: record 3 (byte 12)"));
    assert_non_null(strstr(stk_errmsg(), "run past the end of the file (18 bytes)"));
    assert_int_equal(stk_recordset_push(&rs, 0, 1, 3), STK_ELIMIT);
    /* A second file, read by pread. */
    const char *q = tu_path("wire_records2.bin");
    tu_write_file(q, "xyz", 3);
    assert_int_equal(stk_recordset_add_file(&rs, q, 1 << 20, 1), 0);
    assert_int_equal(stk_recordset_push(&rs, 1, 2, 100), 0);
    assert_int_equal(rs.count, 4);

    stk_scratch s = {0};
    const uint8_t *d;
    size_t n;
    static const char *const want[] = {"AAAA", "bb", "CCCCCC", "yz"};
    for (uint64_t i = 0; i < 4; i++) {
        assert_int_equal(stk_recordset_get(&rs, i, &s, &d, &n), 0);
        assert_int_equal(n, strlen(want[i]));
        assert_memory_equal(d, want[i], n);
        assert_int_equal(stk_recordset_check(&rs, i, 0, n), 0);
    }
    char name[256];
    stk_recordset_name(&rs, 3, name, sizeof name);
    assert_non_null(strstr(name, "wire_records2.bin: record 0 (byte 1)"));
    stk_recordset_name(&rs, 2, name, sizeof name);
    assert_non_null(strstr(name, "wire_records.bin: record 2 (byte 12)"));
    stk_recordset_advise(&rs, STK_ACCESS_SEQUENTIAL);
    stk_scratch_free(&s);
    stk_recordset_free(&rs);

    /* A missing file: the source's error, and the set frees cleanly. */
    assert_int_equal(stk_recordset_add_file(&rs, tu_path("wire_missing.bin"), 1 << 20, 0), STK_ENOENT);
    stk_recordset_free(&rs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_check_value), cmocka_unit_test(test_crc32c_paths_agree),
        cmocka_unit_test(test_crc32c_masked),      cmocka_unit_test(test_protowire_fields),
        cmocka_unit_test(test_protowire_malformed), cmocka_unit_test(test_recordset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
