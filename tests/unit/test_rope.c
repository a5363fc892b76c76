/* test_rope.c — RoPE frequency tables for each rope_type, against transformers' formulas
 * (modeling_rope_utils) evaluated here in double: default, linear, dynamic (NTK), llama3
 * and yarn. The llama3 table is also covered end to end by the llama-tiny-rope-llama3
 * fixture; the others have no fixture, so their formulas are checked directly. */
#include "../common/test_util.h"
#include "model/rope.h"

static rope_config_t base_cfg(rope_type_t t) {
    rope_config_t r = {0};
    r.type = t;
    r.theta = 10000.0;
    r.factor = 4.0;
    r.low_freq_factor = 1.0;
    r.high_freq_factor = 4.0;
    r.original_max_pos = 128;
    r.beta_fast = 32;
    r.beta_slow = 1;
    r.truncate = 1;
    r.partial_rotary_factor = 1.0;
    return r;
}

#define D 64
static double def(int i) { return 1.0 / pow(10000.0, (2.0 * i) / D); }
static void near(double got, double want, const char *what, int i) {
    if (fabs(got - want) > 2e-7 * fabs(want) + 1e-30) fail_msg("%s[%d]: %.9g, want %.9g", what, i, got, want);
}

static void test_default_linear(void **st) {
    float inv[D / 2], ms;
    rope_config_t r = base_cfg(ROPE_DEFAULT);
    rope_inv_freq(&r, D, 128, 0, inv, &ms);
    for (int i = 0; i < D / 2; i++) near(inv[i], def(i), "default", i);
    assert_true(ms == 1.0f);
    r = base_cfg(ROPE_LINEAR);
    rope_inv_freq(&r, D, 128, 0, inv, &ms);
    for (int i = 0; i < D / 2; i++) near(inv[i], def(i) / 4, "linear", i);
}

static void test_dynamic(void **st) {
    float inv[D / 2], ms;
    rope_config_t r = base_cfg(ROPE_DYNAMIC);
    rope_inv_freq(&r, D, 128, 100, inv, &ms); /* within the original context: unchanged */
    for (int i = 0; i < D / 2; i++) near(inv[i], def(i), "dynamic short", i);
    rope_inv_freq(&r, D, 128, 512, inv, &ms);
    double base = 10000.0 * pow(4.0 * 512 / 128 - 3.0, (double)D / (D - 2));
    for (int i = 0; i < D / 2; i++) near(inv[i], 1.0 / pow(base, (2.0 * i) / D), "dynamic long", i);
}

static void test_llama3(void **st) {
    float inv[D / 2], ms;
    rope_config_t r = base_cfg(ROPE_LLAMA3);
    rope_inv_freq(&r, D, 128, 0, inv, &ms);
    double low_wl = 128 / 1.0, high_wl = 128 / 4.0;
    int n_high = 0, n_low = 0, n_mid = 0;
    for (int i = 0; i < D / 2; i++) {
        double f = def(i), wl = 2 * M_PI / f, want;
        if (wl < high_wl) { want = f; n_high++; }
        else if (wl > low_wl) { want = f / 4; n_low++; }
        else {
            double sm = (128 / wl - 1.0) / (4.0 - 1.0);
            want = (1 - sm) * f / 4 + sm * f;
            n_mid++;
        }
        near(inv[i], want, "llama3", i);
    }
    assert_true(n_high > 0 && n_low > 0 && n_mid > 0); /* all three regimes exercised */
}

static void test_yarn(void **st) {
    float inv[D / 2], ms;
    rope_config_t r = base_cfg(ROPE_YARN);
    rope_inv_freq(&r, D, 512, 0, inv, &ms);
    near(ms, 0.1 * log(4.0) + 1.0, "yarn mscale", 0);
    /* correction range from beta_fast/beta_slow, floored/ceiled, clamped */
    double lo = floor(D * log(128 / (32 * 2 * M_PI)) / (2 * log(10000.0)));
    double hi = ceil(D * log(128 / (1 * 2 * M_PI)) / (2 * log(10000.0)));
    if (lo < 0) lo = 0;
    if (hi > D - 1) hi = D - 1;
    for (int i = 0; i < D / 2; i++) {
        double ramp = (i - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        double ext = 1 - ramp, want = def(i) / 4 * (1 - ext) + def(i) * ext;
        near(inv[i], want, "yarn", i);
    }
    assert_true(fabs(inv[0] - def(0)) < 1e-7 && fabs(inv[D / 2 - 1] - def(D / 2 - 1) / 4) < 1e-9); /* both ends */
    r.attention_factor = 1.5;
    rope_inv_freq(&r, D, 512, 0, inv, &ms);
    assert_true(ms == 1.5f);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_default_linear), cmocka_unit_test(test_dynamic),
                                       cmocka_unit_test(test_llama3), cmocka_unit_test(test_yarn)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
