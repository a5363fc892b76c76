/* test_f16_store.c — the SIMD f32 -> f16 row conversion (simd_kernels_t.from_f32, used by
 * the CPU backend's K/V cache write) against the scalar reference f32_to_f16 (dtype.h),
 * bit for bit: a stride through all 2^32 f32 bit patterns, every rounding tie (low 13
 * mantissa bits 0x1000) and its neighbours across the f16 range, subnormal halves, overflow
 * to Inf, NaNs with payloads, row lengths 1..67 (no element past n is written). */
#include "../common/test_util.h"
#include "backend/cpu/cpu_kernels.h"
#include "tensor/dtype.h"

static void check_row(const simd_kernels_t *s, const uint32_t *bits, int n) {
    float *src = malloc(sizeof(float) * (size_t)n);
    uint16_t *dst = malloc(sizeof(uint16_t) * (size_t)(n + 8));
    memcpy(src, bits, sizeof(float) * (size_t)n);
    for (int i = 0; i < n + 8; i++) dst[i] = 0xabcd;
    assert_int_equal(s->from_f32(dst, DT_F16, src, n), 1);
    for (int i = 0; i < n; i++)
        if (dst[i] != f32_to_f16(src[i])) fail_msg("%s: f32 0x%08x -> 0x%04x, reference 0x%04x", s->name, bits[i], dst[i], f32_to_f16(src[i]));
    for (int i = n; i < n + 8; i++) assert_int_equal(dst[i], 0xabcd);
    free(src);
    free(dst);
}

static void test_from_f32(void **st) {
    (void)st;
    const simd_kernels_t *fam[2];
    int nf = 0;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) fam[nf++] = &simd_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) fam[nf++] = &simd_avx2;
    int tested = 0;
    enum { B = 4096 };
    uint32_t *buf = malloc(sizeof(uint32_t) * B);
    for (int f = 0; f < nf; f++) {
        const simd_kernels_t *s = fam[f];
        if (!s->from_f32) continue;
        float one = 1.f;
        assert_int_equal(s->from_f32(buf, DT_BF16, &one, 1), 0); /* f16 only */
        tested++;
        int n = 0;
        for (uint64_t u = 0; u < (1ull << 32); u += 4099) { /* a stride through every pattern */
            buf[n++] = (uint32_t)u;
            if (n == B) { check_row(s, buf, n); n = 0; }
        }
        for (uint32_t sign = 0; sign < 2; sign++)
            for (uint32_t e = 100; e <= 143; e++) /* f16's range and past it, every tie and its neighbours */
                for (uint32_t hi = 0; hi < 1024; hi += 7)
                    for (int d = -1; d <= 1; d++) {
                        buf[n++] = sign << 31 | e << 23 | hi << 13 | (uint32_t)(0x1000 + d);
                        if (n == B) { check_row(s, buf, n); n = 0; }
                    }
        const uint32_t special[] = {0, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fbfffffu, 0xffffffffu,
                                    0x477fe000u /* 65504 */, 0x477fefffu, 0x477ff000u /* 65520: ties to Inf */, 0x33000000u /* 2^-25 */,
                                    0x33000001u, 0x33800000u /* 2^-24 */, 0x387fc000u, 0x38800000u /* 2^-14 */, 0x00000001u, 0x807fffffu};
        for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) buf[n++] = special[i];
        check_row(s, buf, n);
        for (int len = 1; len <= 67; len++) { /* tails */
            for (int i = 0; i < len; i++) buf[i] = 0x3f800000u + (uint32_t)i * 0x1357u;
            check_row(s, buf, len);
        }
    }
    free(buf);
    if (!tested) skip();
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_from_f32)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
