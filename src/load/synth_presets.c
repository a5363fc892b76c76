/* synth_presets.c — see synth_presets.h. The story, top to bottom:
 *
 *   presets   the architecture numbers of real config.json files, checked against them
 *   generator splitmix64 over (tensor seed, element index) -> a normal-ish weight
 *   plan      the tensor list in state_dict order, shard assignment as huggingface_hub does
 *   configs   config.json / generation_config.json / model.safetensors.index.json
 *   fill      one tensor's bytes, a block of rows at a time, into the streaming writer
 *   write     temp folder next to the target, every file, fsync, rename into place
 *
 * Quantized weights are made directly in MLX's affine form, never as a float matrix first:
 * each group of G weights gets a scale and bias drawn from the generator (wide enough that
 * every weight fits, as min/max quantization would make them), and each code is the
 * weight, from the same generator as the float checkpoint, rounded onto that grid. */
#include "load/synth_presets.h"
#include "base/file.h"
#include "load/st_writer.h"
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <fcntl.h>
#include <unistd.h>

/* ---- presets ---------------------------------------------------------------------- */

/* Numbers from each repo's config.json and generation_config.json on the Hugging Face hub.
 * The tiny presets match tests/fixtures/models/{llama,qwen3}-tiny in shape. */
static const synth_preset_t presets[] = {
    {.name = "qwen3-0.6b", .arch = SYNTH_QWEN3, .hf_repo = "Qwen/Qwen3-0.6B",
     .hidden = 1024, .intermediate = 3072, .n_heads = 16, .n_kv_heads = 8, .head_dim = 128,
     .n_layers = 28, .vocab = 151936, .max_pos = 40960, .max_window_layers = 28,
     .rms_eps = 1e-6, .rope_theta = 1000000, .rope_theta_int = 1, .tie = 1,
     .bos = 151643, .eos = 151645, .transformers_version = "4.51.0",
     .gen_eos2 = 151643, .gen_pad = 151643, .gen_do_sample = 1, .gen_top_k = 20,
     .gen_temperature = 0.6, .gen_top_p = 0.95, .gen_transformers_version = "4.51.0"},
    {.name = "qwen3-1.7b", .arch = SYNTH_QWEN3, .hf_repo = "Qwen/Qwen3-1.7B",
     .hidden = 2048, .intermediate = 6144, .n_heads = 16, .n_kv_heads = 8, .head_dim = 128,
     .n_layers = 28, .vocab = 151936, .max_pos = 40960, .max_window_layers = 28,
     .rms_eps = 1e-6, .rope_theta = 1000000, .rope_theta_int = 1, .tie = 1,
     .bos = 151643, .eos = 151645, .transformers_version = "4.51.0",
     .gen_eos2 = 151643, .gen_pad = 151643, .gen_do_sample = 1, .gen_top_k = 20,
     .gen_temperature = 0.6, .gen_top_p = 0.95, .gen_transformers_version = "4.51.0"},
    {.name = "qwen3-4b", .arch = SYNTH_QWEN3, .hf_repo = "Qwen/Qwen3-4B",
     .hidden = 2560, .intermediate = 9728, .n_heads = 32, .n_kv_heads = 8, .head_dim = 128,
     .n_layers = 36, .vocab = 151936, .max_pos = 40960, .max_window_layers = 36,
     .rms_eps = 1e-6, .rope_theta = 1000000, .rope_theta_int = 1, .tie = 1,
     .bos = 151643, .eos = 151645, .transformers_version = "4.51.0",
     .gen_eos2 = 151643, .gen_pad = 151643, .gen_do_sample = 1, .gen_top_k = 20,
     .gen_temperature = 0.6, .gen_top_p = 0.95, .gen_transformers_version = "4.51.0"},
    {.name = "qwen3-8b", .arch = SYNTH_QWEN3, .hf_repo = "Qwen/Qwen3-8B",
     .hidden = 4096, .intermediate = 12288, .n_heads = 32, .n_kv_heads = 8, .head_dim = 128,
     .n_layers = 36, .vocab = 151936, .max_pos = 40960, .max_window_layers = 36,
     .rms_eps = 1e-6, .rope_theta = 1000000, .rope_theta_int = 1, .tie = 0,
     .bos = 151643, .eos = 151645, .transformers_version = "4.51.0",
     .gen_eos2 = 151643, .gen_pad = 151643, .gen_do_sample = 1, .gen_top_k = 20,
     .gen_temperature = 0.6, .gen_top_p = 0.95, .gen_transformers_version = "4.51.0"},
    {.name = "llama-3.2-1b", .arch = SYNTH_LLAMA, .hf_repo = "meta-llama/Llama-3.2-1B",
     .hidden = 2048, .intermediate = 8192, .n_heads = 32, .n_kv_heads = 8, .head_dim = 64,
     .n_layers = 16, .vocab = 128256, .max_pos = 131072,
     .rms_eps = 1e-5, .rope_theta = 500000.0, .tie = 1, .bos = 128000, .eos = 128001,
     .rope_factor = 32.0, .rope_low = 1.0, .rope_high = 4.0, .rope_orig_max = 8192,
     .mlp_bias_key = 1, .transformers_version = "4.45.0.dev0",
     .gen_eos2 = -1, .gen_pad = -1, .gen_do_sample = 1, .gen_from_model_config = 1,
     .gen_temperature = 0.6, .gen_top_p = 0.9, .gen_transformers_version = "4.45.0.dev0"},
    {.name = "llama-3-8b", .arch = SYNTH_LLAMA, .hf_repo = "meta-llama/Meta-Llama-3-8B",
     .hidden = 4096, .intermediate = 14336, .n_heads = 32, .n_kv_heads = 8, .head_dim = 128,
     .n_layers = 32, .vocab = 128256, .max_pos = 8192,
     .rms_eps = 1e-5, .rope_theta = 500000.0, .tie = 0, .bos = 128000, .eos = 128001,
     .transformers_version = "4.40.0.dev0",
     .gen_eos2 = -1, .gen_pad = -1, .gen_do_sample = 1, .gen_max_length = 4096,
     .gen_temperature = 0.6, .gen_top_p = 0.9, .gen_transformers_version = "4.40.0.dev0"},
    {.name = "tiny", .arch = SYNTH_LLAMA, .hf_repo = "(kiln test preset, llama-tiny shapes)",
     .hidden = 64, .intermediate = 128, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16,
     .n_layers = 2, .vocab = 512, .max_pos = 256,
     .rms_eps = 1e-5, .rope_theta = 10000.0, .tie = 0, .bos = 1, .eos = 2,
     .mlp_bias_key = 1, .transformers_version = "4.51.0",
     .gen_eos2 = -1, .gen_pad = -1, .gen_transformers_version = "4.51.0"},
    {.name = "tiny", .arch = SYNTH_QWEN3, .hf_repo = "(kiln test preset, qwen3-tiny shapes)",
     .hidden = 64, .intermediate = 128, .n_heads = 4, .n_kv_heads = 2, .head_dim = 32,
     .n_layers = 2, .vocab = 512, .max_pos = 256, .max_window_layers = 2,
     .rms_eps = 1e-6, .rope_theta = 1000000, .rope_theta_int = 1, .tie = 1,
     .bos = 1, .eos = 2, .transformers_version = "4.51.0",
     .gen_eos2 = -1, .gen_pad = -1, .gen_transformers_version = "4.51.0"},
    /* Qwen3.5: the text model of the hub's VL checkpoints (text_config of Qwen/Qwen3.5-0.8B
     * and -2B), written as transformers 5 saves a Qwen3_5ForCausalLM (no vision tower, no
     * MTP head). Tied embeddings: the published totals (0.87B / 2.27B with the vision
     * tower) leave no room for a second 248320-row matrix. */
    {.name = "qwen3.5-0.8b", .arch = SYNTH_QWEN3_5, .hf_repo = "Qwen/Qwen3.5-0.8B (text model)",
     .hidden = 1024, .intermediate = 3584, .n_heads = 8, .n_kv_heads = 2, .head_dim = 256,
     .n_layers = 24, .vocab = 248320, .max_pos = 262144,
     .full_interval = 4, .lin_k_heads = 16, .lin_v_heads = 16, .lin_k_dim = 128, .lin_v_dim = 128,
     .conv_kernel = 4, .partial_rotary = 0.25,
     .rms_eps = 1e-6, .rope_theta = 10000000, .rope_theta_int = 1, .tie = 1,
     .bos = -1, .eos = 248046, .cfg_eos2 = -1, .cfg_pad = -1, .transformers_version = "5.17.0",
     .gen_bos = 248044, .gen_eos2 = 248044, .gen_pad = 248044, .gen_do_sample = 1, .gen_top_k = 20,
     .gen_temperature = 1.0, .gen_top_p = 0.95, .gen_transformers_version = "5.17.0"},
    {.name = "qwen3.5-2b", .arch = SYNTH_QWEN3_5, .hf_repo = "Qwen/Qwen3.5-2B (text model)",
     .hidden = 2048, .intermediate = 6144, .n_heads = 8, .n_kv_heads = 2, .head_dim = 256,
     .n_layers = 24, .vocab = 248320, .max_pos = 262144,
     .full_interval = 4, .lin_k_heads = 16, .lin_v_heads = 16, .lin_k_dim = 128, .lin_v_dim = 128,
     .conv_kernel = 4, .partial_rotary = 0.25,
     .rms_eps = 1e-6, .rope_theta = 10000000, .rope_theta_int = 1, .tie = 1,
     .bos = -1, .eos = 248046, .cfg_eos2 = -1, .cfg_pad = -1, .transformers_version = "5.17.0",
     .gen_bos = 248044, .gen_eos2 = 248044, .gen_pad = 248044, .gen_do_sample = 1, .gen_top_k = 20,
     .gen_temperature = 1.0, .gen_top_p = 0.95, .gen_transformers_version = "5.17.0"},
    /* A Qwen3.5 MoE model of the 35B-A3B class, for benchmarks of the routed MLP (kiln's own
     * shapes, not a published config: hidden 2048, 40 layers of which every 4th full attention,
     * 256 experts of 512, top-8, a shared expert of 512; one module per expert, HF names). */
    {.name = "qwen3.5-moe-35b", .arch = SYNTH_QWEN3_5, .hf_repo = "(kiln bench preset, Qwen3.5-35B-A3B-class MoE shapes)",
     .hidden = 2048, .intermediate = 512, .n_heads = 16, .n_kv_heads = 2, .head_dim = 256,
     .n_layers = 40, .vocab = 248320, .max_pos = 262144,
     .full_interval = 4, .lin_k_heads = 16, .lin_v_heads = 32, .lin_k_dim = 128, .lin_v_dim = 128,
     .conv_kernel = 4, .partial_rotary = 0.25,
     .n_experts = 256, .experts_per_tok = 8, .moe_intermediate = 512, .shared_intermediate = 512,
     .rms_eps = 1e-6, .rope_theta = 10000000, .rope_theta_int = 1, .tie = 0,
     .bos = -1, .eos = 248046, .cfg_eos2 = -1, .cfg_pad = -1, .transformers_version = "5.17.0",
     .gen_bos = 248044, .gen_eos2 = 248044, .gen_pad = 248044, .gen_do_sample = 1, .gen_top_k = 20,
     .gen_temperature = 1.0, .gen_top_p = 0.95, .gen_transformers_version = "5.17.0"},
    /* google/gemma-3-1b-it, in transformers 5's config format (layer_types, rope_parameters,
     * an explicit tie_word_embeddings) with the hub config's values. */
    {.name = "gemma3-1b", .arch = SYNTH_GEMMA3, .hf_repo = "google/gemma-3-1b-it",
     .hidden = 1152, .intermediate = 6912, .n_heads = 4, .n_kv_heads = 1, .head_dim = 256,
     .n_layers = 26, .vocab = 262144, .max_pos = 32768,
     .sliding_window = 512, .sliding_pattern = 6, .query_pre_attn_scalar = 256, .rope_local_theta = 10000.0,
     .rms_eps = 1e-6, .rope_theta = 1000000.0, .tie = 1,
     .bos = 2, .eos = 1, .cfg_eos2 = 106, .cfg_pad = 0, .transformers_version = "5.17.0",
     .gen_eos2 = 106, .gen_pad = 0, .gen_do_sample = 1, .gen_top_k = 64, .gen_top_p = 0.95,
     .gen_cache_impl = "hybrid", .gen_transformers_version = "4.50.0.dev0"},
    {.name = "tiny", .arch = SYNTH_QWEN3_5, .hf_repo = "(kiln test preset, qwen3_5-tiny shapes)",
     .hidden = 64, .intermediate = 128, .n_heads = 4, .n_kv_heads = 2, .head_dim = 32,
     .n_layers = 4, .vocab = 512, .max_pos = 256,
     .full_interval = 4, .lin_k_heads = 2, .lin_v_heads = 4, .lin_k_dim = 16, .lin_v_dim = 16,
     .conv_kernel = 4, .partial_rotary = 0.25,
     .rms_eps = 1e-6, .rope_theta = 10000.0, .tie = 0,
     .bos = -1, .eos = -1, .cfg_eos2 = -1, .cfg_pad = -1, .transformers_version = "5.17.0",
     .gen_eos2 = -1, .gen_pad = -1, .gen_transformers_version = "5.17.0"},
    {.name = "tiny", .arch = SYNTH_GEMMA3, .hf_repo = "(kiln test preset, gemma3-tiny shapes)",
     .hidden = 64, .intermediate = 128, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16,
     .n_layers = 6, .vocab = 512, .max_pos = 256,
     .sliding_window = 8, .sliding_pattern = 6, .query_pre_attn_scalar = 16, .rope_local_theta = 10000.0,
     .rms_eps = 1e-6, .rope_theta = 1000000.0, .tie = 1,
     .bos = 2, .eos = 1, .cfg_eos2 = -1, .cfg_pad = 0, .transformers_version = "5.17.0",
     .gen_eos2 = -1, .gen_pad = 0, .gen_transformers_version = "5.17.0"},
};

int synth_preset_count(void) { return (int)(sizeof presets / sizeof presets[0]); }
const synth_preset_t *synth_preset_at(int i) {
    return i >= 0 && i < synth_preset_count() ? &presets[i] : NULL;
}

static const char *arch_names[] = {"llama", "qwen3", "qwen3_5", "gemma3"};

const char *synth_arch_name(synth_arch_t a) {
    return (unsigned)a < sizeof arch_names / sizeof arch_names[0] ? arch_names[a] : "?";
}

int synth_arch_parse(const char *s, synth_arch_t *out) {
    for (int i = 0; s && i < (int)(sizeof arch_names / sizeof arch_names[0]); i++)
        if (!strcmp(s, arch_names[i])) { *out = (synth_arch_t)i; return 0; }
    return -1;
}

const synth_preset_t *synth_preset_find(const char *name, const char *arch) {
    synth_arch_t a;
    int have_arch = arch && synth_arch_parse(arch, &a) == 0;
    for (int i = 0; i < synth_preset_count(); i++) {
        if (strcmp(presets[i].name, name)) continue;
        if (!strcmp(name, "tiny") && (!have_arch || presets[i].arch != a)) continue;
        return &presets[i];
    }
    return NULL;
}

/* ---- generator ---------------------------------------------------------------------- */

#define GOLDEN 0x9e3779b97f4a7c15ull

static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t synth_tensor_seed(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a of the name, then mixed with the seed */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    return mix64(h ^ mix64(seed + GOLDEN));
}

/* One 64-bit draw per two weights: draw k is wyrand's output for counter tseed + k (one
 * 64x64->128 multiply), and each 32-bit half becomes a weight as the sum of its four bytes
 * (Irwin-Hall: bell-shaped, mean 510, std 147.80, |z| <= 3.45), looked up in a table of
 * the 1021 possible sums already converted to each storage dtype. About a nanosecond per
 * weight on one core, so the disk, not the generator, sets the pace. */
#define SUM_MEAN 510
#define SUM_STD 147.80054f /* sqrt(4 * (256^2 - 1) / 12) */
#define N_SUMS 1021

static float lut_f32[N_SUMS];
static uint16_t lut_bf16[N_SUMS], lut_f16[N_SUMS];
static pthread_once_t lut_once = PTHREAD_ONCE_INIT;

static void lut_init(void) {
    for (int s = 0; s < N_SUMS; s++) {
        lut_f32[s] = (float)(s - SUM_MEAN) * (SYNTH_STD / SUM_STD);
        lut_bf16[s] = f32_to_bf16(lut_f32[s]);
        lut_f16[s] = f32_to_f16(lut_f32[s]);
    }
}

static inline uint64_t draw(uint64_t tseed, uint64_t k) {
    uint64_t a = tseed + (k + 1) * 0xa0761d6478bd642full;
    __uint128_t m = (__uint128_t)a * (a ^ 0xe7037ed1a0b428dbull);
    return (uint64_t)(m >> 64) ^ (uint64_t)m;
}

static inline uint32_t byte_sum(uint32_t x) {
    uint32_t t = (x & 0x00ff00ffu) + ((x >> 8) & 0x00ff00ffu);
    return (t & 0xffffu) + (t >> 16);
}

/* The byte sums for weights 2k and 2k+1. */
static inline void sums_at(uint64_t tseed, uint64_t k, uint32_t *s0, uint32_t *s1) {
    uint64_t d = draw(tseed, k);
    *s0 = byte_sum((uint32_t)d);
    *s1 = byte_sum((uint32_t)(d >> 32));
}

float synth_weight(uint64_t tseed, uint64_t i) {
    pthread_once(&lut_once, lut_init);
    uint32_t s0, s1;
    sums_at(tseed, i >> 1, &s0, &s1);
    return lut_f32[(i & 1) ? s1 : s0];
}

float synth_affine(uint64_t tseed, uint64_t i, float offset, float scale) {
    return offset + scale * (synth_weight(tseed, i) / SYNTH_STD);
}

/* The grid of a group spans +-3.5 std (every weight is within +-3.4506 std) times a
 * per-group factor in [1, 1.25), so groups differ as they do in real checkpoints. The
 * margin absorbs the bf16 rounding of scale and bias. */
static inline void group_params(uint64_t tseed, uint64_t g, int bits, float *scale, float *bias) {
    uint64_t r = mix64((tseed ^ 0xa0761d6478bd642full) + (g + 1) * GOLDEN);
    float u = (float)(r >> 40) * (1.0f / 16777216.0f);
    float qmax = (float)((1 << bits) - 1);
    float s = bf16_to_f32(f32_to_bf16(7.0f * SYNTH_STD * (1.0f + 0.25f * u) / qmax));
    *scale = s;
    *bias = bf16_to_f32(f32_to_bf16(-0.5f * qmax * s));
}

void synth_group_params(uint64_t tseed, uint64_t g, int bits, float *scale, float *bias) {
    group_params(tseed, g, bits, scale, bias);
}

/* ---- options and plan ----------------------------------------------------------------- */

int synth_check(const synth_opts_t *o, err_t *e) {
    const synth_preset_t *p = o->preset;
    if (!p) return err_set(e, "--preset: no preset given");
    if (!o->out || !o->out[0]) return err_set(e, "--out is required");
    if (o->bits) {
        if (o->bits < 2 || o->bits > 8 || o->bits == 7)
            return err_set(e, "--bits must be 2, 3, 4, 5, 6 or 8 (MLX affine quantization), got %d", o->bits);
        int g = o->group_size ? o->group_size : 64;
        if (g != 32 && g != 64 && g != 128)
            return err_set(e, "--group-size must be 32, 64 or 128, got %d", g);
        /* input widths of every quantized matrix: hidden, intermediate, attention output,
         * and for qwen3_5 the DeltaNet output (out_proj) */
        int ins[] = {p->hidden, p->intermediate, p->n_heads * p->head_dim, p->lin_v_heads * p->lin_v_dim};
        int n_ins = p->arch == SYNTH_QWEN3_5 ? 4 : 3;
        for (int i = 0; i < n_ins; i++)
            if (ins[i] % g)
                return err_set(e, "--group-size %d does not divide the input width %d of preset %s", g, ins[i],
                               p->name);
    } else {
        if (o->dtype != DT_BF16 && o->dtype != DT_F16 && o->dtype != DT_F32)
            return err_set(e, "--dtype must be bf16, f16, f32 or a quantized q2..q8");
        if (o->group_size) return err_set(e, "--group-size only applies to quantized dtypes (q4, q8, ...)");
    }
    if (o->layers < 0 || o->layers > 4096) return err_set(e, "--layers must be in [1, 4096], got %d", o->layers);
    if (o->shard_bytes < 0 || isnan(o->shard_bytes)) return err_set(e, "--shard-gb must be positive");
    return 0;
}

typedef struct plan_builder {
    synth_plan_t *p;
    int cap;
    const synth_opts_t *o;
    const char *seed_strip; /* a layout prefix left out of tensor seeds ("language_model.") */
} plan_builder_t;

/* The seed of a tensor comes from its HF name, so a layout that renames tensors (mlx_lm's
 * "language_model." prefix) still holds the same weights for the same --seed. */
static uint64_t seed_of(const plan_builder_t *b, const char *name) {
    size_t n = b->seed_strip ? strlen(b->seed_strip) : 0;
    if (n && !strncmp(name, b->seed_strip, n)) name += n;
    return synth_tensor_seed(b->o->seed, name);
}

static synth_tensor_t *push3(plan_builder_t *b, const char *name, dtype_t dt, int ndim, const int64_t *dims,
                             synth_fill_t fill, int64_t rows, int64_t cols, uint64_t tseed, err_t *e) {
    if (b->p->n == b->cap) {
        int nc = b->cap ? b->cap * 2 : 64;
        synth_tensor_t *nt = realloc(b->p->t, sizeof *nt * (size_t)nc);
        if (!nt) { err_set(e, "synth: out of memory"); return NULL; }
        b->p->t = nt;
        b->cap = nc;
    }
    synth_tensor_t *t = &b->p->t[b->p->n++];
    memset(t, 0, sizeof *t);
    if ((size_t)snprintf(t->name, sizeof t->name, "%s", name) >= sizeof t->name) {
        err_set(e, "synth: tensor name too long: %s", name);
        return NULL;
    }
    t->dtype = dt;
    t->ndim = ndim;
    t->bytes = dtype_size(dt);
    for (int d = 0; d < ndim; d++) {
        t->shape[d] = dims[d];
        t->bytes *= (uint64_t)dims[d];
    }
    t->rows = rows;
    t->cols = cols;
    t->fill = fill;
    t->tseed = tseed;
    return t;
}

static synth_tensor_t *push(plan_builder_t *b, const char *name, dtype_t dt, int ndim, int64_t d0, int64_t d1,
                            synth_fill_t fill, int64_t rows, int64_t cols, uint64_t tseed, err_t *e) {
    int64_t dims[2] = {d0, d1};
    return push3(b, name, dt, ndim, dims, fill, rows, cols, tseed, e);
}

/* A Linear or Embedding weight [rows, cols] named MOD.weight (or its MLX triple). */
static int add_matrix(plan_builder_t *b, const char *mod, int64_t rows, int64_t cols, err_t *e) {
    const synth_opts_t *o = b->o;
    char name[128];
    snprintf(name, sizeof name, "%s.weight", mod);
    uint64_t ts = seed_of(b, name);
    b->p->n_params += (uint64_t)rows * (uint64_t)cols;
    if (!o->bits) return push(b, name, o->dtype, 2, rows, cols, SYNTH_FILL_NORMAL, rows, cols, ts, e) ? 0 : -1;
    int g = o->group_size ? o->group_size : 64;
    if (!push(b, name, DT_U32, 2, rows, cols * o->bits / 32, SYNTH_FILL_QCODES, rows, cols, ts, e)) return -1;
    snprintf(name, sizeof name, "%s.scales", mod);
    if (!push(b, name, DT_BF16, 2, rows, cols / g, SYNTH_FILL_QSCALES, rows, cols, ts, e)) return -1;
    snprintf(name, sizeof name, "%s.biases", mod);
    if (!push(b, name, DT_BF16, 2, rows, cols / g, SYNTH_FILL_QBIASES, rows, cols, ts, e)) return -1;
    return 0;
}

/* A norm weight MOD.weight [n]: ones (used as w) or zeros (used as 1 + w). */
static int add_norm_fill(plan_builder_t *b, const char *mod, int64_t n, synth_fill_t fill, err_t *e) {
    char name[128];
    snprintf(name, sizeof name, "%s.weight", mod);
    b->p->n_params += (uint64_t)n;
    dtype_t dt = b->o->bits ? DT_BF16 : b->o->dtype; /* MLX keeps norms in the model dtype */
    return push(b, name, dt, 1, n, 0, fill, 1, n, 0, e) ? 0 : -1;
}

static int add_norm(plan_builder_t *b, const char *mod, int64_t n, err_t *e) {
    return add_norm_fill(b, mod, n, SYNTH_FILL_ONES, e);
}

/* A small float tensor NAME of shape dims (never quantized) holding offset + scale * z. */
static int add_affine(plan_builder_t *b, const char *name, int ndim, const int64_t *dims, float offset, float scale,
                      err_t *e) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= dims[d];
    b->p->n_params += (uint64_t)n;
    dtype_t dt = b->o->bits ? DT_BF16 : b->o->dtype;
    synth_tensor_t *t = push3(b, name, dt, ndim, dims, SYNTH_FILL_AFFINE, 1, n, seed_of(b, name), e);
    if (!t) return -1;
    t->offset = offset;
    t->scale = scale;
    return 0;
}

/* huggingface_hub's split_state_dict_into_shards: walk the state dict in order, start a
 * new shard when the next tensor would overflow this one; a tensor bigger than the limit
 * gets a shard of its own (placed before the shard being filled, as there). */
static int assign_shards(synth_plan_t *p, double limit, err_t *e) {
    int *order = malloc(sizeof(int) * (size_t)(p->n + 1)), n_order = 0; /* shard ids in list order */
    if (!order) return err_set(e, "synth: out of memory");
    int cur = -1, next_id = 0;
    double cur_size = 0;
    for (int i = 0; i < p->n; i++) {
        synth_tensor_t *t = &p->t[i];
        if ((double)t->bytes > limit) {
            t->shard = next_id;
            order[n_order++] = next_id++;
            continue;
        }
        if (cur >= 0 && cur_size + (double)t->bytes > limit) {
            order[n_order++] = cur;
            cur = -1;
        }
        if (cur < 0) { cur = next_id++; cur_size = 0; }
        t->shard = cur;
        cur_size += (double)t->bytes;
    }
    if (cur >= 0) order[n_order++] = cur;
    /* Renumber so shard numbers follow list order. */
    int *rank = malloc(sizeof(int) * (size_t)(next_id + 1));
    if (!rank) { free(order); return err_set(e, "synth: out of memory"); }
    for (int k = 0; k < n_order; k++) rank[order[k]] = k;
    for (int i = 0; i < p->n; i++) p->t[i].shard = rank[p->t[i].shard];
    p->n_shards = n_order ? n_order : 1;
    free(rank);
    free(order);
    return 0;
}

/* Layer l of a qwen3_5 model is full attention (else gated DeltaNet). */
static int q35_full(const synth_preset_t *ps, int l) { return (l + 1) % ps->full_interval == 0; }
/* Layer l of a gemma3 model is global (else sliding-window). */
static int g3_global(const synth_preset_t *ps, int l) { return (l + 1) % ps->sliding_pattern == 0; }

/* Qwen3.5 text, in transformers' state_dict order (Qwen3_5ForCausalLM). Each decoder layer:
 * the mixer (GatedDeltaNet: its own parameters dt_bias and A_log first, then conv1d,
 * in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, norm, out_proj; or attention: q, k, v, o,
 * q_norm, k_norm), the MLP, then the two norms. Quantized checkpoints follow mlx_lm:
 * names under "language_model.", conv1d as [C, K, 1], the (1 + w) norms shifted (ones). */
static int plan_qwen35(plan_builder_t *b, int L, err_t *e) {
    const synth_preset_t *ps = b->o->preset;
    const int mlx = b->o->bits != 0;
    const char *pre = mlx ? "language_model." : "";
    b->seed_strip = pre;
    const synth_fill_t shifted = mlx ? SYNTH_FILL_ONES : SYNTH_FILL_ZEROS; /* (1 + w) norms */
    int64_t H = ps->hidden, I = ps->intermediate, hd = ps->head_dim;
    int64_t nv = ps->lin_v_heads, key_dim = (int64_t)ps->lin_k_heads * ps->lin_k_dim, value_dim = nv * ps->lin_v_dim;
    int64_t conv_dim = 2 * key_dim + value_dim, K = ps->conv_kernel;
    char m[160];
    snprintf(m, sizeof m, "%smodel.embed_tokens", pre);
    if (add_matrix(b, m, ps->vocab, H, e)) return -1;
    for (int l = 0; l < L; l++) {
        char lp[96];
        snprintf(lp, sizeof lp, "%smodel.layers.%d", pre, l);
        if (!q35_full(ps, l)) {
            /* dt_bias near its init (ones); A_log = log A with A within (0.5, 15), the
             * range of its init log(U(0, 16)); conv kernels at about the scale of a
             * depthwise Conv1d's init (bound 1/sqrt(K)). */
            int64_t dv[1] = {nv}, dc[3] = {conv_dim, mlx ? K : 1, mlx ? 1 : K};
            snprintf(m, sizeof m, "%s.linear_attn.dt_bias", lp);
            if (add_affine(b, m, 1, dv, 1.0f, 0.1f, e)) return -1;
            snprintf(m, sizeof m, "%s.linear_attn.A_log", lp);
            if (add_affine(b, m, 1, dv, 1.0f, 0.5f, e)) return -1;
            snprintf(m, sizeof m, "%s.linear_attn.conv1d.weight", lp);
            if (add_affine(b, m, 3, dc, 0.0f, 0.2f, e)) return -1;
            const char *proj[] = {"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"};
            int64_t rows[] = {conv_dim, value_dim, nv, nv};
            for (int k = 0; k < 4; k++) {
                snprintf(m, sizeof m, "%s.linear_attn.%s", lp, proj[k]);
                if (add_matrix(b, m, rows[k], H, e)) return -1;
            }
            snprintf(m, sizeof m, "%s.linear_attn.norm", lp); /* gated RMSNorm: w, init ones */
            if (add_norm_fill(b, m, ps->lin_v_dim, SYNTH_FILL_ONES, e)) return -1;
            snprintf(m, sizeof m, "%s.linear_attn.out_proj", lp);
            if (add_matrix(b, m, H, value_dim, e)) return -1;
        } else {
            int64_t q = (int64_t)ps->n_heads * hd, kv = (int64_t)ps->n_kv_heads * hd;
            const char *proj[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
            int64_t rows[] = {2 * q, kv, kv, H}, cols[] = {H, H, H, q}; /* q_proj: query and gate */
            for (int k = 0; k < 4; k++) {
                snprintf(m, sizeof m, "%s.self_attn.%s", lp, proj[k]);
                if (add_matrix(b, m, rows[k], cols[k], e)) return -1;
            }
            snprintf(m, sizeof m, "%s.self_attn.q_norm", lp);
            if (add_norm_fill(b, m, hd, shifted, e)) return -1;
            snprintf(m, sizeof m, "%s.self_attn.k_norm", lp);
            if (add_norm_fill(b, m, hd, shifted, e)) return -1;
        }
        const char *mlp[] = {"gate_proj", "up_proj", "down_proj"};
        if (ps->n_experts) { /* router, experts (one module each), shared expert and its gate */
            int64_t Ie = ps->moe_intermediate, Is = ps->shared_intermediate;
            snprintf(m, sizeof m, "%s.mlp.gate", lp);
            if (add_matrix(b, m, ps->n_experts, H, e)) return -1;
            int64_t erows[] = {Ie, Ie, H}, ecols[] = {H, H, Ie}, srows[] = {Is, Is, H}, scols[] = {H, H, Is};
            for (int x = 0; x < ps->n_experts; x++)
                for (int k = 0; k < 3; k++) {
                    snprintf(m, sizeof m, "%s.mlp.experts.%d.%s", lp, x, mlp[k]);
                    if (add_matrix(b, m, erows[k], ecols[k], e)) return -1;
                }
            for (int k = 0; k < 3; k++) {
                snprintf(m, sizeof m, "%s.mlp.shared_expert.%s", lp, mlp[k]);
                if (add_matrix(b, m, srows[k], scols[k], e)) return -1;
            }
            snprintf(m, sizeof m, "%s.mlp.shared_expert_gate", lp);
            if (add_matrix(b, m, 1, H, e)) return -1;
        } else {
            int64_t mrows[] = {I, I, H}, mcols[] = {H, H, I};
            for (int k = 0; k < 3; k++) {
                snprintf(m, sizeof m, "%s.mlp.%s", lp, mlp[k]);
                if (add_matrix(b, m, mrows[k], mcols[k], e)) return -1;
            }
        }
        snprintf(m, sizeof m, "%s.input_layernorm", lp);
        if (add_norm_fill(b, m, H, shifted, e)) return -1;
        snprintf(m, sizeof m, "%s.post_attention_layernorm", lp);
        if (add_norm_fill(b, m, H, shifted, e)) return -1;
    }
    snprintf(m, sizeof m, "%smodel.norm", pre);
    if (add_norm_fill(b, m, H, shifted, e)) return -1;
    snprintf(m, sizeof m, "%slm_head", pre);
    if (!ps->tie && add_matrix(b, m, ps->vocab, H, e)) return -1;
    return 0;
}

/* Gemma 3 text (Gemma3ForCausalLM): per layer self_attn (q, k, v, o, q_norm, k_norm), mlp,
 * then input / post_attention / pre_feedforward / post_feedforward norms. Every norm is used
 * as (1 + w), so all are zeros; mlx_lm keeps the names and the zeros. */
static int plan_gemma3(plan_builder_t *b, int L, err_t *e) {
    const synth_preset_t *ps = b->o->preset;
    int64_t H = ps->hidden, I = ps->intermediate, hd = ps->head_dim;
    int64_t q = (int64_t)ps->n_heads * hd, kv = (int64_t)ps->n_kv_heads * hd;
    char m[160];
    if (add_matrix(b, "model.embed_tokens", ps->vocab, H, e)) return -1;
    for (int l = 0; l < L; l++) {
        const char *proj[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
        int64_t rows[] = {q, kv, kv, H}, cols[] = {H, H, H, q};
        for (int k = 0; k < 4; k++) {
            snprintf(m, sizeof m, "model.layers.%d.self_attn.%s", l, proj[k]);
            if (add_matrix(b, m, rows[k], cols[k], e)) return -1;
        }
        snprintf(m, sizeof m, "model.layers.%d.self_attn.q_norm", l);
        if (add_norm_fill(b, m, hd, SYNTH_FILL_ZEROS, e)) return -1;
        snprintf(m, sizeof m, "model.layers.%d.self_attn.k_norm", l);
        if (add_norm_fill(b, m, hd, SYNTH_FILL_ZEROS, e)) return -1;
        const char *mlp[] = {"gate_proj", "up_proj", "down_proj"};
        int64_t mrows[] = {I, I, H}, mcols[] = {H, H, I};
        for (int k = 0; k < 3; k++) {
            snprintf(m, sizeof m, "model.layers.%d.mlp.%s", l, mlp[k]);
            if (add_matrix(b, m, mrows[k], mcols[k], e)) return -1;
        }
        const char *norms[] = {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                               "post_feedforward_layernorm"};
        for (int k = 0; k < 4; k++) {
            snprintf(m, sizeof m, "model.layers.%d.%s", l, norms[k]);
            if (add_norm_fill(b, m, H, SYNTH_FILL_ZEROS, e)) return -1;
        }
    }
    if (add_norm_fill(b, "model.norm", H, SYNTH_FILL_ZEROS, e)) return -1;
    if (!ps->tie && add_matrix(b, "lm_head", ps->vocab, H, e)) return -1;
    return 0;
}

int synth_plan(const synth_opts_t *o, synth_plan_t *p, err_t *e) {
    memset(p, 0, sizeof *p);
    if (synth_check(o, e)) return -1;
    const synth_preset_t *ps = o->preset;
    plan_builder_t b = {.p = p, .o = o};
    int L = o->layers ? o->layers : ps->n_layers;
    if (ps->arch == SYNTH_QWEN3_5 || ps->arch == SYNTH_GEMMA3) {
        p->layers = L;
        if ((ps->arch == SYNTH_QWEN3_5 ? plan_qwen35 : plan_gemma3)(&b, L, e)) goto err;
        goto finish;
    }
    int64_t H = ps->hidden, I = ps->intermediate, q = (int64_t)ps->n_heads * ps->head_dim,
            kv = (int64_t)ps->n_kv_heads * ps->head_dim;
    char m[128];
    p->layers = L;
    if (add_matrix(&b, "model.embed_tokens", ps->vocab, H, e)) goto err;
    for (int l = 0; l < L; l++) {
        /* state_dict order: self_attn (q, k, v, o[, q_norm, k_norm]), mlp, then the norms */
        const char *proj[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
        int64_t rows[] = {q, kv, kv, H}, cols[] = {H, H, H, q};
        for (int k = 0; k < 4; k++) {
            snprintf(m, sizeof m, "model.layers.%d.self_attn.%s", l, proj[k]);
            if (add_matrix(&b, m, rows[k], cols[k], e)) goto err;
        }
        if (ps->arch == SYNTH_QWEN3) {
            snprintf(m, sizeof m, "model.layers.%d.self_attn.q_norm", l);
            if (add_norm(&b, m, ps->head_dim, e)) goto err;
            snprintf(m, sizeof m, "model.layers.%d.self_attn.k_norm", l);
            if (add_norm(&b, m, ps->head_dim, e)) goto err;
        }
        const char *mlp[] = {"gate_proj", "up_proj", "down_proj"};
        int64_t mrows[] = {I, I, H}, mcols[] = {H, H, I};
        for (int k = 0; k < 3; k++) {
            snprintf(m, sizeof m, "model.layers.%d.mlp.%s", l, mlp[k]);
            if (add_matrix(&b, m, mrows[k], mcols[k], e)) goto err;
        }
        snprintf(m, sizeof m, "model.layers.%d.input_layernorm", l);
        if (add_norm(&b, m, H, e)) goto err;
        snprintf(m, sizeof m, "model.layers.%d.post_attention_layernorm", l);
        if (add_norm(&b, m, H, e)) goto err;
    }
    if (add_norm(&b, "model.norm", H, e)) goto err;
    if (!ps->tie && add_matrix(&b, "lm_head", ps->vocab, H, e)) goto err;
finish:
    for (int i = 0; i < p->n; i++) p->total_bytes += p->t[i].bytes;
    if (assign_shards(p, o->shard_bytes > 0 ? o->shard_bytes : 5e9, e)) goto err;
    return 0;
err:
    synth_plan_free(p);
    return -1;
}

void synth_plan_free(synth_plan_t *p) {
    free(p->t);
    memset(p, 0, sizeof *p);
}

/* ---- configs ------------------------------------------------------------------------- */

static const char *torch_dtype(const synth_opts_t *o) {
    if (o->bits) return "bfloat16";
    return o->dtype == DT_F32 ? "float32" : o->dtype == DT_F16 ? "float16" : "bfloat16";
}

/* transformers writes json.dumps(config, indent=2, sort_keys=True) + "\n"; %.15g prints
 * 1e-06, 0.02 and 500000.0 the way Python's repr does. */
static char *dump(json_t *root, err_t *e) {
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(15));
    json_decref(root);
    if (!s) { err_set(e, "synth: cannot serialize JSON"); return NULL; }
    /* jansson writes 1e-5 where Python writes 1e-05: pad one-digit exponents. No string
     * value in these files contains "e-" or "e+" followed by a digit. */
    size_t n = strlen(s);
    char *out = malloc(2 * n + 2);
    if (!out) { free(s); err_set(e, "synth: out of memory"); return NULL; }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        out[k++] = s[i];
        if ((s[i] == '-' || s[i] == '+') && i > 0 && s[i - 1] == 'e' && i + 1 < n && s[i + 1] >= '0' &&
            s[i + 1] <= '9' && !(i + 2 < n && s[i + 2] >= '0' && s[i + 2] <= '9'))
            out[k++] = '0';
    }
    out[k++] = '\n';
    out[k] = 0;
    free(s);
    return out;
}

static json_t *id_or_null(int id) { return id >= 0 ? json_integer(id) : json_null(); }

static void add_quant_keys(json_t *c, const synth_opts_t *o) {
    if (!o->bits) return;
    int g = o->group_size ? o->group_size : 64; /* mlx_lm writes both keys */
    json_object_set_new(c, "quantization", json_pack("{s:i,s:i}", "group_size", g, "bits", o->bits));
    json_object_set_new(c, "quantization_config", json_pack("{s:i,s:i}", "group_size", g, "bits", o->bits));
}

/* qwen3_5 and gemma3: the keys transformers 5 writes for Qwen3_5TextConfig /
 * Gemma3TextConfig (the fixtures' format), with the preset's values. */
static char *config_json_v5(const synth_opts_t *o, err_t *e) {
    const synth_preset_t *p = o->preset;
    int L = o->layers ? o->layers : p->n_layers;
    int q35 = p->arch == SYNTH_QWEN3_5;
    json_t *c = json_object(), *lt = json_array();
    for (int l = 0; l < L; l++)
        json_array_append_new(lt, json_string(q35 ? (q35_full(p, l) ? "full_attention" : "linear_attention")
                                                  : (g3_global(p, l) ? "full_attention" : "sliding_attention")));
    const int moe = q35 && p->n_experts;
    json_object_set_new(c, "architectures", json_pack("[s]", moe ? "Qwen3_5MoeForCausalLM" : q35 ? "Qwen3_5ForCausalLM" : "Gemma3ForCausalLM"));
    json_object_set_new(c, "attention_bias", json_false());
    json_object_set_new(c, "attention_dropout", json_real(0.0));
    json_object_set_new(c, "bos_token_id", id_or_null(p->bos));
    json_object_set_new(c, "dtype", json_string(torch_dtype(o)));
    json_object_set_new(c, "eos_token_id", p->cfg_eos2 >= 0 ? json_pack("[ii]", p->eos, p->cfg_eos2) : id_or_null(p->eos));
    json_object_set_new(c, "head_dim", json_integer(p->head_dim));
    json_object_set_new(c, "hidden_size", json_integer(p->hidden));
    json_object_set_new(c, "initializer_range", json_real(0.02));
    json_object_set_new(c, "intermediate_size", json_integer(p->intermediate));
    json_object_set_new(c, "layer_types", lt);
    json_object_set_new(c, "max_position_embeddings", json_integer(p->max_pos));
    json_object_set_new(c, "model_type", json_string(moe ? "qwen3_5_moe_text" : q35 ? "qwen3_5_text" : "gemma3_text"));
    if (moe) {
        json_object_set_new(c, "moe_intermediate_size", json_integer(p->moe_intermediate));
        json_object_set_new(c, "num_experts", json_integer(p->n_experts));
        json_object_set_new(c, "num_experts_per_tok", json_integer(p->experts_per_tok));
        json_object_set_new(c, "shared_expert_intermediate_size", json_integer(p->shared_intermediate));
    }
    json_object_set_new(c, "num_attention_heads", json_integer(p->n_heads));
    json_object_set_new(c, "num_hidden_layers", json_integer(L));
    json_object_set_new(c, "num_key_value_heads", json_integer(p->n_kv_heads));
    json_object_set_new(c, "pad_token_id", id_or_null(p->cfg_pad));
    json_object_set_new(c, "rms_norm_eps", json_real(p->rms_eps));
    json_object_set_new(c, "tie_word_embeddings", json_boolean(p->tie));
    json_object_set_new(c, "transformers_version", json_string(p->transformers_version));
    json_object_set_new(c, "use_cache", json_true());
    json_object_set_new(c, "vocab_size", json_integer(p->vocab));
    json_t *theta = p->rope_theta_int ? json_integer((json_int_t)p->rope_theta) : json_real(p->rope_theta);
    if (q35) {
        json_object_set_new(c, "attn_output_gate", json_true());
        json_object_set_new(c, "full_attention_interval", json_integer(p->full_interval));
        json_object_set_new(c, "hidden_act", json_string("silu"));
        json_object_set_new(c, "linear_conv_kernel_dim", json_integer(p->conv_kernel));
        json_object_set_new(c, "linear_key_head_dim", json_integer(p->lin_k_dim));
        json_object_set_new(c, "linear_num_key_heads", json_integer(p->lin_k_heads));
        json_object_set_new(c, "linear_num_value_heads", json_integer(p->lin_v_heads));
        json_object_set_new(c, "linear_value_head_dim", json_integer(p->lin_v_dim));
        json_object_set_new(c, "mamba_ssm_dtype", json_string("float32"));
        json_object_set_new(c, "mlp_only_layers", json_array());
        json_object_set_new(c, "partial_rotary_factor", json_real(p->partial_rotary));
        json_t *rp = json_object();
        if (p->vocab > 100000) { /* the real models' multimodal RoPE sections (text: plain RoPE) */
            json_object_set_new(rp, "mrope_interleaved", json_true());
            json_object_set_new(rp, "mrope_section", json_pack("[iii]", 11, 11, 10));
            json_object_set_new(c, "mtp_num_hidden_layers", json_integer(1));
            json_object_set_new(c, "mtp_use_dedicated_embeddings", json_false());
        }
        json_object_set_new(rp, "partial_rotary_factor", json_real(p->partial_rotary));
        json_object_set_new(rp, "rope_theta", theta);
        json_object_set_new(rp, "rope_type", json_string("default"));
        json_object_set_new(c, "rope_parameters", rp);
    } else {
        json_object_set_new(c, "_sliding_window_pattern", json_integer(p->sliding_pattern));
        json_object_set_new(c, "attn_logit_softcapping", json_null());
        json_object_set_new(c, "final_logit_softcapping", json_null());
        json_object_set_new(c, "hidden_activation", json_string("gelu_pytorch_tanh"));
        json_object_set_new(c, "query_pre_attn_scalar", json_integer(p->query_pre_attn_scalar));
        json_object_set_new(c, "rope_parameters",
                            json_pack("{s:{s:o,s:s},s:{s:f,s:s}}", "full_attention", "rope_theta", theta, "rope_type",
                                      "default", "sliding_attention", "rope_theta", p->rope_local_theta, "rope_type",
                                      "default"));
        json_object_set_new(c, "sliding_window", json_integer(p->sliding_window));
        json_object_set_new(c, "use_bidirectional_attention", json_false());
    }
    add_quant_keys(c, o);
    return dump(c, e);
}

char *synth_config_json(const synth_opts_t *o, err_t *e) {
    const synth_preset_t *p = o->preset;
    if (p->arch == SYNTH_QWEN3_5 || p->arch == SYNTH_GEMMA3) return config_json_v5(o, e);
    int L = o->layers ? o->layers : p->n_layers;
    int qwen = p->arch == SYNTH_QWEN3;
    json_t *c = json_object();
    json_object_set_new(c, "architectures", json_pack("[s]", qwen ? "Qwen3ForCausalLM" : "LlamaForCausalLM"));
    json_object_set_new(c, "attention_bias", json_false());
    json_object_set_new(c, "attention_dropout", json_real(0.0));
    json_object_set_new(c, "bos_token_id", json_integer(p->bos));
    json_object_set_new(c, "eos_token_id", json_integer(p->eos));
    json_object_set_new(c, "head_dim", json_integer(p->head_dim));
    json_object_set_new(c, "hidden_act", json_string("silu"));
    json_object_set_new(c, "hidden_size", json_integer(p->hidden));
    json_object_set_new(c, "initializer_range", json_real(0.02));
    json_object_set_new(c, "intermediate_size", json_integer(p->intermediate));
    json_object_set_new(c, "max_position_embeddings", json_integer(p->max_pos));
    json_object_set_new(c, "model_type", json_string(qwen ? "qwen3" : "llama"));
    json_object_set_new(c, "num_attention_heads", json_integer(p->n_heads));
    json_object_set_new(c, "num_hidden_layers", json_integer(L));
    json_object_set_new(c, "num_key_value_heads", json_integer(p->n_kv_heads));
    json_object_set_new(c, "rms_norm_eps", json_real(p->rms_eps));
    json_object_set_new(c, "rope_theta",
                        p->rope_theta_int ? json_integer((json_int_t)p->rope_theta) : json_real(p->rope_theta));
    if (p->rope_factor > 0)
        json_object_set_new(c, "rope_scaling",
                            json_pack("{s:f,s:f,s:f,s:i,s:s}", "factor", p->rope_factor, "high_freq_factor",
                                      p->rope_high, "low_freq_factor", p->rope_low,
                                      "original_max_position_embeddings", p->rope_orig_max, "rope_type",
                                      "llama3"));
    else
        json_object_set_new(c, "rope_scaling", json_null());
    json_object_set_new(c, "tie_word_embeddings", json_boolean(p->tie));
    json_object_set_new(c, "torch_dtype", json_string(torch_dtype(o)));
    json_object_set_new(c, "transformers_version", json_string(p->transformers_version));
    json_object_set_new(c, "use_cache", json_true());
    json_object_set_new(c, "vocab_size", json_integer(p->vocab));
    if (qwen) {
        json_object_set_new(c, "max_window_layers", json_integer(p->max_window_layers));
        json_object_set_new(c, "sliding_window", json_null());
        json_object_set_new(c, "use_sliding_window", json_false());
    } else {
        json_object_set_new(c, "pretraining_tp", json_integer(1));
        if (p->mlp_bias_key) json_object_set_new(c, "mlp_bias", json_false());
    }
    add_quant_keys(c, o);
    return dump(c, e);
}

char *synth_generation_config_json(const synth_opts_t *o, err_t *e) {
    const synth_preset_t *p = o->preset;
    json_t *c = json_object();
    if (p->gen_from_model_config) json_object_set_new(c, "_from_model_config", json_true());
    json_object_set_new(c, "bos_token_id", id_or_null(p->gen_bos ? p->gen_bos : p->bos));
    if (p->gen_cache_impl) json_object_set_new(c, "cache_implementation", json_string(p->gen_cache_impl));
    json_object_set_new(c, "eos_token_id", p->gen_eos2 >= 0 ? json_pack("[ii]", p->eos, p->gen_eos2)
                                                            : id_or_null(p->eos));
    if (p->gen_pad >= 0) json_object_set_new(c, "pad_token_id", json_integer(p->gen_pad));
    if (p->gen_do_sample) {
        json_object_set_new(c, "do_sample", json_true());
        if (p->gen_temperature > 0) json_object_set_new(c, "temperature", json_real(p->gen_temperature));
        json_object_set_new(c, "top_p", json_real(p->gen_top_p));
        if (p->gen_top_k) json_object_set_new(c, "top_k", json_integer(p->gen_top_k));
    }
    if (p->gen_max_length) json_object_set_new(c, "max_length", json_integer(p->gen_max_length));
    json_object_set_new(c, "transformers_version", json_string(p->gen_transformers_version));
    return dump(c, e);
}

static char *shard_name(const synth_plan_t *p, int s) {
    if (p->n_shards == 1) return strdup("model.safetensors");
    return str_printf("model-%05d-of-%05d.safetensors", s + 1, p->n_shards);
}

static char *index_json(const synth_plan_t *p, err_t *e) {
    json_t *root = json_object(), *wm = json_object();
    json_object_set_new(root, "metadata", json_pack("{s:I}", "total_size", (json_int_t)p->total_bytes));
    for (int i = 0; i < p->n; i++) {
        char *f = shard_name(p, p->t[i].shard);
        json_object_set_new(wm, p->t[i].name, json_string(f));
        free(f);
    }
    json_object_set_new(root, "weight_map", wm);
    return dump(root, e);
}

/* ---- fill ------------------------------------------------------------------------------ */

#define CHUNK (1u << 20)

static inline void put_le32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16); p[3] = (unsigned char)(v >> 24);
}

/* Row r of tensor t into out; returns the bytes written. The hot loop of `kiln synth`. */
static size_t fill_row(const synth_tensor_t *t, int bits, int gsize, int64_t r, unsigned char *out) {
    const int64_t cols = t->cols;
    const uint64_t base = (uint64_t)r * (uint64_t)cols;
    switch (t->fill) {
    case SYNTH_FILL_ONES:
        for (int64_t c = 0; c < cols; c++) store_from_f32(out, t->dtype, (size_t)c, 1.0f);
        return dtype_size(t->dtype) * (size_t)cols;
    case SYNTH_FILL_ZEROS: /* +0.0 is all-zero bits in f32, f16 and bf16 */
        memset(out, 0, dtype_size(t->dtype) * (size_t)cols);
        return dtype_size(t->dtype) * (size_t)cols;
    case SYNTH_FILL_AFFINE: /* small tensors: one element at a time, any length */
        for (int64_t c = 0; c < cols; c++) {
            uint32_t s0, s1;
            uint64_t i = base + (uint64_t)c;
            sums_at(t->tseed, i >> 1, &s0, &s1);
            float z = lut_f32[(i & 1) ? s1 : s0] / SYNTH_STD;
            store_from_f32(out, t->dtype, (size_t)c, t->offset + t->scale * z);
        }
        return dtype_size(t->dtype) * (size_t)cols;
    case SYNTH_FILL_NORMAL: {
        /* rows have an even length and start at an even index: whole draws only */
        const uint64_t k0 = base >> 1;
        uint32_t s0, s1;
        if (t->dtype == DT_F32) {
            float *o = (float *)out;
            for (int64_t c = 0; c < cols; c += 2) {
                sums_at(t->tseed, k0 + (uint64_t)(c >> 1), &s0, &s1);
                o[c] = lut_f32[s0];
                o[c + 1] = lut_f32[s1];
            }
        } else {
            const uint16_t *lut = t->dtype == DT_F16 ? lut_f16 : lut_bf16;
            uint16_t *o = (uint16_t *)out;
            for (int64_t c = 0; c < cols; c += 2) {
                sums_at(t->tseed, k0 + (uint64_t)(c >> 1), &s0, &s1);
                o[c] = lut[s0];
                o[c + 1] = lut[s1];
            }
        }
        return dtype_size(t->dtype) * (size_t)cols;
    }
    case SYNTH_FILL_QCODES: {
        const int qmax = (1 << bits) - 1;
        const int64_t ng = cols / gsize;
        uint64_t acc = 0;
        int nacc = 0;
        unsigned char *o = out;
        for (int64_t g = 0; g < ng; g++) {
            float s, b;
            group_params(t->tseed, (uint64_t)(r * ng + g), bits, &s, &b);
            const float inv = 1.0f / s;
            const uint64_t k0 = (base + (uint64_t)(g * gsize)) >> 1;
            for (int j = 0; j < gsize; j += 2) {
                uint32_t sv[2];
                sums_at(t->tseed, k0 + (uint64_t)(j >> 1), &sv[0], &sv[1]);
                for (int h = 0; h < 2; h++) {
                    /* truncation is floor here: below 0 only within (-1, 0), clamped to 0 anyway */
                    int q = (int)((lut_f32[sv[h]] - b) * inv + 0.5f);
                    q = q < 0 ? 0 : q > qmax ? qmax : q;
                    acc |= (uint64_t)q << nacc; /* little-endian bit stream: first code lowest */
                    nacc += bits;
                    if (nacc >= 32) {
                        put_le32(o, (uint32_t)acc);
                        o += 4;
                        acc >>= 32;
                        nacc -= 32;
                    }
                }
            }
        }
        return (size_t)(o - out); /* cols*bits is a multiple of 32: nothing left in acc */
    }
    case SYNTH_FILL_QSCALES:
    case SYNTH_FILL_QBIASES: {
        const int64_t ng = cols / gsize;
        uint16_t *o = (uint16_t *)out;
        for (int64_t g = 0; g < ng; g++) {
            float s, b;
            group_params(t->tseed, (uint64_t)(r * ng + g), bits, &s, &b);
            o[g] = f32_to_bf16(t->fill == SYNTH_FILL_QSCALES ? s : b);
        }
        return 2 * (size_t)ng;
    }
    }
    return 0;
}

typedef struct progress {
    const synth_opts_t *o;
    uint64_t done, total;
} progress_t;

static int write_tensor(stw_writer_t *w, const synth_tensor_t *t, const synth_opts_t *o, unsigned char *buf,
                        progress_t *pr, err_t *e) {
    const int gsize = o->group_size ? o->group_size : 64;
    const int64_t rows = t->rows;
    size_t fill = 0;
    for (int64_t r = 0; r < rows; r++) {
        fill += fill_row(t, o->bits, gsize, r, buf + fill);
        if (fill >= CHUNK || r == rows - 1) {
            if (stw_write(w, buf, fill, e)) return err_prefix(e, "tensor %s", t->name);
            pr->done += fill;
            fill = 0;
            if (o->progress) o->progress(o->progress_ctx, pr->done, pr->total);
            if (o->cancel && *o->cancel) return err_set(e, "interrupted");
        }
    }
    return 0;
}

/* ---- write ------------------------------------------------------------------------------ */

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *f) {
    (void)st; (void)flag; (void)f;
    return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

static void rm_tree(const char *path) { nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

static int fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* 0: absent, 1: an empty directory, 2: a directory with entries, -1: not a directory. */
static int dir_state(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) return -1;
    DIR *d = opendir(path);
    if (!d) return 2; /* unreadable: treat as non-empty, never replace it blindly */
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) { n = 1; break; }
    closedir(d);
    return n ? 2 : 1;
}

static int write_text(const char *dir, const char *name, const char *text, err_t *e) {
    char *path = str_printf("%s/%s", dir, name);
    int rc = path ? file_write_atomic(path, text, strlen(text), e) : err_set(e, "synth: out of memory");
    free(path);
    return rc;
}

static int write_shard(const char *dir, const synth_plan_t *p, int s, const synth_opts_t *o, unsigned char *buf,
                       progress_t *pr, err_t *e) {
    int n = 0, rc = -1;
    stw_tensor_t *st = malloc(sizeof *st * (size_t)p->n);
    const synth_tensor_t **src = malloc(sizeof *src * (size_t)p->n);
    char *name = shard_name(p, s), *path = name ? str_printf("%s/%s", dir, name) : NULL;
    stw_writer_t *w = NULL;
    if (!st || !src || !path) { err_set(e, "synth: out of memory"); goto out; }
    for (int i = 0; i < p->n; i++) {
        if (p->t[i].shard != s) continue;
        memset(&st[n], 0, sizeof st[n]);
        st[n].name = p->t[i].name;
        st[n].dtype = p->t[i].dtype;
        st[n].ndim = p->t[i].ndim;
        for (int d = 0; d < p->t[i].ndim; d++) st[n].shape[d] = p->t[i].shape[d];
        n++;
    }
    /* Inside a file, tensors go in the order safetensors' save_file uses. */
    stw_sort_canonical(st, n);
    for (int k = 0; k < n; k++)
        for (int i = 0; i < p->n; i++)
            if (p->t[i].name == st[k].name) { src[k] = &p->t[i]; break; }
    if (stw_open(&w, path, st, n, o->bits ? "mlx" : "pt", e)) goto out;
    for (int k = 0; k < n; k++)
        if (write_tensor(w, src[k], o, buf, pr, e)) { err_prefix(e, "%s", path); goto out; }
    rc = stw_finish(w, e);
    w = NULL;
out:
    stw_abort(w);
    free(st);
    free(src);
    free(name);
    free(path);
    return rc;
}

int synth_write(const synth_opts_t *o, err_t *e) {
    synth_plan_t p;
    char *out = NULL, *parent = NULL, *tmp = NULL, *old = NULL, *text = NULL;
    unsigned char *buf = NULL;
    int made_tmp = 0, moved_old = 0, rc = -1;
    if (synth_plan(o, &p, e)) return -1;
    pthread_once(&lut_once, lut_init);

    /* Where: strip trailing slashes, split into parent and base name. */
    out = strdup(o->out);
    if (!out) { err_set(e, "synth: out of memory"); goto done; }
    for (size_t l = strlen(out); l > 1 && out[l - 1] == '/'; l--) out[l - 1] = 0;
    char *slash = strrchr(out, '/');
    const char *base = slash ? slash + 1 : out;
    parent = slash ? (slash == out ? strdup("/") : strndup(out, (size_t)(slash - out))) : strdup(".");
    if (!parent) { err_set(e, "synth: out of memory"); goto done; }
    if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
        err_set(e, "--out must name a directory to create, got '%s'", o->out);
        goto done;
    }
    if (!dir_exists(parent)) {
        err_set(e, "--out %s: parent directory %s does not exist", o->out, parent);
        goto done;
    }
    int state = dir_state(out);
    if (state < 0) { err_set(e, "--out %s exists and is not a directory", o->out); goto done; }
    if (state == 2 && !o->force) {
        err_set(e, "--out %s exists and is not empty (pass --force to replace it)", o->out);
        goto done;
    }

    /* Enough room? Headers are a few KB per file; 1 MB of slack covers them. */
    struct statvfs vfs;
    if (statvfs(parent, &vfs) == 0 && vfs.f_blocks > 0) { /* pseudo file systems report 0 blocks */
        uint64_t avail = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
        if (avail < p.total_bytes + (1u << 20)) {
            err_set(e, "--out %s: needs %.1f MB but only %.1f MB are free there", o->out,
                    (p.total_bytes + (1u << 20)) / 1e6, avail / 1e6);
            goto done;
        }
    }

    tmp = str_printf("%s/.%s.synth-tmp.%d", parent, base, (int)getpid());
    old = str_printf("%s/.%s.synth-old.%d", parent, base, (int)getpid());
    uint64_t max_row = 0; /* a chunk may overshoot CHUNK by one row */
    for (int i = 0; i < p.n; i++) {
        uint64_t rb = p.t[i].rows > 0 ? p.t[i].bytes / (uint64_t)p.t[i].rows : 0;
        if (rb > max_row) max_row = rb;
    }
    buf = malloc(CHUNK + max_row);
    if (!tmp || !old || !buf) { err_set(e, "synth: out of memory"); goto done; }
    if (mkdir(tmp, 0755) != 0) {
        err_set(e, "--out %s: cannot create %s: %s", o->out, tmp, strerror(errno));
        goto done;
    }
    made_tmp = 1;

    if (!(text = synth_config_json(o, e)) || write_text(tmp, "config.json", text, e)) goto done;
    free(text);
    if (!(text = synth_generation_config_json(o, e)) || write_text(tmp, "generation_config.json", text, e))
        goto done;
    free(text);
    text = NULL;
    progress_t pr = {.o = o, .done = 0, .total = p.total_bytes};
    for (int s = 0; s < p.n_shards; s++)
        if (write_shard(tmp, &p, s, o, buf, &pr, e)) goto done;
    if (p.n_shards > 1) {
        if (!(text = index_json(&p, e)) || write_text(tmp, "model.safetensors.index.json", text, e)) goto done;
    }
    if (fsync_dir(tmp) != 0) { err_set(e, "%s: fsync: %s", tmp, strerror(errno)); goto done; }

    /* Into place. rename(2) replaces an empty directory; a full one is moved aside first. */
    state = dir_state(out);
    if (state == 2) {
        if (rename(out, old) != 0) {
            err_set(e, "--out %s: cannot move the old directory aside: %s", o->out, strerror(errno));
            goto done;
        }
        moved_old = 1;
    }
    if (rename(tmp, out) != 0) {
        err_set(e, "--out %s: rename from %s: %s", o->out, tmp, strerror(errno));
        if (moved_old && rename(old, out) == 0) moved_old = 0;
        goto done;
    }
    made_tmp = 0;
    fsync_dir(parent);
    if (moved_old) { rm_tree(old); moved_old = 0; }
    rc = 0;
done:
    if (made_tmp) rm_tree(tmp);
    free(text);
    free(buf);
    free(out);
    free(parent);
    free(tmp);
    free(old);
    synth_plan_free(&p);
    return rc;
}
