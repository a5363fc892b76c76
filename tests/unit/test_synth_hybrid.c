/* test_synth_hybrid.c — `kiln synth` for the qwen3_5 (gated DeltaNet hybrid) and gemma3
 * (sliding-window) families.
 *
 * What is checked, each time by reading back what landed on disk:
 *   - the tiny presets' safetensors headers are byte-identical to the transformers fixtures
 *     tests/fixtures/models/{qwen3_5-tiny,gemma3-tiny} (names, dtypes, shapes, order, offsets);
 *   - the tensor list is the one this file derives from the architecture (HF layout for
 *     float dtypes; for MLX q4/q8 the mlx_lm layout: qwen3_5 names under "language_model.",
 *     conv1d [C, K, 1]); exactly the 2-D Linear/Embedding weights are quantized, norms,
 *     A_log, dt_bias and conv kernels stay bf16;
 *   - values: (1 + w) norms are zeros in HF layout and ones (already shifted) in the qwen3_5
 *     MLX layout, gemma's are zeros in both; A_log, dt_bias and conv kernels are the
 *     generator's values in their ranges; every dequantized code is within half a step of
 *     the float weight of the same HF name (so the prefix does not change the weights);
 *   - config.json goes through kiln's own parser (load/config.c) with the right layer kinds,
 *     DeltaNet sizes, window, scalar, RoPE thetas, tie, also with --layers;
 *   - kiln's model_load runs a forward over the tiny presets in every dtype with finite
 *     logits, and the quantized checkpoints' logits track the bf16 ones (a wrong norm or
 *     conv convention would not);
 *   - the real presets' parameter counts (gemma-3-1b: 999,885,952, its published count;
 *     Qwen3.5 computed here from the shapes). */
#include "../common/test_util.h"

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "load/config.h"
#include "load/synth_presets.h"
#include "model/model.h"
#include "tensor/dtype.h"

static int rm_cb(const char *p, const struct stat *s, int f, struct FTW *w) {
    (void)s; (void)f; (void)w;
    return remove(p);
}
static void rm_rf(const char *p) { nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

static char *mk_tmp(void) {
    char *t = strdup("/tmp/kiln-test-synth-hyb-XXXXXX");
    assert_non_null(mkdtemp(t));
    return t;
}

static synth_opts_t opts(const char *arch, const char *preset, dtype_t dt, int bits, const char *out) {
    synth_opts_t o = {0};
    o.preset = synth_preset_find(preset, arch);
    assert_non_null(o.preset);
    o.dtype = dt;
    o.bits = bits;
    o.group_size = bits ? 32 : 0;
    o.seed = 11;
    o.out = out;
    return o;
}

static void write_ok(const synth_opts_t *o) {
    err_t e;
    err_clear(&e);
    if (synth_write(o, &e)) fail_msg("synth_write: %s", e.msg);
}

/* ---- a safetensors file, parsed here ----------------------------------------------------- */

typedef struct stf {
    char *raw;
    size_t size, hdr_len; /* hdr_len: 8 + JSON length */
    json_t *hdr;
} stf_t;

static void stf_load(stf_t *f, const char *path) {
    err_t e;
    f->raw = file_read(path, 1u << 28, &f->size, &e);
    if (!f->raw) fail_msg("%s", e.msg);
    uint64_t n = 0;
    for (int b = 0; b < 8; b++) n |= (uint64_t)(unsigned char)f->raw[b] << (8 * b);
    assert_true(8 + n <= f->size);
    f->hdr_len = 8 + n;
    f->hdr = json_loadb(f->raw + 8, n, 0, NULL);
    assert_non_null(f->hdr);
}

static void stf_free(stf_t *f) {
    json_decref(f->hdr);
    free(f->raw);
}

/* Tensor NAME: dtype string, shape (ndim returned), data pointer. Fails when absent. */
static int stf_get(const stf_t *f, const char *name, const char **dt, int64_t *shape, const unsigned char **data) {
    json_t *t = json_object_get(f->hdr, name);
    if (!t) fail_msg("tensor %s missing", name);
    *dt = json_string_value(json_object_get(t, "dtype"));
    json_t *s = json_object_get(t, "shape");
    for (size_t d = 0; d < json_array_size(s); d++) shape[d] = json_integer_value(json_array_get(s, d));
    *data = (const unsigned char *)f->raw + f->hdr_len + json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 0));
    return (int)json_array_size(s);
}

static float bf16_at(const unsigned char *p, size_t i) { return bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8)); }

/* ---- the expected tensor list, derived from the architecture ------------------------------- */

typedef enum kind { K_MATRIX, K_NORM0, K_NORM1, K_ALOG, K_DTBIAS, K_CONV } kind_t;
typedef struct ex {
    char hf[128];     /* HF name without ".weight" for matrices/norms; full name otherwise */
    kind_t kind;
    int64_t rows, cols;
} ex_t;

static int expected(const synth_preset_t *p, int L, ex_t *x) {
    int n = 0;
#define ADD(k, r, c, ...) do { snprintf(x[n].hf, sizeof x[n].hf, __VA_ARGS__); x[n].kind = (k); x[n].rows = (r); x[n].cols = (c); n++; } while (0)
    int64_t H = p->hidden, I = p->intermediate, hd = p->head_dim, q = (int64_t)p->n_heads * hd, kv = (int64_t)p->n_kv_heads * hd;
    ADD(K_MATRIX, p->vocab, H, "model.embed_tokens");
    for (int l = 0; l < L; l++) {
        if (p->arch == SYNTH_QWEN3_5 && (l + 1) % 4) {
            int64_t kd = (int64_t)p->lin_k_heads * p->lin_k_dim, vd = (int64_t)p->lin_v_heads * p->lin_v_dim;
            ADD(K_DTBIAS, 1, p->lin_v_heads, "model.layers.%d.linear_attn.dt_bias", l);
            ADD(K_ALOG, 1, p->lin_v_heads, "model.layers.%d.linear_attn.A_log", l);
            ADD(K_CONV, 2 * kd + vd, p->conv_kernel, "model.layers.%d.linear_attn.conv1d.weight", l);
            ADD(K_MATRIX, 2 * kd + vd, H, "model.layers.%d.linear_attn.in_proj_qkv", l);
            ADD(K_MATRIX, vd, H, "model.layers.%d.linear_attn.in_proj_z", l);
            ADD(K_MATRIX, p->lin_v_heads, H, "model.layers.%d.linear_attn.in_proj_b", l);
            ADD(K_MATRIX, p->lin_v_heads, H, "model.layers.%d.linear_attn.in_proj_a", l);
            ADD(K_NORM1, 0, p->lin_v_dim, "model.layers.%d.linear_attn.norm", l);
            ADD(K_MATRIX, H, vd, "model.layers.%d.linear_attn.out_proj", l);
        } else {
            int gate = p->arch == SYNTH_QWEN3_5 ? 2 : 1; /* Qwen3.5's q_proj holds query and gate */
            ADD(K_MATRIX, gate * q, H, "model.layers.%d.self_attn.q_proj", l);
            ADD(K_MATRIX, kv, H, "model.layers.%d.self_attn.k_proj", l);
            ADD(K_MATRIX, kv, H, "model.layers.%d.self_attn.v_proj", l);
            ADD(K_MATRIX, H, q, "model.layers.%d.self_attn.o_proj", l);
            ADD(K_NORM0, 0, hd, "model.layers.%d.self_attn.q_norm", l);
            ADD(K_NORM0, 0, hd, "model.layers.%d.self_attn.k_norm", l);
        }
        ADD(K_MATRIX, I, H, "model.layers.%d.mlp.gate_proj", l);
        ADD(K_MATRIX, I, H, "model.layers.%d.mlp.up_proj", l);
        ADD(K_MATRIX, H, I, "model.layers.%d.mlp.down_proj", l);
        ADD(K_NORM0, 0, H, "model.layers.%d.input_layernorm", l);
        ADD(K_NORM0, 0, H, "model.layers.%d.post_attention_layernorm", l);
        if (p->arch == SYNTH_GEMMA3) {
            ADD(K_NORM0, 0, H, "model.layers.%d.pre_feedforward_layernorm", l);
            ADD(K_NORM0, 0, H, "model.layers.%d.post_feedforward_layernorm", l);
        }
    }
    ADD(K_NORM0, 0, H, "model.norm");
    if (!p->tie) ADD(K_MATRIX, p->vocab, H, "lm_head");
#undef ADD
    return n;
}

/* The file holds exactly the expected tensors, in the layout of its dtype, with the values
 * the generator makes for the HF name. */
static void check_tensors(const char *dir, const synth_opts_t *o) {
    const synth_preset_t *p = o->preset;
    int L = o->layers ? o->layers : p->n_layers, mlx = o->bits != 0, g = o->group_size;
    int q35_mlx = mlx && p->arch == SYNTH_QWEN3_5;
    const char *pre = q35_mlx ? "language_model." : "";
    ex_t *x = calloc(2048, sizeof *x);
    int n = expected(p, L, x), n_files = 0;
    char *path = str_printf("%s/model.safetensors", dir);
    stf_t f;
    stf_load(&f, path);
    assert_string_equal(json_string_value(json_object_get(json_object_get(f.hdr, "__metadata__"), "format")), mlx ? "mlx" : "pt");
    const char *want_dt = mlx ? "BF16" : o->dtype == DT_F32 ? "F32" : o->dtype == DT_F16 ? "F16" : "BF16";
    for (int i = 0; i < n; i++) {
        char name[160];
        const char *dt;
        int64_t sh[4] = {0};
        const unsigned char *d;
        int is_vec = x[i].kind != K_MATRIX;
        snprintf(name, sizeof name, "%s%s%s", pre, x[i].hf, x[i].kind == K_MATRIX || x[i].kind == K_NORM0 || x[i].kind == K_NORM1 ? ".weight" : "");
        char hfname[160];
        snprintf(hfname, sizeof hfname, "%s%s", x[i].hf, x[i].kind == K_MATRIX || x[i].kind == K_NORM0 || x[i].kind == K_NORM1 ? ".weight" : "");
        uint64_t ts = synth_tensor_seed(o->seed, hfname);
        int nd = stf_get(&f, name, &dt, sh, &d);
        n_files++;
        if (is_vec) {
            assert_string_equal(dt, want_dt);
            if (x[i].kind == K_CONV) { /* HF [C, 1, K]; mlx_lm moves the kernel axis: [C, K, 1] */
                assert_int_equal(nd, 3);
                assert_int_equal(sh[0], x[i].rows);
                assert_int_equal(sh[1], q35_mlx ? x[i].cols : 1);
                assert_int_equal(sh[2], q35_mlx ? 1 : x[i].cols);
            } else {
                assert_int_equal(nd, 1);
                assert_int_equal(sh[0], x[i].cols);
            }
            int64_t cnt = x[i].kind == K_CONV ? x[i].rows * x[i].cols : x[i].cols;
            for (int64_t k = 0; k < cnt; k++) {
                float v = !strcmp(dt, "F32") ? ((const float *)d)[k] : !strcmp(dt, "F16") ? f16_to_f32(((const uint16_t *)d)[k]) : bf16_at(d, (size_t)k);
                float want;
                switch (x[i].kind) {
                case K_NORM0: want = (q35_mlx) ? 1.0f : 0.0f; break; /* mlx_lm stores 1 + w */
                case K_NORM1: want = 1.0f; break;
                case K_ALOG: want = synth_affine(ts, (uint64_t)k, 1.0f, 0.5f); assert_true(v > -0.8f && v < 2.8f); break;
                case K_DTBIAS: want = synth_affine(ts, (uint64_t)k, 1.0f, 0.1f); assert_true(v > 0.6f && v < 1.4f); break;
                default: want = synth_affine(ts, (uint64_t)k, 0.0f, 0.2f); assert_true(fabsf(v) < 0.7f); break;
                }
                if (fabsf(v - want) > 1e-2f * fabsf(want) + 1e-6f) fail_msg("%s[%lld] = %g, want %g", name, (long long)k, v, want);
            }
            continue;
        }
        if (!mlx) { /* float matrix: each element is the generator's weight */
            assert_string_equal(dt, want_dt);
            assert_int_equal(nd, 2);
            assert_int_equal(sh[0], x[i].rows);
            assert_int_equal(sh[1], x[i].cols);
            for (uint64_t k = 0; k < (uint64_t)(x[i].rows * x[i].cols); k += 97) {
                float want = synth_weight(ts, k);
                float v = !strcmp(dt, "F32") ? ((const float *)d)[k] : !strcmp(dt, "F16") ? f16_to_f32(((const uint16_t *)d)[k]) : bf16_at(d, k);
                if (fabsf(v - want) > 4e-3f * fabsf(want) + 1e-7f) fail_msg("%s[%llu] = %g, want %g", name, (unsigned long long)k, v, want);
            }
            continue;
        }
        /* quantized: U32 codes, bf16 scales and biases; w = scale * code + bias stays within
         * half a step of the float weight */
        assert_string_equal(dt, "U32");
        assert_int_equal(sh[0], x[i].rows);
        assert_int_equal(sh[1], x[i].cols * o->bits / 32);
        const unsigned char *codes = d, *sc, *bi;
        char sn[180];
        int64_t ss[4];
        snprintf(sn, sizeof sn, "%s%s.scales", pre, x[i].hf);
        stf_get(&f, sn, &dt, ss, &sc);
        assert_string_equal(dt, "BF16");
        assert_int_equal(ss[1], x[i].cols / g);
        snprintf(sn, sizeof sn, "%s%s.biases", pre, x[i].hf);
        stf_get(&f, sn, &dt, ss, &bi);
        n_files += 2;
        int64_t words = x[i].cols * o->bits / 32, ng = x[i].cols / g;
        for (int64_t r = 0; r < x[i].rows; r += (x[i].rows > 64 ? 37 : 1)) {
            const unsigned char *row = codes + (size_t)r * (size_t)words * 4;
            for (int64_t c = 0; c < x[i].cols; c++) {
                uint64_t bit = (uint64_t)c * (uint64_t)o->bits, w0 = bit / 32;
                uint64_t two = 0;
                for (int b = 0; b < 8 && (int64_t)(w0 * 4 + (uint64_t)b) < words * 4; b++) two |= (uint64_t)row[w0 * 4 + (uint64_t)b] << (8 * b);
                int code = (int)((two >> (bit % 32)) & ((1u << o->bits) - 1));
                float s = bf16_at(sc, (size_t)(r * ng + c / g)), bb = bf16_at(bi, (size_t)(r * ng + c / g));
                float w = synth_weight(ts, (uint64_t)(r * x[i].cols + c));
                if (fabsf(s * code + bb - w) > 0.5f * s + 1e-6f)
                    fail_msg("%s[%lld,%lld]: %g*%d+%g vs %g", name, (long long)r, (long long)c, s, code, bb, w);
            }
        }
    }
    /* nothing else in the file */
    assert_int_equal((int)json_object_size(f.hdr) - 1, n_files);
    stf_free(&f);
    free(path);
    free(x);
}

/* ---- tests --------------------------------------------------------------------------------- */

static void test_headers_match_fixtures(void **st) {
    (void)st;
    const char *arch[] = {"qwen3_5", "gemma3"}, *fx[] = {"qwen3_5-tiny", "gemma3-tiny"};
    for (int k = 0; k < 2; k++) {
        char *tmp = mk_tmp(), *out = str_printf("%s/m", tmp);
        synth_opts_t o = opts(arch[k], "tiny", DT_BF16, 0, out);
        write_ok(&o);
        char *a = str_printf("tests/fixtures/models/%s/model.safetensors", fx[k]), *b = str_printf("%s/model.safetensors", out);
        stf_t fa, fb;
        stf_load(&fa, a);
        stf_load(&fb, b);
        assert_int_equal(fa.size, fb.size);
        assert_int_equal(fa.hdr_len, fb.hdr_len);
        assert_memory_equal(fa.raw, fb.raw, fa.hdr_len);
        stf_free(&fa);
        stf_free(&fb);
        free(a);
        free(b);
        rm_rf(tmp);
        free(out);
        free(tmp);
    }
}

static void test_tensors_every_dtype(void **st) {
    (void)st;
    const char *arch[] = {"qwen3_5", "gemma3"};
    struct { dtype_t dt; int bits; } dts[] = {{DT_BF16, 0}, {DT_F16, 0}, {DT_F32, 0}, {DT_BF16, 8}, {DT_BF16, 4}, {DT_BF16, 3}};
    for (int a = 0; a < 2; a++)
        for (int k = 0; k < 6; k++) {
            char *tmp = mk_tmp(), *out = str_printf("%s/m", tmp);
            synth_opts_t o = opts(arch[a], "tiny", dts[k].dt, dts[k].bits, out);
            write_ok(&o);
            check_tensors(out, &o);
            rm_rf(tmp);
            free(out);
            free(tmp);
        }
}

/* config.json through kiln's parser: the families' fields, with and without --layers. */
static void check_parsed(const synth_opts_t *o) {
    err_t e;
    char *txt = synth_config_json(o, &e);
    assert_non_null(txt);
    json_t *root = json_loads(txt, 0, NULL);
    assert_non_null(root);
    char *gtxt = synth_generation_config_json(o, &e);
    json_t *gen = json_loads(gtxt, 0, NULL);
    assert_non_null(gen);
    model_config_t c;
    if (config_from_json(&c, root, gen, "synth", "synth generation_config", &e)) fail_msg("%s", e.msg);
    const synth_preset_t *p = o->preset;
    int L = o->layers ? o->layers : p->n_layers;
    assert_int_equal(c.n_layers, L);
    assert_int_equal(c.hidden_size, p->hidden);
    assert_int_equal(c.head_dim, p->head_dim);
    assert_int_equal(c.n_kv_heads, p->n_kv_heads);
    assert_int_equal(c.tie_embeddings, p->tie);
    assert_int_equal(c.quant_bits, o->bits);
    if (p->arch == SYNTH_QWEN3_5) {
        assert_int_equal(c.arch, ARCH_QWEN3_5);
        for (int l = 0; l < L; l++) assert_int_equal(c.layer_type[l], (l + 1) % 4 ? LAYER_LINEAR : LAYER_FULL);
        assert_int_equal(c.linear_k_heads, p->lin_k_heads);
        assert_int_equal(c.linear_v_heads, p->lin_v_heads);
        assert_int_equal(c.linear_k_dim, p->lin_k_dim);
        assert_int_equal(c.linear_v_dim, p->lin_v_dim);
        assert_int_equal(c.linear_conv_kernel, 4);
        assert_true(c.rope.partial_rotary_factor == 0.25);
        assert_true(c.rope.theta == p->rope_theta);
    } else {
        assert_int_equal(c.arch, ARCH_GEMMA3);
        for (int l = 0; l < L; l++) assert_int_equal(c.layer_type[l], (l + 1) % 6 ? LAYER_SLIDING : LAYER_FULL);
        assert_int_equal(c.sliding_window, p->sliding_window);
        assert_true(c.query_pre_attn_scalar == p->query_pre_attn_scalar);
        assert_true(c.rope.theta == 1000000.0);
        assert_true(c.rope_local.theta == 10000.0);
        assert_int_equal(c.hidden_act, 1); /* gelu_pytorch_tanh */
    }
    config_free(&c);
    json_decref(root);
    json_decref(gen);
    free(txt);
    free(gtxt);
}

static void test_configs(void **st) {
    (void)st;
    const char *real[] = {"qwen3.5-0.8b", "qwen3.5-2b", "gemma3-1b"};
    for (int i = 0; i < 3; i++)
        for (int layers = 0; layers <= 7; layers += 7)
            for (int bits = 0; bits <= 4; bits += 4) {
                synth_opts_t o = opts(NULL, real[i], DT_BF16, bits, "/x");
                o.group_size = 0;
                o.layers = layers;
                check_parsed(&o);
            }
    synth_opts_t o = opts("qwen3_5", "tiny", DT_BF16, 0, "/x");
    check_parsed(&o);
    o = opts("gemma3", "tiny", DT_F32, 0, "/x");
    check_parsed(&o);
    /* real-model keys and spellings */
    err_t e;
    o = opts(NULL, "qwen3.5-0.8b", DT_BF16, 0, "/x");
    char *t = synth_config_json(&o, &e);
    assert_non_null(strstr(t, "\"rope_theta\": 10000000,"));
    assert_non_null(strstr(t, "\"mrope_section\": ["));
    assert_non_null(strstr(t, "\"model_type\": \"qwen3_5_text\""));
    assert_non_null(strstr(t, "\"tie_word_embeddings\": true"));
    assert_non_null(strstr(t, "\"eos_token_id\": 248046,"));
    free(t);
    o = opts(NULL, "gemma3-1b", DT_BF16, 0, "/x");
    t = synth_config_json(&o, &e);
    assert_non_null(strstr(t, "\"query_pre_attn_scalar\": 256,"));
    assert_non_null(strstr(t, "\"sliding_window\": 512,"));
    assert_non_null(strstr(t, "\"_sliding_window_pattern\": 6,"));
    free(t);
    t = synth_generation_config_json(&o, &e);
    json_t *g = json_loads(t, 0, NULL);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(g, "eos_token_id"), 1)), 106);
    assert_int_equal(json_integer_value(json_object_get(g, "top_k")), 64);
    assert_null(json_object_get(g, "temperature"));
    json_decref(g);
    free(t);
}

/* Parameter counts of the real presets: gemma-3-1b's published count, and Qwen3.5's text
 * model from its shapes (counted here, independently of the writer's plan). */
static void test_real_param_counts(void **st) {
    (void)st;
    synth_opts_t o = opts(NULL, "gemma3-1b", DT_BF16, 0, "/x");
    synth_plan_t p;
    err_t e;
    assert_int_equal(synth_plan(&o, &p, &e), 0);
    assert_int_equal(p.n_params, 999885952ull);
    assert_int_equal(p.total_bytes, 2 * 999885952ull);
    synth_plan_free(&p);
    const char *q[] = {"qwen3.5-0.8b", "qwen3.5-2b"};
    for (int i = 0; i < 2; i++) {
        o = opts(NULL, q[i], DT_BF16, 0, "/x");
        const synth_preset_t *s = o.preset;
        uint64_t H = (uint64_t)s->hidden, I = (uint64_t)s->intermediate, V = (uint64_t)s->vocab;
        uint64_t conv = 3 * 16 * 128, vd = 16 * 128, q2 = 2 * 8 * 256, kv = 2 * 256, o_in = 8 * 256;
        uint64_t lin = conv * H + vd * H + 2 * 16 * H + H * vd + 16 + 16 + conv * 4 + 128;
        uint64_t full = q2 * H + 2 * kv * H + H * o_in + 2 * 256;
        uint64_t per = 3 * H * I + 2 * H;
        uint64_t want = V * H + 18 * (lin + per) + 6 * (full + per) + H;
        assert_int_equal(synth_plan(&o, &p, &e), 0);
        assert_int_equal(p.n_params, want);
        assert_int_equal(p.n_shards, 1);
        synth_plan_free(&p);
        o.bits = 4;
        assert_int_equal(synth_plan(&o, &p, &e), 0);
        assert_int_equal(p.n_params, want);
        synth_plan_free(&p);
    }
}

/* ---- through the model ---------------------------------------------------------------------- */

#define NTOK 20 /* longer than the gemma tiny window (8) */

static float *forward_logits(const char *dir, int *V) {
    err_t e = {0};
    model_opts_t mo = {"cpu", 2};
    model_t *m = model_load(dir, &mo, &e);
    if (!m) fail_msg("model_load %s: %s", dir, e.msg);
    if (model_init_kv(m, 16, 4, DT_F32, &e)) fail_msg("%s", e.msg);
    *V = m->cfg.vocab_size;
    int32_t tok[NTOK], pos[NTOK], li[NTOK], rs[2] = {0, NTOK};
    for (int i = 0; i < NTOK; i++) { tok[i] = (i * 37 + 5) % *V; pos[i] = i; li[i] = i; }
    kv_seq_t s;
    kv_seq_init(&s);
    kv_seq_t *sp = &s;
    assert_int_equal(kv_seq_reserve(&s, &m->kv, NTOK, &e), 0);
    float *lg = malloc(sizeof(float) * NTOK * (size_t)*V);
    batch_t b = {1, NTOK, tok, pos, rs, &sp, li, NTOK};
    if (model_forward(m, &b, lg, &e)) fail_msg("forward %s: %s", dir, e.msg);
    model_seq_release(m, &s);
    kv_seq_free(&s, &m->kv);
    model_free(m);
    return lg;
}

/* Pearson correlation of two logit arrays. */
static double corr(const float *a, const float *b, size_t n) {
    double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
    for (size_t i = 0; i < n; i++) { ma += a[i]; mb += b[i]; }
    ma /= (double)n;
    mb /= (double)n;
    for (size_t i = 0; i < n; i++) {
        sab += (a[i] - ma) * (b[i] - mb);
        saa += (a[i] - ma) * (a[i] - ma);
        sbb += (b[i] - mb) * (b[i] - mb);
    }
    return sab / sqrt(saa * sbb);
}

static void test_forward(void **st) {
    (void)st;
    const char *arch[] = {"qwen3_5", "gemma3"};
    struct { dtype_t dt; int bits; double tol; } dts[] = {
        {DT_BF16, 0, 0}, {DT_F32, 0, 0.02}, {DT_F16, 0, 0.02}, {DT_BF16, 8, 0.08}, {DT_BF16, 4, 0.4}};
    for (int a = 0; a < 2; a++) {
        float *ref = NULL;
        int V = 0;
        for (int k = 0; k < 5; k++) {
            char *tmp = mk_tmp(), *out = str_printf("%s/m", tmp);
            synth_opts_t o = opts(arch[a], "tiny", dts[k].dt, dts[k].bits, out);
            write_ok(&o);
            float *lg = forward_logits(out, &V);
            double sum = 0, sq = 0;
            for (int i = 0; i < NTOK * V; i++) {
                if (!isfinite(lg[i])) fail_msg("%s %d-bit: logit %d not finite", arch[a], dts[k].bits, i);
                sum += lg[i];
                sq += (double)lg[i] * lg[i];
            }
            double sd = sqrt(sq / (NTOK * V) - (sum / (NTOK * V)) * (sum / (NTOK * V)));
            assert_true(sd > 0.02 && sd < 5); /* alive, not blown up */
            if (!ref) ref = lg;
            else {
                /* q4 noise compounds through a random network: for it, ask that the logits
                 * still correlate with bf16's; the finer dtypes must match closely */
                double err = dts[k].bits == 4 ? 1 - corr(lg, ref, (size_t)NTOK * V) : tu_rel_err(lg, ref, (size_t)NTOK * V);
                fprintf(stderr, "  %s %s bits %d: %s %.4f\n", arch[a], dtype_name(dts[k].dt), dts[k].bits,
                        dts[k].bits == 4 ? "1 - corr" : "max err / max |logit|", err);
                if (err > dts[k].tol) fail_msg("%s dtype %d bits %d: %.3f from bf16's logits (limit %.3f)", arch[a], dts[k].dt, dts[k].bits, err, dts[k].tol);
                free(lg);
            }
            rm_rf(tmp);
            free(out);
            free(tmp);
        }
        free(ref);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_headers_match_fixtures),
        cmocka_unit_test(test_tensors_every_dtype),
        cmocka_unit_test(test_configs),
        cmocka_unit_test(test_real_param_counts),
        cmocka_unit_test(test_forward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
