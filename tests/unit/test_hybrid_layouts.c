/* test_hybrid_layouts.c — other on-disk layouts of the same hybrid-family weights.
 *
 * mlx-lm stores Gemma 4's MoE experts under its SwitchGLU names,
 * experts.switch_glu.{gate,up,down}_proj.weight [E, ·, ·], where transformers stores
 * experts.gate_up_proj [E, 2·Ie, H] (gate rows first) and experts.down_proj [E, H, Ie].
 * There is no mlx-community fixture to compare with, so the test rewrites the
 * gemma4-tiny-moe fixture into the SwitchGLU layout (same numbers, split and renamed) with
 * kiln's own safetensors writer, and requires the logits of one forward to be bitwise those
 * of the original — which the parity test ties to transformers. */
#include <unistd.h>
#include "../common/test_util.h"
#include "load/safetensors.h"
#include "load/st_writer.h"
#include "model/model.h"

static float *forward(const char *dir, const int32_t *ids, int n, int *vocab) {
    err_t e = {0};
    model_opts_t o = {"cpu", 2, DT_F32};
    model_t *m = model_load(dir, &o, &e);
    if (!m) fail_msg("%s: %s", dir, e.msg);
    if (model_init_kv(m, 16, 16, DT_F32, &e)) fail_msg("%s", e.msg);
    *vocab = m->cfg.vocab_size;
    float *out = malloc(sizeof(float) * (size_t)n * *vocab);
    int32_t *pos = malloc(sizeof(int32_t) * n), *li = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++) { pos[i] = i; li[i] = i; }
    kv_seq_t s;
    kv_seq_init(&s);
    kv_seq_t *sp = &s;
    assert_int_equal(kv_seq_reserve(&s, &m->kv, n, &e), 0);
    int32_t rs[2] = {0, n};
    batch_t b = {1, n, (int32_t *)ids, pos, rs, &sp, li, n};
    if (model_forward(m, &b, out, &e)) fail_msg("%s: %s", dir, e.msg);
    model_seq_release(m, &s);
    kv_seq_free(&s, &m->kv);
    model_free(m);
    free(pos); free(li);
    return out;
}

/* Writes SRC's tensors to DST/model.safetensors with the experts in SwitchGLU layout. */
static void write_switch_glu(const char *src, const char *dst) {
    char path[512];
    err_t e = {0};
    st_archive_t ar;
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    if (st_open(&ar, path, &e)) fail_msg("%s", e.msg);
    stw_tensor_t *t = calloc((size_t)ar.n_tensors * 2, sizeof *t);
    const void **data = calloc((size_t)ar.n_tensors * 2, sizeof *data);
    char **names = calloc((size_t)ar.n_tensors * 2, sizeof *names);
    int n = 0, split = 0;
    for (int i = 0; i < ar.n_tensors; i++) {
        const st_tensor_t *x = &ar.tensors[i];
        const char *gu = strstr(x->name, "experts.gate_up_proj"), *dn = strstr(x->name, "experts.down_proj");
        if (gu) { /* [E, 2Ie, H] → gate [E, Ie, H] + up [E, Ie, H], written from a reordered copy */
            int pre = (int)(gu - x->name);
            for (int p = 0; p < 2; p++) {
                names[n] = str_printf("%.*sexperts.switch_glu.%s.weight", pre, x->name, p ? "up_proj" : "gate_proj");
                t[n] = (stw_tensor_t){names[n], x->dtype, 3, {x->shape[0], x->shape[1] / 2, x->shape[2]}};
                size_t half = (size_t)x->shape[1] / 2 * x->shape[2] * dtype_size(x->dtype);
                char *buf = malloc(half * x->shape[0]);
                for (int64_t ex = 0; ex < x->shape[0]; ex++)
                    memcpy(buf + ex * half, (const char *)x->data + (2 * ex + p) * half, half);
                data[n++] = buf;
            }
            split++;
            continue;
        }
        if (dn) names[n] = str_printf("%.*sexperts.switch_glu.down_proj.weight", (int)(dn - x->name), x->name);
        else names[n] = str_printf("%s", x->name);
        t[n] = (stw_tensor_t){names[n], x->dtype, x->ndim, {0}};
        for (int d = 0; d < x->ndim; d++) t[n].shape[d] = x->shape[d];
        data[n++] = x->data;
    }
    assert_true(split > 0);
    stw_writer_t *w;
    snprintf(path, sizeof path, "%s/model.safetensors", dst);
    if (stw_open(&w, path, t, n, "pt", &e)) fail_msg("%s", e.msg);
    for (int i = 0; i < n; i++)
        if (stw_write(w, data[i], stw_tensor_bytes(&t[i]), &e)) fail_msg("%s", e.msg);
    if (stw_finish(w, &e)) fail_msg("%s", e.msg);
    for (int i = 0; i < n; i++) {
        if (strstr(names[i], "switch_glu.gate_proj") || strstr(names[i], "switch_glu.up_proj")) free((void *)data[i]);
        free(names[i]);
    }
    free(t); free(data); free(names);
    st_close(&ar);
}

static void test_gemma4_switch_glu(void **st) {
    const char *src = "tests/fixtures/models/gemma4-tiny-moe";
    char dst[] = "/tmp/kiln-layout-XXXXXX", cmd[600];
    assert_non_null(mkdtemp(dst));
    snprintf(cmd, sizeof cmd, "cp %s/config.json %s/", src, dst);
    assert_int_equal(system(cmd), 0);
    write_switch_glu(src, dst);
    json_t *ref = tu_load_json("tests/fixtures/models/gemma4-tiny-moe/reference/reference.json");
    int n, v1, v2;
    int32_t *ids = tu_int_array(json_object_get(ref, "input_ids"), &n);
    float *a = forward(src, ids, n, &v1), *b = forward(dst, ids, n, &v2);
    assert_int_equal(v1, v2);
    assert_memory_equal(a, b, sizeof(float) * (size_t)n * v1);
    printf("# gemma4-tiny-moe in SwitchGLU layout: %d positions x %d logits bitwise equal\n", n, v1);
    free(a); free(b); free(ids);
    json_decref(ref);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dst);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gemma4_switch_glu)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
