/* test_hybrid_layouts.c — other on-disk layouts of the same hybrid-family weights.
 *
 * MLX quantization for every hybrid/sliding family: mlx-community conversions quantize
 * every Linear and Embedding (and the stacked experts) to U32 codes with per-group
 * scales and biases. Only Qwen3.5 has an MLX fixture, so test_mlx_every_family quantizes
 * the gemma3, gemma4 (PLE, MoE), qwen3_5_moe and qwen3_next fixtures itself (affine, group
 * 32, bf16 scales/biases, codes packed from the low bits as mlx does) and writes a dense
 * twin holding exactly the dequantized values in f32. Both go through the same forward;
 * on the scalar reference backend (which dequantizes each row and runs the dense loop) the
 * quantized logits must be bitwise the twin's, which checks that every quantized tensor
 * was found, unpacked and routed to the right place; on the SIMD backend within 1e-4 of
 * max |logit| (the parity tolerance; measured 1e-6..3e-5) for the dense-MLP fixtures.
 *
 * mlx-lm stores Gemma 4's MoE experts under its SwitchGLU names,
 * experts.switch_glu.{gate,up,down}_proj.weight [E, ·, ·], where transformers stores
 * experts.gate_up_proj [E, 2·Ie, H] (gate rows first) and experts.down_proj [E, H, Ie].
 * There is no mlx-community fixture to compare with, so the test rewrites the
 * gemma4-tiny-moe fixture into the SwitchGLU layout (same numbers, split and renamed) with
 * kiln's own safetensors writer, and requires the logits of one forward to be bitwise those
 * of the original — which the parity test ties to transformers. */
#include <math.h>
#include <unistd.h>
#include "../common/test_util.h"
#include "load/safetensors.h"
#include "load/st_writer.h"
#include "model/hyb_util.h"
#include "model/model.h"

static float *forward_on(const char *backend, const char *dir, const int32_t *ids, int n, int *vocab) {
    err_t e = {0};
    model_opts_t o = {backend, 2, DT_F32};
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

static float *forward(const char *dir, const int32_t *ids, int n, int *vocab) { return forward_on("cpu", dir, ids, n, vocab); }

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

/* Quantizable as mlx-lm does: a Linear's or Embedding's 2-D weight, or stacked experts
 * [E, rows, cols]; not norms, the conv kernel or other vectors. */
static int mlx_quantizable(const st_tensor_t *x, int group) {
    if (x->dtype != DT_F32 && x->dtype != DT_F16 && x->dtype != DT_BF16) return 0;
    if (strstr(x->name, "norm") || strstr(x->name, "conv1d")) return 0;
    if (x->ndim == 2) return strlen(x->name) > 7 && !strcmp(x->name + strlen(x->name) - 7, ".weight") && x->shape[1] % group == 0;
    return x->ndim == 3 && strstr(x->name, "experts") && x->shape[2] % group == 0;
}

/* stw_sort_canonical on t[n], with d[n] (each tensor's data) following its tensor. */
static void sort_with_data(stw_tensor_t *t, void **d, int n) {
    stw_tensor_t *t0 = malloc(sizeof *t * n);
    void **d0 = malloc(sizeof *d * n);
    memcpy(t0, t, sizeof *t * n);
    memcpy(d0, d, sizeof *d * n);
    stw_sort_canonical(t, n);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (!strcmp(t[i].name, t0[j].name)) d[i] = d0[j];
    free(t0); free(d0);
}

/* SRC quantized to BITS (group G) into QDIR, and the dequantized twin (f32) into DDIR. */
static int write_mlx_pair(const char *src, const char *qdir, const char *ddir, int bits, int G) {
    char path[512];
    err_t e = {0};
    st_archive_t ar;
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    if (st_open(&ar, path, &e)) fail_msg("%s", e.msg);
    int cap = ar.n_tensors * 3, nq = 0, nd = 0, n_quant = 0;
    stw_tensor_t *tq = calloc((size_t)cap, sizeof *tq), *td = calloc((size_t)ar.n_tensors, sizeof *td);
    void **dq = calloc((size_t)cap, sizeof *dq), **dd = calloc((size_t)ar.n_tensors, sizeof *dd);
    char **names = calloc((size_t)cap, sizeof *names);
    for (int i = 0; i < ar.n_tensors; i++) {
        const st_tensor_t *x = &ar.tensors[i];
        td[nd] = (stw_tensor_t){x->name, x->dtype, x->ndim, {0}};
        for (int d = 0; d < x->ndim; d++) td[nd].shape[d] = x->shape[d];
        if (!mlx_quantizable(x, G)) {
            tq[nq] = td[nd];
            dq[nq++] = NULL, dd[nd++] = NULL; /* NULL: the source bytes */
            continue;
        }
        n_quant++;
        int64_t cols = x->shape[x->ndim - 1], rows = st_numel(x) / cols, ng = cols / G, words = cols * bits / 32;
        uint32_t *codes = calloc((size_t)(rows * words), sizeof *codes);
        uint16_t *sc = malloc(sizeof(uint16_t) * rows * ng), *bi = malloc(sizeof(uint16_t) * rows * ng);
        float *deq = malloc(sizeof(float) * rows * cols);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t g = 0; g < ng; g++) {
                float lo = INFINITY, hi = -INFINITY;
                for (int64_t j = g * G; j < (g + 1) * G; j++) {
                    float v = load_as_f32(x->data, x->dtype, (size_t)(r * cols + j));
                    lo = v < lo ? v : lo; hi = v > hi ? v : hi;
                }
                int qmax = (1 << bits) - 1;
                sc[r * ng + g] = f32_to_bf16(hi > lo ? (hi - lo) / qmax : 1.0f);
                bi[r * ng + g] = f32_to_bf16(lo);
                float s = bf16_to_f32(sc[r * ng + g]), b = bf16_to_f32(bi[r * ng + g]);
                for (int64_t j = g * G; j < (g + 1) * G; j++) {
                    float v = load_as_f32(x->data, x->dtype, (size_t)(r * cols + j));
                    long q = lroundf((v - b) / s);
                    q = q < 0 ? 0 : q > qmax ? qmax : q;
                    uint64_t bit = (uint64_t)j * bits; /* packed from the low bits, across words */
                    uint32_t *row = codes + r * words;
                    row[bit >> 5] |= (uint32_t)q << (bit & 31);
                    if ((bit & 31) + bits > 32) row[(bit >> 5) + 1] |= (uint32_t)q >> (32 - (bit & 31));
                    deq[r * cols + j] = s * (float)q + b; /* weight_row_f32's formula */
                }
            }
        /* the module path: the name without ".weight" (stacked experts may have none) */
        size_t L = strlen(x->name);
        int has_w = L > 7 && !strcmp(x->name + L - 7, ".weight");
        int mp = has_w ? (int)L - 7 : (int)L;
        tq[nq] = td[nd];
        tq[nq].dtype = DT_U32;
        tq[nq].shape[x->ndim - 1] = words;
        dq[nq++] = codes;
        for (int k = 0; k < 2; k++) {
            names[nq] = str_printf("%.*s.%s", mp, x->name, k ? "biases" : "scales");
            tq[nq] = td[nd];
            tq[nq].name = names[nq];
            tq[nq].dtype = DT_BF16;
            tq[nq].shape[x->ndim - 1] = ng;
            dq[nq++] = k ? (void *)bi : (void *)sc;
        }
        td[nd].dtype = DT_F32;
        dd[nd++] = deq;
    }
    /* as the safetensors library lays files out (wider dtypes first): every tensor aligned */
    sort_with_data(tq, dq, nq);
    sort_with_data(td, dd, nd);
    for (int pass = 0; pass < 2; pass++) {
        stw_tensor_t *t = pass ? td : tq;
        void **data = pass ? dd : dq;
        int n = pass ? nd : nq;
        stw_writer_t *w;
        snprintf(path, sizeof path, "%s/model.safetensors", pass ? ddir : qdir);
        if (stw_open(&w, path, t, n, pass ? "pt" : "mlx", &e)) fail_msg("%s", e.msg);
        for (int i = 0, src_i = 0; i < n; i++) {
            const void *p = data[i];
            if (!p) { /* an untouched tensor: find it by name in the source */
                for (src_i = 0; src_i < ar.n_tensors && strcmp(ar.tensors[src_i].name, t[i].name); src_i++) {}
                p = ar.tensors[src_i].data;
            }
            if (stw_write(w, p, stw_tensor_bytes(&t[i]), &e)) fail_msg("%s", e.msg);
        }
        if (stw_finish(w, &e)) fail_msg("%s", e.msg);
    }
    for (int i = 0; i < nq; i++) { free(dq[i]); free(names[i]); }
    for (int i = 0; i < nd; i++) free(dd[i]);
    free(tq); free(td); free(dq); free(dd); free(names);
    st_close(&ar);
    /* config.json: the twin's as is; the quantized one with mlx-lm's quantization block */
    snprintf(path, sizeof path, "%s/config.json", src);
    json_error_t je;
    json_t *c = json_load_file(path, 0, &je);
    assert_non_null(c);
    snprintf(path, sizeof path, "%s/config.json", ddir);
    assert_int_equal(json_dump_file(c, path, JSON_INDENT(2)), 0);
    json_object_set_new(c, "quantization", json_pack("{s:i,s:i}", "group_size", G, "bits", bits));
    snprintf(path, sizeof path, "%s/config.json", qdir);
    assert_int_equal(json_dump_file(c, path, JSON_INDENT(2)), 0);
    json_decref(c);
    return n_quant;
}

static void test_mlx_every_family(void **st) {
    const char *fx[] = {"gemma3-tiny", "gemma4-tiny-ple", "gemma4-tiny-moe", "qwen3_5_moe-tiny", "qwen3_next-tiny"};
    const int bits[] = {4, 8};
    for (size_t f = 0; f < sizeof fx / sizeof fx[0]; f++)
        for (int bi = 0; bi < 2; bi++) {
            char src[256], ref[300], qd[] = "/tmp/kiln-mlxq-XXXXXX", dd[] = "/tmp/kiln-mlxd-XXXXXX", cmd[600];
            snprintf(src, sizeof src, "tests/fixtures/models/%s", fx[f]);
            snprintf(ref, sizeof ref, "%s/reference/reference.json", src);
            assert_non_null(mkdtemp(qd));
            assert_non_null(mkdtemp(dd));
            int nquant = write_mlx_pair(src, qd, dd, bits[bi], 32);
            assert_true(nquant > 0);
            json_t *rj = tu_load_json(ref);
            int n, v1, v2;
            int32_t *ids = tu_int_array(json_object_get(rj, "input_ids"), &n);
            /* cpu-ref dequantizes each row with weight_row_f32 and runs the dense loop:
             * bitwise the twin's logits */
            float *a = forward_on("cpu-ref", qd, ids, n, &v1), *b = forward_on("cpu-ref", dd, ids, n, &v2);
            assert_int_equal(v1, v2);
            assert_memory_equal(a, b, sizeof(float) * (size_t)n * v1);
            free(a); free(b);
            /* the SIMD kernels sum q·s and the bias term apart: equal within rounding. With
             * MoE, rounding can flip a near-tied expert choice (seen at position 24 of
             * qwen3_5_moe-tiny q4), so only the dense-MLP fixtures are held to it */
            a = forward(qd, ids, n, &v1), b = forward(dd, ids, n, &v2);
            double mx = 0, worst = 0;
            for (size_t i = 0; i < (size_t)n * v1; i++) mx = fmax(mx, fabs(b[i]));
            for (size_t i = 0; i < (size_t)n * v1; i++) worst = fmax(worst, fabs(a[i] - b[i]) / mx);
            int moe = strstr(fx[f], "moe") || strstr(fx[f], "next");
            printf("# %s MLX q%d (group 32, %d tensors quantized): cpu-ref bitwise the dequantized twin; SIMD worst %.2g of max |logit|%s\n",
                   fx[f], bits[bi], nquant, worst, moe ? " (MoE: not checked)" : "");
            if (!moe && worst > 1e-4) fail_msg("%s q%d: quantized logits differ from the dequantized twin by %.3g of max |logit|", fx[f], bits[bi], worst);
            free(a); free(b); free(ids);
            json_decref(rj);
            snprintf(cmd, sizeof cmd, "rm -rf %s %s", qd, dd);
            assert_int_equal(system(cmd), 0);
        }
}

/* SRC's tensors plus EXTRA small bf16 tensors (zeros) named as multimodal towers, to DST. */
static void write_with_towers(const char *src, const char *dst, const char **extra, int n_extra) {
    char path[512], cmd[600];
    err_t e = {0};
    st_archive_t ar;
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    if (st_open(&ar, path, &e)) fail_msg("%s", e.msg);
    int n = ar.n_tensors + n_extra;
    stw_tensor_t *t = calloc((size_t)n, sizeof *t);
    for (int i = 0; i < ar.n_tensors; i++) {
        const st_tensor_t *x = &ar.tensors[i];
        t[i] = (stw_tensor_t){x->name, x->dtype, x->ndim, {0}};
        for (int d = 0; d < x->ndim; d++) t[i].shape[d] = x->shape[d];
    }
    static const uint16_t zeros[64];
    for (int i = 0; i < n_extra; i++) t[ar.n_tensors + i] = (stw_tensor_t){extra[i], DT_BF16, 2, {4, 8}};
    stw_writer_t *w;
    snprintf(path, sizeof path, "%s/model.safetensors", dst);
    if (stw_open(&w, path, t, n, "pt", &e)) fail_msg("%s", e.msg);
    for (int i = 0; i < n; i++)
        if (stw_write(w, i < ar.n_tensors ? ar.tensors[i].data : (const void *)zeros, stw_tensor_bytes(&t[i]), &e)) fail_msg("%s", e.msg);
    if (stw_finish(w, &e)) fail_msg("%s", e.msg);
    free(t);
    st_close(&ar);
    snprintf(cmd, sizeof cmd, "cp %s/config.json %s/", src, dst);
    assert_int_equal(system(cmd), 0);
}

/* Checkpoints with vision/audio towers (VL wrappers, Gemma 3/4 multimodal) load as text
 * models: the tower tensors are counted and noted at load, and the logits are bitwise
 * those of the text-only checkpoint. */
static void test_towers_skipped(void **st) {
    const char *fx[] = {"gemma3-tiny", "qwen3_5-tiny"};
    const char *extra[] = {"vision_tower.vision_model.embeddings.patch_embedding.weight", "model.visual.blocks.0.attn.qkv.weight",
                           "audio_tower.conformer.0.ffw.weight", "multi_modal_projector.mm_input_projection_weight",
                           "model.embed_vision.embedding_projection.weight", "model.embed_audio.embedding_projection.weight",
                           "model.language_model.visualizer_not_a_tower.weight"}; /* the last is not a tower name */
    for (int f = 0; f < 2; f++) {
        char src[256], ref[300], dst[] = "/tmp/kiln-towers-XXXXXX", path[600];
        snprintf(src, sizeof src, "tests/fixtures/models/%s", fx[f]);
        snprintf(ref, sizeof ref, "%s/reference/reference.json", src);
        assert_non_null(mkdtemp(dst));
        write_with_towers(src, dst, extra, 7);
        err_t e = {0};
        st_archive_t ar;
        snprintf(path, sizeof path, "%s/model.safetensors", dst);
        if (st_open(&ar, path, &e)) fail_msg("%s", e.msg);
        assert_int_equal(hyb_tower_tensors(&ar), 6);
        st_close(&ar);
        json_t *rj = tu_load_json(ref);
        int n, v1, v2;
        int32_t *ids = tu_int_array(json_object_get(rj, "input_ids"), &n);
        float *a = forward(src, ids, n, &v1), *b = forward(dst, ids, n, &v2);
        assert_int_equal(v1, v2);
        assert_memory_equal(a, b, sizeof(float) * (size_t)n * v1);
        printf("# %s with 6 tower tensors: skipped, logits bitwise the text-only checkpoint's\n", fx[f]);
        free(a); free(b); free(ids);
        json_decref(rj);
        snprintf(path, sizeof path, "rm -rf %s", dst);
        assert_int_equal(system(path), 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gemma4_switch_glu), cmocka_unit_test(test_mlx_every_family),
                                       cmocka_unit_test(test_towers_skipped)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
