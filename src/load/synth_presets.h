/* synth_presets.h — random-weight checkpoints with the shapes of real models.
 *
 * A preset is the architecture block of a real config.json (Qwen/Qwen3-0.6B,
 * meta-llama/Llama-3.2-1B, ...). synth_write turns a preset into a model directory in the
 * Hugging Face on-disk layout: config.json, generation_config.json and model.safetensors
 * (or model-0000K-of-0000N.safetensors shards plus model.safetensors.index.json), with
 * tensor names, shapes and file order as transformers' save_pretrained writes them. The
 * quantized dtypes use MLX's affine layout as mlx-community conversions store it.
 *
 * Weights are a pure function of (seed, tensor name, element index): a counter-based
 * generator, so any element can be regenerated without the rest, a changed --layers does
 * not change the layers that remain, and a q4 checkpoint is (up to rounding) the
 * quantization of the bf16 checkpoint with the same seed. Everything streams: memory use
 * is a few MB whatever the model size.
 *
 * Four families: llama and qwen3 (dense attention), qwen3_5 (Qwen3.5 text: gated DeltaNet
 * layers with every full_interval-th layer gated full attention) and gemma3 (sliding-window
 * layers with every sliding_pattern-th layer global). Values that the forward pass depends
 * on beyond matrix scale are drawn in realistic ranges: A_log, dt_bias and the conv1d
 * kernels of DeltaNet layers as offset + scale * variate; (1 + w) norms are zeros, w norms
 * ones. The quantized qwen3_5 checkpoints take mlx_lm's layout ("language_model." names,
 * conv1d as [C, K, 1], the (1 + w) norms stored already shifted, i.e. ones).
 *
 * Error messages name the `kiln synth` flag that a bad option came from. */
#ifndef KILN_SYNTH_PRESETS_H
#define KILN_SYNTH_PRESETS_H

#include <signal.h>
#include <stdint.h>
#include "base/err.h"
#include "tensor/dtype.h"

typedef enum synth_arch { SYNTH_LLAMA, SYNTH_QWEN3, SYNTH_QWEN3_5, SYNTH_GEMMA3 } synth_arch_t;

typedef struct synth_preset {
    const char *name;      /* "qwen3-0.6b" */
    synth_arch_t arch;
    const char *hf_repo;   /* where the shapes come from: "Qwen/Qwen3-0.6B" */
    int hidden, intermediate, n_heads, n_kv_heads, head_dim, n_layers, vocab;
    int max_pos, max_window_layers; /* max_window_layers: qwen3 only */
    /* qwen3_5: every full_interval-th layer is full attention, the rest gated DeltaNet */
    int full_interval, lin_k_heads, lin_v_heads, lin_k_dim, lin_v_dim, conv_kernel;
    /* qwen3_5 MoE (n_experts > 0): every layer's MLP is a routed block with a shared expert */
    int n_experts, experts_per_tok, moe_intermediate, shared_intermediate;
    double partial_rotary;
    /* gemma3: every sliding_pattern-th layer is global, the rest see sliding_window tokens */
    int sliding_window, sliding_pattern, query_pre_attn_scalar;
    double rope_local_theta;
    double rms_eps, rope_theta;
    int rope_theta_int;    /* written as an integer (Qwen3 writes 1000000, Llama 500000.0) */
    int tie;               /* tie_word_embeddings: no lm_head.weight tensor */
    int bos, eos;          /* -1: null in config.json */
    int cfg_eos2, cfg_pad; /* second config eos id (a list) / config pad id; -1 when absent */
    /* rope_scaling {"rope_type": "llama3", ...} when factor > 0, else null */
    double rope_factor, rope_low, rope_high;
    int rope_orig_max;
    int mlp_bias_key;      /* Llama 3.1+ configs carry "mlp_bias": false */
    const char *transformers_version;
    /* generation_config.json */
    int gen_eos2, gen_pad; /* second eos id / pad id, -1 when absent */
    int gen_bos;           /* 0: same as bos */
    const char *gen_cache_impl; /* "cache_implementation" or NULL */
    int gen_do_sample, gen_top_k, gen_max_length, gen_from_model_config;
    double gen_temperature, gen_top_p;
    const char *gen_transformers_version;
} synth_preset_t;

int synth_preset_count(void);
const synth_preset_t *synth_preset_at(int i);
/* Finds a preset by name. "tiny" needs arch (the tiny preset of that family); other
 * names ignore arch. NULL when unknown. */
const synth_preset_t *synth_preset_find(const char *name, const char *arch);
const char *synth_arch_name(synth_arch_t a); /* "llama", "qwen3", "qwen3_5", "gemma3" */
int synth_arch_parse(const char *s, synth_arch_t *out);

typedef struct synth_opts {
    const synth_preset_t *preset;
    dtype_t dtype;         /* DT_BF16, DT_F16 or DT_F32 when bits == 0 */
    int bits;              /* 0: unquantized; 2, 3, 4, 5, 6, 8: MLX affine */
    int group_size;        /* 32, 64, 128 (quantized only; 0 means 64) */
    uint64_t seed;
    int layers;            /* 0: the preset's num_hidden_layers */
    double shard_bytes;    /* 0: 5e9, as save_pretrained's max_shard_size="5GB" */
    const char *out;       /* the model directory to create */
    int force;             /* replace an existing non-empty out */
    /* Called now and then with data bytes written so far / in all; may be NULL. */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
    /* When *cancel becomes non-zero, synth_write stops, cleans up and fails. */
    volatile sig_atomic_t *cancel;
} synth_opts_t;

/* One tensor of the checkpoint and how its bytes are made. */
typedef enum synth_fill {
    SYNTH_FILL_NORMAL,     /* std SYNTH_STD, stored in the float dtype */
    SYNTH_FILL_ONES,       /* RMSNorm weights used as w */
    SYNTH_FILL_ZEROS,      /* RMSNorm weights used as (1 + w): Gemma, Qwen3.5 (HF layout) */
    SYNTH_FILL_AFFINE,     /* offset + scale * z, z the generator's variate at std 1:
                              A_log, dt_bias, conv1d kernels */
    SYNTH_FILL_QCODES,     /* U32 words of packed bits-wide codes */
    SYNTH_FILL_QSCALES,    /* bf16 per-group scales */
    SYNTH_FILL_QBIASES,    /* bf16 per-group biases */
} synth_fill_t;

typedef struct synth_tensor {
    char name[96];
    dtype_t dtype;
    int ndim;
    int64_t shape[3];      /* as stored (ndim 1..3) */
    int64_t rows, cols;    /* the logical [out, in] weight matrix */
    synth_fill_t fill;
    float offset, scale;   /* SYNTH_FILL_AFFINE */
    uint64_t tseed;        /* synth_tensor_seed(seed, name of the .weight) */
    uint64_t bytes;
    int shard;             /* 0-based file index */
} synth_tensor_t;

typedef struct synth_plan {
    synth_tensor_t *t;     /* in the model's parameter order (state_dict order) */
    int n;
    int n_shards;
    uint64_t total_bytes;  /* data bytes over all files (index.json's total_size) */
    uint64_t n_params;     /* logical parameters (quantized matrices count rows*cols) */
    int layers;
} synth_plan_t;

#define SYNTH_STD 0.02f

/* Checks the options (flag values, shapes divisible by the group size, ...). */
int synth_check(const synth_opts_t *o, err_t *e);
/* Lists the tensors, their shapes, bytes and shard assignment. Does not touch the disk. */
int synth_plan(const synth_opts_t *o, synth_plan_t *p, err_t *e);
void synth_plan_free(synth_plan_t *p);
/* Writes the model directory atomically: everything goes into a hidden temporary folder
 * next to o->out, which is renamed into place at the end; on failure it is removed and
 * o->out is left as it was. */
int synth_write(const synth_opts_t *o, err_t *e);
/* config.json / generation_config.json text for these options (malloc'd). */
char *synth_config_json(const synth_opts_t *o, err_t *e);
char *synth_generation_config_json(const synth_opts_t *o, err_t *e);

/* The generator, exposed so tests can regenerate any element. */
uint64_t synth_tensor_seed(uint64_t seed, const char *weight_name);
/* Element i (row-major) of the weight with this tensor seed, before storage rounding:
 * SYNTH_STD times a bell-shaped variate (sum of four uniform bytes, |w| <= 3.451 * SYNTH_STD). */
float synth_weight(uint64_t tseed, uint64_t i);
/* Element i of a SYNTH_FILL_AFFINE tensor before storage rounding:
 * offset + scale * synth_weight(tseed, i) / SYNTH_STD. */
float synth_affine(uint64_t tseed, uint64_t i, float offset, float scale);
/* Scale and bias (already rounded to bf16) of group g (row-major over [rows, cols/G])
 * of a quantized weight. Every weight of the group lies within [bias, bias + scale*qmax]. */
void synth_group_params(uint64_t tseed, uint64_t g, int bits, float *scale, float *bias);

#endif
