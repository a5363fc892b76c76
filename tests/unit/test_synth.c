/* test_synth.c — `kiln synth` checkpoints, read back without trusting the writer.
 *
 * Each test writes a checkpoint into a fresh temp folder through the library (synth_write)
 * and then parses what landed on disk with its own code: the safetensors header with
 * jansson (names, dtypes, shapes, data offsets contiguous and covering the file exactly),
 * config.json, the sharded index. Weight values are checked against the generator
 * (synth_weight / synth_group_params, the same seed regenerates the same tensor); MLX codes
 * are unpacked here bit by bit, and every dequantized weight must sit within half a step of
 * the weight it stands for. Expected tensor lists and shard assignment are built here from
 * the architecture, independently of the writer's plan. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "load/safetensors.h"
#include "load/st_writer.h"
#include "load/synth_presets.h"
#include "tensor/dtype.h"

/* ---- helpers ------------------------------------------------------------------------- */

static int rm_cb(const char *p, const struct stat *s, int f, struct FTW *w) {
    (void)s; (void)f; (void)w;
    return remove(p);
}
static void rm_rf(const char *p) { nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

static char *mk_tmp(void) {
    char *t = strdup("/tmp/kiln-test-synth-XXXXXX");
    assert_non_null(mkdtemp(t));
    return t;
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
    closedir(d);
    return n;
}

static size_t dsize(const char *dt) {
    if (!strcmp(dt, "F32") || !strcmp(dt, "U32")) return 4;
    if (!strcmp(dt, "BF16") || !strcmp(dt, "F16")) return 2;
    fail_msg("unexpected dtype %s", dt);
    return 0;
}

/* A safetensors file read back: header JSON (with key order), data region. */
typedef struct stfile {
    char *raw;
    size_t size;
    json_t *hdr;
    const unsigned char *data;
    size_t data_size;
} stfile_t;

/* Parses and validates the container: 8-byte LE length, JSON padded with spaces to a
 * multiple of 8, __metadata__ first, tensors in header order laid out back to back from
 * offset 0, each span equal to its shape's bytes, the last ending at the end of the file. */
static void st_load(stfile_t *f, const char *path, const char *want_format) {
    err_t e;
    f->raw = file_read(path, 1u << 30, &f->size, &e);
    assert_non_null(f->raw);
    assert_true(f->size >= 8);
    uint64_t n = 0;
    for (int b = 0; b < 8; b++) n |= (uint64_t)(unsigned char)f->raw[b] << (8 * b);
    assert_true(8 + n <= f->size);
    assert_int_equal(n % 8, 0);
    json_error_t je;
    f->hdr = json_loadb(f->raw + 8, (size_t)n, 0, &je);
    assert_non_null(f->hdr);
    /* padding: the JSON text is followed by spaces only */
    size_t jl = n;
    while (jl && f->raw[8 + jl - 1] == ' ') jl--;
    assert_int_equal(f->raw[8 + jl - 1], '}');
    assert_true(n - jl < 8);
    f->data = (const unsigned char *)f->raw + 8 + n;
    f->data_size = f->size - 8 - n;
    const char *key;
    json_t *v;
    int i = 0;
    uint64_t off = 0;
    json_object_foreach(f->hdr, key, v) {
        if (i++ == 0) {
            assert_string_equal(key, "__metadata__");
            assert_string_equal(json_string_value(json_object_get(v, "format")), want_format);
            continue;
        }
        const char *dt = json_string_value(json_object_get(v, "dtype"));
        json_t *shape = json_object_get(v, "shape"), *offs = json_object_get(v, "data_offsets");
        assert_non_null(dt);
        assert_true(json_is_array(shape) && json_is_array(offs) && json_array_size(offs) == 2);
        uint64_t bytes = dsize(dt);
        for (size_t d = 0; d < json_array_size(shape); d++) bytes *= (uint64_t)json_integer_value(json_array_get(shape, d));
        uint64_t b0 = (uint64_t)json_integer_value(json_array_get(offs, 0));
        uint64_t b1 = (uint64_t)json_integer_value(json_array_get(offs, 1));
        if (b0 != off) fail_msg("%s: %s starts at %llu, previous ended at %llu", path, key, (unsigned long long)b0, (unsigned long long)off);
        assert_int_equal(b1 - b0, bytes);
        off = b1;
    }
    assert_int_equal(off, f->data_size); /* no gap, no overlap, nothing after the last tensor */
}

static void st_free(stfile_t *f) {
    json_decref(f->hdr);
    free(f->raw);
}

static json_t *tensor(const stfile_t *f, const char *name) {
    json_t *t = json_object_get(f->hdr, name);
    if (!t) fail_msg("tensor %s missing", name);
    return t;
}

static void check_shape(const stfile_t *f, const char *name, const char *dtype, int ndim, int64_t d0, int64_t d1) {
    json_t *t = tensor(f, name);
    assert_string_equal(json_string_value(json_object_get(t, "dtype")), dtype);
    json_t *s = json_object_get(t, "shape");
    assert_int_equal(json_array_size(s), ndim);
    assert_int_equal(json_integer_value(json_array_get(s, 0)), d0);
    if (ndim == 2) assert_int_equal(json_integer_value(json_array_get(s, 1)), d1);
}

static const unsigned char *tdata(const stfile_t *f, const char *name) {
    json_t *t = tensor(f, name);
    return f->data + json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 0));
}

static uint16_t rd16(const unsigned char *p, size_t i) { return (uint16_t)(p[2 * i] | p[2 * i + 1] << 8); }
static uint32_t rd32(const unsigned char *p, size_t i) {
    return (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
}

/* Code c of a row: bits [c*bits, (c+1)*bits) of the row's little-endian bit stream. */
static int code_at(const unsigned char *row, int bits, int64_t c) {
    int v = 0;
    for (int b = 0; b < bits; b++) {
        uint64_t bit = (uint64_t)c * bits + b;
        uint32_t w = rd32(row, bit / 32);
        v |= (int)((w >> (bit % 32)) & 1u) << b;
    }
    return v;
}

/* The tensors of an HF llama/qwen3 checkpoint in state_dict order, with logical shapes. */
typedef struct exp_t {
    char name[96];
    int64_t rows, cols; /* rows=0: a norm of length cols */
} exp_t;

static int expected(const synth_preset_t *p, int layers, exp_t *out) {
    int n = 0;
    int64_t H = p->hidden, q = (int64_t)p->n_heads * p->head_dim, kv = (int64_t)p->n_kv_heads * p->head_dim;
#define ADD(r, c, ...) do { snprintf(out[n].name, sizeof out[n].name, __VA_ARGS__); out[n].rows = (r); out[n].cols = (c); n++; } while (0)
    ADD(p->vocab, H, "model.embed_tokens");
    for (int l = 0; l < layers; l++) {
        ADD(q, H, "model.layers.%d.self_attn.q_proj", l);
        ADD(kv, H, "model.layers.%d.self_attn.k_proj", l);
        ADD(kv, H, "model.layers.%d.self_attn.v_proj", l);
        ADD(H, q, "model.layers.%d.self_attn.o_proj", l);
        if (p->arch == SYNTH_QWEN3) {
            ADD(0, p->head_dim, "model.layers.%d.self_attn.q_norm", l);
            ADD(0, p->head_dim, "model.layers.%d.self_attn.k_norm", l);
        }
        ADD(p->intermediate, H, "model.layers.%d.mlp.gate_proj", l);
        ADD(p->intermediate, H, "model.layers.%d.mlp.up_proj", l);
        ADD(H, p->intermediate, "model.layers.%d.mlp.down_proj", l);
        ADD(0, H, "model.layers.%d.input_layernorm", l);
        ADD(0, H, "model.layers.%d.post_attention_layernorm", l);
    }
    ADD(0, H, "model.norm");
    if (!p->tie) ADD(p->vocab, H, "lm_head");
#undef ADD
    return n;
}

static json_t *load_json(const char *dir, const char *name) {
    char *p = str_printf("%s/%s", dir, name);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    if (!j) fail_msg("%s: %s", p, je.text);
    free(p);
    return j;
}

static synth_opts_t opts(const char *arch, const char *preset, dtype_t dt, int bits, int g, const char *out) {
    synth_opts_t o = {0};
    o.preset = synth_preset_find(preset, arch);
    assert_non_null(o.preset);
    o.dtype = dt;
    o.bits = bits;
    o.group_size = g;
    o.seed = 7;
    o.out = out;
    return o;
}

static void write_ok(const synth_opts_t *o) {
    err_t e;
    err_clear(&e);
    if (synth_write(o, &e)) fail_msg("synth_write: %s", e.msg);
}

/* Every tensor of the expected list is in the file with the right shape/dtype and nothing
 * else is; the values are what the generator makes for that name. */
static void check_model(const char *dir, const synth_opts_t *o, const char *file) {
    const synth_preset_t *p = o->preset;
    int layers = o->layers ? o->layers : p->n_layers;
    exp_t *ex = calloc(4096, sizeof *ex);
    int n = expected(p, layers, ex);
    char *path = str_printf("%s/%s", dir, file);
    stfile_t f;
    st_load(&f, path, o->bits ? "mlx" : "pt");
    const char *fdt = o->dtype == DT_F32 ? "F32" : o->dtype == DT_F16 ? "F16" : "BF16";
    int g = o->group_size ? o->group_size : 64;
    size_t want_tensors = 0;
    for (int i = 0; i < n; i++) {
        char name[sizeof ex[0].name + 8];
        snprintf(name, sizeof name, "%.*s.weight", (int)sizeof ex[0].name, ex[i].name);
        if (ex[i].rows == 0) { /* norm: ones, in the model dtype (bf16 when quantized) */
            const char *ndt = o->bits ? "BF16" : fdt;
            check_shape(&f, name, ndt, 1, ex[i].cols, 0);
            const unsigned char *d = tdata(&f, name);
            for (int64_t c = 0; c < ex[i].cols; c++) {
                float v = !strcmp(ndt, "F32") ? ((const float *)(const void *)d)[c]
                          : !strcmp(ndt, "F16") ? f16_to_f32(rd16(d, c)) : bf16_to_f32(rd16(d, c));
                assert_true(v == 1.0f);
            }
            want_tensors++;
            continue;
        }
        uint64_t ts = synth_tensor_seed(o->seed, name);
        int64_t R = ex[i].rows, C = ex[i].cols;
        if (!o->bits) {
            check_shape(&f, name, fdt, 2, R, C);
            const unsigned char *d = tdata(&f, name);
            double sum = 0, sq = 0;
            for (int64_t k = 0; k < R * C; k++) {
                float w = synth_weight(ts, (uint64_t)k), got;
                if (o->dtype == DT_F32) { memcpy(&got, d + 4 * k, 4); assert_true(got == w); }
                else if (o->dtype == DT_F16) { assert_int_equal(rd16(d, k), f32_to_f16(w)); got = f16_to_f32(rd16(d, k)); }
                else { assert_int_equal(rd16(d, k), f32_to_bf16(w)); got = bf16_to_f32(rd16(d, k)); }
                sum += got;
                sq += (double)got * got;
            }
            double mean = sum / (R * C), sd = sqrt(sq / (R * C) - mean * mean);
            assert_true(fabs(mean) < 0.002);
            assert_true(sd > 0.018 && sd < 0.022);
            want_tensors++;
            continue;
        }
        /* MLX affine: U32 codes [R, C*bits/32], bf16 scales and biases [R, C/g]. */
        char sn[128], bn[128];
        snprintf(sn, sizeof sn, "%s.scales", ex[i].name);
        snprintf(bn, sizeof bn, "%s.biases", ex[i].name);
        check_shape(&f, name, "U32", 2, R, C * o->bits / 32);
        check_shape(&f, sn, "BF16", 2, R, C / g);
        check_shape(&f, bn, "BF16", 2, R, C / g);
        const unsigned char *w = tdata(&f, name), *sc = tdata(&f, sn), *bi = tdata(&f, bn);
        int qmax = (1 << o->bits) - 1, lo = qmax, hi = 0;
        for (int64_t r = 0; r < R; r++) {
            const unsigned char *row = w + (size_t)r * (size_t)(C * o->bits / 8);
            for (int64_t c = 0; c < C; c++) {
                int64_t grp = r * (C / g) + c / g;
                float s = bf16_to_f32(rd16(sc, grp)), b = bf16_to_f32(rd16(bi, grp)), s2, b2;
                synth_group_params(ts, (uint64_t)grp, o->bits, &s2, &b2);
                assert_true(s == s2 && b == b2 && s > 0);
                int q = code_at(row, o->bits, c);
                if (q < lo) lo = q;
                if (q > hi) hi = q;
                float target = synth_weight(ts, (uint64_t)(r * C + c));
                float deq = s * (float)q + b;
                if (fabsf(deq - target) > 0.5f * s * 1.0001f)
                    fail_msg("%s[%lld,%lld]: code %d dequantizes to %g, weight %g, step %g", name, (long long)r,
                             (long long)c, q, deq, target, s);
            }
        }
        /* the grid is used: codes reach both halves of the range */
        assert_true(lo < qmax / 2 && hi > qmax / 2);
        want_tensors += 3;
    }
    assert_int_equal(json_object_size(f.hdr) - 1, want_tensors);
    /* file order: safetensors' own (U32 before BF16, then by name) */
    const char *key, *prev = NULL, *prev_dt = NULL;
    json_t *v;
    json_object_foreach(f.hdr, key, v) {
        if (!strcmp(key, "__metadata__")) continue;
        const char *dt = json_string_value(json_object_get(v, "dtype"));
        if (prev && !strcmp(prev_dt, dt)) assert_true(strcmp(prev, key) < 0);
        if (prev && strcmp(prev_dt, dt)) assert_true(!strcmp(prev_dt, "U32") && !strcmp(dt, "BF16"));
        prev = key;
        prev_dt = dt;
    }
    st_free(&f);
    free(path);
    free(ex);
}

static void check_config(const char *dir, const synth_opts_t *o) {
    const synth_preset_t *p = o->preset;
    json_t *c = load_json(dir, "config.json");
    int qwen = p->arch == SYNTH_QWEN3;
    assert_string_equal(json_string_value(json_array_get(json_object_get(c, "architectures"), 0)),
                        qwen ? "Qwen3ForCausalLM" : "LlamaForCausalLM");
    assert_string_equal(json_string_value(json_object_get(c, "model_type")), qwen ? "qwen3" : "llama");
    assert_int_equal(json_integer_value(json_object_get(c, "hidden_size")), p->hidden);
    assert_int_equal(json_integer_value(json_object_get(c, "intermediate_size")), p->intermediate);
    assert_int_equal(json_integer_value(json_object_get(c, "num_attention_heads")), p->n_heads);
    assert_int_equal(json_integer_value(json_object_get(c, "num_key_value_heads")), p->n_kv_heads);
    assert_int_equal(json_integer_value(json_object_get(c, "head_dim")), p->head_dim);
    assert_int_equal(json_integer_value(json_object_get(c, "num_hidden_layers")), o->layers ? o->layers : p->n_layers);
    assert_int_equal(json_integer_value(json_object_get(c, "vocab_size")), p->vocab);
    assert_int_equal(json_integer_value(json_object_get(c, "bos_token_id")), p->bos);
    assert_int_equal(json_integer_value(json_object_get(c, "eos_token_id")), p->eos);
    assert_true(json_is_boolean(json_object_get(c, "tie_word_embeddings")));
    assert_int_equal(json_is_true(json_object_get(c, "tie_word_embeddings")), p->tie);
    assert_true(fabs(json_number_value(json_object_get(c, "rms_norm_eps")) - p->rms_eps) < 1e-12);
    assert_true(json_number_value(json_object_get(c, "rope_theta")) == p->rope_theta);
    const char *tdt = o->bits || o->dtype == DT_BF16 ? "bfloat16" : o->dtype == DT_F16 ? "float16" : "float32";
    assert_string_equal(json_string_value(json_object_get(c, "torch_dtype")), tdt);
    json_t *q = json_object_get(c, "quantization"), *qc = json_object_get(c, "quantization_config");
    if (o->bits) {
        assert_int_equal(json_integer_value(json_object_get(q, "bits")), o->bits);
        assert_int_equal(json_integer_value(json_object_get(q, "group_size")), o->group_size ? o->group_size : 64);
        assert_true(json_equal(q, qc));
    } else {
        assert_null(q);
        assert_null(qc);
    }
    json_decref(c);
    json_t *g = load_json(dir, "generation_config.json");
    assert_int_equal(json_integer_value(json_object_get(g, "bos_token_id")), p->bos);
    json_decref(g);
}

/* ---- tests -------------------------------------------------------------------------- */

static void test_float_dtypes(void **state) {
    (void)state;
    const char *arches[] = {"llama", "qwen3"};
    dtype_t dts[] = {DT_BF16, DT_F16, DT_F32};
    for (int a = 0; a < 2; a++)
        for (int d = 0; d < 3; d++) {
            char *tmp = mk_tmp(), *out = str_printf("%s/m", tmp);
            synth_opts_t o = opts(arches[a], "tiny", dts[d], 0, 0, out);
            write_ok(&o);
            assert_int_equal(count_entries(out), 3); /* config, generation_config, model */
            check_config(out, &o);
            check_model(out, &o, "model.safetensors");
            assert_int_equal(count_entries(tmp), 1); /* no temp folder left beside it */
            rm_rf(tmp);
            free(out);
            free(tmp);
        }
}

static void test_quantized(void **state) {
    (void)state;
    int bits[] = {2, 3, 4, 5, 6, 8};
    for (int b = 0; b < 6; b++)
        for (int gi = 0; gi < 2; gi++) {
            int g = gi ? 64 : 32;
            const char *arch = (b + gi) % 2 ? "qwen3" : "llama";
            char *tmp = mk_tmp(), *out = str_printf("%s/m", tmp);
            synth_opts_t o = opts(arch, "tiny", DT_BF16, bits[b], g, out);
            write_ok(&o);
            check_config(out, &o);
            check_model(out, &o, "model.safetensors");
            rm_rf(tmp);
            free(out);
            free(tmp);
        }
}

/* The writer's header must be byte for byte what MLX wrote for the same architecture. */
static void test_matches_mlx_fixture(void **state) {
    (void)state;
    const char *fx[] = {KILN_SOURCE_DIR "/tests/fixtures/models/llama-tiny-mlx-q4/model.safetensors",
                        KILN_SOURCE_DIR "/tests/fixtures/models/llama-tiny-mlx-q8/model.safetensors",
                        KILN_SOURCE_DIR "/tests/fixtures/models/llama-tiny/model.safetensors"};
    int bits[] = {4, 8, 0};
    for (int k = 0; k < 3; k++) {
        char *tmp = mk_tmp(), *out = str_printf("%s/m", tmp), *mine = str_printf("%s/model.safetensors", out);
        synth_opts_t o = opts("llama", "tiny", DT_BF16, bits[k], bits[k] ? 32 : 0, out);
        write_ok(&o);
        stfile_t a, b;
        st_load(&a, fx[k], bits[k] ? "mlx" : "pt");
        st_load(&b, mine, bits[k] ? "mlx" : "pt");
        assert_int_equal(a.size, b.size);
        size_t hdr = a.size - a.data_size;
        assert_memory_equal(a.raw, b.raw, hdr);
        st_free(&a);
        st_free(&b);
        rm_rf(tmp);
        free(mine);
        free(out);
        free(tmp);
    }
}

/* huggingface_hub's split_state_dict_into_shards, recomputed here from the expected
 * state_dict order: a tensor that would overflow the current shard starts a new one; a
 * tensor bigger than the limit is a shard of its own, listed when it is met (so before
 * the shard still being filled). */
static void check_sharding(const char *arch, double limit, int min_shards) {
    char *tmp = mk_tmp(), *out = str_printf("%s/m", tmp);
    synth_opts_t o = opts(arch, "tiny", DT_BF16, 0, 0, out);
    o.layers = 3;
    o.shard_bytes = limit;
    write_ok(&o);
    exp_t ex[64];
    int n = expected(o.preset, 3, ex);
    int shard_of[64], n_shards = 0, cur = -1, list_pos[64];
    uint64_t cur_size = 0, total = 0;
    for (int i = 0; i < n; i++) {
        uint64_t bytes = 2 * (uint64_t)(ex[i].rows ? ex[i].rows : 1) * (uint64_t)ex[i].cols;
        total += bytes;
        if ((double)bytes > limit) { list_pos[n_shards] = n_shards; shard_of[i] = n_shards++; continue; }
        if (cur >= 0 && (double)(cur_size + bytes) > limit) cur = -1;
        if (cur < 0) { cur = n_shards++; cur_size = 0; list_pos[cur] = -1; }
        shard_of[i] = cur;
        cur_size += bytes;
    }
    /* list order: a shard being filled is listed when it closes, i.e. after any oversize
     * shard created meanwhile. Number shards by their closing order. */
    int order[64], n_order = 0, open_shard = -1;
    for (int i = 0; i < n; i++) {
        int s = shard_of[i];
        if (list_pos[s] >= 0) { order[n_order++] = s; list_pos[s] = -2; continue; }
        if (list_pos[s] == -2) continue;
        if (s != open_shard) {
            if (open_shard >= 0) order[n_order++] = open_shard;
            open_shard = s;
        }
    }
    if (open_shard >= 0) order[n_order++] = open_shard;
    assert_int_equal(n_order, n_shards);
    int number[64];
    for (int k = 0; k < n_order; k++) number[order[k]] = k + 1;
    assert_true(n_shards >= min_shards);

    json_t *idx = load_json(out, "model.safetensors.index.json");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(idx, "metadata"), "total_size")), total);
    json_t *wm = json_object_get(idx, "weight_map");
    assert_int_equal(json_object_size(wm), n);
    char fname[64];
    for (int i = 0; i < n; i++) {
        char name[sizeof ex[0].name + 8];
        snprintf(name, sizeof name, "%.*s.weight", (int)sizeof ex[0].name, ex[i].name);
        snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", number[shard_of[i]], n_shards);
        const char *got = json_string_value(json_object_get(wm, name));
        if (!got || strcmp(got, fname)) fail_msg("%s: in %s, expected %s", name, got ? got : "(none)", fname);
    }
    /* every shard is a valid file holding exactly the tensors the map assigns to it */
    uint64_t seen = 0;
    size_t seen_tensors = 0;
    for (int s = 0; s < n_shards; s++) {
        snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        char *p = str_printf("%s/%s", out, fname);
        stfile_t f;
        st_load(&f, p, "pt");
        const char *key;
        json_t *v;
        json_object_foreach(f.hdr, key, v) {
            if (!strcmp(key, "__metadata__")) continue;
            assert_string_equal(json_string_value(json_object_get(wm, key)), fname);
            seen_tensors++;
        }
        /* a shard exceeds the limit only when it is a single oversize tensor */
        if ((double)f.data_size > limit) assert_int_equal(json_object_size(f.hdr), 2);
        seen += f.data_size;
        st_free(&f);
        free(p);
    }
    assert_int_equal(seen_tensors, n);
    assert_int_equal(seen, total);
    char *single = str_printf("%s/model.safetensors", out);
    assert_false(file_exists(single));
    free(single);
    assert_int_equal(count_entries(out), 3 + n_shards);
    json_decref(idx);
    rm_rf(tmp);
    free(out);
    free(tmp);
}

static void test_sharding(void **state) {
    (void)state;
    check_sharding("qwen3", 70000, 3);  /* every tensor fits a shard */
    check_sharding("llama", 40000, 4);  /* embed_tokens and lm_head are oversize */
}

static char *slurp(const char *dir, const char *name, size_t *len) {
    char *p = str_printf("%s/%s", dir, name);
    err_t e;
    char *d = file_read(p, 1u << 30, len, &e);
    assert_non_null(d);
    free(p);
    return d;
}

static void test_determinism(void **state) {
    (void)state;
    char *tmp = mk_tmp();
    char *a = str_printf("%s/a", tmp), *b = str_printf("%s/b", tmp), *c = str_printf("%s/c", tmp),
         *d = str_printf("%s/d", tmp);
    synth_opts_t oa = opts("qwen3", "tiny", DT_BF16, 4, 32, a), ob = oa, oc = oa, od = oa;
    ob.out = b;
    oc.out = c;
    oc.seed = 8;
    od.out = d;
    od.layers = 1;
    write_ok(&oa);
    write_ok(&ob);
    write_ok(&oc);
    write_ok(&od);
    size_t la, lb, lc;
    char *ma = slurp(a, "model.safetensors", &la), *mb = slurp(b, "model.safetensors", &lb),
         *mc = slurp(c, "model.safetensors", &lc);
    assert_int_equal(la, lb);
    assert_memory_equal(ma, mb, la); /* same seed, same bytes */
    assert_int_equal(la, lc);
    assert_true(memcmp(ma, mc, la) != 0); /* another seed, other weights, same layout */
    size_t ca, cb;
    char *ja = slurp(a, "config.json", &ca), *jb = slurp(b, "config.json", &cb);
    assert_int_equal(ca, cb);
    assert_memory_equal(ja, jb, ca);
    /* weights depend on (seed, name), not on the layer count: layer 0 is the same in a
     * 1-layer model */
    stfile_t fa, fd;
    char *pa = str_printf("%s/model.safetensors", a), *pd = str_printf("%s/model.safetensors", d);
    st_load(&fa, pa, "mlx");
    st_load(&fd, pd, "mlx");
    const char *nm = "model.layers.0.mlp.down_proj.weight";
    json_t *t = tensor(&fa, nm);
    size_t nb = (size_t)(json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 1)) -
                         json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 0)));
    assert_memory_equal(tdata(&fa, nm), tdata(&fd, nm), nb);
    st_free(&fa);
    st_free(&fd);
    free(pa); free(pd); free(ma); free(mb); free(mc); free(ja); free(jb);
    rm_rf(tmp);
    free(a); free(b); free(c); free(d); free(tmp);
}

static void expect_error(const synth_opts_t *o, const char *needle) {
    err_t e;
    err_clear(&e);
    assert_int_equal(synth_write(o, &e), -1);
    if (!strstr(e.msg, needle)) fail_msg("error '%s' does not mention '%s'", e.msg, needle);
    assert_null(strchr(e.msg, '\n'));
}

static void test_bad_options(void **state) {
    (void)state;
    char *tmp = mk_tmp(), *out = str_printf("%s/m", tmp);
    synth_opts_t o = opts("llama", "tiny", DT_BF16, 7, 32, out);
    expect_error(&o, "--bits");
    o.bits = 1;
    expect_error(&o, "--bits");
    o.bits = 9;
    expect_error(&o, "--bits");
    o.bits = 4;
    o.group_size = 48;
    expect_error(&o, "--group-size");
    o.group_size = 128; /* tiny's hidden size is 64 */
    expect_error(&o, "--group-size");
    o = opts("llama", "tiny", DT_F16, 0, 64, out);
    expect_error(&o, "--group-size");
    o = opts("llama", "tiny", DT_U32, 0, 0, out);
    expect_error(&o, "--dtype");
    o = opts("llama", "tiny", DT_BF16, 0, 0, NULL);
    expect_error(&o, "--out");
    char *nested = str_printf("%s/no/such/dir", tmp);
    o.out = nested;
    expect_error(&o, "--out");
    assert_int_equal(count_entries(tmp), 0); /* nothing left behind by any of these */

    /* a plain file where the folder should go */
    char *file = str_printf("%s/file", tmp);
    assert_int_equal(file_write_atomic(file, "x", 1, NULL), 0);
    o.out = file;
    expect_error(&o, "--out");
    char *under = str_printf("%s/sub", file); /* parent is a file */
    o.out = under;
    expect_error(&o, "--out");

    /* a non-empty folder is refused without force, untouched; replaced with force */
    char *keep = str_printf("%s/keep", out);
    assert_int_equal(mkdir(out, 0755), 0);
    assert_int_equal(file_write_atomic(keep, "data", 4, NULL), 0);
    o.out = out;
    expect_error(&o, "--force");
    assert_true(file_exists(keep));
    assert_int_equal(count_entries(out), 1);
    assert_int_equal(count_entries(tmp), 2);
    o.force = 1;
    write_ok(&o);
    assert_false(file_exists(keep));
    assert_int_equal(count_entries(out), 3);
    assert_int_equal(count_entries(tmp), 2); /* out and file: no temp or old folder left */

    /* an empty folder is filled without --force */
    rm_rf(out);
    assert_int_equal(mkdir(out, 0755), 0);
    o.force = 0;
    write_ok(&o);
    assert_int_equal(count_entries(out), 3);

    rm_rf(tmp);
    free(keep); free(under); free(file); free(nested); free(out); free(tmp);
}

/* Stopping half-way (Ctrl-C in the CLI) leaves nothing: no target, no temp folder. */
static volatile sig_atomic_t stop_flag;
static void stop_soon(void *ctx, uint64_t done, uint64_t total) {
    (void)ctx;
    if (done > total / 3) stop_flag = 1;
}

static void test_interrupt_cleans_up(void **state) {
    (void)state;
    char *tmp = mk_tmp(), *out = str_printf("%s/m", tmp);
    synth_opts_t o = opts("llama", "llama-3.2-1b", DT_BF16, 0, 0, out);
    o.layers = 1; /* ~650 MB: several chunks, stopped after a third */
    stop_flag = 0;
    o.progress = stop_soon;
    o.cancel = &stop_flag;
    expect_error(&o, "interrupted");
    assert_int_equal(count_entries(tmp), 0);
    rm_rf(tmp);
    free(out);
    free(tmp);
}

/* Parameter counts of the real models (as published on their model cards / by
 * transformers' num_parameters()), and config details that loaders key on. */
static void test_real_presets(void **state) {
    (void)state;
    struct { const char *name; uint64_t params; } want[] = {
        {"qwen3-0.6b", 596049920ull},   {"llama-3.2-1b", 1235814400ull},
        {"llama-3-8b", 8030261248ull},  {"qwen3-8b", 8190735360ull},
    };
    for (int i = 0; i < 4; i++) {
        synth_opts_t o = opts(NULL, want[i].name, DT_BF16, 0, 0, "/nonexistent/x");
        synth_plan_t p;
        err_t e;
        assert_int_equal(synth_plan(&o, &p, &e), 0);
        assert_int_equal(p.n_params, want[i].params);
        assert_int_equal(p.total_bytes, 2 * want[i].params);
        if (!strcmp(want[i].name, "llama-3-8b")) assert_int_equal(p.n_shards, 4); /* as on the hub */
        synth_plan_free(&p);
        o.bits = 4;
        assert_int_equal(synth_plan(&o, &p, &e), 0);
        assert_int_equal(p.n_params, want[i].params);
        synth_plan_free(&p);
    }
    assert_non_null(synth_preset_find("qwen3-1.7b", NULL));
    assert_non_null(synth_preset_find("qwen3-4b", NULL));
    assert_null(synth_preset_find("tiny", NULL));
    assert_null(synth_preset_find("llama-9b", "llama"));

    synth_opts_t o = opts(NULL, "llama-3.2-1b", DT_BF16, 0, 0, "/x");
    err_t e;
    char *txt = synth_config_json(&o, &e);
    json_t *c = json_loads(txt, 0, NULL);
    json_t *rs = json_object_get(c, "rope_scaling");
    assert_string_equal(json_string_value(json_object_get(rs, "rope_type")), "llama3");
    assert_true(json_real_value(json_object_get(rs, "factor")) == 32.0);
    assert_true(json_real_value(json_object_get(rs, "low_freq_factor")) == 1.0);
    assert_true(json_real_value(json_object_get(rs, "high_freq_factor")) == 4.0);
    assert_int_equal(json_integer_value(json_object_get(rs, "original_max_position_embeddings")), 8192);
    assert_true(json_real_value(json_object_get(c, "rope_theta")) == 500000.0);
    assert_non_null(strstr(txt, "\"rms_norm_eps\": 1e-05,")); /* Python's spelling */
    json_decref(c);
    free(txt);
    o = opts(NULL, "qwen3-0.6b", DT_BF16, 0, 0, "/x");
    txt = synth_config_json(&o, &e);
    assert_non_null(strstr(txt, "\"rope_theta\": 1000000,"));
    assert_non_null(strstr(txt, "\"rope_scaling\": null,"));
    assert_non_null(strstr(txt, "\"rms_norm_eps\": 1e-06,"));
    free(txt);
    txt = synth_generation_config_json(&o, &e);
    c = json_loads(txt, 0, NULL);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(c, "eos_token_id"), 1)), 151643);
    json_decref(c);
    free(txt);
}

/* The streaming writer on its own: chunks that straddle tensors, an empty tensor,
 * refusal to overrun, and no file unless every byte arrived. */
static void test_writer(void **state) {
    (void)state;
    char *tmp = mk_tmp(), *path = str_printf("%s/x.safetensors", tmp);
    stw_tensor_t t[] = {{"b", DT_F32, 2, {2, 3}}, {"empty", DT_BF16, 1, {0}}, {"a", DT_U32, 1, {5}}};
    stw_writer_t *w;
    err_t e;
    assert_int_equal(stw_open(&w, path, t, 3, "pt", &e), 0);
    unsigned char bytes[44];
    for (int i = 0; i < 44; i++) bytes[i] = (unsigned char)i;
    assert_int_equal(stw_write(w, bytes, 20, &e), 0);
    assert_string_equal(stw_current(w), "b");
    assert_int_equal(stw_write(w, bytes + 20, 10, &e), 0); /* crosses into "a" */
    assert_string_equal(stw_current(w), "a");
    assert_int_equal(stw_write(w, bytes + 30, 15, &e), -1);  /* one byte too many */
    assert_non_null(strstr(e.msg, "past the end"));
    assert_int_equal(stw_write(w, bytes + 30, 14, &e), 0);
    assert_null(stw_current(w));
    assert_int_equal(stw_finish(w, &e), 0);
    stfile_t f;
    st_load(&f, path, "pt");
    assert_int_equal(f.data_size, 44);
    assert_memory_equal(f.data, bytes, 44);
    check_shape(&f, "empty", "BF16", 1, 0, 0);
    st_free(&f);

    /* incomplete: finish fails and nothing appears */
    char *p2 = str_printf("%s/y.safetensors", tmp);
    assert_int_equal(stw_open(&w, p2, t, 3, "pt", &e), 0);
    assert_int_equal(stw_write(w, bytes, 10, &e), 0);
    assert_int_equal(stw_finish(w, &e), -1);
    assert_non_null(strstr(e.msg, "incomplete"));
    assert_int_equal(count_entries(tmp), 1);
    /* duplicate names are refused before anything is created */
    stw_tensor_t dup[] = {{"a", DT_F32, 1, {1}}, {"a", DT_F32, 1, {1}}};
    assert_int_equal(stw_open(&w, p2, dup, 2, "pt", &e), -1);
    assert_int_equal(count_entries(tmp), 1);
    /* canonical order: U32 before BF16, then by name */
    stw_tensor_t s[] = {{"z", DT_BF16, 0, {0}}, {"b", DT_U32, 0, {0}}, {"a", DT_BF16, 0, {0}}, {"c", DT_F32, 0, {0}}};
    stw_sort_canonical(s, 4);
    assert_string_equal(s[0].name, "c");
    assert_string_equal(s[1].name, "b");
    assert_string_equal(s[2].name, "a");
    assert_string_equal(s[3].name, "z");
    rm_rf(tmp);
    free(p2);
    free(path);
    free(tmp);
}

/* st_copy_to_anon's progress reports, as the loader's progress line sees them */
typedef struct { size_t last; int calls, backwards; } progress_seen_t;
static void record_progress(size_t done, void *ctx) {
    progress_seen_t *p = ctx;
    if (done < p->last) p->backwards = 1;
    p->last = done;
    p->calls++;
}

/* kiln's own loader (load/safetensors.c) opens what synth wrote, sharded or not, and
 * sees the same tensors with the same bytes as the plan says. */
static void test_loader_reads_it(void **state) {
    (void)state;
    double limits[] = {0, 60000};
    for (int k = 0; k < 2; k++) {
        char *tmp = mk_tmp(), *out = str_printf("%s/m", tmp);
        synth_opts_t o = opts("llama", "tiny", DT_BF16, k ? 0 : 4, 0, out);
        o.shard_bytes = limits[k];
        write_ok(&o);
        synth_plan_t p;
        err_t e;
        assert_int_equal(synth_plan(&o, &p, &e), 0);
        st_archive_t ar;
        if (st_open(&ar, out, &e)) fail_msg("st_open: %s", e.msg);
        assert_int_equal(ar.n_tensors, p.n);
        assert_int_equal(ar.n_files, p.n_shards);
        assert_true(k == 0 || p.n_shards > 1);
        for (int i = 0; i < p.n; i++) {
            const st_tensor_t *t = st_find(&ar, p.t[i].name);
            assert_non_null(t);
            assert_int_equal(t->dtype, p.t[i].dtype);
            assert_int_equal(t->nbytes, p.t[i].bytes);
            assert_int_equal(t->shape[0], p.t[i].shape[0]);
        }
        const st_tensor_t *t = st_find(&ar, "model.layers.1.mlp.up_proj.weight");
        uint64_t ts = synth_tensor_seed(o.seed, "model.layers.1.mlp.up_proj.weight");
        if (!o.bits) assert_int_equal(((const uint16_t *)t->data)[5], f32_to_bf16(synth_weight(ts, 5)));
        /* st_copy_to_anon (KILN_HUGE_WEIGHTS): every file into a 2 MB-aligned anonymous copy
         * with its data region on a 64-byte boundary, every tensor pointing into it with the
         * same bytes */
        unsigned char **saved = malloc(sizeof *saved * (size_t)ar.n_tensors);
        size_t total = 0;
        for (int i = 0; i < ar.n_tensors; i++) {
            saved[i] = malloc(ar.tensors[i].nbytes ? ar.tensors[i].nbytes : 1);
            memcpy(saved[i], ar.tensors[i].data, ar.tensors[i].nbytes);
        }
        for (int f = 0; f < ar.n_files; f++) total += ar.files[f].size;
        /* a budget of 0 bytes (not enough memory for a copy): everything stays mapped */
        assert_int_equal(st_copy_to_anon(&ar, 0, 0, NULL, NULL), 0);
        for (int f = 0; f < ar.n_files; f++) assert_int_equal(ar.files[f].anon_size, 0);
        progress_seen_t ps = {0, 0, 0};
        assert_int_equal(st_copy_to_anon(&ar, 0, SIZE_MAX, record_progress, &ps), total);
        assert_int_equal(ps.last, total); /* progress counts over all files, ends at the total */
        assert_true(ps.calls >= ar.n_files);
        assert_false(ps.backwards);
        for (int f = 0; f < ar.n_files; f++) { /* the mapping 2 MB-aligned, the data region on a cache line */
            const unsigned char *d = ar.files[f].data;
            uint64_t hlen = 0;
            for (int b = 7; b >= 0; b--) hlen = (hlen << 8) | d[b];
            assert_true(ar.files[f].anon_size >= ar.files[f].size + ar.files[f].anon_shift);
            assert_true(ar.files[f].anon_shift < 64);
            assert_int_equal((uintptr_t)(d - ar.files[f].anon_shift) & (((uintptr_t)2 << 20) - 1), 0);
            assert_int_equal((uintptr_t)(d + 8 + hlen) & 63, 0);
        }
        for (int i = 0; i < ar.n_tensors; i++) {
            const mapped_file_t *f = &ar.files[ar.tensors[i].file];
            assert_true((const unsigned char *)ar.tensors[i].data >= (const unsigned char *)f->data);
            assert_true((const unsigned char *)ar.tensors[i].data + ar.tensors[i].nbytes <= (const unsigned char *)f->data + f->size);
            assert_memory_equal(ar.tensors[i].data, saved[i], ar.tensors[i].nbytes);
            free(saved[i]);
        }
        free(saved);
        for (int f = 0; f < ar.n_files; f++) assert_true(file_anon_huge_bytes(&ar.files[f]) <= ar.files[f].anon_size);
        assert_int_equal(st_copy_to_anon(&ar, 0, SIZE_MAX, NULL, NULL), 0); /* already copied: nothing to do */
        st_close(&ar);
        synth_plan_free(&p);
        rm_rf(tmp);
        free(out);
        free(tmp);
    }
}

/* mem_huge_bytes (the coverage kiln bench reports for the weight copy) reads a range's 4 KB
 * pages as resident and not huge, clamps each mapping to the range, and, where this kernel
 * can collapse (MADV_COLLAPSE, Linux 6.1, THP not "never"), sees the range in 2 MB pages
 * after a collapse, as file_copy_anon does when its faults fell back to 4 KB pages. */
static void test_huge_coverage(void **state) {
    (void)state;
    const size_t H = (size_t)2 << 20, n = 4 * H;
    size_t huge = 1, rss = 1;
    unsigned char *raw = mmap(NULL, n + 2 * H, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(raw != MAP_FAILED);
    unsigned char *p = (unsigned char *)(((uintptr_t)raw + H) & ~(uintptr_t)(H - 1));
    /* inaccessible pages on both sides: [p, p + n) is a mapping of its own, not merged with
     * a neighbour's touched pages (ASan's, another test's) */
    mprotect(raw, (size_t)(p - raw), PROT_NONE);
    mprotect(p + n, (size_t)(raw + n + 2 * H - (p + n)), PROT_NONE);
    if (mem_huge_bytes(p, n, &huge, &rss)) { munmap(raw, n + 2 * H); skip(); }
    assert_int_equal(rss, 0); /* nothing touched yet */
    assert_int_equal(huge, 0);
    madvise(p, n, MADV_NOHUGEPAGE);
    memset(p, 1, n);
    assert_int_equal(mem_huge_bytes(p, n, &huge, &rss), 0);
    assert_int_equal(huge, 0);
    assert_int_equal(rss, n);
    assert_int_equal(mem_huge_bytes(p + H, H, &huge, &rss), 0); /* part of a mapping: clamped */
    assert_int_equal(rss, H);
    madvise(p, n, MADV_HUGEPAGE);
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
    if (madvise(p, n, MADV_COLLAPSE) == 0) {
        assert_int_equal(mem_huge_bytes(p, n, &huge, &rss), 0);
        assert_int_equal(huge, n);
        for (size_t i = 0; i < n; i += 4096) assert_int_equal(p[i], 1); /* same bytes */
    }
    munmap(raw, n + 2 * H);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_huge_coverage),
        cmocka_unit_test(test_writer),
        cmocka_unit_test(test_float_dtypes),
        cmocka_unit_test(test_quantized),
        cmocka_unit_test(test_matches_mlx_fixture),
        cmocka_unit_test(test_sharding),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_interrupt_cleans_up),
        cmocka_unit_test(test_real_presets),
        cmocka_unit_test(test_loader_reads_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
